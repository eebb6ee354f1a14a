/* sl_http against a real local server (libmicrohttpd, one thread per
 * connection, 127.0.0.1 on a port the kernel picks): plain requests, the
 * total timeout, the body cap, retries on 503, 429, dropped connections and
 * refused ones, no retry on other 4xx, and the multi form driven by a small
 * poll(2) loop. The server counts the requests it sees, so "retried" and
 * "not retried" are checked where they happen. */
#include "harness.h"

#include "sl_err.h"
#include "sl_http.h"
#include "sl_time.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#define MS SL_US_PER_MS
#define ENDLESS_BYTES (INT64_C(1) << 30)

/* ---- the server ---- */

static struct {
  struct MHD_Daemon *d;
  int port;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int hits;                 /* requests seen since reset_hits() */
  int64_t hit_us[16];       /* when each arrived (monotonic) */
  unsigned stall_gen;       /* stalled requests answer once it moves on */
  int together;             /* requests waiting at /together */
  atomic_llong streamed;    /* bytes /endless produced */
} srv = {.mu = PTHREAD_MUTEX_INITIALIZER};

struct request {
  char body[4096];
  size_t len;
};

static void reset_hits(void) {
  pthread_mutex_lock(&srv.mu);
  srv.hits = 0;
  srv.together = 0;
  pthread_mutex_unlock(&srv.mu);
}

static int hits(void) {
  pthread_mutex_lock(&srv.mu);
  int n = srv.hits;
  pthread_mutex_unlock(&srv.mu);
  return n;
}

static void deadline_in(struct timespec *ts, int ms);

/* The requests seen, once they are n or 2 s have passed: a request the client
 * sent reaches the handler on the server's own thread, which on a loaded
 * machine may come after the client gave up on it (a timeout, a cancel). */
static int hits_reaching(int n) {
  struct timespec ts;
  deadline_in(&ts, 2000);
  pthread_mutex_lock(&srv.mu);
  while (srv.hits < n && pthread_cond_timedwait(&srv.cv, &srv.mu, &ts) == 0) {}
  int got = srv.hits;
  pthread_mutex_unlock(&srv.mu);
  return got;
}

static int64_t hit_gap_us(int a, int b) {
  pthread_mutex_lock(&srv.mu);
  int64_t gap = srv.hit_us[b] - srv.hit_us[a];
  pthread_mutex_unlock(&srv.mu);
  return gap;
}

/* Lets every stalled request answer. */
static void release_stalled(void) {
  pthread_mutex_lock(&srv.mu);
  srv.stall_gen++;
  pthread_cond_broadcast(&srv.cv);
  pthread_mutex_unlock(&srv.mu);
}

static void deadline_in(struct timespec *ts, int ms) {
  clock_gettime(CLOCK_MONOTONIC, ts);
  int64_t ns = ts->tv_nsec + (int64_t)ms * 1000000;
  ts->tv_sec += ns / 1000000000;
  ts->tv_nsec = ns % 1000000000;
}

static enum MHD_Result answer(struct MHD_Connection *c, unsigned code, const char *body,
                              const char *retry_after) {
  struct MHD_Response *r =
      MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
  if (!r) return MHD_NO;
  if (retry_after) MHD_add_response_header(r, "Retry-After", retry_after);
  enum MHD_Result ok = MHD_queue_response(c, code, r);
  MHD_destroy_response(r);
  return ok;
}

static ssize_t endless(void *cls, uint64_t pos, char *buf, size_t max) {
  if (pos >= (uint64_t)ENDLESS_BYTES) return MHD_CONTENT_READER_END_OF_STREAM;
  memset(buf, 'x', max);
  atomic_fetch_add(&srv.streamed, (long long)max);
  return (ssize_t)max;
}

/* Routes:
 *   /hello                 "METHOD hello X-Test" or, with a body, "METHOD body"
 *   /status/N              answers N
 *   /flaky/N/CODE[/RA]     the first N requests answer CODE (Retry-After RA), then 200 "ok"
 *   /drop                  the first request is dropped unanswered, then 200 "ok"
 *   /stall                 answers only after release_stalled() (2 s at most)
 *   /big                   64 KiB with a Content-Length
 *   /endless               1 GiB, chunked
 *   /together              "together" once two requests are waiting, else "alone" after 2 s */
