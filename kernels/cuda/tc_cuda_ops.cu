/* The CUDA backend's context, memory and errors, its bf16 operand copies,
 * cuBLAS products and column sums (see tc_cuda.h); the linear layer is
 * tc_cuda_linear.cu's, the elementwise and row-wise kernels
 * tc_cuda_layers.cu's, attention tc_cuda_attention.cu's and
 * tc_cuda_flash.cu's.
 *
 * Invariants: every reduction has an order fixed by the shape alone (warp
 * butterflies, per-chunk partial sums finished in chunk order, block trees);
 * no atomics. Products go through cuBLAS on the context's stream with the
 * context's compute type, so a run is bit-repeatable on the same GPU model
 * and toolkit. All kernels compute in fp32.
 *
 * bf16 contexts: each product's operands are bf16 copies (kept ones, or
 * rounded into the context's scratch) multiplied on bf16 tensor cores with
 * fp32 accumulation; outputs are fp32, except where only a kept bf16 copy is
 * read (then the product or kernel writes that copy alone). Unfused
 * attention keeps its (B,H,T,T) matrices in bf16. */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tc_cuda.h"
#include "tc_cuda_int.h"

extern "C" {
#include "sl_err.h"
#include "sl_log.h"
}

extern "C" int tc_err_from_cuda(int e, const char *what) {
  if (e == (int)cudaSuccess) return 0;
  sl_err(TOPIC, "%s: %s (%s)", what, cudaGetErrorString((cudaError_t)e),
         cudaGetErrorName((cudaError_t)e));
  return SL_ECUDA;
}

extern "C" int tc_err_from_cublas(int s, const char *what) {
  if (s == (int)CUBLAS_STATUS_SUCCESS) return 0;
  sl_err(TOPIC, "%s: cuBLAS %s (%s)", what, cublasGetStatusString((cublasStatus_t)s),
         cublasGetStatusName((cublasStatus_t)s));
  return SL_ECUDA;
}


extern "C" int tc_cuda_device_count(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  (void)cudaGetLastError(); /* clear the sticky error for a later call */
  /* no device, or no driver at all (cudart reports a missing libcuda as an
   * insufficient driver): zero GPUs; anything else is a fault worth a failure */
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) return 0;
  return e == cudaSuccess ? n : SL_ECUDA;
}

extern "C" const char *tc_cuda_device_name(char *buf, size_t size) {
  int dev = 0;
  cudaDeviceProp p;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess)
    snprintf(buf, size, "unknown device");
  else
    snprintf(buf, size, "%s, sm_%d%d", p.name, p.major, p.minor);
  return buf;
}

