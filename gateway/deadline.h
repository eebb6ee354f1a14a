/* deadline=DURATION (DESIGN.md §3, §8): the arithmetic of a job's
 * deadline, apart from the scheduler that applies it (sched_deadline.c).
 *
 * Pure functions: the option's value, the earliest finish on on-demand,
 * the job as the tick policy sees it (sl_policy.h) and the sentences the
 * display shows. Every duration here is in the provider's seconds (a
 * simulated market's clock runs time_scale times faster than the wall
 * clock; a real cloud's is the wall clock). */
#ifndef GW_DEADLINE_H
#define GW_DEADLINE_H

#include "sl_policy.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GW_DEADLINE_TICK_S 60.0          /* one policy decision per this many provider seconds */
#define GW_DEADLINE_MAX_S (30 * 86400.0) /* the longest deadline taken */
/* Before a measurement: seconds per training step, and from a launch to
 * the job's process running (an EC2 GPU instance boots and starts the
 * worker in about two minutes). */
#define GW_DEADLINE_STEP_PRIOR_S 1.0
#define GW_DEADLINE_STARTUP_PRIOR_S 120.0
/* A %%run job reports no steps: it is planned as if its script needed this
 * share of the time from its submission to the deadline on one instance. */
#define GW_DEADLINE_RUN_SHARE 0.5
/* The policy plans a job's work left as this share longer than its
 * measured step time gives, plus one tick: a step time that drifts by up
 * to this share (a busier machine, a slower shard of data, the restore
 * after a resume) still makes the deadline, and so does a switch to
 * on-demand decided a tick late. The refusal at submit uses the estimate as
 * it is. */
#define GW_DEADLINE_WORK_MARGIN 0.05

/* The deadline option of a job's options (borrowed): a duration as the
 * kernel sends it ("3h", "150m", "90s"), a number of seconds, or a session
 * value {"t":"dur","v":MICROSECONDS}. 1 when absent; 0 with
 * the seconds in *ret_s; SL_ECONFIG with a sentence in why when it is not
 * a duration in (0, GW_DEADLINE_MAX_S]. */
int gw_deadline_option(const json_t *options, double *ret_s, char *why, size_t why_size);

/* Where a job stands against its deadline, in provider seconds. */
struct gw_deadline_work {
  double window_s;              /* the deadline, from the job's submission */
  double elapsed_s;             /* since the submission */
  double startup_s;             /* what a (re)start costs before progress */
  double step_s;                /* one training step */
  int64_t steps, step;          /* train: total and done; steps 0: no steps (%%run) */
  double run_done_s;            /* %%run: the script's running time kept so far */
};

/* Seconds of work left (a %%run job: its planned share of the window less
 * what it ran, never below 0). */
double gw_deadline_left_s(const struct gw_deadline_work *w);
/* Seconds from now to the earliest finish on on-demand started now: a
 * start-up plus the work left (a %%run job: the start-up alone, its
 * script's length being unknown). */
double gw_deadline_earliest_s(const struct gw_deadline_work *w);

/* The job view of sl_policy_decide for a job tracked since start_elapsed_s
 * (its tick 0), now at tick t, ticks of gap_s: window and work rounded so
 * that the policy never plans with less than the job needs, the work left
 * with its margin (GW_DEADLINE_WORK_MARGIN and a tick) added. mode and
 * warm_left_s: the segment in force and the start-up it has still to pay. */
void gw_deadline_view(const struct gw_deadline_work *w, double start_elapsed_s, int64_t t,
                      double gap_s, int mode, double warm_left_s, struct sl_job_view *ret);

/* A duration as people read it: "2h10m", "40m", "2m40s", "45s", "3d4h". */
char *gw_deadline_dur(double s, char *buf, size_t size);
/* The plan in one line, from the decision's mode: "spot on g5.xlarge while
 * slack > 2m, then on-demand", "waiting for spot capacity while slack >
 * 2m, then on-demand", "on-demand (back to spot when it is safe)". where
 * names the spot offer (borrowed). */
void gw_deadline_plan_text(int mode, const char *where, double threshold_s, bool spot_possible,
                           char *buf, size_t size);
/* The refusal of a deadline the job cannot meet even on on-demand. */
void gw_deadline_refusal(const struct gw_deadline_work *w, double time_scale, char *buf,
                         size_t size);

#endif
