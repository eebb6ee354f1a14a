/* The one socket loop of spotlab-kernel.
 *
 * Threads: this loop, and a heartbeat thread that echoes on its own socket
 * so a busy loop never looks dead to the front end. Signals reach the loop
 * through a self-pipe (SIGINT interrupts, SIGTERM stops). Each poll round
 * drains control first, then stdin, then the gateway socket, then one shell
 * request, so an interrupt or a shutdown is never stuck behind queued cells.
 *
 * The Jupyter channels are served by zsock.c on this thread: a request is
 * read, handled and answered here, with no hand-off to a background I/O
 * thread. Output is written when the loop moves on to another channel and at
 * the end of every round, so the messages of one request that go to one
 * channel leave together (busy and execute_input in one write, the reply in
 * the next, idle after it), in the order they were sent.
 *
 * The gateway socket (a DEALER, protocols.md §1) is a zsock too, open only
 * while the core's gateway client has it open; it connects in the
 * background and again whenever the connection drops, and requests sent
 * meanwhile wait for the connection. No libzmq socket or thread is
 * involved anywhere in the kernel. */
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

#include "core.h"
#include "sl_err.h"
#include "sl_frame.h"
#include "sl_log.h"
#include "sl_time.h"
#include "wire.h"
#include "zsock.h"

#define LIMIT_FRAMES 256
#define LIMIT_FRAME_BYTES (16u << 20)
#define LIMIT_TOTAL_BYTES (32u << 20)
#define LIMIT_JSON_DEPTH 64
#define LIMIT_QUEUED 1000 /* complete requests read ahead on one channel */
#define LINGER_US (1000 * 1000LL) /* how long replies may take to leave at shutdown */
#define GW_LIMIT_FRAMES 8
#define GW_LIMIT_FRAME_BYTES (1u << 20)
#define GW_LIMIT_OUT_BYTES (8u << 20) /* requests waiting for the gateway connection */
#define GW_MAX_PER_ROUND 256 /* gateway messages handled before the other sockets get a turn */

struct loop {
  struct jk_zsock *zs[JK_CH_COUNT]; /* every channel but the heartbeat's */
  struct jk_zsock *gw;             /* the gateway DEALER, or NULL */
  struct jk_zsock *last_sent;      /* written out when another channel is sent on */
  struct pollfd *pfd;
  size_t pfd_cap;
  struct jk_auth *auth;
  struct jk_core *core;
  bool stop;
  bool logged_hmac, logged_replay, logged_limit;
};

static const char *const channel_name[JK_CH_COUNT] = {
  [JK_CH_SHELL] = "shell", [JK_CH_CONTROL] = "control", [JK_CH_STDIN] = "stdin",
  [JK_CH_IOPUB] = "iopub", [JK_CH_HB] = "heartbeat",
};

static int sig_pipe[2] = {-1, -1};

static void on_signal(int signo) {
  unsigned char b = (unsigned char)signo;
  int saved = errno;
  if (write(sig_pipe[1], &b, 1) < 0) {
    /* Nothing to do: the pipe is full, a signal is already pending. */
  }
  errno = saved;
}

/* A poll() timeout for the monotonic time at_us: -1 for INT64_MAX (none),
 * 0 when it has passed, else the milliseconds left, rounded up. */
