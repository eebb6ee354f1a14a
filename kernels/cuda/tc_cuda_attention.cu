/* Causal self-attention of the training core (see tc_cuda.h): scores and
 * values through cuBLAS over the heads of one sequence, the causal softmax
 * and its backward as row kernels. A bf16 context rounds qkv and dout once
 * per call and keeps the (B,H,T,T) matrices in bf16, in the first half of
 * their float buffers; an fp32 context uses everything as given. Both run the
 * same sequence of products. A bf16 context on sm_80 or later with a head
 * size that tc_cuda_flash.cu supports uses its fused kernels instead. */
#include <math.h>
#include <stdint.h>

#include "tc_cuda.h"
#include "tc_cuda_int.h"

/* Rows of (rows, T) scores; row r is query position r % T. Causal softmax in
 * place, zero above the diagonal. One warp per row; float or bf16 storage,
 * fp32 arithmetic. */
__device__ __forceinline__ float ld(const float *p) { return *p; }
__device__ __forceinline__ float ld(const bf16_t *p) { return __bfloat162float(*p); }
__device__ __forceinline__ void st(float *p, float v) { *p = v; }
__device__ __forceinline__ void st(bf16_t *p, float v) { *p = __float2bfloat16_rn(v); }

template <typename S>
__global__ void causal_softmax(S *att, size_t rows, int T) {
  size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= rows) return;
  int t = (int)(row % (size_t)T);
  S *a = att + row * T;
  float mx = -INFINITY;
  for (int j = lane; j <= t; j += 32) mx = fmaxf(mx, ld(a + j));
  mx = warp_max(mx);
  float s = 0.0f;
  for (int j = lane; j <= t; j += 32) s += expf(ld(a + j) - mx);
  float inv = 1.0f / warp_sum(s);
  for (int j = lane; j < T; j += 32) st(a + j, j <= t ? expf(ld(a + j) - mx) * inv : 0.0f);
}

/* d in place: d = p * (d - sum(p d)) on the causal part, zero above it. */
template <typename S>
__global__ void causal_softmax_bwd(S *datt, const S *att, size_t rows, int T) {
  size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= rows) return;
  int t = (int)(row % (size_t)T);
  const S *p = att + row * T;
  S *d = datt + row * T;
  float dot = 0.0f;
  for (int j = lane; j <= t; j += 32) dot += ld(p + j) * ld(d + j);
  dot = warp_sum(dot);
  for (int j = lane; j < T; j += 32) st(d + j, j <= t ? ld(p + j) * (ld(d + j) - dot) : 0.0f);
}

/* bf16 rows with T % 8 == 0 and T <= 256 * NV: each lane keeps its NV
 * 8-element pieces of the row in registers (16-byte loads and stores), so
 * the row is read once and written once. */
__device__ __forceinline__ void unpack8(uint4 u, float *f) {
  const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
  for (int k = 0; k < 4; k++) {
    float2 v = __bfloat1622float2(h[k]);
    f[2 * k] = v.x;
    f[2 * k + 1] = v.y;
  }
}

__device__ __forceinline__ uint4 pack8(const float *f) {
  uint4 u;
  __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&u);
  for (int k = 0; k < 4; k++) h[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
  return u;
}

template <int NV>
__global__ void causal_softmax16v(bf16_t *att, size_t rows, int T) {
  size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= rows) return;
  int t = (int)(row % (size_t)T);
  uint4 *a = reinterpret_cast<uint4 *>(att + row * T);
  float x[NV * 8];
  float mx = -INFINITY;
#pragma unroll
  for (int v = 0; v < NV; v++) {
    int base = (v * 32 + lane) * 8;
    if (base < T) unpack8(a[base / 8], x + v * 8);
#pragma unroll
    for (int k = 0; k < 8; k++) {
      if (base + k > t || base >= T) x[v * 8 + k] = -INFINITY;
      mx = fmaxf(mx, x[v * 8 + k]);
    }
  }
  mx = warp_max(mx);
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < NV * 8; i++) {
    x[i] = x[i] == -INFINITY ? 0.0f : expf(x[i] - mx);
    s += x[i];
  }
  float inv = 1.0f / warp_sum(s);
#pragma unroll
  for (int v = 0; v < NV; v++) {
    int base = (v * 32 + lane) * 8;
    if (base >= T) continue;
#pragma unroll
    for (int k = 0; k < 8; k++) x[v * 8 + k] *= inv;
    a[base / 8] = pack8(x + v * 8);
  }
}

template <int NV>
__global__ void causal_softmax16v_bwd(bf16_t *datt, const bf16_t *att, size_t rows, int T) {
  size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= rows) return;
  int t = (int)(row % (size_t)T);
  const uint4 *p4 = reinterpret_cast<const uint4 *>(att + row * T);
  uint4 *d4 = reinterpret_cast<uint4 *>(datt + row * T);
  float p[NV * 8], d[NV * 8];
  float dot = 0.0f;
