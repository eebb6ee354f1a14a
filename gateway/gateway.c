/* The gateway object and its loop.
 *
 * One thread: zmq_poll waits on the kernel ROUTER, the worker ROUTER and the
 * ZAP REP socket, with a timeout set by the nearest timer (provider tick,
 * housekeeping). The ZAP socket is bound before the worker socket so that no
 * CURVE handshake is ever judged without it. Handlers never block: provider
 * calls return once a launch is requested. */
#include "gateway.h"

#include "core.h"
#include "provider_open.h"
#include "conf.h"
#include "sl_err.h"
#include "sl_frame.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_path.h"
#include "sl_time.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define T "gateway"

int gw_try_send(void *sock, const uint8_t *rid, size_t rid_len, const json_t *msg) {
  size_t len;
  char *text = sl_json_dump(msg, &len);
  if (!text)
    return -ENOMEM;
  int r = 0;
  if (zmq_send(sock, rid, rid_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
      zmq_send(sock, text, len, ZMQ_DONTWAIT) < 0)
    r = sl_err_from_zmq(zmq_errno());
  free(text);
  return r;
}

int gw_send_to(struct gw *g, void *sock, const uint8_t *rid, size_t rid_len, json_t *msg) {
  (void)g;
  int r = gw_try_send(sock, rid, rid_len, msg);
  if (r < 0)
    sl_debug("gateway.zmq", "send dropped: %s", sl_strerror(r));
  return r;
}

struct gw_job *gw_live_job(struct gw *g, int64_t id) {
  for (size_t i = 0; i < g->n_jobs; i++)
    if (g->jobs[i]->id == id)
      return g->jobs[i];
  return NULL;
}

struct gw_inst *gw_inst_find(struct gw *g, const char *id) {
  for (size_t i = 0; i < g->n_insts; i++)
    if (!strcmp(g->insts[i].row.id, id))
      return &g->insts[i];
  return NULL;
}

void gw_inst_remove(struct gw *g, const char *id) {
  struct gw_inst *in = gw_inst_find(g, id);
  if (!in)
    return;
  size_t i = (size_t)(in - g->insts);
  memmove(&g->insts[i], &g->insts[i + 1], (g->n_insts - i - 1) * sizeof *g->insts);
  g->n_insts--;
}

/* A workers address a local worker can connect to (a wildcard bind becomes loopback). */
static void worker_address(const char *bind, char *ret, size_t size) {
  if (!strncmp(bind, "tcp://0.0.0.0:", 14))
    snprintf(ret, size, "tcp://127.0.0.1:%s", bind + 14);
  else if (!strncmp(bind, "tcp://*:", 8))
    snprintf(ret, size, "tcp://127.0.0.1:%s", bind + 8);
  else
    snprintf(ret, size, "%s", bind);
}

static int bind_sockets(struct gw *g, char *err, size_t err_size) {
  int zero = 0, one = 1;
  g->zap = zmq_socket(g->zctx, ZMQ_REP);
  if (!g->zap || zmq_bind(g->zap, "inproc://zeromq.zap.01") < 0) {
    snprintf(err, err_size, "ZAP handler: %s", zmq_strerror(zmq_errno()));
    return SL_EZMQ;
  }
  g->ksock = zmq_socket(g->zctx, ZMQ_ROUTER);
  g->wsock = zmq_socket(g->zctx, ZMQ_ROUTER);
  if (!g->ksock || !g->wsock)
    return SL_EZMQ;
  zmq_setsockopt(g->ksock, ZMQ_LINGER, &zero, sizeof zero);
  zmq_setsockopt(g->wsock, ZMQ_LINGER, &zero, sizeof zero);
  /* a full client queue says EAGAIN instead of dropping silently: event
   * replays wait for the client to read (kproto.c) */
  zmq_setsockopt(g->ksock, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
  int64_t maxmsg = (int64_t)GW_FRAME_MAX * 16; /* larger ones get an error reply */
  zmq_setsockopt(g->ksock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
  zmq_setsockopt(g->wsock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
  zmq_setsockopt(g->wsock, ZMQ_CURVE_SERVER, &one, sizeof one);
  zmq_setsockopt(g->wsock, ZMQ_CURVE_SECRETKEY, g->keys.secret_z85, GW_Z85_KEY_LEN);
  zmq_setsockopt(g->wsock, ZMQ_ZAP_DOMAIN, "spotlab", 7);
  if (zmq_bind(g->ksock, g->cfg->listen) < 0) {
    snprintf(err, err_size, "cannot listen on %s: %s", g->cfg->listen, zmq_strerror(zmq_errno()));
    return SL_EZMQ;
  }
  if (zmq_bind(g->wsock, g->cfg->workers) < 0) {
    snprintf(err, err_size, "cannot listen for workers on %s: %s", g->cfg->workers,
             zmq_strerror(zmq_errno()));
    return SL_EZMQ;
  }
  return 0;
}

static int open_state(struct gw *g, char *err, size_t err_size) {
  const char *dir = g->cfg->state_dir;
  char path[1200];
  int r = sl_mkdir_p(dir, 0700);
  if (r < 0) {
    snprintf(err, err_size, "%s: %s", dir, sl_strerror(r));
    return r;
  }
  snprintf(path, sizeof path, "%s/instances", dir);
  sl_mkdir_p(path, 0700);
  snprintf(path, sizeof path, "%s/store", dir);
  sl_mkdir_p(path, 0700);
  snprintf(path, sizeof path, "%s/gateway.key", dir);
  if ((r = gw_keys_load_or_create(path, &g->keys, err, err_size)) < 0)
    return r;
  snprintf(path, sizeof path, "%s/gateway.db", dir);
  if ((r = gw_store_open(path, &g->store, err, err_size)) < 0)
    return r;
  for (size_t i = 0; i < g->cfg->n_users; i++) {
    const struct gw_user_cfg *u = &g->cfg->users[i];
    if (u->token_sha256[0] && (r = gw_store_user_put(g->store, u->name, u->token_sha256,
                                                      u->group)) < 0) {
      snprintf(err, err_size, "cannot record user %s", u->name);
      return r;
    }
  }
  return 0;
}

int gw_new(const struct gw_config *cfg, struct gw **ret, char *err, size_t err_size) {
  struct gw *g = calloc(1, sizeof *g);
  if (!g)
    return -ENOMEM;
  g->cfg = cfg;
  g->started_us = sl_time_real_us();
  g->next_replay_mono_us = INT64_MAX;
  g->clients = calloc(GW_MAX_CLIENTS, sizeof *g->clients);
  g->insts = calloc(GW_MAX_INSTANCES, sizeof *g->insts);
  g->jobs = calloc(GW_MAX_LIVE_JOBS, sizeof *g->jobs);
  g->sessions = calloc(GW_MAX_SESSIONS, sizeof *g->sessions);
  g->queue = gw_queue_new();
  int r = -ENOMEM;
  if (!g->clients || !g->insts || !g->jobs || !g->sessions || !g->queue)
    goto fail;
  if ((r = open_state(g, err, err_size)) < 0)
    goto fail;
  worker_address(cfg->workers, g->worker_address, sizeof g->worker_address);
  if (sl_find_program("spotlab-train", g->train_program, sizeof g->train_program) < 0)
    g->train_program[0] = 0;
  char perr[512] = "";
  g->prov = gw_provider_open(cfg, gw_sched_on_provider_event, g, perr, sizeof perr);
  if (!g->prov)
    sl_warn(T, "no provider: %s; jobs will wait in the queue", perr);
  g->zctx = zmq_ctx_new();
  if (!g->zctx)
    goto fail;
  if ((r = bind_sockets(g, err, err_size)) < 0)
    goto fail;
  if ((r = gw_sched_load(g)) < 0) {
    snprintf(err, err_size, "cannot load jobs from the store: %s", sl_strerror(r));
    goto fail;
  }
  sl_info(T, "listening on %s (kernels) and %s (workers)", cfg->listen, cfg->workers);
  *ret = g;
  return 0;
fail:
  if (!err[0])
    snprintf(err, err_size, "%s", sl_strerror(r));
  gw_free(g);
  return r;
}

/* Also records when the provider next wants tick() in *ret_tick. */
static int64_t poll_timeout_ms(struct gw *g, int64_t *ret_tick) {
  int64_t now = sl_time_mono_us();
  int64_t next = g->next_housekeeping_mono_us;
  *ret_tick = now;
  if (g->prov && g->prov->ops->next_tick_us) {
    int64_t t = g->prov->ops->next_tick_us(g->prov);
    *ret_tick = t;
    if (t < next)
      next = t;
  }
  if (g->next_replay_mono_us < next)
    next = g->next_replay_mono_us;
  if (g->kick)
    return 0;
  int64_t ms = (next - now + 999) / 1000;
  return ms < 0 ? 0 : ms > 1000 ? 1000 : ms;
}

int gw_run(struct gw *g, volatile sig_atomic_t *stop) {
  zmq_pollitem_t items[] = {
    {g->zap, 0, ZMQ_POLLIN, 0},
    {g->ksock, 0, ZMQ_POLLIN, 0},
    {g->wsock, 0, ZMQ_POLLIN, 0},
  };
  g->kick = true;
  while (!*stop) {
    int64_t tick_at;
    int n = zmq_poll(items, 3, (long)poll_timeout_ms(g, &tick_at));
    if (n < 0 && zmq_errno() != EINTR) {
      sl_err(T, "poll: %s", zmq_strerror(zmq_errno()));
      return SL_EZMQ;
    }
    if (*stop)
      break;
    /* bounded batches keep one busy socket from starving the others */
    for (int i = 0; i < 64 && n > 0 && (items[0].revents & ZMQ_POLLIN); i++) {
      gw_zap_handle(g);
      int ev = 0;
      size_t sz = sizeof ev;
      if (zmq_getsockopt(g->zap, ZMQ_EVENTS, &ev, &sz) < 0 || !(ev & ZMQ_POLLIN))
        break;
    }
    for (int i = 0; i < 64 && n > 0 && (items[1].revents & ZMQ_POLLIN); i++) {
      gw_kproto_recv(g);
      int ev = 0;
      size_t sz = sizeof ev;
      if (zmq_getsockopt(g->ksock, ZMQ_EVENTS, &ev, &sz) < 0 || !(ev & ZMQ_POLLIN))
        break;
    }
    for (int i = 0; i < 64 && n > 0 && (items[2].revents & ZMQ_POLLIN); i++) {
      gw_wproto_recv(g);
      int ev = 0;
      size_t sz = sizeof ev;
      if (zmq_getsockopt(g->wsock, ZMQ_EVENTS, &ev, &sz) < 0 || !(ev & ZMQ_POLLIN))
        break;
    }
    int64_t now = sl_time_mono_us();
    if (g->next_replay_mono_us <= now)
      gw_kproto_replay(g, now);
    if (g->prov && g->prov->ops->tick && tick_at <= now)
      g->prov->ops->tick(g->prov, now);
    if (now >= g->next_housekeeping_mono_us) {
      gw_sched_housekeeping(g);
      g->next_housekeeping_mono_us = now + 200 * SL_US_PER_MS;
    }
    /* Capacity comes back without any message (a spot market's next tick):
     * while jobs wait in the queue, try placing them again once a second. */
    if (gw_queue_len(g->queue) > 0 && now >= g->next_place_retry_mono_us) {
      g->kick = true;
      g->next_place_retry_mono_us = now + SL_US_PER_S;
    }
    if (g->kick) {
      g->kick = false;
      gw_sched_place(g);
    }
  }
  sl_info(T, "shutting down; workers keep running and re-register on the next start");
  for (size_t i = 0; i < g->n_jobs; i++)
    gw_sched_flush_cost(g, g->jobs[i], true);
  return 0;
}

struct gw *gw_free(struct gw *g) {
  if (!g)
    return NULL;
  if (g->ksock)
    zmq_close(g->ksock);
  if (g->wsock)
    zmq_close(g->wsock);
  if (g->zap)
    zmq_close(g->zap);
  if (g->zctx)
    zmq_ctx_term(g->zctx);
  if (g->prov)
    g->prov->ops->destroy(g->prov);
  for (size_t i = 0; g->jobs && i < g->n_jobs; i++) {
    gw_job_done(g->jobs[i]);
    free(g->jobs[i]);
  }
  free(g->jobs);
  free(g->insts);
  free(g->clients);
  free(g->sessions);
  gw_queue_free(g->queue);
  gw_store_free(g->store);
  free(g);
  return NULL;
}
