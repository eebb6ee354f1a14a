/* Shared helpers for the local provider tests: an HTTP client over libcurl,
 * an event recorder, and waits that turn the gateway's loop (where the
 * provider's timer delivers events) until an event arrives or a deadline
 * passes. */
#ifndef TESTS_PROV_TEST_H
#define TESTS_PROV_TEST_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loop.h"
#include "provider.h"
#include "sl_time.h"

struct body {
  char text[4096];
  size_t len;
};

static __attribute__((unused)) size_t body_write(char *p, size_t size, size_t n, void *ud) {
  struct body *b = ud;
  size_t k = size * n;
  if (b->len + k >= sizeof b->text)
    return 0;
  memcpy(b->text + b->len, p, k);
  b->len += k;
  b->text[b->len] = '\0';
  return k;
}

/* One request; returns the HTTP status (or -1 when the transfer failed). */
static __attribute__((unused)) long http(const char *method, const char *url, const char *header1, const char *header2,
                 struct body *out) {
  CURL *c = curl_easy_init();
  struct curl_slist *h = NULL;
  if (header1)
    h = curl_slist_append(h, header1);
  if (header2)
    h = curl_slist_append(h, header2);
  memset(out, 0, sizeof *out);
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, body_write);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 3000L);
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
  long status = -1;
  if (curl_easy_perform(c) == CURLE_OK)
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(h);
  curl_easy_cleanup(c);
  return status;
}

/* A token from base (http://127.0.0.1:PORT) into tok (>= 64 bytes); the status. */
static __attribute__((unused)) long get_token(const char *base, char *tok) {
  char url[256];
  struct body b;
  snprintf(url, sizeof url, "%s/latest/api/token", base);
  long s = http("PUT", url, "X-aws-ec2-metadata-token-ttl-seconds: 60", NULL, &b);
  size_t n = b.len < 63 ? b.len : 63;
  memcpy(tok, b.text, n);
  tok[n] = '\0';
  return s;
}

static __attribute__((unused)) long get_meta(const char *base, const char *tok, const char *key, struct body *b) {
  char url[256], hdr[128];
  snprintf(url, sizeof url, "%s/latest/meta-data/%s", base, key);
  snprintf(hdr, sizeof hdr, "X-aws-ec2-metadata-token: %s", tok);
  return http("GET", url, tok ? hdr : NULL, NULL, b);
}

/* Events a provider delivered, with the wall time each arrived. CAPACITY
 * events (the market moving) are only counted, so they never crowd out the
 * instance events a test waits for. */
struct recorder {
  struct gw_provider_event ev[256];
  int n;
  int64_t at_real_us[256];
  int capacity;
  bool overflow;
};

static __attribute__((unused)) void record(void *ud, struct gw_provider *p,
                                           const struct gw_provider_event *ev) {
  struct recorder *r = ud;
  (void)p;
  if (ev->kind == GW_PROVIDER_CAPACITY) {
    r->capacity++;
    return;
  }
  if (r->n == 256) {
    r->overflow = true;
    return;
  }
  r->at_real_us[r->n] = sl_time_real_us();
  r->ev[r->n++] = *ev;
}

static __attribute__((unused)) int find_event(const struct recorder *r, enum gw_provider_event_kind kind, const char *id) {
  for (int i = 0; i < r->n; i++)
    if (r->ev[i].kind == kind && strcmp(r->ev[i].instance_id, id) == 0)
      return i;
  return -1;
}

static __attribute__((unused)) int count_events(const struct recorder *r,
                                                enum gw_provider_event_kind kind) {
  int n = 0;
  for (int i = 0; i < r->n; i++)
    n += r->ev[i].kind == kind;
  return n;
}

/* Turns the loop until the event shows up or timeout_ms passes; its index
 * or -1. The loop sleeps until the provider's timer is due (at most 10 ms
 * a turn, so the deadline is kept). */
static __attribute__((unused)) int wait_event(struct gw_loop *loop, struct recorder *r,
                                              enum gw_provider_event_kind kind, const char *id,
                                              int timeout_ms) {
  int64_t end = sl_time_mono_us() + (int64_t)timeout_ms * 1000;
  for (;;) {
    int i = find_event(r, kind, id);
    if (i >= 0 || sl_time_mono_us() > end)
      return i;
    gw_loop_run_once(loop, 10000);
  }
}

/* Turns the loop for ms milliseconds (to see that nothing happens). */
static __attribute__((unused)) void run_for(struct gw_loop *loop, int ms) {
  int64_t end = sl_time_mono_us() + (int64_t)ms * 1000;
  while (sl_time_mono_us() < end)
    gw_loop_run_once(loop, 10000);
}

#endif
