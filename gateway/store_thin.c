/* Bounds on what a long job leaves in the events table (store.h): its step
 * metrics thinned, the middle of its output left out. */
#include "store_int.h"

#include "sl_file.h"

#include <stdio.h>

/* The older metrics that thinning may drop: a plain step metric (JSON, an
 * integer step, no evaluation, no restore timings). ?1 the job, ?2 the
 * first seq kept whole. */
#define THIN_OLD                                                                              \
  " FROM events WHERE job=?1 AND kind='metric' AND seq<?2 AND json_valid(body)"              \
  " AND json_type(body, '$.step')='integer' AND json_type(body, '$.eval_loss') IS NULL"      \
  " AND json_type(body, '$.restore_ms') IS NULL"

int gw_store_thin_metrics(struct gw_store *s, int64_t job, int64_t keep_whole, int64_t keep_old,
                          int64_t *ret_deleted, int64_t *ret_stride) {
  *ret_deleted = *ret_stride = 0;
  if (keep_whole < 0 || keep_old < 1)
    return -EINVAL;
  int r = begin(s);
  if (r < 0)
    return r;
  sqlite3_stmt *st = prep(s, "SELECT seq FROM events WHERE job=?1 AND kind='metric'"
                             " ORDER BY seq DESC LIMIT 1 OFFSET ?2");
  if (!st)
    return rollback(s, SL_ESQLITE);
  sqlite3_bind_int64(st, 1, job);
  sqlite3_bind_int64(st, 2, keep_whole > 0 ? keep_whole - 1 : 0);
  int rc = sqlite3_step(st);
  int64_t first_whole = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW) /* fewer than keep_whole: nothing older */
    return rollback(s, rc == SQLITE_DONE ? 0 : SL_ESQLITE);
  if (keep_whole == 0)
    first_whole++; /* every metric is older */
  st = prep(s, "SELECT COUNT(*), MIN(json_extract(body, '$.step')), MAX(json_extract(body, '$.step'))" THIN_OLD);
  if (!st)
    return rollback(s, SL_ESQLITE);
  sqlite3_bind_int64(st, 1, job);
  sqlite3_bind_int64(st, 2, first_whole);
  int64_t n = 0, lo = 0, hi = 0;
  if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    n = sqlite3_column_int64(st, 0);
    lo = sqlite3_column_int64(st, 1);
    hi = sqlite3_column_int64(st, 2);
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW)
    return rollback(s, SL_ESQLITE);
  if (n <= keep_old)
    return rollback(s, 0);
  int64_t stride = 1;
  while (stride < INT64_MAX / 2 && (hi - lo) / stride + 1 > keep_old)
    stride *= 2;
  st = prep(s, "DELETE" THIN_OLD " AND seq NOT IN (SELECT MAX(seq)" THIN_OLD
               " GROUP BY json_extract(body, '$.step') / ?3)");
  if (st) {
    sqlite3_bind_int64(st, 1, job);
    sqlite3_bind_int64(st, 2, first_whole);
    sqlite3_bind_int64(st, 3, stride);
  }
  if ((r = run(s, st)) < 0)
    return rollback(s, r);
  int64_t deleted = sqlite3_changes(s->db);
  if (commit(s) < 0)
    return rollback(s, SL_ESQLITE);
  *ret_deleted = deleted;
  *ret_stride = stride;
  return 0;
}

/* A job's output events after ?2 (the head's last seq) but the marker. */
#define OUT_AFTER_HEAD                                                                        \
  " FROM events WHERE job=?1 AND kind='output' AND seq>?2 AND json_valid(body)"              \
  " AND json_type(body, '$.elided_lines') IS NULL"

/* seq of the job's n-th output event (1-based) into *ret; 0 when fewer. */
static int nth_output(struct gw_store *s, int64_t job, int64_t n, int64_t *ret) {
  sqlite3_stmt *st = prep(s, "SELECT seq FROM events WHERE job=?1 AND kind='output'"
                             " ORDER BY seq LIMIT 1 OFFSET ?2");
  if (!st)
    return SL_ESQLITE;
  sqlite3_bind_int64(st, 1, job);
  sqlite3_bind_int64(st, 2, n - 1);
  int rc = sqlite3_step(st);
  *ret = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
  sqlite3_finalize(st);
  return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : SL_ESQLITE;
}

