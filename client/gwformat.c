/* Plain-text renderings of gateway replies (gwformat.h).
 *
 * The gateway's replies may grow fields; these renderings show the fields
 * protocols.md names in fixed columns and any other scalar fields as
 * key=value, so nothing new is hidden and nothing missing is invented.
 * Every string from the wire is cut to a column width or a line bound. */
#include "gwformat.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "display.h"
#include "sl_file.h"
#include "sl_json.h"
#include "sl_time.h"
#include "textbuf.h"

#define MAX_ROWS 1000

/* The text made, with whatever the gateway sent in it made safe for a
 * terminal and a JSON string (jk_text_clean: no escape sequences, whole
 * characters where a column's width cut one). */
static char *finish(struct jk_dbuf *b) { return jk_text_clean(jk_dbuf_done(b), false); }

static const char *str_or_dash(const json_t *o, const char *key) {
  const char *s = json_string_value(json_object_get(o, key));
  return s && *s ? s : "-";
}

static void money(char *buf, size_t size, const json_t *o, const char *key) {
  const json_t *v = json_object_get(o, key);
  if (json_is_number(v) && isfinite(json_number_value(v)))
    snprintf(buf, size, "$%.4f", json_number_value(v));
  else
    snprintf(buf, size, "-");
}

/* Scalars of o other than those in skip, as " key=value". */
static void extras(struct jk_dbuf *b, const json_t *o, const char *const *skip) {
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)o, key, v) {
    bool skipped = false;
    for (size_t i = 0; skip && skip[i]; i++)
      skipped |= strcmp(skip[i], key) == 0;
    if (skipped || json_is_object(v) || json_is_array(v))
      continue;
    if (json_is_string(v))
      jk_dbuf_printf(b, " %.40s=%.80s", key, json_string_value(v));
    else if (json_is_integer(v))
      jk_dbuf_printf(b, " %.40s=%lld", key, (long long)json_integer_value(v));
    else if (json_is_real(v))
      jk_dbuf_printf(b, " %.40s=%g", key, json_real_value(v));
    else if (json_is_boolean(v))
      jk_dbuf_printf(b, " %.40s=%s", key, json_is_true(v) ? "yes" : "no");
  }
}

/* Whether job summary j belongs to session (NULL: every session). */
static bool of_session(const json_t *j, const char *session) {
  return !session || strcmp(sl_json_get_str(j, "session", ""), session) == 0;
}

char *jk_format_jobs(const json_t *reply) { return jk_format_jobs_of(reply, NULL); }

char *jk_format_jobs_of(const json_t *reply, const char *session) {
  struct jk_dbuf b = {0};
  const json_t *jobs = json_object_get(reply, "jobs");
  size_t i, shown = 0;
  json_t *j;
  json_array_foreach(jobs, i, j)
    shown += of_session(j, session);
  if (!shown) {
    jk_dbuf_printf(&b, session ? "No jobs in this notebook session (%%jobs --all lists all of yours).\n"
                               : "No jobs.\n");
    return finish(&b);
  }
  jk_dbuf_printf(&b, "%-8s  %-13s %-6s %-10s %-10s %-15s %-14s %s\n", "JOB", "STATE", "KIND", "MODEL",
                 "DATA", "STEP", "INSTANCE", "COST");
  json_array_foreach(jobs, i, j) {
    if (!of_session(j, session))
      continue;
    if (i >= MAX_ROWS) {
      jk_dbuf_printf(&b, "... %zu more\n", json_array_size(jobs) - i);
      break;
    }
    char step[40], cost[32];
    long long st = (long long)sl_json_get_int(j, "step", 0), steps = (long long)sl_json_get_int(j, "steps", 0);
    if (!strcmp(sl_json_get_str(j, "kind", ""), "run") && steps <= 0 && st <= 0)
      snprintf(step, sizeof step, "-"); /* a script's job has no steps */
    else if (steps > 0)
      snprintf(step, sizeof step, "%lld/%lld", st, steps);
    else
      snprintf(step, sizeof step, "%lld", st);
    money(cost, sizeof cost, j, "cost_usd");
    jk_dbuf_printf(&b, "%-8.8s  %-13.13s %-6.6s %-10.10s %-10.10s %-15.15s %-14.14s %s\n", str_or_dash(j, "job"),
                   str_or_dash(j, "state"), str_or_dash(j, "kind"), str_or_dash(j, "model"),
                   str_or_dash(j, "data"), step, str_or_dash(j, "instance_type"), cost);
  }
  return finish(&b);
}

