/* Models of the training core: configuration, parameter layout, training step.
 *
 * A model's parameters, gradients and AdamW moments are four separate single
 * contiguous float32 arrays of n_params elements, all in the SAME layout: the
 * tensors of tc_model.tensors[] at their offsets (docs/internals/training.md
 * lists the order). A device backend mirrors these arrays one to one, so a
 * checkpoint is the same bytes whichever device wrote it.
 *
 * One training step is: tc_model_forward (with targets) -> tc_model_backward
 * -> tc_model_clip_grads -> tc_model_adamw. The struct is public because a
 * backend needs the buffers and the layout; activations are private. */
#ifndef TC_MODEL_H
#define TC_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "tc_rng.h"

enum tc_model_kind { TC_MODEL_GPT = 1, TC_MODEL_MLP = 2 };

#define TC_MLP_IN 784
#define TC_MLP_CLASSES 10
#define TC_MAX_VOCAB 256
#define TC_MAX_TENSORS 512

/* Everything that fixes the parameter layout. Compared field by field when a
 * checkpoint is loaded. Unused fields are zero. */
struct tc_config {
  uint32_t kind;   /* enum tc_model_kind */
  uint32_t layers; /* gpt: transformer blocks; mlp: hidden layers */
  uint32_t heads;  /* gpt */
  uint32_t dim;    /* gpt: embedding width C */
  uint32_t ctx;    /* gpt: context length T */
  uint32_t vocab;  /* gpt: V, distinct bytes of the data */
  uint32_t hidden; /* mlp: hidden width */
  uint32_t in_dim; /* mlp: 784 */
  uint32_t classes;/* mlp: 10 */
};

struct tc_tensor {
  char name[32];
  size_t offset; /* in floats, into params/grads/m/v */
  size_t numel;
  uint32_t rows, cols; /* cols == 0 for 1-D */
  int decay;           /* weight decay applies (2-D weight matrices only) */
};

struct tc_adamw {
  float beta1, beta2, eps, weight_decay;
};

/* One batch. gpt: tokens and targets are (B,T) int32. mlp: inputs (B,784)
 * float, targets (B) int32. targets may be NULL for inference (gpt).
 * global_B: when these B rows are a slice of a larger batch, that batch's
 * rows; the loss and its gradient are then divided by global_B (·T), so the
 * slices' losses and gradients add up to the whole batch's. 0: B. */
struct tc_batch {
  int B;
  const int32_t *tokens;
  const float *inputs;
  const int32_t *targets;
  int global_B;
};

struct tc_acts;

struct tc_model {
  struct tc_config cfg;
  size_t n_params;
  float *params; /* (n_params) */
  float *grads;  /* (n_params) */
  float *m, *v;  /* (n_params) AdamW first and second moments */
  uint64_t adam_t; /* AdamW steps taken (bias correction) */
  int n_tensors;
  struct tc_tensor tensors[TC_MAX_TENSORS];
  int max_batch;
  struct tc_acts *acts;
  int have_targets; /* the last forward had targets; backward may run */
  int64_t last_correct; /* mlp: argmax == target count of the last forward */
  double last_loss;     /* the last forward's loss: its row losses summed in row
                           order (double), over global_B (·T) rows */
};

/* Checks ranges and divisibility; on error writes a reason into err. */
int tc_config_validate(const struct tc_config *cfg, char *err, size_t err_size);
/* "gpt layers=4 heads=4 dim=128 ctx=128 vocab=65" into buf. */
const char *tc_config_describe(const struct tc_config *cfg, char *buf, size_t size);
/* Computes the layout only (no allocation): n_tensors/tensors/n_params of m. */
int tc_model_layout(const struct tc_config *cfg, struct tc_model *m);

/* Owned model with zeroed buffers and activations for batches up to max_batch.
 * NULL on invalid config or OOM. */
struct tc_model *tc_model_new(const struct tc_config *cfg, int max_batch);
/* Owned model with zeroed buffers (params, grads, m, v) and no activations:
 * the host side of a device backend. tc_model_forward refuses it. */
struct tc_model *tc_model_new_buffers(const struct tc_config *cfg);
struct tc_model *tc_model_free(struct tc_model *m);
/* Bytes held by the model (parameters, optimizer, activations). */
size_t tc_model_mem_bytes(const struct tc_model *m);

/* Initial weights from rng (GPT-2 style for gpt, He-normal for mlp); zeroes
 * moments and adam_t. */
void tc_model_init(struct tc_model *m, struct tc_rng *rng);

/* Forward pass; with targets writes the mean loss to *ret_loss (as float; in
 * double in m->last_loss). Returns -EINVAL for a batch larger than max_batch,
 * a global_B below B, or an out-of-range token/label. */
int tc_model_forward(struct tc_model *m, const struct tc_batch *b, float *ret_loss);
/* Gradients of the last forward's mean loss into m->grads (overwritten). */
int tc_model_backward(struct tc_model *m);
/* gpt: logits of the last forward, (B,T,V), valid after a forward without targets. */
const float *tc_model_logits(const struct tc_model *m);
/* Global L2 norm of the gradients (double, fixed order); if max_norm > 0 and
 * the norm exceeds it, scales gradients by max_norm / (norm + 1e-6). */
double tc_model_clip_grads(struct tc_model *m, float max_norm);
/* One AdamW update with learning rate lr (decoupled decay on decay tensors). */
void tc_model_adamw(struct tc_model *m, const struct tc_adamw *hp, float lr);

/* Linear warmup over `warmup` steps, then cosine from lr to 0.1*lr at `total`.
 * step is 0-based (the step about to run). */
float tc_lr_at(uint64_t step, uint64_t warmup, uint64_t total, float lr);

#endif