static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls) {
  struct request *q = *con_cls;
  if (!q) {
    q = calloc(1, sizeof *q);
    if (!q) return MHD_NO;
    *con_cls = q;
    pthread_mutex_lock(&srv.mu);
    int n = srv.hits++;
    if (n < 16) srv.hit_us[n] = sl_time_mono_us();
    pthread_cond_broadcast(&srv.cv); /* hits_reaching */
    pthread_mutex_unlock(&srv.mu);
    if (!strcmp(url, "/drop") && n == 0) return MHD_NO;
    return MHD_YES;
  }
  if (*upload_size) {
    size_t k = *upload_size;
    if (k > sizeof q->body - 1 - q->len) k = sizeof q->body - 1 - q->len;
    memcpy(q->body + q->len, upload, k);
    q->len += k;
    *upload_size = 0;
    return MHD_YES;
  }
  char out[4200];
  int n, code;
  char ra[16];
  if (!strcmp(url, "/hello")) {
    const char *t = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Test");
    if (q->len) snprintf(out, sizeof out, "%s %s", method, q->body);
    else snprintf(out, sizeof out, "%s hello %s", method, t ? t : "-");
    return answer(c, 200, out, NULL);
  }
  if (sscanf(url, "/status/%d", &code) == 1) return answer(c, (unsigned)code, "status", NULL);
  if (!strncmp(url, "/flaky/", 7)) {
    ra[0] = 0;
    if (sscanf(url, "/flaky/%d/%d/%15s", &n, &code, ra) < 2) return answer(c, 400, "bad", NULL);
    return hits() <= n ? answer(c, (unsigned)code, "later", ra[0] ? ra : NULL)
                       : answer(c, 200, "ok", NULL);
  }
  if (!strcmp(url, "/drop")) return answer(c, 200, "ok", NULL);
  if (!strcmp(url, "/stall")) {
    struct timespec ts;
    deadline_in(&ts, 2000);
    pthread_mutex_lock(&srv.mu);
    unsigned gen = srv.stall_gen;
    while (srv.stall_gen == gen && pthread_cond_timedwait(&srv.cv, &srv.mu, &ts) == 0) {}
    pthread_mutex_unlock(&srv.mu);
    return answer(c, 200, "late", NULL);
  }
  if (!strcmp(url, "/big")) {
    static char big[65536 + 1];
    memset(big, 'b', sizeof big - 1);
    return answer(c, 200, big, NULL);
  }
  if (!strcmp(url, "/endless")) {
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, endless,
                                                               NULL, NULL);
    if (!r) return MHD_NO;
    enum MHD_Result ok = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ok;
  }
  if (!strcmp(url, "/together")) {
    struct timespec ts;
    deadline_in(&ts, 2000);
    pthread_mutex_lock(&srv.mu);
    srv.together++;
    pthread_cond_broadcast(&srv.cv);
    while (srv.together < 2 && pthread_cond_timedwait(&srv.cv, &srv.mu, &ts) == 0) {}
    bool both = srv.together >= 2;
    pthread_mutex_unlock(&srv.mu);
    return answer(c, 200, both ? "together" : "alone", NULL);
  }
  return answer(c, 404, "no such path", NULL);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode why) {
  free(*con_cls);
  *con_cls = NULL;
}

static int server_start(void) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&srv.cv, &ca);
  pthread_condattr_destroy(&ca);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  srv.d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0,
                           NULL, NULL, handle, NULL, MHD_OPTION_SOCK_ADDR, &sa,
                           MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_END);
  if (!srv.d) return -1;
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv.d, MHD_DAEMON_INFO_BIND_PORT);
  if (!info || !info->port) return -1;
  srv.port = info->port;
  return 0;
}

static void server_stop(void) {
  release_stalled();
  MHD_stop_daemon(srv.d);
  pthread_cond_destroy(&srv.cv);
}

/* ---- helpers ---- */

static char url_buf[8][128];
static int url_next;

static const char *url(const char *path) {
  char *u = url_buf[url_next++ % 8];
  snprintf(u, sizeof url_buf[0], "http://127.0.0.1:%d%s", srv.port, path);
  return u;
}

static struct sl_http_req req_for(const char *path, int tries) {
  struct sl_http_req q = {.url = url(path), .timeout_ms = 2000,
                          .retry = {.max_tries = tries, .base_backoff_ms = 5, .max_backoff_ms = 20}};
  return q;
}

static int64_t elapsed_ms(int64_t since_us) { return (sl_time_mono_us() - since_us) / MS; }

/* ---- the blocking form ---- */

