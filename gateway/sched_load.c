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

/* An error when the table cannot be read: a gateway that starts without
 * the instances it launched neither finds their jobs nor stops them. */
static int load_instances(struct gw_sched *s) {
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
  /* provider instances the table does not know are stray: stop them */
  for (size_t p = 0; p < s->n_provs; p++) {
    struct gw_provider *prov = s->provs[p];
    struct gw_instance_info *list = NULL;
    size_t nl = 0;
    if (prov->ops->list(prov, &list, &nl) < 0)
      continue;
    for (size_t i = 0; i < nl; i++)
      if (!gw_fleet_inst(s->fleet, list[i].instance_id)) {
        sl_warn(T, "terminating unknown instance %s of %s", list[i].instance_id, prov->name);
        prov->ops->terminate(prov, list[i].instance_id);
      }
    free(list);
  }
  return 0;
}

/* Table rows whose provider no longer has the instance: it ended while
 * the gateway was down, after the provider dropped its record and before
 * the gateway saved the end (a gateway killed in between). Without this
 * the row waited out the register timeout, listed as live, and a gateway
 * restarted more often than that kept it for good. */
static void end_unlisted(struct gw_sched *s) {
  for (size_t p = 0; p < s->n_provs; p++) {
    struct gw_provider *prov = s->provs[p];
    struct gw_instance_info *list = NULL;
    size_t nl = 0;
    if (!prov->lists_all || prov->ops->list(prov, &list, &nl) < 0)
      continue;
    for (size_t i = 0; i < gw_fleet_n_insts(s->fleet);) {
      struct gw_inst *in = gw_fleet_inst_at(s->fleet, i);
      bool listed = in->prov != prov;
      for (size_t k = 0; k < nl && !listed; k++)
        listed = !strcmp(list[k].instance_id, in->row.id);
      if (listed) {
        i++;
        continue;
      }
      char id[GW_INSTANCE_ID_MAX];
      snprintf(id, sizeof id, "%s", in->row.id);
      gw_sched_instance_gone(s, id, "instance ended while the gateway was down");
      i = 0; /* the array shifted (a gang's loss may take more than this one) */
    }
    free(list);
  }
}

int gw_sched_load(struct gw_sched *s) {
  gw_sched_learned_load(s);
  int r = load_instances(s);
  if (r < 0)
    return r;
  struct gw_job *jobs = NULL;
  size_t n = 0;
  r = gw_store_jobs_list(s->store, NULL, true, GW_QUEUE_MAX, &jobs, &n);
  if (r < 0)
    return r;
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
      if (j->state == GW_JOB_PROVISIONING && !j->instance_type[0])
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
      j->attempt_started_mono_us = j->cost_accrued_mono_us = now;
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
  end_unlisted(s);
  gw_sched_kick(s);
  return 0;
}
