/* spotlab's policy (sl_policy.h): what the market's history teaches, and the
 * decisions it leads to.
 *
 * Learning: for each zone, and for "any zone at all", the lengths of the
 * runs with capacity and without it, read from every tick the view shows
 * (the history before the job's start included), sorted with running sums
 * so that "how much longer will a run that has lasted a ticks last" is the
 * mean excess of the completed runs longer than a (with a weak prior).
 *
 * Deciding, with the safety net of every policy kept:
 *  - spot that runs goes on;
 *  - the zone a spot start takes is the one whose expected run saves most
 *    against on-demand (a zone that just took an instance back counts for
 *    less while its outage is expected to last);
 *  - with a deadline, whether to start that zone, run on-demand or wait is
 *    the plan's choice (sl_policy_plan.c): the least expected cost to
 *    finish in time over a model of the market built from these runs;
 *  - without one: spot when its expected run gives progress past its
 *    overhead, else wait. */
#include "sl_policy.h"
#include "sl_policy_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Priors in hours, each worth SL_PRIOR_RUNS runs: a run with capacity lasts
 * 2 h, one without 1 h (the catalog's middle bucket; the traces' zones lie
 * on both sides of it). */
#define PRIOR_UP_H 2.0
#define PRIOR_DOWN_H 1.0

void sl_runs_free(struct sl_runs *r) {
  free(r->len);
  free(r->sum);
  memset(r, 0, sizeof *r);
}

void sl_learn_free(struct sl_learn *l) {
  sl_plan_free(l->plan);
  for (size_t z = 0; z < SL_POLICY_ZONES_MAX; z++) {
    sl_runs_free(&l->zone[z].ups);
    sl_runs_free(&l->zone[z].downs);
  }
  sl_runs_free(&l->any.ups);
  sl_runs_free(&l->any.downs);
  sl_runs_free(&l->pooled);
  memset(l, 0, sizeof *l);
  for (size_t z = 0; z < SL_POLICY_ZONES_MAX; z++)
    l->lost_at[z] = -1;
  l->last_mode = SL_MODE_IDLE;
}

void sl_runs_add(struct sl_runs *r, int32_t len) {
  if (r->n + 1 >= r->cap) {
    size_t cap = r->cap ? 2 * r->cap : 64;
    int32_t *l = realloc(r->len, cap * sizeof *l);
    if (!l)
      return; /* learning less is safe */
    r->len = l;
    double *s = realloc(r->sum, (cap + 1) * sizeof *s);
    if (!s)
      return;
    r->sum = s;
    r->cap = cap;
  }
  size_t i = r->n;
  while (i > 0 && r->len[i - 1] > len) {
    r->len[i] = r->len[i - 1];
    i--;
  }
  r->len[i] = len;
  r->n++;
  if (i == 0)
    r->sum[0] = 0;
  for (size_t k = i; k < r->n; k++)
    r->sum[k + 1] = r->sum[k] + r->len[k];
}

