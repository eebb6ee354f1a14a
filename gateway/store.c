/* The store: SQLite behind gateway-shaped functions.
 *
 * Invariants: the schema_version table holds one row, the version of the
 * newest migration applied; migrations run in order, each in its own
 * transaction, so a crash mid-way leaves a database at some whole version.
 * Writers take the lock up front (BEGIN IMMEDIATE) so that read-then-write
 * sequences such as event numbering cannot interleave across handles: the
 * next seq is jobs.last_seq + 1 and both rows change in one transaction.
 *
 * This file holds the core: open, migrations, the SQLite helpers, users,
 * jobs, their events and checkpoints. A session's state is in
 * store_session.c, the writes kept while the database refuses them in
 * store_kept.c, the reports, budgets and run records in store_report.c,
 * the thinning of a long job's metrics and output in store_thin.c;
 * store_int.h is what they share. */
#include "store_int.h"

#include "sl_file.h"
#include "sl_time.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define T GW_STORE_TOPIC

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
  /* 7: the market's history (markethist.h), in chunks of ticks */
  "CREATE TABLE market_history(provider TEXT NOT NULL, type TEXT NOT NULL, zone TEXT NOT NULL,"
  "  chunk INTEGER NOT NULL, end_us INTEGER NOT NULL, up BLOB NOT NULL, price BLOB NOT NULL,"
  "  PRIMARY KEY(provider, type, zone, chunk));",
  /* 8: what placement and deadlines learned (placemem.h, sched_deadline.c) */
  "CREATE TABLE learned(name TEXT PRIMARY KEY, body TEXT NOT NULL, time_us INTEGER NOT NULL);",
  /* 9: jobs of deleted sessions whose store objects are still to be removed (purge.h) */
  "CREATE TABLE purge(job INTEGER PRIMARY KEY, queued_us INTEGER NOT NULL);",
  /* 10: notebooks' stored data files (store_data.c), from the jobs that named them so far */
  "CREATE TABLE uploads(user TEXT NOT NULL, sha256 TEXT NOT NULL, bytes INTEGER NOT NULL,"
  "  path TEXT, first_us INTEGER, last_us INTEGER, deleting INTEGER NOT NULL DEFAULT 0,"
  "  PRIMARY KEY(user, sha256));"
  "INSERT OR IGNORE INTO uploads(user, sha256, bytes, path, first_us, last_us)"
  "  SELECT user, json_extract(spec, '$.data_upload.sha256'), json_extract(spec, '$.data_upload.bytes'),"
  "    " GW_STORE_DATA_PATH ", MIN(created_us), MAX(created_us)"
  "  FROM (SELECT user, created_us, CASE WHEN json_valid(spec) THEN spec ELSE '{}' END AS spec FROM jobs)"
  "  WHERE json_type(spec, '$.data_upload.key')='text'"
  "    AND json_type(spec, '$.data_upload.bytes')='integer' GROUP BY 1, 2;"
  "INSERT OR IGNORE INTO uploads(user, sha256, bytes, path, first_us, last_us)"
  "  SELECT j.user, json_extract(f.value, '$.sha256'), json_extract(f.value, '$.bytes'),"
  "    " GW_STORE_DATA_PATH " || '/' || json_extract(f.value, '$.name'), MIN(j.created_us),"
  "    MAX(j.created_us)"
  "  FROM (SELECT user, created_us, CASE WHEN json_valid(spec) THEN spec ELSE '{}' END AS spec FROM jobs)"
  "    AS j, json_each(j.spec, '$.data_upload.files') AS f"
  "  WHERE json_type(f.value, '$.sha256')='text'"
  "    AND json_type(f.value, '$.bytes')='integer' GROUP BY 1, 2;",
  /* 11: multipart uploads workers began, until stored or aborted (store_multipart.c) */
  "CREATE TABLE multipart(upload_id TEXT PRIMARY KEY, key TEXT NOT NULL, instance TEXT NOT NULL,"
  "  seen_us INTEGER NOT NULL);"
  "CREATE INDEX multipart_instance ON multipart(instance, key);",
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
int gw_store_db_err(struct gw_store *s, const char *what) {
  int r = err_from_sqlite(s->db, sqlite3_extended_errcode(s->db));
  snprintf(s->message, sizeof s->message, "%s: %s", what, sqlite3_errmsg(s->db));
  sl_debug(T, "%s", s->message);
  return r;
}

