/* The kernel/CLI protocol (protocols.md §1).
 *
 * A client is its ZeroMQ routing id; it must say hello with a valid token
 * before anything else. Every request is answered exactly once with a reply
 * carrying its id; malformed input gets an error reply naming the problem
 * and the loop goes on. A user sees only their own jobs: another user's job
 * answers SL_ENAME, word for word as a job that does not exist. The client
 * table is bounded; the least recently active client is forgotten first. */
#include "kproto.h"

#include "config.h"
#include "loop.h"
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
#include <zmq.h>

#define GW_MAX_CLIENTS 1024
#define GW_MAX_ATTACH 64
#define GW_FRAMES_MAX 8
#define MARKET_MAX 256

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

struct gw_client {
  uint8_t rid[GW_RID_MAX];
  size_t rid_len;
  bool authed;
  char user[64];
  char session[256];
  struct gw_attach attached[GW_MAX_ATTACH];
  size_t n_attached;
  int64_t last_mono_us;
  int64_t replay_at_mono_us;    /* when to go on replaying; 0: nothing to replay */
  int64_t replay_backoff_us;    /* grows while the client reads nothing */
};

struct gw_kproto {
  struct gw_kproto_env env;
  struct gw_client *clients;
  size_t n_clients;
  int64_t replay_timer;
  int64_t next_replay_mono_us;  /* earliest replay_at_mono_us of any client; INT64_MAX none */
};

struct req {
  struct gw_kproto *g;
  struct gw_client *c;          /* NULL before hello */
  const uint8_t *rid;
  size_t rid_len;
  const json_t *body;
  json_t *id;                   /* echoed as "re" (borrowed; null if absent) */
};

static int send_to(struct gw_kproto *g, const uint8_t *rid, size_t rid_len, const json_t *msg) {
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
  send_to(q->g, q->rid, q->rid_len, m);
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
  for (size_t i = 0; i < g->n_clients; i++)
    if (g->clients[i].rid_len == len && !memcmp(g->clients[i].rid, rid, len))
      return &g->clients[i];
  return NULL;
}

static struct gw_client *client_new(struct gw_kproto *g, const uint8_t *rid, size_t len) {
  struct gw_client *c = client_find(g, rid, len);
  if (!c && g->n_clients < GW_MAX_CLIENTS)
    c = &g->clients[g->n_clients++];
  if (!c) { /* full: reuse the least recently active entry */
    c = &g->clients[0];
    for (size_t i = 1; i < g->n_clients; i++)
      if (g->clients[i].last_mono_us < c->last_mono_us)
        c = &g->clients[i];
  }
  memset(c, 0, sizeof *c);
  memcpy(c->rid, rid, len);
  c->rid_len = len;
  return c;
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
      if ((r = g->env.send(g->env.send_ctx, c->rid, c->rid_len, e)) < 0)
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
      for (size_t m = 0; m < c->n_attached; m++) /* the client is gone */
        c->attached[m].replaying = false;
      break;
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
    if (c->replay_at_mono_us && c->replay_at_mono_us <= now_us)
      replay_round(g, c, now_us);
    else if (c->replay_at_mono_us && c->replay_at_mono_us < g->next_replay_mono_us)
      g->next_replay_mono_us = c->replay_at_mono_us;
  }
}

static void fanout(struct gw_kproto *g, int64_t job, const json_t *event) {
  for (size_t i = 0; i < g->n_clients; i++) {
    struct gw_client *c = &g->clients[i];
    struct gw_attach *a = attach_find(c, job);
    if (!a || a->replaying)
      continue; /* a replay reaches this event in the store */
    int r = g->env.send(g->env.send_ctx, c->rid, c->rid_len, event);
    if (r == -EAGAIN) {
      /* the client's queue is full: go on from the store once it reads */
      a->replaying = true;
      a->replay_after = sl_json_get_int(event, "seq", 1) - 1;
      if (!c->replay_at_mono_us) {
        c->replay_backoff_us = REPLAY_BACKOFF_MIN_US;
        replay_due(g, c, sl_time_mono_us() + REPLAY_BACKOFF_MIN_US);
      }
    } else if (r < 0) {
      sl_debug("gateway.zmq", "event dropped: %s", sl_strerror(r));
    }
  }
}

