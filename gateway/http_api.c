/* The HTTP API's views of users, groups and preemptions, the cost per
 * group and per day, and the admin page's files.
 *
 * Who may read what is decided in http.c: each function here is handed the
 * one user whose data it reads, or NULL for everyone (an admin), and never
 * widens that. Every list is bounded (USERS_MAX, GROUPS_MAX, SCAN_MAX);
 * rows past a bound are left out, never an error. */
#include "http_api.h"

#include "job.h"
#include "ledger.h"
#include "sl_err.h"
#include "sl_json.h"
#include "sl_time.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#define USERS_MAX 1000
#define GROUPS_MAX 256
#define SCAN_MAX 10000          /* preemption events read for the counts and the list */
#define DAYS_MAX 366
#define DAY_US (86400LL * 1000000LL)

static double row_usd(const json_t *rows, const char *key) {
  size_t i;
  json_t *r;
  json_array_foreach(rows, i, r)
    if (!strcmp(sl_json_get_str(r, "key", ""), key))
      return sl_json_get_num(r, "usd", 0);
  return 0;
}

/* Adds name to the set (an object used as an ordered set) under the bound. */
static void set_add(json_t *set, const char *name, size_t max) {
  if (name && *name && json_object_size(set) < max && !json_object_get(set, name))
    json_object_set_new(set, name, json_true());
}

int gw_http_users(const struct gw_httpd_env *env, const char *user, json_t **ret) {
  json_t *counts = NULL, *month = NULL, *ever = NULL, *names = json_object(), *arr = json_array();
  int r = gw_store_job_counts_by_user(env->store, &counts);
  if (r == 0)
    r = gw_store_cost_by(env->store, GW_COST_BY_USER, user, gw_ledger_month_start_us(), USERS_MAX,
                         &month);
  if (r == 0)
    r = gw_store_cost_by(env->store, GW_COST_BY_USER, user, 0, USERS_MAX, &ever);
  if (r < 0 || !names || !arr)
    goto done;
  if (user)
    set_add(names, user, 1);
  else {
    const char *k;
    json_t *v;
    size_t i;
    for (i = 0; i < env->cfg->n_users; i++)
      set_add(names, env->cfg->users[i].name, USERS_MAX);
    json_object_foreach(counts, k, v)
      set_add(names, k, USERS_MAX);
    json_array_foreach(ever, i, v)
      set_add(names, sl_json_get_str(v, "key", ""), USERS_MAX);
  }
  const char *name;
  json_t *unused;
  json_object_foreach(names, name, unused) {
    json_t *jobs = json_object_get(counts, name);
    jobs = jobs ? json_deep_copy(jobs) : json_object();
    size_t live = 0, insts = 0;
    for (size_t i = 0; i < gw_fleet_n_jobs(env->fleet); i++)
      live += !strcmp(gw_fleet_job_at(env->fleet, i)->user, name);
    for (size_t i = 0; i < gw_fleet_n_insts(env->fleet); i++)
      insts += !strcmp(gw_fleet_inst_at(env->fleet, i)->row.user, name);
    json_array_append_new(arr, json_pack("{s:s,s:s?,s:b,s:o,s:I,s:I,s:o,s:o}", "user", name,
                                         "group", gw_config_user_group(env->cfg, name), "admin",
                                         gw_config_user_admin(env->cfg, name), "jobs", jobs,
                                         "live_jobs",
                                         (json_int_t)live, "instances", (json_int_t)insts,
                                         "spent_usd", sl_json_real(row_usd(ever, name)),
                                         "month_spent_usd", sl_json_real(row_usd(month, name))));
  }
  *ret = json_pack("{s:O}", "users", arr);
  r = *ret ? 0 : -ENOMEM;
done:
  json_decref(counts);
  json_decref(month);
  json_decref(ever);
  json_decref(names);
  json_decref(arr);
  return r < 0 ? r : 0;
}

static const struct gw_group_cfg *group_cfg(const struct gw_config *c, const char *name) {
  for (size_t i = 0; i < c->n_groups; i++)
    if (!strcmp(c->groups[i].name, name))
      return &c->groups[i];
  return NULL;
}

