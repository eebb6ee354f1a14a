/* spotlab's plan (sl_policy_int.h): the least expected cost of the rest of
 * a job, by dynamic programming over a model of the market learned from its
 * history, and the decisions read off it.
 *
 * The model: the market (one zone, or "any zone" when there are several)
 * alternates runs with capacity and runs without; how long a run goes on
 * depends on how long it has lasted (the empirical survival of the runs
 * seen, with a weak exponential prior). The market's state is the side and
 * the run's age, in buckets that widen with age. Runs end more often at some
 * times of day than others: with a few days of history, each side's chance
 * to end in a unit is scaled by how often its runs ended in that unit's
 * part of the day against the average (sl_day_factors), so the table knows
 * which cell falls at which time of day.
 *
 * The job's state is the work left and the slack, both in units of u
 * ticks (u grows with the job so that the table stays near PLAN_CELLS
 * cells), and its segment: none, on-demand, or spot. Each unit: spot that
 * runs makes a unit of progress at the spot price, and is lost when the
 * market goes down; on-demand makes one at its price; waiting spends a unit
 * of slack. Starting a segment pays the overhead (in units, the fraction
 * spread as a mix of the two nearest counts) without progress; a spot
 * segment lost inside its overhead ends in an outage. Leaving on-demand
 * gives up its paid overhead (the slack counts it as owed again). Slack
 * never goes below zero, so every plan keeps the deadline on on-demand.
 *
 * The table is solved once the job starts and again as the market teaches
 * more (a few times over a job); each decision compares its options' values
 * at the job's state. */
#include "sl_policy.h"
#include "sl_policy_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Cells of work × slack the table aims at (u is chosen for it). */
#define PLAN_CELLS 20000.0
/* Waiting against a spot start, on the prior alone: what counts as a tie
 * (sl_plan_decide). */
#define PRIOR_TIE 0.005
/* Age buckets per side, by their first age in units; the last is open. */
static const int bucket_lo[] = {0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96};
#define NB ((int)(sizeof bucket_lo / sizeof bucket_lo[0]))
/* Market states: with capacity (0..NB-1), without (NB..2NB-1), by age bucket. */
#define NUP NB
#define NX (2 * NB)
enum { SEG_NONE, SEG_OD, SEG_SPOT, NSEG };

struct sl_plan {
  int64_t u;                     /* ticks per unit */
  int W, S;                      /* work 0..W, slack 0..S units */
  int64_t overhead;              /* ticks, the job's when the table was made */
  int o_lo;                      /* floor(overhead / u) */
  double o_frac;                 /* overhead / u - o_lo */
  double c_od, c_spot;           /* USD per unit */
  int8_t to[NX][3];              /* one unit's moves from each state: end, age, stay */
  float p[SL_DAY_BUCKETS][NX][3]; /* ... and their chances, by the unit's time of day */
  int K;                         /* time indices 0..K: k units before the last cell's time */
  int *day;                      /* [k]: the day bucket of time index k's unit */
  float *stay_up;                /* [k][2][x < NUP]: chance to keep capacity through o_lo,
                                  * o_lo + 1 units that end at time index k */
  float *v;                      /* [w][s][seg][x] (spot: x with capacity only) */
  float *g;                      /* [w][s][k][x < NUP]: E[V(w, s, spot) after o_lo + k units
                                  * with capacity throughout], unnormalised */
  int64_t solved_at;             /* job tick of the last solve; -1 none */
  size_t runs_at;                /* runs known then */
};

/* The chance a run lasts more than x ticks: the completed runs, the prior
 * (one exponential run of mean prior) and, when cur > 0, the run in force,
 * which has lasted cur ticks so far and is taken to last about as long
 * again (censored). */
static double survival(const struct sl_runs *r, double x, double prior, double cur) {
  double longer = (double)(r->n - sl_runs_longer(r, x));
  double c = cur <= 0 ? 0 : x < cur ? 1 : exp(-(x - cur) / fmax(cur, prior));
  return (longer + SL_PRIOR_RUNS * exp(-x / prior) + c) /
         ((double)r->n + SL_PRIOR_RUNS + (cur > 0));
}

/* One unit of one kind of run: the chance to end in bucket b, and to move
 * on to the next bucket. */
