/* Webhooks without a network: the payload of each bus event, the signature
 * against an HMAC built here from SHA-256 alone, the verdict of each
 * outcome, the retry schedule, and the delivery machine driven through a
 * transport the test answers by hand (retries with the same delivery id,
 * final failures, the bounded queue, metrics, cancels at free). */
#include "bus.h"
#include "conf.h"
#include "harness.h"
#include "loop.h"
#include "webhook.h"

#include "sl_err.h"
#include "sl_time.h"

#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

/* ---- an HMAC-SHA256 of its own, for the signature's reference ---- */

static void hmac_ref(const unsigned char *key, size_t key_len, const char *msg, size_t len,
                     char hex[65]) {
  unsigned char k[64] = {0}, ipad[64], opad[64], inner[32], mac[32];
  if (key_len > 64)
    crypto_hash_sha256(k, key, key_len);
  else
    memcpy(k, key, key_len);
  for (int i = 0; i < 64; i++) {
    ipad[i] = k[i] ^ 0x36;
    opad[i] = k[i] ^ 0x5c;
  }
  crypto_hash_sha256_state st;
  crypto_hash_sha256_init(&st);
  crypto_hash_sha256_update(&st, ipad, 64);
  crypto_hash_sha256_update(&st, (const unsigned char *)msg, len);
  crypto_hash_sha256_final(&st, inner);
  crypto_hash_sha256_init(&st);
  crypto_hash_sha256_update(&st, opad, 64);
  crypto_hash_sha256_update(&st, inner, 32);
  crypto_hash_sha256_final(&st, mac);
  sodium_bin2hex(hex, 65, mac, 32);
}

static void test_sign(void) {
  char got[65], want[65];
  const char *body = "{\"event\":\"job.failed\"}";
  char msg[128];
  int n = snprintf(msg, sizeof msg, "1700000000.%s", body);
  gw_webhook_sign("key", 3, 1700000000, body, strlen(body), got);
  hmac_ref((const unsigned char *)"key", 3, msg, (size_t)n, want);
  CHECK_STR(got, want);
  /* a key longer than SHA-256's block is hashed first, not cut */
  unsigned char longkey[131];
  memset(longkey, 0xaa, sizeof longkey);
  gw_webhook_sign(longkey, sizeof longkey, 1700000000, body, strlen(body), got);
  hmac_ref(longkey, sizeof longkey, msg, (size_t)n, want);
  CHECK_STR(got, want);
  char other[65];
  gw_webhook_sign(longkey, 64, 1700000000, body, strlen(body), other);
  CHECK(strcmp(got, other) != 0);
  gw_webhook_sign("key", 3, 1700000001, body, strlen(body), other); /* the time is signed too */
  CHECK(strcmp(other, want) != 0);
  CHECK_INT(strlen(got), 64);
  CHECK_INT(strspn(got, "0123456789abcdef"), 64);
}

/* ---- payloads ---- */

static struct gw_job job(enum gw_job_state st) {
  struct gw_job j = {.id = 12, .state = st, .step = 1200, .steps = 1200, .attempt = 2,
                     .spot = true, .cost_usd = 0.4213, .on_demand_usd = 1.5,
                     .created_us = 1700000000 * SL_US_PER_S, .updated_us = 1700003720 * SL_US_PER_S,
                     .ckpt_step = 800};
  snprintf(j.user, sizeof j.user, "alice");
  snprintf(j.session, sizeof j.session, "nb-1");
  snprintf(j.kind, sizeof j.kind, "train");
  snprintf(j.model, sizeof j.model, "gpt");
  snprintf(j.instance, sizeof j.instance, "local-3");
  snprintf(j.instance_type, sizeof j.instance_type, "g5.xlarge");
  snprintf(j.reason, sizeof j.reason, "done");
  return j;
}

static const char *str(const json_t *o, const char *k) {
  const char *s = json_string_value(json_object_get(o, k));
  return s ? s : "(none)";
}