static void test_get_put(void) {
  struct sl_http_resp resp = {0};
  struct sl_http_req q = req_for("/hello", 3);
  q.headers[0] = "X-Test: abc";
  reset_hits();
  CHECK_INT(sl_http_do(&q, &resp), 0);
  CHECK_INT(resp.status, 200);
  CHECK_STR(resp.body, "GET hello abc");
  CHECK_INT(resp.body_len, 13);
  CHECK_INT(resp.tries, 1);
  CHECK_INT(hits(), 1);
  sl_http_resp_done(&resp);
  CHECK(resp.body == NULL);

  q.method = "PUT";
  q.body = "payload";
  q.body_len = 7;
  CHECK_INT(sl_http_do(&q, &resp), 0);
  CHECK_INT(resp.status, 200);
  CHECK_STR(resp.body, "PUT payload");
  sl_http_resp_done(&resp);

  /* a PUT without a body still sends Content-Length: 0 and is answered */
  q.body = NULL;
  q.body_len = 0;
  CHECK_INT(sl_http_do(&q, &resp), 0);
  CHECK_STR(resp.body, "PUT hello abc");
  sl_http_resp_done(&resp);
  CHECK_INT(hits(), 3);

  /* an empty body is "" and not NULL */
  q = req_for("/status/204", 1);
  CHECK_INT(sl_http_do(&q, &resp), 0);
  CHECK_INT(resp.status, 204);
  CHECK(resp.body && resp.body[0] == 0 && resp.body_len == 0);
  sl_http_resp_done(&resp);
}

static void test_timeout(void) {
  struct sl_http_resp resp = {.status = 7};
  struct sl_http_req q = req_for("/stall", 1);
  q.timeout_ms = 200;
  reset_hits();
  int64_t t0 = sl_time_mono_us();
  CHECK_INT(sl_http_do(&q, &resp), -ETIMEDOUT);
  int64_t ms = elapsed_ms(t0);
  fprintf(stderr, "timeout: 200 ms asked, %lld ms taken\n", (long long)ms);
  CHECK(ms >= 190 && ms < 1000);
  CHECK_INT(resp.status, 7); /* untouched */
  CHECK_INT(hits_reaching(1), 1);
  /* a timeout is retried */
  q.retry.max_tries = 2;
  CHECK_INT(sl_http_do(&q, &resp), -ETIMEDOUT);
  CHECK_INT(hits_reaching(3), 3);
  release_stalled();
}

/* Sets a flag after a delay, from another thread. */
struct later_set {
  atomic_bool *flag;
  int ms;
};

