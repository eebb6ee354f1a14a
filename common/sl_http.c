/* The HTTP client: the only file that includes curl.h.
 *
 * A transfer (struct xfer) is one easy handle plus its response buffer and
 * retry state; both forms build it the same way (xfer_setup) and decide
 * after each try the same way (after_try), so they retry alike. They differ
 * only in how a try runs and how a backoff is waited out: sl_http_do()
 * performs and sleeps on the caller's thread, the multi form adds the handle
 * to a curl multi and waits on the driver's one timer, which always carries
 * the earliest of curl's own timeout and the pending retries.
 *
 * Invariants: a response buffer never holds more than body_max_bytes (the
 * write callback refuses the byte past the cap, which ends the transfer);
 * a multi never holds more than SL_HTTP_MULTI_MAX transfers; an easy handle
 * is in the curl multi only while a try runs (in_multi). A streamed body
 * (body_fd) or sink (sink_fd) is read or written at offset + position, and
 * the positions go back to 0 before each try, so a retry resends or
 * rewrites the same range. */
#include "sl_http.h"

#include "sl_err.h"
#include "sl_log.h"
#include "sl_time.h"

#include <assert.h>
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define TOPIC "http"

struct xfer {
  CURL *easy;
  struct curl_slist *hdrs;
  char *body;              /* response so far, NUL-terminated when non-NULL */
  size_t body_len, body_cap, body_max;
  bool overflow, oom;      /* the write callback refused data */
  long status;
  int tries, max_tries;
  int64_t base_backoff_us, max_backoff_us;
  uint64_t rng;
  char method[16];
  char where[160];         /* scheme://host/path: no userinfo, no query */
  /* streaming (copied from the request) */
  bool has_src, has_sink;
  struct sl_http_fd_range src, sink;
  uint64_t src_pos, sink_pos;
  int io_err;              /* a read or write of a streamed range failed: final */
  const atomic_bool *cancel; /* the request's, or NULL */
  int n_keep;
  char keep_names[SL_HTTP_MAX_RESP_HEADERS][64];
  char *keep_values[SL_HTTP_MAX_RESP_HEADERS];
  /* the multi form only */
  struct xfer *next;
  uint64_t id;
  sl_http_done_fn done;
  void *data;
  int64_t retry_due_us;    /* INT64_MAX unless waiting to retry */
  bool in_multi, finished;
  CURLcode cc;             /* the ended try's result, when finished */
  int fail;                /* a final error found outside curl (driver, add) */
};

/* ---- process-wide ---- */

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_result;

static void global_init(void) {
  init_result = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : SL_ECURL;
}

int sl_http_global_init(void) {
  pthread_once(&init_once, global_init);
  return init_result;
}

void sl_http_resp_done(struct sl_http_resp *resp) {
  if (!resp) return;
  free(resp->body);
  for (int i = 0; i < SL_HTTP_MAX_RESP_HEADERS; i++) free(resp->header_values[i]);
  memset(resp, 0, sizeof *resp);
}

int sl_err_from_curl(int curl_code) {
  switch ((CURLcode)curl_code) {
  case CURLE_OK: return 0;
  case CURLE_OPERATION_TIMEDOUT: return -ETIMEDOUT;
  case CURLE_COULDNT_CONNECT: return -ECONNREFUSED;
  case CURLE_COULDNT_RESOLVE_HOST:
  case CURLE_COULDNT_RESOLVE_PROXY: return -EHOSTUNREACH;
  case CURLE_WRITE_ERROR:        /* only our write callback refuses data */
  case CURLE_FILESIZE_EXCEEDED: return SL_ELIMIT;
  case CURLE_URL_MALFORMAT:
  case CURLE_UNSUPPORTED_PROTOCOL: return -EINVAL;
  case CURLE_OUT_OF_MEMORY: return -ENOMEM;
  default: return SL_ECURL;
  }
}