static void test_payloads(void) {
  int64_t now = 1700003725 * SL_US_PER_S;
  struct gw_job j = job(GW_JOB_SUCCEEDED);
  struct gw_bus_event ev = {.kind = GW_BUS_JOB_STATE, .job = &j};
  CHECK_INT(gw_webhook_event_of(&ev), GW_HOOK_JOB_SUCCEEDED);
  json_t *p = gw_webhook_payload(&ev, GW_HOOK_JOB_SUCCEEDED, now);
  CHECK(p != NULL);
  CHECK_STR(str(p, "event"), "job.succeeded");
  CHECK_STR(str(p, "time"), "2023-11-14T23:15:25.000000Z");
  const json_t *jo = json_object_get(p, "job");
  CHECK_STR(str(jo, "id"), "J000012");
  CHECK_STR(str(jo, "user"), "alice");
  CHECK_STR(str(jo, "name"), "gpt");
  CHECK_STR(str(jo, "kind"), "train");
  CHECK_STR(str(jo, "state"), "succeeded");
  CHECK_STR(str(jo, "instance"), "local-3");
  CHECK_STR(str(jo, "instance_type"), "g5.xlarge");
  CHECK(fabs(json_real_value(json_object_get(jo, "cost_usd")) - 0.4213) < 1e-12);
  const char *text = str(p, "text");
  CHECK(strstr(text, "Job J000012 (alice, train gpt) succeeded after 1h 02m") == text);
  CHECK(strstr(text, "1200/1200 steps on g5.xlarge (spot), $0.42") != NULL);
  if (strstr(text, "succeeded after 1h 02m") == NULL)
    fprintf(stderr, "  text: %s\n", text);
  json_decref(p);
  CHECK(gw_webhook_payload(&ev, GW_HOOK_JOB_FAILED, now) == NULL); /* not what ev is */

  /* text from the world cannot become a Slack mention or link */
  j = job(GW_JOB_FAILED);
  snprintf(j.reason, sizeof j.reason, "exit 1 <!channel> & <http://x|y>");
  CHECK_INT(gw_webhook_event_of(&ev), GW_HOOK_JOB_FAILED);
  p = gw_webhook_payload(&ev, GW_HOOK_JOB_FAILED, now);
  CHECK(strstr(str(p, "text"), "failed: exit 1 &lt;!channel&gt; &amp; &lt;http://x|y&gt;") != NULL);
  CHECK(strchr(str(p, "text"), '<') == NULL);
  CHECK_STR(str(json_object_get(p, "job"), "reason"), "exit 1 <!channel> & <http://x|y>");
  json_decref(p);

  j = job(GW_JOB_CANCELLED);
  CHECK_INT(gw_webhook_event_of(&ev), GW_HOOK_JOB_CANCELLED);
  for (int s = GW_JOB_QUEUED; s <= GW_JOB_PREEMPTED; s++) {
    j.state = (enum gw_job_state)s;
    CHECK_INT(gw_webhook_event_of(&ev), -1);
  }

  j = job(GW_JOB_RUNNING);
  j.instance[0] = 0; /* the scheduler clears it around the event */
  ev = (struct gw_bus_event){.kind = GW_BUS_PREEMPTED, .job = &j, .instance = "local-7",
                             .notice = true};
  CHECK_INT(gw_webhook_event_of(&ev), GW_HOOK_JOB_PREEMPTED);
  p = gw_webhook_payload(&ev, GW_HOOK_JOB_PREEMPTED, now);
  CHECK_STR(str(p, "event"), "job.preempted");
  CHECK(json_is_true(json_object_get(p, "notice")));
  CHECK_STR(str(json_object_get(p, "job"), "instance"), "local-7");
  CHECK(strstr(str(p, "text"), "lost its instance local-7 (preempted with notice); it resumes from step 800"));
  json_decref(p);

  struct gw_bus_budget b = {.scope = "group", .name = "research", .month = "2026-11",
                            .threshold_pct = 50, .spent_usd = 251.5, .budget_usd = 500};
  ev = (struct gw_bus_event){.kind = GW_BUS_BUDGET, .budget = &b};
  CHECK_INT(gw_webhook_event_of(&ev), GW_HOOK_BUDGET_ALERT);
  p = gw_webhook_payload(&ev, GW_HOOK_BUDGET_ALERT, now);
  CHECK_STR(str(p, "text"), "Budget alert: group research spent $251.50 of $500.00 in 2026-11 (the 50% threshold)");
  const json_t *bo = json_object_get(p, "budget");
  CHECK_STR(str(bo, "scope"), "group");
  CHECK_STR(str(bo, "name"), "research");
  CHECK(json_real_value(json_object_get(bo, "threshold_pct")) == 50);
  CHECK(json_is_false(json_object_get(bo, "cap")));
  CHECK(json_object_get(p, "job") == NULL);
  json_decref(p);
  b = (struct gw_bus_budget){.scope = "gateway", .name = "", .month = "2026-11",
                             .threshold_pct = 100, .spent_usd = 2000, .budget_usd = 2000, .cap = true};
  CHECK_INT(gw_webhook_event_of(&ev), GW_HOOK_BUDGET_CAP);
  p = gw_webhook_payload(&ev, GW_HOOK_BUDGET_CAP, now);
  CHECK_STR(str(p, "event"), "budget.cap");
  CHECK(strstr(str(p, "text"), "Budget cap reached: the gateway spent $2000.00 of $2000.00") != NULL);
  CHECK(json_is_true(json_object_get(json_object_get(p, "budget"), "cap")));
  json_decref(p);

  ev = (struct gw_bus_event){.kind = GW_BUS_IDLE_SHUTDOWN, .instance = "local-2", .user = "bob",
                             .session = NULL, .why = "no job for 10m"};
  CHECK_INT(gw_webhook_event_of(&ev), GW_HOOK_IDLE_SHUTDOWN);
  p = gw_webhook_payload(&ev, GW_HOOK_IDLE_SHUTDOWN, now);
  CHECK_STR(str(p, "text"), "Idle shutdown: instance local-2 of bob stopped (no job for 10m)");
  const json_t *io = json_object_get(p, "instance");
  CHECK_STR(str(io, "id"), "local-2");
  CHECK_STR(str(io, "user"), "bob");
  CHECK(json_is_null(json_object_get(io, "session")));
  json_decref(p);

  ev = (struct gw_bus_event){.kind = GW_BUS_COST, .job = &j};
  CHECK_INT(gw_webhook_event_of(&ev), -1);
}

