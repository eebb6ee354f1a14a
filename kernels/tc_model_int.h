/* Private to the model files: what a model's ops use to build its layout and
 * report its loss. */
#ifndef TC_MODEL_INT_H
#define TC_MODEL_INT_H

#include "tc_model.h"

/* The next tensor of m's layout (rows, cols; cols 0 for 1-D), packed after
 * the previous one; 2-D tensors take weight decay. */
void tc_model_add_tensor(struct tc_model *m, const char *name, uint32_t rows, uint32_t cols);

/* The loss of `rows` rows of a batch of global_rows: their losses summed in
 * row order (double), divided by global_rows. With rows == global_rows it is
 * tc_softmax_xent's mean, bit for bit. */
double tc_model_loss_share(const float *losses, int rows, int global_rows);

#endif