/* Failures another try may cure: the network, the peer's connection, time. */
static bool transient(CURLcode cc) {
  switch (cc) {
  case CURLE_COULDNT_RESOLVE_PROXY:
  case CURLE_COULDNT_RESOLVE_HOST:
  case CURLE_COULDNT_CONNECT:
  case CURLE_OPERATION_TIMEDOUT:
  case CURLE_SEND_ERROR:
  case CURLE_RECV_ERROR:
  case CURLE_GOT_NOTHING:
  case CURLE_PARTIAL_FILE:
  case CURLE_SSL_CONNECT_ERROR:
  case CURLE_HTTP2:
  case CURLE_HTTP2_STREAM:
    return true;
  default:
    return false;
  }
}

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

static uint64_t seed(const void *p) {
  static atomic_uint_fast64_t seq;
  uint64_t s = (uint64_t)sl_time_mono_us() ^ ((uint64_t)(uintptr_t)p << 17) ^
               ((uint64_t)atomic_fetch_add(&seq, 1) << 40);
  return splitmix64(&s);
}

/* url without userinfo, query or fragment: what a log line may show. */
static void log_safe_url(const char *url, char *out, size_t size) {
  const char *p = url, *scheme_end = strstr(url, "://");
  size_t n = 0;
  if (scheme_end) {
    const char *host = scheme_end + 3;
    size_t hl = strcspn(host, "/?#");
    const char *at = memchr(host, '@', hl);
    n = (size_t)(host - url);
    if (n >= size) n = size - 1;
    memcpy(out, url, n);
    p = at ? at + 1 : host;
  }
  size_t k = strcspn(p, "?#");
  if (k > size - 1 - n) k = size - 1 - n;
  memcpy(out + n, p, k);
  out[n + k] = 0;
}

/* ---- one transfer ---- */

/* A 2xx body bound for the sink: written at its offset, whole or not at all. */
static size_t to_sink(struct xfer *x, const char *data, size_t len) {
  if (x->sink.len && len > x->sink.len - x->sink_pos) {
    x->overflow = true;
    return 0;
  }
  for (size_t off = 0; off < len;) {
    ssize_t w = pwrite(x->sink.fd, data + off, len - off, (off_t)(x->sink.offset + x->sink_pos + off));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      x->io_err = w < 0 ? -errno : -EIO;
      return 0;
    }
    off += (size_t)w;
  }
  x->sink_pos += len;
  return len;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *ctx) {
  struct xfer *x = ctx;
  size_t len = size * nmemb;
  if (x->has_sink) {
    long status = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 200 && status < 300) return to_sink(x, data, len);
  }
  if (len > x->body_max - x->body_len) {
    x->overflow = true;
    return 0;
  }
  if (x->body_len + len + 1 > x->body_cap) {
    size_t cap = x->body_cap ? x->body_cap : 1024;
    while (cap < x->body_len + len + 1) cap *= 2;
    if (cap > x->body_max + 1) cap = x->body_max + 1;
    char *b = realloc(x->body, cap);
    if (!b) {
      x->oom = true;
      return 0;
    }
    x->body = b;
    x->body_cap = cap;
  }
  memcpy(x->body + x->body_len, data, len);
  x->body_len += len;
  x->body[x->body_len] = 0;
  return len;
}

static size_t on_read(char *buf, size_t size, size_t nmemb, void *ctx) {
  struct xfer *x = ctx;
  uint64_t left = x->src.len - x->src_pos;
  size_t want = size * nmemb < left ? size * nmemb : (size_t)left;
  if (want == 0) return 0;
  for (;;) {
    ssize_t k = pread(x->src.fd, buf, want, (off_t)(x->src.offset + x->src_pos));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) { /* an error, or the file ends before the range does */
      x->io_err = k < 0 ? -errno : -EIO;
      return CURL_READFUNC_ABORT;
    }
    x->src_pos += (uint64_t)k;
    return (size_t)k;
  }
}

static int on_seek(void *ctx, curl_off_t offset, int origin) {
  struct xfer *x = ctx;
  if (origin != SEEK_SET || offset < 0 || (uint64_t)offset > x->src.len) return CURL_SEEKFUNC_FAIL;
  x->src_pos = (uint64_t)offset;
  return CURL_SEEKFUNC_OK;
}

static void clear_kept(struct xfer *x) {
  for (int i = 0; i < x->n_keep; i++) {
    free(x->keep_values[i]);
    x->keep_values[i] = NULL;
  }
}

