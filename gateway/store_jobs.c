/* The store's jobs (store.h): their rows, their events (numbered from
 * jobs.last_seq in the job's own transaction), their checkpoints and
 * energy, and the instances' rows. */
#include "store_int.h"

#include "sl_time.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
  json_t *t = json_object_get(event, "time_us");
  int64_t now = json_is_integer(t) ? json_integer_value(t) : 0;
  if (!now)
    now = sl_time_real_us();
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
