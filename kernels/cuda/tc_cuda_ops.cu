/* CUDA kernels and cuBLAS products of the training core (see tc_cuda.h).
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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tc_cuda.h"
#include "tc_cuda_int.h"

extern "C" {
#include "sl_err.h"
#include "sl_log.h"
}

enum { COL_CHUNKS = 128, SUMSQ_BLOCKS = 1024, SUMSQ_THREADS = 256 };

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
static int colsum_acc2(struct tc_cuda_ctx *c, float *out, float *out2, const float *a,
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
static int colsum16_acc(struct tc_cuda_ctx *c, float *out, const bf16_t *a, int N, int C) {
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

static int colsum_acc(struct tc_cuda_ctx *c, float *out, const float *a, int N, int C) {
  return colsum_acc2(c, out, NULL, a, NULL, NULL, NULL, N, C);
}

/* ---- linear ---- */

__global__ void bias_rows(float *out, const float *bias, size_t N, int OC) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N * (size_t)OC) out[i] = bias[i % (size_t)OC];
}

/* The plan of a kind for the linear (N,C) -> (N,OC), made on first use with
 * the algorithm of cublasLt's heuristic (aux: a GELU aux buffer, whose
 * alignment the heuristic takes into account). In column-major terms:
 * LT_BIAS, LT_BIAS16 and LT_GELU: out^T (OC,N) = w16 (C,OC)^T x16^T (C,N),
 * out fp32 (LT_BIAS) or bf16; LT_DGELU: dinp^T (C,N) = w16 (C,OC) dout16^T
 * (OC,N), bf16. A plan without an algorithm stays, with ok 0. */
static int lt_plan(struct tc_cuda_ctx *c, int kind, int N, int C, int OC, const void *aux,
                   struct tc_lt_plan **ret) {
  for (int i = 0; i < c->n_plans; i++) {
    struct tc_lt_plan *q = &c->plans[i];
    if (q->kind == kind && q->N == N && q->C == C && q->OC == OC) {
      *ret = q;
      return 0;
    }
  }
  struct tc_lt_plan *ps =
      (struct tc_lt_plan *)realloc(c->plans, sizeof *ps * (size_t)(c->n_plans + 1));
  if (!ps) return -ENOMEM;
  c->plans = ps;
  struct tc_lt_plan *p = &ps[c->n_plans++];
  memset(p, 0, sizeof *p);
  p->kind = kind, p->N = N, p->C = C, p->OC = OC;
  int dgelu = kind == LT_DGELU, aux_on = kind == LT_GELU || dgelu;
  cublasOperation_t ta = dgelu ? CUBLAS_OP_N : CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtEpilogue_t epi = kind == LT_GELU ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                           : dgelu         ? CUBLASLT_EPILOGUE_DGELU
                                           : CUBLASLT_EPILOGUE_BIAS;
  cudaDataType_t bias_t = CUDA_R_32F, out_t = kind == LT_BIAS ? CUDA_R_32F : CUDA_R_16BF;
  int64_t aux_ld = dgelu ? C : OC;
  uint64_t rows = dgelu ? (uint64_t)C : (uint64_t)OC, other = dgelu ? (uint64_t)OC : (uint64_t)C;
  cublasLtMatmulPreference_t pref = NULL;
  size_t ws = LT_WORKSPACE;
  int found = 0;
  cublasStatus_t st = cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  if (st == CUBLAS_STATUS_SUCCESS && !dgelu)
    st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_t,
                                        sizeof bias_t);
  if (st == CUBLAS_STATUS_SUCCESS && aux_on)
    st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                        sizeof aux_ld);
  if (st == CUBLAS_STATUS_SUCCESS && aux_on)
    st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                        sizeof aux);
  /* weights: row-major (OC,C), so column-major (C,OC) with leading dimension C */
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatrixLayoutCreate(&p->lay[0], CUDA_R_16BF, (uint64_t)C, (uint64_t)OC, C);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatrixLayoutCreate(&p->lay[1], CUDA_R_16BF, other, (uint64_t)N, (int64_t)other);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatrixLayoutCreate(&p->lay[2], out_t, rows, (uint64_t)N, (int64_t)rows);
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceCreate(&pref);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                              sizeof ws);
  /* no algorithm is not an error: the plan stays without one; a bf16
   * output may want a bf16 bias (the parameters' mirror holds one) */
  for (int try16 = 0; try16 < 2 && st == CUBLAS_STATUS_SUCCESS && !p->ok; try16++) {
    cublasLtMatmulHeuristicResult_t res;
    if (try16) {
      if (kind != LT_GELU && kind != LT_BIAS16) break;
      bias_t = CUDA_R_16BF;
      st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_t,
                                          sizeof bias_t);
      if (st != CUBLAS_STATUS_SUCCESS) break;
    }
    if (cublasLtMatmulAlgoGetHeuristic(c->lt, p->op, p->lay[0], p->lay[1], p->lay[2], p->lay[2],
                                       pref, 1, &res, &found) == CUBLAS_STATUS_SUCCESS &&
        found > 0) {
      p->algo = res.algo;
      p->ok = 1;
      p->bias16 = try16;
    }
  }
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  *ret = p;
  return st == CUBLAS_STATUS_SUCCESS ? 0 : tc_err_from_cublas((int)st, "cublasLt plan");
}

