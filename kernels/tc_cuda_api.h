/* The CUDA backend as spotlab-train reaches it: a table of functions in a
 * module of its own (libspotlab-train-cuda.so, kernels/cuda/), loaded with
 * dlopen only when a run asks for --device cuda. spotlab-train itself needs
 * no CUDA library, so CPU training runs on a machine without CUDA's
 * runtime, cuBLAS or NCCL, and a GPU run on one without them gets the
 * loader's reason instead of a program that cannot start.
 *
 * The module and spotlab-train come from one build: the table carries the
 * version and the sizes of the structures they share, and a module that
 * differs is refused. The functions are those of cuda/tc_cuda.h and
 * cuda/tc_nccl.h of the same names. */
#ifndef TC_CUDA_API_H
#define TC_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

#include "tc_model.h"
#include "tc_rdv.h"

#define TC_CUDA_API_VERSION 1
#define TC_CUDA_API_SYMBOL "tc_cuda_api_v1"

struct tc_cuda_model;
struct tc_cuda_ctx;
struct tc_nccl;

struct tc_cuda_api {
  int version;                   /* TC_CUDA_API_VERSION */
  const char *build;             /* SPOTLAB_VERSION of the build it came from */
  size_t sizes[5];               /* sizeof the shared structures (TC_CUDA_API_SIZES) */
  /* the module's own log set up as the program's (progname, SPOTLAB_DEBUG) */
  void (*log_init)(const char *progname);
  int (*device_count)(void);
  const char *(*device_name)(char *buf, size_t size);
  int (*model_new)(const struct tc_config *cfg, int max_batch, int device, int bf16,
                   struct tc_cuda_model **ret);
  struct tc_cuda_model *(*model_free)(struct tc_cuda_model *cm);
  size_t (*model_mem_bytes)(const struct tc_cuda_model *cm);
  size_t (*model_n_params)(const struct tc_cuda_model *cm);
  struct tc_cuda_ctx *(*model_ctx)(struct tc_cuda_model *cm);
  void *(*ctx_stream)(struct tc_cuda_ctx *ctx);
  float *(*model_params)(struct tc_cuda_model *cm);
  float *(*model_grads)(struct tc_cuda_model *cm);
  float *(*model_m)(struct tc_cuda_model *cm);
  float *(*model_v)(struct tc_cuda_model *cm);
  int (*model_put)(struct tc_cuda_model *cm, const struct tc_model *host);
  int (*model_params_written)(struct tc_cuda_model *cm);
  int (*model_get)(struct tc_cuda_model *cm, struct tc_model *host);
  uint64_t (*model_adam_t)(const struct tc_cuda_model *cm);
  void (*model_set_adam_t)(struct tc_cuda_model *cm, uint64_t t);
  int (*forward)(struct tc_cuda_model *cm, const struct tc_batch *b, int global_B,
                 double *ret_loss, int64_t *ret_correct);
  int (*backward)(struct tc_cuda_model *cm);
  int (*clip_grads)(struct tc_cuda_model *cm, float max_norm, double *ret_norm);
  int (*adamw)(struct tc_cuda_model *cm, const struct tc_adamw *hp, float lr);
  int (*logits)(struct tc_cuda_model *cm, float *logits, size_t rows);
  int (*nccl_unique_id)(uint8_t id[TC_RDV_ID_BYTES]);
  int (*nccl_new)(const uint8_t id[TC_RDV_ID_BYTES], int rank, int world, int device,
                  void *stream, struct tc_nccl **ret);
  struct tc_nccl *(*nccl_free)(struct tc_nccl *nc);
  int (*nccl_allreduce_f32)(struct tc_nccl *nc, float *d_buf, size_t n);
  int (*nccl_allreduce_host_f64)(struct tc_nccl *nc, double *vals, int n);
  int (*nccl_broadcast)(struct tc_nccl *nc, void *d_buf, size_t bytes, int root);
  int (*nccl_broadcast_host)(struct tc_nccl *nc, void *buf, size_t bytes, int root);
};

#define TC_CUDA_API_SIZES                                                                    \
  {sizeof(struct tc_config), sizeof(struct tc_batch), sizeof(struct tc_model),              \
   sizeof(struct tc_adamw), sizeof(struct tc_cuda_api)}

/* The backend, loaded at the first call (later calls return the same
 * table) from where sl_train_cuda_backend finds it for the running
 * program. NULL with the reason in err (es bytes) when there is
 * none, it cannot be loaded (a CUDA library it needs is missing), or it is
 * from another build. */
const struct tc_cuda_api *tc_cuda_load(char *err, size_t es);

#endif
