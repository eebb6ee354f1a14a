/* Multipart uploads that workers began in an S3 store (store.h): a row from
 * the first presign of one of its parts until its checkpoint is stored (in
 * gw_store_record_checkpoint) or the gateway's abort of it ended. */
#include "store_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One statement: the row goes in unless it is there already, or instance
 * has max rows; then whether it is there tells the two apart. */
int gw_store_multipart_seen(struct gw_store *s, const char *instance, const char *key,
                            const char *upload_id, int64_t now_us, int max) {
  sqlite3_stmt *st = prep(s, "INSERT OR IGNORE INTO multipart(upload_id, key, instance, seen_us)"
                             " SELECT ?1, ?2, ?3, ?4"
                             " WHERE (SELECT COUNT(*) FROM multipart WHERE instance=?3) < ?5");
  if (st) {
    bind_text(st, 1, upload_id);
    bind_text(st, 2, key);
    bind_text(st, 3, instance);
    sqlite3_bind_int64(st, 4, now_us);
    sqlite3_bind_int(st, 5, max);
  }
  int r = run(s, st);
  if (r < 0 || sqlite3_changes(s->db) > 0)
    return r;
  if (!(st = prep(s, "SELECT 1 FROM multipart WHERE upload_id=?")))
    return SL_ESQLITE;
  bind_text(st, 1, upload_id);
  int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  return rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? SL_ELIMIT : gw_store_db_err(s, "read a multipart upload");
}

int gw_store_multipart_list(struct gw_store *s, const char *instance, json_t **ret) {
  sqlite3_stmt *st = prep(s, instance ? "SELECT upload_id, key, instance FROM multipart WHERE instance=?1"
                                        " ORDER BY seen_us, upload_id"
                                      : "SELECT upload_id, key, instance FROM multipart"
                                        " ORDER BY seen_us, upload_id");
  if (!st)
    return SL_ESQLITE;
  if (instance)
    bind_text(st, 1, instance);
  json_t *arr = json_array();
  int rc = SQLITE_DONE;
  while (arr && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    json_t *row = json_pack("{s:s, s:s, s:s}", "upload_id", (const char *)sqlite3_column_text(st, 0),
                            "key", (const char *)sqlite3_column_text(st, 1), "instance",
                            (const char *)sqlite3_column_text(st, 2));
    if (!row || json_array_append_new(arr, row) < 0) {
      json_decref(arr);
      arr = NULL;
    }
  }
  int r = !arr ? -ENOMEM : rc == SQLITE_DONE ? 0 : gw_store_db_err(s, "read the multipart uploads");
  sqlite3_finalize(st);
  if (r < 0) {
    json_decref(arr);
    return r;
  }
  *ret = arr;
  return 0;
}

int gw_store_multipart_done(struct gw_store *s, const char *const *upload_ids, size_t n) {
  int r = begin(s); /* one write for them all */
  for (size_t i = 0; r >= 0 && i < n; i++) {
    sqlite3_stmt *st = prep(s, "DELETE FROM multipart WHERE upload_id=?");
    if (st)
      bind_text(st, 1, upload_ids[i]);
    r = run(s, st);
  }
  if (r >= 0 && commit(s) < 0)
    r = SL_ESQLITE;
  return r < 0 ? rollback(s, r) : 0;
}
