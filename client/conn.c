/* The CLI's ZeroMQ loop: one DEALER to the gateway, driven until the reply
 * (or event stream) the caller waits for arrives or a deadline passes.
 *
 * The protocol itself (address, token, hello, request ids, timeouts) is the
 * kernel's gateway client, configured as client "cli" that never starts a
 * gateway, so the CLI and the kernel speak it identically. Every wait has a
 * deadline; an event callback decides when following ends.
 *
 * Following hands the callback each event of the job once, in seq order:
 * an event already seen is dropped, and a gap (events lost on the way) or a
 * gateway that restarted and forgot the attachment (noticed by a ping every
 * few seconds, which says hello again) attaches again from the last seq
 * seen, so the gateway replays what is missing. The job is followed under
 * the id the attach reply names (an alias such as J0000001 for J000001 is
 * taken by the gateway, but its events carry the canonical id).
 *
 * While following, a ping unanswered for LINK_LOST_US (or failed) counts
 * as the connection lost, and the next answer as it back: the owner's link
 * callback hears each change once, not each retry. */
#include "conn.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "gwclient.h"
#include "sl_err.h"
#include "sl_frame.h"
#include "sl_json.h"
#include "sl_sigpipe.h"
#include "sl_time.h"

#define FRAME_LIMIT (1u << 20)
#define FOLLOW_PING_US (5 * SL_US_PER_S)
#define LINK_LOST_US (3 * SL_US_PER_S)

#define WAKE_SIGNALS_MAX 4

struct cli_conn {
  void *ctx, *sock;
  struct jk_gw *gw;
  int64_t want;       /* request id waited for */
  bool done;
  json_t *reply;
  char err[600];
  cli_event_fn on_event;
  void *event_ud;
  bool following, stop;
  char follow_job[32];
  int64_t last_seq;   /* newest event passed to on_event */
  bool resyncing;     /* attached again after a gap; its reply has not come */
  int64_t ping_at_us;
  int64_t ping_id;      /* the ping waited for, or 0 */
  int64_t ping_sent_us;
  bool link_lost;
  cli_link_fn on_link;
  void *link_ud;
  int wake_signo[WAKE_SIGNALS_MAX]; /* the signals that end a wait */
  struct sigaction wake_old[WAKE_SIGNALS_MAX];
  size_t n_wake;
  int woken_by;     /* the first signal since the first cli_wake_on_signal */
  bool interrupted; /* the last wait ended by a signal */
};


