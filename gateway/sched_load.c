/* A gateway restart (gw_sched_load): the instances its database knows are
 * taken back (each must register again within the register timeout), the
 * ones its providers run that it does not know are stopped, and every live
 * job is put back where it was: queued, or on its instance waiting for its
 * worker's register, or requeued when its instance is gone. */
#include "sched_int.h"

#include "sl_log.h"
#include "sl_time.h"

#include <stdlib.h>
#include <string.h>

#define T "gateway.sched"

static struct gw_provider *provider_named(struct gw_sched *s, const char *name) {
  for (size_t i = 0; i < s->n_provs; i++)
    if (!strcmp(s->provs[i]->name, name))
      return s->provs[i];
  return NULL;
}

/* Instance ids, owned. */
struct id_list {
  char (*id)[GW_INSTANCE_ID_MAX];
  size_t n;
};

/* Whether in's provider keeps a record of every instance it launched until
 * the end is reported (provider.h, lists_all) and list[0..n) lacks in. */
static bool unlisted(const struct gw_inst *in, const struct gw_provider *prov,
                     const struct gw_instance_info *list, size_t n) {
  if (in->prov != prov || !prov->lists_all)
    return false;
  for (size_t k = 0; k < n; k++)
    if (!strcmp(list[k].instance_id, in->row.id))
      return false;
  return true;
}

/* An error when the table cannot be read: a gateway that starts without
 * the instances it launched neither finds their jobs nor stops them.
 * *ret_gone: the table's live instances their provider no longer has
 * (unlisted), to be ended once the jobs are back. */
static int load_instances(struct gw_sched *s, struct id_list *ret_gone) {
  struct gw_instance_row *rows = NULL;
  size_t n = 0;
  int r = gw_store_instances_live(s->store, &rows, &n);
  if (r < 0)
    return r;
  int64_t by = sl_time_mono_us() + s->cfg->register_timeout_us;
  for (size_t i = 0; i < n; i++) {
    struct gw_inst in;
    memset(&in, 0, sizeof in);
    in.row = rows[i];
    in.prov = provider_named(s, rows[i].provider);
    in.launched = true;
    in.register_by_mono_us = by;
    in.idle_since_mono_us = sl_time_mono_us(); /* else an idle worker is stopped at once */
    if (in.prov && in.prov->ops->billed_usd) /* charged before the restart */
      in.prov->ops->billed_usd(in.prov, in.row.id, sl_time_real_us(), &in.billed_seen_usd);
    if (!in.prov)
      sl_warn(T, "instance %s belongs to provider \"%s\", which is not enabled", in.row.id,
              in.row.provider);
    if (!gw_fleet_inst_add(s->fleet, &in))
      break;
  }
  free(rows);
  size_t n_insts = gw_fleet_n_insts(s->fleet);
  ret_gone->id = calloc(n_insts ? n_insts : 1, sizeof *ret_gone->id);
  ret_gone->n = 0;
  for (size_t p = 0; p < s->n_provs; p++) {
    struct gw_provider *prov = s->provs[p];
    struct gw_instance_info *list = NULL;
    size_t nl = 0;
    if (prov->ops->list(prov, &list, &nl) < 0)
      continue;
    /* provider instances the table does not know are stray: stop them */
    for (size_t i = 0; i < nl; i++)
      if (!gw_fleet_inst(s->fleet, list[i].instance_id)) {
        sl_warn(T, "terminating unknown instance %s of %s", list[i].instance_id, prov->name);
        prov->ops->terminate(prov, list[i].instance_id);
      }
    /* table rows the provider no longer has: the instance ended while the
     * gateway was down, after the provider dropped its record and before
     * the gateway saved the end (a gateway killed in between). Left to
     * the register timeout, the row stayed listed as live, and for good
     * with a gateway restarted more often than that. */
    for (size_t i = 0; i < n_insts && ret_gone->id; i++) {
      const struct gw_inst *in = gw_fleet_inst_at(s->fleet, i);
      if (unlisted(in, prov, list, nl))
        snprintf(ret_gone->id[ret_gone->n++], GW_INSTANCE_ID_MAX, "%s", in->row.id);
    }
    free(list);
  }
  return 0;
}

/* A job whose instance ran on while the gateway was down is charged for
 * that time too: its cost accrues from the last time it was charged (the
 * cost table's, or its attempt's start), not from this start. */
static void charge_downtime(struct gw_sched *s, struct gw_job *j, struct gw_inst *in, int64_t now_mono) {
  int64_t until = 0, real = sl_time_real_us();
  if (gw_store_cost_accrued_until(s->store, j->id, j->attempt, &until) < 0 || until <= 0 || until >= real)
    return;
  j->cost_accrued_mono_us = now_mono - (real - until);
  if (in->prov && in->prov->ops->billed_usd) /* the cloud's bill: what it was then */
    in->prov->ops->billed_usd(in->prov, in->row.id, until, &in->billed_seen_usd);
}

