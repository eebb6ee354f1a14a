/* The store's inside, shared by its files: store.c (open, migrations,
 * users, jobs, their events and checkpoints), store_session.c (a session's
 * variables, definitions and models), store_kept.c (the writes the database
 * refused, kept in memory and retried) and store_report.c (reports, budgets,
 * run records). Not for callers: they use store.h.
 *
 * Writers take the lock up front (begin: BEGIN IMMEDIATE), so that
 * read-then-write sequences cannot interleave across handles. */
#ifndef GW_STORE_INT_H
#define GW_STORE_INT_H

#include "store.h"

#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#define GW_STORE_TOPIC "gateway.store"

struct kept_op; /* store_kept.c */

struct gw_store {
  sqlite3 *db;
  /* writes the database refused, and every one after them (store_kept.c);
   * a job's and an instance's row only as their newest copy */
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
  bool wal_named;               /* the folder's fsync after the write-ahead log was made */
};

/* store.c */
/* The error in the project's space; the message goes to s->message. */
int gw_store_db_err(struct gw_store *s, const char *what);
int gw_store_db_exec(struct gw_store *s, const char *sql);
/* Appends event inside the caller's transaction. */
int gw_store_append_locked(struct gw_store *s, int64_t job, json_t *event, int64_t *ret_seq);
/* j's row (by j->id), inside the caller's transaction. */
int gw_store_write_job(struct gw_store *s, struct gw_job *j);
int gw_store_record_checkpoint(struct gw_store *s, const struct gw_job *j, int attempt,
                               const struct gw_checkpoint_row *ck, int64_t now_us);
/* j's current attempt's row, begun now_us from from_step (replacing one of
 * that number), inside the caller's transaction. */
int gw_store_write_attempt(struct gw_store *s, const struct gw_job *j, int64_t from_step,
                           int64_t now_us);

/* store_kept.c */
/* Keeps j's row and event (and ck) in memory: 1 when kept, SL_ELIMIT when
 * a metric or output event is dropped. */
int gw_store_keep_job(struct gw_store *s, const struct gw_job *j, json_t *event,
                      const struct gw_checkpoint_row *ck);
/* Records the refusal r; the first one starts the failing time. */
void gw_store_note_refused(struct gw_store *s, int r);
void gw_store_free_kept(struct kept_op *ops, size_t n_ops, struct gw_job *rows, size_t n_rows,
                        struct gw_instance_row *insts);

/* The path a job's spec gives its data definition's first argument (a
 * text("PATH") file, a fashion_mnist("FOLDER")), in SQL over jobs.spec. */
#define GW_STORE_DATA_PATH                                                                       \
  "COALESCE(json_extract(spec, '$.data.spec.args[0].v'), json_extract(spec, '$.data.spec.args[0]'),"  \
  " json_extract(spec, '$.data.args[0].v'), json_extract(spec, '$.data.args[0]'))"

/* The errors after which a write is kept and retried. */
static inline bool refused(int r) {
  return r == -ENOSPC || r == -EIO || r == -EBUSY || r == -EROFS || r == SL_ESQLITE;
}

static inline sqlite3_stmt *prep(struct gw_store *s, const char *sql) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
    sl_err(GW_STORE_TOPIC, "prepare: %s", sqlite3_errmsg(s->db));
    return NULL;
  }
  return st;
}

/* Runs a statement that returns no rows and finalizes it. */
static inline int run(struct gw_store *s, sqlite3_stmt *st) {
  if (!st)
    return SL_ESQLITE;
  int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE && rc != SQLITE_ROW)
    return gw_store_db_err(s, "step");
  return 0;
}

static inline void bind_text(sqlite3_stmt *st, int i, const char *v) {
  sqlite3_bind_text(st, i, v ? v : "", -1, SQLITE_TRANSIENT);
}

static inline void col_text(sqlite3_stmt *st, int i, char *dst, size_t size) {
  const unsigned char *t = sqlite3_column_text(st, i);
  snprintf(dst, size, "%s", t ? (const char *)t : "");
}

static inline json_t *parse_text(sqlite3_stmt *st, int col) {
  const char *t = (const char *)sqlite3_column_text(st, col);
  json_t *v = NULL;
  if (t && sl_json_parse(t, strlen(t), 64, &v, NULL, 0) == 0)
    return v;
  return json_null();
}

static inline int begin(struct gw_store *s) { return gw_store_db_exec(s, "BEGIN IMMEDIATE"); }
static inline int commit(struct gw_store *s) { return gw_store_db_exec(s, "COMMIT"); }
static inline int rollback(struct gw_store *s, int r) {
  sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
  return r;
}

#endif
