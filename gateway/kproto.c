/* The kernel/CLI protocol (protocols.md §1).
 *
 * A client says hello with a valid token before anything else; the reply
 * gives it a random secret ("auth") that every later request carries. A
 * request counts as the client's only when it comes from the routing id that
 * said hello AND carries that secret (compared in constant time): a routing
 * id is chosen by the peer, and another peer may take it once the client
 * disconnects, so the id alone proves nothing. A request from a known
 * routing id without the right secret means the peer behind it changed: the
 * entry is forgotten. So is the entry of a connection that closed (the
 * socket monitor says so, and it is read before every message in or out),
 * so nothing (events, notices) goes to a routing id once another peer may
 * hold it.
 *
 * Every request is answered exactly once with a reply carrying its id;
 * malformed input gets an error reply naming the problem and the loop goes
 * on; what input from the world makes the gateway log is rate-limited per
 * log site, and what was dropped is counted. A user sees only their own jobs
 * and instances: another user's job answers SL_ENAME, word for word as a job
 * that does not exist; an admin ([user.NAME] admin = yes) sees every user's.
 * Each user holds at most max_clients_per_user entries: a hello beyond that
 * forgets that user's least recently active one, never another user's.
 *
 * On a hub ([hub], hub.h), a token the file does not know may be a
 * JupyterHub token: the hello waits (a pending hello, its routing id, its
 * connection and its request id kept) while the hub is asked on the loop,
 * and is answered when the hub answers. A pending hello goes with its
 * connection, or with a newer hello from its routing id. */
#include "kproto.h"
#include "metrics.h"

#include "budget.h"

#include "config.h"
#include "loop.h"
#include "record.h"
#include "zmsg.h"
#include "sl_err.h"
#include "sl_frame.h"
#include "sl_hmac.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sodium.h>
#include <zmq.h>

#define GW_MAX_CLIENTS 16384    /* every user's connections together */
#define CLIENTS_FIRST 64
#define AUTH_BYTES 32
#define AUTH_HEX (2 * AUTH_BYTES)
#define GW_MAX_ATTACH 64
#define GW_FRAMES_MAX 8
#define MARKET_MAX 256
#define PENDING_MAX 64          /* hellos waiting for the hub (its checks in flight) */

#define T "gateway.kernel"

/* A client's interest in one job's events. While replaying, events after
 * replay_after come from the store at the pace the client reads them (the
 * kernel socket's send queue is bounded); live events of the job are not sent
 * meanwhile, since the store has them too and the replay reaches them in
 * order. A live event the client's queue cannot take starts a replay from it,
 * so no event is ever dropped for a slow client. */
struct gw_attach {
  int64_t job;
  int64_t replay_after;         /* last seq sent, while replaying */
  bool replaying;
  bool follow;                  /* a live job: live events follow the replay */
};

/* A client that said hello. rid_len 0: a free slot. */
struct gw_client {
  uint8_t rid[GW_RID_MAX];
  size_t rid_len;
  char auth[AUTH_HEX + 1];      /* the secret its requests carry */
  int fd;                       /* its connection (monitor events name it); -1 unknown */
  bool admin;
  char user[64];
  char session[256];
  struct gw_attach attached[GW_MAX_ATTACH];
  size_t n_attached;
  int64_t last_mono_us;
  int64_t replay_at_mono_us;    /* when to go on replaying; 0: nothing to replay */
  int64_t replay_backoff_us;    /* grows while the client reads nothing */
};

/* A hello whose token the hub is checking. used false: a free slot. */
struct pending {
  bool used;
  struct gw_kproto *g;
  uint64_t check;               /* gw_hub_check's id */
  uint8_t rid[GW_RID_MAX];
  size_t rid_len;
  int fd;
  json_t *id;                   /* the hello's id (owned), or NULL */
  char session[256];
  char client[32];
};

struct gw_kproto {
  struct gw_kproto_env env;
  struct pending pending[PENDING_MAX];
  struct gw_client *clients;
  size_t n_clients;             /* slots in use or freed; free ones have rid_len 0 */
  size_t cap_clients;
  int64_t replay_timer;
  int64_t next_replay_mono_us;  /* earliest replay_at_mono_us of any client; INT64_MAX none */
  /* lines that a peer's input causes, each site with its own budget */
  struct sl_log_limit log_wire, log_auth, log_hello;
  int64_t flush_timer;          /* reports what the sites dropped */
  bool flush_armed;
  struct gw_metrics_kreq times; /* request handling times, for /metrics */
};

/* A line at a rate-limited site; a drop arms the timer that reports it. */
#define LOG_LIMITED(g, site, level, ...)                                      \
  do {                                                                        \
    if (!sl_log_limited(&(g)->site, T, level, __VA_ARGS__) && (g)->site.pending) \
      arm_flush(g);                                                           \
  } while (0)

static void arm_flush(struct gw_kproto *g) {
  if (g->flush_armed || !g->env.loop)
    return;
  g->flush_armed = true;
  gw_loop_set_timer(g->env.loop, g->flush_timer, sl_time_mono_us() + SL_US_PER_S);
}

static int64_t flush_timer(struct gw_loop *l, int64_t id, int64_t now_us, void *data) {
  (void)l; (void)id; (void)now_us;
  struct gw_kproto *g = data;
  g->flush_armed = false;
  sl_log_limit_flush(&g->log_wire, T);
  sl_log_limit_flush(&g->log_auth, T);
  sl_log_limit_flush(&g->log_hello, T);
  return INT64_MAX;
}

static uint64_t log_dropped(const struct gw_kproto *g) {
  return g->log_wire.dropped + g->log_auth.dropped + g->log_hello.dropped;
}

struct req {
  struct gw_kproto *g;
  struct gw_client *c;          /* NULL before hello */
  const uint8_t *rid;
  size_t rid_len;
  int fd;                       /* the connection it came in on; -1 unknown */
  const json_t *body;
  json_t *id;                   /* echoed as "re" (borrowed; null if absent) */
};

static void client_forget(struct gw_client *c);

static void drain_closed(struct gw_kproto *g);
static void pending_forget(struct gw_kproto *g, const uint8_t *rid, size_t rid_len, int fd);

static int send_to(struct gw_kproto *g, const uint8_t *rid, size_t rid_len, const json_t *msg) {
  drain_closed(g);
  int r = g->env.send(g->env.send_ctx, rid, rid_len, msg);
  if (r < 0)
    sl_debug("gateway.zmq", "send dropped: %s", sl_strerror(r));
  return r;
}

static void reply(struct req *q, json_t *fields) {
  json_t *m = fields ? fields : json_object();
  json_object_set_new(m, "type", json_string("reply"));
  json_object_set(m, "re", q->id ? q->id : json_null());
  json_object_set_new(m, "ok", json_true());
  drain_closed(q->g);
  if (q->c && !q->c->rid_len)
    ; /* its connection closed meanwhile: the routing id may be another's */
  else if (send_to(q->g, q->rid, q->rid_len, m) == -EHOSTUNREACH && q->c)
    client_forget(q->c);
  json_decref(m);
}

static void reply_err(struct gw_kproto *g, const uint8_t *rid, size_t rid_len, json_t *id, int code,
                      const char *msg) {
  json_t *m = json_pack("{s:s,s:O,s:b,s:{s:s,s:s}}", "type", "reply", "re", id ? id : json_null(),
                        "ok", 0, "error", "code", sl_errname(code), "message", msg);
  send_to(g, rid, rid_len, m);
  json_decref(m);
}

static void fail(struct req *q, int code, const char *msg) {
  reply_err(q->g, q->rid, q->rid_len, q->id, code, msg ? msg : sl_strerror(code));
}

