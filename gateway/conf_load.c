/* Reading a gateway configuration file (conf.h, gw_config_load_file):
 * inih reads the lines through this file's reader, which counts them,
 * refuses a line longer than inih's buffer or holding a NUL byte at its own
 * number, and sees each section header; every key goes through the option
 * table's gw_config_set (conf.c). The first error names its line, with
 * control bytes and bytes that are no UTF-8 escaped; a file with any error
 * changes nothing the caller keeps. What no single option can check
 * (groups that exist, tokens shared, webhooks' secrets) is checked once
 * the whole file is read. */
#include "conf.h"
#include "conf_int.h"

#include "sl_err.h"
#include "sl_json.h"
#include "sl_opt.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What the file has set so far, for duplicates and for messages that name
 * the line of a value: a section (key[0] == 0) or a key of one. */
struct seen {
  char section[80];
  char key[GW_NAME_MAX];
  int line;
};
#define SEEN_MAX 4096           /* more than every valid option of a full config */

struct parse_ctx {
  struct gw_config *c;
  FILE *f;
  const char *path;
  int line;
  int first_err_line;
  char *err;
  size_t err_size;
  char prev_key[INI_MAX_LINE];  /* inih's: the key an indented line would continue */
  bool cont;                    /* the line read is such a continuation */
  struct seen *seen;
  size_t n_seen;
};

/* in into out with control bytes (C1 ones, U+0080 to U+009F, included,
 * which some terminals obey) and bytes that are no UTF-8 as \xNN, so that
 * an error quoting a binary file prints no control sequences. */
static void escape(const char *in, char *out, size_t size) {
  size_t used = 0, len = strlen(in);
  for (const unsigned char *s = (const unsigned char *)in; *s && used + 5 < size;) {
    size_t n = *s < 0x20 || *s == 0x7f || (s[0] == 0xC2 && s[1] < 0xA0) ? 0
               : sl_utf8_char((const char *)s, len - (size_t)((const char *)s - in));
    if (n) {
      memcpy(out + used, s, n);
      used += n;
      s += n;
    } else {
      used += (size_t)snprintf(out + used, size - used, "\\x%02x", *s++);
    }
  }
  out[used] = 0;
}

/* Records the file's first error, at line (0: the whole file); SL_ECONFIG. */
static int error_at(struct parse_ctx *p, int line, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));
static int error_at(struct parse_ctx *p, int line, const char *fmt, ...) {
  if (p->first_err_line)
    return SL_ECONFIG;
  p->first_err_line = line > 0 ? line : -1;
  char raw[512], msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(raw, sizeof raw, fmt, ap);
  va_end(ap);
  escape(raw, msg, sizeof msg);
  if (line > 0)
    sl_err_say(p->err, p->err_size, 0, "%s:%d: %s", p->path, line, msg);
  else
    sl_err_say(p->err, p->err_size, 0, "%s: %s", p->path, msg);
  return SL_ECONFIG;
}

static void parse_error(struct parse_ctx *p, const char *msg) {
  error_at(p, p->line, "%s", msg);
}

/* The entry for section (and key, or "" for the section itself), or NULL. */
static const struct seen *find_seen(const struct parse_ctx *p, const char *section,
                                    const char *key) {
  for (size_t i = 0; i < p->n_seen; i++)
    if (!strcmp(p->seen[i].key, key) && !strcmp(p->seen[i].section, section))
      return &p->seen[i];
  return NULL;
}

static void add_seen(struct parse_ctx *p, const char *section, const char *key) {
  if (strlen(section) >= sizeof p->seen->section || strlen(key) >= sizeof p->seen->key)
    return; /* longer than any valid name: refused already */
  if (p->n_seen % 256 == 0) {
    struct seen *more = p->n_seen < SEEN_MAX
                            ? realloc(p->seen, (p->n_seen + 256) * sizeof *more) : NULL;
    if (!more) {
      parse_error(p, p->n_seen < SEEN_MAX ? "out of memory"
                                          : "more sections and options than any gateway has");
      return;
    }
    p->seen = more;
  }
  struct seen *e = &p->seen[p->n_seen++];
  snprintf(e->section, sizeof e->section, "%s", section);
  snprintf(e->key, sizeof e->key, "%s", key);
  e->line = p->line;
}

static int seen_line(const struct parse_ctx *p, const char *section, const char *key) {
  const struct seen *e = find_seen(p, section, key);
  return e ? e->line : 0;
}

