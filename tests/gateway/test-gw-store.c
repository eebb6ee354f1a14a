/* The store: migrations from an empty and from a version-1 database, job
 * transitions with their events, gapless event numbers under concurrent
 * appends from several handles, sessions and cost totals, event bodies
 * that are not JSON, and reads that fail half way. */
#include "harness.h"
#include "sl_err.h"
#include "sl_json.h"
#include "store.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/test-gw-store-XXXXXX";

static void path_of(const char *name, char *buf, size_t size) {
  snprintf(buf, size, "%s/%s", dir, name);
}

/* The version-1 schema as a gateway of that version wrote it, with data. */
static const char v1_sql[] =
  "CREATE TABLE schema_version(version INTEGER NOT NULL); INSERT INTO schema_version VALUES(1);"
  "CREATE TABLE users(name TEXT PRIMARY KEY, token_sha256 TEXT NOT NULL UNIQUE, grp TEXT);"
  "CREATE TABLE sessions(user TEXT NOT NULL, name TEXT NOT NULL, last_active_us INTEGER,"
  "  PRIMARY KEY(user, name));"
  "CREATE TABLE session_vars(user TEXT NOT NULL, session TEXT NOT NULL, name TEXT NOT NULL,"
  "  value TEXT NOT NULL, PRIMARY KEY(user, session, name));"
  "CREATE TABLE session_defs(user TEXT NOT NULL, session TEXT NOT NULL, name TEXT NOT NULL,"
  "  kind TEXT NOT NULL, spec TEXT NOT NULL, PRIMARY KEY(user, session, name));"
  "CREATE TABLE jobs(id INTEGER PRIMARY KEY AUTOINCREMENT, user TEXT NOT NULL,"
  "  session TEXT NOT NULL, kind TEXT NOT NULL, model TEXT, data TEXT, spec TEXT,"
  "  state TEXT NOT NULL, reason TEXT, step INTEGER DEFAULT 0, steps INTEGER DEFAULT 0,"
  "  attempt INTEGER DEFAULT 0, instance TEXT, instance_type TEXT, zone TEXT,"
  "  spot INTEGER DEFAULT 0, price REAL DEFAULT 0, on_demand_price REAL DEFAULT 0,"
  "  created_us INTEGER, updated_us INTEGER, last_seq INTEGER NOT NULL DEFAULT 0,"
  "  ckpt_key TEXT, ckpt_step INTEGER DEFAULT 0, cancel_requested INTEGER DEFAULT 0);"
  "CREATE INDEX jobs_user ON jobs(user, state);"
  "CREATE TABLE events(job INTEGER NOT NULL, seq INTEGER NOT NULL, time_us INTEGER NOT NULL,"
  "  kind TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY(job, seq));"
  "CREATE TABLE attempts(job INTEGER NOT NULL, attempt INTEGER NOT NULL, instance TEXT,"
  "  instance_type TEXT, zone TEXT, spot INTEGER, price REAL, on_demand_price REAL,"
  "  from_step INTEGER, started_us INTEGER, ended_us INTEGER, outcome TEXT,"
  "  PRIMARY KEY(job, attempt));"
  "CREATE TABLE instances(id TEXT PRIMARY KEY, type TEXT, zone TEXT, spot INTEGER,"
  "  price REAL, on_demand_price REAL, public_key TEXT NOT NULL, state TEXT NOT NULL,"
  "  job INTEGER, user TEXT, launched_us INTEGER);"
  "CREATE TABLE checkpoints(job INTEGER NOT NULL, attempt INTEGER, step INTEGER NOT NULL,"
  "  key TEXT NOT NULL, bytes INTEGER, write_ms INTEGER, upload_ms INTEGER, time_us INTEGER,"
  "  PRIMARY KEY(job, step));"
  "INSERT INTO users VALUES('alice', 'aaaa', 'research');"
  "INSERT INTO jobs(id, user, session, kind, model, data, spec, state, step, steps, attempt,"
  "  last_seq, ckpt_key, ckpt_step) VALUES(7, 'alice', 'nb', 'train', 'm', 'd', '{}',"
  "  'running', 40, 100, 1, 2, 'J000007/ckpt-00000040.tc', 40);"
  "INSERT INTO events VALUES(7, 1, 1, 'state', '{\"event\":\"state\",\"state\":\"queued\"}');"
  "INSERT INTO events VALUES(7, 2, 2, 'state', '{\"event\":\"state\",\"state\":\"running\"}');";

