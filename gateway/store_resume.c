/* What a gateway started again reads back of the attempts it had running
 * (sched_load.c): the newest step metric and output line recorded, the
 * notices heard of their instances, and what each job was charged so far
 * and up to when. Reads of the events and cost tables, one job at a time. */
#include "store_int.h"

int gw_store_attempt_metric_step(struct gw_store *s, int64_t job, int64_t *ret_step) {
  /* a body that is not JSON (a damaged row) has no step */
  sqlite3_stmt *st = prep(s, "SELECT MAX(CASE WHEN json_valid(body) THEN"
                             " json_extract(body, '$.step') END) FROM events WHERE job=?1"
                             " AND kind='metric' AND seq > COALESCE((SELECT MAX(seq) FROM events"
                             " WHERE job=?1 AND kind='placed'), 0)");
  if (!st)
    return SL_ESQLITE;
  sqlite3_bind_int64(st, 1, job);
  int r = sqlite3_step(st);
  int64_t step = -1;
  if (r == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_INTEGER)
    step = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  if (r != SQLITE_ROW)
    return SL_ESQLITE;
  *ret_step = step;
  return 0;
}

int gw_store_attempt_output_seq(struct gw_store *s, int64_t job, int64_t *ret_seq) {
  sqlite3_stmt *st = prep(s, "SELECT MAX(CASE WHEN json_valid(body) THEN CASE WHEN"
                             " json_extract(body, '$.rank') IS NULL THEN json_extract(body, '$.oseq') END END)"
                             " FROM events WHERE job=?1 AND kind='output' AND seq > COALESCE((SELECT MAX(seq)"
                             " FROM events WHERE job=?1 AND kind='placed'), 0)");
  if (!st)
    return SL_ESQLITE;
  sqlite3_bind_int64(st, 1, job);
  int r = sqlite3_step(st);
  int64_t seq = 0;
  if (r == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_INTEGER)
    seq = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  if (r != SQLITE_ROW)
    return SL_ESQLITE;
  *ret_seq = seq > 0 ? seq : 0;
  return 0;
}

int gw_store_instance_noticed(struct gw_store *s, int64_t job, const char *instance,
                              bool *ret_leaving, bool *ret_at_risk) {
  /* a notice without "leaving" is one its jobs leave for; a body that is
   * not JSON (a damaged row) says nothing */
  sqlite3_stmt *st = prep(s, "SELECT COALESCE(MAX(l = 1), 0), COALESCE(MAX(l = 0), 0) FROM"
                             " (SELECT COALESCE(json_extract(body, '$.leaving'), 1) AS l FROM events"
                             " WHERE job=?1 AND kind='notice' AND json_valid(body)"
                             " AND (CASE WHEN json_valid(body) THEN json_extract(body, '$.instance') END)=?2)");
  if (!st)
    return SL_ESQLITE;
  sqlite3_bind_int64(st, 1, job);
  sqlite3_bind_text(st, 2, instance, -1, SQLITE_TRANSIENT);
  int r = sqlite3_step(st);
  if (r == SQLITE_ROW) {
    *ret_leaving = sqlite3_column_int(st, 0) != 0;
    *ret_at_risk = sqlite3_column_int(st, 1) != 0;
  }
  sqlite3_finalize(st);
  return r == SQLITE_ROW ? 0 : gw_store_db_err(s, "read a job's notices");
}

int gw_store_cost_of_job(struct gw_store *s, int64_t job, double *ret_usd, double *ret_on_demand_usd) {
  sqlite3_stmt *st = prep(s, "SELECT COALESCE(SUM(usd), 0), COALESCE(SUM(on_demand_usd), 0) FROM cost WHERE job=?1");
  if (!st)
    return SL_ESQLITE;
  sqlite3_bind_int64(st, 1, job);
  int r = sqlite3_step(st);
  if (r == SQLITE_ROW) {
    *ret_usd = sqlite3_column_double(st, 0);
    *ret_on_demand_usd = sqlite3_column_double(st, 1);
  }
  sqlite3_finalize(st);
  return r == SQLITE_ROW ? 0 : gw_store_db_err(s, "read the cost of a job");
}

int gw_store_cost_accrued_until(struct gw_store *s, int64_t job, int attempt, int64_t *ret_us) {
  sqlite3_stmt *st = prep(s, "SELECT COALESCE((SELECT updated_us FROM cost WHERE job=?1 AND attempt=?2),"
                             " (SELECT started_us FROM attempts WHERE job=?1 AND attempt=?2), 0)");
  if (!st)
    return SL_ESQLITE;
  sqlite3_bind_int64(st, 1, job);
  sqlite3_bind_int(st, 2, attempt);
  int r = sqlite3_step(st);
  *ret_us = r == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
  sqlite3_finalize(st);
  return r == SQLITE_ROW ? 0 : gw_store_db_err(s, "read the cost of an attempt");
}
