/* Webhooks (webhook.h).
 *
 * A bus event becomes one JSON body, shared by every hook that asks for its
 * event; each hook then holds its own delivery (an id, the body, the tries
 * made). A delivery is in exactly one place: a hook's waiting ring, or one
 * of its active slots, where it is either in flight (xfer) or waiting for
 * its retry timer (timer). Each try is signed afresh with the time it is
 * sent, so a receiver can refuse old replays; the body stays the same.
 *
 * Every try is a single transfer (no retry inside sl_http): the retry
 * schedule is this module's own, on loop timers, so a receiver that fails
 * for minutes holds no transfer slot of the HTTP client the providers
 * share. The URL is never logged (a Slack URL is a credential), nor the
 * secret. */
#include "webhook.h"

#include "config.h"
#include "httpc.h"
#include "loop.h"

#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define T "gateway.webhook"
#define DEFAULT_UNIT_US SL_US_PER_S
#define BUSY_WAIT_US SL_US_PER_S  /* the HTTP client was full: try again after this */
#define RESP_MAX_BYTES 16384      /* a receiver's answer is read this far, then dropped */

enum outcome { DELIVERED, FAILED, DROPPED, N_OUTCOMES };
static const char *const outcome_names[N_OUTCOMES] = {"delivered", "failed", "dropped"};

struct hook;

struct delivery {
  struct hook *hook;
  enum gw_hook_event event;
  char id[33];                  /* X-Spotlab-Delivery: random, the same on every try */
  char *body;                   /* owned */
  size_t len;
  int tries;                    /* made so far */
  uint64_t xfer;                /* in flight; 0: not */
  int64_t timer;                /* waiting to retry; 0: not */
};

struct hook {
  struct gw_webhooks *w;
  const struct gw_webhook_cfg *cfg;
  struct delivery *ring[GW_WEBHOOK_QUEUE_MAX]; /* waiting, oldest at head */
  size_t head, n;
  struct delivery *active[GW_WEBHOOK_ACTIVE_MAX];
  uint64_t counts[GW_HOOK_N_EVENTS][N_OUTCOMES];
  uint64_t retries;
  bool pumping;                 /* pump() is on the stack: a finish inside leaves the rest to it */
  struct sl_log_limit log_limit;
};

struct gw_webhooks {
  struct gw_webhooks_env env;
  struct hook *hooks;
  size_t n;
};

/* ---- pure pieces ----------------------------------------------------- */

int gw_webhook_event_of(const struct gw_bus_event *ev) {
  switch (ev->kind) {
  case GW_BUS_JOB_STATE:
    if (!ev->job)
      return -1;
    return ev->job->state == GW_JOB_SUCCEEDED ? GW_HOOK_JOB_SUCCEEDED
           : ev->job->state == GW_JOB_FAILED  ? GW_HOOK_JOB_FAILED
           : ev->job->state == GW_JOB_CANCELLED ? GW_HOOK_JOB_CANCELLED : -1;
  case GW_BUS_PREEMPTED:
    return ev->job ? GW_HOOK_JOB_PREEMPTED : -1;
  case GW_BUS_BUDGET:
    return !ev->budget ? -1 : ev->budget->cap ? GW_HOOK_BUDGET_CAP : GW_HOOK_BUDGET_ALERT;
  case GW_BUS_IDLE_SHUTDOWN:
    return GW_HOOK_IDLE_SHUTDOWN;
  default:
    return -1;
  }
}

/* Appends s to f with Slack's three escapes: text from the world (a job's
 * reason) cannot turn into a link or a mention. */
static void slack_escaped(FILE *f, const char *s) {
  for (; s && *s; s++) {
    if (*s == '&')
      fputs("&amp;", f);
    else if (*s == '<')
      fputs("&lt;", f);
    else if (*s == '>')
      fputs("&gt;", f);
    else if (*s == '\n' || *s == '\r')
      fputc(' ', f);
    else
      fputc(*s, f);
  }
}

/* "Job J000012 (alice, train gpt)" */
static void job_words(FILE *f, const struct gw_job *j) {
  char id[16];
  fprintf(f, "Job %s (", gw_job_id_str(j->id, id, sizeof id));
  slack_escaped(f, j->user);
  fputs(", ", f);
  slack_escaped(f, j->kind);
  if (j->model[0]) {
    fputc(' ', f);
    slack_escaped(f, j->model);
  }
  fputc(')', f);
}

