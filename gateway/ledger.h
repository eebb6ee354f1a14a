/* The cost ledger: what the scheduler reports as accrued cost is written
 * to the store's cost table here, and budgets are read from it. It listens
 * on the bus (GW_BUS_COST); its totals also ask the scheduler what live
 * jobs accrued since their last report (gw_ledger_set_pending). */
#ifndef GW_LEDGER_H
#define GW_LEDGER_H

#include "bus.h"
#include "conf.h"
#include "store.h"

#include <stdbool.h>
#include <stdint.h>

struct gw_ledger;

/* An owned ledger over store (borrowed), or NULL. */
struct gw_ledger *gw_ledger_new(const struct gw_config *cfg, struct gw_store *store);
struct gw_ledger *gw_ledger_free(struct gw_ledger *l);
/* The bus sink (data: the ledger). */
void gw_ledger_sink(void *data, const struct gw_bus_event *ev);
/* What live jobs of user (NULL: everyone) accrued that the cost table does
 * not hold yet (reported every few seconds): added by gw_ledger_totals, so
 * that a total agrees with the live jobs' own costs shown beside it. */
typedef void gw_ledger_pending_fn(void *ctx, const char *user, double *ret_usd, double *ret_on_demand_usd);
void gw_ledger_set_pending(struct gw_ledger *l, gw_ledger_pending_fn *fn, void *ctx);
/* Spend of user (NULL: everyone) since since_us (0: ever), accrued to now. */
int gw_ledger_totals(struct gw_ledger *l, const char *user, int64_t since_us, double *ret_usd,
                     double *ret_on_demand_usd);
/* Both at once, from one look at the live jobs (two calls would see them
 * accrue between): spend of user ever, and this calendar month. */
int gw_ledger_spend(struct gw_ledger *l, const char *user, double *ret_usd, double *ret_on_demand_usd,
                    double *ret_month_usd, double *ret_month_on_demand_usd);
/* The first instant of this calendar month (UTC), µs since the epoch. */
int64_t gw_ledger_month_start_us(void);
/* "YYYY-MM" of real_us (µs since the epoch, UTC) into ret. */
void gw_ledger_month(int64_t real_us, char ret[8]);
#define GW_LEDGER_USERS_MAX 4096
/* This calendar month's spend per user, owned: [{"key": USER, "usd", ...}]
 * (gw_store_cost_by), at most GW_LEDGER_USERS_MAX users. */
int gw_ledger_month_by_user(struct gw_ledger *l, json_t **ret);
/* This calendar month's spend of scope "gateway" (name ignored), "group"
 * (its members') or "user". -EINVAL for another scope. */
int gw_ledger_month_spend(struct gw_ledger *l, const char *scope, const char *name,
                          double *ret_usd);
/* True when [budget] hard_cap holds and this month's spend reached the
 * file's [budget] monthly_usd: only for a gateway without a budget keeper,
 * whose gw_budget_refuses applies the budgets in force (budget.h). */
bool gw_ledger_budget_spent(struct gw_ledger *l);

#endif
