/* What spotlab-train's run files share: train_loop.c (the training loop,
 * eval and sample, metrics, checkpoints) and train_loop_data.c (what
 * depends on the data kind: loading, batches, evaluation). Nothing else
 * includes this header. */
#ifndef TC_TRAIN_LOOP_INT_H
#define TC_TRAIN_LOOP_INT_H

#include "tc_ckpt.h"
#include "tc_data.h"
#include "tc_model.h"
#include "tc_writer.h"
#include "train.h"
#include "train_dev.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The metrics file: JSON lines, written under mu (the checkpoint writer
 * thread reports too). */
struct metrics {
  FILE *f;
  pthread_mutex_t mu;
};

struct run {
  const struct tc_opts *o;
  struct metrics mt;
  struct tc_config cfg;
  const struct tc_model_ops *ops; /* cfg's model */
  struct tc_row_shape shape;      /* of cfg's batch rows */
  struct tc_model *model; /* host buffers (and the CPU path's activations) */
  struct tc_dev *dev;     /* the step on the chosen device; rank and world size */
  int batch;              /* global batch rows (all ranks) */
  struct tc_text *text;
  struct tc_images *train, *test;
  uint32_t *perm;
  struct tc_ckpt_meta meta; /* live: step, RNGs, data position */
  struct tc_ckpt_writer *writer;
  uint64_t last_ckpt_step;
  int have_ckpt;
  char ckpt_error[1024];    /* why the newest checkpoint write failed; "" after one that did not */
  int set_aside_corrupt;    /* a resume: corrupt checkpoints it skips are renamed out of the way */
  char aside_error[640];    /* why one of them could not be; "" when all were */
  int32_t *tokens, *targets; /* (B, shape.tokens), (B, shape.targets) */
  float *inputs;             /* (B, shape.inputs) */
  FILE *dump_batches;
};

/* ---- train_loop_data.c ---- */
/* Loads the data the model takes and fits R->cfg to it (a text model takes
 * its vocabulary); R->cfg's model is set. for_train: the training set too. */
int tc_loop_load_data(struct run *R, int for_train, char *err, size_t es);
/* Batch buffers for B rows of R->shape: 0 or -ENOMEM. */
int tc_loop_alloc_batch(struct run *R, int B);
/* Mean held-out loss; a model that counts correct rows also gives accuracy
 * (NAN otherwise). */
int tc_loop_evaluate(struct run *R, double *ret_loss, double *ret_acc);
/* Fills the next training batch (B rows) from the live data position in R->meta. */
void tc_loop_next_batch(struct run *R, int B);
/* With --dump-batches: the batch's rows written to R->dump_batches. */
void tc_loop_dump_batch(struct run *R, int B);

#endif