/* "12 s ago", "3 min ago", "2 h ago", "4 days ago" for a wall-clock time. */
static void ago(char *buf, size_t size, int64_t real_us) {
  if (real_us <= 0) {
    snprintf(buf, size, "-");
    return;
  }
  int64_t s = (sl_time_real_us() - real_us) / SL_US_PER_S; /* both > 0: no overflow */
  if (s < 60)
    snprintf(buf, size, "%lld s ago", (long long)(s < 0 ? 0 : s));
  else if (s < 3600)
    snprintf(buf, size, "%lld min ago", (long long)(s / 60));
  else if (s < 48 * 3600)
    snprintf(buf, size, "%lld h %02lld min ago", (long long)(s / 3600), (long long)(s % 3600 / 60));
  else
    snprintf(buf, size, "%lld days ago", (long long)(s / 86400));
}

/* "30 min", "1 h 30 min", "45 s" for a length in seconds. */
static void span(char *buf, size_t size, double s) {
  if (!isfinite(s) || s < 0)
    snprintf(buf, size, "-");
  else if (s < 120)
    snprintf(buf, size, "%.0f s", s);
  else if (s < 7200)
    snprintf(buf, size, "%.0f min", s / 60);
  else
    snprintf(buf, size, "%.0f h %02.0f min", floor(s / 3600), fmod(s, 3600) / 60);
}

#define LABEL "%-10s"

/* Scalars of o not in known, on one labelled line, so a field the gateway
 * adds later is still shown; times (_us) read as "ago". */
static void more(struct jk_dbuf *b, const char *label, const json_t *o, const char *const *known) {
  struct jk_dbuf line = {0};
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)o, key, v) {
    bool skip = json_is_object(v) || json_is_array(v);
    for (size_t i = 0; known[i] && !skip; i++)
      skip = strcmp(known[i], key) == 0;
    if (skip)
      continue;
    size_t n = strlen(key);
    if (json_is_integer(v) && n > 3 && strcmp(key + n - 3, "_us") == 0) {
      char t[48];
      ago(t, sizeof t, json_integer_value(v));
      jk_dbuf_printf(&line, "%s%.*s %s", line.len ? ", " : "", (int)(n - 3 > 40 ? 40 : n - 3), key, t);
      continue;
    }
    struct jk_dbuf one = {0};
    json_t *single = json_pack("{s:O}", key, v);
    extras(&one, single, NULL);
    json_decref(single);
    char *t = jk_dbuf_done(&one);
    if (t && *t) /* " key=value"; nothing for a null */
      jk_dbuf_printf(&line, "%s%s", line.len ? ", " : "", t + 1);
    free(t);
  }
  char *t = jk_dbuf_done(&line);
  if (t && *t)
    jk_dbuf_printf(b, LABEL " %s\n", label, t);
  free(t);
}

static void status_gateway(struct jk_dbuf *b, const json_t *g) {
  if (!json_is_object(g))
    return;
  char up[48];
  ago(up, sizeof up, sl_json_get_int(g, "started_us", 0));
  jk_dbuf_printf(b, LABEL " version %.40s, pid %lld, started %s\n", "gateway", str_or_dash(g, "version"),
                 (long long)sl_json_get_int(g, "pid", 0), up);
  jk_dbuf_printf(b, LABEL " %.200s%s, provider %.100s, workers at %.200s\n", "", str_or_dash(g, "listen"),
                 sl_json_get_bool(g, "embedded", false) ? " (this user's own gateway)" : "",
                 str_or_dash(g, "provider"), str_or_dash(g, "workers"));
  jk_dbuf_printf(b, LABEL " %lld running, %lld queued\n", "jobs", (long long)sl_json_get_int(g, "live_jobs", 0),
                 (long long)sl_json_get_int(g, "queued", 0));
  static const char *const known[] = {"version", "pid", "started_us", "listen", "embedded", "provider",
                                      "workers", "live_jobs", "queued", "state_dir", NULL};
  more(b, "", g, known);
}

