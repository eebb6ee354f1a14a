/* The gpt model's configuration: shared by its CPU path (tc_gpt.c) and its
 * CUDA path (cuda/tc_cuda_gpt.cu). */
#ifndef TC_GPT_H
#define TC_GPT_H

#include <stdint.h>

struct tc_gpt_config {
  uint32_t layers; /* transformer blocks */
  uint32_t heads;
  uint32_t dim;    /* embedding width C */
  uint32_t ctx;    /* context length T */
  uint32_t vocab;  /* V, distinct bytes of the data */
};

#endif