static struct gw_client *client_find(struct gw_kproto *g, const uint8_t *rid, size_t len) {
  if (!len)
    return NULL;
  for (size_t i = 0; i < g->n_clients; i++)
    if (g->clients[i].rid_len == len && !memcmp(g->clients[i].rid, rid, len))
      return &g->clients[i];
  return NULL;
}

/* Frees c's slot: nothing more goes to its routing id. */
static void client_forget(struct gw_client *c) {
  sodium_memzero(c, sizeof *c);
}

/* Forgets the clients whose connection the monitor says closed. Read
 * before each message in and out: the monitor's event comes before the
 * socket frees the routing id for another peer, so what goes out after a
 * drain never reaches a peer that took a closed client's routing id. */
static void drain_closed(struct gw_kproto *g) {
  if (!g->env.monitor)
    return;
  for (;;) {
    uint8_t ev[6];
    int n = zmq_recv(g->env.monitor, ev, sizeof ev, ZMQ_DONTWAIT);
    if (n < 0)
      return;
    int more = 0;
    size_t more_len = sizeof more;
    char addr[8];
    while (zmq_getsockopt(g->env.monitor, ZMQ_RCVMORE, &more, &more_len) == 0 && more)
      zmq_recv(g->env.monitor, addr, sizeof addr, 0); /* the endpoint: not needed */
    uint16_t event;
    uint32_t fd;
    if (n < 6)
      continue;
    memcpy(&event, ev, sizeof event);
    memcpy(&fd, ev + 2, sizeof fd);
    if (!(event & ZMQ_EVENT_DISCONNECTED))
      continue;
    pending_forget(g, NULL, 0, (int)fd);
    for (size_t i = 0; i < g->n_clients; i++)
      if (g->clients[i].rid_len && g->clients[i].fd >= 0 && (uint32_t)g->clients[i].fd == fd)
        client_forget(&g->clients[i]);
  }
}

void gw_kproto_drain(struct gw_kproto *g) {
  drain_closed(g);
}

/* Sends msg to client c unless its connection closed: 0 or negative
 * (-EHOSTUNREACH: c is forgotten). */
static int deliver(struct gw_kproto *g, struct gw_client *c, const json_t *msg) {
  drain_closed(g);
  if (!c->rid_len)
    return -EHOSTUNREACH;
  int r = g->env.send(g->env.send_ctx, c->rid, c->rid_len, msg);
  if (r == -EHOSTUNREACH)
    client_forget(c);
  return r;
}

/* Whether auth (from a request, may be NULL) is c's secret. */
static bool client_auth_ok(const struct gw_client *c, const char *auth) {
  return auth && strlen(auth) == AUTH_HEX && sodium_memcmp(c->auth, auth, AUTH_HEX) == 0;
}

/* A free slot, growing the table up to GW_MAX_CLIENTS; NULL when full.
 * Moves the table: no slot pointer survives a call. */
static struct gw_client *client_slot(struct gw_kproto *g) {
  for (size_t i = 0; i < g->n_clients; i++)
    if (!g->clients[i].rid_len)
      return &g->clients[i];
  if (g->n_clients == g->cap_clients) {
    size_t cap = g->cap_clients * 2;
    if (cap > GW_MAX_CLIENTS)
      cap = GW_MAX_CLIENTS;
    if (cap == g->cap_clients)
      return NULL;
    struct gw_client *t = realloc(g->clients, cap * sizeof *t);
    if (!t)
      return NULL;
    g->clients = t;
    g->cap_clients = cap;
  }
  struct gw_client *c = &g->clients[g->n_clients++];
  memset(c, 0, sizeof *c);
  return c;
}

/* Makes room for one more entry of user: at max_clients_per_user, forgets
 * the user's least recently active entry (a kernel that went away without
 * a word leaves its entry behind; a flood of hellos only churns its own). */
static void client_limit(struct gw_kproto *g, const char *user) {
  int64_t limit = g->env.cfg->max_clients_per_user > 0 ? g->env.cfg->max_clients_per_user : 256;
  struct gw_client *oldest = NULL;
  int64_t n = 0;
  for (size_t i = 0; i < g->n_clients; i++) {
    struct gw_client *c = &g->clients[i];
    if (!c->rid_len || strcmp(c->user, user))
      continue;
    n++;
    if (!oldest || c->last_mono_us < oldest->last_mono_us)
      oldest = c;
  }
  if (n < limit || !oldest)
    return;
  LOG_LIMITED(g, log_hello, SL_LOG_WARN,
              "%s holds %lld connections ([gateway] max_clients_per_user): forgot their least"
              " recently active one", user, (long long)n);
  client_forget(oldest);
}

/* ---- event delivery: replays from the store, then live ---------------------
 *
 * A client's send queue holds at most the socket's high-water mark, and a
 * job may have any number of events. So an attach replays from the store a
 * page at a time, only as fast as the client reads: the socket is
 * ZMQ_ROUTER_MANDATORY, a full queue answers -EAGAIN, and the replay waits
 * (backing off while the client reads nothing) and goes on from the last seq
 * sent. Memory stays bounded: a cursor per attachment, a page at a time. */

#define REPLAY_PAGE 128
#define REPLAY_BACKOFF_MIN_US SL_US_PER_MS
#define REPLAY_BACKOFF_MAX_US (50 * SL_US_PER_MS)

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
    return !strcmp(c->user, name);
  const char *group = !strcmp(scope, "group") ? gw_config_user_group(g->env.cfg, c->user) : NULL;
  return group && !strcmp(group, name);
}

/* user NULL: every client the notice's scope covers; session NULL: every
 * session of user. */
static void notify(struct gw_kproto *g, const char *user, const char *session, const json_t *msg) {
  for (size_t i = 0; i < g->n_clients; i++) {
    struct gw_client *c = &g->clients[i];
    if (c->rid_len && (user ? !strcmp(c->user, user) : notice_covers(g, c, msg)) &&
        (!session || !strcmp(c->session, session)))
      deliver(g, c, msg);
  }
}

/* The user whose jobs, instances and costs the client sees: its own, or
 * NULL (everyone's) for an admin. */
static const char *whose(const struct req *q) {
  return q->c->admin ? NULL : q->c->user;
}

/* Whether the client may see instance in. */
static bool inst_visible(const struct req *q, const struct gw_inst *in) {
  return q->c->admin || !strcmp(in->row.user, q->c->user);
}

/* Loads job id if the client may see it (its user's, or any for an admin):
 * live copy or a store copy in *tmp. */
static struct gw_job *user_job(struct req *q, struct gw_job *tmp, bool *ret_live) {
  int64_t id = gw_job_id_parse(sl_json_get_str(q->body, "job", NULL));
  struct gw_job *j = id > 0 ? gw_fleet_job(q->g->env.fleet, id) : NULL;
  *ret_live = j != NULL;
  if (!j && id > 0 && gw_store_job_get(q->g->env.store, id, tmp) == 0)
    j = tmp;
  if (j && !q->c->admin && strcmp(j->user, q->c->user)) {
    if (j == tmp)
      gw_job_done(tmp);
    j = NULL;
  }
  if (!j)
    fail(q, SL_ENAME, "no such job");
  return j;
}

/* Frees a pending hello's slot (its check, if any, is the caller's). */
static void pending_drop(struct pending *p) {
  json_decref(p->id);
  memset(p, 0, sizeof *p);
}

/* Drops the pending hellos of routing id rid, or of connection fd (>= 0):
 * nothing will answer them. */
static void pending_forget(struct gw_kproto *g, const uint8_t *rid, size_t rid_len, int fd) {
  for (size_t i = 0; i < PENDING_MAX; i++) {
    struct pending *p = &g->pending[i];
    if (!p->used || !((rid && p->rid_len == rid_len && !memcmp(p->rid, rid, rid_len)) ||
                      (fd >= 0 && p->fd == fd)))
      continue;
    gw_hub_cancel(g->env.hub, p->check);
    pending_drop(p);
  }
}

