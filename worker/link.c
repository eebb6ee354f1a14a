/* The worker's connections to its gateway (link.h).
 *
 * A socket and its monitor are opened and closed together; the monitor's
 * address carries the link's name and a generation, so a new socket never
 * meets the old one's monitor. HANDSHAKE_FAILED_AUTH (the gateway's ZAP
 * handler said no) and HANDSHAKE_FAILED_PROTOCOL end a connection for good
 * in libzmq, so either replaces the socket. Every other failure (a refused
 * TCP connect, a gateway gone mid-handshake) libzmq retries by itself, but a
 * handshake that fails each time (a gateway with another key than the one
 * this worker was given) it retries every RECONNECT_IVL (100 ms) for ever,
 * ignoring RECONNECT_IVL_MAX (zmq_disconnect does not stop it either):
 * after FAILS_IN_A_ROW of those the socket is replaced too, and on the new
 * one a single failure does it again, until a handshake succeeds. A socket
 * replaced is closed at once (that is what stops libzmq's tries); its
 * successor connects when the backoff is over. */
#include "link.h"

#include "conf.h"

#include "sl_frame.h"
#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define TOPIC "worker.link"
#define LINK_RETRY_FIRST_MS 1000
#define LINK_RETRY_MAX_MS 30000
#define EVENTS_PER_CALL 64
#define FAILS_IN_A_ROW 10 /* handshakes failed without detail before the link backs off */

struct wk_link {
  void *zctx;
  const struct wk_config *cfg;
  struct wk_link_opts opts;
  char name[32];
  void *sock, *monitor;
  unsigned generation;
  int64_t due_us;   /* the new socket connects then; INT64_MAX: none waits */
  int64_t retry_ms; /* the next backoff */
  int fails;        /* handshakes failed without detail since one succeeded or the socket opened */
  int fails_max;    /* how many of them replace the socket: FAILS_IN_A_ROW, 1 after a backoff */
  bool connected;   /* false: a socket waiting for the backoff to end */
};

static int set_int(void *s, int opt, int v) { return zmq_setsockopt(s, opt, &v, sizeof v); }

static void close_socket(struct wk_link *l) {
  if (l->sock) zmq_socket_monitor(l->sock, NULL, 0);
  if (l->monitor) zmq_close(l->monitor);
  if (l->sock) zmq_close(l->sock);
  l->sock = l->monitor = NULL;
}

/* A new socket and its monitor into l, connected or not yet, closing the
 * old ones; or an error with the old ones kept. */
static int open_socket(struct wk_link *l, bool connect) {
  const struct wk_config *c = l->cfg;
  const struct wk_link_opts *o = &l->opts;
  char address[96];
  snprintf(address, sizeof address, "inproc://wk-link-%s-%p-%u", l->name, (void *)l, ++l->generation);
  struct wk_link fresh = {0};
  if (!(fresh.sock = zmq_socket(l->zctx, ZMQ_DEALER))) return sl_err_from_zmq(zmq_errno());
  void *s = fresh.sock;
  int64_t max_msg = o->max_msg_bytes;
  int events = ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
  if (zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, c->gateway_public, WK_KEY_Z85_LEN + 1) < 0 ||
      zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, c->public_key, WK_KEY_Z85_LEN + 1) < 0 ||
      zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, c->secret_key, WK_KEY_Z85_LEN + 1) < 0 ||
      set_int(s, ZMQ_LINGER, 0) < 0 || (o->sndhwm && set_int(s, ZMQ_SNDHWM, o->sndhwm) < 0) ||
      set_int(s, ZMQ_RECONNECT_IVL, 100) < 0 || set_int(s, ZMQ_RECONNECT_IVL_MAX, 2000) < 0 ||
      (o->heartbeat_ms && (set_int(s, ZMQ_HEARTBEAT_IVL, o->heartbeat_ms) < 0 ||
                           set_int(s, ZMQ_HEARTBEAT_TIMEOUT, 5 * o->heartbeat_ms) < 0)) ||
      (max_msg > 0 && zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &max_msg, sizeof max_msg) < 0)) {
    sl_err(TOPIC, "%s connection: socket options: %s", l->name, zmq_strerror(zmq_errno()));
    goto fail;
  }
  if (zmq_socket_monitor(s, address, events) < 0 || !(fresh.monitor = zmq_socket(l->zctx, ZMQ_PAIR)) ||
      set_int(fresh.monitor, ZMQ_LINGER, 0) < 0 || zmq_connect(fresh.monitor, address) < 0) {
    sl_err(TOPIC, "%s connection: socket monitor: %s", l->name, zmq_strerror(zmq_errno()));
    goto fail;
  }
  if (connect && zmq_connect(s, c->gateway) < 0) {
    sl_err(TOPIC, "%s connection: connect %s: %s", l->name, c->gateway, zmq_strerror(zmq_errno()));
    goto fail;
  }
  close_socket(l);
  l->sock = fresh.sock;
  l->monitor = fresh.monitor;
  l->connected = connect;
  l->fails = 0;
  return 0;
