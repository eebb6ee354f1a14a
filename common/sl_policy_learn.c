/* spotlab's policy (sl_policy.h): what the market's history teaches, and the
 * decisions it leads to.
 *
 * Learning: for each zone, and for "any zone at all", the lengths of the
 * runs with capacity and without it, read from every tick the view shows
 * (the history before the job's start included). From these: how much
 * longer a run that has lasted a ticks is expected to last (the mean and
 * the median excess of the completed runs longer than a, with a weak
 * prior), and the length of a market cycle (a run with capacity and one
 * without), which sizes the slack reserve.
 *
 * Deciding, with the safety net of every policy kept:
 *  - spot that runs goes on;
 *  - where spot has capacity, the zone expected to keep it longest (a zone
 *    that just took an instance back counts for less while its outage is
 *    expected to last) is started when its expected run gives progress
 *    past its overhead; from on-demand, when the expected run saves more
 *    than its own overhead and the on-demand one of coming back;
 *  - without spot: wait while the slack is above a reserve kept for trips
 *    back to spot, else on-demand through the outage.
 * The outlook (how likely the slack covers the outages to come) is what
 * the decision's line tells the user. */
#include "sl_policy.h"
#include "sl_policy_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Priors in hours, each worth PRIOR_RUNS runs: a run with capacity lasts
 * 2 h, one without 1 h (the catalog's middle bucket; the traces' zones lie
 * on both sides of it). */
#define PRIOR_UP_H 2.0
#define PRIOR_DOWN_H 1.0
#define PRIOR_RUNS 1.0
/* The fewest trips back to spot from on-demand the slack reserve is kept
 * for (each costs two overheads); at most half the slack the job starts
 * with is kept. */
#define RESERVE_TRIPS 4.0

static void runs_free(struct sl_runs *r) {
  free(r->len);
  free(r->sum);
  memset(r, 0, sizeof *r);
}

void sl_learn_free(struct sl_learn *l) {
  for (size_t z = 0; z < SL_POLICY_ZONES_MAX; z++) {
    runs_free(&l->zone[z].ups);
    runs_free(&l->zone[z].downs);
  }
  runs_free(&l->any.ups);
  runs_free(&l->any.downs);
  memset(l, 0, sizeof *l);
  for (size_t z = 0; z < SL_POLICY_ZONES_MAX; z++)
    l->lost_at[z] = -1;
  l->last_mode = SL_MODE_IDLE;
}

static void runs_add(struct sl_runs *r, int32_t len) {
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
  r->sumsq += (double)len * len;
  if (i == 0)
    r->sum[0] = 0;
  for (size_t k = i; k < r->n; k++)
    r->sum[k + 1] = r->sum[k] + r->len[k];
}

/* Expected ticks still to come of a run that has lasted age ticks. */
static double runs_left(const struct sl_runs *r, int64_t age, double prior_ticks) {
  size_t lo = 0, hi = r->n;
  while (lo < hi) { /* first run longer than age */
    size_t mid = (lo + hi) / 2;
    if (r->len[mid] > age)
      hi = mid;
    else
      lo = mid + 1;
  }
  double k = (double)(r->n - lo);
  double total = r->n ? r->sum[r->n] - r->sum[lo] - k * (double)age : 0;
  return (total + PRIOR_RUNS * prior_ticks) / (k + PRIOR_RUNS);
}

/* The median of what is still to come of a run that has lasted age ticks,
 * among the completed runs longer than age; the prior when there is none. */
static double runs_median_left(const struct sl_runs *r, int64_t age, double prior_ticks) {
  size_t lo = 0, hi = r->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (r->len[mid] > age)
      hi = mid;
    else
      lo = mid + 1;
  }
  if (lo == r->n)
    return prior_ticks;
  return (double)r->len[lo + (r->n - lo) / 2] - (double)age;
}

static double runs_mean(const struct sl_runs *r, double prior_ticks) {
  return ((r->n ? r->sum[r->n] : 0) + PRIOR_RUNS * prior_ticks) / ((double)r->n + PRIOR_RUNS);
}

static void series_feed(struct sl_series *s, bool up) {
  if (s->scanned && up != s->up) {
    if (s->seen_change) /* the trace's first run is cut: its start is unknown */
      runs_add(s->up ? &s->ups : &s->downs, (int32_t)(s->age > INT32_MAX ? INT32_MAX : s->age));
    s->seen_change = true;
    s->age = 0;
  }
  s->up = up;
  s->age++;
  s->scanned++;
}

static void learn(struct sl_learn *l, const struct sl_market_view *m) {
  size_t n = SIZE_MAX;
  for (size_t z = 0; z < m->n_zones; z++)
    if (m->zones[z].n < n)
      n = m->zones[z].n;
  for (size_t t = l->any.scanned; t < n; t++) {
    bool any = false;
    for (size_t z = 0; z < m->n_zones; z++) {
      bool up = sl_policy_zone_up(m, z, t);
      series_feed(&l->zone[z], up);
      any |= up;
    }
    series_feed(&l->any, any);
  }
}

static double hours(const struct sl_market_view *m, double h) { return h * 3600.0 / m->gap_s; }

/* The variance of the run lengths, the prior counting as runs of an
 * exponential law with the prior mean (variance mean²). */
static double runs_var(const struct sl_runs *r, double prior_ticks) {
  double n = (double)r->n + PRIOR_RUNS;
  double mean = runs_mean(r, prior_ticks);
  double ex2 = (r->sumsq + PRIOR_RUNS * 2 * prior_ticks * prior_ticks) / n;
  return fmax(ex2 - mean * mean, 0);
}