/* Runs plan p: out = epilogue(w16 op b16 + beta resid); the fp32 bias and
 * aux as its kind wants them (NULL where it takes none). A plan that takes a
 * bf16 bias gets the bias's bf16 copy (the parameters' mirror). */
static int lt_run(struct tc_cuda_ctx *c, struct tc_lt_plan *p, void *out, const bf16_t *w16,
                  const bf16_t *b16, const float *bias, const void *resid, const void *aux) {
  float alpha = 1.0f, beta = resid ? 1.0f : 0.0f;
  if (p->bias16 && bias) {
    const bf16_t *bias16 = NULL;
    int r = tc_cu_bf16_copy(c, S16_BIAS, bias, (size_t)p->OC, &bias16);
    if (r < 0) return r;
    bias = (const float *)bias16; /* the epilogue reads the type the plan names */
  }
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  if (p->kind != LT_DGELU)
    st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                        sizeof bias);
  if (st == CUBLAS_STATUS_SUCCESS && (p->kind == LT_GELU || p->kind == LT_DGELU))
    st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                        sizeof aux);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmul(c->lt, p->op, &alpha, w16, p->lay[0], b16, p->lay[1], &beta,
                        resid ? resid : out, p->lay[2], out, p->lay[2], &p->algo, c->lt_ws,
                        LT_WORKSPACE, c->stream);
  return tc_err_from_cublas((int)st, "cublasLtMatmul");
}

/* out (N,OC) = x16 (N,C) w16^T + bias (+ resid (N,OC) when not NULL)
 * through cublasLt with the bias and the residual in the product's epilogue
 * (one pass over out instead of three). 1: no algorithm for this shape (the
 * caller falls back); < 0: an error. */
static int lt_linear(struct tc_cuda_ctx *c, float *out, const bf16_t *x16, const bf16_t *w16,
                     const float *bias, const float *resid, int N, int C, int OC) {
  struct tc_lt_plan *p = NULL;
  int r;
  /* out with a kept copy and no residual: the product writes only the copy,
   * which is what later products and the fused attention read */
  if (!resid && tc_cu_keep_has(c, out, (size_t)N * OC)) {
    r = lt_plan(c, LT_BIAS16, N, C, OC, NULL, &p);
    if (r < 0) return r;
    if (p->ok)
      return lt_run(c, p, tc_cu_keep_claim(c, out, (size_t)N * OC), w16, x16, bias, NULL, NULL);
  }
  r = lt_plan(c, LT_BIAS, N, C, OC, NULL, &p);
  if (r < 0) return r;
  if (!p->ok) return 1;
  return lt_run(c, p, out, w16, x16, bias, resid, NULL);
}

