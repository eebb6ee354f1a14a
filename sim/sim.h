/* spotlab-sim: replays a spot trace against the local provider for a
 * simulated training job and reports what the spot market cost it. */
#ifndef SIM_SIM_H
#define SIM_SIM_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sl_policy.h"
#include "sl_trace.h"

/* ---- the policy evaluator (eval.c) ---- */

/* spotlab-sim --policy ...: the exit status. */
int sim_eval_main(int argc, char **argv);

/* One --trace of --policy: a zone's spot-traces file. */
struct sim_zone {
  const char *path;              /* borrowed */
  struct sl_trace *trace;        /* the file as read (owned): its gap, capacities and prices */
};

/* Reads the file z->path names into z with sl_trace_read, so --policy takes
 * the traces the gateway's market takes. -EINVAL (or -ENOMEM) with
 * sl_trace_read's sentence in err, z then unchanged. */
int sim_zone_load(struct sim_zone *z, char *err, size_t err_size);
/* Frees what sim_zone_load read; keeps z's path. A zone never loaded (all
 * but its path zero) is a no-op. */
void sim_zone_done(struct sim_zone *z);

/* A job as the command line gives it. */
struct sim_eval_job {
  double start_tick;             /* a whole number */
  double work_h, deadline_h, overhead_h;
  double spot_usd;               /* per hour where a trace has no prices */
  double od_usd;                 /* on-demand, per hour */
  double nodes;                  /* a whole number, at least 1 */
};

/* A job on loaded zones in the tick model: what --policy evaluates. */
struct sim_eval {
  struct sim_eval_job hours;
  struct sl_zone_view views[SL_POLICY_ZONES_MAX]; /* into the zones' arrays */
  size_t n_zones;
  size_t origin;                 /* the start tick */
  double gap_s;
  struct sl_sim_job ticks;       /* window, work and overhead in ticks */
};

/* Makes *e of zones[0..n_zones) (loaded; borrowed for as long as e is
 * used) and the job. -EINVAL with a sentence in err when the zones do not
 * share their ticks, the window ends past a trace or is shorter than a
 * tick. */
int sim_eval_setup(struct sim_eval *e, const struct sim_zone *zones, size_t n_zones,
                   const struct sim_eval_job *job, char *err, size_t err_size);
/* Runs policy pol (borrowed; NULL: the hindsight optimum) on e into *ret.
 * -ERANGE when the work and overhead do not fit in the window even on
 * on-demand (the optimum), SL_ELIMIT when the optimum would need too much
 * memory, another negative error otherwise; each with a sentence in err. */
int sim_eval_run(const struct sim_eval *e, struct sl_policy *pol, struct sl_sim_result *ret,
                 char *err, size_t err_size);
/* Option name's value v as a decimal number in lo..hi (whole: an integer,
 * no fraction or exponent) into *ret; -EINVAL after saying why on errf. */
int sim_num_arg(FILE *errf, const char *name, const char *v, bool whole, double lo, double hi,
                double *ret);

/* The files --batch's jobs have read, by path (at most 64 files, and 1 GiB
 * kept between jobs; emptied when a job needs more). */
struct sim_trace_cache;
/* An empty cache (owned), or NULL without memory. */
struct sim_trace_cache *sim_trace_cache_new(void);
/* Frees c and the traces it holds; NULL is a no-op. Returns NULL. */
struct sim_trace_cache *sim_trace_cache_free(struct sim_trace_cache *c);
/* One job of --batch: argv[1..argc) are the --policy mode's options
 * (borrowed), --json implied; its traces come from cache (borrowed), read
 * into it where it has none. Returns the exit status the job alone would
 * have had, 0 with its report in *ret_json (owned); otherwise the reason
 * went to errf. */
int sim_eval_line(int argc, char **argv, struct sim_trace_cache *cache, FILE *errf,
                  json_t **ret_json);
/* spotlab-sim --batch (batch.c): one job a line of in, one JSON object a
 * line of out. 0 at the end of in, 1 when out or in fails. */
int sim_eval_batch(FILE *in, FILE *out);
/* o (taken) as one compact line of out, flushed: a reader may wait for it.
 * -ENOMEM or -EIO. */
