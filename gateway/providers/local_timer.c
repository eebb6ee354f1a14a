/* The local provider's clock: its one timer on the gateway's loop advances
 * every instance (alive, rebalance recommendation, notice, kill at the
 * deadline or after terminate()'s grace, gone) and the simulated market, and
 * delivers the events queued meanwhile (local.c's operations queue theirs
 * too and only re-arm the timer, so a callback may call back into the
 * provider). Simulated time is (monotonic now - open) x time_scale. */
#include "local_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "imds.h"
#include "loop.h"
#include "market.h"
#include "sl_log.h"
#include "sl_time.h"

#define REAP_POLL_US (20 * SL_US_PER_MS)   /* while an instance is dying */
#define ALIVE_POLL_US (500 * SL_US_PER_MS) /* a live process is checked twice a second */
#define MARKET_REFRESH_MIN_US (250 * SL_US_PER_MS)
#define TOPIC "gateway.local"

int64_t gw_local_sim_us(const struct gw_local *l, int64_t mono_us) {
  return (int64_t)((double)(mono_us - l->open_mono_us) * l->time_scale);
}

static int64_t wall_us_of_sim(const struct gw_local *l, double sim_s) {
  return (int64_t)(sim_s * 1e6 / l->time_scale);
}

/* Queues an event (delivered by the timer); NULL when the queue is full. */
struct gw_provider_event *gw_local_queue_event(struct gw_local *l, enum gw_provider_event_kind kind,
                                               const char *id) {
  return gw_evqueue_push(&l->events, kind, id, TOPIC);
}

static void queue_end(struct gw_local *l, enum gw_provider_event_kind kind, const struct gw_local_inst *in,
                      int64_t deadline_us, bool by_market) {
  struct gw_provider_event *ev = gw_local_queue_event(l, kind, in->id);
  if (ev) {
    ev->deadline_us = deadline_us;
    ev->by_market = by_market;
  }
}

static void drop(struct gw_local *l, size_t i) {
  gw_local_inst_free(l->inst[i]);
  l->inst[i] = l->inst[--l->n];
}

/* ---- notices and the market --------------------------------------------- */

/* Gives in a notice of notice_sim_s simulated seconds: the metadata endpoint
 * answers instance-action from now on and the group dies at the deadline. */
void gw_local_give_notice(struct gw_local *l, struct gw_local_inst *in, double notice_sim_s, int64_t now_mono) {
  if (in->deadline_real_us > 0 || in->gone)
    return;
  int64_t real = sl_time_real_us();
  int64_t deadline = real + wall_us_of_sim(l, notice_sim_s);
  deadline = (deadline + SL_US_PER_S - 1) / SL_US_PER_S * SL_US_PER_S;
  in->deadline_real_us = deadline;
  in->deadline_mono_us = now_mono + (deadline - real);
  in->by_market = true;
  if (in->imds)
    gw_imds_set_notice(in->imds, "terminate", deadline);
  gw_local_save_record(l, in);
  queue_end(l, GW_PROVIDER_NOTICE, in, deadline, true);
  sl_info(TOPIC, "instance %s: spot notice, terminated in %.1f s", in->id,
          (double)(deadline - real) / 1e6);
}

/* Counts live spot instances of a type (without_notice: only those that
 * have no notice yet). */
int gw_local_spot_running(const struct gw_local *l, int type_idx, bool without_notice) {
  int n = 0;
  for (size_t i = 0; i < l->n; i++) {
    const struct gw_local_inst *in = l->inst[i];
    if (in->spot && in->type_idx == type_idx && !in->gone && in->kill_at_mono_us == 0 &&
        (!without_notice || in->deadline_real_us == 0))
      n++;
  }
  return n;
}

/* Trace model: a type holding more spot instances than the tick's capacity
 * loses the newest ones (they get notices). True when capacity changed. */
static bool apply_capacity(struct gw_local *l, int64_t now) {
  int cap = gw_market_capacity(l->market, gw_local_sim_us(l, now));
  bool changed = l->capacity_known && cap != l->last_capacity;
  l->last_capacity = cap;
  l->capacity_known = true;
  for (size_t t = 0; t < gw_catalog_count(l->cat); t++) {
    int excess = gw_local_spot_running(l, (int)t, true) - cap;
    while (excess-- > 0) {
      struct gw_local_inst *newest = NULL;
      for (size_t i = 0; i < l->n; i++) {
        struct gw_local_inst *in = l->inst[i];
        if (in->spot && in->type_idx == (int)t && !in->gone && in->deadline_real_us == 0 &&
            in->kill_at_mono_us == 0 &&
            (!newest || in->launched_real_us > newest->launched_real_us))
          newest = in;
      }
      if (!newest)
        break;
      gw_local_give_notice(l, newest, GW_MARKET_NOTICE_S, now);
    }
  }
  return changed;
}

/* Recomputes the market array at now. True when a price moved. */
bool gw_local_refresh_market(struct gw_local *l, int64_t now) {
  bool changed = false;
  int64_t sim = gw_local_sim_us(l, now);
  bool none = gw_market_capacity(l->market, sim) <= 0;
  for (size_t i = 0; i < l->n_types; i++) {
    double price = gw_market_price(l->market, l->type_cat[i], sim);
    changed |= price != l->types[i].spot_usd_per_hour || none != l->types[i].spot_none;
    l->types[i].spot_usd_per_hour = price;
    l->types[i].spot_none = none;
  }
  l->market_mono_us = now;
  return changed;
}

