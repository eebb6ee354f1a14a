/* gloo for the CPU path: a C face over the few parts of gloo's C++ API that
 * spotlab uses (tc_gloo.cc), nothing more. Which collective to run, in what
 * order, and what is summed how lives in C (tc_group.c).
 *
 * Setting up a group of `world` ranks takes three steps, because gloo's
 * connections need an address exchange that spotlab does itself (tc_rdv):
 *   tc_gloo_new       a listening TCP connection per peer on `host`;
 *   tc_gloo_addresses this rank's address for each peer, one slot per rank;
 *   tc_gloo_connect   the slots the other ranks made for this one.
 * Every call after that waits at most the timeout given to tc_gloo_new. A
 * failure (a peer that died, a timeout) returns a negative code and leaves its
 * text in tc_gloo_error; the context is unusable after it. */
#ifndef TC_GLOO_H
#define TC_GLOO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One address in an exchange slot: u16 length (little-endian), then the bytes. */
#define TC_GLOO_SLOT_BYTES 256

struct tc_gloo;

/* Owned context in *ret. host: a numeric address of this machine that the
 * other ranks reach. err gets the reason on failure. */
int tc_gloo_new(int rank, int world, const char *host, int timeout_ms, struct tc_gloo **ret,
                char *err, size_t err_size);
/* slots (world * TC_GLOO_SLOT_BYTES): slot k = this rank's address for rank k
 * (its own slot zeroed). */
int tc_gloo_addresses(struct tc_gloo *g, uint8_t *slots);
/* slots: slot k = rank k's address for this rank (its own slot ignored). */
int tc_gloo_connect(struct tc_gloo *g, const uint8_t *slots);

/* in: world pieces of in_bytes[k] bytes, in rank order, piece k for rank k;
 * out: world pieces of out_bytes[k], piece k from rank k. in_bytes[rank] ==
 * out_bytes[rank]. */
int tc_gloo_alltoallv(struct tc_gloo *g, const void *in, const size_t *in_bytes, void *out,
                      const size_t *out_bytes);
/* In place: buf holds world pieces of bytes[k]; this rank's piece is already
 * there and every other rank's arrives. */
int tc_gloo_allgatherv(struct tc_gloo *g, void *buf, const size_t *bytes);
/* root's bytes to every rank. */
int tc_gloo_broadcast(struct tc_gloo *g, void *buf, size_t bytes, int root);
int tc_gloo_barrier(struct tc_gloo *g);

/* Text of the last failure ("" if none); valid until the next call. */
const char *tc_gloo_error(const struct tc_gloo *g);
struct tc_gloo *tc_gloo_free(struct tc_gloo *g);

#ifdef __cplusplus
}
#endif

#endif
