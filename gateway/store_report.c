/* The store's reports and the tables only they use: cost by user, group,
 * job, instance type or day; job and preemption counts; the checkpoint and
 * preemption history behind the metrics; a job's attempts and checkpoints;
 * the budgets (the alerts and caps that fired each month, the limits an
 * admin set live) and the run records (record.h). Nothing here writes the
 * gateway's job state, so none of it is kept when the database refuses a
 * write (store_kept.c): the caller gets the error. */
#include "store_int.h"

#include <errno.h>
#include <stdlib.h>

int gw_store_cost_by_user_group(struct gw_store *s, size_t max, json_t **ret) {
  sqlite3_stmt *st = prep(s, "SELECT c.user, COALESCE(u.grp,''), SUM(c.usd), SUM(c.on_demand_usd),"
                             " SUM(c.energy_kwh), SUM(c.co2e_g) FROM cost c LEFT JOIN users u"
                             " ON u.name=c.user GROUP BY c.user ORDER BY c.user LIMIT ?1");
  if (!st)
    return SL_ESQLITE;
  sqlite3_bind_int64(st, 1, (sqlite3_int64)max);
  json_t *arr = json_array();
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    json_array_append_new(arr, json_pack("{s:s,s:s,s:f,s:f,s:f,s:f}", "user",
                                         (const char *)sqlite3_column_text(st, 0), "group",
                                         (const char *)sqlite3_column_text(st, 1), "usd",
                                         sqlite3_column_double(st, 2), "on_demand_usd",
                                         sqlite3_column_double(st, 3), "energy_kwh",
                                         sqlite3_column_double(st, 4), "co2e_g",
                                         sqlite3_column_double(st, 5)));
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    json_decref(arr);
    return SL_ESQLITE;
  }
  *ret = arr;
  return 0;
}

int gw_store_metric_history(struct gw_store *s, const struct gw_store_history_fns *fns, void *ctx) {
  sqlite3_stmt *st = prep(s, "SELECT write_ms, upload_ms FROM checkpoints");
  if (!st)
    return SL_ESQLITE;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    fns->checkpoint(ctx, sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1));
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE)
    return SL_ESQLITE;
  /* only the jobs with a preempted attempt can have recovered or lost steps;
   * a body that is not JSON (a damaged row) reads as one without the fields */
  st = prep(s, "SELECT job, time_us, kind,"
               " CASE WHEN json_valid(body) THEN json_extract(body, '$.state') END,"
               " COALESCE(CASE WHEN json_valid(body) THEN json_extract(body, '$.steps_lost') END, 0),"
               " COALESCE(CASE WHEN json_valid(body) THEN json_extract(body, '$.notice') END, 0)"
               " FROM events WHERE job IN"
               " (SELECT DISTINCT job FROM attempts WHERE outcome='preempted')"
               " AND kind IN ('preempted', 'state') ORDER BY job, seq");
  if (!st)
    return SL_ESQLITE;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *state = (const char *)sqlite3_column_text(st, 3);
    fns->event(ctx, sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1),
               (const char *)sqlite3_column_text(st, 2), state ? state : "",
               sqlite3_column_int64(st, 4), sqlite3_column_int(st, 5) != 0);
  }
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? 0 : SL_ESQLITE;
}

int gw_store_cost_totals(struct gw_store *s, const char *user, int64_t since_us,
                         double *ret_usd, double *ret_on_demand_usd) {
  sqlite3_stmt *st = prep(s, "SELECT COALESCE(SUM(usd),0), COALESCE(SUM(on_demand_usd),0)"
                             " FROM cost WHERE (?1 IS NULL OR user=?1) AND updated_us>=?2");
  if (!st)
    return SL_ESQLITE;
  if (user)
    bind_text(st, 1, user);
  sqlite3_bind_int64(st, 2, since_us);
  int r = SL_ESQLITE;
  if (sqlite3_step(st) == SQLITE_ROW) {
    *ret_usd = sqlite3_column_double(st, 0);
    *ret_on_demand_usd = sqlite3_column_double(st, 1);
    r = 0;
  }
  sqlite3_finalize(st);
  return r;
}

