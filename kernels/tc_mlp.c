/* The mlp classifier on the CPU: 784 -> hidden (x layers, ReLU) -> 10.
 *
 * Layer i has weights fc{i}_w (out,in) and bias fc{i}_b; widths w[0] = 784,
 * w[1..layers] = hidden, w[layers+1] = 10. Activations are allocated once for
 * max_batch rows. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tc_mlp.h"
#include "tc_model_int.h"
#include "tc_ops.h"
#include "train.h"

_Static_assert(sizeof(struct tc_mlp_config) <= TC_CONFIG_BYTES, "mlp config fits tc_config");

/* B = max_batch; layer i maps width w[i] -> w[i+1] */
struct mlp_acts {
  int B;           /* batch of the last forward */
  float **z;       /* pre-activations (B, w[i+1]) */
  float **h;       /* post-ReLU (B, w[i+1]), hidden layers only */
  const float *x;  /* inputs of the last forward, borrowed */
  int32_t *labels; /* (B) */
  float *losses;   /* (B) */
  float *da, *dz;  /* (B, max width) */
};

static const struct tc_mlp_config *cfg_of(const struct tc_model *m) {
  return tc_config_model_c(&m->cfg);
}

static int mlp_acts_new(struct tc_model *m) {
  const struct tc_mlp_config *c = cfg_of(m);
  size_t B = (size_t)m->max_batch, nl = c->layers + 1;
  struct mlp_acts *a = calloc(1, sizeof *a);
  if (!a) return -ENOMEM;
  m->acts = a;
  a->z = calloc(nl, sizeof *a->z);
  a->h = calloc(nl, sizeof *a->h);
  if (!a->z || !a->h) return -ENOMEM;
  size_t maxw = c->in_dim > c->hidden ? c->in_dim : c->hidden;
  size_t bytes = 0;
  int failed = 0;
  for (size_t i = 0; i < nl; i++) {
    size_t w = tc_mlp_width(c, (uint32_t)i + 1);
    a->z[i] = malloc(sizeof(float) * B * w);
    failed |= !a->z[i];
    bytes += sizeof(float) * B * w;
    if (i + 1 < nl) {
      a->h[i] = malloc(sizeof(float) * B * w);
      failed |= !a->h[i];
      bytes += sizeof(float) * B * w;
    }
  }
  a->labels = malloc(sizeof(int32_t) * B);
  a->losses = malloc(sizeof(float) * B);
  a->da = malloc(sizeof(float) * B * maxw);
  a->dz = malloc(sizeof(float) * B * maxw);
  bytes += sizeof(float) * B * (2 * maxw + 2);
  m->acts_bytes = bytes;
  failed |= !a->labels || !a->losses || !a->da || !a->dz;
  return failed ? -ENOMEM : 0;
}

static void mlp_acts_free(struct tc_model *m) {
  const struct tc_mlp_config *c = cfg_of(m);
  struct mlp_acts *a = m->acts;
  for (uint32_t i = 0; i <= c->layers; i++) {
    if (a->z) free(a->z[i]);
    if (a->h) free(a->h[i]);
  }
  free(a->z);
  free(a->h);
  free(a->labels);
  free(a->losses);
  free(a->da);
  free(a->dz);
  free(a);
  m->acts = NULL;
}

static int mlp_forward(struct tc_model *m, const struct tc_batch *bt, float *ret_loss) {
  const struct tc_mlp_config *c = cfg_of(m);
  struct mlp_acts *a = m->acts;
  int B = bt->B;
  if (!bt->inputs) return -EINVAL;
  if (bt->targets)
    for (int i = 0; i < B; i++)
      if (bt->targets[i] < 0 || bt->targets[i] >= (int)c->classes) return -EINVAL;
  a->B = B;
  a->x = bt->inputs;
  const float *in = bt->inputs; /* (B,784) */
  for (uint32_t i = 0; i <= c->layers; i++) {
    const struct tc_tensor *tw = &m->tensors[2 * i], *tb = &m->tensors[2 * i + 1];
    int iw = (int)tc_mlp_width(c, i), ow = (int)tc_mlp_width(c, i + 1);
    tc_linear_forward(a->z[i], in, m->params + tw->offset, m->params + tb->offset, B, iw, ow);
    if (i < c->layers) {
      tc_relu_forward(a->h[i], a->z[i], (size_t)B * ow);
      in = a->h[i];
    }
  }
  m->have_targets = 0;
  if (!bt->targets) return 0;
  memcpy(a->labels, bt->targets, sizeof(int32_t) * B);
  int64_t correct = 0;
  float *logits = a->z[c->layers]; /* (B,10), becomes dlogits */
  int Bg = bt->global_B ? bt->global_B : B; /* rows the mean is over */
  tc_softmax_xent(logits, a->losses, logits, a->labels, B, (int)c->classes, 1.0f / (float)Bg,
                  &correct);
  m->last_loss = tc_model_loss_share(a->losses, B, Bg);
  m->last_correct = correct;
  m->have_targets = 1;
  if (ret_loss) *ret_loss = (float)m->last_loss;
  return 0;
}

