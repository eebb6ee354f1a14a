/* What the policy files share (sl_policy.c, sl_policy_sim.c,
 * sl_policy_opt.c, sl_policy_learn.c, sl_policy_plan.c); not for callers. */
#ifndef SL_POLICY_INT_H
#define SL_POLICY_INT_H

#include "sl_policy.h"

enum sl_pol_kind { SL_POL_SPOTLAB, SL_POL_UP, SL_POL_GREEDY, SL_POL_ONDEMAND };

/* Run lengths seen in one series of ticks (a zone, or any zone at all),
 * sorted, with their running sums, to answer "how much longer, given that
 * it has lasted this long" by the empirical distribution. */
struct sl_runs {
  int32_t *len;                  /* sorted ascending */
  double *sum;                   /* sum[i]: len[0] + ... + len[i-1] */
  size_t n, cap;
};

void sl_runs_add(struct sl_runs *r, int32_t len);
void sl_runs_free(struct sl_runs *r);
/* The index of the first run longer than x (r->n: none). */
size_t sl_runs_longer(const struct sl_runs *r, double x);
/* What a prior counts for, in runs, against the runs seen. */
#define SL_PRIOR_RUNS 1.0

/* Time of day: runs end more often in some hours than others. Per bucket of
 * the day, the ticks a run was seen in and the runs that ended in them. */
#define SL_DAY_BUCKETS 6
struct sl_day {
  double exposure[SL_DAY_BUCKETS];
  double ends[SL_DAY_BUCKETS];
};
/* The bucket of the day of absolute tick t. */
int sl_day_bucket(const struct sl_market_view *m, double t);
/* How much more (or less) often than on average a run ends in each bucket
 * of the day (1 everywhere for d NULL or no ends). */
void sl_day_factors(const struct sl_day *d, double f[SL_DAY_BUCKETS]);

struct sl_series {
  size_t scanned;                /* ticks read so far */
  bool up;                       /* in the current run */
  int64_t age;                   /* ticks of the current run */
  bool seen_change;              /* the current run's start was seen (not the trace's first) */
  struct sl_runs ups, downs;     /* completed runs */
  struct sl_day day[2];          /* by time of day: [0] runs with capacity, [1] without */
};

struct sl_learn {
  struct sl_series zone[SL_POLICY_ZONES_MAX], any;
  int64_t lost_at[SL_POLICY_ZONES_MAX]; /* job tick the zone last took an instance back; -1 */
  int last_mode;
  struct sl_runs pooled;         /* every zone's runs with capacity (several zones) */
  struct sl_plan *plan;          /* the job's plan (sl_policy_plan.c); NULL until needed */
};

struct sl_policy {
  enum sl_pol_kind kind;
  bool committed;                /* on-demand to the end */
  struct sl_learn learn;
};

/* What every policy reads about a tick. */
struct sl_facts {
  int64_t left;                  /* ticks of progress still needed */
  int64_t remain;                /* ticks left in the window, this one included */
  int64_t slack;                 /* remain - left - the on-demand overhead not yet paid */
  size_t now;                    /* absolute tick */
  bool spot_here;                /* the segment in force is spot with capacity now */
  bool any_up;
};

void sl_policy_facts(const struct sl_job_view *j, const struct sl_market_view *m,
                     struct sl_facts *f);
int64_t sl_policy_zone_overhead(const struct sl_job_view *j, const struct sl_market_view *m,
                                size_t z);
bool sl_policy_spot_safe(const struct sl_job_view *j, const struct sl_market_view *m,
                         const struct sl_facts *f, size_t z);
void sl_learn_free(struct sl_learn *l);

/* spotlab's plan (sl_policy_plan.c): the option of least expected cost to
 * finish in time at the job's state, by dynamic programming over a model of
 * the market learned from the runs seen. 0, or -1 without a deadline or
 * memory. */
struct sl_plan_market {
  const struct sl_runs *ups;     /* runs with capacity (of every zone, for several) */
  const struct sl_runs *downs;   /* runs without */
  bool up;                       /* the run in force */
  int64_t age;
  double prior_up, prior_down;   /* the priors' mean runs, ticks */
  const struct sl_day *day_up;   /* when runs with capacity end, by time of day; NULL: any time */
  const struct sl_day *day_down; /* when runs without end */
  double history_days;           /* the days of market history these come from */
};
enum { SL_PLAN_WAIT, SL_PLAN_OD, SL_PLAN_SPOT };
struct sl_plan_choice {
  int act;                       /* SL_PLAN_WAIT, SL_PLAN_OD or SL_PLAN_SPOT */
  double q[3];                   /* each option's expected USD to finish; INFINITY: not allowed */
};
struct sl_plan;
/* zone: the zone a spot start would take, -1 none. */
int sl_plan_decide(struct sl_plan **pl, const struct sl_plan_market *mk,
                   const struct sl_job_view *j, const struct sl_market_view *m,
                   const struct sl_facts *f, double spot_price, int zone,
                   struct sl_plan_choice *ret);
void sl_plan_free(struct sl_plan *pl);
void sl_spotlab_decide(struct sl_policy *p, const struct sl_job_view *j,
                       const struct sl_market_view *m, const struct sl_facts *f,
                       struct sl_decision *d);

struct sl_sim_state {
  int mode;                      /* the segment in force */
  int64_t warm_left;             /* its overhead ticks still to pay */
  int64_t done;                  /* progress ticks */
};

/* The spot price of z in tick (its own when the trace has prices). */
double sl_policy_zone_price(const struct sl_zone_view *z, size_t tick);
/* Whether zone has capacity for the job's nodes in tick (absolute). */
bool sl_policy_zone_up(const struct sl_market_view *m, size_t zone, size_t tick);

void sl_sim_begin(struct sl_sim_state *s);
void sl_sim_market(struct sl_sim_state *s, const struct sl_market_view *m, int64_t t,
                   struct sl_sim_result *r);
bool sl_sim_tick(struct sl_sim_state *s, const struct sl_market_view *m, const struct sl_sim_job *j,
                 int64_t t, int mode, struct sl_sim_result *r);
/* Forgets what p learned about an earlier job (its market knowledge is
 * rebuilt from the view). */
void sl_policy_reset(struct sl_policy *p);
/* A fixed sequence of modes[0..n), run as sl_policy_simulate runs a
 * policy (the tests' brute force). */
int sl_policy_simulate_modes(const struct sl_market_view *m, const struct sl_sim_job *j,
                             const int *modes, size_t n, struct sl_sim_result *ret);

#endif
