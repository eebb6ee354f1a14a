/* Monthly budgets (budget.h).
 *
 * Invariants: an alert or a cap is announced only after the store recorded
 * it for that month, scope and name (an INSERT that changed a row), so a
 * restart, or a check that runs twice, never announces it again; a cap is
 * recorded with the budget it reached, so a raised budget that is spent
 * again is announced again. The scopes' spend and cap state are a cache
 * rebuilt by each check; the store and the ledger are the truth. */
#include "budget.h"

#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T "gateway.budget"
#define OVERRIDES_MAX 512
#define CHECK_EVERY_US (60 * SL_US_PER_S) /* a new month begins without any cost */
#define SCOPES_MAX (1 + GW_MAX_GROUPS + GW_MAX_USERS + OVERRIDES_MAX)

/* ---- the pure part ------------------------------------------------------ */

size_t gw_budget_crossed(const struct gw_budget_level *lv, double spent_usd,
                         double ret[GW_ALERT_MAX]) {
  size_t n = 0;
  if (!(lv->budget_usd > 0))
    return 0;
  for (size_t i = 0; i < lv->n_pct && i < GW_ALERT_MAX; i++)
    if (spent_usd >= lv->budget_usd * lv->pct[i] / 100.0)
      ret[n++] = lv->pct[i];
  return n;
}

bool gw_budget_capped(const struct gw_budget_level *lv, double spent_usd) {
  return lv->hard_cap && lv->budget_usd > 0 && spent_usd >= lv->budget_usd;
}

/* "group ml", "user alice", "the gateway" */
static void scope_words(const char *scope, const char *name, char *buf, size_t size) {
  if (!strcmp(scope, "gateway"))
    snprintf(buf, size, "the gateway");
  else
    snprintf(buf, size, "%s %s", scope, name);
}

/* Dollars as people write them: cents, or four decimals under a dollar
 * (a small budget's amounts would all read $0.00). */
static const char *usd(double v, char buf[32]) {
  snprintf(buf, 32, v < 1 && v > -1 ? "$%.4f" : "$%.2f", v);
  return buf;
}

void gw_budget_cap_sentence(const char *scope, const char *name, double spent_usd,
                            double budget_usd, char *buf, size_t size) {
  char who[GW_NAME_MAX + 16], a[32], b[32];
  scope_words(scope, name, who, sizeof who);
  snprintf(buf, size, "%s's monthly budget is spent: %s of %s", who, usd(spent_usd, a),
           usd(budget_usd, b));
}

/* ---- the keeper --------------------------------------------------------- */

struct override {
  char scope[8];
  char name[GW_NAME_MAX];
  double usd;
  char by[GW_NAME_MAX];
  int64_t time_us;
};

struct scope {
  char scope[8];
  char name[GW_NAME_MAX];
  struct gw_budget_level lv;
  const struct override *ov;    /* set live, or NULL */
  double spent_usd;
  bool capped;
};

struct gw_budget {
  struct gw_budget_env env;
  struct override ov[OVERRIDES_MAX];
  size_t n_ov;
  struct scope *scopes;
  size_t n_scopes;
  size_t n_capped;
  char month[8];
  bool dirty;
  int64_t next_check_mono_us;
};

static bool hold(void *data, const struct gw_job *j, char *why, size_t size) {
  return gw_budget_refuses(data, j->user, why, size);
}

static void load_overrides(struct gw_budget *b) {
  json_t *rows = NULL;
  if (gw_store_budget_overrides(b->env.store, &rows) < 0) {
    sl_err(T, "cannot read the budgets set live; the configured ones apply");
    return;
  }
  size_t i;
  json_t *row;
  json_array_foreach(rows, i, row) {
    if (b->n_ov == OVERRIDES_MAX)
      break;
    struct override *o = &b->ov[b->n_ov++];
    snprintf(o->scope, sizeof o->scope, "%s", sl_json_get_str(row, "scope", ""));
    snprintf(o->name, sizeof o->name, "%s", sl_json_get_str(row, "name", ""));
    snprintf(o->by, sizeof o->by, "%s", sl_json_get_str(row, "set_by", ""));
    o->usd = sl_json_get_num(row, "monthly_usd", 0);
    o->time_us = sl_json_get_int(row, "time_us", 0);
  }
  json_decref(rows);
}

