/* HTTP transfers on the gateway's loop (httpc.h).
 *
 * libcurl tells sl_http which sockets to watch and when to call back; this
 * module turns those into loop registrations: a descriptor per socket
 * (added, changed or removed as libcurl asks) and one timer whose due time
 * follows libcurl's. Everything runs on the loop's thread. libcurl (and
 * its TLS library, a few MiB once initialised) is set up on the first
 * transfer, so a gateway that makes none does not carry it. */
#include "httpc.h"

#include "loop.h"

#include "sl_err.h"

#include <errno.h>
#include <stdlib.h>

struct gw_httpc {
  struct gw_loop *loop;
  struct sl_http_multi *multi;
  struct sl_http_driver driver; /* borrowed by multi for its life */
  int64_t timer;                /* 0: none */
};

static int loop_events(int events) {
  return (events & SL_HTTP_IN ? GW_LOOP_READ : 0) | (events & SL_HTTP_OUT ? GW_LOOP_WRITE : 0);
}

static void on_fd(struct gw_loop *l, int fd, void *sock, int events, void *data) {
  (void)l; (void)sock;
  struct gw_httpc *h = data;
  int ev = (events & GW_LOOP_READ ? SL_HTTP_IN : 0) | (events & GW_LOOP_WRITE ? SL_HTTP_OUT : 0) |
           (events & GW_LOOP_ERROR ? SL_HTTP_ERR : 0);
  sl_http_multi_on_fd(h->multi, fd, ev);
}

static int watch(void *ctx, int fd, int events) {
  struct gw_httpc *h = ctx;
  if (!events) {
    int r = gw_loop_del_fd(h->loop, fd);
    return r == -ENOENT ? 0 : r;
  }
  int r = gw_loop_mod_fd(h->loop, fd, loop_events(events));
  if (r == -ENOENT)
    r = gw_loop_add_fd(h->loop, fd, loop_events(events), on_fd, h);
  return r;
}

static int64_t on_timer(struct gw_loop *l, int64_t id, int64_t now_us, void *data) {
  (void)l; (void)id; (void)now_us;
  struct gw_httpc *h = data;
  h->timer = 0;
  sl_http_multi_timeout(h->multi); /* may set a new timer through set_timer */
  return GW_LOOP_NOMORE;
}

static int set_timer(void *ctx, int64_t due_us) {
  struct gw_httpc *h = ctx;
  if (due_us == INT64_MAX) {
    if (h->timer)
      gw_loop_del_timer(h->loop, h->timer);
    h->timer = 0;
    return 0;
  }
  if (h->timer && gw_loop_set_timer(h->loop, h->timer, due_us) == 0)
    return 0;
  int64_t t = gw_loop_add_timer(h->loop, due_us, on_timer, h);
  if (t < 0)
    return (int)t;
  h->timer = t;
  return 0;
}

struct gw_httpc *gw_httpc_new(struct gw_loop *loop) {
  struct gw_httpc *h = calloc(1, sizeof *h);
  if (!h)
    return NULL;
  h->loop = loop;
  h->driver = (struct sl_http_driver){.ctx = h, .watch = watch, .timer = set_timer};
  return h;
}

struct gw_httpc *gw_httpc_free(struct gw_httpc *h) {
  if (!h)
    return NULL;
  sl_http_multi_free(h->multi); /* unwatches its sockets and clears the timer */
  if (h->timer)
    gw_loop_del_timer(h->loop, h->timer);
  free(h);
  return NULL;
}

int gw_httpc_start(struct gw_httpc *h, const struct sl_http_req *req, sl_http_done_fn done,
                   void *data, uint64_t *ret_id) {
  if (!h->multi) {
    int r = sl_http_global_init();
    if (r < 0)
      return r;
    if (!(h->multi = sl_http_multi_new(&h->driver)))
      return -ENOMEM;
  }
  return sl_http_multi_start(h->multi, req, done, data, ret_id);
}

int gw_httpc_cancel(struct gw_httpc *h, uint64_t id) {
  return h->multi ? sl_http_multi_cancel(h->multi, id) : -ENOENT;
}
