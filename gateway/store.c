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
#include "sl_time.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define T "gateway.store"

struct kept_event;
struct kept_op;

struct gw_store {
  sqlite3 *db;
  /* writes the database refused, and every one after them (see "kept
   * writes" below); a job's and an instance's row only as their newest copy */
  struct kept_op *ops;
  size_t n_ops, cap_ops, n_kept_metrics;
  struct gw_job *rows;
  size_t n_rows, cap_rows;
  struct gw_instance_row *insts;
  size_t n_insts, cap_insts;
  int error;                    /* the last refusal (-ENOSPC, -EIO, -EBUSY, ...) */
  char message[160];
  int64_t failing_since_us;     /* 0: every write is in the database */
  uint64_t dropped;
  gw_store_saved_fn saved_fn;
  void *saved_ctx;
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
  /* 4: budgets: the alerts and caps that fired each month, and limits an admin set live */
  "CREATE TABLE budget_fired(month TEXT NOT NULL, scope TEXT NOT NULL, name TEXT NOT NULL,"
  "  kind TEXT NOT NULL, threshold_pct REAL NOT NULL, spent_usd REAL, budget_usd REAL,"
  "  time_us INTEGER, PRIMARY KEY(month, scope, name, kind, threshold_pct));"
  "CREATE TABLE budget_override(scope TEXT NOT NULL, name TEXT NOT NULL,"
  "  monthly_usd REAL NOT NULL, set_by TEXT, time_us INTEGER, PRIMARY KEY(scope, name));",
  /* 5: a record of every run (record.h): what the job rows do not hold */
  "CREATE TABLE records(job INTEGER PRIMARY KEY, body TEXT NOT NULL);",
  /* 6: the carbon estimate per attempt and per job */
  "ALTER TABLE cost ADD COLUMN energy_kwh REAL NOT NULL DEFAULT 0;"
  "ALTER TABLE cost ADD COLUMN co2e_g REAL NOT NULL DEFAULT 0;"
  "ALTER TABLE jobs ADD COLUMN energy_kwh REAL NOT NULL DEFAULT 0;"
  "ALTER TABLE jobs ADD COLUMN co2e_g REAL NOT NULL DEFAULT 0;",
};

/* SQLite's error space in the project's: a full disk, an I/O error, a lock
 * held past the busy timeout and a read-only file each keep their meaning
 * (the caller keeps such a write and retries it). */
static int err_from_sqlite(sqlite3 *db, int rc) {
  switch (rc & 0xff) {
  case SQLITE_FULL:
    return -ENOSPC;
  case SQLITE_IOERR:
    return sqlite3_system_errno(db) == ENOSPC ? -ENOSPC : -EIO;
  case SQLITE_BUSY:
  case SQLITE_LOCKED:
    return -EBUSY;
  case SQLITE_READONLY:
    return -EROFS;
  default:
    return SL_ESQLITE;
  }
}

/* The caller decides what a failure means (and logs it once): here only
 * for SPOTLAB_DEBUG=gateway.store. */
static int db_err(struct gw_store *s, const char *what) {
  int r = err_from_sqlite(s->db, sqlite3_extended_errcode(s->db));
  snprintf(s->message, sizeof s->message, "%s: %s", what, sqlite3_errmsg(s->db));
  sl_debug(T, "%s", s->message);
  return r;
}

static int exec(struct gw_store *s, const char *sql) {
  char *msg = NULL;
  int rc = sqlite3_exec(s->db, sql, NULL, NULL, &msg);
  if (rc != SQLITE_OK) {
    int r = err_from_sqlite(s->db, rc);
    snprintf(s->message, sizeof s->message, "%s", msg ? msg : "exec failed");
    sl_debug(T, "%s", s->message);
    sqlite3_free(msg);
    return r;
  }
  return 0;
}

static sqlite3_stmt *prep(struct gw_store *s, const char *sql) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
    sl_err(T, "prepare: %s", sqlite3_errmsg(s->db));
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

static void free_kept(struct kept_op *ops, size_t n_ops, struct gw_job *rows, size_t n_rows,
                      struct gw_instance_row *insts);