static void *set_later(void *arg) {
  struct later_set *l = arg;
  struct timespec ts = {l->ms / 1000, (long)(l->ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  atomic_store(l->flag, true);
  return NULL;
}

/* A cancel flag set by another thread stops a try under way (a stalled
 * answer), and a backoff between tries; one set before the call starts no
 * try at all. */
static void test_cancel(void) {
  struct sl_http_resp resp = {.status = 7};
  atomic_bool stop = false;
  struct later_set l = {&stop, 300};
  pthread_t t;

  struct sl_http_req q = req_for("/stall", 3);
  q.timeout_ms = 5000;
  q.cancel = &stop;
  reset_hits();
  int64_t t0 = sl_time_mono_us();
  CHECK_INT(pthread_create(&t, NULL, set_later, &l), 0);
  CHECK_INT(sl_http_do(&q, &resp), -ECANCELED);
  pthread_join(t, NULL);
  int64_t ms = elapsed_ms(t0);
  fprintf(stderr, "cancel: a stalled try stopped after %lld ms\n", (long long)ms);
  CHECK(ms >= 290 && ms < 2500); /* curl asks at least once a second */
  CHECK_INT(resp.status, 7);
  CHECK_INT(hits_reaching(1), 1);
  release_stalled();

  /* in the wait before the second try: 4 s, the answer's Retry-After (a backoff is
   * random, from 0 up) */
  atomic_store(&stop, false);
  q = req_for("/flaky/5/503/4", 5);
  q.retry.base_backoff_ms = 1;
  q.retry.max_backoff_ms = 4000;
  q.cancel = &stop;
  reset_hits();
  t0 = sl_time_mono_us();
  CHECK_INT(pthread_create(&t, NULL, set_later, &l), 0);
  CHECK_INT(sl_http_do(&q, &resp), -ECANCELED);
  pthread_join(t, NULL);
  ms = elapsed_ms(t0);
  fprintf(stderr, "cancel: a backoff cut short after %lld ms\n", (long long)ms);
  CHECK(ms < 1500);
  CHECK_INT(hits(), 1);

  /* set already: no try */
  reset_hits();
  q = req_for("/hello", 3);
  q.cancel = &stop;
  CHECK_INT(sl_http_do(&q, &resp), -ECANCELED);
  CHECK_INT(hits(), 0);
  /* a flag that stays down changes nothing */
  atomic_store(&stop, false);
  CHECK_INT(sl_http_do(&q, &resp), 0);
  CHECK_INT(resp.status, 200);
  sl_http_resp_done(&resp);
}

static void test_cap(void) {
  struct sl_http_resp resp = {0};
  struct sl_http_req q = req_for("/big", 3);
  reset_hits();
  q.body_max_bytes = 1024;
  CHECK_INT(sl_http_do(&q, &resp), SL_ELIMIT);
  CHECK(resp.body == NULL);
  CHECK_INT(hits(), 1); /* a cap is not retried */
  q.body_max_bytes = 65536; /* exactly the body: allowed */
  CHECK_INT(sl_http_do(&q, &resp), 0);
  CHECK_INT(resp.body_len, 65536);
  CHECK_INT(resp.body[65535], 'b');
  CHECK_INT(resp.body[65536], 0);
  sl_http_resp_done(&resp);

  /* no length announced: the write callback stops the transfer at the cap */
  q = req_for("/endless", 3);
  q.body_max_bytes = 4096;
  atomic_store(&srv.streamed, 0);
  int64_t t0 = sl_time_mono_us();
  CHECK_INT(sl_http_do(&q, &resp), SL_ELIMIT);
  long long streamed = atomic_load(&srv.streamed);
  fprintf(stderr, "cap: endless body stopped after %lld ms, %lld bytes sent by the server\n",
          (long long)elapsed_ms(t0), streamed);
  CHECK(streamed < 64 * 1024 * 1024);
  CHECK(elapsed_ms(t0) < 1000);
  CHECK_INT(sl_err_from_curl(CURLE_WRITE_ERROR), SL_ELIMIT);
  CHECK_INT(sl_err_from_curl(CURLE_FILESIZE_EXCEEDED), SL_ELIMIT);
}

static void test_retry_503(void) {
  struct sl_http_resp resp = {0};
  struct sl_http_req q = req_for("/flaky/2/503", 3);
  reset_hits();
  CHECK_INT(sl_http_do(&q, &resp), 0);
  CHECK_INT(resp.status, 200);
  CHECK_STR(resp.body, "ok");
  CHECK_INT(resp.tries, 3);
  CHECK_INT(hits(), 3);
  sl_http_resp_done(&resp);
  /* tries spent: the last 5xx is the answer */
  reset_hits();
  q = req_for("/flaky/5/500", 2);
  CHECK_INT(sl_http_do(&q, &resp), 0);
  CHECK_INT(resp.status, 500);
  CHECK_STR(resp.body, "later");
  CHECK_INT(resp.tries, 2);
  CHECK_INT(hits(), 2);
  sl_http_resp_done(&resp);
}

/* Retry-After: 1 asks for a second; the largest backoff (150 ms) bounds it,
 * and the backoff alone would be at most 1 ms. */
static void retry_after_case(const char *path) {
  struct sl_http_resp resp = {0};
  struct sl_http_req q = req_for(path, 3);
  q.retry.base_backoff_ms = 1;
  q.retry.max_backoff_ms = 150;
  reset_hits();
  CHECK_INT(sl_http_do(&q, &resp), 0);
  CHECK_INT(resp.status, 200);
  CHECK_INT(hits(), 2);
  int64_t gap_ms = hit_gap_us(0, 1) / MS;
  fprintf(stderr, "%s: retried after %lld ms\n", path, (long long)gap_ms);
  CHECK(gap_ms >= 140 && gap_ms < 900);
  sl_http_resp_done(&resp);
}

static void test_retry_429(void) {
  retry_after_case("/flaky/1/429/1");
  retry_after_case("/flaky/1/503/1");
  /* a 429 without Retry-After backs off as usual */
  struct sl_http_resp resp = {0};
  struct sl_http_req q = req_for("/flaky/1/429", 2);
  reset_hits();
  CHECK_INT(sl_http_do(&q, &resp), 0);
  CHECK_INT(resp.status, 200);
  CHECK_INT(hits(), 2);
  CHECK(hit_gap_us(0, 1) < 150 * MS);
  sl_http_resp_done(&resp);
}

static void test_drop(void) {
  struct sl_http_resp resp = {0};
  struct sl_http_req q = req_for("/drop", 2);
  reset_hits();
  CHECK_INT(sl_http_do(&q, &resp), 0);
  CHECK_INT(resp.status, 200);
  CHECK_STR(resp.body, "ok");
  CHECK_INT(hits(), 2);
  sl_http_resp_done(&resp);
  reset_hits();
  q.retry.max_tries = 1;
  CHECK_INT(sl_http_do(&q, &resp), SL_ECURL);
  CHECK_INT(hits(), 1);
}

static void test_no_retry_4xx(void) {
  static const char *const paths[] = {"/status/404", "/status/400", "/status/401", "/status/403"};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    struct sl_http_resp resp = {0};
    struct sl_http_req q = req_for(paths[i], 5);
    reset_hits();
    CHECK_INT(sl_http_do(&q, &resp), 0);
    CHECK_INT(resp.status, atoi(paths[i] + 8));
    CHECK_INT(resp.tries, 1);
    CHECK_INT(hits(), 1);
    sl_http_resp_done(&resp);
  }
}

/* A listener that accepts each connection and closes it unanswered. */
struct dropper {
  int fd, stop_rd, stop_wr;
  atomic_int accepted;
  pthread_t thread;
};

static void *dropper_run(void *arg) {
  struct dropper *d = arg;
  for (;;) {
    struct pollfd p[2] = {{.fd = d->fd, .events = POLLIN}, {.fd = d->stop_rd, .events = POLLIN}};
    if (poll(p, 2, -1) < 0 && errno != EINTR) break;
    if (p[1].revents) break;
    if (p[0].revents & POLLIN) {
      int c = accept(d->fd, NULL, NULL);
      if (c >= 0) {
        atomic_fetch_add(&d->accepted, 1);
        close(c);
      }
    }
  }
  return NULL;
}

/* A loopback socket bound to a port the kernel picks; *ret_port. */
static int bound_socket(int *ret_port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  if (fd < 0) return -1;
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
      getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
    close(fd);
    return -1;
  }
  *ret_port = ntohs(sa.sin_port);
  return fd;
}

