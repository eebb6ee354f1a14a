/* Model configuration, parameter layout, initialisation and the optimizer.
 *
 * The layout built here is the contract between the CPU path, device
 * backends and the checkpoint format: tensors in a fixed order, packed
 * without padding, identical for params, grads, m and v. */
#include "tc_model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sl_err.h"
#include "tc_model_int.h"

int tc_config_validate(const struct tc_config *c, char *err, size_t err_size) {
  if (c->kind == TC_MODEL_GPT) {
    if (c->layers < 1 || c->layers > 64) return snprintf(err, err_size, "layers must be 1..64"), -EINVAL;
    if (c->heads < 1 || c->dim < 1 || c->dim > 8192 || c->dim % c->heads)
      return snprintf(err, err_size, "dim must be 1..8192 and a multiple of heads"), -EINVAL;
    if (c->ctx < 1 || c->ctx > 8192) return snprintf(err, err_size, "ctx must be 1..8192"), -EINVAL;
    if (c->vocab < 2 || c->vocab > TC_MAX_VOCAB)
      return snprintf(err, err_size, "vocabulary must have 2..256 symbols"), -EINVAL;
  } else if (c->kind == TC_MODEL_MLP) {
    if (c->layers < 1 || c->layers > 64) return snprintf(err, err_size, "layers must be 1..64"), -EINVAL;
    if (c->hidden < 1 || c->hidden > 65536) return snprintf(err, err_size, "hidden must be 1..65536"), -EINVAL;
    if (c->in_dim != TC_MLP_IN || c->classes != TC_MLP_CLASSES)
      return snprintf(err, err_size, "mlp takes 784 inputs and 10 classes"), -EINVAL;
  } else {
    return snprintf(err, err_size, "unknown model kind %u", c->kind), -EINVAL;
  }
  return 0;
}

const char *tc_config_describe(const struct tc_config *c, char *buf, size_t size) {
  if (c->kind == TC_MODEL_GPT)
    snprintf(buf, size, "gpt layers=%u heads=%u dim=%u ctx=%u vocab=%u", c->layers, c->heads,
             c->dim, c->ctx, c->vocab);
  else if (c->kind == TC_MODEL_MLP)
    snprintf(buf, size, "mlp layers=%u hidden=%u", c->layers, c->hidden);
  else
    snprintf(buf, size, "unknown model kind %u", c->kind);
  return buf;
}

static void add_tensor(struct tc_model *m, const char *name, uint32_t rows, uint32_t cols) {
  struct tc_tensor *t = &m->tensors[m->n_tensors++];
  snprintf(t->name, sizeof t->name, "%s", name);
  t->offset = m->n_params;
  t->rows = rows;
  t->cols = cols;
  t->numel = (size_t)rows * (cols ? cols : 1);
  t->decay = cols > 0;
  m->n_params += t->numel;
}

