/* The gpt model on the CPU: forward and backward over the layout of tc_model.c.
 *
 * Shapes: B batch, T = ctx, C = dim, H heads, V vocab, N = B*T rows.
 * Activations are allocated once for max_batch; a step allocates nothing.
 * The training forward fuses the loss gradient into the logits buffer, so a
 * forward with targets must be followed by backward before logits are read. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tc_gpt.h"
#include "tc_model_int.h"
#include "tc_ops.h"
#include "tc_par.h"
#include "train.h"

_Static_assert(sizeof(struct tc_gpt_config) <= TC_CONFIG_BYTES, "gpt config fits tc_config");

static const struct tc_gpt_config *cfg_of(const struct tc_model *m) {
  return tc_config_model_c(&m->cfg);
}

struct gpt_layer_acts {
  float *ln1, *ln1_mean, *ln1_rstd; /* (N,C) (N) (N) */
  float *qkv;                       /* (N,3C) */
  float *att;                       /* (B,H,T,T) */
  float *atty;                      /* (N,C) */
  float *res2;                      /* (N,C) residual after attention */
  float *ln2, *ln2_mean, *ln2_rstd; /* (N,C) (N) (N) */
  float *fch, *fch_gelu;            /* (N,4C) (N,4C) */
  float *res3;                      /* (N,C) block output */
};

/* N = max_batch * ctx */
struct gpt_acts {
  int B;                     /* batch of the last forward */
  int32_t *tokens, *targets; /* (N) */
  float *encoded;            /* (N,C) */
  struct gpt_layer_acts *layer;
  float *lnf, *lnf_mean, *lnf_rstd; /* (N,C) (N) (N) */
  float *logits;                    /* (N,V); dlogits after a training forward */
  float *losses;                    /* (N) */
  float *dres, *dC, *d3C, *d4C;     /* backward scratch */
  float *att_scratch;               /* T*T per thread */
  int att_scratch_threads;
};

struct alloc {
  size_t bytes;
  int failed;
};

static void *take(struct alloc *a, size_t n, size_t elem) {
  size_t bytes = n * elem;
  void *p = malloc(bytes ? bytes : 1);
  if (!p) a->failed = 1;
  a->bytes += n * elem;
  return p;
}

static int gpt_acts_new(struct tc_model *m) {
  const struct tc_gpt_config *c = cfg_of(m);
  size_t B = (size_t)m->max_batch, T = c->ctx, C = c->dim, H = c->heads, V = c->vocab;
  size_t N = B * T, L = c->layers;
  struct gpt_acts *a = calloc(1, sizeof *a);
  if (!a) return -ENOMEM;
  m->acts = a;
  struct alloc al = {0};
  a->tokens = take(&al, N, sizeof(int32_t));
  a->targets = take(&al, N, sizeof(int32_t));
  a->encoded = take(&al, N * C, sizeof(float));
  a->layer = calloc(L, sizeof *a->layer);
  if (!a->layer) return -ENOMEM;
  for (size_t l = 0; l < L; l++) {
    struct gpt_layer_acts *la = &a->layer[l];
    la->ln1 = take(&al, N * C, 4);
    la->ln1_mean = take(&al, N, 4);
    la->ln1_rstd = take(&al, N, 4);
    la->qkv = take(&al, N * 3 * C, 4);
    la->att = take(&al, B * H * T * T, 4);
    la->atty = take(&al, N * C, 4);
    la->res2 = take(&al, N * C, 4);
    la->ln2 = take(&al, N * C, 4);
    la->ln2_mean = take(&al, N, 4);
    la->ln2_rstd = take(&al, N, 4);
    la->fch = take(&al, N * 4 * C, 4);
    la->fch_gelu = take(&al, N * 4 * C, 4);
    la->res3 = take(&al, N * C, 4);
  }
  a->lnf = take(&al, N * C, 4);
  a->lnf_mean = take(&al, N, 4);
  a->lnf_rstd = take(&al, N, 4);
  a->logits = take(&al, N * V, 4);
  a->losses = take(&al, N, 4);
  a->dres = take(&al, N * C, 4);
  a->dC = take(&al, N * C, 4);
  a->d3C = take(&al, N * 3 * C, 4);
  a->d4C = take(&al, N * 4 * C, 4);
  a->att_scratch_threads = tc_par_threads();
  a->att_scratch = take(&al, tc_attention_scratch_floats((int)T) * a->att_scratch_threads, 4);
  m->acts_bytes = al.bytes;
  return al.failed ? -ENOMEM : 0;
}