extern "C" int tc_cu_linear_gelu_forward(struct tc_cuda_ctx *c, float *out, void *pre16,
                                         const float *inp, const float *w, const float *bias,
                                         int N, int C, int OC) {
  /* out needs a kept copy to hold the product */
  if (!c->lt || !bias || !tc_cu_keep_has(c, out, (size_t)N * OC)) return 1;
  struct tc_lt_plan *p = NULL;
  int r = lt_plan(c, LT_GELU, N, C, OC, pre16, &p);
  if (r < 0) return r;
  if (!p->ok) return 1;
  const bf16_t *x16 = NULL, *w16 = NULL;
  r = tc_cu_bf16_copy(c, S16_A, inp, (size_t)N * C, &x16);
  if (r == 0) r = tc_cu_bf16_copy(c, S16_B, w, (size_t)OC * C, &w16);
  if (r < 0) return r;
  return lt_run(c, p, tc_cu_keep_claim(c, out, (size_t)N * OC), w16, x16, bias, NULL, pre16);
}

static int linear_fwd(struct tc_cuda_ctx *c, float *out, const float *inp, const float *w,
                      const float *bias, const float *resid, int N, int C, int OC) {
  if (bias && c->lt) {
    const bf16_t *x16 = NULL, *w16 = NULL;
    int r = tc_cu_bf16_copy(c, S16_A, inp, (size_t)N * C, &x16);
    if (r == 0) r = tc_cu_bf16_copy(c, S16_B, w, (size_t)OC * C, &w16);
    if (r == 0) r = lt_linear(c, out, x16, w16, bias, resid, N, C, OC);
    if (r <= 0) return r;
  }
  if (bias) {
    size_t n = (size_t)N * OC;
    bias_rows<<<blocks_for(n, 256), 256, 0, c->stream>>>(out, bias, (size_t)N, OC);
    int r = LAUNCHED("bias");
    if (r < 0) return r;
  }
  int r = tc_cu_gemm(c, 0, 1, N, OC, C, 1.0f, inp, C, w, C, bias ? 1.0f : 0.0f, out, OC,
                     TC_CU_CTX);
  if (r == 0 && resid) r = tc_cu_add(c, out, out, resid, (size_t)N * OC);
  return r;
}

extern "C" int tc_cu_linear_forward(struct tc_cuda_ctx *c, float *out, const float *inp,
                                    const float *w, const float *bias, int N, int C, int OC) {
  return linear_fwd(c, out, inp, w, bias, NULL, N, C, OC);
}

extern "C" int tc_cu_linear_forward_add(struct tc_cuda_ctx *c, float *out, const float *inp,
                                        const float *w, const float *bias, const float *resid,
                                        int N, int C, int OC) {
  return linear_fwd(c, out, inp, w, bias, resid, N, C, OC);
}

/* The weight and bias gradients of a bf16 context's linear from dout's
 * bf16 copy dy16: dw += dy16^T x16, dbias += column sums of dy16. */
static int linear_dw16(struct tc_cuda_ctx *c, float *dw, float *dbias, const bf16_t *dy16,
                       const float *inp, int N, int C, int OC) {
  const bf16_t *x16 = NULL;
  int r = tc_cu_bf16_copy(c, S16_B, inp, (size_t)N * C, &x16);
  if (r == 0)
    r = tc_cu_gemm_raw(c, 1, 0, OC, C, N, 1.0f, dy16, OC, 0, x16, C, 0, 1.0f, dw, C, 0, 1,
                       CUDA_R_16BF, CUDA_R_32F);
  if (r == 0 && dbias) r = colsum16_acc(c, dbias, dy16, N, OC);
  return r;
}

