/* Notice watcher.
 *
 * One thread per worker polls the metadata service; it owns the IMDSv2 token
 * (fetched on first use and again after a 401) and reports each notice kind
 * once, so a rebalance recommendation followed by a termination notice gives
 * two reports. The thread shares nothing with the main loop but a pipe and a
 * stop flag under a mutex; the token never reaches a log line. */
#include "notice.h"

#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TOPIC "worker.notice"

int wk_notice_build(enum wk_notice_req_kind kind, const char *base, const char *token,
                    int timeout_ms, struct wk_notice_req *ret) {
  static const char *const paths[] = {
    "/latest/api/token", "/latest/meta-data/spot/instance-action",
    "/latest/meta-data/events/recommendations/rebalance",
    "/computeMetadata/v1/instance/preempted",
  };
  struct wk_notice_req q;
  memset(&q, 0, sizeof q);
  size_t bl = strlen(base);
  while (bl && base[bl - 1] == '/') bl--;
  if ((size_t)snprintf(q.url, sizeof q.url, "%.*s%s", (int)bl, base, paths[kind]) >= sizeof q.url)
    return SL_ELIMIT;
  q.http.method = kind == WK_REQ_AWS_TOKEN ? "PUT" : "GET";
  q.http.timeout_ms = timeout_ms;
  q.http.connect_timeout_ms = timeout_ms;
  q.http.body_max_bytes = WK_NOTICE_BODY_MAX;
  q.http.retry = (struct sl_http_retry){.max_tries = WK_NOTICE_TRIES,
                                        .base_backoff_ms = WK_NOTICE_BACKOFF_MS,
                                        .max_backoff_ms = WK_NOTICE_BACKOFF_MS};
  int n;
  if (kind == WK_REQ_AWS_TOKEN)
    n = snprintf(q.header, sizeof q.header, "X-aws-ec2-metadata-token-ttl-seconds: %d",
                 WK_NOTICE_TOKEN_TTL_S);
  else if (kind == WK_REQ_GCP_PREEMPTED)
    n = snprintf(q.header, sizeof q.header, "Metadata-Flavor: Google");
  else
    n = snprintf(q.header, sizeof q.header, "X-aws-ec2-metadata-token: %s", token ? token : "");
  if ((size_t)n >= sizeof q.header) return SL_ELIMIT;
  *ret = q;
  ret->http.url = ret->url;
  ret->http.headers[0] = ret->header;
  return 0;
}

int wk_notice_parse_time(const char *text, int64_t *ret_us) {
  int Y, M, D, h, m, s, used = 0;
  if (!text || sscanf(text, "%4d-%2d-%2dT%2d:%2d:%2d%n", &Y, &M, &D, &h, &m, &s, &used) != 6)
    return -EINVAL;
  const char *p = text + used;
  int64_t frac_us = 0, scale = 100000;
  if (*p == '.')
    for (p++; *p >= '0' && *p <= '9'; p++, scale /= 10) frac_us += (*p - '0') * scale;
  if (!(p[0] == 'Z' && !p[1]) && strcmp(p, "+00:00") != 0) return -EINVAL;
  if (M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || m > 59 || s > 60) return -EINVAL;
  struct tm tm = {.tm_year = Y - 1900, .tm_mon = M - 1, .tm_mday = D, .tm_hour = h, .tm_min = m,
                  .tm_sec = s};
  time_t t = timegm(&tm);
  if (t == (time_t)-1) return -EINVAL;
  *ret_us = (int64_t)t * SL_US_PER_S + frac_us;
  return 0;
}

static int parse_object(const char *body, size_t len, json_t **ret) {
  json_t *root = NULL;
  int r = sl_json_parse(body, len, 4, &root, NULL, 0);
  if (r < 0) return SL_EJSON;
  if (!json_is_object(root)) {
    json_decref(root);
    return SL_ETYPE;
  }
  *ret = root;
  return 0;
}