static void gpt_acts_free(struct tc_model *m) {
  const struct tc_gpt_config *c = cfg_of(m);
  struct gpt_acts *a = m->acts;
  if (a->layer) {
    for (uint32_t l = 0; l < c->layers; l++) {
      struct gpt_layer_acts *la = &a->layer[l];
      float *ps[] = {la->ln1, la->ln1_mean, la->ln1_rstd, la->qkv, la->att, la->atty, la->res2,
                     la->ln2, la->ln2_mean, la->ln2_rstd, la->fch, la->fch_gelu, la->res3};
      for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) free(ps[i]);
    }
    free(a->layer);
  }
  free(a->tokens);
  free(a->targets);
  free(a->encoded);
  free(a->lnf);
  free(a->lnf_mean);
  free(a->lnf_rstd);
  free(a->logits);
  free(a->losses);
  free(a->dres);
  free(a->dC);
  free(a->d3C);
  free(a->d4C);
  free(a->att_scratch);
  free(a);
  m->acts = NULL;
}

/* Pointers to one block's parameters inside a base array (params or grads). */
static struct tc_gpt_block block(const struct tc_model *m, float *base, uint32_t l) {
  return tc_gpt_block_at(m->tensors, base, l);
}

static int gpt_forward(struct tc_model *m, const struct tc_batch *bt, float *ret_loss) {
  const struct tc_gpt_config *c = cfg_of(m);
  struct gpt_acts *a = m->acts;
  int B = bt->B, T = (int)c->ctx, C = (int)c->dim, H = (int)c->heads, V = (int)c->vocab;
  int N = B * T;
  for (int i = 0; i < N; i++) {
    if (bt->tokens[i] < 0 || bt->tokens[i] >= V) return -EINVAL;
    if (bt->targets && (bt->targets[i] < 0 || bt->targets[i] >= V)) return -EINVAL;
  }
  memcpy(a->tokens, bt->tokens, sizeof(int32_t) * N);
  a->B = B;
  float *wte = m->params + m->tensors[0].offset, *wpe = m->params + m->tensors[1].offset;
  tc_embed_forward(a->encoded, a->tokens, wte, wpe, B, T, C); /* (B,T,C) */
  float *x = a->encoded;
  for (uint32_t l = 0; l < c->layers; l++) {
    struct tc_gpt_block p = block(m, m->params, l);
    struct gpt_layer_acts *la = &a->layer[l];
    tc_layernorm_forward(la->ln1, la->ln1_mean, la->ln1_rstd, x, p.ln1_w, p.ln1_b, N, C);
    tc_linear_forward(la->qkv, la->ln1, p.attn_w, p.attn_b, N, C, 3 * C); /* (N,3C) */
    tc_attention_forward(la->atty, la->att, la->qkv, B, T, C, H);         /* (N,C) */
    tc_linear_forward(la->res2, la->atty, p.proj_w, p.proj_b, N, C, C);
    tc_add(la->res2, la->res2, x, (size_t)N * C);
    tc_layernorm_forward(la->ln2, la->ln2_mean, la->ln2_rstd, la->res2, p.ln2_w, p.ln2_b, N, C);
    tc_linear_forward(la->fch, la->ln2, p.fc_w, p.fc_b, N, C, 4 * C); /* (N,4C) */
    tc_gelu_forward(la->fch_gelu, la->fch, (size_t)N * 4 * C);
    tc_linear_forward(la->res3, la->fch_gelu, p.fcproj_w, p.fcproj_b, N, 4 * C, C);
    tc_add(la->res3, la->res3, la->res2, (size_t)N * C);
    x = la->res3;
  }
  float *lnf_w = m->params + m->tensors[m->n_tensors - 2].offset;
  float *lnf_b = m->params + m->tensors[m->n_tensors - 1].offset;
  tc_layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, x, lnf_w, lnf_b, N, C);
  tc_linear_forward(a->logits, a->lnf, wte, NULL, N, C, V); /* (N,V), tied head */
  m->have_targets = 0;
  m->last_correct = 0;
  if (!bt->targets) return 0;
  memcpy(a->targets, bt->targets, sizeof(int32_t) * N);
  int Ng = (bt->global_B ? bt->global_B : B) * T; /* positions the mean is over */
  tc_softmax_xent(a->logits, a->losses, a->logits, a->targets, N, V, 1.0f / (float)Ng, NULL);
  m->last_loss = tc_model_loss_share(a->losses, N, Ng);
  m->have_targets = 1;
  if (ret_loss) *ret_loss = (float)m->last_loss;
  return 0;
}