static void status_worker(struct jk_dbuf *b, const json_t *w) {
  char price[32], since[48];
  money(price, sizeof price, w, "price_usd_per_hour");
  ago(since, sizeof since, sl_json_get_int(w, "launched_us", 0));
  const char *job = str_or_dash(w, "job");
  jk_dbuf_printf(b, "  %-20.40s %.48s in %.48s, %s %s/h, %.24s%s%s, launched %s\n", str_or_dash(w, "instance"),
                 str_or_dash(w, "type"), str_or_dash(w, "zone"),
                 sl_json_get_bool(w, "spot", false) ? "spot" : "on-demand", price, str_or_dash(w, "state"),
                 strcmp(job, "-") ? " with " : "", strcmp(job, "-") ? job : "", since);
  static const char *const known[] = {"instance", "type", "zone", "spot", "price_usd_per_hour",
                                      "on_demand_usd_per_hour", "state", "job", "registered",
                                      "launched_us", "gpu_warning", "at_risk", NULL};
  more(b, "", w, known);
  if (sl_json_get_bool(w, "at_risk", false))
    jk_dbuf_printf(b, "    at risk: a rebalance recommendation came; it gets no new job\n");
  /* the worker's GPUs disagree with its type: a line of its own, whole */
  const char *warning = json_string_value(json_object_get(w, "gpu_warning"));
  if (warning && *warning)
    jk_dbuf_printf(b, "    warning: %.400s\n", warning);
}

static void status_idle(struct jk_dbuf *b, const json_t *idle) {
  if (!json_is_object(idle))
    return;
  char nb[32], wk[32], warn[32];
  span(nb, sizeof nb, sl_json_get_num(idle, "notebook_timeout_s", -1));
  span(wk, sizeof wk, sl_json_get_num(idle, "worker_timeout_s", -1));
  span(warn, sizeof warn, sl_json_get_num(idle, "warn_before_s", -1));
  jk_dbuf_printf(b, LABEL " a notebook idle for %s stops its workers (warned %s before);"
                    " a worker with no job stops after %s\n", "idle", nb, warn, wk);
  static const char *const known[] = {"notebook_timeout_s", "worker_timeout_s", "warn_before_s", NULL};
  more(b, "", idle, known);
}

static void status_budget(struct jk_dbuf *b, const json_t *budget) {
  if (!json_is_object(budget))
    return;
  char spent[32], cap[32];
  money(spent, sizeof spent, budget, "spent_usd");
  double monthly = sl_json_get_num(budget, "monthly_usd", 0);
  if (monthly > 0) {
    money(cap, sizeof cap, budget, "monthly_usd");
    jk_dbuf_printf(b, LABEL " %s spent this month of %s%s\n", "budget", spent, cap,
                   sl_json_get_bool(budget, "hard_cap", false) ? " (hard cap: jobs stop there)" : "");
  } else {
    jk_dbuf_printf(b, LABEL " %s spent this month (no monthly budget set)\n", "budget", spent);
  }
  static const char *const known[] = {"spent_usd", "monthly_usd", "hard_cap", NULL};
  more(b, "", budget, known);
}

char *jk_format_status(const json_t *reply) {
  struct jk_dbuf b = {0};
  status_gateway(&b, json_object_get(reply, "gateway"));
  const json_t *workers = json_object_get(reply, "workers");
  jk_dbuf_printf(&b, LABEL " %zu%s\n", "workers", json_array_size(workers), json_array_size(workers) ? ":" : "");
  size_t i;
  json_t *w;
  json_array_foreach(workers, i, w) {
    if (i >= MAX_ROWS)
      break;
    status_worker(&b, w);
  }
  status_idle(&b, json_object_get(reply, "idle"));
  status_budget(&b, json_object_get(reply, "budget"));
  /* the state disk is full (or failing): new work is refused until it recovers */
  const json_t *store = json_object_get(reply, "store");
  if (json_is_false(json_object_get(store, "ok")))
    jk_dbuf_printf(&b, "store: %s (%.200s): new work is refused; %lld writes kept in memory\n",
                   str_or_dash(store, "error"), str_or_dash(store, "message"),
                   (long long)sl_json_get_int(store, "kept_writes", 0));
  return finish(&b);
}

char *jk_format_session_deleted(const json_t *reply) {
  struct jk_dbuf b = {0};
  long long n = (long long)sl_json_get_int(reply, "jobs_purged", 0);
  if (!n)
    jk_dbuf_printf(&b, "session \"%s\" deleted: its names and models\n", sl_json_get_str(reply, "deleted", "?"));
  else
    jk_dbuf_printf(&b, "session \"%s\" deleted: its names and models, and the checkpoints of its %lld job%s;"
                       " their costs and records are kept as \"%s\"\n",
                   sl_json_get_str(reply, "deleted", "?"), n, n == 1 ? "" : "s",
                   sl_json_get_str(reply, "jobs_kept_as", "?"));
  return finish(&b);
}

