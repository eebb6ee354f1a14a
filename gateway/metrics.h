/* /metrics: the gateway's state in the Prometheus text exposition format
 * (version 0.0.4), rendered on demand from the store, the fleet and the
 * ledger, plus what the HTTP server counts about itself. */
#ifndef GW_METRICS_H
#define GW_METRICS_H

#include "conf.h"
#include "fleet.h"
#include "kproto.h"
#include "ledger.h"
#include "store.h"

#include <stddef.h>
#include <stdint.h>

struct gw_webhooks;

/* Upper bounds (seconds) of the request latency histogram's buckets; one
 * more bucket (+Inf) follows. */
#define GW_METRICS_BUCKETS 10
extern const double gw_metrics_bounds_s[GW_METRICS_BUCKETS];

/* A latency histogram: counts[i] observations at or under bound i (not
 * cumulative here; rendering accumulates), counts[GW_METRICS_BUCKETS] the rest. */
struct gw_metrics_hist {
  uint64_t counts[GW_METRICS_BUCKETS + 1];
  uint64_t n;
  double sum_s;
};

void gw_metrics_hist_observe(struct gw_metrics_hist *h, double seconds);

/* Requests answered, by HTTP status code. */
#define GW_METRICS_CODES 16
struct gw_metrics_http {
  struct gw_metrics_hist latency;
  struct { unsigned code; uint64_t n; } by_code[GW_METRICS_CODES];
};

void gw_metrics_http_count(struct gw_metrics_http *m, unsigned code);

/* What the metrics are read from (all borrowed). */
struct gw_metrics_src {
  const struct gw_config *cfg;
  struct gw_store *store;
  struct gw_fleet *fleet;
  struct gw_ledger *ledger;
  struct gw_kproto *kproto;
  const struct gw_metrics_http *http;
  const struct gw_webhooks *webhooks; /* webhook.h; NULL: none */
};

/* The exposition as an owned string (free()) of *ret_len bytes, or NULL
 * (out of memory, or the store failed to answer). */
char *gw_metrics_render(const struct gw_metrics_src *src, size_t *ret_len);

#endif