static int gpt_backward(struct tc_model *m) {
  const struct tc_gpt_config *c = cfg_of(m);
  struct gpt_acts *a = m->acts;
  int B = a->B, T = (int)c->ctx, C = (int)c->dim, H = (int)c->heads, V = (int)c->vocab;
  int N = B * T;
  if (a->att_scratch_threads < tc_par_threads()) {
    float *s = realloc(a->att_scratch,
                       sizeof(float) * tc_attention_scratch_floats(T) * tc_par_threads());
    if (!s) return -ENOMEM;
    a->att_scratch = s;
    a->att_scratch_threads = tc_par_threads();
  }
  float *wte = m->params + m->tensors[0].offset;
  float *dwte = m->grads + m->tensors[0].offset, *dwpe = m->grads + m->tensors[1].offset;
  float *lnf_w = m->params + m->tensors[m->n_tensors - 2].offset;
  float *dlnf_w = m->grads + m->tensors[m->n_tensors - 2].offset;
  float *dlnf_b = m->grads + m->tensors[m->n_tensors - 1].offset;
  /* logits holds dlogits (N,V) after the training forward */
  tc_linear_backward(a->dC, dwte, NULL, a->logits, a->lnf, wte, N, C, V, 0);
  memset(a->dres, 0, sizeof(float) * N * C);
  uint32_t L = c->layers;
  float *xlast = L ? a->layer[L - 1].res3 : a->encoded;
  tc_layernorm_backward(a->dres, dlnf_w, dlnf_b, a->dC, xlast, lnf_w, a->lnf_mean,
                        a->lnf_rstd, N, C);
  for (uint32_t l = L; l-- > 0;) {
    struct tc_gpt_block p = block(m, m->params, l), g = block(m, m->grads, l);
    struct gpt_layer_acts *la = &a->layer[l];
    const float *x = l ? a->layer[l - 1].res3 : a->encoded;
    /* dres is d(res3) == d(res2 via residual) == d(fcproj out) */
    tc_linear_backward(a->d4C, g.fcproj_w, g.fcproj_b, a->dres, la->fch_gelu, p.fcproj_w, N,
                       4 * C, C, 0);
    tc_gelu_backward(a->d4C, la->fch, a->d4C, (size_t)N * 4 * C);
    tc_linear_backward(a->dC, g.fc_w, g.fc_b, a->d4C, la->ln2, p.fc_w, N, C, 4 * C, 0);
    tc_layernorm_backward(a->dres, g.ln2_w, g.ln2_b, a->dC, la->res2, p.ln2_w, la->ln2_mean,
                          la->ln2_rstd, N, C);
    /* dres is now d(res2) == d(x via residual) == d(proj out) */
    tc_linear_backward(a->dC, g.proj_w, g.proj_b, a->dres, la->atty, p.proj_w, N, C, C, 0);
    tc_attention_backward(a->d3C, a->att_scratch, a->dC, la->qkv, la->att, B, T, C, H);
    tc_linear_backward(a->dC, g.attn_w, g.attn_b, a->d3C, la->ln1, p.attn_w, N, C, 3 * C, 0);
    tc_layernorm_backward(a->dres, g.ln1_w, g.ln1_b, a->dC, x, p.ln1_w, la->ln1_mean,
                          la->ln1_rstd, N, C);
  }
  tc_embed_backward(dwte, dwpe, a->dres, a->tokens, B, T, C);
  m->have_targets = 0;
  return 0;
}

static const float *gpt_logits(const struct tc_model *m) {
  return ((const struct gpt_acts *)m->acts)->logits;
}

/* ---- configuration ---- */

