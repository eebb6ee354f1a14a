/* The mlp classifier on the CPU: 784 -> hidden (x layers, ReLU) -> 10.
 *
 * Layer i has weights fc{i}_w (out,in) and bias fc{i}_b; widths w[0] = 784,
 * w[1..layers] = hidden, w[layers+1] = 10. Activations are allocated once for
 * max_batch rows. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tc_model_int.h"
#include "tc_ops.h"

static uint32_t width(const struct tc_config *c, uint32_t i) {
  return i == 0 ? c->in_dim : i <= c->layers ? c->hidden : c->classes;
}

int tc_mlp_acts_new(struct tc_model *m) {
  const struct tc_config *c = &m->cfg;
  size_t B = (size_t)m->max_batch, nl = c->layers + 1;
  struct tc_acts *a = calloc(1, sizeof *a);
  if (!a) return -ENOMEM;
  m->acts = a;
  a->z = calloc(nl, sizeof *a->z);
  a->h = calloc(nl, sizeof *a->h);
  if (!a->z || !a->h) return -ENOMEM;
  size_t maxw = c->in_dim > c->hidden ? c->in_dim : c->hidden;
  int failed = 0;
  for (size_t i = 0; i < nl; i++) {
    size_t w = width(c, (uint32_t)i + 1);
    a->z[i] = malloc(sizeof(float) * B * w);
    failed |= !a->z[i];
    a->bytes += sizeof(float) * B * w;
    if (i + 1 < nl) {
      a->h[i] = malloc(sizeof(float) * B * w);
      failed |= !a->h[i];
      a->bytes += sizeof(float) * B * w;
    }
  }
  a->labels = malloc(sizeof(int32_t) * B);
  a->losses = malloc(sizeof(float) * B);
  a->da = malloc(sizeof(float) * B * maxw);
  a->dz = malloc(sizeof(float) * B * maxw);
  a->bytes += sizeof(float) * B * (2 * maxw + 2);
  failed |= !a->labels || !a->losses || !a->da || !a->dz;
  return failed ? -ENOMEM : 0;
}

void tc_mlp_acts_free(struct tc_acts *a, const struct tc_config *c) {
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
}

int tc_mlp_forward(struct tc_model *m, const struct tc_batch *bt, float *ret_loss) {
  const struct tc_config *c = &m->cfg;
  struct tc_acts *a = m->acts;
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
    int iw = (int)width(c, i), ow = (int)width(c, i + 1);
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

int tc_mlp_backward(struct tc_model *m) {
  const struct tc_config *c = &m->cfg;
  struct tc_acts *a = m->acts;
  int B = a->B;
  float *dz = a->z[c->layers]; /* dlogits (B,10) */
  for (uint32_t i = c->layers + 1; i-- > 0;) {
    const struct tc_tensor *tw = &m->tensors[2 * i], *tb = &m->tensors[2 * i + 1];
    int iw = (int)width(c, i), ow = (int)width(c, i + 1);
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
