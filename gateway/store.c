/* The store: SQLite behind gateway-shaped functions.
 *
 * Invariants: the schema_version table holds one row, the version of the
 * newest migration applied; migrations run in order, each in its own
 * transaction, so a crash mid-way leaves a database at some whole version.
 * Writers take the lock up front (BEGIN IMMEDIATE) so that read-then-write
 * sequences such as event numbering cannot interleave across handles: the
 * next seq is jobs.last_seq + 1 and both rows change in one transaction. */
#include "store.h"

#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define T "gateway.store"

struct gw_store {
  sqlite3 *db;
};

/* Migration n brings the schema from version n-1 to n. */
static const char *const migrations[] = {
  /* 1: the first schema */
  "CREATE TABLE users(name TEXT PRIMARY KEY, token_sha256 TEXT NOT NULL UNIQUE, grp TEXT);"
  "CREATE TABLE sessions(user TEXT NOT NULL, name TEXT NOT NULL, last_active_us INTEGER,"
  "  PRIMARY KEY(user, name));"
  "CREATE TABLE session_vars(user TEXT NOT NULL, session TEXT NOT NULL, name TEXT NOT NULL,"
  "  value TEXT NOT NULL, PRIMARY KEY(user, session, name));"
  "CREATE TABLE session_defs(user TEXT NOT NULL, session TEXT NOT NULL, name TEXT NOT NULL,"
  "  kind TEXT NOT NULL, spec TEXT NOT NULL, PRIMARY KEY(user, session, name));"
  "CREATE TABLE jobs(id INTEGER PRIMARY KEY AUTOINCREMENT, user TEXT NOT NULL,"
  "  session TEXT NOT NULL, kind TEXT NOT NULL, model TEXT, data TEXT, spec TEXT,"
  "  state TEXT NOT NULL, reason TEXT, step INTEGER DEFAULT 0, steps INTEGER DEFAULT 0,"
  "  attempt INTEGER DEFAULT 0, instance TEXT, instance_type TEXT, zone TEXT,"
  "  spot INTEGER DEFAULT 0, price REAL DEFAULT 0, on_demand_price REAL DEFAULT 0,"
  "  created_us INTEGER, updated_us INTEGER, last_seq INTEGER NOT NULL DEFAULT 0,"
  "  ckpt_key TEXT, ckpt_step INTEGER DEFAULT 0, cancel_requested INTEGER DEFAULT 0);"
  "CREATE INDEX jobs_user ON jobs(user, state);"
  "CREATE TABLE events(job INTEGER NOT NULL, seq INTEGER NOT NULL, time_us INTEGER NOT NULL,"
  "  kind TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY(job, seq));"
  "CREATE TABLE attempts(job INTEGER NOT NULL, attempt INTEGER NOT NULL, instance TEXT,"
  "  instance_type TEXT, zone TEXT, spot INTEGER, price REAL, on_demand_price REAL,"
  "  from_step INTEGER, started_us INTEGER, ended_us INTEGER, outcome TEXT,"
  "  PRIMARY KEY(job, attempt));"
  "CREATE TABLE instances(id TEXT PRIMARY KEY, type TEXT, zone TEXT, spot INTEGER,"
  "  price REAL, on_demand_price REAL, public_key TEXT NOT NULL, state TEXT NOT NULL,"
  "  job INTEGER, user TEXT, launched_us INTEGER);"
  "CREATE TABLE checkpoints(job INTEGER NOT NULL, attempt INTEGER, step INTEGER NOT NULL,"
  "  key TEXT NOT NULL, bytes INTEGER, write_ms INTEGER, upload_ms INTEGER, time_us INTEGER,"
  "  PRIMARY KEY(job, step));",
  /* 2: cost ledger, per-job cost totals, trained models per session */
  "CREATE TABLE cost(job INTEGER NOT NULL, attempt INTEGER NOT NULL, user TEXT NOT NULL,"
  "  instance TEXT, usd REAL NOT NULL, on_demand_usd REAL NOT NULL, seconds REAL NOT NULL,"
  "  updated_us INTEGER NOT NULL, PRIMARY KEY(job, attempt));"
  "CREATE INDEX cost_user ON cost(user, updated_us);"
  "ALTER TABLE jobs ADD COLUMN cost_usd REAL NOT NULL DEFAULT 0;"
  "ALTER TABLE jobs ADD COLUMN on_demand_usd REAL NOT NULL DEFAULT 0;"
  "CREATE TABLE session_models(user TEXT NOT NULL, session TEXT NOT NULL, name TEXT NOT NULL,"
  "  job INTEGER, step INTEGER, checkpoint TEXT, PRIMARY KEY(user, session, name));",
  /* 3: instances belong to a provider (several may be enabled at once) */
  "ALTER TABLE instances ADD COLUMN provider TEXT NOT NULL DEFAULT 'local';",
};

