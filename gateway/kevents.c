/* The kernel protocol's event delivery (protocols.md §1): a job's events
 * to the clients attached to it, replayed from the store and then live, and
 * notices to a notebook session's clients.
 *
 * A client's send queue holds at most the socket's high-water mark, and a
 * job may have any number of events. So an attach replays from the store a
 * page at a time, only as fast as the client reads: the socket is
 * ZMQ_ROUTER_MANDATORY, a full queue answers -EAGAIN, and the replay waits
 * (backing off while the client reads nothing) and goes on from the last seq
 * sent. Memory stays bounded: a cursor per attachment, a page at a time. */
#include "kproto_int.h"

#include "loop.h"
#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <string.h>

#define T GW_KPROTO_TOPIC

#define REPLAY_PAGE 128
#define REPLAY_BACKOFF_MIN_US SL_US_PER_MS
#define REPLAY_BACKOFF_MAX_US (50 * SL_US_PER_MS)

/* Sends msg to client c unless its connection closed: 0 or negative
 * (-EHOSTUNREACH: c is forgotten). */
static int deliver(struct gw_kproto *g, struct gw_client *c, const json_t *msg) {
  gw_kproto_drain(g);
  if (!c->rid_len)
    return -EHOSTUNREACH;
  int r = g->env.send(g->env.send_ctx, c->rid, c->rid_len, msg);
  if (r == -EHOSTUNREACH)
    gw_kproto_client_forget(c);
  return r;
}

static struct gw_attach *attach_find(struct gw_client *c, int64_t job) {
  for (size_t k = 0; k < c->n_attached; k++)
    if (c->attached[k].job == job)
      return &c->attached[k];
  return NULL;
}

static void attach_remove(struct gw_client *c, struct gw_attach *a) {
  size_t k = (size_t)(a - c->attached);
  memmove(&c->attached[k], &c->attached[k + 1], (c->n_attached - k - 1) * sizeof *c->attached);
  c->n_attached--;
}

static void replay_due(struct gw_kproto *g, struct gw_client *c, int64_t at_us) {
  c->replay_at_mono_us = at_us;
  if (at_us < g->next_replay_mono_us) {
    g->next_replay_mono_us = at_us;
    if (g->env.loop)
      gw_loop_set_timer(g->env.loop, g->replay_timer, at_us);
  }
}

/* One round for client c: a page of each attachment that replays. Sets when
 * the client is due again (0: nothing left to replay). */
static void replay_round(struct gw_kproto *g, struct gw_client *c, int64_t now_us) {
  bool pending = false, progress = false, full = false;
  for (size_t k = 0; k < c->n_attached && !full; k++) {
    struct gw_attach *a = &c->attached[k];
    if (!a->replaying)
      continue;
    json_t *evs = NULL, *e;
    bool more = false;
    size_t i;
    int r = gw_store_events(g->env.store, a->job, a->replay_after, REPLAY_PAGE, &evs, &more);
    json_array_foreach(evs, i, e) {
      if ((r = deliver(g, c, e)) < 0)
        break;
      a->replay_after = sl_json_get_int(e, "seq", a->replay_after);
      progress = true;
    }
    json_decref(evs);
    if (r == -EAGAIN) {
      full = pending = true; /* the queue is per client: its other replays wait too */
    } else if (r < 0 && r != -EHOSTUNREACH) {
      char id[16];
      sl_warn(T, "replay of %s stopped after seq %lld: %s", gw_job_id_str(a->job, id, sizeof id),
              (long long)a->replay_after, sl_strerror(r));
      a->replaying = false; /* the client sees a gap in seq and asks again */
    } else if (r == -EHOSTUNREACH) {
      return; /* the client is gone (deliver forgot it) */
    } else if (more) {
      pending = true;
    } else {
      a->replaying = false; /* caught up: live events follow, in order */
    }
    if (!a->replaying && !a->follow)
      attach_remove(c, a), k--;
  }
  if (!pending) {
    c->replay_at_mono_us = 0;
    c->replay_backoff_us = 0;
    return;
  }
  if (!full) {
    c->replay_backoff_us = 0;
    replay_due(g, c, now_us);
    return;
  }
  int64_t b = c->replay_backoff_us;
  b = progress || !b ? REPLAY_BACKOFF_MIN_US : b * 2 > REPLAY_BACKOFF_MAX_US ? REPLAY_BACKOFF_MAX_US : b * 2;
  c->replay_backoff_us = b;
  replay_due(g, c, now_us + b);
}

