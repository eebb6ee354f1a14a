/* What the scheduler reports, and who listens: the gateway's sinks.
 *
 * The scheduler (and idle shutdown) say what happened as events on the bus
 * and call none of their listeners; the kernel protocol (fan-out to
 * attached clients), the cost ledger, and later metrics and webhooks
 * subscribe at start-up. Delivery is synchronous, in subscription order,
 * on the loop's thread. Everything an event points to is borrowed for the
 * call. */
#ifndef GW_BUS_H
#define GW_BUS_H

#include "job.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#define GW_BUS_MAX_SINKS 16

enum gw_bus_kind {
  GW_BUS_JOB_EVENT = 1 << 0,    /* job's event (with its seq) is in the store: job, event */
  GW_BUS_JOB_STATE = 1 << 1,    /* job moved to job->state (reason in job->reason) */
  GW_BUS_PLACED = 1 << 2,       /* job placed on instance (an attempt begins) */
  GW_BUS_PREEMPTED = 1 << 3,    /* job lost instance; notice: with a notice */
  GW_BUS_COST = 1 << 4,         /* job's attempt accrued usd / on_demand_usd over seconds */
  GW_BUS_NOTICE = 1 << 5,       /* msg for the clients of (user, session); session NULL: every
                                   session of user; user NULL: those msg's budget scope covers */
  GW_BUS_INSTANCE_GONE = 1 << 6,/* instance left the fleet: why */
  GW_BUS_IDLE_SHUTDOWN = 1 << 7,/* instance of user (session, or NULL) stopped for idleness: why */
  GW_BUS_BUDGET = 1 << 8,       /* a budget crossed an alert threshold or its cap: budget */
};

/* A budget's moment: scope "gateway", "group" or "user" and its name (""
 * for the gateway), the month ("YYYY-MM", UTC), the threshold crossed (a
 * percentage of budget_usd), and cap when the hard cap was reached. */
struct gw_bus_budget {
  const char *scope, *name, *month;
  double threshold_pct, spent_usd, budget_usd;
  bool cap;
};

struct gw_bus_event {
  enum gw_bus_kind kind;
  const struct gw_job *job;     /* JOB_EVENT, JOB_STATE, PLACED, PREEMPTED, COST */
  const json_t *event;          /* JOB_EVENT */
  const char *instance;         /* PLACED, PREEMPTED, INSTANCE_GONE, IDLE_SHUTDOWN */
  bool notice;                  /* PREEMPTED */
  double usd, on_demand_usd, seconds; /* COST: this accrual (seconds in provider time) */
  const char *user, *session;   /* NOTICE, IDLE_SHUTDOWN */
  const json_t *msg;            /* NOTICE */
  const char *why;              /* INSTANCE_GONE, IDLE_SHUTDOWN */
  const struct gw_bus_budget *budget; /* BUDGET */
};

typedef void (*gw_sink_fn)(void *data, const struct gw_bus_event *ev);

struct gw_bus {
  struct {
    unsigned kinds;
    gw_sink_fn fn;
    void *data;
  } sinks[GW_BUS_MAX_SINKS];
  size_t n;
};

/* bus is embedded by its owner: zero it with gw_bus_init. */
void gw_bus_init(struct gw_bus *b);
/* Calls fn for every event whose kind is in kinds (a mask of gw_bus_kind).
 * SL_ELIMIT past GW_BUS_MAX_SINKS. */
int gw_bus_subscribe(struct gw_bus *b, unsigned kinds, gw_sink_fn fn, void *data);
/* Delivers ev (borrowed) to its subscribers. */
void gw_bus_emit(const struct gw_bus *b, const struct gw_bus_event *ev);

#endif