extern "C" int tc_cu_linear_backward(struct tc_cuda_ctx *c, float *dinp, float *dw, float *dbias,
                                     const float *dout, const float *inp, const float *w, int N,
                                     int C, int OC) {
  int r = 0;
  if (dinp) tc_cu_keep_drop(c, dinp); /* a product writes it, not a kernel that keeps a copy */
  if (c->bf16) { /* dout rounded once for all three; the stream orders slot reuse */
    const bf16_t *dy16 = NULL, *w16 = NULL;
    r = tc_cu_bf16_copy(c, S16_A, dout, (size_t)N * OC, &dy16);
    if (r == 0 && dinp) r = tc_cu_bf16_copy(c, S16_B, w, (size_t)OC * C, &w16);
    if (r == 0 && dinp)
      r = tc_cu_gemm_raw(c, 0, 0, N, C, OC, 1.0f, dy16, OC, 0, w16, C, 0, 0.0f, dinp, C, 0, 1,
                         CUDA_R_16BF, CUDA_R_32F);
    return r == 0 ? linear_dw16(c, dw, dbias, dy16, inp, N, C, OC) : r;
  }
  if (dinp) r = tc_cu_gemm(c, 0, 0, N, C, OC, 1.0f, dout, OC, w, C, 0.0f, dinp, C, TC_CU_CTX);
  if (r == 0) r = tc_cu_gemm(c, 1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C, TC_CU_CTX);
  if (r == 0 && dbias) r = colsum_acc(c, dbias, dout, N, OC);
  return r;
}

extern "C" int tc_cu_lt_ready(struct tc_cuda_ctx *c, int gelu_backward, int N, int C, int OC,
                              const void *pre16) {
  if (!c->lt) return 0;
  struct tc_lt_plan *p = NULL;
  int r = lt_plan(c, gelu_backward ? LT_DGELU : LT_GELU, N, C, OC, pre16, &p);
  return r == 0 && p->ok;
}

extern "C" int tc_cu_linear_backward_gelu(struct tc_cuda_ctx *c, float *dinp, const void *pre16,
                                          float *dw, float *dbias, const float *dout,
                                          const float *inp, const float *w, int N, int C,
                                          int OC) {
  struct tc_lt_plan *p = NULL;
  int r = c->lt ? lt_plan(c, LT_DGELU, N, C, OC, pre16, &p) : -EINVAL;
  if (r < 0) return r;
  /* tc_cu_lt_ready said no, or dinp has no kept copy to hold the product */
  if (!p->ok || !tc_cu_keep_has(c, dinp, (size_t)N * C)) return -EINVAL;
  tc_cu_keep_drop(c, dinp);
  const bf16_t *dy16 = NULL, *w16 = NULL;
  r = tc_cu_bf16_copy(c, S16_A, dout, (size_t)N * OC, &dy16);
  if (r == 0) r = tc_cu_bf16_copy(c, S16_B, w, (size_t)OC * C, &w16);
  if (r < 0) return r;
  r = lt_run(c, p, tc_cu_keep_claim(c, dinp, (size_t)N * C), w16, dy16, NULL, NULL, pre16);
  return r == 0 ? linear_dw16(c, dw, dbias, dy16, inp, N, C, OC) : r;
}

/* ---- LayerNorm: one warp per row ---- */

__global__ void ln_fwd(float *out, bf16_t *out16, float *mean, float *rstd, const float *inp,
                       const float *w, const float *b, int N, int C) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const float *x = inp + (size_t)row * C;
  float s = 0.0f;
  for (int i = lane; i < C; i += 32) s += x[i];
  float m = warp_sum(s) / (float)C;
  float v = 0.0f;
  for (int i = lane; i < C; i += 32) {
    float d = x[i] - m;
    v += d * d;
  }
  v = warp_sum(v) / (float)C;
  float rs = rsqrtf(v + 1e-5f);
  float *y = out + (size_t)row * C;
  for (int i = lane; i < C; i += 32) {
    float v = (x[i] - m) * rs * w[i] + b[i];
    if (out16) /* the kept copy is what the products read */
      out16[(size_t)row * C + i] = __float2bfloat16_rn(v);
    else
      y[i] = v;
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
}

