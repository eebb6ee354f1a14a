/* The providers' event queue (evqueue.h): a fixed array, taken whole. */
#include "evqueue.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sl_log.h"

struct gw_provider_event *gw_evqueue_push(struct gw_evqueue *q, enum gw_provider_event_kind kind,
                                          const char *id, const char *topic) {
  if (q->n == GW_EVQUEUE_MAX) {
    sl_warn(topic, "event queue full; dropping an event for %s", *id ? id : "the market");
    return NULL;
  }
  struct gw_provider_event *ev = &q->ev[q->n++];
  memset(ev, 0, sizeof *ev);
  ev->kind = kind;
  snprintf(ev->instance_id, sizeof ev->instance_id, "%s", id);
  return ev;
}

int gw_evqueue_take(struct gw_evqueue *q, struct gw_provider_event **ret, size_t *ret_n) {
  struct gw_provider_event *batch = NULL;
  if (q->n) {
    batch = malloc(q->n * sizeof *batch);
    if (!batch)
      return -ENOMEM;
    memcpy(batch, q->ev, q->n * sizeof *batch);
  }
  *ret = batch;
  *ret_n = q->n;
  q->n = 0;
  return 0;
}