extern "C" int tc_cuda_alloc(void **ret_d, size_t bytes) {
  void *p = NULL;
  int r = CU(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
  if (r < 0) return r;
  *ret_d = p;
  return 0;
}

extern "C" void tc_cuda_free(void *d) {
  if (d) cudaFree(d);
}

extern "C" int tc_cuda_to_device(void *d_dst, const void *src, size_t bytes) {
  return CU(cudaMemcpy(d_dst, src, bytes, cudaMemcpyHostToDevice), "copy to device");
}

extern "C" int tc_cuda_to_host(void *dst, const void *d_src, size_t bytes) {
  return CU(cudaMemcpy(dst, d_src, bytes, cudaMemcpyDeviceToHost), "copy to host");
}

extern "C" int tc_cuda_memset0(void *d, size_t bytes) {
  return CU(cudaMemset(d, 0, bytes), "cudaMemset");
}

extern "C" int tc_cuda_ctx_new(int device, int bf16, struct tc_cuda_ctx **ret) {
  struct tc_cuda_ctx *c = (struct tc_cuda_ctx *)calloc(1, sizeof *c);
  if (!c) return -ENOMEM;
  c->device = device;
  c->bf16 = bf16;
  int r = CU(cudaSetDevice(device), "cudaSetDevice");
  int major = 0, minor = 0;
  if (r == 0)
    r = CU(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
           "compute capability");
  if (r == 0)
    r = CU(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
           "compute capability");
  c->sm = major * 10 + minor;
  /* a blocking stream: the plain cudaMemcpy of the copy helpers orders with it */
  if (r == 0) r = CU(cudaStreamCreate(&c->stream), "stream");
  if (r == 0) r = tc_err_from_cublas(cublasCreate(&c->blas), "cublasCreate");
  if (r == 0) r = tc_err_from_cublas(cublasSetStream(c->blas, c->stream), "cublasSetStream");
  /* fp32 products stay fp32 (no TF32); bf16 contexts pass bf16 operands,
   * which the default mode multiplies on tensor cores */
  if (r == 0)
    r = tc_err_from_cublas(cublasSetMathMode(c->blas, bf16 ? CUBLAS_DEFAULT_MATH
                                                           : CUBLAS_PEDANTIC_MATH),
                           "cublasSetMathMode");
  if (r == 0)
    r = CU(cudaMalloc((void **)&c->d_sumsq, sizeof(double) * (SUMSQ_BLOCKS + 1)), "cudaMalloc");
  if (r == 0 && bf16) { /* products with the bias in their epilogue */
    r = tc_err_from_cublas(cublasLtCreate(&c->lt), "cublasLtCreate");
    if (r == 0) r = CU(cudaMalloc(&c->lt_ws, LT_WORKSPACE), "cudaMalloc");
  }
  if (r < 0) {
    tc_cuda_ctx_free(c);
    return r;
  }
  *ret = c;
  return 0;
}

extern "C" struct tc_cuda_ctx *tc_cuda_ctx_free(struct tc_cuda_ctx *c) {
  if (!c) return NULL;
  if (c->blas) cublasDestroy(c->blas);
  for (int i = 0; i < c->n_plans; i++) {
    struct tc_lt_plan *p = &c->plans[i];
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    for (int k = 0; k < 3; k++)
      if (p->lay[k]) cublasLtMatrixLayoutDestroy(p->lay[k]);
  }
  free(c->plans);
  if (c->lt) cublasLtDestroy(c->lt);
  cudaFree(c->lt_ws);
  if (c->stream) cudaStreamDestroy(c->stream);
  cudaFree(c->d_cols);
  cudaFree(c->ones16);
  cudaFree(c->d_sumsq);
  for (int i = 0; i < S16_N; i++) cudaFree(c->s16[i]);
  free(c->keep);
  free(c);
  return NULL;
}

extern "C" void *tc_cuda_ctx_stream(struct tc_cuda_ctx *c) { return (void *)c->stream; }

extern "C" int tc_cuda_ctx_sync(struct tc_cuda_ctx *c) {
  return CU(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
}

static int cols_scratch(struct tc_cuda_ctx *c, size_t cols) {
  if (cols <= c->cols_cap) return 0;
  cudaFree(c->d_cols);
  c->d_cols = NULL;
  c->cols_cap = 0;
  int r = CU(cudaMalloc((void **)&c->d_cols, sizeof(float) * 2 * COL_CHUNKS * cols), "cudaMalloc");
  if (r == 0) c->cols_cap = cols;
  return r;
}

/* ---- products ---- */

__global__ void to_bf16(bf16_t *out, const float *in, size_t n) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16_rn(in[i]);
}

/* Four at a time: one 16-byte load and one 8-byte store per thread. */
__global__ void to_bf16x4(bf16_t *out, const float *in, size_t n4) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n4) return;
  float4 v = reinterpret_cast<const float4 *>(in)[i];
  __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
  uint2 w;
  w.x = *reinterpret_cast<uint32_t *>(&lo);
  w.y = *reinterpret_cast<uint32_t *>(&hi);
  reinterpret_cast<uint2 *>(out)[i] = w;
}

static int round_into(struct tc_cuda_ctx *c, bf16_t *out, const float *in, size_t n) {
  size_t head = 0;
  if ((uintptr_t)in % 16 == 0 && (uintptr_t)out % 8 == 0) {
    head = n / 4 * 4;
    if (head) to_bf16x4<<<blocks_for(head / 4, 256), 256, 0, c->stream>>>(out, in, head / 4);
  }
  if (n > head) to_bf16<<<blocks_for(n - head, 256), 256, 0, c->stream>>>(out + head, in + head, n - head);
  return LAUNCHED("round to bf16");
}

extern "C" int tc_cu_round_bf16(struct tc_cuda_ctx *c, void *dst, const float *src, size_t n) {
  return round_into(c, (bf16_t *)dst, src, n);
}

extern "C" int tc_cu_keep_bf16(struct tc_cuda_ctx *c, const float *src, size_t cap, void *dst,
                               int fixed) {
  if (c->n_keep == c->keep_cap) {
    int cap2 = c->keep_cap ? 2 * c->keep_cap : 16;
    struct tc_keep *k = (struct tc_keep *)realloc(c->keep, sizeof *k * (size_t)cap2);
    if (!k) return -ENOMEM;
    c->keep = k;
    c->keep_cap = cap2;
  }
  c->keep[c->n_keep++] = (struct tc_keep){(uintptr_t)src, cap, fixed ? cap : 0, (bf16_t *)dst,
                                          fixed != 0};
  return 0;
}

extern "C" void tc_cu_keep_drop(struct tc_cuda_ctx *c, const float *src) {
  for (int i = 0; i < c->n_keep; i++)
    if (c->keep[i].src == (uintptr_t)src && !c->keep[i].fixed) c->keep[i].filled = 0;
}

