/* checkpoint_every=auto (DESIGN.md §5): Young/Daly's first-order optimum,
 * interval ≈ sqrt(2 × checkpoint write time × mean time to preemption).
 *
 * Pure arithmetic over measurements the scheduler feeds in; no I/O. The
 * write time is an exponentially weighted average of write+upload times,
 * the step rate an average over windows of at least half a second, both
 * in wall seconds; the caller scales them to simulated seconds. */
#include "autockpt.h"

#include <math.h>

#define WRITE_WEIGHT 0.3
#define RATE_WEIGHT 0.5
#define MAX_STEPS 100000000

double gw_young_daly_s(double write_s, double mtbp_s) {
  if (!(write_s > 0) || !(mtbp_s > 0) || isinf(mtbp_s))
    return 0;
  return sqrt(2 * write_s * mtbp_s);
}

int64_t gw_autockpt_steps(double write_sim_s, double mtbp_sim_s, double steps_per_wall_s,
                          double time_scale, int64_t total_steps) {
  double interval_s = gw_young_daly_s(write_sim_s, mtbp_sim_s);
  if (!(interval_s > 0) || !(steps_per_wall_s > 0) || !(time_scale > 0))
    return 0;
  double steps = interval_s / time_scale * steps_per_wall_s;
  int64_t hi = total_steps > 0 && total_steps < MAX_STEPS ? total_steps : MAX_STEPS;
  if (!(steps < (double)hi))
    return hi;
  int64_t n = (int64_t)llround(steps);
  return n < 1 ? 1 : n;
}

bool gw_autockpt_changed(int64_t prev, int64_t next) {
  if (prev <= 0)
    return next > 0;
  return fabs((double)(next - prev)) > 0.2 * (double)prev;
}

void gw_autockpt_write(struct gw_autockpt *a, double write_s) {
  if (!(write_s >= 0) || isinf(write_s))
    return;
  a->write_s = a->write_s > 0 ? WRITE_WEIGHT * write_s + (1 - WRITE_WEIGHT) * a->write_s
                              : (write_s > 0 ? write_s : 1e-6);
}

void gw_autockpt_resent_to(struct gw_autockpt *a, int64_t step) {
  a->resent_to = step;
  a->win_mono_us = 0;
}

void gw_autockpt_step(struct gw_autockpt *a, int64_t step, int64_t now_mono_us) {
  if (step <= a->resent_to)
    return;
  if (!a->win_mono_us || step < a->win_step) {
    a->win_step = step;
    a->win_mono_us = now_mono_us;
    return;
  }
  int64_t dt = now_mono_us - a->win_mono_us;
  if (dt < GW_AUTOCKPT_MIN_WINDOW_US || step == a->win_step)
    return;
  double rate = ((double)step - (double)a->win_step) / ((double)dt / 1e6); /* any two int64_t */
  a->steps_per_s = a->steps_per_s > 0 ? RATE_WEIGHT * rate + (1 - RATE_WEIGHT) * a->steps_per_s
                                      : rate;
  a->win_step = step;
  a->win_mono_us = now_mono_us;
}

void gw_autockpt_new_attempt(struct gw_autockpt *a) {
  a->steps_per_s = 0;
  a->win_mono_us = 0;
  a->win_step = 0;
  a->resent_to = 0;
}

double gw_autockpt_write_sim_s(const struct gw_autockpt *a, double time_scale) {
  return a->write_s > 0 ? a->write_s * time_scale : GW_AUTOCKPT_DEFAULT_WRITE_S;
}
