/* Placement policy and gangs as pure functions (place.h, gang.h): the nodes
 * option, ranking by expected cost per unit of work (prior speeds, measured
 * step rates, interruptions, checkpoint moves), failure memory (placemem.h),
 * region=, picking N instances at once (all or none; idle workers first,
 * one provider, type and market, the best), and the outcome of a gang's
 * attempt from how its members ended. No gateway, no loop. */
#include "gang.h"
#include "place.h"
#include "placemem.h"
#include "speed.h"

#include "harness.h"

#include "sl_err.h"
#include "sl_time.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static struct gw_provider prov_a = {.name = "a"}, prov_b = {.name = "b"};

static struct gw_offer offer(struct gw_provider *p, const char *name, int gpus, double spot,
                             double od) {
  struct gw_offer o = {.prov = p};
  snprintf(o.type.name, sizeof o.type.name, "%s", name);
  o.type.gpus = gpus;
  o.type.spot_usd_per_hour = spot;
  o.type.on_demand_usd_per_hour = od;
  return o;
}

static struct gw_inst idle_inst(struct gw_provider *p, const char *id, const char *type, bool spot,
                                double price, int gpus) {
  struct gw_inst in;
  memset(&in, 0, sizeof in);
  in.prov = p;
  snprintf(in.row.id, sizeof in.row.id, "%s", id);
  snprintf(in.row.type, sizeof in.row.type, "%s", type);
  snprintf(in.row.state, sizeof in.row.state, "idle");
  in.row.spot = spot;
  in.row.price_usd_per_hour = price;
  in.registered = true;
  in.gpus = gpus;
  return in;
}

static struct gw_wants wants(const char *options_json) {
  json_t *o = json_loads(options_json, 0, NULL);
  struct gw_job j;
  memset(&j, 0, sizeof j);
  j.spec = json_pack("{s:o}", "options", o ? o : json_object());
  struct gw_wants w;
  gw_place_wants(&j, &w);
  json_decref(j.spec);
  return w;
}

static int nodes_of(const char *options_json) {
  json_t *o = json_loads(options_json, 0, NULL);
  int n = gw_place_nodes(o);
  json_decref(o);
  return n;
}

static void test_nodes_option(void) {
  CHECK_INT(nodes_of("{}"), 1);
  CHECK_INT(nodes_of("{\"nodes\": 1}"), 1);
  CHECK_INT(nodes_of("{\"nodes\": 2}"), 2);
  CHECK_INT(nodes_of("{\"nodes\": 4.0}"), 4);
  CHECK_INT(nodes_of("{\"nodes\": {\"t\": \"num\", \"v\": 3}}"), 3); /* a session value */
  CHECK_INT(nodes_of("{\"nodes\": 64}"), 64);
  CHECK_INT(nodes_of("{\"nodes\": 65}"), -1);
  CHECK_INT(nodes_of("{\"nodes\": 0}"), -1);
  CHECK_INT(nodes_of("{\"nodes\": -2}"), -1);
  CHECK_INT(nodes_of("{\"nodes\": 1.5}"), -1);
  CHECK_INT(nodes_of("{\"nodes\": \"2\"}"), -1);
  CHECK_INT(wants("{\"nodes\": 3}").nodes, 3);
  CHECK_INT(wants("{}").nodes, 1);
  CHECK_INT(wants("{\"nodes\": 0}").nodes, 1); /* refused at submit; never 0 here */
}

/* The market of the tests: small (1 GPU, spot 0.30, on-demand 1.00) and big
 * (4 GPUs, spot 1.20, on-demand 4.00) on provider a; small at 0.25 spot on b. */
static struct gw_offer offers[3];
static void market(void) {
  offers[0] = offer(&prov_a, "t.small", 1, 0.30, 1.00);
  offers[1] = offer(&prov_a, "t.big", 4, 1.20, 4.00);
  offers[2] = offer(&prov_b, "t.small", 1, 0.25, 1.00);
}

static int pick(const char *opts, const struct gw_inst *const *idle, size_t n_idle, size_t n_offers,
                size_t max_launch, struct gw_gang_pick *p) {
  struct gw_wants w = wants(opts);
  memset(p, 0, sizeof *p);
  struct gw_place_ctx c = {.now_us = 1};
  return gw_place_pick_gang(&w, &c, idle, n_idle, offers, n_offers, max_launch, p);
}

static void test_gang_from_offers(void) {
  market();
  struct gw_gang_pick p;
  /* two of the cheapest: small spot on a (b not offered here) */
  CHECK_INT(pick("{\"nodes\": 2}", NULL, 0, 2, 64, &p), 0);
  CHECK_INT(p.n_idle, 0);
  CHECK_INT(p.n_launch, 2);
  CHECK_INT(p.offer, 0);
  CHECK(p.spot);
  CHECK_NEAR(p.usd_per_hour, 0.60, 1e-9);
  /* with b, its cheaper small: all of one provider */
  CHECK_INT(pick("{\"nodes\": 3}", NULL, 0, 3, 64, &p), 0);
  CHECK_INT(p.offer, 2);
  CHECK_INT(p.n_launch, 3);
  CHECK_NEAR(p.usd_per_hour, 0.75, 1e-9);
  /* the job's options bound the type and market of every member */
  CHECK_INT(pick("{\"nodes\": 2, \"gpus\": 2}", NULL, 0, 2, 64, &p), 0);
  CHECK_INT(p.offer, 1);
  CHECK_NEAR(p.usd_per_hour, 2.40, 1e-9);
  CHECK_INT(pick("{\"nodes\": 2, \"spot\": \"no\"}", NULL, 0, 2, 64, &p), 0);
  CHECK_INT(p.offer, 0);
  CHECK(!p.spot);
  CHECK_NEAR(p.usd_per_hour, 2.00, 1e-9);
  CHECK_INT(pick("{\"nodes\": 2, \"instance\": \"t.big\", \"spot\": \"yes\"}", NULL, 0, 2, 64, &p), 0);
  CHECK_INT(p.offer, 1);
  CHECK(p.spot);
  /* all or none: one launch allowed now is not a gang of two */
  CHECK_INT(pick("{\"nodes\": 2}", NULL, 0, 2, 1, &p), -EAGAIN);
  CHECK_INT(pick("{\"nodes\": 2}", NULL, 0, 2, 0, &p), -EAGAIN);
  /* never: no type has 8 GPUs, none is named t.huge, nothing under 0.2 */
  CHECK_INT(pick("{\"nodes\": 2, \"gpus\": 8}", NULL, 0, 2, 64, &p), SL_ENAME);
  CHECK_INT(pick("{\"nodes\": 2, \"instance\": \"t.huge\"}", NULL, 0, 2, 64, &p), SL_ENAME);
  CHECK_INT(pick("{\"nodes\": 2, \"max_price\": 0.2}", NULL, 0, 2, 64, &p), SL_ENAME);
  /* max_price bounds each instance, not the gang */
  CHECK_INT(pick("{\"nodes\": 4, \"max_price\": 0.5}", NULL, 0, 2, 64, &p), 0);
  CHECK_INT(p.n_launch, 4);
  CHECK_NEAR(p.usd_per_hour, 1.20, 1e-9);
}

