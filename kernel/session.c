/* Notebook session state in the gateway (protocols.md §1 "session state").
 *
 * Variables and model/data definitions live in the gateway so they survive a
 * kernel restart. The kernel records the names a cell changed (dirty) and,
 * when the cell ends, sends one session.set holding only those: their
 * current values, or a delete for names that no longer exist. Names in a
 * session.set that fails go back to dirty, so the next flush resends them
 * with whatever value they hold then. The load at start (session.get) never
 * overwrites a name this kernel changed meanwhile. Flushing never starts a
 * gateway, and the load at start does so only when asked (a named notebook
 * of a user whose own gateway kept state before, which has stopped since):
 * a notebook of plain variables works without one. While the gateway is known to be down, a cell's changes are
 * only kept: the end of a cell tries to reach it again at most once per
 * RETRY_US, so cells cost nothing extra without a gateway, and a gateway that
 * comes up later still gets every change (also at once when anything else
 * connects: the interpreter flushes when the connection becomes ready).
 * The session observes the state, so every set or drop of a name marks it
 * dirty, except while a reply is being applied.
 *
 * Until a gateway has them, the changed names are also kept in a file of
 * their own (jk_session_keep_pending): a plain notebook starts no gateway,
 * and a kernel restarted before one ran would otherwise start empty. The
 * file is a journal: each cell that changed names appends one line, the
 * whole set no gateway has (a single write, no new file: creating and
 * renaming one cost most of a cell's round trip); its last line that parses
 * is what a kernel started later takes. The first save of each kernel, and
 * one that finds the journal grown past PENDING_COMPACT_AT (or replaced by
 * another kernel of the notebook), writes it anew with that one line. */
#include "session.h"

#include "rename.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sl_err.h"
#include "sl_file.h"
#include "sl_hmac.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_path.h"
#include "sl_time.h"

#define MAX_DIRTY 8192
#define RETRY_US (5 * SL_US_PER_S) /* between attempts to reach a gateway that was down */
#define PENDING_COMPACT_AT (256 * 1024) /* journal bytes (or 4 lines' worth, if more) before it is rewritten */
#define PENDING_READ_MAX (1024L * 1024 * 1024)

struct jk_session {
  struct jk_state *state;
  struct jk_gw *gw;
  char *notebook;
  char **dirty;                /* names changed since the last session.set */
  size_t n_dirty;
  char **inflight;             /* names of the session.set in flight */
  size_t n_inflight;
  int64_t load_id, set_id;
  int64_t retry_at_us;         /* after a failed load or set: next try at a cell's end */
  bool loading;                /* cells wait for the outstanding session.get */
  bool applying;               /* loading: changes are not dirty */
  char *pending_dir;           /* where that file is kept, or NULL: nowhere */
  char *pending;               /* the file of names no gateway has yet, or NULL */
  bool pending_written;        /* it exists, as far as this kernel knows */
  int pending_fd;              /* that file open for appending, or -1: the next save replaces it */
  dev_t pending_dev;           /* the file pending_fd has open */
  ino_t pending_ino;
  size_t pending_size;         /* its length, as this kernel wrote it */
  json_t *models;              /* session.get "models": name -> {job, step, checkpoint} */
  char *kernel_id;             /* the session follows the notebook's path: records kept (rename.h) */
  char *move_from;             /* the notebook's path before a rename, until the gateway moved it */
  int64_t move_id;             /* the session.move in flight */
};

/* ---- dirty names -------------------------------------------------------- */

static bool listed(char **names, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(names[i], name) == 0)
      return true;
  return false;
}

static void touch(struct jk_session *s, const char *name) {
  if (s->applying || listed(s->dirty, s->n_dirty, name) || s->n_dirty >= MAX_DIRTY)
    return;
  char **grown = realloc(s->dirty, (s->n_dirty + 1) * sizeof *grown);
  if (!grown)
    return;
  s->dirty = grown;
  if ((s->dirty[s->n_dirty] = strdup(name)))
    s->n_dirty++;
}

static void on_changed(void *ud, const char *name) { touch(ud, name); }

