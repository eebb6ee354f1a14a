/* The local provider: instances as local spotlab-worker processes under a
 * simulated spot market (DESIGN.md §5, docs/internals/local-provider.md). */
#ifndef GW_LOCAL_H
#define GW_LOCAL_H

#include "provider.h"

/* The class registered as "local": options slots, market, time_scale and
 * catalog of [provider.local]. */
extern const struct gw_provider_class gw_local_provider_class;

struct gw_local_config {
  int slots;                    /* instances that may run at once */
  const char *market;           /* "trace:PATH" or "random:SEED" */
  double time_scale;            /* simulated seconds per wall second (60: a 2-minute notice takes 2 s) */
  const char *catalog;          /* CSV of instance types, NULL for the built-in catalog */
  const char *state_dir;        /* instance folders go under state_dir/instances/ID, the store under state_dir/store */
  const char *worker_program;   /* path of spotlab-worker */
  const char *zone_prefix;      /* zones are "<prefix>a", "<prefix>b"...: default "local-1" */
  const char *store_url;        /* the workers' store ([store] url); NULL: file://state_dir/store */
};

/* Returns an owned provider (free with p->ops->destroy(p)) or NULL with a
 * message in err (a malformed trace or catalog names the file and line).
 * cfg strings are copied; loop is borrowed for the provider's life (it
 * registers one timer there, from which every event is delivered). It
 * adopts the instances recorded under state_dir that still run. */
struct gw_provider *gw_local_provider_new(const struct gw_local_config *cfg, struct gw_loop *loop,
                                          gw_provider_event_fn on_event, void *userdata,
                                          char *err, size_t err_size);

#endif
