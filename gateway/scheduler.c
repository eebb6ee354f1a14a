/* Jobs through their life: placement, transitions, loss, cost (scheduler.h).
 *
 * Invariants: a live job (not succeeded/failed/cancelled) is in the fleet; a
 * queued job is also in the queue and has no instance; a job in provisioning
 * or later names exactly one instance whose row.job is that job. Every
 * state change goes through gw_sched_transition, which saves the row and
 * its event in one transaction and then reports it on the bus. Cost is
 * accrued from the attempt's price times the time the instance ran, in its
 * provider's hours (a simulated market's clock runs faster than the wall
 * clock), and handed to the ledger every few seconds. A launch is a
 * request: the instance joins the fleet as "launching" and the job is
 * provisioning; the provider's LAUNCHED event (or the worker's register,
 * whichever comes first) places the job, LAUNCH_FAILED puts it back in the
 * queue. Launching (sched_launch.c), the assign (sched_assign.c), an
 * attempt's end (sched_end.c) and a restart (sched_load.c) live beside
 * it. */
#include "scheduler.h"
#include "gang.h"
#include "placemem.h"
#include "sched_int.h"
#include "loop.h"

#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T "gateway.sched"
#define COST_FLUSH_US (5 * SL_US_PER_S)
#define PLACE_RETRY_US SL_US_PER_S
#define ROOM_WAIT_US (5 * SL_US_PER_S) /* between two idle workers shut down for room */

void gw_sched_wants(const struct gw_sched *s, const struct gw_job *j, struct gw_wants *w) {
  gw_place_wants(j, w);
  gw_place_allow(w, gw_config_user_instance_types(s->cfg, j->user));
}

void gw_sched_report(struct gw_sched *s, struct gw_bus_event ev) {
  gw_bus_emit(s->bus, &ev);
}

/* After every GW_METRICS_THIN_EVERY step metrics stored, the job's older
 * ones are thinned; after every GW_OUTPUT_TRIM_EVERY output lines, the
 * middle of its output is left out (scheduler.h). */
static void count_event(struct gw_sched *s, struct gw_job *j, const json_t *event) {
  const char *kind = sl_json_get_str(event, "event", "");
  int64_t deleted, stride;
  char id[16];
  int r;
  if (!strcmp(kind, "output")) {
    if (++j->outputs_stored < GW_OUTPUT_TRIM_EVERY)
      return;
    j->outputs_stored = 0;
    r = gw_store_trim_output(s->store, j->id, GW_OUTPUT_HEAD, GW_OUTPUT_TAIL, GW_OUTPUT_TAIL_BYTES,
                             &deleted);
    if (r < 0)
      sl_warn(T, "%s: cannot leave out the middle of its output: %s",
              gw_job_id_str(j->id, id, sizeof id), sl_strerror(r));
    else if (deleted)
      sl_debug(T, "%s: %lld output lines left out", gw_job_id_str(j->id, id, sizeof id),
               (long long)deleted);
    return;
  }
  if (strcmp(kind, "metric") || ++j->metrics_stored < GW_METRICS_THIN_EVERY)
    return;
  j->metrics_stored = 0;
  r = gw_store_thin_metrics(s->store, j->id, GW_METRICS_WHOLE, GW_METRICS_OLD, &deleted, &stride);
  if (r < 0)
    sl_warn(T, "%s: cannot thin its older step metrics: %s", gw_job_id_str(j->id, id, sizeof id),
            sl_strerror(r));
  else if (deleted)
    sl_debug(T, "%s: %lld older step metrics thinned (one per %lld steps kept)",
             gw_job_id_str(j->id, id, sizeof id), (long long)deleted, (long long)stride);
}

/* What follows j's save (r, the store's answer) with event. */
static int emitted(struct gw_sched *s, struct gw_job *j, json_t *event, int r) {
  if (r < 0) {
    char id[16];
    if (r != SL_ELIMIT) /* a dropped metric is counted by the store */
      sl_err(T, "%s: cannot save job: %s", gw_job_id_str(j->id, id, sizeof id), sl_strerror(r));
    return r;
  }
  if (r == 0 && event) { /* a kept one is reported once written (sched_save.c) */
    count_event(s, j, event);
    gw_sched_note_event(s, j, event);
    gw_sched_report(s, (struct gw_bus_event){.kind = GW_BUS_JOB_EVENT, .job = j, .event = event});
  }
  return r;
}