static void free_names(char **names, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(names[i]);
  free(names);
}

/* The file of a notebook session's names no gateway has yet, in dir. */
static int pending_path(const char *dir, const char *notebook, char **ret) {
  char hex[SL_HMAC_HEX_LEN + 1];
  sl_sha256_hex(notebook, strlen(notebook), hex);
  return asprintf(ret, "%s/%s.json", dir, hex) < 0 ? -ENOMEM : 0;
}

static void close_pending(struct jk_session *s) {
  if (s->pending_fd >= 0)
    close(s->pending_fd);
  s->pending_fd = -1;
}

struct jk_session *jk_session_new(struct jk_state *state, struct jk_gw *gw, const char *notebook) {
  struct jk_session *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->state = state;
  s->gw = gw;
  s->pending_fd = -1;
  if (!(s->notebook = strdup(notebook))) {
    free(s);
    return NULL;
  }
  jk_state_observe(state, on_changed, s);
  return s;
}

static void save_pending(struct jk_session *s);

struct jk_session *jk_session_free(struct jk_session *s) {
  if (!s)
    return NULL;
  /* A kernel stopped (a restart) right after a cell may not have had its
   * set answered, or even sent: its socket drops what is queued. The names
   * go to the journal, which the next kernel of the notebook takes. */
  if (s->pending && (s->n_dirty || s->n_inflight)) {
    sl_info("kernel.gateway", "session %s: %zu names the gateway has not confirmed kept for the next kernel",
            s->notebook, s->n_dirty + s->n_inflight);
    save_pending(s);
  }
  jk_state_observe(s->state, NULL, NULL);
  free_names(s->dirty, s->n_dirty);
  free_names(s->inflight, s->n_inflight);
  json_decref(s->models);
  free(s->kernel_id);
  free(s->move_from);
  free(s->notebook);
  close_pending(s);
  free(s->pending);
  free(s->pending_dir);
  free(s);
  return NULL;
}

int jk_session_rename(struct jk_session *s, const char *notebook) {
  char *copy = strdup(notebook), *path = NULL;
  if (!copy)
    return -ENOMEM;
  if (s->pending) { /* the file follows the session's name */
    if (pending_path(s->pending_dir, notebook, &path) < 0) {
      free(copy);
      return -ENOMEM;
    }
    close_pending(s);
    if (s->pending_written && unlink(s->pending) < 0 && errno != ENOENT)
      sl_warn("kernel.gateway", "cannot remove %s: %s", s->pending, strerror(errno));
    free(s->pending);
    s->pending = path;
    s->pending_written = false;
  }
  free(s->notebook);
  s->notebook = copy;
  return 0;
}

/* A session.set of names (their values now, a delete for those gone). */
static json_t *set_request(const struct jk_session *s, char **names, size_t n) {
  json_t *vars = json_object(), *defs = json_array(), *del = json_array();
  for (size_t i = 0; i < n; i++) {
    const char *name = names[i];
    const struct jk_value *v = jk_state_var(s->state, name);
    struct jk_def d;
    json_t *enc = v ? jk_value_to_json(v) : NULL;
    if (enc)
      json_object_set_new(vars, name, enc);
    else if (!v && jk_state_def(s->state, name, &d) == 0)
      json_array_append_new(defs, json_pack("{s:s, s:s, s:O}", "name", d.name, "kind", d.kind, "spec", d.spec));
    else
      json_array_append_new(del, json_string(name));
  }
  return json_pack("{s:s, s:o, s:o, s:o}", "type", "session.set", "vars", vars, "defs", defs, "delete", del);
}

/* ---- the names no gateway has yet, kept in a file ------------------------ */

/* Appends line (len bytes, its newline included) to the journal kept open,
 * if it is still the file at s->pending and stays short enough. */
