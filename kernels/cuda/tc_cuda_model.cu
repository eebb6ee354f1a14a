/* The device copy of a model: the four layout arrays (params, grads, m, v)
 * as one cudaMalloc each, the per-row loss buffers, and the steps every
 * model shares (upload, download, clipping, AdamW, loss sums); a model's own
 * activations, forward and backward are in its tc_cuda_NAME.cu, registered
 * below under its tc_model_ops name.
 *
 * The layout (tensor offsets) comes from tc_model_layout, so a host
 * struct tc_model and this device model exchange buffers byte for byte; that
 * is all a checkpoint needs. Loss sums are done on the host in double, in
 * row order, from per-row losses copied back each training forward. */
#include <cuda_runtime.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tc_cuda_model_int.h"

extern "C" {
#include "sl_err.h"
}

#define TC_CUDA_MODELS(X) \
  X(tc_cuda_gpt_ops)      \
  X(tc_cuda_mlp_ops)

#define DECLARE_(ops) extern "C" const struct tc_cuda_model_ops ops;
TC_CUDA_MODELS(DECLARE_)
#undef DECLARE_
#define ENTRY_(ops) &ops,
static const struct tc_cuda_model_ops *const MODELS[] = {TC_CUDA_MODELS(ENTRY_)};
#undef ENTRY_

static const struct tc_cuda_model_ops *find_model(const char *name) {
  for (size_t i = 0; i < sizeof MODELS / sizeof MODELS[0]; i++)
    if (!strcmp(MODELS[i]->name, name)) return MODELS[i];
  return NULL;
}

int tc_cuda_dalloc(struct tc_cuda_model *cm, void *ret, size_t n, size_t elem) {
  void *p = NULL;
  int r = tc_cuda_alloc(&p, n * elem);
  if (r < 0) return r;
  *(void **)ret = p;
  cm->bytes += n * elem;
  return 0;
}

int tc_cuda_dalloc_lazy(struct tc_cuda_model *cm, void *ret, size_t n, size_t elem) {
  (void)cm;
  void *p = NULL;
  size_t bytes = n * elem;
  int r = tc_err_from_cuda((int)cudaMallocManaged(&p, bytes > 0 ? bytes : 1, cudaMemAttachGlobal),
                           "cudaMallocManaged");
  if (r < 0) return r;
  *(void **)ret = p;
  return 0;
}

extern "C" int tc_cuda_model_new(const struct tc_config *cfg, int max_batch, int device, int bf16,
                                 struct tc_cuda_model **ret) {
  if (max_batch < 1) return -EINVAL;
  struct tc_cuda_model *cm = (struct tc_cuda_model *)calloc(1, sizeof *cm);
  if (!cm) return -ENOMEM;
  int r = tc_model_layout(cfg, &cm->lay);
  if (r == 0 && !(cm->ops = find_model(cfg->model))) r = SL_ENOTSUP; /* no device code */
  cm->max_batch = max_batch;
  tc_config_shape(cfg, &cm->shape);
  if (r == 0) r = tc_cuda_ctx_new(device, bf16, &cm->ctx);
  size_t n = cm->lay.n_params, rows = (size_t)max_batch * cm->shape.targets;
  if (r == 0) r = tc_cuda_dalloc(cm, &cm->params, n, sizeof(float));
  if (r == 0) r = tc_cuda_dalloc(cm, &cm->grads, n, sizeof(float));
  if (r == 0) r = tc_cuda_dalloc(cm, &cm->m, n, sizeof(float));
  if (r == 0) r = tc_cuda_dalloc(cm, &cm->v, n, sizeof(float));
  if (r == 0 && bf16) r = tc_cuda_dalloc(cm, &cm->params16, n, sizeof(bf16_t));
  if (r == 0 && bf16) r = tc_cu_keep_bf16(cm->ctx, cm->params, n, cm->params16, 1);
  if (r == 0) r = tc_cuda_dalloc(cm, &cm->targets, rows, sizeof(int32_t));
  if (r == 0) r = tc_cuda_dalloc(cm, &cm->correct, rows, sizeof(int32_t));
  if (r == 0) r = tc_cuda_dalloc(cm, &cm->losses, rows, sizeof(float));
  if (r == 0 && (!(cm->h_losses = (float *)malloc(sizeof(float) * rows)) ||
                 !(cm->h_correct = (int32_t *)malloc(sizeof(int32_t) * rows))))
    r = -ENOMEM;
  if (r == 0) r = cm->ops->alloc(cm);
  if (r == 0) r = tc_cuda_memset0(cm->params, n * sizeof(float));
  if (r == 0 && bf16) r = tc_cuda_memset0(cm->params16, n * sizeof(bf16_t));
  if (r == 0) r = tc_cuda_memset0(cm->m, n * sizeof(float));
  if (r == 0) r = tc_cuda_memset0(cm->v, n * sizeof(float));
  if (r < 0) {
    tc_cuda_model_free(cm);
    return r;
  }
  *ret = cm;
  return 0;
}

