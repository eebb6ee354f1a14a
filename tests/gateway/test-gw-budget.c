/* Budgets: which thresholds a spend has crossed, when a cap holds, the
 * sentence a refusal gives, and that the store records each alert once. */
#include "budget.h"
#include "harness.h"

#include "sl_err.h"

#include <stdio.h>
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

int main(void) {
  test_crossed();
  test_sentence();
  test_store_once();
  TEST_MAIN_END();
}
