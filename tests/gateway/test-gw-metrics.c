/* /metrics and the store's groupings behind it: jobs by state, preemptions
 * by notice, instances by type, zone and market with label values escaped,
 * spend per user, and the cost API's rows per user, job, type and day. */
#include "harness.h"
#include "budget.h"
#include "bus.h"
#include "conf.h"
#include "fleet.h"
#include "ledger.h"
#include "metrics.h"
#include "sl_err.h"
#include "store.h"
#include "sl_time.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/test-gw-metrics-XXXXXX";

static int64_t job_of(struct gw_store *s, const char *user, const char *type, double usd,
                      double od) {
  struct gw_job j = {0};
  snprintf(j.user, sizeof j.user, "%s", user);
  snprintf(j.kind, sizeof j.kind, "run");
  snprintf(j.instance_type, sizeof j.instance_type, "%s", type);
  j.spec = json_object();
  CHECK_INT(gw_store_job_create(s, &j), 0);
  j.attempt = 1;
  CHECK_INT(gw_store_attempt_begin(s, &j, 0, 1000), 0);
  CHECK_INT(gw_store_cost_add(s, &j, usd, od, 60, 86400LL * 1000000 * 3), 0);
  int64_t id = j.id;
  gw_job_done(&j);
  return id;
}

static void test_render(void) {
  char path[128], err[256] = "";
  snprintf(path, sizeof path, "%s/gateway.db", dir);
  struct gw_store *s = NULL;
  CHECK_INT(gw_store_open(path, &s, err, sizeof err), 0);
  static struct gw_config cfg;
  gw_config_defaults(&cfg);
  cfg.monthly_usd = 10;
  int64_t a = job_of(s, "alice", "g5.xlarge", 0.5, 1.5);
  job_of(s, "alice", "g4dn.xlarge", 0.25, 0.5);
  job_of(s, "bob", "g5.xlarge", 1, 2);
  CHECK_INT(gw_store_attempt_end(s, a, 1, "preempted", 2000), 0);
  int64_t seq = 0;
  json_t *ev = json_pack("{s:s,s:b}", "event", "preempted", "notice", 1);
  CHECK_INT(gw_store_event_append(s, a, ev, &seq), 0);
  json_decref(ev);
  ev = json_pack("{s:s,s:b}", "event", "preempted", "notice", 0);
  CHECK_INT(gw_store_event_append(s, a, ev, &seq), 0);
  json_decref(ev);

  json_t *rows = NULL;
  CHECK_INT(gw_store_cost_by(s, GW_COST_BY_TYPE, NULL, 0, 10, &rows), 0);
  CHECK_INT(json_array_size(rows), 2);
  CHECK_STR(json_string_value(json_object_get(json_array_get(rows, 0), "key")), "g5.xlarge");
  CHECK_NEAR(json_real_value(json_object_get(json_array_get(rows, 0), "usd")), 1.5, 1e-12);
  json_decref(rows);
  CHECK_INT(gw_store_cost_by(s, GW_COST_BY_JOB, "alice", 0, 10, &rows), 0);
  CHECK_INT(json_array_size(rows), 2); /* alice's two, costliest first */
  CHECK_INT(json_integer_value(json_object_get(json_array_get(rows, 0), "key")), a);
  json_decref(rows);
  CHECK_INT(gw_store_cost_by(s, GW_COST_BY_DAY, "bob", 0, 10, &rows), 0);
  CHECK_INT(json_array_size(rows), 1);
  CHECK_STR(json_string_value(json_object_get(json_array_get(rows, 0), "key")), "1970-01-04");
  json_decref(rows);
  CHECK_INT(gw_store_cost_by(s, 99, NULL, 0, 10, &rows), -EINVAL);

  CHECK_INT(gw_store_user_put(s, "alice", "aa", "team"), 0);
  struct gw_job ja = {.id = a, .attempt = 1};
  snprintf(ja.user, sizeof ja.user, "alice");
  CHECK_INT(gw_store_energy_add(s, &ja, 0.5, 200, 86400LL * 1000000 * 3), 0);
  CHECK_INT(gw_store_cost_by(s, GW_COST_BY_JOB, "alice", 0, 10, &rows), 0);
  CHECK_NEAR(json_real_value(json_object_get(json_array_get(rows, 0), "energy_kwh")), 0.5, 1e-12);
  CHECK_NEAR(json_real_value(json_object_get(json_array_get(rows, 0), "co2e_g")), 200, 1e-9);
  CHECK_NEAR(json_real_value(json_object_get(json_array_get(rows, 0), "usd")), 0.5, 1e-12);
  json_decref(rows);

  struct gw_fleet *f = gw_fleet_new(s, 16);
  struct gw_ledger *l = gw_ledger_new(&cfg, s);
  CHECK(f && l);
  struct gw_inst in = {0};
  snprintf(in.row.id, sizeof in.row.id, "i-1");
  snprintf(in.row.type, sizeof in.row.type, "g5.xlarge");
  snprintf(in.row.zone, sizeof in.row.zone, "z\"q\\b\nn"); /* what a label must escape */
  snprintf(in.row.state, sizeof in.row.state, "idle");
  in.row.spot = true;
  CHECK(gw_fleet_inst_add(f, &in) != NULL);
  snprintf(in.row.id, sizeof in.row.id, "i-2");
  CHECK(gw_fleet_inst_add(f, &in) != NULL);

  struct gw_metrics_http http = {0};
  gw_metrics_http_count(&http, 200);
  gw_metrics_http_count(&http, 200);
  gw_metrics_hist_observe(&http.latency, 0.002);
  gw_metrics_hist_observe(&http.latency, 9);
  struct gw_metrics_src src = {.cfg = &cfg, .store = s, .fleet = f, .ledger = l, .http = &http};
  size_t len = 0;
  char *text = gw_metrics_render(&src, &len);
  CHECK(text != NULL && len == strlen(text));
  const char *want[] = {
    "# TYPE spotlab_jobs gauge\n", "spotlab_jobs{state=\"queued\"} 3\n",
    "spotlab_jobs{state=\"running\"} 0\n",
    "spotlab_preemptions_total{notice=\"yes\"} 1\n", "spotlab_preemptions_total{notice=\"no\"} 1\n",
    "spotlab_instances{type=\"g5.xlarge\",zone=\"z\\\"q\\\\b\\nn\",market=\"spot\",state=\"idle\"} 2\n",
    "spotlab_spend_usd_total{user=\"alice\",group=\"team\"} 0.75\n",
    "spotlab_on_demand_usd_total{user=\"bob\",group=\"\"} 2\n",
    "spotlab_savings_usd{user=\"alice\",group=\"team\"} 1.25\n", "spotlab_budget_monthly_usd 10\n",
    "spotlab_energy_kwh_total{user=\"alice\",group=\"team\"} 0.5\n",
    "spotlab_co2e_grams_total{user=\"alice\",group=\"team\"} 200\n",
    "spotlab_energy_kwh_total{user=\"bob\",group=\"\"} 0\n",
    "spotlab_kernel_clients 0\n", "spotlab_http_requests_total{code=\"200\"} 2\n",
    "spotlab_http_request_duration_seconds_bucket{le=\"0.001\"} 0\n",
    "spotlab_http_request_duration_seconds_bucket{le=\"0.0025\"} 1\n",
    "spotlab_http_request_duration_seconds_bucket{le=\"2.5\"} 1\n",
    "spotlab_http_request_duration_seconds_bucket{le=\"+Inf\"} 2\n",
    "spotlab_http_request_duration_seconds_count 2\n",
  };
  for (size_t i = 0; text && i < sizeof want / sizeof *want; i++)
    if (!strstr(text, want[i])) {
      fprintf(stderr, "missing: %s", want[i]);
      CHECK(0);
    }
  free(text);
  gw_ledger_free(l);
  gw_fleet_free(f);
  gw_store_free(s);
}