static void test_gang_with_idle(void) {
  market();
  struct gw_gang_pick p;
  struct gw_inst i1 = idle_inst(&prov_a, "i-1", "t.small", true, 0.35, 1);
  struct gw_inst i2 = idle_inst(&prov_a, "i-2", "t.big", true, 1.10, 4);
  struct gw_inst i3 = idle_inst(&prov_a, "i-3", "t.small", true, 0.32, 1);
  struct gw_inst i4 = idle_inst(&prov_a, "i-4", "t.small", false, 1.00, 1);
  struct gw_inst i5 = idle_inst(&prov_b, "i-5", "t.small", true, 0.25, 1);
  struct gw_inst i6 = idle_inst(&prov_a, "i-6", "t.old", true, 0.10, 1); /* not offered any more */
  struct gw_inst i7 = idle_inst(&prov_a, "i-7", "t.old", true, 0.10, 1);

  /* one idle small spot: it and one launched small spot */
  const struct gw_inst *one[] = {&i1};
  CHECK_INT(pick("{\"nodes\": 2}", one, 1, 2, 64, &p), 0);
  CHECK_INT(p.n_idle, 1);
  CHECK_INT(p.idle[0], 0);
  CHECK_INT(p.n_launch, 1);
  CHECK_INT(p.offer, 0);
  CHECK(p.spot);
  CHECK_NEAR(p.usd_per_hour, 0.65, 1e-9);
  /* ... and with no launch allowed now, nothing */
  CHECK_INT(pick("{\"nodes\": 2}", one, 1, 2, 0, &p), -EAGAIN);

  /* two idle small spot of a: a gang that starts now, in their order */
  const struct gw_inst *two[] = {&i2, &i1, &i4, &i3};
  CHECK_INT(pick("{\"nodes\": 2}", two, 4, 2, 0, &p), 0);
  CHECK_INT(p.n_idle, 2);
  CHECK_INT(p.n_launch, 0);
  CHECK_INT(p.idle[0], 1);
  CHECK_INT(p.idle[1], 3);
  CHECK_NEAR(p.usd_per_hour, 0.67, 1e-9);
  /* idle workers alone win over a cheaper gang that must be launched */
  CHECK_INT(pick("{\"nodes\": 2}", two, 4, 3, 64, &p), 0);
  CHECK_INT(p.n_launch, 0);
  /* a third node: the idle on-demand small joins the two spot ones (the
   * same hardware, already running), and they start now, as a one-instance
   * job takes an idle worker of either market first */
  CHECK_INT(pick("{\"nodes\": 3}", two, 4, 3, 64, &p), 0);
  CHECK_INT(p.n_idle, 3);
  CHECK_INT(p.n_launch, 0);
  CHECK_INT(p.idle[0], 1);
  CHECK_INT(p.idle[1], 2);
  CHECK_INT(p.idle[2], 3);
  CHECK_NEAR(p.usd_per_hour, 1.67, 1e-9);
  /* without it: two idle and one launched on a... */
  const struct gw_inst *spots[] = {&i2, &i1, &i3};
  CHECK_INT(pick("{\"nodes\": 3}", spots, 3, 2, 64, &p), 0);
  CHECK_INT(p.n_idle, 2);
  CHECK_INT(p.n_launch, 1);
  CHECK_INT(p.offer, 0);
  CHECK_NEAR(p.usd_per_hour, 0.97, 1e-9);
  /* ... unless three new ones on b cost less per hour (0.75) */
  CHECK_INT(pick("{\"nodes\": 3}", spots, 3, 3, 64, &p), 0);
  CHECK_INT(p.n_idle, 0);
  CHECK_INT(p.n_launch, 3);
  CHECK_INT(p.offer, 2);
  /* all or none across the idle ones too: two idle, no launch, three nodes */
  CHECK_INT(pick("{\"nodes\": 3}", spots, 3, 3, 0, &p), -EAGAIN);
  /* one idle big and one launched big cost more than two new smalls */
  const struct gw_inst *big[] = {&i2};
  CHECK_INT(pick("{\"nodes\": 2}", big, 1, 2, 64, &p), 0);
  CHECK_INT(p.n_idle, 0);
  CHECK_INT(p.offer, 0);
  /* ... unless the job needs 4 GPUs per node */
  CHECK_INT(pick("{\"nodes\": 2, \"gpus\": 4}", big, 1, 2, 64, &p), 0);
  CHECK_INT(p.n_idle, 1);
  CHECK_INT(p.n_launch, 1);
  CHECK_INT(p.offer, 1);
  /* spot=no passes over the spot workers */
  CHECK_INT(pick("{\"nodes\": 2, \"spot\": \"no\"}", two, 4, 2, 64, &p), 0);
  CHECK_INT(p.n_idle, 1);
  CHECK_INT(p.idle[0], 2);
  CHECK(!p.spot);
  /* one provider per gang: a's idle small and b's cheaper one do not mix */
  const struct gw_inst *mixed[] = {&i1, &i5};
  CHECK_INT(pick("{\"nodes\": 2}", mixed, 2, 3, 0, &p), -EAGAIN);
  CHECK_INT(pick("{\"nodes\": 2}", mixed, 2, 3, 1, &p), 0);
  CHECK_INT(p.n_idle, 1);
  CHECK_INT(p.idle[0], 1); /* b's worker and one more on b */
  CHECK_INT(p.offer, 2);
  /* idle workers of a type no longer offered make a gang on their own... */
  const struct gw_inst *old[] = {&i6, &i7};
  CHECK_INT(pick("{\"nodes\": 2}", old, 2, 2, 0, &p), 0);
  CHECK_INT(p.n_idle, 2);
  CHECK_NEAR(p.usd_per_hour, 0.20, 1e-9);
  /* ... but a third member of that type cannot be launched */
  CHECK_INT(pick("{\"nodes\": 3, \"instance\": \"t.old\"}", old, 2, 2, 64, &p), SL_ENAME);
}

