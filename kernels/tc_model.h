/* Models of the training core: configuration, parameter layout, training step.
 *
 * A model is one table of operations (struct tc_model_ops) registered in
 * tc_models.c: its own configuration struct and the fields that describe it,
 * its parameter layout, activations, forward and backward on the CPU, and
 * what a run needs to know about it (the data it takes, its metrics, whether
 * it can sample). The CUDA path registers the same names in
 * cuda/tc_cuda_model.cu. Nothing outside the model's files knows its fields.
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

#define TC_MAX_VOCAB 256
#define TC_MAX_TENSORS 1024 /* gpt at 64 layers has 772, mlp at 64 has 130 */
#define TC_MODEL_NAME_BYTES 16
#define TC_CONFIG_BYTES 64

/* Everything that fixes the parameter layout: the model's registered name
 * and its own config struct, stored by value (zero past the struct) so a
 * config can be copied, compared with memcmp and sent to other ranks as
 * bytes. Compared whole when a checkpoint is loaded. */
struct tc_config {
  char model[TC_MODEL_NAME_BYTES]; /* "gpt", "mlp"; NUL-padded */
  union {
    uint64_t align_;
    unsigned char bytes[TC_CONFIG_BYTES];
  } p; /* the model's config struct (tc_config_model) */
};

static inline void *tc_config_model(struct tc_config *c) { return c->p.bytes; }
static inline const void *tc_config_model_c(const struct tc_config *c) { return c->p.bytes; }

/* One field of a model's config struct: a uint32_t at `offset`, written
 * name=value in checkpoints and descriptions. A field that is not required
 * takes `def` when a checkpoint does not name it, so a model can grow a
 * setting without changing the file format. */
struct tc_config_field {
  const char *name;
  size_t offset;
  uint32_t min, max;
  int required;
  uint32_t def;
};

enum tc_data_kind { TC_DATA_TEXT = 1, TC_DATA_IMAGES = 2 };

/* What one row of a batch holds, from the config. */
struct tc_row_shape {
  uint32_t tokens;  /* int32 token ids per row (text: the context length) */
  uint32_t inputs;  /* floats per row (images: the pixels) */
  uint32_t targets; /* int32 targets per row; the units of work a row counts for */
  uint32_t classes; /* values a target takes: the vocabulary, or the classes */
};

/* What the loaded data says about the model's shape. */
struct tc_data_facts {
  uint32_t vocab;    /* text: distinct bytes */
  uint32_t features; /* images: pixels per image */
  uint32_t classes;  /* images: label values */
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

/* One batch, rows as the model's tc_row_shape says: tokens (B, tokens) and
 * targets (B, targets) int32, inputs (B, inputs) float. targets may be NULL
 * for inference. global_B: when these B rows are a slice of a larger batch,
 * that batch's rows; the loss and its gradient are then divided by global_B
 * (·targets per row), so the slices' losses and gradients add up to the
 * whole batch's. 0: B. */
struct tc_batch {
  int B;
  const int32_t *tokens;
  const float *inputs;
  const int32_t *targets;
  int global_B;
};

struct tc_model;
struct tc_opts;

/* A model. Hooks take the model's own config struct as `cfg` (void *: the
 * model casts it); the model-side hooks run with m->cfg and m->ops set. */
struct tc_model_ops {
  const char *name;          /* --model NAME, and the checkpoint's model */
  enum tc_data_kind data;    /* the data it trains on */
  const char *default_data;  /* data set when --data is not given */
  const char *rate_metric;   /* metrics key of the step rate, e.g. "tokens_per_s" */
  int counts_correct;        /* forward counts rows whose argmax is the target */
  int generates;             /* logits over the text vocabulary per position: --sample */
  float adam_beta2;
  size_t config_bytes;       /* sizeof its config struct, <= TC_CONFIG_BYTES */
  const struct tc_config_field *fields;
  int n_fields;