int gw_sched_emit_checkpoint(struct gw_sched *s, struct gw_job *j, json_t *event,
                             const struct gw_checkpoint_row *ck) {
  j->updated_us = sl_time_real_us();
  return emitted(s, j, event, gw_store_job_save_checkpoint(s->store, j, event, ck));
}

int gw_sched_emit(struct gw_sched *s, struct gw_job *j, json_t *event) {
  return gw_sched_emit_checkpoint(s, j, event, NULL);
}

int gw_sched_transition(struct gw_sched *s, struct gw_job *j, enum gw_job_state st, const char *reason) {
  j->state = st;
  sl_utf8_copy(j->reason, sizeof j->reason, reason ? reason : ""); /* whole characters: JSON */
  json_t *ev = json_pack("{s:s,s:s,s:s}", "event", "state", "state", gw_job_state_name(st),
                         "reason", j->reason);
  int r = gw_sched_emit(s, j, ev);
  json_decref(ev);
  gw_sched_deadline_state(s, j);
  gw_sched_report(s, (struct gw_bus_event){.kind = GW_BUS_JOB_STATE, .job = j});
  char id[16];
  sl_info(T, "%s -> %s%s%s", gw_job_id_str(j->id, id, sizeof id), gw_job_state_name(st),
          j->reason[0] ? ": " : "", j->reason);
  return r;
}

void gw_sched_clear_placement(struct gw_job *j) {
  j->instance[0] = j->instance_type[0] = j->zone[0] = 0;
  j->price_usd_per_hour = j->on_demand_usd_per_hour = 0;
  j->spot = false;
  free(j->gang);
  j->gang = NULL;
}

void gw_sched_flush_cost(struct gw_sched *s, struct gw_job *j, bool force) {
  if (!j->instance[0] || !j->cost_accrued_mono_us)
    return;
  int64_t now = sl_time_mono_us();
  struct gw_inst *in = gw_fleet_inst(s->fleet, j->instance);
  double scale = j->gang ? j->gang->time_scale : gw_provider_time_scale(in ? in->prov : NULL);
  double hours = (double)(now - j->cost_accrued_mono_us) / 3.6e9 * scale;
  double price = j->price_usd_per_hour, od_price = j->on_demand_usd_per_hour;
  if (j->gang) /* every member that has not ended */
    gw_sched_gang_price(j, &price, &od_price);
  double usd = hours * price, od = hours * od_price;
  double billed;
  if (!j->gang && in && in->prov && in->prov->ops->billed_usd &&
      in->prov->ops->billed_usd(in->prov, in->row.id, sl_time_real_us(), &billed) == 0) {
    /* the cloud's own bill (per second, a minimum per instance): the job
     * pays what the instance's bill grew by while it ran there */
    usd = billed > in->billed_seen_usd ? billed - in->billed_seen_usd : 0;
    in->billed_seen_usd = billed > in->billed_seen_usd ? billed : in->billed_seen_usd;
  }
  j->cost_accrued_mono_us = now;
  /* attempt_* hold what is accrued but not yet in the cost table */
  j->attempt_cost_usd += usd;
  j->attempt_on_demand_usd += od;
  j->pending_cost_s += hours * 3600;
  j->cost_usd += usd;
  j->on_demand_usd += od;
  if (!force && now < s->next_cost_flush_mono_us)
    return;
  gw_sched_report(s, (struct gw_bus_event){.kind = GW_BUS_COST, .job = j, .usd = j->attempt_cost_usd,
                                           .on_demand_usd = j->attempt_on_demand_usd,
                                           .seconds = j->pending_cost_s});
  j->attempt_cost_usd = j->attempt_on_demand_usd = j->pending_cost_s = 0;
  json_t *ev = json_pack("{s:s,s:o,s:o,s:o,s:o}", "event", "cost", "cost_usd", sl_json_real(j->cost_usd),
                         "on_demand_usd", sl_json_real(j->on_demand_usd), "energy_kwh",
                         sl_json_real(j->energy_kwh), "co2e_g", sl_json_real(j->co2e_g));
  gw_sched_emit(s, j, ev);
  json_decref(ev);
}

void gw_sched_cost_pending(void *ctx, const char *user, double *ret_usd, double *ret_on_demand_usd) {
  struct gw_sched *s = ctx;
  *ret_usd = *ret_on_demand_usd = 0;
  for (size_t i = 0; i < gw_fleet_n_jobs(s->fleet); i++) {
    struct gw_job *j = gw_fleet_job_at(s->fleet, i);
    if (user && strcmp(j->user, user))
      continue;
    gw_sched_flush_cost(s, j, false); /* accrued to now; written when due */
    *ret_usd += j->attempt_cost_usd;
    *ret_on_demand_usd += j->attempt_on_demand_usd;
  }
}

