/* deadline= in the scheduler: each job with a deadline is steered tick by
 * tick by the "spotlab" policy of sl_policy.h (docs/internals/gateway.md,
 * "Deadlines").
 *
 * Every GW_DEADLINE_TICK_S provider seconds the gateway records, for each
 * spot offer of the market (a provider's type, and zone when the offer
 * names one), whether it shows capacity: the provider's market says so
 * (spot_none, a capacity failure it remembers), and a capacity failure or a
 * preemption the gateway saw in the tick counts as none (markethist.h keeps
 * the last week of each offer, across restarts). A job with a deadline reads
 * that history for the spot offers it may use from the copies it shares with
 * the other jobs (mhview.h: its market view, from its first tick on, grows by
 * a tick each tick so the policy's learning only ever reads forward), and
 * has its own sl_policy, and a decision each tick: wait in the queue, on-demand,
 * or spot on one of its offers. Placement asks for it (gw_sched_deadline_wants);
 * a running job whose market the decision changes (spot to on-demand or
 * back) is stopped as a preemption with notice stops it (its provider is
 * asked to terminate the instance; the worker checkpoints on SIGTERM and
 * says preempted) and placed again as decided.
 *
 * Measurements: the provider seconds per step of each train job, kept for
 * later jobs of the same model and batch, and the start-up of every job
 * (launch to running), kept across restarts (sched_learned.c); after a
 * restart jobs are tracked from then.
 * Invariant: a tracked job is live in the fleet; its policy is freed when
 * the job ends or leaves the fleet. */
#include "deadline.h"
#include "sched_int.h"

#include "loop.h"
#include "markethist.h"
#include "mhview.h"

#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T "gateway.deadline"
#define STEP_MEMORY 64
#define JOB_TICKS_MAX (GW_MH_TICKS + (size_t)(GW_DEADLINE_MAX_S / GW_DEADLINE_TICK_S) + 64)
#define TICK_WALL_MIN_US (20 * SL_US_PER_MS)
#define STARTUP_MAX_S 86400.0

struct dl_job {
  int64_t id;
  struct sl_policy *pol;
  const struct gw_mh_offer *offer[SL_POLICY_ZONES_MAX]; /* the job's zones (the history's offers) */
  struct gw_mhv *view[SL_POLICY_ZONES_MAX]; /* their shared copies, read from tick from[z] */
  size_t from[SL_POLICY_ZONES_MAX];
  size_t n_zones, n, origin;
  double window_s, start_elapsed_s, ondemand_price;
  double clock0_s;               /* wall-clock seconds at the start of tick 0 of its arrays */
  double step_s;                 /* measured provider seconds per step; 0: none */
  uint64_t model_key;
  struct sl_decision dec;
  bool decided, moving, emitted;
  int dec_for_mode;              /* the job's mode the decision was made with */
  int shown_mode;                /* what the job does: the decision, or the market it runs on when
                                  * the decision is to wait (a running job is not stopped to wait) */
  int emitted_mode;
  double emitted_slack_s;
  double run_done_s;             /* provider seconds it ran, attempts before this one */
  int64_t run_since_real_us;     /* running since; 0: not running */
  int64_t queued_real_us;
};

struct step_memo {
  uint64_t key;
  double step_s;
};

struct gw_dl {
  struct gw_sched *s;
  int64_t timer;
  int64_t ticks;
  struct gw_offer market[GW_SCHED_MARKET_MAX];
  struct gw_mh *hist;            /* owned: every offer's capacity, tick by tick */
  struct gw_mhv_set views;       /* owned: the offers' ticks the tracked jobs read */
  struct dl_job **jobs;
  size_t n_jobs, cap_jobs;
  struct step_memo memo[STEP_MEMORY];
  size_t memo_next;
  double startup_s;              /* measured launch to running; 0: none yet */
  uint64_t changes;              /* of memo and startup_s: what is kept across restarts */
  char measured[8][GW_INSTANCE_ID_MAX]; /* instances whose start-up is counted (once each) */
  size_t measured_next;
};