int gw_store_cost_by(struct gw_store *s, enum gw_cost_by what, const char *user, int64_t since_us,
                     size_t max, json_t **ret) {
  static const char *const keys[] = {
    [GW_COST_BY_USER] = "c.user", [GW_COST_BY_JOB] = "c.job",
    [GW_COST_BY_TYPE] = "COALESCE(a.instance_type,'')",
    [GW_COST_BY_DAY] = "date(c.updated_us / 1000000, 'unixepoch')",
  };
  if ((unsigned)what > GW_COST_BY_DAY)
    return -EINVAL;
  char sql[512];
  snprintf(sql, sizeof sql, "SELECT %s AS k, SUM(c.usd), SUM(c.on_demand_usd), SUM(c.seconds),"
           " SUM(c.energy_kwh), SUM(c.co2e_g)"
           " FROM cost c LEFT JOIN attempts a ON a.job=c.job AND a.attempt=c.attempt"
           " WHERE (?1 IS NULL OR c.user=?1) AND c.updated_us>=?2 GROUP BY k ORDER BY %s LIMIT ?3",
           keys[what], what == GW_COST_BY_DAY ? "k" : "2 DESC, k");
  sqlite3_stmt *st = prep(s, sql);
  if (!st)
    return SL_ESQLITE;
  if (user)
    bind_text(st, 1, user);
  sqlite3_bind_int64(st, 2, since_us);
  sqlite3_bind_int64(st, 3, (sqlite3_int64)max);
  json_t *arr = json_array();
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    json_t *key = sqlite3_column_type(st, 0) == SQLITE_INTEGER
                      ? json_integer(sqlite3_column_int64(st, 0))
                      : json_string((const char *)sqlite3_column_text(st, 0));
    json_array_append_new(arr, json_pack("{s:o*,s:f,s:f,s:f,s:f,s:f}", "key", key, "usd",
                                         sqlite3_column_double(st, 1), "on_demand_usd",
                                         sqlite3_column_double(st, 2), "seconds",
                                         sqlite3_column_double(st, 3), "energy_kwh",
                                         sqlite3_column_double(st, 4), "co2e_g",
                                         sqlite3_column_double(st, 5)));
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    json_decref(arr);
    return SL_ESQLITE;
  }
  *ret = arr;
  return 0;
}

/* Runs sql, whose rows are (TEXT name, INTEGER count), into obj. */
static int count_rows(struct gw_store *s, const char *sql, json_t *obj) {
  sqlite3_stmt *st = prep(s, sql);
  if (!st)
    return SL_ESQLITE;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *k = (const char *)sqlite3_column_text(st, 0);
    json_object_set_new(obj, k ? k : "", json_integer(sqlite3_column_int64(st, 1)));
  }
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? 0 : SL_ESQLITE;
}

int gw_store_job_counts(struct gw_store *s, json_t **ret) {
  json_t *o = json_object();
  int r = o ? count_rows(s, "SELECT state, COUNT(*) FROM jobs GROUP BY state", o) : -ENOMEM;
  if (r < 0) {
    json_decref(o);
    return r;
  }
  *ret = o;
  return 0;
}

int gw_store_counts(struct gw_store *s, json_t **ret) {
  json_t *o = json_pack("{s:{},s:{s:i,s:i}}", "jobs", "preemptions", "notice", 0, "no_notice", 0);
  if (!o)
    return -ENOMEM;
  int r = count_rows(s, "SELECT state, COUNT(*) FROM jobs GROUP BY state", json_object_get(o, "jobs"));
  /* the preempted events say whether a notice came first; only the jobs
   * with a preempted attempt are read (events has no index on kind) */
  if (r == 0)
    r = count_rows(s, "SELECT CASE WHEN NOT json_valid(body) THEN 'no_notice'"
                      " WHEN json_extract(body, '$.notice') THEN 'notice'"
                      " ELSE 'no_notice' END AS k, COUNT(*) FROM events WHERE job IN"
                      " (SELECT DISTINCT job FROM attempts WHERE outcome='preempted')"
                      " AND kind='preempted' GROUP BY k", json_object_get(o, "preemptions"));
  if (r < 0) {
    json_decref(o);
    return r;
  }
  *ret = o;
  return 0;
}