/* A section header: checked (an unknown or refused one is an error), named
 * once, and an empty [provider.NAME], [group.NAME] or [hub] still takes
 * effect: the provider is enabled with its defaults, the group exists, the
 * hub of the environment is used. */
static void on_section(struct parse_ctx *p, const char *s) {
  char sec[160];
  const char *e = strchr(s, ']');
  if (!e || (size_t)(e - s - 1) >= sizeof sec) {
    parse_error(p, "malformed section header");
    return;
  }
  memcpy(sec, s + 1, (size_t)(e - s - 1));
  sec[e - s - 1] = 0;
  /* After the header only blanks, or a comment as after a value: a ';'
   * after a blank. inih drops whatever follows the ']', so anything else
   * would be read as nothing. */
  const char *rest = e + 1 + strspn(e + 1, " \t");
  if (!(*rest == ';' && rest > e + 1) && rest[strspn(rest, " \t\r\n")]) {
    char junk[64];
    int n = (int)strcspn(rest, "\n");
    while (n > 0 && isspace((unsigned char)rest[n - 1]))
      n--;
    snprintf(junk, sizeof junk, "%.*s", n, rest);
    error_at(p, p->line, "malformed section header: \"%s\" after [%s] (a comment there"
             " starts with a blank and ';')", junk, sec);
    return;
  }
  p->prev_key[0] = 0;
  char msg[512];
  const char *entry;
  const char *tmpl = gw_conf_section_template(sec, &entry);
  const struct seen *first = find_seen(p, sec, "");
  if (gw_conf_check_section(sec, msg, sizeof msg) < 0)
    parse_error(p, msg);
  else if (first)
    error_at(p, p->line, "duplicate section [%s] (first on line %d); merge the two", sec,
             first->line);
  else if (!strcmp(tmpl, "provider.*") &&
           !gw_conf_enable_provider(p->c, entry, msg, sizeof msg))
    parse_error(p, msg);
  else if (!strcmp(tmpl, "group.*") && !gw_conf_add_entry(p->c, tmpl, entry, msg, sizeof msg))
    parse_error(p, msg);
  else if (!strcmp(tmpl, "webhook.*") && !gw_conf_add_entry(p->c, tmpl, entry, msg, sizeof msg))
    parse_error(p, msg);
  else
    add_seen(p, sec, ""), p->c->hub |= !strcmp(sec, "hub"); /* an empty [hub]: the environment's hub */
}

/* inih's lines, read here: counted, refused with their own number when longer
 * than inih's line buffer or holding a NUL byte; also sees what inih does not
 * tell the handler: each section header, and whether an indented line
 * continues the value before it (inih's multi-line values, which no option
 * takes). */
static char *reader(char *str, int num, void *stream) {
  struct parse_ctx *p = stream;
  p->cont = false;
  if (p->first_err_line)
    return NULL; /* the first error ends the reading */
  int n = 0, ch = 0;
  bool nul = false;
  while (n < num - 1 && (ch = getc(p->f)) != EOF) {
    nul |= ch == 0;
    str[n++] = (char)ch;
    if (ch == '\n')
      break;
  }
  str[n] = 0;
  if (!n)
    return NULL;
  p->line++;
  if (ch != '\n' && ch != EOF && (ch = getc(p->f)) != EOF && ch != '\n') { /* over inih's buffer */
    error_at(p, p->line, "line longer than %d bytes (the INI reader's limit; a webhook's long"
             " secret goes in its secret_file)", num - 1);
    return NULL;
  }
  if (nul) {
    parse_error(p, "a NUL byte (is this a text file?)");
    return NULL;
  }
  const char *s = str;
  if (p->line == 1 && !strncmp(s, "\xEF\xBB\xBF", 3))
    s += 3; /* a byte order mark, which inih skips too */
  const char *start = s;
  while (isspace((unsigned char)*s))
    s++;
  p->cont = p->prev_key[0] && *s && !strchr(";#", *s) && s > start;
  if (*s == '[' && !p->cont)
    on_section(p, s);
  return str;
}

/* The line of instance_types in [user.NAME] or [group.NAME], for the check
 * against the providers' types at start. */