struct gw_store *gw_store_free(struct gw_store *s) {
  if (s) {
    free_kept(s->ops, s->n_ops, s->rows, s->n_rows, s->insts);
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
  " last_seq, ckpt_key, ckpt_step, cancel_requested, cost_usd, on_demand_usd, energy_kwh, co2e_g"

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
  sqlite3_bind_double(st, 26, j->energy_kwh);
  sqlite3_bind_double(st, 27, j->co2e_g);
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
  j->energy_kwh = sqlite3_column_double(st, 26);
  j->co2e_g = sqlite3_column_double(st, 27);
}

static int write_job(struct gw_store *s, struct gw_job *j) {
  sqlite3_stmt *st = prep(s, "UPDATE jobs SET user=?2, session=?3, kind=?4, model=?5, data=?6,"
                             " spec=?7, state=?8, reason=?9, step=?10, steps=?11, attempt=?12,"
                             " instance=?13, instance_type=?14, zone=?15, spot=?16, price=?17,"
                             " on_demand_price=?18, created_us=?19, updated_us=?20,"
                             " ckpt_key=?21, ckpt_step=?22, cancel_requested=?23, cost_usd=?24,"
                             " on_demand_usd=?25, energy_kwh=?26, co2e_g=?27 WHERE id=?1");
  if (st)
    bind_job(st, j);
  return run(s, st);
}

int gw_store_job_create(struct gw_store *s, struct gw_job *j) {
  if (s->failing_since_us)
    return s->error; /* a new job waits until the kept writes are in */
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
  if ((r = commit(s)) < 0)
    return rollback(s, r);
  j->last_seq = seq;
  return 0;
}

/* The checkpoint's row and, for a train job with a model, the session's
 * model (the job's newest checkpoint), inside the caller's transaction. */
static int record_checkpoint(struct gw_store *s, const struct gw_job *j, int attempt,
                             const struct gw_checkpoint_row *ck, int64_t now_us) {
  sqlite3_stmt *st = prep(s, "INSERT OR REPLACE INTO checkpoints VALUES(?,?,?,?,?,?,?,?)");
  if (st) {
    sqlite3_bind_int64(st, 1, j->id);
    sqlite3_bind_int(st, 2, attempt);
    sqlite3_bind_int64(st, 3, ck->step);
    bind_text(st, 4, ck->key);
    sqlite3_bind_int64(st, 5, ck->bytes);
    sqlite3_bind_int64(st, 6, ck->write_ms);
    sqlite3_bind_int64(st, 7, ck->upload_ms);
    sqlite3_bind_int64(st, 8, now_us);
  }
  int r = run(s, st);
  if (r < 0 || strcmp(j->kind, "train") || !j->model[0])
    return r;
  return gw_store_session_model_set(s, j->user, j->session, j->model, j->id, j->ckpt_step,
                                    j->ckpt_key);
}

static int keep_job(struct gw_store *s, const struct gw_job *j, json_t *event,
                    const struct gw_checkpoint_row *ck);
static bool refused(int r);
static void note_refused(struct gw_store *s, int r);

int gw_store_job_save_checkpoint(struct gw_store *s, struct gw_job *j, json_t *event,
                                 const struct gw_checkpoint_row *ck) {
  if (s->failing_since_us)
    return keep_job(s, j, event, ck);
  int64_t seq = j->last_seq;
  int r = begin(s);
  if (r == 0) {
    if ((r = write_job(s, j)) == 0 && (!event || (r = append_locked(s, j->id, event, &seq)) == 0) &&
        (!ck || (r = record_checkpoint(s, j, j->attempt, ck, sl_time_real_us())) == 0))
      r = commit(s);
    if (r < 0)
      rollback(s, r);
  }
  if (r == 0) {
    j->last_seq = seq;
    return 0;
  }
  if (!refused(r))
    return r;
  note_refused(s, r);
  return keep_job(s, j, event, ck);
}

int gw_store_job_save(struct gw_store *s, struct gw_job *j, json_t *event) {
  return gw_store_job_save_checkpoint(s, j, event, NULL);
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

static int attempt_begin(struct gw_store *s, const struct gw_job *j, int64_t from_step,
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

static int attempt_end(struct gw_store *s, int64_t job, int attempt, const char *outcome,
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

static int cost_add(struct gw_store *s, const struct gw_job *j, double usd, double on_demand_usd,
                    double seconds, int64_t now_us) {
  sqlite3_stmt *st = prep(s, "INSERT INTO cost(job, attempt, user, instance, usd, on_demand_usd,"
                             " seconds, updated_us) VALUES(?,?,?,?,?,?,?,?) ON CONFLICT DO UPDATE SET"
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

int gw_store_energy_add(struct gw_store *s, const struct gw_job *j, double kwh, double co2e_g,
                        int64_t now_us) {
  if (s->failing_since_us)
    return s->error; /* the job's row keeps its total; the attempt's row misses this part */
  sqlite3_stmt *st = prep(s, "INSERT INTO cost(job, attempt, user, instance, usd, on_demand_usd,"
                             " seconds, updated_us, energy_kwh, co2e_g) VALUES(?,?,?,?,0,0,0,?,?,?)"
                             " ON CONFLICT DO UPDATE SET energy_kwh=energy_kwh+excluded.energy_kwh,"
                             " co2e_g=co2e_g+excluded.co2e_g");
  if (st) {
    sqlite3_bind_int64(st, 1, j->id);
    sqlite3_bind_int(st, 2, j->attempt);
    bind_text(st, 3, j->user);
    bind_text(st, 4, j->instance);
    sqlite3_bind_int64(st, 5, now_us);
    sqlite3_bind_double(st, 6, kwh);
    sqlite3_bind_double(st, 7, co2e_g);
  }
  return run(s, st);
}

int gw_store_cost_by_user_group(struct gw_store *s, size_t max, json_t **ret) {
  sqlite3_stmt *st = prep(s, "SELECT c.user, COALESCE(u.grp,''), SUM(c.usd), SUM(c.on_demand_usd),"
                             " SUM(c.energy_kwh), SUM(c.co2e_g) FROM cost c LEFT JOIN users u"
                             " ON u.name=c.user GROUP BY c.user ORDER BY c.user LIMIT ?1");
  if (!st)
    return SL_ESQLITE;
  sqlite3_bind_int64(st, 1, (sqlite3_int64)max);
  json_t *arr = json_array();
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    json_array_append_new(arr, json_pack("{s:s,s:s,s:f,s:f,s:f,s:f}", "user",
                                         (const char *)sqlite3_column_text(st, 0), "group",
                                         (const char *)sqlite3_column_text(st, 1), "usd",
                                         sqlite3_column_double(st, 2), "on_demand_usd",
                                         sqlite3_column_double(st, 3), "energy_kwh",
                                         sqlite3_column_double(st, 4), "co2e_g",
                                         sqlite3_column_double(st, 5)));
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    json_decref(arr);
    return SL_ESQLITE;
  }
  *ret = arr;
  return 0;
}

int gw_store_metric_history(struct gw_store *s, const struct gw_store_history_fns *fns, void *ctx) {
  sqlite3_stmt *st = prep(s, "SELECT write_ms, upload_ms FROM checkpoints");
  if (!st)
    return SL_ESQLITE;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    fns->checkpoint(ctx, sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1));
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE)
    return SL_ESQLITE;
  /* only the jobs with a preempted attempt can have recovered or lost steps */
  st = prep(s, "SELECT job, time_us, kind, json_extract(body, '$.state'),"
               " COALESCE(json_extract(body, '$.steps_lost'), 0),"
               " COALESCE(json_extract(body, '$.notice'), 0) FROM events WHERE job IN"
               " (SELECT DISTINCT job FROM attempts WHERE outcome='preempted')"
               " AND kind IN ('preempted', 'state') ORDER BY job, seq");
  if (!st)
    return SL_ESQLITE;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *state = (const char *)sqlite3_column_text(st, 3);
    fns->event(ctx, sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1),
               (const char *)sqlite3_column_text(st, 2), state ? state : "",
               sqlite3_column_int64(st, 4), sqlite3_column_int(st, 5) != 0);
  }
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? 0 : SL_ESQLITE;
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

int gw_store_cost_by(struct gw_store *s, enum gw_cost_by what, const char *user, int64_t since_us,
                     size_t max, json_t **ret) {
  static const char *const keys[] = {
    [GW_COST_BY_USER] = "c.user", [GW_COST_BY_JOB] = "c.job",
    [GW_COST_BY_TYPE] = "COALESCE(a.instance_type,'')",
    [GW_COST_BY_DAY] = "date(c.updated_us / 1000000, 'unixepoch')",
  };
  if ((unsigned)what > GW_COST_BY_DAY)
    return -EINVAL;
  char sql[512];
  snprintf(sql, sizeof sql, "SELECT %s AS k, SUM(c.usd), SUM(c.on_demand_usd), SUM(c.seconds),"
           " SUM(c.energy_kwh), SUM(c.co2e_g)"
           " FROM cost c LEFT JOIN attempts a ON a.job=c.job AND a.attempt=c.attempt"
           " WHERE (?1 IS NULL OR c.user=?1) AND c.updated_us>=?2 GROUP BY k ORDER BY %s LIMIT ?3",
           keys[what], what == GW_COST_BY_DAY ? "k" : "2 DESC, k");
  sqlite3_stmt *st = prep(s, sql);
  if (!st)
    return SL_ESQLITE;
  if (user)
    bind_text(st, 1, user);
  sqlite3_bind_int64(st, 2, since_us);
  sqlite3_bind_int64(st, 3, (sqlite3_int64)max);
  json_t *arr = json_array();
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    json_t *key = sqlite3_column_type(st, 0) == SQLITE_INTEGER
                      ? json_integer(sqlite3_column_int64(st, 0))
                      : json_string((const char *)sqlite3_column_text(st, 0));
    json_array_append_new(arr, json_pack("{s:o*,s:f,s:f,s:f,s:f,s:f}", "key", key, "usd",
                                         sqlite3_column_double(st, 1), "on_demand_usd",
                                         sqlite3_column_double(st, 2), "seconds",
                                         sqlite3_column_double(st, 3), "energy_kwh",
                                         sqlite3_column_double(st, 4), "co2e_g",
                                         sqlite3_column_double(st, 5)));
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    json_decref(arr);
    return SL_ESQLITE;
  }
  *ret = arr;
  return 0;
}

/* Runs sql, whose rows are (TEXT name, INTEGER count), into obj. */
static int count_rows(struct gw_store *s, const char *sql, json_t *obj) {
  sqlite3_stmt *st = prep(s, sql);
  if (!st)
    return SL_ESQLITE;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *k = (const char *)sqlite3_column_text(st, 0);
    json_object_set_new(obj, k ? k : "", json_integer(sqlite3_column_int64(st, 1)));
  }
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? 0 : SL_ESQLITE;
}