static int t_open(void *ud, const char *address) {
  struct cli_conn *c = ud;
  if (c->sock)
    zmq_close(c->sock);
  c->sock = zmq_socket(c->ctx, ZMQ_DEALER);
  if (!c->sock)
    return sl_err_from_zmq(zmq_errno());
  int linger = 0;
  int64_t maxmsg = FRAME_LIMIT;
  zmq_setsockopt(c->sock, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(c->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
  if (zmq_connect(c->sock, address) < 0) {
    int r = sl_err_from_zmq(zmq_errno());
    zmq_close(c->sock);
    c->sock = NULL;
    return r;
  }
  return 0;
}

static void t_close(void *ud) {
  struct cli_conn *c = ud;
  if (c->sock)
    zmq_close(c->sock);
  c->sock = NULL;
}

static int t_send(void *ud, const char *data, size_t len) {
  struct cli_conn *c = ud;
  if (!c->sock)
    return -ENOTCONN;
  return zmq_send(c->sock, data, len, ZMQ_DONTWAIT) < 0 ? sl_err_from_zmq(zmq_errno()) : 0;
}

static const struct jk_gw_transport transport = {t_open, t_close, t_send, NULL};

/* The link's state changed while following: tell the owner once. */
static void set_link(struct cli_conn *c, bool lost) {
  if (c->link_lost == lost || !c->following)
    return;
  c->link_lost = lost;
  if (!lost)
    c->ping_id = 0; /* a ping sent while lost is no measure of the link now */
  if (c->on_link)
    c->on_link(c->link_ud, !lost);
}

static void h_reply(void *ud, int64_t id, const json_t *reply, const char *error) {
  struct cli_conn *c = ud;
  if (id == c->ping_id) {
    c->ping_id = 0;
    set_link(c, !reply); /* any answer, even a refusal, says the gateway is there */
  }
  if (id != c->want)
    return;
  if (reply)
    set_link(c, false);
  /* follow the job under the gateway's own name for it (the canonical id) */
  const char *job = sl_json_get_str(json_object_get(reply, "job"), "job", "");
  if (c->following && !error && *job && strlen(job) < sizeof c->follow_job)
    snprintf(c->follow_job, sizeof c->follow_job, "%s", job);
  c->done = true;
  c->resyncing = false;
  json_decref(c->reply);
  c->reply = reply ? json_incref((json_t *)reply) : NULL;
  snprintf(c->err, sizeof c->err, "%s", error ? error : "");
}

/* Attaches the followed job again after the last event seen. */
static void reattach(struct cli_conn *c) {
  int64_t id = jk_gw_request(c->gw, json_pack("{s:s, s:s, s:I}", "type", "attach", "job", c->follow_job,
                                              "after", (json_int_t)c->last_seq), 0);
  if (id > 0) {
    c->want = id;
    c->resyncing = true;
  }
}

static void h_event(void *ud, const json_t *event) {
  struct cli_conn *c = ud;
  if (!c->following || c->stop || strcmp(sl_json_get_str(event, "job", ""), c->follow_job))
    return;
  set_link(c, false);
  int64_t seq = sl_json_get_int(event, "seq", 0);
  if (seq <= c->last_seq)
    return; /* seen already (a replay after attaching again) */
  if (seq > c->last_seq + 1) {
    if (!c->resyncing)
      reattach(c); /* the replay brings the missing ones first */
    return;
  }
  c->last_seq = seq;
  if (c->on_event && !c->on_event(c->event_ud, event))
    c->stop = true;
}

/* Ready again after the first attach was answered: the gateway said hello
 * anew (it restarted) and no longer sends this job's events. */
static void h_state(void *ud, bool ready, const char *why) {
  struct cli_conn *c = ud;
  (void)why;
  if (c->following && c->done && !c->stop && !c->err[0])
    set_link(c, !ready);
  if (ready && c->following && c->done && !c->stop && !c->err[0])
    reattach(c);
}

static const struct jk_gw_handler handler = {h_reply, h_event, h_state, NULL};

struct cli_conn *cli_conn_new(void) {
  struct cli_conn *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  c->ctx = zmq_ctx_new();
  struct jk_gw_config cfg = {.client = "cli", .session = "", .may_spawn = false};
  c->gw = c->ctx ? jk_gw_new(&transport, c, &handler, c, &cfg) : NULL;
  if (!c->gw)
    return cli_conn_free(c);
  return c;
}

struct cli_conn *cli_conn_free(struct cli_conn *c) {
  if (!c)
    return NULL;
  cli_unwake_signal(c);
  jk_gw_free(c->gw);
  if (c->sock)
    zmq_close(c->sock);
  if (c->ctx)
    sl_zmq_ctx_term(c->ctx);
  json_decref(c->reply);
  free(c);
  return NULL;
}

const char *cli_address(struct cli_conn *c) { return jk_gw_address(c->gw); }

void cli_set_link_fn(struct cli_conn *c, cli_link_fn fn, void *ud) {
  c->on_link = fn;
  c->link_ud = ud;
}

int cli_wake_on_signal(struct cli_conn *c, int signo) {
  if (c->n_wake == WAKE_SIGNALS_MAX)
    return -ENOSPC;
  if (!c->n_wake) {
    sl_sigpipe_drain();
    c->woken_by = 0;
  }
  int r = sl_sigpipe_catch(signo, &c->wake_old[c->n_wake]);
  if (r < 0)
    return r;
  c->wake_signo[c->n_wake++] = signo;
  return 0;
}

int cli_woken_by(const struct cli_conn *c) { return c->n_wake ? c->woken_by : 0; }

void cli_unwake_signal(struct cli_conn *c) {
  while (c->n_wake > 0) {
    c->n_wake--;
    sigaction(c->wake_signo[c->n_wake], &c->wake_old[c->n_wake], NULL);
  }
}

/* Runs the loop until done (and, when following, until stop) or deadline. */
static bool pump(struct cli_conn *c, int64_t deadline_us) {
  for (;;) {
    jk_gw_tick(c->gw);
    if (c->done && (!c->following || c->stop || c->err[0]))
      return true;
    int64_t now = sl_time_mono_us();
    if (deadline_us && now >= deadline_us)
      return false;
    if (c->following && c->done && c->ping_id && now - c->ping_sent_us >= LINK_LOST_US)
      set_link(c, true);
    if (c->following && c->done && now >= c->ping_at_us) {
      /* a gateway that restarted answers SL_EAUTH: hello again, then h_state */
      int64_t id = jk_gw_request(c->gw, json_pack("{s:s}", "type", "ping"), 0);
      if (id > 0 && !c->ping_id) {
        c->ping_id = id;
        c->ping_sent_us = now;
      }
      c->ping_at_us = now + FOLLOW_PING_US;
    }
    int64_t at = jk_gw_wake_at_us(c->gw);
    if (c->following && c->done && c->ping_at_us < at)
      at = c->ping_at_us;
    if (c->following && c->done && c->ping_id && !c->link_lost && c->ping_sent_us + LINK_LOST_US < at)
      at = c->ping_sent_us + LINK_LOST_US;
    if (deadline_us && deadline_us < at)
      at = deadline_us;
    long timeout = at == INT64_MAX ? 1000 : (long)((at - now + 999) / 1000);
    if (timeout < 0)
      timeout = 0;
    zmq_pollitem_t items[2];
    int n_items = 0;
    if (c->sock)
      items[n_items++] = (zmq_pollitem_t){c->sock, 0, ZMQ_POLLIN, 0};
    if (c->n_wake)
      items[n_items++] = (zmq_pollitem_t){NULL, sl_sigpipe_fd(), ZMQ_POLLIN, 0};
    int n = zmq_poll(items, n_items, timeout);
    if (n < 0 && zmq_errno() != EINTR)
      return false;
    if (n < 0 || (c->n_wake && (items[n_items - 1].revents & ZMQ_POLLIN))) {
      int sig = c->n_wake ? sl_sigpipe_drain() : 0; /* the next wait waits for the next signal */
      if (!c->woken_by)
        c->woken_by = sig;
      c->interrupted = true;
      return false; /* a signal came: the caller stops */
    }
    while (c->sock && !c->stop) {
      struct sl_msg m;
      sl_msg_init(&m, (struct sl_limits){8, FRAME_LIMIT, 8 * FRAME_LIMIT});
      int r = sl_zmq_recv(c->sock, &m, ZMQ_DONTWAIT);
      if (r == -EAGAIN || (r < 0 && r != SL_ELIMIT)) {
        sl_msg_done(&m);
        break;
      }
      if (r == 0 && m.n)
        jk_gw_input(c->gw, (const char *)m.frames[m.n - 1].data, m.frames[m.n - 1].len);
      sl_msg_done(&m);
    }
  }
}

static int start(struct cli_conn *c, json_t *req) {
  c->done = c->stop = false;
  c->err[0] = '\0';
  json_decref(c->reply);
  c->reply = NULL;
  int64_t id = jk_gw_request(c->gw, req, 0);
  if (id < 0)
    return (int)id;
  c->want = id;
  return 0;
}

static int finish(struct cli_conn *c, bool in_time, json_t **ret_reply, char *err, size_t err_size) {
  if (!in_time && !c->done) {
    snprintf(err, err_size, "no answer from the gateway at %s", cli_address(c));
    return SL_ENOGATEWAY;
  }
  if (c->err[0]) {
    bool refused = !c->reply && !strncmp(c->err, "the gateway refused", 19);
    if (c->reply)
      snprintf(err, err_size, "%s", c->err);
    else if (refused) /* it answered: not "no gateway" */
      snprintf(err, err_size, "the spotlab gateway at %s%s", cli_address(c), c->err + 11);
    else /* the CLI never starts the per-user gateway: say how */
      snprintf(err, err_size, "no spotlab gateway at %s: %s%s", cli_address(c), c->err,
               jk_gw_is_embedded(c->gw) && strstr(c->err, "no gateway is running")
                   ? "; a notebook cell that needs it starts it, or run spotlab-gateway --embedded --daemon"
                   : "");
    return c->reply ? SL_ESTATE : refused ? SL_EAUTH : SL_ENOGATEWAY;
  }
  if (ret_reply) {
    *ret_reply = c->reply;
    c->reply = NULL;
  }
  return 0;
}

int cli_request(struct cli_conn *c, json_t *req, int timeout_ms, json_t **ret_reply, char *err, size_t err_size) {
  int r = start(c, req);
  if (r < 0) {
    snprintf(err, err_size, "cannot send: %s", sl_strerror(r));
    return r;
  }
  c->following = false;
  c->interrupted = false;
  bool ok = pump(c, sl_time_mono_us() + (int64_t)timeout_ms * 1000);
  if (!ok && c->interrupted) {
    snprintf(err, err_size, "interrupted");
    return SL_EINTERRUPTED;
  }
  return finish(c, ok, ret_reply, err, err_size);
}

int cli_follow(struct cli_conn *c, const char *job, int64_t after, cli_event_fn fn, void *ud,
               json_t **ret_reply, char *err, size_t err_size) {
  c->on_event = fn;
  c->event_ud = ud;
  snprintf(c->follow_job, sizeof c->follow_job, "%s", job);
  c->last_seq = after;
  c->resyncing = false;
  c->ping_at_us = sl_time_mono_us() + FOLLOW_PING_US;
  c->ping_id = 0;
  c->link_lost = false;
  int r = start(c, json_pack("{s:s, s:s, s:I}", "type", "attach", "job", job, "after", (json_int_t)after));
  if (r < 0) {
    snprintf(err, err_size, "cannot send: %s", sl_strerror(r));
    return r;
  }
  c->following = true;
  c->interrupted = false;
  bool ok = pump(c, 0);
  c->link_lost = false;
  c->following = false;
  if (!ok && !c->err[0]) {
    snprintf(err, err_size, "interrupted");
    return SL_EINTERRUPTED;
  }
  return finish(c, true, ret_reply, err, err_size);
}