/* " on g5.xlarge (spot), $0.42 so far" */
static void job_place(FILE *f, const struct gw_job *j) {
  if (j->instance_type[0]) {
    fputs(" on ", f);
    slack_escaped(f, j->instance_type);
    fputs(j->spot ? " (spot)" : " (on-demand)", f);
  }
  fprintf(f, ", $%.2f", j->cost_usd);
}

static void budget_whose(FILE *f, const struct gw_bus_budget *b) {
  if (!strcmp(b->scope, "gateway") || !b->name || !b->name[0]) {
    fputs("the gateway", f);
    return;
  }
  slack_escaped(f, b->scope);
  fputc(' ', f);
  slack_escaped(f, b->name);
}

/* The one human line of e: Slack shows it as the message. */
static char *text_of(const struct gw_bus_event *ev, enum gw_hook_event e) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f)
    return NULL;
  const struct gw_job *j = ev->job;
  char dur[32];
  switch (e) {
  case GW_HOOK_JOB_SUCCEEDED:
    job_words(f, j);
    sl_time_format_duration(j->updated_us - j->created_us, dur, sizeof dur);
    fprintf(f, " succeeded after %s", dur);
    if (j->steps > 0)
      fprintf(f, ", %lld/%lld steps", (long long)j->step, (long long)j->steps);
    job_place(f, j);
    break;
  case GW_HOOK_JOB_FAILED:
  case GW_HOOK_JOB_CANCELLED:
    job_words(f, j);
    fputs(e == GW_HOOK_JOB_FAILED ? " failed" : " was cancelled", f);
    if (j->reason[0]) {
      fputs(": ", f);
      slack_escaped(f, j->reason);
    }
    job_place(f, j);
    break;
  case GW_HOOK_JOB_PREEMPTED:
    job_words(f, j);
    fputs(" lost its instance ", f);
    slack_escaped(f, ev->instance ? ev->instance : j->instance);
    fputs(ev->notice ? " (preempted with notice)" : " (preempted without notice)", f);
    if (strcmp(j->kind, "run"))
      fprintf(f, "; it resumes from step %lld", (long long)j->ckpt_step);
    else
      fputs("; it resumes", f);
    break;
  case GW_HOOK_BUDGET_ALERT:
  case GW_HOOK_BUDGET_CAP:
    fputs(e == GW_HOOK_BUDGET_CAP ? "Budget cap reached: " : "Budget alert: ", f);
    budget_whose(f, ev->budget);
    fprintf(f, " spent $%.2f of $%.2f in ", ev->budget->spent_usd, ev->budget->budget_usd);
    slack_escaped(f, ev->budget->month ? ev->budget->month : "this month");
    if (e == GW_HOOK_BUDGET_CAP)
      fputs("; running jobs checkpoint and stop, new jobs are refused", f);
    else
      fprintf(f, " (the %g%% threshold)", ev->budget->threshold_pct);
    break;
  case GW_HOOK_IDLE_SHUTDOWN:
    fputs("Idle shutdown: instance ", f);
    slack_escaped(f, ev->instance ? ev->instance : "?");
    if (ev->user) {
      fputs(" of ", f);
      slack_escaped(f, ev->user);
    }
    fputs(" stopped", f);
    if (ev->why) {
      fputs(" (", f);
      slack_escaped(f, ev->why);
      fputc(')', f);
    }
    break;
  default:
    break;
  }
  if (fclose(f) != 0) {
    free(buf);
    return NULL;
  }
  return buf;
}

static json_t *job_json(const struct gw_job *j) {
  char id[16], created[40];
  return json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:i,s:s,s:s,s:s,s:b,s:o,s:o,"
                   "s:s}",
                   "id", gw_job_id_str(j->id, id, sizeof id), "user", j->user, "session",
                   j->session, "name", j->model[0] ? j->model : j->kind, "kind", j->kind,
                   "model", j->model, "data", j->data, "state", gw_job_state_name(j->state),
                   "reason", j->reason, "step", (json_int_t)j->step, "steps",
                   (json_int_t)j->steps, "attempt", j->attempt, "instance", j->instance,
                   "instance_type", j->instance_type, "zone", j->zone, "spot", j->spot,
                   "cost_usd", sl_json_real(j->cost_usd), "on_demand_usd",
                   sl_json_real(j->on_demand_usd), "created",
                   sl_time_format_iso8601(j->created_us, created, sizeof created));
}

