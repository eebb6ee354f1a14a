/* Persisted execution history.
 *
 * File: <dir>/<notebook>.jsonl, one {"session":S,"line":L,"input":"..."} per
 * line, appended as cells run. Sessions are numbered per notebook: a kernel
 * takes one more than the highest number in the file. The whole history is
 * kept in memory up to a bound (the newest 7,500 to 10,000 entries); the
 * oldest are forgotten past it. */
#include "history.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"

#define MAX_ENTRIES 10000
#define MAX_INPUT_BYTES (256 * 1024)

struct entry {
  int64_t session, line;
  char *input;
};

struct jk_history {
  char *dir;
  char *path;
  struct entry *e;
  size_t n, cap;
  int64_t session;
  int fd; /* path opened for appending once a cell is added, else -1 */
};

static void close_file(struct jk_history *h) {
  if (h->fd >= 0)
    close(h->fd);
  h->fd = -1;
}

static void clear_entries(struct jk_history *h) {
  for (size_t i = 0; i < h->n; i++)
    free(h->e[i].input);
  h->n = 0;
}

struct jk_history *jk_history_free(struct jk_history *h) {
  if (!h)
    return NULL;
  clear_entries(h);
  close_file(h);
  free(h->e);
  free(h->dir);
  free(h->path);
  free(h);
  return NULL;
}

/* At the bound, the oldest quarter goes at once: a long file loads in
 * time linear in its length, not in its length times the bound. */
static int push(struct jk_history *h, int64_t session, int64_t line, const char *input) {
  if (h->n == MAX_ENTRIES) {
    size_t drop = MAX_ENTRIES / 4;
    for (size_t i = 0; i < drop; i++)
      free(h->e[i].input);
    memmove(h->e, h->e + drop, (h->n - drop) * sizeof *h->e);
    h->n -= drop;
  }
  if (h->n == h->cap) {
    size_t cap = h->cap ? h->cap * 2 : 64;
    struct entry *e = realloc(h->e, cap * sizeof *e);
    if (!e)
      return -ENOMEM;
    h->e = e;
    h->cap = cap;
  }
  char *copy = strdup(input);
  if (!copy)
    return -ENOMEM;
  h->e[h->n++] = (struct entry){session, line, copy};
  return 0;
}

static void load(struct jk_history *h) {
  FILE *f = fopen(h->path, "r");
  if (!f)
    return;
  char *buf = NULL;
  size_t cap = 0;
  ssize_t len;
  size_t bad = 0;
  int64_t max_session = 0;
  while ((len = getline(&buf, &cap, f)) > 0) {
    json_t *v = NULL;
    if (len > MAX_INPUT_BYTES * 2 || sl_json_parse(buf, (size_t)len, 4, &v, NULL, 0) < 0) {
      bad++;
      continue;
    }
    const char *input = sl_json_get_str(v, "input", NULL);
    int64_t s = sl_json_get_int(v, "session", -1), l = sl_json_get_int(v, "line", -1);
    if (input && s > 0 && l > 0) {
      push(h, s, l, input);
      if (s > max_session)
        max_session = s;
    } else {
      bad++;
    }
    json_decref(v);
  }
  if (ferror(f))
    sl_warn("kernel.history", "%s: read error: history read in part", h->path);
  free(buf);
  fclose(f);
  if (bad)
    sl_warn("kernel.history", "%s: skipped %zu unreadable lines", h->path, bad);
  /* the next session; numbers that reached the end (only damage takes them
   * there) leave every later kernel the last one, under which what it adds
   * still reads back */
  h->session = max_session < INT64_MAX ? max_session + 1 : INT64_MAX;
}

/* The file of notebook's history in dir (owned), or NULL. */
static char *file_of(const char *dir, const char *notebook) {
  char name[200], *path = NULL;
  size_t k = 0;
  for (const char *p = notebook; *p && k < sizeof name - 1; p++)
    name[k++] = (strchr("/\\:*?\"<>| ", *p) || (unsigned char)*p < 32) ? '_' : *p;
  name[k] = '\0';
  return asprintf(&path, "%s/%s.jsonl", dir, k ? name : "default") < 0 ? NULL : path;
}

int jk_history_switch(struct jk_history *h, const char *notebook) {
  clear_entries(h);
  close_file(h);
  free(h->path);
  h->path = NULL;
  h->session = 1;
  if (!h->dir)
    return 0;
  if (!(h->path = file_of(h->dir, notebook)))
    return -ENOMEM;
  load(h);
  return 0;
}

int jk_history_rename(struct jk_history *h, const char *from, const char *to) {
  if (!h->dir)
    return 0;
  char *was = file_of(h->dir, from), *now = file_of(h->dir, to);
  if (!was || !now) {
    free(was);
    free(now);
    return -ENOMEM;
  }
  close_file(h);
  if (strcmp(was, now) && access(now, F_OK) != 0 && rename(was, now) < 0 && errno != ENOENT)
    sl_warn("kernel.history", "cannot move %s to %s: %s", was, now, strerror(errno));
  free(was);
  free(h->path);
  h->path = now;
  if (h->n == 0)
    load(h);
  return 0;
}