static int db_err(struct gw_store *s, const char *what) {
  sl_err(T, "%s: %s", what, sqlite3_errmsg(s->db));
  return SL_ESQLITE;
}

static int exec(struct gw_store *s, const char *sql) {
  char *msg = NULL;
  if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
    sl_err(T, "%s", msg ? msg : "exec failed");
    sqlite3_free(msg);
    return SL_ESQLITE;
  }
  return 0;
}

static sqlite3_stmt *prep(struct gw_store *s, const char *sql) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
    db_err(s, "prepare");
    return NULL;
  }
  return st;
}

/* Runs a statement that returns no rows and finalizes it. */
static int run(struct gw_store *s, sqlite3_stmt *st) {
  if (!st)
    return SL_ESQLITE;
  int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE && rc != SQLITE_ROW)
    return db_err(s, "step");
  return 0;
}

static void bind_text(sqlite3_stmt *st, int i, const char *v) {
  sqlite3_bind_text(st, i, v ? v : "", -1, SQLITE_TRANSIENT);
}

static void col_text(sqlite3_stmt *st, int i, char *dst, size_t size) {
  const unsigned char *t = sqlite3_column_text(st, i);
  snprintf(dst, size, "%s", t ? (const char *)t : "");
}

static int begin(struct gw_store *s) { return exec(s, "BEGIN IMMEDIATE"); }
static int commit(struct gw_store *s) { return exec(s, "COMMIT"); }
static int rollback(struct gw_store *s, int r) {
  sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
  return r;
}

int gw_store_schema_version(struct gw_store *s) {
  sqlite3_stmt *st = prep(s, "SELECT version FROM schema_version");
  if (!st)
    return SL_ESQLITE;
  int v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0) : 0;
  sqlite3_finalize(st);
  return v;
}

static int migrate(struct gw_store *s, char *err, size_t err_size) {
  if (exec(s, "CREATE TABLE IF NOT EXISTS schema_version(version INTEGER NOT NULL)") < 0)
    return SL_ESQLITE;
  int have = gw_store_schema_version(s);
  if (have < 0)
    return have;
  if (have > GW_STORE_SCHEMA_VERSION) {
    snprintf(err, err_size, "database schema version %d is newer than this gateway's (%d)", have,
             GW_STORE_SCHEMA_VERSION);
    return SL_EMISMATCH;
  }
  for (int v = have + 1; v <= GW_STORE_SCHEMA_VERSION; v++) {
    char set[96];
    snprintf(set, sizeof set, "DELETE FROM schema_version; INSERT INTO schema_version VALUES(%d)",
             v);
    if (begin(s) < 0 || exec(s, migrations[v - 1]) < 0 || exec(s, set) < 0 || commit(s) < 0) {
      snprintf(err, err_size, "migration to schema version %d failed: %s", v,
               sqlite3_errmsg(s->db));
      return rollback(s, SL_ESQLITE);
    }
    sl_info(T, "database migrated to schema version %d", v);
  }
  return 0;
}

int gw_store_open(const char *path, struct gw_store **ret, char *err, size_t err_size) {
  struct gw_store *s = calloc(1, sizeof *s);
  if (!s)
    return -ENOMEM;
  int r = SL_ESQLITE;
  if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                      SQLITE_OPEN_FULLMUTEX, NULL) != SQLITE_OK) {
    snprintf(err, err_size, "%s: %s", path, s->db ? sqlite3_errmsg(s->db) : "cannot open");
    goto fail;
  }
  sqlite3_busy_timeout(s->db, 5000);
  if (exec(s, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON") < 0) {
    snprintf(err, err_size, "%s: %s", path, sqlite3_errmsg(s->db));
    goto fail;
  }
  r = migrate(s, err, err_size);
  if (r < 0)
    goto fail;
  *ret = s;
  return 0;
fail:
  gw_store_free(s);
  return r;
}

struct gw_store *gw_store_free(struct gw_store *s) {
  if (s) {
    sqlite3_close_v2(s->db);
    free(s);
  }
  return NULL;
}

int gw_store_user_put(struct gw_store *s, const char *name, const char *token_sha256,
                      const char *group) {
  sqlite3_stmt *st = prep(s, "INSERT INTO users(name, token_sha256, grp) VALUES(?,?,?)"
                             " ON CONFLICT(name) DO UPDATE SET token_sha256=excluded.token_sha256,"
                             " grp=excluded.grp");
  if (st) {
    bind_text(st, 1, name);
    bind_text(st, 2, token_sha256);
    bind_text(st, 3, group);
  }
  return run(s, st);
}

static bool named(const struct gw_store_user *users, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(users[i].name, name))
      return true;
  return false;
}

