/* The mlp classifier on the device: tc_mlp.c's forward and backward
 * expressed with the ops of tc_cuda_{ops,linear,layers}.cu, over the same layout (layer i's
 * weight and bias are tensors 2 i and 2 i + 1). */
#include <errno.h>
#include <stdlib.h>

#include "tc_cuda_model_int.h"

extern "C" {
#include "tc_mlp.h"
}

/* B = max_batch; z[i] (B, w[i+1]), h[i] hidden layers only */
struct mlp_acts {
  float *x; /* (B, in_dim) */
  float **z, **h;
  float *da, *dz; /* (B, max width) */
};

static const struct tc_mlp_config *cfg_of(const struct tc_cuda_model *cm) {
  return (const struct tc_mlp_config *)tc_config_model_c(&cm->lay.cfg);
}

static struct mlp_acts *acts_of(struct tc_cuda_model *cm) { return (struct mlp_acts *)cm->acts; }

static int mlp_alloc(struct tc_cuda_model *cm) {
  const struct tc_mlp_config *c = cfg_of(cm);
  size_t B = (size_t)cm->max_batch, nl = c->layers + 1;
  size_t maxw = c->in_dim > c->hidden ? c->in_dim : c->hidden;
  struct mlp_acts *a = (struct mlp_acts *)calloc(1, sizeof *a);
  if (!a) return -ENOMEM;
  cm->acts = a;
  a->z = (float **)calloc(nl, sizeof *a->z);
  a->h = (float **)calloc(nl, sizeof *a->h);
  if (!a->z || !a->h) return -ENOMEM;
  int r = 0;
#define A_(ptr, n) \
  if (r == 0) r = tc_cuda_dalloc(cm, &(ptr), (n), sizeof *(ptr))
  A_(a->x, B * c->in_dim);
  for (size_t i = 0; i < nl; i++) {
    A_(a->z[i], B * tc_mlp_width(c, (uint32_t)i + 1));
    if (i + 1 < nl) A_(a->h[i], B * tc_mlp_width(c, (uint32_t)i + 1));
  }
  A_(a->da, B * maxw);
  A_(a->dz, B * maxw);
#undef A_
  return r;
}

static void mlp_free(struct tc_cuda_model *cm) {
  struct mlp_acts *a = acts_of(cm);
  if (!a) return;
  uint32_t layers = cfg_of(cm)->layers;
  for (uint32_t i = 0; a->z && i <= layers; i++) tc_cuda_free(a->z[i]);
  for (uint32_t i = 0; a->h && i <= layers; i++) tc_cuda_free(a->h[i]);
  free(a->z);
  free(a->h);
  tc_cuda_free(a->x);
  tc_cuda_free(a->da);
  tc_cuda_free(a->dz);
  free(a);
  cm->acts = NULL;
}

static int mlp_forward(struct tc_cuda_model *cm, const struct tc_batch *bt, int global_B) {
  const struct tc_mlp_config *c = cfg_of(cm);
  struct mlp_acts *a = acts_of(cm);
  struct tc_cuda_ctx *x_ = cm->ctx;
  int B = bt->B;
  if (!bt->inputs) return -EINVAL;
  if (bt->targets)
    for (int i = 0; i < B; i++)
      if (bt->targets[i] < 0 || bt->targets[i] >= (int)c->classes) return -EINVAL;
  int r = tc_cuda_to_device(a->x, bt->inputs, sizeof(float) * (size_t)B * c->in_dim);
  if (r == 0 && bt->targets) r = tc_cuda_to_device(cm->targets, bt->targets, sizeof(int32_t) * B);
  const float *in = a->x; /* (B,784) */
  for (uint32_t i = 0; i <= c->layers && r == 0; i++) {
    int iw = (int)tc_mlp_width(c, i), ow = (int)tc_mlp_width(c, i + 1);
    r = tc_cu_linear_forward(x_, a->z[i], in, tc_cuda_tensor(cm, cm->params, 2 * (int)i),
                             tc_cuda_tensor(cm, cm->params, 2 * (int)i + 1), B, iw, ow);
    if (r == 0 && i < c->layers) {
      r = tc_cu_relu_forward(x_, a->h[i], a->z[i], (size_t)B * ow);
      in = a->h[i];
    }
  }
  if (r < 0 || !bt->targets) return r;
  float *logits = a->z[c->layers]; /* (B,10), becomes dlogits */
  return tc_cu_softmax_xent(x_, logits, cm->losses, cm->correct, logits, cm->targets, B,
                            (int)c->classes, (float)(1.0 / (double)global_B));
}

static int mlp_backward(struct tc_cuda_model *cm) {
  const struct tc_mlp_config *c = cfg_of(cm);
  struct mlp_acts *a = acts_of(cm);
  struct tc_cuda_ctx *x_ = cm->ctx;
  int B = cm->B, r = 0;
  float *dz = a->z[c->layers];
  for (uint32_t i = c->layers + 1; i-- > 0 && r == 0;) {
    int iw = (int)tc_mlp_width(c, i), ow = (int)tc_mlp_width(c, i + 1);
    const float *in = i ? a->h[i - 1] : a->x;
    r = tc_cu_linear_backward(x_, i ? a->da : NULL, tc_cuda_tensor(cm, cm->grads, 2 * (int)i),
                              tc_cuda_tensor(cm, cm->grads, 2 * (int)i + 1), dz, in,
                              tc_cuda_tensor(cm, cm->params, 2 * (int)i), B, iw, ow);
    if (r == 0 && i) {
      r = tc_cu_relu_backward(x_, a->dz, a->z[i - 1], a->da, (size_t)B * iw);
      dz = a->dz;
    }
  }
  return r;
}

extern "C" const struct tc_cuda_model_ops tc_cuda_mlp_ops = {
    "mlp", mlp_alloc, mlp_free, mlp_forward, mlp_backward, NULL,
};
