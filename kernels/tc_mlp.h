/* The mlp classifier's configuration: shared by its CPU path (tc_mlp.c) and
 * its CUDA path (cuda/tc_cuda_mlp.cu). */
#ifndef TC_MLP_H
#define TC_MLP_H

#include <stdint.h>

#define TC_MLP_IN 784
#define TC_MLP_CLASSES 10

struct tc_mlp_config {
  uint32_t layers;  /* hidden layers */
  uint32_t hidden;  /* hidden width */
  uint32_t in_dim;  /* 784 */
  uint32_t classes; /* 10 */
};

/* Width of layer boundary i: in_dim, hidden (x layers), classes. */
static inline uint32_t tc_mlp_width(const struct tc_mlp_config *c, uint32_t i) {
  return i == 0 ? c->in_dim : i <= c->layers ? c->hidden : c->classes;
}

#endif
