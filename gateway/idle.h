/* Idle notebooks (DESIGN.md §5, Idle shutdown): warns a notebook session
 * that nobody uses, then stops its instances. Notices go out on the bus
 * (GW_BUS_NOTICE); instances are stopped through the scheduler. */
#ifndef GW_IDLE_H
#define GW_IDLE_H

#include "bus.h"
#include "conf.h"
#include "fleet.h"
#include "scheduler.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GW_MAX_SESSIONS 1024

struct gw_idle;

/* An owned idle watcher (everything borrowed), or NULL. */
struct gw_idle *gw_idle_new(const struct gw_config *cfg, struct gw_fleet *fleet,
                            struct gw_sched *sched, const struct gw_bus *bus);
struct gw_idle *gw_idle_free(struct gw_idle *d);
/* A request from a client of (user, session): the notebook is active. */
void gw_idle_touch(struct gw_idle *d, const char *user, const char *session);
/* Warns and stops idle notebooks as of now_us (monotonic). */
void gw_idle_check(struct gw_idle *d, int64_t now_us);

/* The embedded gateway's own lifetime: true once it has had no client
 * (n_clients connected now) and no live job for [idle] gateway_timeout as
 * of now_us (monotonic). Always false for a configured gateway, and with a
 * timeout of 0. */
bool gw_idle_gateway_due(struct gw_idle *d, size_t n_clients, int64_t now_us);
/* Stops every instance that runs no job, whoever's (why for the log and
 * the instance's row). Returns how many. */
size_t gw_idle_stop_workers(struct gw_idle *d, const char *why);

#endif