/* Keeps the values of the headers asked for; a status line starts a new
 * answer (an interim 1xx, or the next try), so it forgets the last one's. */
static size_t on_header(char *data, size_t size, size_t nmemb, void *ctx) {
  struct xfer *x = ctx;
  size_t len = size * nmemb;
  if (len >= 5 && !strncmp(data, "HTTP/", 5)) {
    clear_kept(x);
    return len;
  }
  const char *colon = memchr(data, ':', len);
  if (!colon) return len;
  size_t nl = (size_t)(colon - data);
  for (int i = 0; i < x->n_keep; i++) {
    if (strlen(x->keep_names[i]) != nl || strncasecmp(x->keep_names[i], data, nl)) continue;
    const char *v = colon + 1, *end = data + len;
    while (v < end && (*v == ' ' || *v == '\t')) v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t')) end--;
    char *copy = strndup(v, (size_t)(end - v));
    if (!copy) {
      x->oom = true;
      return 0;
    }
    free(x->keep_values[i]);
    x->keep_values[i] = copy;
  }
  return len;
}

static int append_header(struct xfer *x, const char *h) {
  struct curl_slist *l = curl_slist_append(x->hdrs, h);
  if (!l) return -ENOMEM;
  x->hdrs = l;
  return 0;
}

static void xfer_free(struct xfer *x) {
  if (!x) return;
  curl_easy_cleanup(x->easy);
  curl_slist_free_all(x->hdrs);
  free(x->body);
  clear_kept(x);
  free(x);
}

static bool cancelled(const struct xfer *x) {
  return x->cancel && atomic_load(x->cancel);
}

/* curl's progress callback, at least once a second while a try runs: a
 * nonzero answer stops it (CURLE_ABORTED_BY_CALLBACK). */
static int on_progress(void *ctx, curl_off_t dl_total, curl_off_t dl_now, curl_off_t ul_total,
                       curl_off_t ul_now) {
  (void)dl_total, (void)dl_now, (void)ul_total, (void)ul_now;
  return cancelled(ctx);
}

/* Fills x (zeroed, owned by the caller) from req; copy_body: the body must
 * outlive the call (the multi form). On failure x holds what was made so far
 * and still needs freeing. */
