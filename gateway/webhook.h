/* Webhooks: the bus's job ends, preemptions, budget moments and idle
 * shutdowns posted as signed JSON to each [webhook.NAME] that asks for them.
 *
 * Deliveries go through the gateway's HTTP client on the loop (httpc.h), so
 * a slow or dead receiver never holds the gateway up. Each hook keeps a
 * bounded queue: a few deliveries at a time are in flight or waiting to be
 * retried, the rest wait in order, and past GW_WEBHOOK_QUEUE_MAX the oldest
 * waiting one is dropped and counted. Nothing is kept across restarts.
 * Design and payloads: docs/admin.md, "Webhooks". */
#ifndef GW_WEBHOOK_H
#define GW_WEBHOOK_H

#include "bus.h"
#include "conf.h"
#include "sl_http.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#define GW_WEBHOOK_QUEUE_MAX 1000   /* deliveries waiting per hook; more drop the oldest */
#define GW_WEBHOOK_ACTIVE_MAX 4     /* per hook: in flight or waiting to be retried */
#define GW_WEBHOOK_BACKOFF_MAX_US (300 * INT64_C(1000000)) /* no wait is longer */

/* The bus kinds gw_webhooks_sink reads: subscribe it with this mask. */
#define GW_WEBHOOK_BUS_KINDS (GW_BUS_JOB_STATE | GW_BUS_PREEMPTED | GW_BUS_BUDGET | \
                              GW_BUS_IDLE_SHUTDOWN)

struct gw_loop;
struct gw_httpc;
struct gw_webhooks;

/* How deliveries are sent. By default through http; tests replace start
 * and cancel (called with send_ctx, as gw_httpc_start and _cancel are). */
struct gw_webhooks_env {
  const struct gw_config *cfg;  /* cfg->webhooks */
  struct gw_loop *loop;         /* retry timers */
  struct gw_httpc *http;
  int (*start)(void *ctx, const struct sl_http_req *req, sl_http_done_fn done, void *data,
               uint64_t *ret_id);
  int (*cancel)(void *ctx, uint64_t id);
  void *send_ctx;
  int64_t backoff_unit_us;      /* the first retry's wait (jittered); 0: one second */
};

/* The hooks of env->cfg (everything in env borrowed for the object's life),
 * owned, or NULL (out of memory). A configuration without webhooks gives
 * an object that posts nothing. */
struct gw_webhooks *gw_webhooks_new(const struct gw_webhooks_env *env);
/* Cancels what is in flight and drops what waits. Returns NULL. */
struct gw_webhooks *gw_webhooks_free(struct gw_webhooks *w);
/* The bus sink (data: the gw_webhooks): queues a delivery to every hook
 * whose events include ev's. */
void gw_webhooks_sink(void *data, const struct gw_bus_event *ev);
/* Writes the webhook families of /metrics (Prometheus text) to f. */
void gw_webhooks_metrics(const struct gw_webhooks *w, FILE *f);

/* ---- the pure pieces, for tests ---- */

/* The hook event ev is, or -1 when webhooks do not report it (a job state
 * other than succeeded, failed or cancelled, say). */
int gw_webhook_event_of(const struct gw_bus_event *ev);
/* The JSON posted for ev as event e at real_us (µs since the epoch): event,
 * time, text and the event's own fields. Owned, or NULL (out of memory). */
json_t *gw_webhook_payload(const struct gw_bus_event *ev, enum gw_hook_event e, int64_t real_us);
/* Lowercase hex HMAC-SHA256 under key (any length) of "TIMESTAMP.BODY":
 * the X-Spotlab-Signature value after "sha256=". */
void gw_webhook_sign(const void *key, size_t key_len, int64_t timestamp_s, const void *body,
                     size_t body_len, char ret_hex[65]);

enum gw_webhook_verdict {
  GW_WEBHOOK_DELIVERED,         /* a 2xx answer */
  GW_WEBHOOK_RETRY,             /* no answer (connection, timeout), 429 or 5xx */
  GW_WEBHOOK_FAILED,            /* any other answer: final */
};
/* What a try's outcome means: err and status as sl_http_done_fn gives them. */
enum gw_webhook_verdict gw_webhook_verdict(int err, long status);
/* The wait before retry number retry (1 for the first): a Retry-After
 * value (seconds or an HTTP date, read against now_real_us) when there is
 * a readable one, else unit_us doubled per retry, jittered by rnd into its
 * upper half; never over GW_WEBHOOK_BACKOFF_MAX_US. */
int64_t gw_webhook_retry_wait_us(int retry, uint32_t rnd, int64_t unit_us, const char *retry_after,
                                 int64_t now_real_us);

#endif