extern "C" struct tc_cuda_model *tc_cuda_model_free(struct tc_cuda_model *cm) {
  if (!cm) return NULL;
  if (cm->ops) cm->ops->free(cm);
  void *ds[] = {cm->params, cm->params16, cm->grads, cm->m, cm->v, cm->targets, cm->correct,
                cm->losses};
  for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) tc_cuda_free(ds[i]);
  free(cm->h_losses);
  free(cm->h_correct);
  tc_cuda_ctx_free(cm->ctx);
  free(cm);
  return NULL;
}

extern "C" size_t tc_cuda_model_mem_bytes(const struct tc_cuda_model *cm) { return cm->bytes; }
extern "C" size_t tc_cuda_model_n_params(const struct tc_cuda_model *cm) { return cm->lay.n_params; }
extern "C" struct tc_cuda_ctx *tc_cuda_model_ctx(struct tc_cuda_model *cm) { return cm->ctx; }
extern "C" float *tc_cuda_model_params(struct tc_cuda_model *cm) { return cm->params; }
extern "C" float *tc_cuda_model_grads(struct tc_cuda_model *cm) { return cm->grads; }
extern "C" float *tc_cuda_model_m(struct tc_cuda_model *cm) { return cm->m; }
extern "C" float *tc_cuda_model_v(struct tc_cuda_model *cm) { return cm->v; }
extern "C" uint64_t tc_cuda_model_adam_t(const struct tc_cuda_model *cm) { return cm->adam_t; }
extern "C" void tc_cuda_model_set_adam_t(struct tc_cuda_model *cm, uint64_t t) { cm->adam_t = t; }

static int same_layout(const struct tc_cuda_model *cm, const struct tc_model *host) {
  return host->n_params == cm->lay.n_params && tc_config_equal(&host->cfg, &cm->lay.cfg);
}

/* Sums the per-row losses on the host in row order (as tc_softmax_xent does). */
static int finish_loss(struct tc_cuda_model *cm, int rows, double denom, double *ret_loss,
                       int64_t *ret_correct) {
  const int counts = cm->lay.ops->counts_correct; /* else the count is not copied at all */
  int r = tc_cuda_ctx_sync(cm->ctx);
  if (r == 0) r = tc_cuda_to_host(cm->h_losses, cm->losses, sizeof(float) * (size_t)rows);
  if (r == 0 && counts)
    r = tc_cuda_to_host(cm->h_correct, cm->correct, sizeof(int32_t) * (size_t)rows);
  if (r < 0) return r;
  double total = 0.0;
  int64_t correct = 0;
  for (int i = 0; i < rows; i++) {
    total += cm->h_losses[i];
    if (counts) correct += cm->h_correct[i];
  }
  if (ret_loss) *ret_loss = total / denom;
  if (ret_correct) *ret_correct = correct;
  return 0;
}

extern "C" int tc_cuda_model_put(struct tc_cuda_model *cm, const struct tc_model *host) {
  if (!same_layout(cm, host)) return SL_EMISMATCH;
  size_t bytes = cm->lay.n_params * sizeof(float);
  int r = tc_cuda_ctx_sync(cm->ctx);
  if (r == 0) r = tc_cuda_to_device(cm->params, host->params, bytes);
  if (r == 0) r = tc_cuda_to_device(cm->m, host->m, bytes);
  if (r == 0) r = tc_cuda_to_device(cm->v, host->v, bytes);
  if (r == 0) r = tc_cuda_model_params_written(cm);
  if (r == 0) cm->adam_t = host->adam_t;
  return r;
}

extern "C" int tc_cuda_model_params_written(struct tc_cuda_model *cm) {
  return cm->params16 ? tc_cu_round_bf16(cm->ctx, cm->params16, cm->params, cm->lay.n_params) : 0;
}

