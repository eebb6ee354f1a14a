/* The one ZeroMQ loop of spotlab-kernel.
 *
 * Threads: this loop, libzmq's I/O thread (which owns every connection), and
 * a heartbeat thread that echoes on its own ROUTER socket so a busy loop
 * never looks dead to the front end. Signals reach the loop through a
 * self-pipe (SIGINT interrupts, SIGTERM stops). Each zmq_poll round drains
 * control first, then stdin, then a bounded number of gateway messages, then
 * one shell request, so an interrupt or a shutdown is never stuck behind
 * queued cells.
 *
 * A request is received frame by frame into zmq_msg_t parts and decoded
 * straight from libzmq's buffers (the parts are closed once decoded); replies
 * are handed to zmq_send frame by frame from their parts. libzmq serves any
 * number of connections per socket: only the process's descriptor limit
 * bounds the front ends (main() raises it).
 *
 * Limits on what a request may hold are the kernel's, checked here and in
 * jk_wire_decode(), so that an authentic request over one is answered with an
 * error: at most LIMIT_FRAMES frames are kept (the rest are read off and
 * counted), and a request with a frame over LIMIT_FRAME_BYTES or more than
 * LIMIT_TOTAL_BYTES in all is refused with nothing but its header parsed.
 * Only a frame over WIRE_MAX_FRAME_BYTES, which libzmq will not even read (it
 * closes that connection), goes unanswered.
 *
 * IOPub is an XPUB socket, so the loop sees front ends subscribe. A front
 * end connects its sockets when it starts, often before the kernel has bound
 * them, and libzmq connects each again on its own timer: its first request
 * can reach shell before its IOPub subscription exists, and then the status
 * and outputs of that request are published to nobody. A front end that
 * waits for the request's idle status (jupyter console does) waits forever.
 * So while IOPub has no subscriber, shell requests wait up to
 * IOPUB_WAIT_MS for one; a front end that never subscribes pays that wait
 * once, not on every request.
 *
 * An input_request goes to the front end's stdin connection, which, like
 * its IOPub one, may come up after its first requests: stdin is a ROUTER
 * that refuses a message for a peer it does not know (ZMQ_ROUTER_MANDATORY),
 * and the refused input_request is sent again every STDIN_RETRY_MS while
 * the cell still waits for it. Without that it went nowhere and the cell
 * waited until it was interrupted.
 *
 * The gateway socket (a DEALER, protocols.md §1) exists only while the
 * core's gateway client has it open; libzmq connects it in the background
 * and again whenever the connection drops, and requests sent meanwhile wait
 * in its queue. */
#include "channels.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "core.h"
#include "sl_err.h"
#include "sl_frame.h"
#include "sl_log.h"
#include "sl_sigpipe.h"
#include "sl_time.h"
#include "wire.h"

/* Routing ids included: 250 buffers and more fit, with room for several ids. */
#define LIMIT_FRAMES 1024
#define LIMIT_FRAME_BYTES (16u << 20)
#define LIMIT_TOTAL_BYTES (32u << 20)
#define LIMIT_JSON_DEPTH 64
/* The largest frame libzmq reads at all (ZMQ_MAXMSGSIZE): one past it closes
 * the connection unread. Below it, a frame over the kernel's limits is read
 * and answered with an error. */
#define WIRE_MAX_FRAME_BYTES (256 << 20)
#define SMALL_FRAME_BYTES (64 << 10) /* iopub and heartbeat: subscriptions and pings */
#define LINGER_MS 1000 /* how long replies may take to leave at shutdown */
/* The kernel's own sockets, not connections: five channels and the gateway's,
 * with room for gateway sockets still being closed. */
#define MAX_SOCKETS 32
#define GW_LIMIT_FRAMES 8
#define GW_LIMIT_FRAME_BYTES (1 << 20)
#define GW_SNDHWM 1000 /* requests waiting for the gateway connection */
#define GW_MAX_PER_ROUND 256 /* gateway messages handled before the other sockets get a turn */
#define IOPUB_WAIT_MS 2000 /* how long shell requests wait for a first IOPub subscriber */
#define STDIN_RETRY_MS 20 /* an input_request whose front end's stdin is not connected yet */