json_t *gw_webhook_payload(const struct gw_bus_event *ev, enum gw_hook_event e, int64_t real_us) {
  const char *name = gw_config_hook_event_name(e);
  if (!name || gw_webhook_event_of(ev) != (int)e)
    return NULL;
  char when[40];
  char *text = text_of(ev, e);
  json_t *p = text ? json_pack("{s:s,s:s,s:s}", "event", name, "time",
                               sl_time_format_iso8601(real_us, when, sizeof when), "text", text)
                   : NULL;
  free(text);
  if (!p)
    return NULL;
  int r = 0;
  if (ev->job) {
    json_t *job = job_json(ev->job);
    if (job && e == GW_HOOK_JOB_PREEMPTED) /* the job's own instance is already cleared */
      r |= json_object_set_new(job, "instance", json_string(ev->instance ? ev->instance : ""));
    r |= json_object_set_new(p, "job", job);
    if (e == GW_HOOK_JOB_PREEMPTED)
      r |= json_object_set_new(p, "notice", json_boolean(ev->notice));
  }
  if (ev->budget) {
    const struct gw_bus_budget *b = ev->budget;
    r |= json_object_set_new(p, "budget",
                             json_pack("{s:s,s:s,s:s,s:o,s:o,s:o,s:b}", "scope", b->scope ? b->scope : "",
                                       "name", b->name ? b->name : "", "month",
                                       b->month ? b->month : "", "threshold_pct",
                                       sl_json_real(b->threshold_pct), "spent_usd",
                                       sl_json_real(b->spent_usd), "budget_usd",
                                       sl_json_real(b->budget_usd), "cap", b->cap));
  }
  if (e == GW_HOOK_IDLE_SHUTDOWN)
    r |= json_object_set_new(p, "instance",
                             json_pack("{s:s,s:s,s:s?,s:s}", "id", ev->instance ? ev->instance : "",
                                       "user", ev->user ? ev->user : "", "session", ev->session,
                                       "reason", ev->why ? ev->why : ""));
  if (r) {
    json_decref(p);
    return NULL;
  }
  return p;
}

void gw_webhook_sign(const void *key, size_t key_len, int64_t timestamp_s, const void *body,
                     size_t body_len, char ret_hex[65]) {
  crypto_auth_hmacsha256_state st;
  unsigned char mac[crypto_auth_hmacsha256_BYTES];
  char ts[24];
  int n = snprintf(ts, sizeof ts, "%lld.", (long long)timestamp_s);
  crypto_auth_hmacsha256_init(&st, key, key_len);
  crypto_auth_hmacsha256_update(&st, (const unsigned char *)ts, (unsigned long long)n);
  crypto_auth_hmacsha256_update(&st, body, body_len);
  crypto_auth_hmacsha256_final(&st, mac);
  sodium_bin2hex(ret_hex, 65, mac, sizeof mac);
  sodium_memzero(&st, sizeof st);
}

enum gw_webhook_verdict gw_webhook_verdict(int err, long status) {
  if (err == -EINVAL || err == -ENOMEM)
    return GW_WEBHOOK_FAILED; /* a URL curl refuses will not get better */
  if (err < 0)
    return GW_WEBHOOK_RETRY;
  if (status >= 200 && status < 300)
    return GW_WEBHOOK_DELIVERED;
  if (status == 429 || status >= 500)
    return GW_WEBHOOK_RETRY;
  return GW_WEBHOOK_FAILED;
}

/* A Retry-After value as a wait from now_real_us: delta-seconds or an
 * HTTP date. -1 when there is none or it cannot be read. */