int gw_store_job_counts_by_user(struct gw_store *s, json_t **ret) {
  sqlite3_stmt *st = prep(s, "SELECT user, state, COUNT(*) FROM jobs GROUP BY user, state");
  if (!st)
    return SL_ESQLITE;
  json_t *o = json_object();
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *u = (const char *)sqlite3_column_text(st, 0);
    const char *k = (const char *)sqlite3_column_text(st, 1);
    json_t *per = json_object_get(o, u ? u : "");
    if (!per)
      json_object_set_new(o, u ? u : "", per = json_object());
    json_object_set_new(per, k ? k : "", json_integer(sqlite3_column_int64(st, 2)));
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE || !o) {
    json_decref(o);
    return SL_ESQLITE;
  }
  *ret = o;
  return 0;
}

int gw_store_preemption_events(struct gw_store *s, const char *user, size_t max, json_t **ret) {
  /* as in gw_store_counts, only jobs with a preempted attempt are read */
  sqlite3_stmt *st = prep(s, "SELECT e.body, j.user FROM events e JOIN jobs j ON j.id=e.job"
                             " WHERE e.job IN (SELECT DISTINCT job FROM attempts WHERE"
                             " outcome='preempted') AND e.kind IN ('preempted','resumed')"
                             " AND (?1 IS NULL OR j.user=?1) ORDER BY e.time_us DESC, e.job DESC,"
                             " e.seq DESC LIMIT ?2");
  if (!st)
    return SL_ESQLITE;
  if (user)
    bind_text(st, 1, user);
  sqlite3_bind_int64(st, 2, (sqlite3_int64)max);
  json_t *arr = json_array();
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    json_t *ev = parse_text(st, 0);
    if (!json_is_object(ev)) {
      json_decref(ev);
      continue;
    }
    json_object_set_new(ev, "user", json_string((const char *)sqlite3_column_text(st, 1)));
    json_array_insert_new(arr, 0, ev);
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE || !arr) {
    json_decref(arr);
    return SL_ESQLITE;
  }
  *ret = arr;
  return 0;
}

/* ---- budgets ---------------------------------------------------------- */

int gw_store_budget_fire(struct gw_store *s, const char *month, const char *scope,
                         const char *name, const char *kind, double threshold_pct,
                         double spent_usd, double budget_usd, int64_t now_us) {
  sqlite3_stmt *st = prep(s, "INSERT OR IGNORE INTO budget_fired(month, scope, name, kind,"
                             " threshold_pct, spent_usd, budget_usd, time_us)"
                             " VALUES(?1,?2,?3,?4,?5,?6,?7,?8)");
  if (!st)
    return SL_ESQLITE;
  bind_text(st, 1, month);
  bind_text(st, 2, scope);
  bind_text(st, 3, name);
  bind_text(st, 4, kind);
  sqlite3_bind_double(st, 5, threshold_pct);
  sqlite3_bind_double(st, 6, spent_usd);
  sqlite3_bind_double(st, 7, budget_usd);
  sqlite3_bind_int64(st, 8, now_us);
  int r = run(s, st);
  return r < 0 ? r : sqlite3_changes(s->db) > 0;
}