/* Welcomes user on q's routing id: a new entry with a new secret. */
static void hello_accept(struct req *q, const char *user, const char *session, const char *client,
                         const char *how) {
  /* a new hello from a routing id starts over: what the entry held goes */
  struct gw_client *c = client_find(q->g, q->rid, q->rid_len);
  if (c)
    client_forget(c);
  client_limit(q->g, user);
  if (!(c = client_slot(q->g))) {
    LOG_LIMITED(q->g, log_hello, SL_LOG_WARN, "hello from %s refused: %d connections held", user,
                GW_MAX_CLIENTS);
    return fail(q, SL_ELIMIT, "the gateway holds too many connections; try again later");
  }
  uint8_t secret[AUTH_BYTES];
  randombytes_buf(secret, sizeof secret);
  sodium_bin2hex(c->auth, sizeof c->auth, secret, sizeof secret);
  sodium_memzero(secret, sizeof secret);
  memcpy(c->rid, q->rid, q->rid_len);
  c->rid_len = q->rid_len;
  c->fd = q->fd;
  c->admin = gw_config_user_admin(q->g->env.cfg, user);
  snprintf(c->user, sizeof c->user, "%s", user);
  snprintf(c->session, sizeof c->session, "%s", session);
  c->last_mono_us = sl_time_mono_us();
  if (*session) {
    gw_store_session_touch(q->g->env.store, user, session, sl_time_real_us());
    gw_idle_touch(q->g->env.idle, user, session);
  }
  const char *group = gw_config_user_group(q->g->env.cfg, user);
  LOG_LIMITED(q->g, log_hello, SL_LOG_INFO, "hello from %s%s%s%s (%.16s, session \"%.64s\")", user,
              how, group ? ", group " : "", group ? group : "", client, session);
  q->c = c; /* the secret goes to this connection only (reply checks it is still there) */
  json_t *r = json_pack("{s:s,s:s,s:s,s:s,s:b}", "user", user, "session", session, "gateway",
                        SPOTLAB_VERSION, "auth", c->auth, "admin", c->admin);
  if (r && group)
    json_object_set_new(r, "group", json_string(group));
  reply(q, r);
}

/* The hub answered a pending hello's token. */
static void hub_checked(void *data, int err, const struct gw_hub_who *who, const char *msg) {
  struct pending *p = data;
  struct gw_kproto *g = p->g;
  p->check = 0;    /* reported: nothing left to cancel */
  drain_closed(g); /* drops p if its connection closed: its routing id may be another's */
  if (!p->used)
    return;
  struct req q = {.g = g, .rid = p->rid, .rid_len = p->rid_len, .fd = p->fd, .id = p->id};
  if (err < 0) {
    LOG_LIMITED(g, log_auth, SL_LOG_WARN, "hello refused: %s", msg);
    fail(&q, err, msg);
  } else {
    hello_accept(&q, who->user, p->session, p->client, ", JupyterHub token");
  }
  pending_drop(p);
}

static void on_hello(struct req *q) {
  const char *token = sl_json_get_str(q->body, "token", NULL);
  const char *session = sl_json_get_str(q->body, "session", "");
  const char *client = sl_json_get_str(q->body, "client", "client");
  char user[64], hash[SL_HMAC_HEX_LEN + 1];
  if (!token || !*token || strlen(token) > 1024)
    return fail(q, SL_EAUTH, "a token is required");
  if (strlen(session) >= sizeof q->c->session)
    return fail(q, SL_ELIMIT, "session name too long");
  if (!q->rid_len || q->rid_len > GW_RID_MAX)
    return fail(q, SL_EWIRE, "no routing id to answer to");
  pending_forget(q->g, q->rid, q->rid_len, -1); /* a newer hello replaces a waiting one */
  sl_sha256_hex(token, strlen(token), hash);
  if (gw_store_user_by_token(q->g->env.store, hash, user, sizeof user) == 0)
    return hello_accept(q, user, session, client, "");
  if (!q->g->env.hub) {
    LOG_LIMITED(q->g, log_auth, SL_LOG_WARN, "hello refused: unknown token");
    return fail(q, SL_EAUTH, "unknown token");
  }
  struct pending *p = NULL;
  for (size_t i = 0; !p && i < PENDING_MAX; i++)
    if (!q->g->pending[i].used)
      p = &q->g->pending[i];
  if (!p) {
    LOG_LIMITED(q->g, log_hello, SL_LOG_WARN, "hello refused: %d hub token checks in flight",
                PENDING_MAX);
    return fail(q, SL_ELIMIT, "the gateway is checking many tokens with JupyterHub; try again");
  }
  struct gw_hub_who who;
  uint64_t check = 0;
  int r = gw_hub_check(q->g->env.hub, token, hub_checked, p, &who, &check);
  if (r == 1)
    return hello_accept(q, who.user, session, client, ", JupyterHub token");
  if (r == SL_EAUTH) {
    LOG_LIMITED(q->g, log_auth, SL_LOG_WARN, "hello refused: unknown token");
    return fail(q, SL_EAUTH, "unknown token (neither the gateway's nor one JupyterHub could issue)");
  }
  if (r < 0) {
    LOG_LIMITED(q->g, log_hello, SL_LOG_WARN, "hello refused: cannot ask JupyterHub: %s",
                sl_strerror(r));
    return fail(q, r, r == SL_ELIMIT
                          ? "the gateway is checking many tokens with JupyterHub; try again"
                          : "the gateway cannot check the token with JupyterHub");
  }
  *p = (struct pending){.used = true, .g = q->g, .check = check, .rid_len = q->rid_len,
                        .fd = q->fd, .id = q->id ? json_incref(q->id) : NULL};
  memcpy(p->rid, q->rid, q->rid_len);
  snprintf(p->session, sizeof p->session, "%s", session);
  snprintf(p->client, sizeof p->client, "%s", client);
}

static void on_session_get(struct req *q) {
  json_t *r = NULL;
  if (gw_store_session_get(q->g->env.store, q->c->user, q->c->session, &r) < 0)
    return fail(q, SL_ESQLITE, "cannot read the session");
  reply(q, r);
}

static void on_session_set(struct req *q) {
  int r = gw_store_session_set(q->g->env.store, q->c->user, q->c->session,
                               json_object_get(q->body, "vars"), json_object_get(q->body, "defs"),
                               json_object_get(q->body, "delete"));
  if (r == SL_ETYPE)
    return fail(q, r, "vars must be an object of {\"t\",\"v\"} values, defs a list of"
                      " {\"name\",\"kind\":\"model|data\",\"spec\":{}}, delete a list of names");
  if (r < 0)
    return fail(q, r, NULL);
  reply(q, NULL);
}

/* Copies the session's definition of name (kind model or data) into spec[field]. */
static int copy_def(struct req *q, json_t *spec, const char *field, const char *kind,
                    const char *name, char *ret_name, size_t size) {
  json_t *def = NULL;
  char msg[160];
  if (!name || !*name || strlen(name) >= size) {
    snprintf(msg, sizeof msg, "%s name missing", kind);
    fail(q, SL_ENAME, msg);
    return SL_ENAME;
  }
  if (gw_store_session_def(q->g->env.store, q->c->user, q->c->session, name, kind, &def) < 0) {
    snprintf(msg, sizeof msg, "no %s named \"%.64s\" in this session", kind, name);
    fail(q, SL_ENAME, msg);
    return SL_ENAME;
  }
  json_object_set_new(spec, field, def);
  snprintf(ret_name, size, "%s", name);
  return 0;
}