static void test_transport_failures(void) {
  struct sl_http_resp resp = {.status = 7};
  char u[64];
  int port;
  /* bound but not listening: refused, each try */
  int fd = bound_socket(&port);
  CHECK(fd >= 0);
  snprintf(u, sizeof u, "http://127.0.0.1:%d/x", port);
  struct sl_http_req q = {.url = u, .timeout_ms = 1000,
                          .retry = {.max_tries = 3, .base_backoff_ms = 5, .max_backoff_ms = 20}};
  CHECK_INT(sl_http_do(&q, &resp), -ECONNREFUSED);
  CHECK_INT(resp.status, 7);
  close(fd);

  /* answered by nothing: every configured try is made, then the error */
  struct dropper d = {.fd = bound_socket(&port)};
  int pipefd[2];
  CHECK(d.fd >= 0 && listen(d.fd, 8) == 0 && pipe(pipefd) == 0);
  d.stop_rd = pipefd[0];
  d.stop_wr = pipefd[1];
  CHECK_INT(pthread_create(&d.thread, NULL, dropper_run, &d), 0);
  snprintf(u, sizeof u, "http://127.0.0.1:%d/x", port);
  CHECK_INT(sl_http_do(&q, &resp), SL_ECURL);
  CHECK_INT(atomic_load(&d.accepted), 3);
  CHECK(write(d.stop_wr, "x", 1) == 1);
  pthread_join(d.thread, NULL);
  close(d.fd);
  close(pipefd[0]);
  close(pipefd[1]);

  /* requests that cannot be made */
  q.url = NULL;
  CHECK_INT(sl_http_do(&q, &resp), -EINVAL);
  q.url = "ftp://127.0.0.1/x";
  CHECK_INT(sl_http_do(&q, &resp), -EINVAL);
  CHECK_INT(sl_err_from_curl(CURLE_OK), 0);
  CHECK_INT(sl_err_from_curl(CURLE_OPERATION_TIMEDOUT), -ETIMEDOUT);
  CHECK_INT(sl_err_from_curl(CURLE_COULDNT_CONNECT), -ECONNREFUSED);
  CHECK_INT(sl_err_from_curl(CURLE_COULDNT_RESOLVE_HOST), -EHOSTUNREACH);
  CHECK_INT(sl_err_from_curl(CURLE_GOT_NOTHING), SL_ECURL);
}