static struct gw_gang gang(int n) {
  struct gw_gang g;
  memset(&g, 0, sizeof g);
  g.n = n;
  for (int r = 0; r < n; r++) {
    snprintf(g.m[r].instance, sizeof g.m[r].instance, "i-%d", r);
    g.m[r].exit_code = -1;
  }
  return g;
}

static enum gw_gang_outcome outcome(const struct gw_gang *g, bool cancel, bool finished, int *rank,
                                    bool *notice, int64_t *code) {
  return gw_gang_outcome(g, cancel, finished, rank, notice, code);
}

static void test_gang_outcome(void) {
  int rank;
  bool notice;
  int64_t code;
  struct gw_gang g = gang(2);
  CHECK_INT(gw_gang_rank(&g, "i-1"), 1);
  CHECK_INT(gw_gang_rank(&g, "i-9"), -1);
  CHECK_INT(gw_gang_rank(NULL, "i-1"), -1);
  CHECK_INT(gw_gang_end_from_status("succeeded"), GW_GANG_SUCCEEDED);
  CHECK_INT(gw_gang_end_from_status("preempted"), GW_GANG_PREEMPTED);
  CHECK_INT(gw_gang_end_from_status("cancelled"), GW_GANG_CANCELLED);
  CHECK_INT(gw_gang_end_from_status("failed"), GW_GANG_FAILED);
  CHECK_INT(gw_gang_end_from_status("what"), GW_GANG_FAILED);

  /* a member still live: wait */
  g.m[1].end = GW_GANG_SUCCEEDED;
  CHECK_INT(outcome(&g, false, true, &rank, &notice, &code), GW_GANG_WAIT);
  CHECK_INT(gw_gang_live(&g), 1);
  CHECK(!gw_gang_broken(&g));
  /* all succeeded at the last step */
  g.m[0].end = GW_GANG_SUCCEEDED;
  CHECK_INT(outcome(&g, false, true, &rank, &notice, &code), GW_GANG_DONE_OK);
  /* ... short of it (a rank was stopped from outside): resumed as a retry */
  CHECK_INT(outcome(&g, false, false, &rank, &notice, &code), GW_GANG_RETRY);

  /* notice on rank 1: it says preempted, rank 0 stopped with it */
  g = gang(2);
  g.m[1].end = GW_GANG_PREEMPTED;
  g.m[1].noticed = true;
  g.m[0].end = GW_GANG_CANCELLED;
  CHECK_INT(outcome(&g, false, false, &rank, &notice, &code), GW_GANG_REQUEUE);
  CHECK_INT(rank, 1);
  CHECK(notice);
  CHECK(gw_gang_broken(&g));
  /* rank 0's own notice; rank 1 ended at the same step with status 0 */
  g = gang(2);
  g.m[0].end = GW_GANG_PREEMPTED;
  g.m[0].noticed = true;
  g.m[1].end = GW_GANG_SUCCEEDED;
  CHECK_INT(outcome(&g, false, false, &rank, &notice, &code), GW_GANG_REQUEUE);
  CHECK_INT(rank, 0);
  CHECK(notice);

  /* no notice: rank 1 lost; rank 0 failed in a collective, or was killed */
  g = gang(3);
  g.m[2].end = GW_GANG_LOST;
  g.m[0].end = GW_GANG_FAILED;
  g.m[0].exit_code = 1;
  g.m[1].end = GW_GANG_CANCELLED;
  g.m[1].exit_code = 137;
  CHECK_INT(outcome(&g, false, false, &rank, &notice, &code), GW_GANG_REQUEUE);
  CHECK_INT(rank, 2);
  CHECK(!notice);

  /* a rank failed on its own: the job fails, naming it */
  g = gang(2);
  g.m[1].end = GW_GANG_FAILED;
  g.m[1].exit_code = 1;
  g.m[0].end = GW_GANG_CANCELLED;
  CHECK_INT(outcome(&g, false, false, &rank, &notice, &code), GW_GANG_DONE_FAILED);
  CHECK_INT(rank, 1);
  CHECK_INT(code, 1);
  /* killed by a signal nobody sent (the OOM killer): a retry */
  g.m[1].exit_code = 137;
  CHECK_INT(outcome(&g, false, false, &rank, &notice, &code), GW_GANG_RETRY);
  CHECK_INT(code, 137);
  /* its worker refused the assign for a reason that may pass (a restore the
   * store did not answer): a retry too */
  g.m[1].exit_code = -1;
  g.m[1].transient = true;
  CHECK_INT(outcome(&g, false, false, &rank, &notice, &code), GW_GANG_RETRY);
  CHECK_INT(rank, 1);
  /* the gateway gave up (rank 0 named no rendezvous): failed, not retried */
  g = gang(2);
  g.gave_up = true;
  g.m[0].end = GW_GANG_CANCELLED;
  g.m[1].end = GW_GANG_CANCELLED;
  CHECK_INT(outcome(&g, false, false, &rank, &notice, &code), GW_GANG_DONE_FAILED);
  g.m[1].end = GW_GANG_LOST; /* ... unless an instance was lost meanwhile */
  CHECK_INT(outcome(&g, false, false, &rank, &notice, &code), GW_GANG_REQUEUE);
  g = gang(2);
  g.m[1].end = GW_GANG_FAILED;
  g.m[1].exit_code = 137;
  g.m[0].end = GW_GANG_CANCELLED;
  /* whatever happened, a cancelled job is cancelled */
  CHECK_INT(outcome(&g, true, false, &rank, &notice, &code), GW_GANG_DONE_CANCELLED);
}

