/* The kernel/CLI protocol (protocols.md §1): the handler's life, reading
 * messages, replies, dispatch, and the requests about the notebook session,
 * jobs, instances, the market, cost, budgets and the gateway itself. The
 * client table is kclients.c, hellos waiting for JupyterHub khub.c, event
 * delivery kevents.c, submit and reruns ksubmit.c (kproto_int.h is what
 * they share).
 *
 * Every request is answered exactly once with a reply carrying its id;
 * malformed input gets an error reply naming the problem and the loop goes
 * on; what input from the world makes the gateway log is rate-limited per
 * log site, and what was dropped is counted. A user sees only their own jobs
 * and instances (access.h): another user's job answers SL_ENAME, word for
 * word as a job that does not exist; an admin ([user.NAME] admin = yes) sees
 * every user's. */
#include "kproto_int.h"

#include "budget.h"

#include "config.h"
#include "loop.h"
#include "purge.h"
#include "zmsg.h"
#include "sl_err.h"
#include "sl_frame.h"
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

#define GW_FRAMES_MAX 8

#define T GW_KPROTO_TOPIC

void gw_kproto_arm_flush(struct gw_kproto *g) {
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

static int send_to(struct gw_kproto *g, const uint8_t *rid, size_t rid_len, const json_t *msg) {
  gw_kproto_drain(g);
  int r = g->env.send(g->env.send_ctx, rid, rid_len, msg);
  if (r < 0)
    sl_debug("gateway.zmq", "send dropped: %s", sl_strerror(r));
  return r;
}

void gw_kproto_reply(struct gw_kreq *q, json_t *fields) {
  json_t *m = fields ? fields : json_object();
  json_object_set_new(m, "type", json_string("reply"));
  json_object_set(m, "re", q->id ? q->id : json_null());
  json_object_set_new(m, "ok", json_true());
  gw_kproto_drain(q->g);
  if (q->c && !q->c->rid_len)
    ; /* its connection closed meanwhile: the routing id may be another's */
  else if (send_to(q->g, q->rid, q->rid_len, m) == -EHOSTUNREACH && q->c)
    gw_kproto_client_forget(q->c);
  json_decref(m);
}

static void reply_err(struct gw_kproto *g, const uint8_t *rid, size_t rid_len, json_t *id, int code,
                      const char *msg) {
  char fixed[1024];
  msg = sl_utf8_text(msg, fixed, sizeof fixed); /* text from outside, cut inside a character */
  json_t *m = json_pack("{s:s,s:O,s:b,s:{s:s,s:s}}", "type", "reply", "re", id ? id : json_null(),
                        "ok", 0, "error", "code", sl_errname(code), "message", msg);
  send_to(g, rid, rid_len, m);
  json_decref(m);
}

void gw_kproto_fail(struct gw_kreq *q, int code, const char *msg) {
  reply_err(q->g, q->rid, q->rid_len, q->id, code, msg ? msg : sl_strerror(code));
}

struct gw_job *gw_kproto_user_job(struct gw_kreq *q, struct gw_job *tmp, bool *ret_live) {
  struct gw_job *j = NULL;
  int64_t id = gw_job_id_parse(sl_json_get_str(q->body, "job", NULL));
  if (gw_access_job(&q->c->who, q->g->env.fleet, q->g->env.store, id, tmp, &j, ret_live) < 0) {
    gw_kproto_fail(q, SL_ENAME, "no such job"); /* another user's too, word for word */
    return NULL;
  }
  return j;
}

static void on_session_get(struct gw_kreq *q) {
  json_t *r = NULL;
  if (gw_store_session_get(q->g->env.store, q->c->who.user, q->c->session, &r) < 0)
    return gw_kproto_fail(q, SL_ESQLITE, "cannot read the session");
  gw_kproto_reply(q, r);
}

static void on_session_set(struct gw_kreq *q) {
  int r = gw_store_session_set(q->g->env.store, q->c->who.user, q->c->session,
                               json_object_get(q->body, "vars"), json_object_get(q->body, "defs"),
                               json_object_get(q->body, "delete"));
  if (r == SL_ETYPE)
    return gw_kproto_fail(q, r, "vars must be an object of {\"t\",\"v\"} values, defs a list of"
                                " {\"name\",\"kind\":\"model|data\",\"spec\":{}}, delete a list of names");
  char why[200];
  if (r == SL_ELIMIT) {
    snprintf(why, sizeof why, "the session's variables and definitions would hold more than %d KiB "
             "(a notebook reads its session whole); nothing was saved", GW_SESSION_BYTES_MAX / 1024);
    return gw_kproto_fail(q, r, why);
  }
  if (r == -EDQUOT) {
    snprintf(why, sizeof why, "your sessions' variables and definitions would hold more than %d MiB; nothing "
             "was saved: delete sessions you no longer need (spotlab sessions rm)",
             GW_USER_SESSIONS_BYTES_MAX / (1024 * 1024));
    return gw_kproto_fail(q, r, why);
  }
  if (r < 0)
    return gw_kproto_fail(q, r, NULL);
  if (gw_store_sync(q->g->env.store) < 0) /* the kernel forgets its journal of names at the answer */
    return gw_kproto_fail(q, SL_ESQLITE, "the session was saved but could not be flushed to disk");
  gw_kproto_reply(q, NULL);
}

/* Whose sessions (or stored files) a request is about: the client's own,
 * or for an admin the "user" it names (a departed user's, say). NULL after
 * a failure reply: another user named by a client who is no admin, who may
 * not "what" (say, "delete another user's sessions"). */
const char *gw_kproto_whose(struct gw_kreq *q, const char *what) {
  const json_t *named = json_object_get(q->body, "user");
  const char *user = sl_json_get_whole_str(q->body, "user", NULL);
  if (named && !user) {
    gw_kproto_fail(q, SL_ETYPE, "\"user\" must name a user");
    return NULL;
  }
  if (!user || !strcmp(user, q->c->who.user))
    return q->c->who.user;
  if (!q->c->who.admin) {
    char msg[120];
    snprintf(msg, sizeof msg, "only an admin may %s", what);
    gw_kproto_fail(q, -EPERM, msg);
    return NULL;
  }
  if (!*user || strlen(user) >= sizeof q->c->who.user) {
    gw_kproto_fail(q, SL_ETYPE, "\"user\" must name a user");
    return NULL;
  }
  return user;
}

/* The user's sessions that hold anything, the most recently active first
 * (an admin: any user's). */
static void on_sessions(struct gw_kreq *q) {
  const char *user = gw_kproto_whose(q, "list another user's sessions");
  if (!user)
    return;
  json_t *list = NULL;
  int r = gw_store_sessions_list(q->g->env.store, user, 500, &list);
  if (r < 0)
    return gw_kproto_fail(q, r, "cannot read the sessions");
  gw_kproto_reply(q, json_pack("{s:o}", "sessions", list));
}

/* A notebook renamed: its session's names, models and jobs move from
 * "from" (the connection's session when absent) to "to", and every
 * connection of the user on "from" is on "to" from then on. A "to" that
 * holds anything already is moved aside first, to "TO (replaced TIME)". */
/* "NAME (WORD YYYY-MM-DD HH:MM:SS)", now, in ret: where a session's rows go aside. */
static void aside_name(const char *name, const char *word, char *ret, size_t size) {
  char when[32];
  time_t now = (time_t)(sl_time_real_us() / SL_US_PER_S);
  struct tm tm;
  strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", gmtime_r(&now, &tm));
  snprintf(ret, size, "%.200s (%s %s)", name, word, when);
}

static void on_session_move(struct gw_kreq *q) {
  const char *user = q->c->who.user;
  const char *from = sl_json_get_whole_str(q->body, "from", q->c->session);
  const char *to = sl_json_get_whole_str(q->body, "to", NULL);
  if (!from || !to || !*from || !*to)
    return gw_kproto_fail(q, SL_ETYPE, "session.move needs \"to\" (and \"from\", or a session of the hello)");
  if (strlen(from) >= sizeof q->c->session || strlen(to) >= sizeof q->c->session)
    return gw_kproto_fail(q, SL_ELIMIT, "session name too long");
  char from_copy[sizeof q->c->session], aside[sizeof q->c->session];
  snprintf(from_copy, sizeof from_copy, "%s", from); /* from may be the connection's own, changed below */
  aside_name(to, "replaced", aside, sizeof aside);
  int r = gw_store_session_move(q->g->env.store, user, from_copy, to, aside);
  if (r < 0)
    return gw_kproto_fail(q, r, "cannot move the session");
  for (size_t i = 0; r != 1 && i < gw_fleet_n_jobs(q->g->env.fleet); i++) {
    struct gw_job *j = gw_fleet_job_at(q->g->env.fleet, i);
    if (!j || strcmp(j->user, user))
      continue;
    if (r == 2 && !strcmp(j->session, to))
      snprintf(j->session, sizeof j->session, "%s", aside);
    else if (!strcmp(j->session, from_copy))
      snprintf(j->session, sizeof j->session, "%s", to);
  }
  for (size_t i = 0; r != 1 && i < gw_fleet_n_insts(q->g->env.fleet); i++) {
    struct gw_inst *in = gw_fleet_inst_at(q->g->env.fleet, i); /* idle workers kept for the notebook */
    if (in && !strcmp(in->row.user, user) && !strcmp(in->session, from_copy))
      snprintf(in->session, sizeof in->session, "%s", to);
  }
  for (size_t i = 0; i < q->g->n_clients; i++) {
    struct gw_client *c = &q->g->clients[i];
    if (c->rid_len && !strcmp(c->who.user, user) && !strcmp(c->session, from_copy))
      snprintf(c->session, sizeof c->session, "%s", to);
  }
  if (r != 1)
    sl_info(T, "%s: session \"%.80s\" moved to \"%.80s\"%s%s", user, from_copy, to,
            r == 2 ? "; the one there before is now " : "", r == 2 ? aside : "");
  gw_idle_touch(q->g->env.idle, user, to);
  gw_kproto_reply(q, r == 2 ? json_pack("{s:b, s:s}", "moved", 1, "aside", aside) : json_pack("{s:b}", "moved", r != 1));
}

/* A session deleted: its names and models, and the store objects of its
 * jobs (checkpoints, a run's files) no other session's model names. Its
 * jobs must all have ended; they stay, for costs and run records, as
 * "NAME (deleted TIME)". A notebook still open on it starts it anew with
 * its next cell's names. An admin may delete another user's ("user"). */
static void on_session_delete(struct gw_kreq *q) {
  const char *user = gw_kproto_whose(q, "delete another user's sessions");
  if (!user)
    return;
  char user_copy[sizeof q->c->who.user];
  snprintf(user_copy, sizeof user_copy, "%s", user);
  user = user_copy;
  const char *name = sl_json_get_whole_str(q->body, "session", NULL);
  if (!name || !*name)
    return gw_kproto_fail(q, SL_ETYPE, "session.delete needs \"session\"");
  if (strlen(name) >= sizeof q->c->session)
    return gw_kproto_fail(q, SL_ELIMIT, "session name too long");
  char live[400] = "";
  size_t n_live = 0;
  for (size_t i = 0; i < gw_fleet_n_jobs(q->g->env.fleet); i++) {
    struct gw_job *j = gw_fleet_job_at(q->g->env.fleet, i);
    if (!j || strcmp(j->user, user) || strcmp(j->session, name) || gw_job_state_final(j->state))
      continue;
    char id[16];
    size_t have = strlen(live);
    if (n_live++ < 8)
      snprintf(live + have, sizeof live - have, "%s%s (%s)", have ? ", " : "", gw_job_id_str(j->id, id, sizeof id),
               gw_job_state_name(j->state));
  }
  if (n_live) {
    char msg[600];
    snprintf(msg, sizeof msg, "session \"%.80s\" has %zu job%s that %s not ended: %s%s; cancel %s first", name, n_live,
             n_live == 1 ? "" : "s", n_live == 1 ? "has" : "have", live, n_live > 8 ? ", ..." : "",
             n_live == 1 ? "it" : "them");
    return gw_kproto_fail(q, SL_ESTATE, msg);
  }
  char copy[sizeof q->c->session], aside[sizeof q->c->session];
  snprintf(copy, sizeof copy, "%s", name);
  aside_name(copy, "deleted", aside, sizeof aside);
  int64_t *jobs = NULL;
  size_t n = 0;
  int r = gw_store_session_delete(q->g->env.store, user, copy, aside, &jobs, &n);
  if (r < 0)
    return gw_kproto_fail(q, r, "cannot delete the session");
  if (r == 1) {
    char msg[160];
    snprintf(msg, sizeof msg, "no session \"%.80s\" holds anything", copy);
    return gw_kproto_fail(q, SL_ENAME, msg);
  }
  for (size_t i = 0; i < gw_fleet_n_jobs(q->g->env.fleet); i++) {
    struct gw_job *j = gw_fleet_job_at(q->g->env.fleet, i); /* ended ones the fleet still holds */
    if (j && !strcmp(j->user, user) && !strcmp(j->session, copy))
      snprintf(j->session, sizeof j->session, "%s", aside);
  }
  int pr = q->g->env.purge ? gw_purge_jobs(q->g->env.purge, jobs, n) : 0;
  if (pr < 0)
    sl_warn(T, "%s: the store objects of session \"%.80s\"'s %zu jobs are left: %s", user, copy, n,
            sl_strerror(pr));
  free(jobs);
  if (strcmp(user, q->c->who.user))
    sl_info(T, "%s: session \"%.80s\" deleted by the admin %s; its %zu jobs' store objects %s", user, copy,
            q->c->who.user, n, pr < 0 ? "left" : "are being removed");
  else
    sl_info(T, "%s: session \"%.80s\" deleted; its %zu jobs' store objects %s", user, copy, n,
            pr < 0 ? "left" : "are being removed");
  gw_kproto_reply(q, json_pack("{s:s, s:s, s:I}", "deleted", copy, "jobs_kept_as", aside, "jobs_purged",
                               (json_int_t)n));
}

static void on_cancel(struct gw_kreq *q) {
  struct gw_job tmp, *j;
  bool live;
  if (!(j = gw_kproto_user_job(q, &tmp, &live)))
    return;
  if (!live) {
    char msg[96];
    snprintf(msg, sizeof msg, "job already %s", gw_job_state_name(tmp.state));
    gw_job_done(&tmp);
    return gw_kproto_fail(q, SL_ESTATE, msg);
  }
  char id[16];
  gw_job_id_str(j->id, id, sizeof id);
  gw_sched_cancel(q->g->env.sched, j);
  gw_kproto_reply(q, json_pack("{s:s}", "job", id)); /* its id as written: the request's may be an alias */
}

static void on_jobs(struct gw_kreq *q) {
  bool all = sl_json_get_bool(q->body, "all", false);
  struct gw_job *jobs = NULL;
  size_t n = 0;
  const char *user = gw_access_whose(&q->c->who);
  if (gw_store_jobs_list(q->g->env.store, user, false, all ? 1000 : 50, &jobs, &n) < 0)
    return gw_kproto_fail(q, SL_ESQLITE, NULL);
  json_t *arr = json_array();
  for (size_t i = 0; i < n; i++) {
    struct gw_job *live = gw_fleet_job(q->g->env.fleet, jobs[i].id);
    json_array_append_new(arr, gw_job_summary(live ? live : &jobs[i]));
  }
  gw_store_jobs_free(jobs, n);
  gw_kproto_reply(q, json_pack("{s:o}", "jobs", arr));
}

static void on_logs(struct gw_kreq *q) {
  struct gw_job tmp, *j;
  bool live;
  if (!(j = gw_kproto_user_job(q, &tmp, &live)))
    return;
  int64_t id = j->id;
  char kind[sizeof j->kind];
  snprintf(kind, sizeof kind, "%s", j->kind);
  if (!live)
    gw_job_done(&tmp);
  int64_t limit = sl_json_get_int(q->body, "limit", 1000);
  limit = limit < 1 ? 1 : limit > 10000 ? 10000 : limit;
  json_t *evs = NULL;
  bool more = false;
  if (gw_store_events(q->g->env.store, id, sl_json_get_int(q->body, "after", 0), limit, &evs, &more) < 0)
    return gw_kproto_fail(q, SL_ESQLITE, NULL);
  /* kind: what a client that attaches to the job tells its events as */
  gw_kproto_reply(q, json_pack("{s:o,s:b,s:s}", "events", evs, "more", more, "kind", kind));
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
  if (o && in->at_risk) /* a rebalance recommendation its jobs went on through */
    json_object_set_new(o, "at_risk", json_true());
  return o;
}

static void on_status(struct gw_kreq *q) {
  struct gw_kproto *g = q->g;
  const struct gw_config *cfg = g->env.cfg;
  json_t *workers = json_array();
  for (size_t i = 0; i < gw_fleet_n_insts(g->env.fleet); i++)
    if (gw_access_sees(&q->c->who, gw_fleet_inst_at(g->env.fleet, i)->row.user))
      json_array_append_new(workers, instance_json(gw_fleet_inst_at(g->env.fleet, i)));
  /* counts of the jobs it may see, queued and live */
  size_t queued = gw_queue_len(g->env.queue), live = gw_fleet_n_jobs(g->env.fleet);
  if (!q->c->who.admin) {
    int64_t *ids = queued ? calloc(queued, sizeof *ids) : NULL;
    size_t n = ids ? gw_queue_order(g->env.queue, ids, queued) : 0;
    queued = live = 0;
    for (size_t i = 0; i < n; i++) {
      const struct gw_job *j = gw_fleet_job(g->env.fleet, ids[i]);
      queued += j && gw_access_sees(&q->c->who, j->user);
    }
    free(ids);
    for (size_t i = 0; i < gw_fleet_n_jobs(g->env.fleet); i++)
      live += gw_access_sees(&q->c->who, gw_fleet_job_at(g->env.fleet, i)->user);
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
                     sl_json_real((double)gw_config_notebook_timeout_us(cfg, q->c->who.user) / 1e6),
                     "worker_timeout_s",
                     sl_json_real((double)gw_config_worker_timeout_us(cfg, q->c->who.user) / 1e6),
                     "warn_before_s", sl_json_real((double)cfg->warn_before_us / 1e6), "budget",
                     "monthly_usd", sl_json_real(gw_budget_gateway_usd(g->env.budget, cfg)),
                     "spent_usd", sl_json_real(usd),
                     "hard_cap", cfg->hard_cap);
  if (r && q->c->who.admin) { /* the gateway's own health, for whoever runs it */
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
  gw_kproto_reply(q, r);
}

static void on_instances(struct gw_kreq *q) {
  json_t *arr = json_array();
  for (size_t i = 0; i < gw_fleet_n_insts(q->g->env.fleet); i++)
    if (gw_access_sees(&q->c->who, gw_fleet_inst_at(q->g->env.fleet, i)->row.user))
      json_array_append_new(arr, instance_json(gw_fleet_inst_at(q->g->env.fleet, i)));
  gw_kproto_reply(q, json_pack("{s:o}", "instances", arr));
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
static void on_market(struct gw_kreq *q) {
  if (!gw_sched_n_providers(q->g->env.sched))
    return gw_kproto_fail(q, SL_ENOTSUP, "no provider");
  static struct gw_offer offers[MARKET_MAX];
  static struct gw_place_ranked ranked[2 * MARKET_MAX];
  size_t n = gw_sched_market(q->g->env.sched, offers, MARKET_MAX);
  struct gw_wants w = {.spot = -1, .nodes = 1};
  w.gpus = (int)sl_json_get_int(q->body, "gpus", 0);
  snprintf(w.region, sizeof w.region, "%s", sl_json_get_str(q->body, "region", ""));
  gw_place_allow(&w, gw_config_user_instance_types(q->g->env.cfg, q->c->who.user));
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
  gw_kproto_reply(q, json_pack("{s:o,s:o,s:s}", "types", arr, "ranking", ranking, "unit",
                               "the work of one A10G GPU-hour (prior speeds)"));
}

static void on_cost(struct gw_kreq *q) {
  double usd = 0, od = 0, musd = 0, mod = 0;
  const char *user = gw_access_whose(&q->c->who);
  gw_ledger_spend(q->g->env.ledger, user, &usd, &od, &musd, &mod);
  struct gw_job *jobs = NULL;
  size_t n = 0;
  json_t *arr = json_array();
  if (gw_store_jobs_list(q->g->env.store, user, false, 100, &jobs, &n) == 0) {
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
  if (gw_store_cost_by(q->g->env.store, GW_COST_BY_USER, user, 0, 100000, &rows) == 0)
    json_array_foreach(rows, k, row) {
      kwh += sl_json_get_num(row, "energy_kwh", 0);
      co2e += sl_json_get_num(row, "co2e_g", 0);
    }
  json_decref(rows);
  gw_kproto_reply(q, json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "spent_usd", sl_json_real(usd), "on_demand_usd",
                               sl_json_real(od), "saved_usd", sl_json_real(od - usd), "month_spent_usd",
                               sl_json_real(musd), "budget_usd",
                               sl_json_real(gw_budget_gateway_usd(q->g->env.budget, q->g->env.cfg)),
                               "jobs", arr, "energy_kwh", sl_json_real(kwh), "co2e_g", sl_json_real(co2e)));
}

static void on_inject(struct gw_kreq *q) {
  const char *action = sl_json_get_str(q->body, "action", "");
  const char *id = sl_json_get_str(q->body, "instance", "");
  struct gw_inst *in = gw_fleet_inst(q->g->env.fleet, id);
  bool rebalance = !strcmp(action, "rebalance");
  if (strcmp(action, "preempt") && strcmp(action, "kill") && !rebalance)
    return gw_kproto_fail(q, SL_ENAME, "action must be preempt, kill or rebalance");
  if (!in || !gw_access_sees(&q->c->who, in->row.user))
    return gw_kproto_fail(q, SL_ENAME, "no such instance");
  double notice = sl_json_get_num(q->body, "notice_s", !strcmp(action, "kill") ? 0 : 120);
  int r = rebalance ? gw_sched_inject_rebalance(q->g->env.sched, in)
                    : gw_sched_inject(q->g->env.sched, in, !strcmp(action, "kill"), notice);
  if (r == SL_ENOTSUP)
    return gw_kproto_fail(q, r, rebalance ? "the provider cannot inject rebalance recommendations"
                                          : "the provider cannot inject preemptions");
  if (r == SL_ESTATE)
    return gw_kproto_fail(q, r, "the instance is going already");
  if (r < 0)
    return gw_kproto_fail(q, r, NULL);
  gw_kproto_reply(q, NULL);
}

/* Budgets: the ones that apply to the client (every one for an admin);
 * with "set": {"scope","name","monthly_usd"}, an admin sets one live. */
static void on_budget(struct gw_kreq *q) {
  struct gw_budget *b = q->g->env.budget;
  if (!b)
    return gw_kproto_fail(q, SL_ENOTSUP, "this gateway keeps no budgets");
  json_t *set = json_object_get(q->body, "set");
  if (set) {
    if (!q->c->who.admin)
      return gw_kproto_fail(q, -EPERM, "only an admin may set a budget");
    json_t *usd = json_object_get(set, "monthly_usd");
    if (!json_is_object(set) || !json_is_number(usd))
      return gw_kproto_fail(q, SL_EWIRE, "set takes {\"scope\", \"name\", \"monthly_usd\": NUMBER}");
    char err[200];
    int r = gw_budget_set(b, sl_json_get_str(set, "scope", NULL), sl_json_get_str(set, "name", ""),
                          json_number_value(usd), q->c->who.user, err, sizeof err);
    if (r < 0)
      return gw_kproto_fail(q, r == -EINVAL ? SL_EWIRE : r, err);
  }
  json_t *reply = gw_budget_json(b, gw_access_whose(&q->c->who));
  if (set)
    gw_budget_note(b, sl_json_get_str(set, "scope", NULL), sl_json_get_str(set, "name", ""), reply);
  gw_kproto_reply(q, reply);
}

static void on_ping(struct gw_kreq *q) {
  gw_kproto_reply(q, json_pack("{s:I}", "time_us", (json_int_t)sl_time_real_us()));
}

/* Stops the gateway now, for its own user (embedded) or an admin: the
 * workers with no job are stopped, the loop ends after this turn and the
 * process exits once they are gone (gateway.c). A live job is never
 * stopped: without "force" the request is refused while there is one;
 * with it, each job keeps running on its worker, checkpointing as before,
 * and its worker re-registers when the gateway starts again. */
static void on_shutdown(struct gw_kreq *q) {
  struct gw_kproto *g = q->g;
  if (!q->c->who.admin)
    return gw_kproto_fail(q, -EPERM, "only an admin may stop a shared gateway");
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
    return gw_kproto_fail(q, SL_ESTATE, msg);
  }
  size_t stopped = gw_idle_stop_workers(g->env.idle, "the gateway was asked to stop");
  sl_info(T, "%s asked the gateway to stop: %zu idle workers stopped, %zu live jobs keep their"
          " workers", q->c->who.user, stopped, live);
  gw_kproto_reply(q, json_pack("{s:i,s:I,s:I,s:o}", "pid", (int)getpid(), "workers_stopped",
                               (json_int_t)stopped, "workers_left", (json_int_t)gw_fleet_n_insts(g->env.fleet),
                               "jobs", jobs));
  if (g->env.loop)
    gw_loop_stop(g->env.loop);
}

static const struct {
  const char *type;
  void (*fn)(struct gw_kreq *q);
} handlers[] = {
  {"session.get", on_session_get}, {"session.set", on_session_set}, {"session.move", on_session_move},
  {"session.delete", on_session_delete},
  {"sessions", on_sessions},
  {"submit", gw_kproto_on_submit}, {"attach", gw_kproto_on_attach},
  {"detach", gw_kproto_on_detach}, {"cancel", on_cancel}, {"jobs", on_jobs},
  {"logs", on_logs}, {"status", on_status}, {"instances", on_instances}, {"market", on_market},
  {"cost", on_cost}, {"inject", on_inject}, {"ping", on_ping},
  {"shutdown", on_shutdown}, {"budget", on_budget}, {"record", gw_kproto_on_record},
  {"rerun", gw_kproto_on_rerun}, {"data.have", gw_kproto_on_data_have},
  {"data.put", gw_kproto_on_data_put}, {"data.list", gw_kproto_on_data_list},
  {"data.delete", gw_kproto_on_data_delete},
};

static void dispatch(struct gw_kreq *q) {
  q->c = NULL;
  const char *type = sl_json_get_str(q->body, "type", NULL);
  if (!type)
    return gw_kproto_fail(q, SL_EWIRE, "missing \"type\"");
  if (!strcmp(type, "hello"))
    return gw_kproto_on_hello(q);
  q->c = gw_kproto_client_of(q->g, q->rid, q->rid_len, sl_json_get_str(q->body, "auth", NULL));
  if (!q->c)
    return gw_kproto_fail(q, SL_EAUTH, "say hello with a valid token first");
  if (q->fd >= 0)
    q->c->fd = q->fd; /* the secret's holder, reconnected */
  q->c->last_mono_us = sl_time_mono_us();
  gw_idle_touch(q->g->env.idle, q->c->who.user, q->c->session); /* every request is notebook activity */
  if (q->c->session[0] && strcmp(type, "session.get"))
    gw_store_session_touch(q->g->env.store, q->c->who.user, q->c->session, sl_time_real_us());
  for (size_t i = 0; i < sizeof handlers / sizeof *handlers; i++)
    if (!strcmp(handlers[i].type, type))
      return handlers[i].fn(q);
  char msg[96];
  snprintf(msg, sizeof msg, "unknown request type \"%.40s\"", type);
  gw_kproto_fail(q, SL_ENAME, msg);
}

static void handle(struct gw_kproto *g, const uint8_t *rid, size_t rid_len, int fd,
                   const json_t *body, const struct sl_frame *data) {
  json_t *id = json_object_get(body, "id");
  struct gw_kreq q = {.g = g, .rid = rid, .rid_len = rid_len, .fd = fd, .body = body,
                  .id = json_is_integer(id) ? id : NULL, .data = data ? data->data : NULL,
                  .data_len = data ? data->len : 0};
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
  handle(g, rid, rid_len, -1, body, NULL);
}

void gw_kproto_recv(struct gw_kproto *g, void *sock) {
  struct sl_msg m;
  sl_msg_init(&m, (struct sl_limits){GW_FRAMES_MAX, GW_FRAME_MAX, 8u * GW_FRAME_MAX});
  gw_kproto_drain(g); /* closed connections before any message that came after them */
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
  } else if (m.n != 2 && m.n != 3) {
    r = SL_EWIRE;
    snprintf(why, sizeof why, "expected one JSON frame (and data.put's bytes), got %zu", m.n - 1);
  } else {
    r = sl_json_parse((const char *)m.frames[1].data, m.frames[1].len, GW_JSON_DEPTH, &body, why,
                      sizeof why);
    if (r == 0 && !json_is_object(body)) {
      r = SL_EWIRE;
      snprintf(why, sizeof why, "a message must be a JSON object");
    } else if (r == 0 && m.n == 3 && strcmp(sl_json_get_str(body, "type", ""), "data.put")) {
      r = SL_EWIRE;
      snprintf(why, sizeof why, "only data.put carries a second frame");
    }
  }
  if (r < 0) {
    LOG_LIMITED(g, log_wire, SL_LOG_WARN, "malformed request: %s", why);
    json_t *id = NULL;
    if (body)
      id = json_object_get(body, "id");
    json_t *lenient = NULL; /* JSON whose only fault is a number past 64 bits: its id still answers */
    if (!body && r == SL_EJSON && m.n >= 2 && strstr(why, "too big integer"))
      lenient = json_loadb((const char *)m.frames[1].data, m.frames[1].len, JSON_DECODE_INT_AS_REAL, NULL);
    double lid = json_real_value(json_object_get(lenient, "id")); /* 0 when not a number */
    json_t *own_id = fabs(lid) <= 9007199254740992.0 && lid == floor(lid) && lid != 0
                         ? json_integer((json_int_t)lid) : NULL;
    if (own_id)
      id = own_id;
    reply_err(g, rid, rid_len, id, r, why);
    json_decref(own_id);
    json_decref(lenient);
  } else {
    handle(g, rid, rid_len, m.src_fd, body, m.n == 3 ? &m.frames[2] : NULL);
  }
  json_decref(body);
  sl_msg_done(&m);
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
  if (env->loop &&
      ((g->replay_timer = gw_loop_add_timer(env->loop, INT64_MAX, gw_kproto_replay_timer, g)) < 0 ||
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
  gw_kproto_pending_clear(g);
  if (g->clients)
    sodium_memzero(g->clients, g->cap_clients * sizeof *g->clients);
  free(g->clients);
  free(g);
  return NULL;
}
