/* The CUDA backend of the training core: device kernels, cuBLAS products and
 * the device copy of a model.
 *
 * Everything here is callable from C; no CUDA type crosses this header, so C
 * files (train_loop.c, the gpu tests) include it without the CUDA headers.
 * Pointers named d_* are device memory. Op functions follow tc_ops.h's
 * contract on device buffers: the same shapes, the same "+=" accumulation into
 * parameter gradients, the same fixed reduction order for a given shape (no
 * atomics anywhere), so one seed gives the same numbers on the same GPU.
 *
 * Errors: every function returns >= 0 or SL_ECUDA (CUDA runtime or cuBLAS,
 * message logged once under topic "train.cuda") or -EINVAL / -ENOMEM. */
#ifndef TC_CUDA_H
#define TC_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "tc_model.h"

/* Foreign error spaces: cudaError_t and cublasStatus_t (passed as int) to
 * SL_ECUDA, logging the library's message with `what`. 0 (success) maps to 0. */
int tc_err_from_cuda(int cuda_err, const char *what);
int tc_err_from_cublas(int cublas_status, const char *what);

/* Number of usable GPUs: 0 when the machine has none or no NVIDIA driver at
 * all, SL_ECUDA for any other runtime error (a driver too old for this
 * toolkit, a broken device node). Logs nothing: callers decide. */
int tc_cuda_device_count(void);
/* Short description of the current device ("NVIDIA H100 80GB HBM3, sm_90"). */
const char *tc_cuda_device_name(char *buf, size_t size);

/* ---- memory (for the model and the tests) ---- */
int tc_cuda_alloc(void **ret_d, size_t bytes);
void tc_cuda_free(void *d);
int tc_cuda_to_device(void *d_dst, const void *src, size_t bytes);
int tc_cuda_to_host(void *dst, const void *d_src, size_t bytes);
int tc_cuda_memset0(void *d, size_t bytes);

/* ---- op context: device, stream, cuBLAS handle, reduction scratch ---- */
struct tc_cuda_ctx;

/* bf16 != 0: matrix products round their operands to bf16 copies and
 * accumulate in fp32 on tensor cores; attention stores its (B,H,T,T) scores,
 * probabilities and their gradients in bf16. The other kernels, activations,
 * gradients and optimizer state stay fp32 (the fp32 params are the master
 * weights). bf16 == 0: plain fp32 products (no TF32). */
int tc_cuda_ctx_new(int device, int bf16, struct tc_cuda_ctx **ret);
struct tc_cuda_ctx *tc_cuda_ctx_free(struct tc_cuda_ctx *ctx);
/* bf16 contexts round each product's operands to bf16 copies. These keep a
 * copy beyond one product: tc_cu_keep_bf16 names dst (cap bf16 elements of
 * device memory the caller owns) as the home of src's copy. The next rounding
 * of src (its first n <= cap floats) goes there, and later products whose
 * operands lie inside those n floats read it instead of rounding again, until
 * tc_cu_keep_reset. fixed != 0: dst already holds the copy of all cap floats
 * and the caller keeps it so (a model's parameters, mirrored by its AdamW
 * steps); a reset leaves it. The caller must not change src's floats while
 * its copy is in use. */
int tc_cu_keep_bf16(struct tc_cuda_ctx *ctx, const float *src, size_t cap, void *dst, int fixed);
void tc_cu_keep_reset(struct tc_cuda_ctx *ctx);
/* src's floats change by other means than the ops of this header: its kept
 * copy (not a fixed one) is stale until the next rounding. The ops that write
 * a kept buffer refresh or drop its copy themselves. */
void tc_cu_keep_drop(struct tc_cuda_ctx *ctx, const float *src);
/* dst (n bf16) = the n floats at src rounded to nearest even. */
int tc_cu_round_bf16(struct tc_cuda_ctx *ctx, void *dst, const float *src, size_t n);
/* The cudaStream_t all ops of ctx run on (for NCCL). */
void *tc_cuda_ctx_stream(struct tc_cuda_ctx *ctx);
int tc_cuda_ctx_sync(struct tc_cuda_ctx *ctx);

/* ---- ops on device buffers (see tc_ops.h for the math) ---- */
enum tc_cu_prec { TC_CU_CTX = 0, TC_CU_FP32 = 1 }; /* TC_CU_CTX: the context's precision */

/* Row-major C (M,N) = alpha op(A) op(B) + beta C (tc_sgemm's convention). */
int tc_cu_gemm(struct tc_cuda_ctx *ctx, int ta, int tb, int M, int N, int K, float alpha,
               const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc,
               enum tc_cu_prec prec);
int tc_cu_linear_forward(struct tc_cuda_ctx *ctx, float *out, const float *inp, const float *w,
                         const float *bias, int N, int C, int OC);