/* gpus and precision (DESIGN.md §8), checked at submit: a value the
 * training core cannot take, or more GPUs than any instance type of the
 * market offers, is refused at once rather than left to fail at placement
 * (or on a worker, which checks its own GPUs again). Sends the error reply
 * itself on failure. */
static int check_device_options(struct req *q, const json_t *opts) {
  const json_t *gpus = json_object_get(opts, "gpus"), *prec = json_object_get(opts, "precision");
  double want = gpus ? json_number_value(gpus) : 0;
  char msg[200];
  if (gpus && (!json_is_number(gpus) || want < 0 || want > 64 || want != (double)(int)want))
    return fail(q, SL_ECONFIG, "gpus must be a whole number from 0 to 64"), SL_ECONFIG;
  if (prec && (!json_is_string(prec) ||
               (strcmp(json_string_value(prec), "bf16") && strcmp(json_string_value(prec), "fp32"))))
    return fail(q, SL_ECONFIG, "precision must be bf16 or fp32"), SL_ECONFIG;
  if (want < 1)
    return 0;
  static struct gw_offer offers[MARKET_MAX];
  size_t n = gw_sched_market(q->g->env.sched, offers, MARKET_MAX);
  size_t most = 0;
  for (size_t i = 1; i < n; i++)
    if (offers[i].type.gpus > offers[most].type.gpus)
      most = i;
  if (!n || offers[most].type.gpus >= (int)want)
    return 0; /* no market to judge by yet: placement decides */
  snprintf(msg, sizeof msg, "no instance type offers %d GPUs (the most: %d, on %.64s)", (int)want,
           offers[most].type.gpus, offers[most].type.name);
  return fail(q, SL_ENAME, msg), SL_ENAME;
}

/* region=NAME: a region some offer of the market is in, checked at submit
 * so that a misspelt one is refused at once. Sends the error reply itself. */
static int check_region(struct req *q, const json_t *opts) {
  const json_t *v = json_object_get(opts, "region");
  char msg[256];
  if (!v)
    return 0;
  if (!json_is_string(v) || !json_string_length(v) || json_string_length(v) >= 32)
    return fail(q, SL_ETYPE, "region must be a region name (\"us-east-1\")"), SL_ETYPE;
  int r = gw_sched_check_region(q->g->env.sched, json_string_value(v), msg, sizeof msg);
  return r < 0 ? (fail(q, r, msg), r) : 0;
}

/* nodes=N (a gang of N instances): a whole number in 1..GW_GANG_MAX, for a
 * train job whose global batch the N ranks can share equally. Sends the
 * error reply itself. */
static int check_nodes(struct req *q, const char *kind, const json_t *opts) {
  char msg[192];
  int nodes = gw_place_nodes(opts);
  if (nodes < 0) {
    snprintf(msg, sizeof msg, "nodes must be a whole number from 1 to %d", GW_GANG_MAX);
    return fail(q, SL_ETYPE, msg), SL_ETYPE;
  }
  if (nodes > 1 && strcmp(kind, "train"))
    return fail(q, SL_ENOTSUP, "nodes=N applies to train jobs only"), SL_ENOTSUP;
  json_t *b = json_object_get(opts, "batch");
  if (json_is_object(b))
    b = json_object_get(b, "v"); /* a session value */
  /* a batch out of range is the worker's to refuse; only a sane whole number is divided */
  double bv = json_is_number(b) ? json_number_value(b) : 0;
  if (nodes > 1 && bv >= 1 && bv <= 1e9 && (int64_t)bv % nodes) {
    snprintf(msg, sizeof msg, "batch (%lld) must be a multiple of nodes (%d): each of the %d "
             "ranks trains on an equal share of the batch", (long long)json_number_value(b),
             nodes, nodes);
    return fail(q, SL_ECONFIG, msg), SL_ECONFIG;
  }
  return 0;
}

/* Fills j from the request; sends the error reply itself on failure. */
/* instance=TYPE names only types the user may run on ([group.NAME] or
 * [user.NAME] instance_types), checked at submit so that the refusal says
 * which are allowed. Sends the error reply itself. */
static int check_instance_types(struct req *q, const json_t *opts) {
  const char *allowed = gw_config_user_instance_types(q->g->env.cfg, q->c->user);
  if (!allowed || !opts)
    return 0;
  struct gw_job tmp = {.spec = json_pack("{s:O}", "options", opts)};
  struct gw_wants w;
  gw_place_wants(&tmp, &w);
  json_decref(tmp.spec);
  gw_place_allow(&w, allowed);
  char msg[1200];
  for (size_t i = 0; i < w.n_types; i++) {
    struct gw_wants only = w;
    only.n_types = 0;
    if (!gw_place_type_allowed(&only, w.types[i])) {
      snprintf(msg, sizeof msg, "instance type %s is not allowed for %s (allowed: %s)", w.types[i],
               q->c->user, allowed);
      return fail(q, SL_ECONFIG, msg), SL_ECONFIG;
    }
  }
  return 0;
}

static int build_job(struct req *q, struct gw_job *j) {
  const char *kind = sl_json_get_str(q->body, "kind", "");
  json_t *opts = json_object_get(q->body, "options");
  if (opts && !json_is_object(opts))
    return fail(q, SL_ETYPE, "options must be an object"), SL_ETYPE;
  if (strcmp(kind, "train") && strcmp(kind, "eval") && strcmp(kind, "sample") && strcmp(kind, "run"))
    return fail(q, SL_ENAME, "kind must be train, eval, sample or run"), SL_ENAME;
  int bad = check_device_options(q, opts);
  if (bad < 0 || (bad = check_region(q, opts)) < 0 || (bad = check_instance_types(q, opts)) < 0)
    return bad;
  snprintf(j->kind, sizeof j->kind, "%s", kind);
  snprintf(j->user, sizeof j->user, "%s", q->c->user);
  snprintf(j->session, sizeof j->session, "%s", q->c->session);
  j->spec = json_pack("{s:o}", "options", opts ? json_incref(opts) : json_object());
  const char *model = sl_json_get_str(q->body, "model", NULL);
  const char *data = sl_json_get_str(q->body, "data", NULL);
  if (!strcmp(kind, "run")) {
    const char *script = sl_json_get_str(q->body, "script", NULL);
    if (!script)
      return fail(q, SL_ENAME, "run needs a script"), SL_ENAME;
    json_object_set_new(j->spec, "script", json_string(script));
  } else {
    int r = copy_def(q, j->spec, "model", "model", model, j->model, sizeof j->model);
    if (!r && strcmp(kind, "sample"))
      r = copy_def(q, j->spec, "data", "data", data, j->data, sizeof j->data);
    if (r < 0)
      return r;
  }
  if (!strcmp(kind, "eval") || !strcmp(kind, "sample")) {
    json_t *sess = NULL;
    gw_store_session_get(q->g->env.store, q->c->user, q->c->session, &sess);
    json_t *m = json_object_get(json_object_get(sess, "models"), j->model);
    const char *ck = sl_json_get_str(m, "checkpoint", "");
    snprintf(j->ckpt_key, sizeof j->ckpt_key, "%s", ck);
    j->ckpt_step = sl_json_get_int(m, "step", 0);
    json_object_set_new(j->spec, "checkpoint", json_string(ck));
    json_decref(sess);
  }
  j->steps = sl_json_get_int(opts, "steps", 0);
  int r = check_nodes(q, kind, opts);
  int seeded = r == 0 ? gw_record_choose_seed(j) : 0;
  if (seeded < 0)
    fail(q, r = seeded, "options must be an object");
  char why[400];
  if (r == 0 && (r = gw_sched_deadline_check(q->g->env.sched, j, why, sizeof why)) < 0)
    fail(q, r, why);
  return r;
}

