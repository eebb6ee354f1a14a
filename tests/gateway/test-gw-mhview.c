/* The deadline jobs' shared copies of the market's history (mhview.h):
 * every reader sees exactly the ticks the history recorded, from its own
 * first tick on, as the market goes on; readers of one offer share one
 * copy; a copy keeps only what its readers still read and is freed with
 * its last reader; ticks a copy could no longer take from the ring read
 * as none. */
#include "harness.h"
#include "markethist.h"
#include "mhview.h"
#include "provider.h"

#include <stdlib.h>

static const struct gw_provider local = {.name = "local"};

/* The made-up market: offer i has capacity in tick k unless k % (7 + i) < 2. */
static bool up_at(int i, size_t k) {
  return k % (size_t)(7 + i) >= 2;
}

static double price_at(int i, size_t k) {
  return 0.3 * (i + 1) + 0.001 * (double)(k % 97);
}

static struct gw_mh_offer *offer(struct gw_mh *h, int i) {
  static const char *const zones[] = {"z-a", "z-b", "z-c"};
  return gw_mh_find(h, &local, "g.x", zones[i], true);
}

/* Records ticks until every offer has n. */
static void record_to(struct gw_mh *h, size_t n) {
  while (offer(h, 0)->n < n) {
    size_t k = offer(h, 0)->n;
    for (int i = 0; i < 3; i++)
      gw_mh_push(offer(h, i), up_at(i, k), price_at(i, k));
    gw_mh_end_tick(h, 0);
  }
}

/* Whether a reader of offer i from tick `from` sees ticks [from, to) as recorded. */
static bool reads(const struct gw_mhv *v, int i, size_t from, size_t to) {
  if (v->base > from || v->base + v->n < to)
    return false;
  const int32_t *a = gw_mhv_avail(v, from);
  const double *p = gw_mhv_price(v, from);
  for (size_t k = from; k < to; k++)
    if ((a[k - from] > 0) != up_at(i, k) || p[k - from] != price_at(i, k))
      return false;
  return true;
}

static void test_shared_and_trimmed(void) {
  struct gw_mh *h = gw_mh_new(NULL);
  struct gw_mhv_set set = {0};
  record_to(h, 1000);
  /* job A reads zones a and b from tick 400; job B zone b from tick 100 */
  struct gw_mhv *a0 = gw_mhv_use(&set, offer(h, 0), 400);
  struct gw_mhv *a1 = gw_mhv_use(&set, offer(h, 1), 400);
  struct gw_mhv *b1 = gw_mhv_use(&set, offer(h, 1), 100);
  CHECK(a0 && a1 && b1);
  CHECK(a1 == b1); /* one copy of zone b, from the older reader's tick */
  CHECK_INT((long long)b1->refs, 2);
  CHECK_INT((long long)b1->base, 100);
  CHECK(reads(a0, 0, 400, 1000) && reads(a1, 1, 400, 1000) && reads(b1, 1, 100, 1000));
  /* one copy per offer, with room to grow (a copy per reader would hold
   * zone b's ticks 400 to 1000 twice) */
  CHECK(gw_mhv_bytes(&set) <= (600 + 900 + 2 * 257) * (sizeof(int32_t) + sizeof(double)));
  /* the market goes on: every reader's view grows, the old ticks stay */
  for (size_t n = 1001; n <= 1200; n++) {
    record_to(h, n);
    CHECK_INT(gw_mhv_sync(&set), 0);
  }
  CHECK(reads(a0, 0, 400, 1200) && reads(a1, 1, 400, 1200) && reads(b1, 1, 100, 1200));
  /* B ends: zone b's ticks before 400 are read by nobody and go (they are
   * more than a quarter of the copy) */
  gw_mhv_release(b1);
  gw_mhv_trim_begin(&set);
  gw_mhv_keep(a0, 400);
  gw_mhv_keep(a1, 400);
  gw_mhv_trim_end(&set);
  CHECK_INT((long long)a1->base, 400);
  CHECK(reads(a0, 0, 400, 1200) && reads(a1, 1, 400, 1200));
  /* a reader that starts later shares the copy; one that starts earlier
   * than the copy has it extended back from the ring */
  struct gw_mhv *c1 = gw_mhv_use(&set, offer(h, 1), 200);
  CHECK(c1 == a1 && c1->base == 200 && reads(c1, 1, 200, 1200) && reads(a1, 1, 400, 1200));
  gw_mhv_release(c1);
  /* A ends: its copies are freed */
  gw_mhv_release(a0);
  gw_mhv_release(a1);
  CHECK_INT((long long)gw_mhv_bytes(&set), 0);
  CHECK(!set.v[0].offer && !set.v[1].offer);
  gw_mhv_clear(&set);
  gw_mh_free(h);
}

/* A reader asks for more than the ring holds: it reads from the oldest tick held. */
static void test_ring_bounds(void) {
  struct gw_mh *h = gw_mh_new(NULL);
  struct gw_mhv_set set = {0};
  record_to(h, GW_MH_TICKS + 500);
  struct gw_mhv *v = gw_mhv_use(&set, offer(h, 2), 0);
  CHECK(v && v->base == 500 && reads(v, 2, 500, GW_MH_TICKS + 500));
  /* a copy left behind (it could not grow for longer than the ring holds):
   * the ticks it missed read as none at the last price it had */
  size_t end = v->base + v->n;
  double last = v->price[v->n - 1];
  record_to(h, end + GW_MH_TICKS + 10);
  CHECK_INT(gw_mhv_sync(&set), 0);
  CHECK_INT((long long)(v->base + v->n), (long long)(end + GW_MH_TICKS + 10));
  bool none = true;
  for (size_t k = end; k < end + 10; k++)
    none = none && gw_mhv_avail(v, k)[0] == 0 && gw_mhv_price(v, k)[0] == last;
  CHECK(none);
  CHECK(reads(v, 2, end + 10, end + GW_MH_TICKS + 10));
  gw_mhv_clear(&set);
  gw_mh_free(h);
}

int main(void) {
  test_shared_and_trimmed();
  test_ring_bounds();
  TEST_MAIN_END();
}