int gw_store_job_counts(struct gw_store *s, json_t **ret) {
  json_t *o = json_object();
  int r = o ? count_rows(s, "SELECT state, COUNT(*) FROM jobs GROUP BY state", o) : -ENOMEM;
  if (r < 0) {
    json_decref(o);
    return r;
  }
  *ret = o;
  return 0;
}

int gw_store_counts(struct gw_store *s, json_t **ret) {
  json_t *o = json_pack("{s:{},s:{s:i,s:i}}", "jobs", "preemptions", "notice", 0, "no_notice", 0);
  if (!o)
    return -ENOMEM;
  int r = count_rows(s, "SELECT state, COUNT(*) FROM jobs GROUP BY state", json_object_get(o, "jobs"));
  /* the preempted events say whether a notice came first; only the jobs
   * with a preempted attempt are read (events has no index on kind) */
  if (r == 0)
    r = count_rows(s, "SELECT CASE WHEN json_extract(body, '$.notice') THEN 'notice'"
                      " ELSE 'no_notice' END AS k, COUNT(*) FROM events WHERE job IN"
                      " (SELECT DISTINCT job FROM attempts WHERE outcome='preempted')"
                      " AND kind='preempted' GROUP BY k", json_object_get(o, "preemptions"));
  if (r < 0) {
    json_decref(o);
    return r;
  }
  *ret = o;
  return 0;
}