#define F_(name, lo, hi) {#name, offsetof(struct tc_gpt_config, name), lo, hi, 1, 0}
static const struct tc_config_field FIELDS[] = {
    F_(layers, 1, 64), F_(heads, 1, 8192), F_(dim, 1, 8192), F_(ctx, 1, 8192),
    F_(vocab, 2, TC_MAX_VOCAB),
};
#undef F_

static int gpt_from_opts(void *cfg, const struct tc_opts *o, char *err, size_t es) {
  struct tc_gpt_config *c = cfg;
  if (o->heads < 1 || o->dim % o->heads)
    return snprintf(err, es, "--dim must be a multiple of --heads"), -EINVAL;
  *c = (struct tc_gpt_config){.layers = (uint32_t)o->layers, .heads = (uint32_t)o->heads,
                              .dim = (uint32_t)o->dim, .ctx = (uint32_t)o->ctx};
  return 0;
}

static int gpt_fit_data(void *cfg, const struct tc_data_facts *d, char *err, size_t es) {
  (void)err, (void)es;
  ((struct tc_gpt_config *)cfg)->vocab = d->vocab;
  return 0;
}

static int gpt_validate(const void *cfg, char *err, size_t es) {
  const struct tc_gpt_config *c = cfg;
  if (c->dim % c->heads)
    return snprintf(err, es, "dim must be 1..8192 and a multiple of heads"), -EINVAL;
  return 0;
}

static void gpt_shape(const void *cfg, struct tc_row_shape *ret) {
  const struct tc_gpt_config *c = cfg;
  *ret = (struct tc_row_shape){.tokens = c->ctx, .targets = c->ctx, .classes = c->vocab};
}

static void gpt_layout(struct tc_model *m) {
  const struct tc_gpt_config *c = cfg_of(m);
  uint32_t C = c->dim;
  char nm[32];
  tc_model_add_tensor(m, "wte", c->vocab, C);
  tc_model_add_tensor(m, "wpe", c->ctx, C);
  for (uint32_t l = 0; l < c->layers; l++) {
#define T_(suffix, rows, cols) \
  snprintf(nm, sizeof nm, "h%u.%s", l, suffix), tc_model_add_tensor(m, nm, rows, cols)
    T_("ln1_w", C, 0);
    T_("ln1_b", C, 0);
    T_("attn_w", 3 * C, C);
    T_("attn_b", 3 * C, 0);
    T_("proj_w", C, C);
    T_("proj_b", C, 0);
    T_("ln2_w", C, 0);
    T_("ln2_b", C, 0);
    T_("fc_w", 4 * C, C);
    T_("fc_b", 4 * C, 0);
    T_("fcproj_w", C, 4 * C);
    T_("fcproj_b", C, 0);
#undef T_
  }
  tc_model_add_tensor(m, "lnf_w", C, 0);
  tc_model_add_tensor(m, "lnf_b", C, 0);
}

/* GPT-2's: 0.02, the residual projections scaled by 1/sqrt(2 layers). */
static float gpt_init_std(const struct tc_model *m, const struct tc_tensor *t) {
  const char *dot = strrchr(t->name, '.');
  const char *base = dot ? dot + 1 : t->name;
  if (!strcmp(base, "proj_w") || !strcmp(base, "fcproj_w"))
    return 0.02f / sqrtf(2.0f * (float)cfg_of(m)->layers);
  return 0.02f;
}

static void gpt_opts_defaults(struct tc_opts *o) {
  if (!o->set_layers) o->layers = 4;
  if (!o->set_lr) o->lr = 3e-4;
}

const struct tc_model_ops tc_gpt_ops = {
    .opts_defaults = gpt_opts_defaults,
    .name = "gpt",
    .data = TC_DATA_TEXT,
    .default_data = "moby-dick",
    .rate_metric = "tokens_per_s",
    .generates = 1,
    .adam_beta2 = 0.95f,
    .config_bytes = sizeof(struct tc_gpt_config),
    .fields = FIELDS,
    .n_fields = sizeof FIELDS / sizeof FIELDS[0],
    .from_opts = gpt_from_opts,
    .fit_data = gpt_fit_data,
    .validate = gpt_validate,
    .shape = gpt_shape,
    .layout = gpt_layout,
    .init_std = gpt_init_std,
    .acts_new = gpt_acts_new,
    .acts_free = gpt_acts_free,
    .forward = gpt_forward,
    .backward = gpt_backward,
    .logits = gpt_logits,
};
