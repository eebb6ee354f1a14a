/* Monthly budgets: the gateway's ([budget]), a group's and a user's
 * ([group.NAME], [user.NAME] monthly_usd), each with its alert_at
 * percentages and hard_cap, and the monthly_usd an admin set live (kept in
 * the store, shown as such).
 *
 * gw_budget_check reads this calendar month's (UTC) spend of each scope
 * from the ledger: each threshold crossed fires once a month per scope (the
 * store remembers it across restarts) as a GW_BUS_BUDGET event and a
 * notice to the notebooks of the users under it; a hard-capped scope whose
 * spend reached its budget refuses new jobs of its users, pauses their
 * running ones at a final checkpoint and holds their queued ones, until
 * the budget is raised or the month ends. */
#ifndef GW_BUDGET_H
#define GW_BUDGET_H

#include "bus.h"
#include "conf.h"
#include "fleet.h"
#include "ledger.h"
#include "scheduler.h"
#include "store.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* One budget as it applies this month (pure data). */
struct gw_budget_level {
  double budget_usd;            /* 0: none */
  double pct[GW_ALERT_MAX];     /* ascending */
  size_t n_pct;
  bool hard_cap;
};

/* The thresholds of lv that spent_usd has reached, into ret (ascending):
 * their number. None without a budget. */
size_t gw_budget_crossed(const struct gw_budget_level *lv, double spent_usd,
                         double ret[GW_ALERT_MAX]);
/* Whether lv is a hard cap that spent_usd has reached. */
bool gw_budget_capped(const struct gw_budget_level *lv, double spent_usd);
/* "group ml's monthly budget is spent: $10.03 of $10.00" into buf. */
void gw_budget_cap_sentence(const char *scope, const char *name, double spent_usd,
                            double budget_usd, char *buf, size_t size);

struct gw_budget_env {
  const struct gw_config *cfg;
  struct gw_store *store;
  struct gw_ledger *ledger;
  struct gw_fleet *fleet;
  struct gw_sched *sched;
  const struct gw_bus *bus;
};

struct gw_budget;

/* An owned budget keeper (env borrowed for its life) with the limits set
 * live loaded from the store, or NULL. It registers itself as the
 * scheduler's hold. */
struct gw_budget *gw_budget_new(const struct gw_budget_env *env);
struct gw_budget *gw_budget_free(struct gw_budget *b);
/* The bus sink (GW_BUS_COST; data: the budget keeper): a check is due. */
void gw_budget_sink(void *data, const struct gw_bus_event *ev);
/* Checks every budget when spend changed, a limit changed, or a minute
 * passed: alerts, caps, pauses, and releases (from the loop). */
void gw_budget_check(struct gw_budget *b, bool force);
/* The gateway's monthly budget in force: the amount an admin set live,
 * else cfg's [budget] monthly_usd (0: none); b NULL (no keeper): the
 * file's. What status, /api/status, /api/cost and /metrics show, and
 * what the keeper refuses at (with [budget] hard_cap). */
double gw_budget_gateway_usd(const struct gw_budget *b, const struct gw_config *cfg);
/* Whether user may not start work now: true with a sentence in why. */
bool gw_budget_refuses(struct gw_budget *b, const char *user, char *why, size_t size);
/* Sets the monthly budget of scope ("gateway", "group", "user") and name
 * ("" for the gateway) live, for by (an admin): 0, or an error with a
 * sentence in err (an unknown scope, a malformed name, an amount out of
 * [0, 1e9], the store refusing). */
int gw_budget_set(struct gw_budget *b, const char *scope, const char *name, double monthly_usd,
                  const char *by, char *err, size_t err_size);
/* After a set, on its reply (a gw_budget_json): "note", a sentence, when the
 * budget of scope and name applies to no one yet (a group no [group.NAME]
 * section of the file defines, a user with nothing on record). A hub's
 * users and groups come later, so such a budget is kept, with this said. */
void gw_budget_note(struct gw_budget *b, const char *scope, const char *name, json_t *reply);
/* Every budget user sees (NULL: every one, for an admin), owned:
 * {"month", "budgets": [{"scope","name","budget_usd","spent_usd","ratio",
 * "alert_at","fired","hard_cap","capped","override"?}]}. */
json_t *gw_budget_json(struct gw_budget *b, const char *user);

#endif