/* A type whose capacity the provider found exhausted is passed over until
 * the provider's memory of it runs out; while every type is, the job waits
 * (-EAGAIN), it does not fail. */
static void test_pick_unavailable(void) {
  struct gw_offer offs[] = {offer(&prov_a, "cheap", 1, 0.2, 1.0), offer(&prov_a, "dear", 1, 0.5, 2.0)};
  struct gw_wants w = wants("{}");
  struct gw_place_ctx c = {.now_us = 1, .now_real_us = sl_time_real_us()};
  size_t i = 9;
  bool spot = false;
  CHECK_INT(gw_place_pick(&w, &c, offs, 2, &i, &spot), 0);
  CHECK_STR(offs[i].type.name, "cheap");
  CHECK(spot);
  offs[0].type.unavailable_until_us = c.now_real_us + 600 * SL_US_PER_S;
  CHECK_INT(gw_place_pick(&w, &c, offs, 2, &i, &spot), 0);
  CHECK_STR(offs[i].type.name, "dear");
  offs[1].type.unavailable_until_us = offs[0].type.unavailable_until_us;
  CHECK_INT(gw_place_pick(&w, &c, offs, 2, &i, &spot), -EAGAIN);
  w = wants("{\"gpus\": 8}"); /* none fits at all: the job cannot be placed */
  CHECK_INT(gw_place_pick(&w, &c, offs, 2, &i, &spot), SL_ENAME);
  w = wants("{}");
  offs[0].type.unavailable_until_us = c.now_real_us - SL_US_PER_S; /* remembered no more */
  CHECK_INT(gw_place_pick(&w, &c, offs, 2, &i, &spot), 0);
  CHECK_STR(offs[i].type.name, "cheap");
}

static struct gw_offer gpu_offer(struct gw_provider *p, const char *name, const char *model,
                                 int gpus, double spot, double od, double mttp_s) {
  struct gw_offer o = offer(p, name, gpus, spot, od);
  snprintf(o.type.gpu_model, sizeof o.type.gpu_model, "%s", model);
  o.type.mean_time_to_preempt_s = mttp_s;
  return o;
}

/* The score is sl_policy_rank's: price over work, work lost to
 * interruptions (each costs the restart and, without notice, half a
 * checkpoint interval), plus a checkpoint's move spread over the work
 * left. */
static void test_score(void) {
  struct gw_wants w = wants("{}");
  struct gw_place_ctx c = {.now_us = 1};
  struct gw_offer o = gpu_offer(&prov_a, "g", "A10G", 1, 0.40, 1.00, 3600);
  struct gw_place_score sc;
  /* on-demand: no interruptions, prior work 1 unit/h of an A10G */
  CHECK_INT(gw_place_score(&w, &c, &o, false, &sc), 0);
  CHECK_NEAR(sc.usd_per_unit, 1.00, 1e-9);
  CHECK_NEAR(sc.efficiency, 1.0, 1e-12);
  CHECK(!sc.measured && !sc.held);
  CHECK(strstr(sc.why, "prior speed") != NULL);
  /* spot: one interruption an hour, costing 180 s of restart and half of
   * the half (no notice) of a 600 s checkpoint interval */
  CHECK_INT(gw_place_score(&w, &c, &o, true, &sc), 0);
  double lost_h = (GW_PLACE_RESTART_S + (1 - GW_PLACE_NOTICE_SHARE) * GW_PLACE_CHECKPOINT_S / 2) / 3600;
  CHECK_NEAR(sc.efficiency, 1 / (1 + lost_h), 1e-12);
  CHECK_NEAR(sc.usd_per_unit, 0.40 * (1 + lost_h), 1e-9);
  CHECK(strstr(sc.why, "interruptions/h") != NULL);
  /* measured: 2 steps per wall second on a provider whose clock runs 10x:
   * 720 steps per provider hour; a restart measured at 30 wall s is 300
   * provider s */
  struct gw_place_rate r = {.type = "g", .gpu_model = "A10G", .gpus = 1, .steps_per_s = 2};
  o.time_scale = 10;
  c.rates = &r;
  c.n_rates = 1;
  c.restart_s = 30;
  c.checkpoint_s = 60;
  CHECK_INT(gw_place_score(&w, &c, &o, true, &sc), 0);
  CHECK(sc.measured);
  lost_h = (300 + 0.5 * 600 / 2) / 3600.0;
  CHECK_NEAR(sc.usd_per_unit, 0.40 / 720 * (1 + lost_h), 1e-12);
  /* a checkpoint of 2 GB moved at 0.05 USD/GB, over 720 steps left */
  o.type.move_usd_per_gb = 0.05;
  c.checkpoint_gb = 2;
  c.remaining_steps = 720;
  struct gw_place_score moved;
  CHECK_INT(gw_place_score(&w, &c, &o, true, &moved), 0);
  CHECK_NEAR(moved.usd_per_unit - sc.usd_per_unit, 0.10 / 720, 1e-12);
  CHECK(strstr(moved.why, "move the checkpoint") != NULL);
  /* what the job's options rule out is not scored */
  w = wants("{\"spot\": \"no\"}");
  CHECK_INT(gw_place_score(&w, &c, &o, true, &sc), -1);
  w = wants("{\"gpus\": 2}");
  CHECK_INT(gw_place_score(&w, &c, &o, false, &sc), -1);
  /* a gang of 4: four times the price and work, four times the interruptions */
  w = wants("{\"nodes\": 4}");
  struct gw_place_ctx c0 = {.now_us = 1};
  o = gpu_offer(&prov_a, "g", "A10G", 1, 0.40, 1.00, 3600);
  CHECK_INT(gw_place_score(&w, &c0, &o, true, &sc), 0);
  lost_h = (GW_PLACE_RESTART_S + (1 - GW_PLACE_NOTICE_SHARE) * GW_PLACE_CHECKPOINT_S / 2) / 3600;
  CHECK_NEAR(sc.efficiency, 1 / (1 + 4 * lost_h), 1e-12);
}

