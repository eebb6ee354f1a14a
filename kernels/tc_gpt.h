/* The gpt model's configuration: shared by its CPU path (tc_gpt.c) and its
 * CUDA path (cuda/tc_cuda_gpt.cu). */
#ifndef TC_GPT_H
#define TC_GPT_H

#include <stdint.h>

#include "tc_model.h"

struct tc_gpt_config {
  uint32_t layers; /* transformer blocks */
  uint32_t heads;
  uint32_t dim;    /* embedding width C */
  uint32_t ctx;    /* context length T */
  uint32_t vocab;  /* V, distinct bytes of the data */
};

/* One transformer block's tensors within a buffer laid out as the model's
 * tensors (params, grads, moments, or a device copy of them). */
struct tc_gpt_block {
  float *ln1_w, *ln1_b, *attn_w, *attn_b, *proj_w, *proj_b;
  float *ln2_w, *ln2_b, *fc_w, *fc_b, *fcproj_w, *fcproj_b;
};

/* Block l's tensors start at tensor index 2 + 12*l, in struct order. */
static inline struct tc_gpt_block tc_gpt_block_at(const struct tc_tensor *tensors, float *base,
                                                  uint32_t l) {
  const struct tc_tensor *t = &tensors[2 + 12 * l];
  struct tc_gpt_block b;
  float **f[] = {&b.ln1_w, &b.ln1_b, &b.attn_w, &b.attn_b, &b.proj_w, &b.proj_b,
                 &b.ln2_w, &b.ln2_b, &b.fc_w,   &b.fc_b,   &b.fcproj_w, &b.fcproj_b};
  for (int i = 0; i < 12; i++) *f[i] = base + t[i].offset;
  return b;
}

#endif