const char *gw_store_last_error(const struct gw_store *s) {
  return s->message;
}

int gw_store_db_exec(struct gw_store *s, const char *sql) {
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


int gw_store_schema_version(struct gw_store *s) {
  sqlite3_stmt *st = prep(s, "SELECT version FROM schema_version");
  if (!st)
    return SL_ESQLITE;
  int rc = sqlite3_step(st);
  int v = rc == SQLITE_ROW    ? sqlite3_column_int(st, 0)
          : rc == SQLITE_DONE ? 0
                              : gw_store_db_err(s, "schema version");
  sqlite3_finalize(st);
  return v;
}

static int migrate(struct gw_store *s, char *err, size_t err_size) {
  if (gw_store_db_exec(s, "CREATE TABLE IF NOT EXISTS schema_version("
                          "version INTEGER NOT NULL)") < 0)
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
    if (begin(s) < 0 || gw_store_db_exec(s, migrations[v - 1]) < 0 ||
        gw_store_db_exec(s, set) < 0 || commit(s) < 0) {
      snprintf(err, err_size, "migration to schema version %d failed: %s", v,
               sqlite3_errmsg(s->db));
      return rollback(s, SL_ESQLITE);
    }
    sl_info(T, "database migrated to schema version %d", v);
  }
  return 0;
}

/* SQLite's quick check of every page, before anything is written: a
 * database damaged on disk is refused, as it is, rather than written on
 * (the rows in its bad pages would be lost, or the damage spread). */
static int check_whole(struct gw_store *s, const char *path, char *err, size_t err_size) {
  sqlite3_stmt *st = prep(s, "PRAGMA quick_check(1)");
  int rc = st ? sqlite3_step(st) : SQLITE_ERROR;
  const char *res = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
  int r = 0;
  if (!res || strcmp(res, "ok")) {
    char what[240];
    const char *line = res ? res : sqlite3_errmsg(s->db);
    if (!strncmp(line, "*** in database ", 16) && strchr(line, '\n'))
      line = strchr(line, '\n') + 1; /* the page and what is wrong with it */
    snprintf(what, sizeof what, "%.200s", line);
    for (char *c = what; *c; c++)
      if (*c == '\n')
        *c = ' ';
    snprintf(err, err_size,
             "%s is damaged (SQLite: %s): the gateway does not write to it. Restore it from a "
             "backup, or recover what it holds with `sqlite3 %s .recover | sqlite3 NEW.db` and put "
             "NEW.db in its place",
             path, what, path);
    r = SL_ESQLITE;
  }
  sqlite3_finalize(st);
  sqlite3_db_release_memory(s->db); /* the pages the check read stay out of the cache */
  return r;
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
  if (gw_store_db_exec(s, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                          " PRAGMA foreign_keys=ON") < 0) {
    snprintf(err, err_size, "%s: %s", path, sqlite3_errmsg(s->db));
    goto fail;
  }
  if ((r = check_whole(s, path, err, err_size)) < 0 || (r = migrate(s, err, err_size)) < 0)
    goto fail;
  *ret = s;
  return 0;
fail:
  gw_store_free(s);
  return r;
}

struct gw_store *gw_store_free(struct gw_store *s) {
  if (s) {
    gw_store_free_kept(s->ops, s->n_ops, s->rows, s->n_rows, s->insts);
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
    return rollback(s, gw_store_db_err(s, "list users"));
  /* all rows go and the named ones come back, so tokens may move between
   * users in one sync without tripping the unique index */
  int r = gw_store_db_exec(s, "DELETE FROM users");
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
  int r = SL_EAUTH, rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    col_text(st, 0, ret_name, size);
    r = 0;
  } else if (rc != SQLITE_DONE) {
    r = gw_store_db_err(s, "read users"); /* not a token that is unknown */
  }
  sqlite3_finalize(st);
  return r;
}

/* Appends event inside the caller's transaction. */
int gw_store_append_locked(struct gw_store *s, int64_t job, json_t *event, int64_t *ret_seq) {
  sqlite3_stmt *st = prep(s, "SELECT last_seq FROM jobs WHERE id=?");
  if (!st)
    return SL_ESQLITE;
  sqlite3_bind_int64(st, 1, job);
  int rc = sqlite3_step(st);
  int64_t seq = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) + 1 : 0;
  int r = rc == SQLITE_ROW || rc == SQLITE_DONE ? SL_ENAME : gw_store_db_err(s, "read a job's last event");
  sqlite3_finalize(st);
  if (!seq)
    return r;
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
  if ((r = run(s, st)) < 0)
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

