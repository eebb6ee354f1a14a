/* spotlab-gateway's event loop: one zmq_poll over the kernel socket, the
 * worker socket (CURVE) and the ZAP handler, with timers for the provider
 * and housekeeping (heartbeats, idle workers, cost). */
#ifndef GW_GATEWAY_H
#define GW_GATEWAY_H

#include "conf.h"
#include "provider.h"

#include <signal.h>
#include <stddef.h>

struct gw;

/* Opens the store under cfg->state_dir, the key pair, binds both sockets and
 * loads jobs and instances left by a previous run. cfg is borrowed for the
 * life of the gateway. Owned gateway in *ret, or an error with a message. */
int gw_new(const struct gw_config *cfg, struct gw **ret, char *err, size_t err_size);
/* Serves until *stop becomes non-zero (a signal handler sets it). */
int gw_run(struct gw *g, volatile sig_atomic_t *stop);
/* Closes everything; running workers are left alone (they re-register on
 * the next start). */
struct gw *gw_free(struct gw *g);

#endif