int gw_sched_submit(struct gw_sched *s, struct gw_job *j) {
  if (gw_fleet_n_jobs(s->fleet) >= GW_QUEUE_MAX)
    return SL_ELIMIT;
  if (gw_sched_store_failing(s)) /* gw_sched_refusal says why */
    return SL_ESTATE;
  j->created_us = j->updated_us = sl_time_real_us();
  int r = gw_store_job_create(s->store, j);
  if (r < 0)
    return r;
  if ((r = gw_queue_push(s->queue, j->user, j->id, 0)) < 0) {
    gw_sched_transition(s, j, GW_JOB_FAILED, "queue full");
    return r;
  }
  if ((r = gw_fleet_job_add(s->fleet, j)) < 0) {
    gw_queue_remove(s->queue, j->id);
    gw_sched_transition(s, j, GW_JOB_FAILED, "too many live jobs");
    return r;
  }
  gw_sched_kick(s);
  return 0;
}

json_t *gw_sched_cancel_msg(const char *job, int64_t attempt) {
  json_t *m = json_pack("{s:s,s:s}", "type", "cancel", "job", job);
  if (m && attempt > 0)
    json_object_set_new(m, "attempt", json_integer(attempt));
  return m;
}

int gw_sched_cancel(struct gw_sched *s, struct gw_job *j) {
  struct gw_inst *inst = j->instance[0] ? gw_fleet_inst(s->fleet, j->instance) : NULL;
  switch (j->state) {
  case GW_JOB_STARTING:
  case GW_JOB_RUNNING:
  case GW_JOB_CHECKPOINTING:
    if (j->gang) {
      gw_sched_gang_cancel(s, j);
      return 0;
    }
    if (inst && inst->registered) {
      char id[16];
      j->cancel_requested = true;
      gw_sched_emit(s, j, NULL);
      json_t *m = gw_sched_cancel_msg(gw_job_id_str(j->id, id, sizeof id), j->attempt);
      gw_fleet_send(s->fleet, inst, m);
      json_decref(m);
      return 0;
    }
    /* no worker to tell */
    /* fall through */
  default:
    gw_sched_finish(s, j, GW_JOB_CANCELLED, "cancelled by user");
    return 0;
  }
}

void gw_sched_set_hold(struct gw_sched *s, gw_sched_hold_fn fn, void *data) {
  s->hold = fn;
  s->hold_data = data;
}

/* j waits in the queue for why: said once, as its reason. */
static void mark_paused(struct gw_sched *s, struct gw_job *j, const char *why) {
  char reason[sizeof j->reason];
  snprintf(reason, sizeof reason, "paused: %.200s", why);
  if (j->state == GW_JOB_QUEUED && strcmp(j->reason, reason))
    gw_sched_transition(s, j, GW_JOB_QUEUED, reason);
}

int gw_sched_pause(struct gw_sched *s, struct gw_job *j, const char *why) {
  struct gw_inst *inst = j->instance[0] ? gw_fleet_inst(s->fleet, j->instance) : NULL;
  switch (j->state) {
  case GW_JOB_QUEUED:
    mark_paused(s, j, why);
    return 1;
  case GW_JOB_STARTING:
  case GW_JOB_RUNNING:
  case GW_JOB_CHECKPOINTING:
    if (j->pause_requested || j->cancel_requested)
      return 1;
    if (j->gang)
      break; /* every rank is told to stop; rank 0 writes the checkpoint */
    if (!inst || !inst->registered)
      return 1;
    break;
  default:
    return 1; /* provisioning: stopped once it runs; ended: nothing */
  }
  char id[16];
  j->pause_requested = true;
  json_t *ev = json_pack("{s:s,s:s}", "event", "pausing", "reason", why);
  gw_sched_emit(s, j, ev);
  json_decref(ev);
  if (j->gang) {
    sl_info(T, "%s: pausing: %s", gw_job_id_str(j->id, id, sizeof id), why);
    gw_sched_gang_pause(s, j);
    return 0;
  }
  /* the worker's cancel: SIGTERM, a final checkpoint, its upload, then done */
  json_t *m = gw_sched_cancel_msg(gw_job_id_str(j->id, id, sizeof id), j->attempt);
  gw_fleet_send(s->fleet, inst, m);
  json_decref(m);
  sl_info(T, "%s: pausing: %s", id, why);
  return 0;
}

