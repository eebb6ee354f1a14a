/* HTTP transfers on the gateway's loop: sl_http's multi interface with
 * libcurl's sockets and timer registered on the loop (loop.h), so a
 * provider (EC2, S3) or a webhook makes requests without blocking the
 * gateway. One per gateway; providers borrow it. */
#ifndef GW_HTTPC_H
#define GW_HTTPC_H

#include "sl_http.h"

struct gw_loop;
struct gw_httpc;

/* An owned client on loop (borrowed), or NULL. */
struct gw_httpc *gw_httpc_new(struct gw_loop *loop);
/* Cancels what is in flight (no done callback runs), unregisters from the
 * loop. Returns NULL. */
struct gw_httpc *gw_httpc_free(struct gw_httpc *h);
/* Starts req (copied); done runs once from the loop with the outcome.
 * sl_http_multi_start's errors. */
int gw_httpc_start(struct gw_httpc *h, const struct sl_http_req *req, sl_http_done_fn done,
                   void *data, uint64_t *ret_id);
/* Cancels a transfer: its done callback never runs. -ENOENT if unknown. */
int gw_httpc_cancel(struct gw_httpc *h, uint64_t id);

#endif