int sim_put_json(json_t *o, FILE *out);

/* ---- the private gateway (home.c) ---- */

struct sim_home;

/* Makes a private SPOTLAB_HOME under $TMPDIR with a gateway configuration
 * whose local provider replays trace_path at time_scale with one slot, and
 * points this process's SPOTLAB_HOME at it. Returns an owned home in *ret. */
int sim_home_new(const char *trace_path, double time_scale, struct sim_home **ret,
                 char *err, size_t err_size);
/* Starts spotlab-gateway --embedded --daemon on the home; returns once its
 * sockets are bound. */
int sim_home_start(struct sim_home *h, char *err, size_t err_size);
/* Stops the gateway and every worker it started (SIGTERM, SIGKILL after a
 * grace), removes the folder and frees h. NULL is a no-op; returns NULL. */
struct sim_home *sim_home_free(struct sim_home *h);
/* The folder (borrowed). */
const char *sim_home_path(const struct sim_home *h);

/* ---- what the trace offers (trace.c) ---- */

#define SIM_NOTICE_S 120.0        /* the local market's notice, simulated seconds */
#define SIM_TRACE_MAX_PASSES 10   /* sim_trace_time_for_s looks this many times through */

struct sim_trace;

/* Reads a spot-traces file's gap and which ticks have capacity (with
 * sl_trace_read). Returns an owned trace in *ret, or -EINVAL (or -ENOMEM)
 * with sl_trace_read's sentence in err. */
int sim_trace_load(const char *path, struct sim_trace **ret, char *err, size_t err_size);
/* Frees; NULL is a no-op. Returns NULL. */
struct sim_trace *sim_trace_free(struct sim_trace *t);
/* Simulated seconds one pass of the trace lasts. */
double sim_trace_length_s(const struct sim_trace *t);
/* Simulated seconds from the start to the first tick with capacity; -1 if none has. */
double sim_trace_first_capacity_s(const struct sim_trace *t);
/* The simulated time, from the start of the trace (repeated at most
 * SIM_TRACE_MAX_PASSES times), by which its capacity windows have given
 * work_s of usable time: each window counts its length plus the notice at
 * its end, less overhead_s for getting an instance going (a window that
 * short counts nothing). -1 when they never do. */
double sim_trace_time_for_s(const struct sim_trace *t, double work_s, double overhead_s);

/* ---- the job and its report (report.c) ---- */

struct sim_job {
  int64_t steps;            /* N */
  double step_s;            /* simulated seconds per step */
  int64_t checkpoint_every; /* K steps; 0: only on a notice */
  double checkpoint_s;      /* simulated seconds one checkpoint write takes */
  double time_scale;
};

/* The %%run script that simulates the job (owned; free()). NULL on OOM. */
char *sim_job_script(const struct sim_job *job);

struct sim_report {
  const struct sim_job *job;
  bool trace_events;             /* print each event on stderr */
  int64_t submit_us, end_us;     /* wall clock */
  char state[16];                /* final state; empty while running */
  char last_state[16];           /* the latest state event's state */
  int attempts;                  /* placed events */
  int preempted_notice, preempted_hard;
  int resumed;                   /* attempts that started from a checkpoint */
  int starts;                    /* attempts the job's script started */
  int64_t checkpoints;           /* checkpoints the job wrote */
  int64_t executed;              /* steps run, summed over attempts */
  int64_t attempt_start, attempt_last; /* the attempt being followed; -1 when none */
  int64_t placed_us;             /* when the current instance was placed; 0 when none */
  bool placed_spot;
  int64_t spot_us, on_demand_us; /* wall µs with an instance of each kind */
  double cost_usd, on_demand_usd; /* the gateway's running totals */
  double od_price_usd_per_hour;
  char instance_type[32];
};

void sim_report_init(struct sim_report *r, const struct sim_job *job, int64_t submit_us);
/* Folds one job event (borrowed) into r. Returns true once the job ended. */
bool sim_report_event(struct sim_report *r, const json_t *event);
/* The figures as an owned JSON object (NULL on OOM). */
json_t *sim_report_json(const struct sim_report *r);
void sim_report_print(const struct sim_report *r, FILE *out);

#endif