/* ---- placement ---- */

void gw_sched_write_placement(struct gw_job *j, const struct gw_inst *in) {
  snprintf(j->instance, sizeof j->instance, "%s", in->row.id);
  snprintf(j->instance_type, sizeof j->instance_type, "%s", in->row.type);
  snprintf(j->zone, sizeof j->zone, "%s", in->row.zone);
  j->spot = in->row.spot;
  j->price_usd_per_hour = in->row.price_usd_per_hour;
  j->on_demand_usd_per_hour = in->row.on_demand_usd_per_hour;
  j->attempt++;
  j->metric_step = -1;
  j->output_seq = 0;
  j->attempt_cost_usd = j->attempt_on_demand_usd = j->pending_cost_s = 0;
  j->attempt_started_mono_us = j->cost_accrued_mono_us = sl_time_mono_us();
  gw_autockpt_new_attempt(&j->autockpt);
  j->autockpt.mtbp_s = 0;
}

void gw_sched_emit_placed(struct gw_sched *s, struct gw_job *j) {
  json_t *ev = json_pack("{s:s,s:s,s:s,s:s,s:b,s:o,s:o,s:i}", "event", "placed", "instance",
                         j->instance, "instance_type", j->instance_type, "zone", j->zone, "spot",
                         j->spot, "price_usd_per_hour", sl_json_real(j->price_usd_per_hour),
                         "on_demand_usd_per_hour", sl_json_real(j->on_demand_usd_per_hour),
                         "attempt", j->attempt);
  if (j->gang) { /* nodes=N: every instance, rank order; the prices are each one's */
    json_t *all = json_array();
    for (int r = 0; r < j->gang->n; r++)
      json_array_append_new(all, json_string(j->gang->m[r].instance));
    json_object_set_new(ev, "instances", all);
    json_object_set_new(ev, "nodes", json_integer(j->gang->n));
  }
  j->updated_us = sl_time_real_us();
  emitted(s, j, ev, gw_store_job_save_placed(s->store, j, ev, j->ckpt_step, j->updated_us));
  json_decref(ev);
  gw_sched_report(s, (struct gw_bus_event){.kind = GW_BUS_PLACED, .job = j, .instance = j->instance});
}

/* Asks o's provider for an instance for job j. On success the instance is
 * in the fleet, launching, and the job provisioning; the job is placed when
 * the launch is done (gw_sched_launched). */
static int launch(struct gw_sched *s, struct gw_job *j, const struct gw_offer *o, bool spot) {
  char id[GW_INSTANCE_ID_MAX];
  int r = gw_sched_launch_inst(s, j, o, spot, id);
  if (r < 0)
    return r;
  snprintf(j->instance, sizeof j->instance, "%s", id);
  gw_sched_transition(s, j, GW_JOB_PROVISIONING, "launching an instance");
  return 0;
}

void gw_sched_launched(struct gw_sched *s, struct gw_inst *in) {
  if (in->launched)
    return;
  in->launched = true;
  gw_fleet_inst_save(s->fleet, in);
  struct gw_job *j = in->row.job ? gw_fleet_job(s->fleet, in->row.job) : NULL;
  if (j && j->gang && gw_gang_rank(j->gang, in->row.id) >= 0) {
    gw_sched_gang_progress(s, j);
    return;
  }
  if (!j || strcmp(j->instance, in->row.id) || j->state != GW_JOB_PROVISIONING)
    return;
  char id[24];
  sl_info(T, "launched %s (%s%s, %s) for job %s", in->row.id, in->row.type,
          in->row.spot ? " spot" : "", in->row.zone, gw_job_id_str(j->id, id, sizeof id));
  gw_sched_write_placement(j, in);
  gw_sched_emit_placed(s, j);
}

/* The launch of instance in failed: the instance is forgotten and its job
 * waits in the queue again. */
