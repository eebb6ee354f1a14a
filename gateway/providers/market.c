/* The simulated spot market of the local provider.
 *
 * Two models share one interface:
 *  - trace: a file in the spot-traces format {"metadata":{"gap_seconds":G},
 *    "data":[n,...],"prices":[p,...]?}. Tick k covers simulated seconds
 *    [k*G, (k+1)*G) and says how many spot instances of each type the market
 *    holds (0: capacity gone). Past the last tick the trace starts over.
 *    When "prices" is present, each type's price is its catalog spot price
 *    scaled by prices[k]/prices[0], so the trace's relative moves apply to
 *    every type; otherwise prices stay at the catalog's.
 *  - random:SEED: capacity never runs out; each spot instance lives an
 *    exponentially distributed time with its type's bucket mean
 *    (gw_catalog_bucket_mean_s) before its notice, and half the instances
 *    (drawn) get a rebalance recommendation GW_MARKET_REBALANCE_LEAD_S
 *    before their notice. Prices move every GW_MARKET_PRICE_STEP_S,
 *    interpolating between points drawn uniformly within ±10% of the
 *    catalog price, so they stay within ±10% and are a pure function of
 *    (seed, type, time).
 * Invariants: every random number comes from splitmix64 over the seed, so
 * the same seed and the same sequence of launches give the same lifetimes
 * and prices. The trace is read and validated entirely at load
 * (sl_trace_read); nothing later fails. */
#include "market.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sl_err.h"
#include "sl_trace.h"

_Static_assert(GW_MARKET_TRACE_MAX_BYTES == SL_TRACE_MAX_BYTES &&
                   GW_MARKET_TRACE_MAX_TICKS == SL_TRACE_MAX_TICKS,
               "the market's trace bounds are the reader's");

struct gw_market {
  const struct gw_catalog *cat;
  bool trace;
  /* trace */
  struct sl_trace *tr;      /* as read (sl_trace.h) */
  int64_t gap_us;
  size_t n_ticks;
  int32_t *capacity;        /* tr's */
  double *price_ratio;      /* NULL when the trace has no prices */
  double trace_mean_s;      /* measured mean time to preemption */
  /* random */
  uint64_t seed;
  uint64_t draws;
};

static uint64_t splitmix64(uint64_t x) {
  x += UINT64_C(0x9e3779b97f4a7c15);
  x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
  return x ^ (x >> 31);
}

/* Uniform in [0, 1) from a 64-bit hash. */
static double unit(uint64_t h) { return (double)(h >> 11) * 0x1.0p-53; }

/* The trace's capacities stay where the reader put them; prices become
 * ratios to the first, and the mean time to preemption is measured once. */
