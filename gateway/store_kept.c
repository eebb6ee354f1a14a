/* The store's kept writes. A write of the gateway's own state (a job's row
 * and event, a checkpoint, an attempt, a cost, an instance) that the
 * database refuses (a full disk, an I/O error, a lock held past the busy
 * timeout) is kept here, and every later one joins it, in order: the
 * database only ever holds a prefix of what the gateway wrote, so a job's
 * end is never there without the checkpoints and metrics recorded before
 * it. gw_store_retry writes them all in one transaction. Rows keep only
 * their newest copy (the one transaction hides the ones in between);
 * events, attempts and costs keep each. Metric and output events beyond
 * KEPT_METRICS_MAX are dropped and counted; every other event is kept
 * whatever the count.
 *
 * The plain writes of attempts, costs and instances are here too: only the
 * functions that keep them when refused call them. */
#include "store_int.h"

#include "sl_time.h"

#include <errno.h>
#include <stdlib.h>

#define T GW_STORE_TOPIC

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

int gw_store_write_attempt(struct gw_store *s, const struct gw_job *j, int64_t from_step,
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

void gw_store_note_refused(struct gw_store *s, int r) {
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

int gw_store_keep_job(struct gw_store *s, const struct gw_job *j, json_t *event,
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
  int r = s->failing_since_us ? SL_ESQLITE : gw_store_write_attempt(s, j, from_step, now_us);
  if (r >= 0 || !refused(r))
    return r;
  if (!s->failing_since_us)
    gw_store_note_refused(s, r);
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
    gw_store_note_refused(s, r);
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
    gw_store_note_refused(s, r);
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
    gw_store_note_refused(s, r);
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
      r = gw_store_append_locked(s, op->job, op->event, &seq);
      if (r == SL_ENAME) { /* its job is gone from the database: nothing to attach it to */
        char id[24];
        sl_warn(T, "a kept event of job %s has no job row; dropped", gw_job_id_str(op->job, id, sizeof id));
        s->dropped++;
        json_decref(op->event);
        op->event = NULL;
        r = 0;
        break;
      }
      if (r >= 0 && op->ckpt && row)
        r = gw_store_record_checkpoint(s, row, op->attempt, op->ckpt,
                                       sl_json_get_int(op->event, "time_us", op->now_us));
      break;
    }
    case KEPT_ATTEMPT_BEGIN:
      r = gw_store_write_attempt(s, op->row, op->from_step, op->now_us);
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
    r = gw_store_write_job(s, &s->rows[i]);
  for (size_t i = 0; i < s->n_insts && r >= 0; i++)
    r = instance_put(s, &s->insts[i]);
  return r;
}

void gw_store_free_kept(struct kept_op *ops, size_t n_ops, struct gw_job *rows, size_t n_rows,
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
  gw_store_free_kept(NULL, 0, NULL, 0, s->insts);
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
  gw_store_free_kept(ops, n_ops, rows, n_rows, NULL);
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