/* out = inp w^T + bias + resid (resid (N,OC), may be out's neighbour in a
 * residual stream; bias may be NULL). */
int tc_cu_linear_forward_add(struct tc_cuda_ctx *ctx, float *out, const float *inp,
                             const float *w, const float *bias, const float *resid, int N, int C,
                             int OC);
/* dinp (N,C) overwritten (may be NULL); dw += ; dbias += (may be NULL). */
int tc_cu_linear_backward(struct tc_cuda_ctx *ctx, float *dinp, float *dw, float *dbias,
                          const float *dout, const float *inp, const float *w, int N, int C,
                          int OC);
/* bf16 contexts: the fc product of an MLP with GELU in its epilogue, and its
 * backward (cublasLt). tc_cu_lt_ready: whether cublasLt has an algorithm for
 * the forward (gelu_backward 0: N,C -> OC) or the backward through GELU
 * (gelu_backward 1, the next linear's N,C -> OC) with pre16 as the aux. */
int tc_cu_lt_ready(struct tc_cuda_ctx *ctx, int gelu_backward, int N, int C, int OC,
                   const void *pre16);
/* gelu(inp w^T + bias) into out's kept bf16 copy (out's floats are not
 * written), and the GELU input (N,OC) as bf16 at pre16. 1: not available
 * here (no cublasLt algorithm, or out has no kept copy); nothing written. */
int tc_cu_linear_gelu_forward(struct tc_cuda_ctx *ctx, float *out, void *pre16, const float *inp,
                              const float *w, const float *bias, int N, int C, int OC);
/* The backward of the linear (N,C) -> (N,OC) whose input is gelu(pre16):
 * dinp's kept bf16 copy = (dout w) * gelu'(pre16) (dinp's floats are not
 * written; dinp needs a kept copy), dw += , dbias += . */
int tc_cu_linear_backward_gelu(struct tc_cuda_ctx *ctx, float *dinp, const void *pre16, float *dw,
                               float *dbias, const float *dout, const float *inp, const float *w,
                               int N, int C, int OC);
/* Where out has a kept bf16 copy (bf16 contexts), only the copy is written:
 * the products that read out read it. */
int tc_cu_layernorm_forward(struct tc_cuda_ctx *ctx, float *out, float *mean, float *rstd,
                            const float *inp, const float *w, const float *b, int N, int C);
/* dinp +=, dw +=, db += */
int tc_cu_layernorm_backward(struct tc_cuda_ctx *ctx, float *dinp, float *dw, float *db,
                             const float *dout, const float *inp, const float *w,
                             const float *mean, const float *rstd, int N, int C);
int tc_cu_gelu_forward(struct tc_cuda_ctx *ctx, float *out, const float *inp, size_t n);
int tc_cu_gelu_backward(struct tc_cuda_ctx *ctx, float *dinp, const float *inp,
                        const float *dout, size_t n);
int tc_cu_relu_forward(struct tc_cuda_ctx *ctx, float *out, const float *inp, size_t n);
int tc_cu_relu_backward(struct tc_cuda_ctx *ctx, float *dinp, const float *inp,
                        const float *dout, size_t n);
int tc_cu_add(struct tc_cuda_ctx *ctx, float *out, const float *a, const float *b, size_t n);
/* Floats that attention's att and datt buffers need for this shape: the
 * (B,H,T,T) matrices, or for a bf16 context on sm_80 or later with head size
 * 16, 32, 64 or 128 (fused attention, no such matrices) B*H*T each. */
size_t tc_cu_attention_floats(const struct tc_cuda_ctx *ctx, int B, int T, int C, int H);
/* qkv (B,T,3C) -> out (B,T,C). att: the (B,H,T,T) probabilities, zero above
 * the diagonal (a bf16 context: bf16 probabilities in the buffer's first
 * half), or with fused attention the rows' log-sum-exp. */
int tc_cu_attention_forward(struct tc_cuda_ctx *ctx, float *out, float *att, const float *qkv,
                            int B, int T, int C, int H);
/* dqkv (B,T,3C) overwritten; out and att as the forward left them; datt:
 * scratch of tc_cu_attention_floats. */
int tc_cu_attention_backward(struct tc_cuda_ctx *ctx, float *dqkv, float *datt,
                             const float *dout, const float *out, const float *qkv,
                             const float *att, int B, int T, int C, int H);
/* Softmax cross-entropy over rows of logits (N,V), V <= 1024: losses (N) and
 * correct (N, 1 where argmax == target) on the device; dlogits (may alias
 * logits, may be NULL) = (softmax - onehot) * dscale. */
int tc_cu_softmax_xent(struct tc_cuda_ctx *ctx, float *dlogits, float *losses, int32_t *correct,
                       const float *logits, const int32_t *targets, int N, int V, float dscale);