fail:;
  int r = sl_err_from_zmq(zmq_errno());
  close_socket(&fresh);
  return r;
}

int wk_link_new(void *zctx, const struct wk_config *cfg, const struct wk_link_opts *opts,
                struct wk_link **ret) {
  struct wk_link *l = calloc(1, sizeof *l);
  if (!l) return -ENOMEM;
  *l = (struct wk_link){.zctx = zctx, .cfg = cfg, .opts = *opts, .due_us = INT64_MAX,
                        .retry_ms = LINK_RETRY_FIRST_MS, .fails_max = FAILS_IN_A_ROW};
  snprintf(l->name, sizeof l->name, "%s", opts->name ? opts->name : "gateway");
  l->opts.name = l->name;
  int r = open_socket(l, true);
  if (r < 0) {
    free(l);
    return r;
  }
  *ret = l;
  return 0;
}

struct wk_link *wk_link_free(struct wk_link *l) {
  if (!l) return NULL;
  close_socket(l);
  free(l);
  return NULL;
}

void *wk_link_socket(const struct wk_link *l) { return l->sock; }
void *wk_link_monitor(const struct wk_link *l) { return l->monitor; }
int64_t wk_link_due_us(const struct wk_link *l) { return l->due_us; }

/* One event: its number (the first frame's first 16 bits); -1 when none. */
static int read_event(void *monitor) {
  zmq_msg_t f;
  zmq_msg_init(&f);
  if (zmq_msg_recv(&f, monitor, ZMQ_DONTWAIT) < 0) {
    zmq_msg_close(&f);
    return -1;
  }
  uint16_t ev = 0;
  if (zmq_msg_size(&f) >= sizeof ev) memcpy(&ev, zmq_msg_data(&f), sizeof ev);
  bool more = zmq_msg_more(&f);
  zmq_msg_close(&f);
  while (more) { /* the endpoint frame */
    zmq_msg_init(&f);
    more = zmq_msg_recv(&f, monitor, ZMQ_DONTWAIT) >= 0 && zmq_msg_more(&f);
    zmq_msg_close(&f);
  }
  return ev;
}

/* After a refusal or handshakes that keep failing: the socket is replaced
 * at once by one not connected yet, which connects when the backoff is
 * over. Closing the old socket is what stops libzmq's tries (a disconnect
 * does not); if no new one can be made, the old one stays until then. */
static void back_off(struct wk_link *l) {
  l->due_us = sl_time_mono_us() + l->retry_ms * SL_US_PER_MS;
  l->retry_ms = l->retry_ms * 2 < LINK_RETRY_MAX_MS ? l->retry_ms * 2 : LINK_RETRY_MAX_MS;
  open_socket(l, false);
}

int wk_link_events(struct wk_link *l) {
  int mask = 0, ev;
  for (int n = 0; l->monitor && n < EVENTS_PER_CALL && (ev = read_event(l->monitor)) >= 0; n++) {
    if (ev == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      mask |= WK_LINK_UP;
      l->retry_ms = LINK_RETRY_FIRST_MS;
      l->fails = 0;
      l->fails_max = FAILS_IN_A_ROW;
    } else if (ev == ZMQ_EVENT_DISCONNECTED) {
      mask |= WK_LINK_LOST;
    } else if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH || ev == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
      mask |= WK_LINK_REFUSED | WK_LINK_LOST;
      if (l->due_us != INT64_MAX) continue; /* one backoff for a burst */
      sl_warn(TOPIC, "the gateway %s the %s connection%s; connecting again in %lld s",
              ev == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH ? "refused" : "broke off the handshake of", l->name,
              ev == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH ? " (it does not know this instance's key)" : "",
              (long long)(l->retry_ms / 1000));
      back_off(l);
    } else if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
      if (++l->fails < l->fails_max || l->due_us != INT64_MAX) continue;
      mask |= WK_LINK_REFUSED;
      if (l->fails_max == FAILS_IN_A_ROW) /* once until a handshake succeeds */
        sl_warn(TOPIC, "%d handshakes in a row with the gateway failed on the %s connection (is it the "
                "gateway whose key this worker was given?); trying again after 1 s, 2, 4 ... %d s",
                l->fails, l->name, LINK_RETRY_MAX_MS / 1000);
      l->fails_max = 1;
      back_off(l);
    }
  }
  return mask;
}

int wk_link_tick(struct wk_link *l, int64_t now) {
  if (now < l->due_us) return 0;
  int r = 0;
  if (l->connected) { /* back_off could not make the new socket */
    r = open_socket(l, true);
  } else if (zmq_connect(l->sock, l->cfg->gateway) < 0) {
    r = sl_err_from_zmq(zmq_errno());
    sl_err(TOPIC, "%s connection: connect %s: %s", l->name, l->cfg->gateway, zmq_strerror(zmq_errno()));
  } else {
    l->connected = true;
  }
  if (r < 0) {
    back_off(l);
    return r;
  }
  l->due_us = INT64_MAX;
  sl_debug(TOPIC, "%s connection opened again", l->name);
  return 1;
}
