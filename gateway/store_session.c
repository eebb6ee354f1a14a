/* The store's sessions: a notebook session's last activity, its
 * variables, its model and data definitions and the models its train jobs
 * made (the newest checkpoint of each). */
#include "store_int.h"

#include "sl_time.h"

#include <errno.h>
#include <stdlib.h>

#define T GW_STORE_TOPIC

/* Runs the n statements sql, each with the texts a, b and c as ?1, ?2 and
 * ?3, until one fails. */
static int run_each(struct gw_store *s, const char *const *sql, size_t n, const char *a, const char *b,
                    const char *c) {
  for (size_t i = 0; i < n; i++) {
    sqlite3_stmt *st = prep(s, sql[i]);
    if (st) {
      bind_text(st, 1, a);
      bind_text(st, 2, b);
      bind_text(st, 3, c);
    }
    int r = run(s, st);
    if (r < 0)
      return r;
  }
  return 0;
}

int gw_store_session_touch(struct gw_store *s, const char *user, const char *session,
                           int64_t now_us) {
  sqlite3_stmt *st = prep(s, "INSERT INTO sessions(user, name, last_active_us) VALUES(?,?,?)"
                             " ON CONFLICT DO UPDATE SET last_active_us=excluded.last_active_us");
  if (st) {
    bind_text(st, 1, user);
    bind_text(st, 2, session);
    sqlite3_bind_int64(st, 3, now_us);
  }
  return run(s, st);
}

int gw_store_session_get(struct gw_store *s, const char *user, const char *session,
                         json_t **ret) {
  json_t *vars = json_object(), *defs = json_array(), *models = json_object();
  sqlite3_stmt *a = prep(s, "SELECT name, value FROM session_vars WHERE user=? AND session=?"
                            " ORDER BY name");
  sqlite3_stmt *b = prep(s, "SELECT name, kind, spec FROM session_defs WHERE user=? AND"
                            " session=? ORDER BY rowid");
  sqlite3_stmt *c = prep(s, "SELECT name, job, step, checkpoint FROM session_models WHERE"
                            " user=? AND session=?");
  int r = SL_ESQLITE;
  if (!a || !b || !c)
    goto out;
  sqlite3_stmt *all[] = {a, b, c};
  for (int i = 0; i < 3; i++) {
    bind_text(all[i], 1, user);
    bind_text(all[i], 2, session);
  }
  /* a row that cannot be given (a name or text that is not UTF-8, in a
   * damaged store) is left out and counted; a read that fails half way is
   * an error, not a session with part of its names */
  int rc, skipped = 0;
  while ((rc = sqlite3_step(a)) == SQLITE_ROW)
    skipped += json_object_set_new(vars, (const char *)sqlite3_column_text(a, 0), parse_text(a, 1)) < 0;
  if (rc != SQLITE_DONE) {
    r = gw_store_db_err(s, "read session variables");
    goto out;
  }
  while ((rc = sqlite3_step(b)) == SQLITE_ROW) {
    json_t *def = json_pack("{s:s,s:s,s:o}", "name", sqlite3_column_text(b, 0), "kind",
                            sqlite3_column_text(b, 1), "spec", parse_text(b, 2));
    skipped += json_array_append_new(defs, def) < 0;
  }
  if (rc != SQLITE_DONE) {
    r = gw_store_db_err(s, "read session definitions");
    goto out;
  }
  while ((rc = sqlite3_step(c)) == SQLITE_ROW) {
    char job[16];
    json_t *m = json_pack("{s:s,s:I,s:s}", "job", gw_job_id_str(sqlite3_column_int64(c, 1), job, sizeof job),
                          "step", (json_int_t)sqlite3_column_int64(c, 2), "checkpoint",
                          sqlite3_column_text(c, 3) ? (const char *)sqlite3_column_text(c, 3) : "");
    skipped += json_object_set_new(models, (const char *)sqlite3_column_text(c, 0), m) < 0;
  }
  if (rc != SQLITE_DONE) {
    r = gw_store_db_err(s, "read session models");
    goto out;
  }
  if (skipped)
    sl_warn(T, "session %s/%s: %d stored names left out (not UTF-8 text)", user, session, skipped);
  *ret = json_pack("{s:O,s:O,s:O}", "vars", vars, "defs", defs, "models", models);
  r = *ret ? 0 : -ENOMEM;
out:
  sqlite3_finalize(a);
  sqlite3_finalize(b);
  sqlite3_finalize(c);
  json_decref(vars);
  json_decref(defs);
  json_decref(models);
  return r;
}

