/* Handing a job to its worker (scheduler.h): the assign message with the
 * job's spec, its checkpoint to restore and its checkpoint interval, and
 * the automatic interval (Young/Daly, autockpt.h) sent again as the step
 * rate and the preemption rate become known. */
#include "sched_int.h"

#include "gang.h"

#include "sl_json.h"
#include "sl_time.h"

#include <stdio.h>
#include <string.h>

/* The fixed checkpoint_every option, or 0 for auto (absent, "auto" or not a positive number). */
static int64_t fixed_checkpoint_every(const struct gw_job *j) {
  json_t *v = json_object_get(json_object_get(j->spec, "options"), "checkpoint_every");
  if (json_is_integer(v) && json_integer_value(v) > 0)
    return json_integer_value(v);
  if (json_is_real(v) && json_real_value(v) >= 1) /* past int64_t's range the cast is undefined */
    return json_real_value(v) < 9.2e18 ? (int64_t)json_real_value(v) : INT64_MAX;
  return 0;
}

static int64_t checkpoint_every(const struct gw_job *j) {
  int64_t every = fixed_checkpoint_every(j);
  if (every)
    return every;
  /* auto: the Young/Daly interval once known (from an earlier attempt);
   * before that a tenth of the run, at least every 10 and at most every
   * 500 steps, until the first step rate is measured */
  if (j->autockpt.sent_steps > 0)
    return j->autockpt.sent_steps;
  every = j->steps / 10;
  return every < 10 ? 10 : every > 500 ? 500 : every;
}

/* The mean time to preemption of j's instance type on its provider, in
 * provider seconds; 0 when unknown. */
static double type_mtbp_s(struct gw_sched *s, const struct gw_job *j) {
  struct gw_inst *in = gw_fleet_inst(s->fleet, j->instance);
  struct gw_instance_type t;
  if (!in || !in->prov || gw_provider_type(in->prov, j->instance_type, &t) < 0)
    return 0;
  return t.mean_time_to_preempt_s > 0 ? t.mean_time_to_preempt_s : 0;
}

void gw_sched_autockpt(struct gw_sched *s, struct gw_job *j, bool lookup_mtbp) {
  struct gw_autockpt *a = &j->autockpt;
  if (strcmp(j->kind, "train") || fixed_checkpoint_every(j) || !j->spot || !j->instance[0])
    return; /* on-demand capacity is not preempted: the first interval stays */
  if (lookup_mtbp || !a->mtbp_s)
    a->mtbp_s = type_mtbp_s(s, j);
  struct gw_inst *in = gw_fleet_inst(s->fleet, j->instance);
  double scale = gw_provider_time_scale(in ? in->prov : NULL), write_sim = gw_autockpt_write_sim_s(a, scale);
  int64_t steps = gw_autockpt_steps(write_sim, a->mtbp_s, a->steps_per_s, scale, j->steps);
  if (steps <= 0 || (a->announced && !gw_autockpt_changed(a->sent_steps, steps)))
    return;
  struct gw_inst *inst = in;
  if (a->sent_steps != steps && inst && inst->row.job == j->id) {
    char id[16];
    json_t *m = json_pack("{s:s,s:s,s:I}", "type", "checkpoint_every", "job",
                          gw_job_id_str(j->id, id, sizeof id), "steps", (json_int_t)steps);
    gw_fleet_send(s->fleet, inst, m);
    json_decref(m);
  }
  a->sent_steps = steps;
  a->announced = true;
  json_t *ev = json_pack("{s:s,s:I,s:o,s:o,s:o}", "event", "checkpoint_interval", "steps",
                         (json_int_t)steps, "seconds",
                         sl_json_real(gw_young_daly_s(write_sim, a->mtbp_s)), "write_s",
                         sl_json_real(write_sim), "mtbp_s", sl_json_real(a->mtbp_s));
  gw_sched_emit(s, j, ev);
  json_decref(ev);
}