int gw_store_sync(struct gw_store *s) {
  /* What is committed is in the write-ahead log (PATH-wal), written through
   * the page cache: an fdatasync of that file, from any descriptor, puts it on
   * disk. No log: everything is in the database, which a checkpoint flushed. */
  const char *db = sqlite3_db_filename(s->db, "main");
  if (!db || !*db)
    return 0; /* in memory */
  char wal[4200];
  snprintf(wal, sizeof wal, "%s-wal", db);
  int fd = open(wal, O_RDONLY | O_CLOEXEC);
  int r = fd < 0 ? (errno == ENOENT ? 0 : -errno) : fdatasync(fd) < 0 ? -errno : 0;
  if (fd >= 0)
    close(fd);
  if (r == 0 && fd >= 0 && !s->wal_named) { /* the log's name in its folder, once a run */
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", db);
    char *slash = strrchr(dir, '/');
    if (slash)
      *slash = 0;
    r = sl_file_fsync_dir(slash ? (*dir ? dir : "/") : ".");
    s->wal_named = r == 0;
  }
  if (r < 0) {
    sl_warn(T, "cannot flush %s to disk: %s", wal, sl_strerror(r));
    return SL_ESQLITE;
  }
  return 0;
}

int gw_store_event_append(struct gw_store *s, int64_t job, json_t *event, int64_t *ret_seq) {
  int64_t seq;
  int r = begin(s);
  if (r < 0)
    return r;
  if ((r = gw_store_append_locked(s, job, event, &seq)) < 0)
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

int gw_store_write_job(struct gw_store *s, struct gw_job *j) {
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
  if ((r = gw_store_write_job(s, j)) < 0 || (r = gw_store_append_locked(s, j->id, ev, &seq)) < 0) {
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
int gw_store_record_checkpoint(struct gw_store *s, const struct gw_job *j, int attempt,
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
  /* stored whole: the upload its worker made of it is complete (one that a
   * worker gone since began under the same key stays, to be aborted) */
  if (r == 0 && ck->key[0] && (st = prep(s, "DELETE FROM multipart WHERE key=?1 AND instance=?2"))) {
    bind_text(st, 1, ck->key);
    bind_text(st, 2, j->instance);
    r = run(s, st);
  }
  if (r < 0 || strcmp(j->kind, "train") || !j->model[0])
    return r;
  /* the session's model only while it is still the one the job trains: one
   * defined anew since (another architecture) is not trained by it. A name
   * no longer defined keeps the row; defining it again clears it
   * (store_session.c). */
  json_t *now = NULL;
  int d = gw_store_session_def(s, j->user, j->session, j->model, "model", &now);
  if (d < 0 && d != SL_ENAME)
    return d;
  const json_t *trained = json_object_get(json_object_get(j->spec, "model"), "spec");
  bool same = d == SL_ENAME || json_equal(json_object_get(now, "spec"), (json_t *)trained);
  json_decref(now);
  if (!same)
    return 0;
  return gw_store_session_model_set(s, j->user, j->session, j->model, j->id, j->ckpt_step,
                                    j->ckpt_key);
}

/* A new attempt's row, for write_job_txn. */
struct attempt_begin {
  int64_t from_step, now_us;
};

/* j's row, event, ck and an attempt's row (each but the row optional) in
 * one transaction: 0 once committed, else the error (rolled back). */
static int write_job_txn(struct gw_store *s, struct gw_job *j, json_t *event,
                         const struct gw_checkpoint_row *ck, const struct attempt_begin *ab) {
  int64_t seq = j->last_seq;
  int r = begin(s);
  if (r < 0)
    return r;
  if ((r = gw_store_write_job(s, j)) == 0 &&
      (!event || (r = gw_store_append_locked(s, j->id, event, &seq)) == 0) &&
      (!ck || (r = gw_store_record_checkpoint(s, j, j->attempt, ck, sl_time_real_us())) == 0) &&
      (!ab || (r = gw_store_write_attempt(s, j, ab->from_step, ab->now_us)) == 0))
    r = commit(s);
  if (r < 0)
    return rollback(s, r);
  j->last_seq = seq;
  return 0;
}

int gw_store_job_save_checkpoint(struct gw_store *s, struct gw_job *j, json_t *event,
                                 const struct gw_checkpoint_row *ck) {
  if (!s->failing_since_us) {
    int r = write_job_txn(s, j, event, ck, NULL);
    if (r == 0 || !refused(r))
      return r;
    gw_store_note_refused(s, r);
  }
  return gw_store_keep_job(s, j, event, ck);
}

int gw_store_job_save_placed(struct gw_store *s, struct gw_job *j, json_t *event, int64_t from_step,
                             int64_t now_us) {
  int r;
  if (!s->failing_since_us) {
    r = write_job_txn(s, j, event, NULL, &(struct attempt_begin){from_step, now_us});
    if (r == 0 || !refused(r))
      return r;
    gw_store_note_refused(s, r);
  }
  if ((r = gw_store_keep_job(s, j, event, NULL)) < 0)
    return r;
  int a = gw_store_attempt_begin(s, j, from_step, now_us); /* kept after them */
  return a < 0 ? a : r;
}

int gw_store_job_save(struct gw_store *s, struct gw_job *j, json_t *event) {
  return gw_store_job_save_checkpoint(s, j, event, NULL);
}

int gw_store_job_get(struct gw_store *s, int64_t id, struct gw_job *ret) {
  sqlite3_stmt *st = prep(s, "SELECT " JOB_COLS " FROM jobs WHERE id=?");
  if (!st)
    return SL_ESQLITE;
  sqlite3_bind_int64(st, 1, id);
  int r = SL_ENAME, rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    read_job(st, ret);
    r = 0;
  } else if (rc != SQLITE_DONE) {
    r = gw_store_db_err(s, "read a job"); /* not "no such job" */
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
  int rc = SQLITE_DONE;
  while (n < max && (rc = sqlite3_step(st)) == SQLITE_ROW)
    read_job(st, &jobs[n++]);
  /* a list cut short by a failing read would pass for all the jobs there are */
  int r = rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : gw_store_db_err(s, "list jobs");
  sqlite3_finalize(st);
  if (r < 0) {
    gw_store_jobs_free(jobs, n);
    return r;
  }
  *ret = jobs;
  *ret_n = n;
  return 0;
}

void gw_store_jobs_free(struct gw_job *jobs, size_t n) {
  for (size_t i = 0; jobs && i < n; i++)
    gw_job_done(&jobs[i]);
  free(jobs);
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
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if ((int64_t)json_array_size(arr) == limit) {
      more = true;
      rc = SQLITE_DONE;
      break;
    }
    json_array_append_new(arr, parse_text(st, 0));
  }
  /* a read that fails half way (a damaged page) is an error, never the
   * end of the log: a client would take what came for all of it */
  int r = rc == SQLITE_DONE ? 0 : gw_store_db_err(s, "read events");
  sqlite3_finalize(st);
  if (r < 0) {
    json_decref(arr);
    return r;
  }
  *ret = arr;
  *ret_more = more;
  return 0;
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

int gw_store_instances_live(struct gw_store *s, struct gw_instance_row **ret, size_t *ret_n) {
  sqlite3_stmt *st = prep(s, "SELECT id, type, zone, spot, price, on_demand_price, public_key,"
                             " state, job, user, launched_us, provider FROM instances"
                             " WHERE state != 'terminated' LIMIT 10000");
  if (!st)
    return SL_ESQLITE;
  size_t n = 0, cap = 16;
  struct gw_instance_row *rows = calloc(cap, sizeof *rows);
  int err = rows ? 0 : -ENOMEM, rc = SQLITE_DONE;
  /* every live instance or an error: one left out would run on unknown */
  while (err == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (n == cap) {
      struct gw_instance_row *g = realloc(rows, 2 * cap * sizeof *rows);
      if (!g) {
        err = -ENOMEM;
        break;
      }
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
  if (err == 0 && rc != SQLITE_DONE)
    err = gw_store_db_err(s, "list instances");
  sqlite3_finalize(st);
  if (err < 0) {
    free(rows);
    return err;
  }
  *ret = rows;
  *ret_n = n;
  return 0;
}