/* Picks by cost per unit of work, not by price: a faster GPU at a higher
 * price wins when its work is cheaper; measured rates beat the prior; a
 * rate measured on one type scales to the others by the prior. */
static void test_pick_by_work(void) {
  struct gw_offer offs[] = {
    gpu_offer(&prov_a, "slow", "T4", 1, 0.20, 0.50, 7200),
    gpu_offer(&prov_a, "fast", "H100", 1, 0.60, 4.00, 7200),
  };
  CHECK(gw_speed_relative("h100") > 2 * gw_speed_relative("T4"));
  CHECK_INT(gw_speed_relative("no-such-gpu") == 0, 1);
  struct gw_wants w = wants("{}");
  struct gw_place_ctx c = {.now_us = 1};
  size_t i = 9;
  bool spot = false;
  /* by price alone "slow" wins; per unit of work (0.72 vs 2.81) "fast" does */
  CHECK_INT(gw_place_pick(&w, &c, offs, 2, &i, &spot), 0);
  CHECK_STR(offs[i].type.name, "fast");
  CHECK(spot);
  /* this job measured: on "slow" it does 10 steps/s, on "fast" only 20 */
  struct gw_place_rate r[2] = {{.type = "slow", .gpu_model = "T4", .gpus = 1, .steps_per_s = 10},
                               {.type = "fast", .gpu_model = "H100", .gpus = 1, .steps_per_s = 20}};
  c.rates = r;
  c.n_rates = 2;
  CHECK_INT(gw_place_pick(&w, &c, offs, 2, &i, &spot), 0);
  CHECK_STR(offs[i].type.name, "slow");
  /* measured on "slow" only: "fast" is estimated at 10 × 2.81 / 0.72 */
  c.n_rates = 1;
  struct gw_place_score sf;
  CHECK_INT(gw_place_score(&w, &c, &offs[1], false, &sf), 0);
  CHECK(sf.measured);
  CHECK_NEAR(sf.usd_per_unit, 4.00 / (10 * 3600 * gw_speed_relative("H100") / gw_speed_relative("T4")),
             1e-12);
  /* spot=no: on-demand only; spot=yes: spot only */
  w = wants("{\"spot\": \"no\"}");
  CHECK_INT(gw_place_pick(&w, &c, offs, 2, &i, &spot), 0);
  CHECK(!spot);
  /* a job on a 4-GPU type uses the GPUs it asks for: it pays for four */
  struct gw_offer four[] = {gpu_offer(&prov_a, "one", "A10G", 1, 0.40, 1.0, 7200),
                            gpu_offer(&prov_a, "four", "A10G", 4, 1.20, 4.0, 7200)};
  c.n_rates = 0;
  w = wants("{}"); /* no gpus=: one GPU, as the worker uses */
  CHECK_INT(gw_place_pick(&w, &c, four, 2, &i, &spot), 0);
  CHECK_STR(four[i].type.name, "one");
  w = wants("{\"gpus\": 2}"); /* only "four" fits; it pays 1.20 for two GPUs' work */
  CHECK_INT(gw_place_pick(&w, &c, four, 2, &i, &spot), 0);
  CHECK_STR(four[i].type.name, "four");
  struct gw_place_score s4;
  CHECK_INT(gw_place_score(&w, &c, &four[1], false, &s4), 0);
  CHECK_NEAR(s4.usd_per_unit, 4.0 / 2, 1e-9);
}

/* A zone that just took an instance back is not the first choice again;
 * the penalty fades over GW_PLACE_MEMORY_US. A launch refused for capacity
 * holds the placement back for the rest of the pass: spot=auto goes
 * on-demand at once, spot=yes waits (-EAGAIN) for the next pass. */
