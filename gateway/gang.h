/* A gang: the N instances of a nodes=N job's current attempt, in rank
 * order, and how each of them ended. Owned by its job (gw_job.gang) from
 * its placement to the attempt's outcome. The rules that turn the members'
 * ends into the job's outcome are pure functions here, tested without a
 * gateway; the scheduler (sched_gang.c) acts on them. */
#ifndef GW_GANG_H
#define GW_GANG_H

#include "job.h"

#include <stdbool.h>
#include <stdint.h>

enum gw_gang_end {
  GW_GANG_LIVE,                 /* placed; has not ended */
  GW_GANG_SUCCEEDED,            /* done succeeded */
  GW_GANG_FAILED,               /* done failed (or the gateway gave up on it) */
  GW_GANG_PREEMPTED,            /* done preempted */
  GW_GANG_CANCELLED,            /* done cancelled */
  GW_GANG_LOST,                 /* its instance is gone */
};

struct gw_gang_member {
  char instance[32];
  double usd_per_hour;          /* its price; cost accrues until it ends */
  double on_demand_usd_per_hour;
  bool assigned;                /* its assign went out */
  bool started;                 /* its worker said started */
  bool noticed;                 /* its instance had a preemption notice */
  enum gw_gang_end end;
  int64_t exit_code;            /* of a done; -1 unknown */
  bool transient;               /* its done refused the assign for a reason that may pass
                                 * ("retry": the store or the gateway did not answer) */
};

struct gw_gang {
  int n;                        /* members (the job's nodes) */
  struct gw_gang_member m[GW_GANG_MAX];
  bool placed;                  /* every member launched: the placed event went out */
  bool stopping;                /* a member ended early: the others were told to stop */
  bool gave_up;                 /* the gateway stopped the attempt as failed (why says why) */
  char rendezvous[128];         /* tcp://HOST:PORT of rank 0, once its worker said it */
  char why[256];                /* the first failure, for the job's reason */
  double time_scale;            /* the provider's clock, for cost after rank 0 is gone */
};

/* What the members' ends make of the attempt. */
enum gw_gang_outcome {
  GW_GANG_WAIT,                 /* a member is still live */
  GW_GANG_DONE_OK,              /* every member succeeded and the run reached its steps */
  GW_GANG_DONE_CANCELLED,       /* the user cancelled the job */
  GW_GANG_DONE_FAILED,          /* a member failed on its own, or the gateway gave up */
  GW_GANG_REQUEUE,              /* a member was preempted or lost: resume on N new instances */
  GW_GANG_RETRY,                /* stopped short without a preemption: resume, counted as a retry */
};

/* The rank of instance in g, or -1. */
int gw_gang_rank(const struct gw_gang *g, const char *instance);
/* The members' ends as a done status: "succeeded" and so on. */
enum gw_gang_end gw_gang_end_from_status(const char *status);
/* Members not yet ended. */
int gw_gang_live(const struct gw_gang *g);
/* Whether any member ended otherwise than succeeded. */
bool gw_gang_broken(const struct gw_gang *g);

/* The outcome of g's attempt. finished: the job reached its steps.
 * *ret_rank names the member whose end decides it (the first lost or
 * noticed one, the first that failed), *ret_notice whether a member had a
 * notice, *ret_exit_code that member's exit code (-1 unknown). */
enum gw_gang_outcome gw_gang_outcome(const struct gw_gang *g, bool cancel_requested, bool finished,
                                     int *ret_rank, bool *ret_notice, int64_t *ret_exit_code);

#endif
