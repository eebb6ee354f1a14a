/* Job names, ids and the summary object every client sees.
 * The summary lists exactly the fields of protocols.md §1. */
#include "job.h"

#include "sl_ident.h"

#include "sl_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const state_names[] = {
  "queued", "provisioning", "starting", "running", "checkpointing",
  "preempted", "succeeded", "failed", "cancelled",
};

const char *gw_job_state_name(enum gw_job_state s) {
  if ((unsigned)s >= sizeof state_names / sizeof *state_names)
    return "unknown";
  return state_names[s];
}

int gw_job_state_from_name(const char *name) {
  for (size_t i = 0; i < sizeof state_names / sizeof *state_names; i++)
    if (!strcmp(state_names[i], name))
      return (int)i;
  return -1;
}

bool gw_job_state_final(enum gw_job_state s) {
  return s == GW_JOB_SUCCEEDED || s == GW_JOB_FAILED || s == GW_JOB_CANCELLED;
}

char *gw_job_id_str(int64_t id, char *buf, size_t size) { return sl_job_id_str(id, buf, size); }

int64_t gw_job_id_parse(const char *s) { return sl_job_id_parse(s); }

json_t *gw_job_summary(const struct gw_job *j) {
  char id[16];
  return json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:i,s:s,s:s,s:s,s:b,s:o,s:o,s:I,s:I,s:I,"
                   "s:s,s:o,s:s,s:o,s:o}",
                   "job", gw_job_id_str(j->id, id, sizeof id), "user", j->user, "session",
                   j->session, "kind", j->kind, "model", j->model, "data", j->data, "state",
                   gw_job_state_name(j->state), "step", (json_int_t)j->step, "steps",
                   (json_int_t)j->steps, "attempt", j->attempt, "instance", j->instance,
                   "instance_type", j->instance_type, "zone", j->zone, "spot", j->spot,
                   "price_usd_per_hour", sl_json_real(j->price_usd_per_hour), "cost_usd",
                   sl_json_real(j->cost_usd), "created_us", (json_int_t)j->created_us,
                   "updated_us", (json_int_t)j->updated_us, "last_seq", (json_int_t)j->last_seq,
                   "reason", j->reason, "on_demand_usd", sl_json_real(j->on_demand_usd),
                   "checkpoint", j->ckpt_key, "energy_kwh", sl_json_real(j->energy_kwh), "co2e_g",
                   sl_json_real(j->co2e_g));
}

void gw_job_done(struct gw_job *j) {
  if (j->spec)
    json_decref(j->spec);
  free(j->gang);
  memset(j, 0, sizeof *j);
}