/* ---- verdicts and the retry schedule ---- */

static void test_schedule(void) {
  CHECK_INT(gw_webhook_verdict(0, 200), GW_WEBHOOK_DELIVERED);
  CHECK_INT(gw_webhook_verdict(0, 204), GW_WEBHOOK_DELIVERED);
  CHECK_INT(gw_webhook_verdict(0, 429), GW_WEBHOOK_RETRY);
  CHECK_INT(gw_webhook_verdict(0, 500), GW_WEBHOOK_RETRY);
  CHECK_INT(gw_webhook_verdict(0, 503), GW_WEBHOOK_RETRY);
  CHECK_INT(gw_webhook_verdict(0, 400), GW_WEBHOOK_FAILED);
  CHECK_INT(gw_webhook_verdict(0, 404), GW_WEBHOOK_FAILED);
  CHECK_INT(gw_webhook_verdict(0, 301), GW_WEBHOOK_FAILED);
  CHECK_INT(gw_webhook_verdict(-ECONNREFUSED, 0), GW_WEBHOOK_RETRY);
  CHECK_INT(gw_webhook_verdict(-ETIMEDOUT, 0), GW_WEBHOOK_RETRY);
  CHECK_INT(gw_webhook_verdict(-EHOSTUNREACH, 0), GW_WEBHOOK_RETRY);
  CHECK_INT(gw_webhook_verdict(-EINVAL, 0), GW_WEBHOOK_FAILED);

  const int64_t S = SL_US_PER_S, now = 1700000000 * S;
  /* doubling from one second, jittered into the upper half */
  CHECK_INT(gw_webhook_retry_wait_us(1, 0, 0, NULL, now), S / 2);
  CHECK_INT(gw_webhook_retry_wait_us(1, UINT32_MAX, 0, NULL, now) <= S, 1);
  CHECK_INT(gw_webhook_retry_wait_us(1, S / 2, 0, NULL, now), S);
  CHECK_INT(gw_webhook_retry_wait_us(2, 0, 0, NULL, now), S);
  CHECK_INT(gw_webhook_retry_wait_us(3, 0, 0, NULL, now), 2 * S);
  CHECK_INT(gw_webhook_retry_wait_us(3, 2 * S, 0, NULL, now), 4 * S);
  CHECK_INT(gw_webhook_retry_wait_us(6, 16 * S, 0, NULL, now), 32 * S);
  for (int retry = 1; retry <= 40; retry++) {
    int64_t lo = gw_webhook_retry_wait_us(retry, 0, 0, NULL, now);
    int64_t hi = gw_webhook_retry_wait_us(retry, UINT32_MAX, 0, NULL, now);
    CHECK(lo > 0 && lo <= hi && hi <= GW_WEBHOOK_BACKOFF_MAX_US);
  }
  CHECK_INT(gw_webhook_retry_wait_us(20, 0, 0, NULL, now), GW_WEBHOOK_BACKOFF_MAX_US / 2);
  CHECK_INT(gw_webhook_retry_wait_us(20, 150 * S, 0, NULL, now), GW_WEBHOOK_BACKOFF_MAX_US);
  CHECK_INT(gw_webhook_retry_wait_us(2, 0, 1000, NULL, now), 1000); /* another unit */
  /* Retry-After replaces the backoff, in seconds or as a date, capped */
  CHECK_INT(gw_webhook_retry_wait_us(1, 0, 0, "7", now), 7 * S);
  CHECK_INT(gw_webhook_retry_wait_us(5, 0, 0, "0", now), 0);
  CHECK_INT(gw_webhook_retry_wait_us(1, 0, 0, "100000", now), GW_WEBHOOK_BACKOFF_MAX_US);
  CHECK_INT(gw_webhook_retry_wait_us(1, 0, 0, "99999999999999999999", now), GW_WEBHOOK_BACKOFF_MAX_US);
  /* 1700000000 is Tue, 14 Nov 2023 22:13:20 GMT */
  CHECK_INT(gw_webhook_retry_wait_us(1, 0, 0, "Tue, 14 Nov 2023 22:13:50 GMT", now), 30 * S);
  CHECK_INT(gw_webhook_retry_wait_us(1, 0, 0, "Tue, 14 Nov 2023 22:00:00 GMT", now), 0);
  CHECK_INT(gw_webhook_retry_wait_us(1, 0, 0, "soon", now), S / 2);
  CHECK_INT(gw_webhook_retry_wait_us(1, 0, 0, "-5", now), S / 2);
  CHECK_INT(gw_webhook_retry_wait_us(1, 0, 0, "", now), S / 2);
}

