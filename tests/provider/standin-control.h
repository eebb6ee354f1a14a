/* The EC2 stand-in's control API (tests/pylib/ec2_standin.py) for the C
 * tests of the aws provider: one JSON request to BASE/path, a GET when body
 * is NULL, else a POST of body. */
#ifndef TESTS_STANDIN_CONTROL_H
#define TESTS_STANDIN_CONTROL_H

#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct standin_buf {
  char *p;
  size_t n;
};

static inline size_t standin_buf_write(char *p, size_t size, size_t n, void *ud) {
  struct standin_buf *b = ud;
  char *grown = realloc(b->p, b->n + size * n + 1);
  if (!grown)
    return 0;
  memcpy(grown + b->n, p, size * n);
  b->p = grown;
  b->n += size * n;
  b->p[b->n] = '\0';
  return size * n;
}

/* The JSON answer (a new reference), or NULL after saying why on stderr. */
static inline json_t *standin_control(const char *base, const char *path, const char *body) {
  char url[512];
  snprintf(url, sizeof url, "%s/%s", base, path);
  CURL *c = curl_easy_init();
  struct standin_buf b = {0};
  struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, standin_buf_write);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
  if (body) {
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
  }
  long status = 0;
  json_t *o = NULL;
  if (curl_easy_perform(c) == CURLE_OK)
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  if (status == 200 && b.p) {
    json_error_t e;
    o = json_loads(b.p, 0, &e);
  } else {
    fprintf(stderr, "control %s: %ld %s\n", path, status, b.p ? b.p : "");
  }
  free(b.p);
  curl_slist_free_all(h);
  curl_easy_cleanup(c);
  return o;
}

#endif
