/* The device copy of a model: the four layout arrays (params, grads, m, v)
 * as one cudaMalloc each, activations for max_batch rows, and the forward,
 * backward, clipping and AdamW steps of tc_gpt.c / tc_mlp.c / tc_model.c
 * expressed with the ops of tc_cuda_ops.cu.
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

#include "tc_cuda.h"

extern "C" {
#include "sl_err.h"
}

struct layer_acts {
  float *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *atty, *res2;
  float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *res3;
};

struct tc_cuda_model {
  struct tc_model lay; /* layout only: cfg, n_params, tensors; no host buffers */
  struct tc_cuda_ctx *ctx;
  int max_batch, B, have_targets;
  uint64_t adam_t;
  size_t bytes;
  float *params, *grads, *m, *v;
  /* gpt */
  int32_t *tokens, *targets, *correct;
  float *encoded, *lnf, *lnf_mean, *lnf_rstd, *logits, *losses;
  float *dres, *dC, *d3C, *d4C, *datt, *onehot;
  struct layer_acts *layer;
  /* mlp: z[i] (B, w[i+1]), h[i] hidden layers only */
  float *x, **z, **h, *da, *dz;
  /* host copies of the per-row results of a training forward */
  float *h_losses;
  int32_t *h_correct;
};

static int dalloc(struct tc_cuda_model *cm, void *ret, size_t n, size_t elem) {
  void *p = NULL;
  int r = tc_cuda_alloc(&p, n * elem);
  if (r < 0) return r;
  *(void **)ret = p;
  cm->bytes += n * elem;
  return 0;
}

static uint32_t mlp_width(const struct tc_config *c, uint32_t i) {
  return i == 0 ? c->in_dim : i <= c->layers ? c->hidden : c->classes;
}

static int alloc_gpt(struct tc_cuda_model *cm) {
  const struct tc_config *c = &cm->lay.cfg;
  size_t B = (size_t)cm->max_batch, T = c->ctx, C = c->dim, H = c->heads, V = c->vocab;
  size_t N = B * T;
  int r = 0;
  cm->layer = (struct layer_acts *)calloc(c->layers, sizeof *cm->layer);
  if (!cm->layer) return -ENOMEM;
#define A_(ptr, n) \
  if (r == 0) r = dalloc(cm, &(ptr), (n), sizeof *(ptr))
  A_(cm->tokens, N);
  A_(cm->targets, N);
  A_(cm->correct, N);
  A_(cm->encoded, N * C);
  for (uint32_t l = 0; l < c->layers; l++) {
    struct layer_acts *la = &cm->layer[l];
    A_(la->ln1, N * C);
    A_(la->ln1_mean, N);
    A_(la->ln1_rstd, N);
    A_(la->qkv, N * 3 * C);
    A_(la->att, B * H * T * T);
    A_(la->atty, N * C);
    A_(la->res2, N * C);
    A_(la->ln2, N * C);
    A_(la->ln2_mean, N);
    A_(la->ln2_rstd, N);
    A_(la->fch, N * 4 * C);
    A_(la->fch_gelu, N * 4 * C);
    A_(la->res3, N * C);
  }
  A_(cm->lnf, N * C);
  A_(cm->lnf_mean, N);
  A_(cm->lnf_rstd, N);
  A_(cm->logits, N * V);
  A_(cm->losses, N);
  A_(cm->dres, N * C);
  A_(cm->dC, N * C);
  A_(cm->d3C, N * 3 * C);
  A_(cm->d4C, N * 4 * C);
  A_(cm->datt, B * H * T * T);
  A_(cm->onehot, N * V);
  if (r == 0 && (!(cm->h_losses = (float *)malloc(sizeof(float) * N)) ||
                 !(cm->h_correct = (int32_t *)malloc(sizeof(int32_t) * N))))
    r = -ENOMEM;
  return r;
}

