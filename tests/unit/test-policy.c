/* The policy module (common/sl_policy.h): the hindsight optimum against
 * brute force over every schedule of small random traces, the tick model's
 * accounting, each policy's decisions on hand-made traces (slack runs out,
 * spot returns, a zone flaps, a fresh market), what spotlab learns of the
 * time of day and what it does with it, the deadline kept by every policy on
 * random traces, and the ranking of offers. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "sl_err.h"
#include "sl_policy.h"
#include "sl_policy_int.h"

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

#define MAXT 256

struct market {
  int32_t avail[3][MAXT];
  double price[3][MAXT];
  struct sl_zone_view z[3];
  struct sl_market_view m;
};

static void market_init(struct market *k, size_t zones, size_t n, bool prices) {
  memset(k, 0, sizeof *k);
  for (size_t z = 0; z < zones; z++)
    k->z[z] = (struct sl_zone_view){.avail = k->avail[z], .price = prices ? k->price[z] : NULL,
                                    .n = n, .spot_price = 1.0};
  k->m = (struct sl_market_view){.zones = k->z, .n_zones = zones, .ondemand_price = 3.0,
                                 .gap_s = 3600, .nodes = 1};
}

/* From a string per zone: '#' capacity, '.' none. */
static void market_str(struct market *k, const char *const *zones, size_t n_zones) {
  size_t n = strlen(zones[0]);
  if (n > MAXT)
    abort();
  market_init(k, n_zones, n, false);
  for (size_t z = 0; z < n_zones; z++)
    for (size_t i = 0; i < n; i++)
      k->avail[z][i] = zones[z][i] == '#';
}

/* ---- the optimum against brute force ---- */

static double brute(const struct sl_market_view *m, const struct sl_sim_job *j, bool *ret_ok) {
  int modes[MAXT];
  size_t T = (size_t)j->window, M = m->n_zones + 2;
  size_t total = 1;
  for (size_t i = 0; i < T; i++)
    total *= M;
  double best = INFINITY;
  for (size_t code = 0; code < total; code++) {
    size_t c = code;
    for (size_t i = 0; i < T; i++) {
      modes[i] = (int)(c % M) - 2; /* -2 idle, -1 on-demand, 0.. zones */
      c /= M;
    }
    struct sl_sim_result r;
    sl_policy_simulate_modes(m, j, modes, T, &r);
    if (r.finished && r.deadline_met && r.cost_usd < best)
      best = r.cost_usd;
  }
  *ret_ok = !isinf(best);
  return best;
}

static void test_optimum_brute(void) {
  int cases = 0, feasible = 0;
  for (int rep = 0; rep < 400; rep++) {
    struct market k;
    size_t zones = 1 + next() % 2, T = 3 + next() % (zones == 1 ? 7 : 4);
    market_init(&k, zones, T + 4, next() % 2);
    for (size_t z = 0; z < zones; z++)
      for (size_t i = 0; i < T + 4; i++) {
        k.avail[z][i] = next() % 3 != 0;
        k.price[z][i] = 0.5 + (double)(next() % 8) / 8;
      }
    k.m.origin = next() % 3;
    struct sl_sim_job j = {.window = (int64_t)T, .work = 1 + (int64_t)(next() % T),
                           .overhead = (int64_t)(next() % 3)};
    bool ok;
    double want = brute(&k.m, &j, &ok);
    struct sl_sim_result r;
    int e = sl_policy_optimal(&k.m, &j, &r);
    cases++;
    if (!ok) {
      CHECK_INT(e, -ERANGE);
      continue;
    }
    feasible++;
    CHECK_INT(e, 0);
    CHECK_NEAR(r.cost_usd, want, 1e-9);
    CHECK(r.deadline_met && r.finish_tick <= j.window);
    /* its hours add up to its cost's parts */
    CHECK(r.spot_ticks + r.ondemand_ticks >= j.work + j.overhead);
  }
  CHECK(feasible > 200);
  fprintf(stderr, "optimum against brute force: %d cases, %d feasible\n", cases, feasible);
}

/* ---- the tick model ---- */