/* What the series says about the rest of the window. */
struct outlook {
  double up, down;               /* mean run lengths, ticks */
  double share;                  /* of ticks with capacity */
  double down_now;               /* ticks the outage in force is expected to last, this one included */
  double p_short;                /* probability the slack does not cover the outages to come */
};

/* The outages to come in the remaining ticks, as an alternating renewal
 * process of the runs seen: their total is about normal, with mean
 * (1 - share)·L and variance L·(U²·σD² + D²·σU²)/(U + D)³ over a span of L
 * ticks (Cox), plus the outage in force. Each run with capacity also costs
 * one overhead of slack to start on. */
static void look(const struct sl_series *s, const struct sl_market_view *m, int64_t remain,
                 int64_t slack, int64_t over, struct outlook *o) {
  double pu = hours(m, PRIOR_UP_H), pd = hours(m, PRIOR_DOWN_H);
  o->up = runs_mean(&s->ups, pu);
  o->down = runs_mean(&s->downs, pd);
  o->share = o->up / (o->up + o->down);
  o->down_now = s->up ? 0 : runs_left(&s->downs, s->age - 1, pd);
  double span = fmax((double)remain - o->down_now, 0);
  double cycle = o->up + o->down;
  double vu = runs_var(&s->ups, pu), vd = runs_var(&s->downs, pd);
  double mean = o->down_now + span * (1 - o->share) + (span / cycle + (s->up ? 0 : 1)) * (double)over;
  double var = o->down_now * o->down_now * (s->up ? 0 : 1) +
               span * (o->up * o->up * vd + o->down * o->down * vu) / (cycle * cycle * cycle);
  double sd = sqrt(var) + 1;
  o->p_short = 0.5 * erfc(((double)slack - mean) / (sd * M_SQRT2));
}

/* The zone with capacity now where a new segment is expected to give the
 * most progress; -1 when none has capacity. */
static int best_zone(struct sl_learn *l, const struct sl_job_view *j,
                     const struct sl_market_view *m, size_t now, double *ret_left,
                     double *ret_median) {
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
      *ret_median = runs_median_left(&s->ups, s->age - 1, hours(m, PRIOR_UP_H));
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

/* Without spot now: wait while the slack is above its reserve, else
 * on-demand, kept through the outage (its overhead is paid). The reserve
 * is slack kept for trips back to spot from on-demand: each costs a spot
 * overhead, and another on-demand one when the spot run ends, and there is
 * about one per cycle of the market over the work left. Waiting
 * first, rather than buying on-demand in early outages, measured better on
 * the shared traces even when the supply of spot was known to fall short:
 * the outages do not say early which of them will be followed by long
 * spot runs. */
static void outage(const struct sl_job_view *j, const struct sl_facts *f, const struct outlook *o,
                   struct sl_decision *d) {
  /* a trip back per cycle of the market (a run with capacity and one
   * without, as learned) the work left spans, and at least a few */
  double trips = fmax(RESERVE_TRIPS, (double)f->left / (o->up + o->down));
  double reserve = fmin(2 * (double)j->overhead * trips,
                        (double)(j->window - j->work - j->overhead) / 2);
  if (j->mode == SL_MODE_OD && f->slack >= 0) {
    say(d, SL_MODE_OD, "on-demand: %s, %.0f%% likely the slack (%lld ticks) would cover the outages",
        f->any_up ? "too little slack to risk spot" : "no spot capacity", 100 * (1 - o->p_short),
        (long long)f->slack);
    return;
  }
  if ((double)f->slack < 1 + reserve) {
    say(d, SL_MODE_OD, "on-demand: slack down to its reserve (%lld ticks)", (long long)f->slack);
    return;
  }
  say(d, SL_MODE_IDLE, "wait: %.0f%% likely the slack (%lld ticks) covers the outages",
      100 * (1 - o->p_short), (long long)f->slack);
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
  double up_left = 0, up_median = 0;
  int z = best_zone(l, j, m, f->now, &up_left, &up_median);
  struct outlook o;
  look(&l->any, m, f->remain, f->slack, j->overhead, &o);
  double spot = z >= 0 ? sl_policy_zone_price(&m->zones[z], f->now) : m->zones[0].spot_price;
  double k = spot > 0 ? m->ondemand_price / spot : 1e3;
  if (z >= 0 && sl_policy_spot_safe(j, m, f, (size_t)z)) {
    double o_z = (double)sl_policy_zone_overhead(j, m, (size_t)z);
    double progress = fmin(up_left - o_z, (double)f->left);
    if (j->mode == SL_MODE_OD) {
      /* the spot run's saving against its overhead and the on-demand
       * overhead of coming back when it ends; the run's median rather
       * than its mean (a trip that fails spends slack that cannot be had
       * back) */
      double sure = fmin(up_median - o_z, (double)f->left);
      double gain = sure * (k - 1) - o_z - k * (double)j->overhead;
      /* and only once the zone has held its capacity for two overheads:
       * shorter flickers cannot pay a trip, and they come in bursts */
      if (gain > 0 && (double)l->zone[z].age >= 2 * o_z) {
        say(d, z, "spot: back from on-demand, %.0f ticks of capacity expected", up_left);
        goto out;
      }
      say(d, SL_MODE_OD, "on-demand: a spot run of %.0f ticks would not pay two switches", up_left);
      goto out;
    }
    if (progress >= 1) {
      say(d, z, "spot: %.0f ticks of capacity expected", up_left);
      goto out;
    }
  }
  outage(j, f, &o, d);
out:
  l->last_mode = d->mode;
}