/* Submits j (taken) and keeps its run record (body taken); answers the request. */
static void submit_job(struct req *q, struct gw_job *j, json_t *body) {
  int r = gw_sched_submit(q->g->env.sched, j);
  if (r < 0) {
    fail(q, r, r == SL_ELIMIT ? "too many jobs queued" : gw_sched_refusal(q->g->env.sched));
    gw_job_done(j);
    free(j);
    json_decref(body);
    return;
  }
  char id[16];
  gw_job_id_str(j->id, id, sizeof id);
  if (!body || gw_store_record_put(q->g->env.store, j->id, body) < 0)
    sl_warn(T, "%s: its run record could not be written", id); /* the job runs all the same */
  json_decref(body);
  reply(q, json_pack("{s:s}", "job", id));
}

static void on_submit(struct req *q) {
  char why[200];
  if (q->g->env.budget && gw_budget_refuses(q->g->env.budget, q->c->user, why, sizeof why))
    return fail(q, SL_ESTATE, why);
  if (!q->g->env.budget && gw_ledger_budget_spent(q->g->env.ledger)) /* no keeper: [budget] alone */
    return fail(q, SL_ESTATE, "the monthly budget is spent ([budget] hard_cap)");
  struct gw_job *j = calloc(1, sizeof *j);
  if (!j)
    return fail(q, -ENOMEM, NULL);
  if (build_job(q, j) < 0) {
    gw_job_done(j);
    free(j);
    return;
  }
  /* the seed build_job chose, if any, is in the options: said by the body */
  const json_t *given = json_object_get(json_object_get(q->body, "options"), "seed");
  submit_job(q, j, gw_record_body_new(j, !given && json_object_get(
                                              json_object_get(j->spec, "options"), "seed")));
}

/* The run record of a job the client may see (its own; an admin any). */
static void on_record(struct req *q) {
  struct gw_job tmp, *j;
  bool live;
  if (!(j = user_job(q, &tmp, &live)))
    return;
  json_t *rec = NULL;
  int r = gw_record_load(q->g->env.store, j, &rec);
  if (!live)
    gw_job_done(&tmp);
  if (r < 0)
    return fail(q, r, "cannot read the job's record");
  reply(q, json_pack("{s:o}", "record", rec));
}

/* The same run again: the job's spec, definitions and seed, as a new job
 * that names the original (rerun_of). Only the job's own user may rerun it
 * (an admin too runs only their own: the run would spend its owner's
 * budget). The worker refuses the run when the data file's hash differs
 * from the one recorded, unless "force". */
static void on_rerun(struct req *q) {
  struct gw_job tmp, *orig;
  bool live;
  if (gw_ledger_budget_spent(q->g->env.ledger))
    return fail(q, SL_ESTATE, "the monthly budget is spent ([budget] hard_cap)");
  if (!(orig = user_job(q, &tmp, &live)))
    return;
  char id[16], msg[256];
  gw_job_id_str(orig->id, id, sizeof id);
  bool force = sl_json_get_bool(q->body, "force", false);
  json_t *body = NULL;
  struct gw_job *j = NULL;
  int r = 0;
  if (strcmp(orig->user, q->c->user)) {
    snprintf(msg, sizeof msg, "%s is %.64s's job: a user may rerun only their own jobs", id,
             orig->user);
    r = -EPERM;
  } else if ((r = gw_store_record_get(q->g->env.store, orig->id, &body)) < 0 && r != SL_ENAME) {
    snprintf(msg, sizeof msg, "cannot read the record of %s", id);
  } else if (!(j = calloc(1, sizeof *j))) {
    snprintf(msg, sizeof msg, "out of memory");
    r = -ENOMEM;
  } else if ((r = gw_record_rerun_job(orig, body, force, j, msg, sizeof msg)) >= 0 &&
             (r = gw_sched_deadline_check(q->g->env.sched, j, msg, sizeof msg)) >= 0) {
    json_t *nb = gw_record_body_rerun(gw_record_body_new(j, false), orig, body, force);
    if (json_object_get(body, "seed_from")) /* who chose the seed the rerun repeats */
      json_object_set(nb, "seed_from", json_object_get(body, "seed_from"));
    if (!live)
      gw_job_done(&tmp);
    json_decref(body);
    return submit_job(q, j, nb);
  }
  if (j)
    gw_job_done(j);
  free(j);
  json_decref(body);
  if (!live)
    gw_job_done(&tmp);
  fail(q, r, msg);
}