static int xfer_setup(struct xfer *x, const struct sl_http_req *req, bool copy_body) {
  if (!req->url || !*req->url) return -EINVAL;
  const char *method = req->method && *req->method ? req->method : "GET";
  snprintf(x->method, sizeof x->method, "%s", method);
  log_safe_url(req->url, x->where, sizeof x->where);
  x->body_max = req->body_max_bytes ? req->body_max_bytes : SL_HTTP_BODY_DEFAULT_BYTES;
  x->max_tries = req->retry.max_tries < 1 ? 1 : req->retry.max_tries;
  if (x->max_tries > SL_HTTP_MAX_TRIES) x->max_tries = SL_HTTP_MAX_TRIES;
  x->base_backoff_us = (req->retry.base_backoff_ms > 0 ? req->retry.base_backoff_ms : 0) * SL_US_PER_MS;
  x->max_backoff_us = (req->retry.max_backoff_ms > 0 ? req->retry.max_backoff_ms : 0) * SL_US_PER_MS;
  if (x->max_backoff_us < x->base_backoff_us) x->max_backoff_us = x->base_backoff_us;
  x->retry_due_us = INT64_MAX;
  x->rng = seed(x);
  x->cancel = req->cancel;
  long timeout_ms = req->timeout_ms > 0 ? req->timeout_ms : SL_HTTP_TIMEOUT_DEFAULT_MS;
  long connect_ms = req->connect_timeout_ms > 0 ? req->connect_timeout_ms : timeout_ms;

  bool is_get = !strcasecmp(method, "GET"), is_head = !strcasecmp(method, "HEAD");
  if (req->body_fd) {
    x->has_src = true;
    x->src = *req->body_fd;
  }
  if (req->sink_fd) {
    x->has_sink = true;
    x->sink = *req->sink_fd;
  }
  for (int i = 0; i < SL_HTTP_MAX_RESP_HEADERS && req->resp_headers[i]; i++) {
    if (strlen(req->resp_headers[i]) >= sizeof x->keep_names[0]) return -EINVAL;
    snprintf(x->keep_names[i], sizeof x->keep_names[i], "%s", req->resp_headers[i]);
    x->n_keep = i + 1;
  }
  bool send_body = req->body || x->has_src || !(is_get || is_head);
  bool has_type = false;
  for (int i = 0; i < SL_HTTP_MAX_HEADERS && req->headers[i]; i++) {
    if (!strncasecmp(req->headers[i], "Content-Type:", 13)) has_type = true;
    if (append_header(x, req->headers[i]) < 0) return -ENOMEM;
  }
  /* No "Expect: 100-continue" round trip, and no form content type the
   * caller did not ask for (signed requests list their headers). */
  if (send_body && (append_header(x, "Expect:") < 0 ||
                    (!has_type && append_header(x, "Content-Type:") < 0)))
    return -ENOMEM;

  CURL *c = x->easy = curl_easy_init();
  if (!c) return -ENOMEM;
  CURLcode cc = CURLE_OK;
#define SET(opt, val) do { if (cc == CURLE_OK) cc = curl_easy_setopt(c, opt, val); } while (0)
  SET(CURLOPT_URL, req->url);
  SET(CURLOPT_PROTOCOLS_STR, "http,https");
  SET(CURLOPT_HTTPHEADER, x->hdrs);
  SET(CURLOPT_TIMEOUT_MS, timeout_ms);
  SET(CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
  SET(CURLOPT_NOSIGNAL, 1L);
  if (!req->use_env_proxy) SET(CURLOPT_NOPROXY, "*");
  /* A HEAD's Content-Length is the resource's size, not a body that comes. */
  if (!x->has_sink && !is_head) SET(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)x->body_max);
  else SET(CURLOPT_BUFFERSIZE, 512L * 1024);
  SET(CURLOPT_WRITEFUNCTION, on_body);
  SET(CURLOPT_WRITEDATA, x);
  if (x->n_keep) {
    SET(CURLOPT_HEADERFUNCTION, on_header);
    SET(CURLOPT_HEADERDATA, x);
  }
  SET(CURLOPT_PRIVATE, x);
  if (x->cancel) {
    SET(CURLOPT_NOPROGRESS, 0L);
    SET(CURLOPT_XFERINFOFUNCTION, on_progress);
    SET(CURLOPT_XFERINFODATA, x);
  }
  if (is_head) {
    SET(CURLOPT_NOBODY, 1L);
  } else if (!send_body) {
    SET(CURLOPT_HTTPGET, 1L);
  } else if (x->has_src) {
    SET(CURLOPT_POST, 1L);
    if (strcasecmp(method, "POST")) SET(CURLOPT_CUSTOMREQUEST, method);
    SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)x->src.len);
    SET(CURLOPT_READFUNCTION, on_read);
    SET(CURLOPT_READDATA, x);
    SET(CURLOPT_SEEKFUNCTION, on_seek);
    SET(CURLOPT_SEEKDATA, x);
    SET(CURLOPT_UPLOAD_BUFFERSIZE, 512L * 1024);
  } else {
    if (strcasecmp(method, "POST")) SET(CURLOPT_CUSTOMREQUEST, method);
    SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
    const void *b = req->body ? req->body : "";
    SET(copy_body ? CURLOPT_COPYPOSTFIELDS : CURLOPT_POSTFIELDS, b);
  }
#undef SET
  return cc == CURLE_OK ? 0 : sl_err_from_curl(cc);
}

/* Before each try: an empty response. */
static void xfer_rewind(struct xfer *x) {
  x->body_len = 0;
  if (x->body) x->body[0] = 0;
  x->overflow = false;
  x->status = 0;
  x->src_pos = x->sink_pos = 0;
  clear_kept(x);
}