__global__ void ln_bwd_inp(float *dinp, bf16_t *dinp16, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, int N, int C) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const float *dy = dout + (size_t)row * C, *x = inp + (size_t)row * C;
  float *dx = dinp + (size_t)row * C;
  float m = mean[row], s = rstd[row];
  float dm = 0.0f, dn = 0.0f;
  for (int i = lane; i < C; i += 32) {
    float xh = (x[i] - m) * s, d = w[i] * dy[i];
    dm += d;
    dn += d * xh;
  }
  dm = warp_sum(dm) / (float)C;
  dn = warp_sum(dn) / (float)C;
  for (int i = lane; i < C; i += 32) {
    float xh = (x[i] - m) * s;
    float v = dx[i] + (w[i] * dy[i] - dm - xh * dn) * s;
    dx[i] = v;
    if (dinp16) dinp16[(size_t)row * C + i] = __float2bfloat16_rn(v);
  }
}

extern "C" int tc_cu_layernorm_forward(struct tc_cuda_ctx *c, float *out, float *mean,
                                       float *rstd, const float *inp, const float *w,
                                       const float *b, int N, int C) {
  bf16_t *out16 = tc_cu_keep_claim(c, out, (size_t)N * C);
  ln_fwd<<<blocks_for((size_t)N, 8), 256, 0, c->stream>>>(out, out16, mean, rstd, inp, w, b, N,
                                                          C);
  return LAUNCHED("layernorm forward");
}

extern "C" int tc_cu_layernorm_backward(struct tc_cuda_ctx *c, float *dinp, float *dw,
                                        float *db, const float *dout, const float *inp,
                                        const float *w, const float *mean, const float *rstd,
                                        int N, int C) {
  bf16_t *dinp16 = tc_cu_keep_claim(c, dinp, (size_t)N * C);
  ln_bwd_inp<<<blocks_for((size_t)N, 8), 256, 0, c->stream>>>(dinp, dinp16, dout, inp, w, mean,
                                                               rstd, N, C);
  int r = LAUNCHED("layernorm backward");
  if (r == 0) r = colsum_acc2(c, dw, db, dout, inp, mean, rstd, N, C);
  return r;
}

/* ---- elementwise ---- */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

__global__ void gelu_fwd(float *out, bf16_t *out16, const float *inp, size_t n) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float x = inp[i];
  float y = 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
  out[i] = y;
  if (out16) out16[i] = __float2bfloat16_rn(y);
}

__global__ void gelu_bwd(float *dinp, bf16_t *dinp16, const float *inp, const float *dout,
                         size_t n) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float x = inp[i];
  float t = tanhf(GELU_K * (x + 0.044715f * x * x * x));
  float g = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
  float d = g * dout[i];
  dinp[i] = d;
  if (dinp16) dinp16[i] = __float2bfloat16_rn(d);
}

__global__ void relu_fwd(float *out, const float *inp, size_t n) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

__global__ void relu_bwd(float *dinp, const float *inp, const float *dout, size_t n) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dinp[i] = inp[i] > 0.0f ? dout[i] : 0.0f;
}

__global__ void add_k(float *out, const float *a, const float *b, size_t n) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

__global__ void scale_k(float *x, size_t n, float s) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}

extern "C" int tc_cu_gelu_forward(struct tc_cuda_ctx *c, float *out, const float *inp, size_t n) {
  gelu_fwd<<<blocks_for(n, 256), 256, 0, c->stream>>>(out, tc_cu_keep_claim(c, out, n), inp, n);
  return LAUNCHED("gelu forward");
}

extern "C" int tc_cu_gelu_backward(struct tc_cuda_ctx *c, float *dinp, const float *inp,
                                   const float *dout, size_t n) {
  gelu_bwd<<<blocks_for(n, 256), 256, 0, c->stream>>>(dinp, tc_cu_keep_claim(c, dinp, n), inp,
                                                       dout, n);
  return LAUNCHED("gelu backward");
}

