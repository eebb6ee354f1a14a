/* What spotlab-train's runs do differently by data kind (train_loop_int.h):
 * loading the data a model takes (byte-level text, or images with their
 * held-out set), the batch buffers, the next training batch from the live
 * data position in the checkpoint meta (so a resumed run replays the same
 * batches), --dump-batches, and the held-out evaluation. */
#include "train_loop_int.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tc_ckpt.h"
#include "tc_data.h"
#include "tc_model.h"
#include "train_dev.h"

/* Loads the data the model takes and fits R->cfg to it (a text model takes
 * its vocabulary); R->cfg's model is set. */
int tc_loop_load_data(struct run *R, int for_train, char *err, size_t es) {
  const struct tc_opts *o = R->o;
  char path[4096];
  struct tc_data_facts facts = {0};
  int r = 0;
  tc_config_shape(&R->cfg, &R->shape);
  switch (R->ops->data) {
  case TC_DATA_TEXT:
    r = tc_text_resolve(o->data, path, sizeof path, err, es);
    if (r == 0) r = tc_text_load(path, R->shape.tokens, &R->text, err, es);
    if (r == 0) facts.vocab = R->text->vocab;
    break;
  case TC_DATA_IMAGES:
    tc_images_resolve(o->data, path, sizeof path);
    if (for_train) r = tc_images_load(path, "train", &R->train, err, es);
    if (r == 0) r = tc_images_load(path, "t10k", &R->test, err, es);
    facts.features = TC_IMAGE_PIXELS;
    facts.classes = TC_IMAGE_CLASSES;
    break;
  }
  if (r == 0 && R->ops->fit_data)
    r = R->ops->fit_data(tc_config_model(&R->cfg), &facts, err, es);
  tc_config_shape(&R->cfg, &R->shape);
  return r;
}

/* Batch buffers for B rows of R->shape. */
int tc_loop_alloc_batch(struct run *R, int B) {
  const struct tc_row_shape *s = &R->shape;
  R->tokens = malloc(sizeof(int32_t) * (size_t)B * (s->tokens ? s->tokens : 1));
  R->targets = malloc(sizeof(int32_t) * (size_t)B * (s->targets ? s->targets : 1));
  if (s->inputs) R->inputs = malloc(sizeof(float) * (size_t)B * s->inputs);
  return R->tokens && R->targets && (!s->inputs || R->inputs) ? 0 : -ENOMEM;
}

/* Mean held-out loss; a model that counts correct rows also gives accuracy. */
int tc_loop_evaluate(struct run *R, double *ret_loss, double *ret_acc) {
  int B = R->batch;
  double sum = 0.0;
  int64_t correct = 0, count = 0;
  if (R->ops->data == TC_DATA_TEXT) {
    int T = (int)R->shape.tokens, nb = (int)R->o->eval_batches;
    for (int i = 0; i < nb; i++) {
      tc_text_eval_batch(R->text, i, nb, B, T, R->tokens, R->targets);
      struct tc_batch b = {.B = B, .tokens = R->tokens, .targets = R->targets};
      double loss;
      int r = tc_dev_forward(R->dev, &b, &loss, NULL);
      if (r < 0) return r;
      sum += (float)loss;
    }
    *ret_loss = sum / nb;
    *ret_acc = NAN;
    return 0;
  }
  const struct tc_images *t = R->test;
  for (uint32_t i = 0; i < t->n; i += (uint32_t)B) {
    int n = t->n - i < (uint32_t)B ? (int)(t->n - i) : B;
    struct tc_batch b = {.B = n, .inputs = t->x + (size_t)i * TC_IMAGE_PIXELS, .targets = t->y + i};
    double loss;
    int64_t right = 0;
    int r = tc_dev_forward(R->dev, &b, &loss, &right);
    if (r < 0) return r;
    sum += (double)(float)loss * n;
    correct += right;
    count += n;
  }
  *ret_loss = sum / (double)count;
  *ret_acc = R->ops->counts_correct ? (double)correct / (double)count : NAN;
  return 0;
}

/* Fills the next training batch from the live data position in R->meta. */
void tc_loop_next_batch(struct run *R, int B) {
  if (R->ops->data == TC_DATA_TEXT) {
    tc_text_sample(R->text, &R->meta.rng_data, B, (int)R->shape.tokens, R->tokens, R->targets);
    R->meta.data_cursor += (uint64_t)B;
    return;
  }
  const struct tc_images *t = R->train;
  for (int i = 0; i < B; i++) {
    if (R->meta.data_cursor >= t->n) {
      R->meta.data_epoch++;
      R->meta.data_cursor = 0;
      tc_images_perm(R->perm, t->n, R->meta.seed, R->meta.data_epoch);
    }
    uint32_t k = R->perm[R->meta.data_cursor++];
    memcpy(R->inputs + (size_t)i * TC_IMAGE_PIXELS, t->x + (size_t)k * TC_IMAGE_PIXELS,
           sizeof(float) * TC_IMAGE_PIXELS);
    R->targets[i] = t->y[k];
  }
}

/* Tokens, inputs, targets of the batch, each as far as the rows have them. */
void tc_loop_dump_batch(struct run *R, int B) {
  if (!R->dump_batches) return;
  const struct tc_row_shape *s = &R->shape;
  if (s->tokens) fwrite(R->tokens, sizeof(int32_t), (size_t)B * s->tokens, R->dump_batches);
  if (s->inputs) fwrite(R->inputs, sizeof(float), (size_t)B * s->inputs, R->dump_batches);
  fwrite(R->targets, sizeof(int32_t), (size_t)B * s->targets, R->dump_batches);
  fflush(R->dump_batches);
}
