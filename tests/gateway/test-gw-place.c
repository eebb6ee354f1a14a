/* Placement policy and gangs as pure functions (place.h, gang.h): the nodes
 * option, picking N instances at once (all or none; idle workers first, one
 * provider, type and market, the cheapest), and the outcome of a gang's
 * attempt from how its members ended. No gateway, no loop. */
#include "gang.h"
#include "place.h"

#include "harness.h"

#include "sl_err.h"
#include "sl_time.h"

#include <errno.h>
#include <jansson.h>
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
  return gw_place_pick_gang(&w, idle, n_idle, offers, n_offers, max_launch, p);
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
  /* a third node: two idle and one launched on a... */
  CHECK_INT(pick("{\"nodes\": 3}", two, 4, 2, 64, &p), 0);
  CHECK_INT(p.n_idle, 2);
  CHECK_INT(p.n_launch, 1);
  CHECK_INT(p.offer, 0);
  CHECK_NEAR(p.usd_per_hour, 0.97, 1e-9);
  /* ... unless three new ones on b cost less per hour (0.75) */
  CHECK_INT(pick("{\"nodes\": 3}", two, 4, 3, 64, &p), 0);
  CHECK_INT(p.n_idle, 0);
  CHECK_INT(p.n_launch, 3);
  CHECK_INT(p.offer, 2);
  /* all or none across the idle ones too: two idle, no launch, three nodes */
  CHECK_INT(pick("{\"nodes\": 3}", two, 4, 3, 0, &p), -EAGAIN);
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
 * the provider's memory of it runs out. */
static void test_pick_unavailable(void) {
  struct gw_offer offs[] = {offer(&prov_a, "cheap", 1, 0.2, 1.0), offer(&prov_a, "dear", 1, 0.5, 2.0)};
  struct gw_wants w = wants("{}");
  size_t i = 9;
  bool spot = false;
  CHECK_INT(gw_place_pick(&w, offs, 2, &i, &spot), 0);
  CHECK_STR(offs[i].type.name, "cheap");
  CHECK(spot);
  offs[0].type.unavailable_until_us = sl_time_real_us() + 600 * SL_US_PER_S;
  CHECK_INT(gw_place_pick(&w, offs, 2, &i, &spot), 0);
  CHECK_STR(offs[i].type.name, "dear");
  offs[1].type.unavailable_until_us = offs[0].type.unavailable_until_us;
  CHECK_INT(gw_place_pick(&w, offs, 2, &i, &spot), SL_ENAME);
  offs[0].type.unavailable_until_us = sl_time_real_us() - SL_US_PER_S; /* remembered no more */
  CHECK_INT(gw_place_pick(&w, offs, 2, &i, &spot), 0);
  CHECK_STR(offs[i].type.name, "cheap");
}

int main(void) {
  test_nodes_option();
  test_pick_unavailable();
  test_gang_from_offers();
  test_gang_with_idle();
  test_gang_outcome();
  TEST_MAIN_END();
}