static void launch_failed(struct gw_sched *s, struct gw_inst *in, int error, const char *message) {
  char id[GW_INSTANCE_ID_MAX];
  snprintf(id, sizeof id, "%s", in->row.id);
  struct gw_job *j = in->row.job ? gw_fleet_job(s->fleet, in->row.job) : NULL;
  sl_warn(T, "launch of %s (%s) failed: %s", id, in->row.type,
          message && *message ? message : sl_strerror(error));
  gw_sched_note_refused(s, in->prov, in->row.type, in->row.zone, in->row.spot, error);
  int rank = j ? gw_gang_rank(j->gang, id) : -1;
  if (rank >= 0) /* the gang cannot be whole: it is placed again */
    gw_sched_gang_lost(s, j, rank, "an instance of the gang could not be launched");
  snprintf(in->row.state, sizeof in->row.state, "terminated");
  gw_fleet_inst_save(s->fleet, in);
  gw_sched_report(s, (struct gw_bus_event){.kind = GW_BUS_INSTANCE_GONE, .instance = id,
                                           .why = "the launch failed"});
  gw_fleet_inst_remove(s->fleet, id);
  if (rank < 0 && j && !strcmp(j->instance, id)) {
    gw_sched_clear_placement(j);
    gw_queue_push(s->queue, j->user, j->id, 1);
    gw_sched_transition(s, j, GW_JOB_QUEUED, "the instance could not be launched; waiting for capacity");
  }
  gw_sched_kick(s);
}

/* j cannot start for want of room, and an idle worker it may not run on
 * holds that room: it is shut down, the one idle longest, so that j's own
 * instance starts in its place. Room is an instance of any kind under
 * max_instances or in a provider with every slot taken (full: that
 * provider; NULL: any), and otherwise the market's capacity of the kind j
 * was refused, which only another user's worker that would fit j holds
 * (its own would have taken it). True when one was shut down. */
static bool make_room(struct gw_sched *s, const struct gw_job *j, const struct gw_wants *w, bool any_kind,
                      const struct gw_provider *full) {
  /* one at a time: a provider counts the one shut down until it has gone
   * (the local provider gives it up to 5 s), and the passes meanwhile would
   * shut down one more each */
  int64_t now = sl_time_mono_us();
  if (s->room_inst[0] && now - s->room_mono_us < ROOM_WAIT_US)
    return false; /* its TERMINATED, or the retry timer, comes back */
  struct gw_inst *oldest = NULL;
  for (size_t i = 0; i < gw_fleet_n_insts(s->fleet); i++) {
    struct gw_inst *in = gw_fleet_inst_at(s->fleet, i);
    bool mine = !strcmp(in->row.user, j->user), fits = gw_place_fits(w, in);
    if (!in->registered || in->row.job || strcmp(in->row.state, "idle") || (mine && fits) ||
        (any_kind ? full && in->prov != full : mine || !fits))
      continue;
    if (!oldest || in->idle_since_mono_us < oldest->idle_since_mono_us)
      oldest = in;
  }
  if (!oldest)
    return false;
  s->room_mono_us = now;
  snprintf(s->room_inst, sizeof s->room_inst, "%s", oldest->row.id);
  gw_sched_terminate(s, oldest, strcmp(oldest->row.user, j->user)
                                    ? "idle worker shut down to make room for another user's job"
                                    : "idle worker shut down to make room for a job it does not fit");
  return true;
}

/* Tries to start job j now: an idle worker of its user that fits, else a
 * new instance unless *no_capacity (a launch already failed in this pass).
 * -EAGAIN: not now. */
static int place_one(struct gw_sched *s, struct gw_job *j, bool *no_capacity) {
  struct gw_wants w;
  gw_sched_wants(s, j, &w);
  if (gw_sched_deadline_wants(s, j, &w) < 0)
    return -EAGAIN; /* its deadline's policy waits for spot */
  if (w.nodes > 1)
    return gw_sched_place_gang(s, j, &w, no_capacity);
  for (size_t i = 0; i < gw_fleet_n_insts(s->fleet); i++) {
    struct gw_inst *in = gw_fleet_inst_at(s->fleet, i);
    /* an instance with a notice is about to go, one at risk may: never given a
     * job. Another user's is not reused: what its jobs left behind (a process
     * of a script, files in its work folder) would see this job. */
    if (in->registered && !in->row.job && !in->notice && !in->at_risk && !strcmp(in->row.state, "idle") &&
        !strcmp(in->row.user, j->user) && gw_place_fits(&w, in)) {
      gw_queue_take(s->queue, j->id);
      gw_sched_write_placement(j, in);
      gw_sched_emit_placed(s, j);
      return gw_sched_assign(s, j, in);
    }
  }
  if (s->n_provs && !*no_capacity && gw_fleet_active_insts(s->fleet) >= (size_t)s->cfg->max_instances)
    make_room(s, j, &w, true, NULL);
  if (!s->n_provs || *no_capacity ||
      gw_fleet_active_insts(s->fleet) >= (size_t)s->cfg->max_instances)
    return -EAGAIN;
  struct gw_offer o;
  bool spot = false;
  int r;
  /* a launch refused for capacity is remembered and held back: the next
   * best type, zone or market is tried at once */
  for (int tries = 0;; tries++) {
    unsigned refused = s->refused;
    r = gw_sched_pick_offer(s, j, &w, &o, &spot);
    if (r == 0)
      r = launch(s, j, &o, spot);
    if (r == 0 || s->refused == refused || tries > 2 * (int)s->n_offers)
      break;
  }
  if (r == SL_ENAME) {
    char why[900] = "no instance type matches the job's gpus, spot, max_price, instance and region options";
    gw_place_explain(&w, s->offers, s->n_offers, why, sizeof why);
    gw_sched_finish(s, j, GW_JOB_FAILED, why);
    return 0;
  }
  if (r < 0 && r != -EAGAIN && r != SL_ENOTSUP && r != SL_ELIMIT) {
    char why[160];
    snprintf(why, sizeof why, "cannot launch a %s instance: %s", o.type.name, sl_strerror(r));
    sl_err(T, "%s", why);
    gw_sched_finish(s, j, GW_JOB_FAILED, why);
    return 0;
  }
  if (r < 0) {
    if (spot)
      gw_sched_deadline_lost(s, o.prov, o.type.name, o.type.zone);
    /* room made: the next pass launches */
    *no_capacity = !make_room(s, j, &w, r == SL_ELIMIT, o.prov);
    if (!*no_capacity)
      gw_sched_kick(s);
    return -EAGAIN;
  }
  gw_queue_take(s->queue, j->id);
  return 0;
}

