/* The local provider: instances as local spotlab-worker processes under a
 * simulated spot market (DESIGN.md §5). */
#ifndef GW_LOCAL_H
#define GW_LOCAL_H

#include "provider.h"

struct gw_local_config {
  int slots;                    /* instances that may run at once */
  const char *market;           /* "trace:PATH" or "random:SEED" */
  double time_scale;            /* simulated seconds per wall second (60: a 2-minute notice takes 2 s) */
  const char *catalog;          /* CSV of instance types, NULL for the built-in catalog */
  const char *state_dir;        /* instance folders go under state_dir/instances/ID */
  const char *worker_program;   /* path of spotlab-worker */
  const char *zone_prefix;      /* zones are "<prefix>a", "<prefix>b"...: default "local-1" */
};

/* Returns an owned provider (free with p->ops->destroy(p)) or NULL with a
 * message in err (a malformed trace or catalog names the file and line).
 * cfg strings are copied. */
struct gw_provider *gw_local_provider_new(const struct gw_local_config *cfg,
                                          gw_provider_event_fn on_event, void *userdata,
                                          char *err, size_t err_size);

#endif