static void test_failure_memory(void) {
  struct gw_offer offs[3];
  for (int z = 0; z < 3; z++) {
    offs[z] = gpu_offer(&prov_a, "g", "A10G", 1, 0.40, 1.00, 7200);
    snprintf(offs[z].type.zone, sizeof offs[z].type.zone, "r-1%c", 'a' + z);
  }
  offs[2].type.spot_usd_per_hour = 0.41; /* c costs a little more */
  struct gw_place_memory *m = gw_place_memory_new();
  CHECK(m != NULL);
  struct gw_place_rate rates[GW_PLACE_RATES_MAX];
  struct gw_place_ctx c;
  struct gw_wants w = wants("{}");
  size_t i = 9;
  bool spot = false;
  int64_t t0 = 1000 * SL_US_PER_S;
  gw_place_memory_view(m, 0, rates, GW_PLACE_RATES_MAX, &c);
  c.now_us = t0;
  CHECK_INT(gw_place_pick(&w, &c, offs, 3, &i, &spot), 0);
  CHECK_STR(offs[i].type.zone, "r-1a");
  /* preempted in r-1a: r-1b next, then r-1c (a little dearer) over r-1a */
  gw_place_memory_failure(m, &prov_a, "g", "r-1a", true, false, t0);
  gw_place_memory_view(m, 0, rates, GW_PLACE_RATES_MAX, &c);
  c.now_us = t0 + SL_US_PER_S;
  CHECK_INT(gw_place_pick(&w, &c, offs, 3, &i, &spot), 0);
  CHECK_STR(offs[i].type.zone, "r-1b");
  CHECK(spot);
  gw_place_memory_failure(m, &prov_a, "g", "r-1b", true, false, t0 + SL_US_PER_S);
  gw_place_memory_view(m, 0, rates, GW_PLACE_RATES_MAX, &c);
  c.now_us = t0 + 2 * SL_US_PER_S;
  CHECK_INT(gw_place_pick(&w, &c, offs, 3, &i, &spot), 0);
  CHECK_STR(offs[i].type.zone, "r-1c");
  struct gw_place_score sc;
  CHECK_INT(gw_place_score(&w, &c, &offs[0], true, &sc), 0);
  CHECK(sc.penalty > 1.9 && !sc.held);
  CHECK(strstr(sc.why, "preempted r-1a") != NULL);
  /* on-demand of the zone is not what was preempted */
  CHECK_INT(gw_place_score(&w, &c, &offs[0], false, &sc), 0);
  CHECK_NEAR(sc.penalty, 1, 1e-12);
  /* the memory fades: long after, r-1a is first again */
  c.now_us = t0 + GW_PLACE_MEMORY_US + 2 * SL_US_PER_S;
  CHECK_INT(gw_place_pick(&w, &c, offs, 3, &i, &spot), 0);
  CHECK_STR(offs[i].type.zone, "r-1a");

  /* capacity: every spot zone refused in this pass; spot=auto takes
   * on-demand at once, spot=yes waits */
  int64_t t1 = t0 + 2 * GW_PLACE_MEMORY_US;
  for (int z = 0; z < 3; z++)
    gw_place_memory_failure(m, &prov_a, "g", offs[z].type.zone, true, true, t1);
  gw_place_memory_view(m, 0, rates, GW_PLACE_RATES_MAX, &c);
  c.now_us = c.pass_us = t1;
  CHECK_INT(gw_place_pick(&w, &c, offs, 3, &i, &spot), 0);
  CHECK(!spot);
  struct gw_wants yes = wants("{\"spot\": \"yes\"}");
  CHECK_INT(gw_place_pick(&yes, &c, offs, 3, &i, &spot), -EAGAIN);
  /* the next pass tries spot again, the zone refused longest ago first */
  gw_place_memory_failure(m, &prov_a, "g", "r-1b", true, true, t1 + 1);
  gw_place_memory_view(m, 0, rates, GW_PLACE_RATES_MAX, &c);
  c.now_us = c.pass_us = t1 + SL_US_PER_S;
  CHECK_INT(gw_place_pick(&yes, &c, offs, 3, &i, &spot), 0);
  CHECK(spot);
  CHECK(strcmp(offs[i].type.zone, "r-1b") != 0);
  struct gw_place_score sc_b;
  CHECK_INT(gw_place_score(&yes, &c, &offs[1], true, &sc_b), 0);
  CHECK(!sc_b.held && sc_b.penalty > 2);
  CHECK(strstr(sc_b.why, "capacity refused r-1b") != NULL);
  /* the provider says its capacity changed: its refusals are forgotten,
   * its preemptions are not (another provider's change forgets nothing) */
  gw_place_memory_failure(m, &prov_a, "h", "r-1a", true, false, t1);
  gw_place_memory_release(m, &prov_b);
  gw_place_memory_view(m, 0, rates, GW_PLACE_RATES_MAX, &c);
  CHECK_INT(c.n_failures, 4); /* one entry per (provider, type, zone, market): the last failure */
  gw_place_memory_release(m, &prov_a);
  gw_place_memory_view(m, 0, rates, GW_PLACE_RATES_MAX, &c);
  CHECK_INT(c.n_failures, 1);
  CHECK(!c.failures[0].capacity);
  CHECK_STR(c.failures[0].type, "h");
  /* a failure with no zone (the provider chose it) counts for every zone */
  struct gw_place_memory *m2 = gw_place_memory_new();
  gw_place_memory_failure(m2, &prov_a, "g", "", true, true, t1);
  gw_place_memory_view(m2, 0, rates, GW_PLACE_RATES_MAX, &c);
  c.now_us = c.pass_us = t1;
  CHECK_INT(gw_place_pick(&yes, &c, offs, 3, &i, &spot), -EAGAIN);
  gw_place_memory_free(m2);
  m = gw_place_memory_free(m);
  CHECK(m == NULL);
}

/* What the memory keeps: rates per (shape, type), averaged; restart times;
 * checkpoint sizes per shape; failures counted while they come close. */
static void test_memory(void) {
  struct gw_place_memory *m = gw_place_memory_new();
  struct gw_place_rate rates[GW_PLACE_RATES_MAX];
  struct gw_place_ctx c;
  gw_place_memory_rate(m, 7, "g", "A10G", 1, 10);
  gw_place_memory_rate(m, 7, "g", "A10G", 1, 20);
  gw_place_memory_rate(m, 8, "h", "H100", 1, 50);
  gw_place_memory_rate(m, 7, "x", "T4", 1, -1); /* ignored */
  gw_place_memory_restart(m, 60);
  gw_place_memory_restart(m, 0); /* ignored */
  gw_place_memory_checkpoint(m, 7, 3000000000);
  gw_place_memory_view(m, 7, rates, GW_PLACE_RATES_MAX, &c);
  CHECK_INT(c.n_rates, 1);
  CHECK_STR(c.rates[0].type, "g");
  CHECK_NEAR(c.rates[0].steps_per_s, 0.7 * 10 + 0.3 * 20, 1e-9);
  CHECK_NEAR(c.restart_s, 60, 1e-9);
  CHECK_NEAR(c.checkpoint_gb, 3, 1e-9);
  gw_place_memory_view(m, 9, rates, GW_PLACE_RATES_MAX, &c);
  CHECK_INT(c.n_rates, 0);
  CHECK_NEAR(c.checkpoint_gb, 0, 1e-12);
  int64_t t = 5 * SL_US_PER_S;
  gw_place_memory_failure(m, &prov_a, "g", "z", true, false, t);
  gw_place_memory_failure(m, &prov_a, "g", "z", true, false, t + SL_US_PER_S);
  gw_place_memory_failure(m, &prov_a, "g", "z", false, true, t);
  gw_place_memory_view(m, 7, rates, GW_PLACE_RATES_MAX, &c);
  CHECK_INT(c.n_failures, 2);
  CHECK_INT(c.failures[0].count, 2);
  CHECK(!c.failures[0].capacity && c.failures[1].capacity);
  gw_place_memory_failure(m, &prov_a, "g", "z", true, false, t + 2 * GW_PLACE_MEMORY_US);
  CHECK_INT(c.failures[0].count, 1); /* long after: counted afresh */
  for (int k = 0; k < GW_PLACEMEM_FAILURES_MAX + 5; k++) { /* bounded: the oldest goes */
    char type[16];
    snprintf(type, sizeof type, "t%d", k);
    gw_place_memory_failure(m, &prov_b, type, "", true, true, t + k);
  }
  gw_place_memory_view(m, 7, rates, GW_PLACE_RATES_MAX, &c);
  CHECK_INT(c.n_failures, GW_PLACEMEM_FAILURES_MAX);
  gw_place_memory_free(m);
  gw_place_memory_free(NULL);
}

