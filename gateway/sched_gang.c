/* Gangs: a nodes=N train job on N instances at once (sched_int.h, gang.h).
 *
 * Placement is all or none: N instances of one provider, type and market,
 * idle workers first and the rest launched in the same pass; if one launch
 * is refused the others of that pass are given back and the job waits in
 * the queue, as a one-instance job waits for capacity, with a state event
 * that says so. Rank 0 is assigned once every member has registered; its
 * worker picks a free port, starts spotlab-train listening there and names
 * the rendezvous in its `started`; the other ranks are assigned then, with
 * it. Only rank 0 reports steps and checkpoints (spotlab-train's rank 0 is
 * the run's one voice); every member's instance costs until it ends.
 *
 * The attempt ends as a whole: the first member that ends otherwise than
 * succeeded (a done preempted, failed or cancelled, or an instance gone)
 * has the others told to stop (`cancel`; `grace_ms` 0 after a loss without
 * notice, since their processes wait on a peer that is no more), and once
 * every member has ended, gw_gang_outcome decides: succeeded, cancelled,
 * failed, or placed again on N instances from the newest checkpoint. A
 * notice on any member makes spotlab-train checkpoint on rank 0 and stop on
 * every rank (a SIGTERM to one rank stops them all), so the resume loses no
 * step; without one the job resumes from the newest periodic checkpoint.
 * Each member's instance is freed when that member ends: idle, or draining
 * when it had a notice. */
#include "sched_int.h"

#include "gang.h"
#include "loop.h"

#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T "gateway.sched"
#define BACKOFF_MIN_US SL_US_PER_S
#define BACKOFF_MAX_US (60 * SL_US_PER_S)

static struct gw_inst *member_inst(struct gw_sched *s, const struct gw_job *j, int rank) {
  struct gw_inst *in = gw_fleet_inst(s->fleet, j->gang->m[rank].instance);
  return in && in->row.job == j->id ? in : NULL;
}

static void set_member(struct gw_gang_member *m, const struct gw_inst *in, double usd,
                       double on_demand_usd) {
  memset(m, 0, sizeof *m);
  snprintf(m->instance, sizeof m->instance, "%s", in->row.id);
  m->usd_per_hour = usd;
  m->on_demand_usd_per_hour = on_demand_usd;
  m->exit_code = -1;
}

void gw_sched_gang_price(const struct gw_job *j, double *ret_usd, double *ret_on_demand_usd) {
  double usd = 0, od = 0;
  for (int r = 0; r < j->gang->n; r++)
    if (j->gang->m[r].end == GW_GANG_LIVE) {
      usd += j->gang->m[r].usd_per_hour;
      od += j->gang->m[r].on_demand_usd_per_hour;
    }
  *ret_usd = usd;
  *ret_on_demand_usd = od;
}

json_t *gw_sched_gang_assign_field(const struct gw_job *j, int rank) {
  json_t *g = json_pack("{s:i,s:i}", "rank", rank, "world_size", j->gang->n);
  if (rank > 0)
    json_object_set_new(g, "rendezvous", json_string(j->gang->rendezvous));
  return g;
}

/* ---- placement ---- */