char *jk_format_sessions(const json_t *reply, const char *current) {
  struct jk_dbuf b = {0};
  const json_t *list = json_object_get(reply, "sessions");
  if (!json_array_size(list)) {
    jk_dbuf_printf(&b, "No notebook session of yours holds anything yet.\n");
    return finish(&b);
  }
  jk_dbuf_printf(&b, "  %-40s %-18s %6s %6s %5s\n", "SESSION", "LAST ACTIVE", "NAMES", "MODELS", "JOBS");
  size_t i;
  json_t *e;
  bool marked = false;
  json_array_foreach(list, i, e) {
    if (i >= MAX_ROWS) {
      jk_dbuf_printf(&b, "... %zu more\n", json_array_size(list) - i);
      break;
    }
    char when[40];
    const char *name = sl_json_get_str(e, "name", "?");
    bool mine = current && !strcmp(name, current);
    marked |= mine;
    ago(when, sizeof when, sl_json_get_int(e, "last_active_us", 0));
    jk_dbuf_printf(&b, "%c %-40s %-18s %6lld %6lld %5lld\n", mine ? '*' : ' ', name,
                   when, (long long)(sl_json_get_int(e, "vars", 0) + sl_json_get_int(e, "defs", 0)),
                   (long long)sl_json_get_int(e, "models", 0), (long long)sl_json_get_int(e, "jobs", 0));
  }
  if (marked)
    jk_dbuf_printf(&b, "(* this notebook's; %%session NAME opens another, and brings this one's names along)\n");
  else if (current)
    jk_dbuf_printf(&b, "(this notebook's, \"%s\", holds nothing yet; %%session NAME opens another)\n", current);
  return finish(&b);
}

char *jk_format_uploads(const json_t *reply, const char *rm) {
  struct jk_dbuf b = {0};
  const json_t *list = json_object_get(reply, "uploads");
  if (!json_array_size(list)) {
    jk_dbuf_printf(&b, "No data file of yours is stored.%s\n",
                   json_is_false(json_object_get(reply, "uploads_on")) ? " (This gateway takes no uploads: its "
                   "workers read the notebook's files.)" : "");
    return finish(&b);
  }
  jk_dbuf_printf(&b, "%-14s %10s %5s %-18s %s\n", "SHA256", "SIZE", "JOBS", "LAST USED", "PATH");
  size_t i;
  json_t *e;
  int64_t total = 0;
  json_array_foreach(list, i, e) {
    total += sl_json_get_int(e, "bytes", 0);
    if (i >= MAX_ROWS) {
      if (i == MAX_ROWS)
        jk_dbuf_printf(&b, "... %zu more\n", json_array_size(list) - i);
      continue;
    }
    char size[32], when[40], jobs[24];
    sl_file_size_text(sl_json_get_int(e, "bytes", 0), size, sizeof size);
    ago(when, sizeof when, sl_json_get_int(e, "last_us", 0));
    long long live = (long long)sl_json_get_int(e, "live_jobs", 0);
    snprintf(jobs, sizeof jobs, "%lld%s", (long long)sl_json_get_int(e, "jobs", 0), live ? "*" : "");
    const char *path = sl_json_get_str(e, "path", "");
    jk_dbuf_printf(&b, "%-14.12s %10s %5s %-18s %s%s\n", sl_json_get_str(e, "sha256", "?"), size, jobs, when,
                   *path ? path : "(no job has named it yet)",
                   sl_json_get_bool(e, "deleting", false) ? "  (being deleted)" : "");
  }
  char size[32];
  sl_file_size_text(total, size, sizeof size);
  jk_dbuf_printf(&b, "%zu file%s, %s in all (* a job that has not ended uses it); %s SHA256 deletes one\n",
                 json_array_size(list), json_array_size(list) == 1 ? "" : "s", size, rm);
  return finish(&b);
}

char *jk_format_upload_deleted(const json_t *reply) {
  struct jk_dbuf b = {0};
  char size[32];
  sl_file_size_text(sl_json_get_int(reply, "bytes", 0), size, sizeof size);
  jk_dbuf_printf(&b, "deleting %s (%s, %.12s…) from the store; a job that needs it again uploads it anew\n",
                 sl_json_get_str(reply, "path", "?"), size, sl_json_get_str(reply, "deleted", "?"));
  return finish(&b);
}