static void side_rates(const struct sl_runs *r, double prior, double cur, int64_t u, double *end,
                       double *adv) {
  for (int b = 0; b < NB; b++) {
    double lo = bucket_lo[b];
    if (b == NB - 1) {
      /* the open bucket: the mean excess of the runs past it */
      double ex = 0, s0 = survival(r, lo * (double)u, prior, cur);
      for (int k = 0; k < 4096; k++) {
        double s = survival(r, (lo + k) * (double)u, prior, cur);
        ex += s;
        if (s < 1e-6 * s0)
          break;
      }
      ex = s0 > 0 ? ex / s0 : 1;
      end[b] = 1.0 / fmax(ex, 1.0);
      adv[b] = 0;
      continue;
    }
    double hi = bucket_lo[b + 1], exposure = 0;
    for (double a = lo; a < hi; a++)
      exposure += survival(r, a * (double)u, prior, cur);
    double deaths = survival(r, lo * (double)u, prior, cur) - survival(r, hi * (double)u, prior, cur);
    end[b] = exposure > 0 ? fmin(fmax(deaths / exposure, 0), 1) : 1;
    adv[b] = 1.0 / (hi - lo);
  }
}

/* Time index k: the cell of work w and slack s (the on-demand overhead
 * unpaid) is at k = w + s, a unit after k + 1. A unit's moves depend on
 * the time of day it runs in. */
static inline int clamp_k(const struct sl_plan *pl, int k) {
  return k < 0 ? 0 : k > pl->K ? pl->K : k;
}

static inline const float (*moves(const struct sl_plan *pl, int k))[3] {
  return pl->p[pl->day[clamp_k(pl, k)]];
}

/* out = M^n v over all states (up_only: over the states with capacity,
 * the rest counting 0), v at time index k0 (the n units end there). */
static void step_n(const struct sl_plan *pl, const double *v, int k0, int n, bool up_only,
                   double *out) {
  int nx = up_only ? NUP : NX;
  double a[NX], b[NX];
  memcpy(a, v, sizeof(double) * (size_t)nx);
  for (int i = 1; i <= n; i++) {
    const float(*p)[3] = moves(pl, k0 + i);
    for (int x = 0; x < nx; x++) {
      double e = 0;
      for (int k = 0; k < 3; k++)
        if (pl->to[x][k] < nx)
          e += (double)p[x][k] * a[pl->to[x][k]];
      b[x] = e;
    }
    memcpy(a, b, sizeof(double) * (size_t)nx);
  }
  memcpy(out, a, sizeof(double) * (size_t)nx);
}

/* out[k] = M^(o_lo + k) v, for the two overheads in units (up_only: over
 * the states with capacity, the rest counting 0), v at time index k0. */
static void ahead(const struct sl_plan *pl, const float *v, int k0, bool up_only,
                  double out[2][NX]) {
  double a[NX];
  for (int x = 0; x < (up_only ? NUP : NX); x++)
    a[x] = v[x];
  step_n(pl, a, k0, pl->o_lo, up_only, out[0]);
  step_n(pl, out[0], k0 + pl->o_lo, 1, up_only, out[1]);
}

/* How much more (or less) often than on average a run ends in each bucket
 * of the day: its ends there against those its exposure there would give at
 * the overall rate, each side weighed with DAY_PRIOR_ENDS ends at the
 * average. */
#define DAY_PRIOR_ENDS 2.0
/* A time of day is only told from the market's noise over several days. */
#define DAY_MIN_DAYS 3.0
void sl_day_factors(const struct sl_day *d, double f[SL_DAY_BUCKETS]) {
  double ends = 0, exposure = 0;
  for (int b = 0; b < SL_DAY_BUCKETS; b++) {
    ends += d ? d->ends[b] : 0;
    exposure += d ? d->exposure[b] : 0;
  }
  double rate = exposure > 0 ? ends / exposure : 0;
  for (int b = 0; b < SL_DAY_BUCKETS; b++)
    f[b] = rate > 0 ? (d->ends[b] + DAY_PRIOR_ENDS) / (d->exposure[b] * rate + DAY_PRIOR_ENDS) : 1;
}