int gw_store_job_counts_by_user(struct gw_store *s, json_t **ret) {
  sqlite3_stmt *st = prep(s, "SELECT user, state, COUNT(*) FROM jobs GROUP BY user, state");
  if (!st)
    return SL_ESQLITE;
  json_t *o = json_object();
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *u = (const char *)sqlite3_column_text(st, 0);
    const char *k = (const char *)sqlite3_column_text(st, 1);
    json_t *per = json_object_get(o, u ? u : "");
    if (!per)
      json_object_set_new(o, u ? u : "", per = json_object());
    json_object_set_new(per, k ? k : "", json_integer(sqlite3_column_int64(st, 2)));
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE || !o) {
    json_decref(o);
    return SL_ESQLITE;
  }
  *ret = o;
  return 0;
}

int gw_store_preemption_events(struct gw_store *s, const char *user, size_t max, json_t **ret) {
  /* as in gw_store_counts, only jobs with a preempted attempt are read */
  sqlite3_stmt *st = prep(s, "SELECT e.body, j.user FROM events e JOIN jobs j ON j.id=e.job"
                             " WHERE e.job IN (SELECT DISTINCT job FROM attempts WHERE"
                             " outcome='preempted') AND e.kind IN ('preempted','resumed')"
                             " AND (?1 IS NULL OR j.user=?1) ORDER BY e.time_us DESC, e.job DESC,"
                             " e.seq DESC LIMIT ?2");
  if (!st)
    return SL_ESQLITE;
  if (user)
    bind_text(st, 1, user);
  sqlite3_bind_int64(st, 2, (sqlite3_int64)max);
  json_t *arr = json_array();
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    json_t *ev = parse_text(st, 0);
    if (!json_is_object(ev)) {
      json_decref(ev);
      continue;
    }
    json_object_set_new(ev, "user", json_string((const char *)sqlite3_column_text(st, 1)));
    json_array_insert_new(arr, 0, ev);
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE || !arr) {
    json_decref(arr);
    return SL_ESQLITE;
  }
  *ret = arr;
  return 0;
}

