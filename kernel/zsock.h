/* ZeroMQ sockets served on the caller's own thread: a bound endpoint and the
 * peers that connect to it, speaking ZMTP 3.0 (NULL mechanism) to any libzmq
 * 4.x client (pyzmq, zeromq.js, cppzmq...).
 *
 * The kernel serves its Jupyter channels and talks to the gateway with these
 * instead of libzmq sockets, so that a request is read, handled and answered
 * by one thread, without the hand-offs to and from a background I/O thread
 * that libzmq makes on every message. The caller polls the descriptors that
 * jk_zsock_pollfds() gives, passes the results to jk_zsock_handle(), takes
 * complete messages with jk_zsock_recv(), sends frames with jk_zsock_send()
 * and writes them out with jk_zsock_flush(): output waits in per-peer buffers
 * until then, so several messages to one peer leave in one system call.
 *
 * Semantics follow libzmq's socket types:
 *   ROUTER  incoming messages carry the peer's routing id as their first
 *           frame (its Identity, or a generated one starting with a zero
 *           byte); an outgoing message's first frame names the peer, and a
 *           message for an unknown peer is dropped. A new peer with an
 *           identity already in use takes it over (ZMQ_ROUTER_HANDOVER); the
 *           old connection stays open under a generated id (libzmq closes
 *           it, and a client library reconnecting by itself would then take
 *           the id back and forth).
 *   PUB     incoming subscriptions (a first byte of 1 or 0, then the topic)
 *           are kept per peer; a message goes to every peer with a topic that
 *           prefixes its first frame.
 *   REP     a message is answered to the peer that sent the last one
 *           received; envelopes are left to the caller (a REQ peer's empty
 *           delimiter frame arrives and must be sent back).
 *   DEALER  (jk_zsock_connect only) one connection, made again 100 ms after
 *           it fails or drops; messages sent before its handshake is done
 *           wait and go out in order once it is, and jk_zsock_send refuses
 *           a message (-EAGAIN) when max_out_bytes are already waiting.
 * Output to one peer is capped (max_out_bytes): a message that would start
 * beyond the cap is dropped for that peer, as libzmq drops at its
 * high-water mark. Nothing here blocks except jk_zsock_flush_wait(). */
#ifndef JK_ZSOCK_H
#define JK_ZSOCK_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sl_frame.h"

enum jk_zsock_type { JK_ZSOCK_ROUTER, JK_ZSOCK_PUB, JK_ZSOCK_REP, JK_ZSOCK_DEALER };

struct jk_zsock_options {
  struct sl_limits limits;       /* per incoming message, routing id included */
  size_t max_queued;             /* complete incoming messages held before reading pauses */
  size_t max_out_bytes;          /* output waiting for one peer */
  size_t max_peers;              /* connections past this are closed at once */
  int64_t handshake_timeout_us;  /* a peer that has not finished its handshake by then is closed */
};

#define JK_ZSOCK_OPTIONS_DEFAULT \
  ((struct jk_zsock_options){SL_LIMITS_DEFAULT, 1000, 64u << 20, 256, 30 * 1000000LL})

struct jk_zsock;

/* Binds endpoint ("tcp://HOST:PORT", HOST an address, a name or "*";
 * "ipc://PATH") and returns the socket owned in *ret_sock. opts is copied.
 * Negative errno (-EADDRINUSE, -EINVAL for a malformed endpoint, ...). */
int jk_zsock_bind(const char *endpoint, enum jk_zsock_type type, const struct jk_zsock_options *opts,
                  struct jk_zsock **ret_sock);
/* Connects a DEALER to endpoint (a name is resolved now) and returns it owned
 * in *ret_sock; the connection itself is made in the background, by
 * jk_zsock_handle(), and made again whenever it is lost. */
int jk_zsock_connect(const char *endpoint, enum jk_zsock_type type, const struct jk_zsock_options *opts,
                     struct jk_zsock **ret_sock);
/* Closes the listener and every peer at once, dropping unsent output; an ipc
 * endpoint's file is removed. Returns NULL. */
struct jk_zsock *jk_zsock_free(struct jk_zsock *s);

/* How many pollfd entries jk_zsock_pollfds() may fill. */
size_t jk_zsock_nfds(const struct jk_zsock *s);
/* Fills fds (room for jk_zsock_nfds()) with the descriptors to poll and what
 * for; returns how many. */
size_t jk_zsock_pollfds(struct jk_zsock *s, struct pollfd *fds);
/* Acts on the revents of the n entries jk_zsock_pollfds() filled: accepts,
 * reads, decodes, writes, and closes peers that hung up, broke the protocol
 * or overstayed their handshake (the time is read here). */
void jk_zsock_handle(struct jk_zsock *s, const struct pollfd *fds, size_t n);
/* The monotonic time (µs) by which jk_zsock_handle() must run again even if
 * nothing is readable, or INT64_MAX. */
int64_t jk_zsock_wake_at_us(const struct jk_zsock *s);

/* Whether a complete message is waiting. */
bool jk_zsock_has_msg(const struct jk_zsock *s);
/* Moves the oldest complete message into *ret (overwritten, owned by the
 * caller afterwards). 0; SL_ELIMIT when frames past the limits were dropped
 * (the kept ones are in *ret, with dropped_frames/oversized_frames counted,
 * as sl_zmq_recv() reports them); -EAGAIN when none is waiting. */
int jk_zsock_recv(struct jk_zsock *s, struct sl_msg *ret);

/* Queues one frame of an outgoing message; more as ZMQ_SNDMORE. data is
 * copied. Returns 0 (a message nobody will receive is dropped, as libzmq
 * does), -EAGAIN (a DEALER's first frame, when full), or -ENOMEM. */
int jk_zsock_send(struct jk_zsock *s, const void *data, size_t len, bool more);
/* Writes as much waiting output as the peers take without blocking. */
void jk_zsock_flush(struct jk_zsock *s);
/* Writes waiting output until it is all gone or deadline_us (monotonic)
 * passes; 0, or -ETIMEDOUT with output left. */
int jk_zsock_flush_wait(struct jk_zsock *s, int64_t deadline_us);
/* Number of peers that finished their handshake. */
size_t jk_zsock_peers(const struct jk_zsock *s);

#endif
