/* Notebooks' stored data files (store.h): one row per user and content, from
 * the submits that named it, with the jobs that used it counted from their
 * specs. */
#include "store_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A row marked for deletion that a submit names again is stored content
 * again: uploaded anew after its deletion ended (the loop's forget then
 * leaves it), or never deleted, its deletion not yet started (which then
 * does not start). */
int gw_store_upload_seen(struct gw_store *s, const char *user, const char *sha256, int64_t bytes,
                         const char *path, int64_t now_us) {
  sqlite3_stmt *st = prep(s, "INSERT INTO uploads(user, sha256, bytes, path, first_us, last_us)"
                             " VALUES(?1, ?2, ?3, ?4, ?5, ?5) ON CONFLICT(user, sha256) DO UPDATE"
                             " SET path=excluded.path, last_us=excluded.last_us, deleting=0");
  if (st) {
    bind_text(st, 1, user);
    bind_text(st, 2, sha256);
    sqlite3_bind_int64(st, 3, bytes);
    bind_text(st, 4, path);
    sqlite3_bind_int64(st, 5, now_us);
  }
  return run(s, st);
}

int gw_store_upload_stored(struct gw_store *s, const char *user, const char *sha256, int64_t bytes,
                           int64_t now_us) {
  sqlite3_stmt *st = prep(s, "INSERT OR IGNORE INTO uploads(user, sha256, bytes, path, first_us, last_us)"
                             " VALUES(?1, ?2, ?3, '', ?4, ?4)");
  if (st) {
    bind_text(st, 1, user);
    bind_text(st, 2, sha256);
    sqlite3_bind_int64(st, 3, bytes);
    sqlite3_bind_int64(st, 4, now_us);
  }
  return run(s, st);
}

/* The jobs of user ?1 (NULL: every user) that named a stored file: (id,
 * user, state, sha), one row per file (a data set's files each); a spec
 * that is not JSON names none. */
#define DATA_REFS                                                                                  \
  "WITH specs(id, user, state, spec) AS (SELECT id, user, state,"                                 \
  "  CASE WHEN json_valid(spec) THEN spec ELSE '{}' END FROM jobs WHERE ?1 IS NULL OR user=?1),"   \
  " refs(id, user, state, sha) AS ("                                                               \
  " SELECT id, user, state, json_extract(spec, '$.data_upload.sha256') FROM specs"                 \
  "  WHERE json_type(spec, '$.data_upload.key')='text'"                                           \
  " UNION ALL SELECT specs.id, specs.user, specs.state, json_extract(f.value, '$.sha256')"         \
  "  FROM specs, json_each(specs.spec, '$.data_upload.files') AS f)"

int gw_store_uploads_list(struct gw_store *s, const char *user, json_t **ret) {
  sqlite3_stmt *st = prep(s, DATA_REFS
                          " SELECT u.sha256, u.bytes, u.path, u.first_us, u.last_us, u.deleting,"
                          "  COUNT(r.id), COALESCE(SUM(r.state NOT IN ('succeeded', 'failed', 'cancelled')), 0),"
                          "  MAX(r.id), u.user"
                          " FROM uploads AS u LEFT JOIN refs AS r ON r.sha=u.sha256 AND r.user=u.user"
                          " WHERE ?1 IS NULL OR u.user=?1 GROUP BY u.user, u.sha256"
                          " ORDER BY u.last_us DESC, u.user, u.sha256");
  if (!st)
    return SL_ESQLITE;
  if (user)
    bind_text(st, 1, user);
  json_t *list = json_array();
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *path = (const char *)sqlite3_column_text(st, 2);
    json_t *row = json_pack("{s:s, s:I, s:s, s:I, s:I, s:b, s:I, s:I}", "sha256",
                            (const char *)sqlite3_column_text(st, 0), "bytes",
                            (json_int_t)sqlite3_column_int64(st, 1), "path", path ? path : "", "first_us",
                            (json_int_t)sqlite3_column_int64(st, 3), "last_us",
                            (json_int_t)sqlite3_column_int64(st, 4), "deleting", sqlite3_column_int(st, 5),
                            "jobs", (json_int_t)sqlite3_column_int64(st, 6), "live_jobs",
                            (json_int_t)sqlite3_column_int64(st, 7));
    if (row && sqlite3_column_type(st, 8) == SQLITE_INTEGER) {
      char id[16];
      json_object_set_new(row, "last_job", json_string(gw_job_id_str(sqlite3_column_int64(st, 8), id, sizeof id)));
    }
    if (row && !user)
      json_object_set_new(row, "user", json_string((const char *)sqlite3_column_text(st, 9)));
    json_array_append_new(list, row);
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    json_decref(list);
    return gw_store_db_err(s, "read the stored data files");
  }
  *ret = list;
  return 0;
}