static void test_accounting(void) {
  const char *zs[] = {"##.####"};
  struct market k;
  market_str(&k, zs, 1);
  struct sl_sim_job j = {.window = 7, .work = 3, .overhead = 1};
  /* spot: overhead, 1 progress; lost at tick 2 (a preemption); idle; spot
   * again: overhead and 2 progress: done after tick 6 */
  int modes[] = {0, 0, -2, 0, 0, 0, 0};
  struct sl_sim_result r;
  sl_policy_simulate_modes(&k.m, &j, modes, 7, &r);
  CHECK(r.finished && r.deadline_met);
  CHECK_INT(r.finish_tick, 6);
  CHECK_INT(r.spot_ticks, 5);
  CHECK_INT(r.ondemand_ticks, 0);
  CHECK_INT(r.preemptions, 1);
  CHECK_INT(r.segments, 2);
  CHECK_NEAR(r.cost_usd, 5.0, 1e-12);
  /* a switch to on-demand is a new segment with its overhead */
  int modes2[] = {0, -1, -1, -1, -1, -1, -1};
  sl_policy_simulate_modes(&k.m, &j, modes2, 7, &r);
  CHECK_INT(r.finish_tick, 5); /* 1 spot overhead, 1 on-demand overhead, 3 progress */
  CHECK_INT(r.ondemand_ticks, 4);
  CHECK_NEAR(r.cost_usd, 1.0 + 4 * 3.0, 1e-12);
  /* asking for a zone without capacity runs nothing */
  int modes3[] = {-2, -2, 0, -2, -2, -2, -2};
  sl_policy_simulate_modes(&k.m, &j, modes3, 7, &r);
  CHECK_INT(r.spot_ticks, 0);
  CHECK(!r.finished);
  /* rounding of hours to ticks */
  CHECK_INT(sl_ticks_floor(2.5, 900), 10);
  CHECK_INT(sl_ticks_ceil(0.1, 195), 2);
  CHECK_INT(sl_ticks_floor(1.25 * 8, 600), 60);
  CHECK_INT(sl_ticks_ceil(0.2, 600), 2);
}

static struct sl_sim_result run(const char *name, struct market *k, struct sl_sim_job *j) {
  struct sl_policy *p = NULL;
  struct sl_sim_result r;
  memset(&r, 0, sizeof r);
  CHECK_INT(sl_policy_new(name, &p), 0);
  if (p)
    CHECK_INT(sl_policy_simulate(p, &k->m, j, &r), 0);
  sl_policy_free(p);
  return r;
}

static const char *const names[] = {"spotlab", "uniform-progress", "greedy", "ondemand"};

/* Spot for a while, then never again: every policy moves to on-demand in
 * time; the lazy ones spend their slack first. */
static void test_slack_runs_out(void) {
  char z0[41];
  memset(z0, '.', 40);
  memset(z0, '#', 10);
  z0[40] = 0;
  const char *zs[] = {z0};
  struct market k;
  market_str(&k, zs, 1);
  struct sl_sim_job j = {.window = 30, .work = 20, .overhead = 1};
  for (size_t i = 0; i < 4; i++) {
    struct sl_sim_result r = run(names[i], &k, &j);
    CHECK(r.finished && r.deadline_met);
  }
  struct sl_sim_result g = run("greedy", &k, &j);
  /* 9 spot progress, then waits out its slack: on-demand from tick 19 */
  CHECK_INT(g.spot_ticks, 10);
  CHECK_INT(g.ondemand_ticks, 12);
  CHECK_INT(g.finish_tick, 30);
  struct sl_sim_result s = run("spotlab", &k, &j);
  CHECK_INT(s.spot_ticks, 10);
  CHECK(s.ondemand_ticks == 12 && s.finish_tick <= 30);
  struct sl_sim_result o;
  CHECK_INT(sl_policy_optimal(&k.m, &j, &o), 0);
  CHECK_NEAR(o.cost_usd, 10 * 1.0 + 12 * 3.0, 1e-9);
  CHECK_NEAR(s.cost_usd, o.cost_usd, 1e-9);
}

/* On on-demand when spot returns for long: spotlab goes back to spot
 * (greedy, which stays on on-demand to the end, does not). */