static int instance_put(struct gw_store *s, const struct gw_instance_row *row) {
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

/* ---- kept writes ----
 *
 * A write of the gateway's own state (a job's row and event, a checkpoint,
 * an attempt, a cost, an instance) that the database refuses (a full disk,
 * an I/O error, a lock held past the busy timeout) is kept here, and every
 * later one joins it, in order: the database only ever holds a prefix of
 * what the gateway wrote, so a job's end is never there without the
 * checkpoints and metrics recorded before it. gw_store_retry writes them
 * all in one transaction. Rows keep only their newest copy (the one
 * transaction hides the ones in between); events, attempts and costs keep
 * each. Metric and output events beyond KEPT_METRICS_MAX are dropped and
 * counted; every other event is kept whatever the count. */

#define KEPT_METRICS_MAX 100000

enum kept_kind { KEPT_EVENT, KEPT_ATTEMPT_BEGIN, KEPT_ATTEMPT_END, KEPT_COST };

struct kept_op {
  enum kept_kind kind;
  int64_t job;
  int attempt;
  json_t *event;                    /* KEPT_EVENT: owned, its time_us set */
  struct gw_checkpoint_row *ckpt;   /* KEPT_EVENT: owned, or NULL */
  struct gw_job *row;               /* KEPT_ATTEMPT_BEGIN, KEPT_COST: owned copy without spec */
  char outcome[16];
  int64_t from_step, now_us;
  double usd, on_demand_usd, seconds;
};

static bool refused(int r) {
  return r == -ENOSPC || r == -EIO || r == -EBUSY || r == -EROFS || r == SL_ESQLITE;
}

static void note_refused(struct gw_store *s, int r) {
  s->error = r;
  if (s->failing_since_us)
    return;
  s->failing_since_us = sl_time_real_us();
  sl_warn(T, "%s (%s): the gateway keeps its state writes in memory and retries them; new work"
          " is refused until they succeed", r == -ENOSPC ? "the state disk is full" :
          "the state database refuses writes", s->message);
}

static void op_done(struct kept_op *op) {
  json_decref(op->event);
  free(op->ckpt);
  free(op->row);
}

static struct kept_op *op_new(struct gw_store *s, enum kept_kind kind) {
  if (s->n_ops == s->cap_ops) {
    size_t cap = s->cap_ops ? 2 * s->cap_ops : 64;
    struct kept_op *g = realloc(s->ops, cap * sizeof *g);
    if (!g)
      return NULL;
    s->ops = g;
    s->cap_ops = cap;
  }
  struct kept_op *op = &s->ops[s->n_ops++];
  memset(op, 0, sizeof *op);
  op->kind = kind;
  return op;
}

/* A copy of j's row fields (no spec, no gang), owned. */
static struct gw_job *row_copy(const struct gw_job *j) {
  struct gw_job *c = malloc(sizeof *c);
  if (c) {
    *c = *j;
    c->spec = NULL;
    c->gang = NULL;
  }
  return c;
}

static struct gw_job *kept_row(struct gw_store *s, int64_t id) {
  for (size_t i = 0; i < s->n_rows; i++)
    if (s->rows[i].id == id)
      return &s->rows[i];
  return NULL;
}

static int keep_row(struct gw_store *s, const struct gw_job *j) {
  json_t *spec = j->spec ? json_deep_copy(j->spec) : NULL;
  if (j->spec && !spec)
    return -ENOMEM;
  struct gw_job *row = kept_row(s, j->id);
  if (!row) {
    if (s->n_rows == s->cap_rows) {
      size_t cap = s->cap_rows ? 2 * s->cap_rows : 16;
      struct gw_job *g = realloc(s->rows, cap * sizeof *g);
      if (!g) {
        json_decref(spec);
        return -ENOMEM;
      }
      s->rows = g;
      s->cap_rows = cap;
    }
    row = &s->rows[s->n_rows++];
  } else {
    gw_job_done(row);
  }
  *row = *j;
  row->spec = spec;
  row->gang = NULL;
  return 0;
}

static int keep_job(struct gw_store *s, const struct gw_job *j, json_t *event,
                    const struct gw_checkpoint_row *ck) {
  int r = keep_row(s, j);
  if (r < 0 || !event)
    return r < 0 ? r : 1;
  const char *kind = sl_json_get_str(event, "event", "");
  bool droppable = !strcmp(kind, "metric") || !strcmp(kind, "output");
  if (droppable && s->n_kept_metrics >= KEPT_METRICS_MAX) {
    s->dropped++;
    return SL_ELIMIT;
  }
  json_t *copy = json_deep_copy(event);
  struct gw_checkpoint_row *ckc = ck ? malloc(sizeof *ckc) : NULL;
  struct kept_op *op = copy && (!ck || ckc) ? op_new(s, KEPT_EVENT) : NULL;
  if (!op) {
    json_decref(copy);
    free(ckc);
    return -ENOMEM;
  }
  if (!json_is_integer(json_object_get(copy, "time_us"))) /* when it happened, not when saved */
    json_object_set_new(copy, "time_us", json_integer(sl_time_real_us()));
  if (ckc)
    *ckc = *ck;
  op->job = j->id;
  op->attempt = j->attempt;
  op->event = copy;
  op->ckpt = ckc;
  s->n_kept_metrics += droppable;
  return 1;
}

int gw_store_attempt_begin(struct gw_store *s, const struct gw_job *j, int64_t from_step,
                           int64_t now_us) {
  int r = s->failing_since_us ? SL_ESQLITE : attempt_begin(s, j, from_step, now_us);
  if (r >= 0 || !refused(r))
    return r;
  if (!s->failing_since_us)
    note_refused(s, r);
  struct gw_job *row = row_copy(j);
  struct kept_op *op = row ? op_new(s, KEPT_ATTEMPT_BEGIN) : NULL;
  if (!op) {
    free(row);
    return -ENOMEM;
  }
  op->row = row;
  op->from_step = from_step;
  op->now_us = now_us;
  return 1;
}

int gw_store_attempt_end(struct gw_store *s, int64_t job, int attempt, const char *outcome,
                         int64_t now_us) {
  int r = s->failing_since_us ? SL_ESQLITE : attempt_end(s, job, attempt, outcome, now_us);
  if (r >= 0 || !refused(r))
    return r;
  if (!s->failing_since_us)
    note_refused(s, r);
  struct kept_op *op = op_new(s, KEPT_ATTEMPT_END);
  if (!op)
    return -ENOMEM;
  op->job = job;
  op->attempt = attempt;
  snprintf(op->outcome, sizeof op->outcome, "%s", outcome ? outcome : "");
  op->now_us = now_us;
  return 1;
}

int gw_store_cost_add(struct gw_store *s, const struct gw_job *j, double usd,
                      double on_demand_usd, double seconds, int64_t now_us) {
  int r = s->failing_since_us ? SL_ESQLITE : cost_add(s, j, usd, on_demand_usd, seconds, now_us);
  if (r >= 0 || !refused(r))
    return r;
  if (!s->failing_since_us)
    note_refused(s, r);
  struct gw_job *row = row_copy(j);
  struct kept_op *op = row ? op_new(s, KEPT_COST) : NULL;
  if (!op) {
    free(row);
    return -ENOMEM;
  }
  op->row = row;
  op->usd = usd;
  op->on_demand_usd = on_demand_usd;
  op->seconds = seconds;
  op->now_us = now_us;
  return 1;
}

int gw_store_instance_put(struct gw_store *s, const struct gw_instance_row *row) {
  int r = s->failing_since_us ? SL_ESQLITE : instance_put(s, row);
  if (r >= 0 || !refused(r))
    return r;
  if (!s->failing_since_us)
    note_refused(s, r);
  for (size_t i = 0; i < s->n_insts; i++)
    if (!strcmp(s->insts[i].id, row->id)) {
      s->insts[i] = *row;
      return 1;
    }
  if (s->n_insts == s->cap_insts) {
    size_t cap = s->cap_insts ? 2 * s->cap_insts : 16;
    struct gw_instance_row *g = realloc(s->insts, cap * sizeof *g);
    if (!g)
      return -ENOMEM;
    s->insts = g;
    s->cap_insts = cap;
  }
  s->insts[s->n_insts++] = *row;
  return 1;
}

/* Every kept write, in order, inside the caller's transaction. */
static int write_kept(struct gw_store *s) {
  int r = 0;
  for (size_t i = 0; i < s->n_ops && r >= 0; i++) {
    struct kept_op *op = &s->ops[i];
    switch (op->kind) {
    case KEPT_EVENT: {
      const struct gw_job *row = kept_row(s, op->job);
      int64_t seq = 0;
      r = append_locked(s, op->job, op->event, &seq);
      if (r == SL_ENAME) { /* its job is gone from the database: nothing to attach it to */
        sl_warn(T, "a kept event of job %lld has no job row; dropped", (long long)op->job);
        s->dropped++;
        json_decref(op->event);
        op->event = NULL;
        r = 0;
        break;
      }
      if (r >= 0 && op->ckpt && row)
        r = record_checkpoint(s, row, op->attempt, op->ckpt,
                              sl_json_get_int(op->event, "time_us", op->now_us));
      break;
    }
    case KEPT_ATTEMPT_BEGIN:
      r = attempt_begin(s, op->row, op->from_step, op->now_us);
      break;
    case KEPT_ATTEMPT_END:
      r = attempt_end(s, op->job, op->attempt, op->outcome, op->now_us);
      break;
    case KEPT_COST:
      r = cost_add(s, op->row, op->usd, op->on_demand_usd, op->seconds, op->now_us);
      break;
    }
  }
  for (size_t i = 0; i < s->n_rows && r >= 0; i++)
    r = write_job(s, &s->rows[i]);
  for (size_t i = 0; i < s->n_insts && r >= 0; i++)
    r = instance_put(s, &s->insts[i]);
  return r;
}

static void free_kept(struct kept_op *ops, size_t n_ops, struct gw_job *rows, size_t n_rows,
                      struct gw_instance_row *insts) {
  for (size_t i = 0; i < n_ops; i++)
    op_done(&ops[i]);
  free(ops);
  for (size_t i = 0; i < n_rows; i++)
    gw_job_done(&rows[i]);
  free(rows);
  free(insts);
}

int gw_store_retry(struct gw_store *s) {
  if (!s->failing_since_us)
    return 0;
  if (s->error == -ENOSPC) /* the log's pages go back into the database: room for the retry */
    sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
  int r = begin(s);
  if (r == 0 && (r = write_kept(s)) == 0)
    r = commit(s);
  if (r < 0) {
    rollback(s, r);
    if (refused(r))
      s->error = r;
    /* events numbered by the attempt get their numbers again next time */
    return r;
  }
  /* taken out first: a listener may write again (directly, now) */
  struct kept_op *ops = s->ops;
  struct gw_job *rows = s->rows;
  size_t n_ops = s->n_ops, n_rows = s->n_rows, n = s->n_ops + s->n_rows + s->n_insts;
  free_kept(NULL, 0, NULL, 0, s->insts);
  s->ops = NULL;
  s->rows = NULL;
  s->insts = NULL;
  s->n_ops = s->cap_ops = s->n_rows = s->cap_rows = s->n_insts = s->cap_insts = 0;
  s->n_kept_metrics = 0;
  s->failing_since_us = 0;
  s->error = 0;
  sl_info(T, "the state database takes writes again: %zu kept writes saved", n);
  if (s->dropped)
    sl_warn(T, "%llu metric and output events were dropped while writes were refused",
            (unsigned long long)s->dropped);
  for (size_t i = 0; i < n_ops; i++) {
    struct kept_op *op = &ops[i];
    struct gw_job *row = NULL;
    for (size_t k = 0; k < n_rows && op->kind == KEPT_EVENT && op->event; k++)
      if (rows[k].id == op->job)
        row = &rows[k];
    if (row && s->saved_fn) {
      row->last_seq = sl_json_get_int(op->event, "seq", row->last_seq);
      s->saved_fn(s->saved_ctx, row, op->event, op->attempt, op->ckpt != NULL);
    }
  }
  free_kept(ops, n_ops, rows, n_rows, NULL);
  return (int)(n > INT32_MAX ? INT32_MAX : n);
}

bool gw_store_keeps_job(const struct gw_store *s, int64_t job) {
  for (size_t i = 0; i < s->n_rows; i++)
    if (s->rows[i].id == job)
      return true;
  return false;
}

void gw_store_health(const struct gw_store *s, struct gw_store_health *ret) {
  memset(ret, 0, sizeof *ret);
  ret->failing = s->failing_since_us != 0;
  ret->error = s->error;
  ret->since_us = s->failing_since_us;
  ret->kept = s->n_ops + s->n_rows + s->n_insts;
  ret->dropped = s->dropped;
  snprintf(ret->message, sizeof ret->message, "%s", ret->failing ? s->message : "");
}

void gw_store_set_saved_fn(struct gw_store *s, gw_store_saved_fn fn, void *ctx) {
  s->saved_fn = fn;
  s->saved_ctx = ctx;
}

/* ---- budgets ---------------------------------------------------------- */

int gw_store_budget_fire(struct gw_store *s, const char *month, const char *scope,
                         const char *name, const char *kind, double threshold_pct,
                         double spent_usd, double budget_usd, int64_t now_us) {
  sqlite3_stmt *st = prep(s, "INSERT OR IGNORE INTO budget_fired(month, scope, name, kind,"
                             " threshold_pct, spent_usd, budget_usd, time_us)"
                             " VALUES(?1,?2,?3,?4,?5,?6,?7,?8)");
  if (!st)
    return SL_ESQLITE;
  bind_text(st, 1, month);
  bind_text(st, 2, scope);
  bind_text(st, 3, name);
  bind_text(st, 4, kind);
  sqlite3_bind_double(st, 5, threshold_pct);
  sqlite3_bind_double(st, 6, spent_usd);
  sqlite3_bind_double(st, 7, budget_usd);
  sqlite3_bind_int64(st, 8, now_us);
  int r = run(s, st);
  return r < 0 ? r : sqlite3_changes(s->db) > 0;
}

int gw_store_budget_fired(struct gw_store *s, const char *month, json_t **ret) {
  sqlite3_stmt *st = prep(s, "SELECT scope, name, kind, threshold_pct, spent_usd, budget_usd, time_us"
                             " FROM budget_fired WHERE month=?1 ORDER BY time_us");
  if (!st)
    return SL_ESQLITE;
  bind_text(st, 1, month);
  json_t *arr = json_array();
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    json_array_append_new(arr, json_pack("{s:s,s:s,s:s,s:f,s:f,s:f,s:I}",
                                         "scope", (const char *)sqlite3_column_text(st, 0),
                                         "name", (const char *)sqlite3_column_text(st, 1),
                                         "kind", (const char *)sqlite3_column_text(st, 2),
                                         "threshold_pct", sqlite3_column_double(st, 3),
                                         "spent_usd", sqlite3_column_double(st, 4),
                                         "budget_usd", sqlite3_column_double(st, 5),
                                         "time_us", (json_int_t)sqlite3_column_int64(st, 6)));
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    json_decref(arr);
    return SL_ESQLITE;
  }
  *ret = arr;
  return 0;
}

