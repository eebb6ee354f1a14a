/* nodes=N on the worker: a train job that is one rank of N.
 *
 * The assign of each rank carries "gang": {"rank", "world_size"} and, for
 * ranks above 0, "rendezvous" (tcp://HOST:PORT). Rank 0's worker makes the
 * rendezvous: HOST is the address other instances reach this one at (the
 * configuration's "address", else the address this machine uses towards
 * the gateway, 127.0.0.1 for an ipc:// gateway), PORT a free TCP port on
 * it; spotlab-train's rank 0 listens there, and the worker names it in its
 * `started`, from which the gateway assigns the other ranks. */
#ifndef WK_GANG_H
#define WK_GANG_H

#include <jansson.h>
#include <stddef.h>

#define WK_RENDEZVOUS_MAX 128

struct wk_gang {
  int rank, world_size;                  /* world_size 0: not a gang */
  char rendezvous[WK_RENDEZVOUS_MAX];    /* tcp://HOST:PORT */
};

/* Reads an assign's "gang" (absent or null: *ret zeroed). A rank above 0
 * needs a rendezvous; rank 0's is left empty for wk_gang_rendezvous.
 * SL_ECONFIG with a reason in err for a malformed one. */
int wk_gang_parse(const json_t *field, struct wk_gang *ret, char *err, size_t err_size);

/* The address other instances reach this one at: address when set, else
 * the local address of the route to the gateway's host (gateway is
 * tcp://HOST:PORT), or 127.0.0.1 (ipc://, inproc://, a wildcard host).
 * Numeric, into host (64 bytes or more). */
int wk_gang_host(const char *address, const char *gateway, char *host, size_t size);

/* Rank 0: a free TCP port on host, and "tcp://HOST:PORT" into g->rendezvous
 * ([HOST] for IPv6). The port is free when asked: spotlab-train binds it a
 * moment later. */
int wk_gang_rendezvous(struct wk_gang *g, const char *host, char *err, size_t err_size);

#endif