static void test_spot_returns(void) {
  char z0[121];
  memset(z0, '#', 120);
  memset(z0 + 2, '.', 40);
  z0[120] = 0;
  const char *zs[] = {z0};
  struct market k;
  market_str(&k, zs, 1);
  k.m.gap_s = 60; /* minute ticks: the prior spot run (2 h) is long against the overhead */
  struct sl_sim_job j = {.window = 100, .work = 70, .overhead = 1};
  struct sl_sim_result s = run("spotlab", &k, &j), g = run("greedy", &k, &j);
  CHECK(s.deadline_met && g.deadline_met);
  CHECK(s.ondemand_ticks > 0);  /* the outage outlasted the slack less its reserve */
  CHECK(s.spot_ticks > 40);     /* and it came back to spot */
  CHECK(s.cost_usd < g.cost_usd);
  struct sl_policy *p = NULL;
  CHECK_INT(sl_policy_new("spotlab", &p), 0);
  /* the tick spot returns, on on-demand with slack for a trip: back to
   * spot (the prior's runs are long against the overhead), and the line
   * says what each option is expected to cost */
  k.z[0].n = 43;
  struct sl_job_view jv = {.window = 100, .work = 70, .overhead = 1, .t = 42, .done = 20,
                           .mode = SL_MODE_OD, .warm_left = 0};
  struct sl_decision d;
  sl_policy_decide(p, &jv, &k.m, &d);
  CHECK_INT(d.mode, 0);
  CHECK(strncmp(d.why, "spot: expected cost to finish $", 31) == 0);
  CHECK(strstr(d.why, "on-demand $") != NULL && strstr(d.why, "wait $") != NULL);
  /* with no slack for a trip back, it stays */
  jv.window = 42 + 50;
  sl_policy_decide(p, &jv, &k.m, &d);
  CHECK_INT(d.mode, SL_MODE_OD);
  CHECK_NEAR(d.slack_ticks, 0, 1e-9);
  sl_policy_free(p);
}

/* A market seen for a few ticks only, all with capacity: no run has ended,
 * so what spotlab knows is its prior, under which starting now and later
 * cost the same; with slack to spare it starts spot at once rather than
 * wait on the table's rounding (without the tie, about one case of five
 * waits, for up to hours, in a market that never goes down). */
static void test_fresh_market_starts(void) {
  static int32_t avail[8];
  static double price[8];
  for (int i = 0; i < 8; i++)
    avail[i] = 1, price[i] = 0.19;
  int waited = 0, cases = 0;
  for (int seen = 1; seen <= 3; seen++)
    for (int work = 3; work <= 40; work += 3)
      for (int window = 60; window <= 900; window += 120) {
        struct sl_zone_view z = {.avail = avail, .price = price, .n = (size_t)seen, .spot_price = 0.19};
        struct sl_market_view m = {.zones = &z, .n_zones = 1, .origin = (size_t)seen - 1,
                                   .ondemand_price = 0.526, .gap_s = 60, .nodes = 1};
        struct sl_job_view jv = {.window = window, .work = work, .overhead = 2, .mode = SL_MODE_IDLE};
        struct sl_policy *p = NULL;
        CHECK_INT(sl_policy_new("spotlab", &p), 0);
        struct sl_decision d;
        sl_policy_decide(p, &jv, &m, &d);
        cases++;
        waited += d.mode != 0;
        sl_policy_free(p);
      }
  CHECK_INT(waited, 0);
  CHECK(cases > 200);
}

/* Zone 0 flaps (one tick up, one down); zone 1 holds long runs. With that
 * history, spotlab never takes zone 0, and pays less than greedy, which
 * does. */