void gw_sched_place(struct gw_sched *s) {
  int64_t order[64];
  s->kick = false;
  if (gw_sched_store_failing(s))
    return; /* nothing new until the kept writes are in (sched_save.c kicks then) */
  s->pass_mono_us = sl_time_mono_us();
  size_t n = gw_queue_order(s->queue, order, 64);
  /* one view of the market per pass: no provider callback runs within it */
  s->n_offers = n ? gw_sched_market(s, s->offers, GW_SCHED_MARKET_MAX) : 0;
  bool no_capacity = false;
  for (size_t i = 0; i < n; i++) {
    struct gw_job *j = gw_fleet_job(s->fleet, order[i]);
    if (!j) {
      gw_queue_remove(s->queue, order[i]);
      continue;
    }
    char why[200];
    if (s->hold && s->hold(s->hold_data, j, why, sizeof why)) {
      mark_paused(s, j, why);
      continue;
    }
    if (s->pass_mono_us < j->start_retry_mono_us)
      continue; /* its last start was refused a moment ago (gw_sched_retry) */
    place_one(s, j, &no_capacity);
  }
}

void gw_sched_kick(struct gw_sched *s) {
  s->kick = true;
  if (s->loop)
    gw_loop_wake(s->loop);
}

static void place_hook(struct gw_loop *l, void *data) {
  (void)l;
  struct gw_sched *s = data;
  if (s->kick)
    gw_sched_place(s);
}

/* Capacity comes back without any message (a spot market's next tick):
 * while jobs wait in the queue, placement runs again once a second. What
 * the scheduler learned is written from here too. */
static int64_t place_retry(struct gw_loop *l, int64_t id, int64_t now_us, void *data) {
  (void)l; (void)id;
  struct gw_sched *s = data;
  if (gw_queue_len(s->queue) > 0)
    gw_sched_place(s);
  gw_sched_learned_save(s, false);
  return now_us + PLACE_RETRY_US;
}

/* ---- loss, idle, provider events ---- */

void gw_sched_instance_gone(struct gw_sched *s, const char *id, const char *why) {
  struct gw_inst *in = gw_fleet_inst(s->fleet, id);
  if (!in)
    return;
  bool notice = in->notice;
  struct gw_job *j = in->row.job ? gw_fleet_job(s->fleet, in->row.job) : NULL;
  sl_info(T, "instance %s gone: %s", id, why);
  int rank = j ? gw_gang_rank(j->gang, id) : -1;
  if (rank >= 0)
    gw_sched_gang_lost(s, j, rank, why);
  else if (j && !j->gang && !strcmp(j->instance, id))
    gw_sched_requeue(s, j, notice, why);
  /* after the requeue, whose end of the attempt saves the instance as
   * draining: a row left so would come back to life at the next start */
  snprintf(in->row.state, sizeof in->row.state, "terminated");
  gw_fleet_inst_save(s->fleet, in);
  gw_sched_report(s, (struct gw_bus_event){.kind = GW_BUS_INSTANCE_GONE, .instance = id, .why = why});
  gw_fleet_inst_remove(s->fleet, id);
  gw_sched_kick(s);
}

