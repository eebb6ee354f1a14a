/* The cost ledger (ledger.h). Each GW_BUS_COST event adds one accrual to
 * its job attempt's row of the cost table; totals and the monthly budget
 * are sums over that table. */
#include "ledger.h"

#include "sl_log.h"
#include "sl_time.h"

#include <stdlib.h>
#include <time.h>

#define T "gateway.ledger"

struct gw_ledger {
  const struct gw_config *cfg;
  struct gw_store *store;
};

struct gw_ledger *gw_ledger_new(const struct gw_config *cfg, struct gw_store *store) {
  struct gw_ledger *l = calloc(1, sizeof *l);
  if (l) {
    l->cfg = cfg;
    l->store = store;
  }
  return l;
}

struct gw_ledger *gw_ledger_free(struct gw_ledger *l) {
  free(l);
  return NULL;
}

void gw_ledger_sink(void *data, const struct gw_bus_event *ev) {
  struct gw_ledger *l = data;
  if (ev->kind != GW_BUS_COST || !ev->job)
    return;
  if (gw_store_cost_add(l->store, ev->job, ev->usd, ev->on_demand_usd, ev->seconds,
                        sl_time_real_us()) < 0)
    sl_err(T, "cannot record the cost of job %lld", (long long)ev->job->id);
}

int gw_ledger_totals(struct gw_ledger *l, const char *user, int64_t since_us, double *ret_usd,
                     double *ret_on_demand_usd) {
  return gw_store_cost_totals(l->store, user, since_us, ret_usd, ret_on_demand_usd);
}

int64_t gw_ledger_month_start_us(void) {
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  tm.tm_mday = 1;
  tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
  return (int64_t)timegm(&tm) * SL_US_PER_S;
}

bool gw_ledger_budget_spent(struct gw_ledger *l) {
  double usd = 0, od = 0;
  if (l->cfg->monthly_usd <= 0 || !l->cfg->hard_cap)
    return false;
  gw_store_cost_totals(l->store, NULL, gw_ledger_month_start_us(), &usd, &od);
  return usd >= l->cfg->monthly_usd;
}
