/* The policies (sl_policy.h): the baselines of the "Can't Be Late" paper
 * (on-demand only, Greedy, Uniform Progress) and spotlab's own
 * (sl_policy_learn.c), behind one decide(), and the ranking of offers by
 * expected cost per unit of work.
 *
 * Every policy keeps the same safety net: the job may always still finish
 * on on-demand. Slack is the ticks that may yet pass without progress with
 * that staying true: the time left, less the work left, less the overhead
 * of an on-demand segment not yet paid. */
#include "sl_policy.h"
#include "sl_policy_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sl_err.h"

static const char *const names[] = {
  [SL_POL_SPOTLAB] = "spotlab", [SL_POL_UP] = "uniform-progress", [SL_POL_GREEDY] = "greedy",
  [SL_POL_ONDEMAND] = "ondemand",
};

int sl_policy_new(const char *name, struct sl_policy **ret) {
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
    if (name && strcmp(name, names[k]) == 0) {
      struct sl_policy *p = calloc(1, sizeof *p);
      if (!p)
        return -ENOMEM;
      p->kind = (enum sl_pol_kind)k;
      sl_policy_reset(p);
      *ret = p;
      return 0;
    }
  }
  return SL_ENAME;
}

void sl_policy_free(struct sl_policy *p) {
  if (!p)
    return;
  sl_learn_free(&p->learn);
  free(p);
}

const char *sl_policy_name(const struct sl_policy *p) { return names[p->kind]; }

void sl_policy_reset(struct sl_policy *p) {
  sl_learn_free(&p->learn);
  p->committed = false;
}

/* ---- what every policy reads ---- */

void sl_policy_facts(const struct sl_job_view *j, const struct sl_market_view *m,
                     struct sl_facts *f) {
  memset(f, 0, sizeof *f);
  f->left = j->work - j->done;
  f->remain = j->window == INT64_MAX ? INT64_MAX / 4 : j->window - j->t;
  int64_t od_over = j->mode == SL_MODE_OD ? j->warm_left : j->overhead;
  f->slack = f->remain - f->left - od_over;
  f->now = m->origin + (size_t)j->t;
  f->spot_here = j->mode >= 0 && sl_policy_zone_up(m, (size_t)j->mode, f->now);
  f->any_up = false;
  for (size_t z = 0; z < m->n_zones; z++)
    if (sl_policy_zone_up(m, z, f->now)) {
      f->any_up = true;
      break;
    }
}

/* The overhead ticks of a new segment in zone z. */
int64_t sl_policy_zone_overhead(const struct sl_job_view *j, const struct sl_market_view *m,
                                size_t z) {
  return j->overhead + (int64_t)ceil(m->zones[z].move_ticks - 1e-9);
}

/* Whether a new spot segment in z now keeps the deadline in the worst case:
 * its overhead paid and then lost, the on-demand overhead still to pay. */
bool sl_policy_spot_safe(const struct sl_job_view *j, const struct sl_market_view *m,
                         const struct sl_facts *f, size_t z) {
  int64_t od_over = j->mode == SL_MODE_OD ? j->overhead - j->warm_left : 0;
  /* leaving on-demand gives up its paid overhead: f->slack counted it as done */
  return f->slack - od_over - sl_policy_zone_overhead(j, m, z) >= 0;
}

static void say(struct sl_decision *d, int mode, const char *what) {
  d->mode = mode;
  snprintf(d->why, sizeof d->why, "%s", what);
}

/* The first zone with capacity now (the baselines know no better). */
static int first_up(const struct sl_market_view *m, const struct sl_facts *f) {
  for (size_t z = 0; z < m->n_zones; z++)
    if (sl_policy_zone_up(m, z, f->now))
      return (int)z;
  return SL_MODE_IDLE;
}

/* Greedy: spot whenever there is some, idle otherwise, and on-demand to the
 * end once the slack no longer allows waiting. */
static void greedy(struct sl_policy *p, const struct sl_job_view *j,
                   const struct sl_market_view *m, const struct sl_facts *f,
                   struct sl_decision *d) {
  if (f->spot_here && !p->committed)
    return say(d, j->mode, "spot: still running");
  int z = first_up(m, f);
  if (!p->committed && z >= 0 && sl_policy_spot_safe(j, m, f, (size_t)z))
    return say(d, z, "spot: capacity now");
  if (!p->committed && f->slack >= 1)
    return say(d, SL_MODE_IDLE, "wait: no spot, slack left");
  p->committed = true;
  say(d, SL_MODE_OD, "on-demand to the end: no slack left");
}