int tc_cu_embed_forward(struct tc_cuda_ctx *ctx, float *out, const int32_t *tokens,
                        const float *wte, const float *wpe, int B, int T, int C);
/* dwte += onehot(tokens)^T dout (an exact fp32 product), dwpe += sum over B.
 * onehot: scratch of B*T*V floats. */
int tc_cu_embed_backward(struct tc_cuda_ctx *ctx, float *dwte, float *dwpe, float *onehot,
                         const float *dout, const int32_t *tokens, int B, int T, int C, int V);
/* Sum of squares of x (n) in double, in a fixed order; result on the host. */
int tc_cu_sumsq(struct tc_cuda_ctx *ctx, const float *x, size_t n, double *ret);
int tc_cu_scale(struct tc_cuda_ctx *ctx, float *x, size_t n, float s);
/* One AdamW update of n elements (tc_model_adamw's arithmetic): decay is the
 * factor 1 - lr*wd (1 for no decay), step_size = lr / (1 - beta1^t),
 * bc2_sqrt = sqrt(1 - beta2^t). p16 (may be NULL): n bf16 that get the new
 * parameters rounded (a kept copy of p). */
int tc_cu_adamw(struct tc_cuda_ctx *ctx, float *p, void *p16, const float *g, float *m, float *v,
                size_t n, float beta1, float beta2, float eps, float decay, float step_size,
                float bc2_sqrt);

/* ---- the device copy of a model ---- */
struct tc_cuda_model;

/* Owned device model for cfg with activations for batches up to max_batch
 * (per process), on device `device`. Buffers are zero until tc_cuda_model_put. */
int tc_cuda_model_new(const struct tc_config *cfg, int max_batch, int device, int bf16,
                      struct tc_cuda_model **ret);
struct tc_cuda_model *tc_cuda_model_free(struct tc_cuda_model *cm);
size_t tc_cuda_model_mem_bytes(const struct tc_cuda_model *cm);
size_t tc_cuda_model_n_params(const struct tc_cuda_model *cm);
struct tc_cuda_ctx *tc_cuda_model_ctx(struct tc_cuda_model *cm);
/* Device arrays in the layout of docs/internals/training.md. */
float *tc_cuda_model_params(struct tc_cuda_model *cm);
float *tc_cuda_model_grads(struct tc_cuda_model *cm);
float *tc_cuda_model_m(struct tc_cuda_model *cm);
float *tc_cuda_model_v(struct tc_cuda_model *cm);

/* Host model (same config) -> device: params, m, v and adam_t. Borrows host. */
int tc_cuda_model_put(struct tc_cuda_model *cm, const struct tc_model *host);
/* After the device params were written other than by put and AdamW (a
 * broadcast): refreshes what is derived from them (a bf16 context's copy). */
int tc_cuda_model_params_written(struct tc_cuda_model *cm);
/* Device -> host model: params, m, v and adam_t (what a checkpoint holds). */
int tc_cuda_model_get(struct tc_cuda_model *cm, struct tc_model *host);
/* Device gradients -> host array of n_params floats. */
int tc_cuda_model_get_grads(struct tc_cuda_model *cm, float *grads);
uint64_t tc_cuda_model_adam_t(const struct tc_cuda_model *cm);
void tc_cuda_model_set_adam_t(struct tc_cuda_model *cm, uint64_t t);

/* Forward pass over a host batch of b->B rows. With targets the loss is the
 * sum of this batch's per-position losses divided by the positions of
 * `global_B` rows (global_B = b->B for a single process; the whole batch over
 * all ranks in data parallelism), so summing it over ranks gives the mean;
 * the gradient of the next backward is of that same quantity. *ret_loss gets
 * it, *ret_correct (may be NULL) the rows with argmax == target for a model
 * that counts them (0 otherwise). */
int tc_cuda_forward(struct tc_cuda_model *cm, const struct tc_batch *b, int global_B,
                    double *ret_loss, int64_t *ret_correct);
/* Gradients of the last training forward into the device grads (overwritten). */
int tc_cuda_backward(struct tc_cuda_model *cm);
/* Global L2 norm (double, fixed order) and clipping as tc_model_clip_grads. */
int tc_cuda_clip_grads(struct tc_cuda_model *cm, float max_norm, double *ret_norm);
/* AdamW as tc_model_adamw (adam_t++). */
int tc_cuda_adamw(struct tc_cuda_model *cm, const struct tc_adamw *hp, float lr);
/* A generating model: logits rows [0, rows) of the last forward without
 * targets -> host (rows, classes). */
int tc_cuda_logits(struct tc_cuda_model *cm, float *logits, size_t rows);

#ifdef __cplusplus
}
#endif

#endif
