/* Idle notebooks (DESIGN.md §5, Idle shutdown).
 *
 * The gateway keeps one entry per notebook session it has heard from: the
 * last time a client of that session sent a request (every request counts,
 * `ping` included) or the session had a live job. A session idle for its
 * user's notebook_timeout (wall clock) whose instances sit without a job
 * gets a `warning` notice warn_before ahead, then its instances are
 * terminated and a `shutdown` notice follows. Session state is already in
 * the store, so the next cell brings capacity back by launching anew. A
 * session with nothing to stop gets no notices. The table is bounded; when
 * full, the least recently active entry is forgotten. Notices go out on
 * the bus; the kernel protocol delivers them.
 *
 * The embedded (per-user) gateway also watches itself: with no connected
 * client and no live job for [idle] gateway_timeout it is due to stop
 * (gateway.c stops its workers and leaves the loop). A live job, queued or
 * running, always keeps it: a job is never stopped for idleness. */
#include "idle.h"

#include "sl_log.h"
#include "sl_time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T "gateway.idle"

enum { ACTIVE, WARNED, STOPPED };

struct session {
  char user[64];
  char session[256];
  int64_t last_active_mono_us;  /* last request from its clients, or a live job seen */
  int state;
};

struct gw_idle {
  const struct gw_config *cfg;
  struct gw_fleet *fleet;
  struct gw_sched *sched;
  const struct gw_bus *bus;
  struct session *sessions;
  size_t n_sessions;
  int64_t gateway_busy_mono_us; /* last time a client was connected or a job live */
};

struct gw_idle *gw_idle_new(const struct gw_config *cfg, struct gw_fleet *fleet,
                            struct gw_sched *sched, const struct gw_bus *bus) {
  struct gw_idle *d = calloc(1, sizeof *d);
  if (!d)
    return NULL;
  *d = (struct gw_idle){.cfg = cfg, .fleet = fleet, .sched = sched, .bus = bus};
  d->gateway_busy_mono_us = sl_time_mono_us();
  d->sessions = calloc(GW_MAX_SESSIONS, sizeof *d->sessions);
  if (!d->sessions)
    return gw_idle_free(d);
  return d;
}

struct gw_idle *gw_idle_free(struct gw_idle *d) {
  if (d)
    free(d->sessions);
  free(d);
  return NULL;
}

static struct session *find(struct gw_idle *g, const char *user, const char *session) {
  for (size_t i = 0; i < g->n_sessions; i++)
    if (!strcmp(g->sessions[i].user, user) && !strcmp(g->sessions[i].session, session))
      return &g->sessions[i];
  return NULL;
}

void gw_idle_touch(struct gw_idle *g, const char *user, const char *session) {
  if (!session[0])
    return;
  struct session *s = find(g, user, session);
  if (!s && g->n_sessions < GW_MAX_SESSIONS)
    s = &g->sessions[g->n_sessions++];
  if (!s) {
    s = &g->sessions[0];
    for (size_t i = 1; i < g->n_sessions; i++)
      if (g->sessions[i].last_active_mono_us < s->last_active_mono_us)
        s = &g->sessions[i];
  }
  if (strcmp(s->user, user) || strcmp(s->session, session)) {
    snprintf(s->user, sizeof s->user, "%s", user);
    snprintf(s->session, sizeof s->session, "%s", session);
  }
  s->last_active_mono_us = sl_time_mono_us();
  s->state = ACTIVE;
}

static bool has_live_job(struct gw_idle *g, const struct session *s) {
  for (size_t i = 0; i < gw_fleet_n_jobs(g->fleet); i++) {
    const struct gw_job *j = gw_fleet_job_at(g->fleet, i);
    if (!strcmp(j->user, s->user) && !strcmp(j->session, s->session))
      return true;
  }
  return false;
}

