/* gateway/deadline.c: the deadline option, the earliest finish, the job
 * view the tick policy gets, and the sentences people read. */
#include "deadline.h"
#include "harness.h"

#include "sl_err.h"

#include <jansson.h>
#include <math.h>

static int option(const char *json, double *ret_s) {
  json_t *o = json_loads(json, 0, NULL);
  char why[200] = "";
  int r = gw_deadline_option(o, ret_s, why, sizeof why);
  if (r < 0)
    CHECK(strstr(why, "deadline must be a duration") != NULL);
  json_decref(o);
  return r;
}

static void test_option(void) {
  double s = -1;
  CHECK_INT(option("{}", &s), 1);
  CHECK_INT(option("{\"deadline\":null}", &s), 1);
  CHECK_INT(option("{\"deadline\":\"3h\"}", &s), 0);
  CHECK_NEAR(s, 10800, 1e-9);
  CHECK_INT(option("{\"deadline\":\"150m\"}", &s), 0);
  CHECK_NEAR(s, 9000, 1e-9);
  CHECK_INT(option("{\"deadline\":90}", &s), 0);
  CHECK_NEAR(s, 90, 1e-9);
  CHECK_INT(option("{\"deadline\":{\"t\":\"dur\",\"v\":30000000}}", &s), 0);
  CHECK_NEAR(s, 30, 1e-9);
  s = -1;
  CHECK_INT(option("{\"deadline\":\"soon\"}", &s), SL_ECONFIG);
  CHECK_INT(option("{\"deadline\":\"0s\"}", &s), SL_ECONFIG);
  CHECK_INT(option("{\"deadline\":-5}", &s), SL_ECONFIG);
  CHECK_INT(option("{\"deadline\":\"31d\"}", &s), SL_ECONFIG);
  CHECK_INT(option("{\"deadline\":[1]}", &s), SL_ECONFIG);
  CHECK_NEAR(s, -1, 0); /* written only on success */
}

static void test_earliest(void) {
  struct gw_deadline_work w = {.window_s = 3600, .startup_s = 120, .step_s = 0.5, .steps = 1000, .step = 400};
  CHECK_NEAR(gw_deadline_left_s(&w), 300, 1e-9);
  CHECK_NEAR(gw_deadline_earliest_s(&w), 420, 1e-9);
  w.step = 2000; /* past the end: nothing left */
  CHECK_NEAR(gw_deadline_left_s(&w), 0, 0);
  /* %%run: half the window planned, less what ran; only the start-up is certain */
  struct gw_deadline_work r = {.window_s = 3600, .startup_s = 120, .run_done_s = 600};
  CHECK_NEAR(gw_deadline_left_s(&r), 1200, 1e-9);
  CHECK_NEAR(gw_deadline_earliest_s(&r), 120, 1e-9);
  r.run_done_s = 5000;
  CHECK_NEAR(gw_deadline_left_s(&r), 0, 0);
}

static void test_view(void) {
  /* 1000 steps of 0.5 s, 400 done; 2 h deadline, tracked from 10 min after
   * submission; 60 s ticks */
  struct gw_deadline_work w = {.window_s = 7200, .startup_s = 90, .step_s = 0.5, .steps = 1000, .step = 400};
  struct sl_job_view v;
  gw_deadline_view(&w, 600, 3, 60, SL_MODE_OD, 50, &v);
  CHECK_INT(v.window, 110);       /* (7200 - 600) / 60 */
  CHECK_INT(v.done, 3);           /* 200 s of progress: rounded down */
  CHECK_INT(v.work, 3 + 7);       /* 300 s left, planned as 315 s and a tick: 7 ticks */
  CHECK_INT(v.overhead, 2);       /* 90 s: rounded up */
  CHECK_INT(v.t, 3);
  CHECK_INT(v.mode, SL_MODE_OD);
  CHECK_INT(v.warm_left, 1);
  w.step_s = 0.61; /* 366 s left, planned as 444.3 s: 8 ticks, never fewer than the seconds need */
  gw_deadline_view(&w, 600, 0, 60, SL_MODE_IDLE, 500, &v);
  CHECK_INT(v.work - v.done, 8);
  CHECK_INT(v.warm_left, 0); /* idle pays nothing */
  w.step_s = 0.5; /* 290 s left fits 5 ticks; with the margin (304.5 s) 6, and a tick more */
  w.steps = 400 + 580;
  gw_deadline_view(&w, 600, 0, 60, SL_MODE_IDLE, 500, &v);
  CHECK_INT(v.work - v.done, 7);
  w.step = 980; /* nothing left: no margin either */
  gw_deadline_view(&w, 600, 0, 60, SL_MODE_IDLE, 500, &v);
  CHECK_INT(v.work - v.done, 0);
  w.step = 400;
  w.steps = 1000;
  w.step_s = 0.61;
  gw_deadline_view(&w, 600, 0, 60, 2, 500, &v);
  CHECK_INT(v.warm_left, v.overhead); /* at most one overhead */
  w.window_s = 100; /* tracked after its deadline: an empty window */
  gw_deadline_view(&w, 600, 0, 60, SL_MODE_IDLE, 0, &v);
  CHECK_INT(v.window, 0);
  w.startup_s = 0; /* a restart is never free */
  gw_deadline_view(&w, 0, 0, 60, SL_MODE_IDLE, 0, &v);
  CHECK_INT(v.overhead, 1);
}

static void test_text(void) {
  char b[300];
  CHECK_STR(gw_deadline_dur(45, b, sizeof b), "45s");
  CHECK_STR(gw_deadline_dur(1500, b, sizeof b), "25m");
  CHECK_STR(gw_deadline_dur(7800, b, sizeof b), "2h10m");
  CHECK_STR(gw_deadline_dur(3 * 86400 + 4 * 3600, b, sizeof b), "3d4h");
  CHECK_STR(gw_deadline_dur(-3, b, sizeof b), "0s");
  gw_deadline_plan_text(0, "g5.xlarge", 1500, true, b, sizeof b);
  CHECK_STR(b, "spot on g5.xlarge while slack > 25m, then on-demand");
  gw_deadline_plan_text(SL_MODE_IDLE, "", 120, true, b, sizeof b);
  CHECK_STR(b, "waiting for spot capacity while slack > 2m, then on-demand");
  gw_deadline_plan_text(SL_MODE_OD, "", 120, true, b, sizeof b);
  CHECK_STR(b, "on-demand (back to spot when it is safe)");
  gw_deadline_plan_text(SL_MODE_OD, "", 120, false, b, sizeof b);
  CHECK_STR(b, "on-demand (no spot offer fits the job)");
  struct gw_deadline_work w = {.window_s = 10, .startup_s = 120, .step_s = 1, .steps = 40};
  gw_deadline_refusal(&w, 60, b, sizeof b);
  CHECK_STR(b, "deadline=10s cannot be met: the earliest possible finish, on on-demand from now, is 2m40s"
               " after submission (a start-up of 2m, then 40 steps of about 1 s); times on the provider's"
               " clock, 60 times the wall clock");
  struct gw_deadline_work r = {.window_s = 60, .startup_s = 300, .elapsed_s = 0};
  gw_deadline_refusal(&r, 1, b, sizeof b);
  CHECK_STR(b, "deadline=1m cannot be met: the earliest possible finish, on on-demand from now, is 5m"
               " after submission (a start-up of 5m)");
}

int main(void) {
  test_option();
  test_earliest();
  test_view();
  test_text();
  TEST_MAIN_END();
}