/* Full jitter: uniform in [0, min(max, base * 2^(tries-1))]. */
static int64_t backoff_us(struct xfer *x) {
  int64_t ceiling = x->base_backoff_us;
  for (int i = 1; i < x->tries && ceiling < x->max_backoff_us; i++) ceiling *= 2;
  if (ceiling > x->max_backoff_us) ceiling = x->max_backoff_us;
  if (ceiling <= 0) return 0;
  return (int64_t)(splitmix64(&x->rng) % (uint64_t)(ceiling + 1));
}

/* The try that just ended with cc: 1 and *ret_delay_us when another try is
 * due, 0 for a final answer (x->status), or the final error. */
static int after_try(struct xfer *x, CURLcode cc, int64_t *ret_delay_us) {
  x->tries++;
  if (cancelled(x)) return -ECANCELED;
  if (x->oom) return -ENOMEM;
  if (x->io_err) return x->io_err;
  if (x->overflow || cc == CURLE_FILESIZE_EXCEEDED) return SL_ELIMIT;
  int r = sl_err_from_curl(cc);
  bool again;
  if (cc == CURLE_OK) {
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &x->status);
    again = x->status >= 500 || x->status == 429;
  } else {
    again = transient(cc);
  }
  if (!again || x->tries >= x->max_tries) return r;
  int64_t delay = backoff_us(x);
  curl_off_t after_s = 0;
  if ((x->status == 429 || x->status == 503) &&
      curl_easy_getinfo(x->easy, CURLINFO_RETRY_AFTER, &after_s) == CURLE_OK && after_s > 0)
    delay = after_s > x->max_backoff_us / SL_US_PER_S ? x->max_backoff_us
                                                      : (int64_t)after_s * SL_US_PER_S;
  if (cc == CURLE_OK)
    sl_debug(TOPIC, "%s %s: %ld, try %d of %d; again in %lld ms", x->method, x->where,
             x->status, x->tries, x->max_tries, (long long)(delay / SL_US_PER_MS));
  else
    sl_debug(TOPIC, "%s %s: %s, try %d of %d; again in %lld ms", x->method, x->where,
             curl_easy_strerror(cc), x->tries, x->max_tries, (long long)(delay / SL_US_PER_MS));
  *ret_delay_us = delay;
  return 1;
}

/* Moves the answer into *ret. */
static int xfer_take(struct xfer *x, struct sl_http_resp *ret) {
  if (!x->body) {
    x->body = calloc(1, 1);
    if (!x->body) return -ENOMEM;
  }
  ret->status = x->status;
  ret->body = x->body;
  ret->body_len = x->body_len;
  ret->tries = x->tries;
  ret->sink_bytes = x->sink_pos;
  for (int i = 0; i < x->n_keep; i++) {
    ret->header_values[i] = x->keep_values[i];
    x->keep_values[i] = NULL;
  }
  x->body = NULL;
  x->body_len = x->body_cap = 0;
  return 0;
}

/* ---- the blocking form ---- */

/* Sleeps us, in slices of at most 100 ms when x may be cancelled. */
static void backoff_sleep(const struct xfer *x, int64_t us) {
  while (us > 0 && !cancelled(x)) {
    int64_t step = x->cancel && us > 100 * SL_US_PER_MS ? 100 * SL_US_PER_MS : us;
    struct timespec ts = {(time_t)(step / SL_US_PER_S), (long)(step % SL_US_PER_S) * 1000};
    while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR) {}
    us -= step;
  }
}

int sl_http_do(const struct sl_http_req *req, struct sl_http_resp *ret) {
  struct xfer *x = calloc(1, sizeof *x);
  if (!x) return -ENOMEM;
  int r = xfer_setup(x, req, false);
  while (r >= 0) {
    if (cancelled(x)) {
      r = -ECANCELED;
      break;
    }
    xfer_rewind(x);
    int64_t delay_us = 0;
    r = after_try(x, curl_easy_perform(x->easy), &delay_us);
    if (r != 1) break;
    backoff_sleep(x, delay_us);
  }
  if (r == 0) r = xfer_take(x, ret);
  xfer_free(x);
  return r;
}

/* ---- the multi form ---- */

struct sl_http_multi {
  CURLM *cm;
  struct sl_http_driver drv;
  struct xfer *xfers;      /* in flight, newest first */
  int count;
  uint64_t last_id;
  int64_t curl_due_us;     /* curl's own timeout; INT64_MAX: none */
  int64_t armed_due_us;    /* what the driver's timer holds */
  bool timer_warned;
  bool reporting;          /* inside a done callback */
};

