/* The gpt model on the device: tc_gpt.c's forward and backward expressed
 * with the ops of tc_cuda_{ops,linear,layers}.cu and tc_cuda_attention.cu, over the same
 * layout (block l's tensors start at tensor 2 + 12 l). */
#include <errno.h>
#include <stdlib.h>

#include "tc_cuda_model_int.h"

extern "C" {
#include "tc_gpt.h"
}

struct layer_acts {
  float *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *atty, *res2;
  float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *res3;
  /* bf16 contexts: the kept bf16 copies of the products' inputs (ln1, qkv,
   * atty, ln2, fch_gelu), made in the forward and read again by the backward */
  bf16_t *k16[5];
  /* bf16 contexts: fc's output before GELU, kept by the fused fc + GELU
   * product for the backward's GELU derivative; fused: the last forward
   * took that path (so fch and fch_gelu hold no floats, only k16[4]) */
  bf16_t *fch16;
  int fused;
};

/* N = max_batch * ctx */
struct gpt_acts {
  int32_t *tokens;                             /* (N) */
  float *encoded, *lnf, *lnf_mean, *lnf_rstd;  /* (N,C) (N,C) (N) (N) */
  float *logits;                               /* (N,V); dlogits after a training forward */
  float *dres, *dC, *d3C, *d4C, *datt, *onehot; /* backward scratch */
  bf16_t *dres16, *d3C16, *d4C16; /* bf16 contexts: kept copies of the products' douts */
  struct layer_acts *layer;
};

static const struct tc_gpt_config *cfg_of(const struct tc_cuda_model *cm) {
  return (const struct tc_gpt_config *)tc_config_model_c(&cm->lay.cfg);
}

static struct gpt_acts *acts_of(struct tc_cuda_model *cm) { return (struct gpt_acts *)cm->acts; }

static int gpt_alloc(struct tc_cuda_model *cm) {
  const struct tc_gpt_config *c = cfg_of(cm);
  size_t B = (size_t)cm->max_batch, T = c->ctx, C = c->dim, H = c->heads, V = c->vocab;
  size_t N = B * T, natt = tc_cu_attention_floats(cm->ctx, (int)B, (int)T, (int)C, (int)H);
  if (c->vocab > 1024) return -EINVAL; /* tc_cu_softmax_xent's limit */
  struct gpt_acts *a = (struct gpt_acts *)calloc(1, sizeof *a);
  if (!a) return -ENOMEM;
  cm->acts = a;
  a->layer = (struct layer_acts *)calloc(c->layers, sizeof *a->layer);
  if (!a->layer) return -ENOMEM;
  int r = 0;
#define A_(ptr, n) \
  if (r == 0) r = tc_cuda_dalloc(cm, &(ptr), (n), sizeof *(ptr))
  /* bf16 contexts: the fp32 homes that only key a kept copy (LayerNorm's
   * outputs, qkv, the fused GELU pair's input and output and its gradient)
   * or serve the unfused fallbacks */
#define L_(ptr, n)                                                        \
  if (r == 0)                                                             \
  r = cm->ctx->bf16 ? tc_cuda_dalloc_lazy(cm, &(ptr), (n), sizeof *(ptr)) \
                    : tc_cuda_dalloc(cm, &(ptr), (n), sizeof *(ptr))
  A_(a->tokens, N);
  A_(a->encoded, N * C);
  for (uint32_t l = 0; l < c->layers; l++) {
    struct layer_acts *la = &a->layer[l];
    L_(la->ln1, N * C);
    A_(la->ln1_mean, N);
    A_(la->ln1_rstd, N);
    L_(la->qkv, N * 3 * C);
    A_(la->att, natt);
    A_(la->atty, N * C);
    A_(la->res2, N * C);
    L_(la->ln2, N * C);
    A_(la->ln2_mean, N);
    A_(la->ln2_rstd, N);
    L_(la->fch, N * 4 * C);
    L_(la->fch_gelu, N * 4 * C);
    A_(la->res3, N * C);
    if (cm->ctx->bf16) {
      float *src[5] = {la->ln1, la->qkv, la->atty, la->ln2, la->fch_gelu};
      size_t n[5] = {N * C, N * 3 * C, N * C, N * C, N * 4 * C};
      for (int k = 0; k < 5; k++) {
        A_(la->k16[k], n[k]);
        if (r == 0) r = tc_cu_keep_bf16(cm->ctx, src[k], n[k], la->k16[k], 0);
      }
      A_(la->fch16, N * 4 * C);
    }
  }
  A_(a->lnf, N * C);
  A_(a->lnf_mean, N);
  A_(a->lnf_rstd, N);
  A_(a->logits, N * V);
  A_(a->dres, N * C);
  A_(a->dC, N * C);
  A_(a->d3C, N * 3 * C);
  L_(a->d4C, N * 4 * C);
  A_(a->datt, natt);
  A_(a->onehot, N * V);
  if (cm->ctx->bf16) {
    float *src[3] = {a->dres, a->d3C, a->d4C};
    bf16_t **dst[3] = {&a->dres16, &a->d3C16, &a->d4C16};
    size_t n[3] = {N * C, N * 3 * C, N * 4 * C};
    for (int k = 0; k < 3; k++) {
      A_(*dst[k], n[k]);
      if (r == 0) r = tc_cu_keep_bf16(cm->ctx, src[k], n[k], *dst[k], 0);
    }
  }
#undef A_
#undef L_
  return r;
}