int gw_sched_load(struct gw_sched *s) {
  gw_sched_learned_load(s);
  struct id_list gone = {0};
  int r = load_instances(s, &gone);
  if (r < 0)
    return r;
  struct gw_job *jobs = NULL;
  size_t n = 0;
  r = gw_store_jobs_list(s->store, NULL, true, GW_QUEUE_MAX, &jobs, &n);
  if (r < 0) {
    free(gone.id);
    return r;
  }
  int64_t now = sl_time_mono_us();
  for (size_t k = n; k-- > 0;) { /* oldest first keeps FIFO order */
    struct gw_job *j = malloc(sizeof *j);
    if (!j)
      break;
    *j = jobs[k];
    jobs[k].spec = NULL;
    if (gw_fleet_job_add(s->fleet, j) < 0) {
      gw_job_done(j);
      free(j);
      break;
    }
    /* the job's totals as the cost table has them: its row may hold accrual
     * a crash kept from the table (written every few seconds), which the
     * running attempt is charged for again below */
    double usd, od;
    if (gw_store_cost_of_job(s->store, j->id, &usd, &od) == 0) {
      j->cost_usd = usd;
      j->on_demand_usd = od;
    }
    json_t *ev = json_pack("{s:s,s:s}", "event", "gateway", "action", "restarted");
    gw_sched_emit(s, j, ev);
    json_decref(ev);
    struct gw_inst *in = j->instance[0] ? gw_fleet_inst(s->fleet, j->instance) : NULL;
    if (j->state == GW_JOB_QUEUED || j->state == GW_JOB_PREEMPTED) {
      gw_sched_clear_placement(j);
      gw_queue_push(s->queue, j->user, j->id, j->state == GW_JOB_PREEMPTED);
      if (j->state == GW_JOB_PREEMPTED)
        gw_sched_transition(s, j, GW_JOB_QUEUED, "resuming after a gateway restart");
    } else if (in && in->row.job == j->id) {
      /* provisioning and never placed: the launch was not reported done */
      bool unplaced = j->state == GW_JOB_PROVISIONING && !j->instance_type[0];
      if (unplaced)
        in->launched = false;
      struct gw_wants w;
      gw_sched_wants(s, j, &w);
      if (w.nodes > 1) {
        gw_sched_gang_load(s, j);
        if (j->state == GW_JOB_QUEUED)
          continue;
      }
      j->wait_register_until_us = in->register_by_mono_us;
      if (gw_store_attempt_metric_step(s->store, j->id, &j->metric_step) < 0)
        j->metric_step = -1;
      if (gw_store_attempt_output_seq(s->store, j->id, &j->output_seq) < 0)
        j->output_seq = 0;
      j->attempt_started_mono_us = now;
      j->cost_accrued_mono_us = unplaced ? 0 : now; /* no attempt yet: nothing to charge */
      if (!unplaced)
        charge_downtime(s, j, in, now);
    } else {
      gw_sched_requeue(s, j, false, "instance lost while the gateway was down");
    }
  }
  gw_store_jobs_free(jobs, n);
  /* an instance row can name a job that is not on it: a gateway that died
   * inside a launch saved the row but not the job's placement */
  for (size_t i = 0; i < gw_fleet_n_insts(s->fleet); i++) {
    struct gw_inst *in = gw_fleet_inst_at(s->fleet, i);
    struct gw_job *j = in->row.job ? gw_fleet_job(s->fleet, in->row.job) : NULL;
    if (in->row.job && gw_sched_rank(j, in) < 0) {
      in->row.job = 0;
      gw_fleet_inst_save(s->fleet, in);
    }
  }
  /* a notice heard before the restart: the instance is going (its job's
   * preemption is one with notice, and it gets no new job) */
  for (size_t i = 0; i < gw_fleet_n_insts(s->fleet); i++) {
    struct gw_inst *in = gw_fleet_inst_at(s->fleet, i);
    bool leaving = false, at_risk = false;
    if (in->row.job && gw_store_instance_noticed(s->store, in->row.job, in->row.id, &leaving, &at_risk) == 0) {
      in->notice |= leaving;
      in->at_risk |= at_risk;
    }
  }
  for (size_t i = 0; i < gone.n; i++) /* their jobs are back: requeued from here */
    gw_sched_instance_gone(s, gone.id[i], "instance ended while the gateway was down");
  free(gone.id);
  gw_sched_kick(s);
  return 0;
}