int gw_store_users_sync(struct gw_store *s, const struct gw_store_user *users, size_t n,
                        void (*on_removed)(const char *name, void *data), void *data) {
  char gone[GW_STORE_USERS_REPORTED][64];
  size_t n_gone = 0, more = 0;
  if (begin(s) < 0)
    return SL_ESQLITE;
  sqlite3_stmt *st = prep(s, "SELECT name FROM users ORDER BY name");
  if (!st)
    return rollback(s, SL_ESQLITE);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(st, 0);
    if (!name || named(users, n, name))
      continue;
    if (n_gone < GW_STORE_USERS_REPORTED)
      snprintf(gone[n_gone++], sizeof gone[0], "%s", name);
    else
      more++;
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE)
    return rollback(s, db_err(s, "list users"));
  /* all rows go and the named ones come back, so tokens may move between
   * users in one sync without tripping the unique index */
  int r = exec(s, "DELETE FROM users");
  for (size_t i = 0; r == 0 && i < n; i++)
    if ((r = gw_store_user_put(s, users[i].name, users[i].token_sha256, users[i].group)) < 0)
      sl_err(T, "cannot record user %s", users[i].name);
  if (r < 0 || (r = commit(s)) < 0)
    return rollback(s, r);
  for (size_t i = 0; on_removed && i < n_gone; i++)
    on_removed(gone[i], data);
  return (int)(n_gone + more);
}

int gw_store_user_by_token(struct gw_store *s, const char *token_sha256, char *ret_name,
                           size_t size) {
  sqlite3_stmt *st = prep(s, "SELECT name FROM users WHERE token_sha256=?");
  if (!st)
    return SL_ESQLITE;
  bind_text(st, 1, token_sha256);
  int r = SL_EAUTH;
  if (sqlite3_step(st) == SQLITE_ROW) {
    col_text(st, 0, ret_name, size);
    r = 0;
  }
  sqlite3_finalize(st);
  return r;
}

int gw_store_session_touch(struct gw_store *s, const char *user, const char *session,
                           int64_t now_us) {
  sqlite3_stmt *st = prep(s, "INSERT INTO sessions(user, name, last_active_us) VALUES(?,?,?)"
                             " ON CONFLICT DO UPDATE SET last_active_us=excluded.last_active_us");
  if (st) {
    bind_text(st, 1, user);
    bind_text(st, 2, session);
    sqlite3_bind_int64(st, 3, now_us);
  }
  return run(s, st);
}

static json_t *parse_text(sqlite3_stmt *st, int col) {
  const char *t = (const char *)sqlite3_column_text(st, col);
  json_t *v = NULL;
  if (t && sl_json_parse(t, strlen(t), 64, &v, NULL, 0) == 0)
    return v;
  return json_null();
}

int gw_store_session_get(struct gw_store *s, const char *user, const char *session,
                         json_t **ret) {
  json_t *vars = json_object(), *defs = json_array(), *models = json_object();
  sqlite3_stmt *a = prep(s, "SELECT name, value FROM session_vars WHERE user=? AND session=?"
                            " ORDER BY name");
  sqlite3_stmt *b = prep(s, "SELECT name, kind, spec FROM session_defs WHERE user=? AND"
                            " session=? ORDER BY rowid");
  sqlite3_stmt *c = prep(s, "SELECT name, job, step, checkpoint FROM session_models WHERE"
                            " user=? AND session=?");
  int r = SL_ESQLITE;
  if (!a || !b || !c)
    goto out;
  sqlite3_stmt *all[] = {a, b, c};
  for (int i = 0; i < 3; i++) {
    bind_text(all[i], 1, user);
    bind_text(all[i], 2, session);
  }
  while (sqlite3_step(a) == SQLITE_ROW)
    json_object_set_new(vars, (const char *)sqlite3_column_text(a, 0), parse_text(a, 1));
  while (sqlite3_step(b) == SQLITE_ROW)
    json_array_append_new(defs, json_pack("{s:s,s:s,s:o}", "name", sqlite3_column_text(b, 0),
                                          "kind", sqlite3_column_text(b, 1), "spec",
                                          parse_text(b, 2)));
  while (sqlite3_step(c) == SQLITE_ROW) {
    char job[16];
    json_object_set_new(models, (const char *)sqlite3_column_text(c, 0),
                        json_pack("{s:s,s:I,s:s}", "job",
                                  gw_job_id_str(sqlite3_column_int64(c, 1), job, sizeof job),
                                  "step", (json_int_t)sqlite3_column_int64(c, 2), "checkpoint",
                                  sqlite3_column_text(c, 3) ? (const char *)sqlite3_column_text(c, 3) : ""));
  }
  *ret = json_pack("{s:O,s:O,s:O}", "vars", vars, "defs", defs, "models", models);
  r = *ret ? 0 : -ENOMEM;
out:
  sqlite3_finalize(a);
  sqlite3_finalize(b);
  sqlite3_finalize(c);
  json_decref(vars);
  json_decref(defs);
  json_decref(models);
  return r;
}

