/* The gateway's sinks (bus.h): a bounded list of subscribers, each with the
 * kinds of event it wants. No allocation, no queue: an event reaches every
 * subscriber before gw_bus_emit returns. */
#include "bus.h"

#include "sl_err.h"

#include <string.h>

void gw_bus_init(struct gw_bus *b) {
  memset(b, 0, sizeof *b);
}

int gw_bus_subscribe(struct gw_bus *b, unsigned kinds, gw_sink_fn fn, void *data) {
  if (b->n == GW_BUS_MAX_SINKS)
    return SL_ELIMIT;
  b->sinks[b->n].kinds = kinds;
  b->sinks[b->n].fn = fn;
  b->sinks[b->n].data = data;
  b->n++;
  return 0;
}

void gw_bus_emit(const struct gw_bus *b, const struct gw_bus_event *ev) {
  for (size_t i = 0; i < b->n; i++)
    if (b->sinks[i].kinds & (unsigned)ev->kind)
      b->sinks[i].fn(b->sinks[i].data, ev);
}
