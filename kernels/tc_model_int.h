/* Private to the model files: activation buffers and per-model entry points. */
#ifndef TC_MODEL_INT_H
#define TC_MODEL_INT_H

#include "tc_model.h"

struct gpt_layer_acts {
  float *ln1, *ln1_mean, *ln1_rstd; /* (N,C) (N) (N) */
  float *qkv;                       /* (N,3C) */
  float *att;                       /* (B,H,T,T) */
  float *atty;                      /* (N,C) */
  float *res2;                      /* (N,C) residual after attention */
  float *ln2, *ln2_mean, *ln2_rstd; /* (N,C) (N) (N) */
  float *fch, *fch_gelu;            /* (N,4C) (N,4C) */
  float *res3;                      /* (N,C) block output */
};

struct tc_acts {
  size_t bytes;
  int B;          /* batch of the last forward */
  /* gpt (N = max_batch * ctx) */
  int32_t *tokens, *targets; /* (N) */
  float *encoded;            /* (N,C) */
  struct gpt_layer_acts *layer;
  float *lnf, *lnf_mean, *lnf_rstd; /* (N,C) (N) (N) */
  float *logits;                    /* (N,V); dlogits after a training forward */
  float *losses;                    /* (N) */
  float *dres, *dC, *d3C, *d4C;     /* backward scratch */
  float *att_scratch;               /* T*T per thread */
  int att_scratch_threads;
  /* mlp (B = max_batch); layer i maps width w[i] -> w[i+1] */
  float **z;      /* pre-activations (B, w[i+1]) */
  float **h;      /* post-ReLU (B, w[i+1]), hidden layers only */
  const float *x; /* inputs of the last forward, borrowed */
  int32_t *labels; /* (B) */
  float *da, *dz;  /* (B, max width) */
};

int tc_gpt_acts_new(struct tc_model *m);
void tc_gpt_acts_free(struct tc_acts *a, const struct tc_config *cfg);
int tc_gpt_forward(struct tc_model *m, const struct tc_batch *b, float *ret_loss);
int tc_gpt_backward(struct tc_model *m);

int tc_mlp_acts_new(struct tc_model *m);
void tc_mlp_acts_free(struct tc_acts *a, const struct tc_config *cfg);
int tc_mlp_forward(struct tc_model *m, const struct tc_batch *b, float *ret_loss);
int tc_mlp_backward(struct tc_model *m);

/* The loss of `rows` rows of a batch of global_rows: their losses summed in
 * row order (double), divided by global_rows. With rows == global_rows it is
 * tc_softmax_xent's mean, bit for bit. */
double tc_model_loss_share(const float *losses, int rows, int global_rows);

/* Tensor lookup by name; the layout order is fixed in tc_model_layout. */
float *tc_model_tensor(struct tc_model *m, float *base, const char *name);

#endif