int wk_notice_parse_aws_action(const char *body, size_t len, int64_t now_us, struct wk_notice *ret) {
  json_t *root;
  int r = parse_object(body, len, &root);
  if (r < 0) return r;
  json_t *a = json_object_get(root, "action"), *t = json_object_get(root, "time");
  const char *action = json_string_value(a);
  if (!action || (t && !json_is_string(t))) {
    r = SL_ETYPE;
  } else if (strcmp(action, "terminate") && strcmp(action, "stop") && strcmp(action, "hibernate")) {
    r = SL_ECONFIG;
  } else {
    struct wk_notice n = {.deadline_us = now_us + WK_NOTICE_AWS_LEAD_US};
    snprintf(n.action, sizeof n.action, "%s", action);
    int64_t at;
    if (t && wk_notice_parse_time(json_string_value(t), &at) == 0) n.deadline_us = at;
    *ret = n;
    r = 1;
  }
  json_decref(root);
  return r;
}

int wk_notice_parse_aws_rebalance(const char *body, size_t len, int64_t now_us,
                                  struct wk_notice *ret) {
  json_t *root;
  int r = parse_object(body, len, &root);
  if (r < 0) return r;
  json_t *t = json_object_get(root, "noticeTime");
  if (!json_is_string(t)) {
    r = SL_ETYPE;
  } else {
    /* A recommendation has no deadline of its own; give it a spot notice's lead. */
    struct wk_notice n = {.action = "rebalance", .deadline_us = now_us + WK_NOTICE_AWS_LEAD_US};
    *ret = n;
    r = 1;
  }
  json_decref(root);
  return r;
}

int wk_notice_parse_gcp(const char *body, size_t len, int64_t now_us, struct wk_notice *ret) {
  while (len && (body[len - 1] == '\n' || body[len - 1] == '\r' || body[len - 1] == ' ')) len--;
  if (len == 4 && !strncmp(body, "TRUE", 4)) {
    struct wk_notice n = {.action = "preempted", .deadline_us = now_us + WK_NOTICE_GCP_LEAD_US};
    *ret = n;
    return 1;
  }
  if (len == 5 && !strncmp(body, "FALSE", 5)) return 0;
  return SL_EJSON;
}

/* ---- the watcher thread ---- */

struct wk_notice_watcher {
  char base[256];
  bool gcp;
  int64_t poll_ms;
  int pipe_rd, pipe_wr;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stop;
  char token[256];
  unsigned reported;        /* bit per request kind already reported */
};

/* One request; logs a failure to get any answer. */
static int fetch(const struct wk_notice_req *q, struct sl_http_resp *ret) {
  int r = sl_http_do(&q->http, ret);
  if (r < 0) sl_debug(TOPIC, "%s %s: %s", q->http.method, q->url, sl_strerror(r));
  return r;
}

/* One GET of kind; returns a parser result, 0 for "no notice". */
static int poll_one(struct wk_notice_watcher *w, enum wk_notice_req_kind kind, struct wk_notice *n) {
  struct wk_notice_req q;
  struct sl_http_resp resp = {0};
  int timeout = (int)(w->poll_ms < 1000 ? 1000 : w->poll_ms);
  int r;
  if (!w->gcp && !w->token[0]) {
    if (wk_notice_build(WK_REQ_AWS_TOKEN, w->base, NULL, timeout, &q) < 0) return SL_ECONFIG;
    if ((r = fetch(&q, &resp)) < 0) return r;
    if (resp.status != 200 || resp.body_len == 0 || resp.body_len >= sizeof w->token) {
      sl_debug(TOPIC, "token request answered %ld", resp.status);
      r = SL_EAUTH;
      goto out;
    }
    memcpy(w->token, resp.body, resp.body_len + 1);
    explicit_bzero(resp.body, resp.body_len);
    sl_http_resp_done(&resp);
  }
  if (wk_notice_build(kind, w->base, w->token, timeout, &q) < 0) {
    r = SL_ECONFIG;
    goto out;
  }
  if ((r = fetch(&q, &resp)) < 0) goto out;
  if (resp.status == 401 && !w->gcp) {
    w->token[0] = 0; /* expired: fetch a new one on the next round */
    r = SL_EAUTH;
    goto out;
  }
  if (resp.status != 200) {
    if (resp.status != 404) sl_debug(TOPIC, "%s answered %ld", q.url, resp.status);
    r = 0;
    goto out;
  }
  int64_t now = sl_time_real_us();
  if (kind == WK_REQ_AWS_ACTION) r = wk_notice_parse_aws_action(resp.body, resp.body_len, now, n);
  else if (kind == WK_REQ_AWS_REBALANCE) r = wk_notice_parse_aws_rebalance(resp.body, resp.body_len, now, n);
  else r = wk_notice_parse_gcp(resp.body, resp.body_len, now, n);
  if (r < 0) sl_warn(TOPIC, "malformed reply from %s: %s", q.url, sl_strerror(r));
out:
  explicit_bzero(q.header, sizeof q.header);
  sl_http_resp_done(&resp);
  return r;
}