int gw_http_groups(const struct gw_httpd_env *env, const char *user, json_t **ret) {
  const struct gw_config *cfg = env->cfg;
  json_t *month = NULL, *counts = NULL, *groups = json_object(), *arr = json_array();
  int r = gw_store_cost_by(env->store, GW_COST_BY_USER, NULL, gw_ledger_month_start_us(),
                           USERS_MAX, &month);
  if (r == 0)
    r = gw_store_job_counts_by_user(env->store, &counts);
  if (r < 0 || !groups || !arr)
    goto done;
  /* every user known, with the group each is in */
  json_t *members = json_object();
  json_object_set_new(groups, "", members); /* "" holds the users of no group, dropped below */
  json_t *v;
  const char *k;
  size_t i;
  json_t *users = json_object();
  for (i = 0; i < cfg->n_users; i++)
    set_add(users, cfg->users[i].name, USERS_MAX);
  json_object_foreach(counts, k, v)
    set_add(users, k, USERS_MAX);
  json_array_foreach(month, i, v)
    set_add(users, sl_json_get_str(v, "key", ""), USERS_MAX);
  if (user)
    set_add(users, user, USERS_MAX + 1);
  for (i = 0; i < cfg->n_groups; i++)
    if (json_object_size(groups) <= GROUPS_MAX && !json_object_get(groups, cfg->groups[i].name))
      json_object_set_new(groups, cfg->groups[i].name, json_array());
  json_object_foreach(users, k, v) {
    const char *g = gw_config_user_group(cfg, k);
    json_t *m = json_object_get(groups, g ? g : "");
    if (!m && json_object_size(groups) <= GROUPS_MAX)
      json_object_set_new(groups, g, m = json_array());
    json_array_append_new(m, json_string(k));
  }
  json_decref(users);
  const char *mine = user ? gw_config_user_group(cfg, user) : NULL;
  json_object_foreach(groups, k, v) {
    if (!*k || (user && (!mine || strcmp(mine, k))))
      continue;
    const struct gw_group_cfg *g = group_cfg(cfg, k);
    double spent = 0;
    size_t j;
    json_t *m;
    json_array_foreach(v, j, m)
      spent += row_usd(month, json_string_value(m));
    int64_t nb = g && g->notebook_timeout_us >= 0 ? g->notebook_timeout_us : cfg->notebook_timeout_us;
    int64_t wk = g && g->worker_timeout_us >= 0 ? g->worker_timeout_us : cfg->worker_timeout_us;
    json_t *o = json_pack("{s:s,s:b,s:o,s:o,s:o}", "group", k, "configured", g != NULL,
                          "notebook_timeout_s", sl_json_real((double)nb / 1e6), "worker_timeout_s",
                          sl_json_real((double)wk / 1e6), "month_spent_usd", sl_json_real(spent));
    if (o && !user)
      json_object_set(o, "members", v);
    json_array_append_new(arr, o);
  }
  *ret = json_pack("{s:O}", "groups", arr);
  r = *ret ? 0 : -ENOMEM;
done:
  json_decref(month);
  json_decref(counts);
  json_decref(groups);
  json_decref(arr);
  return r < 0 ? r : 0;
}

int gw_http_data(const struct gw_httpd_env *env, const char *user, json_t **ret) {
  json_t *list = NULL, *by = NULL;
  int r = gw_store_uploads_list(env->store, user, &list);
  if (r == 0)
    r = gw_store_uploads_by_user(env->store, user, &by);
  if (r < 0) {
    json_decref(list);
    return r;
  }
  json_int_t files = 0, bytes = 0;
  size_t i;
  json_t *row;
  json_array_foreach(by, i, row) {
    files += sl_json_get_int(row, "files", 0);
    bytes += sl_json_get_int(row, "bytes", 0);
  }
  *ret = json_pack("{s:o, s:I, s:I, s:o}", "uploads", list, "files", files, "bytes", bytes, "by_user", by);
  return *ret ? 0 : -ENOMEM;
}

