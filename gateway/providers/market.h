/* The local provider's simulated spot market (docs/internals/local-provider.md).
 *
 * All times here are simulated microseconds since the market opened; the
 * provider maps wall time to simulated time with its time_scale. */
#ifndef GW_MARKET_H
#define GW_MARKET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "catalog.h"

#define GW_MARKET_NOTICE_S 120.0          /* EC2's two-minute spot notice */
#define GW_MARKET_REBALANCE_LEAD_S 600.0  /* random model: rebalance this far ahead */
#define GW_MARKET_PRICE_STEP_S 300.0      /* random model: price changes every 5 min */
#define GW_MARKET_TRACE_MAX_BYTES (64u << 20)
#define GW_MARKET_TRACE_MAX_TICKS 10000000

struct gw_market;

/* spec is "trace:PATH" or "random:SEED" (SEED a decimal integer). The
 * catalog is borrowed and must outlive the market. Returns 0 and an owned
 * market in *ret, or a negative error with a message in err naming the file
 * (and, for a JSON syntax error, its line and column). */
int gw_market_new(const char *spec, const struct gw_catalog *cat, struct gw_market **ret,
                  char *err, size_t err_size);
/* Frees; NULL is a no-op. Returns NULL. */
struct gw_market *gw_market_free(struct gw_market *m);

bool gw_market_is_trace(const struct gw_market *m);
/* Spot instances of any one type the market holds at sim_us: the trace's
 * count for the tick (the trace repeats from the start when it runs out),
 * or INT32_MAX for the random model. */
int gw_market_capacity(const struct gw_market *m, int64_t sim_us);
/* Spot price of catalog type i at sim_us, USD per hour. */
double gw_market_price(const struct gw_market *m, size_t type, int64_t sim_us);
/* Mean time to preemption of type i, simulated seconds: measured from the
 * trace (available time / capacity losses) or the bucket's modelled mean. */
double gw_market_mean_time_to_preempt_s(const struct gw_market *m, size_t type);
/* Draws the fate of a spot instance of type i launched now (random model):
 * *ret_notice_after_us, the simulated µs until its notice, and
 * *ret_rebalance_lead_us, how long before the notice a rebalance
 * recommendation comes (0: none). The trace model: INT64_MAX and 0 (its
 * preemptions come from capacity). Draws are a deterministic sequence for
 * the seed. */
void gw_market_draw(struct gw_market *m, size_t type, int64_t *ret_notice_after_us,
                    int64_t *ret_rebalance_lead_us);
/* The first simulated time after sim_us at which capacity or prices change. */
int64_t gw_market_next_change_us(const struct gw_market *m, int64_t sim_us);

#endif
