/* /metrics: the gateway's state in the Prometheus text exposition format
 * (version 0.0.4), rendered on demand from the store, the fleet and the
 * ledger, plus what the HTTP server counts about itself. */
#ifndef GW_METRICS_H
#define GW_METRICS_H

#include "bus.h"
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

/* ---- the gateway's history: recoveries, checkpoints, steps lost, idle
 * shutdowns, budget alerts, and the kernel protocol's request times ---- */

/* Bounds (seconds) of the histograms of longer things: recoveries and
 * checkpoint writes and uploads. */
extern const double gw_metrics_long_bounds_s[GW_METRICS_BUCKETS];
void gw_metrics_hist_observe_in(struct gw_metrics_hist *h, const double *bounds, double seconds);

/* The kernel protocol's request handling times, by request type (a type
 * the protocol knows, or "other"). */
#define GW_METRICS_KTYPES 24
struct gw_metrics_kreq {
  struct {
    char type[24];
    struct gw_metrics_hist h;
  } by_type[GW_METRICS_KTYPES];
};
void gw_metrics_kreq_observe(struct gw_metrics_kreq *m, const char *type, double seconds);

/* Counters kept from the bus, started from the store's history so that the
 * ones the store records survive a restart (recoveries, checkpoint times,
 * steps lost); idle shutdowns and budget alerts count from the start. */
struct gw_metrics_tally;
/* An owned tally started from store's history (borrowed for the call), or
 * NULL (out of memory, or the store did not answer: err says). */
struct gw_metrics_tally *gw_metrics_tally_new(struct gw_store *store, char *err, size_t err_size);
struct gw_metrics_tally *gw_metrics_tally_free(struct gw_metrics_tally *t);
/* The bus sink (data: the tally): GW_BUS_JOB_EVENT, GW_BUS_IDLE_SHUTDOWN,
 * GW_BUS_BUDGET. */
#define GW_METRICS_SINK_KINDS (GW_BUS_JOB_EVENT | GW_BUS_IDLE_SHUTDOWN | GW_BUS_BUDGET)
void gw_metrics_sink(void *data, const struct gw_bus_event *ev);

/* What the metrics are read from (all borrowed). */
struct gw_metrics_src {
  const struct gw_config *cfg;
  struct gw_store *store;
  struct gw_fleet *fleet;
  struct gw_ledger *ledger;
  struct gw_kproto *kproto;
  const struct gw_metrics_http *http;
  const struct gw_webhooks *webhooks; /* webhook.h; NULL: none */
  const struct gw_metrics_tally *tally;   /* NULL: those families are left out */
  struct gw_budget *budget;     /* budget.h: every budget's use; NULL: left out */
};

/* The exposition as an owned string (free()) of *ret_len bytes, or NULL
 * (out of memory, or the store failed to answer). */
char *gw_metrics_render(const struct gw_metrics_src *src, size_t *ret_len);

#endif
