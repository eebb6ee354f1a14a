/* NCCL communicator and the few collectives data parallelism needs: the
 * gradient all-reduce, small host-value all-reduces (loss, stop flags) and
 * broadcasts of the starting state. One communicator per process, one
 * stream; host-value collectives synchronise the stream before returning. */
#include <cuda_runtime.h>
#include <errno.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "tc_cuda.h"
#include "tc_nccl.h"

extern "C" {
#include "sl_err.h"
#include "sl_log.h"
}

#define TOPIC "train.nccl"
enum { HOST_STAGE_BYTES = 64 * 1024 };

struct tc_nccl {
  ncclComm_t comm;
  cudaStream_t stream;
  int rank, world;
  void *d_stage; /* HOST_STAGE_BYTES for host-value collectives */
};

extern "C" int tc_err_from_nccl(int res, const char *what) {
  if (res == (int)ncclSuccess) return 0;
  sl_err(TOPIC, "%s: %s", what, ncclGetErrorString((ncclResult_t)res));
  return SL_ENCCL;
}

extern "C" int tc_nccl_unique_id(uint8_t id[TC_NCCL_ID_BYTES]) {
  ncclUniqueId u;
  int r = tc_err_from_nccl((int)ncclGetUniqueId(&u), "ncclGetUniqueId");
  if (r == 0) memcpy(id, u.internal, TC_NCCL_ID_BYTES);
  return r;
}

extern "C" int tc_nccl_new(const uint8_t id[TC_NCCL_ID_BYTES], int rank, int world, int device,
                           void *stream, struct tc_nccl **ret) {
  if (world < 1 || rank < 0 || rank >= world) return -EINVAL;
  struct tc_nccl *nc = (struct tc_nccl *)calloc(1, sizeof *nc);
  if (!nc) return -ENOMEM;
  nc->rank = rank;
  nc->world = world;
  nc->stream = (cudaStream_t)stream;
  ncclUniqueId u;
  memcpy(u.internal, id, TC_NCCL_ID_BYTES);
  int r = tc_err_from_cuda((int)cudaSetDevice(device), "cudaSetDevice");
  if (r == 0) r = tc_cuda_alloc(&nc->d_stage, HOST_STAGE_BYTES);
  if (r == 0) r = tc_err_from_nccl((int)ncclCommInitRank(&nc->comm, world, u, rank), "ncclCommInitRank");
  if (r < 0) {
    tc_nccl_free(nc);
    return r;
  }
  sl_debug(TOPIC, "rank %d of %d joined on device %d", rank, world, device);
  *ret = nc;
  return 0;
}

extern "C" struct tc_nccl *tc_nccl_free(struct tc_nccl *nc) {
  if (!nc) return NULL;
  if (nc->comm) ncclCommDestroy(nc->comm);
  tc_cuda_free(nc->d_stage);
  free(nc);
  return NULL;
}

extern "C" int tc_nccl_rank(const struct tc_nccl *nc) { return nc->rank; }
extern "C" int tc_nccl_world(const struct tc_nccl *nc) { return nc->world; }

extern "C" int tc_nccl_allreduce_f32(struct tc_nccl *nc, float *d_buf, size_t n) {
  return tc_err_from_nccl(
      (int)ncclAllReduce(d_buf, d_buf, n, ncclFloat32, ncclSum, nc->comm, nc->stream),
      "ncclAllReduce");
}

static int sync_stream(struct tc_nccl *nc) {
  return tc_err_from_cuda((int)cudaStreamSynchronize(nc->stream), "cudaStreamSynchronize");
}

extern "C" int tc_nccl_allreduce_host_f64(struct tc_nccl *nc, double *vals, int n) {
  if (n < 1 || n > 16) return -EINVAL;
  size_t bytes = sizeof(double) * (size_t)n;
  int r = tc_err_from_cuda((int)cudaMemcpyAsync(nc->d_stage, vals, bytes, cudaMemcpyHostToDevice,
                                                nc->stream), "copy to device");
  if (r == 0)
    r = tc_err_from_nccl((int)ncclAllReduce(nc->d_stage, nc->d_stage, (size_t)n, ncclFloat64,
                                            ncclSum, nc->comm, nc->stream), "ncclAllReduce");
  double out[16];
  if (r == 0)
    r = tc_err_from_cuda((int)cudaMemcpyAsync(out, nc->d_stage, bytes, cudaMemcpyDeviceToHost,
                                              nc->stream), "copy to host");
  if (r == 0) r = sync_stream(nc);
  if (r == 0) memcpy(vals, out, bytes);
  return r;
}

extern "C" int tc_nccl_broadcast(struct tc_nccl *nc, void *d_buf, size_t bytes, int root) {
  return tc_err_from_nccl(
      (int)ncclBroadcast(d_buf, d_buf, bytes, ncclUint8, root, nc->comm, nc->stream),
      "ncclBroadcast");
}

extern "C" int tc_nccl_broadcast_host(struct tc_nccl *nc, void *buf, size_t bytes, int root) {
  if (bytes > HOST_STAGE_BYTES) return -EINVAL;
  int r = tc_err_from_cuda((int)cudaMemcpyAsync(nc->d_stage, buf, bytes, cudaMemcpyHostToDevice,
                                                nc->stream), "copy to device");
  if (r == 0) r = tc_nccl_broadcast(nc, nc->d_stage, bytes, root);
  if (r == 0)
    r = tc_err_from_cuda((int)cudaMemcpyAsync(buf, nc->d_stage, bytes, cudaMemcpyDeviceToHost,
                                              nc->stream), "copy to host");
  if (r == 0) r = sync_stream(nc);
  return r;
}