extern "C" void tc_cu_keep_reset(struct tc_cuda_ctx *c) {
  for (int i = 0; i < c->n_keep; i++)
    if (!c->keep[i].fixed) c->keep[i].filled = 0;
}

int tc_cu_keep_has(const struct tc_cuda_ctx *c, const float *out, size_t n) {
  for (int i = 0; i < c->n_keep; i++) {
    const struct tc_keep *k = &c->keep[i];
    if (k->src == (uintptr_t)out && !k->fixed && n <= k->cap) return 1;
  }
  return 0;
}

bf16_t *tc_cu_keep_claim(struct tc_cuda_ctx *c, const float *out, size_t n) {
  for (int i = 0; i < c->n_keep; i++) {
    struct tc_keep *k = &c->keep[i];
    if (k->src == (uintptr_t)out && !k->fixed && n <= k->cap) {
      k->filled = n;
      return k->dst;
    }
  }
  return NULL;
}

int tc_cu_bf16_copy(struct tc_cuda_ctx *c, int slot, const float *in, size_t n,
                     const bf16_t **ret) {
  uintptr_t a = (uintptr_t)in, e = a + n * sizeof(float);
  for (int i = 0; i < c->n_keep; i++) { /* a kept copy holds it, or is to */
    struct tc_keep *k = &c->keep[i];
    if (a >= k->src && e <= k->src + k->filled * sizeof(float)) {
      *ret = k->dst + (a - k->src) / sizeof(float);
      return 0;
    }
    if (a == k->src && !k->fixed && !k->filled && n <= k->cap) {
      int r = round_into(c, k->dst, in, n);
      if (r == 0) k->filled = n;
      *ret = k->dst;
      return r;
    }
  }
  if (n > c->s16_cap[slot]) {
    cudaFree(c->s16[slot]);
    c->s16[slot] = NULL;
    c->s16_cap[slot] = 0;
    int r = CU(cudaMalloc((void **)&c->s16[slot], n * sizeof(bf16_t)), "cudaMalloc");
    if (r < 0) return r;
    c->s16_cap[slot] = n;
  }
  *ret = c->s16[slot];
  return round_into(c, c->s16[slot], in, n);
}

/* Elements a row-major operand op(X) of rows x cols with leading dimension ld
 * spans in memory (trans: stored as cols rows of ld). */
static size_t span(int trans, int rows, int cols, int ld) {
  return trans ? (size_t)(cols - 1) * ld + rows : (size_t)(rows - 1) * ld + cols;
}

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the
 * operands and the dimensions, keep each operand's transpose flag. */
int tc_cu_gemm_raw(struct tc_cuda_ctx *c, int ta, int tb, int M, int N, int K, float alpha,
                    const void *A, int lda, long long sa, const void *B, int ldb, long long sb,
                   float beta, void *C, int ldc, long long sc, int count, cudaDataType_t ab,
                   cudaDataType_t ct) {
  const cublasComputeType_t comp = CUBLAS_COMPUTE_32F;
  cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasStatus_t s;
  if (count == 1)
    s = cublasGemmEx(c->blas, ob, oa, N, M, K, &alpha, B, ab, ldb, A, ab, lda, &beta, C, ct, ldc,
                     comp, CUBLAS_GEMM_DEFAULT);
  else
    s = cublasGemmStridedBatchedEx(c->blas, ob, oa, N, M, K, &alpha, B, ab, ldb, sb, A, ab, lda,
                                   sa, &beta, C, ct, ldc, sc, count, comp, CUBLAS_GEMM_DEFAULT);
  return tc_err_from_cublas((int)s, count == 1 ? "cublasGemmEx" : "cublasGemmStridedBatchedEx");
}

extern "C" int tc_cu_gemm(struct tc_cuda_ctx *c, int ta, int tb, int M, int N, int K,
                          float alpha, const float *A, int lda, const float *B, int ldb,
                          float beta, float *C, int ldc, enum tc_cu_prec prec) {
  if (!c->bf16 || prec != TC_CU_CTX)
    return tc_cu_gemm_raw(c, ta, tb, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1,
                        CUDA_R_32F, CUDA_R_32F);
  const bf16_t *a16 = NULL, *b16 = NULL;
  int r = tc_cu_bf16_copy(c, S16_A, A, span(ta, M, K, lda), &a16);
  if (r == 0) r = tc_cu_bf16_copy(c, S16_B, B, span(tb, K, N, ldb), &b16);
  if (r == 0)
    r = tc_cu_gemm_raw(c, ta, tb, M, N, K, alpha, a16, lda, 0, b16, ldb, 0, beta, C, ldc, 0, 1,
                       CUDA_R_16BF, CUDA_R_32F);
  return r;
}

