/* Layer kernels of the CPU path: forward and backward of every op the models use.
 *
 * Conventions: row-major float32; weights are (out, in) like torch.nn.Linear;
 * backward functions ACCUMULATE into parameter gradients (dw, db) and into
 * dinp where the comment says "+=", so the caller zeroes gradient buffers once
 * per step. All reductions run in a fixed order that does not depend on the
 * thread count, so results are bit-identical for any --threads. */
#ifndef TC_OPS_H
#define TC_OPS_H

#include <stddef.h>
#include <stdint.h>

enum tc_trans { TC_N = 0, TC_T = 1 };

/* C (M,N) = alpha * op(A) op(B) + beta * C, row-major, through CBLAS. */
void tc_sgemm(enum tc_trans ta, enum tc_trans tb, int M, int N, int K, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta, float *C,
              int ldc);
/* The same product in plain C (double accumulation): the reference for tests. */
void tc_sgemm_ref(enum tc_trans ta, enum tc_trans tb, int M, int N, int K, float alpha,
                  const float *A, int lda, const float *B, int ldb, float beta, float *C,
                  int ldc);
/* Threads for CBLAS and for the op-level parallel loops (tc_par). */
void tc_set_threads(int n);
int tc_get_threads(void);

/* out (N,OC) = inp (N,C) w^T (OC,C) + bias (OC); bias may be NULL. */
void tc_linear_forward(float *out, const float *inp, const float *w, const float *bias,
                       int N, int C, int OC);
/* dinp (N,C) = dout w (or += when acc_dinp); dw (OC,C) += dout^T inp; dbias += colsum.
 * dinp or dbias may be NULL. */
void tc_linear_backward(float *dinp, float *dw, float *dbias, const float *dout,
                        const float *inp, const float *w, int N, int C, int OC, int acc_dinp);

/* out, mean, rstd (N): LayerNorm over C with eps 1e-5. */
void tc_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int N, int C);
/* dinp (N,C) +=; dw, db (C) +=. */
void tc_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                           const float *inp, const float *w, const float *mean,
                           const float *rstd, int N, int C);

/* GELU, tanh approximation. dinp = dout * gelu'(inp) (overwrite). */
void tc_gelu_forward(float *out, const float *inp, size_t n);
void tc_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void tc_relu_forward(float *out, const float *inp, size_t n);
/* dinp = dout where inp > 0 else 0 (overwrite; dinp may alias dout). */
void tc_relu_backward(float *dinp, const float *inp, const float *dout, size_t n);

/* Causal multi-head self-attention.
 * qkv (B,T,3C) holds q | k | v, head h at columns [h*hs, (h+1)*hs) of each.
 * out (B,T,C); att (B,H,T,T) softmax probabilities, zero above the diagonal. */
void tc_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                          int H);
/* dqkv (B,T,3C) overwritten. scratch: T*T floats per thread (tc_attention_scratch). */
void tc_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                           const float *att, int B, int T, int C, int H);
size_t tc_attention_scratch_floats(int T);

/* Softmax cross-entropy over rows of logits (N,V). Writes each row's loss to
 * losses (N) when non-NULL and returns the mean loss (summed in double, in row
 * order). targets < 0 are refused by the caller. When dlogits is non-NULL it
 * receives (softmax - onehot) * dscale; it may alias logits. When ret_correct
 * is non-NULL it receives how many rows have argmax == target. */
double tc_softmax_xent(float *dlogits, float *losses, const float *logits,
                       const int32_t *targets, int N, int V, float dscale,
                       int64_t *ret_correct);

/* out (B,T,C) = wte[tok] + wpe[t]. */
void tc_embed_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                      int B, int T, int C);
/* dwte += scatter(dout), dwpe += sum over B; fixed order. */
void tc_embed_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                       int B, int T, int C);

/* out = a + b (n). */
void tc_add(float *out, const float *a, const float *b, size_t n);

#endif
