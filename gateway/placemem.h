/* What placement remembers between passes (placemem.c): recent failures
 * of placements, the step rates jobs reached on each instance type, the
 * time a restart takes and the size of checkpoints. The scheduler records
 * into it and hands a view of it to place.h's pure functions. */
#ifndef GW_PLACEMEM_H
#define GW_PLACEMEM_H

#include "place.h"

#include <jansson.h>
#include <stdint.h>

#define GW_PLACEMEM_FAILURES_MAX 128
#define GW_PLACEMEM_RATES_MAX 256

struct gw_place_memory;

/* An owned, empty memory, or NULL. */
struct gw_place_memory *gw_place_memory_new(void);
/* Frees m; NULL is a no-op. Returns NULL. */
struct gw_place_memory *gw_place_memory_free(struct gw_place_memory *m);

/* A placement failed at now_us (monotonic): a launch refused for capacity
 * (capacity) or an instance preempted. The strings are copied; prov is
 * only compared. When full, the oldest entry goes. */
void gw_place_memory_failure(struct gw_place_memory *m, const struct gw_provider *prov,
                             const char *type, const char *zone, bool spot, bool capacity,
                             int64_t now_us);
/* prov's capacity changed: its refusals are forgotten (its preemptions
 * are not). */
void gw_place_memory_release(struct gw_place_memory *m, const struct gw_provider *prov);
/* A job of shape (a hash of what makes its steps cost what they do) ran
 * steps_per_s (wall) on type; averaged with earlier ones of that shape and
 * type. Ignored when not positive. */
void gw_place_memory_rate(struct gw_place_memory *m, uint64_t shape, const char *type,
                          const char *gpu_model, int gpus, double steps_per_s);
/* A preempted job went on after after_s (wall). */
void gw_place_memory_restart(struct gw_place_memory *m, double after_s);
/* A job of shape wrote a checkpoint of bytes. */
void gw_place_memory_checkpoint(struct gw_place_memory *m, uint64_t shape, int64_t bytes);

/* Fills c's failures, rates (of shape, into rates[0..max)), restart_s and
 * checkpoint_gb from m at now_us; borrowed from m and rates until m
 * changes. The job's own fields (checkpoint_s, remaining_steps) and the
 * clocks are the caller's. */
void gw_place_memory_view(const struct gw_place_memory *m, uint64_t shape,
                          struct gw_place_rate *rates, size_t max, struct gw_place_ctx *c);

/* How many times m changed: a caller that keeps m elsewhere writes it again
 * when this moved since its last write. */
uint64_t gw_place_memory_changes(const struct gw_place_memory *m);
/* m as JSON, owned (NULL without memory), to keep across gateway restarts:
 * {"restart_s", "rates": [{"shape", "type", "gpu_model", "gpus",
 * "steps_per_s"}] oldest first, "checkpoints": [{"shape", "gb"}],
 * "failures": [{"provider", "type", "zone", "spot", "capacity", "count",
 * "at_us"}]}: the failures still remembered at now_us (monotonic), their
 * times on the wall clock (now_real_us is the same moment on it); shapes
 * are 16 hex digits. */
json_t *gw_place_memory_json(const struct gw_place_memory *m, int64_t now_us, int64_t now_real_us);
/* Adds what gw_place_memory_json wrote to m: a failure's provider by name
 * among provs, its time back on the monotonic clock; a failure no longer
 * remembered at now_us, or of a provider not among provs, is left out. An
 * entry that is not what it writes (a field missing or of another type, a
 * rate or size not positive, a shape not 16 hex digits) is skipped and
 * counted in *ret_skipped. Returns the entries added. */
size_t gw_place_memory_load(struct gw_place_memory *m, const json_t *j,
                            struct gw_provider *const *provs, size_t n_provs, int64_t now_us,
                            int64_t now_real_us, size_t *ret_skipped);

#endif
