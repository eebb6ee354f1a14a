/* spotlab-sim: replays a spot trace against the local provider for a
 * simulated training job and reports what the spot market cost it. */
#ifndef SIM_SIM_H
#define SIM_SIM_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

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
