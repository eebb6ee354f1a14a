/* Inside the CUDA backend's model: the device model struct that the shared
 * steps (tc_cuda_model.cu) and each model's device code (tc_cuda_NAME.cu)
 * both use, and the table a model's device code registers. CUDA C++ only. */
#ifndef TC_CUDA_MODEL_INT_H
#define TC_CUDA_MODEL_INT_H

#include "tc_cuda_int.h"

struct tc_cuda_model;

/* One model's device code, registered under its tc_model_ops name in
 * tc_cuda_model.cu. */
struct tc_cuda_model_ops {
  const char *name;
  /* cm->acts and the model's device buffers for cm->max_batch rows. */
  int (*alloc)(struct tc_cuda_model *cm);
  void (*free)(struct tc_cuda_model *cm); /* what alloc made, also half made */
  /* Forward over b->B rows (<= max_batch, checked): uploads b, computes the
   * logits and, with targets, cm->losses and cm->correct for every target
   * row and the logits' gradient scaled by 1 / (global_B * targets per row). */
  int (*forward)(struct tc_cuda_model *cm, const struct tc_batch *b, int global_B);
  /* Gradients of the last training forward, added into cm->grads (zeroed). */
  int (*backward)(struct tc_cuda_model *cm);
  /* Device logits (B * tokens, classes) of the last forward; NULL if none. */
  const float *(*logits)(struct tc_cuda_model *cm);
};

struct tc_cuda_model {
  struct tc_model lay; /* layout only: cfg, ops, n_params, tensors; no host buffers */
  struct tc_row_shape shape;
  const struct tc_cuda_model_ops *ops;
  struct tc_cuda_ctx *ctx;
  int max_batch, B, have_targets;
  uint64_t adam_t;
  size_t bytes; /* device bytes allocated */
  float *params, *grads, *m, *v;
  bf16_t *params16; /* bf16 contexts: the params rounded (kept, mirrored by AdamW) */
  /* per target row (max_batch * shape.targets): device targets, losses and
   * argmax == target flags, and host copies of the last two */
  int32_t *targets, *correct;
  float *losses;
  float *h_losses;
  int32_t *h_correct;
  void *acts; /* the model's own device activations */
};

/* cudaMalloc of n elements into *ret, counted in cm->bytes. */
int tc_cuda_dalloc(struct tc_cuda_model *cm, void *ret, size_t n, size_t elem);
/* The same for a buffer that a bf16 context normally never touches (the
 * fp32 home of what only its kept bf16 copy holds, or a fallback path's):
 * managed memory, which takes device memory only where something touches
 * it, so it is not counted in cm->bytes. */
int tc_cuda_dalloc_lazy(struct tc_cuda_model *cm, void *ret, size_t n, size_t elem);
/* Tensor i of the layout (negative: from the end) inside base. */
static inline float *tc_cuda_tensor(const struct tc_cuda_model *cm, float *base, int i) {
  return base + cm->lay.tensors[i < 0 ? cm->lay.n_tensors + i : i].offset;
}

#endif
