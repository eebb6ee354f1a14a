/* An attempt's end (sched_int.h): its cost and row written and its
 * instances freed; then the job ends (succeeded, failed, cancelled), waits
 * in the queue for its budget (paused), or goes back to the queue after a
 * preemption or a start its worker refused, to resume from its newest
 * checkpoint. The job's end is written before its instances are free. */
#include "scheduler.h"
#include "gang.h"
#include "sched_int.h"

#include "sl_json.h"
#include "sl_time.h"

#include <stdio.h>
#include <string.h>

#define START_RETRY_MIN_US (5 * SL_US_PER_S) /* gw_sched_retry's wait after a refused start */
#define START_RETRY_MAX_US (120 * SL_US_PER_S)

/* The attempt's cost and row; false when j is not placed. */
static bool record_attempt_end(struct gw_sched *s, struct gw_job *j, const char *outcome) {
  if (!j->instance[0])
    return false;
  gw_sched_note_attempt(s, j);
  gw_sched_flush_cost(s, j, true);
  gw_store_attempt_end(s->store, j->id, j->attempt, outcome, sl_time_real_us());
  j->cost_accrued_mono_us = 0;
  return true;
}

/* j's instances that still name it go into inst_state. */
static void release_instances(struct gw_sched *s, struct gw_job *j, const char *inst_state) {
  for (int r = 0; r < (j->gang ? j->gang->n : 1); r++) {
    struct gw_inst *inst = gw_fleet_inst(s->fleet, j->gang ? j->gang->m[r].instance : j->instance);
    if (inst && inst->row.job == j->id)
      gw_fleet_inst_set_state(s->fleet, inst, inst_state, 0);
  }
  gw_sched_kick(s);
}

void gw_sched_end_attempt(struct gw_sched *s, struct gw_job *j, const char *outcome,
                          const char *inst_state) {
  if (record_attempt_end(s, j, outcome))
    release_instances(s, j, inst_state);
}

/* A job stopped for its budget ended at its final checkpoint: back in the
 * queue, held there until the budget allows it again. */
void gw_sched_paused(struct gw_sched *s, struct gw_job *j) {
  j->pause_requested = false;
  json_t *ev = json_pack("{s:s,s:o,s:s}", "event", "paused", "step",
                         !strcmp(j->kind, "run") ? json_null() : json_integer(j->ckpt_step),
                         "instance", j->instance);
  gw_sched_emit(s, j, ev);
  json_decref(ev);
  gw_sched_end_attempt(s, j, "paused", "idle");
  gw_sched_clear_placement(j);
  j->wait_register_until_us = 0;
  j->step = j->ckpt_step;
  gw_queue_push(s->queue, j->user, j->id, 1);
  char why[200] = "budget cap", reason[sizeof j->reason];
  if (s->hold)
    s->hold(s->hold_data, j, why, sizeof why);
  snprintf(reason, sizeof reason, "paused: %.200s", why);
  gw_sched_transition(s, j, GW_JOB_QUEUED, reason);
  gw_sched_kick(s);
}

void gw_sched_worker_cancelled(struct gw_sched *s, struct gw_job *j, const char *reason) {
  char why[200];
  /* asked for a pause, or (the request lost with a gateway restart) held by
   * a spent budget without a cancel asked: its worker stopped it at a final
   * checkpoint, and it waits in the queue rather than ending */
  if (!j->cancel_requested &&
      (j->pause_requested || (s->hold && s->hold(s->hold_data, j, why, sizeof why)))) {
    gw_sched_paused(s, j);
    return;
  }
  gw_sched_finish(s, j, GW_JOB_CANCELLED, reason);
}

void gw_sched_finish(struct gw_sched *s, struct gw_job *j, enum gw_job_state st, const char *reason) {
  gw_queue_remove(s->queue, j->id);
  /* the job's end is written (or kept, ahead of every later write) before
   * its instances are free: a crash in between leaves an instance busy for
   * a job that ended, never a job that runs on without one */
  bool placed = record_attempt_end(s, j, gw_job_state_name(st));
  gw_sched_transition(s, j, st, reason);
  if (placed)
    release_instances(s, j, "idle");
  gw_fleet_job_drop(s->fleet, j);
}

