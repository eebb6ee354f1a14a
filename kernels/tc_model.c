/* Parameter layout, initialisation, the step's dispatch to the model's ops,
 * and the optimizer.
 *
 * The layout built here (from the model's layout hook) is the contract
 * between the CPU path, device backends and the checkpoint format: tensors in
 * a fixed order, packed without padding, identical for params, grads, m and v. */
#include "tc_model.h"

#include <errno.h>
#ifdef __AVX__
#include <immintrin.h>
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sl_err.h"
#include "tc_model_int.h"
#include "tc_par.h"

void tc_model_add_tensor(struct tc_model *m, const char *name, uint32_t rows, uint32_t cols) {
  if (m->n_tensors >= TC_MAX_TENSORS) { /* counted, not stored: tc_model_layout refuses it */
    m->n_tensors++;
    return;
  }
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
  char err[160];
  int r = tc_config_validate(c, err, sizeof err);
  if (r < 0) return r;
  m->cfg = *c;
  m->ops = tc_config_ops(c);
  m->n_tensors = 0;
  m->n_params = 0;
  m->ops->layout(m);
  if (m->n_tensors > TC_MAX_TENSORS) {
    m->n_tensors = TC_MAX_TENSORS;
    return SL_ELIMIT;
  }
  return 0;
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
  if (m->ops->acts_new(m) < 0) return tc_model_free(m);
  return m;
}

struct tc_model *tc_model_free(struct tc_model *m) {
  if (!m) return NULL;
  if (m->acts) m->ops->acts_free(m);
  free(m->params);
  free(m->grads);
  free(m->m);
  free(m->v);
  free(m);
  return NULL;
}

size_t tc_model_mem_bytes(const struct tc_model *m) {
  return 4 * m->n_params * sizeof(float) + (m->acts ? m->acts_bytes : 0);
}

void tc_model_init(struct tc_model *m, struct tc_rng *rng) {
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
    float std = m->ops->init_std(m, t);
    for (size_t k = 0; k < t->numel; k++) p[k] = std * tc_rng_normal(rng);
  }
  memset(m->m, 0, m->n_params * sizeof(float));
  memset(m->v, 0, m->n_params * sizeof(float));
  m->adam_t = 0;
}

int tc_model_forward(struct tc_model *m, const struct tc_batch *b, float *ret_loss) {
  if (!m->acts || b->B < 1 || b->B > m->max_batch || (b->global_B && b->global_B < b->B))
    return -EINVAL;
  return m->ops->forward(m, b, ret_loss);
}

double tc_model_loss_share(const float *losses, int rows, int global_rows) {
  double total = 0.0; /* in row order, as tc_softmax_xent adds */
  for (int i = 0; i < rows; i++) total += losses[i];
  return total / (double)global_rows;
}

int tc_model_backward(struct tc_model *m) {
  if (!m->acts || !m->have_targets) return -EINVAL;
  memset(m->grads, 0, m->n_params * sizeof(float));
  return m->ops->backward(m);
}

const float *tc_model_logits(const struct tc_model *m) {
  return m->acts && m->ops->logits ? m->ops->logits(m) : NULL;
}

/* The optimizer's loops split the packed arrays into pieces fixed by n_params
 * alone and run them on the tc_par pool; every element's update is
 * independent and the norm's partial sums are added in piece order, so the
 * numbers never depend on the thread count. */
#define NORM_PARTS 64
#define OPT_BLOCK 8192

struct norm_job {
  const float *g;
  size_t n;
  double part[NORM_PARTS];
};

/* Sum of squares of one fixed piece, in double, over 8 interleaved lanes. */
static void norm_parts(void *arg, size_t lo, size_t hi) {
  struct norm_job *j = arg;
  for (size_t p = lo; p < hi; p++) {
    size_t a = j->n * p / NORM_PARTS, b = j->n * (p + 1) / NORM_PARTS;
    const float *g = j->g;
    double acc[8] = {0};
    size_t i = a;
    for (; i + 8 <= b; i += 8)
      for (int k = 0; k < 8; k++) acc[k] += (double)g[i + k] * g[i + k];
    double s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < b; i++) s += (double)g[i] * g[i];
    j->part[p] = s;
  }
}

struct scale_job {
  float *g;
  size_t n;
  float s;
};

static void scale_blocks(void *arg, size_t lo, size_t hi) {
  const struct scale_job *j = arg;
  float *restrict g = j->g;
  size_t a = lo * OPT_BLOCK, b = hi * OPT_BLOCK < j->n ? hi * OPT_BLOCK : j->n;
  for (size_t i = a; i < b; i++) g[i] *= j->s;
}