static int put_var(struct gw_store *s, const char *user, const char *session, const char *name,
                   const json_t *value) {
  if (!json_is_object(value) || !json_is_string(json_object_get(value, "t")))
    return SL_ETYPE;
  char *text = sl_json_dump(value, NULL);
  if (!text)
    return -ENOMEM;
  sqlite3_stmt *st = prep(s, "INSERT OR REPLACE INTO session_vars VALUES(?,?,?,?)");
  if (st) {
    bind_text(st, 1, user);
    bind_text(st, 2, session);
    bind_text(st, 3, name);
    bind_text(st, 4, text);
  }
  free(text);
  return run(s, st);
}

static int put_def(struct gw_store *s, const char *user, const char *session, const json_t *def) {
  const char *name = sl_json_get_str(def, "name", NULL);
  const char *kind = sl_json_get_str(def, "kind", NULL);
  json_t *spec = json_object_get(def, "spec");
  if (!name || !*name || !kind || (strcmp(kind, "model") && strcmp(kind, "data")) ||
      !json_is_object(spec))
    return SL_ETYPE;
  char *text = sl_json_dump(spec, NULL);
  if (!text)
    return -ENOMEM;
  sqlite3_stmt *st = prep(s, "INSERT OR REPLACE INTO session_defs VALUES(?,?,?,?,?)");
  if (st) {
    bind_text(st, 1, user);
    bind_text(st, 2, session);
    bind_text(st, 3, name);
    bind_text(st, 4, kind);
    bind_text(st, 5, text);
  }
  free(text);
  return run(s, st);
}

static int delete_name(struct gw_store *s, const char *user, const char *session,
                       const char *name) {
  static const char *const sql[] = {
    "DELETE FROM session_vars WHERE user=?1 AND session=?2 AND name=?3",
    "DELETE FROM session_defs WHERE user=?1 AND session=?2 AND name=?3",
  };
  for (int i = 0; i < 2; i++) {
    sqlite3_stmt *st = prep(s, sql[i]);
    if (st) {
      bind_text(st, 1, user);
      bind_text(st, 2, session);
      bind_text(st, 3, name);
    }
    int r = run(s, st);
    if (r < 0)
      return r;
  }
  return 0;
}

int gw_store_session_set(struct gw_store *s, const char *user, const char *session,
                         const json_t *vars, const json_t *defs, const json_t *del) {
  if ((vars && !json_is_object(vars)) || (defs && !json_is_array(defs)) ||
      (del && !json_is_array(del)))
    return SL_ETYPE;
  int r = begin(s);
  if (r < 0)
    return r;
  const char *name;
  json_t *v;
  size_t i;
  json_object_foreach((json_t *)vars, name, v) {
    if ((r = put_var(s, user, session, name, v)) < 0)
      return rollback(s, r);
  }
  json_array_foreach(defs, i, v) {
    if ((r = put_def(s, user, session, v)) < 0)
      return rollback(s, r);
  }
  json_array_foreach(del, i, v) {
    if (!json_is_string(v))
      return rollback(s, SL_ETYPE);
    if ((r = delete_name(s, user, session, json_string_value(v))) < 0)
      return rollback(s, r);
  }
  return commit(s) < 0 ? rollback(s, SL_ESQLITE) : 0;
}

int gw_store_session_def(struct gw_store *s, const char *user, const char *session,
                         const char *name, const char *kind, json_t **ret) {
  sqlite3_stmt *st = prep(s, "SELECT spec FROM session_defs WHERE user=? AND session=? AND"
                             " name=? AND kind=?");
  if (!st)
    return SL_ESQLITE;
  bind_text(st, 1, user);
  bind_text(st, 2, session);
  bind_text(st, 3, name);
  bind_text(st, 4, kind);
  int r = SL_ENAME;
  if (sqlite3_step(st) == SQLITE_ROW) {
    *ret = json_pack("{s:s,s:s,s:o}", "name", name, "kind", kind, "spec", parse_text(st, 0));
    r = *ret ? 0 : -ENOMEM;
  }
  sqlite3_finalize(st);
  return r;
}

int gw_store_session_model_set(struct gw_store *s, const char *user, const char *session,
                               const char *model, int64_t job, int64_t step, const char *ckpt) {
  sqlite3_stmt *st = prep(s, "INSERT OR REPLACE INTO session_models VALUES(?,?,?,?,?,?)");
  if (st) {
    bind_text(st, 1, user);
    bind_text(st, 2, session);
    bind_text(st, 3, model);
    sqlite3_bind_int64(st, 4, job);
    sqlite3_bind_int64(st, 5, step);
    bind_text(st, 6, ckpt);
  }
  return run(s, st);
}