static void append(struct gw_store *s, int64_t job, json_t *ev) {
  int64_t seq = 0;
  CHECK_INT(gw_store_event_append(s, job, ev, &seq), 0);
  json_decref(ev);
}

static void expect(const char *text, const char *const *want, size_t n) {
  for (size_t i = 0; text && i < n; i++)
    if (!strstr(text, want[i])) {
      fprintf(stderr, "missing: %s", want[i]);
      CHECK(0);
    }
}

static char *render_tally(struct gw_store *s, const struct gw_metrics_tally *t) {
  static struct gw_config cfg;
  gw_config_defaults(&cfg);
  struct gw_fleet *f = gw_fleet_new(s, 16);
  struct gw_ledger *l = gw_ledger_new(&cfg, s);
  struct gw_metrics_src src = {.cfg = &cfg, .store = s, .fleet = f, .ledger = l, .tally = t};
  size_t len = 0;
  char *text = gw_metrics_render(&src, &len);
  CHECK(text != NULL);
  gw_ledger_free(l);
  gw_fleet_free(f);
  return text;
}

/* The tally starts from the store's history (a restart keeps recoveries,
 * checkpoint times and steps lost) and counts what the bus says after. */
static void test_tally(void) {
  char path[128], err[256] = "";
  snprintf(path, sizeof path, "%s/tally.db", dir);
  struct gw_store *s = NULL;
  CHECK_INT(gw_store_open(path, &s, err, sizeof err), 0);
  struct gw_job j = {0};
  snprintf(j.user, sizeof j.user, "carol");
  snprintf(j.kind, sizeof j.kind, "train");
  j.spec = json_object();
  CHECK_INT(gw_store_job_create(s, &j), 0);
  j.attempt = 1;
  CHECK_INT(gw_store_attempt_begin(s, &j, 0, 1000), 0);
  CHECK_INT(gw_store_checkpoint_add(s, j.id, 1, 10, "J/10", 100, 1500, 40, 2000), 0);
  CHECK_INT(gw_store_attempt_end(s, j.id, 1, "preempted", 3000), 0);
  /* times in the events are the store's clock: the recovery's length is
   * checked to lie within the test's own run */
  int64_t t0 = sl_time_real_us();
  append(s, j.id, json_pack("{s:s,s:b,s:i}", "event", "preempted", "notice", 1, "steps_lost", 7));
  append(s, j.id, json_pack("{s:s,s:s}", "event", "state", "state", "queued"));
  append(s, j.id, json_pack("{s:s,s:s}", "event", "state", "state", "running"));
  append(s, j.id, json_pack("{s:s,s:s}", "event", "state", "state", "checkpointing"));
  append(s, j.id, json_pack("{s:s,s:s}", "event", "state", "state", "running"));
  /* preempted again, not yet running when the gateway "restarts" */
  append(s, j.id, json_pack("{s:s,s:b,s:i}", "event", "preempted", "notice", 0, "steps_lost", 3));
  char e2[256];
  struct gw_metrics_tally *t = gw_metrics_tally_new(s, e2, sizeof e2);
  CHECK(t != NULL);
  char *text = render_tally(s, t);
  const char *want[] = {
    "spotlab_recoveries_total 1\n", "spotlab_recovery_duration_seconds_count 1\n",
    "spotlab_recovery_duration_seconds_bucket{le=\"2.5\"} 1\n",
    "spotlab_checkpoint_write_seconds_bucket{le=\"1\"} 0\n",
    "spotlab_checkpoint_write_seconds_bucket{le=\"2.5\"} 1\n",
    "spotlab_checkpoint_write_seconds_sum 1.5\n",
    "spotlab_checkpoint_upload_seconds_bucket{le=\"0.1\"} 1\n",
    "spotlab_steps_lost_total 10\n", "spotlab_idle_shutdowns_total 0\n",
    "spotlab_preemptions_total{notice=\"yes\"} 1\n", "spotlab_preemptions_total{notice=\"no\"} 1\n",
    "spotlab_jobs{state=\"queued\"} 1\n",
    "spotlab_budget_alerts_total{scope=\"group\"} 0\n",
  };
  expect(text, want, sizeof want / sizeof *want);
  free(text);

  /* the bus: the pending recovery ends at the next running state; idle
   * shutdowns and budget moments count */
  struct gw_bus bus;
  gw_bus_init(&bus);
  CHECK_INT(gw_bus_subscribe(&bus, GW_METRICS_SINK_KINDS, gw_metrics_sink, t), 0);
  json_t *ev = json_pack("{s:s,s:s,s:I}", "event", "state", "state", "running", "time_us",
                         (json_int_t)(sl_time_real_us() + 5000000));
  gw_bus_emit(&bus, &(struct gw_bus_event){.kind = GW_BUS_JOB_EVENT, .job = &j, .event = ev});
  json_decref(ev);
  ev = json_pack("{s:s,s:I,s:I}", "event", "checkpoint", "write_ms", (json_int_t)20, "upload_ms",
                 (json_int_t)70000);
  gw_bus_emit(&bus, &(struct gw_bus_event){.kind = GW_BUS_JOB_EVENT, .job = &j, .event = ev});
  json_decref(ev);
  gw_bus_emit(&bus, &(struct gw_bus_event){.kind = GW_BUS_IDLE_SHUTDOWN, .instance = "i-1",
                                            .user = "carol", .why = "idle"});
  struct gw_bus_budget b = {.scope = "group", .name = "team", .month = "2026-11",
                            .threshold_pct = 50, .spent_usd = 5, .budget_usd = 10};
  gw_bus_emit(&bus, &(struct gw_bus_event){.kind = GW_BUS_BUDGET, .budget = &b});
  b.cap = true;
  b.scope = "user";
  gw_bus_emit(&bus, &(struct gw_bus_event){.kind = GW_BUS_BUDGET, .budget = &b});
  b.scope = "nonsense"; /* not a scope: not counted */
  gw_bus_emit(&bus, &(struct gw_bus_event){.kind = GW_BUS_BUDGET, .budget = &b});
  ev = json_pack("{s:s,s:b,s:i,s:I}", "event", "preempted", "notice", 1, "steps_lost", 2, "time_us",
                 (json_int_t)sl_time_real_us());
  gw_bus_emit(&bus, &(struct gw_bus_event){.kind = GW_BUS_JOB_EVENT, .job = &j, .event = ev});
  json_decref(ev);
  text = render_tally(s, t);
  const char *want2[] = {
    "spotlab_recoveries_total 2\n", "spotlab_recovery_duration_seconds_bucket{le=\"2.5\"} 1\n",
    "spotlab_recovery_duration_seconds_bucket{le=\"10\"} 2\n",
    "spotlab_checkpoint_upload_seconds_bucket{le=\"60\"} 1\n",
    "spotlab_checkpoint_upload_seconds_bucket{le=\"300\"} 2\n",
    "spotlab_checkpoint_write_seconds_count 2\n", "spotlab_idle_shutdowns_total 1\n",
    "spotlab_budget_alerts_total{scope=\"group\"} 1\n",
    "spotlab_budget_alerts_total{scope=\"user\"} 0\n",
    "spotlab_budget_caps_total{scope=\"user\"} 1\n",
    "spotlab_preemptions_total{notice=\"yes\"} 2\n", "spotlab_steps_lost_total 12\n",
  };
  expect(text, want2, sizeof want2 / sizeof *want2);
  CHECK(sl_time_real_us() - t0 < 2500000); /* the first recovery fit the 2.5 s bucket */
  free(text);
  gw_metrics_tally_free(t);
  gw_job_done(&j);
  gw_store_free(s);
}

