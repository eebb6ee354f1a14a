/* Which provider the gateway runs: one function, linked per program.
 * spotlab-gateway links provider_open.c (the local provider); tests may
 * link another implementation. */
#ifndef GW_PROVIDER_OPEN_H
#define GW_PROVIDER_OPEN_H

#include "conf.h"
#include "provider.h"

#include <stddef.h>

/* Returns an owned provider or NULL with a message in err (a gateway with
 * no provider still serves clients; jobs stay queued). */
struct gw_provider *gw_provider_open(const struct gw_config *cfg, gw_provider_event_fn on_event,
                                     void *userdata, char *err, size_t err_size);

#endif