/* The memory kept across gateway restarts: written to JSON and read back
 * into a new memory (the next gateway's), its failures moved to the new
 * monotonic clock; a forgotten failure or a gone provider's is left out; a
 * malformed entry is skipped and counted, the others read. */
static void test_memory_kept(void) {
  struct gw_place_memory *m = gw_place_memory_new();
  struct gw_place_rate rates[GW_PLACE_RATES_MAX];
  struct gw_place_ctx c;
  int64_t now = 50000 * SL_US_PER_S, real = INT64_C(1800000000) * SL_US_PER_S;
  CHECK(gw_place_memory_changes(m) == 0);
  gw_place_memory_rate(m, 7, "g", "A10G", 1, 10);
  gw_place_memory_rate(m, UINT64_MAX, "h", "H100", 8, 50);
  gw_place_memory_restart(m, 90);
  gw_place_memory_checkpoint(m, 7, 2500000000);
  gw_place_memory_failure(m, &prov_a, "g", "z-1", true, false, now - 60 * SL_US_PER_S);
  gw_place_memory_failure(m, &prov_a, "g", "z-1", true, false, now - 30 * SL_US_PER_S);
  gw_place_memory_failure(m, &prov_b, "h", "", true, true, now - 10 * SL_US_PER_S);
  gw_place_memory_failure(m, &prov_a, "old", "", true, false, now - GW_PLACE_MEMORY_US);
  CHECK(gw_place_memory_changes(m) == 8);
  json_t *j = gw_place_memory_json(m, now, real);
  CHECK(j != NULL);
  CHECK_INT(json_array_size(json_object_get(j, "failures")), 2); /* "old" is forgotten */
  char *text = json_dumps(j, JSON_COMPACT);
  json_decref(j);
  j = json_loads(text, 0, NULL); /* as the store gives it back */
  free(text);

  /* the next gateway: another monotonic clock, 2 minutes later; provider b is gone */
  int64_t now2 = 700 * SL_US_PER_S, real2 = real + 120 * SL_US_PER_S;
  struct gw_provider *provs[] = {&prov_a};
  struct gw_place_memory *m2 = gw_place_memory_new();
  size_t skipped = 9;
  CHECK_INT(gw_place_memory_load(m2, j, provs, 1, now2, real2, &skipped), 5);
  CHECK_INT(skipped, 0);
  gw_place_memory_view(m2, 7, rates, GW_PLACE_RATES_MAX, &c);
  CHECK_INT(c.n_rates, 1);
  CHECK_STR(c.rates[0].type, "g");
  CHECK_STR(c.rates[0].gpu_model, "A10G");
  CHECK_NEAR(c.rates[0].steps_per_s, 10, 1e-12);
  CHECK_NEAR(c.restart_s, 90, 1e-12);
  CHECK_NEAR(c.checkpoint_gb, 2.5, 1e-12);
  CHECK_INT(c.n_failures, 1);
  CHECK(c.failures[0].prov == &prov_a && c.failures[0].spot && !c.failures[0].capacity);
  CHECK_STR(c.failures[0].zone, "z-1");
  CHECK_INT(c.failures[0].count, 2);
  CHECK(c.failures[0].at_us == now2 - 150 * SL_US_PER_S); /* 30 s before, plus the 2 minutes */
  gw_place_memory_view(m2, UINT64_MAX, rates, GW_PLACE_RATES_MAX, &c);
  CHECK_INT(c.n_rates, 1);
  CHECK_INT(c.rates[0].gpus, 8);
  gw_place_memory_free(m2);

  /* past the memory, the failure is left out; the rest stays */
  m2 = gw_place_memory_new();
  CHECK_INT(gw_place_memory_load(m2, j, provs, 1, now2, real + GW_PLACE_MEMORY_US, &skipped), 4);
  gw_place_memory_view(m2, 7, rates, GW_PLACE_RATES_MAX, &c);
  CHECK_INT(c.n_failures, 0);
  gw_place_memory_free(m2);
  json_decref(j);

  /* malformed entries: each skipped, the good ones read */
  j = json_loads("{\"restart_s\": \"soon\","
                 " \"rates\": [{\"shape\": \"0000000000000007\", \"type\": \"g\","
                 "   \"gpu_model\": \"A10G\", \"gpus\": 1, \"steps_per_s\": 4},"
                 "  {\"shape\": \"7\", \"type\": \"g\", \"gpu_model\": \"\", \"gpus\": 1,"
                 "   \"steps_per_s\": 4},"
                 "  {\"shape\": \"0000000000000007\", \"type\": \"h\", \"gpu_model\": \"\","
                 "   \"gpus\": 1, \"steps_per_s\": -4},"
                 "  {\"shape\": \"000000000000000G\", \"type\": \"h\", \"gpu_model\": \"\","
                 "   \"gpus\": 1, \"steps_per_s\": 4}, 3],"
                 " \"checkpoints\": [{\"shape\": \"0000000000000007\", \"gb\": 0}],"
                 " \"failures\": [{\"provider\": \"a\", \"type\": \"g\", \"zone\": \"z\","
                 "   \"spot\": 1, \"capacity\": false, \"count\": 1, \"at_us\": 0}]}",
                 0, NULL);
  CHECK(j != NULL);
  m2 = gw_place_memory_new();
  CHECK_INT(gw_place_memory_load(m2, j, provs, 1, now2, real2, &skipped), 1);
  CHECK_INT(skipped, 7);
  gw_place_memory_view(m2, 7, rates, GW_PLACE_RATES_MAX, &c);
  CHECK_INT(c.n_rates, 1);
  CHECK_NEAR(c.rates[0].steps_per_s, 4, 1e-12);
  CHECK_NEAR(c.restart_s, 0, 1e-12);
  gw_place_memory_free(m2);
  json_decref(j);
  CHECK_INT(gw_place_memory_load(NULL, NULL, provs, 1, now2, real2, &skipped), 0);

  /* a failure's time past any clock (a damaged row): long forgotten, and
   * its age is not computed past int64_t's range */
  j = json_loads("{\"failures\": [{\"provider\": \"a\", \"type\": \"g\", \"zone\": \"z\","
                 "   \"spot\": true, \"capacity\": false, \"count\": 1,"
                 "   \"at_us\": -9223372036854775808}]}",
                 0, NULL);
  CHECK(j != NULL);
  m2 = gw_place_memory_new();
  CHECK_INT(gw_place_memory_load(m2, j, provs, 1, now2, real2, &skipped), 0);
  CHECK_INT(skipped, 0);
  gw_place_memory_view(m2, 7, rates, GW_PLACE_RATES_MAX, &c);
  CHECK_INT(c.n_failures, 0);
  gw_place_memory_free(m2);
  json_decref(j);
  gw_place_memory_free(m);
}