static int64_t retry_after_us(const char *v, int64_t now_real_us) {
  if (!v || !*v)
    return -1;
  if (strspn(v, "0123456789") == strlen(v)) {
    if (strlen(v) > 9)
      return GW_WEBHOOK_BACKOFF_MAX_US;
    return strtoll(v, NULL, 10) * SL_US_PER_S;
  }
  struct tm tm = {0};
  const char *end = strptime(v, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (!end || *end)
    return -1;
  int64_t at_us = (int64_t)timegm(&tm) * SL_US_PER_S;
  return at_us > now_real_us ? at_us - now_real_us : 0;
}

int64_t gw_webhook_retry_wait_us(int retry, uint32_t rnd, int64_t unit_us, const char *retry_after,
                                 int64_t now_real_us) {
  int64_t wait = retry_after_us(retry_after, now_real_us);
  if (wait < 0) {
    int64_t base = unit_us > 0 ? unit_us : DEFAULT_UNIT_US;
    for (int i = 1; i < retry && base < GW_WEBHOOK_BACKOFF_MAX_US; i++)
      base *= 2;
    if (base > GW_WEBHOOK_BACKOFF_MAX_US)
      base = GW_WEBHOOK_BACKOFF_MAX_US;
    /* the upper half, at random: hooks that failed together spread out */
    wait = base - base / 2 + (int64_t)(rnd % (uint64_t)(base / 2 + 1));
  }
  return wait < GW_WEBHOOK_BACKOFF_MAX_US ? wait : GW_WEBHOOK_BACKOFF_MAX_US;
}

/* ---- deliveries ------------------------------------------------------ */

static void try_send(struct delivery *d);

static struct delivery *delivery_free(struct delivery *d) {
  if (d) {
    free(d->body);
    free(d);
  }
  return NULL;
}

static size_t active_count(const struct hook *h) {
  size_t n = 0;
  for (size_t i = 0; i < GW_WEBHOOK_ACTIVE_MAX; i++)
    n += h->active[i] != NULL;
  return n;
}

/* Starts waiting deliveries while the hook has a free active slot. */
static void pump(struct hook *h) {
  if (h->pumping)
    return;
  h->pumping = true;
  size_t i = 0;
  while (h->n) {
    for (i = 0; i < GW_WEBHOOK_ACTIVE_MAX && h->active[i]; i++)
      ;
    if (i == GW_WEBHOOK_ACTIVE_MAX)
      break;
    struct delivery *d = h->ring[h->head];
    h->ring[h->head] = NULL;
    h->head = (h->head + 1) % GW_WEBHOOK_QUEUE_MAX;
    h->n--;
    h->active[i] = d;
    try_send(d);
  }
  h->pumping = false;
}

/* d leaves its active slot with outcome o (DELIVERED or FAILED); the next
 * waiting delivery takes the slot. */
static void finish(struct delivery *d, enum outcome o) {
  struct hook *h = d->hook;
  h->counts[d->event][o]++;
  for (size_t i = 0; i < GW_WEBHOOK_ACTIVE_MAX; i++)
    if (h->active[i] == d)
      h->active[i] = NULL;
  delivery_free(d);
  pump(h);
}

static int64_t on_retry(struct gw_loop *l, int64_t id, int64_t now_us, void *data) {
  (void)l; (void)id; (void)now_us;
  struct delivery *d = data;
  d->timer = 0;
  try_send(d);
  return GW_LOOP_NOMORE;
}

/* Waits wait_us, then tries d again; a delivery that cannot get a timer fails. */
static void retry_later(struct delivery *d, int64_t wait_us) {
  struct gw_loop *loop = d->hook->w->env.loop;
  int64_t t = gw_loop_add_timer(loop, gw_loop_now_us(loop) + wait_us, on_retry, d);
  if (t < 0) {
    sl_log_limited(&d->hook->log_limit, T, SL_LOG_WARN, "webhook %s: %s delivery %s dropped: %s",
                   d->hook->cfg->name, gw_config_hook_event_name(d->event), d->id,
                   sl_strerror((int)t));
    finish(d, FAILED);
    return;
  }
  d->timer = t;
}

static void on_done(uint64_t id, int err, struct sl_http_resp *resp, void *data) {
  (void)id;
  struct delivery *d = data;
  struct hook *h = d->hook;
  d->xfer = 0;
  long status = resp ? resp->status : 0;
  enum gw_webhook_verdict v = gw_webhook_verdict(err, status);
  const char *event = gw_config_hook_event_name(d->event);
  char why[96];
  if (err < 0)
    snprintf(why, sizeof why, "%s", sl_strerror(err));
  else
    snprintf(why, sizeof why, "HTTP %ld", status);
  if (v == GW_WEBHOOK_DELIVERED) {
    sl_debug(T, "webhook %s: %s delivery %s delivered (try %d)", h->cfg->name, event, d->id,
             d->tries);
    finish(d, DELIVERED);
    return;
  }
  if (v == GW_WEBHOOK_RETRY && d->tries <= h->cfg->retries) {
    const char *after = resp ? resp->header_values[0] : NULL;
    int64_t wait = gw_webhook_retry_wait_us(d->tries, randombytes_random(),
                                            h->w->env.backoff_unit_us, after,
                                            sl_time_real_us());
    sl_debug(T, "webhook %s: %s delivery %s: %s; try %d in %lld ms", h->cfg->name, event, d->id,
             why, d->tries + 1, (long long)(wait / SL_US_PER_MS));
    h->retries++;
    retry_later(d, wait);
    return;
  }
  sl_log_limited(&h->log_limit, T, SL_LOG_WARN, "webhook %s: %s delivery %s failed after %d %s: %s",
                 h->cfg->name, event, d->id, d->tries, d->tries == 1 ? "try" : "tries", why);
  finish(d, FAILED);
}

static void try_send(struct delivery *d) {
  struct hook *h = d->hook;
  const struct gw_webhooks_env *env = &h->w->env;
  int64_t ts = sl_time_real_us() / SL_US_PER_S;
  char sig[65];
  gw_webhook_sign(h->cfg->secret, strlen(h->cfg->secret), ts, d->body, d->len, sig);
  char h_event[64], h_id[64], h_ts[64], h_sig[96];
  snprintf(h_event, sizeof h_event, "X-Spotlab-Event: %s", gw_config_hook_event_name(d->event));
  snprintf(h_id, sizeof h_id, "X-Spotlab-Delivery: %s", d->id);
  snprintf(h_ts, sizeof h_ts, "X-Spotlab-Timestamp: %lld", (long long)ts);
  snprintf(h_sig, sizeof h_sig, "X-Spotlab-Signature: sha256=%s", sig);
  struct sl_http_req req = {
    .method = "POST", .url = h->cfg->url,
    .headers = {"Content-Type: application/json", "User-Agent: spotlab-gateway/" SPOTLAB_VERSION,
                h_event, h_id, h_ts, h_sig},
    .body = d->body, .body_len = d->len, .body_max_bytes = RESP_MAX_BYTES,
    .timeout_ms = (int)(h->cfg->timeout_us / SL_US_PER_MS),
    .retry = {.max_tries = 1},
    .use_env_proxy = true, /* receivers are often on the internet, behind the site's proxy */
    .resp_headers = {"Retry-After"},
  };
  uint64_t id = 0;
  int r = env->start ? env->start(env->send_ctx, &req, on_done, d, &id)
                     : gw_httpc_start(env->http, &req, on_done, d, &id);
  if (r == SL_ELIMIT) { /* the client is full: not the receiver's fault, not a try */
    retry_later(d, BUSY_WAIT_US);
    return;
  }
  if (r < 0) {
    sl_log_limited(&h->log_limit, T, SL_LOG_WARN, "webhook %s: cannot post %s delivery %s: %s",
                   h->cfg->name, gw_config_hook_event_name(d->event), d->id, sl_strerror(r));
    finish(d, FAILED);
    return;
  }
  d->tries++;
  d->xfer = id;
}

/* Queues body (copied) for h as event e; a full ring drops its oldest. */
static void enqueue(struct hook *h, enum gw_hook_event e, const char *body, size_t len) {
  struct delivery *d = calloc(1, sizeof *d);
  if (d && !(d->body = malloc(len + 1)))
    d = delivery_free(d);
  if (!d) {
    h->counts[e][DROPPED]++;
    return;
  }
  memcpy(d->body, body, len + 1);
  d->len = len;
  d->hook = h;
  d->event = e;
  unsigned char rnd[16];
  randombytes_buf(rnd, sizeof rnd);
  sodium_bin2hex(d->id, sizeof d->id, rnd, sizeof rnd);
  if (h->n == GW_WEBHOOK_QUEUE_MAX) {
    struct delivery *old = h->ring[h->head];
    h->ring[h->head] = NULL;
    h->head = (h->head + 1) % GW_WEBHOOK_QUEUE_MAX;
    h->n--;
    h->counts[old->event][DROPPED]++;
    sl_log_limited(&h->log_limit, T, SL_LOG_WARN,
                   "webhook %s: %d deliveries waiting; the oldest (%s %s) is dropped",
                   h->cfg->name, GW_WEBHOOK_QUEUE_MAX, gw_config_hook_event_name(old->event),
                   old->id);
    delivery_free(old);
  }
  h->ring[(h->head + h->n) % GW_WEBHOOK_QUEUE_MAX] = d;
  h->n++;
  pump(h);
}

void gw_webhooks_sink(void *data, const struct gw_bus_event *ev) {
  struct gw_webhooks *w = data;
  int e = gw_webhook_event_of(ev);
  bool wanted = false;
  for (size_t i = 0; e >= 0 && i < w->n; i++)
    wanted |= (w->hooks[i].cfg->event_mask >> e) & 1;
  if (!wanted)
    return;
  json_t *p = gw_webhook_payload(ev, (enum gw_hook_event)e, sl_time_real_us());
  char *body = p ? json_dumps(p, JSON_COMPACT) : NULL;
  json_decref(p);
  for (size_t i = 0; i < w->n; i++) {
    struct hook *h = &w->hooks[i];
    if (!((h->cfg->event_mask >> e) & 1))
      continue;
    if (body)
      enqueue(h, (enum gw_hook_event)e, body, strlen(body));
    else
      h->counts[e][DROPPED]++; /* out of memory */
  }
  free(body);
}

/* ---- the object ------------------------------------------------------ */

struct gw_webhooks *gw_webhooks_new(const struct gw_webhooks_env *env) {
  struct gw_webhooks *w = calloc(1, sizeof *w);
  if (!w)
    return NULL;
  w->env = *env;
  w->n = env->cfg->n_webhooks;
  if (w->n && !(w->hooks = calloc(w->n, sizeof *w->hooks))) {
    free(w);
    return NULL;
  }
  for (size_t i = 0; i < w->n; i++) {
    w->hooks[i].w = w;
    w->hooks[i].cfg = &env->cfg->webhooks[i];
    w->hooks[i].log_limit = SL_LOG_LIMIT(1, 10);
  }
  return w;
}

struct gw_webhooks *gw_webhooks_free(struct gw_webhooks *w) {
  if (!w)
    return NULL;
  for (size_t i = 0; i < w->n; i++) {
    struct hook *h = &w->hooks[i];
    for (size_t k = 0; k < GW_WEBHOOK_ACTIVE_MAX; k++) {
      struct delivery *d = h->active[k];
      if (!d)
        continue;
      if (d->xfer && w->env.cancel)
        w->env.cancel(w->env.send_ctx, d->xfer);
      else if (d->xfer)
        gw_httpc_cancel(w->env.http, d->xfer);
      if (d->timer)
        gw_loop_del_timer(w->env.loop, d->timer);
      delivery_free(d);
    }
    for (size_t k = 0; k < h->n; k++)
      delivery_free(h->ring[(h->head + k) % GW_WEBHOOK_QUEUE_MAX]);
    sl_log_limit_flush(&h->log_limit, T);
  }
  free(w->hooks);
  free(w);
  return NULL;
}

void gw_webhooks_metrics(const struct gw_webhooks *w, FILE *f) {
  if (!w || !w->n)
    return;
  const char *name = "spotlab_webhook_deliveries_total";
  fprintf(f, "# HELP %s Webhook deliveries ended, by outcome (dropped: the hook's queue was full).\n"
          "# TYPE %s counter\n", name, name);
  for (size_t i = 0; i < w->n; i++) {
    const struct hook *h = &w->hooks[i];
    for (int e = 0; e < GW_HOOK_N_EVENTS; e++) {
      if (!((h->cfg->event_mask >> e) & 1))
        continue;
      for (int o = 0; o < N_OUTCOMES; o++) /* names are [a-zA-Z0-9_.-]: no escapes needed */
        fprintf(f, "%s{webhook=\"%s\",event=\"%s\",outcome=\"%s\"} %llu\n", name, h->cfg->name,
                gw_config_hook_event_name(e), outcome_names[o], (unsigned long long)h->counts[e][o]);
    }
  }
  name = "spotlab_webhook_retries_total";
  fprintf(f, "# HELP %s Webhook tries made again after a failed one.\n# TYPE %s counter\n", name,
          name);
  for (size_t i = 0; i < w->n; i++)
    fprintf(f, "%s{webhook=\"%s\"} %llu\n", name, w->hooks[i].cfg->name,
            (unsigned long long)w->hooks[i].retries);
  name = "spotlab_webhook_pending";
  fprintf(f, "# HELP %s Webhook deliveries not yet ended: waiting, in flight or waiting to retry.\n"
          "# TYPE %s gauge\n", name, name);
  for (size_t i = 0; i < w->n; i++)
    fprintf(f, "%s{webhook=\"%s\"} %zu\n", name, w->hooks[i].cfg->name,
            w->hooks[i].n + active_count(&w->hooks[i]));
}