static void on_attach(struct req *q) {
  struct gw_job tmp, *j;
  bool live;
  if (!(j = user_job(q, &tmp, &live)))
    return;
  int64_t id = j->id, after = sl_json_get_int(q->body, "after", 0);
  reply(q, json_pack("{s:o}", "job", gw_job_summary(j)));
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

static void on_detach(struct req *q) {
  struct gw_attach *a = attach_find(q->c, gw_job_id_parse(sl_json_get_str(q->body, "job", NULL)));
  if (a)
    attach_remove(q->c, a);
  reply(q, NULL);
}

static void on_cancel(struct req *q) {
  struct gw_job tmp, *j;
  bool live;
  if (!(j = user_job(q, &tmp, &live)))
    return;
  if (!live) {
    char msg[96];
    snprintf(msg, sizeof msg, "job already %s", gw_job_state_name(tmp.state));
    gw_job_done(&tmp);
    return fail(q, SL_ESTATE, msg);
  }
  gw_sched_cancel(q->g->env.sched, j);
  reply(q, NULL);
}

static void on_jobs(struct req *q) {
  bool all = sl_json_get_bool(q->body, "all", false);
  struct gw_job *jobs = NULL;
  size_t n = 0;
  if (gw_store_jobs_list(q->g->env.store, whose(q), false, all ? 1000 : 50, &jobs, &n) < 0)
    return fail(q, SL_ESQLITE, NULL);
  json_t *arr = json_array();
  for (size_t i = 0; i < n; i++) {
    struct gw_job *live = gw_fleet_job(q->g->env.fleet, jobs[i].id);
    json_array_append_new(arr, gw_job_summary(live ? live : &jobs[i]));
  }
  gw_store_jobs_free(jobs, n);
  reply(q, json_pack("{s:o}", "jobs", arr));
}

static void on_logs(struct req *q) {
  struct gw_job tmp, *j;
  bool live;
  if (!(j = user_job(q, &tmp, &live)))
    return;
  int64_t id = j->id;
  if (!live)
    gw_job_done(&tmp);
  int64_t limit = sl_json_get_int(q->body, "limit", 1000);
  limit = limit < 1 ? 1 : limit > 10000 ? 10000 : limit;
  json_t *evs = NULL;
  bool more = false;
  if (gw_store_events(q->g->env.store, id, sl_json_get_int(q->body, "after", 0), limit, &evs, &more) < 0)
    return fail(q, SL_ESQLITE, NULL);
  reply(q, json_pack("{s:o,s:b}", "events", evs, "more", more));
}

static json_t *instance_json(const struct gw_inst *in) {
  char job[16] = "";
  if (in->row.job)
    gw_job_id_str(in->row.job, job, sizeof job);
  json_t *o = json_pack("{s:s,s:s,s:s,s:b,s:o,s:o,s:s,s:s,s:b,s:I}", "instance", in->row.id, "type",
                        in->row.type, "zone", in->row.zone, "spot", in->row.spot, "price_usd_per_hour",
                        sl_json_real(in->row.price_usd_per_hour), "on_demand_usd_per_hour",
                        sl_json_real(in->row.on_demand_usd_per_hour), "state", in->row.state, "job",
                        job, "registered", in->registered, "launched_us", (json_int_t)in->row.launched_us);
  /* what its worker found of its GPUs, and a mismatch with the catalog */
  if (o)
    gw_gpus_add_json(&in->found_gpus, o);
  if (o && in->gpu_warning[0])
    json_object_set_new(o, "gpu_warning", json_string(in->gpu_warning));
  return o;
}

static void on_status(struct req *q) {
  struct gw_kproto *g = q->g;
  const struct gw_config *cfg = g->env.cfg;
  json_t *workers = json_array();
  for (size_t i = 0; i < gw_fleet_n_insts(g->env.fleet); i++)
    if (inst_visible(q, gw_fleet_inst_at(g->env.fleet, i)))
      json_array_append_new(workers, instance_json(gw_fleet_inst_at(g->env.fleet, i)));
  /* counts of the jobs it may see, queued and live */
  size_t queued = gw_queue_len(g->env.queue), live = gw_fleet_n_jobs(g->env.fleet);
  if (!q->c->admin) {
    int64_t *ids = queued ? calloc(queued, sizeof *ids) : NULL;
    size_t n = ids ? gw_queue_order(g->env.queue, ids, queued) : 0;
    queued = live = 0;
    for (size_t i = 0; i < n; i++) {
      const struct gw_job *j = gw_fleet_job(g->env.fleet, ids[i]);
      queued += j && !strcmp(j->user, q->c->user);
    }
    free(ids);
    for (size_t i = 0; i < gw_fleet_n_jobs(g->env.fleet); i++)
      live += !strcmp(gw_fleet_job_at(g->env.fleet, i)->user, q->c->user);
  }
  char provs[256] = "";
  for (size_t i = 0; i < gw_sched_n_providers(g->env.sched); i++) {
    size_t len = strlen(provs);
    snprintf(provs + len, sizeof provs - len, "%s%s", len ? "," : "",
             gw_sched_provider_at(g->env.sched, i)->name);
  }
  double usd = 0, od = 0;
  gw_ledger_totals(g->env.ledger, NULL, gw_ledger_month_start_us(), &usd, &od);
  json_t *r = json_pack("{s:{s:s,s:i,s:I,s:s,s:s,s:s,s:s,s:b,s:I,s:I},s:o,"
                     "s:{s:o,s:o,s:o},s:{s:o,s:o,s:b}}",
                     "gateway", "version", SPOTLAB_VERSION, "pid", (int)getpid(), "started_us",
                     (json_int_t)g->env.started_us, "listen", cfg->listen, "workers", cfg->workers,
                     "state_dir", cfg->state_dir, "provider", provs,
                     "embedded", cfg->embedded, "queued", (json_int_t)queued,
                     "live_jobs", (json_int_t)live, "workers", workers, "idle",
                     "notebook_timeout_s",
                     sl_json_real((double)gw_config_notebook_timeout_us(cfg, q->c->user) / 1e6),
                     "worker_timeout_s",
                     sl_json_real((double)gw_config_worker_timeout_us(cfg, q->c->user) / 1e6),
                     "warn_before_s", sl_json_real((double)cfg->warn_before_us / 1e6), "budget",
                     "monthly_usd", sl_json_real(cfg->monthly_usd), "spent_usd", sl_json_real(usd),
                     "hard_cap", cfg->hard_cap);
  if (r && q->c->admin) { /* the gateway's own health, for whoever runs it */
    json_t *gwo = json_object_get(r, "gateway");
    size_t conns = 0;
    for (size_t i = 0; i < g->n_clients; i++)
      conns += g->clients[i].rid_len > 0;
    json_object_set_new(gwo, "clients", json_integer((json_int_t)conns));
    json_object_set_new(gwo, "log_dropped", json_integer((json_int_t)log_dropped(g)));
  }
  if (r && cfg->embedded) /* its own lifetime: [idle] gateway_timeout */
    json_object_set_new(json_object_get(r, "idle"), "gateway_timeout_s",
                        sl_json_real((double)cfg->gateway_timeout_us / 1e6));
  if (r) /* the state disk: full, or failing, with writes kept */
    json_object_set_new(r, "store", gw_sched_store_json(g->env.sched));
  reply(q, r);
}

static void on_instances(struct req *q) {
  json_t *arr = json_array();
  for (size_t i = 0; i < gw_fleet_n_insts(q->g->env.fleet); i++)
    if (inst_visible(q, gw_fleet_inst_at(q->g->env.fleet, i)))
      json_array_append_new(arr, instance_json(gw_fleet_inst_at(q->g->env.fleet, i)));
  reply(q, json_pack("{s:o}", "instances", arr));
}

/* One market of an offer as placement ranks it. */
static json_t *ranked_json(const struct gw_place_ranked *r, size_t rank) {
  json_t *o = json_pack("{s:I,s:o,s:o,s:s}", "rank", (json_int_t)rank, "usd_per_unit",
                        isinf(r->score.usd_per_unit) ? json_null()
                                                     : sl_json_real(r->score.usd_per_unit),
                        "efficiency", sl_json_real(r->score.efficiency), "why", r->score.why);
  if (o && r->score.held)
    json_object_set_new(o, "held", json_true());
  return o;
}

/* The market, each offer with its markets ranked as placement sees them
 * for gpus=N (no job: prior speeds), and the ranking itself, best first. */
static void on_market(struct req *q) {
  if (!gw_sched_n_providers(q->g->env.sched))
    return fail(q, SL_ENOTSUP, "no provider");
  static struct gw_offer offers[MARKET_MAX];
  static struct gw_place_ranked ranked[2 * MARKET_MAX];
  size_t n = gw_sched_market(q->g->env.sched, offers, MARKET_MAX);
  struct gw_wants w = {.spot = -1, .nodes = 1};
  w.gpus = (int)sl_json_get_int(q->body, "gpus", 0);
  snprintf(w.region, sizeof w.region, "%s", sl_json_get_str(q->body, "region", ""));
  gw_place_allow(&w, gw_config_user_instance_types(q->g->env.cfg, q->c->user));
  size_t nr = gw_sched_rank_market(q->g->env.sched, &w, offers, n, ranked, 2 * MARKET_MAX);
  json_t *arr = json_array(), *ranking = json_array();
  json_t *rows[MARKET_MAX] = {0};
  for (size_t i = 0; i < n; i++) {
    const struct gw_instance_type *t = &offers[i].type;
    if ((w.gpus && t->gpus < w.gpus) || (w.region[0] && strcmp(w.region, offers[i].region)) ||
        !gw_place_type_allowed(&w, t->name))
      continue;
    json_t *row = json_pack("{s:s,s:i,s:s,s:o,s:o,s:s,s:o,s:s,s:{}}", "type", t->name,
                            "gpus", t->gpus, "gpu_model", t->gpu_model,
                            "spot_usd_per_hour", sl_json_real(t->spot_usd_per_hour),
                            "on_demand_usd_per_hour", sl_json_real(t->on_demand_usd_per_hour),
                            "interruption", t->interruption ? t->interruption : "",
                            "mean_time_to_preempt_s", sl_json_real(t->mean_time_to_preempt_s),
                            "provider", offers[i].prov->name, "markets");
    if (!row)
      continue;
    if (t->zone[0])
      json_object_set_new(row, "zone", json_string(t->zone));
    if (offers[i].region[0])
      json_object_set_new(row, "region", json_string(offers[i].region));
    if (t->placement_score > 0) /* the cloud's capacity hint, 1..10 */
      json_object_set_new(row, "placement_score", json_integer(t->placement_score));
    if (t->unavailable_until_us > sl_time_real_us()) /* every zone refused it lately */
      json_object_set_new(row, "unavailable_until_us", json_integer(t->unavailable_until_us));
    json_array_append_new(arr, row);
    rows[i] = row;
  }
  for (size_t k = 0; k < nr; k++) {
    const struct gw_place_ranked *r = &ranked[k];
    const struct gw_offer *o = &offers[r->offer];
    if (!rows[r->offer])
      continue;
    json_t *m = ranked_json(r, k + 1);
    if (!m)
      continue;
    json_object_set_new(json_object_get(rows[r->offer], "markets"), r->spot ? "spot" : "on_demand",
                        json_deep_copy(m));
    json_t *u = json_object_get(m, "usd_per_unit");
    if (json_is_number(u) && !json_object_get(rows[r->offer], "usd_per_unit_of_work"))
      json_object_set(rows[r->offer], "usd_per_unit_of_work", u); /* its best market's */
    json_object_set_new(m, "type", json_string(o->type.name));
    json_object_set_new(m, "provider", json_string(o->prov->name));
    json_object_set_new(m, "market", json_string(r->spot ? "spot" : "on-demand"));
    json_object_set_new(m, "usd_per_hour", sl_json_real(r->spot ? o->type.spot_usd_per_hour
                                                                : o->type.on_demand_usd_per_hour));
    if (o->type.zone[0])
      json_object_set_new(m, "zone", json_string(o->type.zone));
    json_array_append_new(ranking, m);
  }
  reply(q, json_pack("{s:o,s:o,s:s}", "types", arr, "ranking", ranking, "unit",
                     "the work of one A10G GPU-hour (prior speeds)"));
}

static void on_cost(struct req *q) {
  double usd = 0, od = 0, musd = 0, mod = 0;
  gw_ledger_totals(q->g->env.ledger, whose(q), 0, &usd, &od);
  gw_ledger_totals(q->g->env.ledger, whose(q), gw_ledger_month_start_us(), &musd, &mod);
  struct gw_job *jobs = NULL;
  size_t n = 0;
  json_t *arr = json_array();
  if (gw_store_jobs_list(q->g->env.store, whose(q), false, 100, &jobs, &n) == 0) {
    for (size_t i = 0; i < n; i++) {
      struct gw_job *j = gw_fleet_job(q->g->env.fleet, jobs[i].id);
      j = j ? j : &jobs[i];
      char id[16];
      json_array_append_new(arr, json_pack("{s:s,s:s,s:s,s:o,s:o,s:o,s:o}", "job",
                                           gw_job_id_str(j->id, id, sizeof id), "user", j->user,
                                           "state",
                                           gw_job_state_name(j->state), "cost_usd",
                                           sl_json_real(j->cost_usd), "on_demand_usd",
                                           sl_json_real(j->on_demand_usd), "energy_kwh",
                                           sl_json_real(j->energy_kwh), "co2e_g",
                                           sl_json_real(j->co2e_g)));
    }
    gw_store_jobs_free(jobs, n);
  }
  double kwh = 0, co2e = 0; /* the carbon estimate of every attempt (carbon.h) */
  json_t *rows = NULL, *row;
  size_t k;
  if (gw_store_cost_by(q->g->env.store, GW_COST_BY_USER, whose(q), 0, 100000, &rows) == 0)
    json_array_foreach(rows, k, row) {
      kwh += sl_json_get_num(row, "energy_kwh", 0);
      co2e += sl_json_get_num(row, "co2e_g", 0);
    }
  json_decref(rows);
  reply(q, json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "spent_usd", sl_json_real(usd), "on_demand_usd",
                     sl_json_real(od), "saved_usd", sl_json_real(od - usd), "month_spent_usd",
                     sl_json_real(musd), "budget_usd", sl_json_real(q->g->env.cfg->monthly_usd),
                     "jobs", arr, "energy_kwh", sl_json_real(kwh), "co2e_g", sl_json_real(co2e)));
}