static void test_migrations(void) {
  char path[256], err[256] = "";
  struct gw_store *s = NULL;
  path_of("empty.db", path, sizeof path);
  CHECK_INT(gw_store_open(path, &s, err, sizeof err), 0);
  CHECK_INT(gw_store_schema_version(s), GW_STORE_SCHEMA_VERSION);
  s = gw_store_free(s);
  /* opening again is a no-op */
  CHECK_INT(gw_store_open(path, &s, err, sizeof err), 0);
  CHECK_INT(gw_store_schema_version(s), GW_STORE_SCHEMA_VERSION);
  s = gw_store_free(s);

  path_of("v1.db", path, sizeof path);
  sqlite3 *db;
  CHECK_INT(sqlite3_open(path, &db), SQLITE_OK);
  CHECK_INT(sqlite3_exec(db, v1_sql, NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
  CHECK_INT(gw_store_open(path, &s, err, sizeof err), 0);
  CHECK_INT(gw_store_schema_version(s), GW_STORE_SCHEMA_VERSION);
  char user[64];
  CHECK_INT(gw_store_user_by_token(s, "aaaa", user, sizeof user), 0);
  CHECK_STR(user, "alice");
  struct gw_job j;
  CHECK_INT(gw_store_job_get(s, 7, &j), 0);
  CHECK_INT(j.state, GW_JOB_RUNNING);
  CHECK_INT(j.ckpt_step, 40);
  CHECK_STR(j.ckpt_key, "J000007/ckpt-00000040.tc");
  CHECK_NEAR(j.cost_usd, 0, 0);
  /* the new cost table works on the old job, and events continue at 3 */
  j.attempt = 1;
  CHECK_INT(gw_store_cost_add(s, &j, 0.5, 1.5, 3600, 100), 0);
  CHECK_INT(gw_store_cost_add(s, &j, 0.25, 0.5, 60, 200), 0);
  double usd = 0, od = 0;
  CHECK_INT(gw_store_cost_totals(s, "alice", 0, &usd, &od), 0);
  CHECK_NEAR(usd, 0.75, 1e-12);
  CHECK_NEAR(od, 2.0, 1e-12);
  json_t *ev = json_pack("{s:s}", "event", "gateway");
  CHECK_INT(gw_store_job_save(s, &j, ev), 0);
  CHECK_INT(j.last_seq, 3);
  CHECK_INT(json_integer_value(json_object_get(ev, "seq")), 3);
  json_decref(ev);
  gw_job_done(&j);
  s = gw_store_free(s);

  /* a database from a newer gateway is refused, not downgraded */
  CHECK_INT(sqlite3_open(path, &db), SQLITE_OK);
  sqlite3_exec(db, "UPDATE schema_version SET version=99", NULL, NULL, NULL);
  sqlite3_close(db);
  CHECK_INT(gw_store_open(path, &s, err, sizeof err), SL_EMISMATCH);
  CHECK(strstr(err, "newer") != NULL);
}

/* A job of alice's session of kind, created in s with spec (taken), into *ret. */
static void add_job_in(struct gw_store *s, const char *session, const char *kind, json_t *spec,
                       struct gw_job *ret) {
  *ret = (struct gw_job){.spec = spec};
  snprintf(ret->user, sizeof ret->user, "alice");
  snprintf(ret->session, sizeof ret->session, "%s", session);
  snprintf(ret->kind, sizeof ret->kind, "%s", kind);
  CHECK_INT(gw_store_job_create(s, ret), 0);
}

static void add_job(struct gw_store *s, const char *kind, json_t *spec, struct gw_job *ret) {
  add_job_in(s, "", kind, spec, ret);
}

#define THREADS 4
#define APPENDS 60

struct worker_arg {
  const char *path;
  int64_t job;
  int failures;
};

static void *appender(void *p) {
  struct worker_arg *a = p;
  struct gw_store *s = NULL;
  char err[256];
  if (gw_store_open(a->path, &s, err, sizeof err) < 0) {
    a->failures = APPENDS;
    return NULL;
  }
  for (int i = 0; i < APPENDS; i++) {
    json_t *ev = json_pack("{s:s,s:i}", "event", "output", "i", i);
    int64_t seq;
    if (gw_store_event_append(s, a->job, ev, &seq) < 0)
      a->failures++;
    json_decref(ev);
  }
  gw_store_free(s);
  return NULL;
}

static void test_concurrent_events(void) {
  char path[256], err[256];
  path_of("events.db", path, sizeof path);
  struct gw_store *s = NULL;
  CHECK_INT(gw_store_open(path, &s, err, sizeof err), 0);
  struct gw_job j;
  add_job(s, "run", json_object(), &j);
  CHECK_INT(j.last_seq, 1);
  pthread_t t[THREADS];
  struct worker_arg args[THREADS];
  for (int i = 0; i < THREADS; i++) {
    args[i] = (struct worker_arg){path, j.id, 0};
    pthread_create(&t[i], NULL, appender, &args[i]);
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    CHECK_INT(args[i].failures, 0);
  }
  json_t *evs = NULL;
  bool more = true;
  CHECK_INT(gw_store_events(s, j.id, 0, 100000, &evs, &more), 0);
  CHECK(!more);
  CHECK_INT(json_array_size(evs), 1 + THREADS * APPENDS);
  int gaps = 0;
  for (size_t i = 0; i < json_array_size(evs); i++)
    gaps += json_integer_value(json_object_get(json_array_get(evs, i), "seq")) != (json_int_t)i + 1;
  CHECK_INT(gaps, 0);
  json_decref(evs);
  /* paging */
  CHECK_INT(gw_store_events(s, j.id, 10, 5, &evs, &more), 0);
  CHECK(more);
  CHECK_INT(json_integer_value(json_object_get(json_array_get(evs, 0), "seq")), 11);
  json_decref(evs);
  struct gw_job back;
  CHECK_INT(gw_store_job_get(s, j.id, &back), 0);
  CHECK_INT(back.last_seq, 1 + THREADS * APPENDS);
  gw_job_done(&back);
  gw_job_done(&j);
  gw_store_free(s);
}

static void test_sessions(void) {
  char path[256], err[256];
  path_of("sessions.db", path, sizeof path);
  struct gw_store *s = NULL;
  CHECK_INT(gw_store_open(path, &s, err, sizeof err), 0);
  json_t *vars = json_pack("{s:{s:s,s:f}}", "lr", "t", "num", "v", 0.0003);
  json_t *defs = json_pack("[{s:s,s:s,s:{s:s}}]", "name", "m", "kind", "model", "spec", "type", "gpt");
  CHECK_INT(gw_store_session_set(s, "alice", "nb", vars, defs, NULL), 0);
  json_t *bad = json_pack("[{s:s}]", "name", "x");
  CHECK_INT(gw_store_session_set(s, "alice", "nb", NULL, bad, NULL), SL_ETYPE);
  json_t *got = NULL;
  CHECK_INT(gw_store_session_get(s, "alice", "nb", &got), 0);
  CHECK(json_equal(json_object_get(got, "vars"), vars));
  CHECK_INT(json_array_size(json_object_get(got, "defs")), 1);
  json_decref(got);
  /* another user's session of the same name is separate */
  CHECK_INT(gw_store_session_get(s, "bob", "nb", &got), 0);
  CHECK_INT(json_object_size(json_object_get(got, "vars")), 0);
  json_decref(got);
  json_t *def = NULL;
  CHECK_INT(gw_store_session_def(s, "alice", "nb", "m", "model", &def), 0);
  CHECK_STR(json_string_value(json_object_get(json_object_get(def, "spec"), "type")), "gpt");
  json_decref(def);
  CHECK_INT(gw_store_session_def(s, "alice", "nb", "m", "data", &def), SL_ENAME);
  /* a model's checkpoint stays while the same definition is sent again, and
   * goes when the model is defined anew (another architecture) or deleted */
  CHECK_INT(gw_store_session_model_set(s, "alice", "nb", "m", 7, 20, "J000007/ckpt-20.tc"), 0);
  CHECK_INT(gw_store_session_set(s, "alice", "nb", NULL, defs, NULL), 0);
  CHECK_INT(gw_store_session_get(s, "alice", "nb", &got), 0);
  CHECK_STR(sl_json_get_str(json_object_get(json_object_get(got, "models"), "m"), "checkpoint", ""),
            "J000007/ckpt-20.tc");
  json_decref(got);
  json_t *other = json_pack("[{s:s,s:s,s:{s:s,s:i}}]", "name", "m", "kind", "model", "spec", "type", "gpt",
                            "layers", 8);
  CHECK_INT(gw_store_session_set(s, "alice", "nb", NULL, other, NULL), 0);
  CHECK_INT(gw_store_session_get(s, "alice", "nb", &got), 0);
  CHECK(json_object_get(json_object_get(got, "models"), "m") == NULL);
  json_decref(got);
  CHECK_INT(gw_store_session_model_set(s, "alice", "nb", "m", 8, 5, "J000008/ckpt-5.tc"), 0);
  json_t *del = json_pack("[s]", "m");
  CHECK_INT(gw_store_session_set(s, "alice", "nb", NULL, NULL, del), 0);
  CHECK_INT(gw_store_session_def(s, "alice", "nb", "m", "model", &def), SL_ENAME);
  CHECK_INT(gw_store_session_get(s, "alice", "nb", &got), 0);
  CHECK(json_object_get(json_object_get(got, "models"), "m") == NULL);
  json_decref(got);
  /* a train job's checkpoint becomes the session's model only while the
   * session still defines it as the job trains it */
  struct gw_job j;
  CHECK_INT(gw_store_session_set(s, "alice", "nb", NULL, defs, NULL), 0);
  add_job(s, "train", json_pack("{s:{s:s,s:s,s:{s:s}}}", "model", "name", "m", "kind", "model", "spec",
                                "type", "gpt"), &j);
  snprintf(j.session, sizeof j.session, "nb");
  snprintf(j.model, sizeof j.model, "m");
  struct gw_checkpoint_row ck = {.step = 10, .key = "J1/ckpt-10.tc", .bytes = 100};
  snprintf(j.ckpt_key, sizeof j.ckpt_key, "%s", ck.key);
  j.ckpt_step = 10;
  CHECK_INT(gw_store_job_save_checkpoint(s, &j, NULL, &ck), 0);
  CHECK_INT(gw_store_session_get(s, "alice", "nb", &got), 0);
  CHECK_STR(sl_json_get_str(json_object_get(json_object_get(got, "models"), "m"), "checkpoint", ""),
            "J1/ckpt-10.tc");
  json_decref(got);
  CHECK_INT(gw_store_session_set(s, "alice", "nb", NULL, other, NULL), 0); /* defined anew */
  ck.step = j.ckpt_step = 20;
  snprintf(ck.key, sizeof ck.key, "J1/ckpt-20.tc");
  snprintf(j.ckpt_key, sizeof j.ckpt_key, "%s", ck.key);
  CHECK_INT(gw_store_job_save_checkpoint(s, &j, NULL, &ck), 0);
  CHECK_INT(gw_store_session_get(s, "alice", "nb", &got), 0);
  CHECK(json_object_get(json_object_get(got, "models"), "m") == NULL);
  json_decref(got);
  gw_job_done(&j);
  json_decref(other);
  json_decref(vars);
  json_decref(defs);
  json_decref(bad);
  json_decref(del);
  gw_store_free(s);
}

static int count(const char *path, const char *sql) {
  sqlite3 *db;
  sqlite3_stmt *st;
  int n = -1;
  if (sqlite3_open(path, &db) == SQLITE_OK && sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
    if (sqlite3_step(st) == SQLITE_ROW)
      n = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return n;
}

/* A session deleted: its names and models go, its jobs are renamed and
 * their checkpoint rows go, except a job another session's model names. */
/* A session's variables and definitions stay within what a client reads in
 * one message, and a user's sessions within their share: a set that would
 * pass either changes nothing. */
static void test_session_bounds(void) {
  char path[256], err[256];
  path_of("session-bounds.db", path, sizeof path);
  struct gw_store *s = NULL;
  CHECK_INT(gw_store_open(path, &s, err, sizeof err), 0);
  char *text = malloc(200 * 1024 + 1);
  memset(text, 'x', 200 * 1024);
  text[200 * 1024] = 0;
  json_t *v = json_pack("{s:s,s:s}", "t", "str", "v", text);
  json_t *two = json_pack("{s:O,s:O}", "a", v, "b", v), *third = json_pack("{s:O}", "c", v);
  CHECK_INT(gw_store_session_set(s, "alice", "nb", two, NULL, NULL), 0);
  CHECK_INT(gw_store_session_set(s, "alice", "nb", third, NULL, NULL), SL_ELIMIT);
  json_t *got = NULL;
  CHECK_INT(gw_store_session_get(s, "alice", "nb", &got), 0);
  CHECK_INT(json_object_size(json_object_get(got, "vars")), 2); /* c was not kept */
  json_decref(got);
  /* replacing one within the bound, and deleting, go on as ever */
  json_t *del = json_pack("[s]", "a");
  CHECK_INT(gw_store_session_set(s, "alice", "nb", third, NULL, del), 0);
  json_decref(del);
  /* 32 MiB across a user's sessions: sessions of 400 KiB pass it at the 82nd */
  int r = 0, k;
  for (k = 0; k < 100 && r == 0; k++) {
    char name[16];
    snprintf(name, sizeof name, "s%d", k);
    r = gw_store_session_set(s, "bob", name, two, NULL, NULL);
  }
  CHECK_INT(r, -EDQUOT);
  CHECK_INT(k, 82);
  CHECK_INT(gw_store_session_set(s, "carol", "nb", two, NULL, NULL), 0); /* each user's own share */
  json_decref(two);
  json_decref(third);
  json_decref(v);
  free(text);
  gw_store_free(s);
}

static void test_session_delete(void) {
  char path[256], err[256];
  path_of("delete.db", path, sizeof path);
  struct gw_store *s = NULL;
  CHECK_INT(gw_store_open(path, &s, err, sizeof err), 0);
  json_t *vars = json_pack("{s:{s:s,s:i}}", "x", "t", "num", "v", 1);
  CHECK_INT(gw_store_session_set(s, "alice", "old", vars, NULL, NULL), 0);
  CHECK_INT(gw_store_session_set(s, "alice", "keep", vars, NULL, NULL), 0);
  CHECK_INT(gw_store_session_set(s, "bob", "old", vars, NULL, NULL), 0);
  CHECK_INT(gw_store_session_touch(s, "alice", "old", 1), 0);
  struct gw_job a, b;
  add_job_in(s, "old", "train", json_object(), &a);
  add_job_in(s, "old", "train", json_object(), &b);
  CHECK_INT(gw_store_checkpoint_add(s, a.id, 1, 10, "J1/ckpt-10.tc", 10, 1, 1, 1), 0);
  CHECK_INT(gw_store_checkpoint_add(s, b.id, 1, 10, "J2/ckpt-10.tc", 10, 1, 1, 1), 0);
  CHECK_INT(gw_store_session_model_set(s, "alice", "old", "m", a.id, 10, "J1/ckpt-10.tc"), 0);
  CHECK_INT(gw_store_session_model_set(s, "alice", "keep", "m", b.id, 10, "J2/ckpt-10.tc"), 0);
  int64_t *jobs = NULL;
  size_t n = 0;
  CHECK_INT(gw_store_session_delete(s, "alice", "old", "old (deleted)", &jobs, &n), 0);
  CHECK_INT(n, 1);
  CHECK(n == 1 && jobs[0] == a.id); /* b's checkpoint is keep's model */
  free(jobs);
  json_t *got = NULL;
  CHECK_INT(gw_store_session_get(s, "alice", "old", &got), 0);
  CHECK(got && !json_object_size(json_object_get(got, "vars")) && !json_object_size(json_object_get(got, "models")));
  json_decref(got);
  CHECK_INT(gw_store_session_get(s, "alice", "keep", &got), 0);
  CHECK(got && json_object_size(json_object_get(got, "models")) == 1);
  json_decref(got);
  CHECK_INT(gw_store_session_get(s, "bob", "old", &got), 0);
  CHECK(got && json_equal(json_object_get(got, "vars"), vars));
  json_decref(got);
  CHECK_INT(gw_store_session_delete(s, "alice", "old", "old (deleted)", &jobs, &n), 1); /* nothing left */
  CHECK(jobs == NULL && n == 0);
  /* the job to purge is kept until its objects are gone */
  CHECK_INT(gw_store_purge_list(s, &jobs, &n), 0);
  CHECK(n == 1 && jobs[0] == a.id);
  CHECK_INT(gw_store_purge_done(s, jobs, n), 0);
  free(jobs);
  CHECK_INT(gw_store_purge_list(s, &jobs, &n), 0);
  CHECK(jobs == NULL && n == 0);
  gw_store_free(s);
  CHECK_INT(count(path, "SELECT COUNT(*) FROM jobs WHERE session='old (deleted)'"), 2);
  CHECK_INT(count(path, "SELECT COUNT(*) FROM checkpoints WHERE job=1"), 0);
  CHECK_INT(count(path, "SELECT COUNT(*) FROM checkpoints WHERE job=2"), 1);
  CHECK_INT(count(path, "SELECT COUNT(*) FROM sessions WHERE user='alice' AND name='old'"), 0);
  gw_job_done(&a);
  gw_job_done(&b);
  json_decref(vars);
}

static void note_removed(const char *name, void *data) {
  char *list = data;
  strncat(list, name, 255 - strlen(list));
  strncat(list, " ", 255 - strlen(list));
}

/* The users table follows the configuration: a user left out loses their
 * token, keeps their sessions, and gets both back when named again; tokens
 * may change hands in one sync. */
/* Appends step metrics from..to (an evaluation every 1000 steps, a
 * checkpoint event every 5000) to job through a connection of its own, in
 * one transaction, as the scheduler's appends would leave them. */
static void append_metrics(const char *path, int64_t job, int64_t from, int64_t to) {
  sqlite3 *raw = NULL;
  CHECK_INT(sqlite3_open(path, &raw), SQLITE_OK);
  sqlite3_busy_timeout(raw, 5000);
  sqlite3_exec(raw, "BEGIN IMMEDIATE", NULL, NULL, NULL);
  sqlite3_stmt *q = NULL, *ins = NULL;
  sqlite3_prepare_v2(raw, "SELECT last_seq FROM jobs WHERE id=?", -1, &q, NULL);
  sqlite3_bind_int64(q, 1, job);
  CHECK_INT(sqlite3_step(q), SQLITE_ROW);
  int64_t seq = sqlite3_column_int64(q, 0);
  sqlite3_finalize(q);
  sqlite3_prepare_v2(raw, "INSERT INTO events VALUES(?, ?, ?, ?, ?)", -1, &ins, NULL);
  for (int64_t step = from; step <= to; step++) {
    char body[160];
    const char *kind = "metric";
    if (step % 5000 == 0) { /* a checkpoint event beside the step's metric */
      snprintf(body, sizeof body, "{\"event\":\"checkpoint\",\"step\":%lld}", (long long)step);
      sqlite3_bind_int64(ins, 1, job);
      sqlite3_bind_int64(ins, 2, ++seq);
      sqlite3_bind_int64(ins, 3, step);
      sqlite3_bind_text(ins, 4, "checkpoint", -1, SQLITE_STATIC);
      sqlite3_bind_text(ins, 5, body, -1, SQLITE_TRANSIENT);
      CHECK_INT(sqlite3_step(ins), SQLITE_DONE);
      sqlite3_reset(ins);
    }
    if (step % 1000 == 0)
      snprintf(body, sizeof body, "{\"event\":\"metric\",\"step\":%lld,\"eval_loss\":2.5}", (long long)step);
    else
      snprintf(body, sizeof body, "{\"event\":\"metric\",\"step\":%lld,\"loss\":3.25}", (long long)step);
    sqlite3_bind_int64(ins, 1, job);
    sqlite3_bind_int64(ins, 2, ++seq);
    sqlite3_bind_int64(ins, 3, step);
    sqlite3_bind_text(ins, 4, kind, -1, SQLITE_STATIC);
    sqlite3_bind_text(ins, 5, body, -1, SQLITE_TRANSIENT);
    CHECK_INT(sqlite3_step(ins), SQLITE_DONE);
    sqlite3_reset(ins);
  }
  sqlite3_finalize(ins);
  sqlite3_prepare_v2(raw, "UPDATE jobs SET last_seq=? WHERE id=?", -1, &q, NULL);
  sqlite3_bind_int64(q, 1, seq);
  sqlite3_bind_int64(q, 2, job);
  CHECK_INT(sqlite3_step(q), SQLITE_DONE);
  sqlite3_finalize(q);
  CHECK_INT(sqlite3_exec(raw, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(raw);
}

/* One number from the store's file: sql's first column. */
static int64_t count_of(const char *path, const char *sql) {
  sqlite3 *raw = NULL;
  sqlite3_stmt *q = NULL;
  int64_t n = -1;
  if (sqlite3_open(path, &raw) == SQLITE_OK && sqlite3_prepare_v2(raw, sql, -1, &q, NULL) == SQLITE_OK &&
      sqlite3_step(q) == SQLITE_ROW)
    n = sqlite3_column_int64(q, 0);
  sqlite3_finalize(q);
  sqlite3_close(raw);
  return n;
}

/* A long run's step metrics thinned: the newest whole, the older evenly
 * spread from the run's start, evaluations, restore timings, other events
 * and damaged rows kept; bounded however long the run. */
static void test_thin_metrics(void) {
  char path[256], err[256];
  path_of("thin.db", path, sizeof path);
  struct gw_store *s = NULL;
  CHECK_INT(gw_store_open(path, &s, err, sizeof err), 0);
  struct gw_job j;
  add_job(s, "train", json_object(), &j);
  int64_t deleted = -1, stride = -1;
  append_metrics(path, j.id, 1, 8000); /* fewer than kept whole: nothing to do */
  CHECK_INT(gw_store_thin_metrics(s, j.id, 10000, 5000, &deleted, &stride), 0);
  CHECK_INT(deleted, 0);
  append_metrics(path, j.id, 8001, 30000);
  /* a damaged row and a restore's first metric among the older ones */
  sqlite3 *raw = NULL;
  sqlite3_open(path, &raw);
  char sql[400];
  snprintf(sql, sizeof sql,
           "INSERT INTO events VALUES(%lld, 1000001, 0, 'metric', 'not json');"
           "UPDATE events SET body='{\"event\":\"metric\",\"step\":777,\"restore_ms\":40}'"
           " WHERE job=%lld AND body LIKE '%%\"step\":777,%%'",
           (long long)j.id, (long long)j.id);
  CHECK_INT(sqlite3_exec(raw, sql, NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(raw);
  char q[300];
#define COUNT(where) (snprintf(q, sizeof q, "SELECT COUNT(*) FROM events WHERE job=%lld AND %s", \
                               (long long)j.id, where), count_of(path, q))
  int64_t others = COUNT("kind<>'metric'");
  CHECK_INT(gw_store_thin_metrics(s, j.id, 10000, 5000, &deleted, &stride), 0);
  /* the damaged row sorts last, among the newest kept whole: the older plain metrics span
   * steps 1..20001, 5001 buckets of 4, so 2501 of 8 */
  CHECK_INT(stride, 8);
  CHECK_INT(COUNT("kind='metric' AND json_valid(body) AND json_extract(body,'$.step')>20001"), 9999);
  int64_t old = COUNT("kind='metric' AND json_valid(body) AND json_extract(body,'$.step')<=20001"
                      " AND json_extract(body,'$.eval_loss') IS NULL AND json_extract(body,'$.restore_ms') IS NULL");
  CHECK(old >= 2490 && old <= 2501);
  CHECK_INT(COUNT("kind='metric' AND json_valid(body) AND json_extract(body,'$.eval_loss') IS NOT NULL"), 30);
  CHECK_INT(COUNT("kind='metric' AND json_valid(body) AND json_extract(body,'$.restore_ms') IS NOT NULL"), 1);
  CHECK_INT(COUNT("body='not json'"), 1);
  CHECK_INT(COUNT("kind<>'metric'"), others);
  CHECK(COUNT("kind='metric' AND json_valid(body) AND json_extract(body,'$.step')<=8") >= 1);
  int64_t step = 0;
  CHECK_INT(gw_store_attempt_metric_step(s, j.id, &step), 0);
  CHECK_INT(step, 30000);
  CHECK_INT(gw_store_thin_metrics(s, j.id, 10000, 5000, &deleted, &stride), 0);
  CHECK_INT(deleted, 0); /* thin already */
  /* a long run, thinned as the scheduler does every 5000: bounded, still from its start */
  for (int64_t from = 30001; from < 230000; from += 5000) {
    append_metrics(path, j.id, from, from + 4999);
    CHECK_INT(gw_store_thin_metrics(s, j.id, 10000, 5000, &deleted, &stride), 0);
  }
  int64_t metrics = COUNT("kind='metric'");
  fprintf(stderr, "thin: 230000 steps leave %lld metric events (stride %lld)\n", (long long)metrics,
          (long long)stride);
  CHECK(metrics <= 10000 + 5001 + 230 + 2);
  CHECK(COUNT("kind='metric' AND json_valid(body) AND json_extract(body,'$.step')<=64") >= 1);
  CHECK_INT(COUNT("kind='metric' AND json_valid(body) AND json_extract(body,'$.eval_loss') IS NOT NULL"), 230);
#undef COUNT
  gw_job_done(&j);
  s = gw_store_free(s);
}

/* Appends output lines from..to ("line N", padded to `bytes` when given),
 * with a metric after every tenth, through the store's own append. */
static void append_output(struct gw_store *s, int64_t job, int from, int to, size_t bytes) {
  char text[20000];
  for (int i = from; i <= to; i++) {
    int n = snprintf(text, sizeof text, "line %d", i);
    if (bytes > (size_t)n && bytes < sizeof text) {
      memset(text + n, '.', bytes - (size_t)n);
      text[bytes] = '\0';
    }
    int64_t seq;
    json_t *ev = json_pack("{s:s,s:s,s:s}", "event", "output", "stream", "stdout", "text", text);
    if (i == from + 1)
      json_object_set_new(ev, "rank", json_integer(1));
    CHECK_INT(gw_store_event_append(s, job, ev, &seq), 0);
    json_decref(ev);
    if (i % 10 == 0) {
      ev = json_pack("{s:s,s:i}", "event", "metric", "step", i);
      CHECK_INT(gw_store_event_append(s, job, ev, &seq), 0);
      json_decref(ev);
    }
  }
}

/* The output's "line N" numbers in order, as a reader gets them: -1 for
 * the marker (its counts into *ret_lines, *ret_bytes); the count returned. */
static size_t read_output(struct gw_store *s, int64_t job, int *nums, size_t max, int64_t *ret_lines,
                          int64_t *ret_bytes, char *marker_text, size_t text_size) {
  json_t *evs = NULL;
  bool more = false;
  size_t n = 0, i;
  json_t *ev;
  CHECK_INT(gw_store_events(s, job, 0, 100000, &evs, &more), 0);
  CHECK(!more);
  json_array_foreach(evs, i, ev) {
    if (strcmp(sl_json_get_str(ev, "event", ""), "output") || n >= max)
      continue;
    if (json_is_integer(json_object_get(ev, "elided_lines"))) {
      nums[n++] = -1;
      *ret_lines = sl_json_get_int(ev, "elided_lines", 0);
      *ret_bytes = sl_json_get_int(ev, "elided_bytes", 0);
      snprintf(marker_text, text_size, "%s", sl_json_get_str(ev, "text", ""));
      CHECK_STR(sl_json_get_str(ev, "stream", ""), "stderr");
      CHECK(json_object_get(ev, "rank") == NULL);
      CHECK(sl_json_get_int(ev, "seq", 0) > 0);
    } else {
      nums[n++] = atoi(sl_json_get_str(ev, "text", "line 0") + 5);
    }
  }
  json_decref(evs);
  return n;
}

/* A chatty job's output: its first lines and its newest stay, one marker
 * between says how much was left out (and grows with later trims); the
 * newest kept are bounded in bytes too; metrics and other rows stay. */
static void test_trim_output(void) {
  char path[256], err[256], text[300];
  path_of("trim.db", path, sizeof path);
  struct gw_store *s = NULL;
  CHECK_INT(gw_store_open(path, &s, err, sizeof err), 0);
  struct gw_job j;
  add_job(s, "run", json_object(), &j);
  static int nums[5000];
  int64_t deleted = -1, lines = 0, bytes = 0;
  append_output(s, j.id, 1, 350, 0);
  CHECK_INT(gw_store_trim_output(s, j.id, 100, 300, 1 << 20, &deleted), 0);
  CHECK_INT(deleted, 0); /* 350 fit */
  CHECK_INT(gw_store_trim_output(s, j.id, 0, 300, 1 << 20, &deleted), -EINVAL);
  append_output(s, j.id, 351, 1000, 0);
  sqlite3 *raw = NULL; /* a damaged output row among those to leave out stays */
  CHECK_INT(sqlite3_open(path, &raw), SQLITE_OK);
  char sql[300];
  snprintf(sql, sizeof sql, "UPDATE events SET body='not json' WHERE job=%lld AND body LIKE '%%\"line 500\"%%'",
           (long long)j.id);
  CHECK_INT(sqlite3_exec(raw, sql, NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(raw);
  CHECK_INT(gw_store_trim_output(s, j.id, 100, 300, 1 << 20, &deleted), 0);
  CHECK_INT(deleted, 598); /* 101..700 but line 500, one of them the marker */
  size_t n = read_output(s, j.id, nums, 5000, &lines, &bytes, text, sizeof text);
  CHECK_INT(n, 100 + 1 + 300);
  CHECK_INT(nums[0], 1);
  CHECK_INT(nums[99], 100);
  CHECK_INT(nums[100], -1);
  CHECK_INT(nums[101], 701);
  CHECK_INT(nums[400], 1000);
  CHECK_INT(lines, 599);
  CHECK_INT(bytes, 599 * 8); /* "line 101".."line 700" but 500: 8 bytes each */
  CHECK(strstr(text, "599 lines of output") != NULL);
  fprintf(stderr, "trim: %s\n", text);
  char q[200];
  snprintf(q, sizeof q, "SELECT COUNT(*) FROM events WHERE job=%lld AND kind='metric'", (long long)j.id);
  CHECK_INT(count_of(path, q), 100);
  snprintf(q, sizeof q, "SELECT COUNT(*) FROM events WHERE job=%lld AND body='not json'", (long long)j.id);
  CHECK_INT(count_of(path, q), 1);
  CHECK_INT(gw_store_trim_output(s, j.id, 100, 300, 1 << 20, &deleted), 0);
  CHECK_INT(deleted, 0);
  /* a later trim adds to the same marker */
  append_output(s, j.id, 1001, 2000, 0);
  CHECK_INT(gw_store_trim_output(s, j.id, 100, 300, 1 << 20, &deleted), 0);
  CHECK_INT(deleted, 1000);
  n = read_output(s, j.id, nums, 5000, &lines, &bytes, text, sizeof text);
  CHECK_INT(n, 401);
  CHECK_INT(nums[100], -1);
  CHECK_INT(nums[101], 1701);
  CHECK_INT(lines, 1599);
  CHECK(strstr(text, "1599 lines") != NULL);
  /* long lines: the newest kept are bounded by bytes (the newest always) */
  append_output(s, j.id, 2001, 2040, 10000);
  CHECK_INT(gw_store_trim_output(s, j.id, 100, 300, 50000, &deleted), 0);
  n = read_output(s, j.id, nums, 5000, &lines, &bytes, text, sizeof text);
  CHECK_INT(n, 100 + 1 + 5);
  CHECK_INT(nums[101], 2036);
  CHECK_INT(nums[105], 2040);
  CHECK_INT(lines, 1599 + 300 + 35);
  CHECK_INT(gw_store_trim_output(s, j.id, 100, 300, 10, &deleted), 0);
  n = read_output(s, j.id, nums, 5000, &lines, &bytes, text, sizeof text);
  CHECK_INT(n, 100 + 1 + 1);
  CHECK_INT(nums[101], 2040);
  gw_job_done(&j);
  s = gw_store_free(s);
}

/* A job spec naming stored files: one file (sha, path) or, with sha2, a data set of two. */
static json_t *upload_spec(const char *path, const char *sha, int64_t bytes, const char *sha2) {
  json_t *spec = json_pack("{s:{s:s, s:s, s:{s:s, s:[s]}}}", "data", "name", "d", "kind", "data", "spec", "type",
                           sha2 ? "fashion_mnist" : "text", "args", path);
  if (!sha2)
    json_object_set_new(spec, "data_upload", json_pack("{s:s, s:s, s:I}", "key", "_data/alice/x", "sha256", sha,
                                                       "bytes", (json_int_t)bytes));
  else
    json_object_set_new(spec, "data_upload",
                        json_pack("{s:s, s:I, s:[{s:s, s:s, s:s, s:I}, {s:s, s:s, s:s, s:I}]}", "sha256",
                                  "5e7", "bytes", (json_int_t)(2 * bytes), "files", "name", "a.gz", "key", "k1",
                                  "sha256", sha, "bytes", (json_int_t)bytes, "name", "b.gz", "key", "k2",
                                  "sha256", sha2, "bytes", (json_int_t)bytes));
  return spec;
}

static const json_t *listed(const json_t *list, const char *sha) {
  size_t i;
  const json_t *e;
  json_array_foreach(list, i, e) {
    if (!strcmp(sl_json_get_str(e, "sha256", ""), sha))
      return e;
  }
  return NULL;
}

/* Stored data files: listed with the jobs that named them (a data set's
 * files each), found by the start of their hash, marked while deleted and
 * forgotten after; a database of an earlier version gets them from its
 * jobs' specs. */
static void test_uploads(void) {
  char path[256], err[256];
  path_of("uploads.db", path, sizeof path);
  struct gw_store *s = NULL;
  CHECK_INT(gw_store_open(path, &s, err, sizeof err), 0);
  const char *a = "aaaa1111aaaa1111aaaa1111aaaa1111aaaa1111aaaa1111aaaa1111aaaa1111";
  const char *b = "aaaa2222aaaa2222aaaa2222aaaa2222aaaa2222aaaa2222aaaa2222aaaa2222";
  const char *c = "cccc3333cccc3333cccc3333cccc3333cccc3333cccc3333cccc3333cccc3333";
  struct gw_job j1, j2, j3;
  add_job(s, "train", upload_spec("/home/alice/corpus.txt", a, 5000, NULL), &j1);
  add_job(s, "train", upload_spec("/home/alice/corpus.txt", a, 5000, NULL), &j2);
  add_job(s, "eval", upload_spec("/home/alice/images", b, 700, c), &j3);
  j1.state = GW_JOB_SUCCEEDED;
  CHECK_INT(gw_store_job_save(s, &j1, NULL), 0);
  struct gw_job bad;
  add_job(s, "train", json_object(), &bad); /* a damaged spec names no file, and hides none */
  sqlite3 *raw = NULL;
  char sql[120];
  CHECK_INT(sqlite3_open(path, &raw), SQLITE_OK);
  snprintf(sql, sizeof sql, "UPDATE jobs SET spec='{\"data_upload\":' WHERE id=%lld", (long long)bad.id);
  CHECK_INT(sqlite3_exec(raw, sql, NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(raw);
  CHECK_INT(gw_store_upload_seen(s, "alice", a, 5000, "/home/alice/corpus.txt", 1000), 0);
  CHECK_INT(gw_store_upload_seen(s, "alice", a, 5000, "/home/alice/corpus2.txt", 3000), 0); /* moved */
  CHECK_INT(gw_store_upload_seen(s, "alice", b, 700, "/home/alice/images/a.gz", 2000), 0);
  CHECK_INT(gw_store_upload_seen(s, "alice", c, 700, "/home/alice/images/b.gz", 2000), 0);
  CHECK_INT(gw_store_upload_seen(s, "bob", c, 700, "/home/bob/b.gz", 2000), 0);
  json_t *list = NULL;
  CHECK_INT(gw_store_uploads_list(s, "alice", &list), 0);
  CHECK_INT(json_array_size(list), 3);
  const json_t *e = listed(list, a);
  CHECK_STR(sl_json_get_str(json_array_get(list, 0), "sha256", ""), a); /* the most recently used first */
  CHECK_STR(sl_json_get_str(e, "path", ""), "/home/alice/corpus2.txt");
  CHECK_INT(sl_json_get_int(e, "first_us", 0), 1000);
  CHECK_INT(sl_json_get_int(e, "last_us", 0), 3000);
  CHECK_INT(sl_json_get_int(e, "jobs", 0), 2);
  CHECK_INT(sl_json_get_int(e, "live_jobs", 0), 1);
  char id[16];
  CHECK_STR(sl_json_get_str(e, "last_job", ""), gw_job_id_str(j2.id, id, sizeof id));
  CHECK_INT(sl_json_get_int(listed(list, c), "jobs", 0), 1);
  CHECK_INT(sl_json_get_int(listed(list, b), "bytes", 0), 700);
  json_decref(list);
  CHECK_INT(gw_store_uploads_list(s, "bob", &list), 0);
  CHECK_INT(json_array_size(list), 1);
  CHECK_INT(sl_json_get_int(json_array_get(list, 0), "jobs", -1), 0); /* alice's jobs are not bob's */
  json_decref(list);
  CHECK_INT(gw_store_uploads_list(s, NULL, &list), 0); /* everyone's, each with its user */
  CHECK_INT(json_array_size(list), 4);
  size_t i;
  const json_t *row;
  int bobs = 0;
  json_array_foreach(list, i, row) {
    if (!strcmp(sl_json_get_str(row, "user", ""), "bob")) {
      bobs++;
      CHECK_INT(sl_json_get_int(row, "jobs", -1), 0);
    } else {
      CHECK_STR(sl_json_get_str(row, "user", ""), "alice");
      CHECK(sl_json_get_int(row, "jobs", 0) >= 1);
    }
  }
  CHECK_INT(bobs, 1);
  json_decref(list);
  /* found by the start of the hash */
  struct gw_store_upload up;
  CHECK_INT(gw_store_upload_find(s, "alice", "cccc33", &up), 0);
  CHECK_STR(up.sha256, c);
  CHECK_INT(gw_store_upload_find(s, "alice", "aaaa", &up), SL_ETYPE); /* too short */
  CHECK_INT(gw_store_upload_find(s, "alice", "AAAA1111", &up), SL_ETYPE);
  CHECK_INT(gw_store_upload_find(s, "alice", "aaaa11", &up), 0);
  CHECK_INT(gw_store_upload_find(s, "alice", "aaaa1", &up), SL_ETYPE);
  CHECK_INT(gw_store_upload_find(s, "alice", "aaaa111", &up), 0);
  CHECK_INT(gw_store_upload_find(s, "alice", "aaaa1111aaaa", &up), 0);
  CHECK_INT(gw_store_upload_find(s, "alice", "aaaa12", &up), SL_ENAME);
  CHECK_INT(gw_store_upload_find(s, "carol", "cccc33", &up), SL_ENAME);
  CHECK_INT(gw_store_upload_seen(s, "alice", "aaaa11119999", 1, "/x", 4000), 0);
  CHECK_INT(gw_store_upload_find(s, "alice", "aaaa1111", &up), SL_EMISMATCH);
  CHECK_INT(gw_store_upload_find(s, "alice", a, &up), 0);
  CHECK_STR(up.path, "/home/alice/corpus2.txt");
  CHECK_INT(up.bytes, 5000);
  CHECK(!up.deleting);
  /* deleting, then forgotten; forget leaves a row not being deleted */
  CHECK_INT(gw_store_upload_forget(s, "alice", a), 0);
  CHECK_INT(gw_store_upload_find(s, "alice", a, &up), 0);
  CHECK_INT(gw_store_upload_deleting(s, "alice", a, true), 0);
  CHECK_INT(gw_store_upload_find(s, "alice", a, &up), 0);
  CHECK(up.deleting);
  CHECK_INT(gw_store_uploads_deleting(s, &list), 0);
  CHECK_INT(json_array_size(list), 1);
  CHECK_STR(sl_json_get_str(json_array_get(list, 0), "user", ""), "alice");
  CHECK_INT(sl_json_get_int(json_array_get(list, 0), "bytes", 0), 5000);
  json_decref(list);
  /* the hashes no stored file has: a (being deleted) and one never stored;
   * c stays bob's while alice's is being deleted; what is no string is left out */
  const char *never = "dddd4444dddd4444dddd4444dddd4444dddd4444dddd4444dddd4444dddd4444";
  CHECK_INT(gw_store_upload_deleting(s, "alice", c, true), 0);
  json_t *asked = json_pack("[s,s,s,s,i]", never, a, b, c, 7), *unknown = NULL;
  CHECK_INT(gw_store_uploads_unknown(s, asked, &unknown), 0);
  CHECK_INT(json_array_size(unknown), 2);
  CHECK_STR(json_string_value(json_array_get(unknown, 0)), never);
  CHECK_STR(json_string_value(json_array_get(unknown, 1)), a);
  json_decref(unknown);
  json_decref(asked);
  CHECK_INT(gw_store_upload_deleting(s, "alice", c, false), 0);
  asked = json_array();
  CHECK_INT(gw_store_uploads_unknown(s, asked, &unknown), 0);
  CHECK_INT(json_array_size(unknown), 0);
  json_decref(unknown);
  json_decref(asked);
  /* named by a submit again (uploaded anew once its object went): the mark
   * goes, and the deletion's end leaves the row */
  CHECK_INT(gw_store_upload_seen(s, "alice", a, 5000, "/home/alice/corpus3.txt", 5000), 0);
  CHECK_INT(gw_store_upload_find(s, "alice", a, &up), 0);
  CHECK(!up.deleting);
  CHECK_INT(gw_store_upload_forget(s, "alice", a), 0);
  CHECK_INT(gw_store_upload_find(s, "alice", a, &up), 0);
  CHECK_STR(up.path, "/home/alice/corpus3.txt");
  CHECK_INT(gw_store_upload_deleting(s, "alice", a, true), 0);
  CHECK_INT(gw_store_upload_forget(s, "alice", a), 0);
  CHECK_INT(gw_store_upload_find(s, "alice", a, &up), SL_ENAME);
  /* an earlier database's files come from its jobs' specs */
  s = gw_store_free(s);
  CHECK_INT(sqlite3_open(path, &raw), SQLITE_OK);
  CHECK_INT(sqlite3_exec(raw, "DROP TABLE uploads; DROP TABLE multipart; UPDATE schema_version SET version=9", NULL, NULL, NULL),
            SQLITE_OK);
  sqlite3_close(raw);
  CHECK_INT(gw_store_open(path, &s, err, sizeof err), 0);
  CHECK_INT(gw_store_uploads_list(s, "alice", &list), 0);
  CHECK_INT(json_array_size(list), 3);
  CHECK_STR(sl_json_get_str(listed(list, a), "path", ""), "/home/alice/corpus.txt");
  CHECK_INT(sl_json_get_int(listed(list, a), "jobs", 0), 2);
  CHECK_STR(sl_json_get_str(listed(list, c), "path", ""), "/home/alice/images/b.gz");
  CHECK_INT(sl_json_get_int(listed(list, c), "bytes", 0), 700);
  json_decref(list);
  gw_job_done(&j1);
  gw_job_done(&j2);
  gw_job_done(&j3);
  gw_job_done(&bad);
  s = gw_store_free(s);
}

static void test_users_sync(void) {
  char path[256], err[256], user[64], removed[256] = "";
  path_of("users.db", path, sizeof path);
  struct gw_store *s = NULL;
  CHECK_INT(gw_store_open(path, &s, err, sizeof err), 0);
  struct gw_store_user both[] = {{"alice", "aaaa", ""}, {"bob", "bbbb", "ops"}};
  CHECK_INT(gw_store_users_sync(s, both, 2, note_removed, removed), 0);
  CHECK_INT(gw_store_user_by_token(s, "bbbb", user, sizeof user), 0);
  CHECK_STR(user, "bob");
  json_t *vars = json_pack("{s:{s:s,s:i}}", "n", "t", "num", "v", 7);
  CHECK_INT(gw_store_session_set(s, "bob", "nb", vars, NULL, NULL), 0);

  CHECK_INT(gw_store_users_sync(s, both, 1, note_removed, removed), 1);
  CHECK_STR(removed, "bob ");
  CHECK_INT(gw_store_user_by_token(s, "bbbb", user, sizeof user), SL_EAUTH);
  CHECK_INT(gw_store_user_by_token(s, "aaaa", user, sizeof user), 0);
  json_t *got = NULL;
  CHECK_INT(gw_store_session_get(s, "bob", "nb", &got), 0);
  CHECK(json_equal(json_object_get(got, "vars"), vars));
  json_decref(got);

  /* named again: access and data are back; then alice and bob swap tokens */
  CHECK_INT(gw_store_users_sync(s, both, 2, NULL, NULL), 0);
  CHECK_INT(gw_store_user_by_token(s, "bbbb", user, sizeof user), 0);
  struct gw_store_user swapped[] = {{"alice", "bbbb", ""}, {"bob", "aaaa", "ops"}};
  CHECK_INT(gw_store_users_sync(s, swapped, 2, NULL, NULL), 0);
  CHECK_INT(gw_store_user_by_token(s, "bbbb", user, sizeof user), 0);
  CHECK_STR(user, "alice");

  /* a sync that fails (two users, one token) changes nothing */
  struct gw_store_user clash[] = {{"carol", "cccc", ""}, {"dave", "cccc", ""}};
  CHECK(gw_store_users_sync(s, clash, 2, NULL, NULL) < 0);
  CHECK_INT(gw_store_user_by_token(s, "aaaa", user, sizeof user), 0);
  CHECK_STR(user, "bob");
  CHECK_INT(gw_store_user_by_token(s, "cccc", user, sizeof user), SL_EAUTH);

  /* nobody named: nobody gets in */
  removed[0] = 0;
  CHECK_INT(gw_store_users_sync(s, NULL, 0, note_removed, removed), 2);
  CHECK_STR(removed, "alice bob ");
  CHECK_INT(gw_store_user_by_token(s, "aaaa", user, sizeof user), SL_EAUTH);
  json_decref(vars);
  gw_store_free(s);
}

static void count_checkpoint(void *ctx, int64_t write_ms, int64_t upload_ms) {}
static void count_event(void *ctx, int64_t job, int64_t time_us, const char *kind,
                        const char *state, int64_t steps_lost, bool notice) {
  ++*(int *)ctx;
}

/* An event whose body is not JSON (a damaged row) is one event with no
 * fields to the readers that look inside bodies, never their failure. */
static void test_damaged_event_bodies(void) {
  char path[256], err[256];
  path_of("damaged.db", path, sizeof path);
  struct gw_store *s = NULL;
  CHECK_INT(gw_store_open(path, &s, err, sizeof err), 0);
  struct gw_job j;
  add_job(s, "train", json_object(), &j);
  sqlite3 *db = NULL;
  CHECK(sqlite3_open(path, &db) == SQLITE_OK);
  CHECK(sqlite3_exec(db,
                     "INSERT INTO attempts(job, attempt, outcome) VALUES(1, 1, 'preempted');"
                     "INSERT INTO events VALUES(1, 2, 2, 'metric', '{\"step\":5}');"
                     "INSERT INTO events VALUES(1, 3, 3, 'metric', '{\"step\":9');"
                     "INSERT INTO events VALUES(1, 4, 4, 'preempted', '{\"notice\":tr');"
                     "INSERT INTO events VALUES(1, 5, 5, 'state', '{\"state\":\"q');",
                     NULL, NULL, NULL) == SQLITE_OK);
  sqlite3_close(db);
  int64_t step = -1;
  CHECK_INT(gw_store_attempt_metric_step(s, 1, &step), 0);
  CHECK_INT(step, 5);
  json_t *counts = NULL;
  CHECK_INT(gw_store_counts(s, &counts), 0);
  CHECK_INT(json_integer_value(json_object_get(json_object_get(counts, "preemptions"),
                                               "no_notice")), 1);
  json_decref(counts);
  int events = 0;
  struct gw_store_history_fns fns = {count_checkpoint, count_event};
  CHECK_INT(gw_store_metric_history(s, &fns, &events), 0);
  CHECK_INT(events, 3); /* the queued state, the preempted and the damaged state event */
  /* an attempt's numbered output (not an earlier attempt's, nor a gang's other
   * rank's) and the notices of its instances, among damaged rows */
  CHECK(sqlite3_open(path, &db) == SQLITE_OK);
  CHECK(sqlite3_exec(db,
                     "INSERT INTO events VALUES(1, 6, 6, 'output', '{\"text\":\"a\",\"oseq\":9}');"
                     "INSERT INTO events VALUES(1, 7, 7, 'placed', '{}');"
                     "INSERT INTO events VALUES(1, 8, 8, 'output', '{\"text\":\"b\",\"oseq\":3}');"
                     "INSERT INTO events VALUES(1, 9, 9, 'output', '{\"oseq\":4');"
                     "INSERT INTO events VALUES(1, 10, 10, 'output', '{\"rank\":1,\"oseq\":50}');"
                     "INSERT INTO events VALUES(1, 11, 11, 'notice', '{\"instance\":\"i-1\",\"leaving\":false}');"
                     "INSERT INTO events VALUES(1, 12, 12, 'notice', '{\"instance\":\"i-2\"}');"
                     "INSERT INTO events VALUES(1, 13, 13, 'notice', '{\"instance\":\"i-3\"');",
                     NULL, NULL, NULL) == SQLITE_OK);
  sqlite3_close(db);
  int64_t oseq = -1;
  CHECK_INT(gw_store_attempt_output_seq(s, 1, &oseq), 0);
  CHECK_INT(oseq, 3);
  CHECK_INT(gw_store_attempt_output_seq(s, 2, &oseq), 0); /* no such job: none */
  CHECK_INT(oseq, 0);
  bool leaving = true, at_risk = true;
  CHECK_INT(gw_store_instance_noticed(s, 1, "i-1", &leaving, &at_risk), 0);
  CHECK(!leaving && at_risk);
  CHECK_INT(gw_store_instance_noticed(s, 1, "i-2", &leaving, &at_risk), 0);
  CHECK(leaving && !at_risk);
  CHECK_INT(gw_store_instance_noticed(s, 1, "i-3", &leaving, &at_risk), 0);
  CHECK(!leaving && !at_risk);
  gw_job_done(&j);
  gw_store_free(s);
}

/* A database whose pages are damaged on disk (bytes of a page in the
 * middle overwritten) is refused at open, naming it and how to recover,
 * and left byte for byte as it was. */
static void test_damaged_pages(void) {
  char path[256], err[512] = "";
  path_of("pages.db", path, sizeof path);
  struct gw_store *s = NULL;
  CHECK_INT(gw_store_open(path, &s, err, sizeof err), 0);
  for (int i = 0; i < 200; i++) {
    struct gw_job j;
    add_job(s, "train", json_pack("{s:s}", "pad", "a job spec long enough to fill pages of the table"), &j);
    gw_job_done(&j);
  }
  s = gw_store_free(s); /* the WAL goes into the file as the last connection closes */
  FILE *f = fopen(path, "r+b");
  CHECK(f != NULL);
  if (!f)
    return;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  CHECK(size >= 8 * 4096);
  unsigned char junk[600];
  for (size_t i = 0; i < sizeof junk; i++)
    junk[i] = (unsigned char)(i * 131 + 7);
  fseek(f, 4 * 4096, SEEK_SET); /* a page of the jobs table, its header first */
  fwrite(junk, 1, sizeof junk, f);
  fclose(f);
  unsigned char before[sizeof junk];
  f = fopen(path, "rb");
  fseek(f, 4 * 4096, SEEK_SET);
  CHECK_INT((int)fread(before, 1, sizeof before, f), (int)sizeof before);
  fclose(f);
  CHECK_INT(gw_store_open(path, &s, err, sizeof err), SL_ESQLITE);
  CHECK(s == NULL);
  CHECK(strstr(err, path) != NULL && strstr(err, "is damaged") != NULL && strstr(err, ".recover") != NULL);
  fprintf(stderr, "damaged pages: %s\n", err);
  struct stat st;
  CHECK(stat(path, &st) == 0 && st.st_size == size);
  unsigned char after[sizeof junk];
  f = fopen(path, "rb");
  fseek(f, 4 * 4096, SEEK_SET);
  CHECK_INT((int)fread(after, 1, sizeof after, f), (int)sizeof after);
  fclose(f);
  CHECK(memcmp(before, after, sizeof after) == 0);
}

/* ---- reads that fail half way ----
 * A VFS over the default one whose reads of a main database file fail
 * (SQLITE_IOERR_READ, as a bad disk sector gives) once reads_left, when
 * armed (>= 0), has counted down to 0. Its files offer no memory map, so
 * every read of a page goes through xRead. */

static sqlite3_vfs *real_vfs, failing_vfs;
static sqlite3_io_methods failing_io;
static int reads_left = -1;

struct failing_file {
  sqlite3_file base;
  bool main_db;
  sqlite3_file *real; /* right after this struct, in the same allocation */
};

static sqlite3_file *real_of(sqlite3_file *f) {
  return ((struct failing_file *)f)->real;
}

static int ff_read(sqlite3_file *f, void *buf, int n, sqlite3_int64 off) {
  if (((struct failing_file *)f)->main_db && reads_left >= 0 && reads_left-- == 0) {
    reads_left = 0;
    return SQLITE_IOERR_READ;
  }
  return real_of(f)->pMethods->xRead(real_of(f), buf, n, off);
}

#define REAL(f) real_of(f)->pMethods

static int ff_close(sqlite3_file *f) { return REAL(f)->xClose(real_of(f)); }
static int ff_write(sqlite3_file *f, const void *b, int n, sqlite3_int64 o) {
  return REAL(f)->xWrite(real_of(f), b, n, o);
}
static int ff_truncate(sqlite3_file *f, sqlite3_int64 n) { return REAL(f)->xTruncate(real_of(f), n); }
static int ff_sync(sqlite3_file *f, int flags) { return REAL(f)->xSync(real_of(f), flags); }
static int ff_size(sqlite3_file *f, sqlite3_int64 *n) { return REAL(f)->xFileSize(real_of(f), n); }
static int ff_lock(sqlite3_file *f, int l) { return REAL(f)->xLock(real_of(f), l); }
static int ff_unlock(sqlite3_file *f, int l) { return REAL(f)->xUnlock(real_of(f), l); }
static int ff_reserved(sqlite3_file *f, int *r) { return REAL(f)->xCheckReservedLock(real_of(f), r); }
static int ff_control(sqlite3_file *f, int op, void *a) { return REAL(f)->xFileControl(real_of(f), op, a); }
static int ff_sector(sqlite3_file *f) { return REAL(f)->xSectorSize(real_of(f)); }
static int ff_device(sqlite3_file *f) { return REAL(f)->xDeviceCharacteristics(real_of(f)); }
static int ff_shm_map(sqlite3_file *f, int pg, int sz, int ext, void volatile **p) {
  return REAL(f)->xShmMap(real_of(f), pg, sz, ext, p);
}
static int ff_shm_lock(sqlite3_file *f, int o, int n, int fl) { return REAL(f)->xShmLock(real_of(f), o, n, fl); }
static void ff_shm_barrier(sqlite3_file *f) { REAL(f)->xShmBarrier(real_of(f)); }
static int ff_shm_unmap(sqlite3_file *f, int del) { return REAL(f)->xShmUnmap(real_of(f), del); }

static int ff_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out_flags) {
  (void)vfs;
  struct failing_file *p = (struct failing_file *)f;
  p->real = (sqlite3_file *)&p[1];
  p->main_db = flags & SQLITE_OPEN_MAIN_DB;
  int rc = real_vfs->xOpen(real_vfs, name, p->real, flags, out_flags);
  p->base.pMethods = p->real->pMethods ? &failing_io : NULL;
  return rc;
}

static void failing_vfs_install(void) {
  real_vfs = sqlite3_vfs_find(NULL);
  failing_vfs = *real_vfs;
  failing_vfs.zName = "failing-reads";
  failing_vfs.pNext = NULL;
  failing_vfs.szOsFile = (int)sizeof(struct failing_file) + real_vfs->szOsFile;
  failing_vfs.xOpen = ff_open;
  failing_io = (sqlite3_io_methods){2, ff_close, ff_read, ff_write, ff_truncate, ff_sync, ff_size,
                                    ff_lock, ff_unlock, ff_reserved, ff_control, ff_sector, ff_device,
                                    ff_shm_map, ff_shm_lock, ff_shm_barrier, ff_shm_unmap, NULL, NULL};
  sqlite3_vfs_register(&failing_vfs, 1);
}

static void failing_vfs_remove(void) {
  sqlite3_vfs_unregister(&failing_vfs);
  sqlite3_vfs_register(real_vfs, 1);
}

/* A read of the store that fails half way (a bad sector, a damaged page) is
 * an error: a job's event log, a session's names, a job's attempts, the
 * live instances and jobs a restart takes back were given as far as the read
 * got, as if that were all of them, and a job that could not be read was
 * "no such job". The store is unharmed, and reads it all once the reads
 * succeed again. */
static void test_read_fails_half_way(void) {
  char path[256], err[256];
  path_of("readfail.db", path, sizeof path);
  failing_vfs_install();
  struct gw_store *s = NULL;
  CHECK_INT(gw_store_open(path, &s, err, sizeof err), 0);
  struct gw_job j;
  add_job(s, "train", json_object(), &j);
  char pad[300];
  memset(pad, 'x', sizeof pad - 1);
  pad[sizeof pad - 1] = 0;
  json_t *vars = json_object();
  for (int i = 0; i < 1000; i++) {
    json_t *ev = json_pack("{s:s,s:i,s:s}", "event", "output", "i", i, "text", pad);
    int64_t seq;
    CHECK_INT(gw_store_event_append(s, j.id, ev, &seq), 0);
    json_decref(ev);
    char name[16];
    snprintf(name, sizeof name, "v%04d", i);
    json_object_set_new(vars, name, json_pack("{s:s,s:s}", "t", "str", "v", pad));
  }
  json_t *defs = json_pack("[{s:s,s:s,s:{s:s}}]", "name", "m", "kind", "model", "spec", "type", "gpt");
  CHECK_INT(gw_store_session_set(s, "alice", "nb", vars, defs, NULL), 0);
  json_decref(defs);
  CHECK_INT(gw_store_user_put(s, "alice", "a1a1", NULL), 0);
  for (int i = 0; i < 300; i++) {
    struct gw_instance_row row = {.spot = true};
    snprintf(row.id, sizeof row.id, "i-%04d", i);
    snprintf(row.type, sizeof row.type, "t.small");
    snprintf(row.state, sizeof row.state, "idle");
    snprintf(row.public_key, sizeof row.public_key, "%.*s", 40, pad);
    CHECK_INT(gw_store_instance_put(s, &row), 0);
    struct gw_job more_job;
    add_job(s, "train", json_pack("{s:s}", "pad", pad), &more_job);
    gw_job_done(&more_job);
  }
  snprintf(j.instance, sizeof j.instance, "i-1");
  for (j.attempt = 1; j.attempt <= 300; j.attempt++)
    CHECK_INT(gw_store_attempt_begin(s, &j, j.attempt, j.attempt), 0);
  gw_store_free(s);

  /* a fresh handle has none of these pages in its cache */
  json_t *evs = NULL, *got = NULL, *atts = NULL, *cks = NULL;
  bool more = false;
  CHECK_INT(gw_store_open(path, &s, err, sizeof err), 0);
  reads_left = 3;
  CHECK(gw_store_events(s, j.id, 0, 100000, &evs, &more) < 0);
  CHECK(evs == NULL);
  reads_left = 3;
  CHECK(gw_store_session_get(s, "alice", "nb", &got) < 0);
  CHECK(got == NULL);
  reads_left = 3;
  CHECK(gw_store_job_history(s, j.id, &atts, &cks) < 0);
  CHECK(atts == NULL && cks == NULL);
  struct gw_instance_row *rows = NULL;
  struct gw_job *jobs = NULL, one;
  size_t n = 0;
  reads_left = 3;
  CHECK(gw_store_instances_live(s, &rows, &n) < 0);
  CHECK(rows == NULL);
  reads_left = 3;
  CHECK(gw_store_jobs_list(s, NULL, true, 1000, &jobs, &n) < 0);
  CHECK(jobs == NULL);
  reads_left = 0;
  CHECK(gw_store_job_get(s, j.id, &one) < 0);
  CHECK(gw_store_job_get(s, j.id, &one) != SL_ENAME); /* not "no such job" */
  json_t *def = NULL;
  CHECK(gw_store_session_def(s, "alice", "nb", "m", "model", &def) != SL_ENAME);
  char user[64] = "";
  CHECK(gw_store_user_by_token(s, "a1a1", user, sizeof user) != SL_EAUTH);
  reads_left = -1;
  CHECK_INT(gw_store_session_def(s, "alice", "nb", "m", "model", &def), 0);
  json_decref(def);
  CHECK_INT(gw_store_user_by_token(s, "a1a1", user, sizeof user), 0);
  CHECK_STR(user, "alice");
  CHECK_INT(gw_store_instances_live(s, &rows, &n), 0);
  CHECK_INT(n, 300);
  free(rows);
  CHECK_INT(gw_store_jobs_list(s, NULL, true, 1000, &jobs, &n), 0);
  CHECK_INT(n, 301);
  gw_store_jobs_free(jobs, n);
  CHECK_INT(gw_store_job_get(s, j.id, &one), 0);
  gw_job_done(&one);
  CHECK_INT(gw_store_events(s, j.id, 0, 100000, &evs, &more), 0);
  CHECK_INT(json_array_size(evs), 1001); /* the first, written at create */
  CHECK_INT(gw_store_session_get(s, "alice", "nb", &got), 0);
  CHECK(json_equal(json_object_get(got, "vars"), vars));
  CHECK_INT(gw_store_job_history(s, j.id, &atts, &cks), 0);
  CHECK_INT(json_array_size(atts), 300);
  json_decref(evs);
  json_decref(got);
  json_decref(atts);
  json_decref(cks);
  json_decref(vars);
  gw_job_done(&j);
  gw_store_free(s);
  failing_vfs_remove();
}

static void raw_exec(const char *path, const char *sql) {
  sqlite3 *db;
  CHECK_INT(sqlite3_open(path, &db), SQLITE_OK);
  CHECK_INT(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
}

/* A placement's job row, its "placed" event and its attempt's row go in one
 * transaction: a database that refuses the attempt's row gets none of the
 * three (no job placed for an attempt without a row), and all three are
 * kept, in order, and written by the retry. */
static void test_placed_one_transaction(void) {
  char path[256], err[256];
  path_of("placed.db", path, sizeof path);
  struct gw_store *s = NULL;
  CHECK_INT(gw_store_open(path, &s, err, sizeof err), 0);
  struct gw_job j;
  add_job(s, "train", json_object(), &j);
  json_t *ev = json_pack("{s:s,s:i}", "event", "placed", "attempt", 1);
  snprintf(j.instance, sizeof j.instance, "i-1");
  j.attempt = 1;
  CHECK_INT(gw_store_job_save_placed(s, &j, ev, 0, 1000), 0);
  CHECK_INT(count(path, "SELECT attempt FROM jobs"), 1);
  CHECK_INT(count(path, "SELECT count(*) FROM events WHERE kind='placed'"), 1);
  CHECK_INT(count(path, "SELECT count(*) FROM attempts WHERE attempt=1 AND from_step=0"), 1);

  raw_exec(path, "CREATE TRIGGER refuse BEFORE INSERT ON attempts BEGIN SELECT RAISE(ABORT, 'no'); END");
  j.attempt = 2;
  json_object_set_new(ev, "attempt", json_integer(2));
  CHECK_INT(gw_store_job_save_placed(s, &j, ev, 40, 2000), 1); /* kept */
  CHECK_INT(count(path, "SELECT attempt FROM jobs"), 1);
  CHECK_INT(count(path, "SELECT count(*) FROM events WHERE kind='placed'"), 1);
  CHECK_INT(count(path, "SELECT count(*) FROM attempts"), 1);
  CHECK_INT(gw_store_retry(s), SL_ESQLITE); /* still refused: still kept */
  CHECK_INT(count(path, "SELECT count(*) FROM events WHERE kind='placed'"), 1);
  raw_exec(path, "DROP TRIGGER refuse");
  CHECK(gw_store_retry(s) >= 2);
  CHECK_INT(count(path, "SELECT attempt FROM jobs"), 2);
  CHECK_INT(count(path, "SELECT count(*) FROM events WHERE kind='placed'"), 2);
  CHECK_INT(count(path, "SELECT count(*) FROM attempts WHERE attempt=2 AND from_step=40"), 1);
  json_decref(ev);
  gw_job_done(&j);
  gw_store_free(s);
}

/* The multipart uploads workers began: a row once per upload, at most so
 * many per instance, listed per instance or all, gone once aborted. */
static void test_multipart(void) {
  char path[256], err[256];
  path_of("multipart.db", path, sizeof path);
  struct gw_store *s = NULL;
  CHECK_INT(gw_store_open(path, &s, err, sizeof err), 0);
  if (!s)
    return;
  CHECK_INT(gw_store_multipart_seen(s, "i-1", "J000001/ckpt-00000010.tc", "up-a", 1, 2), 0);
  CHECK_INT(gw_store_multipart_seen(s, "i-1", "J000001/ckpt-00000010.tc", "up-a", 2, 2), 0);
  CHECK_INT(gw_store_multipart_seen(s, "i-1", "J000001/ckpt-00000020.tc", "up-b", 3, 2), 0);
  CHECK_INT(gw_store_multipart_seen(s, "i-2", "J000002/ckpt-00000010.tc", "up-c", 4, 2), 0);
  /* an instance at its bound: a new upload refused, one it has still seen */
  CHECK_INT(gw_store_multipart_seen(s, "i-1", "J000001/ckpt-00000030.tc", "up-d", 5, 2), SL_ELIMIT);
  CHECK_INT(gw_store_multipart_seen(s, "i-1", "J000001/ckpt-00000020.tc", "up-b", 6, 2), 0);
  json_t *l = NULL;
  CHECK_INT(gw_store_multipart_list(s, "i-1", &l), 0);
  CHECK_INT(json_array_size(l), 2);
  CHECK_STR(sl_json_get_str(json_array_get(l, 0), "upload_id", ""), "up-a");
  CHECK_STR(sl_json_get_str(json_array_get(l, 1), "key", ""), "J000001/ckpt-00000020.tc");
  CHECK_STR(sl_json_get_str(json_array_get(l, 1), "instance", ""), "i-1");
  json_decref(l);
  l = NULL;
  const char *done[] = {"up-a", "up-none"};
  CHECK_INT(gw_store_multipart_done(s, done, 2), 0);
  CHECK_INT(gw_store_multipart_list(s, NULL, &l), 0);
  CHECK_INT(json_array_size(l), 2);
  CHECK_STR(sl_json_get_str(json_array_get(l, 0), "upload_id", ""), "up-b");
  CHECK_STR(sl_json_get_str(json_array_get(l, 1), "upload_id", ""), "up-c");
  json_decref(l);
  /* they outlive the gateway */
  s = gw_store_free(s);
  CHECK_INT(gw_store_open(path, &s, err, sizeof err), 0);
  l = NULL;
  CHECK_INT(gw_store_multipart_list(s, "i-2", &l), 0);
  CHECK_INT(json_array_size(l), 1);
  json_decref(l);
  gw_store_free(s);
}

int main(void) {
  if (!mkdtemp(dir))
    return 1;
  test_migrations();
  test_concurrent_events();
  test_sessions();
  test_session_bounds();
  test_session_delete();
  test_thin_metrics();
  test_trim_output();
  test_uploads();
  test_multipart();
  test_users_sync();
  test_damaged_event_bodies();
  test_damaged_pages();
  test_read_fails_half_way();
  test_placed_one_transaction();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", dir);
  TEST_MAIN_END();
}