static void model(struct sl_plan *pl, const struct sl_plan_market *mk) {
  double end[2][NB], adv[2][NB], f[2][SL_DAY_BUCKETS];
  side_rates(mk->ups, mk->prior_up, mk->up ? (double)mk->age : 0, pl->u, end[0], adv[0]);
  side_rates(mk->downs, mk->prior_down, mk->up ? 0 : (double)mk->age, pl->u, end[1], adv[1]);
  sl_day_factors(mk->history_days >= DAY_MIN_DAYS ? mk->day_up : NULL, f[0]);
  sl_day_factors(mk->history_days >= DAY_MIN_DAYS ? mk->day_down : NULL, f[1]);
  for (int x = 0; x < NX; x++) {
    int side = x / NB, b = x % NB;
    pl->to[x][0] = (int8_t)(side ? 0 : NB);
    pl->to[x][1] = (int8_t)(b + 1 < NB ? x + 1 : x);
    pl->to[x][2] = (int8_t)x;
    for (int d = 0; d < SL_DAY_BUCKETS; d++) {
      /* the hazard scaled by the time of day's factor, as a rate */
      double e = 1 - pow(1 - end[side][b], f[side][d]);
      double a = b + 1 < NB ? adv[side][b] : 0;
      pl->p[d][x][0] = (float)e;
      pl->p[d][x][1] = (float)((1 - e) * a);
      pl->p[d][x][2] = (float)((1 - e) * (1 - a));
    }
  }
  /* the chance to keep capacity through an overhead that ends at k */
  float ones[NUP];
  double keep[2][NX];
  for (int x = 0; x < NUP; x++)
    ones[x] = 1;
  for (int k = 0; k <= pl->K; k++) {
    ahead(pl, ones, k, true, keep);
    for (int o = 0; o < 2; o++)
      for (int x = 0; x < NUP; x++)
        pl->stay_up[((size_t)k * 2 + (size_t)o) * NUP + (size_t)x] = (float)keep[o][x];
  }
}

static inline float *cell(const struct sl_plan *pl, int w, int s, int seg) {
  return pl->v + (((size_t)w * (size_t)(pl->S + 1) + (size_t)s) * NSEG + (size_t)seg) * NX;
}

static inline float *gcell(const struct sl_plan *pl, int w, int s, int k) {
  return pl->g + (((size_t)w * (size_t)(pl->S + 1) + (size_t)s) * 2 + (size_t)k) * NUP;
}

static int o_units(const struct sl_plan *pl) { return pl->o_lo + (pl->o_frac > 0.5); }

/* The time index of a cell: on-demand's slack counts its overhead as paid. */
static inline int when(const struct sl_plan *pl, int w, int s, int seg) {
  return w + s - (seg == SEG_OD ? o_units(pl) : 0);
}

/* E[V(w, s, seg, x')] for x' a unit after x. */
static double expect1(const struct sl_plan *pl, int w, int s, int seg, int x) {
  if (w <= 0)
    return 0;
  const float *v = cell(pl, w, s, seg);
  const float(*p)[3] = moves(pl, when(pl, w, s, seg) + 1);
  double e = 0;
  for (int k = 0; k < 3; k++)
    e += (double)p[x][k] * v[pl->to[x][k]];
  return e;
}

/* Options at a cell; INFINITY where not allowed. s counts the on-demand
 * overhead as unpaid (as SEG_NONE's slack does). */
static double q_idle(const struct sl_plan *pl, int w, int s, int x) {
  return s >= 1 ? expect1(pl, w, s - 1, SEG_NONE, x) : INFINITY;
}

/* e[k][x]: E[V(w, s, on-demand)] o_lo + k units after x */
static double q_od_start(const struct sl_plan *pl, double e[2][NX], int x) {
  return (1 - pl->o_frac) * ((double)pl->o_lo * pl->c_od + e[0][x]) +
         (pl->o_frac > 0 ? pl->o_frac * ((double)(pl->o_lo + 1) * pl->c_od + e[1][x]) : 0);
}

static double q_od_go_on(const struct sl_plan *pl, int w, int s_od, int x) {
  return pl->c_od + expect1(pl, w - 1, s_od, SEG_OD, x);
}

/* a spot segment lost in its overhead: an outage just begun */
#define LOST_IN_OVERHEAD NB