char *jk_format_idle(const json_t *reply) {
  struct jk_dbuf b = {0};
  const json_t *idle = json_object_get(reply, "idle");
  if (json_is_object(idle))
    status_idle(&b, idle);
  else
    jk_dbuf_printf(&b, "idle: the gateway reported no idle timers\n");
  return finish(&b);
}

char *jk_format_cost(const json_t *reply) { return jk_format_cost_of(reply, NULL, NULL); }

/* Whether the jobs reply lists job id under session. */
static bool listed_in(const json_t *jobs_reply, const char *job, const char *session) {
  size_t i;
  json_t *j;
  json_array_foreach(json_object_get(jobs_reply, "jobs"), i, j)
    if (strcmp(sl_json_get_str(j, "job", ""), job) == 0)
      return of_session(j, session);
  return false;
}

char *jk_format_cost_of(const json_t *reply, const json_t *jobs_reply, const char *session) {
  struct jk_dbuf b = {0};
  char spent[32], od[32], saved[32];
  money(spent, sizeof spent, reply, "spent_usd");
  money(od, sizeof od, reply, "on_demand_usd");
  money(saved, sizeof saved, reply, "saved_usd");
  jk_dbuf_printf(&b, "spent %s; on-demand would have cost %s; saved %s", spent, od, saved);
  double s = sl_json_get_num(reply, "spent_usd", -1), o = sl_json_get_num(reply, "on_demand_usd", -1);
  if (s >= 0 && o > 0)
    jk_dbuf_printf(&b, " (%.0f%%)", 100 * (o - s) / o);
  jk_dbuf_printf(&b, "\n");
  double kwh = sl_json_get_num(reply, "energy_kwh", -1), co2e = sl_json_get_num(reply, "co2e_g", -1);
  if (kwh >= 0 && co2e >= 0) /* absent from an older gateway */
    jk_dbuf_printf(&b, "energy %.3g kWh, %.3g g CO2e (estimated from the instance types' power, the"
                       " provider's PUE and the region's grid)\n", kwh, co2e);
  size_t i, rows = 0;
  json_t *j;
  json_array_foreach(json_object_get(reply, "jobs"), i, j) {
    if (i >= MAX_ROWS)
      break;
    if (session && !listed_in(jobs_reply, sl_json_get_str(j, "job", ""), session))
      continue;
    if (!rows++ && session)
      jk_dbuf_printf(&b, "this notebook session's jobs (%%cost --all lists all of yours):\n");
    char c[32], d[32];
    money(c, sizeof c, j, "cost_usd");
    money(d, sizeof d, j, "on_demand_usd");
    jk_dbuf_printf(&b, "  %-8.8s %-10.10s cost %s  on-demand %s", str_or_dash(j, "job"), str_or_dash(j, "state"),
                   c, d);
    if (json_is_number(json_object_get(j, "energy_kwh")))
      jk_dbuf_printf(&b, "  %.3g kWh %.3g g CO2e", sl_json_get_num(j, "energy_kwh", 0),
                     sl_json_get_num(j, "co2e_g", 0));
    jk_dbuf_printf(&b, "\n");
  }
  if (session && !rows)
    jk_dbuf_printf(&b, "No jobs in this notebook session (%%cost --all lists all of yours).\n");
  return finish(&b);
}

/* The market of a gateway without a ranking: one row per type. */
static char *format_market_types(const json_t *reply) {
  struct jk_dbuf b = {0};
  const json_t *types = json_object_get(reply, "types");
  if (!json_array_size(types)) {
    jk_dbuf_printf(&b, "No instance types match.\n");
    return finish(&b);
  }
  jk_dbuf_printf(&b, "%-16s %4s %10s %10s %7s %-13s %-8s %s\n", "TYPE", "GPUS", "SPOT $/h", "OD $/h", "SAVING",
                 "INTERRUPTION", "CAPACITY", "$ PER GPU-HOUR (SPOT)");
  size_t i;
  json_t *t;
  json_array_foreach(types, i, t) {
    if (i >= MAX_ROWS)
      break;
    double spot = sl_json_get_num(t, "spot_usd_per_hour", -1), od = sl_json_get_num(t, "on_demand_usd_per_hour", -1);
    long long gpus = (long long)sl_json_get_int(t, "gpus", 0);
    char saving[16] = "-", unit[32] = "-";
    if (spot >= 0 && od > 0)
      snprintf(saving, sizeof saving, "%.0f%%", 100 * (od - spot) / od);
    const json_t *cpu = json_object_get(t, "usd_per_unit_of_work");
    if (json_is_number(cpu))
      snprintf(unit, sizeof unit, "$%.4f", json_number_value(cpu));
    else if (spot >= 0 && gpus > 0)
      snprintf(unit, sizeof unit, "$%.4f", spot / (double)gpus);
    /* the cloud's placement score (1..10), or "none" while every zone of it
     * lately refused capacity */
    char capacity[16] = "-";
    if (json_is_integer(json_object_get(t, "unavailable_until_us")))
      snprintf(capacity, sizeof capacity, "none");
    else if (sl_json_get_int(t, "placement_score", 0) > 0)
      snprintf(capacity, sizeof capacity, "%lld/10", (long long)sl_json_get_int(t, "placement_score", 0));
    jk_dbuf_printf(&b, "%-16.16s %4lld %10.4f %10.4f %7s %-13.13s %-8s %s\n", str_or_dash(t, "type"), gpus, spot, od,
                   saving, str_or_dash(t, "interruption"), capacity, unit);
  }
  return finish(&b);
}