static void test_zone_flaps(void) {
  char z0[201], z1[201];
  for (int i = 0; i < 200; i++) {
    z0[i] = i % 2 ? '.' : '#';
    z1[i] = (i / 25) % 2 ? '.' : '#';
  }
  z0[200] = z1[200] = 0;
  const char *zs[] = {z0, z1};
  struct market k;
  market_str(&k, zs, 2);
  k.m.origin = 150; /* z0 and z1 both up at 150 */
  struct sl_policy *p = NULL;
  CHECK_INT(sl_policy_new("spotlab", &p), 0);
  for (size_t z = 0; z < 2; z++)
    k.z[z].n = 151;
  struct sl_job_view jv = {.window = 40, .work = 20, .overhead = 1, .t = 0, .done = 0,
                           .mode = SL_MODE_IDLE};
  struct sl_decision d;
  sl_policy_decide(p, &jv, &k.m, &d);
  CHECK(d.mode != 0);
  sl_policy_free(p);
  for (size_t z = 0; z < 2; z++)
    k.z[z].n = 200;
  struct sl_sim_job j = {.window = 40, .work = 20, .overhead = 1};
  struct sl_sim_result s = run("spotlab", &k, &j), g = run("greedy", &k, &j);
  CHECK(s.deadline_met && g.deadline_met);
  CHECK(s.cost_usd < g.cost_usd);
  CHECK(s.segments < g.segments);
  /* tick by tick, as the simulator runs it: never a segment in zone 0 */
  CHECK_INT(sl_policy_new("spotlab", &p), 0);
  struct sl_sim_state st;
  sl_sim_begin(&st);
  struct sl_sim_result r;
  memset(&r, 0, sizeof r);
  bool zone0 = false;
  for (int64_t t = 0; t < j.window; t++) {
    for (size_t z = 0; z < 2; z++)
      k.z[z].n = k.m.origin + (size_t)t + 1;
    sl_sim_market(&st, &k.m, t, &r);
    struct sl_job_view v = {.window = j.window, .work = j.work, .overhead = j.overhead, .t = t,
                            .done = st.done, .mode = st.mode, .warm_left = st.warm_left};
    sl_policy_decide(p, &v, &k.m, &d);
    zone0 |= d.mode == 0;
    if (sl_sim_tick(&st, &k.m, &j, t, d.mode, &r))
      break;
  }
  CHECK(!zone0 && r.deadline_met);
  sl_policy_free(p);
}

/* Time of day. With tick 0 at 02:00, capacity goes every day at 14:00 (its
 * runs of 13 to 23 hours all end in the 13 o'clock tick) and comes back
 * after 1 to 11 hours: spotlab counts each run's end in the bucket of the
 * day of its last tick, with the clock the view gives. */
static void test_time_of_day_learned(void) {
  static const int outage[9] = {3, 7, 1, 9, 5, 2, 8, 4, 11};
  char z0[241];
  int t = 0;
  for (; t < 12; t++)
    z0[t] = '#';
  for (int d = 0; d < 9; d++) {
    for (int i = 0; i < outage[d]; i++)
      z0[t++] = '.';
    for (int i = 0; i < 24 - outage[d] && t < 240; i++)
      z0[t++] = '#';
  }
  z0[t] = 0;
  const char *zs[] = {z0};
  struct market k;
  market_str(&k, zs, 1);
  k.m.origin = (size_t)t - 1;
  k.m.clock0_s = 5 * 86400.0 + 7200; /* tick 0 at 02:00 */
  int last_up = sl_day_bucket(&k.m, 11); /* 13:00 to 14:00 */
  CHECK_INT(last_up, 13 * SL_DAY_BUCKETS / 24);
  CHECK_INT(sl_day_bucket(&k.m, 22), 0);
  CHECK_INT(sl_day_bucket(&k.m, 21.0 + 24 * 30), 23 * SL_DAY_BUCKETS / 24);
  struct sl_policy *p = NULL;
  CHECK_INT(sl_policy_new("spotlab", &p), 0);
  struct sl_job_view jv = {.window = 20, .work = 10, .overhead = 1, .mode = SL_MODE_IDLE};
  struct sl_decision d;
  sl_policy_decide(p, &jv, &k.m, &d);
  const struct sl_day *up = &p->learn.zone[0].day[0], *down = &p->learn.zone[0].day[1];
  double up_ends = 0, down_ends = 0, exposure = 0;
  for (int b = 0; b < SL_DAY_BUCKETS; b++) {
    up_ends += up->ends[b];
    down_ends += down->ends[b];
    exposure += up->exposure[b] + down->exposure[b];
  }
  /* every day's run with capacity ends in the 13 o'clock bucket (the cut
   * first run's too); the outages end at several hours */
  CHECK_NEAR(up->ends[last_up], 9, 1e-9);
  CHECK_NEAR(up_ends, 9, 1e-9);
  CHECK_NEAR(down_ends, 9, 1e-9);
  CHECK(down->ends[last_up] < 9);
  CHECK_NEAR(exposure, (double)t, 1e-9);
  double f[SL_DAY_BUCKETS];
  sl_day_factors(up, f);
  for (int b = 0; b < SL_DAY_BUCKETS; b++)
    CHECK(b == last_up ? f[b] > 2 : f[b] < 1);
  sl_policy_free(p);
}