struct gw_budget *gw_budget_new(const struct gw_budget_env *env) {
  struct gw_budget *b = calloc(1, sizeof *b);
  if (!b)
    return NULL;
  b->env = *env;
  b->scopes = calloc(SCOPES_MAX, sizeof *b->scopes);
  if (!b->scopes)
    return gw_budget_free(b);
  load_overrides(b);
  b->dirty = true;
  if (env->sched)
    gw_sched_set_hold(env->sched, hold, b);
  return b;
}

struct gw_budget *gw_budget_free(struct gw_budget *b) {
  if (!b)
    return NULL;
  if (b->env.sched)
    gw_sched_set_hold(b->env.sched, NULL, NULL);
  free(b->scopes);
  free(b);
  return NULL;
}

void gw_budget_sink(void *data, const struct gw_bus_event *ev) {
  struct gw_budget *b = data;
  if (ev->kind == GW_BUS_COST)
    b->dirty = true; /* checked from the loop: a sink must not stop jobs under the scheduler */
}

static const struct override *find_override(const struct gw_budget *b, const char *scope,
                                            const char *name) {
  for (size_t i = 0; i < b->n_ov; i++)
    if (!strcmp(b->ov[i].scope, scope) && !strcmp(b->ov[i].name, name))
      return &b->ov[i];
  return NULL;
}

static struct scope *find_scope(struct gw_budget *b, const char *scope, const char *name) {
  for (size_t i = 0; i < b->n_scopes; i++)
    if (!strcmp(b->scopes[i].scope, scope) && !strcmp(b->scopes[i].name, name))
      return &b->scopes[i];
  return NULL;
}

/* A level from a section's values; alert_at "" and hard_cap "" take the
 * gateway's ([budget]). */
static void level(const struct gw_config *cfg, double usd, const char *alert_at,
                  const char *hard_cap, struct gw_budget_level *ret) {
  memset(ret, 0, sizeof *ret);
  ret->budget_usd = usd;
  int n = gw_config_parse_alert_at(alert_at && *alert_at ? alert_at : cfg->alert_at, ret->pct, NULL, 0);
  ret->n_pct = n > 0 ? (size_t)n : 0;
  ret->hard_cap = hard_cap && *hard_cap ? !strcmp(hard_cap, "yes") : cfg->hard_cap;
}

static void add_scope(struct gw_budget *b, const char *scope, const char *name, double usd,
                      const char *alert_at, const char *hard_cap) {
  if (b->n_scopes == SCOPES_MAX || find_scope(b, scope, name))
    return;
  const struct override *ov = find_override(b, scope, name);
  if (!ov && !(usd > 0))
    return; /* no budget at this level */
  struct scope *s = &b->scopes[b->n_scopes++];
  memset(s, 0, sizeof *s);
  snprintf(s->scope, sizeof s->scope, "%s", scope);
  snprintf(s->name, sizeof s->name, "%s", name);
  level(b->env.cfg, ov ? ov->usd : usd, alert_at, hard_cap, &s->lv);
  s->ov = ov;
}

/* Every scope with a budget, from the configuration and the live limits. */
static void build_scopes(struct gw_budget *b) {
  const struct gw_config *cfg = b->env.cfg;
  b->n_scopes = 0;
  add_scope(b, "gateway", "", cfg->monthly_usd, cfg->alert_at, cfg->hard_cap ? "yes" : "no");
  for (size_t i = 0; i < cfg->n_groups; i++)
    add_scope(b, "group", cfg->groups[i].name, cfg->groups[i].monthly_usd,
              cfg->groups[i].alert_at, cfg->groups[i].hard_cap);
  for (size_t i = 0; i < cfg->n_users; i++)
    add_scope(b, "user", cfg->users[i].name, cfg->users[i].monthly_usd, cfg->users[i].alert_at,
              cfg->users[i].hard_cap);
  for (size_t i = 0; i < b->n_ov; i++) /* a hub's group or user the file does not name */
    add_scope(b, b->ov[i].scope, b->ov[i].name, 0, NULL, NULL);
}