static int put_var(struct gw_store *s, const char *user, const char *session, const char *name,
                   const json_t *value) {
  if (!json_is_object(value) || !json_is_string(json_object_get(value, "t")))
    return SL_ETYPE;
  char *text = sl_json_dump(value, NULL);
  if (!text)
    return -ENOMEM;
  sqlite3_stmt *st = prep(s, "INSERT OR REPLACE INTO session_vars VALUES(?,?,?,?)");
  if (st) {
    bind_text(st, 1, user);
    bind_text(st, 2, session);
    bind_text(st, 3, name);
    bind_text(st, 4, text);
  }
  free(text);
  return run(s, st);
}

static int forget_model(struct gw_store *s, const char *user, const char *session, const char *name) {
  sqlite3_stmt *st = prep(s, "DELETE FROM session_models WHERE user=? AND session=? AND name=?");
  if (st) {
    bind_text(st, 1, user);
    bind_text(st, 2, session);
    bind_text(st, 3, name);
  }
  return run(s, st);
}

/* Whether the session defines name as a model of exactly spec (-1: the read failed). */
static int model_def_is(struct gw_store *s, const char *user, const char *session, const char *name,
                        const json_t *spec) {
  json_t *old = NULL;
  int r = gw_store_session_def(s, user, session, name, "model", &old);
  if (r == SL_ENAME)
    return 0;
  if (r < 0)
    return -1;
  int same = json_equal(json_object_get(old, "spec"), (json_t *)spec);
  json_decref(old);
  return same;
}

static int put_def(struct gw_store *s, const char *user, const char *session, const json_t *def) {
  const char *name = sl_json_get_str(def, "name", NULL);
  const char *kind = sl_json_get_str(def, "kind", NULL);
  json_t *spec = json_object_get(def, "spec");
  if (!name || !*name || !kind || (strcmp(kind, "model") && strcmp(kind, "data")) ||
      !json_is_object(spec))
    return SL_ETYPE;
  /* a model defined anew (another architecture, or the name of something
   * else before) has not been trained: the checkpoints of the old one are
   * not its own. The same definition sent again keeps them. */
  int same = strcmp(kind, "model") ? 0 : model_def_is(s, user, session, name, spec);
  if (same < 0)
    return SL_ESQLITE;
  int r = same ? 0 : forget_model(s, user, session, name);
  if (r < 0)
    return r;
  char *text = sl_json_dump(spec, NULL);
  if (!text)
    return -ENOMEM;
  sqlite3_stmt *st = prep(s, "INSERT OR REPLACE INTO session_defs VALUES(?,?,?,?,?)");
  if (st) {
    bind_text(st, 1, user);
    bind_text(st, 2, session);
    bind_text(st, 3, name);
    bind_text(st, 4, kind);
    bind_text(st, 5, text);
  }
  free(text);
  return run(s, st);
}

static int delete_name(struct gw_store *s, const char *user, const char *session,
                       const char *name) {
  static const char *const sql[] = {
    "DELETE FROM session_vars WHERE user=?1 AND session=?2 AND name=?3",
    "DELETE FROM session_defs WHERE user=?1 AND session=?2 AND name=?3",
  };
  int r = run_each(s, sql, 2, user, session, name);
  return r < 0 ? r : forget_model(s, user, session, name);
}

/* The bytes the user's variables and definitions hold: of session, and of
 * all the user's sessions. */