/* When the market next changes (monotonic µs), no sooner than
 * MARKET_REFRESH_MIN_US after the last refresh. */
static int64_t market_due(const struct gw_local *l) {
  int64_t s = gw_market_next_change_us(l->market, gw_local_sim_us(l, l->market_mono_us));
  int64_t t = l->open_mono_us + (int64_t)ceil((double)s / l->time_scale) + 1;
  int64_t earliest = l->market_mono_us + MARKET_REFRESH_MIN_US;
  return t > earliest ? t : earliest;
}

/* ---- the timer ---------------------------------------------------------- */

/* When the timer next has work: queued events at once, else the earliest
 * notice, rebalance, deadline, kill, liveness check, market change or sweep. */
int64_t gw_local_next_due(const struct gw_local *l, int64_t now) {
  if (l->events.n)
    return now;
  int64_t next = market_due(l);
  if (l->swept_mono_us + l->sweep_every_us < next)
    next = l->swept_mono_us + l->sweep_every_us;
  for (size_t i = 0; i < l->n; i++) {
    const struct gw_local_inst *in = l->inst[i];
    int64_t t = now + ALIVE_POLL_US;
    if (in->gone) /* seen gone (by list): its end is reported, its record removed, at once */
      t = now;
    else if (in->signalled || in->kill_at_mono_us)
      t = now + REAP_POLL_US;
    if (in->notice_at_mono_us < t)
      t = in->notice_at_mono_us;
    if (in->rebalance_at_mono_us < t)
      t = in->rebalance_at_mono_us;
    if (in->deadline_real_us > 0 && !in->signalled && in->deadline_mono_us < t)
      t = in->deadline_mono_us;
    if (in->kill_at_mono_us > 0 && !in->signalled && in->kill_at_mono_us < t)
      t = in->kill_at_mono_us;
    if (t < next)
      next = t;
  }
  return next;
}

/* Moves the timer to the next due time after an operation changed it
 * (inside the timer's own callback its answer does that). */
void gw_local_rearm(struct gw_local *l) {
  if (l->timer > 0 && !l->in_timer)
    gw_loop_set_timer(l->loop, l->timer, gw_local_next_due(l, sl_time_mono_us()));
}

/* Advances every instance and the market to now; queues what happened. */
static void step(struct gw_local *l, int64_t now) {
  for (size_t i = 0; i < l->n; i++) {
    struct gw_local_inst *in = l->inst[i];
    if (in->gone)
      continue;
    if (!gw_local_alive(in)) {
      in->gone = true;
      gw_proc_kill_session(in->pid); /* a lost instance takes everything on it along */
      continue;
    }
    if (in->rebalance_at_mono_us <= now) {
      in->rebalance_at_mono_us = INT64_MAX;
      if (in->imds)
        gw_imds_set_rebalance(in->imds, sl_time_real_us());
      sl_info(TOPIC, "instance %s: rebalance recommendation", in->id);
    }
    if (in->notice_at_mono_us <= now && in->kill_at_mono_us == 0) {
      in->notice_at_mono_us = INT64_MAX;
      gw_local_give_notice(l, in, GW_MARKET_NOTICE_S, now);
    }
    if (!in->signalled && ((in->deadline_real_us > 0 && in->deadline_mono_us <= now) ||
                           (in->kill_at_mono_us > 0 && in->kill_at_mono_us <= now))) {
      gw_proc_kill_session(in->pid);
      in->signalled = true;
    }
  }
  bool market_changed = gw_market_is_trace(l->market) && apply_capacity(l, now);
  if (now >= market_due(l))
    market_changed |= gw_local_refresh_market(l, now);
  if (market_changed) {
    struct gw_provider_event *ev = gw_local_queue_event(l, GW_PROVIDER_CAPACITY, "");
    if (ev)
      ev->by_market = true;
  }
  for (size_t i = 0; i < l->n;) {
    struct gw_local_inst *in = l->inst[i];
    if (!in->gone) {
      i++;
      continue;
    }
    queue_end(l, GW_PROVIDER_TERMINATED, in, in->deadline_real_us, in->by_market);
    sl_info(TOPIC, "instance %s (pid %d) is gone%s", in->id, (int)in->pid,
            in->by_market ? " (preempted)" : "");
    gw_local_remove_record(l, in->id);
    drop(l, i);
  }
  if (now - l->swept_mono_us >= l->sweep_every_us) { /* logs that reach a week old while it runs */
    gw_local_sweep_folders(l);
    l->swept_mono_us = now;
  }
}

/* Delivers the events queued so far; those the callbacks queue meanwhile
 * wait for the next turn (the timer is then due at once). */
static void deliver(struct gw_local *l) {
  struct gw_provider_event *batch;
  size_t n;
  if (gw_evqueue_take(&l->events, &batch, &n) < 0)
    return; /* kept queued; the next turn tries again */
  for (size_t i = 0; i < n; i++)
    if (l->base.on_event)
      l->base.on_event(l->base.userdata, &l->base, &batch[i]);
  free(batch);
}

int64_t gw_local_on_timer(struct gw_loop *loop, int64_t id, int64_t now_us, void *data) {
  struct gw_local *l = data;
  (void)loop;
  (void)id;
  (void)now_us; /* the loop's time is read once per turn; deadlines want the clock */
  l->in_timer = true;
  step(l, sl_time_mono_us());
  deliver(l);
  l->in_timer = false;
  return gw_local_next_due(l, sl_time_mono_us());
}
