/* The HTTP client: the one owner of libcurl.
 *
 * Two forms share one request description and one retry policy:
 *  - sl_http_do() blocks until the answer (worker, CLI); safe from any thread.
 *  - sl_http_multi runs many transfers on the caller's event loop through
 *    libcurl's multi socket interface. The loop is reached only through a
 *    driver (watch a descriptor, arm a timer), so this module knows no loop.
 *
 * A try that fails in transport (no connection, reset, timeout), answers 5xx
 * or answers 429 is tried again after an exponential backoff with full
 * jitter; a Retry-After on 429 or 503 replaces the backoff, bounded by the
 * largest backoff. Other 4xx are answers, never retried. Response bodies are
 * bounded by the caller; header values (tokens) and URL queries (signatures)
 * never reach a log line. Design notes: docs/internals/http.md. */
#ifndef SL_HTTP_H
#define SL_HTTP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_HTTP_MAX_HEADERS 16
#define SL_HTTP_BODY_DEFAULT_BYTES 65536      /* body_max_bytes 0 */
#define SL_HTTP_TIMEOUT_DEFAULT_MS 30000      /* timeout_ms 0 */
#define SL_HTTP_MAX_TRIES 16                  /* retry.max_tries is capped here */
#define SL_HTTP_MULTI_MAX 64                  /* transfers in flight per multi */
#define SL_HTTP_MAX_RESP_HEADERS 8            /* response headers a request may keep */

struct sl_http_retry {
  int max_tries;       /* tries in all, first included; 0 or 1: no retry */
  int base_backoff_ms; /* the first retry waits up to this long (random) */
  int max_backoff_ms;  /* no wait is longer, Retry-After included */
};

/* A byte range of an open file: a request body read from it (pread, so
 * threads may share the descriptor), or a response body written into it
 * (pwrite). Each try starts again at offset. */
struct sl_http_fd_range {
  int fd;
  uint64_t offset;
  uint64_t len;     /* body: the bytes sent (a file that ends sooner fails the try
                     * with -EIO, not retried); sink: the most bytes taken
                     * (more is SL_ELIMIT), 0: no bound */
};

/* Filled by the caller; every pointer is borrowed for the call only (the
 * multi form copies what it keeps). Zeroed fields take the defaults. */
struct sl_http_req {
  const char *method;                       /* "GET" (also when NULL), "PUT", "POST", ... */
  const char *url;                          /* http:// or https:// only */
  const char *headers[SL_HTTP_MAX_HEADERS]; /* "Name: value"; NULL ends the list early */
  const void *body;                         /* request body, or NULL */
  size_t body_len;
  size_t body_max_bytes;                    /* response body cap; 0: SL_HTTP_BODY_DEFAULT_BYTES */
  int connect_timeout_ms;                   /* per try; 0: same as timeout_ms */
  int timeout_ms;                           /* whole try; 0: SL_HTTP_TIMEOUT_DEFAULT_MS */
  struct sl_http_retry retry;
  bool use_env_proxy;                       /* false: never a proxy (metadata services) */
  /* Streaming, for bodies too large to hold (object stores). */
  const struct sl_http_fd_range *body_fd;   /* request body from a file instead of body */
  const struct sl_http_fd_range *sink_fd;   /* a 2xx answer's body goes into this file (not
                                             * resp.body, not capped by body_max_bytes);
                                             * other answers' bodies go to resp.body */
  const char *resp_headers[SL_HTTP_MAX_RESP_HEADERS]; /* names of response headers to keep
                                             * (any case); NULL ends the list early */
  const atomic_bool *cancel;                /* NULL, or a flag another thread may set: once
                                             * true, no further try starts, a backoff is cut
                                             * short and the try under way stops within
                                             * about a second; the result is -ECANCELED
                                             * (the multi form keeps the pointer: the flag
                                             * must outlive the transfer) */
};

struct sl_http_resp {
  long status;      /* HTTP status of the last try */
  char *body;       /* owned, NUL-terminated, never NULL after success */
  size_t body_len;
  int tries;        /* tries made, >= 1 */
  char *header_values[SL_HTTP_MAX_RESP_HEADERS]; /* owned: the last answer's value of
                     * req.resp_headers[i] (trimmed), NULL when it had none */
  uint64_t sink_bytes; /* bytes the last try wrote to req.sink_fd */
};