static bool append_pending(struct jk_session *s, const char *line, size_t len) {
  struct stat st;
  size_t limit = 4 * len > PENDING_COMPACT_AT ? 4 * len : PENDING_COMPACT_AT;
  if (s->pending_fd < 0 || s->pending_size + len > limit || stat(s->pending, &st) < 0 ||
      st.st_dev != s->pending_dev || st.st_ino != s->pending_ino)
    return false;
  for (size_t done = 0; done < len;) {
    ssize_t w = write(s->pending_fd, line + done, len - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      close_pending(s); /* a line cut short: the next save writes the file anew */
      return false;
    }
    done += (size_t)w;
  }
  s->pending_size += len;
  return true;
}

/* The journal written anew with line alone, and opened for appending. */
static int replace_pending(struct jk_session *s, const char *line, size_t len) {
  close_pending(s);
  int r = sl_mkdir_p(s->pending_dir, 0700);
  if (r >= 0)
    r = sl_file_replace(s->pending, line, len, 0600); /* outlives the kernel, each cell: no flush */
  if (r < 0)
    return r;
  struct stat st;
  int fd = open(s->pending, O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd >= 0 && fstat(fd, &st) == 0) {
    s->pending_fd = fd;
    s->pending_dev = st.st_dev;
    s->pending_ino = st.st_ino;
    s->pending_size = len;
  } else if (fd >= 0) {
    close(fd);
  }
  return 0;
}

/* Keeps every name not yet taken by a gateway (dirty or in flight), or
 * removes the file when there is none. */
static void save_pending(struct jk_session *s) {
  if (!s->pending)
    return;
  if (!s->n_dirty && !s->n_inflight) {
    close_pending(s);
    if (s->pending_written && unlink(s->pending) < 0 && errno != ENOENT)
      sl_warn("kernel.gateway", "cannot remove %s: %s", s->pending, strerror(errno));
    s->pending_written = false;
    return;
  }
  char **all = malloc((s->n_dirty + s->n_inflight) * sizeof *all);
  if (!all)
    return;
  if (s->n_dirty)
    memcpy(all, s->dirty, s->n_dirty * sizeof *all);
  if (s->n_inflight)
    memcpy(all + s->n_dirty, s->inflight, s->n_inflight * sizeof *all);
  json_t *body = set_request(s, all, s->n_dirty + s->n_inflight);
  free(all);
  json_object_set_new(body, "session", json_string(s->notebook));
  size_t len = 0;
  char *text = body ? sl_json_dump(body, &len) : NULL, *line = text ? realloc(text, len + 1) : NULL;
  json_decref(body);
  if (!line)
    free(text);
  int r = -ENOMEM;
  if (line) {
    line[len++] = '\n'; /* one line; a string's newlines are escaped */
    r = append_pending(s, line, len) ? 0 : replace_pending(s, line, len);
  }
  if (r < 0)
    sl_warn("kernel.gateway", "cannot keep the session's unsent names in %s: %s", s->pending, sl_strerror(r));
  else
    s->pending_written = true;
  free(line);
}

/* The journal at path: its last line that parses as an object, in *ret (NULL
 * when the file is missing or empty). SL_EJSON when no line does. */
static int read_pending(const char *path, json_t **ret) {
  *ret = NULL;
  FILE *f = fopen(path, "re");
  if (!f)
    return errno == ENOENT ? 0 : -errno;
  char *buf = NULL;
  long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  int r = 0;
  if (size < 0 || size > PENDING_READ_MAX || fseek(f, 0, SEEK_SET) != 0)
    r = SL_ELIMIT;
  else if (!(buf = malloc((size_t)size + 1)))
    r = -ENOMEM;
  else if (fread(buf, 1, (size_t)size, f) != (size_t)size)
    r = -EIO;
  fclose(f);
  if (r < 0) {
    free(buf);
    return r;
  }
  bool any = false;
  for (size_t end = (size_t)size; end > 0 && !*ret;) {
    size_t start = end;
    while (start > 0 && buf[start - 1] != '\n')
      start--;
    size_t len = end - start;
    while (len && buf[start + len - 1] == '\n')
      len--;
    if (len) {
      any = true;
      json_t *v = NULL;
      if (sl_json_parse(buf + start, len, SL_JSON_MAX_DEPTH_DEFAULT, &v, NULL, 0) == 0 && json_is_object(v))
        *ret = v; /* the newest whole line: one cut short by a crash is passed over */
      else
        json_decref(v);
    }
    end = start ? start - 1 : 0;
  }
  free(buf);
  return *ret || !any ? 0 : SL_EJSON;
}

