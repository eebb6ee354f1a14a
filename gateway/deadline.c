/* The arithmetic of deadline= (deadline.h).
 *
 * Rounding always leans to the safe side: the policy's window is rounded
 * down and the work left up, so a plan that keeps the deadline in ticks
 * keeps it in seconds too. */
#include "deadline.h"

#include "sl_err.h"
#include "sl_json.h"
#include "sl_time.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int gw_deadline_option(const json_t *options, double *ret_s, char *why, size_t why_size) {
  const json_t *v = json_object_get(options, "deadline");
  if (!v || json_is_null(v))
    return 1;
  double s = -1;
  int64_t us;
  if (json_is_object(v) && json_is_integer(json_object_get(v, "v")) &&
      !strcmp(sl_json_get_str(v, "t", ""), "dur"))
    s = (double)json_integer_value(json_object_get(v, "v")) / 1e6;
  else if (json_is_number(v))
    s = json_number_value(v);
  else if (json_is_string(v) && sl_time_parse_duration(json_string_value(v), &us) == 0)
    s = (double)us / 1e6;
  if (!(s > 0 && s <= GW_DEADLINE_MAX_S)) {
    snprintf(why, why_size, "deadline must be a duration (90s, 30m, 3h) of at most %.0f days",
             GW_DEADLINE_MAX_S / 86400);
    return SL_ECONFIG;
  }
  *ret_s = s;
  return 0;
}

double gw_deadline_left_s(const struct gw_deadline_work *w) {
  double left;
  if (w->steps > 0)
    left = (double)(w->steps - (w->step < w->steps ? w->step : w->steps)) * w->step_s;
  else
    left = GW_DEADLINE_RUN_SHARE * w->window_s - w->run_done_s;
  return left > 0 ? left : 0;
}

double gw_deadline_earliest_s(const struct gw_deadline_work *w) {
  /* a %%run script's work is not known: only its start-up is certain */
  return w->startup_s + (w->steps > 0 ? gw_deadline_left_s(w) : 0);
}

void gw_deadline_view(const struct gw_deadline_work *w, double start_elapsed_s, int64_t t,
                      double gap_s, int mode, double warm_left_s, struct sl_job_view *ret) {
  memset(ret, 0, sizeof *ret);
  double window = floor((w->window_s - start_elapsed_s) / gap_s);
  ret->window = window < 0 ? 0 : window > 1e15 ? (int64_t)1e15 : (int64_t)window;
  double done_s = w->steps > 0 ? (double)w->step * w->step_s : w->run_done_s;
  ret->done = (int64_t)floor(done_s / gap_s + 1e-9);
  double left = gw_deadline_left_s(w);
  if (left > 0) /* the margin for a step time that drifts, and a tick for deciding once a tick */
    left = left * (1 + GW_DEADLINE_WORK_MARGIN) + gap_s;
  ret->work = ret->done + (int64_t)ceil(left / gap_s - 1e-9);
  ret->overhead = (int64_t)ceil(w->startup_s / gap_s - 1e-9);
  if (ret->overhead < 1)
    ret->overhead = 1; /* a restart is never free: at least the tick it happens in */
  ret->t = t < 0 ? 0 : t;
  ret->mode = mode;
  double warm = ceil(warm_left_s / gap_s - 1e-9);
  ret->warm_left = mode == SL_MODE_IDLE || warm <= 0 ? 0 : warm > (double)ret->overhead ? ret->overhead
                                                                                        : (int64_t)warm;
}

char *gw_deadline_dur(double s, char *buf, size_t size) {
  if (!(s > 0))
    s = 0;
  long long t = (long long)llround(s);
  if (t >= 86400)
    snprintf(buf, size, "%lldd%lldh", t / 86400, t % 86400 / 3600);
  else if (t >= 3600)
    snprintf(buf, size, "%lldh%02lldm", t / 3600, t % 3600 / 60);
  else if (t >= 60 && t % 60)
    snprintf(buf, size, "%lldm%02llds", t / 60, t % 60);
  else if (t >= 60)
    snprintf(buf, size, "%lldm", t / 60);
  else
    snprintf(buf, size, "%llds", t);
  return buf;
}

void gw_deadline_plan_text(int mode, const char *where, double threshold_s, bool spot_possible,
                           char *buf, size_t size) {
  char th[32];
  gw_deadline_dur(threshold_s, th, sizeof th);
  if (mode >= 0)
    snprintf(buf, size, "spot on %s while slack > %s, then on-demand", where && *where ? where : "spot",
             th);
  else if (mode == SL_MODE_IDLE)
    snprintf(buf, size, "waiting for spot capacity while slack > %s, then on-demand", th);
  else if (spot_possible)
    snprintf(buf, size, "on-demand (back to spot when it is safe)");
  else
    snprintf(buf, size, "on-demand (no spot offer fits the job)");
}

void gw_deadline_refusal(const struct gw_deadline_work *w, double time_scale, char *buf,
                         size_t size) {
  char dl[32], at[32], up[32];
  gw_deadline_dur(w->window_s, dl, sizeof dl);
  gw_deadline_dur(w->elapsed_s + gw_deadline_earliest_s(w), at, sizeof at);
  gw_deadline_dur(w->startup_s, up, sizeof up);
  int n;
  if (w->steps > 0)
    n = snprintf(buf, size,
                 "deadline=%s cannot be met: the earliest possible finish, on on-demand from now, "
                 "is %s after submission (a start-up of %s, then %lld steps of about %.3g s)",
                 dl, at, up, (long long)(w->steps - w->step), w->step_s);
  else
    n = snprintf(buf, size,
                 "deadline=%s cannot be met: the earliest possible finish, on on-demand from now, "
                 "is %s after submission (a start-up of %s)",
                 dl, at, up);
  if (time_scale != 1 && n > 0 && (size_t)n < size)
    snprintf(buf + n, size - (size_t)n, "; times on the provider's clock, %g times the wall clock",
             time_scale);
}
