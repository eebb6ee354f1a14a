/* HTTP transfers on the gateway's loop (gateway/httpc.c) against a real
 * local HTTP server (libmicrohttpd): answers reach their done callbacks
 * from gw_loop_run_once, a 503 is retried on the loop's timer, two
 * transfers run at once, a cancelled one never calls back, and freeing the
 * client leaves nothing registered on the loop. */
#include "harness.h"

#include "httpc.h"
#include "loop.h"

#include "sl_err.h"
#include "sl_time.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_int n_requests, n_503;

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **state) {
  (void)cls; (void)method; (void)version; (void)upload; (void)upload_size;
  if (!*state) { /* first call: headers only */
    *state = c;
    return MHD_YES;
  }
  atomic_fetch_add(&n_requests, 1);
  unsigned status = MHD_HTTP_OK;
  const char *text = url;
  if (!strcmp(url, "/flaky") && atomic_fetch_add(&n_503, 1) < 2) {
    status = MHD_HTTP_SERVICE_UNAVAILABLE;
    text = "busy";
  }
  struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text,
                                                           MHD_RESPMEM_MUST_COPY);
  enum MHD_Result ret = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ret;
}

struct done {
  int calls, err;
  long status;
  char body[64];
};

static void on_done(uint64_t id, int err, struct sl_http_resp *resp, void *data) {
  (void)id;
  struct done *d = data;
  d->calls++;
  d->err = err;
  if (!err && resp) {
    d->status = resp->status;
    snprintf(d->body, sizeof d->body, "%s", resp->body ? resp->body : "");
  }
}

/* Turns the loop until every d in ds has been called or 5 s pass. */
static void run_until(struct gw_loop *l, struct done **ds, size_t n) {
  int64_t deadline = sl_time_mono_us() + 5 * SL_US_PER_S;
  for (;;) {
    size_t left = 0;
    for (size_t i = 0; i < n; i++)
      left += ds[i]->calls == 0;
    if (!left || sl_time_mono_us() > deadline)
      return;
    gw_loop_run_once(l, 100 * SL_US_PER_MS);
  }
}

int main(void) {
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  struct MHD_Daemon *mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG,
                                            0, NULL, NULL, handler, NULL, MHD_OPTION_SOCK_ADDR,
                                            (struct sockaddr *)&sa, MHD_OPTION_END);
  CHECK(mhd != NULL);
  if (!mhd)
    return 1;
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(mhd, MHD_DAEMON_INFO_BIND_PORT);
  int port = info ? info->port : 0;
  char base[64];
  snprintf(base, sizeof base, "http://127.0.0.1:%d", port);

  struct gw_loop *l = gw_loop_new();
  struct gw_httpc *h = gw_httpc_new(l);
  CHECK(h != NULL);

  /* two transfers at once, answered from the loop */
  char u1[96], u2[96], u3[96];
  snprintf(u1, sizeof u1, "%s/one", base);
  snprintf(u2, sizeof u2, "%s/two", base);
  struct sl_http_req r1 = {.method = "GET", .url = u1, .timeout_ms = 2000};
  struct sl_http_req r2 = {.method = "GET", .url = u2, .timeout_ms = 2000};
  struct done d1 = {0}, d2 = {0};
  uint64_t id1, id2;
  CHECK_INT(gw_httpc_start(h, &r1, on_done, &d1, &id1), 0);
  CHECK_INT(gw_httpc_start(h, &r2, on_done, &d2, &id2), 0);
  CHECK_INT(d1.calls + d2.calls, 0); /* never from start */
  run_until(l, (struct done *[]){&d1, &d2}, 2);
  CHECK_INT(d1.calls, 1);
  CHECK_INT(d2.calls, 1);
  CHECK_INT(d1.err, 0);
  CHECK_INT(d1.status, 200);
  CHECK_STR(d1.body, "/one");
  CHECK_STR(d2.body, "/two");

  /* a 503 twice, then 200: retried on the loop's timer */
  snprintf(u3, sizeof u3, "%s/flaky", base);
  struct sl_http_req r3 = {.method = "GET", .url = u3, .timeout_ms = 2000,
                           .retry = {.max_tries = 4, .base_backoff_ms = 10, .max_backoff_ms = 40}};
  struct done d3 = {0};
  int before = atomic_load(&n_requests);
  CHECK_INT(gw_httpc_start(h, &r3, on_done, &d3, &id1), 0);
  run_until(l, (struct done *[]){&d3}, 1);
  CHECK_INT(d3.calls, 1);
  CHECK_INT(d3.status, 200);
  CHECK_INT(atomic_load(&n_requests) - before, 3);

  /* cancelled: no callback, ever */
  struct done d4 = {0};
  CHECK_INT(gw_httpc_start(h, &r1, on_done, &d4, &id1), 0);
  CHECK_INT(gw_httpc_cancel(h, id1), 0);
  CHECK_INT(gw_httpc_cancel(h, id1), -ENOENT);
  for (int i = 0; i < 5; i++)
    gw_loop_run_once(l, 10 * SL_US_PER_MS);
  CHECK_INT(d4.calls, 0);

  /* a transfer left in flight is dropped by free, and the loop is empty:
   * a run with nothing registered waits its whole max wait */
  struct done d5 = {0};
  CHECK_INT(gw_httpc_start(h, &r1, on_done, &d5, &id1), 0);
  h = gw_httpc_free(h);
  CHECK_INT(d5.calls, 0);
  int64_t t0 = sl_time_mono_us();
  CHECK_INT(gw_loop_run_once(l, 30 * SL_US_PER_MS), 0);
  CHECK(sl_time_mono_us() - t0 >= 25 * SL_US_PER_MS);

  gw_loop_free(l);
  MHD_stop_daemon(mhd);
  TEST_MAIN_END();
}