struct loop {
  void *ctx;
  void *sock[JK_CH_COUNT]; /* the heartbeat's is owned by its thread once it runs */
  void *gw;                /* the gateway DEALER, or NULL */
  struct jk_auth *auth;
  struct jk_core *core;
  bool stop;
  /* The process that started the kernel, watched when it asked for that
   * (JPY_PARENT_PID, as jupyter_client sets it for a kernel it owns): a
   * kernel whose front end died without shutting it down ends too. */
  pid_t parent;
  /* IOPub's subscriptions now (each front end's SUB makes one), and while
   * there are none, until when shell requests wait for one (0: none has
   * waited yet; in the past: one waited, shell is served meanwhile). */
  long iopub_subs;
  int64_t iopub_wait_until_us;
  bool logged_hmac, logged_replay, logged_limit;
  /* An input_request the stdin ROUTER refused (its front end's stdin not
   * connected yet), sent again at stdin_retry_us while the cell waits. */
  struct jk_msg *stdin_held;
  int64_t stdin_retry_us;
  /* What the core sent during this round, sent together when the round ends:
   * libzmq's I/O thread then wakes once for a request's status, input echo,
   * reply and idle, not once for each. */
  struct outgoing {
    enum jk_channel ch;
    struct jk_msg *msg;
  } *out;
  size_t n_out, cap_out;
  /* The request being received: its parts, and views of them for decoding. */
  zmq_msg_t part[LIMIT_FRAMES];
  struct sl_frame view[LIMIT_FRAMES];
};

static const char *const channel_name[JK_CH_COUNT] = {
  [JK_CH_SHELL] = "shell", [JK_CH_CONTROL] = "control", [JK_CH_STDIN] = "stdin",
  [JK_CH_IOPUB] = "iopub", [JK_CH_HB] = "heartbeat",
};

/* Echoes every message, routing id included, to the peer that sent it (a
 * REQ's envelope or a DEALER's bare ping alike), until the context ends. */
static void *heartbeat(void *sock) {
  for (;;) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, sock, 0) < 0) {
      zmq_msg_close(&m);
      if (zmq_errno() == EINTR)
        continue;
      break; /* ETERM: the context is shutting down */
    }
    if (zmq_msg_send(&m, sock, zmq_msg_more(&m) ? ZMQ_SNDMORE : 0) < 0)
      zmq_msg_close(&m);
  }
  zmq_close(sock);
  return NULL;
}

/* ---- core callbacks ---------------------------------------------------- */

static int send_frame(void *sock, const void *data, size_t len, bool more) {
  if (zmq_send(sock, data, len, more ? ZMQ_SNDMORE : 0) < 0)
    return sl_err_from_zmq(zmq_errno());
  return 0;
}

/* stdin's frames: never blocking (a ROUTER_MANDATORY socket would block
 * on a full pipe); the first one fails with -EHOSTUNREACH when the
 * routing id is not a connected peer, and then nothing was sent. */
static int send_stdin_frame(void *sock, const void *data, size_t len, bool more) {
  if (zmq_send(sock, data, len, ZMQ_DONTWAIT | (more ? ZMQ_SNDMORE : 0)) < 0)
    return sl_err_from_zmq(zmq_errno());
  return 0;
}

/* Sends msg on stdin, or holds it while the peer is not connected (one
 * held at most: a cell waits for one input at a time). */
static void send_stdin(struct loop *l, struct jk_msg *msg) {
  int r = jk_wire_encode_each(l->auth, msg, send_stdin_frame, l->sock[JK_CH_STDIN]);
  if (r == -EHOSTUNREACH) {
    if (!l->stdin_held)
      sl_debug("kernel.wire", "input_request held until the front end's stdin connects");
    jk_msg_free(l->stdin_held);
    l->stdin_held = msg;
    l->stdin_retry_us = sl_time_mono_us() + (int64_t)STDIN_RETRY_MS * SL_US_PER_MS;
    return;
  }
  if (r < 0)
    sl_warn("kernel.wire", "cannot send a message on the stdin channel: %s", sl_strerror(r));
  jk_msg_free(msg);
}

