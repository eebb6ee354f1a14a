/* spotlab-gateway: the gateway object, its start-up and its loop.
 *
 * gw_new opens the state, the providers the config enables (classes
 * registered with gw_provider_register beforehand), the sockets, and loads
 * what a previous run left; gw_run serves on one event loop (loop.h) until
 * told to stop. */
#ifndef GW_GATEWAY_H
#define GW_GATEWAY_H

#include "conf.h"

#include <signal.h>
#include <stddef.h>

struct gw;

/* Opens the store under cfg->state_dir, the key pair, the enabled
 * providers, binds both sockets and loads jobs and instances left by a
 * previous run. cfg is borrowed for the life of the gateway, which sets
 * its runtime_group when it serves a hub (and clears it in gw_free). Owned
 * gateway in *ret, or an error with a message. */
int gw_new(struct gw_config *cfg, struct gw **ret, char *err, size_t err_size);
/* Serves until a signal's byte comes on signal_fd (sl_sigpipe.h; -1: none),
 * or until the gateway stops itself (a shutdown request, or an embedded
 * gateway idle for [idle] gateway_timeout): then it waits, a few seconds at
 * most, for the workers it stopped to exit. */
int gw_run(struct gw *g, int signal_fd);
/* Closes everything; running workers are left alone (they re-register on
 * the next start). */
struct gw *gw_free(struct gw *g);

/* spotlab-gateway's command line (main.c): a program's main() registers
 * its provider classes, then calls this. Returns the exit status. */
int gw_main(int argc, char **argv);

#endif
