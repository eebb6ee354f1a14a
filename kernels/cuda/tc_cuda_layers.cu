/* The elementwise and row-wise kernels of the training core on CUDA (see
 * tc_cuda.h): LayerNorm, GELU and ReLU, sums and scaling, softmax
 * cross-entropy, embeddings, the gradient's sum of squares and AdamW. The
 * invariants of tc_cuda_ops.cu hold: every reduction has an order fixed by
 * the shape (warp butterflies, block trees), no atomics, fp32 arithmetic;
 * where a kept bf16 copy of an output exists, the kernel writes it too. */
#include <errno.h>
#include <math.h>
#include <stdint.h>

#include "tc_cuda.h"
#include "tc_cuda_int.h"

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
  if (r == 0) r = tc_cu_colsum_acc2(c, dw, db, dout, inp, mean, rstd, N, C);
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