static void gpt_free(struct tc_cuda_model *cm) {
  struct gpt_acts *a = acts_of(cm);
  if (!a) return;
  if (a->layer) {
    for (uint32_t l = 0; l < cfg_of(cm)->layers; l++) {
      struct layer_acts *la = &a->layer[l];
      float *ps[] = {la->ln1, la->ln1_mean, la->ln1_rstd, la->qkv, la->att, la->atty, la->res2,
                     la->ln2, la->ln2_mean, la->ln2_rstd, la->fch, la->fch_gelu, la->res3};
      for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) tc_cuda_free(ps[i]);
      for (int k = 0; k < 5; k++) tc_cuda_free(la->k16[k]);
      tc_cuda_free(la->fch16);
    }
    free(a->layer);
  }
  void *ds[] = {a->tokens, a->encoded, a->lnf, a->lnf_mean, a->lnf_rstd, a->logits,
                a->dres, a->dC, a->d3C, a->d4C, a->datt, a->onehot, a->dres16, a->d3C16,
                a->d4C16};
  for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) tc_cuda_free(ds[i]);
  free(a);
  cm->acts = NULL;
}

/* Pointers to one block's tensors inside base (params or grads); block l
 * starts at tensor 2 + 12 l, in this struct's order. */
static struct tc_gpt_block block(const struct tc_cuda_model *cm, float *base, uint32_t l) {
  return tc_gpt_block_at(cm->lay.tensors, base, l);
}

static int gpt_forward(struct tc_cuda_model *cm, const struct tc_batch *bt, int global_B) {
  const struct tc_gpt_config *c = cfg_of(cm);
  struct gpt_acts *a = acts_of(cm);
  struct tc_cuda_ctx *x_ = cm->ctx;
  int B = bt->B, T = (int)c->ctx, C = (int)c->dim, H = (int)c->heads, V = (int)c->vocab;
  int N = B * T;
  if (!bt->tokens) return -EINVAL;
  for (int i = 0; i < N; i++) {
    if (bt->tokens[i] < 0 || bt->tokens[i] >= V) return -EINVAL;
    if (bt->targets && (bt->targets[i] < 0 || bt->targets[i] >= V)) return -EINVAL;
  }
  tc_cu_keep_reset(x_); /* this forward's activations are new */
  int r = tc_cuda_to_device(a->tokens, bt->tokens, sizeof(int32_t) * N);
  if (r == 0 && bt->targets) r = tc_cuda_to_device(cm->targets, bt->targets, sizeof(int32_t) * N);
  if (r < 0) return r;
  float *wte = tc_cuda_tensor(cm, cm->params, 0), *wpe = tc_cuda_tensor(cm, cm->params, 1);
  r = tc_cu_embed_forward(x_, a->encoded, a->tokens, wte, wpe, B, T, C);
  float *x = a->encoded;
  for (uint32_t l = 0; l < c->layers && r == 0; l++) {
    struct tc_gpt_block p = block(cm, cm->params, l);
    struct layer_acts *la = &a->layer[l];
    size_t nc = (size_t)N * C;
    r = tc_cu_layernorm_forward(x_, la->ln1, la->ln1_mean, la->ln1_rstd, x, p.ln1_w, p.ln1_b, N, C);
    if (r == 0) r = tc_cu_linear_forward(x_, la->qkv, la->ln1, p.attn_w, p.attn_b, N, C, 3 * C);
    if (r == 0) r = tc_cu_attention_forward(x_, la->atty, la->att, la->qkv, B, T, C, H);
    if (r == 0)
      r = tc_cu_linear_forward_add(x_, la->res2, la->atty, p.proj_w, p.proj_b, x, N, C, C);
    if (r == 0)
      r = tc_cu_layernorm_forward(x_, la->ln2, la->ln2_mean, la->ln2_rstd, la->res2, p.ln2_w,
                                  p.ln2_b, N, C);
    /* GELU in the fc product's epilogue where cublasLt has both directions */
    la->fused = 0;
    if (r == 0 && la->fch16 && tc_cu_lt_ready(x_, 0, N, C, 4 * C, la->fch16) &&
        tc_cu_lt_ready(x_, 1, N, 4 * C, C, la->fch16)) {
      r = tc_cu_linear_gelu_forward(x_, la->fch_gelu, la->fch16, la->ln2, p.fc_w, p.fc_b, N, C,
                                    4 * C);
      la->fused = r == 0;
      if (r == 1) r = 0;
    }
    if (r == 0 && !la->fused)
      r = tc_cu_linear_forward(x_, la->fch, la->ln2, p.fc_w, p.fc_b, N, C, 4 * C);
    if (r == 0 && !la->fused) r = tc_cu_gelu_forward(x_, la->fch_gelu, la->fch, nc * 4);
    if (r == 0)
      r = tc_cu_linear_forward_add(x_, la->res3, la->fch_gelu, p.fcproj_w, p.fcproj_b, la->res2, N,
                                   4 * C, C);
    x = la->res3;
  }
  if (r == 0)
    r = tc_cu_layernorm_forward(x_, a->lnf, a->lnf_mean, a->lnf_rstd, x,
                                tc_cuda_tensor(cm, cm->params, -2),
                                tc_cuda_tensor(cm, cm->params, -1), N, C);
  if (r == 0) r = tc_cu_linear_forward(x_, a->logits, a->lnf, wte, NULL, N, C, V);
  if (r < 0 || !bt->targets) return r;
  double denom = (double)global_B * T;
  return tc_cu_softmax_xent(x_, a->logits, cm->losses, cm->correct, a->logits, cm->targets, N, V,
                            (float)(1.0 / denom));
}