/* The session's instances that could be stopped: none has a job. */
static size_t stoppable(struct gw_idle *g, const struct session *s) {
  size_t n = 0;
  for (size_t i = 0; i < gw_fleet_n_insts(g->fleet); i++) {
    const struct gw_inst *in = gw_fleet_inst_at(g->fleet, i);
    if (!in->row.job && !strcmp(in->row.user, s->user) && !strcmp(in->session, s->session) &&
        strcmp(in->row.state, "draining"))
      n++;
  }
  return n;
}

static void notify(struct gw_idle *g, const struct session *s, const char *action, int64_t in_s) {
  json_t *m = json_pack("{s:s,s:s,s:I,s:s,s:s,s:s}", "type", "notice", "session", s->session,
                        "time_us", (json_int_t)sl_time_real_us(), "event", "idle", "what",
                        "notebook", "action", action);
  if (in_s >= 0)
    json_object_set_new(m, "in_s", json_integer(in_s));
  gw_bus_emit(g->bus, &(struct gw_bus_event){.kind = GW_BUS_NOTICE, .user = s->user,
                                             .session = s->session, .msg = m});
  json_decref(m);
}

static void stop_session(struct gw_idle *g, const struct session *s) {
  for (size_t i = 0; i < gw_fleet_n_insts(g->fleet);) {
    struct gw_inst *in = gw_fleet_inst_at(g->fleet, i);
    if (!in->row.job && !strcmp(in->row.user, s->user) && !strcmp(in->session, s->session) &&
        strcmp(in->row.state, "draining")) {
      gw_bus_emit(g->bus, &(struct gw_bus_event){.kind = GW_BUS_IDLE_SHUTDOWN,
                                                 .instance = in->row.id, .user = s->user,
                                                 .session = s->session,
                                                 .why = "idle notebook shut down"});
      gw_sched_terminate(g->sched, in, "idle notebook shut down");
      continue; /* the array shifted */
    }
    i++;
  }
}

void gw_idle_check(struct gw_idle *g, int64_t now) {
  for (size_t i = 0; i < g->n_sessions; i++) {
    struct session *s = &g->sessions[i];
    if (has_live_job(g, s)) { /* a running (or waiting) job keeps its notebook active */
      s->last_active_mono_us = now;
      s->state = ACTIVE;
      continue;
    }
    if (s->state == STOPPED || !stoppable(g, s))
      continue;
    int64_t timeout = gw_config_notebook_timeout_us(g->cfg, s->user);
    int64_t idle = now - s->last_active_mono_us, warn = g->cfg->warn_before_us;
    if (idle >= timeout) {
      sl_info(T, "%s/%s: idle for %lld s; stopping its workers", s->user, s->session,
              (long long)(idle / SL_US_PER_S));
      stop_session(g, s);
      s->state = STOPPED;
      notify(g, s, "shutdown", -1);
    } else if (s->state == ACTIVE && warn > 0 && idle >= timeout - warn) {
      s->state = WARNED;
      notify(g, s, "warning", (timeout - idle + SL_US_PER_S - 1) / SL_US_PER_S);
    }
  }
}

bool gw_idle_gateway_due(struct gw_idle *g, size_t n_clients, int64_t now) {
  if (!g->cfg->embedded || g->cfg->gateway_timeout_us <= 0)
    return false;
  if (n_clients || gw_fleet_n_jobs(g->fleet)) {
    g->gateway_busy_mono_us = now;
    return false;
  }
  return now - g->gateway_busy_mono_us >= g->cfg->gateway_timeout_us;
}

size_t gw_idle_stop_workers(struct gw_idle *g, const char *why) {
  size_t n = 0;
  for (size_t i = 0; i < gw_fleet_n_insts(g->fleet);) {
    struct gw_inst *in = gw_fleet_inst_at(g->fleet, i);
    if (!in->row.job) {
      gw_sched_terminate(g->sched, in, why);
      n++;
      continue; /* the array shifted */
    }
    i++;
  }
  return n;
}