static double q_spot_start(const struct sl_plan *pl, int w, int s, int x) {
  if (x >= NUP)
    return INFINITY;
  double q = 0;
  for (int k = 0; k < 2; k++) {
    double p = k ? pl->o_frac : 1 - pl->o_frac;
    if (p <= 0)
      continue;
    int o = pl->o_lo + k, s2 = s - o;
    if (s2 < 0)
      return INFINITY;
    double ok = pl->stay_up[((size_t)clamp_k(pl, w + s2) * 2 + (size_t)k) * NUP + (size_t)x];
    double e = gcell(pl, w, s2, k)[x];
    if (ok < 1)
      e += (1 - ok) * cell(pl, w, s2, SEG_NONE)[LOST_IN_OVERHEAD];
    q += p * ((double)o * pl->c_spot + e);
  }
  return q;
}

static double q_spot_go_on(const struct sl_plan *pl, int w, int s, int x) {
  if (x >= NUP)
    return INFINITY;
  if (w - 1 <= 0)
    return pl->c_spot;
  const float *vs = cell(pl, w - 1, s, SEG_SPOT), *vn = cell(pl, w - 1, s, SEG_NONE);
  const float(*p)[3] = moves(pl, w + s);
  double e = 0;
  for (int k = 0; k < 3; k++) {
    int y = pl->to[x][k];
    e += (double)p[x][k] * (y < NUP ? vs[y] : vn[y]);
  }
  return pl->c_spot + e;
}

static void solve(struct sl_plan *pl) {
  int o = o_units(pl);
  double e[2][NX], gs[2][NX];
  for (int w = 1; w <= pl->W; w++)
    for (int s = 0; s <= pl->S; s++) {
      float *vd = cell(pl, w, s, SEG_OD), *vn = cell(pl, w, s, SEG_NONE),
            *vs = cell(pl, w, s, SEG_SPOT);
      /* in the order the options read this cell: spot that runs reads only
       * less work; its look-ahead through an overhead reads it; on-demand
       * reads less slack; none reads on-demand here */
      for (int x = 0; x < NUP; x++)
        vs[x] = (float)q_spot_go_on(pl, w, s, x);
      ahead(pl, vs, when(pl, w, s, SEG_SPOT), true, gs);
      for (int k = 0; k < 2; k++) {
        float *g = gcell(pl, w, s, k);
        for (int x = 0; x < NUP; x++)
          g[x] = (float)gs[k][x];
      }
      for (int x = 0; x < NX; x++) {
        double q = q_od_go_on(pl, w, s, x);
        if (s - o >= 0) {
          q = fmin(q, q_spot_start(pl, w, s - o, x));
          q = fmin(q, q_idle(pl, w, s - o, x));
        }
        vd[x] = (float)q;
      }
      ahead(pl, vd, when(pl, w, s, SEG_OD), false, e);
      for (int x = 0; x < NX; x++) {
        double q = fmin(q_od_start(pl, e, x), q_idle(pl, w, s, x));
        vn[x] = (float)fmin(q, q_spot_start(pl, w, s, x));
      }
    }
}

void sl_plan_free(struct sl_plan *pl) {
  if (!pl)
    return;
  free(pl->v);
  free(pl->g);
  free(pl->day);
  free(pl->stay_up);
  free(pl);
}

static int bucket_of(int64_t age_units) {
  int b = 0;
  while (b + 1 < NB && bucket_lo[b + 1] <= age_units)
    b++;
  return b;
}