static void notify(struct gw_kproto *g, const char *user, const char *session, const json_t *msg) {
  for (size_t i = 0; i < g->n_clients; i++) {
    struct gw_client *c = &g->clients[i];
    if (c->authed && !strcmp(c->user, user) && !strcmp(c->session, session))
      send_to(g, c->rid, c->rid_len, msg);
  }
}

/* Loads job id if it belongs to the client's user: live copy or a store copy in *tmp. */
static struct gw_job *user_job(struct req *q, struct gw_job *tmp, bool *ret_live) {
  int64_t id = gw_job_id_parse(sl_json_get_str(q->body, "job", NULL));
  struct gw_job *j = id > 0 ? gw_fleet_job(q->g->env.fleet, id) : NULL;
  *ret_live = j != NULL;
  if (!j && id > 0 && gw_store_job_get(q->g->env.store, id, tmp) == 0)
    j = tmp;
  if (j && strcmp(j->user, q->c->user)) {
    if (j == tmp)
      gw_job_done(tmp);
    j = NULL;
  }
  if (!j)
    fail(q, SL_ENAME, "no such job");
  return j;
}

static void on_hello(struct req *q) {
  const char *token = sl_json_get_str(q->body, "token", NULL);
  const char *session = sl_json_get_str(q->body, "session", "");
  char user[64], hash[SL_HMAC_HEX_LEN + 1];
  if (!token || !*token || strlen(token) > 1024)
    return fail(q, SL_EAUTH, "a token is required");
  if (strlen(session) >= sizeof q->c->session)
    return fail(q, SL_ELIMIT, "session name too long");
  sl_sha256_hex(token, strlen(token), hash);
  if (gw_store_user_by_token(q->g->env.store, hash, user, sizeof user) < 0) {
    sl_warn(T, "hello refused: unknown token");
    return fail(q, SL_EAUTH, "unknown token");
  }
  struct gw_client *c = client_new(q->g, q->rid, q->rid_len);
  c->authed = true;
  snprintf(c->user, sizeof c->user, "%s", user);
  snprintf(c->session, sizeof c->session, "%s", session);
  c->last_mono_us = sl_time_mono_us();
  if (*session) {
    gw_store_session_touch(q->g->env.store, user, session, sl_time_real_us());
    gw_idle_touch(q->g->env.idle, user, session);
  }
  sl_info(T, "hello from %s (%s, session \"%s\")", user,
          sl_json_get_str(q->body, "client", "client"), session);
  reply(q, json_pack("{s:s,s:s,s:s}", "user", user, "session", session, "gateway",
                     SPOTLAB_VERSION));
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
static int build_job(struct req *q, struct gw_job *j) {
  const char *kind = sl_json_get_str(q->body, "kind", "");
  json_t *opts = json_object_get(q->body, "options");
  if (opts && !json_is_object(opts))
    return fail(q, SL_ETYPE, "options must be an object"), SL_ETYPE;
  if (strcmp(kind, "train") && strcmp(kind, "eval") && strcmp(kind, "sample") && strcmp(kind, "run"))
    return fail(q, SL_ENAME, "kind must be train, eval, sample or run"), SL_ENAME;
  int bad = check_device_options(q, opts);
  if (bad < 0 || (bad = check_region(q, opts)) < 0)
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
  char why[400];
  if (r == 0 && (r = gw_sched_deadline_check(q->g->env.sched, j, why, sizeof why)) < 0)
    fail(q, r, why);
  return r;
}

static void on_submit(struct req *q) {
  if (gw_ledger_budget_spent(q->g->env.ledger))
    return fail(q, SL_ESTATE, "the monthly budget is spent ([budget] hard_cap)");
  struct gw_job *j = calloc(1, sizeof *j);
  if (!j)
    return fail(q, -ENOMEM, NULL);
  if (build_job(q, j) < 0) {
    gw_job_done(j);
    free(j);
    return;
  }
  int r = gw_sched_submit(q->g->env.sched, j);
  if (r < 0) {
    fail(q, r, r == SL_ELIMIT ? "too many jobs queued" : gw_sched_refusal(q->g->env.sched));
    gw_job_done(j);
    free(j);
    return;
  }
  char id[16];
  reply(q, json_pack("{s:s}", "job", gw_job_id_str(j->id, id, sizeof id)));
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
  if (gw_store_jobs_list(q->g->env.store, q->c->user, false, all ? 1000 : 50, &jobs, &n) < 0)
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
    json_array_append_new(workers, instance_json(gw_fleet_inst_at(g->env.fleet, i)));
  char provs[256] = "";
  for (size_t i = 0; i < gw_sched_n_providers(g->env.sched); i++) {
    size_t len = strlen(provs);
    snprintf(provs + len, sizeof provs - len, "%s%s", len ? "," : "",
             gw_sched_provider_at(g->env.sched, i)->name);
  }
  double usd = 0, od = 0;
  gw_ledger_totals(g->env.ledger, NULL, gw_ledger_month_start_us(), &usd, &od);
  json_t *st = json_pack("{s:{s:s,s:i,s:I,s:s,s:s,s:s,s:s,s:b,s:I,s:I},s:o,"
                     "s:{s:o,s:o,s:o},s:{s:o,s:o,s:b}}",
                     "gateway", "version", SPOTLAB_VERSION, "pid", (int)getpid(), "started_us",
                     (json_int_t)g->env.started_us, "listen", cfg->listen, "workers", cfg->workers,
                     "state_dir", cfg->state_dir, "provider", provs,
                     "embedded", cfg->embedded, "queued", (json_int_t)gw_queue_len(g->env.queue),
                     "live_jobs", (json_int_t)gw_fleet_n_jobs(g->env.fleet), "workers", workers, "idle",
                     "notebook_timeout_s",
                     sl_json_real((double)gw_config_notebook_timeout_us(cfg, q->c->user) / 1e6),
                     "worker_timeout_s",
                     sl_json_real((double)gw_config_worker_timeout_us(cfg, q->c->user) / 1e6),
                     "warn_before_s", sl_json_real((double)cfg->warn_before_us / 1e6), "budget",
                     "monthly_usd", sl_json_real(cfg->monthly_usd), "spent_usd", sl_json_real(usd),
                     "hard_cap", cfg->hard_cap);
  if (st) /* the state disk: full, or failing, with writes kept */
    json_object_set_new(st, "store", gw_sched_store_json(g->env.sched));
  reply(q, st);
}

static void on_instances(struct req *q) {
  json_t *arr = json_array();
  for (size_t i = 0; i < gw_fleet_n_insts(q->g->env.fleet); i++)
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
  size_t nr = gw_sched_rank_market(q->g->env.sched, &w, offers, n, ranked, 2 * MARKET_MAX);
  json_t *arr = json_array(), *ranking = json_array();
  json_t *rows[MARKET_MAX] = {0};
  for (size_t i = 0; i < n; i++) {
    const struct gw_instance_type *t = &offers[i].type;
    if ((w.gpus && t->gpus < w.gpus) || (w.region[0] && strcmp(w.region, offers[i].region)))
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
  gw_ledger_totals(q->g->env.ledger, q->c->user, 0, &usd, &od);
  gw_ledger_totals(q->g->env.ledger, q->c->user, gw_ledger_month_start_us(), &musd, &mod);
  struct gw_job *jobs = NULL;
  size_t n = 0;
  json_t *arr = json_array();
  if (gw_store_jobs_list(q->g->env.store, q->c->user, false, 100, &jobs, &n) == 0) {
    for (size_t i = 0; i < n; i++) {
      struct gw_job *j = gw_fleet_job(q->g->env.fleet, jobs[i].id);
      j = j ? j : &jobs[i];
      char id[16];
      json_array_append_new(arr, json_pack("{s:s,s:s,s:o,s:o}", "job",
                                           gw_job_id_str(j->id, id, sizeof id), "state",
                                           gw_job_state_name(j->state), "cost_usd",
                                           sl_json_real(j->cost_usd), "on_demand_usd",
                                           sl_json_real(j->on_demand_usd)));
    }
    gw_store_jobs_free(jobs, n);
  }
  reply(q, json_pack("{s:o,s:o,s:o,s:o,s:o,s:o}", "spent_usd", sl_json_real(usd), "on_demand_usd",
                     sl_json_real(od), "saved_usd", sl_json_real(od - usd), "month_spent_usd",
                     sl_json_real(musd), "budget_usd", sl_json_real(q->g->env.cfg->monthly_usd),
                     "jobs", arr));
}

static void on_inject(struct req *q) {
  const char *action = sl_json_get_str(q->body, "action", "");
  const char *id = sl_json_get_str(q->body, "instance", "");
  struct gw_inst *in = gw_fleet_inst(q->g->env.fleet, id);
  if (strcmp(action, "preempt") && strcmp(action, "kill"))
    return fail(q, SL_ENAME, "action must be preempt or kill");
  if (!in || strcmp(in->row.user, q->c->user))
    return fail(q, SL_ENAME, "no such instance");
  double notice = sl_json_get_num(q->body, "notice_s", !strcmp(action, "kill") ? 0 : 120);
  int r = gw_sched_inject(q->g->env.sched, in, !strcmp(action, "kill"), notice);
  if (r == SL_ENOTSUP)
    return fail(q, r, "the provider cannot inject preemptions");
  if (r < 0)
    return fail(q, r, NULL);
  reply(q, NULL);
}

static void on_ping(struct req *q) {
  reply(q, json_pack("{s:I}", "time_us", (json_int_t)sl_time_real_us()));
}

static const struct {
  const char *type;
  void (*fn)(struct req *q);
} handlers[] = {
  {"session.get", on_session_get}, {"session.set", on_session_set}, {"submit", on_submit},
  {"attach", on_attach}, {"detach", on_detach}, {"cancel", on_cancel}, {"jobs", on_jobs},
  {"logs", on_logs}, {"status", on_status}, {"instances", on_instances}, {"market", on_market},
  {"cost", on_cost}, {"inject", on_inject}, {"ping", on_ping},
};

static void dispatch(struct req *q) {
  q->c = NULL;
  const char *type = sl_json_get_str(q->body, "type", NULL);
  if (!type)
    return fail(q, SL_EWIRE, "missing \"type\"");
  if (!strcmp(type, "hello"))
    return on_hello(q);
  q->c = client_find(q->g, q->rid, q->rid_len);
  if (!q->c || !q->c->authed)
    return fail(q, SL_EAUTH, "say hello with a valid token first");
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

void gw_kproto_handle(struct gw_kproto *g, const uint8_t *rid, size_t rid_len, const json_t *body) {
  json_t *id = json_object_get(body, "id");
  struct req q = {.g = g, .rid = rid, .rid_len = rid_len, .body = body,
                  .id = json_is_integer(id) ? id : NULL};
  dispatch(&q);
}

void gw_kproto_recv(struct gw_kproto *g, void *sock) {
  struct sl_msg m;
  sl_msg_init(&m, (struct sl_limits){GW_FRAMES_MAX, GW_FRAME_MAX, 8u * GW_FRAME_MAX});
  int r = sl_zmq_recv(sock, &m, ZMQ_DONTWAIT);
  if (r == -EAGAIN || m.n == 0) {
    if (r < 0 && r != -EAGAIN)
      sl_warn(T, "dropped a message: %s", sl_strerror(r));
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
    sl_warn(T, "malformed request: %s", why);
    json_t *id = NULL;
    if (body)
      id = json_object_get(body, "id");
    reply_err(g, rid, rid_len, id, r, why);
  } else {
    gw_kproto_handle(g, rid, rid_len, body);
  }
  json_decref(body);
  sl_msg_done(&m);
}

void gw_kproto_sink(void *data, const struct gw_bus_event *ev) {
  struct gw_kproto *g = data;
  if (ev->kind == GW_BUS_JOB_EVENT && ev->job && ev->event)
    fanout(g, ev->job->id, ev->event);
  else if (ev->kind == GW_BUS_NOTICE && ev->user && ev->session && ev->msg)
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
  g->clients = calloc(GW_MAX_CLIENTS, sizeof *g->clients);
  if (!g->clients)
    return gw_kproto_free(g);
  if (env->loop && (g->replay_timer = gw_loop_add_timer(env->loop, INT64_MAX, replay_timer, g)) < 0)
    return gw_kproto_free(g);
  return g;
}

struct gw_kproto *gw_kproto_free(struct gw_kproto *g) {
  if (!g)
    return NULL;
  if (g->env.loop && g->replay_timer > 0)
    gw_loop_del_timer(g->env.loop, g->replay_timer);
  free(g->clients);
  free(g);
  return NULL;
}