static int alloc_mlp(struct tc_cuda_model *cm) {
  const struct tc_config *c = &cm->lay.cfg;
  size_t B = (size_t)cm->max_batch, nl = c->layers + 1;
  size_t maxw = c->in_dim > c->hidden ? c->in_dim : c->hidden;
  int r = 0;
  cm->z = (float **)calloc(nl, sizeof *cm->z);
  cm->h = (float **)calloc(nl, sizeof *cm->h);
  if (!cm->z || !cm->h) return -ENOMEM;
  A_(cm->x, B * c->in_dim);
  for (size_t i = 0; i < nl; i++) {
    A_(cm->z[i], B * mlp_width(c, (uint32_t)i + 1));
    if (i + 1 < nl) A_(cm->h[i], B * mlp_width(c, (uint32_t)i + 1));
  }
  A_(cm->targets, B);
  A_(cm->correct, B);
  A_(cm->losses, B);
  A_(cm->da, B * maxw);
  A_(cm->dz, B * maxw);
#undef A_
  if (r == 0 && (!(cm->h_losses = (float *)malloc(sizeof(float) * B)) ||
                 !(cm->h_correct = (int32_t *)malloc(sizeof(int32_t) * B))))
    r = -ENOMEM;
  return r;
}

extern "C" int tc_cuda_model_new(const struct tc_config *cfg, int max_batch, int device, int bf16,
                                 struct tc_cuda_model **ret) {
  if (max_batch < 1) return -EINVAL;
  if (cfg->kind == TC_MODEL_GPT && cfg->vocab > 1024) return -EINVAL;
  struct tc_cuda_model *cm = (struct tc_cuda_model *)calloc(1, sizeof *cm);
  if (!cm) return -ENOMEM;
  int r = tc_model_layout(cfg, &cm->lay);
  cm->max_batch = max_batch;
  if (r == 0) r = tc_cuda_ctx_new(device, bf16, &cm->ctx);
  size_t n = cm->lay.n_params;
  if (r == 0) r = dalloc(cm, &cm->params, n, sizeof(float));
  if (r == 0) r = dalloc(cm, &cm->grads, n, sizeof(float));
  if (r == 0) r = dalloc(cm, &cm->m, n, sizeof(float));
  if (r == 0) r = dalloc(cm, &cm->v, n, sizeof(float));
  if (r == 0) r = cfg->kind == TC_MODEL_GPT ? alloc_gpt(cm) : alloc_mlp(cm);
  if (r == 0) r = tc_cuda_memset0(cm->params, n * sizeof(float));
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
  const struct tc_config *c = &cm->lay.cfg;
  if (cm->layer) {
    for (uint32_t l = 0; l < c->layers; l++) {
      struct layer_acts *la = &cm->layer[l];
      float *ps[] = {la->ln1, la->ln1_mean, la->ln1_rstd, la->qkv, la->att, la->atty, la->res2,
                     la->ln2, la->ln2_mean, la->ln2_rstd, la->fch, la->fch_gelu, la->res3};
      for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) tc_cuda_free(ps[i]);
    }
    free(cm->layer);
  }
  for (uint32_t i = 0; cm->z && i <= c->layers; i++) tc_cuda_free(cm->z[i]);
  for (uint32_t i = 0; cm->h && i <= c->layers; i++) tc_cuda_free(cm->h[i]);
  free(cm->z);
  free(cm->h);
  void *ds[] = {cm->params, cm->grads, cm->m, cm->v, cm->tokens, cm->targets, cm->correct,
                cm->encoded, cm->lnf, cm->lnf_mean, cm->lnf_rstd, cm->logits, cm->losses,
                cm->dres, cm->dC, cm->d3C, cm->d4C, cm->datt, cm->onehot, cm->x, cm->da, cm->dz};
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
  return host->n_params == cm->lay.n_params &&
         memcmp(&host->cfg, &cm->lay.cfg, sizeof host->cfg) == 0;
}