int gw_http_preemptions(const struct gw_httpd_env *env, const char *user, size_t limit,
                        json_t **ret) {
  json_t *evs = NULL;
  int r = gw_store_preemption_events(env->store, user, SCAN_MAX, &evs);
  if (r < 0)
    return r;
  json_t *list = json_array(), *open = json_object();
  int64_t notice = 0, no_notice = 0;
  size_t i;
  json_t *e;
  /* oldest first: each resumed event closes the job's open preemption */
  json_array_foreach(evs, i, e) {
    const char *job = sl_json_get_str(e, "job", "");
    const char *kind = sl_json_get_str(e, "event", "");
    if (!strcmp(kind, "preempted")) {
      bool n = json_is_true(json_object_get(e, "notice"));
      notice += n;
      no_notice += !n;
      json_t *p = json_pack("{s:s,s:s,s:I,s:s,s:b,s:O,s:n,s:n,s:n,s:n}", "job", job, "user",
                            sl_json_get_str(e, "user", ""), "time_us",
                            json_integer_value(json_object_get(e, "time_us")), "instance",
                            sl_json_get_str(e, "instance", ""), "notice", n, "step",
                            json_object_get(e, "step") ? json_object_get(e, "step") : json_null(),
                            "resumed_us", "recovery_s", "resumed_type", "resumed_zone");
      if (p) {
        json_array_append_new(list, p);
        json_object_set(open, job, p);
      }
    } else if (!strcmp(kind, "resumed")) {
      json_t *p = json_object_get(open, job);
      if (!p)
        continue;
      json_object_set(p, "resumed_us", json_object_get(e, "time_us"));
      json_t *after = json_object_get(e, "after_s");
      json_object_set(p, "recovery_s", json_is_number(after) ? after : json_null());
      json_object_set_new(p, "resumed_type", json_string(sl_json_get_str(e, "instance_type", "")));
      json_object_set_new(p, "resumed_zone", json_string(sl_json_get_str(e, "zone", "")));
      json_object_del(open, job);
    }
  }
  json_decref(open);
  json_decref(evs);
  json_t *recent = json_array();
  for (size_t n = json_array_size(list); n > 0 && json_array_size(recent) < limit; n--)
    json_array_append(recent, json_array_get(list, n - 1));
  json_decref(list);
  *ret = json_pack("{s:I,s:I,s:I,s:o}", "count", (json_int_t)(notice + no_notice), "notice",
                   (json_int_t)notice, "no_notice", (json_int_t)no_notice, "recent", recent);
  return *ret ? 0 : -ENOMEM;
}

int gw_http_cost_more(const struct gw_httpd_env *env, const char *user, int days, json_t *cost) {
  /* by_group from by_user: a user's group is the configuration's now */
  json_t *sums = json_object(), *by_group = json_array(), *v;
  size_t i;
  json_array_foreach(json_object_get(cost, "by_user"), i, v) {
    const char *g = gw_config_user_group(env->cfg, sl_json_get_str(v, "key", ""));
    json_t *s = json_object_get(sums, g ? g : "");
    if (!s && json_object_size(sums) < GROUPS_MAX)
      json_object_set_new(sums, g ? g : "", s = json_pack("{s:f,s:f,s:f,s:f,s:f}", "usd", 0.0,
                                                           "on_demand_usd", 0.0, "seconds", 0.0,
                                                           "energy_kwh", 0.0, "co2e_g", 0.0));
    static const char *const fields[] = {"usd", "on_demand_usd", "seconds", "energy_kwh", "co2e_g"};
    for (int f = 0; s && f < 5; f++)
      json_object_set_new(s, fields[f], sl_json_real(sl_json_get_num(s, fields[f], 0) +
                                                     sl_json_get_num(v, fields[f], 0)));
  }
  const char *k;
  json_object_foreach(sums, k, v) {
    json_t *row = json_deep_copy(v);
    json_object_set_new(row, "key", json_string(k));
    json_array_append_new(by_group, row);
  }
  json_decref(sums);
  json_object_set_new(cost, "by_group", by_group);
  if (days <= 0)
    return 0;
  if (days > DAYS_MAX)
    days = DAYS_MAX;
  int64_t today = sl_time_real_us() / DAY_US * DAY_US; /* UTC midnight */
  int64_t since = today - (int64_t)(days - 1) * DAY_US;
  json_t *rows = NULL;
  int r = gw_store_cost_by(env->store, GW_COST_BY_DAY, user, since, (size_t)days + 1, &rows);
  if (r < 0)
    return r;
  json_t *filled = json_array();
  for (int d = 0; d < days; d++) {
    time_t t = (time_t)((since + (int64_t)d * DAY_US) / 1000000);
    struct tm tm;
    char key[16];
    gmtime_r(&t, &tm);
    strftime(key, sizeof key, "%Y-%m-%d", &tm);
    json_t *row = NULL;
    json_array_foreach(rows, i, v)
      if (!strcmp(sl_json_get_str(v, "key", ""), key))
        row = v;
    /* a day without spend has every field a day with spend has (store.h) */
    json_array_append_new(filled, row ? json_incref(row)
                                      : json_pack("{s:s,s:f,s:f,s:f,s:f,s:f}", "key", key, "usd",
                                                  0.0, "on_demand_usd", 0.0, "seconds", 0.0,
                                                  "energy_kwh", 0.0, "co2e_g", 0.0));
  }
  json_decref(rows);
  json_object_set_new(cost, "by_day", filled);
  json_object_set_new(cost, "days", json_integer(days));
  return 0;
}

const struct gw_admin_asset *gw_http_admin_asset(const char *url) {
  if (!strcmp(url, "/") || !strcmp(url, "/admin") || !strcmp(url, "/admin/"))
    url = "/admin/index.html";
  for (size_t i = 0; i < gw_admin_n_assets; i++)
    if (!strcmp(gw_admin_assets[i].path, url))
      return &gw_admin_assets[i];
  return NULL;
}