/* Uniform Progress, the paper's four rules: on-demand while behind the
 * uniform progress line, spot whenever there is some, on-demand kept until
 * 2 overheads ahead of the line, and on-demand to the end when idle with
 * less than 2 overheads of slack. */
static void uniform(struct sl_policy *p, const struct sl_job_view *j,
                    const struct sl_market_view *m, const struct sl_facts *f,
                    struct sl_decision *d) {
  if (!p->committed && j->mode != SL_MODE_OD && !f->spot_here &&
      f->remain < f->left + 2 * j->overhead)
    p->committed = true;
  if (p->committed || f->slack < 1)
    return say(d, SL_MODE_OD, "on-demand to the end: safety net");
  double rate = (double)j->work / (double)j->window;
  double expected = rate * (double)j->t;
  if (j->mode == SL_MODE_OD) { /* hysteresis */
    double ahead = rate * (double)(j->t + 2 * j->overhead);
    if ((double)j->done < ahead)
      return say(d, SL_MODE_OD, "on-demand: catching up with the line");
  }
  if (f->spot_here)
    return say(d, j->mode, "spot: still running");
  int z = first_up(m, f);
  if (z >= 0 && sl_policy_spot_safe(j, m, f, (size_t)z))
    return say(d, z, "spot: capacity now");
  if ((double)j->done < expected)
    return say(d, SL_MODE_OD, "on-demand: behind the line");
  say(d, SL_MODE_IDLE, "wait: ahead of the line");
}

void sl_policy_decide(struct sl_policy *p, const struct sl_job_view *j,
                      const struct sl_market_view *m, struct sl_decision *ret) {
  struct sl_facts f;
  sl_policy_facts(j, m, &f);
  memset(ret, 0, sizeof *ret);
  ret->slack_ticks = j->window == INT64_MAX ? INFINITY : (double)f.slack;
  switch (p->kind) {
  case SL_POL_ONDEMAND:
    return say(ret, SL_MODE_OD, "on-demand");
  case SL_POL_GREEDY:
    greedy(p, j, m, &f, ret);
    break;
  case SL_POL_UP:
    uniform(p, j, m, &f, ret);
    break;
  case SL_POL_SPOTLAB:
    sl_spotlab_decide(p, j, m, &f, ret);
    break;
  }
  /* the net under every policy: wait or start spot only where on-demand
   * could still finish after it */
  if (j->window == INT64_MAX || (ret->mode >= 0 && ret->mode == j->mode && f.spot_here))
    return;
  bool unsafe = ret->mode == SL_MODE_IDLE ? f.remain - f.left - j->overhead < 1
                : ret->mode >= 0 ? (size_t)ret->mode >= m->n_zones ||
                                       !sl_policy_spot_safe(j, m, &f, (size_t)ret->mode)
                                 : false;
  if (unsafe)
    say(ret, SL_MODE_OD, "on-demand: no slack left for anything else");
}

/* ---- ranking ---- */

void sl_policy_rank(const struct sl_offer_est *o, struct sl_offer_rank *ret) {
  memset(ret, 0, sizeof *ret);
  if (o->work_per_hour <= 0 || o->usd_per_hour < 0) {
    ret->usd_per_unit = INFINITY;
    snprintf(ret->why, sizeof ret->why, "no throughput known");
    return;
  }
  /* Per hour of progress, each interruption costs the restart, plus (on a
   * hard loss) half a checkpoint interval of work done again. */
  double share = o->notice_share < 0 ? 0 : o->notice_share > 1 ? 1 : o->notice_share;
  double lost_h = o->restart_h + (1 - share) * o->checkpoint_h / 2;
  double overhead = o->interrupts_per_hour * lost_h; /* paid hours per hour of progress, extra */
  if (overhead > 100)
    overhead = 100;
  ret->efficiency = 1 / (1 + overhead);
  double per_unit = o->usd_per_hour / (o->work_per_hour * ret->efficiency);
  double move = o->remaining_units > 0 ? o->move_usd / o->remaining_units : 0;
  ret->usd_per_unit = per_unit + move;
  int n = snprintf(ret->why, sizeof ret->why, "%.4g/h for %.4g units/h", o->usd_per_hour,
                   o->work_per_hour);
  if (o->interrupts_per_hour > 0 && n > 0 && (size_t)n < sizeof ret->why)
    n += snprintf(ret->why + n, sizeof ret->why - (size_t)n, ", %.0f%% lost to %.2g interruptions/h",
                  100 * (1 - ret->efficiency), o->interrupts_per_hour);
  if (move > 0 && n > 0 && (size_t)n < sizeof ret->why)
    snprintf(ret->why + n, sizeof ret->why - (size_t)n, ", %.4g to move the checkpoint",
             o->move_usd);
}
