/* The simulated job and the report built from its events.
 *
 * The job is a %%run script: its only channel to the gateway is its output,
 * so it announces where each attempt starts ("spotlab-sim start S"), every
 * completed step ("spotlab-sim step S") and every checkpoint it makes
 * durable in its folder ("spotlab-sim checkpoint S"). Steps executed are
 * summed per attempt (last step seen − start step), so a step redone after a
 * preemption counts twice; steps lost = executed − N. A resume is an attempt
 * that starts after another (the gateway sends no `resumed` event for a run
 * job: it has no checkpoint key to restore). Everything else comes
 * from the gateway's own events: placed, preempted (notice or not),
 * cost and the final state. Pure: no I/O but the printing. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"
#include "sl_json.h"

#define PREFIX "spotlab-sim "

char *sim_job_script(const struct sim_job *job) {
  double step_wall_s = job->step_s / job->time_scale;
  double ckpt_wall_s = job->checkpoint_s / job->time_scale;
  char *s = NULL;
  /* The trap saves the completed step count at once: a notice (SIGTERM from
   * the worker) loses no step; a hard loss loses what followed the last save. */
  int n = asprintf(&s,
                   "d=\"$SPOTLAB_CHECKPOINT_DIR\"\n"
                   "s=0\n"
                   "if [ -f \"$d/step\" ]; then s=$(cat \"$d/step\"); fi\n"
                   "echo \"" PREFIX "start $s\"\n"
                   "save() { echo \"$s\" > \"$d/step.tmp\"; mv \"$d/step.tmp\" \"$d/step\"; "
                   "echo \"" PREFIX "checkpoint $s\"; }\n"
                   "trap 'save; exit 0' TERM\n"
                   "while [ \"$s\" -lt %" PRId64 " ]; do\n"
                   "  sleep %.6f\n"
                   "  s=$((s + 1))\n"
                   "  echo \"" PREFIX "step $s\"\n"
                   "  if [ %" PRId64 " -gt 0 ] && [ $((s %% %" PRId64 ")) -eq 0 ] && [ \"$s\" -lt %" PRId64
                   " ]; then\n"
                   "    sleep %.6f\n"
                   "    save\n"
                   "  fi\n"
                   "done\n"
                   "echo \"" PREFIX "done $s\"\n",
                   job->steps, step_wall_s, job->checkpoint_every,
                   job->checkpoint_every > 0 ? job->checkpoint_every : 1, job->steps, ckpt_wall_s);
  return n < 0 ? NULL : s;
}

void sim_report_init(struct sim_report *r, const struct sim_job *job, int64_t submit_us) {
  memset(r, 0, sizeof *r);
  r->job = job;
  r->submit_us = submit_us;
  r->attempt_start = r->attempt_last = -1;
}

static void close_attempt(struct sim_report *r) {
  if (r->attempt_start >= 0 && r->attempt_last > r->attempt_start)
    r->executed += r->attempt_last - r->attempt_start;
  r->attempt_start = r->attempt_last = -1;
}

static void release_instance(struct sim_report *r, int64_t t_us) {
  if (!r->placed_us)
    return;
  int64_t d = t_us > r->placed_us ? t_us - r->placed_us : 0;
  if (r->placed_spot)
    r->spot_us += d;
  else
    r->on_demand_us += d;
  r->placed_us = 0;
}

static void on_output(struct sim_report *r, const char *text) {
  if (strncmp(text, PREFIX, strlen(PREFIX)) != 0)
    return;
  text += strlen(PREFIX);
  char word[16];
  long long step;
  if (sscanf(text, "%15s %lld", word, &step) != 2 || step < 0)
    return;
  if (!strcmp(word, "start")) {
    close_attempt(r);
    if (r->starts++ > 0 || step > 0)
      r->resumed++;
    r->attempt_start = r->attempt_last = step;
  } else if (!strcmp(word, "step") || !strcmp(word, "done")) {
    if (step > r->attempt_last)
      r->attempt_last = step;
  } else if (!strcmp(word, "checkpoint")) {
    r->checkpoints++;
    if (step > r->attempt_last)
      r->attempt_last = step;
  }
}

static bool final_state(const char *s) {
  return !strcmp(s, "succeeded") || !strcmp(s, "failed") || !strcmp(s, "cancelled");
}