/* A queued gang that cannot be placed now says why, once per wait. */
static void wait_reason(struct gw_sched *s, struct gw_job *j, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void wait_reason(struct gw_sched *s, struct gw_job *j, const char *fmt, ...) {
  char why[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  if (j->state == GW_JOB_QUEUED && strcmp(j->reason, why))
    gw_sched_transition(s, j, GW_JOB_QUEUED, why);
}

/* user's registered workers without a job, into idle; their count. One with
 * a notice is about to go; another user's is not reused (place_one). */
static size_t idle_insts(struct gw_sched *s, const char *user, const struct gw_inst **idle) {
  size_t n = 0;
  for (size_t i = 0; i < gw_fleet_n_insts(s->fleet) && n < GW_MAX_INSTANCES; i++) {
    struct gw_inst *in = gw_fleet_inst_at(s->fleet, i);
    if (in->registered && in->prov && !in->row.job && !in->notice && !in->at_risk &&
        !strcmp(in->row.state, "idle") && !strcmp(in->row.user, user))
      idle[n++] = in;
  }
  return n;
}

/* The job waits in the queue for its whole gang: -EAGAIN. */
static int wait_whole(struct gw_sched *s, struct gw_job *j, const struct gw_wants *w) {
  wait_reason(s, j, "waiting for %d instances at once (nodes=%d): fewer can be had now", w->nodes,
              w->nodes);
  return -EAGAIN;
}

/* After a refused launch: no launches for the job until the backoff has
 * passed (each try launches instances that are given back). */
static void back_off(struct gw_job *j) {
  j->gang_backoff_us = j->gang_backoff_us < BACKOFF_MIN_US ? BACKOFF_MIN_US
                       : j->gang_backoff_us * 2 > BACKOFF_MAX_US ? BACKOFF_MAX_US
                                                                 : j->gang_backoff_us * 2;
  j->gang_retry_mono_us = sl_time_mono_us() + j->gang_backoff_us;
}

/* The gang of pick p: its idle members, and its launches. 0: *ret, owned;
 * -EAGAIN: a launch refused for capacity (the *ret_given_back launched
 * before it are given back); 1: the job failed (a launch failed for
 * another reason); -ENOMEM. */
static int launch_gang(struct gw_sched *s, struct gw_job *j, const struct gw_wants *w,
                       const struct gw_gang_pick *p, const struct gw_inst *const *idle,
                       struct gw_gang **ret, size_t *ret_given_back) {
  *ret_given_back = 0;
  struct gw_gang *g = calloc(1, sizeof *g);
  if (!g)
    return -ENOMEM;
  g->n = w->nodes;
  /* the idle members come first (rank 0 among them when there is one);
   * their ids are copied: a launch given back shifts the fleet's table */
  for (size_t k = 0; k < p->n_idle; k++)
    set_member(&g->m[k], idle[p->idle[k]], idle[p->idle[k]]->row.price_usd_per_hour,
               idle[p->idle[k]]->row.on_demand_usd_per_hour);
  const struct gw_offer *o = p->n_launch ? &s->offers[p->offer] : NULL;
  for (size_t k = 0; k < p->n_launch; k++) {
    char id[GW_INSTANCE_ID_MAX];
    int r = gw_sched_launch_inst(s, j, o, p->spot, id);
    if (r < 0) { /* all or none: what this try launched is given back */
      for (size_t b = 0; b < k; b++)
        gw_sched_discard_launch(s, g->m[p->n_idle + b].instance);
      free(g);
      if (r != -EAGAIN && r != SL_ENOTSUP && r != SL_ELIMIT) {
        char why[256];
        snprintf(why, sizeof why, "cannot launch a %s instance: %s", o->type.name, sl_strerror(r));
        sl_err(T, "%s", why);
        gw_sched_finish(s, j, GW_JOB_FAILED, why);
        return 1;
      }
      char jid[24];
      sl_info(T, "job %s: %zu of %d instances for its gang; the %zu launched are given back",
              gw_job_id_str(j->id, jid, sizeof jid), p->n_idle + k, w->nodes, k);
      *ret_given_back = k;
      return -EAGAIN;
    }
    struct gw_inst *in = gw_fleet_inst(s->fleet, id);
    set_member(&g->m[p->n_idle + k], in, in->row.price_usd_per_hour,
               in->row.on_demand_usd_per_hour);
  }
  *ret = g;
  return 0;
}

int gw_sched_place_gang(struct gw_sched *s, struct gw_job *j, const struct gw_wants *w,
                        bool *no_capacity) {
  char why[256];
  if (strcmp(j->kind, "train")) {
    gw_sched_finish(s, j, GW_JOB_FAILED, "nodes=N applies to train jobs only");
    return 0;
  }
  if (w->nodes > s->cfg->max_instances) {
    snprintf(why, sizeof why, "nodes=%d is more than the gateway's max_instances (%lld)",
             w->nodes, (long long)s->cfg->max_instances);
    gw_sched_finish(s, j, GW_JOB_FAILED, why);
    return 0;
  }
  /* launches wait when one for another job failed in this pass */
  bool launch = s->n_provs && !*no_capacity;
  struct gw_gang_pick p;
  struct gw_gang *g = NULL;
  /* a launch refused for capacity is remembered and held back for the
   * pass: when the refusal came before anything was launched, the next best
   * group (another type, zone or market) is tried at once, as for one
   * instance; after launches given back, or once no group is left, the
   * backoff */
  const struct gw_inst *idle[GW_MAX_INSTANCES];
  for (int tries = 0;; tries++) {
    /* taken anew each try: a launch given back shifts the fleet's table */
    size_t n_idle = idle_insts(s, j->user, idle);
    size_t active = gw_fleet_active_insts(s->fleet), max = (size_t)s->cfg->max_instances;
    size_t max_launch = !launch || active >= max ? 0 : max - active;
    /* a provider that refused part of a gang is asked again after a backoff
     * (each try launches instances that are given back), sooner when its
     * market changes; idle workers alone may form the gang meanwhile */
    if (sl_time_mono_us() < j->gang_retry_mono_us)
      max_launch = 0;
    struct gw_place_rate rates[GW_PLACE_RATES_MAX];
    struct gw_place_ctx c;
    gw_sched_place_ctx(s, j, rates, &c);
    int r = gw_place_pick_gang(w, &c, idle, n_idle, s->offers, s->n_offers, max_launch, &p);
    if (r == SL_ENAME && !tries) {
      snprintf(why, sizeof why, "no instance type matches the job's gpus, spot, max_price and "
               "instance options for %d instances of one type", w->nodes);
      gw_sched_finish(s, j, GW_JOB_FAILED, why);
      return 0;
    }
    if (r < 0) {
      if (tries) { /* each gang left was refused in this pass */
        *no_capacity = true;
        back_off(j);
      }
      return wait_whole(s, j, w);
    }
    unsigned refused = s->refused;
    size_t given_back = 0;
    r = launch_gang(s, j, w, &p, idle, &g, &given_back);
    if (r == 0)
      break;
    if (r != -EAGAIN)
      return r == 1 ? 0 : r;
    if (given_back || s->refused == refused || tries >= 2 * (int)s->n_offers) {
      *no_capacity = true;
      back_off(j);
      return wait_whole(s, j, w);
    }
  }
  for (size_t k = 0; k < p.n_idle; k++) /* reserved until rank 0 is assigned */
    gw_fleet_inst_set_state(s->fleet, gw_fleet_inst(s->fleet, g->m[k].instance), "busy", j->id);
  j->gang_backoff_us = j->gang_retry_mono_us = 0;
  struct gw_inst *first = gw_fleet_inst(s->fleet, g->m[0].instance);
  g->time_scale = gw_provider_time_scale(first ? first->prov : NULL);
  j->gang = g;
  snprintf(j->instance, sizeof j->instance, "%s", g->m[0].instance);
  gw_queue_take(s->queue, j->id);
  char id[24];
  sl_info(T, "job %s: gang of %d (%zu idle, %zu launched, $%.4f/h)", gw_job_id_str(j->id, id, sizeof id), g->n,
          p.n_idle, p.n_launch, p.usd_per_hour);
  if (p.n_launch) {
    snprintf(why, sizeof why, "launching %zu of %d instances (nodes=%d)", p.n_launch, g->n, g->n);
    gw_sched_transition(s, j, GW_JOB_PROVISIONING, why);
  }
  gw_sched_gang_progress(s, j);
  return 0;
}

/* Whether the members would train on different devices. A job that names
 * neither gpus nor device trains on its instance's GPUs where spotlab-train
 * can use them and on the CPU elsewhere (a GPU lost, an image without CUDA),
 * and a data-parallel run needs one device on every rank: ranks that
 * disagree cannot meet (NCCL's rendezvous on one, gloo's on another). A job
 * that names either is held to it by each worker. Members that did not
 * report their GPUs (older workers) are taken to agree. */
static bool devices_differ(struct gw_sched *s, const struct gw_job *j, char *why, size_t size) {
  const json_t *o = json_object_get(j->spec, "options");
  if (json_object_get(o, "gpus") || json_object_get(o, "device"))
    return false;
  int gpu = -1, cpu = -1;
  for (int r = 0; r < j->gang->n; r++) {
    const struct gw_inst *in = member_inst(s, j, r);
    if (!in || !in->found_gpus.known)
      return false;
    bool usable = in->found_gpus.count > 0 && !in->found_gpus.unusable[0];
    if (usable && gpu < 0)
      gpu = r;
    if (!usable && cpu < 0)
      cpu = r;
  }
  if (gpu < 0 || cpu < 0)
    return false;
  const struct gw_gpus *c = &member_inst(s, j, cpu)->found_gpus;
  snprintf(why, size, "nodes=%d: rank %d (%s) would train on its GPUs and rank %d (%s) on the CPU "
           "(%.160s); every rank of a data-parallel run needs the same device: name gpus=N, or "
           "device=cpu", j->gang->n, gpu, j->gang->m[gpu].instance, cpu, j->gang->m[cpu].instance,
           c->count ? c->unusable : c->reason[0] ? c->reason : "no GPU");
  return true;
}

void gw_sched_gang_progress(struct gw_sched *s, struct gw_job *j) {
  struct gw_gang *g = j->gang;
  if (!g || g->stopping || g->m[0].assigned)
    return;
  bool launched = true, registered = true;
  for (int r = 0; r < g->n; r++) {
    struct gw_inst *in = member_inst(s, j, r);
    if (!in)
      return;
    launched &= in->launched;
    registered &= in->registered;
  }
  struct gw_inst *in0 = member_inst(s, j, 0);
  if (!g->placed && launched) {
    gw_sched_write_placement(j, in0);
    g->placed = true;
    gw_sched_emit_placed(s, j);
  }
  if (!g->placed || !registered)
    return;
  char why[512];
  if (devices_differ(s, j, why, sizeof why)) {
    gw_sched_finish(s, j, GW_JOB_FAILED, why);
    return;
  }
  if (gw_sched_assign(s, j, in0) < 0) {
    gw_sched_gang_lost(s, j, 0, "rank 0's worker could not be sent its assignment");
    return;
  }
  for (int r = 1; r < g->n; r++) { /* the job's from now on, assigned when rank 0 listens */
    struct gw_inst *in = member_inst(s, j, r);
    snprintf(in->row.user, sizeof in->row.user, "%s", j->user);
    snprintf(in->session, sizeof in->session, "%s", j->session);
    gw_fleet_inst_set_state(s->fleet, in, "busy", j->id);
  }
}

/* ---- the attempt's end ---- */

/* A gang that never started (no rank was assigned) waits in the queue again
 * without a preemption: its instances are freed, launched ones included. */
static void unplace(struct gw_sched *s, struct gw_job *j, const char *why) {
  if (j->gang->placed)
    gw_sched_end_attempt(s, j, "not started", "idle");
  gw_sched_clear_placement(j);
  j->cost_accrued_mono_us = 0;
  gw_queue_push(s->queue, j->user, j->id, 1);
  gw_sched_transition(s, j, GW_JOB_QUEUED, why);
  gw_sched_kick(s);
}

/* Every member has ended: the job's outcome. */
static void decide(struct gw_sched *s, struct gw_job *j) {
  struct gw_gang *g = j->gang;
  int rank;
  bool notice;
  int64_t code;
  bool finished = j->steps <= 0 || j->step >= j->steps;
  enum gw_gang_outcome o = gw_gang_outcome(g, j->cancel_requested, finished, &rank, &notice, &code);
  if (o == GW_GANG_WAIT)
    return;
  if (j->pause_requested && !j->cancel_requested && o != GW_GANG_DONE_OK) {
    gw_sched_paused(s, j); /* stopped for its budget, at rank 0's final checkpoint */
    return;
  }
  char inst[GW_INSTANCE_ID_MAX], why[384];
  snprintf(inst, sizeof inst, "%s", g->m[rank].instance);
  bool started = g->m[0].assigned;
  switch (o) {
  case GW_GANG_DONE_OK:
    gw_sched_finish(s, j, GW_JOB_SUCCEEDED, "done");
    return;
  case GW_GANG_DONE_CANCELLED:
    gw_sched_finish(s, j, GW_JOB_CANCELLED, "cancelled");
    return;
  case GW_GANG_DONE_FAILED:
    snprintf(why, sizeof why, "%s", g->why[0] ? g->why : "a rank failed");
    gw_sched_finish(s, j, GW_JOB_FAILED, why);
    return;
  case GW_GANG_REQUEUE:
    if (!started) {
      unplace(s, j, "an instance of the gang was lost before it started; waiting for capacity");
      return;
    }
    snprintf(why, sizeof why, "instance %s (rank %d of %d) was %s; the gang resumes on %d "
             "instances", inst, rank, g->n, g->m[rank].noticed ? "preempted" : "lost", g->n);
    gw_sched_requeue_at(s, j, notice, why, inst);
    return;
  case GW_GANG_RETRY:
    if (!started) {
      unplace(s, j, "the gang stopped before it started; waiting for capacity");
      return;
    }
    if (j->process_retries >= s->cfg->process_retries) {
      snprintf(why, sizeof why, "%s; the gang stopped %d times without a new checkpoint",
               g->why[0] ? g->why : "rank 0 stopped before the last step", j->process_retries + 1);
      gw_sched_finish(s, j, GW_JOB_FAILED, why);
      return;
    }
    j->process_retries++;
    if (code > 128 && code <= 128 + 64)
      snprintf(why, sizeof why, "the process of rank %d was killed by signal %d (retry %d of %lld)",
               rank, (int)(code - 128), j->process_retries, (long long)s->cfg->process_retries);
    else if (g->m[rank].transient)
      snprintf(why, sizeof why, "the worker could not start the job: %.280s (retry %d of %lld)", g->why,
               j->process_retries, (long long)s->cfg->process_retries);
    else
      snprintf(why, sizeof why, "the gang stopped before the last step (retry %d of %lld)",
               j->process_retries, (long long)s->cfg->process_retries);
    if (g->m[rank].transient)
      gw_sched_requeue_retry(s, j, why, inst);
    else
      gw_sched_requeue_at(s, j, false, why, inst);
    return;
  case GW_GANG_WAIT:
    return;
  }
}

/* Tells every member still running to stop; members never assigned have
 * nothing to stop and end at once. now: no grace (a peer is gone without
 * notice: what the others compute is lost anyway). */
static void stop_members(struct gw_sched *s, struct gw_job *j, bool now) {
  struct gw_gang *g = j->gang;
  g->stopping = true;
  gw_sched_flush_cost(s, j, false);
  char id[16];
  gw_job_id_str(j->id, id, sizeof id);
  for (int r = 0; r < g->n; r++) {
    struct gw_gang_member *m = &g->m[r];
    if (m->end != GW_GANG_LIVE)
      continue;
    struct gw_inst *in = member_inst(s, j, r);
    if (!m->assigned || !in) {
      m->end = GW_GANG_CANCELLED;
      if (in) /* reserved or launching: free for the next placement */
        gw_fleet_inst_set_state(s->fleet, in, in->launched ? "idle" : "launching", 0);
      continue;
    }
    json_t *c = gw_sched_cancel_msg(id, j->attempt);
    if (now)
      json_object_set_new(c, "grace_ms", json_integer(0));
    if (gw_fleet_send(s->fleet, in, c) < 0)
      sl_debug(T, "%s: cancel for rank %d not sent now; its worker gets it when it registers", id, r);
    json_decref(c);
  }
}

/* Member rank ended: its instance is freed (unless it is gone), the others
 * are stopped if it ended early, and the job's outcome follows once all
 * have ended. */
static void member_end(struct gw_sched *s, struct gw_job *j, int rank, enum gw_gang_end end,
                       int64_t exit_code) {
  struct gw_gang *g = j->gang;
  struct gw_gang_member *m = &g->m[rank];
  gw_sched_flush_cost(s, j, false); /* what it cost until now, before its price leaves the sum */
  struct gw_inst *in = member_inst(s, j, rank);
  m->noticed |= in && in->notice;
  m->end = end;
  m->exit_code = exit_code;
  if (in && end != GW_GANG_LOST)
    gw_fleet_inst_set_state(s->fleet, in, in->notice ? "draining" : "idle", 0);
  char id[16];
  sl_info(T, "%s: rank %d of %d (%s) ended: %s", gw_job_id_str(j->id, id, sizeof id), rank, g->n,
          m->instance, end == GW_GANG_LOST ? "instance lost" : end == GW_GANG_SUCCEEDED ? "succeeded"
          : end == GW_GANG_PREEMPTED ? "preempted" : end == GW_GANG_CANCELLED ? "cancelled" : "failed");
  if (end != GW_GANG_SUCCEEDED && !g->stopping)
    stop_members(s, j, end == GW_GANG_LOST && !m->noticed);
  gw_sched_kick(s);
  decide(s, j);
}

void gw_sched_gang_lost(struct gw_sched *s, struct gw_job *j, int rank, const char *why) {
  if (!j->gang || rank < 0 || rank >= j->gang->n || j->gang->m[rank].end != GW_GANG_LIVE)
    return;
  char id[16];
  sl_info(T, "%s: rank %d (%s): %s", gw_job_id_str(j->id, id, sizeof id), rank,
          j->gang->m[rank].instance, why);
  member_end(s, j, rank, GW_GANG_LOST, -1);
}

void gw_sched_gang_done(struct gw_sched *s, struct gw_job *j, struct gw_inst *in, const json_t *done) {
  int rank = gw_sched_rank(j, in);
  if (!j->gang || rank < 0 || j->gang->m[rank].end != GW_GANG_LIVE)
    return;
  const char *status = sl_json_get_str(done, "status", "");
  int64_t code = sl_json_get_int(done, "exit_code", -1);
  enum gw_gang_end end = gw_gang_end_from_status(status);
  if (rank == 0) {
    int64_t step = sl_json_get_int(done, "step", j->step);
    if (step > j->step)
      j->step = step;
  }
  if (end == GW_GANG_FAILED && !j->gang->why[0]) {
    const char *msg = sl_json_get_str(done, "message", "");
    snprintf(j->gang->why, sizeof j->gang->why, "rank %d (%s): %.200s", rank, in->row.id,
             *msg ? msg : status);
  }
  j->gang->m[rank].transient = end == GW_GANG_FAILED && json_is_true(json_object_get(done, "retry"));
  member_end(s, j, rank, end, code);
}

void gw_sched_gang_pause(struct gw_sched *s, struct gw_job *j) {
  if (!j->gang->stopping)
    stop_members(s, j, false);
  decide(s, j);
}

void gw_sched_gang_cancel(struct gw_sched *s, struct gw_job *j) {
  j->cancel_requested = true;
  gw_sched_emit(s, j, NULL);
  if (!j->gang->stopping)
    stop_members(s, j, false);
  decide(s, j); /* every member may have ended already */
}

/* ---- the workers ---- */

void gw_sched_started(struct gw_sched *s, struct gw_job *j, struct gw_inst *in,
                      const char *rendezvous) {
  if (!j->gang) {
    if (j->state == GW_JOB_STARTING)
      gw_sched_transition(s, j, GW_JOB_RUNNING, "process started");
    return;
  }
  struct gw_gang *g = j->gang;
  int rank = gw_sched_rank(j, in);
  if (rank < 0 || g->m[rank].end != GW_GANG_LIVE || g->m[rank].started)
    return;
  g->m[rank].started = true;
  char id[16];
  gw_job_id_str(j->id, id, sizeof id);
  if (rank == 0 && !g->stopping) {
    if (!rendezvous || strncmp(rendezvous, "tcp://", 6) || strlen(rendezvous) >= sizeof g->rendezvous ||
        strpbrk(rendezvous, " \t\r\n")) {
      /* the gateway gives up on the attempt: a done of its own for rank 0 */
      snprintf(g->why, sizeof g->why, "the worker of rank 0 (%s) named no rendezvous address "
               "(tcp://HOST:PORT): it does not run nodes=N jobs", in->row.id);
      sl_warn(T, "%s: %s", id, g->why);
      g->gave_up = true;
      stop_members(s, j, true);
      return;
    }
    snprintf(g->rendezvous, sizeof g->rendezvous, "%s", rendezvous);
    sl_info(T, "%s: rank 0 listens on %s; assigning ranks 1..%d", id, g->rendezvous, g->n - 1);
    for (int r = 1; r < g->n && !g->stopping; r++) {
      struct gw_inst *m = member_inst(s, j, r);
      if (!m || gw_sched_send_assign(s, j, m) < 0) {
        gw_sched_gang_lost(s, j, r, "its worker could not be sent its assignment");
        return;
      }
    }
  }
  for (int r = 0; r < g->n; r++)
    if (!g->m[r].started)
      return;
  if (j->state == GW_JOB_STARTING) {
    char why[64];
    snprintf(why, sizeof why, "the processes of all %d ranks started", g->n);
    gw_sched_transition(s, j, GW_JOB_RUNNING, why);
  }
}

bool gw_sched_gang_assigned(const struct gw_job *j, const struct gw_inst *in) {
  int rank = j && j->gang ? gw_sched_rank(j, in) : -1;
  return rank >= 0 && j->gang->m[rank].assigned;
}

void gw_sched_gang_register(struct gw_sched *s, struct gw_job *j, struct gw_inst *in, bool listed,
                            bool was_registered, bool assigned_before) {
  struct gw_gang *g = j->gang;
  int rank = gw_sched_rank(j, in);
  if (rank < 0 || g->m[rank].end != GW_GANG_LIVE) {
    gw_fleet_inst_set_state(s->fleet, in, in->notice ? "draining" : "idle", 0);
    return;
  }
  struct gw_gang_member *m = &g->m[rank];
  if (!m->assigned) {
    if (!g->stopping)
      gw_sched_gang_progress(s, j); /* the last member to register has rank 0 assigned */
    return;
  }
  if (!assigned_before)
    return; /* assigned by this very register (it also told of the launch) */
  char id[16];
  gw_job_id_str(j->id, id, sizeof id);
  if (listed) {
    if (g->stopping) { /* a cancel that could not reach it before */
      json_t *c = gw_sched_cancel_msg(id, j->attempt);
      gw_fleet_send(s->fleet, in, c);
      json_decref(c);
    }
    return;
  }
  if (was_registered && !m->started && !j->wait_register_until_us && !g->stopping) {
    gw_sched_send_assign(s, j, in); /* the register crossed our assign */
    return;
  }
  /* the worker no longer has the job (it restarted under a gateway restart):
   * its instance is free, its rank lost */
  gw_sched_flush_cost(s, j, false);
  gw_fleet_inst_set_state(s->fleet, in, "idle", 0);
  member_end(s, j, rank, GW_GANG_LOST, -1);
}

/* ---- restart ---- */

void gw_sched_gang_load(struct gw_sched *s, struct gw_job *j) {
  struct gw_wants w;
  gw_sched_wants(s, j, &w);
  struct gw_gang *g = calloc(1, sizeof *g);
  if (!g)
    return;
  g->n = w.nodes;
  int n = 0;
  struct gw_inst *in0 = gw_fleet_inst(s->fleet, j->instance);
  if (in0 && in0->row.job == j->id)
    set_member(&g->m[n++], in0, in0->row.price_usd_per_hour, in0->row.on_demand_usd_per_hour);
  for (size_t i = 0; i < gw_fleet_n_insts(s->fleet) && n < g->n; i++) {
    struct gw_inst *in = gw_fleet_inst_at(s->fleet, i);
    if (in->row.job == j->id && in != in0)
      set_member(&g->m[n++], in, in->row.price_usd_per_hour, in->row.on_demand_usd_per_hour);
  }
  g->time_scale = gw_provider_time_scale(in0 ? in0->prov : NULL);
  g->placed = j->instance_type[0] != 0;
  /* the ranks' own state did not survive: a started gang's members are taken
   * to run it (their registers say), one that had not started begins again */
  bool started = j->state >= GW_JOB_STARTING;
  for (int r = 0; r < g->n; r++) {
    g->m[r].assigned = g->m[r].started = started && r < n;
    if (r >= n) {
      snprintf(g->m[r].instance, sizeof g->m[r].instance, "(gone)");
      g->m[r].end = GW_GANG_LOST;
    }
  }
  if (started)
    snprintf(g->rendezvous, sizeof g->rendezvous, "(before the gateway restarted)");
  j->gang = g;
  if (!started) {
    for (int r = 0; r < n; r++)
      gw_fleet_inst_set_state(s->fleet, member_inst(s, j, r), "idle", 0);
    gw_sched_clear_placement(j);
    gw_queue_push(s->queue, j->user, j->id, 1);
    gw_sched_transition(s, j, GW_JOB_QUEUED, "placing the gang again after a gateway restart");
    return;
  }
  if (n < g->n)
    stop_members(s, j, true);
}
