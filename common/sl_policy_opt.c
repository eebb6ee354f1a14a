/* The hindsight optimum (sl_policy.h): the least cost that finishes a job
 * within its window when the whole trace is known, by dynamic programming
 * over (tick, progress, warm segment).
 *
 * A state is the start of tick t with p ticks of progress and the segment
 * that may go on without paying the overhead again: none (after idle or a
 * preemption), on-demand, or spot in zone z. From it the job may
 *  - stay idle one tick: (t+1, p, none), free;
 *  - go on in its segment, when that has capacity in tick t: (t+1, p+1, same),
 *    one tick's price;
 *  - start a new segment in mode m: its overhead ticks and one tick of
 *    progress, all with capacity: (t+O_m+1, p+1, m), their prices.
 * A segment that would be lost during its overhead is never worth starting
 * (idling costs nothing and ends in the same state), so new segments only
 * start where they reach progress. States with more progress than ticks, or
 * too little to finish in the window, are not kept. Layers live in a ring
 * as deep as the longest overhead. */
#include "sl_policy.h"
#include "sl_policy_int.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sl_err.h"

#define SL_POLICY_OPT_MAX_BYTES (2.0 * 1024 * 1024 * 1024)

struct cell {
  double cost;
  int32_t spot, od, pre, seg;
};

struct dp {
  const struct sl_market_view *m;
  int64_t T, P, O;
  size_t M;                      /* modes: 0 none, 1 on-demand, 2 + z */
  size_t depth;                  /* ring layers */
  struct cell *ring;             /* depth × (P + 1) × M */
  int64_t *over;                 /* overhead ticks of mode k */
  double *cum;                   /* cum[k*(T+1) + i]: price of mode k over ticks [0, i) of the window */
  int32_t *run;                  /* run[z*(T+1) + i]: ticks with capacity from tick i on */
};

static struct cell *at(struct dp *d, int64_t t, int64_t p, size_t k) {
  return &d->ring[(((size_t)t % d->depth) * (size_t)(d->P + 1) + (size_t)p) * d->M + k];
}

static void relax(struct cell *dst, const struct cell *src, double add, int spot, int od, int pre,
                  int seg) {
  double c = src->cost + add;
  if (c < dst->cost - 1e-12) {
    *dst = (struct cell){c, src->spot + spot, src->od + od, src->pre + pre, src->seg + seg};
  }
}

static void clear_layer(struct dp *d, int64_t t) {
  struct cell *c = at(d, t, 0, 0);
  for (size_t i = 0; i < (size_t)(d->P + 1) * d->M; i++)
    c[i] = (struct cell){INFINITY, 0, 0, 0, 0};
}

static bool up(struct dp *d, size_t k, int64_t t) {
  return k == 1 || (k >= 2 && sl_policy_zone_up(d->m, k - 2, d->m->origin + (size_t)t));
}

static int prepare(struct dp *d) {
  const struct sl_market_view *m = d->m;
  size_t W = (size_t)d->T + 1;
  d->over = calloc(d->M, sizeof *d->over);
  d->cum = calloc(d->M * W, sizeof *d->cum);
  d->run = calloc(m->n_zones * W, sizeof *d->run);
  if (!d->over || !d->cum || !d->run)
    return -ENOMEM;
  int64_t deepest = 0;
  int nodes = m->nodes > 0 ? m->nodes : 1;
  for (size_t k = 1; k < d->M; k++) {
    d->over[k] = d->O;
    if (k >= 2)
      d->over[k] += (int64_t)ceil(m->zones[k - 2].move_ticks - 1e-9);
    if (d->over[k] > deepest)
      deepest = d->over[k];
    for (size_t i = 0; i < (size_t)d->T; i++) {
      double price = k == 1 ? m->ondemand_price
                            : sl_policy_zone_price(&m->zones[k - 2], m->origin + i);
      d->cum[k * W + i + 1] = d->cum[k * W + i] + price * nodes * m->gap_s / 3600.0;
    }
  }
  for (size_t z = 0; z < m->n_zones; z++)
    for (size_t i = (size_t)d->T; i-- > 0;)
      d->run[z * W + i] = sl_policy_zone_up(m, z, m->origin + i) ? d->run[z * W + i + 1] + 1 : 0;
  d->depth = (size_t)deepest + 2;
  /* an overhead of many hours on short ticks would need a ring of
   * gigabytes: refused rather than left to the kernel's OOM killer */
  double bytes = (double)d->depth * (double)(d->P + 1) * (double)d->M * sizeof *d->ring;
  if (bytes > SL_POLICY_OPT_MAX_BYTES)
    return SL_ELIMIT;
  d->ring = malloc((size_t)bytes);
  return d->ring ? 0 : -ENOMEM;
}