#pragma unroll
  for (int v = 0; v < NV; v++) {
    int base = (v * 32 + lane) * 8;
    if (base < T) {
      unpack8(p4[base / 8], p + v * 8);
      unpack8(d4[base / 8], d + v * 8);
    }
#pragma unroll
    for (int k = 0; k < 8; k++) {
      if (base + k > t || base >= T) p[v * 8 + k] = d[v * 8 + k] = 0.0f;
      dot += p[v * 8 + k] * d[v * 8 + k];
    }
  }
  dot = warp_sum(dot);
#pragma unroll
  for (int v = 0; v < NV; v++) {
    int base = (v * 32 + lane) * 8;
    if (base >= T) continue;
#pragma unroll
    for (int k = 0; k < 8; k++) d[v * 8 + k] = p[v * 8 + k] * (d[v * 8 + k] - dot);
    d4[base / 8] = pack8(d + v * 8);
  }
}

static int softmax16(struct tc_cuda_ctx *c, bf16_t *att, size_t rows, int T) {
  unsigned g = blocks_for(rows, 8);
  int nv = (T + 255) / 256;
  if (T % 8 || nv > 4) causal_softmax<<<g, 256, 0, c->stream>>>(att, rows, T);
  else if (nv == 1) causal_softmax16v<1><<<g, 256, 0, c->stream>>>(att, rows, T);
  else if (nv == 2) causal_softmax16v<2><<<g, 256, 0, c->stream>>>(att, rows, T);
  else if (nv == 3) causal_softmax16v<3><<<g, 256, 0, c->stream>>>(att, rows, T);
  else causal_softmax16v<4><<<g, 256, 0, c->stream>>>(att, rows, T);
  return LAUNCHED("attention softmax");
}

static int softmax16_bwd(struct tc_cuda_ctx *c, bf16_t *datt, const bf16_t *att, size_t rows,
                         int T) {
  unsigned g = blocks_for(rows, 8);
  int nv = (T + 255) / 256;
  if (T % 8 || nv > 4) causal_softmax_bwd<<<g, 256, 0, c->stream>>>(datt, att, rows, T);
  else if (nv == 1) causal_softmax16v_bwd<1><<<g, 256, 0, c->stream>>>(datt, att, rows, T);
  else if (nv == 2) causal_softmax16v_bwd<2><<<g, 256, 0, c->stream>>>(datt, att, rows, T);
  else if (nv == 3) causal_softmax16v_bwd<3><<<g, 256, 0, c->stream>>>(datt, att, rows, T);
  else causal_softmax16v_bwd<4><<<g, 256, 0, c->stream>>>(datt, att, rows, T);
  return LAUNCHED("attention softmax backward");
}

/* The context's element type for attention's operands and matrices. */
struct elems {
  cudaDataType_t t;
  size_t size;
};

static struct elems elems_of(const struct tc_cuda_ctx *c) {
  return c->bf16 ? (struct elems){CUDA_R_16BF, sizeof(bf16_t)}
                 : (struct elems){CUDA_R_32F, sizeof(float)};
}

/* x itself, or (bf16 context) its bf16 copy in scratch slot `slot`. */
static int operand(struct tc_cuda_ctx *c, int slot, const float *x, size_t n, const char **ret) {
  if (!c->bf16) {
    *ret = (const char *)x;
    return 0;
  }
  const bf16_t *x16 = NULL;
  int r = tc_cu_bf16_copy(c, slot, x, n, &x16);
  *ret = (const char *)x16;
  return r;
}

static int softmax(struct tc_cuda_ctx *c, void *att, size_t rows, int T) {
  if (!c->bf16) {
    causal_softmax<<<blocks_for(rows, 8), 256, 0, c->stream>>>((float *)att, rows, T);
    return LAUNCHED("attention softmax");
  }
  return softmax16(c, (bf16_t *)att, rows, T);
}

static int softmax_bwd(struct tc_cuda_ctx *c, void *datt, const void *att, size_t rows, int T) {
  if (!c->bf16) {
    causal_softmax_bwd<<<blocks_for(rows, 8), 256, 0, c->stream>>>((float *)datt,
                                                                    (const float *)att, rows, T);
    return LAUNCHED("attention softmax backward");
  }
  return softmax16_bwd(c, (bf16_t *)datt, (const bf16_t *)att, rows, T);
}

static int fused(const struct tc_cuda_ctx *c, int C, int H) {
  return c->bf16 && c->sm >= 80 && C % H == 0 && tc_cu_flash_ok(C / H);
}

extern "C" size_t tc_cu_attention_floats(const struct tc_cuda_ctx *c, int B, int T, int C,
                                         int H) {
  return (size_t)B * H * T * (fused(c, C, H) ? 1 : (size_t)T);
}