int gw_store_budget_override_set(struct gw_store *s, const char *scope, const char *name,
                                 double monthly_usd, const char *set_by, int64_t now_us) {
  sqlite3_stmt *st = prep(s, "INSERT INTO budget_override(scope, name, monthly_usd, set_by, time_us)"
                             " VALUES(?1,?2,?3,?4,?5) ON CONFLICT(scope, name) DO UPDATE SET"
                             " monthly_usd=excluded.monthly_usd, set_by=excluded.set_by,"
                             " time_us=excluded.time_us");
  if (!st)
    return SL_ESQLITE;
  bind_text(st, 1, scope);
  bind_text(st, 2, name);
  sqlite3_bind_double(st, 3, monthly_usd);
  bind_text(st, 4, set_by);
  sqlite3_bind_int64(st, 5, now_us);
  return run(s, st);
}

int gw_store_budget_overrides(struct gw_store *s, json_t **ret) {
  sqlite3_stmt *st = prep(s, "SELECT scope, name, monthly_usd, set_by, time_us FROM budget_override");
  if (!st)
    return SL_ESQLITE;
  json_t *arr = json_array();
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    json_array_append_new(arr, json_pack("{s:s,s:s,s:f,s:s,s:I}",
                                         "scope", (const char *)sqlite3_column_text(st, 0),
                                         "name", (const char *)sqlite3_column_text(st, 1),
                                         "monthly_usd", sqlite3_column_double(st, 2),
                                         "set_by", (const char *)sqlite3_column_text(st, 3),
                                         "time_us", (json_int_t)sqlite3_column_int64(st, 4)));
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    json_decref(arr);
    return SL_ESQLITE;
  }
  *ret = arr;
  return 0;
}

