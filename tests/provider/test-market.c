/* The simulated market: the random model's determinism and bounds, trace
 * capacity and prices, and clear errors for malformed traces. With an
 * argument, also loads that real trace file (spot-traces format). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "catalog.h"
#include "harness.h"
#include "market.h"
#include "sl_err.h"

static char tmpdir[] = "/tmp/spotlab-market-XXXXXX";

static const char *write_tmp(const char *name, const char *text) {
  static char path[256];
  snprintf(path, sizeof path, "%s/%s", tmpdir, name);
  FILE *f = fopen(path, "w");
  fputs(text, f);
  fclose(f);
  return path;
}

static int market_for(const char *spec, struct gw_catalog *cat, struct gw_market **m, char *err) {
  return gw_market_new(spec, cat, m, err, 512);
}

int main(int argc, char **argv) {
  char path[4096], err[512], spec[600];
  struct gw_catalog *cat = NULL;
  struct gw_market *a = NULL, *b = NULL, *c = NULL;
  CHECK(mkdtemp(tmpdir) != NULL);
  CHECK_INT(gw_catalog_default_path(path, sizeof path), 0);
  CHECK_INT(gw_catalog_load(path, &cat, err, sizeof err), 0);
  if (!cat)
    TEST_MAIN_END();
  size_t g5 = (size_t)gw_catalog_find(cat, "g5.xlarge");
  double base = gw_catalog_get(cat, g5)->spot_usd_per_hour;

  /* Same seed, same preemption times; another seed, others. */
  CHECK_INT(market_for("random:42", cat, &a, err), 0);
  CHECK_INT(market_for("random:42", cat, &b, err), 0);
  CHECK_INT(market_for("random:43", cat, &c, err), 0);
  int same = 0, differ = 0, rebalanced = 0;
  double sum_s = 0;
  const int N = 4000;
  for (int i = 0; i < N; i++) {
    int64_t ta, la, tb, lb, tc, lc;
    gw_market_draw(a, g5, &ta, &la);
    gw_market_draw(b, g5, &tb, &lb);
    gw_market_draw(c, g5, &tc, &lc);
    same += ta == tb && la == lb;
    differ += ta != tc;
    rebalanced += la > 0;
    sum_s += (double)ta / 1e6;
    CHECK(ta > 0 && ta != INT64_MAX);
  }
  CHECK_INT(same, N);
  CHECK(differ > N * 9 / 10);
  /* Exponential with the >20% bucket's mean (2 h): the sample mean of 4000
   * draws sits within 5% of it; about half get a rebalance first. */
  CHECK_NEAR(sum_s / N, 7200, 7200 * 0.05);
  CHECK(rebalanced > N * 4 / 10 && rebalanced < N * 6 / 10);
  CHECK_NEAR(gw_market_mean_time_to_preempt_s(a, g5), 7200, 1e-6);

  /* Prices wander within ±10%, deterministically, and do move. */
  double lo = 1e9, hi = 0;
  for (int64_t t = 0; t < INT64_C(86400000000); t += INT64_C(60000000)) {
    double pa = gw_market_price(a, g5, t);
    CHECK(pa == gw_market_price(b, g5, t));
    lo = pa < lo ? pa : lo;
    hi = pa > hi ? pa : hi;
  }
  CHECK(lo >= base * 0.9 - 1e-9 && hi <= base * 1.1 + 1e-9);
  CHECK(hi - lo > base * 0.05);
  CHECK(gw_market_capacity(a, 0) > 1000);
  a = gw_market_free(a);
  b = gw_market_free(b);
  c = gw_market_free(c);

  /* A small trace: capacity per tick, repeat at the end, prices scaled. */
  snprintf(spec, sizeof spec, "trace:%s",
           write_tmp("t.json", "{\"metadata\":{\"gap_seconds\":60},\"data\":[2,0,1],"
                               "\"prices\":[1.0,1.5,0.5]}"));
  CHECK_INT(market_for(spec, cat, &a, err), 0);
  if (a) {
    CHECK(gw_market_is_trace(a));
    CHECK_INT(gw_market_capacity(a, 0), 2);
    CHECK_INT(gw_market_capacity(a, INT64_C(59999999)), 2);
    CHECK_INT(gw_market_capacity(a, INT64_C(60000000)), 0);
    CHECK_INT(gw_market_capacity(a, INT64_C(120000000)), 1);
    CHECK_INT(gw_market_capacity(a, INT64_C(180000000)), 2);
    CHECK_NEAR(gw_market_price(a, g5, INT64_C(60000000)), base * 1.5, 1e-9);
    CHECK_INT(gw_market_next_change_us(a, INT64_C(61000000)), INT64_C(120000000));
    /* Two available ticks per cycle, one loss per cycle: 120 s. */
    CHECK_NEAR(gw_market_mean_time_to_preempt_s(a, g5), 120, 1e-9);
    int64_t t, l;
    gw_market_draw(a, g5, &t, &l);
    CHECK(t == INT64_MAX && l == 0);
    a = gw_market_free(a);
  }

  /* Malformed traces and specs: errors that name the file and the place. */
  struct {
    const char *name, *text, *expect;
  } bad[] = {
      {"syntax.json", "{\"metadata\":{\"gap_seconds\":60},\n\"data\":[1,2,}", "syntax.json: line 2"},
      {"gap.json", "{\"metadata\":{},\"data\":[1]}", "gap.json: metadata.gap_seconds"},
      {"neg.json", "{\"metadata\":{\"gap_seconds\":5},\"data\":[1,1,-1]}", "neg.json: data[2]"},
      {"empty.json", "{\"metadata\":{\"gap_seconds\":5},\"data\":[]}", "empty.json: \"data\""},
      {"prices.json", "{\"metadata\":{\"gap_seconds\":5},\"data\":[1,1],\"prices\":[1]}",
       "prices.json: \"prices\""},
      {"price0.json", "{\"metadata\":{\"gap_seconds\":5},\"data\":[1,1],\"prices\":[1,0]}",
       "price0.json: prices[1]"},
      {"array.json", "[1,2,3]", "array.json: not a JSON object"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    snprintf(spec, sizeof spec, "trace:%s", write_tmp(bad[i].name, bad[i].text));
    err[0] = '\0';
    a = NULL;
    CHECK(market_for(spec, cat, &a, err) < 0);
    CHECK(a == NULL);
    if (!strstr(err, bad[i].expect))
      fprintf(stderr, "  got \"%s\", expected \"%s\"\n", err, bad[i].expect);
    CHECK(strstr(err, bad[i].expect) != NULL);
  }
  CHECK(market_for("trace:/nonexistent/t.json", cat, &a, err) < 0);
  CHECK(strstr(err, "/nonexistent/t.json") != NULL);
  CHECK_INT(market_for("random:x1", cat, &a, err), SL_ECONFIG);
  CHECK_INT(market_for("lottery:1", cat, &a, err), SL_ECONFIG);

  /* A real trace from the spot-traces collection (../shared/data): without
   * it the test fails, its load error printed */
  CHECK(argc > 1);
  if (argc > 1) {
    snprintf(spec, sizeof spec, "trace:%s", argv[1]);
    CHECK_INT(market_for(spec, cat, &a, err), 0);
    if (!a)
      fprintf(stderr, "  %s\n", err);
    if (a) {
      /* us-west-2a_v100_1 (gap 600 s) starts 1, 0, 0, 1. */
      CHECK_INT(gw_market_capacity(a, 0), 1);
      CHECK_INT(gw_market_capacity(a, INT64_C(600) * 1000000), 0);
      CHECK_INT(gw_market_capacity(a, INT64_C(1800) * 1000000), 1);
      CHECK_NEAR(gw_market_price(a, g5, 0), base, 1e-12);
      double mean = gw_market_mean_time_to_preempt_s(a, g5);
      CHECK(mean > 600 && mean < 86400);
      fprintf(stderr, "  %s: mean time to preemption %.0f s\n", argv[1], mean);
      a = gw_market_free(a);
    }
  }
  gw_catalog_free(cat);
  snprintf(path, sizeof path, "rm -rf %s", tmpdir);
  CHECK_INT(system(path), 0);
  TEST_MAIN_END();
}