/* ---- the multi form, on a poll(2) loop ---- */

#define LOOP_MAX_FDS 32

struct loop {
  struct pollfd fds[LOOP_MAX_FDS];
  int nfds;
  int64_t due_us;      /* INT64_MAX: no timer */
  int watches, timers; /* calls seen */
  int retry_waits;     /* timers set more than 2 ms ahead */
  int refuse_watch;    /* watch fails while set */
};

static int loop_watch(void *ctx, int fd, int events) {
  struct loop *l = ctx;
  l->watches++;
  if (l->refuse_watch && events) return -ENOSPC;
  int i = 0;
  while (i < l->nfds && l->fds[i].fd != fd) i++;
  if (!events) {
    if (i < l->nfds) l->fds[i] = l->fds[--l->nfds];
    return 0;
  }
  if (i == l->nfds) {
    if (l->nfds == LOOP_MAX_FDS) return -ENOSPC;
    l->nfds++;
  }
  l->fds[i].fd = fd;
  l->fds[i].events = (short)((events & SL_HTTP_IN ? POLLIN : 0) | (events & SL_HTTP_OUT ? POLLOUT : 0));
  return 0;
}

static int loop_timer(void *ctx, int64_t due_us) {
  struct loop *l = ctx;
  l->timers++;
  if (due_us != INT64_MAX && due_us - sl_time_mono_us() > 2 * MS) l->retry_waits++;
  l->due_us = due_us;
  return 0;
}

static bool watched(const struct loop *l, int fd) {
  for (int i = 0; i < l->nfds; i++)
    if (l->fds[i].fd == fd) return true;
  return false;
}

/* One turn: waits for a descriptor or the timer (or the deadline), then
 * hands what is ready to m. */
static void loop_turn(struct loop *l, struct sl_http_multi *m, int64_t deadline_us) {
  int64_t now = sl_time_mono_us(), until = l->due_us < deadline_us ? l->due_us : deadline_us;
  int wait_ms = until <= now ? 0 : (int)((until - now + MS - 1) / MS);
  struct pollfd fds[LOOP_MAX_FDS];
  int n = l->nfds;
  memcpy(fds, l->fds, sizeof fds[0] * (size_t)n);
  if (poll(fds, (nfds_t)n, wait_ms) < 0) return;
  for (int i = 0; i < n; i++) {
    if (!fds[i].revents || !watched(l, fds[i].fd)) continue;
    int ev = (fds[i].revents & (POLLIN | POLLHUP) ? SL_HTTP_IN : 0) |
             (fds[i].revents & POLLOUT ? SL_HTTP_OUT : 0) |
             (fds[i].revents & POLLERR ? SL_HTTP_ERR : 0);
    sl_http_multi_on_fd(m, fds[i].fd, ev);
  }
  if (l->due_us != INT64_MAX && sl_time_mono_us() >= l->due_us) {
    l->due_us = INT64_MAX;
    sl_http_multi_timeout(m);
  }
}

static int g_done; /* done callbacks, all transfers */

/* Turns until g_done reaches want or timeout_ms pass; true if it did. */
static bool run_until(struct loop *l, struct sl_http_multi *m, int want, int timeout_ms) {
  int64_t deadline = sl_time_mono_us() + timeout_ms * MS;
  while (g_done < want && sl_time_mono_us() < deadline) loop_turn(l, m, deadline);
  return g_done >= want;
}

struct outcome {
  int calls;
  uint64_t id;
  int err;
  long status;
  int tries;
  char body[64];
  struct sl_http_multi *chain; /* starts /hello again from the callback */
  struct outcome *chained;
};

static void on_done(uint64_t id, int err, struct sl_http_resp *resp, void *data) {
  struct outcome *o = data;
  g_done++;
  o->calls++;
  o->id = id;
  o->err = err;
  if (resp) {
    o->status = resp->status;
    o->tries = resp->tries;
    snprintf(o->body, sizeof o->body, "%s", resp->body);
  } else {
    o->status = -1;
  }
  if (o->chain) {
    struct sl_http_req q = req_for("/hello", 1);
    CHECK_INT(sl_http_multi_start(o->chain, &q, on_done, o->chained, NULL), 0);
    CHECK_INT(sl_http_multi_cancel(o->chain, id), -ENOENT); /* being reported */
  }
}