static int load_trace(struct gw_market *m, const char *path, char *err, size_t err_size) {
  int r = sl_trace_read(path, &m->tr, err, err_size);
  if (r < 0)
    return r;
  const struct sl_trace *t = m->tr;
  size_t n = t->n;
  m->gap_us = (int64_t)(t->gap_s * 1e6);
  m->n_ticks = n;
  m->capacity = t->capacity;
  if (t->price) {
    m->price_ratio = calloc(n, sizeof *m->price_ratio);
    if (!m->price_ratio) {
      snprintf(err, err_size, "%s: out of memory", path);
      return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
      m->price_ratio[i] = t->price[i] / t->price[0];
  }
  /* Mean time to preemption: available time over the number of drops to 0
   * (counting the wrap from the last tick to the first). */
  size_t up = 0, drops = 0;
  for (size_t i = 0; i < n; i++) {
    up += m->capacity[i] > 0;
    drops += m->capacity[i] == 0 && m->capacity[(i + n - 1) % n] > 0;
  }
  m->trace_mean_s = (double)up * (double)m->gap_us / 1e6 / (double)(drops ? drops : 1);
  return 0;
}

int gw_market_new(const char *spec, const struct gw_catalog *cat, struct gw_market **ret,
                  char *err, size_t err_size) {
  struct gw_market *m = calloc(1, sizeof *m);
  int r = 0;
  if (!m) {
    snprintf(err, err_size, "out of memory");
    return -ENOMEM;
  }
  m->cat = cat;
  if (spec && strncmp(spec, "trace:", 6) == 0 && spec[6]) {
    m->trace = true;
    r = load_trace(m, spec + 6, err, err_size);
  } else if (spec && strncmp(spec, "random:", 7) == 0) {
    char *end;
    errno = 0;
    unsigned long long seed = strtoull(spec + 7, &end, 10);
    if (!spec[7] || *end || errno || spec[7] == '-') {
      snprintf(err, err_size, "market \"%s\": the seed must be a decimal integer", spec);
      r = SL_ECONFIG;
    }
    m->seed = seed;
  } else {
    snprintf(err, err_size, "market \"%s\": expected trace:PATH or random:SEED",
             spec ? spec : "");
    r = SL_ECONFIG;
  }
  if (r < 0) {
    gw_market_free(m);
    return r;
  }
  *ret = m;
  return 0;
}

struct gw_market *gw_market_free(struct gw_market *m) {
  if (m) {
    sl_trace_free(m->tr);
    free(m->price_ratio);
    free(m);
  }
  return NULL;
}

bool gw_market_is_trace(const struct gw_market *m) { return m->trace; }

static size_t tick_of(const struct gw_market *m, int64_t sim_us) {
  if (sim_us < 0)
    sim_us = 0;
  return (size_t)((uint64_t)(sim_us / m->gap_us) % m->n_ticks);
}

int gw_market_capacity(const struct gw_market *m, int64_t sim_us) {
  return m->trace ? m->capacity[tick_of(m, sim_us)] : INT32_MAX;
}

/* Random model: the price point of type at step k, in [-1, 1]. */
static double price_point(const struct gw_market *m, size_t type, int64_t k) {
  uint64_t h = splitmix64(m->seed ^ splitmix64((uint64_t)type * 0x51ed27u + 1) ^
                          splitmix64((uint64_t)k + 0x1000));
  return unit(h) * 2.0 - 1.0;
}

double gw_market_price(const struct gw_market *m, size_t type, int64_t sim_us) {
  const struct gw_catalog_entry *e = gw_catalog_get(m->cat, type);
  if (!e)
    return 0;
  if (m->trace)
    return m->price_ratio ? e->spot_usd_per_hour * m->price_ratio[tick_of(m, sim_us)]
                          : e->spot_usd_per_hour;
  double step_us = GW_MARKET_PRICE_STEP_S * 1e6;
  double pos = (sim_us < 0 ? 0 : (double)sim_us) / step_us;
  int64_t k = (int64_t)pos;
  double f = pos - (double)k;
  double w = price_point(m, type, k) * (1 - f) + price_point(m, type, k + 1) * f;
  return e->spot_usd_per_hour * (1.0 + 0.1 * w);
}

double gw_market_mean_time_to_preempt_s(const struct gw_market *m, size_t type) {
  if (m->trace)
    return m->trace_mean_s;
  const struct gw_catalog_entry *e = gw_catalog_get(m->cat, type);
  return gw_catalog_bucket_mean_s(e ? e->bucket : GW_CATALOG_BUCKETS - 1);
}

void gw_market_draw(struct gw_market *m, size_t type, int64_t *ret_notice_after_us,
                    int64_t *ret_rebalance_lead_us) {
  if (m->trace) {
    *ret_notice_after_us = INT64_MAX;
    *ret_rebalance_lead_us = 0;
    return;
  }
  uint64_t h1 = splitmix64(m->seed * 2 + 1 + splitmix64(m->draws * 2));
  uint64_t h2 = splitmix64(m->seed * 2 + 1 + splitmix64(m->draws * 2 + 1));
  m->draws++;
  double mean_s = gw_market_mean_time_to_preempt_s(m, type);
  double life_s = -mean_s * log1p(-unit(h1));  /* exponential, unit() < 1 */
  if (life_s > 1e9)
    life_s = 1e9;
  *ret_notice_after_us = (int64_t)(life_s * 1e6);
  *ret_rebalance_lead_us = unit(h2) < 0.5 ? (int64_t)(GW_MARKET_REBALANCE_LEAD_S * 1e6) : 0;
}

int64_t gw_market_next_change_us(const struct gw_market *m, int64_t sim_us) {
  int64_t step = m->trace ? m->gap_us : (int64_t)(GW_MARKET_PRICE_STEP_S * 1e6);
  if (sim_us < 0)
    return 0;
  return (sim_us / step + 1) * step;
}