/* The held input_request: sent again when its time has come, dropped once
 * its cell no longer waits (interrupted, or answered another way). */
static void retry_stdin(struct loop *l) {
  if (!l->stdin_held)
    return;
  if (!jk_core_awaits_input(l->core)) {
    l->stdin_held = jk_msg_free(l->stdin_held);
    return;
  }
  if (sl_time_mono_us() < l->stdin_retry_us)
    return;
  struct jk_msg *m = l->stdin_held;
  l->stdin_held = NULL;
  send_stdin(l, m);
}

static void send_now(struct loop *l, enum jk_channel ch, struct jk_msg *msg) {
  void *s = l->sock[ch];
  if (ch == JK_CH_STDIN && s) {
    send_stdin(l, msg);
    return;
  }
  int r = s ? jk_wire_encode_each(l->auth, msg, send_frame, s) : -ENOTCONN;
  if (r < 0)
    sl_warn("kernel.wire", "cannot send a message on the %s channel: %s", channel_name[ch], sl_strerror(r));
  jk_msg_free(msg);
}

/* Sends what the round queued, in the order the core sent it. */
static void flush_out(struct loop *l) {
  for (size_t i = 0; i < l->n_out; i++)
    send_now(l, l->out[i].ch, l->out[i].msg);
  l->n_out = 0;
}

static void send_msg(void *ud, enum jk_channel ch, struct jk_msg *msg) {
  struct loop *l = ud;
  if (l->n_out == l->cap_out) {
    size_t cap = l->cap_out ? 2 * l->cap_out : 16;
    struct outgoing *o = realloc(l->out, cap * sizeof *o);
    if (!o) { /* no room to wait: what is queued leaves first, then this */
      flush_out(l);
      send_now(l, ch, msg);
      return;
    }
    l->out = o;
    l->cap_out = cap;
  }
  l->out[l->n_out++] = (struct outgoing){ch, msg};
}

static bool receive_one(struct loop *l, enum jk_channel ch);

static void drain_shell(void *ud) {
  struct loop *l = ud;
  while (receive_one(l, JK_CH_SHELL))
    ;
}

static void request_shutdown(void *ud, bool restart) {
  struct loop *l = ud;
  sl_info("kernel", "shutdown requested%s", restart ? " (restart)" : "");
  l->stop = true;
}

static void gw_close(void *ud) {
  struct loop *l = ud;
  if (l->gw)
    zmq_close(l->gw);
  l->gw = NULL;
}

static int gw_open(void *ud, const char *address) {
  struct loop *l = ud;
  gw_close(l);
  void *s = zmq_socket(l->ctx, ZMQ_DEALER);
  if (!s)
    return sl_err_from_zmq(zmq_errno());
  int linger = 0, hwm = GW_SNDHWM;
  int64_t maxmsg = GW_LIMIT_FRAME_BYTES;
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
  zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
  if (zmq_connect(s, address) < 0) {
    int r = sl_err_from_zmq(zmq_errno());
    zmq_close(s);
    return r;
  }
  l->gw = s;
  return 0;
}

static int gw_send_flags(struct loop *l, const char *data, size_t len, int flags) {
  if (!l->gw)
    return -ENOTCONN;
  if (zmq_send(l->gw, data, len, ZMQ_DONTWAIT | flags) < 0)
    return sl_err_from_zmq(zmq_errno());
  return 0;
}

static int gw_send(void *ud, const char *data, size_t len) {
  return gw_send_flags(ud, data, len, 0);
}

/* A frame that more of the same message follow: once libzmq took it, it
 * takes the rest too (a message is queued whole or not at all). */
static int gw_send_more(void *ud, const char *data, size_t len) {
  return gw_send_flags(ud, data, len, ZMQ_SNDMORE);
}

/* Hands one gateway message to the core, straight from libzmq's buffer;
 * false when none was waiting. */