static struct sl_http_multi *multi_new(struct loop *l) {
  memset(l, 0, sizeof *l);
  l->due_us = INT64_MAX;
  struct sl_http_driver d = {.ctx = l, .watch = loop_watch, .timer = loop_timer};
  g_done = 0;
  return sl_http_multi_new(&d);
}

static void test_multi_basic(void) {
  struct loop l;
  struct sl_http_multi *m = multi_new(&l);
  CHECK(m != NULL);
  struct outcome a = {0}, b = {0};
  a.chain = m;
  a.chained = &b;
  struct sl_http_req q = req_for("/hello", 1);
  q.headers[0] = "X-Test: multi";
  uint64_t id = 0;
  reset_hits();
  CHECK_INT(sl_http_multi_start(m, &q, on_done, &a, &id), 0);
  CHECK(id != 0);
  CHECK_INT(sl_http_multi_count(m), 1);
  CHECK_INT(g_done, 0); /* never from start */
  CHECK(run_until(&l, m, 2, 3000));
  CHECK_INT(a.calls, 1);
  CHECK(a.id == id);
  CHECK_INT(a.err, 0);
  CHECK_INT(a.status, 200);
  CHECK_STR(a.body, "GET hello multi");
  CHECK_INT(b.calls, 1); /* started from a's callback */
  CHECK_STR(b.body, "GET hello -");
  CHECK_INT(hits(), 2);
  CHECK_INT(sl_http_multi_count(m), 0);
  CHECK(l.watches > 0 && l.timers > 0);
  m = sl_http_multi_free(m);
  CHECK(m == NULL);
  CHECK_INT(l.nfds, 0);
  CHECK(l.due_us == INT64_MAX);
}

static void test_multi_retry(void) {
  struct loop l;
  struct sl_http_multi *m = multi_new(&l);
  struct outcome a = {0}, b = {0};
  struct sl_http_req q = req_for("/flaky/2/503", 3);
  q.retry.base_backoff_ms = 20;
  q.retry.max_backoff_ms = 40;
  reset_hits();
  CHECK_INT(sl_http_multi_start(m, &q, on_done, &a, NULL), 0);
  CHECK(run_until(&l, m, 1, 3000));
  CHECK_INT(a.calls, 1);
  CHECK_INT(a.err, 0);
  CHECK_INT(a.status, 200);
  CHECK_STR(a.body, "ok");
  CHECK_INT(a.tries, 3);
  CHECK_INT(hits(), 3);
  fprintf(stderr, "multi retry: %d timer calls, %d of them backoff waits\n", l.timers,
          l.retry_waits);

  /* Retry-After through the multi form: the wait is on the driver's timer */
  q = req_for("/flaky/1/429/1", 2);
  q.retry.base_backoff_ms = 1;
  q.retry.max_backoff_ms = 150;
  reset_hits();
  l.retry_waits = 0;
  CHECK_INT(sl_http_multi_start(m, &q, on_done, &b, NULL), 0);
  CHECK(run_until(&l, m, 2, 3000));
  CHECK_INT(b.status, 200);
  CHECK_INT(hits(), 2);
  CHECK(hit_gap_us(0, 1) >= 140 * MS);
  CHECK(l.retry_waits >= 1);
  sl_http_multi_free(m);
}

static void test_multi_two(void) {
  struct loop l;
  struct sl_http_multi *m = multi_new(&l);
  struct outcome a = {0}, b = {0};
  struct sl_http_req q = req_for("/together", 1);
  reset_hits();
  int64_t t0 = sl_time_mono_us();
  CHECK_INT(sl_http_multi_start(m, &q, on_done, &a, NULL), 0);
  CHECK_INT(sl_http_multi_start(m, &q, on_done, &b, NULL), 0);
  CHECK_INT(sl_http_multi_count(m), 2);
  CHECK(run_until(&l, m, 2, 3000));
  CHECK_STR(a.body, "together");
  CHECK_STR(b.body, "together");
  CHECK(elapsed_ms(t0) < 1500);
  CHECK(a.id != b.id);
  sl_http_multi_free(m);
}