/* The kept names of the file at path, for the session named session there,
 * taken as this kernel's changes (to be sent). 1 when there were some of
 * that session, 0 when none (no file, another session's), SL_EJSON for an
 * unreadable file (left alone). */
static int adopt(struct jk_session *s, const char *path, const char *session) {
  json_t *kept;
  int rr = read_pending(path, &kept);
  if (rr < 0) {
    sl_warn("kernel.gateway", "%s: unreadable (%s); its names are not restored", path, sl_strerror(rr));
    return SL_EJSON;
  }
  if (!kept)
    return 0; /* none: the usual case */
  int r = 0;
  if (strcmp(sl_json_get_str(kept, "session", ""), session) == 0) {
    /* this kernel's changes, as if made here: they go to the gateway */
    jk_session_apply(s, kept, false);
    const char *name;
    json_t *j;
    size_t i;
    json_object_foreach(json_object_get(kept, "vars"), name, j)
      touch(s, name);
    json_array_foreach(json_object_get(kept, "defs"), i, j)
      touch(s, sl_json_get_str(j, "name", ""));
    json_array_foreach(json_object_get(kept, "delete"), i, j)
      if (json_is_string(j))
        touch(s, json_string_value(j));
    sl_info("kernel.gateway", "session %s: %zu names kept from before no gateway had them", session,
            s->n_dirty);
    r = 1;
  }
  json_decref(kept);
  return r;
}

int jk_session_keep_pending(struct jk_session *s, const char *dir) {
  close_pending(s);
  free(s->pending);
  free(s->pending_dir);
  s->pending = s->pending_dir = NULL;
  s->pending_written = false;
  if (!dir)
    return 0;
  if (!(s->pending_dir = strdup(dir)) || pending_path(dir, s->notebook, &s->pending) < 0)
    return -ENOMEM;
  sl_file_sweep_temporaries(dir); /* those of kernels killed while they wrote */
  int r = adopt(s, s->pending, s->notebook);
  if (r == SL_EJSON) {
    free(s->pending);
    s->pending = NULL; /* left for whoever looks, never overwritten */
    return r;
  }
  s->pending_written = access(s->pending, F_OK) == 0;
  return 0;
}

/* ---- a notebook renamed ---------------------------------------------------- */

static void send_move(struct jk_session *s, unsigned flags) {
  if (!s->move_from || s->move_id)
    return;
  int64_t id = jk_gw_request(s->gw, json_pack("{s:s, s:s, s:s}", "type", "session.move", "from", s->move_from,
                                              "to", s->notebook), flags);
  if (id > 0)
    s->move_id = id;
}

void jk_session_moved(struct jk_session *s, const char *from, unsigned flags) {
  if (!strcmp(from, s->notebook))
    return;
  char *copy = strdup(from);
  if (!copy)
    return;
  free(s->move_from);
  s->move_from = copy;
  s->move_id = 0;
  sl_info("kernel.gateway", "the notebook %s is now %s: its session follows", from, s->notebook);
  char *old = NULL;
  /* names no gateway had under the old path go with the new one (this
   * kernel's own, once jk_session_rename dropped the old file, at once) */
  if (s->pending_dir && pending_path(s->pending_dir, from, &old) == 0 && adopt(s, old, from) == 1 &&
      unlink(old) < 0 && errno != ENOENT)
    sl_warn("kernel.gateway", "cannot remove %s: %s", old, strerror(errno));
  free(old);
  save_pending(s);
  send_move(s, flags);
}