int tc_model_layout(const struct tc_config *c, struct tc_model *m) {
  char err[128];
  int r = tc_config_validate(c, err, sizeof err);
  if (r < 0) return r;
  m->cfg = *c;
  m->n_tensors = 0;
  m->n_params = 0;
  char nm[32];
  if (c->kind == TC_MODEL_GPT) {
    uint32_t C = c->dim;
    add_tensor(m, "wte", c->vocab, C);
    add_tensor(m, "wpe", c->ctx, C);
    for (uint32_t l = 0; l < c->layers; l++) {
#define T_(suffix, rows, cols) \
  snprintf(nm, sizeof nm, "h%u.%s", l, suffix), add_tensor(m, nm, rows, cols)
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
    add_tensor(m, "lnf_w", C, 0);
    add_tensor(m, "lnf_b", C, 0);
  } else {
    uint32_t in = c->in_dim;
    for (uint32_t l = 0; l <= c->layers; l++) {
      uint32_t out = l == c->layers ? c->classes : c->hidden;
      snprintf(nm, sizeof nm, "fc%u_w", l);
      add_tensor(m, nm, out, in);
      snprintf(nm, sizeof nm, "fc%u_b", l);
      add_tensor(m, nm, out, 0);
      in = out;
    }
  }
  return 0;
}

float *tc_model_tensor(struct tc_model *m, float *base, const char *name) {
  for (int i = 0; i < m->n_tensors; i++)
    if (strcmp(m->tensors[i].name, name) == 0) return base + m->tensors[i].offset;
  return NULL;
}

struct tc_model *tc_model_new_buffers(const struct tc_config *cfg) {
  struct tc_model *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  if (tc_model_layout(cfg, m) < 0) return tc_model_free(m);
  size_t bytes = m->n_params * sizeof(float);
  m->params = calloc(1, bytes);
  m->grads = calloc(1, bytes);
  m->m = calloc(1, bytes);
  m->v = calloc(1, bytes);
  if (!m->params || !m->grads || !m->m || !m->v) return tc_model_free(m);
  return m;
}

struct tc_model *tc_model_new(const struct tc_config *cfg, int max_batch) {
  if (max_batch < 1) return NULL;
  struct tc_model *m = tc_model_new_buffers(cfg);
  if (!m) return NULL;
  m->max_batch = max_batch;
  int r = cfg->kind == TC_MODEL_GPT ? tc_gpt_acts_new(m) : tc_mlp_acts_new(m);
  if (r < 0) return tc_model_free(m);
  return m;
}

struct tc_model *tc_model_free(struct tc_model *m) {
  if (!m) return NULL;
  if (m->acts) {
    if (m->cfg.kind == TC_MODEL_GPT) tc_gpt_acts_free(m->acts, &m->cfg);
    else tc_mlp_acts_free(m->acts, &m->cfg);
  }
  free(m->params);
  free(m->grads);
  free(m->m);
  free(m->v);
  free(m);
  return NULL;
}

size_t tc_model_mem_bytes(const struct tc_model *m) {
  return 4 * m->n_params * sizeof(float) + (m->acts ? m->acts->bytes : 0);
}

void tc_model_init(struct tc_model *m, struct tc_rng *rng) {
  const struct tc_config *c = &m->cfg;
  for (int i = 0; i < m->n_tensors; i++) {
    const struct tc_tensor *t = &m->tensors[i];
    float *p = m->params + t->offset;
    const char *dot = strrchr(t->name, '.');
    const char *base = dot ? dot + 1 : t->name;
    if (t->cols == 0) {
      float fill = (strstr(base, "ln") == base && strstr(base, "_w")) ? 1.0f : 0.0f;
      for (size_t k = 0; k < t->numel; k++) p[k] = fill;
      continue;
    }
    float std;
    if (c->kind == TC_MODEL_GPT) {
      std = 0.02f;
      if (!strcmp(base, "proj_w") || !strcmp(base, "fcproj_w"))
        std = 0.02f / sqrtf(2.0f * (float)c->layers);
    } else {
      std = sqrtf(2.0f / (float)t->cols);
    }
    for (size_t k = 0; k < t->numel; k++) p[k] = std * tc_rng_normal(rng);
  }
  memset(m->m, 0, m->n_params * sizeof(float));
  memset(m->v, 0, m->n_params * sizeof(float));
  m->adam_t = 0;
}

int tc_model_forward(struct tc_model *m, const struct tc_batch *b, float *ret_loss) {
  if (!m->acts || b->B < 1 || b->B > m->max_batch) return -EINVAL;
  return m->cfg.kind == TC_MODEL_GPT ? tc_gpt_forward(m, b, ret_loss)
                                     : tc_mlp_forward(m, b, ret_loss);
}

int tc_model_backward(struct tc_model *m) {
  if (!m->acts || !m->have_targets) return -EINVAL;
  memset(m->grads, 0, m->n_params * sizeof(float));
  return m->cfg.kind == TC_MODEL_GPT ? tc_gpt_backward(m) : tc_mlp_backward(m);
}

const float *tc_model_logits(const struct tc_model *m) {
  return m->cfg.kind == TC_MODEL_GPT && m->acts ? m->acts->logits : NULL;
}

double tc_model_clip_grads(struct tc_model *m, float max_norm) {
  /* Fixed-size blocks summed in order: the same at any thread count. */
  double total = 0.0;
  const float *g = m->grads;
  for (size_t i = 0; i < m->n_params; i++) total += (double)g[i] * g[i];
  double norm = sqrt(total);
  if (max_norm > 0.0f && norm > max_norm) {
    float s = (float)(max_norm / (norm + 1e-6));
    for (size_t i = 0; i < m->n_params; i++) m->grads[i] *= s;
  }
  return norm;
}

void tc_model_adamw(struct tc_model *m, const struct tc_adamw *hp, float lr) {
  m->adam_t++;
  double bc1 = 1.0 - pow(hp->beta1, (double)m->adam_t);
  double bc2 = 1.0 - pow(hp->beta2, (double)m->adam_t);
  float step_size = (float)(lr / bc1);
  float bc2_sqrt = (float)sqrt(bc2);
  for (int i = 0; i < m->n_tensors; i++) {
    const struct tc_tensor *t = &m->tensors[i];
    float decay = t->decay ? 1.0f - lr * hp->weight_decay : 1.0f;
    float *p = m->params + t->offset, *g = m->grads + t->offset;
    float *mm = m->m + t->offset, *vv = m->v + t->offset;
    for (size_t k = 0; k < t->numel; k++) {
      float gk = g[k];
      mm[k] = hp->beta1 * mm[k] + (1.0f - hp->beta1) * gk;
      vv[k] = hp->beta2 * vv[k] + (1.0f - hp->beta2) * gk * gk;
      float denom = sqrtf(vv[k]) / bc2_sqrt + hp->eps;
      p[k] = p[k] * decay - step_size * mm[k] / denom;
    }
  }
}

float tc_lr_at(uint64_t step, uint64_t warmup, uint64_t total, float lr) {
  if (step < warmup) return lr * (float)(step + 1) / (float)warmup;
  double min_lr = 0.1 * lr;
  double span = total > warmup ? (double)(total - warmup) : 1.0;
  double progress = (double)(step - warmup) / span;
  if (progress > 1.0) progress = 1.0;
  return (float)(min_lr + 0.5 * (lr - min_lr) * (1.0 + cos(3.141592653589793 * progress)));
}
