/* The one ZeroMQ loop of spotlab-kernel.
 *
 * Threads: this loop, and a heartbeat thread that echoes on its own REP
 * socket so a busy loop never looks dead to the front end. Signals reach the
 * loop through a self-pipe (SIGINT interrupts, SIGTERM stops). Each poll
 * round drains control first, then stdin, then the gateway socket, then
 * shell, so an interrupt or a shutdown is never stuck behind queued cells.
 * The gateway socket (a DEALER, protocols.md §1) exists only while the core's
 * gateway client has it open; nothing here waits on it.
 *
 * The loop polls the sockets' ZMQ_FD descriptors itself rather than calling
 * zmq_poll(), which asks every socket for ZMQ_EVENTS (two system calls each)
 * before and after every wait. A ZeroMQ descriptor turns readable only when
 * something new reaches its socket, and any use of the socket may consume
 * that signal; so a socket is asked for ZMQ_EVENTS when its descriptor fired
 * and when the loop used it (received from it, sent on it) since it was last
 * asked. A socket nobody touched, such as control or stdin while cells run,
 * costs nothing until its descriptor fires. */
#include "channels.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
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
#include "sl_time.h"
#include "wire.h"

#define LIMIT_FRAMES 256
#define LIMIT_FRAME_BYTES (16u << 20)
#define LIMIT_TOTAL_BYTES (32u << 20)
#define LIMIT_JSON_DEPTH 64
#define GW_LIMIT_FRAMES 8
#define GW_LIMIT_FRAME_BYTES (1u << 20)
#define GW_MAX_PER_ROUND 256 /* gateway messages handled before the other sockets get a turn */

/* The sockets the loop reads, in the order a round serves them. */
enum input_id { IN_CONTROL, IN_STDIN, IN_GATEWAY, IN_SHELL, IN_COUNT };

struct input {
  void *sock;  /* NULL: not open (the gateway) */
  int fd;      /* its ZMQ_FD */
  bool ask;    /* used since ZMQ_EVENTS was last asked: ask before waiting */
  bool ready;  /* a message may be waiting */
};

struct loop {
  void *ctx;
  void *sock[JK_CH_COUNT];
  struct input in[IN_COUNT];
  struct jk_auth *auth;
  struct jk_core *core;
  void *gw;                   /* the gateway DEALER, or NULL (in[IN_GATEWAY].sock) */
  bool stop;
  bool logged_hmac, logged_replay, logged_limit;
};

static const char *const channel_name[JK_CH_COUNT] = {
  [JK_CH_SHELL] = "shell", [JK_CH_CONTROL] = "control", [JK_CH_STDIN] = "stdin",
  [JK_CH_IOPUB] = "iopub", [JK_CH_HB] = "heartbeat",
};

static const enum input_id input_of[JK_CH_COUNT] = {
  [JK_CH_SHELL] = IN_SHELL, [JK_CH_CONTROL] = IN_CONTROL, [JK_CH_STDIN] = IN_STDIN,
  [JK_CH_IOPUB] = IN_COUNT, [JK_CH_HB] = IN_COUNT,
};

/* Whether s has a message waiting; this also takes in the commands that
 * made its descriptor readable. */
static bool has_input(void *s) {
  uint32_t events = 0;
  size_t size = sizeof events;
  return zmq_getsockopt(s, ZMQ_EVENTS, &events, &size) == 0 && (events & ZMQ_POLLIN);
}

static void watch(struct loop *l, enum input_id id, void *s) {
  int fd = -1;
  size_t size = sizeof fd;
  if (s && zmq_getsockopt(s, ZMQ_FD, &fd, &size) < 0)
    fd = -1;
  l->in[id] = (struct input){s, fd, s != NULL, false};
}

static int sig_pipe[2] = {-1, -1};

static void on_signal(int signo) {
  unsigned char b = (unsigned char)signo;
  int saved = errno;
  if (write(sig_pipe[1], &b, 1) < 0) {
    /* Nothing to do: the pipe is full, a signal is already pending. */
  }
  errno = saved;
}