  /* spotlab-train: the model's defaults of options not given on the command
   * line (layers, lr), and the config from the options (err: what is wrong
   * with them). */
  void (*opts_defaults)(struct tc_opts *o);
  int (*from_opts)(void *cfg, const struct tc_opts *o, char *err, size_t err_size);
  /* Takes the data's shape (a text model its vocabulary). May be NULL. */
  int (*fit_data)(void *cfg, const struct tc_data_facts *d, char *err, size_t err_size);
  /* Checks beyond the fields' ranges (divisibility); may be NULL. */
  int (*validate)(const void *cfg, char *err, size_t err_size);
  void (*shape)(const void *cfg, struct tc_row_shape *ret);
  /* tc_model_add_tensor for each tensor, in the fixed layout order. */
  void (*layout)(struct tc_model *m);
  /* Standard deviation of the initial values of a 2-D tensor. */
  float (*init_std)(const struct tc_model *m, const struct tc_tensor *t);
  int (*acts_new)(struct tc_model *m);  /* m->acts for m->max_batch rows */
  void (*acts_free)(struct tc_model *m);
  int (*forward)(struct tc_model *m, const struct tc_batch *b, float *ret_loss);
  int (*backward)(struct tc_model *m);
  /* Logits (B, tokens, classes) of the last forward without targets; may be NULL. */
  const float *(*logits)(const struct tc_model *m);
};

/* The registered models, in registration order; NULL past the last. */
const struct tc_model_ops *tc_model_at(int i);
/* The model called name, or NULL. */
const struct tc_model_ops *tc_model_find(const char *name);
/* "gpt, mlp" into buf. */
const char *tc_model_names(char *buf, size_t size);

/* cfg for model ops with every field at its default (zero when required). */
void tc_config_init(struct tc_config *cfg, const struct tc_model_ops *ops);
/* The ops of cfg's model, or NULL for an unknown name. */
const struct tc_model_ops *tc_config_ops(const struct tc_config *cfg);
/* Sets cfg from "name=value" pairs separated by spaces or newlines, on top of
 * tc_config_init for model `model`; unknown names, bad numbers and missing
 * required fields are errors. Does not validate. */
int tc_config_parse(struct tc_config *cfg, const char *model, const char *text, char *err,
                    size_t err_size);
/* "layers=4\nheads=4\n..." (every field, in table order) into buf; the bytes
 * written, or -ENOSPC. */
int tc_config_encode(const struct tc_config *cfg, char *buf, size_t size);
/* 1 when a and b are the same model with the same field values. */
int tc_config_equal(const struct tc_config *a, const struct tc_config *b);
/* A field's value by name; -ENOENT if the model has no such field. */
int tc_config_get(const struct tc_config *cfg, const char *field, uint32_t *ret);
/* Checks the model name, the fields' ranges and the model's own rules; on
 * error writes a reason into err. */
int tc_config_validate(const struct tc_config *cfg, char *err, size_t err_size);
/* "gpt layers=4 heads=4 dim=128 ctx=128 vocab=65" into buf. */
const char *tc_config_describe(const struct tc_config *cfg, char *buf, size_t size);
/* The row shape of cfg (zeros for an unknown model). */
void tc_config_shape(const struct tc_config *cfg, struct tc_row_shape *ret);
/* Computes the layout only (no allocation): ops/n_tensors/tensors/n_params of m. */
int tc_model_layout(const struct tc_config *cfg, struct tc_model *m);

struct tc_model {
  struct tc_config cfg;
  const struct tc_model_ops *ops;
  size_t n_params;
  float *params; /* (n_params) */
  float *grads;  /* (n_params) */
  float *m, *v;  /* (n_params) AdamW first and second moments */
  uint64_t adam_t; /* AdamW steps taken (bias correction) */
  int n_tensors;
  struct tc_tensor tensors[TC_MAX_TENSORS];
  int max_batch;
  void *acts;          /* the model's activations (its own struct) */
  size_t acts_bytes;
  int have_targets; /* the last forward had targets; backward may run */
  int64_t last_correct; /* argmax == target count of the last forward */
  double last_loss;     /* the last forward's loss: its row losses summed in row
                           order (double), over global_B (·T) rows */
};

/* Owned model with zeroed buffers and activations for batches up to max_batch.
 * NULL on invalid config or OOM. */
struct tc_model *tc_model_new(const struct tc_config *cfg, int max_batch);
/* Owned model with zeroed buffers (params, grads, m, v) and no activations:
 * the host side of a device backend. tc_model_forward refuses it. */
struct tc_model *tc_model_new_buffers(const struct tc_config *cfg);
struct tc_model *tc_model_free(struct tc_model *m);
/* Bytes held by the model (parameters, optimizer, activations). */
size_t tc_model_mem_bytes(const struct tc_model *m);

/* Initial weights from rng (the model's init_std for 2-D tensors, ones for
 * layer-norm weights, zeros for other 1-D tensors); zeroes moments and adam_t. */
void tc_model_init(struct tc_model *m, struct tc_rng *rng);

/* Forward pass; with targets writes the mean loss to *ret_loss (as float; in
 * double in m->last_loss). Returns -EINVAL for a batch larger than max_batch,
 * a global_B below B, or an out-of-range token/label. */
int tc_model_forward(struct tc_model *m, const struct tc_batch *b, float *ret_loss);
/* Gradients of the last forward's mean loss into m->grads (overwritten). */
int tc_model_backward(struct tc_model *m);
/* Logits of the last forward without targets, (B, tokens, classes), for a
 * model that generates; NULL otherwise. */
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