/* ---- the delivery machine on a hand-answered transport ---- */

#define MAX_REQS 2048

struct sent {
  uint64_t id;
  char *url, *body;
  char headers[SL_HTTP_MAX_HEADERS][200];
  int timeout_ms, max_tries;
  sl_http_done_fn done;
  void *data;
  bool answered, cancelled;
};

static struct fake {
  struct sent reqs[MAX_REQS];
  size_t n;
  uint64_t next_id;
  int refuse;                   /* start's answer when not 0 */
} fake;

static int fake_start(void *ctx, const struct sl_http_req *req, sl_http_done_fn done, void *data,
                      uint64_t *ret_id) {
  struct fake *f = ctx;
  if (f->refuse)
    return f->refuse;
  if (f->n == MAX_REQS)
    return SL_ELIMIT;
  struct sent *s = &f->reqs[f->n++];
  memset(s, 0, sizeof *s);
  s->id = ++f->next_id;
  s->url = strdup(req->url);
  s->body = strndup(req->body, req->body_len);
  for (int i = 0; i < SL_HTTP_MAX_HEADERS && req->headers[i]; i++)
    snprintf(s->headers[i], sizeof s->headers[i], "%s", req->headers[i]);
  s->timeout_ms = req->timeout_ms;
  s->max_tries = req->retry.max_tries;
  s->done = done;
  s->data = data;
  *ret_id = s->id;
  return 0;
}

static int fake_cancel(void *ctx, uint64_t id) {
  struct fake *f = ctx;
  for (size_t i = 0; i < f->n; i++)
    if (f->reqs[i].id == id && !f->reqs[i].answered) {
      f->reqs[i].cancelled = true;
      return 0;
    }
  return -ENOENT;
}

static void fake_reset(void) {
  for (size_t i = 0; i < fake.n; i++) {
    free(fake.reqs[i].url);
    free(fake.reqs[i].body);
  }
  fake.n = 0;
  fake.refuse = 0;
}

static const char *header(const struct sent *s, const char *name) {
  size_t n = strlen(name);
  for (int i = 0; i < SL_HTTP_MAX_HEADERS; i++)
    if (!strncmp(s->headers[i], name, n) && s->headers[i][n] == ':')
      return s->headers[i] + n + 2;
  return NULL;
}