/* ---- run records ------------------------------------------------------------ */

int gw_store_record_put(struct gw_store *s, int64_t job, const json_t *body) {
  char *text = json_is_object(body) ? json_dumps(body, JSON_COMPACT) : NULL;
  if (!text)
    return json_is_object(body) ? -ENOMEM : SL_ETYPE;
  sqlite3_stmt *st = prep(s, "INSERT OR REPLACE INTO records(job, body) VALUES(?,?)");
  if (st) {
    sqlite3_bind_int64(st, 1, job);
    bind_text(st, 2, text);
  }
  free(text);
  return run(s, st);
}

int gw_store_record_get(struct gw_store *s, int64_t job, json_t **ret) {
  sqlite3_stmt *st = prep(s, "SELECT body FROM records WHERE job=?");
  if (!st)
    return SL_ESQLITE;
  sqlite3_bind_int64(st, 1, job);
  int rc = sqlite3_step(st);
  json_t *body = rc == SQLITE_ROW ? parse_text(st, 0) : NULL;
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE)
    return db_err(s, "record");
  if (!json_is_object(body)) {
    json_decref(body);
    return SL_ENAME;
  }
  *ret = body;
  return 0;
}

int gw_store_job_history(struct gw_store *s, int64_t job, json_t **ret_attempts,
                         json_t **ret_checkpoints) {
  sqlite3_stmt *a = prep(s, "SELECT attempt, instance, instance_type, zone, spot, price,"
                            " on_demand_price, from_step, started_us, ended_us, outcome"
                            " FROM attempts WHERE job=? ORDER BY attempt");
  sqlite3_stmt *c = prep(s, "SELECT attempt, step, key, bytes, write_ms, upload_ms, time_us"
                            " FROM checkpoints WHERE job=? ORDER BY step");
  if (!a || !c) {
    sqlite3_finalize(a);
    sqlite3_finalize(c);
    return SL_ESQLITE;
  }
  json_t *atts = json_array(), *cks = json_array();
  char inst[64], type[64], zone[64], outcome[32];
  sqlite3_bind_int64(a, 1, job);
  while (sqlite3_step(a) == SQLITE_ROW) {
    col_text(a, 1, inst, sizeof inst);
    col_text(a, 2, type, sizeof type);
    col_text(a, 3, zone, sizeof zone);
    col_text(a, 10, outcome, sizeof outcome);
    json_t *o = json_pack("{s:i,s:s,s:s,s:s,s:s,s:o,s:o,s:I,s:I}", "attempt",
                          sqlite3_column_int(a, 0), "instance", inst, "instance_type", type, "zone",
                          zone, "market", sqlite3_column_int(a, 4) ? "spot" : "on-demand",
                          "usd_per_hour", sl_json_real(sqlite3_column_double(a, 5)),
                          "on_demand_usd_per_hour", sl_json_real(sqlite3_column_double(a, 6)),
                          "from_step", (json_int_t)sqlite3_column_int64(a, 7), "started_us",
                          (json_int_t)sqlite3_column_int64(a, 8));
    if (o && sqlite3_column_type(a, 9) != SQLITE_NULL)
      json_object_set_new(o, "ended_us", json_integer(sqlite3_column_int64(a, 9)));
    if (o && *outcome)
      json_object_set_new(o, "outcome", json_string(outcome));
    json_array_append_new(atts, o);
  }
  sqlite3_bind_int64(c, 1, job);
  char key[256];
  while (sqlite3_step(c) == SQLITE_ROW) {
    col_text(c, 2, key, sizeof key);
    json_array_append_new(cks, json_pack("{s:i,s:I,s:s,s:I,s:I,s:I,s:I}", "attempt",
                                         sqlite3_column_int(c, 0), "step",
                                         (json_int_t)sqlite3_column_int64(c, 1), "key", key,
                                         "bytes", (json_int_t)sqlite3_column_int64(c, 3),
                                         "write_ms", (json_int_t)sqlite3_column_int64(c, 4),
                                         "upload_ms", (json_int_t)sqlite3_column_int64(c, 5),
                                         "time_us", (json_int_t)sqlite3_column_int64(c, 6)));
  }
  sqlite3_finalize(a);
  sqlite3_finalize(c);
  *ret_attempts = atts;
  *ret_checkpoints = cks;
  return 0;
}
