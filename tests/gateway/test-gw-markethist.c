/* The market's history (markethist.h) across gateway restarts, on a real
 * SQLite store: what one history wrote, the next reads back; a short stop
 * is filled with the last state seen, a long one starts the history again;
 * a malformed chunk breaks it; another provider's rows are left alone; the
 * store keeps about a week of chunks per offer. */
#include "harness.h"
#include "markethist.h"
#include "provider.h"
#include "store.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <unistd.h>

#define MINUTE_US (60 * INT64_C(1000000))

static char dir[] = "/tmp/test-gw-markethist-XXXXXX";
static char db_path[sizeof dir + 16];
static const struct gw_provider local = {.name = "local"};
static const struct gw_provider aws = {.name = "aws"};
static int64_t tick_us = MINUTE_US; /* a tick's wall time */
#define T0_US (INT64_C(1800000000) * 1000000) /* the wall clock of tick 0 */

/* The capacity of tick k in the made-up market: runs of 7 up, 3 down. */
static bool up_at(size_t k) {
  return k % 10 < 7;
}

static double price_at(size_t k) {
  return 0.5 + 0.01 * (double)(k % 13);
}

static struct gw_store *open_store(void) {
  struct gw_store *s = NULL;
  char err[200];
  CHECK_INT(gw_store_open(db_path, &s, err, sizeof err), 0);
  return s;
}

/* A gateway's life: a history on s, restored at tick `from`, that records
 * ticks [from, n) of the market for the local offer "g.x" in "z-a" (and,
 * with both, aws's "g.x"), tick k at wall clock t0_us + k ticks, then is
 * freed (which writes it). */
static void live(struct gw_store *s, size_t from, size_t n, int64_t t0_us, bool both) {
  struct gw_mh *h = gw_mh_new(s);
  struct gw_provider *provs[] = {(struct gw_provider *)&local, (struct gw_provider *)&aws};
  gw_mh_restore(h, provs, both ? 2 : 1, tick_us, t0_us + (int64_t)from * tick_us);
  for (size_t k = from; k < n; k++) {
    gw_mh_push(gw_mh_find(h, &local, "g.x", "z-a", true), up_at(k), price_at(k));
    if (both)
      gw_mh_push(gw_mh_find(h, &aws, "g.x", "", true), !up_at(k), 2 * price_at(k));
    gw_mh_end_tick(h, t0_us + (int64_t)k * tick_us);
  }
  gw_mh_free(h);
}

/* A history restored at wall clock now_us (providers: local, or both). */
static struct gw_mh *restored(struct gw_store *s, int64_t now_us, bool both, size_t *ret_n) {
  struct gw_mh *h = gw_mh_new(s);
  struct gw_provider *provs[] = {(struct gw_provider *)&local, (struct gw_provider *)&aws};
  *ret_n = gw_mh_restore(h, provs, both ? 2 : 1, tick_us, now_us);
  return h;
}

/* Whether a history restored at now_us says it restored one offer and
 * holds ticks [first, n) of the local one. */
static bool local_holds(struct gw_store *s, int64_t now_us, size_t first, size_t n) {
  size_t restored_n;
  struct gw_mh *h = restored(s, now_us, false, &restored_n);
  const struct gw_mh_offer *o = gw_mh_find(h, &local, "g.x", "z-a", false);
  bool ok = restored_n == 1 && o && o->first == first && o->n == n;
  gw_mh_free(h);
  return ok;
}

static bool same_ticks(const struct gw_mh_offer *o, size_t from, size_t to) {
  for (size_t k = from; k < to; k++)
    if ((gw_mh_avail(o, k) > 0) != up_at(k) || gw_mh_price(o, k) != price_at(k))
      return false;
  return true;
}