/* Answers request i: err < 0 (no answer), else status with retry_after. */
static void answer(size_t i, int err, long status, const char *retry_after) {
  struct sent *s = &fake.reqs[i];
  CHECK(!s->answered && !s->cancelled);
  s->answered = true;
  struct sl_http_resp resp = {.status = status, .body = (char *)"", .tries = 1};
  resp.header_values[0] = (char *)retry_after;
  s->done(s->id, err, err < 0 ? NULL : &resp, s->data);
}

/* Turns the loop until n requests were made, for at most timeout_us. */
static bool wait_reqs(struct gw_loop *l, size_t n, int64_t timeout_us) {
  int64_t end = sl_time_mono_us() + timeout_us;
  while (fake.n < n && sl_time_mono_us() < end)
    gw_loop_run_once(l, 10 * SL_US_PER_MS);
  return fake.n >= n;
}

static char *metrics(const struct gw_webhooks *w) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  gw_webhooks_metrics(w, f);
  fclose(f);
  return text;
}

static bool has(const char *text, const char *line) {
  bool ok = strstr(text, line) != NULL;
  if (!ok)
    fprintf(stderr, "  no \"%s\" in:\n%s\n", line, text);
  return ok;
}

static void hook(struct gw_config *c, const char *name, const char *url, unsigned mask,
                 const char *secret, int retries) {
  struct gw_webhook_cfg *w = &c->webhooks[c->n_webhooks++];
  memset(w, 0, sizeof *w);
  snprintf(w->name, sizeof w->name, "%s", name);
  snprintf(w->url, sizeof w->url, "%s", url);
  snprintf(w->secret, sizeof w->secret, "%s", secret);
  w->event_mask = mask;
  w->timeout_us = 3 * SL_US_PER_S;
  w->retries = retries;
}