/* The same runs, but their ends at one time of day: a spot start whose
 * overhead runs into that time is expected to cost more than when the ends
 * come at any time; on-demand's expected cost hardly moves. */
static void test_time_of_day_plan(void) {
  struct sl_runs ups = {0}, downs = {0};
  for (int32_t len = 1; len <= 20; len++)
    sl_runs_add(&ups, len);
  for (int32_t len = 1; len <= 10; len++)
    sl_runs_add(&downs, len);
  struct sl_day even = {0}, at_four = {0};
  int four = 4 * SL_DAY_BUCKETS / 24;
  for (int b = 0; b < SL_DAY_BUCKETS; b++) {
    even.exposure[b] = at_four.exposure[b] = 100;
    even.ends[b] = 5;
    at_four.ends[b] = b == four ? 5 * SL_DAY_BUCKETS : 0;
  }
  char z0[121];
  memset(z0, '#', 120);
  z0[120] = 0;
  const char *zs[] = {z0};
  struct market k;
  market_str(&k, zs, 1);
  k.m.origin = 100; /* 04:00 */
  k.z[0].n = 101;
  struct sl_job_view jv = {.window = 16, .work = 8, .overhead = 2, .mode = SL_MODE_IDLE};
  struct sl_facts f;
  sl_policy_facts(&jv, &k.m, &f);
  /* each option's expected cost with the runs' ends even over the day [0]
   * and all at four [1], from 10 days of history and from 1 */
  const struct sl_day *days[2] = {&even, &at_four};
  double q[2][2][3];
  for (int h = 0; h < 2; h++)
    for (int i = 0; i < 2; i++) {
      struct sl_plan_market pm = {.ups = &ups, .downs = &downs, .up = true, .age = 3,
                                  .prior_up = 2, .prior_down = 1, .day_up = days[i],
                                  .day_down = &even, .history_days = h ? 1 : 10};
      struct sl_plan *pl = NULL;
      struct sl_plan_choice c;
      CHECK_INT(sl_plan_decide(&pl, &pm, &jv, &k.m, &f, 1.0, 0, &c), 0);
      memcpy(q[h][i], c.q, sizeof q[h][i]);
      sl_plan_free(pl);
    }
  CHECK(q[0][1][SL_PLAN_SPOT] > q[0][0][SL_PLAN_SPOT] + 0.5);
  CHECK(fabs(q[0][1][SL_PLAN_OD] - q[0][0][SL_PLAN_OD]) <
        q[0][1][SL_PLAN_SPOT] - q[0][0][SL_PLAN_SPOT]);
  /* with less than DAY_MIN_DAYS of history the time of day is not used */
  CHECK_NEAR(q[1][1][SL_PLAN_SPOT], q[1][0][SL_PLAN_SPOT], 1e-9);
  sl_runs_free(&ups);
  sl_runs_free(&downs);
}

/* Every policy keeps every deadline on-demand alone could keep, on random
 * traces, and none costs less than the optimum. */
static void test_deadlines_random(void) {
  for (int rep = 0; rep < 300; rep++) {
    struct market k;
    size_t zones = 1 + next() % 3, n = 64;
    market_init(&k, zones, n, next() % 2);
    int flip = 2 + (int)(next() % 6);
    for (size_t z = 0; z < zones; z++) {
      bool up = next() % 2;
      for (size_t i = 0; i < n; i++) {
        if (next() % (uint64_t)flip == 0)
          up = !up;
        k.avail[z][i] = up;
        k.price[z][i] = 0.6 + (double)(next() % 5) / 10;
      }
    }
    struct sl_sim_job j = {.overhead = (int64_t)(next() % 3)};
    j.work = 5 + (int64_t)(next() % 20);
    j.window = j.work + j.overhead + (int64_t)(next() % 25);
    k.m.origin = next() % (n - (size_t)j.window);
    struct sl_sim_result o;
    CHECK_INT(sl_policy_optimal(&k.m, &j, &o), 0);
    for (size_t i = 0; i < 4; i++) {
      struct sl_sim_result r = run(names[i], &k, &j);
      CHECK(r.finished && r.deadline_met);
      CHECK(r.cost_usd >= o.cost_usd - 1e-9);
    }
  }
}