extern "C" int tc_cu_attention_forward(struct tc_cuda_ctx *c, float *out, float *att,
                                       const float *qkv, int B, int T, int C, int H) {
  int hs = C / H, C3 = 3 * C, r;
  if (fused(c, C, H)) {
    const bf16_t *q16 = NULL;
    r = tc_cu_bf16_copy(c, S16_QKV, qkv, (size_t)B * T * C3, &q16);
    return r < 0 ? r : tc_cu_flash_forward(c, out, att, q16, B, T, C, H);
  }
  float scale = 1.0f / sqrtf((float)hs);
  long long TT = (long long)T * T;
  struct elems e = elems_of(c);
  const char *q0 = NULL;
  char *a0 = (char *)att;
  if ((r = operand(c, S16_QKV, qkv, (size_t)B * T * C3, &q0)) < 0) return r;
  for (int b = 0; b < B && r == 0; b++) {
    const char *q = q0 + (size_t)b * T * C3 * e.size;
    r = tc_cu_gemm_raw(c, 0, 1, T, T, hs, scale, q, C3, hs, q + C * e.size, C3, hs, 0.0f,
                       a0 + (size_t)b * H * TT * e.size, T, TT, H, e.t, e.t);
  }
  if (r == 0) r = softmax(c, att, (size_t)B * H * T, T);
  for (int b = 0; b < B && r == 0; b++) {
    const char *v = q0 + ((size_t)b * T * C3 + 2 * C) * e.size;
    r = tc_cu_gemm_raw(c, 0, 0, T, hs, T, 1.0f, a0 + (size_t)b * H * TT * e.size, T, TT, v, C3,
                       hs, 0.0f, out + (size_t)b * T * C, C, hs, H, e.t, CUDA_R_32F);
  }
  return r;
}

extern "C" int tc_cu_attention_backward(struct tc_cuda_ctx *c, float *dqkv, float *datt,
                                        const float *dout, const float *out, const float *qkv,
                                        const float *att, int B, int T, int C, int H) {
  int hs = C / H, C3 = 3 * C, r;
  tc_cu_keep_drop(c, dqkv); /* the fused kernels write a fresh copy, the products none */
  if (fused(c, C, H)) {
    const bf16_t *q16 = NULL, *dy16 = NULL;
    if ((r = tc_cu_bf16_copy(c, S16_QKV, qkv, (size_t)B * T * C3, &q16)) < 0 ||
        (r = tc_cu_bf16_copy(c, S16_DOUT, dout, (size_t)B * T * C, &dy16)) < 0)
      return r;
    return tc_cu_flash_backward(c, dqkv, datt, dout, out, q16, dy16, att, B, T, C, H);
  }
  float scale = 1.0f / sqrtf((float)hs);
  long long TT = (long long)T * T;
  struct elems e = elems_of(c);
  const char *q0 = NULL, *dy0 = NULL, *a0 = (const char *)att;
  char *da0 = (char *)datt;
  if ((r = operand(c, S16_QKV, qkv, (size_t)B * T * C3, &q0)) < 0 ||
      (r = operand(c, S16_DOUT, dout, (size_t)B * T * C, &dy0)) < 0)
    return r;
  for (int b = 0; b < B && r == 0; b++) {
    const char *v = q0 + ((size_t)b * T * C3 + 2 * C) * e.size;
    const char *dy = dy0 + (size_t)b * T * C * e.size, *ab = a0 + (size_t)b * H * TT * e.size;
    char *da = da0 + (size_t)b * H * TT * e.size;
    float *dv = dqkv + (size_t)b * T * C3 + 2 * C;
    r = tc_cu_gemm_raw(c, 0, 1, T, T, hs, 1.0f, dy, C, hs, v, C3, hs, 0.0f, da, T, TT, H, e.t,
                       e.t);
    if (r == 0)
      r = tc_cu_gemm_raw(c, 1, 0, T, hs, T, 1.0f, ab, T, TT, dy, C, hs, 0.0f, dv, C3, hs, H, e.t,
                         CUDA_R_32F);
  }
  if (r == 0) r = softmax_bwd(c, datt, att, (size_t)B * H * T, T);
  for (int b = 0; b < B && r == 0; b++) {
    const char *q = q0 + (size_t)b * T * C3 * e.size, *k = q + C * e.size;
    const char *da = da0 + (size_t)b * H * TT * e.size;
    float *dq = dqkv + (size_t)b * T * C3, *dk = dq + C;
    r = tc_cu_gemm_raw(c, 0, 0, T, hs, T, scale, da, T, TT, k, C3, hs, 0.0f, dq, C3, hs, H, e.t,
                       CUDA_R_32F);
    if (r == 0)
      r = tc_cu_gemm_raw(c, 1, 0, T, hs, T, scale, da, T, TT, q, C3, hs, 0.0f, dk, C3, hs, H, e.t,
                         CUDA_R_32F);
  }
  return r;
}