int jk_session_follow(struct jk_session *s, const char *kernel_id, unsigned flags, char *from, size_t size) {
  char *copy = strdup(kernel_id), last[4096];
  if (!copy)
    return -ENOMEM;
  free(s->kernel_id);
  s->kernel_id = copy;
  int known = jk_rename_recorded(kernel_id, last, sizeof last);
  if (known == 0 && !strcmp(last, s->notebook))
    return 0; /* recorded already: nothing written at start-up */
  if (known == 0 && strlen(last) < size) {
    jk_session_moved(s, last, flags); /* renamed, then restarted: the record follows once moved */
    memcpy(from, last, strlen(last) + 1);
    return 1;
  }
  int r = jk_rename_record(kernel_id, s->notebook);
  if (r < 0)
    sl_debug("kernel.gateway", "cannot record kernel %s's session: %s", kernel_id, sl_strerror(r));
  return 0;
}

void jk_session_flush(struct jk_session *s) {
  send_move(s, 0); /* first: a set for the new path before it would put its session aside */
  if (!s->n_dirty)
    return;
  json_t *req = set_request(s, s->dirty, s->n_dirty);
  int64_t id = jk_gw_request(s->gw, req, 0);
  if (id < 0)
    return;
  /* A set already in flight is superseded: this one carries its names too,
   * and only the newest reply counts. */
  s->set_id = id;
  char **all = realloc(s->inflight, (s->n_inflight + s->n_dirty) * sizeof *all);
  if (!all)
    return;
  memcpy(all + s->n_inflight, s->dirty, s->n_dirty * sizeof *all);
  s->inflight = all;
  s->n_inflight += s->n_dirty;
  free(s->dirty);
  s->dirty = NULL;
  s->n_dirty = 0;
}

void jk_session_cell_done(struct jk_session *s) {
  if (!s->n_dirty) {
    if (s->move_from && !s->move_id && jk_gw_state(s->gw) != JK_GW_FAILED)
      send_move(s, 0);
    return;
  }
  if (jk_gw_state(s->gw) == JK_GW_FAILED && sl_time_mono_us() < s->retry_at_us) {
    save_pending(s); /* kept; sent with the next flush */
    return;
  }
  jk_session_flush(s);
}

void jk_session_load(struct jk_session *s, bool cells_wait, bool may_start) {
  int64_t id = jk_gw_request(s->gw, json_pack("{s:s}", "type", "session.get"), may_start ? JK_GW_SPAWN : 0);
  if (id < 0)
    return;
  if (s->load_id)
    jk_gw_forget(s->gw, s->load_id);
  s->load_id = id;
  s->loading = s->loading || cells_wait;
}

bool jk_session_loading(const struct jk_session *s) { return s->loading; }

/* ---- replies ------------------------------------------------------------ */

static bool in_reply(const json_t *reply, const char *name) {
  if (json_object_get(json_object_get(reply, "vars"), name))
    return true;
  size_t i;
  json_t *j;
  json_array_foreach(json_object_get(reply, "defs"), i, j) {
    if (strcmp(sl_json_get_str(j, "name", ""), name) == 0)
      return true;
  }
  return false;
}

void jk_session_apply(struct jk_session *s, const json_t *reply, bool switched) {
  if (switched) {
    /* Names only this kernel holds join the new session; stored ones win. */
    free_names(s->dirty, s->n_dirty);
    s->dirty = NULL;
    s->n_dirty = 0;
    const char *vname;
    for (size_t k = 0; (vname = jk_state_var_at(s->state, k, NULL)); k++)
      if (!in_reply(reply, vname))
        touch(s, vname);
    struct jk_def d;
    for (size_t k = 0; jk_state_def_at(s->state, k, &d) == 0; k++)
      if (!in_reply(reply, d.name))
        touch(s, d.name);
  }
  s->applying = true;
  const char *name;
  json_t *j;
  size_t n = 0, bad = 0;
  json_object_foreach(json_object_get(reply, "vars"), name, j) {
    struct jk_value v;
    if ((!switched && listed(s->dirty, s->n_dirty, name)) || jk_lang_is_reserved(name))
      continue;
    if (jk_value_from_json(j, &v) < 0 || jk_state_set_var(s->state, name, &v) < 0)
      bad++;
    else
      n++;
  }
  size_t i;
  json_array_foreach(json_object_get(reply, "defs"), i, j) {
    const char *dname = sl_json_get_str(j, "name", ""), *kind = sl_json_get_str(j, "kind", "");
    json_t *spec = json_object_get(j, "spec");
    if (!*dname || (!switched && listed(s->dirty, s->n_dirty, dname)))
      continue;
    if ((strcmp(kind, "model") != 0 && strcmp(kind, "data") != 0) || !json_is_object(spec) ||
        jk_state_set_def(s->state, dname, kind, json_incref(spec)) < 0)
      bad++;
    else
      n++;
  }
  s->applying = false;
  jk_session_set_models(s, json_object_get(reply, "models"));
  if (bad)
    sl_warn("kernel.gateway", "session %s: %zu stored names could not be read back", s->notebook, bad);
  sl_debug("kernel.gateway", "session %s: loaded %zu names", s->notebook, n);
}