static void replay_all(struct gw_kproto *g, int64_t now_us) {
  g->next_replay_mono_us = INT64_MAX;
  for (size_t i = 0; i < g->n_clients; i++) {
    struct gw_client *c = &g->clients[i];
    if (!c->rid_len)
      continue;
    if (c->replay_at_mono_us && c->replay_at_mono_us <= now_us)
      replay_round(g, c, now_us);
    else if (c->replay_at_mono_us && c->replay_at_mono_us < g->next_replay_mono_us)
      g->next_replay_mono_us = c->replay_at_mono_us;
  }
}

static void fanout(struct gw_kproto *g, int64_t job, const json_t *event) {
  for (size_t i = 0; i < g->n_clients; i++) {
    struct gw_client *c = &g->clients[i];
    struct gw_attach *a = c->rid_len ? attach_find(c, job) : NULL;
    if (!a || a->replaying)
      continue; /* a replay reaches this event in the store */
    int r = deliver(g, c, event);
    if (r == -EAGAIN) {
      /* the client's queue is full: go on from the store once it reads */
      a->replaying = true;
      a->replay_after = sl_json_get_int(event, "seq", 1) - 1;
      if (!c->replay_at_mono_us) {
        c->replay_backoff_us = REPLAY_BACKOFF_MIN_US;
        replay_due(g, c, sl_time_mono_us() + REPLAY_BACKOFF_MIN_US);
      }
    } else if (r < 0 && r != -EHOSTUNREACH) {
      sl_debug("gateway.zmq", "event dropped: %s", sl_strerror(r));
    }
  }
}

/* Whether a notice for no one user (a budget's: its "scope" and "name")
 * concerns c's user: the gateway's concerns everyone, a group's its
 * members, a user's that user. */
static bool notice_covers(struct gw_kproto *g, const struct gw_client *c, const json_t *msg) {
  const char *scope = sl_json_get_str(msg, "scope", ""), *name = sl_json_get_str(msg, "name", "");
  if (!strcmp(scope, "gateway"))
    return true;
  if (!strcmp(scope, "user"))
    return !strcmp(c->who.user, name);
  const char *group = !strcmp(scope, "group") ? gw_config_user_group(g->env.cfg, c->who.user) : NULL;
  return group && !strcmp(group, name);
}

/* user NULL: every client the notice's scope covers; session NULL: every
 * session of user. */
static void notify(struct gw_kproto *g, const char *user, const char *session, const json_t *msg) {
  for (size_t i = 0; i < g->n_clients; i++) {
    struct gw_client *c = &g->clients[i];
    if (c->rid_len && (user ? !strcmp(c->who.user, user) : notice_covers(g, c, msg)) &&
        (!session || !strcmp(c->session, session)))
      deliver(g, c, msg);
  }
}

void gw_kproto_on_attach(struct gw_kreq *q) {
  struct gw_job tmp, *j;
  bool live;
  if (!(j = gw_kproto_user_job(q, &tmp, &live)))
    return;
  int64_t id = j->id, after = sl_json_get_int(q->body, "after", 0);
  gw_kproto_reply(q, json_pack("{s:o}", "job", gw_job_summary(j)));
  if (!live)
    gw_job_done(&tmp);
  /* every event with seq > after, then (a live job) the new ones as they come */
  struct gw_client *c = q->c;
  struct gw_attach *a = attach_find(c, id);
  if (!a) {
    if (c->n_attached == GW_MAX_ATTACH)
      attach_remove(c, &c->attached[0]);
    a = &c->attached[c->n_attached++];
  }
  *a = (struct gw_attach){.job = id, .replay_after = after > 0 ? after : 0, .replaying = true,
                          .follow = live};
  replay_round(q->g, c, sl_time_mono_us());
}

void gw_kproto_on_detach(struct gw_kreq *q) {
  struct gw_attach *a = attach_find(q->c, gw_job_id_parse(sl_json_get_str(q->body, "job", NULL)));
  if (a)
    attach_remove(q->c, a);
  gw_kproto_reply(q, NULL);
}

void gw_kproto_sink(void *data, const struct gw_bus_event *ev) {
  struct gw_kproto *g = data;
  if (ev->kind == GW_BUS_JOB_EVENT && ev->job && ev->event)
    fanout(g, ev->job->id, ev->event);
  else if (ev->kind == GW_BUS_NOTICE && ev->msg)
    notify(g, ev->user, ev->session, ev->msg);
}

int64_t gw_kproto_replay_timer(struct gw_loop *l, int64_t id, int64_t now_us, void *data) {
  (void)l; (void)id;
  struct gw_kproto *g = data;
  replay_all(g, now_us);
  return g->next_replay_mono_us;
}