/* ---- column sums: out[c] += sum_n f(n, c), two passes in a fixed order ---- */

/* Per chunk of rows: part[chunk][c] = sum of a (x NULL) or of a * xhat,
 * xhat = (x - mean) * rstd; part2 (may be NULL, with x): the plain sum too,
 * from the same read of a. */
__global__ void colsum_partial(float *part, float *part2, const float *a, const float *x,
                               const float *mean, const float *rstd, int N, int C, int rows_per) {
  int c = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
  if (c >= C) return;
  int n0 = chunk * rows_per, n1 = min(N, n0 + rows_per);
  float s = 0.0f, s2 = 0.0f;
  if (x) {
#pragma unroll 4
    for (int n = n0; n < n1; n++) {
      float v = a[(size_t)n * C + c];
      s += v * ((x[(size_t)n * C + c] - mean[n]) * rstd[n]);
      s2 += v;
    }
  } else {
#pragma unroll 4
    for (int n = n0; n < n1; n++) s += a[(size_t)n * C + c];
  }
  part[(size_t)chunk * C + c] = s;
  if (part2) part2[(size_t)chunk * C + c] = s2;
}

/* One warp per column: lane k adds partials k, k + 32, ... in order, then a
 * butterfly; out2/part2 (may be NULL) likewise. */
__global__ void colsum_finish(float *out, float *out2, const float *part, const float *part2,
                              int C, int chunks) {
  size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  int lane = threadIdx.x % 32;
  if (w >= (size_t)C) return;
  float s = 0.0f, s2 = 0.0f;
  for (int k = lane; k < chunks; k += 32) {
    s += part[(size_t)k * C + w];
    if (part2) s2 += part2[(size_t)k * C + w];
  }
  s = warp_sum(s);
  s2 = warp_sum(s2);
  if (lane == 0) {
    out[w] += s;
    if (out2) out2[w] += s2;
  }
}

/* x, mean, rstd NULL: plain column sums of a into out; else sums of a * xhat
 * into out and (out2 not NULL) plain sums of a into out2. */
int tc_cu_colsum_acc2(struct tc_cuda_ctx *c, float *out, float *out2, const float *a,
                      const float *x, const float *mean, const float *rstd, int N, int C) {
  int r = cols_scratch(c, (size_t)C);
  if (r < 0) return r;
  int chunks = N < COL_CHUNKS ? N : COL_CHUNKS;
  int rows_per = (N + chunks - 1) / chunks;
  chunks = (N + rows_per - 1) / rows_per;
  float *part2 = out2 ? c->d_cols + (size_t)COL_CHUNKS * C : NULL;
  dim3 grid(blocks_for((size_t)C, 128), (unsigned)chunks);
  colsum_partial<<<grid, 128, 0, c->stream>>>(c->d_cols, part2, a, x, mean, rstd, N, C,
                                              rows_per);
  colsum_finish<<<blocks_for((size_t)C * 32, 256), 256, 0, c->stream>>>(out, out2, c->d_cols,
                                                                         part2, C, chunks);
  return LAUNCHED("column sum");
}

__global__ void fill_bf16(bf16_t *x, size_t n, float v) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __float2bfloat16_rn(v);
}

/* out[c] += column sums of the bf16 (N,C) a: the product ones(1,N) a on
 * cuBLAS (fp32 accumulation, a fixed order for the shape). */
int tc_cu_colsum16_acc(struct tc_cuda_ctx *c, float *out, const bf16_t *a, int N, int C) {
  if ((size_t)N > c->ones_cap) {
    cudaFree(c->ones16);
    c->ones16 = NULL;
    c->ones_cap = 0;
    int r = CU(cudaMalloc((void **)&c->ones16, sizeof(bf16_t) * (size_t)N), "cudaMalloc");
    if (r < 0) return r;
    fill_bf16<<<blocks_for((size_t)N, 256), 256, 0, c->stream>>>(c->ones16, (size_t)N, 1.0f);
    if ((r = LAUNCHED("fill")) < 0) return r;
    c->ones_cap = (size_t)N;
  }
  return tc_cu_gemm_raw(c, 0, 0, 1, C, N, 1.0f, c->ones16, N, 0, a, C, 0, 1.0f, out, C, 0, 1,
                        CUDA_R_16BF, CUDA_R_32F);
}

int tc_cu_colsum_acc(struct tc_cuda_ctx *c, float *out, const float *a, int N, int C) {
  return tc_cu_colsum_acc2(c, out, NULL, a, NULL, NULL, NULL, N, C);
}