static void poll_round(struct wk_notice_watcher *w) {
  static const enum wk_notice_req_kind aws[] = {WK_REQ_AWS_ACTION, WK_REQ_AWS_REBALANCE};
  static const enum wk_notice_req_kind gcp[] = {WK_REQ_GCP_PREEMPTED};
  const enum wk_notice_req_kind *kinds = w->gcp ? gcp : aws;
  size_t n = w->gcp ? 1 : 2;
  for (size_t i = 0; i < n; i++) {
    if (w->reported & (1u << kinds[i])) continue;
    struct wk_notice note;
    int r = poll_one(w, kinds[i], &note);
    if (r == SL_EAUTH && !w->gcp && !w->token[0]) r = poll_one(w, kinds[i], &note);
    if (r != 1) continue;
    w->reported |= 1u << kinds[i];
    sl_info(TOPIC, "notice: %s", note.action);
    if (write(w->pipe_wr, &note, sizeof note) != (ssize_t)sizeof note)
      sl_err(TOPIC, "notice pipe: %s", strerror(errno));
  }
}

static void *run(void *arg) {
  struct wk_notice_watcher *w = arg;
  pthread_mutex_lock(&w->mu);
  while (!w->stop) {
    pthread_mutex_unlock(&w->mu);
    poll_round(w);
    pthread_mutex_lock(&w->mu);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t ns = ts.tv_nsec + (w->poll_ms % 1000) * 1000000;
    ts.tv_sec += w->poll_ms / 1000 + ns / 1000000000;
    ts.tv_nsec = ns % 1000000000;
    while (!w->stop && pthread_cond_timedwait(&w->cv, &w->mu, &ts) != ETIMEDOUT) {}
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

int wk_notice_watcher_new(const char *base, const char *kind, int64_t poll_ms,
                          struct wk_notice_watcher **ret) {
  struct wk_notice_watcher *w = calloc(1, sizeof *w);
  if (!w) return -ENOMEM;
  if (strlen(base) >= sizeof w->base) {
    free(w);
    return SL_ELIMIT;
  }
  snprintf(w->base, sizeof w->base, "%s", base);
  w->gcp = !strcmp(kind, "gcp");
  w->poll_ms = poll_ms > 0 ? poll_ms : 1000;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0) {
    free(w);
    return -errno;
  }
  w->pipe_rd = fds[0];
  w->pipe_wr = fds[1];
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&w->cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&w->mu, NULL);
  int r = pthread_create(&w->thread, NULL, run, w);
  if (r != 0) {
    close(fds[0]);
    close(fds[1]);
    free(w);
    return -r;
  }
  *ret = w;
  return 0;
}

struct wk_notice_watcher *wk_notice_watcher_free(struct wk_notice_watcher *w) {
  if (!w) return NULL;
  pthread_mutex_lock(&w->mu);
  w->stop = true;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
  pthread_join(w->thread, NULL);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  close(w->pipe_rd);
  close(w->pipe_wr);
  explicit_bzero(w->token, sizeof w->token);
  free(w);
  return NULL;
}

int wk_notice_watcher_fd(const struct wk_notice_watcher *w) { return w->pipe_rd; }

int wk_notice_watcher_take(struct wk_notice_watcher *w, struct wk_notice *ret) {
  struct wk_notice n;
  ssize_t k = read(w->pipe_rd, &n, sizeof n);
  if (k != (ssize_t)sizeof n) return 0;
  *ret = n;
  return 1;
}
