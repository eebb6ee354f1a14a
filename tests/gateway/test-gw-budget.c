/* Budgets: which thresholds a spend has crossed, when a cap holds, the
 * sentence a refusal gives, and that the store records each alert once. */
#include "budget.h"
#include "harness.h"

#include "sl_err.h"
#include "sl_time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_crossed(void) {
  struct gw_budget_level lv = {.budget_usd = 10, .pct = {50, 80, 100}, .n_pct = 3, .hard_cap = true};
  double got[GW_ALERT_MAX];
  CHECK_INT((int)gw_budget_crossed(&lv, 4.99, got), 0);
  CHECK_INT((int)gw_budget_crossed(&lv, 5, got), 1);
  CHECK(got[0] == 50);
  CHECK_INT((int)gw_budget_crossed(&lv, 8.12, got), 2);
  CHECK(got[1] == 80);
  CHECK_INT((int)gw_budget_crossed(&lv, 25, got), 3);
  CHECK(!gw_budget_capped(&lv, 9.99));
  CHECK(gw_budget_capped(&lv, 10));
  lv.hard_cap = false;
  CHECK(!gw_budget_capped(&lv, 100)); /* alerts only */
  lv.budget_usd = 0;                  /* no budget: nothing fires, nothing caps */
  lv.hard_cap = true;
  CHECK_INT((int)gw_budget_crossed(&lv, 100, got), 0);
  CHECK(!gw_budget_capped(&lv, 100));
}

static void test_sentence(void) {
  char buf[128];
  gw_budget_cap_sentence("group", "ml", 10.031, 10, buf, sizeof buf);
  CHECK_STR(buf, "group ml's monthly budget is spent: $10.03 of $10.00");
  gw_budget_cap_sentence("gateway", "", 2000, 2000, buf, sizeof buf);
  CHECK_STR(buf, "the gateway's monthly budget is spent: $2000.00 of $2000.00");
}

static void test_store_once(void) {
  char path[] = "/tmp/test-gw-budget-XXXXXX", db[64], err[256];
  CHECK(mkdtemp(path) != NULL);
  snprintf(db, sizeof db, "%s/state.db", path);
  struct gw_store *s = NULL;
  CHECK_INT(gw_store_open(db, &s, err, sizeof err), 0);
  CHECK_INT(gw_store_budget_fire(s, "2026-11", "group", "ml", "alert", 80, 8.1, 10, 1), 1);
  CHECK_INT(gw_store_budget_fire(s, "2026-11", "group", "ml", "alert", 80, 8.5, 10, 2), 0);
  CHECK_INT(gw_store_budget_fire(s, "2026-12", "group", "ml", "alert", 80, 8.1, 10, 3), 1);
  CHECK_INT(gw_store_budget_fire(s, "2026-11", "group", "ml", "cap", 10, 10.1, 10, 4), 1);
  CHECK_INT(gw_store_budget_fire(s, "2026-11", "group", "ml", "cap", 25, 25.1, 25, 5), 1);
  json_t *rows = NULL;
  CHECK_INT(gw_store_budget_fired(s, "2026-11", &rows), 0);
  CHECK_INT((int)json_array_size(rows), 3);
  json_decref(rows);
  CHECK_INT(gw_store_budget_override_set(s, "group", "ml", 25, "root", 6), 0);
  CHECK_INT(gw_store_budget_override_set(s, "group", "ml", 30, "root", 7), 0);
  CHECK_INT(gw_store_budget_overrides(s, &rows), 0);
  CHECK_INT((int)json_array_size(rows), 1);
  CHECK(json_real_value(json_object_get(json_array_get(rows, 0), "monthly_usd")) == 30);
  json_decref(rows);
  gw_store_free(s);
  unlink(db);
  char wal[80];
  snprintf(wal, sizeof wal, "%s-wal", db);
  unlink(wal);
  snprintf(wal, sizeof wal, "%s-shm", db);
  unlink(wal);
  rmdir(path);
}

/* The gateway's budget in force is the one the keeper refuses at: the
 * file's until an admin sets one live, then that one, also after a
 * restart; no keeper: the file's. */
static void test_in_force(void) {
  char path[] = "/tmp/test-gw-budget-XXXXXX", db[64], err[256];
  CHECK(mkdtemp(path) != NULL);
  snprintf(db, sizeof db, "%s/state.db", path);
  struct gw_store *s = NULL;
  CHECK_INT(gw_store_open(db, &s, err, sizeof err), 0);
  static struct gw_config cfg;
  gw_config_defaults(&cfg);
  cfg.monthly_usd = 2000;
  cfg.hard_cap = true;
  struct gw_job j = {0};
  snprintf(j.user, sizeof j.user, "bob");
  snprintf(j.kind, sizeof j.kind, "run");
  j.spec = json_object();
  CHECK_INT(gw_store_job_create(s, &j), 0);
  j.attempt = 1;
  CHECK_INT(gw_store_attempt_begin(s, &j, 0, 1000), 0);
  CHECK_INT(gw_store_cost_add(s, &j, 0.0004, 0.001, 7, sl_time_real_us()), 0);
  struct gw_ledger *l = gw_ledger_new(&cfg, s);
  struct gw_bus bus = {0};
  struct gw_budget_env env = {.cfg = &cfg, .store = s, .ledger = l, .bus = &bus};
  struct gw_budget *b = gw_budget_new(&env);
  CHECK(l && b);
  char why[200] = "";
  CHECK(gw_budget_gateway_usd(NULL, &cfg) == 2000);
  CHECK(gw_budget_gateway_usd(b, &cfg) == 2000);
  gw_budget_check(b, true);
  CHECK(!gw_budget_refuses(b, "bob", why, sizeof why));
  CHECK_INT(gw_budget_set(b, "user", "bob", 5, "root", err, sizeof err), 0);
  CHECK(gw_budget_gateway_usd(b, &cfg) == 2000); /* another scope's */
  CHECK_INT(gw_budget_set(b, "gateway", "", 0.0001, "root", err, sizeof err), 0);
  CHECK(gw_budget_gateway_usd(b, &cfg) == 0.0001);
  CHECK(gw_budget_refuses(b, "bob", why, sizeof why));
  CHECK_STR(why, "the gateway's monthly budget is spent: $0.0004 of $0.0001");
  b = gw_budget_free(b);
  b = gw_budget_new(&env); /* a restart keeps it */
  CHECK(b && gw_budget_gateway_usd(b, &cfg) == 0.0001);
  CHECK_INT(gw_budget_set(b, "gateway", "", 0, "root", err, sizeof err), 0);
  CHECK(gw_budget_gateway_usd(b, &cfg) == 0); /* none, not the file's */
  CHECK(!gw_budget_refuses(b, "bob", why, sizeof why));
  gw_budget_free(b);
  gw_ledger_free(l);
  gw_job_done(&j);
  gw_store_free(s);
  char cmd[100];
  snprintf(cmd, sizeof cmd, "rm -rf %s", path);
  CHECK_INT(system(cmd), 0);
}

int main(void) {
  test_crossed();
  test_sentence();
  test_store_once();
  test_in_force();
  TEST_MAIN_END();
}