/* The notice and the bus event of a moment of s. */
static void announce(struct gw_budget *b, const struct scope *s, double pct, bool cap) {
  char who[GW_NAME_MAX + 16], text[600];
  scope_words(s->scope, s->name, who, sizeof who);
  if (cap) {
    char sentence[300];
    gw_budget_cap_sentence(s->scope, s->name, s->spent_usd, s->lv.budget_usd, sentence,
                           sizeof sentence);
    snprintf(text, sizeof text, "Budget cap: %s; running jobs are checkpointed and paused, and new"
             " jobs refused, until an admin raises it or the month ends", sentence);
  } else {
    char a[32], b2[32];
    snprintf(text, sizeof text, "Budget alert: %s has spent %s of its %s monthly budget (%g%%)",
             who, usd(s->spent_usd, a), usd(s->lv.budget_usd, b2), pct);
  }
  sl_info(T, "%s", text);
  struct gw_bus_budget bb = {.scope = s->scope, .name = s->name, .month = b->month,
                             .threshold_pct = pct, .spent_usd = s->spent_usd,
                             .budget_usd = s->lv.budget_usd, .cap = cap};
  gw_bus_emit(b->env.bus, &(struct gw_bus_event){.kind = GW_BUS_BUDGET, .budget = &bb});
  json_t *m = json_pack("{s:s,s:s,s:I,s:s,s:s,s:s,s:o,s:o,s:o,s:b,s:s}", "type", "notice", "event",
                        "budget", "time_us", (json_int_t)sl_time_real_us(), "scope", s->scope,
                        "name", s->name, "month", b->month, "threshold_pct", sl_json_real(pct),
                        "spent_usd", sl_json_real(s->spent_usd), "budget_usd",
                        sl_json_real(s->lv.budget_usd), "cap", cap, "text", text);
  /* no user: every connected session the scope covers (the kernel protocol
   * fans it out by the notice's scope and name) */
  if (m)
    gw_bus_emit(b->env.bus, &(struct gw_bus_event){.kind = GW_BUS_NOTICE, .msg = m});
  json_decref(m);
}

/* Alerts and the cap of s, each once a month. False when the store could
 * not record one (tried again at the next check). */
static bool fire(struct gw_budget *b, const struct scope *s) {
  double crossed[GW_ALERT_MAX];
  size_t n = gw_budget_crossed(&s->lv, s->spent_usd, crossed);
  int64_t now = sl_time_real_us();
  bool ok = true;
  for (size_t i = 0; i < n; i++) {
    int r = gw_store_budget_fire(b->env.store, b->month, s->scope, s->name, "alert", crossed[i],
                                 s->spent_usd, s->lv.budget_usd, now);
    if (r == 1)
      announce(b, s, crossed[i], false);
    ok &= r >= 0;
  }
  if (s->capped) {
    int r = gw_store_budget_fire(b->env.store, b->month, s->scope, s->name, "cap",
                                 s->lv.budget_usd, s->spent_usd, s->lv.budget_usd, now);
    if (r == 1)
      announce(b, s, 100.0 * s->spent_usd / s->lv.budget_usd, true);
    ok &= r >= 0;
  }
  return ok;
}