/* spotlab_budget_monthly_usd is the gateway's budget in force: the file's
 * until an admin sets one live, then that one, and the ratio follows it. */
static void test_budget_in_force(void) {
  char path[128], err[256] = "";
  snprintf(path, sizeof path, "%s/budget.db", dir);
  struct gw_store *s = NULL;
  CHECK_INT(gw_store_open(path, &s, err, sizeof err), 0);
  static struct gw_config cfg;
  gw_config_defaults(&cfg);
  cfg.monthly_usd = 2000;
  struct gw_job j = {0};
  snprintf(j.user, sizeof j.user, "bob");
  snprintf(j.kind, sizeof j.kind, "run");
  j.spec = json_object();
  CHECK_INT(gw_store_job_create(s, &j), 0);
  j.attempt = 1;
  CHECK_INT(gw_store_attempt_begin(s, &j, 0, 1000), 0);
  CHECK_INT(gw_store_cost_add(s, &j, 1, 2, 60, sl_time_real_us()), 0); /* this month */
  struct gw_fleet *f = gw_fleet_new(s, 16);
  struct gw_ledger *l = gw_ledger_new(&cfg, s);
  struct gw_bus bus = {0};
  struct gw_budget_env env = {.cfg = &cfg, .store = s, .ledger = l, .fleet = f, .bus = &bus};
  struct gw_budget *b = gw_budget_new(&env);
  CHECK(f && l && b);
  struct gw_metrics_src src = {.cfg = &cfg, .store = s, .fleet = f, .ledger = l, .budget = b};
  size_t len = 0;
  char *text = gw_metrics_render(&src, &len);
  static const char *const file[] = {"spotlab_budget_monthly_usd 2000\n",
                                     "spotlab_budget_used_ratio 0.0005"};
  expect(text, file, 2);
  free(text);
  CHECK_INT(gw_budget_set(b, "gateway", "", 4, "root", err, sizeof err), 0);
  text = gw_metrics_render(&src, &len);
  static const char *const live[] = {"spotlab_budget_monthly_usd 4\n",
                                     "spotlab_budget_used_ratio 0.25\n",
                                     "spotlab_budget_scope_usd{scope=\"gateway\",name=\"\"} 4\n"};
  expect(text, live, 3);
  free(text);
  gw_budget_free(b);
  gw_ledger_free(l);
  gw_fleet_free(f);
  gw_job_done(&j);
  gw_store_free(s);
}

int main(void) {
  if (!mkdtemp(dir))
    return 1;
  test_render();
  test_tally();
  test_budget_in_force();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", dir);
  TEST_MAIN_END();
}
