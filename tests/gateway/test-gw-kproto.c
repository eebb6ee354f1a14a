/* The kernel/CLI protocol alone (gw_kproto_handle and its bus sink), over
 * the in-process gateway of gw-fixture.h: hello and tokens, unknown
 * requests, submit, one user's view of the jobs, attach with replay from
 * the store then live events, replays paced by a client that cannot take
 * more (the transport's -EAGAIN), cancel, status, instances, market, cost,
 * inject, the budget's hard cap, and notebook notices that reach only their
 * own session's clients. */
#include "gw-fixture.h"
#include "harness.h"

#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#include <stdlib.h>
#include <string.h>

static bool contains(const char *s, const char *part) {
  return s && strstr(s, part);
}

static int64_t job_of(const json_t *reply) {
  return gw_job_id_parse(sl_json_get_str(reply, "job", NULL));
}

/* Two users with tokens; alice's client "ka" in session "nb" with the
 * model and data defined. */
static struct fx *setup(const struct gw_config *cfg) {
  struct fx *f = fx_new(cfg);
  if (!f)
    return NULL;
  fx_user(f, "alice", "alice-token");
  fx_user(f, "bob", "bob-token");
  if (!fx_hello(f, "ka", "alice-token", "nb") || !fx_define(f, "ka")) {
    fprintf(stderr, "setup: hello or session.set failed\n");
    return fx_free(f);
  }
  return f;
}

static int64_t submit(struct fx *f, const char *rid) {
  const json_t *r = fx_ksubmit(f, rid, json_pack("{s:i}", "steps", 50));
  CHECK(fx_ok(r));
  return job_of(r);
}

/* ---- hello, tokens, unknown requests ---- */