void gw_budget_check(struct gw_budget *b, bool force) {
  int64_t mono = sl_time_mono_us();
  char month[8];
  gw_ledger_month(sl_time_real_us(), month);
  if (strcmp(month, b->month))
    force = true; /* a new month: nothing spent, every cap released */
  if (!force && !b->dirty && mono < b->next_check_mono_us)
    return;
  memcpy(b->month, month, sizeof month);
  b->dirty = false;
  b->next_check_mono_us = mono + CHECK_EVERY_US;
  size_t was_capped = b->n_capped;
  build_scopes(b);
  b->n_capped = 0;
  for (size_t i = 0; i < b->n_scopes; i++) {
    struct scope *s = &b->scopes[i];
    if (gw_ledger_month_spend(b->env.ledger, s->scope, s->name, &s->spent_usd) < 0) {
      b->dirty = true;
      continue;
    }
    s->capped = gw_budget_capped(&s->lv, s->spent_usd);
    b->n_capped += s->capped;
    if (!fire(b, s))
      b->dirty = true;
  }
  if (b->n_capped && b->env.fleet && b->env.sched) {
    for (size_t i = 0; i < gw_fleet_n_jobs(b->env.fleet); i++) {
      struct gw_job *j = gw_fleet_job_at(b->env.fleet, i);
      char why[200];
      if (gw_budget_refuses(b, j->user, why, sizeof why))
        gw_sched_pause(b->env.sched, j, why);
    }
  }
  if (b->n_capped < was_capped && b->env.sched)
    gw_sched_kick(b->env.sched); /* paused jobs may go on */
}

double gw_budget_gateway_usd(const struct gw_budget *b, const struct gw_config *cfg) {
  const struct override *ov = b ? find_override(b, "gateway", "") : NULL;
  return ov ? ov->usd : cfg->monthly_usd; /* as add_scope gives the "gateway" scope its level */
}

bool gw_budget_refuses(struct gw_budget *b, const char *user, char *why, size_t size) {
  if (!b->n_capped)
    return false;
  const char *group = gw_config_user_group(b->env.cfg, user);
  for (size_t i = 0; i < b->n_scopes; i++) {
    const struct scope *s = &b->scopes[i];
    if (!s->capped)
      continue;
    if (!strcmp(s->scope, "gateway") || (!strcmp(s->scope, "user") && !strcmp(s->name, user)) ||
        (!strcmp(s->scope, "group") && group && !strcmp(s->name, group))) {
      gw_budget_cap_sentence(s->scope, s->name, s->spent_usd, s->lv.budget_usd, why, size);
      return true;
    }
  }
  return false;
}

int gw_budget_set(struct gw_budget *b, const char *scope, const char *name, double monthly_usd,
                  const char *by, char *err, size_t err_size) {
  name = name ? name : "";
  if (!scope || (strcmp(scope, "gateway") && strcmp(scope, "group") && strcmp(scope, "user")))
    return snprintf(err, err_size, "the scope must be gateway, group or user"), -EINVAL;
  if (!strcmp(scope, "gateway") ? *name != 0 : !gw_config_valid_name(name))
    return snprintf(err, err_size, "%s", !strcmp(scope, "gateway")
                                             ? "the gateway's budget takes no name"
                                             : "a name is letters, digits, '_', '.' and '-'"),
           -EINVAL;
  if (!isfinite(monthly_usd) || monthly_usd < 0 || monthly_usd > 1e9)
    return snprintf(err, err_size, "monthly_usd must be a number from 0 to 1e9"), -EINVAL;
  if (monthly_usd == 0)
    monthly_usd = 0; /* -0.0 shown as such would read as a refund */
  struct override *o = (struct override *)find_override(b, scope, name);
  if (!o && b->n_ov == OVERRIDES_MAX)
    return snprintf(err, err_size, "at most %d budgets can be set live", OVERRIDES_MAX), SL_ELIMIT;
  int64_t now = sl_time_real_us();
  int r = gw_store_budget_override_set(b->env.store, scope, name, monthly_usd, by, now);
  if (r < 0)
    return snprintf(err, err_size, "the state database refused the budget: %s", sl_strerror(r)), r;
  if (!o) {
    o = &b->ov[b->n_ov++];
    snprintf(o->scope, sizeof o->scope, "%s", scope);
    snprintf(o->name, sizeof o->name, "%s", name);
  }
  o->usd = monthly_usd;
  o->time_us = now;
  snprintf(o->by, sizeof o->by, "%s", by ? by : "");
  /* cents, unless that would say $0.00 of a budget that is not 0 */
  sl_info(T, "%s set the monthly budget of %s%s%s to $%.*f", by ? by : "?", scope, *name ? " " : "",
          name, monthly_usd > 0 && monthly_usd < 0.005 ? 6 : 2, monthly_usd);
  gw_budget_check(b, true);
  return 0;
}