extern "C" int tc_cuda_model_put(struct tc_cuda_model *cm, const struct tc_model *host) {
  if (!same_layout(cm, host)) return SL_EMISMATCH;
  size_t bytes = cm->lay.n_params * sizeof(float);
  int r = tc_cuda_ctx_sync(cm->ctx);
  if (r == 0) r = tc_cuda_to_device(cm->params, host->params, bytes);
  if (r == 0) r = tc_cuda_to_device(cm->m, host->m, bytes);
  if (r == 0) r = tc_cuda_to_device(cm->v, host->v, bytes);
  if (r == 0) cm->adam_t = host->adam_t;
  return r;
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

/* Pointers to one block's tensors inside base (params or grads); block l
 * starts at tensor 2 + 12 l, in this struct's order. */
struct blk {
  float *ln1_w, *ln1_b, *attn_w, *attn_b, *proj_w, *proj_b;
  float *ln2_w, *ln2_b, *fc_w, *fc_b, *fcproj_w, *fcproj_b;
};

static struct blk block(const struct tc_cuda_model *cm, float *base, uint32_t l) {
  const struct tc_tensor *t = &cm->lay.tensors[2 + 12 * l];
  struct blk b;
  float **f[] = {&b.ln1_w, &b.ln1_b, &b.attn_w, &b.attn_b, &b.proj_w, &b.proj_b,
                 &b.ln2_w, &b.ln2_b, &b.fc_w,   &b.fc_b,   &b.fcproj_w, &b.fcproj_b};
  for (int i = 0; i < 12; i++) *f[i] = base + t[i].offset;
  return b;
}

static float *tensor(const struct tc_cuda_model *cm, float *base, int i) {
  return base + cm->lay.tensors[i < 0 ? cm->lay.n_tensors + i : i].offset;
}

/* Sums the per-row losses on the host in row order (as tc_softmax_xent does). */
static int finish_loss(struct tc_cuda_model *cm, int rows, double denom, double *ret_loss,
                       int64_t *ret_correct) {
  int r = tc_cuda_ctx_sync(cm->ctx);
  if (r == 0) r = tc_cuda_to_host(cm->h_losses, cm->losses, sizeof(float) * (size_t)rows);
  if (r == 0) r = tc_cuda_to_host(cm->h_correct, cm->correct, sizeof(int32_t) * (size_t)rows);
  if (r < 0) return r;
  double total = 0.0;
  int64_t correct = 0;
  for (int i = 0; i < rows; i++) {
    total += cm->h_losses[i];
    correct += cm->h_correct[i];
  }
  if (ret_loss) *ret_loss = total / denom;
  if (ret_correct) *ret_correct = correct;
  return 0;
}

static int gpt_forward(struct tc_cuda_model *cm, const struct tc_batch *bt, int global_B,
                       double *ret_loss) {
  const struct tc_config *c = &cm->lay.cfg;
  struct tc_cuda_ctx *x_ = cm->ctx;
  int B = bt->B, T = (int)c->ctx, C = (int)c->dim, H = (int)c->heads, V = (int)c->vocab;
  int N = B * T;
  for (int i = 0; i < N; i++) {
    if (bt->tokens[i] < 0 || bt->tokens[i] >= V) return -EINVAL;
    if (bt->targets && (bt->targets[i] < 0 || bt->targets[i] >= V)) return -EINVAL;
  }
  int r = tc_cuda_to_device(cm->tokens, bt->tokens, sizeof(int32_t) * N);
  if (r == 0 && bt->targets) r = tc_cuda_to_device(cm->targets, bt->targets, sizeof(int32_t) * N);
  if (r < 0) return r;
  cm->B = B;
  float *wte = tensor(cm, cm->params, 0), *wpe = tensor(cm, cm->params, 1);
  r = tc_cu_embed_forward(x_, cm->encoded, cm->tokens, wte, wpe, B, T, C);
  float *x = cm->encoded;
  for (uint32_t l = 0; l < c->layers && r == 0; l++) {
    struct blk p = block(cm, cm->params, l);
    struct layer_acts *la = &cm->layer[l];
    size_t nc = (size_t)N * C;
    r = tc_cu_layernorm_forward(x_, la->ln1, la->ln1_mean, la->ln1_rstd, x, p.ln1_w, p.ln1_b, N, C);
    if (r == 0) r = tc_cu_linear_forward(x_, la->qkv, la->ln1, p.attn_w, p.attn_b, N, C, 3 * C);
    if (r == 0) r = tc_cu_attention_forward(x_, la->atty, la->att, la->qkv, B, T, C, H);
    if (r == 0) r = tc_cu_linear_forward(x_, la->res2, la->atty, p.proj_w, p.proj_b, N, C, C);
    if (r == 0) r = tc_cu_add(x_, la->res2, la->res2, x, nc);
    if (r == 0)
      r = tc_cu_layernorm_forward(x_, la->ln2, la->ln2_mean, la->ln2_rstd, la->res2, p.ln2_w,
                                  p.ln2_b, N, C);
    if (r == 0) r = tc_cu_linear_forward(x_, la->fch, la->ln2, p.fc_w, p.fc_b, N, C, 4 * C);
    if (r == 0) r = tc_cu_gelu_forward(x_, la->fch_gelu, la->fch, nc * 4);
    if (r == 0)
      r = tc_cu_linear_forward(x_, la->res3, la->fch_gelu, p.fcproj_w, p.fcproj_b, N, 4 * C, C);
    if (r == 0) r = tc_cu_add(x_, la->res3, la->res3, la->res2, nc);
    x = la->res3;
  }
  if (r == 0)
    r = tc_cu_layernorm_forward(x_, cm->lnf, cm->lnf_mean, cm->lnf_rstd, x,
                                tensor(cm, cm->params, -2), tensor(cm, cm->params, -1), N, C);
  if (r == 0) r = tc_cu_linear_forward(x_, cm->logits, cm->lnf, wte, NULL, N, C, V);
  cm->have_targets = 0;
  if (r < 0 || !bt->targets) return r;
  double denom = (double)global_B * T;
  r = tc_cu_softmax_xent(x_, cm->logits, cm->losses, cm->correct, cm->logits, cm->targets, N, V,
                         (float)(1.0 / denom));
  if (r == 0) r = finish_loss(cm, N, denom, ret_loss, NULL);
  if (r == 0) cm->have_targets = 1;
  return r;
}

static int gpt_backward(struct tc_cuda_model *cm) {
  const struct tc_config *c = &cm->lay.cfg;
  struct tc_cuda_ctx *x_ = cm->ctx;
  int B = cm->B, T = (int)c->ctx, C = (int)c->dim, H = (int)c->heads, V = (int)c->vocab;
  int N = B * T;
  float *wte = tensor(cm, cm->params, 0);
  float *dwte = tensor(cm, cm->grads, 0), *dwpe = tensor(cm, cm->grads, 1);
  uint32_t L = c->layers;
  float *xlast = L ? cm->layer[L - 1].res3 : cm->encoded;
  /* logits holds dlogits (N,V) after the training forward */
  int r = tc_cu_linear_backward(x_, cm->dC, dwte, NULL, cm->logits, cm->lnf, wte, N, C, V);
  if (r == 0) r = tc_cuda_memset0(cm->dres, sizeof(float) * (size_t)N * C);
  if (r == 0)
    r = tc_cu_layernorm_backward(x_, cm->dres, tensor(cm, cm->grads, -2),
                                 tensor(cm, cm->grads, -1), cm->dC, xlast,
                                 tensor(cm, cm->params, -2), cm->lnf_mean, cm->lnf_rstd, N, C);
  for (uint32_t l = L; l-- > 0 && r == 0;) {
    struct blk p = block(cm, cm->params, l), g = block(cm, cm->grads, l);
    struct layer_acts *la = &cm->layer[l];
    const float *x = l ? cm->layer[l - 1].res3 : cm->encoded;
    r = tc_cu_linear_backward(x_, cm->d4C, g.fcproj_w, g.fcproj_b, cm->dres, la->fch_gelu,
                              p.fcproj_w, N, 4 * C, C);
    if (r == 0) r = tc_cu_gelu_backward(x_, cm->d4C, la->fch, cm->d4C, (size_t)N * 4 * C);
    if (r == 0)
      r = tc_cu_linear_backward(x_, cm->dC, g.fc_w, g.fc_b, cm->d4C, la->ln2, p.fc_w, N, C, 4 * C);
    if (r == 0)
      r = tc_cu_layernorm_backward(x_, cm->dres, g.ln2_w, g.ln2_b, cm->dC, la->res2, p.ln2_w,
                                   la->ln2_mean, la->ln2_rstd, N, C);
    if (r == 0)
      r = tc_cu_linear_backward(x_, cm->dC, g.proj_w, g.proj_b, cm->dres, la->atty, p.proj_w, N,
                                C, C);
    if (r == 0)
      r = tc_cu_attention_backward(x_, cm->d3C, cm->datt, cm->dC, la->qkv, la->att, B, T, C, H);
    if (r == 0)
      r = tc_cu_linear_backward(x_, cm->dC, g.attn_w, g.attn_b, cm->d3C, la->ln1, p.attn_w, N, C,
                                3 * C);
    if (r == 0)
      r = tc_cu_layernorm_backward(x_, cm->dres, g.ln1_w, g.ln1_b, cm->dC, x, p.ln1_w,
                                   la->ln1_mean, la->ln1_rstd, N, C);
  }
  if (r == 0)
    r = tc_cu_embed_backward(x_, dwte, dwpe, cm->onehot, cm->dres, cm->tokens, B, T, C, V);
  return r;
}

static int mlp_forward(struct tc_cuda_model *cm, const struct tc_batch *bt, int global_B,
                       double *ret_loss, int64_t *ret_correct) {
  const struct tc_config *c = &cm->lay.cfg;
  struct tc_cuda_ctx *x_ = cm->ctx;
  int B = bt->B;
  if (!bt->inputs) return -EINVAL;
  if (bt->targets)
    for (int i = 0; i < B; i++)
      if (bt->targets[i] < 0 || bt->targets[i] >= (int)c->classes) return -EINVAL;
  int r = tc_cuda_to_device(cm->x, bt->inputs, sizeof(float) * (size_t)B * c->in_dim);
  if (r == 0 && bt->targets) r = tc_cuda_to_device(cm->targets, bt->targets, sizeof(int32_t) * B);
  cm->B = B;
  const float *in = cm->x; /* (B,784) */
  for (uint32_t i = 0; i <= c->layers && r == 0; i++) {
    int iw = (int)mlp_width(c, i), ow = (int)mlp_width(c, i + 1);
    r = tc_cu_linear_forward(x_, cm->z[i], in, tensor(cm, cm->params, 2 * (int)i),
                             tensor(cm, cm->params, 2 * (int)i + 1), B, iw, ow);
    if (r == 0 && i < c->layers) {
      r = tc_cu_relu_forward(x_, cm->h[i], cm->z[i], (size_t)B * ow);
      in = cm->h[i];
    }
  }
  cm->have_targets = 0;
  if (r < 0 || !bt->targets) return r;
  float *logits = cm->z[c->layers]; /* (B,10), becomes dlogits */
  r = tc_cu_softmax_xent(x_, logits, cm->losses, cm->correct, logits, cm->targets, B,
                         (int)c->classes, (float)(1.0 / (double)global_B));
  if (r == 0) r = finish_loss(cm, B, (double)global_B, ret_loss, ret_correct);
  if (r == 0) cm->have_targets = 1;
  return r;
}

static int mlp_backward(struct tc_cuda_model *cm) {
  const struct tc_config *c = &cm->lay.cfg;
  struct tc_cuda_ctx *x_ = cm->ctx;
  int B = cm->B, r = 0;
  float *dz = cm->z[c->layers];
  for (uint32_t i = c->layers + 1; i-- > 0 && r == 0;) {
    int iw = (int)mlp_width(c, i), ow = (int)mlp_width(c, i + 1);
    const float *in = i ? cm->h[i - 1] : cm->x;
    r = tc_cu_linear_backward(x_, i ? cm->da : NULL, tensor(cm, cm->grads, 2 * (int)i),
                              tensor(cm, cm->grads, 2 * (int)i + 1), dz, in,
                              tensor(cm, cm->params, 2 * (int)i), B, iw, ow);
    if (r == 0 && i) {
      r = tc_cu_relu_backward(x_, cm->dz, cm->z[i - 1], cm->da, (size_t)B * iw);
      dz = cm->dz;
    }
  }
  return r;
}

extern "C" int tc_cuda_forward(struct tc_cuda_model *cm, const struct tc_batch *b, int global_B,
                               double *ret_loss, int64_t *ret_correct) {
  if (b->B < 1 || b->B > cm->max_batch) return -EINVAL;
  if (global_B < b->B) global_B = b->B;
  if (cm->lay.cfg.kind == TC_MODEL_GPT) {
    int r = gpt_forward(cm, b, global_B, ret_loss);
    if (r == 0 && ret_correct) *ret_correct = 0;
    return r;
  }
  return mlp_forward(cm, b, global_B, ret_loss, ret_correct);
}

extern "C" int tc_cuda_backward(struct tc_cuda_model *cm) {
  if (!cm->have_targets) return -EINVAL;
  int r = tc_cuda_memset0(cm->grads, cm->lay.n_params * sizeof(float));
  if (r == 0) r = cm->lay.cfg.kind == TC_MODEL_GPT ? gpt_backward(cm) : mlp_backward(cm);
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
    r = tc_cu_adamw(cm->ctx, cm->params + off, cm->grads + off, cm->m + off, cm->v + off, n,
                    hp->beta1, hp->beta2, hp->eps, decay, step_size, bc2_sqrt);
    i = j;
  }
  return r;
}

extern "C" int tc_cuda_logits(struct tc_cuda_model *cm, float *logits, size_t rows) {
  if (cm->lay.cfg.kind != TC_MODEL_GPT || rows > (size_t)cm->B * cm->lay.cfg.ctx) return -EINVAL;
  int r = tc_cuda_ctx_sync(cm->ctx);
  if (r == 0) r = tc_cuda_to_host(logits, cm->logits, sizeof(float) * rows * cm->lay.cfg.vocab);
  return r;
}