static void note_line(struct parse_ctx *p, const char *section, const char *name) {
  const char *entry;
  const char *tmpl = gw_conf_section_template(section, &entry);
  if (strcmp(name, "instance_types"))
    return;
  if (!strcmp(tmpl, "user.*")) {
    for (size_t i = 0; i < p->c->n_users; i++)
      if (!strcmp(p->c->users[i].name, entry))
        p->c->users[i].instance_types_line = p->line;
  } else if (!strcmp(tmpl, "group.*")) {
    for (size_t i = 0; i < p->c->n_groups; i++)
      if (!strcmp(p->c->groups[i].name, entry))
        p->c->groups[i].instance_types_line = p->line;
  }
}

static int handler(void *user, const char *section, const char *name, const char *value) {
  struct parse_ctx *p = user;
  char msg[512];
  if (p->cont) {
    error_at(p, p->line, "an indented line continues the value of \"%s\"; each option takes"
             " one line (remove the indent)", name);
    return 1;
  }
  snprintf(p->prev_key, sizeof p->prev_key, "%s", name);
  if (!section[0]) {
    snprintf(msg, sizeof msg, "key \"%s\" outside any section", name);
    parse_error(p, msg);
    return 1;
  }
  if (gw_conf_check_section(section, NULL, 0) < 0)
    return 1; /* reported by the reader at the header */
  const struct seen *first = find_seen(p, section, name);
  if (first && *name) {
    error_at(p, p->line, "duplicate key \"%s\" in [%s] (first set on line %d)", name, section,
             first->line);
    return 1;
  }
  if (gw_config_set(p->c, section, name, value, msg, sizeof msg) < 0)
    parse_error(p, msg);
  else {
    add_seen(p, section, name);
    note_line(p, section, name);
  }
  return 1;
}

static void format_dur(int64_t us, char *buf, size_t size) {
  const struct sl_opt d = {.type = SL_OPT_DUR, .size = sizeof us};
  sl_opt_format(&d, &us, buf, size);
}

/* What no single option can check: every user's group exists, no two users
 * share a token, and the idle warning comes within each notebook timeout
 * (the gateway's and each group's). Errors name the line of the value. */
static int check_whole(struct parse_ctx *p) {
  const struct gw_config *c = p->c;
  char sec[96], other[96];
  for (size_t i = 0; i < c->n_users; i++) {
    const struct gw_user_cfg *u = &c->users[i];
    snprintf(sec, sizeof sec, "user.%s", u->name);
    size_t g = 0;
    while (u->group[0] && g < c->n_groups && strcmp(c->groups[g].name, u->group))
      g++;
    if (u->group[0] && g == c->n_groups)
      return error_at(p, seen_line(p, sec, "group"),
                      "[%s] group = %s: there is no [group.%s] section", sec, u->group,
                      u->group);
    for (size_t j = 0; u->token_sha256[0] && j < i; j++)
      if (!strcmp(c->users[j].token_sha256, u->token_sha256)) {
        snprintf(other, sizeof other, "user.%s", c->users[j].name);
        return error_at(p, seen_line(p, sec, "token_sha256"),
                        "[%s] has the same token_sha256 as [%s]; each user needs a token of"
                        " their own", sec, other);
      }
  }
  char warn[32], nb[32];
  format_dur(c->warn_before_us, warn, sizeof warn);
  int warn_line = seen_line(p, "idle", "warn_before");
  const char *warn_from = warn_line ? "" : ", the default";
  if (c->warn_before_us > c->notebook_timeout_us) {
    format_dur(c->notebook_timeout_us, nb, sizeof nb);
    return error_at(p, warn_line ? warn_line : seen_line(p, "idle", "notebook_timeout"),
                    "[idle] warn_before (%s%s) is longer than notebook_timeout (%s): the"
                    " warning would come before the session is idle", warn, warn_from, nb);
  }
  for (size_t i = 0; i < c->n_groups; i++) {
    const struct gw_group_cfg *g = &c->groups[i];
    if (g->notebook_timeout_us < 0 || c->warn_before_us <= g->notebook_timeout_us)
      continue;
    snprintf(sec, sizeof sec, "group.%s", g->name);
    format_dur(g->notebook_timeout_us, nb, sizeof nb);
    return error_at(p, seen_line(p, sec, "notebook_timeout"),
                    "[%s] notebook_timeout (%s) is shorter than [idle] warn_before (%s%s): the"
                    " warning would come before the session is idle", sec, nb, warn, warn_from);
  }
  return 0;
}

/* Reads a webhook's secret_file (relative to the config file's folder)
 * into w->secret, less one final newline. */