struct jk_history *jk_history_open(const char *dir, const char *notebook) {
  struct jk_history *h = calloc(1, sizeof *h);
  if (!h)
    return NULL;
  h->session = 1;
  h->fd = -1;
  if (dir) {
    h->dir = strdup(dir);
    if (!h->dir)
      return jk_history_free(h);
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
      sl_warn("kernel.history", "cannot create %s: %s; history kept in memory", dir, strerror(errno));
  }
  jk_history_switch(h, notebook ? notebook : "default");
  return h;
}

int64_t jk_history_session(const struct jk_history *h) { return h->session; }

/* Opens path for appending. A last line cut short (a crash or a full disk
 * mid-write) is ended first, so the next line is not joined to it. */
static int open_append(struct jk_history *h) {
  h->fd = open(h->path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (h->fd < 0)
    return -errno;
  struct stat st;
  char last = '\n';
  if (fstat(h->fd, &st) == 0 && st.st_size > 0 && pread(h->fd, &last, 1, st.st_size - 1) != 1)
    last = '\n'; /* unreadable: appended to as it is */
  if (last != '\n' && write(h->fd, "\n", 1) != 1) {
    close_file(h);
    return -EIO;
  }
  return 0;
}

int jk_history_add(struct jk_history *h, int64_t line, const char *input) {
  if (strlen(input) > MAX_INPUT_BYTES)
    return SL_ELIMIT;
  int r = push(h, h->session, line, input);
  if (r < 0 || !h->path)
    return r;
  json_t *v = json_pack("{s:I, s:I, s:s}", "session", (json_int_t)h->session, "line",
                        (json_int_t)line, "input", input);
  size_t n = 0;
  char *s = v ? sl_json_dump(v, &n) : NULL;
  json_decref(v);
  char *text = s ? realloc(s, n + 1) : NULL;
  if (!text) {
    free(s);
    return -ENOMEM;
  }
  text[n++] = '\n';
  /* kept open between cells: a cell's reply should not wait on opening a
   * file; O_APPEND keeps each line whole beside another kernel's */
  if (h->fd < 0)
    r = open_append(h);
  if (r == 0) {
    ssize_t w = write(h->fd, text, n);
    if (w != (ssize_t)n) {
      r = w < 0 ? -errno : -EIO; /* a short write sets no errno */
      close_file(h);             /* opened again for the next cell */
    }
  }
  free(text);
  return r;
}

static json_t *item(const struct entry *e, bool output) {
  if (output)
    return json_pack("[I, I, [s, n]]", (json_int_t)e->session, (json_int_t)e->line, e->input);
  return json_pack("[I, I, s]", (json_int_t)e->session, (json_int_t)e->line, e->input);
}

json_t *jk_history_query(const struct jk_history *h, const json_t *req) {
  json_t *out = json_array();
  const char *type = sl_json_get_str(req, "hist_access_type", "tail");
  bool output = sl_json_get_bool(req, "output", false);
  int64_t n = sl_json_get_int(req, "n", 10);
  if (n < 0)
    n = 0;
  if (strcmp(type, "tail") == 0) {
    size_t from = h->n > (size_t)n ? h->n - (size_t)n : 0;
    for (size_t i = from; i < h->n; i++)
      json_array_append_new(out, item(&h->e[i], output));
  } else if (strcmp(type, "range") == 0) {
    int64_t session = sl_json_get_int(req, "session", 0);
    if (session <= 0)
      session += h->session;
    int64_t start = sl_json_get_int(req, "start", 0);
    int64_t stop = sl_json_get_int(req, "stop", INT64_MAX);
    if (stop <= 0)
      stop = INT64_MAX;
    for (size_t i = 0; i < h->n; i++)
      if (h->e[i].session == session && h->e[i].line >= start && h->e[i].line < stop)
        json_array_append_new(out, item(&h->e[i], output));
  } else if (strcmp(type, "search") == 0) {
    const char *pattern = sl_json_get_str(req, "pattern", "*");
    bool unique = sl_json_get_bool(req, "unique", false);
    /* Newest first while collecting, so n keeps the latest matches. */
    json_t *rev = json_array();
    for (size_t i = h->n; i-- > 0 && (int64_t)json_array_size(rev) < n;) {
      if (fnmatch(pattern, h->e[i].input, 0) != 0)
        continue;
      bool dup = false;
      for (size_t j = 0; unique && !dup && j < json_array_size(rev); j++) {
        json_t *it = json_array_get(rev, j);
        json_t *in = json_array_get(it, 2);
        if (json_is_array(in))
          in = json_array_get(in, 0);
        dup = strcmp(json_string_value(in), h->e[i].input) == 0;
      }
      if (!dup)
        json_array_append_new(rev, item(&h->e[i], output));
    }
    for (size_t j = json_array_size(rev); j-- > 0;)
      json_array_append(out, json_array_get(rev, j));
    json_decref(rev);
  }
  return out;
}