/* Appends event inside the caller's transaction. */
static int append_locked(struct gw_store *s, int64_t job, json_t *event, int64_t *ret_seq) {
  sqlite3_stmt *st = prep(s, "SELECT last_seq FROM jobs WHERE id=?");
  if (!st)
    return SL_ESQLITE;
  sqlite3_bind_int64(st, 1, job);
  int rc = sqlite3_step(st);
  int64_t seq = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) + 1 : 0;
  sqlite3_finalize(st);
  if (!seq)
    return SL_ENAME;
  int64_t now = 0;
  json_t *t = json_object_get(event, "time_us");
  now = json_is_integer(t) ? json_integer_value(t) : 0;
  if (!now) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    now = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
  }
  char id[16];
  json_object_set_new(event, "type", json_string("event"));
  json_object_set_new(event, "job", json_string(gw_job_id_str(job, id, sizeof id)));
  json_object_set_new(event, "seq", json_integer(seq));
  json_object_set_new(event, "time_us", json_integer(now));
  char *body = sl_json_dump(event, NULL);
  if (!body)
    return -ENOMEM;
  st = prep(s, "INSERT INTO events(job, seq, time_us, kind, body) VALUES(?,?,?,?,?)");
  if (st) {
    sqlite3_bind_int64(st, 1, job);
    sqlite3_bind_int64(st, 2, seq);
    sqlite3_bind_int64(st, 3, now);
    bind_text(st, 4, sl_json_get_str(event, "event", ""));
    bind_text(st, 5, body);
  }
  free(body);
  int r = run(s, st);
  if (r < 0)
    return r;
  st = prep(s, "UPDATE jobs SET last_seq=? WHERE id=?");
  if (st) {
    sqlite3_bind_int64(st, 1, seq);
    sqlite3_bind_int64(st, 2, job);
  }
  if ((r = run(s, st)) < 0)
    return r;
  *ret_seq = seq;
  return 0;
}

int gw_store_event_append(struct gw_store *s, int64_t job, json_t *event, int64_t *ret_seq) {
  int64_t seq;
  int r = begin(s);
  if (r < 0)
    return r;
  if ((r = append_locked(s, job, event, &seq)) < 0)
    return rollback(s, r);
  if (commit(s) < 0)
    return rollback(s, SL_ESQLITE);
  *ret_seq = seq;
  return 0;
}

#define JOB_COLS                                                                        \
  "id, user, session, kind, model, data, spec, state, reason, step, steps, attempt,"    \
  " instance, instance_type, zone, spot, price, on_demand_price, created_us, updated_us," \
  " last_seq, ckpt_key, ckpt_step, cancel_requested, cost_usd, on_demand_usd"

static void bind_job(sqlite3_stmt *st, const struct gw_job *j) {
  char *spec = j->spec ? sl_json_dump(j->spec, NULL) : NULL;
  sqlite3_bind_int64(st, 1, j->id);
  bind_text(st, 2, j->user);
  bind_text(st, 3, j->session);
  bind_text(st, 4, j->kind);
  bind_text(st, 5, j->model);
  bind_text(st, 6, j->data);
  bind_text(st, 7, spec ? spec : "{}");
  bind_text(st, 8, gw_job_state_name(j->state));
  bind_text(st, 9, j->reason);
  sqlite3_bind_int64(st, 10, j->step);
  sqlite3_bind_int64(st, 11, j->steps);
  sqlite3_bind_int(st, 12, j->attempt);
  bind_text(st, 13, j->instance);
  bind_text(st, 14, j->instance_type);
  bind_text(st, 15, j->zone);
  sqlite3_bind_int(st, 16, j->spot);
  sqlite3_bind_double(st, 17, j->price_usd_per_hour);
  sqlite3_bind_double(st, 18, j->on_demand_usd_per_hour);
  sqlite3_bind_int64(st, 19, j->created_us);
  sqlite3_bind_int64(st, 20, j->updated_us);
  bind_text(st, 21, j->ckpt_key);
  sqlite3_bind_int64(st, 22, j->ckpt_step);
  sqlite3_bind_int(st, 23, j->cancel_requested);
  sqlite3_bind_double(st, 24, j->cost_usd);
  sqlite3_bind_double(st, 25, j->on_demand_usd);
  free(spec);
}