void gw_sched_terminate(struct gw_sched *s, struct gw_inst *in, const char *why) {
  char id[GW_INSTANCE_ID_MAX];
  snprintf(id, sizeof id, "%s", in->row.id);
  if (in->registered) {
    json_t *m = json_pack("{s:s}", "type", "shutdown");
    gw_fleet_send(s->fleet, in, m);
    json_decref(m);
  }
  if (in->prov)
    in->prov->ops->terminate(in->prov, id);
  gw_sched_instance_gone(s, id, why);
}

void gw_sched_provider_event(void *userdata, struct gw_provider *p,
                             const struct gw_provider_event *ev) {
  struct gw_sched *s = userdata;
  if (ev->kind == GW_PROVIDER_CAPACITY) {
    gw_sched_note_capacity(s, p);
    for (size_t i = 0; i < gw_fleet_n_jobs(s->fleet); i++) /* gangs waiting may fit now too */
      gw_fleet_job_at(s->fleet, i)->gang_retry_mono_us = 0;
    gw_sched_kick(s); /* queued jobs may fit now */
    return;
  }
  if (ev->kind == GW_PROVIDER_TERMINATED && s->room_inst[0] && !strcmp(ev->instance_id, s->room_inst)) {
    s->room_inst[0] = 0; /* the room make_room made is free now */
    gw_sched_kick(s);
  }
  struct gw_inst *in = gw_fleet_inst(s->fleet, ev->instance_id);
  if (!in || in->prov != p)
    return;
  if (in->row.spot && (ev->kind == GW_PROVIDER_NOTICE || (ev->kind == GW_PROVIDER_TERMINATED && ev->by_market) ||
                       ev->kind == GW_PROVIDER_LAUNCH_FAILED)) /* the market took it or had none */
    gw_sched_deadline_lost(s, p, in->row.type, in->row.zone);
  switch (ev->kind) {
  case GW_PROVIDER_LAUNCHED:
    if (ev->info.zone[0])
      snprintf(in->row.zone, sizeof in->row.zone, "%s", ev->info.zone);
    if (ev->info.price_usd_per_hour > 0)
      in->row.price_usd_per_hour = ev->info.price_usd_per_hour;
    if (in->launched) {
      /* the worker registered first and the job was placed without the
       * zone: the job's row takes it now (its placed event has gone) */
      struct gw_job *j = in->row.job ? gw_fleet_job(s->fleet, in->row.job) : NULL;
      gw_fleet_inst_save(s->fleet, in);
      if (j && !strcmp(j->instance, in->row.id) && !j->zone[0]) {
        snprintf(j->zone, sizeof j->zone, "%s", in->row.zone);
        gw_sched_emit(s, j, NULL);
      }
      break;
    }
    gw_sched_launched(s, in);
    break;
  case GW_PROVIDER_LAUNCH_FAILED:
    launch_failed(s, in, ev->error, ev->message);
    break;
  case GW_PROVIDER_TERMINATED:
    if (ev->by_market)
      gw_sched_note_preempted(s, in); /* unless a notice did already */
    gw_sched_instance_gone(s, ev->instance_id,
                           ev->by_market ? "instance preempted by the market" : "instance terminated");
    break;
  case GW_PROVIDER_NOTICE:
    gw_sched_note_preempted(s, in);
    if (!in->notice) {
      in->notice = true;
      struct gw_job *j = in->row.job ? gw_fleet_job(s->fleet, in->row.job) : NULL;
      if (j) {
        json_t *e = json_pack("{s:s,s:s,s:I,s:s}", "event", "notice", "action", "terminate",
                              "deadline_us", (json_int_t)ev->deadline_us, "instance", in->row.id);
        gw_sched_emit(s, j, e);
        json_decref(e);
      }
    }
    break;
  default:
    break;
  }
}