/* ---- clocks ---- */

/* Provider seconds per wall second: the fastest enabled provider's (a
 * gateway mixing a simulated market and a cloud plans on the former). */
static double scale_of(const struct gw_dl *d) {
  double scale = 0;
  for (size_t i = 0; i < d->s->n_provs; i++) {
    double x = gw_provider_time_scale(d->s->provs[i]);
    scale = x > scale ? x : scale;
  }
  return scale > 0 ? scale : 1;
}

static int64_t tick_wall_us(const struct gw_dl *d) {
  int64_t us = (int64_t)(GW_DEADLINE_TICK_S / scale_of(d) * 1e6);
  return us < TICK_WALL_MIN_US ? TICK_WALL_MIN_US : us;
}

static double elapsed_s(const struct gw_dl *d, const struct gw_job *j) {
  return (double)(sl_time_real_us() - j->created_us) / 1e6 * scale_of(d);
}

/* ---- what the job wants and has done ---- */

static bool type_fits(const struct gw_wants *w, const struct gw_instance_type *t) {
  if (w->gpus && t->gpus < w->gpus)
    return false;
  if (!w->n_types)
    return true;
  for (size_t i = 0; i < w->n_types; i++)
    if (!strcmp(w->types[i], t->name))
      return true;
  return false;
}