extern "C" int tc_cu_relu_forward(struct tc_cuda_ctx *c, float *out, const float *inp, size_t n) {
  relu_fwd<<<blocks_for(n, 256), 256, 0, c->stream>>>(out, inp, n);
  return LAUNCHED("relu forward");
}

extern "C" int tc_cu_relu_backward(struct tc_cuda_ctx *c, float *dinp, const float *inp,
                                   const float *dout, size_t n) {
  relu_bwd<<<blocks_for(n, 256), 256, 0, c->stream>>>(dinp, inp, dout, n);
  return LAUNCHED("relu backward");
}

extern "C" int tc_cu_add(struct tc_cuda_ctx *c, float *out, const float *a, const float *b,
                         size_t n) {
  add_k<<<blocks_for(n, 256), 256, 0, c->stream>>>(out, a, b, n);
  return LAUNCHED("add");
}

extern "C" int tc_cu_scale(struct tc_cuda_ctx *c, float *x, size_t n, float s) {
  scale_k<<<blocks_for(n, 256), 256, 0, c->stream>>>(x, n, s);
  return LAUNCHED("scale");
}

/* ---- softmax cross-entropy: one warp per row ---- */

__global__ void xent_rows(float *dlogits, float *losses, int32_t *correct, const float *logits,
                          const int32_t *targets, int N, int V, float dscale) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const float *l = logits + (size_t)row * V;
  float mx = -INFINITY;
  int am = V;
  for (int i = lane; i < V; i += 32)
    if (l[i] > mx) mx = l[i], am = i;
  for (int o = 16; o > 0; o >>= 1) { /* max, ties to the lowest index (the CPU's choice) */
    float om = __shfl_xor_sync(0xffffffffu, mx, o);
    int oa = __shfl_xor_sync(0xffffffffu, am, o);
    if (om > mx || (om == mx && oa < am)) mx = om, am = oa;
  }
  float s = 0.0f;
  for (int i = lane; i < V; i += 32) s += expf(l[i] - mx);
  s = warp_sum(s);
  int y = targets[row];
  float loss = mx + logf(s) - l[y];
  __syncwarp();
  if (dlogits) {
    float *d = dlogits + (size_t)row * V, inv = 1.0f / s;
    for (int i = lane; i < V; i += 32) {
      float p = expf(l[i] - mx) * inv * dscale;
      d[i] = i == y ? p - dscale : p;
    }
  }
  if (lane == 0) {
    losses[row] = loss;
    correct[row] = am == y;
  }
}

extern "C" int tc_cu_softmax_xent(struct tc_cuda_ctx *c, float *dlogits, float *losses,
                                  int32_t *correct, const float *logits, const int32_t *targets,
                                  int N, int V, float dscale) {
  if (V > 1024) return -EINVAL;
  xent_rows<<<blocks_for((size_t)N, 8), 256, 0, c->stream>>>(dlogits, losses, correct, logits,
                                                             targets, N, V, dscale);
  return LAUNCHED("cross-entropy");
}

/* ---- embeddings ---- */

__global__ void embed_fwd(float *out, const int32_t *tok, const float *wte, const float *wpe,
                          size_t N, int T, int C) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= N * (size_t)C) return;
  size_t n = i / (size_t)C;
  int ch = (int)(i % (size_t)C), t = (int)(n % (size_t)T);
  out[i] = wte[(size_t)tok[n] * C + ch] + wpe[(size_t)t * C + ch];
}

__global__ void onehot_k(float *oh, const int32_t *tok, size_t N, int V) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N * (size_t)V) oh[i] = tok[i / (size_t)V] == (int32_t)(i % (size_t)V) ? 1.0f : 0.0f;
}

__global__ void wpe_bwd(float *dwpe, const float *dout, int B, int T, int C) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (size_t)T * C) return;
  float s = 0.0f;
  for (int b = 0; b < B; b++) s += dout[(size_t)b * T * C + i];
  dwpe[i] += s;
}