/* The type row of the market reply that ranking entry e names, or NULL. */
static const json_t *type_of(const json_t *reply, const json_t *e) {
  size_t i;
  json_t *t;
  json_array_foreach(json_object_get(reply, "types"), i, t) {
    if (!strcmp(sl_json_get_str(t, "type", ""), sl_json_get_str(e, "type", "-")) &&
        !strcmp(sl_json_get_str(t, "provider", ""), sl_json_get_str(e, "provider", "")) &&
        !strcmp(sl_json_get_str(t, "zone", ""), sl_json_get_str(e, "zone", "")))
      return t;
  }
  return NULL;
}

/* One ranked row's cells, as text (HTML escapes them). */
struct rank_row {
  char rank[16], gpus[16], price[16], unit[24], eff[16], capacity[16];
};

static void rank_cells(const json_t *e, const json_t *t, struct rank_row *r) {
  const json_t *u = json_object_get(e, "usd_per_unit");
  snprintf(r->rank, sizeof r->rank, "%lld", (long long)sl_json_get_int(e, "rank", 0));
  snprintf(r->gpus, sizeof r->gpus, "%lld", (long long)sl_json_get_int(t, "gpus", 0));
  snprintf(r->price, sizeof r->price, "%.4f", sl_json_get_num(e, "usd_per_hour", 0));
  if (json_is_number(u))
    snprintf(r->unit, sizeof r->unit, "%.4f", json_number_value(u));
  else
    snprintf(r->unit, sizeof r->unit, "-");
  snprintf(r->eff, sizeof r->eff, "%.0f%%", 100 * sl_json_get_num(e, "efficiency", 0));
  /* the cloud's placement score (1..10), "none" while every zone of it
   * lately refused capacity, "held" while a refusal in this pass holds it */
  snprintf(r->capacity, sizeof r->capacity, "-");
  if (json_is_true(json_object_get(e, "held")))
    snprintf(r->capacity, sizeof r->capacity, "held");
  else if (json_is_integer(json_object_get(t, "unavailable_until_us")))
    snprintf(r->capacity, sizeof r->capacity, "none");
  else if (sl_json_get_int(t, "placement_score", 0) > 0)
    snprintf(r->capacity, sizeof r->capacity, "%lld/10", (long long)sl_json_get_int(t, "placement_score", 0));
}

char *jk_format_market(const json_t *reply) {
  const json_t *ranking = json_object_get(reply, "ranking");
  if (!json_is_array(ranking) || !json_array_size(json_object_get(reply, "types")))
    return format_market_types(reply);
  struct jk_dbuf b = {0};
  jk_dbuf_printf(&b, "%4s %-16s %-12s %-9s %4s %9s %9s %5s %-13s %-8s %s\n", "RANK", "TYPE", "ZONE",
                 "MARKET", "GPUS", "$/h", "$/UNIT", "EFFIC", "INTERRUPTION", "CAPACITY", "WHY");
  size_t i;
  json_t *e;
  json_array_foreach(ranking, i, e) {
    if (i >= MAX_ROWS)
      break;
    const json_t *t = type_of(reply, e);
    struct rank_row r;
    rank_cells(e, t, &r);
    jk_dbuf_printf(&b, "%4s %-16.16s %-12.12s %-9.9s %4s %9s %9s %5s %-13.13s %-8s %s\n", r.rank,
                   str_or_dash(e, "type"), str_or_dash(e, "zone"), str_or_dash(e, "market"), r.gpus,
                   r.price, r.unit, r.eff, str_or_dash(t, "interruption"), r.capacity,
                   str_or_dash(e, "why"));
  }
  jk_dbuf_printf(&b, "Best first by expected cost per unit of work; a unit is %s.\n",
                 sl_json_get_str(reply, "unit", "one unit of work"));
  return finish(&b);
}