size_t sl_runs_longer(const struct sl_runs *r, double x) {
  size_t lo = 0, hi = r->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if ((double)r->len[mid] > x)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

/* Expected ticks still to come of a run that has lasted age ticks. */
static double runs_left(const struct sl_runs *r, int64_t age, double prior_ticks) {
  size_t lo = sl_runs_longer(r, (double)age);
  double k = (double)(r->n - lo);
  double total = r->n ? r->sum[r->n] - r->sum[lo] - k * (double)age : 0;
  return (total + SL_PRIOR_RUNS * prior_ticks) / (k + SL_PRIOR_RUNS);
}

static double runs_mean(const struct sl_runs *r, double prior_ticks) {
  return ((r->n ? r->sum[r->n] : 0) + SL_PRIOR_RUNS * prior_ticks) / ((double)r->n + SL_PRIOR_RUNS);
}

int sl_day_bucket(const struct sl_market_view *m, double t) {
  double day = fmod(m->clock0_s + t * m->gap_s, 86400.0);
  if (!(day >= 0)) /* negative, or not a number */
    day = day < 0 ? day + 86400.0 : 0;
  int b = (int)(day * SL_DAY_BUCKETS / 86400.0);
  return b < 0 ? 0 : b >= SL_DAY_BUCKETS ? SL_DAY_BUCKETS - 1 : b;
}

/* One tick of a series, in day bucket b (the tick before it in bucket
 * prev); returns the length of the run with capacity it completed, 0 if
 * none. A run's end counts in the bucket of its last tick. */
static int32_t series_feed(struct sl_series *s, bool up, int b, int prev) {
  int32_t done_up = 0;
  if (s->scanned && up != s->up) {
    int32_t len = (int32_t)(s->age > INT32_MAX ? INT32_MAX : s->age);
    if (s->seen_change) { /* the trace's first run is cut: its start is unknown */
      sl_runs_add(s->up ? &s->ups : &s->downs, len);
      done_up = s->up ? len : 0;
    }
    s->day[!s->up].ends[prev]++;
    s->seen_change = true;
    s->age = 0;
  }
  s->day[!up].exposure[b]++;
  s->up = up;
  s->age++;
  s->scanned++;
  return done_up;
}

static void learn(struct sl_learn *l, const struct sl_market_view *m) {
  size_t n = SIZE_MAX;
  for (size_t z = 0; z < m->n_zones; z++)
    if (m->zones[z].n < n)
      n = m->zones[z].n;
  for (size_t t = l->any.scanned; t < n; t++) {
    bool any = false;
    int b = sl_day_bucket(m, (double)t), prev = sl_day_bucket(m, (double)t - 1);
    for (size_t z = 0; z < m->n_zones; z++) {
      bool up = sl_policy_zone_up(m, z, t);
      int32_t done_up = series_feed(&l->zone[z], up, b, prev);
      if (done_up && m->n_zones > 1) /* every zone's runs with capacity together */
        sl_runs_add(&l->pooled, done_up);
      any |= up;
    }
    series_feed(&l->any, any, b, prev);
  }
}

static double hours(const struct sl_market_view *m, double h) { return h * 3600.0 / m->gap_s; }

/* The zone with capacity now where a new segment is expected to give the
 * most progress; -1 when none has capacity. */
static int best_zone(struct sl_learn *l, const struct sl_job_view *j,
                     const struct sl_market_view *m, size_t now, double *ret_left) {
  int best = -1;
  double best_v = -INFINITY;
  for (size_t z = 0; z < m->n_zones; z++) {
    if (!sl_policy_zone_up(m, z, now))
      continue;
    struct sl_series *s = &l->zone[z];
    double left = runs_left(&s->ups, s->age - 1, hours(m, PRIOR_UP_H));
    /* a zone that took an instance back a moment ago: its capacity may be
     * a flicker; count it less while a typical outage would still last */
    if (l->lost_at[z] >= 0 && (double)(j->t - l->lost_at[z]) < runs_mean(&s->downs, hours(m, PRIOR_DOWN_H)))
      left /= 2;
    double price = sl_policy_zone_price(&m->zones[z], now);
    double v = (left - (double)sl_policy_zone_overhead(j, m, z)) * (m->ondemand_price - price);
    if (v > best_v) {
      best_v = v;
      best = (int)z;
      *ret_left = left;
    }
  }
  return best;
}

static void say(struct sl_decision *d, int mode, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(struct sl_decision *d, int mode, const char *fmt, ...) {
  d->mode = mode;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d->why, sizeof d->why, fmt, ap);
  va_end(ap);
}

void sl_spotlab_decide(struct sl_policy *p, const struct sl_job_view *j,
                       const struct sl_market_view *m, const struct sl_facts *f,
                       struct sl_decision *d) {
  struct sl_learn *l = &p->learn;
  learn(l, m);
  if (l->last_mode >= 0 && j->mode == SL_MODE_IDLE)
    l->lost_at[l->last_mode] = j->t; /* preempted */
  if (f->spot_here) {
    say(d, j->mode, "spot: running");
    goto out;
  }
  double up_left = 0;
  int z = best_zone(l, j, m, f->now, &up_left);
  int safe = z >= 0 && sl_policy_spot_safe(j, m, f, (size_t)z) ? z : -1;
  if (j->window != INT64_MAX) {
    /* the plan over the market model: one zone's runs, or for several the
     * runs with capacity of every zone and the outages of all of them */
    const struct sl_series *ser = m->n_zones == 1 ? &l->zone[0] : &l->any;
    struct sl_plan_market pm = {.ups = &ser->ups, .downs = &ser->downs, .up = ser->up,
                                .age = ser->age,
                                .prior_up = hours(m, PRIOR_UP_H),
                                .prior_down = hours(m, PRIOR_DOWN_H),
                                .day_up = &ser->day[0], .day_down = &ser->day[1],
                                .history_days = (double)l->any.scanned * m->gap_s / 86400.0};
    struct sl_day pooled_day = {0}; /* every zone's runs with capacity, by time of day */
    if (m->n_zones > 1) {
      for (size_t k = 0; k < m->n_zones; k++)
        for (int b = 0; b < SL_DAY_BUCKETS; b++) {
          pooled_day.exposure[b] += l->zone[k].day[0].exposure[b];
          pooled_day.ends[b] += l->zone[k].day[0].ends[b];
        }
      pm.ups = &l->pooled;
      pm.day_up = &pooled_day;
      if (z >= 0) {
        pm.up = true;
        pm.age = l->zone[z].age;
      }
    }
    double spot = z >= 0 ? sl_policy_zone_price(&m->zones[z], f->now) : m->zones[0].spot_price;
    struct sl_plan_choice c;
    if (sl_plan_decide(&l->plan, &pm, j, m, f, spot, safe, &c) == 0) {
      static const char *const what[] = {[SL_PLAN_WAIT] = "wait", [SL_PLAN_OD] = "on-demand",
                                         [SL_PLAN_SPOT] = "spot"};
      int mode = c.act == SL_PLAN_SPOT ? safe : c.act == SL_PLAN_OD ? SL_MODE_OD : SL_MODE_IDLE;
      /* "spot: expected cost to finish $14.95 (on-demand $16.95, wait $15.36)" */
      char others[96] = "";
      size_t len = 0;
      for (int k = 0; k < 3; k++) {
        if (k == c.act || !isfinite(c.q[k]) || len >= sizeof others)
          continue;
        len += (size_t)snprintf(others + len, sizeof others - len, "%s%s $%.2f", len ? ", " : "",
                                what[k], c.q[k]);
      }
      if (isfinite(c.q[c.act]))
        say(d, mode, "%s: expected cost to finish $%.2f%s%s%s", what[c.act], c.q[c.act],
            len ? " (" : "", others, len ? ")" : "");
      else
        say(d, mode, "on-demand: no slack left for anything else");
      goto out;
    }
  }
  /* no deadline (or no memory for a plan): spot where a run is expected
   * to give progress past its overhead, else wait (the safety net turns to
   * on-demand when a deadline needs it) */
  if (safe >= 0 && up_left - (double)sl_policy_zone_overhead(j, m, (size_t)safe) >= 1) {
    say(d, safe, "spot: %.0f ticks of capacity expected", up_left);
    goto out;
  }
  say(d, SL_MODE_IDLE, "wait: %s", z >= 0 ? "too short a spot run expected" : "no spot capacity");
out:
  l->last_mode = d->mode;
}