static int poll_ms_until(int64_t at_us) {
  if (at_us == INT64_MAX)
    return -1;
  int64_t left = at_us - sl_time_mono_us();
  if (left <= 0)
    return 0;
  int64_t ms = (left + 999) / 1000;
  return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* Room for n pollfd entries in *fds (grown, never shrunk). */
static int reserve_pollfds(struct pollfd **fds, size_t *cap, size_t n) {
  if (n <= *cap)
    return 0;
  size_t c = *cap ? *cap : 16;
  while (c < n)
    c *= 2;
  struct pollfd *p = realloc(*fds, c * sizeof *p);
  if (!p)
    return -ENOMEM;
  *fds = p;
  *cap = c;
  return 0;
}

/* ---- heartbeat ---------------------------------------------------------- */

struct heartbeat {
  struct jk_zsock *sock;
  int stop_pipe[2];
  pthread_t thread;
};

/* Echoes every message, envelope included, to the peer that sent it. */
static void *heartbeat(void *arg) {
  struct heartbeat *hb = arg;
  struct pollfd *pfd = NULL;
  size_t cap = 0;
  for (;;) {
    if (reserve_pollfds(&pfd, &cap, 1 + jk_zsock_nfds(hb->sock)) < 0)
      break;
    pfd[0] = (struct pollfd){hb->stop_pipe[0], POLLIN, 0};
    size_t n = jk_zsock_pollfds(hb->sock, pfd + 1);
    if (poll(pfd, (nfds_t)(n + 1), poll_ms_until(jk_zsock_wake_at_us(hb->sock))) < 0 && errno != EINTR)
      break;
    if (pfd[0].revents)
      break;
    jk_zsock_handle(hb->sock, pfd + 1, n);
    struct sl_msg m;
    int r;
    while ((r = jk_zsock_recv(hb->sock, &m)) != -EAGAIN) {
      for (size_t i = 0; r == 0 && i < m.n; i++)
        jk_zsock_send(hb->sock, m.frames[i].data, m.frames[i].len, i + 1 < m.n);
      sl_msg_done(&m);
    }
    jk_zsock_flush(hb->sock);
  }
  free(pfd);
  return NULL;
}

static int heartbeat_start(struct heartbeat *hb, struct jk_zsock *sock) {
  hb->sock = sock;
  if (pipe2(hb->stop_pipe, O_CLOEXEC) < 0)
    return -errno;
  if (pthread_create(&hb->thread, NULL, heartbeat, hb) != 0) {
    close(hb->stop_pipe[0]);
    close(hb->stop_pipe[1]);
    return -EAGAIN;
  }
  return 0;
}

static void heartbeat_stop(struct heartbeat *hb) {
  if (write(hb->stop_pipe[1], "", 1) < 0) {
    /* Cannot happen with an empty pipe; the join below would wait. */
  }
  pthread_join(hb->thread, NULL);
  close(hb->stop_pipe[0]);
  close(hb->stop_pipe[1]);
}

/* ---- core callbacks ---------------------------------------------------- */

/* Before a message goes out on zs, what was sent on another socket leaves
 * first, so clients see messages in the order the core sent them. */
static void switch_to(struct loop *l, struct jk_zsock *zs) {
  if (l->last_sent && l->last_sent != zs)
    jk_zsock_flush(l->last_sent);
  l->last_sent = zs;
}

static int send_frame(void *sock, const void *data, size_t len, bool more) {
  return jk_zsock_send(sock, data, len, more);
}

static void send_msg(void *ud, enum jk_channel ch, struct jk_msg *msg) {
  struct loop *l = ud;
  struct jk_zsock *zs = l->zs[ch];
  switch_to(l, zs);
  int r = zs ? jk_wire_encode_each(l->auth, msg, send_frame, zs) : -ENOTCONN;
  if (r < 0)
    sl_warn("kernel.wire", "cannot send a message on the %s channel: %s", channel_name[ch], sl_strerror(r));
  jk_msg_free(msg);
}

static void flush_all(struct loop *l) {
  for (int ch = 0; ch < JK_CH_COUNT; ch++)
    if (l->zs[ch])
      jk_zsock_flush(l->zs[ch]);
  if (l->gw)
    jk_zsock_flush(l->gw);
  l->last_sent = NULL;
}

static bool receive_one(struct loop *l, enum jk_channel ch);

/* Reads whatever has reached ch's connections by now, without waiting. */
static void pump(struct loop *l, enum jk_channel ch) {
  struct jk_zsock *zs = l->zs[ch];
  if (reserve_pollfds(&l->pfd, &l->pfd_cap, jk_zsock_nfds(zs)) < 0)
    return;
  size_t n = jk_zsock_pollfds(zs, l->pfd);
  if (poll(l->pfd, (nfds_t)n, 0) > 0)
    jk_zsock_handle(zs, l->pfd, n);
}

static void drain_shell(void *ud) {
  struct loop *l = ud;
  pump(l, JK_CH_SHELL);
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
  if (l->last_sent == l->gw)
    l->last_sent = NULL; /* the core may close it between two sends of a round */
  l->gw = jk_zsock_free(l->gw);
}

static int gw_open(void *ud, const char *address) {
  struct loop *l = ud;
  gw_close(l);
  struct jk_zsock_options opts = JK_ZSOCK_OPTIONS_DEFAULT;
  opts.limits = (struct sl_limits){GW_LIMIT_FRAMES, GW_LIMIT_FRAME_BYTES, GW_LIMIT_FRAMES * GW_LIMIT_FRAME_BYTES};
  opts.max_out_bytes = GW_LIMIT_OUT_BYTES;
  return jk_zsock_connect(address, JK_ZSOCK_DEALER, &opts, &l->gw);
}

static int gw_send(void *ud, const char *data, size_t len) {
  struct loop *l = ud;
  if (!l->gw)
    return -ENOTCONN;
  switch_to(l, l->gw);
  return jk_zsock_send(l->gw, data, len, false);
}

/* Hands one gateway message to the core; false when none was waiting. */
static bool receive_gateway(struct loop *l) {
  struct sl_msg frames;
  int r = l->gw ? jk_zsock_recv(l->gw, &frames) : -EAGAIN;
  if (r == -EAGAIN)
    return false;
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
  int r = jk_zsock_recv(l->zs[ch], &frames);
  if (r == -EAGAIN)
    return false;
  bool over_limit = r == SL_ELIMIT;
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

static int open_socket(const struct jk_connection *conn, enum jk_channel ch, struct jk_zsock **ret) {
  static const enum jk_zsock_type types[JK_CH_COUNT] = {
    [JK_CH_SHELL] = JK_ZSOCK_ROUTER, [JK_CH_CONTROL] = JK_ZSOCK_ROUTER, [JK_CH_STDIN] = JK_ZSOCK_ROUTER,
    [JK_CH_IOPUB] = JK_ZSOCK_PUB, [JK_CH_HB] = JK_ZSOCK_REP,
  };
  struct jk_zsock_options opts = JK_ZSOCK_OPTIONS_DEFAULT;
  opts.limits = (struct sl_limits){LIMIT_FRAMES, LIMIT_FRAME_BYTES, LIMIT_TOTAL_BYTES};
  opts.max_queued = LIMIT_QUEUED;
  if (ch == JK_CH_HB || ch == JK_CH_IOPUB)
    opts.limits = (struct sl_limits){8, 64u << 10, 64u << 10}; /* pings and subscriptions */
  char ep[300];
  int r = jk_connection_endpoint(conn, ch, ep, sizeof ep);
  if (r == 0) {
    r = jk_zsock_bind(ep, types[ch], &opts, ret);
    if (r < 0)
      sl_err("kernel", "cannot bind %s: %s", ep, sl_strerror(r));
  }
  return r;
}

static int poll_timeout_ms(const struct loop *l) {
  int64_t at = jk_core_wake_at_us(l->core);
  for (int ch = 0; ch < JK_CH_COUNT; ch++) {
    int64_t z = l->zs[ch] ? jk_zsock_wake_at_us(l->zs[ch]) : INT64_MAX;
    if (z < at)
      at = z;
  }
  int64_t g = l->gw ? jk_zsock_wake_at_us(l->gw) : INT64_MAX;
  if (g < at)
    at = g;
  return poll_ms_until(at);
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

/* The channels a round reads, in the order it serves them. */
static const enum jk_channel served[] = {JK_CH_CONTROL, JK_CH_STDIN, JK_CH_SHELL, JK_CH_IOPUB};
#define NSERVED (sizeof served / sizeof served[0])

/* One poll over the signal pipe, every channel's connections and the
 * gateway's; then control and stdin drained, a bounded number of gateway
 * messages, one shell request (answering it is the round's work; the next
 * round comes at once if more are queued), the core's timers, and the
 * output written. The gateway socket may be opened or closed by the core,
 * which runs only after every socket has had its poll results. */
static void serve(struct loop *l) {
  while (!l->stop) {
    struct jk_zsock *gw = l->gw;
    bool waiting = gw && jk_zsock_has_msg(gw);
    size_t need = 1 + (gw ? jk_zsock_nfds(gw) : 0);
    for (size_t i = 0; i < NSERVED; i++) {
      need += jk_zsock_nfds(l->zs[served[i]]);
      waiting |= served[i] != JK_CH_IOPUB && jk_zsock_has_msg(l->zs[served[i]]);
    }
    if (reserve_pollfds(&l->pfd, &l->pfd_cap, need) < 0) {
      sl_err("kernel", "out of memory");
      break;
    }
    size_t n = 0, first[NSERVED], count[NSERVED], gw_first = 0, gw_count = 0;
    l->pfd[n++] = (struct pollfd){sig_pipe[0], POLLIN, 0};
    for (size_t i = 0; i < NSERVED; i++) {
      first[i] = n;
      count[i] = jk_zsock_pollfds(l->zs[served[i]], l->pfd + n);
      n += count[i];
    }
    if (gw) {
      gw_first = n;
      gw_count = jk_zsock_pollfds(gw, l->pfd + n);
      n += gw_count;
    }
    int r = poll(l->pfd, (nfds_t)n, waiting ? 0 : poll_timeout_ms(l));
    if (r < 0 && errno != EINTR) {
      sl_err("kernel", "poll failed: %s", strerror(errno));
      break;
    }
    if (r > 0 && (l->pfd[0].revents & POLLIN))
      read_signals(l);
    /* After a timeout or an interruption only the first entry (a listener,
     * with no events) is passed: handshake deadlines and reconnections are
     * still looked after. */
    for (size_t i = 0; i < NSERVED; i++)
      jk_zsock_handle(l->zs[served[i]], l->pfd + first[i], r > 0 ? count[i] : 1);
    if (gw)
      jk_zsock_handle(gw, l->pfd + gw_first, r > 0 ? gw_count : 1);
    while (!l->stop && receive_one(l, JK_CH_CONTROL))
      ;
    while (!l->stop && receive_one(l, JK_CH_STDIN))
      ;
    for (int i = 0; i < GW_MAX_PER_ROUND && !l->stop && receive_gateway(l); i++)
      ;
    if (!l->stop)
      receive_one(l, JK_CH_SHELL);
    if (!l->stop)
      jk_core_tick(l->core);
    flush_all(l);
  }
}

int jk_channels_run(const struct jk_connection *conn, const struct jk_run_options *opts) {
  struct loop l = {0};
  struct heartbeat hb = {0};
  struct jk_zsock *hb_sock = NULL;
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

  l.auth = jk_auth_new(conn->key, conn->key_len, 4096);
  struct jk_core_config cfg = {opts->kernel_id, opts->notebook, opts->history_dir};
  l.core = jk_core_new(&core_ops, &l, &cfg);
  if (!l.auth || !l.core || jk_core_set_gateway(l.core, &core_gw_ops) < 0) {
    r = -ENOMEM;
    goto out;
  }
  for (int ch = 0; ch < JK_CH_COUNT; ch++) {
    r = open_socket(conn, (enum jk_channel)ch, ch == JK_CH_HB ? &hb_sock : &l.zs[ch]);
    if (r < 0)
      goto out;
  }
  r = heartbeat_start(&hb, hb_sock);
  if (r < 0)
    goto out;
  hb_started = true;
  sl_info("kernel", "listening (%s on %s), kernel id %s", conn->transport, conn->ip, opts->kernel_id);
  serve(&l);
out:
  jk_core_free(l.core); /* closes the gateway socket through gw_close */
  l.core = NULL;
  gw_close(&l);
  /* Replies sent last (shutdown_reply above all) still reach their clients. */
  int64_t deadline = sl_time_mono_us() + LINGER_US;
  for (int ch = 0; ch < JK_CH_COUNT; ch++)
    if (l.zs[ch]) {
      jk_zsock_flush_wait(l.zs[ch], deadline);
      l.zs[ch] = jk_zsock_free(l.zs[ch]);
    }
  if (hb_started)
    heartbeat_stop(&hb);
  jk_zsock_free(hb_sock);
  free(l.pfd);
  jk_auth_free(l.auth);
  close(sig_pipe[0]);
  close(sig_pipe[1]);
  return r;
}