/* region=: only offers in that region. */
static void test_region(void) {
  struct gw_offer offs[] = {offer(&prov_a, "g", 1, 0.20, 1.0), offer(&prov_a, "g", 1, 0.30, 1.0)};
  snprintf(offs[0].region, sizeof offs[0].region, "us-east-1");
  snprintf(offs[1].region, sizeof offs[1].region, "eu-west-1");
  struct gw_place_ctx c = {.now_us = 1};
  size_t i = 9;
  bool spot;
  struct gw_wants w = wants("{\"region\": \"eu-west-1\"}");
  CHECK_STR(w.region, "eu-west-1");
  CHECK_INT(gw_place_pick(&w, &c, offs, 2, &i, &spot), 0);
  CHECK_INT(i, 1);
  w = wants("{\"region\": \"ap-south-1\"}");
  CHECK_INT(gw_place_pick(&w, &c, offs, 2, &i, &spot), SL_ENAME);
  w = wants("{}");
  CHECK_INT(gw_place_pick(&w, &c, offs, 2, &i, &spot), 0);
  CHECK_INT(i, 0);
  /* an idle worker's zone names its region */
  struct gw_inst in = idle_inst(&prov_a, "i-1", "g", true, 0.2, 1);
  snprintf(in.row.zone, sizeof in.row.zone, "us-east-1b");
  w = wants("{\"region\": \"us-east-1\"}");
  CHECK(gw_place_fits(&w, &in));
  w = wants("{\"region\": \"eu-west-1\"}");
  CHECK(!gw_place_fits(&w, &in));
}

/* A user's allowed types ([group.NAME] instance_types) limit what the
 * job's own instance= may pick, and placement. */
static void test_allowed_types(void) {
  struct gw_offer offs[] = {offer(&prov_a, "cheap", 1, 0.10, 1.0), offer(&prov_a, "dear", 1, 0.30, 1.0)};
  struct gw_place_ctx c = {.now_us = 1};
  size_t i = 9;
  bool spot;
  struct gw_wants w = wants("{}");
  gw_place_allow(&w, "dear, other");
  CHECK_INT(w.n_allowed, 2);
  CHECK(gw_place_type_allowed(&w, "dear") && !gw_place_type_allowed(&w, "cheap"));
  CHECK_INT(gw_place_pick(&w, &c, offs, 2, &i, &spot), 0);
  CHECK_INT(i, 1);
  w = wants("{\"instance\": \"cheap,dear\"}");
  gw_place_allow(&w, "other");
  CHECK(!gw_place_type_allowed(&w, "cheap") && !gw_place_type_allowed(&w, "dear"));
  CHECK(gw_place_pick(&w, &c, offs, 2, &i, &spot) < 0);
  gw_place_allow(&w, NULL); /* no limit */
  CHECK_INT(w.n_allowed, 0);
  CHECK_INT(gw_place_pick(&w, &c, offs, 2, &i, &spot), 0);
  CHECK_INT(i, 0);
  struct gw_inst in = idle_inst(&prov_a, "i-1", "cheap", true, 0.1, 1);
  w = wants("{}");
  gw_place_allow(&w, "dear");
  CHECK(!gw_place_fits(&w, &in));
}

/* The ranking %instances shows: every (offer, market) that fits, best
 * first, held ones last. */
static void test_rank(void) {
  struct gw_offer offs[] = {gpu_offer(&prov_a, "slow", "T4", 1, 0.20, 0.50, 7200),
                            gpu_offer(&prov_a, "fast", "H100", 1, 0.60, 4.00, 7200),
                            gpu_offer(&prov_a, "big", "A100", 8, 0, 30.0, 0)};
  struct gw_place_ctx c = {.now_us = 10 * SL_US_PER_S};
  struct gw_place_failure f = {.prov = &prov_a, .type = "fast", .spot = true, .capacity = true,
                               .count = 1, .at_us = c.now_us};
  struct gw_wants w = wants("{}");
  struct gw_place_ranked r[8];
  size_t n = gw_place_rank(&w, &c, offs, 3, r, 8);
  CHECK_INT(n, 5); /* big has no spot price */
  for (size_t k = 1; k < n; k++)
    CHECK(r[k - 1].score.usd_per_unit <= r[k].score.usd_per_unit);
  CHECK_INT(r[0].offer, 1);
  CHECK(r[0].spot);
  c.failures = &f;
  c.n_failures = 1;
  n = gw_place_rank(&w, &c, offs, 3, r, 8);
  CHECK_INT(r[n - 1].offer, 1);
  CHECK(r[n - 1].spot && r[n - 1].score.held);
  CHECK(strstr(r[n - 1].score.why, "capacity refused") != NULL);
  CHECK_INT(gw_place_rank(&w, &c, offs, 3, r, 2), 2); /* bounded */
  w = wants("{\"gpus\": 8}");
  CHECK_INT(gw_place_rank(&w, &c, offs, 3, r, 8), 1);
}

int main(void) {
  test_nodes_option();
  test_pick_unavailable();
  test_score();
  test_pick_by_work();
  test_failure_memory();
  test_memory();
  test_memory_kept();
  test_region();
  test_allowed_types();
  test_rank();
  test_gang_from_offers();
  test_gang_with_idle();
  test_gang_outcome();
  TEST_MAIN_END();
}
