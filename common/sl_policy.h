/* Placement and deadline policy: which market a job runs on, tick by tick,
 * and which offer of it, by expected cost per unit of work. Pure functions
 * of the job, the market view and the history: no I/O, no clock, so the
 * gateway's scheduler and spotlab-sim call the same code.
 *
 * Time is counted in ticks of a fixed length (the trace's gap_seconds in
 * the simulator, the scheduler's decision period in the gateway). In each
 * tick a job is idle, on on-demand, or on spot in one zone that has
 * capacity in that tick. Every new segment (after idle or a preemption, or
 * any change of zone or market) pays the restart overhead in ticks billed
 * without progress. The job is done after the tick that reaches its work. */
#ifndef SL_POLICY_H
#define SL_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_POLICY_ZONES_MAX 16
#define SL_MODE_IDLE (-2)
#define SL_MODE_OD (-1)          /* on-demand; a mode >= 0 is spot in that zone */

/* What the market looked like up to now, per zone (a zone stands for one
 * place spot capacity comes from: a zone, a region, an instance type). */
struct sl_zone_view {
  const int32_t *avail;          /* avail[i]: spot instances on offer in tick i, i < n */
  const double *price;           /* price[i]: spot USD per instance-hour in tick i; NULL: spot_price */
  size_t n;                      /* ticks known: the current one is n - 1 */
  double spot_price;             /* USD per instance-hour when price is NULL */
  double move_ticks;             /* extra ticks a (re)start here costs (a checkpoint moved from
                                  * another region); 0 within the job's region */
};

struct sl_market_view {
  const struct sl_zone_view *zones;
  size_t n_zones;
  size_t origin;                 /* tick index (in every zone's arrays) of the job's tick 0 */
  double ondemand_price;         /* USD per instance-hour */
  double gap_s;                  /* seconds per tick */
  int nodes;                     /* instances the job needs at once (spot needs avail >= nodes) */
  double clock0_s;               /* wall-clock seconds (UTC, any whole-day epoch) at the start of
                                  * tick 0 of the zones' arrays: the time of day of each tick
                                  * is clock0_s + i × gap_s; traces without one give 0 */
};

struct sl_job_view {
  int64_t window;                /* T: ticks from tick 0 to the deadline; INT64_MAX: none */
  int64_t work;                  /* P: ticks of progress the job needs */
  int64_t overhead;              /* O: ticks each new segment pays without progress */
  int64_t t;                     /* the tick to decide (0-based from the job's start) */
  int64_t done;                  /* ticks of progress made before tick t */
  int mode;                      /* the segment in force: SL_MODE_IDLE, SL_MODE_OD or a zone */
  int64_t warm_left;             /* overhead ticks that segment has still to pay */
};

struct sl_decision {
  int mode;                      /* SL_MODE_IDLE, SL_MODE_OD, or a zone with capacity now */
  double slack_ticks;            /* ticks that may still pass without progress, keeping the
                                  * deadline on on-demand (INFINITY without one) */
  char why[160];                 /* one line a person reads: what and why */
};

struct sl_policy;

/* Policies: "spotlab" (the default), "uniform-progress", "greedy",
 * "ondemand". SL_ENAME for another name. */
int sl_policy_new(const char *name, struct sl_policy **ret);
void sl_policy_free(struct sl_policy *p);
const char *sl_policy_name(const struct sl_policy *p);
/* The mode for tick j->t. A policy reads m only at ticks < m->zones[z].n
 * (the simulator gives it no more). Never fails: a job that cannot keep
 * its deadline any more runs on on-demand. */
void sl_policy_decide(struct sl_policy *p, const struct sl_job_view *j,
                      const struct sl_market_view *m, struct sl_decision *ret);

/* ---- evaluation on traces (spotlab-sim, tests, bench) ---- */

struct sl_sim_job {
  int64_t window, work, overhead; /* T, P, O as in sl_job_view */
};

struct sl_sim_result {
  double cost_usd;
  bool finished;
  int64_t finish_tick;           /* ticks from the start to the end of the last tick */
  bool deadline_met;
  int64_t spot_ticks, ondemand_ticks;
  int64_t preemptions;
  int64_t segments;              /* (re)starts */
};

/* The ticks of a job of `hours` with ticks of gap_s seconds, rounded as
 * the evaluation interface fixes: window down, work and overhead up. */
int64_t sl_ticks_floor(double hours, double gap_s);
int64_t sl_ticks_ceil(double hours, double gap_s);

/* Runs policy p on the market m from tick m->origin for job j. The zones'
 * n must cover origin + window (trace ticks past that are not read). */
int sl_policy_simulate(struct sl_policy *p, const struct sl_market_view *m,
                       const struct sl_sim_job *j, struct sl_sim_result *ret);
/* The hindsight optimum: the least cost that finishes j within its window,
 * knowing the whole trace (dynamic programming). -ERANGE when even
 * on-demand cannot finish in time (ret->finished false); SL_ELIMIT when its
 * tables would pass 2 GiB ((overhead + 2) × work × (zones + 2) cells of 24
 * bytes). */
int sl_policy_optimal(const struct sl_market_view *m, const struct sl_sim_job *j,
                      struct sl_sim_result *ret);

/* ---- ranking of offers by expected cost per unit of work ---- */

struct sl_offer_est {
  double usd_per_hour;           /* the price of what the job runs on (all its nodes) */
  double work_per_hour;          /* units of work (steps) an hour of it gives this job */
  double interrupts_per_hour;    /* expected interruptions (0: on-demand) */
  double restart_h;              /* hours an interruption costs before work goes on */
  double checkpoint_h;           /* hours between checkpoints (work lost on a hard loss: half) */
  double notice_share;           /* share of interruptions that come with a usable notice (0..1) */
  double move_usd;               /* one-off cost of starting here (a checkpoint moved in) */
  double remaining_units;        /* work the job still has (to spread move_usd over) */
};

struct sl_offer_rank {
  double usd_per_unit;           /* expected cost of one unit of work */
  double efficiency;             /* share of paid time that makes progress (0..1] */
  char why[160];
};

void sl_policy_rank(const struct sl_offer_est *o, struct sl_offer_rank *ret);

#endif