static int held_bytes(struct gw_store *s, const char *user, const char *session, int64_t *ret_session,
                      int64_t *ret_user) {
  sqlite3_stmt *st = prep(s, "SELECT COALESCE(SUM(CASE WHEN session=?2 THEN n END), 0), COALESCE(SUM(n), 0) FROM"
                             " (SELECT session, length(CAST(name AS BLOB)) + length(CAST(value AS BLOB)) AS n"
                             " FROM session_vars WHERE user=?1 UNION ALL SELECT session,"
                             " length(CAST(name AS BLOB)) + length(CAST(spec AS BLOB)) FROM session_defs"
                             " WHERE user=?1)");
  if (!st)
    return SL_ESQLITE;
  bind_text(st, 1, user);
  bind_text(st, 2, session);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    *ret_session = sqlite3_column_int64(st, 0);
    *ret_user = sqlite3_column_int64(st, 1);
  }
  sqlite3_finalize(st);
  return rc == SQLITE_ROW ? 0 : gw_store_db_err(s, "measure a session");
}

static int check_size(struct gw_store *s, const char *user, const char *session) {
  int64_t in_session = 0, in_all = 0;
  int r = held_bytes(s, user, session, &in_session, &in_all);
  if (r < 0)
    return r;
  return in_session > GW_SESSION_BYTES_MAX ? SL_ELIMIT : in_all > GW_USER_SESSIONS_BYTES_MAX ? -EDQUOT : 0;
}

int gw_store_session_set(struct gw_store *s, const char *user, const char *session,
                         const json_t *vars, const json_t *defs, const json_t *del) {
  if ((vars && !json_is_object(vars)) || (defs && !json_is_array(defs)) ||
      (del && !json_is_array(del)))
    return SL_ETYPE;
  int r = begin(s);
  if (r < 0)
    return r;
  const char *name;
  json_t *v;
  size_t i;
  json_object_foreach((json_t *)vars, name, v) {
    if ((r = put_var(s, user, session, name, v)) < 0)
      return rollback(s, r);
  }
  json_array_foreach(defs, i, v) {
    if ((r = put_def(s, user, session, v)) < 0)
      return rollback(s, r);
  }
  json_array_foreach(del, i, v) {
    if (!json_is_string(v))
      return rollback(s, SL_ETYPE);
    if ((r = delete_name(s, user, session, json_string_value(v))) < 0)
      return rollback(s, r);
  }
  if ((json_object_size(vars) || json_array_size(defs)) && (r = check_size(s, user, session)) < 0)
    return rollback(s, r);
  return commit(s) < 0 ? rollback(s, SL_ESQLITE) : 0;
}

int gw_store_session_def(struct gw_store *s, const char *user, const char *session,
                         const char *name, const char *kind, json_t **ret) {
  sqlite3_stmt *st = prep(s, "SELECT spec FROM session_defs WHERE user=? AND session=? AND"
                             " name=? AND kind=?");
  if (!st)
    return SL_ESQLITE;
  bind_text(st, 1, user);
  bind_text(st, 2, session);
  bind_text(st, 3, name);
  bind_text(st, 4, kind);
  int r = SL_ENAME, rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    *ret = json_pack("{s:s,s:s,s:o}", "name", name, "kind", kind, "spec", parse_text(st, 0));
    r = *ret ? 0 : -ENOMEM;
  } else if (rc != SQLITE_DONE) {
    r = gw_store_db_err(s, "read a definition"); /* not "no such name" */
  }
  sqlite3_finalize(st);
  return r;
}

int gw_store_session_model_set(struct gw_store *s, const char *user, const char *session,
                               const char *model, int64_t job, int64_t step, const char *ckpt) {
  sqlite3_stmt *st = prep(s, "INSERT OR REPLACE INTO session_models VALUES(?,?,?,?,?,?)");
  if (st) {
    bind_text(st, 1, user);
    bind_text(st, 2, session);
    bind_text(st, 3, model);
    sqlite3_bind_int64(st, 4, job);
    sqlite3_bind_int64(st, 5, step);
    bind_text(st, 6, ckpt);
  }
  return run(s, st);
}

/* Whether user's session name holds anything a move carries: 1, 0, or an error. */
static int session_has_state(struct gw_store *s, const char *user, const char *name) {
  sqlite3_stmt *st = prep(s, "SELECT EXISTS(SELECT 1 FROM session_vars WHERE user=?1 AND session=?2)"
                             " OR EXISTS(SELECT 1 FROM session_defs WHERE user=?1 AND session=?2)"
                             " OR EXISTS(SELECT 1 FROM session_models WHERE user=?1 AND session=?2)"
                             " OR EXISTS(SELECT 1 FROM jobs WHERE user=?1 AND session=?2)");
  if (!st)
    return SL_ESQLITE;
  bind_text(st, 1, user);
  bind_text(st, 2, name);
  int rc = sqlite3_step(st), r = rc == SQLITE_ROW ? sqlite3_column_int(st, 0) != 0 : gw_store_db_err(s, "read a session");
  sqlite3_finalize(st);
  return r;
}

