/* A job as the gateway keeps it: the row of the jobs table plus the state
 * that only lives while the gateway runs. The caller allocates (the store
 * fills rows, the scheduler keeps live jobs), so the fields are public. */
#ifndef GW_JOB_H
#define GW_JOB_H

#include "autockpt.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#define GW_GANG_MAX 64          /* nodes=N: at most this many instances per job */

struct gw_gang;                 /* gang.h */

enum gw_job_state {
  GW_JOB_QUEUED,
  GW_JOB_PROVISIONING,
  GW_JOB_STARTING,
  GW_JOB_RUNNING,
  GW_JOB_CHECKPOINTING,
  GW_JOB_PREEMPTED,
  GW_JOB_SUCCEEDED,
  GW_JOB_FAILED,
  GW_JOB_CANCELLED,
};

struct gw_job {
  int64_t id;                   /* shown as "J%06lld" */
  char user[64];
  char session[256];
  char kind[16];                /* train, eval, sample, run */
  char model[64];
  char data[64];
  json_t *spec;                 /* owned: {"model":DEF,"data":DEF,"options":{},"script":S} */
  enum gw_job_state state;
  char reason[256];
  int64_t step, steps;
  int attempt;
  char instance[32];            /* current or last instance, "" if none */
  char instance_type[64];
  char zone[32];
  bool spot;
  double price_usd_per_hour;
  double on_demand_usd_per_hour;
  double cost_usd;              /* all attempts */
  double on_demand_usd;
  double energy_kwh, co2e_g;    /* all attempts: the carbon estimate (carbon.h) */
  int64_t created_us, updated_us;
  int64_t last_seq;
  char ckpt_key[256];           /* latest durable checkpoint, "" if none */
  int64_t ckpt_step;
  bool cancel_requested;
  /* not stored */
  int64_t wait_register_until_us; /* monotonic; 0 unless waiting after a restart */
  int64_t attempt_started_mono_us;
  int64_t cost_accrued_mono_us;   /* cost is accrued up to here */
  int64_t preempted_mono_us;      /* for the resumed event's after_s */
  int process_retries;            /* deaths by a signal since the last new checkpoint */
  int64_t start_retry_mono_us;    /* a start refused for a reason that may pass: not placed before this */
  bool pause_requested;           /* its worker was told to stop it for a budget: queued again then */
  int64_t metric_step;            /* newest step metric recorded in this attempt; -1 none */
  int64_t metrics_stored;         /* step metrics stored since its last thinning (or the load) */
  int64_t outputs_stored;         /* output lines stored since its last trim (or the load) */
  int64_t output_seq;             /* newest "oseq" of its output recorded in this attempt; 0 none */
  double attempt_cost_usd, attempt_on_demand_usd, pending_cost_s; /* not yet in the cost table */
  struct gw_autockpt autockpt;    /* checkpoint_every=auto measurements */
  struct gw_gang *gang;           /* owned; a nodes=N job's instances while it is placed, else NULL */
  int64_t gang_retry_mono_us;     /* nodes=N: no launches before this (a provider refused one) */
  int64_t gang_backoff_us;        /* the wait after the next refusal (doubles, up to a minute) */
  double cpu_util, gpu_util;      /* the worker's newest measure (0..1) of the job's use */
  bool cpu_util_seen, gpu_util_seen; /* whether it sent one */
};

const char *gw_job_state_name(enum gw_job_state s);
/* -1 when name is not a state. */
int gw_job_state_from_name(const char *name);
bool gw_job_state_final(enum gw_job_state s);
/* "J000012" into buf (size >= 16). */
char *gw_job_id_str(int64_t id, char *buf, size_t size);
/* Parses "J000012"; -1 when malformed. */
int64_t gw_job_id_parse(const char *s);
/* The protocol's job summary (protocols.md §1), owned. */
json_t *gw_job_summary(const struct gw_job *j);
/* Releases what j owns (spec, gang) and zeroes it. */
void gw_job_done(struct gw_job *j);

#endif