static void test_names(void) {
  struct sl_policy *p = NULL;
  CHECK_INT(sl_policy_new("cheapest", &p), SL_ENAME);
  CHECK(p == NULL);
  CHECK_INT(sl_policy_new("uniform-progress", &p), 0);
  CHECK_STR(sl_policy_name(p), "uniform-progress");
  sl_policy_free(p);
  /* no deadline: the decision's slack is infinite, nothing is forced */
  const char *zs[] = {"...."};
  struct market k;
  market_str(&k, zs, 1);
  CHECK_INT(sl_policy_new("spotlab", &p), 0);
  struct sl_job_view jv = {.window = INT64_MAX, .work = 10, .overhead = 1, .mode = SL_MODE_IDLE};
  k.z[0].n = 1;
  struct sl_decision d;
  sl_policy_decide(p, &jv, &k.m, &d);
  CHECK(isinf(d.slack_ticks));
  CHECK_INT(d.mode, SL_MODE_IDLE);
  sl_policy_free(p);
}

static void test_rank(void) {
  struct sl_offer_rank od, spot, flaky, far;
  sl_policy_rank(&(struct sl_offer_est){.usd_per_hour = 3.0, .work_per_hour = 100}, &od);
  CHECK_NEAR(od.usd_per_unit, 0.03, 1e-12);
  CHECK_NEAR(od.efficiency, 1.0, 1e-12);
  /* one interruption an hour, 6 min to restart, half of a 12-min interval lost */
  sl_policy_rank(&(struct sl_offer_est){.usd_per_hour = 1.0, .work_per_hour = 100,
                                        .interrupts_per_hour = 1, .restart_h = 0.1,
                                        .checkpoint_h = 0.2},
                 &spot);
  CHECK_NEAR(spot.efficiency, 1 / 1.2, 1e-12);
  CHECK_NEAR(spot.usd_per_unit, 0.012, 1e-12);
  CHECK(strstr(spot.why, "interruptions") != NULL);
  /* interrupted so often that on-demand is cheaper per unit of work */
  sl_policy_rank(&(struct sl_offer_est){.usd_per_hour = 1.0, .work_per_hour = 100,
                                        .interrupts_per_hour = 20, .restart_h = 0.1,
                                        .checkpoint_h = 0.2},
                 &flaky);
  CHECK(flaky.usd_per_unit > od.usd_per_unit);
  /* a notice ahead of each interruption saves the half interval */
  sl_policy_rank(&(struct sl_offer_est){.usd_per_hour = 1.0, .work_per_hour = 100,
                                        .interrupts_per_hour = 1, .restart_h = 0.1,
                                        .checkpoint_h = 0.2, .notice_share = 1},
                 &far);
  CHECK_NEAR(far.efficiency, 1 / 1.1, 1e-12);
  /* moving a checkpoint in is spread over the work left */
  sl_policy_rank(&(struct sl_offer_est){.usd_per_hour = 1.0, .work_per_hour = 100,
                                        .move_usd = 2.0, .remaining_units = 1000},
                 &far);
  CHECK_NEAR(far.usd_per_unit, 0.01 + 0.002, 1e-12);
  CHECK(strstr(far.why, "move") != NULL);
  sl_policy_rank(&(struct sl_offer_est){.usd_per_hour = 1.0, .work_per_hour = 0}, &far);
  CHECK(isinf(far.usd_per_unit));
}

int main(void) {
  test_optimum_brute();
  test_accounting();
  test_slack_runs_out();
  test_spot_returns();
  test_zone_flaps();
  test_fresh_market_starts();
  test_time_of_day_learned();
  test_time_of_day_plan();
  test_deadlines_random();
  test_names();
  test_rank();
  TEST_MAIN_END();
}
