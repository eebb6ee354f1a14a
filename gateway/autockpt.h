/* checkpoint_every=auto: the Young/Daly interval from measured checkpoint
 * write times, the job's measured step rate and the instance type's mean
 * time to preemption.
 *
 * All durations the formula sees are simulated seconds: wall-clock
 * measurements are multiplied by the provider's time_scale (1 for a real
 * cloud), the same clock prices and mean times to preemption use. */
#ifndef GW_AUTOCKPT_H
#define GW_AUTOCKPT_H

#include <stdbool.h>
#include <stdint.h>

#define GW_AUTOCKPT_DEFAULT_WRITE_S 1.0 /* simulated seconds assumed before the first measurement */
#define GW_AUTOCKPT_MIN_WINDOW_US 500000 /* step rate windows: at least half a second */

/* Per-job state; the caller embeds it (zeroed = nothing measured). */
struct gw_autockpt {
  double write_s;               /* average write+upload time, wall seconds; 0: none yet */
  double steps_per_s;           /* average step rate, wall; 0: none yet */
  int64_t win_step, win_mono_us;/* start of the current rate window; win_mono_us 0: none */
  int64_t resent_to;            /* steps up to this come again after a re-register: not timed */
  int64_t sent_steps;           /* interval the worker has, 0: none */
  bool announced;               /* a checkpoint_interval event was emitted */
  double mtbp_s;                /* the instance type's, simulated seconds; 0: not looked up */
};

/* sqrt(2 × write_s × mtbp_s), any one unit; 0 when either is not positive. */
double gw_young_daly_s(double write_s, double mtbp_s);
/* The interval in steps for simulated write and mean-time-to-preemption
 * seconds, a wall step rate and time_scale; clamped to [1, total_steps]
 * (total_steps <= 0: no upper bound but 1e8). 0 when it cannot be known. */
int64_t gw_autockpt_steps(double write_sim_s, double mtbp_sim_s, double steps_per_wall_s,
                          double time_scale, int64_t total_steps);
/* true when next differs from prev by more than 20% of prev (or prev is 0). */
bool gw_autockpt_changed(int64_t prev, int64_t next);
/* A checkpoint's measured write+upload time (wall seconds). The first
 * measurement replaces the default; later ones are averaged with weight 0.3. */
void gw_autockpt_write(struct gw_autockpt *a, double write_s);
/* A step metric seen at now_mono_us. */
void gw_autockpt_step(struct gw_autockpt *a, int64_t step, int64_t now_mono_us);
/* The worker registered again at step: the metrics it sends again up to
 * there arrive at once and say nothing of the rate; timing starts anew
 * after them (the rate measured so far is kept). */
void gw_autockpt_resent_to(struct gw_autockpt *a, int64_t step);
/* A new attempt: the step rate is measured again (the instance type may differ). */
void gw_autockpt_new_attempt(struct gw_autockpt *a);
/* The write time to use in simulated seconds: the average times time_scale,
 * or GW_AUTOCKPT_DEFAULT_WRITE_S before any measurement. */
double gw_autockpt_write_sim_s(const struct gw_autockpt *a, double time_scale);

#endif