static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
  struct sl_http_multi *m = userp;
  int events = 0;
  if (what != CURL_POLL_REMOVE)
    events = (what & CURL_POLL_IN ? SL_HTTP_IN : 0) | (what & CURL_POLL_OUT ? SL_HTTP_OUT : 0);
  int r = m->drv.watch(m->drv.ctx, fd, events);
  if (r < 0 && events) {
    struct xfer *x = NULL;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, &x);
    if (x && !x->fail) x->fail = r; /* reaped after the socket action */
  }
  return 0;
}

/* curl's timeout in ms as a due time. curl rounds what is left down to the
 * millisecond, so the due time is rounded up: fired earlier, curl would find
 * nothing expired, leave its timer as it was, and the loop would spin. */
static int64_t curl_due(long timeout_ms) {
  if (timeout_ms < 0) return INT64_MAX;
  return sl_time_mono_us() + (timeout_ms ? (timeout_ms + 1) * SL_US_PER_MS : 0);
}

static int on_curl_timer(CURLM *cm, long timeout_ms, void *userp) {
  struct sl_http_multi *m = userp;
  m->curl_due_us = curl_due(timeout_ms);
  return 0;
}

/* Gives the driver the earliest of curl's timeout and the pending retries. */
static void rearm(struct sl_http_multi *m) {
  int64_t due = m->curl_due_us;
  for (struct xfer *x = m->xfers; x; x = x->next)
    if (x->retry_due_us < due) due = x->retry_due_us;
  if (due == m->armed_due_us) return;
  m->armed_due_us = due;
  int r = m->drv.timer(m->drv.ctx, due);
  if (r < 0 && !m->timer_warned) {
    m->timer_warned = true;
    sl_warn(TOPIC, "the event loop refused a timer: %s", sl_strerror(r));
  }
}

struct sl_http_multi *sl_http_multi_new(const struct sl_http_driver *d) {
  if (!d || !d->watch || !d->timer) return NULL;
  struct sl_http_multi *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->drv = *d;
  m->curl_due_us = m->armed_due_us = INT64_MAX;
  m->cm = curl_multi_init();
  if (!m->cm || curl_multi_setopt(m->cm, CURLMOPT_SOCKETFUNCTION, on_curl_socket) != CURLM_OK ||
      curl_multi_setopt(m->cm, CURLMOPT_SOCKETDATA, m) != CURLM_OK ||
      curl_multi_setopt(m->cm, CURLMOPT_TIMERFUNCTION, on_curl_timer) != CURLM_OK ||
      curl_multi_setopt(m->cm, CURLMOPT_TIMERDATA, m) != CURLM_OK) {
    curl_multi_cleanup(m->cm);
    free(m);
    return NULL;
  }
  return m;
}

static void unlink_xfer(struct sl_http_multi *m, struct xfer *x) {
  for (struct xfer **p = &m->xfers; *p; p = &(*p)->next)
    if (*p == x) {
      *p = x->next;
      m->count--;
      return;
    }
}

static void drop(struct sl_http_multi *m, struct xfer *x) {
  if (x->in_multi) curl_multi_remove_handle(m->cm, x->easy);
  x->in_multi = false;
  unlink_xfer(m, x);
  xfer_free(x);
}

struct sl_http_multi *sl_http_multi_free(struct sl_http_multi *m) {
  if (!m) return NULL;
  assert(!m->reporting);
  while (m->xfers) drop(m, m->xfers);
  curl_multi_cleanup(m->cm);
  if (m->armed_due_us != INT64_MAX) m->drv.timer(m->drv.ctx, INT64_MAX);
  free(m);
  return NULL;
}