int gw_store_upload_find(struct gw_store *s, const char *user, const char *prefix,
                         struct gw_store_upload *ret) {
  size_t n = strlen(prefix);
  if (n < 6 || n > 64 || strspn(prefix, "0123456789abcdef") != n)
    return SL_ETYPE;
  sqlite3_stmt *st = prep(s, "SELECT sha256, bytes, path, deleting FROM uploads"
                             " WHERE user=?1 AND substr(sha256, 1, ?3)=?2 ORDER BY sha256 LIMIT 2");
  if (!st)
    return SL_ESQLITE;
  bind_text(st, 1, user);
  bind_text(st, 2, prefix);
  sqlite3_bind_int64(st, 3, (sqlite3_int64)n);
  int found = 0, rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW && ++found == 1) {
    col_text(st, 0, ret->sha256, sizeof ret->sha256);
    ret->bytes = sqlite3_column_int64(st, 1);
    col_text(st, 2, ret->path, sizeof ret->path);
    ret->deleting = sqlite3_column_int(st, 3) != 0;
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE && rc != SQLITE_ROW)
    return gw_store_db_err(s, "read the stored data files");
  return found == 0 ? SL_ENAME : found > 1 ? SL_EMISMATCH : 0;
}

int gw_store_uploads_unknown(struct gw_store *s, const json_t *shas, json_t **ret) {
  *ret = NULL;
  char *list = json_dumps(shas, JSON_COMPACT);
  sqlite3_stmt *st = list ? prep(s, "SELECT j.value FROM json_each(?1) AS j WHERE j.type='text' AND NOT EXISTS"
                                    " (SELECT 1 FROM uploads WHERE sha256=j.value AND deleting=0) ORDER BY j.key")
                          : NULL;
  if (!st) {
    free(list);
    return list ? SL_ESQLITE : -ENOMEM;
  }
  bind_text(st, 1, list);
  json_t *out = json_array();
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    json_array_append_new(out, json_string((const char *)sqlite3_column_text(st, 0)));
  sqlite3_finalize(st);
  free(list);
  if (rc != SQLITE_DONE) {
    json_decref(out);
    return gw_store_db_err(s, "read the stored data files");
  }
  *ret = out;
  return 0;
}

int gw_store_upload_deleting(struct gw_store *s, const char *user, const char *sha256, bool deleting) {
  sqlite3_stmt *st = prep(s, "UPDATE uploads SET deleting=?3 WHERE user=?1 AND sha256=?2");
  if (st) {
    bind_text(st, 1, user);
    bind_text(st, 2, sha256);
    sqlite3_bind_int(st, 3, deleting);
  }
  return run(s, st);
}

int gw_store_upload_forget(struct gw_store *s, const char *user, const char *sha256) {
  sqlite3_stmt *st = prep(s, "DELETE FROM uploads WHERE user=?1 AND sha256=?2 AND deleting=1");
  if (st) {
    bind_text(st, 1, user);
    bind_text(st, 2, sha256);
  }
  return run(s, st);
}

/* The rows of a prepared st as objects whose keys are names (n of them):
 * text and integer columns as such. */
static int rows_of(struct gw_store *s, sqlite3_stmt *st, const char *const *names, int n, json_t **ret) {
  if (!st)
    return SL_ESQLITE;
  json_t *list = json_array();
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    json_t *row = json_object();
    for (int i = 0; i < n; i++)
      json_object_set_new(row, names[i],
                          sqlite3_column_type(st, i) == SQLITE_INTEGER
                              ? json_integer((json_int_t)sqlite3_column_int64(st, i))
                              : json_string((const char *)sqlite3_column_text(st, i)));
    json_array_append_new(list, row);
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    json_decref(list);
    return gw_store_db_err(s, "read the stored data files");
  }
  *ret = list;
  return 0;
}

int gw_store_uploads_deleting(struct gw_store *s, json_t **ret) {
  static const char *const names[] = {"user", "sha256", "bytes"};
  return rows_of(s, prep(s, "SELECT user, sha256, bytes FROM uploads WHERE deleting=1 ORDER BY user, sha256"),
                 names, 3, ret);
}

int gw_store_uploads_by_user(struct gw_store *s, const char *user, json_t **ret) {
  static const char *const names[] = {"user", "files", "bytes"};
  sqlite3_stmt *st = prep(s, "SELECT user, COUNT(*), SUM(bytes) FROM uploads WHERE ?1 IS NULL OR user=?1"
                             " GROUP BY user ORDER BY SUM(bytes) DESC, user");
  if (st && user)
    bind_text(st, 1, user);
  return rows_of(s, st, names, 3, ret);
}