int sl_plan_decide(struct sl_plan **plp, const struct sl_plan_market *mk,
                   const struct sl_job_view *j, const struct sl_market_view *m,
                   const struct sl_facts *f, double spot_price, int zone,
                   struct sl_plan_choice *ret) {
  if (j->window == INT64_MAX)
    return -1;
  struct sl_plan *pl = *plp;
  size_t runs = mk->ups->n + mk->downs->n;
  /* the slack with the on-demand overhead unpaid */
  int64_t s_none = f->remain - f->left - j->overhead;
  if (pl && (f->left > (int64_t)pl->W * pl->u || s_none >= ((int64_t)pl->S + 1) * pl->u ||
             j->overhead != pl->overhead)) {
    sl_plan_free(pl); /* the job's state left the table (its work was estimated anew) */
    pl = *plp = NULL;
  }
  if (!pl) {
    pl = calloc(1, sizeof *pl);
    if (!pl)
      return -1;
    int64_t slack0 = s_none < 0 ? 0 : s_none, work = f->left < 1 ? 1 : f->left;
    double span = sqrt((double)work * (double)(slack0 + 1) / PLAN_CELLS);
    pl->u = span < 1 ? 1 : (int64_t)ceil(span);
    pl->W = (int)((work + pl->u - 1) / pl->u);
    pl->S = (int)(slack0 / pl->u) + 1;
    pl->overhead = j->overhead;
    pl->o_lo = (int)(j->overhead / pl->u);
    pl->o_frac = (double)j->overhead / (double)pl->u - pl->o_lo;
    size_t cells = (size_t)(pl->W + 1) * (size_t)(pl->S + 1);
    pl->v = calloc(cells * NSEG * NX, sizeof(float));
    pl->g = calloc(cells * 2 * NUP, sizeof(float));
    pl->K = pl->W + pl->S + pl->o_lo + 4;
    pl->day = calloc((size_t)pl->K + 1, sizeof *pl->day);
    pl->stay_up = calloc(((size_t)pl->K + 1) * 2 * NUP, sizeof *pl->stay_up);
    if (!pl->v || !pl->g || !pl->day || !pl->stay_up) {
      sl_plan_free(pl);
      return -1;
    }
    pl->solved_at = -1;
    *plp = pl;
  }
  /* solve again as the market teaches more, at most every eighth of the window */
  if (pl->solved_at < 0 || (runs != pl->runs_at && j->t - pl->solved_at >= (j->window + 7) / 8)) {
    double usd = (double)pl->u * m->gap_s / 3600.0 * (m->nodes > 0 ? m->nodes : 1);
    pl->c_od = m->ondemand_price * usd;
    pl->c_spot = spot_price * usd;
    /* time index k's unit: the one that starts k units before the window's
     * last start of an on-demand segment */
    double last = (double)m->origin + (double)j->window - (double)j->overhead;
    for (int k = 0; k <= pl->K; k++)
      pl->day[k] = sl_day_bucket(m, last - (double)k * (double)pl->u);
    model(pl, mk);
    solve(pl);
    pl->solved_at = j->t;
    pl->runs_at = runs;
  }
  int64_t u = pl->u;
  int w = (int)((f->left + u - 1) / u);
  w = w < 1 ? 1 : w > pl->W ? pl->W : w;
  /* the slack as no segment and as the segment in force has it */
  int sn = s_none < 0 ? -1 : (int)(s_none / u), sd = f->slack < 0 ? -1 : (int)(f->slack / u);
  sn = sn > pl->S ? pl->S : sn;
  sd = sd > pl->S ? pl->S : sd;
  int x = (mk->up ? 0 : NB) + bucket_of((mk->age - 1) / u);
  double *q = ret->q;
  q[SL_PLAN_WAIT] = sn >= 0 ? q_idle(pl, w, sn, x) : INFINITY;
  q[SL_PLAN_SPOT] = zone >= 0 && sn >= 0 ? q_spot_start(pl, w, sn, x) : INFINITY;
  if (j->mode == SL_MODE_OD) {
    q[SL_PLAN_OD] = sd >= 0 ? q_od_go_on(pl, w, sd, x) : INFINITY;
  } else if (sn >= 0) {
    double e[2][NX];
    ahead(pl, cell(pl, w, sn, SEG_OD), when(pl, w, sn, SEG_OD), false, e);
    q[SL_PLAN_OD] = q_od_start(pl, e, x);
  } else {
    q[SL_PLAN_OD] = INFINITY;
  }
  /* ties go to spot, then to on-demand; on-demand when nothing else is
   * allowed. Before any run was seen to end, the model is its memoryless
   * prior, where starting now and starting later cost the same: what tells
   * them apart is the table's rounding (up to about 0.3%), not the market,
   * and spot within PRIOR_TIE of waiting counts as a tie. */
  ret->act = SL_PLAN_OD;
  if (q[SL_PLAN_WAIT] < q[SL_PLAN_OD])
    ret->act = SL_PLAN_WAIT;
  bool prior_only = mk->ups->n == 0 && mk->downs->n == 0;
  double bar = q[ret->act] * (prior_only && ret->act == SL_PLAN_WAIT ? 1 + PRIOR_TIE : 1);
  if (isfinite(q[SL_PLAN_SPOT]) && q[SL_PLAN_SPOT] <= bar)
    ret->act = SL_PLAN_SPOT;
  return 0;
}