static int mlp_backward(struct tc_model *m) {
  const struct tc_mlp_config *c = cfg_of(m);
  struct mlp_acts *a = m->acts;
  int B = a->B;
  float *dz = a->z[c->layers]; /* dlogits (B,10) */
  for (uint32_t i = c->layers + 1; i-- > 0;) {
    const struct tc_tensor *tw = &m->tensors[2 * i], *tb = &m->tensors[2 * i + 1];
    int iw = (int)tc_mlp_width(c, i), ow = (int)tc_mlp_width(c, i + 1);
    const float *in = i ? a->h[i - 1] : a->x;
    float *dinp = i ? a->da : NULL;
    tc_linear_backward(dinp, m->grads + tw->offset, m->grads + tb->offset, dz, in,
                       m->params + tw->offset, B, iw, ow, 0);
    if (i) {
      tc_relu_backward(a->dz, a->z[i - 1], a->da, (size_t)B * iw);
      dz = a->dz;
    }
  }
  m->have_targets = 0;
  return 0;
}

/* ---- configuration ---- */

#define F_(name, lo, hi) {#name, offsetof(struct tc_mlp_config, name), lo, hi, 1, 0}
static const struct tc_config_field FIELDS[] = {
    F_(layers, 1, 64), F_(hidden, 1, 65536),
    F_(in_dim, TC_MLP_IN, TC_MLP_IN), F_(classes, TC_MLP_CLASSES, TC_MLP_CLASSES),
};
#undef F_

static void mlp_opts_defaults(struct tc_opts *o) {
  if (!o->set_layers) o->layers = 2;
  if (!o->set_lr) o->lr = 1e-3;
}

static int mlp_from_opts(void *cfg, const struct tc_opts *o, char *err, size_t es) {
  (void)err, (void)es;
  *(struct tc_mlp_config *)cfg = (struct tc_mlp_config){
      .layers = (uint32_t)o->layers, .hidden = (uint32_t)o->hidden, .in_dim = TC_MLP_IN,
      .classes = TC_MLP_CLASSES};
  return 0;
}

static int mlp_fit_data(void *cfg, const struct tc_data_facts *d, char *err, size_t es) {
  const struct tc_mlp_config *c = cfg;
  if (d->features != c->in_dim || d->classes > c->classes)
    return snprintf(err, es, "mlp takes %u inputs and %u classes; the data has %u and %u",
                    c->in_dim, c->classes, d->features, d->classes), -EINVAL;
  return 0;
}

static void mlp_shape(const void *cfg, struct tc_row_shape *ret) {
  const struct tc_mlp_config *c = cfg;
  *ret = (struct tc_row_shape){.inputs = c->in_dim, .targets = 1, .classes = c->classes};
}

static void mlp_layout(struct tc_model *m) {
  const struct tc_mlp_config *c = cfg_of(m);
  char nm[32];
  uint32_t in = c->in_dim;
  for (uint32_t l = 0; l <= c->layers; l++) {
    uint32_t out = l == c->layers ? c->classes : c->hidden;
    snprintf(nm, sizeof nm, "fc%u_w", l);
    tc_model_add_tensor(m, nm, out, in);
    snprintf(nm, sizeof nm, "fc%u_b", l);
    tc_model_add_tensor(m, nm, out, 0);
    in = out;
  }
}

/* He-normal: ReLU layers keep their activations' scale. */
static float mlp_init_std(const struct tc_model *m, const struct tc_tensor *t) {
  (void)m;
  return sqrtf(2.0f / (float)t->cols);
}

const struct tc_model_ops tc_mlp_ops = {
    .name = "mlp",
    .data = TC_DATA_IMAGES,
    .default_data = "fashion-mnist",
    .rate_metric = "samples_per_s",
    .counts_correct = 1,
    .adam_beta2 = 0.999f,
    .config_bytes = sizeof(struct tc_mlp_config),
    .fields = FIELDS,
    .n_fields = sizeof FIELDS / sizeof FIELDS[0],
    .opts_defaults = mlp_opts_defaults,
    .from_opts = mlp_from_opts,
    .fit_data = mlp_fit_data,
    .shape = mlp_shape,
    .layout = mlp_layout,
    .init_std = mlp_init_std,
    .acts_new = mlp_acts_new,
    .acts_free = mlp_acts_free,
    .forward = mlp_forward,
    .backward = mlp_backward,
};