/* FNV-1a of the model definition and the options that set a step's work. */
static uint64_t model_key(const struct gw_job *j) {
  json_t *o = json_object_get(j->spec, "options");
  json_t *k = json_pack("{s:O?,s:O?,s:O?,s:O?}", "model", json_object_get(j->spec, "model"), "batch",
                        json_object_get(o, "batch"), "gpus", json_object_get(o, "gpus"), "nodes",
                        json_object_get(o, "nodes"));
  char *text = k ? json_dumps(k, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  json_decref(k);
  uint64_t h = UINT64_C(1469598103934665603);
  for (const char *p = text ? text : ""; *p; p++)
    h = (h ^ (unsigned char)*p) * UINT64_C(1099511628211);
  free(text);
  return h ? h : 1;
}

static double memo_step_s(const struct gw_dl *d, uint64_t key) {
  for (size_t i = 0; i < STEP_MEMORY; i++)
    if (d->memo[i].key == key)
      return d->memo[i].step_s;
  return 0;
}

static void memo_put(struct gw_dl *d, uint64_t key, double step_s) {
  d->changes++;
  for (size_t i = 0; i < STEP_MEMORY; i++)
    if (d->memo[i].key == key) {
      d->memo[i].step_s = step_s;
      return;
    }
  d->memo[d->memo_next] = (struct step_memo){key, step_s};
  d->memo_next = (d->memo_next + 1) % STEP_MEMORY;
}

static bool running(const struct gw_job *j) {
  return j->state == GW_JOB_RUNNING || j->state == GW_JOB_CHECKPOINTING;
}

static void job_work(const struct gw_dl *d, const struct dl_job *dj, const struct gw_job *j,
                     double window_s, uint64_t key, struct gw_deadline_work *w) {
  memset(w, 0, sizeof *w);
  w->window_s = window_s;
  w->elapsed_s = j->created_us ? elapsed_s(d, j) : 0;
  w->startup_s = d->startup_s > 0 ? d->startup_s : GW_DEADLINE_STARTUP_PRIOR_S;
  double step_s = dj && dj->step_s > 0 ? dj->step_s : memo_step_s(d, key);
  w->step_s = step_s > 0 ? step_s : GW_DEADLINE_STEP_PRIOR_S;
  if (!strcmp(j->kind, "train")) {
    w->steps = j->steps;
    w->step = j->step;
  }
  if (dj) {
    w->run_done_s = dj->run_done_s;
    if (dj->run_since_real_us)
      w->run_done_s += (double)(sl_time_real_us() - dj->run_since_real_us) / 1e6 * scale_of(d);
  }
}

/* ---- the market's history ---- */

static void record_market(struct gw_dl *d) {
  int64_t now = sl_time_real_us();
  if (!d->ticks) /* the history an earlier gateway kept, once the providers are known */
    gw_mh_restore(d->hist, d->s->provs, d->s->n_provs, tick_wall_us(d), now);
  size_t n = gw_sched_market(d->s, d->market, GW_SCHED_MARKET_MAX);
  for (size_t i = 0; i < n; i++) {
    const struct gw_instance_type *t = &d->market[i].type;
    if (t->spot_usd_per_hour <= 0)
      continue;
    struct gw_mh_offer *o = gw_mh_find(d->hist, d->market[i].prov, t->name, t->zone, true);
    if (!o)
      continue;
    gw_mh_push(o, !t->spot_none && !(t->unavailable_until_us > now) && !o->lost,
               t->spot_usd_per_hour);
  }
  gw_mh_end_tick(d->hist, now);
  if (gw_mhv_sync(&d->views) < 0)
    sl_warn(T, "out of memory for the market's history: deadline jobs decide on the last view");
  d->ticks++;
}

/* ---- tracked jobs ---- */

static struct dl_job *job_find(struct gw_dl *d, int64_t id) {
  for (size_t i = 0; i < d->n_jobs; i++)
    if (d->jobs[i]->id == id)
      return d->jobs[i];
  return NULL;
}

static void job_free(struct dl_job *dj) {
  if (!dj)
    return;
  sl_policy_free(dj->pol);
  for (size_t z = 0; z < dj->n_zones; z++)
    if (dj->view[z])
      gw_mhv_release(dj->view[z]);
  free(dj);
}

static void forget(struct gw_dl *d, int64_t id) {
  for (size_t i = 0; i < d->n_jobs; i++)
    if (d->jobs[i]->id == id) {
      job_free(d->jobs[i]);
      d->jobs[i] = d->jobs[--d->n_jobs];
      return;
    }
}

/* Takes in the newest recorded tick of each of the job's zones. */
static int job_append(struct dl_job *dj) {
  if (dj->n == JOB_TICKS_MAX)
    return SL_ELIMIT; /* long past any deadline: the last view stays */
  for (size_t z = 0; z < dj->n_zones; z++)
    if (dj->view[z]->base + dj->view[z]->n <= dj->from[z] + dj->n)
      return -ENOMEM; /* a copy that could not grow (record_market): the last view stays */
  dj->n++;
  return 0;
}

/* Starts tracking j: its zones are the spot offers of the market that fit
 * its options, their history its market's past. NULL when it cannot be. */
static struct dl_job *track(struct gw_dl *d, struct gw_job *j, const struct gw_wants *w,
                            double window_s) {
  if (!d->ticks)
    record_market(d);
  if (d->n_jobs == d->cap_jobs) {
    size_t cap = d->cap_jobs ? 2 * d->cap_jobs : 16;
    struct dl_job **a = realloc(d->jobs, cap * sizeof *a);
    if (!a)
      return NULL;
    d->jobs = a;
    d->cap_jobs = cap;
  }
  struct dl_job *dj = calloc(1, sizeof *dj);
  if (!dj || sl_policy_new("spotlab", &dj->pol) < 0) {
    free(dj);
    return NULL;
  }
  dj->id = j->id;
  dj->window_s = window_s;
  dj->model_key = model_key(j);
  dj->queued_real_us = sl_time_real_us();
  dj->ondemand_price = INFINITY;
  size_t n = gw_sched_market(d->s, d->market, GW_SCHED_MARKET_MAX), hist = GW_MH_TICKS;
  for (size_t i = 0; i < n; i++) {
    const struct gw_instance_type *t = &d->market[i].type;
    if (!type_fits(w, t))
      continue;
    if (t->on_demand_usd_per_hour > 0 && (!w->max_price || t->on_demand_usd_per_hour <= w->max_price))
      dj->ondemand_price = fmin(dj->ondemand_price, t->on_demand_usd_per_hour);
    struct gw_mh_offer *o = gw_mh_find(d->hist, d->market[i].prov, t->name, t->zone, false);
    if (!o || o->n == o->first || dj->n_zones == SL_POLICY_ZONES_MAX || t->spot_usd_per_hour <= 0 ||
        (w->max_price && t->spot_usd_per_hour > w->max_price))
      continue;
    dj->offer[dj->n_zones++] = o;
    hist = o->n - o->first < hist ? o->n - o->first : hist;
  }
  if (!isfinite(dj->ondemand_price))
    dj->ondemand_price = 0;
  for (size_t z = 0; z < dj->n_zones; z++) { /* the last hist ticks, oldest first */
    const struct gw_mh_offer *o = dj->offer[z];
    dj->from[z] = o->n - hist;
    if (!(dj->view[z] = gw_mhv_use(&d->views, o, dj->from[z]))) {
      job_free(dj);
      return NULL;
    }
  }
  dj->n = dj->n_zones ? hist : 1;
  dj->origin = dj->n - 1; /* the newest recorded tick is the job's tick 0 */
  dj->start_elapsed_s = elapsed_s(d, j);
  dj->clock0_s = (double)sl_time_real_us() / 1e6 - (double)dj->origin * GW_DEADLINE_TICK_S;
  d->jobs[d->n_jobs++] = dj;
  return dj;
}

/* The segment j runs in, as the policy names it. */
static int job_mode(const struct gw_dl *d, const struct dl_job *dj, const struct gw_job *j) {
  if (!j->instance[0] || j->state == GW_JOB_QUEUED || j->state == GW_JOB_PREEMPTED ||
      gw_job_state_final(j->state))
    return SL_MODE_IDLE;
  if (!j->spot)
    return SL_MODE_OD;
  for (size_t z = 0; z < dj->n_zones; z++) {
    const struct gw_mh_offer *o = dj->offer[z];
    if (!strcmp(o->type, j->instance_type) && (!o->zone[0] || !strcmp(o->zone, j->zone)))
      return (int)z;
  }
  return SL_MODE_IDLE; /* spot the job's view does not hold */
}

/* Where zone z of dj is, for people: "g5.xlarge" or "g5.xlarge in us-east-1b". */
static void zone_name(const struct gw_dl *d, const struct dl_job *dj, int z, char *buf, size_t size) {
  const struct gw_mh_offer *o = dj->offer[z];
  snprintf(buf, size, "%s%s%s", o->type, o->zone[0] ? " in " : "", o->zone);
}

static void emit_plan(struct gw_dl *d, struct dl_job *dj, struct gw_job *j, const char *move) {
  const struct sl_decision *dec = &dj->dec;
  int shown = move ? dec->mode : dj->shown_mode;
  double gap = GW_DEADLINE_TICK_S, scale = scale_of(d);
  struct gw_deadline_work w;
  job_work(d, dj, j, dj->window_s, dj->model_key, &w);
  double slack_s = isfinite(dec->slack_ticks) ? dec->slack_ticks * gap : 0;
  double threshold_s = ceil(w.startup_s / gap - 1e-9) * gap;
  char where[128] = "", text[200];
  if (shown >= 0)
    zone_name(d, dj, shown, where, sizeof where);
  gw_deadline_plan_text(shown, where, threshold_s, dj->n_zones > 0, text, sizeof text);
  const char *mode = shown >= 0 ? "spot" : shown == SL_MODE_OD ? "on-demand" : "wait";
  char why[200];
  snprintf(why, sizeof why, "%s%s", shown != dec->mode ? "kept running; the policy alone would " : "",
           dec->why);
  int64_t deadline_us = j->created_us + (int64_t)(dj->window_s / scale * 1e6);
  json_t *ev = json_pack("{s:s,s:I,s:o,s:o,s:o,s:s,s:s,s:s,s:o}", "event", "plan", "deadline_us",
                         (json_int_t)deadline_us, "left_s", sl_json_real(fmax(0, dj->window_s - w.elapsed_s)),
                         "slack_s", sl_json_real(slack_s), "threshold_s", sl_json_real(threshold_s), "mode",
                         mode, "text", text, "why", why, "time_scale", sl_json_real(scale));
  if (ev && shown >= 0)
    json_object_set_new(ev, "where", json_string(where));
  if (ev && move)
    json_object_set_new(ev, "move", json_string(move));
  gw_sched_emit(d->s, j, ev);
  json_decref(ev);
  if (!dj->emitted || dj->emitted_mode != shown || move) {
    char id[16];
    sl_info(T, "%s: %s%s%s (%s)", gw_job_id_str(j->id, id, sizeof id), text, move ? "; moving " : "",
            move ? move : "", why);
  }
  dj->emitted = true;
  dj->emitted_mode = shown;
  dj->emitted_slack_s = slack_s;
}

/* The policy's decision for j now; a plan event when it changed or the
 * slack moved by a tenth (or two ticks). */
static void decide(struct gw_dl *d, struct dl_job *dj, struct gw_job *j) {
  struct gw_deadline_work w;
  job_work(d, dj, j, dj->window_s, dj->model_key, &w);
  int mode = job_mode(d, dj, j);
  double warm = 0;
  if (mode != SL_MODE_IDLE && !running(j)) { /* launched or starting: start-up under way */
    struct gw_inst *in = gw_fleet_inst(d->s->fleet, j->instance);
    int64_t since = in && in->row.launched_us > dj->queued_real_us ? in->row.launched_us : dj->queued_real_us;
    warm = w.startup_s - (double)(sl_time_real_us() - since) / 1e6 * scale_of(d);
  }
  struct sl_job_view jv;
  gw_deadline_view(&w, dj->start_elapsed_s, (int64_t)(dj->n - 1 - dj->origin), GW_DEADLINE_TICK_S, mode,
                   warm, &jv);
  struct sl_zone_view zv[SL_POLICY_ZONES_MAX];
  for (size_t z = 0; z < dj->n_zones; z++)
    zv[z] = (struct sl_zone_view){.avail = gw_mhv_avail(dj->view[z], dj->from[z]),
                                  .price = gw_mhv_price(dj->view[z], dj->from[z]), .n = dj->n};
  struct sl_market_view mv = {.zones = zv, .n_zones = dj->n_zones, .origin = dj->origin,
                              .ondemand_price = dj->ondemand_price, .gap_s = GW_DEADLINE_TICK_S,
                              .clock0_s = dj->clock0_s,
                              .nodes = 1};
  int before = dj->decided ? dj->shown_mode : INT32_MIN;
  if (dj->n_zones) {
    sl_policy_decide(dj->pol, &jv, &mv, &dj->dec);
  } else { /* no spot offer: on-demand is all there is */
    memset(&dj->dec, 0, sizeof dj->dec);
    dj->dec.mode = SL_MODE_OD;
    dj->dec.slack_ticks = (double)(jv.window - jv.t - (jv.work - jv.done) - jv.overhead);
    snprintf(dj->dec.why, sizeof dj->dec.why, "on-demand: no spot offer fits the job");
  }
  dj->decided = true;
  dj->dec_for_mode = mode;
  dj->shown_mode = dj->dec.mode == SL_MODE_IDLE && mode != SL_MODE_IDLE ? mode : dj->dec.mode;
  double slack_s = isfinite(dj->dec.slack_ticks) ? dj->dec.slack_ticks * GW_DEADLINE_TICK_S : 0;
  double moved = fabs(slack_s - dj->emitted_slack_s);
  if (!dj->emitted || before != dj->shown_mode ||
      moved >= fmax(2 * GW_DEADLINE_TICK_S, 0.1 * fabs(dj->emitted_slack_s)))
    emit_plan(d, dj, j, NULL);
}

/* A running job whose market the decision changed: stopped as a
 * preemption with notice stops it, then placed as decided. */
static void act(struct gw_dl *d, struct dl_job *dj, struct gw_job *j) {
  int want = dj->dec.mode;
  if (j->state == GW_JOB_QUEUED) {
    if (want != SL_MODE_IDLE)
      gw_sched_kick(d->s);
    return;
  }
  if (j->state != GW_JOB_RUNNING || j->gang || dj->moving || want == SL_MODE_IDLE ||
      (want == SL_MODE_OD) == !j->spot)
    return;
  struct gw_inst *in = gw_fleet_inst(d->s->fleet, j->instance);
  if (!in || !in->prov || in->notice || !in->registered)
    return;
  dj->moving = true;
  in->notice = true; /* its worker checkpoints on the SIGTERM as on a notice */
  emit_plan(d, dj, j, want == SL_MODE_OD ? "to on-demand" : "back to spot");
  in->prov->ops->terminate(in->prov, in->row.id);
}

static void tick(struct gw_dl *d) {
  record_market(d);
  for (size_t i = d->n_jobs; i-- > 0;) {
    struct dl_job *dj = d->jobs[i];
    struct gw_job *j = gw_fleet_job(d->s->fleet, dj->id);
    if (!j || gw_job_state_final(j->state)) {
      forget(d, dj->id);
      continue;
    }
    if (j->autockpt.steps_per_s > 0 && running(j)) { /* this attempt's measured rate */
      struct gw_inst *in = gw_fleet_inst(d->s->fleet, j->instance);
      double step_s = gw_provider_time_scale(in ? in->prov : NULL) / j->autockpt.steps_per_s;
      /* averaged: an attempt's first rates include its restore */
      dj->step_s = dj->step_s > 0 ? 0.8 * dj->step_s + 0.2 * step_s : step_s;
      memo_put(d, dj->model_key, dj->step_s);
    }
    job_append(dj);
    decide(d, dj, j);
    act(d, dj, j);
  }
  /* the shared copies keep what the jobs still tracked read */
  gw_mhv_trim_begin(&d->views);
  for (size_t i = 0; i < d->n_jobs; i++)
    for (size_t z = 0; z < d->jobs[i]->n_zones; z++)
      gw_mhv_keep(d->jobs[i]->view[z], d->jobs[i]->from[z]);
  gw_mhv_trim_end(&d->views);
  /* jobs not tracked yet (loaded after a restart, or never placed since) */
  for (size_t i = 0; i < gw_fleet_n_jobs(d->s->fleet); i++) {
    struct gw_job *j = gw_fleet_job_at(d->s->fleet, i);
    struct gw_wants w;
    double window_s;
    char why[8];
    if (job_find(d, j->id) || gw_job_state_final(j->state))
      continue;
    gw_sched_wants(d->s, j, &w);
    if (w.nodes > 1 || w.spot == 0 ||
        gw_deadline_option(json_object_get(j->spec, "options"), &window_s, why, sizeof why) != 0)
      continue;
    struct dl_job *dj = track(d, j, &w, window_s);
    if (dj) {
      decide(d, dj, j);
      act(d, dj, j);
    }
  }
}

static int64_t on_timer(struct gw_loop *l, int64_t id, int64_t now_us, void *data) {
  (void)l;
  (void)id;
  (void)now_us;
  struct gw_dl *d = data;
  tick(d);
  return sl_time_mono_us() + tick_wall_us(d);
}

/* ---- the scheduler's hooks ---- */

int gw_sched_deadline_wants(struct gw_sched *s, struct gw_job *j, struct gw_wants *w) {
  struct gw_dl *d = s->dl;
  double window_s;
  char why[8];
  if (!d || w->nodes > 1 || w->spot == 0 ||
      gw_deadline_option(json_object_get(j->spec, "options"), &window_s, why, sizeof why) != 0)
    return 0;
  struct dl_job *dj = job_find(d, j->id);
  if (!dj && !(dj = track(d, j, w, window_s)))
    return 0;
  int mode = job_mode(d, dj, j);
  if (!dj->decided || dj->dec_for_mode != mode)
    decide(d, dj, j);
  int want = dj->dec.mode;
  if (want == SL_MODE_IDLE)
    return -EAGAIN;
  const struct gw_mh_offer *o = want >= 0 ? dj->offer[want] : NULL;
  double price = o ? gw_mh_price(o, o->n - 1) : 0;
  if (!o || (w->max_price && price > w->max_price)) {
    w->spot = 0; /* on-demand, or the spot price rose past max_price since the tick */
    return 0;
  }
  w->spot = 1;
  w->n_types = 1;
  snprintf(w->types[0], sizeof w->types[0], "%s", o->type);
  return 0;
}

void gw_sched_deadline_lost(struct gw_sched *s, const struct gw_provider *prov, const char *type,
                            const char *zone) {
  struct gw_dl *d = s->dl;
  if (!d)
    return;
  for (size_t i = 0; i < gw_mh_count(d->hist); i++) { /* an offer without a zone stands for all of them */
    struct gw_mh_offer *o = gw_mh_at(d->hist, i);
    if (o->prov == prov && !strcmp(o->type, type) && (!o->zone[0] || !zone || !strcmp(o->zone, zone)))
      o->lost = true;
  }
}

/* Whether id's start-up was counted already; it is from now on. */
static bool measured(struct gw_dl *d, const char *id) {
  for (size_t i = 0; i < sizeof d->measured / sizeof d->measured[0]; i++)
    if (!strcmp(d->measured[i], id))
      return true;
  snprintf(d->measured[d->measured_next], sizeof d->measured[0], "%s", id);
  d->measured_next = (d->measured_next + 1) % (sizeof d->measured / sizeof d->measured[0]);
  return false;
}

void gw_sched_deadline_state(struct gw_sched *s, struct gw_job *j) {
  struct gw_dl *d = s->dl;
  if (!d)
    return;
  int64_t now = sl_time_real_us();
  struct dl_job *dj = job_find(d, j->id);
  struct gw_inst *in = j->instance[0] ? gw_fleet_inst(s->fleet, j->instance) : NULL;
  double scale = gw_provider_time_scale(in ? in->prov : NULL);
  if (j->state == GW_JOB_RUNNING && in && in->row.launched_us >= j->created_us &&
      (!dj || in->row.launched_us >= dj->queued_real_us) && !measured(d, in->row.id)) {
    /* launched for this attempt: its start-up, launch to running */
    double up_s = (double)(now - in->row.launched_us) / 1e6 * scale;
    if (up_s > 0 && up_s < STARTUP_MAX_S) {
      d->startup_s = d->startup_s > 0 ? 0.7 * d->startup_s + 0.3 * up_s : up_s;
      d->changes++;
    }
  }
  if (!dj)
    return;
  if (running(j)) {
    if (!dj->run_since_real_us)
      dj->run_since_real_us = now;
    return;
  }
  if (dj->run_since_real_us) {
    dj->run_done_s += (double)(now - dj->run_since_real_us) / 1e6 * scale;
    dj->run_since_real_us = 0;
  }
  if (j->state == GW_JOB_QUEUED) {
    dj->queued_real_us = now;
    dj->moving = false;
  }
  if (gw_job_state_final(j->state))
    forget(d, j->id);
}

int gw_sched_deadline_check(struct gw_sched *s, const struct gw_job *j, char *why, size_t size) {
  struct gw_dl *d = s->dl;
  double window_s;
  int r = gw_deadline_option(json_object_get(j->spec, "options"), &window_s, why, size);
  if (r != 0 || !d)
    return r < 0 ? r : 0;
  struct gw_wants w;
  gw_sched_wants(s, j, &w);
  size_t n = gw_sched_market(s, d->market, GW_SCHED_MARKET_MAX);
  bool od = false;
  for (size_t i = 0; i < n && !od; i++) {
    const struct gw_instance_type *t = &d->market[i].type;
    od = type_fits(&w, t) && t->on_demand_usd_per_hour > 0 &&
         (!w.max_price || t->on_demand_usd_per_hour <= w.max_price);
  }
  if (n && !od) {
    snprintf(why, size, "deadline= needs on-demand capacity to fall back on, and no on-demand "
                        "instance type fits the job's gpus, instance and max_price options");
    return SL_ECONFIG;
  }
  struct gw_deadline_work wk;
  job_work(d, NULL, j, window_s, model_key(j), &wk);
  wk.elapsed_s = 0;
  if (gw_deadline_earliest_s(&wk) <= window_s)
    return 0;
  gw_deadline_refusal(&wk, scale_of(d), why, size);
  return SL_ECONFIG;
}

/* ---- kept across restarts ---- */

uint64_t gw_sched_deadline_changes(const struct gw_dl *d) { return d ? d->changes : 0; }

json_t *gw_sched_deadline_json(const struct gw_dl *d) {
  json_t *steps = json_array();
  json_t *o = json_pack("{s:o,s:o}", "startup_s", sl_json_real(d->startup_s), "steps", steps);
  if (!o)
    return NULL;
  for (size_t k = 0; k < STEP_MEMORY; k++) { /* oldest first: read back in order */
    const struct step_memo *m = &d->memo[(d->memo_next + k) % STEP_MEMORY];
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, m->key);
    if (m->key && m->step_s > 0)
      json_array_append_new(steps, json_pack("{s:s,s:o}", "model", hex, "step_s",
                                             sl_json_real(m->step_s)));
  }
  return o;
}