static void read_job(sqlite3_stmt *st, struct gw_job *j) {
  memset(j, 0, sizeof *j);
  j->id = sqlite3_column_int64(st, 0);
  col_text(st, 1, j->user, sizeof j->user);
  col_text(st, 2, j->session, sizeof j->session);
  col_text(st, 3, j->kind, sizeof j->kind);
  col_text(st, 4, j->model, sizeof j->model);
  col_text(st, 5, j->data, sizeof j->data);
  j->spec = parse_text(st, 6);
  int state = gw_job_state_from_name((const char *)sqlite3_column_text(st, 7));
  j->state = state < 0 ? GW_JOB_FAILED : (enum gw_job_state)state;
  col_text(st, 8, j->reason, sizeof j->reason);
  j->step = sqlite3_column_int64(st, 9);
  j->steps = sqlite3_column_int64(st, 10);
  j->attempt = sqlite3_column_int(st, 11);
  col_text(st, 12, j->instance, sizeof j->instance);
  col_text(st, 13, j->instance_type, sizeof j->instance_type);
  col_text(st, 14, j->zone, sizeof j->zone);
  j->spot = sqlite3_column_int(st, 15);
  j->price_usd_per_hour = sqlite3_column_double(st, 16);
  j->on_demand_usd_per_hour = sqlite3_column_double(st, 17);
  j->created_us = sqlite3_column_int64(st, 18);
  j->updated_us = sqlite3_column_int64(st, 19);
  j->last_seq = sqlite3_column_int64(st, 20);
  col_text(st, 21, j->ckpt_key, sizeof j->ckpt_key);
  j->ckpt_step = sqlite3_column_int64(st, 22);
  j->cancel_requested = sqlite3_column_int(st, 23);
  j->cost_usd = sqlite3_column_double(st, 24);
  j->on_demand_usd = sqlite3_column_double(st, 25);
}

static int write_job(struct gw_store *s, struct gw_job *j) {
  sqlite3_stmt *st = prep(s, "UPDATE jobs SET user=?2, session=?3, kind=?4, model=?5, data=?6,"
                             " spec=?7, state=?8, reason=?9, step=?10, steps=?11, attempt=?12,"
                             " instance=?13, instance_type=?14, zone=?15, spot=?16, price=?17,"
                             " on_demand_price=?18, created_us=?19, updated_us=?20,"
                             " ckpt_key=?21, ckpt_step=?22, cancel_requested=?23, cost_usd=?24,"
                             " on_demand_usd=?25 WHERE id=?1");
  if (st)
    bind_job(st, j);
  return run(s, st);
}

int gw_store_job_create(struct gw_store *s, struct gw_job *j) {
  int r = begin(s);
  if (r < 0)
    return r;
  sqlite3_stmt *st = prep(s, "INSERT INTO jobs(user, session, kind, state) VALUES(?,?,?,?)");
  if (st) {
    bind_text(st, 1, j->user);
    bind_text(st, 2, j->session);
    bind_text(st, 3, j->kind);
    bind_text(st, 4, "queued");
  }
  if ((r = run(s, st)) < 0)
    return rollback(s, r);
  j->id = sqlite3_last_insert_rowid(s->db);
  j->state = GW_JOB_QUEUED;
  j->last_seq = 0;
  json_t *ev = json_pack("{s:s,s:s,s:s,s:I}", "event", "state", "state", "queued", "reason",
                         "submitted", "time_us", (json_int_t)j->created_us);
  int64_t seq = 0;
  if ((r = write_job(s, j)) < 0 || (r = append_locked(s, j->id, ev, &seq)) < 0) {
    json_decref(ev);
    return rollback(s, r);
  }
  json_decref(ev);
  if (commit(s) < 0)
    return rollback(s, SL_ESQLITE);
  j->last_seq = seq;
  return 0;
}

int gw_store_job_save(struct gw_store *s, struct gw_job *j, json_t *event) {
  int r = begin(s);
  if (r < 0)
    return r;
  int64_t seq = j->last_seq;
  if ((r = write_job(s, j)) < 0 || (event && (r = append_locked(s, j->id, event, &seq)) < 0))
    return rollback(s, r);
  if (commit(s) < 0)
    return rollback(s, SL_ESQLITE);
  j->last_seq = seq;
  return 0;
}

int gw_store_job_get(struct gw_store *s, int64_t id, struct gw_job *ret) {
  sqlite3_stmt *st = prep(s, "SELECT " JOB_COLS " FROM jobs WHERE id=?");
  if (!st)
    return SL_ESQLITE;
  sqlite3_bind_int64(st, 1, id);
  int r = SL_ENAME;
  if (sqlite3_step(st) == SQLITE_ROW) {
    read_job(st, ret);
    r = 0;
  }
  sqlite3_finalize(st);
  return r;
}