static void test_multi_cancel(void) {
  struct loop l;
  struct sl_http_multi *m = multi_new(&l);
  struct outcome a = {0}, b = {0};
  struct sl_http_req qa = req_for("/stall", 1), qb = req_for("/hello", 1);
  uint64_t ida, idb;
  reset_hits();
  CHECK_INT(sl_http_multi_start(m, &qa, on_done, &a, &ida), 0);
  CHECK_INT(sl_http_multi_start(m, &qb, on_done, &b, &idb), 0);
  CHECK(run_until(&l, m, 1, 3000));
  CHECK_INT(b.calls, 1);
  CHECK_INT(b.status, 200);
  CHECK_INT(sl_http_multi_count(m), 1);
  CHECK_INT(sl_http_multi_cancel(m, ida), 0);
  CHECK_INT(sl_http_multi_cancel(m, ida), -ENOENT);
  CHECK_INT(sl_http_multi_cancel(m, idb), -ENOENT);
  CHECK_INT(sl_http_multi_count(m), 0);
  CHECK_INT(l.nfds, 0); /* the cancelled transfer's descriptor is unwatched */
  release_stalled();
  CHECK(!run_until(&l, m, 2, 100)); /* and its done never comes */
  CHECK_INT(a.calls, 0);

  /* cancelled while waiting to retry */
  struct sl_http_req qc = req_for("/flaky/5/503", 3);
  qc.retry.base_backoff_ms = 1000;
  qc.retry.max_backoff_ms = 1000;
  reset_hits();
  l.timers = 0;
  CHECK_INT(sl_http_multi_start(m, &qc, on_done, &a, &ida), 0);
  int64_t deadline = sl_time_mono_us() + 2000 * MS;
  while (hits() < 1 && sl_time_mono_us() < deadline) loop_turn(&l, m, sl_time_mono_us() + 20 * MS);
  CHECK_INT(hits(), 1);
  CHECK_INT(sl_http_multi_cancel(m, ida), 0);
  CHECK_INT(sl_http_multi_count(m), 0);
  CHECK_INT(a.calls, 0);
  sl_http_multi_free(m);
}

static void test_multi_limits(void) {
  struct loop l;
  struct sl_http_multi *m = multi_new(&l);
  struct outcome a = {0};
  struct sl_http_req q = req_for("/stall", 1);
  for (int i = 0; i < SL_HTTP_MULTI_MAX; i++)
    CHECK_INT(sl_http_multi_start(m, &q, on_done, &a, NULL), 0);
  CHECK_INT(sl_http_multi_start(m, &q, on_done, &a, NULL), SL_ELIMIT);
  CHECK_INT(sl_http_multi_count(m), SL_HTTP_MULTI_MAX);
  m = sl_http_multi_free(m); /* cancels them all, reporting none */
  CHECK_INT(a.calls, 0);

  m = multi_new(&l);
  struct outcome t = {0}, c = {0}, r = {0};
  q.timeout_ms = 200;
  CHECK_INT(sl_http_multi_start(m, &q, on_done, &t, NULL), 0);
  struct sl_http_req qc = req_for("/endless", 3);
  qc.body_max_bytes = 4096;
  CHECK_INT(sl_http_multi_start(m, &qc, on_done, &c, NULL), 0);
  struct sl_http_req bad = {0};
  CHECK_INT(sl_http_multi_start(m, &bad, on_done, &a, NULL), -EINVAL);
  int64_t t0 = sl_time_mono_us();
  CHECK(run_until(&l, m, 2, 3000));
  CHECK_INT(t.err, -ETIMEDOUT);
  CHECK(t.status == -1);
  CHECK(elapsed_ms(t0) >= 190);
  CHECK_INT(c.err, SL_ELIMIT);
  release_stalled();

  /* a driver that cannot watch fails the transfer that needed it */
  l.refuse_watch = 1;
  struct sl_http_req qr = req_for("/hello", 3);
  CHECK_INT(sl_http_multi_start(m, &qr, on_done, &r, NULL), 0);
  CHECK(run_until(&l, m, 3, 3000));
  CHECK_INT(r.calls, 1);
  CHECK_INT(r.err, -ENOSPC);
  sl_http_multi_free(m);
}

int main(void) {
  if (sl_http_global_init() < 0 || server_start() < 0) {
    fprintf(stderr, "cannot start: curl or the local server\n");
    return 1;
  }
  CHECK_INT(sl_http_global_init(), 0);
  int64_t t0 = sl_time_mono_us();
  test_get_put();
  test_timeout();
  test_cancel();
  test_cap();
  test_retry_503();
  test_retry_429();
  test_drop();
  test_no_retry_4xx();
  test_transport_failures();
  test_multi_basic();
  test_multi_retry();
  test_multi_two();
  test_multi_cancel();
  test_multi_limits();
  server_stop();
  curl_global_cleanup();
  fprintf(stderr, "all cases: %lld ms\n", (long long)elapsed_ms(t0));
  TEST_MAIN_END();
}