/* Once per process, before threads start; later calls return the first
 * call's result. SL_ECURL if libcurl cannot start. */
int sl_http_global_init(void);

/* Frees resp's body and header values and zeroes it; resp may be zeroed
 * already. */
void sl_http_resp_done(struct sl_http_resp *resp);

/* libcurl's error (a CURLcode) as a project error: timeouts -ETIMEDOUT,
 * refused connections -ECONNREFUSED, names that do not resolve -EHOSTUNREACH,
 * a body over its cap SL_ELIMIT, a bad URL -EINVAL, no memory -ENOMEM, all
 * else SL_ECURL. 0 for CURLE_OK. */
int sl_err_from_curl(int curl_code);

/* Performs req (borrowed), retrying as its policy says, sleeping between
 * tries. On any HTTP answer, 5xx and 429 included once the tries are spent,
 * returns 0 and fills *ret, whose body the caller owns (sl_http_resp_done).
 * Otherwise *ret is untouched and the result is the last try's error
 * (sl_err_from_curl), SL_ELIMIT for a body over body_max_bytes (never
 * retried; the transfer stops there), -EINVAL for a request without a URL,
 * -ECANCELED once req->cancel was set. */
int sl_http_do(const struct sl_http_req *req, struct sl_http_resp *ret);

/* ---- the multi form ---- */

enum {
  SL_HTTP_IN = 1,  /* readable */
  SL_HTTP_OUT = 2, /* writable */
  SL_HTTP_ERR = 4, /* error or hang-up (sl_http_multi_on_fd only) */
};

/* The caller's event loop, borrowed by sl_http_multi_new() and used until
 * sl_http_multi_free() returns. Each call replaces the previous one for the
 * same descriptor (watch) or the one timer (timer). A negative result is an
 * error: a failed watch fails the transfer that needed it. */
struct sl_http_driver {
  void *ctx;
  /* Watch fd for SL_HTTP_IN|SL_HTTP_OUT and call sl_http_multi_on_fd() when
   * ready; events 0: stop watching it (it may be closed next). */
  int (*watch)(void *ctx, int fd, int events);
  /* Call sl_http_multi_timeout() once when the monotonic clock reaches
   * due_us (sl_time_mono_us); INT64_MAX: no timer. */
  int (*timer)(void *ctx, int64_t due_us);
};

struct sl_http_multi;

/* Called once per started transfer that is not cancelled: err 0 and resp
 * (borrowed: valid during the call) on an answer, or err < 0 and resp NULL,
 * with sl_http_do()'s meanings. The callback may keep the body by moving it
 * out (take resp->body, set it to NULL; then it frees it). It may start and
 * cancel transfers, but not free the multi or call on_fd/timeout. */
typedef void (*sl_http_done_fn)(uint64_t id, int err, struct sl_http_resp *resp, void *data);

/* An owned multi driven by d (borrowed, see above), or NULL. */
struct sl_http_multi *sl_http_multi_new(const struct sl_http_driver *d);
/* Cancels every transfer (no done calls) and frees m; returns NULL. On the
 * way the driver is told to stop watching curl's descriptors and, if a
 * timer is set, to clear it. */
struct sl_http_multi *sl_http_multi_free(struct sl_http_multi *m);

/* Starts req (borrowed; copied). done(data) is called later from on_fd or
 * timeout, never from here. Writes the transfer's id (never 0) to *ret_id
 * when ret_id is not NULL. SL_ELIMIT when SL_HTTP_MULTI_MAX are in flight,
 * -EINVAL without a URL, -ENOMEM. */
int sl_http_multi_start(struct sl_http_multi *m, const struct sl_http_req *req,
                        sl_http_done_fn done, void *data, uint64_t *ret_id);
/* Stops transfer id; its done is not called. -ENOENT if it is not in flight
 * (finished, cancelled, or being reported). */
int sl_http_multi_cancel(struct sl_http_multi *m, uint64_t id);
/* Number of transfers in flight (waiting to retry included). */
int sl_http_multi_count(const struct sl_http_multi *m);

/* The driver reports fd ready for events (SL_HTTP_*). */
void sl_http_multi_on_fd(struct sl_http_multi *m, int fd, int events);
/* The driver's timer fired. Calling it early is harmless. */
void sl_http_multi_timeout(struct sl_http_multi *m);

#endif