int gw_sched_send_assign(struct gw_sched *s, struct gw_job *j, struct gw_inst *inst) {
  char id[16];
  gw_job_id_str(j->id, id, sizeof id);
  int64_t every = checkpoint_every(j);
  if (!fixed_checkpoint_every(j))
    j->autockpt.sent_steps = every;
  json_t *m = json_pack("{s:s,s:s,s:i,s:s,s:O,s:o,s:I,s:{}}", "type", "assign", "job", id,
                        "attempt", j->attempt, "kind", j->kind, "spec", j->spec, "restore",
                        j->ckpt_key[0] ? json_string(j->ckpt_key) : json_null(),
                        "checkpoint_every", (json_int_t)every, "env");
  if (m && s->cfg->store_keep > 0) /* the worker deletes older checkpoints of its job */
    json_object_set_new(m, "keep", json_integer(s->cfg->store_keep));
  /* a %%run script reads its run's seed (the record's) from SPOTLAB_SEED */
  json_t *seed = json_object_get(json_object_get(j->spec, "options"), "seed");
  if (m && !strcmp(j->kind, "run") && json_is_integer(seed)) {
    char v[24];
    snprintf(v, sizeof v, "%lld", (long long)json_integer_value(seed));
    json_object_set_new(json_object_get(m, "env"), "SPOTLAB_SEED", json_string(v));
  }
  int rank = gw_gang_rank(j->gang, inst->row.id);
  if (rank >= 0) /* nodes=N: this instance's rank, the world size and the rendezvous */
    json_object_set_new(m, "gang", gw_sched_gang_assign_field(j, rank));
  int r = gw_fleet_send(s->fleet, inst, m);
  json_decref(m);
  if (r >= 0 && rank >= 0)
    j->gang->m[rank].assigned = true;
  return r;
}

int gw_sched_assign(struct gw_sched *s, struct gw_job *j, struct gw_inst *inst) {
  int r = gw_sched_send_assign(s, j, inst);
  if (r < 0)
    return r;
  /* the instance now serves j's (user, session): an idle worker another
   * user launched keeps no claim on it (idle shutdown, worker_timeout and
   * inject go by row.user) */
  snprintf(inst->row.user, sizeof inst->row.user, "%s", j->user);
  gw_fleet_inst_set_state(s->fleet, inst, "busy", j->id);
  snprintf(inst->session, sizeof inst->session, "%s", j->session);
  inst->notice = false;
  /* this gateway sent the assign: a register from the worker that does not
   * list the job yet crossed it (on_register), the job is not lost */
  j->wait_register_until_us = 0;
  /* Every attempt after a preemption resumes (a train job from its newest
   * checkpoint, a %%run job from its folder, without steps); a first attempt
   * that restores a trained model (eval, sample) says so too. after_s is null
   * when the preemption's time is unknown (before a gateway restart). */
  if (j->ckpt_key[0] || j->attempt > 1) {
    double after_s = (double)(sl_time_mono_us() - j->preempted_mono_us) / 1e6;
    json_t *ev = json_pack("{s:s,s:o,s:s,s:s,s:o}", "event", "resumed", "from_step",
                           !strcmp(j->kind, "run") ? json_null() : json_integer(j->ckpt_step),
                           "instance_type", j->instance_type, "zone", j->zone, "after_s",
                           j->preempted_mono_us ? sl_json_real(after_s) : json_null());
    gw_sched_emit(s, j, ev);
    json_decref(ev);
  }
  return gw_sched_transition(s, j, GW_JOB_STARTING, "assigned to a worker");
}

int gw_sched_rank(const struct gw_job *j, const struct gw_inst *in) {
  if (!j || !in || in->row.job != j->id)
    return -1;
  if (j->gang)
    return gw_gang_rank(j->gang, in->row.id);
  return strcmp(j->instance, in->row.id) ? -1 : 0;
}