size_t gw_sched_deadline_load(struct gw_dl *d, const json_t *j, size_t *ret_skipped) {
  size_t n = 0, skipped = 0, i;
  const json_t *e, *up = json_object_get(j, "startup_s");
  double up_s = json_number_value(up);
  if (json_is_number(up) && up_s > 0 && up_s < STARTUP_MAX_S) {
    d->startup_s = up_s;
    n++;
  } else if (up && up_s != 0) {
    skipped++;
  }
  json_array_foreach(json_object_get(j, "steps"), i, e) {
    const char *hex = json_string_value(json_object_get(e, "model"));
    const json_t *v = json_object_get(e, "step_s");
    uint64_t key = hex && strlen(hex) == 16 && strspn(hex, "0123456789abcdef") == 16
                       ? strtoull(hex, NULL, 16) : 0;
    if (!key || !json_is_number(v) || !(json_number_value(v) > 0) ||
        !isfinite(json_number_value(v))) {
      skipped++;
      continue;
    }
    memo_put(d, key, json_number_value(v));
    n++;
  }
  if (ret_skipped)
    *ret_skipped = skipped;
  return n;
}

/* ---- life ---- */

struct gw_dl *gw_sched_deadline_new(struct gw_sched *s) {
  struct gw_dl *d = calloc(1, sizeof *d);
  if (!d || !(d->hist = gw_mh_new(s->store))) {
    free(d);
    return NULL;
  }
  d->s = s;
  if (s->loop) {
    d->timer = gw_loop_add_timer(s->loop, sl_time_mono_us() + TICK_WALL_MIN_US, on_timer, d);
    if (d->timer < 0) {
      gw_mh_free(d->hist);
      free(d);
      return NULL;
    }
  }
  return d;
}

struct gw_dl *gw_sched_deadline_free(struct gw_dl *d) {
  if (!d)
    return NULL;
  if (d->timer > 0)
    gw_loop_del_timer(d->s->loop, d->timer);
  for (size_t i = 0; i < d->n_jobs; i++)
    job_free(d->jobs[i]);
  free(d->jobs);
  gw_mhv_clear(&d->views);
  gw_mh_free(d->hist);
  free(d);
  return NULL;
}