static int count_rows(const char *where) {
  sqlite3 *db = NULL;
  sqlite3_stmt *st = NULL;
  char sql[200];
  snprintf(sql, sizeof sql, "SELECT count(*) FROM market_history WHERE %s", where);
  int n = -1;
  if (sqlite3_open(db_path, &db) == SQLITE_OK &&
      sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
    n = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return n;
}

static void exec_sql(const char *sql) {
  sqlite3 *db = NULL;
  CHECK(sqlite3_open(db_path, &db) == SQLITE_OK);
  CHECK(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK);
  sqlite3_close(db);
}

static void reset(void) {
  exec_sql("DELETE FROM market_history");
}

/* A restart after 5 minutes: every tick back, the 5 minutes as the last state. */
static void test_short_stop(void) {
  reset();
  struct gw_store *s = open_store();
  int64_t t0 = T0_US;
  live(s, 0, 150, t0, false);
  CHECK_INT(count_rows("provider='local'"), 3); /* chunks 0, 1 and 2 (its first 30 ticks) */
  size_t n = 0;
  /* the next tick would be 154: 150..153 were missed */
  struct gw_mh *h = restored(s, t0 + 154 * tick_us, false, &n);
  CHECK_INT(n, 1);
  CHECK_INT(gw_mh_count(h), 1);
  const struct gw_mh_offer *o = gw_mh_find(h, &local, "g.x", "z-a", false);
  CHECK(o != NULL);
  if (o) {
    CHECK_INT(o->first, 0);
    CHECK_INT(o->n, 154);
    CHECK(same_ticks(o, 0, 150));
    for (size_t k = 150; k < 154; k++) { /* tick 149: down, at its price */
      CHECK_INT(gw_mh_avail(o, k), 0);
      CHECK(gw_mh_price(o, k) == price_at(149));
    }
  }
  gw_mh_free(h);
  /* the filled ticks were written with the rest: a second restart at once sees them */
  h = restored(s, t0 + 154 * tick_us, false, &n);
  o = gw_mh_find(h, &local, "g.x", "z-a", false);
  CHECK(o && o->n == 154 && same_ticks(o, 0, 150));
  gw_mh_free(h);
  /* and the ticks recorded after a restart go on where the old ones end */
  live(s, 154, 200, t0, false);
  h = restored(s, t0 + 199 * tick_us, false, &n);
  o = gw_mh_find(h, &local, "g.x", "z-a", false);
  CHECK(o && o->n == 200 && o->first == 0 && same_ticks(o, 154, 200) && same_ticks(o, 0, 150));
  gw_mh_free(h);
  gw_store_free(s);
}

/* A restart after two hours: the history starts again (at a chunk's start). */
static void test_long_stop(void) {
  reset();
  struct gw_store *s = open_store();
  int64_t t0 = T0_US;
  live(s, 0, 90, t0, false);
  size_t n = 9;
  struct gw_mh *h = restored(s, t0 + (89 + 120) * tick_us, false, &n);
  CHECK_INT(n, 0);
  const struct gw_mh_offer *o = gw_mh_find(h, &local, "g.x", "z-a", false);
  CHECK(o && o->n == 120 && o->first == 120);
  gw_mh_free(h);
  /* what it records from then on is what the next restart reads */
  live(s, 209, 220, t0, false);
  CHECK(local_holds(s, t0 + 220 * tick_us, 120, 131));
  gw_store_free(s);
}

/* A chunk whose prices are cut short, or whose clock is: the ticks before
 * it are not used. */
static void test_malformed(void) {
  reset();
  struct gw_store *s = open_store();
  int64_t t0 = T0_US;
  live(s, 0, 200, t0, false);
  exec_sql("UPDATE market_history SET price=x'0000' WHERE chunk=1");
  size_t n = 0;
  struct gw_mh *h = restored(s, t0 + 200 * tick_us, false, &n);
  CHECK_INT(n, 1);
  const struct gw_mh_offer *o = gw_mh_find(h, &local, "g.x", "z-a", false);
  CHECK(o && o->first == 120 && o->n == 200 && same_ticks(o, 120, 200));
  gw_mh_free(h);
  /* a capacity byte that is neither 0 nor 1: the same */
  exec_sql("UPDATE market_history SET up=x'02' || substr(up, 2) WHERE chunk=2");
  CHECK(local_holds(s, t0 + 200 * tick_us, 180, 200));
  /* a chunk number no history reaches: skipped, the rest as it was */
  exec_sql("INSERT INTO market_history SELECT provider, type, zone, 1125899906842624, end_us, up,"
           " price FROM market_history WHERE chunk=3");
  CHECK(local_holds(s, t0 + 200 * tick_us, 180, 200));
  /* a clock before 1970 on the newest chunk: no gap is computed from it;
   * nothing before it is used */
  exec_sql("DELETE FROM market_history WHERE chunk=1125899906842624;"
           "UPDATE market_history SET end_us=-9223372036854775808 WHERE chunk=3");
  size_t restored_n = 9;
  h = restored(s, t0 + 200 * tick_us, false, &restored_n);
  CHECK_INT(restored_n, 0);
  o = gw_mh_find(h, &local, "g.x", "z-a", false);
  CHECK(o && o->first == 240 && o->n == 240);
  gw_mh_free(h);
  gw_store_free(s);
}

/* aws's rows stay for a gateway that enables it again, and are its own. */
static void test_other_provider(void) {
  reset();
  struct gw_store *s = open_store();
  int64_t t0 = T0_US;
  live(s, 0, 70, t0, true);
  size_t n = 0;
  struct gw_mh *h = restored(s, t0 + 70 * tick_us, false, &n);
  CHECK_INT(n, 1);
  CHECK_INT(gw_mh_count(h), 1);
  CHECK(gw_mh_find(h, &aws, "g.x", "", false) == NULL);
  gw_mh_free(h);
  CHECK_INT(count_rows("provider='aws'"), 2);
  h = restored(s, t0 + 70 * tick_us, true, &n);
  CHECK_INT(n, 2);
  const struct gw_mh_offer *o = gw_mh_find(h, &aws, "g.x", "", false);
  CHECK(o && o->n == 70 && (gw_mh_avail(o, 3) > 0) == !up_at(3) && gw_mh_price(o, 3) == 2 * price_at(3));
  gw_mh_free(h);
  gw_store_free(s);
}

/* An offer gone from the market in a tick records no capacity there, at
 * its last price; one that comes back records again. */
static void test_gone(void) {
  struct gw_mh *h = gw_mh_new(NULL);
  gw_mh_push(gw_mh_find(h, &local, "g.x", "z-a", true), true, 0.5);
  gw_mh_push(gw_mh_find(h, &aws, "g.x", "", true), true, 0.7);
  gw_mh_end_tick(h, T0_US);
  gw_mh_push(gw_mh_find(h, &local, "g.x", "z-a", false), true, 0.6);
  gw_mh_end_tick(h, T0_US + MINUTE_US);
  gw_mh_push(gw_mh_find(h, &aws, "g.x", "", false), true, 0.8);
  gw_mh_end_tick(h, T0_US + 2 * MINUTE_US);
  const struct gw_mh_offer *a = gw_mh_find(h, &aws, "g.x", "", false);
  const struct gw_mh_offer *l = gw_mh_find(h, &local, "g.x", "z-a", false);
  CHECK(a && a->n == 3 && l && l->n == 3);
  if (a && l) {
    CHECK(gw_mh_avail(a, 0) > 0 && gw_mh_avail(a, 1) == 0 && gw_mh_avail(a, 2) > 0);
    CHECK(gw_mh_price(a, 1) == 0.7 && gw_mh_price(a, 2) == 0.8);
    CHECK(gw_mh_avail(l, 1) > 0 && gw_mh_avail(l, 2) == 0 && gw_mh_price(l, 2) == 0.6);
  }
  gw_mh_free(h);
}

/* The store keeps the chunks of the last week (and the one under way). */
static void test_week(void) {
  reset();
  struct gw_store *s = open_store();
  struct gw_market_chunk c[8];
  memset(c, 0, sizeof c);
  for (int i = 0; i < 8; i++) {
    snprintf(c[i].provider, sizeof c[i].provider, "local");
    snprintf(c[i].type, sizeof c[i].type, "g.x");
    c[i].chunk = i;
    c[i].n = 1;
  }
  CHECK_INT(gw_store_market_put(s, c, 8, 3), 0);
  CHECK_INT(count_rows("1"), 4); /* chunks 4..7 */
  CHECK_INT(count_rows("chunk < 4"), 0);
  c[0].n = 0; /* not a chunk: refused, nothing written */
  c[0].chunk = 100;
  CHECK(gw_store_market_put(s, c, 1, 3) < 0);
  CHECK_INT(count_rows("1"), 4);
  gw_store_free(s);
  /* a week and a day of ticks (a tick a second: written every tenth): what
   * is kept covers the ring */
  reset();
  s = open_store();
  tick_us = MINUTE_US / 60;
  int64_t t0 = T0_US;
  live(s, 0, GW_MH_TICKS + 1440, t0, false);
  int rows = count_rows("provider='local'");
  CHECK(rows >= GW_MH_TICKS / GW_MH_CHUNK && rows <= GW_MH_TICKS / GW_MH_CHUNK + 2);
  size_t n = 0;
  struct gw_mh *h = restored(s, t0 + (GW_MH_TICKS + 1440) * tick_us, false, &n);
  const struct gw_mh_offer *o = gw_mh_find(h, &local, "g.x", "z-a", false);
  CHECK(o && o->n == GW_MH_TICKS + 1440 && o->n - o->first == GW_MH_TICKS);
  CHECK(o && same_ticks(o, o->first, GW_MH_TICKS + 1440));
  gw_mh_free(h);
  gw_store_free(s);
  tick_us = MINUTE_US;
}

int main(void) {
  if (!mkdtemp(dir))
    return 1;
  snprintf(db_path, sizeof db_path, "%s/gateway.db", dir);
  gw_store_free(open_store()); /* the schema */
  test_short_stop();
  test_long_stop();
  test_malformed();
  test_other_provider();
  test_gone();
  test_week();
  char cmd[sizeof dir + 16];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", dir);
  TEST_MAIN_END();
}