static int read_secret(struct parse_ctx *p, struct gw_webhook_cfg *w, int line) {
  char path[2048];
  const char *slash = strrchr(p->path, '/');
  if (w->secret_file[0] == '/' || !slash)
    snprintf(path, sizeof path, "%s", w->secret_file);
  else
    snprintf(path, sizeof path, "%.*s/%s", (int)(slash - p->path), p->path, w->secret_file);
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0) {
    int e = errno;
    if (fd >= 0)
      close(fd);
    return error_at(p, line, "[webhook.%s] secret_file %s: %s", w->name, path, strerror(e));
  }
  ssize_t n = S_ISREG(st.st_mode) ? read(fd, w->secret, sizeof w->secret) : -1;
  close(fd);
  if (n < 0 || (size_t)n == sizeof w->secret || (n > 0 && memchr(w->secret, 0, (size_t)n))) {
    memset(w->secret, 0, sizeof w->secret);
    return error_at(p, line, "[webhook.%s] secret_file %s: not a text file of at most %zu bytes",
                    w->name, path, sizeof w->secret - 1);
  }
  w->secret[n] = 0;
  if (n && w->secret[n - 1] == '\n')
    w->secret[--n] = 0;
  if (n && w->secret[n - 1] == '\r')
    w->secret[--n] = 0;
  if (!n)
    return error_at(p, line, "[webhook.%s] secret_file %s is empty", w->name, path);
  return 0;
}

/* Every webhook has a URL, events and exactly one of secret and
 * secret_file, which is read here. Errors name the section's line or the
 * value's. */
static int check_webhooks(struct parse_ctx *p) {
  char sec[96];
  for (size_t i = 0; i < p->c->n_webhooks; i++) {
    struct gw_webhook_cfg *w = &p->c->webhooks[i];
    snprintf(sec, sizeof sec, "webhook.%s", w->name);
    int line = seen_line(p, sec, "");
    if (!w->url[0])
      return error_at(p, line, "[%s] has no url", sec);
    if (!w->event_mask)
      return error_at(p, line, "[%s] has no events (job.succeeded, job.failed, ...)", sec);
    if (w->secret[0] && w->secret_file[0])
      return error_at(p, seen_line(p, sec, "secret_file"),
                      "[%s] has both secret and secret_file; keep one", sec);
    if (!w->secret[0] && !w->secret_file[0])
      return error_at(p, line, "[%s] has no secret (or secret_file): posts are always signed", sec);
    if (w->secret_file[0] && read_secret(p, w, seen_line(p, sec, "secret_file")) < 0)
      return SL_ECONFIG;
  }
  return 0;
}

/* A config path must be a regular file: a folder reads as empty and a FIFO
 * blocks, and either would leave the gateway on its defaults. Opened without
 * blocking, checked, then read normally. */
static FILE *open_config(const char *path, char *err, size_t err_size, int *ret_err) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0) {
    *ret_err = -errno;
    sl_err_say(err, err_size, 0, "%s: %s", path, strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    *ret_err = SL_ECONFIG;
    sl_err_say(err, err_size, 0, "%s: %s, not a config file (expected an INI file)", path,
               S_ISDIR(st.st_mode)                          ? "a folder"
               : S_ISFIFO(st.st_mode)                       ? "a FIFO"
               : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                                                            : "not a regular file");
  } else {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "r");
    if (f)
      return f;
    *ret_err = -errno;
    sl_err_say(err, err_size, 0, "%s: %s", path, strerror(errno));
  }
  if (fd >= 0)
    close(fd);
  return NULL;
}

int gw_config_load_file(struct gw_config *c, const char *path, char *err, size_t err_size) {
  struct parse_ctx p = {.c = c, .path = path, .err = err, .err_size = err_size};
  int r = 0;
  if (!(p.f = open_config(path, err, err_size, &r)))
    return r;
  snprintf(c->file, sizeof c->file, "%s", path);
  r = ini_parse_stream(reader, &p, handler, &p);
  if (ferror(p.f))
    error_at(&p, 0, "read error: %s", strerror(errno));
  fclose(p.f);
  if (!p.first_err_line && r != 0) {
    p.line = r > 0 ? r : p.line;
    parse_error(&p, "syntax error (expected [section] or key = value)");
  }
  if (!p.first_err_line)
    check_whole(&p);
  if (!p.first_err_line)
    check_webhooks(&p);
  free(p.seen);
  return p.first_err_line ? SL_ECONFIG : 0;
}