char *jk_format_market_html(const json_t *reply) {
  const json_t *ranking = json_object_get(reply, "ranking");
  if (!json_is_array(ranking) || !json_array_size(json_object_get(reply, "types")))
    return NULL;
  struct jk_dbuf b = {0};
  /* in a block MathJax skips; jk_html_no_math() below writes each '$' as an entity */
  jk_dbuf_printf(&b, "<div class=\"tex2jax_ignore mathjax_ignore\">"
                     "<table class=\"spotlab-instances\"><thead><tr><th>rank</th><th>type</th>"
                     "<th>zone</th><th>market</th><th>GPUs</th><th>$/h</th><th>$/unit</th>"
                     "<th>efficiency</th><th>interruption</th><th>capacity</th><th>why</th>"
                     "</tr></thead><tbody>\n");
  size_t i;
  json_t *e;
  json_array_foreach(ranking, i, e) {
    if (i >= MAX_ROWS)
      break;
    const json_t *t = type_of(reply, e);
    struct rank_row r;
    rank_cells(e, t, &r);
    const char *text[] = {str_or_dash(e, "type"), str_or_dash(e, "zone"), str_or_dash(e, "market"),
                          str_or_dash(t, "interruption"), str_or_dash(e, "why")};
    char *esc[5];
    for (size_t k = 0; k < 5; k++)
      esc[k] = jk_xml_escape(text[k]);
    jk_dbuf_printf(&b, "<tr%s><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td>"
                       "<td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n",
                   i == 0 ? " style=\"font-weight:bold\"" : "", r.rank, esc[0] ? esc[0] : "",
                   esc[1] ? esc[1] : "", esc[2] ? esc[2] : "", r.gpus, r.price, r.unit, r.eff,
                   esc[3] ? esc[3] : "", r.capacity, esc[4] ? esc[4] : "");
    for (size_t k = 0; k < 5; k++)
      free(esc[k]);
  }
  char *unit = jk_xml_escape(sl_json_get_str(reply, "unit", "one unit of work"));
  jk_dbuf_printf(&b, "</tbody></table><p>Best first by expected cost per unit of work; a unit is "
                     "%s.</p></div>\n", unit ? unit : "");
  free(unit);
  return jk_html_no_math(finish(&b));
}

char *jk_format_instances(const json_t *reply) {
  struct jk_dbuf b = {0};
  const json_t *list = json_object_get(reply, "instances");
  if (!json_array_size(list))
    jk_dbuf_printf(&b, "No instances.\n");
  size_t i;
  json_t *in;
  json_array_foreach(list, i, in) {
    if (i >= MAX_ROWS)
      break;
    jk_dbuf_printf(&b, "%-16s", str_or_dash(in, "instance"));
    static const char *const skip[] = {"instance", NULL};
    extras(&b, in, skip);
    jk_dbuf_printf(&b, "\n");
  }
  return finish(&b);
}

char *jk_format_event(const json_t *ev, long long first_time_us) {
  struct jk_dbuf b = {0};
  long long t = (long long)sl_json_get_int(ev, "time_us", 0);
  char dur[32] = "?";
  if (t > 0 && first_time_us > 0 && t >= first_time_us)
    sl_time_format_duration(t - first_time_us, dur, sizeof dur);
  const char *kind = sl_json_get_str(ev, "event", "?");
  jk_dbuf_printf(&b, "#%-4lld +%-8s %-10.20s", (long long)sl_json_get_int(ev, "seq", 0), dur, kind);
  if (strcmp(kind, "output") == 0) {
    const char *text = sl_json_get_str(ev, "text", "");
    size_t n = strcspn(text, "\n");
    jk_dbuf_printf(&b, " [%s] %.*s", sl_json_get_str(ev, "stream", "stdout"), (int)(n < 400 ? n : 400), text);
  } else if (strcmp(kind, "metric") == 0) {
    long long steps = (long long)sl_json_get_int(ev, "steps", 0);
    jk_dbuf_printf(&b, " step %lld", (long long)sl_json_get_int(ev, "step", 0));
    if (steps > 0)
      jk_dbuf_printf(&b, "/%lld", steps);
    static const char *const skip[] = {"type", "job", "seq", "time_us", "event", "step", "steps", NULL};
    extras(&b, ev, skip);
  } else {
    static const char *const skip[] = {"type", "job", "seq", "time_us", "event", NULL};
    extras(&b, ev, skip);
  }
  jk_dbuf_printf(&b, "\n");
  return finish(&b);
}

