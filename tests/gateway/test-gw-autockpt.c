/* checkpoint_every=auto: the Young/Daly interval, its conversion to steps,
 * the 20% rule and the measurement averages. */
#include "autockpt.h"
#include "harness.h"

int main(void) {
  /* sqrt(2 × 10 s × 5 h) = 600 s */
  CHECK_NEAR(gw_young_daly_s(10, 18000), 600, 1e-9);
  CHECK_NEAR(gw_young_daly_s(0, 18000), 0, 0);
  CHECK_NEAR(gw_young_daly_s(1, 0), 0, 0);
  /* 600 simulated s at time_scale 60 is 10 wall s; at 5 steps/s: 50 steps */
  CHECK_INT(gw_autockpt_steps(10, 18000, 5, 60, 1000), 50);
  /* a real cloud (time_scale 1): 600 s at 2 steps/s */
  CHECK_INT(gw_autockpt_steps(10, 18000, 2, 1, 0), 1200);
  /* clamped to the run and to one step; unknown rate or MTBP: 0 */
  CHECK_INT(gw_autockpt_steps(10, 18000, 5, 60, 30), 30);
  CHECK_INT(gw_autockpt_steps(1e-6, 1, 0.01, 1, 100), 1);
  CHECK_INT(gw_autockpt_steps(10, 18000, 0, 60, 100), 0);
  CHECK_INT(gw_autockpt_steps(10, 0, 5, 60, 100), 0);
  /* more than 20% either way */
  CHECK(!gw_autockpt_changed(100, 120));
  CHECK(gw_autockpt_changed(100, 121));
  CHECK(!gw_autockpt_changed(100, 80));
  CHECK(gw_autockpt_changed(100, 79));
  CHECK(gw_autockpt_changed(0, 5));
  /* write time: the default until measured, then a weighted average */
  struct gw_autockpt a = {0};
  CHECK_NEAR(gw_autockpt_write_sim_s(&a, 60), GW_AUTOCKPT_DEFAULT_WRITE_S, 0);
  gw_autockpt_write(&a, 0.2);
  CHECK_NEAR(gw_autockpt_write_sim_s(&a, 1), 0.2, 1e-12);
  CHECK_NEAR(gw_autockpt_write_sim_s(&a, 60), 12, 1e-9); /* wall seconds scaled */
  gw_autockpt_write(&a, 1.2);
  CHECK_NEAR(gw_autockpt_write_sim_s(&a, 1), 0.3 * 1.2 + 0.7 * 0.2, 1e-12);
  /* step rate: windows of at least half a second */
  gw_autockpt_step(&a, 10, 1000000);
  gw_autockpt_step(&a, 15, 1200000); /* too short a window */
  CHECK_NEAR(a.steps_per_s, 0, 0);
  gw_autockpt_step(&a, 30, 2000000);
  CHECK_NEAR(a.steps_per_s, 20, 1e-9);
  gw_autockpt_step(&a, 40, 3000000);
  CHECK_NEAR(a.steps_per_s, 15, 1e-9); /* half 10/s, half 20/s */
  /* a re-register at step 500: the metrics sent again up to there, all at
   * once, are not timed; the rate goes on from the live ones after them */
  gw_autockpt_resent_to(&a, 500);
  for (int s = 41; s <= 500; s++)
    gw_autockpt_step(&a, s, 3600000 + s); /* 460 steps within a millisecond */
  CHECK_NEAR(a.steps_per_s, 15, 1e-9);
  gw_autockpt_step(&a, 505, 4000000);
  gw_autockpt_step(&a, 515, 5000000);
  CHECK_NEAR(a.steps_per_s, 0.5 * 10 + 0.5 * 15, 1e-9);
  gw_autockpt_new_attempt(&a);
  CHECK_NEAR(a.steps_per_s, 0, 0);
  CHECK_NEAR(gw_autockpt_write_sim_s(&a, 1), 0.3 * 1.2 + 0.7 * 0.2, 1e-12); /* kept across attempts */
  TEST_MAIN_END();
}