/* Every move out of the states of tick t. */
static void expand(struct dp *d, int64_t t, struct cell *best_end, int64_t *best_t) {
  size_t W = (size_t)d->T + 1;
  int64_t lo = d->P - (d->T - t), hi = t < d->P - 1 ? t : d->P - 1;
  if (lo < 0)
    lo = 0;
  for (int64_t p = lo; p <= hi; p++) {
    struct cell best = {INFINITY, 0, 0, 0, 0};
    for (size_t k = 0; k < d->M; k++) {
      struct cell *c = at(d, t, p, k);
      if (isinf(c->cost))
        continue;
      bool lost = k >= 2 && !up(d, k, t); /* its zone took the instance back */
      struct cell from = *c;
      from.pre += lost;
      if (k && !lost) { /* go on */
        double price = d->cum[k * W + t + 1] - d->cum[k * W + t];
        struct cell *dst = p + 1 == d->P ? best_end : at(d, t + 1, p + 1, k);
        struct cell before = *dst;
        relax(dst, &from, price, k >= 2, k == 1, 0, 0);
        if (p + 1 == d->P && dst->cost < before.cost)
          *best_t = t + 1;
      }
      if (t + 1 < d->T) /* idle */
        relax(at(d, t + 1, p, 0), &from, 0, 0, 0, 0, 0);
      if (from.cost < best.cost)
        best = from;
    }
    if (isinf(best.cost))
      continue;
    for (size_t k = 1; k < d->M; k++) { /* a new segment */
      int64_t o = d->over[k], end = t + o + 1;
      if (end > d->T || (k >= 2 && d->run[(k - 2) * W + (size_t)t] < o + 1))
        continue;
      double price = d->cum[k * W + (size_t)end] - d->cum[k * W + (size_t)t];
      int ticks = (int)(o + 1);
      struct cell *dst = p + 1 == d->P ? best_end : at(d, end, p + 1, k);
      struct cell before = *dst;
      relax(dst, &best, price, k >= 2 ? ticks : 0, k == 1 ? ticks : 0, 0, 1);
      if (p + 1 == d->P && dst->cost < before.cost)
        *best_t = end;
    }
  }
}

int sl_policy_optimal(const struct sl_market_view *m, const struct sl_sim_job *j,
                      struct sl_sim_result *ret) {
  memset(ret, 0, sizeof *ret);
  if (j->work <= 0 || j->window <= 0 || j->overhead < 0 || m->n_zones > SL_POLICY_ZONES_MAX ||
      m->gap_s <= 0)
    return -EINVAL;
  struct dp d = {.m = m, .T = j->window, .P = j->work, .O = j->overhead, .M = m->n_zones + 2};
  int r = -ENOMEM;
  if (j->work + j->overhead > j->window) {
    r = -ERANGE; /* not even on-demand from the first tick */
    goto out;
  }
  if ((r = prepare(&d)) < 0)
    goto out;
  for (size_t l = 0; l < d.depth; l++)
    clear_layer(&d, (int64_t)l);
  at(&d, 0, 0, 0)->cost = 0;
  struct cell end = {INFINITY, 0, 0, 0, 0};
  int64_t end_t = -1;
  for (int64_t t = 0; t < d.T; t++) {
    expand(&d, t, &end, &end_t);
    clear_layer(&d, t); /* the ring slot becomes tick t + depth */
  }
  if (isinf(end.cost)) {
    r = -ERANGE;
    goto out;
  }
  ret->cost_usd = end.cost;
  ret->finished = true;
  ret->finish_tick = end_t;
  ret->deadline_met = end_t <= j->window;
  ret->spot_ticks = end.spot;
  ret->ondemand_ticks = end.od;
  ret->preemptions = end.pre;
  ret->segments = end.seg;
  r = 0;
out:
  free(d.ring);
  free(d.over);
  free(d.cum);
  free(d.run);
  return r;
}
