/* Training data: byte-level text and Fashion-MNIST (IDX, gzip).
 *
 * Loaders never crash on bad input: every failure returns a negative code and
 * a message naming the file in err. Text vocabularies are the sorted set of
 * distinct bytes in the file; the held-out split is the last 10%. */
#ifndef TC_DATA_H
#define TC_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "tc_rng.h"

struct tc_text {
  uint8_t *ids;      /* (n) token ids */
  size_t n, n_train; /* [0,n_train) trains, [n_train,n) evaluates */
  uint32_t vocab;
  uint8_t symbols[256]; /* id -> byte */
  int16_t index[256];   /* byte -> id, -1 when absent */
};

/* Resolves a data name to a path: "moby-dick" -> $SPOTLAB_DATA_DIR/moby-dick.txt,
 * else the npm package under SPOTLAB_SOURCE_ROOT/.deps; anything else is a path. */
int tc_text_resolve(const char *name, char *path, size_t size, char *err, size_t err_size);
/* Owned text in *ret; needs ctx+2 bytes in each split. */
int tc_text_load(const char *path, uint32_t ctx, struct tc_text **ret, char *err,
                 size_t err_size);
struct tc_text *tc_text_free(struct tc_text *t);
/* B random windows of the train split: tokens, targets (B,T). */
void tc_text_sample(const struct tc_text *t, struct tc_rng *rng, int B, int T,
                    int32_t *tokens, int32_t *targets);
/* Evaluation batch i of n_batches: windows evenly spaced over the held-out split. */
void tc_text_eval_batch(const struct tc_text *t, int i, int n_batches, int B, int T,
                        int32_t *tokens, int32_t *targets);

/* Reads one gzip IDX file of unsigned bytes with `ndims` dimensions into owned
 * *ret_data, dims into ret_dims. Checks magic, every dimension and the exact
 * payload size (truncated or trailing bytes are errors). */
int tc_idx_load(const char *path, int ndims, uint8_t **ret_data, uint32_t ret_dims[3],
                char *err, size_t err_size);

#define TC_IMAGE_PIXELS 784 /* 28 x 28 */
#define TC_IMAGE_CLASSES 10

struct tc_images {
  float *x;   /* (n,784) pixels / 255 */
  int32_t *y; /* (n) labels 0..9 */
  uint32_t n;
};

/* "fashion-mnist" -> $SPOTLAB_DATA_DIR/fashion-mnist if set, else
 * /usr/share/datasets/fashion-mnist; anything else is a directory. */
int tc_images_resolve(const char *name, char *dir, size_t size);
/* split: "train" or "t10k". */
int tc_images_load(const char *dir, const char *split, struct tc_images **ret, char *err,
                   size_t err_size);
struct tc_images *tc_images_free(struct tc_images *im);
/* Permutation of [0,n) for epoch `epoch` of a run seeded with `seed`. */
void tc_images_perm(uint32_t *perm, uint32_t n, uint64_t seed, uint64_t epoch);

#endif