char *jk_format_events(const json_t *reply) {
  struct jk_dbuf b = {0};
  const json_t *events = json_object_get(reply, "events");
  long long first = (long long)sl_json_get_int(json_array_get(events, 0), "time_us", 0);
  if (!json_array_size(events))
    jk_dbuf_printf(&b, "No events.\n");
  size_t i;
  json_t *ev;
  json_array_foreach(events, i, ev) {
    char *line = jk_format_event(ev, first);
    if (line)
      jk_dbuf_printf(&b, "%s", line);
    free(line);
  }
  if (sl_json_get_bool(reply, "more", false))
    jk_dbuf_printf(&b, "... more events follow (the gateway sent the first %zu)\n", json_array_size(events));
  return finish(&b);
}

/* ---- budgets ---- */

json_t *jk_budget_request(const char *args, char *err, size_t size) {
  char buf[256], *w[5];
  int n = 0;
  snprintf(buf, sizeof buf, "%s", args ? args : "");
  for (char *save = NULL, *t = strtok_r(buf, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
    if (n == 5)
      break;
    w[n++] = t;
  }
  if (n == 0)
    return json_pack("{s:s}", "type", "budget");
  bool gateway = n == 3 && strcmp(w[1], "gateway") == 0;
  bool named = n == 4 && (strcmp(w[1], "group") == 0 || strcmp(w[1], "user") == 0);
  if (strcmp(w[0], "set") != 0 || (!gateway && !named)) {
    snprintf(err, size, "usage: budget [set gateway USD | set group NAME USD | set user NAME USD]");
    return NULL;
  }
  const char *amount = w[n - 1];
  char *end = NULL;
  double usd = strtod(amount, &end);
  if (*amount == '$')
    usd = strtod(amount + 1, &end);
  if (!end || *end || !isfinite(usd) || usd < 0) {
    snprintf(err, size, "'%s' is not an amount in US dollars", amount);
    return NULL;
  }
  return json_pack("{s:s,s:{s:s,s:s,s:f}}", "type", "budget", "set", "scope", w[1], "name",
                   gateway ? "" : w[2], "monthly_usd", usd);
}

char *jk_format_budgets(const json_t *reply) {
  struct jk_dbuf b = {0};
  const json_t *list = json_object_get(reply, "budgets");
  if (!json_array_size(list)) {
    jk_dbuf_printf(&b, "No monthly budget applies.\n");
    return finish(&b);
  }
  jk_dbuf_printf(&b, "monthly budgets, %s (UTC):\n", sl_json_get_str(reply, "month", "this month"));
  size_t i;
  json_t *o;
  json_array_foreach(list, i, o) {
    if (i >= MAX_ROWS)
      break;
    const char *scope = sl_json_get_str(o, "scope", ""), *name = sl_json_get_str(o, "name", "");
    char who[96], spent[32], budget[32], fired[128] = "";
    snprintf(who, sizeof who, "%s%s%s", scope, *name ? " " : "", name);
    money(spent, sizeof spent, o, "spent_usd");
    money(budget, sizeof budget, o, "budget_usd");
    size_t k;
    json_t *p;
    json_array_foreach(json_object_get(o, "fired"), k, p) {
      size_t len = strlen(fired);
      snprintf(fired + len, sizeof fired - len, "%s%g%%", len ? "," : "", json_number_value(p));
    }
    jk_dbuf_printf(&b, "  %-20.20s spent %s of %s (%.0f%%)%s%s%s%s\n", who, spent, budget,
                   100 * sl_json_get_num(o, "ratio", 0), sl_json_get_bool(o, "hard_cap", false) ? ", hard cap" : "",
                   sl_json_get_bool(o, "capped", false) ? ", SPENT: new jobs refused, running ones paused" : "",
                   fired[0] ? "; alerts sent at " : "", fired);
    json_t *ov = json_object_get(o, "override");
    if (ov)
      jk_dbuf_printf(&b, "  %-20.20s (set live by %s)\n", "", sl_json_get_str(ov, "set_by", "an admin"));
  }
  const char *note = sl_json_get_str(reply, "note", NULL);
  if (note)
    jk_dbuf_printf(&b, "Note: %s.\n", note);
  return finish(&b);
}
