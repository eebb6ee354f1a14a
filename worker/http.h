/* The worker's one HTTP client: a small libcurl wrapper with a timeout per
 * request, retries on transport errors, and a bounded response body. */
#ifndef WK_HTTP_H
#define WK_HTTP_H

#include <stddef.h>

#define WK_HTTP_MAX_HEADERS 4
#define WK_HTTP_BODY_MAX 16384

struct wk_http_req {
  const char *method;                        /* "GET", "PUT" */
  char url[512];
  const char *headers[WK_HTTP_MAX_HEADERS];  /* "Name: value"; NULL-terminated if fewer */
  int timeout_ms;
  int retries;                               /* extra tries after a transport error */
};

struct wk_http_resp {
  long status;
  size_t len;
  char body[WK_HTTP_BODY_MAX + 1];           /* NUL-terminated */
};

/* Once per process, before threads start. */
int wk_http_global_init(void);

/* Performs req; fills *ret on any HTTP answer (status may be 4xx/5xx).
 * SL_ECURL when no answer came after the retries, SL_ELIMIT when the body is
 * larger than WK_HTTP_BODY_MAX. Header values (tokens) are never logged. */
int wk_http_do(const struct wk_http_req *req, struct wk_http_resp *ret);

#endif
