/* The scheduler's writes while the state database refuses them (sched_int.h).
 *
 * The store keeps a refused write, and every one after it, in order
 * (store.h); this file retries them on the loop, from RETRY_MIN_US doubling
 * up to RETRY_MAX_US, and answers for what waits on them: a kept event
 * reaches the bus (clients, the ledger) once it is written, with its
 * number, and a kept checkpoint is acknowledged to its worker only then (the
 * worker prunes older checkpoints on that word). While writes are kept the
 * gateway takes no new work: submit is refused and placement waits, so an
 * instance whose job's end is not written yet is never given another job. */
#include "sched_int.h"

#include "loop.h"

#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define T "gateway.sched"
#define RETRY_MIN_US (100 * SL_US_PER_MS)
#define RETRY_MAX_US (5 * SL_US_PER_S)

bool gw_sched_store_failing(const struct gw_sched *s) {
  struct gw_store_health h;
  gw_store_health(s->store, &h);
  return h.failing;
}

void gw_sched_checkpoint_recorded(struct gw_sched *s, const struct gw_job *j, int attempt) {
  struct gw_inst *in = j->instance[0] ? gw_fleet_inst(s->fleet, j->instance) : NULL;
  if (!in || gw_sched_rank(j, in) != 0 || attempt != j->attempt)
    return; /* that attempt is over: its worker prunes nothing more */
  if (gw_store_sync(s->store) < 0)
    return; /* the next checkpoint's answer tells it */
  char id[16];
  json_t *ack = json_pack("{s:s,s:s,s:I,s:I}", "type", "checkpoint_recorded", "job",
                          gw_job_id_str(j->id, id, sizeof id), "attempt", (json_int_t)attempt,
                          "step", (json_int_t)j->ckpt_step);
  if (ack)
    gw_fleet_send_rid(s->fleet, in->rid, in->rid_len, ack);
  json_decref(ack);
}

/* A kept event is written: the bus hears of it now, numbered. */
static void on_saved(void *ctx, const struct gw_job *row, const json_t *event, int attempt,
                     bool checkpoint) {
  struct gw_sched *s = ctx;
  struct gw_job *j = gw_fleet_job(s->fleet, row->id);
  if (j) {
    j->last_seq = row->last_seq;
    gw_sched_note_event(s, j, event);
  }
  gw_sched_report(s, (struct gw_bus_event){.kind = GW_BUS_JOB_EVENT,
                                           .job = j ? j : row, .event = (json_t *)event});
  if (j && checkpoint)
    gw_sched_checkpoint_recorded(s, j, attempt);
}

static int64_t retry_timer(struct gw_loop *l, int64_t id, int64_t now_us, void *data) {
  (void)l; (void)id;
  struct gw_sched *s = data;
  int r = gw_store_retry(s->store);
  if (r < 0) {
    s->save_backoff_us = s->save_backoff_us * 2 > RETRY_MAX_US ? RETRY_MAX_US : s->save_backoff_us * 2;
    return now_us + s->save_backoff_us;
  }
  s->save_timer = 0;
  s->save_backoff_us = RETRY_MIN_US;
  gw_sched_kick(s); /* queued jobs were waiting for the writes */
  return GW_LOOP_NOMORE;
}

/* Arms the retry once something is kept (any write may be the first). */
static void save_hook(struct gw_loop *l, void *data) {
  struct gw_sched *s = data;
  if (s->save_timer || !gw_sched_store_failing(s))
    return;
  int64_t t = gw_loop_add_timer(l, gw_loop_now_us(l) + s->save_backoff_us, retry_timer, s);
  if (t > 0)
    s->save_timer = t;
}

int gw_sched_save_init(struct gw_sched *s) {
  s->save_backoff_us = RETRY_MIN_US;
  gw_store_set_saved_fn(s->store, on_saved, s);
  return s->loop ? gw_loop_add_hook(s->loop, save_hook, s) : 0;
}

void gw_sched_save_done(struct gw_sched *s) {
  if (s->loop && s->save_timer > 0)
    gw_loop_del_timer(s->loop, s->save_timer);
  s->save_timer = 0;
  gw_store_set_saved_fn(s->store, NULL, NULL);
}

static const char *why_of(int error) {
  switch (error) {
  case -ENOSPC:
    return "disk full";
  case -EIO:
    return "I/O error";
  case -EBUSY:
    return "database locked";
  case -EROFS:
    return "read-only";
  default:
    return "database error";
  }
}

const char *gw_sched_refusal(const struct gw_sched *s) {
  struct gw_store_health h;
  gw_store_health(s->store, &h);
  if (!h.failing)
    return NULL;
  return h.error == -ENOSPC
             ? "the gateway's state disk is full: new work is refused until its writes succeed again"
             : "the gateway's state database refuses writes: new work is refused until they succeed"
               " again";
}

json_t *gw_sched_store_json(const struct gw_sched *s) {
  struct gw_store_health h;
  gw_store_health(s->store, &h);
  json_t *o = json_pack("{s:b}", "ok", !h.failing);
  if (o && h.failing) {
    json_object_set_new(o, "error", json_string(why_of(h.error)));
    json_object_set_new(o, "message", json_string(h.message));
    json_object_set_new(o, "since_us", json_integer(h.since_us));
    json_object_set_new(o, "kept_writes", json_integer((json_int_t)h.kept));
  }
  if (o && h.dropped)
    json_object_set_new(o, "dropped_events", json_integer((json_int_t)h.dropped));
  return o;
}