int gw_store_jobs_list(struct gw_store *s, const char *user, bool live_only, size_t max,
                       struct gw_job **ret, size_t *ret_n) {
  sqlite3_stmt *st = prep(s, "SELECT " JOB_COLS " FROM jobs WHERE (?1 IS NULL OR user=?1) AND"
                             " (?2=0 OR state NOT IN ('succeeded','failed','cancelled'))"
                             " ORDER BY id DESC LIMIT ?3");
  if (!st)
    return SL_ESQLITE;
  if (user)
    bind_text(st, 1, user);
  sqlite3_bind_int(st, 2, live_only);
  sqlite3_bind_int64(st, 3, (sqlite3_int64)max);
  struct gw_job *jobs = calloc(max ? max : 1, sizeof *jobs);
  size_t n = 0;
  if (!jobs) {
    sqlite3_finalize(st);
    return -ENOMEM;
  }
  while (n < max && sqlite3_step(st) == SQLITE_ROW)
    read_job(st, &jobs[n++]);
  sqlite3_finalize(st);
  *ret = jobs;
  *ret_n = n;
  return 0;
}

void gw_store_jobs_free(struct gw_job *jobs, size_t n) {
  for (size_t i = 0; jobs && i < n; i++)
    gw_job_done(&jobs[i]);
  free(jobs);
}

int gw_store_attempt_metric_step(struct gw_store *s, int64_t job, int64_t *ret_step) {
  sqlite3_stmt *st = prep(s, "SELECT MAX(json_extract(body, '$.step')) FROM events WHERE job=?1"
                             " AND kind='metric' AND seq > COALESCE((SELECT MAX(seq) FROM events"
                             " WHERE job=?1 AND kind='placed'), 0)");
  if (!st)
    return SL_ESQLITE;
  sqlite3_bind_int64(st, 1, job);
  int r = sqlite3_step(st);
  int64_t step = -1;
  if (r == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_INTEGER)
    step = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  if (r != SQLITE_ROW)
    return SL_ESQLITE;
  *ret_step = step;
  return 0;
}

int gw_store_events(struct gw_store *s, int64_t job, int64_t after, int64_t limit, json_t **ret,
                    bool *ret_more) {
  sqlite3_stmt *st = prep(s, "SELECT body FROM events WHERE job=? AND seq>? ORDER BY seq"
                             " LIMIT ?");
  if (!st)
    return SL_ESQLITE;
  sqlite3_bind_int64(st, 1, job);
  sqlite3_bind_int64(st, 2, after);
  sqlite3_bind_int64(st, 3, limit + 1);
  json_t *arr = json_array();
  bool more = false;
  while (sqlite3_step(st) == SQLITE_ROW) {
    if ((int64_t)json_array_size(arr) == limit) {
      more = true;
      break;
    }
    json_array_append_new(arr, parse_text(st, 0));
  }
  sqlite3_finalize(st);
  *ret = arr;
  *ret_more = more;
  return 0;
}

int gw_store_attempt_begin(struct gw_store *s, const struct gw_job *j, int64_t from_step,
                           int64_t now_us) {
  sqlite3_stmt *st = prep(s, "INSERT OR REPLACE INTO attempts(job, attempt, instance,"
                             " instance_type, zone, spot, price, on_demand_price, from_step,"
                             " started_us) VALUES(?,?,?,?,?,?,?,?,?,?)");
  if (st) {
    sqlite3_bind_int64(st, 1, j->id);
    sqlite3_bind_int(st, 2, j->attempt);
    bind_text(st, 3, j->instance);
    bind_text(st, 4, j->instance_type);
    bind_text(st, 5, j->zone);
    sqlite3_bind_int(st, 6, j->spot);
    sqlite3_bind_double(st, 7, j->price_usd_per_hour);
    sqlite3_bind_double(st, 8, j->on_demand_usd_per_hour);
    sqlite3_bind_int64(st, 9, from_step);
    sqlite3_bind_int64(st, 10, now_us);
  }
  return run(s, st);
}

int gw_store_attempt_end(struct gw_store *s, int64_t job, int attempt, const char *outcome,
                         int64_t now_us) {
  sqlite3_stmt *st = prep(s, "UPDATE attempts SET ended_us=?, outcome=? WHERE job=? AND"
                             " attempt=? AND ended_us IS NULL");
  if (st) {
    sqlite3_bind_int64(st, 1, now_us);
    bind_text(st, 2, outcome);
    sqlite3_bind_int64(st, 3, job);
    sqlite3_bind_int(st, 4, attempt);
  }
  return run(s, st);
}

int gw_store_checkpoint_add(struct gw_store *s, int64_t job, int attempt, int64_t step,
                            const char *key, int64_t bytes, int64_t write_ms, int64_t upload_ms,
                            int64_t now_us) {
  sqlite3_stmt *st = prep(s, "INSERT OR REPLACE INTO checkpoints VALUES(?,?,?,?,?,?,?,?)");
  if (st) {
    sqlite3_bind_int64(st, 1, job);
    sqlite3_bind_int(st, 2, attempt);
    sqlite3_bind_int64(st, 3, step);
    bind_text(st, 4, key);
    sqlite3_bind_int64(st, 5, bytes);
    sqlite3_bind_int64(st, 6, write_ms);
    sqlite3_bind_int64(st, 7, upload_ms);
    sqlite3_bind_int64(st, 8, now_us);
  }
  return run(s, st);
}

