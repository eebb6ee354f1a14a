/* libcurl wrapper.
 *
 * The only file that includes curl.h. Each call uses its own easy handle, so
 * the notice thread may call it while the main loop runs. Retries back off
 * 50, 100, 200 ms; HTTP error statuses are answers, not failures, and are
 * returned to the caller, which knows what a 404 or a 401 means. */
#include "http.h"

#include "sl_err.h"
#include "sl_log.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

int wk_http_global_init(void) {
  return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : SL_ECURL;
}

struct sink {
  struct wk_http_resp *resp;
  bool overflow;
};

static size_t on_body(char *data, size_t size, size_t n, void *ctx) {
  struct sink *s = ctx;
  size_t len = size * n;
  if (s->resp->len + len > WK_HTTP_BODY_MAX) {
    s->overflow = true;
    return 0;
  }
  memcpy(s->resp->body + s->resp->len, data, len);
  s->resp->len += len;
  s->resp->body[s->resp->len] = 0;
  return len;
}

static int once(const struct wk_http_req *req, struct wk_http_resp *resp, CURLcode *ret_cc) {
  CURL *c = curl_easy_init();
  if (!c) return -ENOMEM;
  struct curl_slist *hdrs = NULL;
  struct sink sink = {resp, false};
  int r = 0;
  resp->len = 0;
  resp->body[0] = 0;
  resp->status = 0;
  for (int i = 0; i < WK_HTTP_MAX_HEADERS && req->headers[i]; i++) {
    struct curl_slist *h = curl_slist_append(hdrs, req->headers[i]);
    if (!h) { r = -ENOMEM; goto out; }
    hdrs = h;
  }
  curl_easy_setopt(c, CURLOPT_URL, req->url);
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req->method);
  if (!strcmp(req->method, "PUT")) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, 0L);
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)req->timeout_ms);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)req->timeout_ms);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
  *ret_cc = curl_easy_perform(c);
  if (sink.overflow) {
    r = SL_ELIMIT;
  } else if (*ret_cc != CURLE_OK) {
    r = SL_ECURL;
  } else {
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp->status);
  }
out:
  curl_slist_free_all(hdrs);
  curl_easy_cleanup(c);
  return r;
}

int wk_http_do(const struct wk_http_req *req, struct wk_http_resp *ret) {
  int r = SL_ECURL;
  CURLcode cc = CURLE_OK;
  for (int attempt = 0; attempt <= req->retries; attempt++) {
    if (attempt) {
      struct timespec ts = {0, (long)(50 << (attempt - 1)) * 1000000L};
      nanosleep(&ts, NULL);
    }
    r = once(req, ret, &cc);
    if (r != SL_ECURL) break;
  }
  if (r == SL_ECURL)
    sl_debug("worker.notice", "%s %s: %s", req->method, req->url, curl_easy_strerror(cc));
  return r;
}