double tc_model_clip_grads(struct tc_model *m, float max_norm) {
  struct norm_job nj = {.g = m->grads, .n = m->n_params};
  tc_par_for(NORM_PARTS, 1, norm_parts, &nj);
  double total = 0.0;
  for (int p = 0; p < NORM_PARTS; p++) total += nj.part[p];
  double norm = sqrt(total);
  if (max_norm > 0.0f && norm > max_norm) {
    struct scale_job sj = {m->grads, m->n_params, (float)(max_norm / (norm + 1e-6))};
    tc_par_for((m->n_params + OPT_BLOCK - 1) / OPT_BLOCK, 2, scale_blocks, &sj);
  }
  return norm;
}

struct adamw_job {
  struct tc_model *m;
  float beta1, beta2, eps, step_size, bc2_sqrt, lr_wd;
};

static void sqrt_span(float *restrict out, const float *restrict in, size_t n) {
  size_t k = 0;
#ifdef __AVX__
  /* sqrtf would not vectorise while it may set errno; both round correctly */
  for (; k + 8 <= n; k += 8) _mm256_storeu_ps(out + k, _mm256_sqrt_ps(_mm256_loadu_ps(in + k)));
#endif
  for (; k < n; k++) out[k] = sqrtf(in[k]);
}

/* AdamW over n elements of one tensor, 256 at a time so the square roots stay in L1. */
static void adamw_span(const struct adamw_job *j, float decay, float *restrict p,
                       const float *restrict g, float *restrict mm, float *restrict vv,
                       size_t n) {
  float b1 = j->beta1, b2 = j->beta2, eps = j->eps, step = j->step_size, bc2 = j->bc2_sqrt;
  float root[256];
  for (size_t i0 = 0; i0 < n; i0 += 256) {
    size_t c = n - i0 < 256 ? n - i0 : 256;
    for (size_t k = 0; k < c; k++) {
      float gk = g[i0 + k];
      mm[i0 + k] = b1 * mm[i0 + k] + (1.0f - b1) * gk;
      vv[i0 + k] = b2 * vv[i0 + k] + (1.0f - b2) * gk * gk;
    }
    sqrt_span(root, vv + i0, c);
    for (size_t k = 0; k < c; k++) {
      float denom = root[k] / bc2 + eps;
      p[i0 + k] = p[i0 + k] * decay - step * mm[i0 + k] / denom;
    }
  }
}

/* Blocks of OPT_BLOCK elements of the packed arrays; a block may span tensors. */
static void adamw_blocks(void *arg, size_t lo, size_t hi) {
  const struct adamw_job *j = arg;
  struct tc_model *m = j->m;
  size_t a = lo * OPT_BLOCK, b = hi * OPT_BLOCK < m->n_params ? hi * OPT_BLOCK : m->n_params;
  int t = 0, hi_t = m->n_tensors - 1; /* last tensor starting at or before a */
  while (t < hi_t) {
    int mid = (t + hi_t + 1) / 2;
    if (m->tensors[mid].offset <= a)
      t = mid;
    else
      hi_t = mid - 1;
  }
  for (size_t i = a; i < b; t++) {
    const struct tc_tensor *ts = &m->tensors[t];
    size_t end = ts->offset + ts->numel < b ? ts->offset + ts->numel : b;
    if (end > i) {
      float decay = ts->decay ? 1.0f - j->lr_wd : 1.0f;
      adamw_span(j, decay, m->params + i, m->grads + i, m->m + i, m->v + i, end - i);
      i = end;
    }
  }
}

void tc_model_adamw(struct tc_model *m, const struct tc_adamw *hp, float lr) {
  m->adam_t++;
  double bc1 = 1.0 - pow(hp->beta1, (double)m->adam_t);
  double bc2 = 1.0 - pow(hp->beta2, (double)m->adam_t);
  struct adamw_job j = {m, hp->beta1, hp->beta2, hp->eps, (float)(lr / bc1), (float)sqrt(bc2),
                        lr * hp->weight_decay};
  tc_par_for((m->n_params + OPT_BLOCK - 1) / OPT_BLOCK, 2, adamw_blocks, &j);
}

float tc_lr_at(uint64_t step, uint64_t warmup, uint64_t total, float lr) {
  if (step < warmup) return lr * (float)(step + 1) / (float)warmup;
  double min_lr = 0.1 * lr;
  double span = total > warmup ? (double)(total - warmup) : 1.0;
  double progress = (double)(step - warmup) / span;
  if (progress > 1.0) progress = 1.0;
  return (float)(min_lr + 0.5 * (lr - min_lr) * (1.0 + cos(3.141592653589793 * progress)));
}