enum jk_session_reply jk_session_reply(struct jk_session *s, int64_t id, const json_t *reply,
                                       const char *error) {
  if (id && id == s->move_id) {
    s->move_id = 0;
    if (error && !reply) { /* no gateway reached: again with the next flush */
      sl_debug("kernel.gateway", "session not moved from %s yet: %s", s->move_from, error);
      return JK_SESSION_HANDLED;
    }
    if (error)
      sl_warn("kernel.gateway", "the gateway did not move the session %s to %s: %s", s->move_from, s->notebook,
              error);
    else
      sl_info("kernel.gateway", "session %s moved to %s%s%s", s->move_from, s->notebook,
              json_is_true(json_object_get(reply, "moved")) ? "" : " (nothing stored under the old path)",
              json_is_string(json_object_get(reply, "aside")) ? "; the one there before was put aside" : "");
    free(s->move_from);
    s->move_from = NULL;
    if (s->kernel_id) {
      int r = jk_rename_record(s->kernel_id, s->notebook);
      if (r < 0)
        sl_debug("kernel.gateway", "cannot record kernel %s's session: %s", s->kernel_id, sl_strerror(r));
    }
    return JK_SESSION_HANDLED;
  }
  if (id && id == s->load_id) {
    s->load_id = 0;
    if (!error) {
      jk_session_apply(s, reply, false);
    } else {
      sl_debug("kernel.gateway", "session state not loaded: %s", error);
      s->retry_at_us = sl_time_mono_us() + RETRY_US;
    }
    s->loading = false;
    return JK_SESSION_LOADED;
  }
  if (id && id == s->set_id) {
    s->set_id = 0;
    if (error) {
      sl_debug("kernel.gateway", "session.set failed: %s (kept for the next cell)", error);
      s->retry_at_us = sl_time_mono_us() + RETRY_US;
      for (size_t i = 0; i < s->n_inflight; i++)
        touch(s, s->inflight[i]);
    }
    free_names(s->inflight, s->n_inflight);
    s->inflight = NULL;
    s->n_inflight = 0;
    if (!error)
      jk_session_flush(s);
    if (error || (!s->n_dirty && !s->n_inflight))
      save_pending(s); /* kept until a gateway has them; gone once it has */
    /* a gateway's answer, not a lost connection: it says what to change */
    return error && reply ? JK_SESSION_REFUSED : JK_SESSION_HANDLED;
  }
  return JK_SESSION_OTHER;
}

/* ---- trained models ----------------------------------------------------- */

const json_t *jk_session_model(const struct jk_session *s, const char *name) {
  return json_object_get(s->models, name);
}

void jk_session_set_models(struct jk_session *s, const json_t *models) {
  if (!json_is_object(models))
    return;
  json_t *copy = json_deep_copy(models);
  if (!copy)
    return;
  json_decref(s->models);
  s->models = copy;
}

void jk_session_trained(struct jk_session *s, const char *model, const char *job, int64_t step) {
  if (!s->models)
    s->models = json_object();
  json_object_set_new(s->models, model, json_pack("{s:s, s:I}", "job", job, "step", (json_int_t)step));
}