static void *heartbeat(void *arg) {
  void *hb = arg;
  for (;;) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, hb, 0) < 0) {
      zmq_msg_close(&m);
      if (zmq_errno() == EINTR)
        continue;
      break; /* ETERM: the context is shutting down */
    }
    int more = zmq_msg_more(&m);
    if (zmq_msg_send(&m, hb, more ? ZMQ_SNDMORE : 0) < 0)
      zmq_msg_close(&m);
  }
  zmq_close(hb);
  return NULL;
}

/* ---- core callbacks ---------------------------------------------------- */

static int send_frame(void *sock, const void *data, size_t len, bool more) {
  if (zmq_send(sock, data, len, more ? ZMQ_SNDMORE : 0) < 0)
    return sl_err_from_zmq(zmq_errno());
  return 0;
}

static void send_msg(void *ud, enum jk_channel ch, struct jk_msg *msg) {
  struct loop *l = ud;
  int r = jk_wire_encode_each(l->auth, msg, send_frame, l->sock[ch]);
  if (input_of[ch] != IN_COUNT)
    l->in[input_of[ch]].ask = true;
  if (r < 0)
    sl_warn("kernel.wire", "cannot send a message on the %s channel: %s", channel_name[ch], sl_strerror(r));
  jk_msg_free(msg);
}

static bool receive_one(struct loop *l, enum jk_channel ch);

static void drain_shell(void *ud) {
  struct loop *l = ud;
  while (receive_one(l, JK_CH_SHELL))
    ;
  l->in[IN_SHELL].ask = true;
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
  watch(l, IN_GATEWAY, NULL);
}

static int gw_open(void *ud, const char *address) {
  struct loop *l = ud;
  gw_close(l);
  void *s = zmq_socket(l->ctx, ZMQ_DEALER);
  if (!s)
    return sl_err_from_zmq(zmq_errno());
  int linger = 0, hwm = 1000;
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
  watch(l, IN_GATEWAY, s);
  return 0;
}

static int gw_send(void *ud, const char *data, size_t len) {
  struct loop *l = ud;
  if (!l->gw)
    return -ENOTCONN;
  l->in[IN_GATEWAY].ask = true;
  if (zmq_send(l->gw, data, len, ZMQ_DONTWAIT) < 0)
    return sl_err_from_zmq(zmq_errno());
  return 0;
}

/* Hands one gateway message to the core; false when none was waiting. */
static bool receive_gateway(struct loop *l) {
  if (!l->gw)
    return false;
  struct sl_msg frames;
  sl_msg_init(&frames, (struct sl_limits){GW_LIMIT_FRAMES, GW_LIMIT_FRAME_BYTES, GW_LIMIT_FRAMES * GW_LIMIT_FRAME_BYTES});
  int r = sl_zmq_recv(l->gw, &frames, ZMQ_DONTWAIT);
  if (r == -EAGAIN || r == -EINTR || r == -ETERM) {
    sl_msg_done(&frames);
    return false;
  }
  if (r < 0)
    sl_warn("kernel.gateway", "dropped a gateway message: %s", sl_strerror(r));
  else if (frames.n)
    /* The JSON object is the last frame; anything before it is envelope. */
    jk_core_gateway_input(l->core, (const char *)frames.frames[frames.n - 1].data, frames.frames[frames.n - 1].len);
  sl_msg_done(&frames);
  return true;
}

static const struct jk_core_ops core_ops = {
  .send = send_msg,
  .drain_shell = drain_shell,
  .shutdown = request_shutdown,
};

static const struct jk_core_gw_ops core_gw_ops = {gw_open, gw_close, gw_send};

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