/* Every row of user's session from, renamed to. */
static int rename_rows(struct gw_store *s, const char *user, const char *from, const char *to) {
  static const char *const sql[] = {
    "DELETE FROM sessions WHERE user=?1 AND name=?3",
    "UPDATE sessions SET name=?3 WHERE user=?1 AND name=?2",
    "UPDATE session_vars SET session=?3 WHERE user=?1 AND session=?2",
    "UPDATE session_defs SET session=?3 WHERE user=?1 AND session=?2",
    "UPDATE session_models SET session=?3 WHERE user=?1 AND session=?2",
    "UPDATE jobs SET session=?3 WHERE user=?1 AND session=?2",
  };
  return run_each(s, sql, sizeof sql / sizeof *sql, user, from, to);
}

int gw_store_session_move(struct gw_store *s, const char *user, const char *from, const char *to,
                          const char *aside) {
  if (!strcmp(from, to))
    return 1;
  int r = begin(s);
  if (r < 0)
    return r;
  int has = session_has_state(s, user, from);
  if (has <= 0)
    return rollback(s, has < 0 ? has : 1);
  int taken = session_has_state(s, user, to);
  if (taken < 0)
    return rollback(s, taken);
  if (taken && (r = rename_rows(s, user, to, aside)) < 0)
    return rollback(s, r);
  if ((r = rename_rows(s, user, from, to)) < 0)
    return rollback(s, r);
  if (commit(s) < 0)
    return rollback(s, SL_ESQLITE);
  return taken ? 2 : 0;
}

/* The first column of st's rows (finalized here): owned ids into *ret. */
static int read_ids(struct gw_store *s, sqlite3_stmt *st, const char *what, int64_t **ret, size_t *ret_n) {
  *ret = NULL;
  *ret_n = 0;
  if (!st)
    return SL_ESQLITE;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t *grown = realloc(*ret, (*ret_n + 1) * sizeof *grown);
    if (!grown) {
      rc = SQLITE_NOMEM;
      break;
    }
    *ret = grown;
    (*ret)[(*ret_n)++] = sqlite3_column_int64(st, 0);
  }
  sqlite3_finalize(st);
  if (rc == SQLITE_DONE)
    return 0;
  free(*ret);
  *ret = NULL;
  *ret_n = 0;
  return rc == SQLITE_NOMEM ? -ENOMEM : gw_store_db_err(s, what);
}

int gw_store_session_delete(struct gw_store *s, const char *user, const char *session,
                            const char *aside, int64_t **ret_jobs, size_t *ret_n) {
  *ret_jobs = NULL;
  *ret_n = 0;
  int r = begin(s);
  if (r < 0)
    return r;
  int has = session_has_state(s, user, session);
  if (has <= 0)
    return rollback(s, has < 0 ? has : 1);
  /* its jobs whose objects nobody else names (a model of another session) */
  sqlite3_stmt *st = prep(s, "SELECT id FROM jobs WHERE user=?1 AND session=?2 AND id NOT IN"
                             " (SELECT job FROM session_models WHERE job IS NOT NULL AND"
                             "  NOT (user=?1 AND session=?2)) ORDER BY id");
  if (st) {
    bind_text(st, 1, user);
    bind_text(st, 2, session);
  }
  int64_t *jobs;
  size_t n;
  if ((r = read_ids(s, st, "read a session's jobs", &jobs, &n)) < 0)
    return rollback(s, r);
  static const char *const sql[] = {
    "DELETE FROM sessions WHERE user=?1 AND name=?2",
    "DELETE FROM session_vars WHERE user=?1 AND session=?2",
    "DELETE FROM session_defs WHERE user=?1 AND session=?2",
    "DELETE FROM session_models WHERE user=?1 AND session=?2",
    /* the jobs stay, for costs and run records, out of every notebook's way */
    "UPDATE jobs SET session=?3 WHERE user=?1 AND session=?2",
  };
  if ((r = run_each(s, sql, sizeof sql / sizeof *sql, user, session, aside)) < 0) {
    free(jobs);
    return rollback(s, r);
  }
  for (size_t i = 0; i < n; i++) { /* their checkpoints go with the objects */
    static const char *const each[] = {
      "DELETE FROM checkpoints WHERE job=?1",
      "UPDATE jobs SET ckpt_key=NULL, ckpt_step=0 WHERE id=?1",
      "INSERT OR IGNORE INTO purge(job, queued_us) VALUES(?1, ?2)",
    };
    for (size_t k = 0; k < 3 && r >= 0; k++) {
      sqlite3_stmt *d = prep(s, each[k]);
      if (d) {
        sqlite3_bind_int64(d, 1, jobs[i]);
        if (k == 2)
          sqlite3_bind_int64(d, 2, sl_time_real_us());
      }
      r = run(s, d);
    }
    if (r < 0) {
      free(jobs);
      return rollback(s, r);
    }
  }
  if (commit(s) < 0) {
    free(jobs);
    return rollback(s, SL_ESQLITE);
  }
  *ret_jobs = jobs;
  *ret_n = n;
  return 0;
}