bool sim_report_event(struct sim_report *r, const json_t *ev) {
  const char *kind = sl_json_get_str(ev, "event", "");
  int64_t t = sl_json_get_int(ev, "time_us", 0);
  if (!strcmp(kind, "placed")) {
    release_instance(r, t);
    r->attempts++;
    r->placed_us = t;
    r->placed_spot = sl_json_get_bool(ev, "spot", false);
    double od = sl_json_get_num(ev, "on_demand_usd_per_hour", 0);
    if (od > 0)
      r->od_price_usd_per_hour = od;
    snprintf(r->instance_type, sizeof r->instance_type, "%s", sl_json_get_str(ev, "instance_type", ""));
  } else if (!strcmp(kind, "output")) {
    on_output(r, sl_json_get_str(ev, "text", ""));
  } else if (!strcmp(kind, "preempted")) {
    if (sl_json_get_bool(ev, "notice", false))
      r->preempted_notice++;
    else
      r->preempted_hard++;
    release_instance(r, t);
  } else if (!strcmp(kind, "cost")) {
    r->cost_usd = sl_json_get_num(ev, "cost_usd", r->cost_usd);
    r->on_demand_usd = sl_json_get_num(ev, "on_demand_usd", r->on_demand_usd);
  } else if (!strcmp(kind, "state")) {
    const char *s = sl_json_get_str(ev, "state", "");
    snprintf(r->last_state, sizeof r->last_state, "%s", s);
    if (final_state(s)) {
      snprintf(r->state, sizeof r->state, "%s", s);
      r->end_us = t;
      release_instance(r, t);
      close_attempt(r);
      return true;
    }
  }
  return false;
}

/* Cost of the same job on one on-demand instance that is never interrupted. */
static double baseline_usd(const struct sim_report *r) {
  return (double)r->job->steps * r->job->step_s / 3600.0 * r->od_price_usd_per_hour;
}

json_t *sim_report_json(const struct sim_report *r) {
  double scale = r->job->time_scale;
  double wall_s = r->end_us > r->submit_us ? (double)(r->end_us - r->submit_us) / 1e6 : 0;
  double base = baseline_usd(r);
  return json_pack("{s:s, s:s, s:I, s:f, s:I, s:f, s:o, s:o, s:o, s:o, s:i, s:i, s:i, s:i, s:I, s:I, s:I,"
                   " s:o, s:o, s:o, s:o, s:o}",
                   "state", r->state, "instance_type", r->instance_type, "steps", (json_int_t)r->job->steps,
                   "step_s", r->job->step_s, "checkpoint_every", (json_int_t)r->job->checkpoint_every,
                   "time_scale", scale, "wall_s", sl_json_real(wall_s),
                   "sim_s", sl_json_real(wall_s * scale),
                   "spot_s", sl_json_real((double)r->spot_us / 1e6 * scale),
                   "on_demand_s", sl_json_real((double)r->on_demand_us / 1e6 * scale),
                   "attempts", r->attempts, "preemptions", r->preempted_notice + r->preempted_hard,
                   "preemptions_with_notice", r->preempted_notice, "resumes", r->resumed,
                   "checkpoints", (json_int_t)r->checkpoints, "steps_executed", (json_int_t)r->executed,
                   "steps_lost", (json_int_t)(r->executed - r->job->steps),
                   "cost_usd", sl_json_real(r->cost_usd),
                   "on_demand_same_time_usd", sl_json_real(r->on_demand_usd),
                   "on_demand_usd", sl_json_real(base),
                   "on_demand_usd_per_hour", sl_json_real(r->od_price_usd_per_hour),
                   "saving_pct", sl_json_real(base > 0 ? 100.0 * (1.0 - r->cost_usd / base) : 0));
}

void sim_report_print(const struct sim_report *r, FILE *out) {
  double scale = r->job->time_scale;
  double wall_s = r->end_us > r->submit_us ? (double)(r->end_us - r->submit_us) / 1e6 : 0;
  double base = baseline_usd(r);
  fprintf(out, "job            %" PRId64 " steps x %g s, checkpoint every %" PRId64 " steps, %s\n",
          r->job->steps, r->job->step_s, r->job->checkpoint_every, r->state[0] ? r->state : "unfinished");
  fprintf(out, "wall time      %.2f s (time_scale %g)\n", wall_s, scale);
  fprintf(out, "simulated      %.0f s: %.0f s on spot, %.0f s on demand, the rest waiting\n", wall_s * scale,
          (double)r->spot_us / 1e6 * scale, (double)r->on_demand_us / 1e6 * scale);
  fprintf(out, "instances      %d (%s)\n", r->attempts, r->instance_type);
  fprintf(out, "preemptions    %d (%d with a notice, %d hard), %d resumes\n",
          r->preempted_notice + r->preempted_hard, r->preempted_notice, r->preempted_hard, r->resumed);
  fprintf(out, "checkpoints    %" PRId64 "\n", r->checkpoints);
  fprintf(out, "steps          %" PRId64 " executed, %" PRId64 " lost\n", r->executed,
          r->executed - r->job->steps);
  fprintf(out, "cost           $%.4f (on-demand for the same time $%.4f)\n", r->cost_usd, r->on_demand_usd);
  fprintf(out, "on-demand run  $%.4f (%g s at $%.3f/h): %.1f%% saved\n", base,
          (double)r->job->steps * r->job->step_s, r->od_price_usd_per_hour,
          base > 0 ? 100.0 * (1.0 - r->cost_usd / base) : 0.0);
}