int gw_store_budget_fired(struct gw_store *s, const char *month, json_t **ret) {
  sqlite3_stmt *st = prep(s, "SELECT scope, name, kind, threshold_pct, spent_usd, budget_usd, time_us"
                             " FROM budget_fired WHERE month=?1 ORDER BY time_us");
  if (!st)
    return SL_ESQLITE;
  bind_text(st, 1, month);
  json_t *arr = json_array();
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    json_array_append_new(arr, json_pack("{s:s,s:s,s:s,s:f,s:f,s:f,s:I}",
                                         "scope", (const char *)sqlite3_column_text(st, 0),
                                         "name", (const char *)sqlite3_column_text(st, 1),
                                         "kind", (const char *)sqlite3_column_text(st, 2),
                                         "threshold_pct", sqlite3_column_double(st, 3),
                                         "spent_usd", sqlite3_column_double(st, 4),
                                         "budget_usd", sqlite3_column_double(st, 5),
                                         "time_us", (json_int_t)sqlite3_column_int64(st, 6)));
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    json_decref(arr);
    return SL_ESQLITE;
  }
  *ret = arr;
  return 0;
}

int gw_store_user_known(struct gw_store *s, const char *user) {
  sqlite3_stmt *st = prep(s, "SELECT EXISTS(SELECT 1 FROM users WHERE name=?1) OR"
                             " EXISTS(SELECT 1 FROM sessions WHERE user=?1) OR EXISTS(SELECT 1 FROM jobs WHERE user=?1)");
  if (!st)
    return SL_ESQLITE;
  bind_text(st, 1, user);
  int rc = sqlite3_step(st), known = rc == SQLITE_ROW ? sqlite3_column_int(st, 0) != 0 : 0;
  sqlite3_finalize(st);
  return rc == SQLITE_ROW ? known : gw_store_db_err(s, "read the users");
}

int gw_store_budget_override_set(struct gw_store *s, const char *scope, const char *name,
                                 double monthly_usd, const char *set_by, int64_t now_us) {
  sqlite3_stmt *st = prep(s, "INSERT INTO budget_override(scope, name, monthly_usd, set_by, time_us)"
                             " VALUES(?1,?2,?3,?4,?5) ON CONFLICT(scope, name) DO UPDATE SET"
                             " monthly_usd=excluded.monthly_usd, set_by=excluded.set_by,"
                             " time_us=excluded.time_us");
  if (!st)
    return SL_ESQLITE;
  bind_text(st, 1, scope);
  bind_text(st, 2, name);
  sqlite3_bind_double(st, 3, monthly_usd);
  bind_text(st, 4, set_by);
  sqlite3_bind_int64(st, 5, now_us);
  return run(s, st);
}

int gw_store_budget_overrides(struct gw_store *s, json_t **ret) {
  sqlite3_stmt *st = prep(s, "SELECT scope, name, monthly_usd, set_by, time_us FROM budget_override");
  if (!st)
    return SL_ESQLITE;
  json_t *arr = json_array();
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    json_array_append_new(arr, json_pack("{s:s,s:s,s:f,s:s,s:I}",
                                         "scope", (const char *)sqlite3_column_text(st, 0),
                                         "name", (const char *)sqlite3_column_text(st, 1),
                                         "monthly_usd", sqlite3_column_double(st, 2),
                                         "set_by", (const char *)sqlite3_column_text(st, 3),
                                         "time_us", (json_int_t)sqlite3_column_int64(st, 4)));
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    json_decref(arr);
    return SL_ESQLITE;
  }
  *ret = arr;
  return 0;
}

/* ---- run records ------------------------------------------------------------ */

int gw_store_record_put(struct gw_store *s, int64_t job, const json_t *body) {
  char *text = json_is_object(body) ? json_dumps(body, JSON_COMPACT) : NULL;
  if (!text)
    return json_is_object(body) ? -ENOMEM : SL_ETYPE;
  sqlite3_stmt *st = prep(s, "INSERT OR REPLACE INTO records(job, body) VALUES(?,?)");
  if (st) {
    sqlite3_bind_int64(st, 1, job);
    bind_text(st, 2, text);
  }
  free(text);
  return run(s, st);
}