static void test_deliveries(void) {
  static struct gw_config cfg;
  gw_config_defaults(&cfg);
  hook(&cfg, "ops", "http://127.0.0.1:9/hook", (1u << GW_HOOK_JOB_SUCCEEDED) | (1u << GW_HOOK_JOB_FAILED),
       "ops-secret", 3);
  hook(&cfg, "money", "https://example.org/b", 1u << GW_HOOK_BUDGET_ALERT, "m", 6);
  struct gw_loop *loop = gw_loop_new();
  struct gw_webhooks_env env = {.cfg = &cfg, .loop = loop, .start = fake_start,
                                .cancel = fake_cancel, .send_ctx = &fake,
                                .backoff_unit_us = SL_US_PER_MS};
  struct gw_webhooks *w = gw_webhooks_new(&env);
  struct gw_bus bus;
  gw_bus_init(&bus);
  CHECK_INT(gw_bus_subscribe(&bus, GW_WEBHOOK_BUS_KINDS, gw_webhooks_sink, w), 0);

  struct gw_job j = job(GW_JOB_RUNNING);
  gw_bus_emit(&bus, &(struct gw_bus_event){.kind = GW_BUS_JOB_STATE, .job = &j});
  gw_bus_emit(&bus, &(struct gw_bus_event){.kind = GW_BUS_PREEMPTED, .job = &j, .instance = "x"});
  CHECK_INT(fake.n, 0); /* neither is asked for */
  j.state = GW_JOB_SUCCEEDED;
  gw_bus_emit(&bus, &(struct gw_bus_event){.kind = GW_BUS_JOB_STATE, .job = &j});
  CHECK_INT(fake.n, 1); /* ops only */
  struct sent *s = &fake.reqs[0];
  CHECK_STR(s->url, "http://127.0.0.1:9/hook");
  CHECK_INT(s->max_tries, 1); /* the schedule is the module's own */
  CHECK_INT(s->timeout_ms, 3000);
  CHECK_STR(header(s, "Content-Type"), "application/json");
  CHECK_STR(header(s, "X-Spotlab-Event"), "job.succeeded");
  const char *id = header(s, "X-Spotlab-Delivery");
  CHECK(id && strlen(id) == 32 && strspn(id, "0123456789abcdef") == 32);
  const char *ts = header(s, "X-Spotlab-Timestamp");
  const char *sig = header(s, "X-Spotlab-Signature");
  CHECK(ts && sig && !strncmp(sig, "sha256=", 7));
  long long t = ts ? strtoll(ts, NULL, 10) : 0;
  CHECK(llabs(t - sl_time_real_us() / SL_US_PER_S) <= 5);
  char msg[4096], want[65];
  int n = snprintf(msg, sizeof msg, "%s.%s", ts ? ts : "", s->body);
  hmac_ref((const unsigned char *)"ops-secret", 10, msg, (size_t)n, want);
  CHECK(sig && !strcmp(sig + 7, want));
  json_t *body = json_loads(s->body, 0, NULL);
  CHECK_STR(str(body, "event"), "job.succeeded");
  CHECK_STR(str(json_object_get(body, "job"), "id"), "J000012");
  json_decref(body);

  /* 500, 503 (its Retry-After of 0 honoured), then 200: three tries, one delivery id, one body */
  char first_id[40];
  snprintf(first_id, sizeof first_id, "%s", id ? id : "");
  answer(0, 0, 500, NULL);
  char *text = metrics(w);
  CHECK(has(text, "spotlab_webhook_pending{webhook=\"ops\"} 1\n"));
  free(text);
  CHECK(wait_reqs(loop, 2, 2 * SL_US_PER_S));
  answer(1, 0, 503, "0");
  CHECK(wait_reqs(loop, 3, 2 * SL_US_PER_S));
  CHECK_STR(header(&fake.reqs[2], "X-Spotlab-Delivery"), first_id);
  CHECK_STR(fake.reqs[2].body, fake.reqs[0].body);
  answer(2, 0, 200, NULL);
  text = metrics(w);
  CHECK(has(text, "# TYPE spotlab_webhook_deliveries_total counter\n"));
  CHECK(has(text, "spotlab_webhook_deliveries_total{webhook=\"ops\",event=\"job.succeeded\",outcome=\"delivered\"} 1\n"));
  CHECK(has(text, "spotlab_webhook_deliveries_total{webhook=\"ops\",event=\"job.failed\",outcome=\"failed\"} 0\n"));
  CHECK(has(text, "spotlab_webhook_deliveries_total{webhook=\"money\",event=\"budget.alert\",outcome=\"dropped\"} 0\n"));
  CHECK(strstr(text, "event=\"budget.alert\",outcome=\"delivered\"} 0") != NULL);
  CHECK(strstr(text, "webhook=\"money\",event=\"job.succeeded\"") == NULL);
  CHECK(has(text, "spotlab_webhook_retries_total{webhook=\"ops\"} 2\n"));
  CHECK(has(text, "spotlab_webhook_pending{webhook=\"ops\"} 0\n"));
  free(text);
  /* nothing more is sent for a delivered one */
  gw_loop_run_once(loop, 20 * SL_US_PER_MS);
  CHECK_INT(fake.n, 3);

  /* a 404 is final at once */
  j.state = GW_JOB_FAILED;
  gw_bus_emit(&bus, &(struct gw_bus_event){.kind = GW_BUS_JOB_STATE, .job = &j});
  CHECK_INT(fake.n, 4);
  answer(3, 0, 404, NULL);
  /* no connection, every time: 1 + retries tries, then failed */
  gw_bus_emit(&bus, &(struct gw_bus_event){.kind = GW_BUS_JOB_STATE, .job = &j});
  for (size_t i = 4; i < 8; i++) {
    CHECK(wait_reqs(loop, i + 1, 2 * SL_US_PER_S));
    if (fake.n > i)
      answer(i, -ECONNREFUSED, 0, NULL);
  }
  gw_loop_run_once(loop, 50 * SL_US_PER_MS);
  CHECK_INT(fake.n, 8);
  text = metrics(w);
  CHECK(has(text, "{webhook=\"ops\",event=\"job.failed\",outcome=\"failed\"} 2\n"));
  CHECK(has(text, "spotlab_webhook_retries_total{webhook=\"ops\"} 5\n"));
  free(text);

  /* a budget event to money; a start that fails for good fails the delivery */
  struct gw_bus_budget b = {.scope = "user", .name = "alice", .month = "2026-11",
                            .threshold_pct = 25, .spent_usd = 3, .budget_usd = 10};
  fake.refuse = -EINVAL;
  gw_bus_emit(&bus, &(struct gw_bus_event){.kind = GW_BUS_BUDGET, .budget = &b});
  fake.refuse = 0;
  text = metrics(w);
  CHECK(has(text, "{webhook=\"money\",event=\"budget.alert\",outcome=\"failed\"} 1\n"));
  free(text);

  /* a receiver that never answers: ACTIVE_MAX in flight, QUEUE_MAX waiting,
   * the oldest waiting dropped and counted */
  size_t before = fake.n, extra = 5;
  j.state = GW_JOB_SUCCEEDED;
  for (size_t i = 0; i < GW_WEBHOOK_ACTIVE_MAX + GW_WEBHOOK_QUEUE_MAX + extra; i++) {
    j.id = 100 + (int64_t)i;
    gw_bus_emit(&bus, &(struct gw_bus_event){.kind = GW_BUS_JOB_STATE, .job = &j});
  }
  CHECK_INT(fake.n - before, GW_WEBHOOK_ACTIVE_MAX);
  text = metrics(w);
  char line[200];
  snprintf(line, sizeof line, "spotlab_webhook_pending{webhook=\"ops\"} %d\n",
           GW_WEBHOOK_ACTIVE_MAX + GW_WEBHOOK_QUEUE_MAX);
  CHECK(has(text, line));
  snprintf(line, sizeof line,
           "{webhook=\"ops\",event=\"job.succeeded\",outcome=\"dropped\"} %zu\n", extra);
  CHECK(has(text, line));
  free(text);
  /* one ends: the oldest still waiting goes next (J000104 and on were dropped first) */
  answer(before, 0, 200, NULL);
  CHECK_INT(fake.n - before, GW_WEBHOOK_ACTIVE_MAX + 1);
  body = json_loads(fake.reqs[fake.n - 1].body, 0, NULL);
  snprintf(line, sizeof line, "J%06zu", 100 + GW_WEBHOOK_ACTIVE_MAX + extra);
  CHECK_STR(str(json_object_get(body, "job"), "id"), line);
  json_decref(body);

  /* free cancels what is in flight; no callback runs after */
  size_t open = 0;
  for (size_t i = 0; i < fake.n; i++)
    open += !fake.reqs[i].answered;
  CHECK_INT(open, GW_WEBHOOK_ACTIVE_MAX);
  w = gw_webhooks_free(w);
  size_t cancelled = 0;
  for (size_t i = 0; i < fake.n; i++)
    cancelled += fake.reqs[i].cancelled;
  CHECK_INT(cancelled, GW_WEBHOOK_ACTIVE_MAX);
  CHECK(gw_webhooks_free(NULL) == NULL);
  fake_reset();

  /* a delivery waiting for its retry timer is dropped at free, its timer with it */
  w = gw_webhooks_new(&(struct gw_webhooks_env){.cfg = &cfg, .loop = loop, .start = fake_start,
                                                .cancel = fake_cancel, .send_ctx = &fake,
                                                .backoff_unit_us = 60 * SL_US_PER_S});
  gw_bus_init(&bus);
  gw_bus_subscribe(&bus, GW_WEBHOOK_BUS_KINDS, gw_webhooks_sink, w);
  gw_bus_emit(&bus, &(struct gw_bus_event){.kind = GW_BUS_JOB_STATE, .job = &j});
  answer(0, 0, 429, NULL);
  w = gw_webhooks_free(w);
  gw_loop_run_once(loop, 10 * SL_US_PER_MS); /* its timer is gone: nothing runs, nothing breaks */
  CHECK_INT(fake.n, 1);
  fake_reset();

  /* no webhooks: the sink does nothing and /metrics has no webhook family */
  static struct gw_config none;
  gw_config_defaults(&none);
  w = gw_webhooks_new(&(struct gw_webhooks_env){.cfg = &none, .loop = loop, .start = fake_start,
                                                .send_ctx = &fake});
  gw_webhooks_sink(w, &(struct gw_bus_event){.kind = GW_BUS_JOB_STATE, .job = &j});
  CHECK_INT(fake.n, 0);
  text = metrics(w);
  CHECK_STR(text, "");
  free(text);
  gw_webhooks_free(w);
  gw_loop_free(loop);
}

int main(void) {
  if (sodium_init() < 0)
    return 1;
  test_sign();
  test_payloads();
  test_schedule();
  test_deliveries();
  TEST_MAIN_END();
}