static void test_hello(void) {
  struct fx *f = fx_new(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  fx_user(f, "alice", "alice-token");

  /* nothing before hello */
  const json_t *r = fx_ktype(f, "k1", "jobs");
  CHECK(r && !fx_ok(r));
  CHECK_STR(fx_err_code(r), sl_errname(SL_EAUTH));
  CHECK(json_integer_value(json_object_get(r, "re")) == f->next_req_id);
  r = fx_ktype(f, "k1", "submit");
  CHECK_STR(fx_err_code(r), sl_errname(SL_EAUTH));

  /* a token is required, and must be known */
  r = fx_ktype(f, "k1", "hello");
  CHECK(r && !fx_ok(r));
  CHECK_STR(fx_err_code(r), sl_errname(SL_EAUTH));
  r = fx_req(f, "k1", "{s:s,s:s}", "type", "hello", "token", "not-the-token");
  CHECK(r && !fx_ok(r));
  CHECK_STR(fx_err_code(r), sl_errname(SL_EAUTH));
  CHECK(contains(fx_err_msg(r), "unknown token"));
  r = fx_ktype(f, "k1", "ping");
  CHECK_STR(fx_err_code(r), sl_errname(SL_EAUTH)); /* a bad hello admits nothing */

  /* no type at all */
  r = fx_req(f, "k1", "{s:s}", "what", "hello");
  CHECK(r && !fx_ok(r));
  CHECK_STR(fx_err_code(r), sl_errname(SL_EWIRE));

  /* hello ok: user, session, the gateway's version */
  r = fx_req(f, "k1", "{s:s,s:s,s:s}", "type", "hello", "token", "alice-token", "session", "nb");
  CHECK(fx_ok(r));
  CHECK_STR(sl_json_get_str(r, "user", ""), "alice");
  CHECK_STR(sl_json_get_str(r, "session", ""), "nb");
  CHECK(*sl_json_get_str(r, "gateway", ""));
  r = fx_ktype(f, "k1", "ping");
  CHECK(fx_ok(r));

  /* a request of no known type */
  r = fx_ktype(f, "k1", "frobnicate");
  CHECK(r && !fx_ok(r));
  CHECK_STR(fx_err_code(r), sl_errname(SL_ENAME));
  CHECK(contains(fx_err_msg(r), "unknown request type \"frobnicate\""));
  /* another connection is not admitted by k1's hello */
  r = fx_ktype(f, "k2", "ping");
  CHECK_STR(fx_err_code(r), sl_errname(SL_EAUTH));
  /* every request got exactly one reply */
  CHECK_INT(fx_to_client_count(f, "k1", "reply") + fx_to_client_count(f, "k2", "reply"),
            f->next_req_id);
  fx_free(f);
}

/* ---- submit, jobs, isolation ---- */

static void test_submit_and_jobs(void) {
  struct fx *f = setup(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  f->fp->mode = FP_SILENT;
  int64_t a1 = submit(f, "ka");
  CHECK(a1 > 0);
  struct gw_job *j = fx_job(f, a1);
  CHECK(j != NULL);
  if (j) {
    CHECK_STR(j->user, "alice");
    CHECK_STR(j->session, "nb");
    CHECK_STR(j->model, "m");
    CHECK_INT(j->steps, 50);
    json_t *model = json_object_get(j->spec, "model");
    CHECK_INT(sl_json_get_int(json_object_get(model, "spec"), "layers", 0), 2);
  }
  /* what the session does not define, and kinds that do not exist */
  const json_t *r = fx_req(f, "ka", "{s:s,s:s,s:s,s:s}", "type", "submit", "kind", "train",
                           "model", "nope", "data", "d");
  CHECK(r && !fx_ok(r));
  CHECK(contains(fx_err_msg(r), "no model named \"nope\""));
  r = fx_req(f, "ka", "{s:s,s:s}", "type", "submit", "kind", "dance");
  CHECK_STR(fx_err_code(r), sl_errname(SL_ENAME));
  r = fx_req(f, "ka", "{s:s,s:s,s:s,s:s,s:i}", "type", "submit", "kind", "train", "model", "m",
             "data", "d", "options", 3);
  CHECK_STR(fx_err_code(r), sl_errname(SL_ETYPE));
  /* eval and sample of a model with no checkpoint yet: refused before any
   * instance is launched to find that out */
  r = fx_req(f, "ka", "{s:s,s:s,s:s,s:s}", "type", "submit", "kind", "eval", "model", "m", "data", "d");
  CHECK_STR(fx_err_code(r), sl_errname(SL_ESTATE));
  CHECK(contains(fx_err_msg(r), "model m has no checkpoint yet: eval needs a trained model"));
  r = fx_req(f, "ka", "{s:s,s:s,s:s}", "type", "submit", "kind", "sample", "model", "m");
  CHECK_STR(fx_err_code(r), sl_errname(SL_ESTATE));
  CHECK(contains(fx_err_msg(r), "model m has no checkpoint yet: sample needs a trained model"));
  /* resource options no offer fits: refused, naming the one that leaves none */
  r = fx_ksubmit(f, "ka", json_pack("{s:i,s:s}", "steps", 50, "instance", "t.huge"));
  CHECK_STR(fx_err_code(r), sl_errname(SL_ENAME));
  CHECK(contains(fx_err_msg(r), "instance=t.huge: no such type is offered (offered: "));
  r = fx_ksubmit(f, "ka", json_pack("{s:i,s:f}", "steps", 50, "max_price", 0.001));
  CHECK(contains(fx_err_msg(r), "max_price=0.001: below every such offer (the cheapest: "));
  /* a model on data of the other kind (gpt learns from text, mlp from fashion_mnist) */
  CHECK(fx_ok(fx_req(f, "ka", "{s:s,s:[{s:s,s:s,s:{s:s}},{s:s,s:s,s:{s:s}},{s:s,s:s,s:{s:s}},{s:s,s:s,s:{s:s}}]}",
                     "type", "session.set", "defs", "name", "g", "kind", "model", "spec", "type", "gpt", "name",
                     "c", "kind", "model", "spec", "type", "mlp", "name", "fm", "kind", "data", "spec", "type",
                     "fashion_mnist", "name", "t", "kind", "data", "spec", "type", "text")));
  r = fx_req(f, "ka", "{s:s,s:s,s:s,s:s}", "type", "submit", "kind", "train", "model", "g", "data", "fm");
  CHECK_STR(fx_err_code(r), sl_errname(SL_ETYPE));
  CHECK_STR(fx_err_msg(r), "model g = gpt(...) learns from text data, and fm is fashion_mnist data: a gpt "
                           "model takes text(\"PATH\"), an mlp model fashion_mnist()");
  r = fx_req(f, "ka", "{s:s,s:s,s:s,s:s}", "type", "submit", "kind", "eval", "model", "c", "data", "t");
  CHECK(contains(fx_err_msg(r), "model c = mlp(...) learns from fashion_mnist data, and t is text data"));
  CHECK_INT(gw_fleet_n_jobs(f->fleet), 1);

  /* bob, in a session of his own */
  CHECK(fx_hello(f, "kb", "bob-token", "other"));
  CHECK(fx_define(f, "kb"));
  int64_t b1 = submit(f, "kb");
  CHECK(b1 > 0 && b1 != a1);
  int64_t a2 = submit(f, "ka");
  fx_settle(f);

  /* jobs: each sees their own only */
  r = fx_ktype(f, "ka", "jobs");
  CHECK(fx_ok(r));
  json_t *jobs = json_object_get(r, "jobs");
  CHECK_INT(json_array_size(jobs), 2);
  size_t i;
  json_t *v;
  json_array_foreach(jobs, i, v) {
    CHECK_STR(sl_json_get_str(v, "user", ""), "alice");
    CHECK(job_of(v) == a1 || job_of(v) == a2);
  }
  r = fx_ktype(f, "kb", "jobs");
  CHECK_INT(json_array_size(json_object_get(r, "jobs")), 1);
  CHECK_INT(job_of(json_array_get(json_object_get(r, "jobs"), 0)), b1);

  /* another user's job answers exactly as a job that does not exist */
  char aid[16], none[16];
  fx_jid(a1, aid);
  fx_jid(999, none);
  const char *types[] = {"attach", "cancel", "logs"};
  for (size_t k = 0; k < 3; k++) {
    r = fx_req(f, "kb", "{s:s,s:s}", "type", types[k], "job", aid);
    CHECK(r && !fx_ok(r));
    CHECK_STR(fx_err_code(r), sl_errname(SL_ENAME));
    CHECK_STR(fx_err_msg(r), "no such job");
    const json_t *r2 = fx_req(f, "kb", "{s:s,s:s}", "type", types[k], "job", none);
    CHECK_STR(fx_err_code(r2), sl_errname(SL_ENAME));
    CHECK_STR(fx_err_msg(r2), "no such job");
  }
  CHECK_INT(fx_job_state(f, a1), GW_JOB_PROVISIONING); /* bob's cancel changed nothing */
  CHECK_INT(fx_to_client_count(f, "kb", "event"), 0);
  fx_free(f);
}

/* ---- attach: replay, then live ---- */

/* The events client rid received for job (seq order as received). */
static size_t events_to(const struct fx *f, const char *rid, int64_t job, int64_t *seqs,
                        size_t max) {
  size_t n = 0;
  for (size_t k = 0;; k++) {
    const json_t *m = fx_to_client_at(f, rid, k);
    if (!m)
      break;
    if (json_object_get(m, "seq") && n < max &&
        gw_job_id_parse(sl_json_get_str(m, "job", NULL)) == job)
      seqs[n++] = sl_json_get_int(m, "seq", -1);
  }
  return n;
}

/* seqs is first, first + 1, ... with no gap or repeat. */
static bool in_order(const int64_t *seqs, size_t n, int64_t first) {
  for (size_t i = 0; i < n; i++)
    if (seqs[i] != first + (int64_t)i) {
      fprintf(stderr, "seq %lld at %zu, expected %lld\n", (long long)seqs[i], i,
              (long long)(first + (int64_t)i));
      return false;
    }
  return true;
}

static void test_attach(void) {
  struct fx *f = setup(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  f->fp->mode = FP_SILENT;
  int64_t id = submit(f, "ka");
  fx_settle(f);
  int64_t last = fx_job(f, id)->last_seq;
  CHECK(last >= 2); /* queued, provisioning */
  char jid[16];
  fx_jid(id, jid);

  CHECK(fx_hello(f, "kc", "alice-token", "nb"));
  const json_t *r = fx_kjob(f, "kc", "attach", id);
  CHECK(fx_ok(r));
  CHECK_STR(sl_json_get_str(json_object_get(r, "job"), "state", ""), "provisioning");
  int64_t seqs[512];
  size_t n = events_to(f, "kc", id, seqs, 512);
  CHECK_INT(n, last);
  CHECK(in_order(seqs, n, 1));
  /* the reply comes before the events */
  CHECK_STR(sl_json_get_str(fx_to_client_at(f, "kc", 1), "type", ""), "reply");

  /* live: the launch is done, the placed event follows at once */
  fp_launched(f->fp, "f-1");
  fx_settle(f);
  n = events_to(f, "kc", id, seqs, 512);
  CHECK(n > (size_t)last);
  CHECK(in_order(seqs, n, 1));
  const json_t *lastm = fx_to_client_last(f, "kc", NULL);
  CHECK(lastm && sl_json_get_int(lastm, "seq", 0) == fx_job(f, id)->last_seq);
  /* the client that did not attach hears nothing of it */
  CHECK_INT(events_to(f, "ka", id, seqs, 512), 0);

  /* attach from a seq: only what follows */
  CHECK(fx_hello(f, "kd", "alice-token", "nb"));
  r = fx_req(f, "kd", "{s:s,s:s,s:i}", "type", "attach", "job", jid, "after", (int)last);
  CHECK(fx_ok(r));
  n = events_to(f, "kd", id, seqs, 512);
  CHECK_INT(n, fx_job(f, id)->last_seq - last);
  CHECK(in_order(seqs, n, last + 1));

  /* detach: no more live events */
  size_t before = events_to(f, "kd", id, seqs, 512);
  CHECK(fx_ok(fx_kjob(f, "kd", "detach", id)));
  fx_register(f, "f-1", NULL, NULL);
  CHECK_INT(events_to(f, "kd", id, seqs, 512), before);
  CHECK(events_to(f, "kc", id, seqs, 512) > n);

  /* a finished job: its events are replayed, and nothing follows */
  fx_done(f, "f-1", id, "succeeded", 0);
  CHECK(fx_hello(f, "ke", "alice-token", "nb"));
  r = fx_kjob(f, "ke", "attach", id);
  CHECK(fx_ok(r));
  CHECK_STR(sl_json_get_str(json_object_get(r, "job"), "state", ""), "succeeded");
  struct gw_job row;
  CHECK_INT(gw_store_job_get(f->store, id, &row), 0);
  n = events_to(f, "ke", id, seqs, 512);
  CHECK_INT(n, row.last_seq);
  CHECK(in_order(seqs, n, 1));
  gw_job_done(&row);
  fx_free(f);
}

/* ---- paced replays ---- */

struct pace {
  const char *rid;
  int64_t job, want;            /* want: the last seq to reach */
  int per_turn;                 /* messages the client takes per turn */
};

static bool caught_up(struct fx *f, void *data) {
  struct pace *p = data;
  int64_t seqs[1024];
  size_t n = events_to(f, p->rid, p->job, seqs, 1024);
  if (n && seqs[n - 1] >= p->want)
    return true;
  fx_client_allow(f, p->rid, p->per_turn); /* the client reads a few */
  return false;
}

static void test_paced_replay(void) {
  struct fx *f = setup(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  int64_t id = submit(f, "ka");
  char inst[GW_INSTANCE_ID_MAX] = "";
  CHECK(fx_run_job(f, id, inst));
  for (int s = 1; s <= 300; s++) /* more than two replay pages */
    fx_metric(f, inst, id, s, 3.0 - s * 0.001);
  int64_t last = fx_job(f, id)->last_seq;
  CHECK(last > 300);

  /* a client whose queue takes the reply and nothing more */
  CHECK(fx_hello(f, "slow", "alice-token", "nb"));
  fx_client_allow(f, "slow", 1);
  const json_t *r = fx_kjob(f, "slow", "attach", id);
  CHECK(fx_ok(r));
  int64_t seqs[1024];
  CHECK_INT(events_to(f, "slow", id, seqs, 1024), 0);
  /* it reads a few a turn; the loop's replay timer goes on where it stopped */
  struct pace p = {.rid = "slow", .job = id, .want = last, .per_turn = 16};
  int64_t t0 = sl_time_mono_us();
  CHECK(fx_run_until(f, 2 * SL_US_PER_S, caught_up, &p));
  fprintf(stderr, "paced replay of %lld events: %.1f ms\n", (long long)last,
          (double)(sl_time_mono_us() - t0) / 1e3);
  size_t n = events_to(f, "slow", id, seqs, 1024);
  CHECK_INT(n, last);
  CHECK(in_order(seqs, n, 1));

  /* caught up: live events flow again */
  fx_client_allow(f, "slow", -1);
  fx_settle(f);
  fx_metric(f, inst, id, 301, 1.0);
  n = events_to(f, "slow", id, seqs, 1024);
  /* the metric, and what the loop's timers added meanwhile (a cost event,
   * when a busy machine made the replay slow) */
  int64_t live = fx_job(f, id)->last_seq;
  CHECK(live > last);
  CHECK_INT(n, live);
  CHECK(in_order(seqs, n, 1));

  /* live events the client cannot take are replayed from the store later */
  fx_client_allow(f, "slow", 0);
  for (int s = 302; s <= 320; s++)
    fx_metric(f, inst, id, s, 1.0);
  CHECK_INT(events_to(f, "slow", id, seqs, 1024), live);
  p.want = fx_job(f, id)->last_seq;
  p.per_turn = 3;
  CHECK(fx_run_until(f, 2 * SL_US_PER_S, caught_up, &p));
  n = events_to(f, "slow", id, seqs, 1024);
  CHECK_INT(n, p.want);
  CHECK(in_order(seqs, n, 1));
  /* and live again afterwards, in order */
  fx_client_allow(f, "slow", -1);
  fx_settle(f);
  fx_metric(f, inst, id, 321, 1.0);
  n = events_to(f, "slow", id, seqs, 1024);
  live = fx_job(f, id)->last_seq; /* the metric, and a cost event a busy machine let in */
  CHECK(live > p.want);
  CHECK_INT(n, live);
  CHECK(in_order(seqs, n, 1));
  /* the fast client attached to nothing saw none of it */
  CHECK_INT(events_to(f, "ka", id, seqs, 1024), 0);
  fx_free(f);
}

/* ---- cancel ---- */

static void test_cancel(void) {
  struct fx *f = setup(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  f->fp->mode = FP_REFUSE;
  int64_t id = submit(f, "ka");
  fx_settle(f);
  CHECK(fx_ok(fx_kjob(f, "ka", "cancel", id)));
  CHECK_INT(fx_job_state(f, id), GW_JOB_CANCELLED);
  CHECK_INT(gw_queue_len(f->queue), 0);
  const json_t *r = fx_kjob(f, "ka", "cancel", id);
  CHECK(r && !fx_ok(r));
  CHECK_STR(fx_err_code(r), sl_errname(SL_ESTATE));
  CHECK(contains(fx_err_msg(r), "already cancelled"));

  /* a running job: the worker is asked to stop it */
  f->fp->mode = FP_ANSWER;
  int64_t id2 = submit(f, "ka");
  char inst[GW_INSTANCE_ID_MAX] = "";
  CHECK(fx_run_job(f, id2, inst));
  char jid[16];
  fx_jid(id2, jid);
  CHECK(fx_ok(fx_kjob(f, "ka", "cancel", id2)));
  CHECK_INT(fx_job_state(f, id2), GW_JOB_RUNNING); /* until the worker says it stopped */
  const json_t *c = fx_to_worker_last(f, inst, "cancel");
  CHECK(c && !strcmp(sl_json_get_str(c, "job", ""), jid));
  fx_done(f, inst, id2, "cancelled", -1);
  CHECK_INT(fx_job_state(f, id2), GW_JOB_CANCELLED);
  fx_free(f);
}

/* ---- status, instances, market, cost ---- */

static void test_status_market_cost(void) {
  struct fx *f = setup(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  int64_t id = submit(f, "ka");
  char inst[GW_INSTANCE_ID_MAX] = "";
  CHECK(fx_run_job(f, id, inst));

  const json_t *r = fx_ktype(f, "ka", "status");
  CHECK(fx_ok(r));
  json_t *gw = json_object_get(r, "gateway");
  CHECK_STR(sl_json_get_str(gw, "provider", ""), "fake");
  CHECK_INT(sl_json_get_int(gw, "live_jobs", -1), 1);
  CHECK_INT(sl_json_get_int(gw, "queued", -1), 0);
  CHECK_STR(sl_json_get_str(gw, "state_dir", ""), f->dir);
  CHECK_INT(json_array_size(json_object_get(r, "workers")), 1);
  CHECK(json_is_object(json_object_get(r, "budget")));

  r = fx_ktype(f, "ka", "instances");
  CHECK(fx_ok(r));
  json_t *insts = json_object_get(r, "instances");
  CHECK_INT(json_array_size(insts), 1);
  json_t *i0 = json_array_get(insts, 0);
  CHECK_STR(sl_json_get_str(i0, "instance", ""), "f-1");
  CHECK_STR(sl_json_get_str(i0, "state", ""), "busy");
  CHECK_STR(sl_json_get_str(i0, "zone", ""), "fz-1a");
  char jid[16];
  CHECK_STR(sl_json_get_str(i0, "job", ""), fx_jid(id, jid));
  CHECK(json_is_true(json_object_get(i0, "registered")));

  r = fx_ktype(f, "ka", "market");
  CHECK(fx_ok(r));
  json_t *types = json_object_get(r, "types");
  CHECK_INT(json_array_size(types), 2);
  size_t k;
  json_t *t;
  json_array_foreach(types, k, t) CHECK_STR(sl_json_get_str(t, "provider", ""), "fake");
  CHECK_STR(sl_json_get_str(json_array_get(types, 0), "type", ""), "t.small");
  CHECK_NEAR(sl_json_get_num(json_array_get(types, 0), "spot_usd_per_hour", 0), 0.30, 1e-9);
  CHECK_NEAR(sl_json_get_num(json_array_get(types, 0), "mean_time_to_preempt_s", 0), 3600, 1e-9);
  r = fx_req(f, "ka", "{s:s,s:i}", "type", "market", "gpus", 2);
  CHECK_INT(json_array_size(json_object_get(r, "types")), 1);
  CHECK_STR(sl_json_get_str(json_array_get(json_object_get(r, "types"), 0), "type", ""), "t.big");
  /* the ranking: every offer and market, best first, each with its reason */
  r = fx_ktype(f, "ka", "market");
  json_t *ranking = json_object_get(r, "ranking");
  CHECK_INT(json_array_size(ranking), 4);
  double last = 0;
  json_array_foreach(ranking, k, t) {
    CHECK_INT(sl_json_get_int(t, "rank", 0), (long long)k + 1);
    CHECK(sl_json_get_num(t, "usd_per_unit", -1) >= last);
    last = sl_json_get_num(t, "usd_per_unit", -1);
    CHECK(sl_json_get_num(t, "efficiency", 0) > 0 && sl_json_get_num(t, "efficiency", 2) <= 1);
    CHECK(strstr(sl_json_get_str(t, "why", ""), "units/h") != NULL);
    CHECK(!strcmp(sl_json_get_str(t, "market", ""), "spot") ||
          !strcmp(sl_json_get_str(t, "market", ""), "on-demand"));
  }
  /* each offer carries its markets' rank */
  json_t *small_spot = json_object_get(json_object_get(json_array_get(json_object_get(r, "types"), 0),
                                                       "markets"), "spot");
  CHECK(sl_json_get_int(small_spot, "rank", 0) >= 1);
  CHECK(json_is_number(json_object_get(json_array_get(json_object_get(r, "types"), 0),
                                       "usd_per_unit_of_work")));
  /* region=: one the market has no offer in is refused at submit, naming it */
  r = fx_ksubmit(f, "ka", json_pack("{s:i,s:s}", "steps", 50, "region", "xx-nowhere-9"));
  CHECK(r && !fx_ok(r));
  CHECK_STR(fx_err_code(r), sl_errname(SL_ENAME));
  CHECK(strstr(fx_err_msg(r), "no provider offers region \"xx-nowhere-9\"") != NULL);
  r = fx_ksubmit(f, "ka", json_pack("{s:i,s:i}", "steps", 50, "region", 3));
  CHECK(r && !fx_ok(r));
  CHECK_STR(fx_err_code(r), sl_errname(SL_ETYPE));

  /* cost: what the ledger holds, per user */
  fx_done(f, inst, id, "succeeded", 0);
  double usd = 0, od = 0;
  CHECK_INT(gw_ledger_totals(f->ledger, "alice", 0, &usd, &od), 0);
  CHECK(usd > 0 && od > usd); /* spot is cheaper */
  r = fx_ktype(f, "ka", "cost");
  CHECK(fx_ok(r));
  CHECK_NEAR(sl_json_get_num(r, "spent_usd", -1), usd, 1e-12);
  CHECK_NEAR(sl_json_get_num(r, "on_demand_usd", -1), od, 1e-12);
  CHECK_NEAR(sl_json_get_num(r, "saved_usd", -1), od - usd, 1e-12);
  CHECK_INT(json_array_size(json_object_get(r, "jobs")), 1);
  CHECK(fx_hello(f, "kb", "bob-token", "x"));
  r = fx_ktype(f, "kb", "cost");
  CHECK_NEAR(sl_json_get_num(r, "spent_usd", -1), 0, 1e-15);
  CHECK_INT(json_array_size(json_object_get(r, "jobs")), 0);

  /* gpus and precision at submit: more GPUs than any type offers, or a
   * value the training core cannot take, is refused at once (no job) */
  size_t jobs_before = gw_fleet_n_jobs(f->fleet);
  r = fx_ksubmit(f, "ka", json_pack("{s:i}", "gpus", 8));
  CHECK(r && !fx_ok(r));
  CHECK_STR(fx_err_code(r), sl_errname(SL_ENAME));
  CHECK_STR(fx_err_msg(r), "no instance type offers 8 GPUs (the most: 4, on t.big)");
  r = fx_ksubmit(f, "ka", json_pack("{s:s}", "precision", "fp16"));
  CHECK(contains(fx_err_msg(r), "precision must be bf16 or fp32"));
  r = fx_ksubmit(f, "ka", json_pack("{s:f}", "gpus", 1.5));
  CHECK(contains(fx_err_msg(r), "gpus must be a whole number from 0 to 64"));
  r = fx_ksubmit(f, "ka", json_pack("{s:s}", "gpus", "two"));
  CHECK_STR(fx_err_code(r), sl_errname(SL_ECONFIG));
  CHECK_INT(gw_fleet_n_jobs(f->fleet), jobs_before);
  r = fx_ksubmit(f, "ka", json_pack("{s:i,s:s}", "gpus", 4, "precision", "bf16"));
  CHECK(fx_ok(r));
  CHECK_INT(gw_fleet_n_jobs(f->fleet), jobs_before + 1);
  /* a gang's batch is split among its ranks; a batch no int64 holds is not divided */
  r = fx_ksubmit(f, "ka", json_pack("{s:i,s:i}", "nodes", 2, "batch", 3));
  CHECK(contains(fx_err_msg(r), "batch (3) must be a multiple of nodes (2)"));
  r = fx_ksubmit(f, "ka", json_pack("{s:i,s:f}", "nodes", 2, "batch", 1e300));
  CHECK(r != NULL);
  fx_free(f);
}

/* ---- inject ---- */

static void test_inject(void) {
  struct fx *f = setup(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  int64_t id = submit(f, "ka");
  char inst[GW_INSTANCE_ID_MAX] = "";
  CHECK(fx_run_job(f, id, inst));
  const json_t *r = fx_req(f, "ka", "{s:s,s:s,s:s,s:f}", "type", "inject", "action", "preempt",
                           "instance", inst, "notice_s", 30.0);
  CHECK(fx_ok(r));
  const struct fp_call *c = fp_last(f->fp, FP_CALL_INJECT);
  CHECK(c != NULL);
  if (c) {
    CHECK_STR(c->id, inst);
    CHECK(!c->kill);
    CHECK_NEAR(c->notice_s, 30.0, 1e-9);
  }
  fx_settle(f); /* the fake's notice arrives */
  CHECK(fx_job_event(f, id, "notice") != NULL);

  /* not one's own instance, an unknown one, a bad action */
  CHECK(fx_hello(f, "kb", "bob-token", "x"));
  r = fx_kinject(f, "kb", "kill", inst);
  CHECK_STR(fx_err_code(r), sl_errname(SL_ENAME));
  CHECK_STR(fx_err_msg(r), "no such instance");
  r = fx_kinject(f, "ka", "kill", "f-99");
  CHECK_STR(fx_err_msg(r), "no such instance");
  r = fx_kinject(f, "ka", "melt", inst);
  CHECK_STR(fx_err_code(r), sl_errname(SL_ENAME));
  CHECK_INT(fp_count(f->fp, FP_CALL_INJECT, NULL), 1);

  /* kill: the market takes it, the job is requeued */
  r = fx_kinject(f, "ka", "kill", inst);
  CHECK(fx_ok(r));
  CHECK(fp_last(f->fp, FP_CALL_INJECT)->kill);
  fx_settle(f);
  CHECK(fx_inst(f, inst) == NULL);
  CHECK(fx_job_was(f, id, GW_JOB_PREEMPTED));
  fx_free(f);
}

/* An idle instance alice launched does not run bob's next job (what her
 * jobs left there would see it): bob's runs on one of his own, which only
 * he may preempt. */
static void test_inject_reused(void) {
  struct fx *f = setup(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  int64_t a = submit(f, "ka");
  char inst[GW_INSTANCE_ID_MAX] = "";
  CHECK(fx_run_job(f, a, inst));
  fx_done(f, inst, a, "succeeded", 0);
  CHECK(fx_hello(f, "kb", "bob-token", "x"));
  CHECK(fx_define(f, "kb"));
  int64_t b = submit(f, "kb");
  fx_settle(f);
  char binst[GW_INSTANCE_ID_MAX];
  snprintf(binst, sizeof binst, "%s", fx_job(f, b)->instance);
  CHECK(binst[0] && strcmp(binst, inst) != 0);
  CHECK_INT(fp_count(f->fp, FP_CALL_LAUNCH, NULL), 2);
  const json_t *r = fx_kinject(f, "ka", "kill", binst);
  CHECK_STR(fx_err_msg(r), "no such instance");
  CHECK_INT(fp_count(f->fp, FP_CALL_INJECT, NULL), 0);
  r = fx_kinject(f, "kb", "preempt", binst);
  CHECK(fx_ok(r));
  CHECK_INT(fp_count(f->fp, FP_CALL_INJECT, binst), 1);
  fx_free(f);
}

/* ---- budget ---- */

static void test_budget(void) {
  struct gw_config cfg;
  fx_config(&cfg);
  char err[128];
  CHECK_INT(gw_config_set(&cfg, "budget", "monthly_usd", "1.5", err, sizeof err), 0);
  CHECK_INT(gw_config_set(&cfg, "budget", "hard_cap", "yes", err, sizeof err), 0);
  struct fx *f = setup(&cfg);
  CHECK(f != NULL);
  if (!f)
    return;
  f->fp->mode = FP_SILENT;
  int64_t id = submit(f, "ka");
  CHECK(id > 0);
  /* the ledger records 2 dollars spent by this job */
  struct gw_job *j = fx_job(f, id);
  struct gw_bus_event ev = {.kind = GW_BUS_COST, .job = j, .usd = 2.0, .on_demand_usd = 4.0,
                            .seconds = 3600};
  gw_bus_emit(&f->bus, &ev);
  double usd = 0, od = 0;
  CHECK_INT(gw_ledger_totals(f->ledger, NULL, gw_ledger_month_start_us(), &usd, &od), 0);
  CHECK_NEAR(usd, 2.0, 1e-12);
  CHECK(gw_ledger_budget_spent(f->ledger));
  size_t jobs = gw_fleet_n_jobs(f->fleet);
  const json_t *r = fx_ksubmit(f, "ka", NULL);
  CHECK(r && !fx_ok(r));
  CHECK_STR(fx_err_code(r), sl_errname(SL_ESTATE));
  CHECK(contains(fx_err_msg(r), "budget"));
  CHECK_INT(gw_fleet_n_jobs(f->fleet), jobs);
  /* without the hard cap the same spend refuses nothing */
  f->cfg.hard_cap = false;
  CHECK(!gw_ledger_budget_spent(f->ledger));
  CHECK(submit(f, "ka") > 0);
  fx_free(f);
}

/* ---- notebook notices ---- */

static void test_notices(void) {
  struct fx *f = setup(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  CHECK(fx_hello(f, "ka2", "alice-token", "nb"));
  CHECK(fx_hello(f, "ka3", "alice-token", "other"));
  CHECK(fx_hello(f, "kb", "bob-token", "nb"));
  fx_captures_clear(f);
  json_t *msg = json_pack("{s:s,s:s,s:s,s:s,s:i}", "type", "notice", "session", "nb", "event",
                          "idle", "action", "warning", "in_s", 60);
  gw_bus_emit(&f->bus, &(struct gw_bus_event){.kind = GW_BUS_NOTICE, .user = "alice",
                                              .session = "nb", .msg = msg});
  json_decref(msg);
  CHECK_INT(fx_to_client_count(f, "ka", "notice"), 1);
  CHECK_INT(fx_to_client_count(f, "ka2", "notice"), 1);
  CHECK_INT(fx_to_client_count(f, "ka3", "notice"), 0);
  CHECK_INT(fx_to_client_count(f, "kb", "notice"), 0);
  const json_t *n = fx_to_client_last(f, "ka", "notice");
  CHECK(n && !strcmp(sl_json_get_str(n, "action", ""), "warning"));
  CHECK_INT(json_array_size(f->to_clients), 2);
  fx_free(f);
}

int main(void) {
  sl_log_init("test-gw-kproto");
  test_hello();
  test_submit_and_jobs();
  test_attach();
  test_paced_replay();
  test_cancel();
  test_status_market_cost();
  test_inject();
  test_inject_reused();
  test_budget();
  test_notices();
  TEST_MAIN_END();
}
