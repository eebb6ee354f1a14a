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
 * the flush of the write-ahead log. Jobs, their events, checkpoints and
 * instances are in store_jobs.c, a session's state in store_session.c, the
 * writes kept while the database refuses them in store_kept.c, the
 * reports, budgets and run records in store_report.c, the thinning of a
 * long job's metrics and output in store_thin.c; store_int.h is what they
 * share. */
#include "store_int.h"

#include "sl_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
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
