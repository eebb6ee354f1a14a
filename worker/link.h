/* A CURVE DEALER connection to the gateway that comes back after the gateway
 * refused it. libzmq (4.3) gives up on a connection whose handshake the
 * server's ZAP handler refused, or that broke the protocol: no reconnect
 * follows, and what is sent waits for a peer that never comes (a blocking
 * send waits for ever). A gateway refuses a key it does not know; one that
 * starts on other state, or is put right, may know it again. A handshake
 * that fails each time (a gateway with another key) libzmq retries ten
 * times a second for ever. So the link watches its socket's monitor and,
 * after either, replaces the socket at once by one that connects when a
 * backoff is over (LINK_RETRY_FIRST_MS, doubling up to LINK_RETRY_MAX_MS,
 * back to the first after a handshake succeeds). What the old socket held
 * is dropped with it; the callers' protocols already start over after a
 * lost connection. One thread at a time uses a link. */
#ifndef WK_LINK_H
#define WK_LINK_H

#include <stdint.h>

struct wk_config;
struct wk_link;

struct wk_link_opts {
  const char *name;      /* for the monitor's address and the log: "agent", "presign" */
  int sndhwm;            /* 0: libzmq's default */
  int64_t max_msg_bytes; /* largest message accepted from the gateway */
  int heartbeat_ms;      /* ZMTP heartbeats (timeout 5×); 0: none */
};

/* What wk_link_events saw: a mask. */
enum {
  WK_LINK_UP = 1,      /* a handshake succeeded: a gateway is there */
  WK_LINK_LOST = 2,    /* a connection ended: what was in flight may be lost */
  WK_LINK_REFUSED = 4, /* the gateway refused the handshake, or handshakes keep failing: a new
                          socket comes at wk_link_due_us */
};

/* Connects with cfg's keys to cfg's gateway in zctx (both borrowed, cfg for
 * the link's life). */
int wk_link_new(void *zctx, const struct wk_config *cfg, const struct wk_link_opts *opts,
                struct wk_link **ret);
struct wk_link *wk_link_free(struct wk_link *l);

/* The DEALER socket and the PAIR its monitor feeds (to poll for reading);
 * both change in wk_link_events when it backs off, and in wk_link_tick when
 * the one made then could not be. */
void *wk_link_socket(const struct wk_link *l);
void *wk_link_monitor(const struct wk_link *l);

/* Reads the monitor's pending events without waiting; returns their mask. */
int wk_link_events(struct wk_link *l);
/* When a backoff is over (now, monotonic µs): connects the new socket and
 * returns 1; 0 when nothing is due; negative on error (tried again after
 * the next backoff). */
int wk_link_tick(struct wk_link *l, int64_t now);
/* When wk_link_tick has something to do: monotonic µs, INT64_MAX for never. */
int64_t wk_link_due_us(const struct wk_link *l);

#endif