static bool receive_gateway(struct loop *l) {
  if (!l->gw)
    return false;
  zmq_msg_t last;
  zmq_msg_init(&last);
  size_t n = 0;
  int more = 1;
  while (more) {
    zmq_msg_close(&last); /* all but the last frame are envelope */
    zmq_msg_init(&last);
    if (zmq_msg_recv(&last, l->gw, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
      zmq_msg_close(&last);
      return false; /* EAGAIN; never mid-message, as delivery is atomic */
    }
    more = zmq_msg_more(&last);
    n++;
  }
  if (n > GW_LIMIT_FRAMES)
    sl_warn("kernel.gateway", "dropped a gateway message of %zu frames (limit %d)", n, GW_LIMIT_FRAMES);
  else
    /* The JSON object is the last frame; anything before it is envelope. */
    jk_core_gateway_input(l->core, zmq_msg_data(&last), zmq_msg_size(&last));
  zmq_msg_close(&last);
  return true;
}

static const struct jk_core_ops core_ops = {
  .send = send_msg,
  .drain_shell = drain_shell,
  .shutdown = request_shutdown,
};

static const struct jk_core_gw_ops core_gw_ops = {gw_open, gw_close, gw_send, gw_send_more};

/* ---- receiving ---------------------------------------------------------- */

static void log_drop(struct loop *l, bool *once, const char *what, const char *detail) {
  if (!*once) {
    sl_warn("kernel.wire", "dropped a message: %s (%s); further ones are logged under SPOTLAB_DEBUG=kernel.wire",
            what, detail);
    *once = true;
  } else {
    sl_debug("kernel.wire", "dropped a message: %s (%s)", what, detail);
  }
}

/* Reads one whole message off s into l->part: *ret_kept parts (at most
 * LIMIT_FRAMES, each to be closed by the caller) and *ret_dropped frames past
 * that, read and let go. 0, or negative (-EAGAIN: none waiting). */
static int receive_parts(struct loop *l, void *s, size_t *ret_kept, size_t *ret_dropped) {
  size_t kept = 0, dropped = 0;
  int more = 1;
  while (more) {
    zmq_msg_t spare, *p = kept < LIMIT_FRAMES ? &l->part[kept] : &spare;
    zmq_msg_init(p);
    if (zmq_msg_recv(p, s, kept == 0 ? ZMQ_DONTWAIT : 0) < 0) {
      /* Delivery is atomic: this only happens before the first frame. */
      int e = zmq_errno();
      zmq_msg_close(p);
      for (size_t i = 0; i < kept; i++)
        zmq_msg_close(&l->part[i]);
      return sl_err_from_zmq(e);
    }
    more = zmq_msg_more(p);
    if (p == &spare) {
      zmq_msg_close(p);
      dropped++;
    } else {
      kept++;
    }
  }
  *ret_kept = kept;
  *ret_dropped = dropped;
  return 0;
}

/* Receives and handles one message from ch; false when none was waiting. */
static bool receive_one(struct loop *l, enum jk_channel ch) {
  size_t kept = 0, dropped = 0;
  int r = receive_parts(l, l->sock[ch], &kept, &dropped);
  if (r < 0) {
    if (r != -EAGAIN && r != -EINTR && r != -ETERM)
      sl_warn("kernel.wire", "receive failed on the %s channel: %s", channel_name[ch], sl_strerror(r));
    return false;
  }
  for (size_t i = 0; i < kept; i++)
    l->view[i] = (struct sl_frame){zmq_msg_data(&l->part[i]), zmq_msg_size(&l->part[i])};
  /* A view, not a copy: jk_wire_decode() checks the frames against these. */
  struct sl_msg frames = {
    .frames = l->view, .n = kept, .cap = kept,
    .limits = {LIMIT_FRAMES, LIMIT_FRAME_BYTES, LIMIT_TOTAL_BYTES},
  };
  struct jk_msg *msg = NULL;
  struct jk_wire_limits limits = {LIMIT_JSON_DEPTH};
  char why[256] = "";
  r = jk_wire_decode(l->auth, &frames, &limits, &msg, why, sizeof why);
  for (size_t i = 0; i < kept; i++)
    zmq_msg_close(&l->part[i]);
  if (r == SL_EHMAC) {
    log_drop(l, &l->logged_hmac, "bad signature", why);
  } else if (r == SL_EREPLAY) {
    log_drop(l, &l->logged_replay, "replayed", why);
  } else if (r < 0 && !msg) {
    log_drop(l, &l->logged_limit, "malformed or over a limit", why);
  } else if (r < 0 || dropped) {
    char reason[320];
    if (dropped)
      snprintf(reason, sizeof reason, "message has more than %d frames (%zu over)", LIMIT_FRAMES, dropped);
    else
      snprintf(reason, sizeof reason, "message refused: %s", why);
    log_drop(l, &l->logged_limit, "refused", reason);
    jk_core_reject(l->core, ch, msg, reason);
  } else {
    jk_core_handle(l->core, ch, msg);
  }
  return true;
}

/* ---- set-up ------------------------------------------------------------- */

static int open_socket(struct loop *l, const struct jk_connection *conn, enum jk_channel ch) {
  static const int types[JK_CH_COUNT] = {
    [JK_CH_SHELL] = ZMQ_ROUTER, [JK_CH_CONTROL] = ZMQ_ROUTER, [JK_CH_STDIN] = ZMQ_ROUTER,
    [JK_CH_IOPUB] = ZMQ_XPUB, [JK_CH_HB] = ZMQ_ROUTER,
  };
  void *s = zmq_socket(l->ctx, types[ch]);
  if (!s)
    return sl_err_from_zmq(zmq_errno());
  int linger = LINGER_MS, one = 1;
  int64_t maxmsg = ch == JK_CH_IOPUB || ch == JK_CH_HB ? SMALL_FRAME_BYTES : WIRE_MAX_FRAME_BYTES;
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
  /* A front end that reconnects under its old identity takes it over. */
  if (types[ch] == ZMQ_ROUTER && ch != JK_CH_HB)
    zmq_setsockopt(s, ZMQ_ROUTER_HANDOVER, &one, sizeof one);
  /* an input_request for a front end not connected yet is refused, and held */
  if (ch == JK_CH_STDIN)
    zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
  /* every front end's subscription and unsubscription, its own ones too */
  if (types[ch] == ZMQ_XPUB)
    zmq_setsockopt(s, ZMQ_XPUB_VERBOSER, &one, sizeof one);
  char ep[300];
  int r = jk_connection_endpoint(conn, ch, ep, sizeof ep);
  if (r == 0 && zmq_bind(s, ep) < 0) {
    r = sl_err_from_zmq(zmq_errno());
    sl_err("kernel", "cannot bind %s: %s", ep, zmq_strerror(zmq_errno()));
  }
  if (r < 0) {
    zmq_close(s);
    return r;
  }
  l->sock[ch] = s;
  return 0;
}

/* Shortens the zmq_poll() timeout *timeout (ms, -1 for none) so that the
 * poll returns by at_us (monotonic; INT64_MAX: no deadline), rounded up. */
static void wake_by(long *timeout, int64_t at_us) {
  if (at_us == INT64_MAX)
    return;
  int64_t left = at_us - sl_time_mono_us();
  int64_t ms = left <= 0 ? 0 : (left + SL_US_PER_MS - 1) / SL_US_PER_MS;
  if (ms > LONG_MAX)
    ms = LONG_MAX;
  if (*timeout < 0 || *timeout > ms)
    *timeout = (long)ms;
}

#define PARENT_CHECK_MS 1000 /* how often a watched parent is looked for */

/* The parent to watch: the kernel's parent process when JPY_PARENT_PID asks
 * for a watch, else 0. */
static pid_t parent_to_watch(void) {
  const char *v = getenv("JPY_PARENT_PID");
  char *end;
  long asked = v ? strtol(v, &end, 10) : 0;
  if (!v || end == v || *end || asked <= 0)
    return 0;
  return getppid();
}

/* Whether the watched parent is gone: the kernel was handed to another
 * process (init or a subreaper), or was already when it started. */
static bool parent_gone(const struct loop *l) {
  return l->parent && (getppid() != l->parent || l->parent == 1);
}

static void read_signals(struct loop *l) {
  int sig;
  while ((sig = sl_sigpipe_next()) > 0) {
    if (sig == SIGINT) {
      sl_info("kernel", "SIGINT: interrupting");
      jk_core_interrupt(l->core);
    } else {
      sl_info("kernel", "signal %d: shutting down", sig);
      l->stop = true;
    }
  }
}

/* Reads what IOPub's front ends sent: subscriptions (a first byte of 1) and
 * unsubscriptions (0), one each per front end's SUB. */
static void read_subscriptions(struct loop *l) {
  for (;;) {
    unsigned char b[1];
    int n = zmq_recv(l->sock[JK_CH_IOPUB], b, sizeof b, ZMQ_DONTWAIT);
    if (n < 0)
      return;
    if (n >= 1 && b[0] == 1)
      l->iopub_subs++;
    else if (n >= 1 && b[0] == 0 && l->iopub_subs > 0)
      l->iopub_subs--;
  }
}

/* Whether shell is polled this round (else *timeout is cut to the wait
 * left): while IOPub has no subscriber, a request that arrives waits up to
 * IOPUB_WAIT_MS for one (held_for_iopub starts the wait), once; after a
 * subscriber came, the next time there is none a request waits again. */
static bool shell_open(struct loop *l, long *timeout) {
  if (l->iopub_subs > 0)
    l->iopub_wait_until_us = 0;
  if (l->iopub_wait_until_us == 0)
    return true;
  if (l->iopub_wait_until_us <= sl_time_mono_us())
    return true;
  wake_by(timeout, l->iopub_wait_until_us);
  return false;
}

/* A shell request is waiting: whether it waits for an IOPub subscriber
 * first (and from when). */
static bool held_for_iopub(struct loop *l) {
  if (l->iopub_subs > 0 || l->iopub_wait_until_us != 0)
    return false;
  l->iopub_wait_until_us = sl_time_mono_us() + (int64_t)IOPUB_WAIT_MS * SL_US_PER_MS;
  return true;
}

enum { P_SIGNAL, P_CONTROL, P_STDIN, P_IOPUB, P_SHELL, P_GATEWAY, P_COUNT };

/* One zmq_poll over the signal pipe, control, stdin, IOPub's subscriptions,
 * shell and the gateway; then control and stdin drained, the subscriptions
 * counted, a bounded number of gateway messages, one shell request
 * (answering it is the round's work; the next poll returns at once if more
 * are queued), and the core's timers. Shell is left out of the poll while
 * its requests wait for an IOPub subscriber (shell_open). The gateway socket
 * may be opened or closed by the core, so it is looked up again every
 * round. */
static void serve(struct loop *l) {
  while (!l->stop) {
    long timeout = -1;
    wake_by(&timeout, jk_core_wake_at_us(l->core));
    if (l->parent && (timeout < 0 || timeout > PARENT_CHECK_MS))
      timeout = PARENT_CHECK_MS;
    bool shell = shell_open(l, &timeout);
    if (l->stdin_held)
      wake_by(&timeout, l->stdin_retry_us);
    zmq_pollitem_t items[P_COUNT] = {
      [P_SIGNAL] = {NULL, sl_sigpipe_fd(), ZMQ_POLLIN, 0},
      [P_CONTROL] = {l->sock[JK_CH_CONTROL], 0, ZMQ_POLLIN, 0},
      [P_STDIN] = {l->sock[JK_CH_STDIN], 0, ZMQ_POLLIN, 0},
      [P_IOPUB] = {l->sock[JK_CH_IOPUB], 0, ZMQ_POLLIN, 0},
      [P_SHELL] = {l->sock[JK_CH_SHELL], 0, shell ? ZMQ_POLLIN : 0, 0},
      [P_GATEWAY] = {l->gw, 0, ZMQ_POLLIN, 0},
    };
    int n = zmq_poll(items, l->gw ? P_COUNT : P_GATEWAY, timeout);
    if (n < 0 && zmq_errno() != EINTR) {
      sl_err("kernel", "poll failed: %s", zmq_strerror(zmq_errno()));
      break;
    }
    if (n > 0 && (items[P_SIGNAL].revents & ZMQ_POLLIN))
      read_signals(l);
    if (n > 0 && (items[P_CONTROL].revents & ZMQ_POLLIN))
      while (!l->stop && receive_one(l, JK_CH_CONTROL))
        ;
    if (n > 0 && (items[P_STDIN].revents & ZMQ_POLLIN))
      while (!l->stop && receive_one(l, JK_CH_STDIN))
        ;
    if (n > 0 && (items[P_IOPUB].revents & ZMQ_POLLIN))
      read_subscriptions(l);
    if (n > 0 && l->gw && (items[P_GATEWAY].revents & ZMQ_POLLIN))
      for (int i = 0; i < GW_MAX_PER_ROUND && !l->stop && receive_gateway(l); i++)
        ;
    if (n > 0 && !l->stop && shell && (items[P_SHELL].revents & ZMQ_POLLIN) &&
        !held_for_iopub(l))
      receive_one(l, JK_CH_SHELL);
    if (!l->stop)
      jk_core_tick(l->core);
    flush_out(l);
    retry_stdin(l);
    if (!l->stop && parent_gone(l)) {
      sl_warn("kernel", "the process that started the kernel (pid %d) has exited: shutting down",
              (int)l->parent);
      l->stop = true;
    }
  }
}

int jk_channels_run(const struct jk_connection *conn, const struct jk_run_options *opts) {
  struct loop *l = calloc(1, sizeof *l);
  pthread_t hb_thread;
  bool hb_started = false;
  int r = 0;
  if (!l)
    return -ENOMEM;
  /* SIGINT interrupts, SIGTERM stops; a log line a signal comes in is written whole */
  if ((r = sl_sigpipe_catch(SIGINT, NULL)) < 0 || (r = sl_sigpipe_catch(SIGTERM, NULL)) < 0) {
    free(l);
    return r;
  }
  signal(SIGPIPE, SIG_IGN);

  l->ctx = zmq_ctx_new();
  if (l->ctx)
    zmq_ctx_set(l->ctx, ZMQ_MAX_SOCKETS, MAX_SOCKETS);
  l->auth = jk_auth_new(conn->key, conn->key_len, 4096);
  struct jk_core_config cfg = {opts->kernel_id, opts->notebook, opts->history_dir, opts->follows,
                               opts->server_file, opts->server_named};
  l->core = jk_core_new(&core_ops, l, &cfg);
  if (!l->ctx || !l->auth || !l->core || jk_core_set_gateway(l->core, &core_gw_ops) < 0) {
    r = -ENOMEM;
    goto out;
  }
  for (int ch = 0; ch < JK_CH_COUNT; ch++) {
    r = open_socket(l, conn, (enum jk_channel)ch);
    if (r < 0)
      goto out;
  }
  void *hb = l->sock[JK_CH_HB];
  l->sock[JK_CH_HB] = NULL; /* owned by the heartbeat thread from here on */
  if (pthread_create(&hb_thread, NULL, heartbeat, hb) != 0) {
    zmq_close(hb);
    r = -EAGAIN;
    goto out;
  }
  hb_started = true;
  l->parent = parent_to_watch();
  sl_info("kernel", "listening (%s on %s), kernel id %s", conn->transport, conn->ip, opts->kernel_id);
  serve(l);
out:
  jk_core_free(l->core); /* closes the gateway socket through gw_close */
  l->core = NULL;
  flush_out(l);
  free(l->out);
  jk_msg_free(l->stdin_held);
  gw_close(l);
  /* Closed sockets keep LINGER_MS for what is still queued (shutdown_reply
   * above all); zmq_ctx_term() waits for that. */
  for (int ch = 0; ch < JK_CH_COUNT; ch++)
    if (l->sock[ch])
      zmq_close(l->sock[ch]);
  if (l->ctx)
    zmq_ctx_shutdown(l->ctx); /* ends the heartbeat's receive with ETERM */
  if (hb_started)
    pthread_join(hb_thread, NULL);
  if (l->ctx)
    sl_zmq_ctx_term(l->ctx);
  jk_auth_free(l->auth);
  free(l);
  return r;
}