static int gpt_backward(struct tc_cuda_model *cm) {
  const struct tc_gpt_config *c = cfg_of(cm);
  struct gpt_acts *a = acts_of(cm);
  struct tc_cuda_ctx *x_ = cm->ctx;
  int B = cm->B, T = (int)c->ctx, C = (int)c->dim, H = (int)c->heads, V = (int)c->vocab;
  int N = B * T;
  float *wte = tc_cuda_tensor(cm, cm->params, 0);
  float *dwte = tc_cuda_tensor(cm, cm->grads, 0), *dwpe = tc_cuda_tensor(cm, cm->grads, 1);
  uint32_t L = c->layers;
  float *xlast = L ? a->layer[L - 1].res3 : a->encoded;
  /* logits holds dlogits (N,V) after the training forward */
  int r = tc_cu_linear_backward(x_, a->dC, dwte, NULL, a->logits, a->lnf, wte, N, C, V);
  if (r == 0) r = tc_cuda_memset0(a->dres, sizeof(float) * (size_t)N * C);
  tc_cu_keep_drop(x_, a->dres);
  if (r == 0)
    r = tc_cu_layernorm_backward(x_, a->dres, tc_cuda_tensor(cm, cm->grads, -2),
                                 tc_cuda_tensor(cm, cm->grads, -1), a->dC, xlast,
                                 tc_cuda_tensor(cm, cm->params, -2), a->lnf_mean, a->lnf_rstd, N,
                                 C);
  for (uint32_t l = L; l-- > 0 && r == 0;) {
    struct tc_gpt_block p = block(cm, cm->params, l), g = block(cm, cm->grads, l);
    struct layer_acts *la = &a->layer[l];
    const float *x = l ? a->layer[l - 1].res3 : a->encoded;
    if (la->fused) {
      r = tc_cu_linear_backward_gelu(x_, a->d4C, la->fch16, g.fcproj_w, g.fcproj_b, a->dres,
                                     la->fch_gelu, p.fcproj_w, N, 4 * C, C);
    } else {
      r = tc_cu_linear_backward(x_, a->d4C, g.fcproj_w, g.fcproj_b, a->dres, la->fch_gelu,
                                p.fcproj_w, N, 4 * C, C);
      if (r == 0) r = tc_cu_gelu_backward(x_, a->d4C, la->fch, a->d4C, (size_t)N * 4 * C);
    }
    if (r == 0)
      r = tc_cu_linear_backward(x_, a->dC, g.fc_w, g.fc_b, a->d4C, la->ln2, p.fc_w, N, C, 4 * C);
    if (r == 0)
      r = tc_cu_layernorm_backward(x_, a->dres, g.ln2_w, g.ln2_b, a->dC, la->res2, p.ln2_w,
                                   la->ln2_mean, la->ln2_rstd, N, C);
    if (r == 0)
      r = tc_cu_linear_backward(x_, a->dC, g.proj_w, g.proj_b, a->dres, la->atty, p.proj_w, N,
                                C, C);
    if (r == 0)
      r = tc_cu_attention_backward(x_, a->d3C, a->datt, a->dC, la->atty, la->qkv, la->att, B, T, C,
                                   H);
    if (r == 0)
      r = tc_cu_linear_backward(x_, a->dC, g.attn_w, g.attn_b, a->d3C, la->ln1, p.attn_w, N, C,
                                3 * C);
    if (r == 0)
      r = tc_cu_layernorm_backward(x_, a->dres, g.ln1_w, g.ln1_b, a->dC, x, p.ln1_w,
                                   la->ln1_mean, la->ln1_rstd, N, C);
  }
  if (r == 0)
    r = tc_cu_embed_backward(x_, dwte, dwpe, a->onehot, a->dres, a->tokens, B, T, C, V);
  return r;
}

static const float *gpt_logits(struct tc_cuda_model *cm) { return acts_of(cm)->logits; }

extern "C" const struct tc_cuda_model_ops tc_cuda_gpt_ops = {
    "gpt", gpt_alloc, gpt_free, gpt_forward, gpt_backward, gpt_logits,
};