static void on_inject(struct req *q) {
  const char *action = sl_json_get_str(q->body, "action", "");
  const char *id = sl_json_get_str(q->body, "instance", "");
  struct gw_inst *in = gw_fleet_inst(q->g->env.fleet, id);
  if (strcmp(action, "preempt") && strcmp(action, "kill"))
    return fail(q, SL_ENAME, "action must be preempt or kill");
  if (!in || !inst_visible(q, in))
    return fail(q, SL_ENAME, "no such instance");
  double notice = sl_json_get_num(q->body, "notice_s", !strcmp(action, "kill") ? 0 : 120);
  int r = gw_sched_inject(q->g->env.sched, in, !strcmp(action, "kill"), notice);
  if (r == SL_ENOTSUP)
    return fail(q, r, "the provider cannot inject preemptions");
  if (r < 0)
    return fail(q, r, NULL);
  reply(q, NULL);
}

/* Budgets: the ones that apply to the client (every one for an admin);
 * with "set": {"scope","name","monthly_usd"}, an admin sets one live. */
static void on_budget(struct req *q) {
  struct gw_budget *b = q->g->env.budget;
  if (!b)
    return fail(q, SL_ENOTSUP, "this gateway keeps no budgets");
  json_t *set = json_object_get(q->body, "set");
  if (set) {
    if (!q->c->admin)
      return fail(q, -EPERM, "only an admin may set a budget");
    json_t *usd = json_object_get(set, "monthly_usd");
    if (!json_is_object(set) || !json_is_number(usd))
      return fail(q, SL_EWIRE, "set takes {\"scope\", \"name\", \"monthly_usd\": NUMBER}");
    char err[200];
    int r = gw_budget_set(b, sl_json_get_str(set, "scope", NULL), sl_json_get_str(set, "name", ""),
                          json_number_value(usd), q->c->user, err, sizeof err);
    if (r < 0)
      return fail(q, r == -EINVAL ? SL_EWIRE : r, err);
  }
  reply(q, gw_budget_json(b, q->c->admin ? NULL : q->c->user));
}

static void on_ping(struct req *q) {
  reply(q, json_pack("{s:I}", "time_us", (json_int_t)sl_time_real_us()));
}

/* Stops the gateway now, for its own user (embedded) or an admin: the
 * workers with no job are stopped, the loop ends after this turn and the
 * process exits once they are gone (gateway.c). A live job is never
 * stopped: without "force" the request is refused while there is one;
 * with it, each job keeps running on its worker, checkpointing as before,
 * and its worker re-registers when the gateway starts again. */
static void on_shutdown(struct req *q) {
  struct gw_kproto *g = q->g;
  if (!q->c->admin)
    return fail(q, -EPERM, "only an admin may stop a shared gateway");
  size_t live = gw_fleet_n_jobs(g->env.fleet);
  bool force = sl_json_get_bool(q->body, "force", false);
  json_t *jobs = json_array();
  for (size_t i = 0; i < live; i++) {
    const struct gw_job *j = gw_fleet_job_at(g->env.fleet, i);
    char id[16];
    json_array_append_new(jobs, json_pack("{s:s,s:s,s:s}", "job", gw_job_id_str(j->id, id, sizeof id),
                                          "user", j->user, "state", gw_job_state_name(j->state)));
  }
  if (live && !force) {
    char msg[160];
    snprintf(msg, sizeof msg, "%zu job%s still live; wait for %s, cancel %s, or stop with force"
             " (the jobs keep running on their workers)", live, live == 1 ? " is" : "s are",
             live == 1 ? "it" : "them", live == 1 ? "it" : "them");
    json_decref(jobs);
    return fail(q, SL_ESTATE, msg);
  }
  size_t stopped = gw_idle_stop_workers(g->env.idle, "the gateway was asked to stop");
  sl_info(T, "%s asked the gateway to stop: %zu idle workers stopped, %zu live jobs keep their"
          " workers", q->c->user, stopped, live);
  reply(q, json_pack("{s:i,s:I,s:I,s:o}", "pid", (int)getpid(), "workers_stopped",
                     (json_int_t)stopped, "workers_left", (json_int_t)gw_fleet_n_insts(g->env.fleet),
                     "jobs", jobs));
  if (g->env.loop)
    gw_loop_stop(g->env.loop);
}