void gw_budget_note(struct gw_budget *b, const char *scope, const char *name, json_t *reply) {
  char note[256] = "";
  const struct gw_config *cfg = b->env.cfg;
  if (scope && !strcmp(scope, "group")) {
    for (size_t i = 0; i < cfg->n_groups; i++)
      if (!strcmp(cfg->groups[i].name, name))
        return;
    snprintf(note, sizeof note,
             "no [group.%s] section of the configuration defines this group: its budget applies to no one"
             " until one does", name);
  } else if (scope && !strcmp(scope, "user")) {
    if (gw_config_user(cfg, name) || gw_store_user_known(b->env.store, name) != 0)
      return; /* known, or the store cannot tell: nothing to say */
    snprintf(note, sizeof note,
             "no job or session of user %s is on record: check the name (the budget applies once they"
             " use this gateway)", name);
  }
  if (note[0] && reply)
    json_object_set_new(reply, "note", json_string(note));
}

static json_t *scope_json(const struct scope *s, const json_t *fired) {
  json_t *alerts = json_array(), *pct = json_array();
  bool cap_fired = false;
  size_t i;
  json_t *f;
  json_array_foreach(fired, i, f) {
    if (strcmp(sl_json_get_str(f, "scope", ""), s->scope) || strcmp(sl_json_get_str(f, "name", ""), s->name))
      continue;
    if (!strcmp(sl_json_get_str(f, "kind", ""), "alert"))
      json_array_append_new(alerts, sl_json_real(sl_json_get_num(f, "threshold_pct", 0)));
    else
      cap_fired = true;
  }
  for (size_t k = 0; k < s->lv.n_pct; k++)
    json_array_append_new(pct, sl_json_real(s->lv.pct[k]));
  json_t *o = json_pack("{s:s,s:s,s:o,s:o,s:o,s:o,s:o,s:b,s:b,s:b}", "scope", s->scope, "name",
                        s->name, "budget_usd", sl_json_real(s->lv.budget_usd), "spent_usd",
                        sl_json_real(s->spent_usd), "ratio",
                        sl_json_real(s->lv.budget_usd > 0 ? s->spent_usd / s->lv.budget_usd : 0),
                        "alert_at", pct, "fired", alerts, "hard_cap", s->lv.hard_cap, "capped",
                        s->capped, "cap_fired", cap_fired);
  if (o && s->ov)
    json_object_set_new(o, "override", json_pack("{s:s,s:I}", "set_by", s->ov->by, "time_us",
                                                 (json_int_t)s->ov->time_us));
  return o;
}

/* Whether s is named v (compared char by char within the name's size: a
 * strcmp here reads to gcc's -O2 sanitizer build as a possible overread). */
static bool is_name(const struct scope *s, const char *v) {
  for (size_t i = 0; i < sizeof s->name; i++) {
    if (s->name[i] != v[i])
      return false;
    if (!v[i])
      return true;
  }
  return false;
}

json_t *gw_budget_json(struct gw_budget *b, const char *user) {
  gw_budget_check(b, false);
  json_t *fired = NULL;
  if (gw_store_budget_fired(b->env.store, b->month, &fired) < 0)
    fired = json_array();
  const char *group = user ? gw_config_user_group(b->env.cfg, user) : NULL;
  json_t *arr = json_array();
  for (size_t i = 0; i < b->n_scopes; i++) {
    const struct scope *s = &b->scopes[i];
    if (user && strcmp(s->scope, "gateway") &&
        !(!strcmp(s->scope, "user") && is_name(s, user)) &&
        !(!strcmp(s->scope, "group") && group && is_name(s, group)))
      continue;
    json_array_append_new(arr, scope_json(s, fired));
  }
  json_decref(fired);
  return json_pack("{s:s,s:o}", "month", b->month, "budgets", arr);
}