int gw_store_trim_output(struct gw_store *s, int64_t job, int64_t keep_head, int64_t keep_tail,
                         int64_t tail_bytes, int64_t *ret_deleted) {
  *ret_deleted = 0;
  if (keep_head < 1 || keep_tail < 1 || tail_bytes < 1)
    return -EINVAL;
  int r = begin(s);
  if (r < 0)
    return r;
  int64_t head_end = 0;
  if ((r = nth_output(s, job, keep_head, &head_end)) < 0 || !head_end)
    return rollback(s, r);
  /* the tail: the newest output events, at most keep_tail of them and
   * tail_bytes of text (the newest one always); tail_start its oldest seq */
  sqlite3_stmt *st = prep(s, "SELECT MIN(seq) FROM (SELECT seq,"
                             " COUNT(*) OVER w AS n, SUM(length(CAST(json_extract(body, '$.text') AS BLOB))) OVER w AS b"
                             OUT_AFTER_HEAD " WINDOW w AS (ORDER BY seq DESC ROWS UNBOUNDED PRECEDING))"
                             " WHERE n=1 OR (n<=?3 AND b<=?4)");
  if (!st)
    return rollback(s, SL_ESQLITE);
  sqlite3_bind_int64(st, 1, job);
  sqlite3_bind_int64(st, 2, head_end);
  sqlite3_bind_int64(st, 3, keep_tail);
  sqlite3_bind_int64(st, 4, tail_bytes);
  int rc = sqlite3_step(st);
  int64_t tail_start = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW)
    return rollback(s, SL_ESQLITE);
  /* what falls between, and the marker left by an earlier trim */
  st = prep(s, "SELECT COUNT(*), COALESCE(SUM(length(CAST(json_extract(body, '$.text') AS BLOB))), 0), MIN(seq)"
               OUT_AFTER_HEAD " AND seq<?3");
  if (!st)
    return rollback(s, SL_ESQLITE);
  sqlite3_bind_int64(st, 1, job);
  sqlite3_bind_int64(st, 2, head_end);
  sqlite3_bind_int64(st, 3, tail_start);
  int64_t n = 0, bytes = 0, first = 0;
  if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    n = sqlite3_column_int64(st, 0);
    bytes = sqlite3_column_int64(st, 1);
    first = sqlite3_column_int64(st, 2);
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW)
    return rollback(s, SL_ESQLITE);
  if (n == 0)
    return rollback(s, 0);
  st = prep(s, "SELECT seq, json_extract(body, '$.elided_lines'), json_extract(body, '$.elided_bytes')"
               " FROM events WHERE job=?1 AND kind='output' AND seq>?2 AND json_valid(body)"
               " AND json_type(body, '$.elided_lines')='integer' ORDER BY seq LIMIT 1");
  if (!st)
    return rollback(s, SL_ESQLITE);
  sqlite3_bind_int64(st, 1, job);
  sqlite3_bind_int64(st, 2, head_end);
  int64_t marker = 0, lines = n, total = bytes, deleted = n;
  if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    marker = sqlite3_column_int64(st, 0);
    lines += sqlite3_column_int64(st, 1);
    total += sqlite3_column_int64(st, 2);
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE)
    return rollback(s, SL_ESQLITE);
  if (!marker) { /* the first line left out becomes the marker, where the gap is */
    marker = first;
    deleted--;
  }
  char text[300], size[32], cap[32];
  snprintf(text, sizeof text,
           "[spotlab: %lld line%s of output (%s) left out here; the gateway keeps a job's first "
           "%lld lines and its last %lld (%s at most)]",
           (long long)lines, lines == 1 ? "" : "s", sl_file_size_text(total, size, sizeof size),
           (long long)keep_head, (long long)keep_tail, sl_file_size_text(tail_bytes, cap, sizeof cap));
  st = prep(s, "UPDATE events SET body=json_set(json_remove(body, '$.rank'), '$.stream', 'stderr',"
               " '$.text', ?3, '$.elided_lines', ?4, '$.elided_bytes', ?5) WHERE job=?1 AND seq=?2");
  if (st) {
    sqlite3_bind_int64(st, 1, job);
    sqlite3_bind_int64(st, 2, marker);
    bind_text(st, 3, text);
    sqlite3_bind_int64(st, 4, lines);
    sqlite3_bind_int64(st, 5, total);
  }
  if ((r = run(s, st)) < 0)
    return rollback(s, r);
  st = prep(s, "DELETE" OUT_AFTER_HEAD " AND seq<?3 AND seq<>?4");
  if (st) {
    sqlite3_bind_int64(st, 1, job);
    sqlite3_bind_int64(st, 2, head_end);
    sqlite3_bind_int64(st, 3, tail_start);
    sqlite3_bind_int64(st, 4, marker);
  }
  if ((r = run(s, st)) < 0)
    return rollback(s, r);
  if (commit(s) < 0)
    return rollback(s, SL_ESQLITE);
  *ret_deleted = deleted;
  return 0;
}
