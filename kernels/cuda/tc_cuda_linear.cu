/* The linear layer of the training core on CUDA (see tc_cuda.h): cuBLAS
 * products in fp32 contexts; in bf16 ones, cublasLt products with the bias,
 * a residual or GELU fused in their epilogue, planned once per shape. Bias
 * gradients are column sums (tc_cu_colsum_acc, tc_cu_colsum16_acc). The
 * invariants of tc_cuda_ops.cu hold: a fixed order per shape, no atomics. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tc_cuda.h"
#include "tc_cuda_int.h"

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
  if (r == 0 && dbias) r = tc_cu_colsum16_acc(c, dbias, dy16, N, OC);
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
  if (r == 0 && dbias) r = tc_cu_colsum_acc(c, dbias, dout, N, OC);
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