int sl_http_multi_start(struct sl_http_multi *m, const struct sl_http_req *req,
                        sl_http_done_fn done, void *data, uint64_t *ret_id) {
  if (!done) return -EINVAL;
  if (m->count >= SL_HTTP_MULTI_MAX) return SL_ELIMIT;
  struct xfer *x = calloc(1, sizeof *x);
  if (!x) return -ENOMEM;
  int r = xfer_setup(x, req, true);
  if (r < 0) goto fail;
  if (curl_multi_add_handle(m->cm, x->easy) != CURLM_OK) {
    r = -ENOMEM;
    goto fail;
  }
  x->in_multi = true;
  x->id = ++m->last_id;
  x->done = done;
  x->data = data;
  x->next = m->xfers;
  m->xfers = x;
  m->count++;
  rearm(m);
  if (ret_id) *ret_id = x->id;
  return 0;
fail:
  xfer_free(x);
  return r;
}

int sl_http_multi_cancel(struct sl_http_multi *m, uint64_t id) {
  for (struct xfer *x = m->xfers; x; x = x->next)
    if (x->id == id) {
      drop(m, x);
      rearm(m);
      return 0;
    }
  return -ENOENT;
}

int sl_http_multi_count(const struct sl_http_multi *m) { return m->count; }

/* Collects the tries curl finished (and those the driver failed), then
 * either schedules their retry or reports them. A done callback may start
 * or cancel transfers, so the list is searched afresh after each report. */
static void reap(struct sl_http_multi *m) {
  CURLMsg *msg;
  int left;
  while ((msg = curl_multi_info_read(m->cm, &left))) {
    if (msg->msg != CURLMSG_DONE) continue;
    CURL *easy = msg->easy_handle;
    CURLcode cc = msg->data.result; /* msg dies with the removal */
    struct xfer *x = NULL;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, &x);
    curl_multi_remove_handle(m->cm, easy);
    x->in_multi = false;
    x->finished = true;
    x->cc = cc;
  }
  for (struct xfer *x = m->xfers; x; x = x->next)
    if (x->fail && x->in_multi) {
      curl_multi_remove_handle(m->cm, x->easy);
      x->in_multi = false;
      x->finished = true;
    }
  for (;;) {
    struct xfer *x = m->xfers;
    while (x && !x->finished) x = x->next;
    if (!x) break;
    x->finished = false;
    int64_t delay_us = 0;
    int r = x->fail ? x->fail : after_try(x, x->cc, &delay_us);
    if (r == 1) {
      x->retry_due_us = sl_time_mono_us() + delay_us;
      continue;
    }
    unlink_xfer(m, x);
    struct sl_http_resp resp = {0};
    if (r == 0) r = xfer_take(x, &resp);
    m->reporting = true;
    x->done(x->id, r, r == 0 ? &resp : NULL, x->data);
    m->reporting = false;
    sl_http_resp_done(&resp);
    xfer_free(x);
  }
}

void sl_http_multi_on_fd(struct sl_http_multi *m, int fd, int events) {
  assert(!m->reporting);
  int mask = (events & SL_HTTP_IN ? CURL_CSELECT_IN : 0) |
             (events & SL_HTTP_OUT ? CURL_CSELECT_OUT : 0) |
             (events & SL_HTTP_ERR ? CURL_CSELECT_ERR : 0);
  int running;
  curl_multi_socket_action(m->cm, fd, mask, &running);
  reap(m);
  rearm(m);
}

void sl_http_multi_timeout(struct sl_http_multi *m) {
  assert(!m->reporting);
  m->armed_due_us = INT64_MAX; /* the driver's timer has fired */
  int running;
  curl_multi_socket_action(m->cm, CURL_SOCKET_TIMEOUT, 0, &running);
  int64_t now = sl_time_mono_us();
  long left_ms;
  if (m->curl_due_us <= now && curl_multi_timeout(m->cm, &left_ms) == CURLM_OK)
    m->curl_due_us = curl_due(left_ms); /* curl kept its timer: ask again */
  for (struct xfer *x = m->xfers; x; x = x->next) {
    if (x->in_multi || x->retry_due_us > now) continue;
    x->retry_due_us = INT64_MAX;
    xfer_rewind(x);
    if (curl_multi_add_handle(m->cm, x->easy) == CURLM_OK) {
      x->in_multi = true;
    } else {
      x->fail = -ENOMEM;
      x->finished = true;
    }
  }
  reap(m);
  rearm(m);
}