/* Receives and handles one message from ch; false when none was waiting. */
static bool receive_one(struct loop *l, enum jk_channel ch) {
  struct sl_msg frames;
  sl_msg_init(&frames, (struct sl_limits){LIMIT_FRAMES, LIMIT_FRAME_BYTES, LIMIT_TOTAL_BYTES});
  int r = sl_zmq_recv(l->sock[ch], &frames, ZMQ_DONTWAIT);
  if (r == -EAGAIN || r == -EINTR || r == -ETERM)
    return false;
  bool over_limit = r == SL_ELIMIT;
  if (r < 0 && !over_limit) {
    sl_warn("kernel.wire", "receive failed: %s", sl_strerror(r));
    return false;
  }
  char why[256] = "";
  if (over_limit && frames.oversized_frames) {
    snprintf(why, sizeof why, "a frame is larger than %u bytes", LIMIT_FRAME_BYTES);
    log_drop(l, &l->logged_limit, "size limit", why);
    sl_msg_done(&frames);
    return true;
  }
  struct jk_msg *msg = NULL;
  struct jk_wire_limits limits = {LIMIT_JSON_DEPTH};
  r = jk_wire_decode(l->auth, &frames, &limits, &msg, why, sizeof why);
  size_t dropped = frames.dropped_frames;
  sl_msg_done(&frames);
  if (r == SL_EHMAC) {
    log_drop(l, &l->logged_hmac, "bad signature", why);
  } else if (r == SL_EREPLAY) {
    log_drop(l, &l->logged_replay, "replayed", why);
  } else if (r < 0 && !msg) {
    log_drop(l, &l->logged_limit, "malformed", why);
  } else if (r < 0 || over_limit) {
    char reason[320];
    if (over_limit)
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

static int open_socket(struct loop *l, const struct jk_connection *conn, enum jk_channel ch, int type) {
  void *s = zmq_socket(l->ctx, type);
  if (!s)
    return sl_err_from_zmq(zmq_errno());
  int linger = 1000;
  int64_t maxmsg = 256 << 20;
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
  if (type == ZMQ_ROUTER) {
    int handover = 1;
    zmq_setsockopt(s, ZMQ_ROUTER_HANDOVER, &handover, sizeof handover);
  }
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

static int64_t poll_timeout_ms(const struct jk_core *core) {
  int64_t at = jk_core_wake_at_us(core);
  if (at == INT64_MAX)
    return -1;
  int64_t left = at - sl_time_mono_us();
  if (left <= 0)
    return 0;
  return (left + 999) / 1000;
}

static void read_signals(struct loop *l) {
  unsigned char sig;
  while (read(sig_pipe[0], &sig, 1) == 1) {
    if (sig == SIGINT) {
      sl_info("kernel", "SIGINT: interrupting");
      jk_core_interrupt(l->core);
    } else {
      sl_info("kernel", "signal %d: shutting down", sig);
      l->stop = true;
    }
  }
}

/* Hands the messages waiting on input id to the core: every one on control
 * and stdin, a bounded number from the gateway (so it cannot starve the
 * others), and one shell request per round: answering it sends on shell,
 * after which the socket is asked again anyway, so a second receive only to
 * learn that nothing else is queued would be two system calls for nothing. */
static void drain(struct loop *l, enum input_id id) {
  struct input *in = &l->in[id];
  if (!in->sock || !in->ready)
    return;
  if (id == IN_GATEWAY) {
    for (int i = 0; i < GW_MAX_PER_ROUND && !l->stop && receive_gateway(l); i++)
      ;
  } else if (id == IN_SHELL) {
    receive_one(l, JK_CH_SHELL);
  } else {
    while (!l->stop && receive_one(l, id == IN_CONTROL ? JK_CH_CONTROL : JK_CH_STDIN))
      ;
  }
  in->ready = false;
  in->ask = true; /* used: whatever is left shows in ZMQ_EVENTS, not in the descriptor */
}

static void serve(struct loop *l) {
  while (!l->stop) {
    bool waiting = false;
    for (int i = 0; i < IN_COUNT; i++) {
      struct input *in = &l->in[i];
      if (in->sock && in->ask) {
        in->ready = has_input(in->sock);
        in->ask = false;
      }
      waiting |= in->sock && in->ready;
    }
    struct pollfd pfd[IN_COUNT + 1] = {{sig_pipe[0], POLLIN, 0}};
    int slot[IN_COUNT], n = 1;
    for (int i = 0; i < IN_COUNT; i++) {
      slot[i] = l->in[i].sock ? n : -1;
      if (l->in[i].sock)
        pfd[n++] = (struct pollfd){l->in[i].fd, POLLIN, 0};
    }
    int64_t timeout_ms = waiting ? 0 : poll_timeout_ms(l->core);
    int r = poll(pfd, (nfds_t)n, timeout_ms > INT_MAX ? INT_MAX : (int)timeout_ms);
    if (r < 0 && errno != EINTR) {
      sl_err("kernel", "poll failed: %s", strerror(errno));
      break;
    }
    if (r > 0 && (pfd[0].revents & POLLIN))
      read_signals(l);
    /* A receive takes in the socket's commands itself, so a descriptor that
     * fired is not asked first: a wake-up with nothing to read costs one
     * receive that answers EAGAIN, as ZMQ_EVENTS would have. */
    for (int i = 0; r > 0 && i < IN_COUNT; i++)
      if (slot[i] >= 0 && pfd[slot[i]].revents)
        l->in[i].ready = true;
    for (int i = 0; i < IN_COUNT && !l->stop; i++)
      drain(l, (enum input_id)i);
    if (!l->stop)
      jk_core_tick(l->core);
  }
}

int jk_channels_run(const struct jk_connection *conn, const struct jk_run_options *opts) {
  struct loop l = {0};
  pthread_t hb_thread;
  bool hb_started = false;
  int r = 0;
  if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
    return -errno;
  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);

  l.ctx = zmq_ctx_new();
  l.auth = jk_auth_new(conn->key, conn->key_len, 4096);
  struct jk_core_config cfg = {opts->kernel_id, opts->notebook, opts->history_dir};
  l.core = jk_core_new(&core_ops, &l, &cfg);
  if (!l.ctx || !l.auth || !l.core || jk_core_set_gateway(l.core, &core_gw_ops) < 0) {
    r = -ENOMEM;
    goto out;
  }
  static const int types[JK_CH_COUNT] = {
    [JK_CH_SHELL] = ZMQ_ROUTER, [JK_CH_CONTROL] = ZMQ_ROUTER, [JK_CH_STDIN] = ZMQ_ROUTER,
    [JK_CH_IOPUB] = ZMQ_PUB, [JK_CH_HB] = ZMQ_REP,
  };
  for (int ch = 0; ch < JK_CH_COUNT; ch++) {
    r = open_socket(&l, conn, (enum jk_channel)ch, types[ch]);
    if (r < 0)
      goto out;
  }
  watch(&l, IN_CONTROL, l.sock[JK_CH_CONTROL]);
  watch(&l, IN_STDIN, l.sock[JK_CH_STDIN]);
  watch(&l, IN_SHELL, l.sock[JK_CH_SHELL]);
  watch(&l, IN_GATEWAY, l.gw);
  void *hb = l.sock[JK_CH_HB];
  l.sock[JK_CH_HB] = NULL; /* owned by the heartbeat thread from here on */
  if (pthread_create(&hb_thread, NULL, heartbeat, hb) != 0) {
    zmq_close(hb);
    r = -EAGAIN;
    goto out;
  }
  hb_started = true;
  sl_info("kernel", "listening (%s on %s), kernel id %s", conn->transport, conn->ip, opts->kernel_id);
  serve(&l);
out:
  jk_core_free(l.core); /* closes the gateway socket through gw_close */
  l.core = NULL;
  gw_close(&l);
  for (int ch = 0; ch < JK_CH_COUNT; ch++)
    if (l.sock[ch])
      zmq_close(l.sock[ch]);
  if (l.ctx)
    zmq_ctx_shutdown(l.ctx);
  if (hb_started)
    pthread_join(hb_thread, NULL);
  if (l.ctx)
    zmq_ctx_term(l.ctx);
  jk_auth_free(l.auth);
  close(sig_pipe[0]);
  close(sig_pipe[1]);
  return r;
}