extern "C" int tc_cu_embed_forward(struct tc_cuda_ctx *c, float *out, const int32_t *tokens,
                                   const float *wte, const float *wpe, int B, int T, int C) {
  size_t N = (size_t)B * T;
  embed_fwd<<<blocks_for(N * C, 256), 256, 0, c->stream>>>(out, tokens, wte, wpe, N, T, C);
  return LAUNCHED("embedding forward");
}

extern "C" int tc_cu_embed_backward(struct tc_cuda_ctx *c, float *dwte, float *dwpe,
                                    float *onehot, const float *dout, const int32_t *tokens,
                                    int B, int T, int C, int V) {
  size_t N = (size_t)B * T;
  onehot_k<<<blocks_for(N * V, 256), 256, 0, c->stream>>>(onehot, tokens, N, V);
  wpe_bwd<<<blocks_for((size_t)T * C, 256), 256, 0, c->stream>>>(dwpe, dout, B, T, C);
  int r = LAUNCHED("embedding backward");
  if (r == 0)
    r = tc_cu_gemm(c, 1, 0, V, C, (int)N, 1.0f, onehot, V, dout, C, 1.0f, dwte, C, TC_CU_FP32);
  return r;
}

/* ---- global sum of squares: per-block partials, then one block in order ---- */

__global__ void sumsq_partial(double *part, const float *x, size_t n) {
  __shared__ double sh[SUMSQ_THREADS];
  double s = 0.0;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    s += (double)x[i] * (double)x[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int k = SUMSQ_THREADS / 2; k > 0; k >>= 1) {
    if ((int)threadIdx.x < k) sh[threadIdx.x] += sh[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) part[blockIdx.x] = sh[0];
}

__global__ void sumsq_finish(double *part, int blocks) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double s = 0.0;
  for (int i = 0; i < blocks; i++) s += part[i];
  part[blocks] = s;
}

extern "C" int tc_cu_sumsq(struct tc_cuda_ctx *c, const float *x, size_t n, double *ret) {
  sumsq_partial<<<SUMSQ_BLOCKS, SUMSQ_THREADS, 0, c->stream>>>(c->d_sumsq, x, n);
  sumsq_finish<<<1, 32, 0, c->stream>>>(c->d_sumsq, SUMSQ_BLOCKS);
  int r = LAUNCHED("sum of squares");
  double s = 0.0;
  if (r == 0)
    r = CU(cudaMemcpyAsync(&s, c->d_sumsq + SUMSQ_BLOCKS, sizeof s, cudaMemcpyDeviceToHost,
                           c->stream), "copy to host");
  if (r == 0) r = tc_cuda_ctx_sync(c);
  if (r == 0) *ret = s;
  return r;
}

/* ---- AdamW ---- */

__global__ void adamw_k(float *p, bf16_t *p16, const float *g, float *m, float *v, size_t n,
                        float b1, float b2, float eps, float decay, float step_size,
                        float bc2_sqrt) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float gk = g[i];
  float mk = b1 * m[i] + (1.0f - b1) * gk;
  float vk = b2 * v[i] + (1.0f - b2) * gk * gk;
  m[i] = mk;
  v[i] = vk;
  float denom = sqrtf(vk) / bc2_sqrt + eps;
  float pk = p[i] * decay - step_size * mk / denom;
  p[i] = pk;
  if (p16) p16[i] = __float2bfloat16_rn(pk);
}

extern "C" int tc_cu_adamw(struct tc_cuda_ctx *c, float *p, void *p16, const float *g, float *m,
                           float *v, size_t n, float beta1, float beta2, float eps, float decay,
                           float step_size, float bc2_sqrt) {
  adamw_k<<<blocks_for(n, 256), 256, 0, c->stream>>>(p, (bf16_t *)p16, g, m, v, n, beta1, beta2,
                                                      eps, decay, step_size, bc2_sqrt);
  return LAUNCHED("adamw");
}
