/* A group of CPU ranks for data parallelism: one process per rank, joined by
 * gloo over TCP (tc_gloo.h), found through the rendezvous (tc_rdv.h).
 *
 * Results never depend on timing, on the reduction algorithm or on which
 * rank computes what: a sum over ranks is always taken in rank order,
 * ((x_0 + x_1) + x_2) + ..., and every rank ends with the same bits. So a
 * one-process run that adds the same per-slice values in the same order
 * reproduces a W-rank run exactly (train_dev.c's --grad-slices).
 *
 * Every call waits at most the timeout given to tc_group_new; a rank that
 * died or stopped answering makes the call fail with its reason in
 * tc_group_error, and the group is unusable after that. */
#ifndef TC_GROUP_H
#define TC_GROUP_H

#include <stddef.h>

struct tc_group;

/* Joins rank `rank` of `world` (2 or more): rank 0 listens on rendezvous
 * (tcp://HOST:PORT, an address of rank 0 that all ranks reach), the others
 * connect to it, and the ranks swap gloo addresses and connect every pair.
 * Owned group in *ret; err gets the reason on failure. */
int tc_group_new(const char *rendezvous, int rank, int world, int timeout_ms,
                 struct tc_group **ret, char *err, size_t err_size);
struct tc_group *tc_group_free(struct tc_group *g);

/* x (n floats) <- its sum over ranks, in rank order. Each rank adds up one
 * 1/world of the elements and sends the sums to the others: 2n floats in and
 * out per rank, as a ring all-reduce. */
int tc_group_sum_f32(struct tc_group *g, float *x, size_t n);
/* x (n doubles, n <= TC_GROUP_SMALL) <- its sum over ranks, in rank order. */
#define TC_GROUP_SMALL 64
int tc_group_sum_f64(struct tc_group *g, double *x, int n);
/* Rank 0's bytes to every rank. */
int tc_group_broadcast(struct tc_group *g, void *buf, size_t bytes);
int tc_group_barrier(struct tc_group *g);

/* What the last failed call was doing and why ("" if none). */
const char *tc_group_error(const struct tc_group *g);

#endif
