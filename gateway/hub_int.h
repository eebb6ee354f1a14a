/* The hub's answers without HTTP, for the tests that feed it replies (the
 * fuzz target replies). Beside hub.c, no part of the gateway includes this
 * header. */
#ifndef GW_HUB_INT_H
#define GW_HUB_INT_H

#include "hub.h"

#include "sl_http.h"

/* Hands h resp as the hub's answer to a check of token (borrowed) that
 * nothing sent: err 0 and resp (borrowed), or err < 0 and resp NULL for a
 * transfer that failed. The answer goes where a real one goes: the cache,
 * the users' groups, then done(data), once, before this returns.
 * SL_ELIMIT when every check slot is taken. */
int gw_hub_answer(struct gw_hub *h, const char *token, int err, struct sl_http_resp *resp,
                  gw_hub_done_fn done, void *data);

#endif
