/* The cost ledger (ledger.h). Each GW_BUS_COST event adds one accrual to
 * its job attempt's row of the cost table; totals and the monthly budgets
 * (the gateway's, a group's, a user's) are sums over that table. A group's
 * spend is its members' as the configuration (or the hub) names them now. */
#include "ledger.h"

#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define T "gateway.ledger"

struct gw_ledger {
  const struct gw_config *cfg;
  struct gw_store *store;
  gw_ledger_pending_fn *pending; /* NULL: the table alone */
  void *pending_ctx;
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
  char id[24];
  if (gw_store_cost_add(l->store, ev->job, ev->usd, ev->on_demand_usd, ev->seconds,
                        sl_time_real_us()) < 0)
    sl_err(T, "cannot record the cost of job %s", gw_job_id_str(ev->job->id, id, sizeof id));
}

void gw_ledger_set_pending(struct gw_ledger *l, gw_ledger_pending_fn *fn, void *ctx) {
  l->pending = fn;
  l->pending_ctx = ctx;
}

/* Spend since each of since_us[0..n) into usd[] and od[], with the live jobs'
 * accrual looked at once. */
static int totals(struct gw_ledger *l, const char *user, size_t n, const int64_t *since_us, double *usd,
                  double *od) {
  double pusd = 0, pod = 0;
  if (l->pending) /* first: accruing may write a due report to the table read next */
    l->pending(l->pending_ctx, user, &pusd, &pod);
  for (size_t i = 0; i < n; i++) {
    int r = gw_store_cost_totals(l->store, user, since_us[i], &usd[i], &od[i]);
    if (r < 0)
      return r;
    usd[i] += pusd;
    od[i] += pod;
  }
  return 0;
}

int gw_ledger_totals(struct gw_ledger *l, const char *user, int64_t since_us, double *ret_usd,
                     double *ret_on_demand_usd) {
  return totals(l, user, 1, &since_us, ret_usd, ret_on_demand_usd);
}

int gw_ledger_spend(struct gw_ledger *l, const char *user, double *ret_usd, double *ret_on_demand_usd,
                    double *ret_month_usd, double *ret_month_on_demand_usd) {
  int64_t since[2] = {0, gw_ledger_month_start_us()};
  double usd[2] = {0, 0}, od[2] = {0, 0};
  int r = totals(l, user, 2, since, usd, od);
  *ret_usd = usd[0];
  *ret_on_demand_usd = od[0];
  *ret_month_usd = usd[1];
  *ret_month_on_demand_usd = od[1];
  return r;
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

void gw_ledger_month(int64_t real_us, char ret[8]) {
  time_t t = (time_t)(real_us / SL_US_PER_S);
  struct tm tm;
  gmtime_r(&t, &tm);
  unsigned year = (unsigned)(tm.tm_year + 1900) % 10000u, month = (unsigned)tm.tm_mon % 12u + 1;
  snprintf(ret, 8, "%04u-%02u", year, month);
}

int gw_ledger_month_by_user(struct gw_ledger *l, json_t **ret) {
  return gw_store_cost_by(l->store, GW_COST_BY_USER, NULL, gw_ledger_month_start_us(),
                          GW_LEDGER_USERS_MAX, ret);
}

int gw_ledger_month_spend(struct gw_ledger *l, const char *scope, const char *name,
                          double *ret_usd) {
  double usd = 0, od = 0;
  if (!strcmp(scope, "gateway") || !strcmp(scope, "user")) {
    int r = gw_store_cost_totals(l->store, !strcmp(scope, "user") ? name : NULL,
                                 gw_ledger_month_start_us(), &usd, &od);
    if (r < 0)
      return r;
    *ret_usd = usd;
    return 0;
  }
  if (strcmp(scope, "group"))
    return -EINVAL;
  json_t *rows = NULL;
  int r = gw_ledger_month_by_user(l, &rows);
  if (r < 0)
    return r;
  size_t i;
  json_t *row;
  json_array_foreach(rows, i, row) {
    const char *group = gw_config_user_group(l->cfg, json_string_value(json_object_get(row, "key")));
    if (group && !strcmp(group, name))
      usd += json_number_value(json_object_get(row, "usd"));
  }
  json_decref(rows);
  *ret_usd = usd;
  return 0;
}
