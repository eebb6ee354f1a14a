/* What the scheduler learned (store.h): one row per memory, its body a
 * JSON object that the memory's own code writes and reads back. */
#include "store_int.h"

#include <stdlib.h>

int gw_store_learned_put(struct gw_store *s, const char *name, const json_t *body, int64_t time_us) {
  char *text = json_is_object(body) ? json_dumps(body, JSON_COMPACT) : NULL;
  if (!text)
    return json_is_object(body) ? -ENOMEM : SL_ETYPE;
  sqlite3_stmt *st = prep(s, "INSERT OR REPLACE INTO learned(name, body, time_us) VALUES(?,?,?)");
  if (st) {
    bind_text(st, 1, name);
    bind_text(st, 2, text);
    sqlite3_bind_int64(st, 3, time_us);
  }
  free(text);
  return run(s, st);
}

int gw_store_learned_get(struct gw_store *s, const char *name, json_t **ret) {
  *ret = NULL;
  sqlite3_stmt *st = prep(s, "SELECT body FROM learned WHERE name=?");
  if (!st)
    return SL_ESQLITE;
  bind_text(st, 1, name);
  int rc = sqlite3_step(st);
  json_t *body = rc == SQLITE_ROW ? parse_text(st, 0) : NULL;
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE)
    return gw_store_db_err(s, "learned");
  if (rc == SQLITE_ROW && !json_is_object(body)) {
    json_decref(body);
    return SL_EPARSE;
  }
  *ret = body;
  return 0;
}
