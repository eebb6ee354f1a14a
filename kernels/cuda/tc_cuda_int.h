/* What the CUDA sources of the training core share inside the backend: the
 * op context, the error macros, launch sizes, warp reductions, bf16 operand
 * copies, the typed cuBLAS product and column sums. CUDA C++ only; C sees tc_cuda.h. */
#ifndef TC_CUDA_INT_H
#define TC_CUDA_INT_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "tc_cuda.h"

#define TOPIC "train.cuda"

#define CU(call, what) tc_err_from_cuda((int)(call), what)
#define LAUNCHED(what) tc_err_from_cuda((int)cudaGetLastError(), what)

typedef __nv_bfloat16 bf16_t;

/* column sums: row chunks of the first pass; the gradient's sum of squares:
 * blocks and threads of its first pass */
enum { COL_CHUNKS = 128, SUMSQ_BLOCKS = 1024, SUMSQ_THREADS = 256 };

/* bf16 scratch: operand copies for products, and attention's own inputs */
enum { S16_A, S16_B, S16_QKV, S16_DOUT, S16_BIAS, S16_N };

/* A bf16 copy that outlives one product (tc_cu_keep_bf16): src's first
 * `filled` floats are rounded at dst. */
struct tc_keep {
  uintptr_t src;
  size_t cap, filled;
  bf16_t *dst;
  int fixed;
};

/* The cublasLt products of a linear (N,C) -> (N,OC) with work in their
 * epilogue: the forward with the bias (and a residual), the same with a
 * bf16 output, the forward with the bias and GELU (bf16 output, the GELU
 * input kept as aux), and the input gradient times GELU's derivative at that
 * aux (bf16 output). */
enum tc_lt_kind { LT_BIAS, LT_BIAS16, LT_GELU, LT_DGELU };

/* A cublasLt product planned for one kind and (N, C, OC) linear shape. */
struct tc_lt_plan {
  int kind, N, C, OC, ok;
  int bias16; /* the epilogue's bias is bf16 (cublasLt has no algorithm for fp32) */
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t lay[3]; /* weights, the other operand, output */
  cublasLtMatmulAlgo_t algo;
};

#define LT_WORKSPACE ((size_t)32 << 20)

struct tc_cuda_ctx {
  int device, bf16;
  int sm; /* compute capability, 10 major + minor */
  cudaStream_t stream;
  cublasHandle_t blas;
  bf16_t *s16[S16_N];
  size_t s16_cap[S16_N];
  float *d_cols;    /* column partial sums: COL_CHUNKS x cols_cap */
  size_t cols_cap;
  bf16_t *ones16;   /* ones_cap bf16 ones: bias gradients as products */
  size_t ones_cap;
  double *d_sumsq;  /* SUMSQ_BLOCKS partials + 1 total */
  struct tc_keep *keep;
  int n_keep, keep_cap;
  cublasLtHandle_t lt; /* bf16 contexts: linear forwards with the bias fused */
  void *lt_ws;
  struct tc_lt_plan *plans;
  int n_plans;
};


static inline unsigned blocks_for(size_t n, unsigned threads) {
  size_t b = (n + threads - 1) / threads;
  return (unsigned)(b ? b : 1);
}

/* ---- warp reductions (butterfly: every lane ends with the same value) ---- */

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/* A bf16 copy of the n floats at `in`: a kept copy (tc_cu_keep_bf16) that
 * holds them or is to, else scratch slot `slot` (the stream orders a slot's
 * reuse after the products that read it). */
int tc_cu_bf16_copy(struct tc_cuda_ctx *c, int slot, const float *in, size_t n,
                    const bf16_t **ret);

/* Row-major C = alpha op(A) op(B) + beta C with A and B of type ab (fp32 or
 * bf16) and C of type ct, accumulated in fp32; count products with strides
 * sa, sb, sc (count 1: strides unused). */
int tc_cu_gemm_raw(struct tc_cuda_ctx *c, int ta, int tb, int M, int N, int K, float alpha,
                   const void *A, int lda, long long sa, const void *B, int ldb, long long sb,
                   float beta, void *C, int ldc, long long sc, int count, cudaDataType_t ab,
                   cudaDataType_t ct);

/* Column sums in an order fixed by the shape, added to out (C floats) from
 * the row-major (N,C) a: plain sums (tc_cu_colsum_acc); sums of a times
 * xhat = (x - mean) * rstd, with the plain ones into out2 when it is not NULL
 * (tc_cu_colsum_acc2, x NULL: plain sums); of a bf16 a as a product with
 * ones (tc_cu_colsum16_acc). */
int tc_cu_colsum_acc(struct tc_cuda_ctx *c, float *out, const float *a, int N, int C);
int tc_cu_colsum_acc2(struct tc_cuda_ctx *c, float *out, float *out2, const float *a,
                      const float *x, const float *mean, const float *rstd, int N, int C);
int tc_cu_colsum16_acc(struct tc_cuda_ctx *c, float *out, const bf16_t *a, int N, int C);

/* Fused causal attention of a bf16 context (tc_cuda_flash.cu) on sm_80 and
 * later, for head sizes where tc_cu_flash_ok: qkv and dout16 are the bf16 copies; lse and
 * D hold B*H*T floats each (the rows' log-sum-exp, and dout . out). */
int tc_cu_flash_ok(int hs);
/* The kept copy's home for the n floats at out when the kernel about to
 * write them writes their bf16 copy too (it then counts as made), else NULL. */
bf16_t *tc_cu_keep_claim(struct tc_cuda_ctx *c, const float *out, size_t n);
/* Whether out has a kept copy that tc_cu_keep_claim would give for n floats. */
int tc_cu_keep_has(const struct tc_cuda_ctx *c, const float *out, size_t n);
int tc_cu_flash_forward(struct tc_cuda_ctx *c, float *out, float *lse, const bf16_t *qkv, int B,
                        int T, int C, int H);
int tc_cu_flash_backward(struct tc_cuda_ctx *c, float *dqkv, float *D, const float *dout,
                         const float *out, const bf16_t *qkv, const bf16_t *dout16,
                         const float *lse, int B, int T, int C, int H);

#endif