int gw_store_purge_list(struct gw_store *s, int64_t **ret, size_t *ret_n) {
  return read_ids(s, prep(s, "SELECT job FROM purge ORDER BY queued_us, job"), "read the jobs to purge", ret,
                  ret_n);
}

int gw_store_purge_done(struct gw_store *s, const int64_t *jobs, size_t n) {
  int r = begin(s); /* one write for them all */
  for (size_t i = 0; r >= 0 && i < n; i++) {
    sqlite3_stmt *st = prep(s, "DELETE FROM purge WHERE job=?");
    if (st)
      sqlite3_bind_int64(st, 1, jobs[i]);
    r = run(s, st);
  }
  if (r >= 0 && commit(s) < 0)
    r = SL_ESQLITE;
  return r < 0 ? rollback(s, r) : 0;
}

int gw_store_sessions_list(struct gw_store *s, const char *user, size_t max, json_t **ret) {
  sqlite3_stmt *st = prep(s,
    /* every session a client named has its row (touched at hello, moved with it) */
    "SELECT * FROM (SELECT name, last_active_us,"
    " (SELECT COUNT(*) FROM session_vars v WHERE v.user=?1 AND v.session=x.name) AS nv,"
    " (SELECT COUNT(*) FROM session_defs d WHERE d.user=?1 AND d.session=x.name) AS nd,"
    " (SELECT COUNT(*) FROM session_models m WHERE m.user=?1 AND m.session=x.name) AS nm,"
    " (SELECT COUNT(*) FROM jobs j WHERE j.user=?1 AND j.session=x.name) AS nj"
    " FROM sessions x WHERE user=?1 AND name <> '')"
    " WHERE nv + nd + nm + nj > 0"  /* only seen: nothing to open */
    " ORDER BY last_active_us IS NULL, last_active_us DESC, name LIMIT ?2");
  if (!st)
    return SL_ESQLITE;
  bind_text(st, 1, user);
  sqlite3_bind_int64(st, 2, (sqlite3_int64)max);
  json_t *list = json_array();
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(st, 0);
    json_int_t vars = sqlite3_column_int64(st, 2), defs = sqlite3_column_int64(st, 3);
    json_int_t models = sqlite3_column_int64(st, 4), jobs = sqlite3_column_int64(st, 5);
    if (!name)
      continue;
    json_t *e = json_pack("{s:s, s:I, s:I, s:I, s:I}", "name", name, "vars", vars, "defs", defs, "models",
                          models, "jobs", jobs);
    if (e && sqlite3_column_type(st, 1) != SQLITE_NULL)
      json_object_set_new(e, "last_active_us", json_integer(sqlite3_column_int64(st, 1)));
    json_array_append_new(list, e); /* a name that is not UTF-8 (a damaged store): left out */
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    json_decref(list);
    return gw_store_db_err(s, "list sessions");
  }
  *ret = list;
  return 0;
}
