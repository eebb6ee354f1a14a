/* A provider's events on their way to the gateway: queued from inside its
 * operations (and the aws provider's thread), delivered later from the
 * gateway's loop and never from inside an operation, so that the callback
 * may call back into the provider. Bounded; not locked (the aws provider
 * holds its mutex around both calls). */
#ifndef GW_EVQUEUE_H
#define GW_EVQUEUE_H

#include <stddef.h>

#include "provider.h"

#define GW_EVQUEUE_MAX 1024

struct gw_evqueue {
  struct gw_provider_event ev[GW_EVQUEUE_MAX];
  size_t n;
};

/* A zeroed event of kind for instance id ("" for the market) at the end of
 * q, for the caller to fill in; NULL when q is full (a warning on topic's
 * log says which event was dropped). */
struct gw_provider_event *gw_evqueue_push(struct gw_evqueue *q, enum gw_provider_event_kind kind,
                                          const char *id, const char *topic);
/* Moves the queued events into *ret (owned, in order; NULL when none) and
 * their count into *ret_n, and empties q. -ENOMEM leaves them queued. */
int gw_evqueue_take(struct gw_evqueue *q, struct gw_provider_event **ret, size_t *ret_n);

#endif