int gw_store_record_get(struct gw_store *s, int64_t job, json_t **ret) {
  sqlite3_stmt *st = prep(s, "SELECT body FROM records WHERE job=?");
  if (!st)
    return SL_ESQLITE;
  sqlite3_bind_int64(st, 1, job);
  int rc = sqlite3_step(st);
  json_t *body = rc == SQLITE_ROW ? parse_text(st, 0) : NULL;
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE)
    return gw_store_db_err(s, "record");
  if (!json_is_object(body)) {
    json_decref(body);
    return SL_ENAME;
  }
  *ret = body;
  return 0;
}

int gw_store_job_history(struct gw_store *s, int64_t job, json_t **ret_attempts,
                         json_t **ret_checkpoints) {
  sqlite3_stmt *a = prep(s, "SELECT attempt, instance, instance_type, zone, spot, price,"
                            " on_demand_price, from_step, started_us, ended_us, outcome"
                            " FROM attempts WHERE job=? ORDER BY attempt");
  sqlite3_stmt *c = prep(s, "SELECT attempt, step, key, bytes, write_ms, upload_ms, time_us"
                            " FROM checkpoints WHERE job=? ORDER BY step");
  if (!a || !c) {
    sqlite3_finalize(a);
    sqlite3_finalize(c);
    return SL_ESQLITE;
  }
  json_t *atts = json_array(), *cks = json_array();
  char inst[64], type[64], zone[64], outcome[32];
  sqlite3_bind_int64(a, 1, job);
  int rc;
  while ((rc = sqlite3_step(a)) == SQLITE_ROW) {
    col_text(a, 1, inst, sizeof inst);
    col_text(a, 2, type, sizeof type);
    col_text(a, 3, zone, sizeof zone);
    col_text(a, 10, outcome, sizeof outcome);
    json_t *o = json_pack("{s:i,s:s,s:s,s:s,s:s,s:o,s:o,s:I,s:I}", "attempt",
                          sqlite3_column_int(a, 0), "instance", inst, "instance_type", type, "zone",
                          zone, "market", sqlite3_column_int(a, 4) ? "spot" : "on-demand",
                          "usd_per_hour", sl_json_real(sqlite3_column_double(a, 5)),
                          "on_demand_usd_per_hour", sl_json_real(sqlite3_column_double(a, 6)),
                          "from_step", (json_int_t)sqlite3_column_int64(a, 7), "started_us",
                          (json_int_t)sqlite3_column_int64(a, 8));
    if (o && sqlite3_column_type(a, 9) != SQLITE_NULL)
      json_object_set_new(o, "ended_us", json_integer(sqlite3_column_int64(a, 9)));
    if (o && *outcome)
      json_object_set_new(o, "outcome", json_string(outcome));
    json_array_append_new(atts, o);
  }
  int r = rc == SQLITE_DONE ? 0 : gw_store_db_err(s, "read attempts");
  sqlite3_bind_int64(c, 1, job);
  char key[256];
  while (r == 0 && (rc = sqlite3_step(c)) == SQLITE_ROW) {
    col_text(c, 2, key, sizeof key);
    json_array_append_new(cks, json_pack("{s:i,s:I,s:s,s:I,s:I,s:I,s:I}", "attempt",
                                         sqlite3_column_int(c, 0), "step",
                                         (json_int_t)sqlite3_column_int64(c, 1), "key", key,
                                         "bytes", (json_int_t)sqlite3_column_int64(c, 3),
                                         "write_ms", (json_int_t)sqlite3_column_int64(c, 4),
                                         "upload_ms", (json_int_t)sqlite3_column_int64(c, 5),
                                         "time_us", (json_int_t)sqlite3_column_int64(c, 6)));
  }
  if (r == 0 && rc != SQLITE_DONE)
    r = gw_store_db_err(s, "read checkpoints");
  sqlite3_finalize(a);
  sqlite3_finalize(c);
  if (r < 0) {
    json_decref(atts);
    json_decref(cks);
    return r;
  }
  *ret_attempts = atts;
  *ret_checkpoints = cks;
  return 0;
}