size_t gw_kproto_n_clients(struct gw_kproto *g) {
  drain_closed(g);
  size_t n = 0;
  for (size_t i = 0; i < g->n_clients; i++)
    n += g->clients[i].rid_len > 0;
  return n;
}

static const struct {
  const char *type;
  void (*fn)(struct req *q);
} handlers[] = {
  {"session.get", on_session_get}, {"session.set", on_session_set}, {"submit", on_submit},
  {"attach", on_attach}, {"detach", on_detach}, {"cancel", on_cancel}, {"jobs", on_jobs},
  {"logs", on_logs}, {"status", on_status}, {"instances", on_instances}, {"market", on_market},
  {"cost", on_cost}, {"inject", on_inject}, {"ping", on_ping},
  {"shutdown", on_shutdown}, {"budget", on_budget}, {"record", on_record}, {"rerun", on_rerun},
};

static void dispatch(struct req *q) {
  q->c = NULL;
  const char *type = sl_json_get_str(q->body, "type", NULL);
  if (!type)
    return fail(q, SL_EWIRE, "missing \"type\"");
  if (!strcmp(type, "hello"))
    return on_hello(q);
  q->c = client_find(q->g, q->rid, q->rid_len);
  if (q->c && !client_auth_ok(q->c, sl_json_get_str(q->body, "auth", NULL))) {
    /* the routing id said hello, but the peer behind it now does not hold
     * its secret: the connection that said hello is gone */
    client_forget(q->c);
    q->c = NULL;
  }
  if (!q->c)
    return fail(q, SL_EAUTH, "say hello with a valid token first");
  if (q->fd >= 0)
    q->c->fd = q->fd; /* the secret's holder, reconnected */
  q->c->last_mono_us = sl_time_mono_us();
  gw_idle_touch(q->g->env.idle, q->c->user, q->c->session); /* every request is notebook activity */
  if (q->c->session[0] && strcmp(type, "session.get"))
    gw_store_session_touch(q->g->env.store, q->c->user, q->c->session, sl_time_real_us());
  for (size_t i = 0; i < sizeof handlers / sizeof *handlers; i++)
    if (!strcmp(handlers[i].type, type))
      return handlers[i].fn(q);
  char msg[96];
  snprintf(msg, sizeof msg, "unknown request type \"%.40s\"", type);
  fail(q, SL_ENAME, msg);
}

static void handle(struct gw_kproto *g, const uint8_t *rid, size_t rid_len, int fd,
                   const json_t *body) {
  json_t *id = json_object_get(body, "id");
  struct req q = {.g = g, .rid = rid, .rid_len = rid_len, .fd = fd, .body = body,
                  .id = json_is_integer(id) ? id : NULL};
  int64_t t0 = sl_time_mono_us();
  dispatch(&q);
  /* the label is a type the protocol knows: a peer cannot grow the set */
  const char *type = sl_json_get_str(body, "type", "");
  bool known = !strcmp(type, "hello");
  for (size_t i = 0; !known && i < sizeof handlers / sizeof *handlers; i++)
    known = !strcmp(handlers[i].type, type);
  gw_metrics_kreq_observe(&g->times, known ? type : "other", (double)(sl_time_mono_us() - t0) / 1e6);
}

const struct gw_metrics_kreq *gw_kproto_request_times(const struct gw_kproto *g) {
  return &g->times;
}

void gw_kproto_handle(struct gw_kproto *g, const uint8_t *rid, size_t rid_len, const json_t *body) {
  handle(g, rid, rid_len, -1, body);
}

void gw_kproto_recv(struct gw_kproto *g, void *sock) {
  struct sl_msg m;
  sl_msg_init(&m, (struct sl_limits){GW_FRAMES_MAX, GW_FRAME_MAX, 8u * GW_FRAME_MAX});
  drain_closed(g); /* closed connections before any message that came after them */
  int r = sl_zmq_recv(sock, &m, ZMQ_DONTWAIT);
  if (r == -EAGAIN || m.n == 0) {
    if (r < 0 && r != -EAGAIN)
      LOG_LIMITED(g, log_wire, SL_LOG_WARN, "dropped a message: %s", sl_strerror(r));
    sl_msg_done(&m);
    return;
  }
  const uint8_t *rid = m.frames[0].data;
  size_t rid_len = m.frames[0].len;
  json_t *body = NULL;
  char why[160] = "";
  if (r == SL_ELIMIT) {
    snprintf(why, sizeof why, "message over the limits (%d frames, %u bytes per frame)",
             GW_FRAMES_MAX, GW_FRAME_MAX);
  } else if (m.n != 2) {
    r = SL_EWIRE;
    snprintf(why, sizeof why, "expected one JSON frame, got %zu", m.n - 1);
  } else {
    r = sl_json_parse((const char *)m.frames[1].data, m.frames[1].len, GW_JSON_DEPTH, &body, why,
                      sizeof why);
    if (r == 0 && !json_is_object(body)) {
      r = SL_EWIRE;
      snprintf(why, sizeof why, "a message must be a JSON object");
    }
  }
  if (r < 0) {
    LOG_LIMITED(g, log_wire, SL_LOG_WARN, "malformed request: %s", why);
    json_t *id = NULL;
    if (body)
      id = json_object_get(body, "id");
    reply_err(g, rid, rid_len, id, r, why);
  } else {
    handle(g, rid, rid_len, m.src_fd, body);
  }
  json_decref(body);
  sl_msg_done(&m);
}

void gw_kproto_sink(void *data, const struct gw_bus_event *ev) {
  struct gw_kproto *g = data;
  if (ev->kind == GW_BUS_JOB_EVENT && ev->job && ev->event)
    fanout(g, ev->job->id, ev->event);
  else if (ev->kind == GW_BUS_NOTICE && ev->msg)
    notify(g, ev->user, ev->session, ev->msg);
}

static int64_t replay_timer(struct gw_loop *l, int64_t id, int64_t now_us, void *data) {
  (void)l; (void)id;
  struct gw_kproto *g = data;
  replay_all(g, now_us);
  return g->next_replay_mono_us;
}

struct gw_kproto *gw_kproto_new(const struct gw_kproto_env *env) {
  struct gw_kproto *g = calloc(1, sizeof *g);
  if (!g)
    return NULL;
  g->env = *env;
  g->next_replay_mono_us = INT64_MAX;
  /* a peer's input logs at most 10 lines a second per site after a burst of 20 */
  g->log_wire = g->log_auth = g->log_hello = SL_LOG_LIMIT(10, 20);
  g->cap_clients = CLIENTS_FIRST;
  g->clients = calloc(g->cap_clients, sizeof *g->clients);
  if (!g->clients || sodium_init() < 0)
    return gw_kproto_free(g);
  if (env->loop && ((g->replay_timer = gw_loop_add_timer(env->loop, INT64_MAX, replay_timer, g)) < 0 ||
                    (g->flush_timer = gw_loop_add_timer(env->loop, INT64_MAX, flush_timer, g)) < 0))
    return gw_kproto_free(g);
  return g;
}

struct gw_kproto *gw_kproto_free(struct gw_kproto *g) {
  if (!g)
    return NULL;
  if (g->env.loop && g->replay_timer > 0)
    gw_loop_del_timer(g->env.loop, g->replay_timer);
  if (g->env.loop && g->flush_timer > 0)
    gw_loop_del_timer(g->env.loop, g->flush_timer);
  for (size_t i = 0; i < PENDING_MAX; i++)
    if (g->pending[i].used) {
      gw_hub_cancel(g->env.hub, g->pending[i].check);
      pending_drop(&g->pending[i]);
    }
  if (g->clients)
    sodium_memzero(g->clients, g->cap_clients * sizeof *g->clients);
  free(g->clients);
  free(g);
  return NULL;
}
