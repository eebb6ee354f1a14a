/* What the scheduler learned, kept across gateway restarts
 * (sched_learned.c), over the in-process gateway of gw-fixture.h and its
 * real SQLite store: placement's memory and deadline planning's
 * measurements are written to the store's learned table and read back by
 * the next scheduler; writes wait a few seconds unless forced; a row that
 * cannot be read leaves the scheduler learning anew, and its next write
 * replaces the row. */
#include "gw-fixture.h"
#include "harness.h"
#include "placemem.h"
#include "sched_int.h"

#include "sl_err.h"
#include "sl_time.h"

#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

/* The scheduler as the next gateway finds it: nothing learned yet. */
static void forget_all(struct fx *f) {
  gw_place_memory_free(f->sched->mem);
  f->sched->mem = gw_place_memory_new();
  gw_sched_deadline_free(f->sched->dl);
  f->sched->dl = gw_sched_deadline_new(f->sched);
  CHECK(f->sched->mem && f->sched->dl);
}

static json_t *row(struct fx *f, const char *name) {
  json_t *body = NULL;
  CHECK_INT(gw_store_learned_get(f->store, name, &body), 0);
  return body;
}

static void sql(struct fx *f, const char *statement) {
  char path[512];
  snprintf(path, sizeof path, "%s/gateway.db", f->dir);
  sqlite3 *db = NULL;
  CHECK_INT(sqlite3_open(path, &db), SQLITE_OK);
  CHECK_INT(sqlite3_exec(db, statement, NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
}

/* The time the row called name was written. */
static int64_t written_us(struct fx *f, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/gateway.db", f->dir);
  sqlite3 *db = NULL;
  sqlite3_stmt *st = NULL;
  int64_t t = -1;
  CHECK_INT(sqlite3_open(path, &db), SQLITE_OK);
  CHECK_INT(sqlite3_prepare_v2(db, "SELECT time_us FROM learned WHERE name = ?", -1, &st, NULL),
            SQLITE_OK);
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  if (sqlite3_step(st) == SQLITE_ROW)
    t = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return t;
}

static void view(struct fx *f, uint64_t shape, struct gw_place_rate *rates,
                 struct gw_place_ctx *c) {
  gw_place_memory_view(f->sched->mem, shape, rates, GW_PLACE_RATES_MAX, c);
}

static void test_kept(void) {
  struct fx *f = fx_new(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  struct gw_sched *s = f->sched;
  struct gw_place_rate rates[GW_PLACE_RATES_MAX];
  struct gw_place_ctx c;
  json_t *body = row(f, "placement");
  CHECK(body == NULL); /* a new state: nothing learned */
  int64_t now = sl_time_mono_us();
  gw_place_memory_failure(s->mem, &f->fp->base, "t.small", "z-1", true, false, now);
  gw_place_memory_rate(s->mem, 42, "t.big", "T4x", 4, 3.5);
  gw_place_memory_restart(s->mem, 75);
  json_t *steps = json_loads("{\"startup_s\": 95, \"steps\": [{\"model\": \"00000000000000ab\","
                             " \"step_s\": 0.25}]}", 0, NULL);
  size_t skipped = 9;
  CHECK_INT(gw_sched_deadline_load(s->dl, steps, &skipped), 2);
  CHECK_INT(skipped, 0);
  json_decref(steps);

  gw_sched_learned_save(s, true);
  body = row(f, "placement");
  CHECK(body && json_array_size(json_object_get(body, "failures")) == 1 &&
        json_array_size(json_object_get(body, "rates")) == 1);
  json_decref(body);
  body = row(f, "deadline");
  CHECK(body && json_number_value(json_object_get(body, "startup_s")) == 95);
  json_decref(body);

  /* a change written at most every few seconds, unless forced */
  gw_place_memory_restart(s->mem, 75);
  gw_place_memory_rate(s->mem, 43, "t.small", "T1", 1, 9);
  gw_sched_learned_save(s, false);
  body = row(f, "placement");
  CHECK_INT(json_array_size(json_object_get(body, "rates")), 1);
  json_decref(body);
  gw_sched_learned_save(s, true);
  body = row(f, "placement");
  CHECK_INT(json_array_size(json_object_get(body, "rates")), 2);
  json_decref(body);

  /* the next gateway reads it back */
  forget_all(f);
  view(f, 42, rates, &c);
  CHECK_INT(c.n_rates + c.n_failures, 0);
  gw_sched_learned_load(s);
  view(f, 42, rates, &c);
  CHECK_INT(c.n_rates, 1);
  CHECK_NEAR(c.rates[0].steps_per_s, 3.5, 1e-12);
  CHECK_INT(c.n_failures, 1);
  CHECK(c.n_failures == 1 && c.failures[0].prov == &f->fp->base &&
        !strcmp(c.failures[0].zone, "z-1") && c.failures[0].spot);
  CHECK(c.n_failures == 1 && sl_time_mono_us() - c.failures[0].at_us < 60 * SL_US_PER_S);
  CHECK_NEAR(c.restart_s, 75, 1e-12);
  body = gw_sched_deadline_json(s->dl);
  CHECK(json_number_value(json_object_get(body, "startup_s")) == 95);
  json_t *step = json_array_get(json_object_get(body, "steps"), 0);
  CHECK(step && !strcmp(json_string_value(json_object_get(step, "model")), "00000000000000ab") &&
        json_number_value(json_object_get(step, "step_s")) == 0.25);
  json_decref(body);
  /* nothing changed since it was read: nothing to write */
  sql(f, "UPDATE learned SET time_us = 1");
  gw_sched_learned_save(s, true);
  CHECK(written_us(f, "placement") == 1 && written_us(f, "deadline") == 1);

  /* a row that cannot be read: the scheduler learns anew and its next
   * write replaces the row */
  sql(f, "UPDATE learned SET body = '{\"rates\": [' WHERE name = 'placement'");
  json_t *bad = NULL;
  CHECK_INT(gw_store_learned_get(f->store, "placement", &bad), SL_EPARSE);
  forget_all(f);
  gw_sched_learned_load(s);
  view(f, 42, rates, &c);
  CHECK_INT(c.n_rates + c.n_failures, 0);
  CHECK_NEAR(c.restart_s, 0, 1e-12);
  body = gw_sched_deadline_json(s->dl); /* the other row is read as before */
  CHECK(json_number_value(json_object_get(body, "startup_s")) == 95);
  json_decref(body);
  gw_place_memory_rate(s->mem, 44, "t.small", "T1", 1, 2);
  gw_sched_learned_save(s, true);
  body = row(f, "placement");
  CHECK(body && json_array_size(json_object_get(body, "rates")) == 1);
  json_decref(body);
  CHECK(written_us(f, "placement") > 1 && written_us(f, "deadline") == 1);
  fx_free(f);
}

int main(void) {
  test_kept();
  TEST_MAIN_END();
}