void gw_sched_requeue(struct gw_sched *s, struct gw_job *j, bool notice, const char *reason) {
  gw_sched_requeue_at(s, j, notice, reason, j->instance);
}

/* The wait before the next try of a start its worker refused with "retry"
 * (a store that throttles, a gateway that restarts): 5 s, then twice as long
 * each retry, up to 2 min. */
static int64_t start_retry_wait_us(const struct gw_job *j) {
  int shift = j->process_retries < 1 ? 0 : j->process_retries - 1 < 5 ? j->process_retries - 1 : 5;
  int64_t wait_us = START_RETRY_MIN_US << shift;
  return wait_us > START_RETRY_MAX_US ? START_RETRY_MAX_US : wait_us;
}

/* gw_sched_requeue_at's work; retry: the job is placed again only after
 * start_retry_wait_us, and its queued reason says so */
static void requeue(struct gw_sched *s, struct gw_job *j, bool notice, const char *reason,
                    const char *instance, bool retry) {
  char inst[GW_INSTANCE_ID_MAX];
  snprintf(inst, sizeof inst, "%s", instance); /* may point into j's gang */
  if (j->cancel_requested) {
    gw_sched_finish(s, j, GW_JOB_CANCELLED, "cancelled");
    return;
  }
  /* a %%run job has no steps: its checkpoint is a folder the worker keeps */
  /* steps_lost: what the attempt ran past its newest checkpoint, run again */
  bool run = !strcmp(j->kind, "run");
  json_t *ev = json_pack("{s:s,s:o,s:b,s:s,s:o}", "event", "preempted", "step",
                         run ? json_null() : json_integer(j->ckpt_step), "notice", notice,
                         "instance", inst, "steps_lost",
                         run ? json_null() : json_integer(j->step > j->ckpt_step ? j->step - j->ckpt_step : 0));
  gw_sched_emit(s, j, ev);
  json_decref(ev);
  gw_sched_report(s, (struct gw_bus_event){.kind = GW_BUS_PREEMPTED, .job = j, .instance = inst,
                                           .notice = notice});
  gw_sched_end_attempt(s, j, "preempted", "draining");
  gw_sched_transition(s, j, GW_JOB_PREEMPTED, reason);
  gw_sched_clear_placement(j);
  j->preempted_mono_us = sl_time_mono_us();
  j->wait_register_until_us = 0;
  j->step = j->ckpt_step;
  char queued[96] = "resuming from the latest checkpoint";
  if (retry) {
    int64_t wait_us = start_retry_wait_us(j);
    j->start_retry_mono_us = sl_time_mono_us() + wait_us;
    snprintf(queued, sizeof queued, "starting again in %lld s (the worker could not start it)",
             (long long)(wait_us / SL_US_PER_S));
  }
  gw_queue_push(s->queue, j->user, j->id, 1);
  gw_sched_transition(s, j, GW_JOB_QUEUED, queued);
  gw_sched_kick(s);
}

void gw_sched_requeue_at(struct gw_sched *s, struct gw_job *j, bool notice, const char *reason,
                         const char *instance) {
  requeue(s, j, notice, reason, instance, false);
}

void gw_sched_requeue_retry(struct gw_sched *s, struct gw_job *j, const char *reason,
                            const char *instance) {
  requeue(s, j, false, reason, instance, true);
}

bool gw_sched_retry(struct gw_sched *s, struct gw_job *j, int64_t exit_code, const char *transient) {
  bool signal = exit_code > 128 && exit_code <= 128 + 64;
  if ((!signal && !transient) || j->process_retries >= s->cfg->process_retries)
    return false;
  j->process_retries++;
  char reason[400];
  if (signal) {
    snprintf(reason, sizeof reason, "the job's process was killed by signal %d (retry %d of %lld)",
             (int)(exit_code - 128), j->process_retries, (long long)s->cfg->process_retries);
    gw_sched_requeue(s, j, false, reason);
  } else {
    snprintf(reason, sizeof reason, "the worker could not start the job: %.300s (retry %d of %lld)",
             transient, j->process_retries, (long long)s->cfg->process_retries);
    gw_sched_requeue_retry(s, j, reason, j->instance);
  }
  return true;
}