int gw_store_cost_add(struct gw_store *s, const struct gw_job *j, double usd,
                      double on_demand_usd, double seconds, int64_t now_us) {
  sqlite3_stmt *st = prep(s, "INSERT INTO cost VALUES(?,?,?,?,?,?,?,?) ON CONFLICT DO UPDATE SET"
                             " usd=usd+excluded.usd, on_demand_usd=on_demand_usd+"
                             "excluded.on_demand_usd, seconds=seconds+excluded.seconds,"
                             " updated_us=excluded.updated_us");
  if (st) {
    sqlite3_bind_int64(st, 1, j->id);
    sqlite3_bind_int(st, 2, j->attempt);
    bind_text(st, 3, j->user);
    bind_text(st, 4, j->instance);
    sqlite3_bind_double(st, 5, usd);
    sqlite3_bind_double(st, 6, on_demand_usd);
    sqlite3_bind_double(st, 7, seconds);
    sqlite3_bind_int64(st, 8, now_us);
  }
  return run(s, st);
}

int gw_store_cost_totals(struct gw_store *s, const char *user, int64_t since_us,
                         double *ret_usd, double *ret_on_demand_usd) {
  sqlite3_stmt *st = prep(s, "SELECT COALESCE(SUM(usd),0), COALESCE(SUM(on_demand_usd),0)"
                             " FROM cost WHERE (?1 IS NULL OR user=?1) AND updated_us>=?2");
  if (!st)
    return SL_ESQLITE;
  if (user)
    bind_text(st, 1, user);
  sqlite3_bind_int64(st, 2, since_us);
  int r = SL_ESQLITE;
  if (sqlite3_step(st) == SQLITE_ROW) {
    *ret_usd = sqlite3_column_double(st, 0);
    *ret_on_demand_usd = sqlite3_column_double(st, 1);
    r = 0;
  }
  sqlite3_finalize(st);
  return r;
}

int gw_store_instance_put(struct gw_store *s, const struct gw_instance_row *row) {
  sqlite3_stmt *st = prep(s, "INSERT OR REPLACE INTO instances(id, type, zone, spot, price,"
                             " on_demand_price, public_key, state, job, user, launched_us,"
                             " provider) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)");
  if (st) {
    bind_text(st, 1, row->id);
    bind_text(st, 2, row->type);
    bind_text(st, 3, row->zone);
    sqlite3_bind_int(st, 4, row->spot);
    sqlite3_bind_double(st, 5, row->price_usd_per_hour);
    sqlite3_bind_double(st, 6, row->on_demand_usd_per_hour);
    bind_text(st, 7, row->public_key);
    bind_text(st, 8, row->state);
    sqlite3_bind_int64(st, 9, row->job);
    bind_text(st, 10, row->user);
    sqlite3_bind_int64(st, 11, row->launched_us);
    bind_text(st, 12, row->provider);
  }
  return run(s, st);
}

int gw_store_instances_live(struct gw_store *s, struct gw_instance_row **ret, size_t *ret_n) {
  sqlite3_stmt *st = prep(s, "SELECT id, type, zone, spot, price, on_demand_price, public_key,"
                             " state, job, user, launched_us, provider FROM instances"
                             " WHERE state != 'terminated' LIMIT 10000");
  if (!st)
    return SL_ESQLITE;
  size_t n = 0, cap = 16;
  struct gw_instance_row *rows = calloc(cap, sizeof *rows);
  while (rows && sqlite3_step(st) == SQLITE_ROW) {
    if (n == cap) {
      struct gw_instance_row *g = realloc(rows, 2 * cap * sizeof *rows);
      if (!g)
        break;
      rows = g;
      cap *= 2;
    }
    struct gw_instance_row *r = &rows[n++];
    memset(r, 0, sizeof *r);
    col_text(st, 0, r->id, sizeof r->id);
    col_text(st, 1, r->type, sizeof r->type);
    col_text(st, 2, r->zone, sizeof r->zone);
    r->spot = sqlite3_column_int(st, 3);
    r->price_usd_per_hour = sqlite3_column_double(st, 4);
    r->on_demand_usd_per_hour = sqlite3_column_double(st, 5);
    col_text(st, 6, r->public_key, sizeof r->public_key);
    col_text(st, 7, r->state, sizeof r->state);
    r->job = sqlite3_column_int64(st, 8);
    col_text(st, 9, r->user, sizeof r->user);
    r->launched_us = sqlite3_column_int64(st, 10);
    col_text(st, 11, r->provider, sizeof r->provider);
  }
  sqlite3_finalize(st);
  if (!rows)
    return -ENOMEM;
  *ret = rows;
  *ret_n = n;
  return 0;
}