void gw_sched_housekeeping(struct gw_sched *s) {
  int64_t now = sl_time_mono_us();
  for (size_t i = 0; i < gw_fleet_n_insts(s->fleet);) {
    struct gw_inst *in = gw_fleet_inst_at(s->fleet, i);
    const char *why = NULL;
    bool idle = false;
    if (!in->registered && in->register_by_mono_us && now > in->register_by_mono_us)
      why = "worker did not register in time";
    else if (in->registered && now - in->last_seen_mono_us > s->cfg->heartbeat_timeout_us)
      why = "worker lost (no heartbeat)";
    else if (in->registered && !in->row.job && !strcmp(in->row.state, "idle") &&
             now - in->idle_since_mono_us > gw_config_worker_timeout_us(s->cfg, in->row.user)) {
      why = "idle worker shut down";
      idle = true;
    }
    if (why) {
      sl_info(T, "%s: %s", in->row.id, why);
      if (idle)
        gw_sched_report(s, (struct gw_bus_event){.kind = GW_BUS_IDLE_SHUTDOWN,
                                                 .instance = in->row.id, .user = in->row.user,
                                                 .session = in->session, .why = why});
      gw_sched_terminate(s, in, why);
      continue; /* the array shifted */
    }
    i++;
  }
  for (size_t i = 0; i < gw_fleet_n_jobs(s->fleet); i++)
    gw_sched_flush_cost(s, gw_fleet_job_at(s->fleet, i), false);
  if (now >= s->next_cost_flush_mono_us)
    s->next_cost_flush_mono_us = now + COST_FLUSH_US;
}

/* ---- providers and the market ---- */

int gw_sched_add_provider(struct gw_sched *s, struct gw_provider *p) {
  if (s->n_provs == GW_PROVIDERS_MAX)
    return SL_ELIMIT;
  s->provs[s->n_provs++] = p;
  return 0;
}

size_t gw_sched_n_providers(const struct gw_sched *s) { return s->n_provs; }

struct gw_provider *gw_sched_provider_at(struct gw_sched *s, size_t i) {
  return i < s->n_provs ? s->provs[i] : NULL;
}

size_t gw_sched_market(struct gw_sched *s, struct gw_offer *ret, size_t max) {
  size_t n = 0;
  for (size_t i = 0; i < s->n_provs && n < max; i++) {
    const struct gw_instance_type *types = NULL;
    size_t nt = 0;
    if (s->provs[i]->ops->market(s->provs[i], &types, &nt) < 0)
      continue;
    for (size_t k = 0; k < nt && n < max; k++) {
      ret[n] = (struct gw_offer){.prov = s->provs[i], .type = types[k]};
      gw_sched_offer_fill(s, &ret[n++]);
    }
  }
  return n;
}

int gw_sched_inject(struct gw_sched *s, struct gw_inst *in, bool kill, double notice_s) {
  (void)s;
  if (!in->prov || !in->prov->ops->inject)
    return SL_ENOTSUP;
  return in->prov->ops->inject(in->prov, in->row.id, kill, notice_s);
}

int gw_sched_inject_rebalance(struct gw_sched *s, struct gw_inst *in) {
  (void)s;
  if (!in->prov || !in->prov->ops->rebalance)
    return SL_ENOTSUP;
  return in->prov->ops->rebalance(in->prov, in->row.id);
}

/* ---- life ---- */

struct gw_sched *gw_sched_new(const struct gw_sched_env *env) {
  struct gw_sched *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->cfg = env->cfg;
  s->store = env->store;
  s->fleet = env->fleet;
  s->queue = env->queue;
  s->loop = env->loop;
  s->bus = env->bus;
  s->worker_address = env->worker_address ? env->worker_address : "";
  s->gateway_public = env->gateway_public ? env->gateway_public : "";
  s->train_program = env->train_program ? env->train_program : "";
  if (!(s->mem = gw_place_memory_new())) {
    free(s);
    return NULL;
  }
  if (s->loop) {
    int64_t t = gw_loop_add_timer(s->loop, sl_time_mono_us() + PLACE_RETRY_US, place_retry, s);
    if (t < 0 || gw_loop_add_hook(s->loop, place_hook, s) < 0) {
      if (t > 0)
        gw_loop_del_timer(s->loop, t);
      gw_place_memory_free(s->mem);
      free(s);
      return NULL;
    }
    s->retry_timer = t;
  }
  if (!(s->dl = gw_sched_deadline_new(s)) || gw_sched_save_init(s) < 0) {
    gw_sched_free(s);
    return NULL;
  }
  return s;
}

struct gw_sched *gw_sched_free(struct gw_sched *s) {
  if (!s)
    return NULL;
  if (s->loop && s->retry_timer > 0)
    gw_loop_del_timer(s->loop, s->retry_timer);
  gw_sched_save_done(s);
  if (s->dl)
    gw_sched_learned_save(s, true);
  s->dl = gw_sched_deadline_free(s->dl);
  for (size_t i = 0; i < s->n_provs; i++)
    s->provs[i]->ops->destroy(s->provs[i]);
  gw_place_memory_free(s->mem);
  free(s);
  return NULL;
}
