/* NCCL data parallelism of the training core: one process per GPU.
 *
 * A communicator joins `world` ranks that share a 128-byte unique id, made by
 * rank 0 (tc_nccl_unique_id) and handed to the others by tc_rdv.h (a pipe for
 * ranks forked on one machine, a TCP rendezvous or --nccl-id HEX across
 * machines). Collectives run on the CUDA stream given, in the order called;
 * every rank must make the same calls in the same order.
 *
 * Errors: NCCL results convert in tc_err_from_nccl to SL_ENCCL (message logged
 * under "train.nccl"); CUDA failures are SL_ECUDA. */
#ifndef TC_NCCL_H
#define TC_NCCL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TC_NCCL_ID_BYTES 128

int tc_err_from_nccl(int nccl_result, const char *what);

/* A fresh unique id (rank 0 only, before the others need it). */
int tc_nccl_unique_id(uint8_t id[TC_NCCL_ID_BYTES]);

struct tc_nccl;

/* Joins the communicator as `rank` of `world` on CUDA device `device`;
 * blocks until every rank has joined. stream is a cudaStream_t. */
int tc_nccl_new(const uint8_t id[TC_NCCL_ID_BYTES], int rank, int world, int device,
                void *stream, struct tc_nccl **ret);
struct tc_nccl *tc_nccl_free(struct tc_nccl *nc);
int tc_nccl_rank(const struct tc_nccl *nc);
int tc_nccl_world(const struct tc_nccl *nc);

/* In-place sum over ranks of a device float array. */
int tc_nccl_allreduce_f32(struct tc_nccl *nc, float *d_buf, size_t n);
/* In-place sum over ranks of n <= 16 host doubles (through the device). */
int tc_nccl_allreduce_host_f64(struct tc_nccl *nc, double *vals, int n);
/* Device bytes from root to every rank, in place. */
int tc_nccl_broadcast(struct tc_nccl *nc, void *d_buf, size_t bytes, int root);
/* Host bytes (<= 64 KiB) from root to every rank, in place. */
int tc_nccl_broadcast_host(struct tc_nccl *nc, void *buf, size_t bytes, int root);

#ifdef __cplusplus
}
#endif

#endif