extern "C" int tc_cuda_model_get(struct tc_cuda_model *cm, struct tc_model *host) {
  if (!same_layout(cm, host)) return SL_EMISMATCH;
  size_t bytes = cm->lay.n_params * sizeof(float);
  int r = tc_cuda_ctx_sync(cm->ctx);
  if (r == 0) r = tc_cuda_to_host(host->params, cm->params, bytes);
  if (r == 0) r = tc_cuda_to_host(host->m, cm->m, bytes);
  if (r == 0) r = tc_cuda_to_host(host->v, cm->v, bytes);
  if (r == 0) host->adam_t = cm->adam_t;
  return r;
}

extern "C" int tc_cuda_model_get_grads(struct tc_cuda_model *cm, float *grads) {
  int r = tc_cuda_ctx_sync(cm->ctx);
  if (r == 0) r = tc_cuda_to_host(grads, cm->grads, cm->lay.n_params * sizeof(float));
  return r;
}

extern "C" int tc_cuda_forward(struct tc_cuda_model *cm, const struct tc_batch *b, int global_B,
                               double *ret_loss, int64_t *ret_correct) {
  if (b->B < 1 || b->B > cm->max_batch) return -EINVAL;
  if (global_B < b->B) global_B = b->B;
  cm->have_targets = 0;
  cm->B = b->B;
  int r = cm->ops->forward(cm, b, global_B);
  if (r < 0 || !b->targets) return r;
  int per_row = (int)cm->shape.targets;
  r = finish_loss(cm, b->B * per_row, (double)global_B * per_row, ret_loss, ret_correct);
  if (r == 0) cm->have_targets = 1;
  return r;
}

extern "C" int tc_cuda_backward(struct tc_cuda_model *cm) {
  if (!cm->have_targets) return -EINVAL;
  int r = tc_cuda_memset0(cm->grads, cm->lay.n_params * sizeof(float));
  if (r == 0) r = cm->ops->backward(cm);
  cm->have_targets = 0;
  return r;
}

extern "C" int tc_cuda_clip_grads(struct tc_cuda_model *cm, float max_norm, double *ret_norm) {
  double total = 0.0;
  int r = tc_cu_sumsq(cm->ctx, cm->grads, cm->lay.n_params, &total);
  if (r < 0) return r;
  double norm = sqrt(total);
  if (max_norm > 0.0f && norm > max_norm)
    r = tc_cu_scale(cm->ctx, cm->grads, cm->lay.n_params, (float)(max_norm / (norm + 1e-6)));
  if (r == 0) *ret_norm = norm;
  return r;
}

extern "C" int tc_cuda_adamw(struct tc_cuda_model *cm, const struct tc_adamw *hp, float lr) {
  cm->adam_t++;
  double bc1 = 1.0 - pow(hp->beta1, (double)cm->adam_t);
  double bc2 = 1.0 - pow(hp->beta2, (double)cm->adam_t);
  float step_size = (float)(lr / bc1), bc2_sqrt = (float)sqrt(bc2);
  int r = 0;
  /* runs of adjacent tensors with the same decay flag, one launch each */
  for (int i = 0; i < cm->lay.n_tensors && r == 0;) {
    int j = i;
    size_t n = 0;
    while (j < cm->lay.n_tensors && cm->lay.tensors[j].decay == cm->lay.tensors[i].decay)
      n += cm->lay.tensors[j++].numel;
    size_t off = cm->lay.tensors[i].offset;
    float decay = cm->lay.tensors[i].decay ? 1.0f - lr * hp->weight_decay : 1.0f;
    r = tc_cu_adamw(cm->ctx, cm->params + off, cm->params16 ? cm->params16 + off : NULL,
                    cm->grads + off, cm->m + off, cm->v + off, n, hp->beta1, hp->beta2, hp->eps,
                    decay, step_size, bc2_sqrt);
    i = j;
  }
  return r;
}

extern "C" int tc_cuda_logits(struct tc_cuda_model *cm, float *logits, size_t rows) {
  const float *d = cm->ops->logits ? cm->ops->logits(cm) : NULL;
  if (!d || rows > (size_t)cm->B * cm->shape.tokens) return -EINVAL;
  int r = tc_cuda_ctx_sync(cm->ctx);
  if (r == 0) r = tc_cuda_to_host(logits, d, sizeof(float) * rows * cm->shape.classes);
  return r;
}
