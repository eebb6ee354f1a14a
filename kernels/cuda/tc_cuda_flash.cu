/* Fused causal attention for bf16 contexts (the "flash" scheme): the
 * (B,H,T,T) score and probability matrices never reach device memory.
 *
 * Forward: one block of 4 warps per (sequence, head, 64-query tile); each
 * warp owns 16 query rows and walks the 64-key tiles up to the diagonal. The
 * scores live in registers as mma.sync accumulators (bf16 operands, fp32
 * accumulation); a running max and sum per row give the softmax online, and
 * the probabilities go straight from those registers into the product with
 * V. It writes the output rows and each row's log-sum-exp (base 2).
 *
 * Backward recomputes the probabilities from the log-sum-exp: one kernel per
 * 64-key tile (each warp 16 keys) accumulates dK and dV over the query tiles
 * at or after it, another per 64-query tile accumulates dQ over the key tiles
 * up to it. Each gradient is summed by one warp in tile order (no atomics),
 * so results repeat bit for bit, as everywhere in the backend.
 *
 * Layout: qkv (B,T,3C) as bf16 (the context's rounded copy), head h's q, k
 * and v at columns h*hs, C + h*hs and 2C + h*hs; out and dqkv fp32. Head
 * sizes 16, 32, 64 and 128.
 *
 * Fragments follow PTX's mma.m16n8k16 layouts: lane = 4 g + t holds rows g
 * and g + 8, columns 2t and 2t + 1 of each 16 x 8 accumulator tile, which is
 * also where the A operand of the next product wants them. The bf16 mma
 * needs sm_80: builds for older targets keep empty kernels, and
 * tc_cuda_attention.cu never launches them on such a device. */
#include <errno.h>
#include <math.h>
#include <stdint.h>

#include "tc_cuda.h"
#include "tc_cuda_int.h"

enum { FT = 64, FTH = 128 }; /* tile rows and columns; threads (4 warps) per block */

#define LOG2E 1.4426950408889634f

/* ---- tensor core primitives ---- */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800

/* Four 8x8 b16 matrices from shared memory; lane i names row i % 8 of
 * matrix i / 8. trans: each lane receives the transposed elements. */
__device__ __forceinline__ void ldsm4(uint32_t *r, const bf16_t *p) {
  uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

__device__ __forceinline__ void ldsm4t(uint32_t *r, const bf16_t *p) {
  uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

/* c (16x8, fp32) += a (16x16, bf16) b (16x8, bf16) */
__device__ __forceinline__ void mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* 16 bytes global -> shared without a register round trip (zeros when
 * !valid), completed by cp_wait after cp_commit. */
__device__ __forceinline__ void cp16(void *dst, const void *src, bool valid) {
  uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
               "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }

/* waits until at most `pending` committed groups are still in flight */
template <int pending> __device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending));
}

/* Rows [t0, t0 + 64) of a (T, ld) bf16 matrix, HS columns from src, into a
 * tile of stride HS + 8, asynchronously; rows at or past T are zero. */
template <int HS>
__device__ __forceinline__ void fetch_tile(bf16_t *dst, const bf16_t *src, size_t ld, int t0,
                                           int T) {
  constexpr int V = HS / 8, LDH = HS + 8;
  for (int i = threadIdx.x; i < 64 * V; i += blockDim.x) {
    int r = i / V, c = (i % V) * 8;
    bool ok = t0 + r < T;
    cp16(dst + r * LDH + c, ok ? src + (size_t)(t0 + r) * ld + c : src, ok);
  }
}

/* The K and V tiles of keys [j0, j0 + 64) of one head (base: its q column
 * in the (T, 3C) rows) into buffer buf of sKV (K0 V0 K1 V1), asynchronously. */
template <int HS>
__device__ __forceinline__ void fetch_kv(bf16_t *sKV, int buf, const bf16_t *base, size_t ld,
                                         int C, int j0, int T) {
  bf16_t *k = sKV + 2 * buf * FT * (HS + 8);
  fetch_tile<HS>(k, base + C, ld, j0, T);
  fetch_tile<HS>(k + FT * (HS + 8), base + 2 * C, ld, j0, T);
  cp_commit();
}

/* Before using the pair of key tile j0 (buffer buf): fetches the next pair
 * into the other buffer, freed at the end of the last iteration, when one is
 * left before kend, and waits for this one. */
template <int HS>
__device__ __forceinline__ void next_kv(bf16_t *sKV, int buf, const bf16_t *base, size_t ld,
                                        int C, int j0, int kend, int T) {
  if (j0 + FT < kend) {
    fetch_kv<HS>(sKV, buf ^ 1, base, ld, C, j0 + FT, T);
    cp_wait<1>();
  } else {
    cp_wait<0>();
  }
  __syncthreads();
}

__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}

/* A operand: rows [m0, m0+16) x columns [k0, k0+16) of a row-major tile. */
__device__ __forceinline__ void load_a(uint32_t *a, const bf16_t *X, int ld, int m0, int k0) {
  int lane = threadIdx.x % 32, m = lane >> 3;
  ldsm4(a, X + (m0 + (m & 1) * 8 + (lane & 7)) * ld + k0 + (m >> 1) * 8);
}

/* B operands of two n-tiles (n0, n0+8) over k0..k0+16 where B(k, n) = X[n][k]
 * (X row-major with rows n): b[0..1] for n0, b[2..3] for n0 + 8. */
__device__ __forceinline__ void load_bt(uint32_t *b, const bf16_t *X, int ld, int n0, int k0) {
  int lane = threadIdx.x % 32, m = lane >> 3;
  ldsm4(b, X + (n0 + (m >> 1) * 8 + (lane & 7)) * ld + k0 + (m & 1) * 8);
}

/* The same where B(k, n) = X[k][n] (X row-major with rows k). */
__device__ __forceinline__ void load_b(uint32_t *b, const bf16_t *X, int ld, int n0, int k0) {
  int lane = threadIdx.x % 32, m = lane >> 3;
  ldsm4t(b, X + (k0 + (m & 1) * 8 + (lane & 7)) * ld + n0 + (m >> 1) * 8);
}

/* s[0..7] (16 x 64) = A (16 x HS, fragments a[HS/16]) times X^T, X the 64
 * rows of a row-major (64, HS) tile. */
template <int HS>
__device__ __forceinline__ void mul_xt(float (*s)[4], uint32_t (*a)[4], const bf16_t *X, int ld) {
#pragma unroll
  for (int n = 0; n < 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
  for (int k = 0; k < HS / 16; k++)
#pragma unroll
    for (int n = 0; n < 8; n += 2) {
      uint32_t b[4];
      load_bt(b, X, ld, n * 8, k * 16);
      mma(s[n], a[k], b[0], b[1]);
      mma(s[n + 1], a[k], b[2], b[3]);
    }
}

/* o[0..HS/8) (16 x HS) += P (16 x 64, as accumulator tiles p[0..7]) times the
 * row-major (64, HS) tile X. */
template <int HS>
__device__ __forceinline__ void mul_px(float (*o)[4], float (*p)[4], const bf16_t *X, int ld) {
#pragma unroll
  for (int kc = 0; kc < 4; kc++) {
    uint32_t a[4] = {pack2(p[2 * kc][0], p[2 * kc][1]), pack2(p[2 * kc][2], p[2 * kc][3]),
                     pack2(p[2 * kc + 1][0], p[2 * kc + 1][1]),
                     pack2(p[2 * kc + 1][2], p[2 * kc + 1][3])};
#pragma unroll
    for (int n = 0; n < HS / 8; n += 2) {
      uint32_t b[4];
      load_b(b, X, ld, n * 8, kc * 16);
      mma(o[n], a, b[0], b[1]);
      mma(o[n + 1], a, b[2], b[3]);
    }
  }
}

#endif

/* ---- tiles ---- */

/* Rows [t0, t0 + 64) of a (T, ld) bf16 matrix, HS columns from src, into a
 * tile of stride HS + 8; rows at or past T are zero. 16-byte copies. */
template <int HS>
__device__ __forceinline__ void load_tile(bf16_t *dst, const bf16_t *src, size_t ld, int t0,
                                          int T) {
  constexpr int V = HS / 8, LDH = HS + 8;
  for (int i = threadIdx.x; i < FT * V; i += FTH) {
    int r = i / V, c = (i % V) * 8;
    uint4 u = make_uint4(0, 0, 0, 0);
    if (t0 + r < T) u = *reinterpret_cast<const uint4 *>(src + (size_t)(t0 + r) * ld + c);
    *reinterpret_cast<uint4 *>(dst + r * LDH + c) = u;
  }
}

/* Rows r0 and r0 + 8 (below T) of 16 x HS accumulators, times scale, to dst
 * (row stride ld, this head's first column), and rounded to dst16 (same
 * layout) when not NULL. */
template <int HS>
__device__ __forceinline__ void write_acc(float *dst, bf16_t *dst16, size_t ld, int r0, int T,
                                          float (*o)[4], float s0, float s1) {
  int t = threadIdx.x % 4;
#pragma unroll
  for (int n = 0; n < HS / 8; n++)
#pragma unroll
    for (int half = 0; half < 2; half++) {
      int r = r0 + 8 * half;
      float sc = half ? s1 : s0, a = o[n][2 * half] * sc, b = o[n][2 * half + 1] * sc;
      if (r >= T) continue;
      size_t at = (size_t)r * ld + n * 8 + 2 * t;
      *reinterpret_cast<float2 *>(dst + at) = make_float2(a, b);
      if (dst16) *reinterpret_cast<__nv_bfloat162 *>(dst16 + at) = __floats2bfloat162_rn(a, b);
    }
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

template <int HS> struct fl {
  static constexpr int LDH = HS + 8;
  static constexpr size_t tile = (size_t)FT * LDH * sizeof(bf16_t); /* a multiple of 128 */
  /* the streamed tiles are double-buffered: the next pair is fetched while
   * the current one is multiplied */
  static constexpr size_t fwd_smem = 5 * tile;
  static constexpr size_t bwd_smem = 6 * tile + 4 * FT * sizeof(float);
};

/* ---- forward ---- */

/* Scores s (16 x 64 accumulators) times sl2, and each row's max (rows g and
 * g + 8 of the lane); with MASK, -inf at the keys past last0 (last1): key0
 * is this lane's first key. */
template <bool MASK>
__device__ __forceinline__ void scale_rows(float (*s)[4], int key0, int last0, int last1,
                                           float sl2, float &mx0, float &mx1) {
#pragma unroll
  for (int n = 0; n < 8; n++)
#pragma unroll
    for (int e = 0; e < 2; e++) {
      int key = key0 + n * 8 + e;
      s[n][e] = !MASK || key <= last0 ? s[n][e] * sl2 : -INFINITY;
      s[n][2 + e] = !MASK || key <= last1 ? s[n][2 + e] * sl2 : -INFINITY;
      mx0 = fmaxf(mx0, s[n][e]);
      mx1 = fmaxf(mx1, s[n][2 + e]);
    }
}

template <int HS>
__global__ void __launch_bounds__(FTH)
flash_fwd(float *out, bf16_t *out16, float *lse, const bf16_t *qkv, int T, int C, int H,
          float sl2) {
#if __CUDA_ARCH__ >= 800
  constexpr int LDH = fl<HS>::LDH;
  extern __shared__ __align__(128) unsigned char sm[];
  bf16_t *sQ = (bf16_t *)sm, *sKV = sQ + FT * LDH; /* then K0 V0 K1 V1 */
  /* the longest query tiles (most key tiles) first */
  int i0 = (gridDim.x - 1 - blockIdx.x) * FT, bh = blockIdx.y, b = bh / H, h = bh % H;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  int row0 = i0 + warp * 16 + g, row1 = row0 + 8;
  size_t ld = 3 * (size_t)C;
  const bf16_t *base = qkv + (size_t)b * T * ld + h * HS;
  load_tile<HS>(sQ, base, ld, i0, T);
  __syncthreads();
  uint32_t qf[HS / 16][4];
#pragma unroll
  for (int k = 0; k < HS / 16; k++) load_a(qf[k], sQ, LDH, warp * 16, k * 16);

  float o[HS / 8][4];
#pragma unroll
  for (int n = 0; n < HS / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  int kend = min(i0 + FT, T);
  fetch_kv<HS>(sKV, 0, base, ld, C, 0, T);
  for (int j0 = 0, buf = 0; j0 < kend; j0 += FT, buf ^= 1) {
    const bf16_t *sK = sKV + 2 * buf * FT * LDH, *sV = sK + FT * LDH;
    next_kv<HS>(sKV, buf, base, ld, C, j0, kend, T);
    float s[8][4];
    mul_xt<HS>(s, qf, sK, LDH);
    /* key j0 <= row for every row, so each row's max here is finite; only
     * the diagonal tile and one reaching past T have keys to mask */
    float mx0 = -INFINITY, mx1 = -INFINITY;
    if (j0 + FT > i0 || j0 + FT > T)
      scale_rows<true>(s, j0 + 2 * t, min(row0, T - 1), min(row1, T - 1), sl2, mx0, mx1);
    else
      scale_rows<false>(s, 0, 0, 0, sl2, mx0, mx1);
    float mn0 = fmaxf(m0, quad_max(mx0)), mn1 = fmaxf(m1, quad_max(mx1));
    float a0 = exp2f(m0 - mn0), a1 = exp2f(m1 - mn1), sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        s[n][e] = exp2f(s[n][e] - mn0);
        s[n][2 + e] = exp2f(s[n][2 + e] - mn1);
        sum0 += s[n][e];
        sum1 += s[n][2 + e];
      }
    l0 = l0 * a0 + quad_sum(sum0);
    l1 = l1 * a1 + quad_sum(sum1);
    m0 = mn0;
    m1 = mn1;
#pragma unroll
    for (int n = 0; n < HS / 8; n++) {
      o[n][0] *= a0;
      o[n][1] *= a0;
      o[n][2] *= a1;
      o[n][3] *= a1;
    }
    mul_px<HS>(o, s, sV, LDH);
    __syncthreads(); /* every warp is done with this buffer before it is refilled */
  }
  size_t ob = (size_t)b * T * C + h * HS;
  write_acc<HS>(out + ob, out16 ? out16 + ob : NULL, C, row0, T, o, 1.0f / l0, 1.0f / l1);
  if (t == 0) {
    if (row0 < T) lse[(size_t)bh * T + row0] = m0 + log2f(l0);
    if (row1 < T) lse[(size_t)bh * T + row1] = m1 + log2f(l1);
  }
#endif
}

/* ---- backward ---- */

/* The kv kernel's P^T = exp2(S^T sl2 - L) and dS^T = P^T (dP^T - D) in
 * place of its 16 x 64 accumulators p (S^T: rows keys k0, k1; columns the
 * queries from i0, whose L and D are in sL and sD); with MASK, 0 where the
 * key is past the query or either is at or past T. */
template <bool MASK>
__device__ __forceinline__ void probs_kv(float (*p)[4], float (*ds)[4], const float *sL,
                                         const float *sD, int i0, int k0, int k1, int t, int T,
                                         float sl2) {
#pragma unroll
  for (int n = 0; n < 8; n++)
#pragma unroll
    for (int e = 0; e < 2; e++) {
      int qc = n * 8 + 2 * t + e, q = i0 + qc;
      float Lq = sL[qc], Dq = sD[qc];
      p[n][e] = !MASK || (k0 <= q && q < T && k0 < T) ? exp2f(p[n][e] * sl2 - Lq) : 0.0f;
      p[n][2 + e] = !MASK || (k1 <= q && q < T && k1 < T) ? exp2f(p[n][2 + e] * sl2 - Lq) : 0.0f;
      ds[n][e] = p[n][e] * (ds[n][e] - Dq);
      ds[n][2 + e] = p[n][2 + e] * (ds[n][2 + e] - Dq);
    }
}

/* The q kernel's P and dS likewise (rows the queries row0, row1 with L0, L1
 * and D0, D1; key0 this lane's first key). */
template <bool MASK>
__device__ __forceinline__ void probs_q(float (*p)[4], float (*ds)[4], int key0, int row0,
                                        int row1, int T, float sl2, float L0, float L1, float D0,
                                        float D1) {
#pragma unroll
  for (int n = 0; n < 8; n++)
#pragma unroll
    for (int e = 0; e < 2; e++) {
      int key = key0 + n * 8 + e;
      p[n][e] = !MASK || (key <= row0 && key < T && row0 < T) ? exp2f(p[n][e] * sl2 - L0) : 0.0f;
      p[n][2 + e] =
          !MASK || (key <= row1 && key < T && row1 < T) ? exp2f(p[n][2 + e] * sl2 - L1) : 0.0f;
      ds[n][e] = p[n][e] * (ds[n][e] - D0);
      ds[n][2 + e] = p[n][2 + e] * (ds[n][2 + e] - D1);
    }
}

/* D[bh, t] = sum over the head's columns of dout * out (fp32): one warp per
 * (row, head), lanes over the columns (coalesced), a butterfly to finish. */
__global__ void flash_rowdot(float *D, const float *dout, const float *out, int B, int T, int C,
                             int H, int hs) {
  size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  int lane = threadIdx.x % 32;
  if (w >= (size_t)B * H * T) return;
  int tt = (int)(w % T), bh = (int)(w / T), b = bh / H, h = bh % H;
  size_t o = ((size_t)b * T + tt) * C + (size_t)h * hs;
  float s = 0.0f;
  for (int d = lane; d < hs; d += 32) s += dout[o + d] * out[o + d];
  D[w] = warp_sum(s);
}

/* dK and dV of one 64-key tile (each warp 16 keys), over the query tiles at
 * or after it: S^T = K Q^T, P^T from the rows' log-sum-exp, dP^T = V dO^T,
 * dS^T = P^T (dP^T - D); dV += P^T dO, dK += dS^T Q. */
template <int HS>
__global__ void __launch_bounds__(FTH)
flash_bwd_kv(float *dqkv, bf16_t *dqkv16, const bf16_t *qkv, const bf16_t *dout, const float *lse,
             const float *D, int T, int C, int H, float sl2, float scale) {
#if __CUDA_ARCH__ >= 800
  constexpr int LDH = fl<HS>::LDH;
  extern __shared__ __align__(128) unsigned char sm[];
  bf16_t *sK = (bf16_t *)sm, *sV = sK + FT * LDH, *sQO = sV + FT * LDH; /* then Q0 dO0 Q1 dO1 */
  float *sLD = (float *)(sQO + 4 * FT * LDH); /* L0 D0 L1 D1 */
  int j0 = blockIdx.x * FT, bh = blockIdx.y, b = bh / H, h = bh % H; /* longest first */
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  int k0 = j0 + warp * 16 + g, k1 = k0 + 8;
  size_t ld = 3 * (size_t)C;
  const bf16_t *base = qkv + (size_t)b * T * ld + h * HS;
  const bf16_t *dbase = dout + (size_t)b * T * C + h * HS;
  load_tile<HS>(sK, base + C, ld, j0, T);
  load_tile<HS>(sV, base + 2 * C, ld, j0, T);
  __syncthreads();
  uint32_t kf[HS / 16][4], vf[HS / 16][4];
#pragma unroll
  for (int k = 0; k < HS / 16; k++) {
    load_a(kf[k], sK, LDH, warp * 16, k * 16);
    load_a(vf[k], sV, LDH, warp * 16, k * 16);
  }
  float dk[HS / 8][4], dv[HS / 8][4];
#pragma unroll
  for (int n = 0; n < HS / 8; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;
  fetch_tile<HS>(sQO, base, ld, j0, T);
  fetch_tile<HS>(sQO + FT * LDH, dbase, C, j0, T);
  cp_commit();
  if (threadIdx.x < FT) {
    int q = j0 + threadIdx.x;
    sLD[threadIdx.x] = q < T ? lse[(size_t)bh * T + q] : 0.0f;
    sLD[FT + threadIdx.x] = q < T ? D[(size_t)bh * T + q] : 0.0f;
  }
  for (int i0 = j0, buf = 0; i0 < T; i0 += FT, buf ^= 1) {
    const bf16_t *sQ = sQO + 2 * buf * FT * LDH, *sdO = sQ + FT * LDH;
    const float *sL = sLD + 2 * buf * FT, *sD = sL + FT;
    if (i0 + FT < T) {
      int n0 = i0 + FT;
      bf16_t *nQ = sQO + 2 * (buf ^ 1) * FT * LDH;
      fetch_tile<HS>(nQ, base, ld, n0, T);
      fetch_tile<HS>(nQ + FT * LDH, dbase, C, n0, T);
      cp_commit();
      if (threadIdx.x < FT) {
        float *nL = sLD + 2 * (buf ^ 1) * FT;
        int q = n0 + threadIdx.x;
        nL[threadIdx.x] = q < T ? lse[(size_t)bh * T + q] : 0.0f;
        nL[FT + threadIdx.x] = q < T ? D[(size_t)bh * T + q] : 0.0f;
      }
      cp_wait<1>();
    } else {
      cp_wait<0>();
    }
    __syncthreads();
    float p[8][4], ds[8][4];
    mul_xt<HS>(p, kf, sQ, LDH);  /* S^T */
    mul_xt<HS>(ds, vf, sdO, LDH); /* dP^T */
    /* only tiles on the diagonal or reaching past T have entries to mask */
    if (i0 < j0 + FT || i0 + FT > T)
      probs_kv<true>(p, ds, sL, sD, i0, k0, k1, t, T, sl2);
    else
      probs_kv<false>(p, ds, sL, sD, i0, k0, k1, t, T, sl2);
    mul_px<HS>(dv, p, sdO, LDH);
    mul_px<HS>(dk, ds, sQ, LDH);
    __syncthreads();
  }
  size_t ob = (size_t)b * T * ld + h * HS;
  float *dst = dqkv + ob;
  bf16_t *dst16 = dqkv16 ? dqkv16 + ob : NULL;
  write_acc<HS>(dst + C, dst16 ? dst16 + C : NULL, ld, k0, T, dk, scale, scale);
  write_acc<HS>(dst + 2 * C, dst16 ? dst16 + 2 * C : NULL, ld, k0, T, dv, 1.0f, 1.0f);
#endif
}

/* dQ of one 64-query tile (each warp 16 queries), over the key tiles up to
 * the diagonal: dQ += dS K. */
template <int HS>
__global__ void __launch_bounds__(FTH)
flash_bwd_q(float *dqkv, bf16_t *dqkv16, const bf16_t *qkv, const bf16_t *dout, const float *lse,
            const float *D, int T, int C, int H, float sl2, float scale) {
#if __CUDA_ARCH__ >= 800
  constexpr int LDH = fl<HS>::LDH;
  extern __shared__ __align__(128) unsigned char sm[];
  bf16_t *sQ = (bf16_t *)sm, *sdO = sQ + FT * LDH, *sKV = sdO + FT * LDH; /* then K0 V0 K1 V1 */
  int i0 = (gridDim.x - 1 - blockIdx.x) * FT, bh = blockIdx.y, b = bh / H, h = bh % H;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  int row0 = i0 + warp * 16 + g, row1 = row0 + 8;
  size_t ld = 3 * (size_t)C;
  const bf16_t *base = qkv + (size_t)b * T * ld + h * HS;
  load_tile<HS>(sQ, base, ld, i0, T);
  load_tile<HS>(sdO, dout + (size_t)b * T * C + h * HS, C, i0, T);
  float L0 = row0 < T ? lse[(size_t)bh * T + row0] : 0.0f;
  float L1 = row1 < T ? lse[(size_t)bh * T + row1] : 0.0f;
  float D0 = row0 < T ? D[(size_t)bh * T + row0] : 0.0f;
  float D1 = row1 < T ? D[(size_t)bh * T + row1] : 0.0f;
  __syncthreads();
  uint32_t qf[HS / 16][4], of[HS / 16][4];
#pragma unroll
  for (int k = 0; k < HS / 16; k++) {
    load_a(qf[k], sQ, LDH, warp * 16, k * 16);
    load_a(of[k], sdO, LDH, warp * 16, k * 16);
  }
  float dq[HS / 8][4];
#pragma unroll
  for (int n = 0; n < HS / 8; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
  int kend = min(i0 + FT, T);
  fetch_kv<HS>(sKV, 0, base, ld, C, 0, T);
  for (int j0 = 0, buf = 0; j0 < kend; j0 += FT, buf ^= 1) {
    const bf16_t *sK = sKV + 2 * buf * FT * LDH, *sV = sK + FT * LDH;
    next_kv<HS>(sKV, buf, base, ld, C, j0, kend, T);
    float p[8][4], ds[8][4];
    mul_xt<HS>(p, qf, sK, LDH);  /* S */
    mul_xt<HS>(ds, of, sV, LDH); /* dP */
    if (j0 + FT > i0 || i0 + FT > T)
      probs_q<true>(p, ds, j0 + 2 * t, row0, row1, T, sl2, L0, L1, D0, D1);
    else
      probs_q<false>(p, ds, j0 + 2 * t, row0, row1, T, sl2, L0, L1, D0, D1);
    mul_px<HS>(dq, ds, sK, LDH);
    __syncthreads();
  }
  size_t ob = (size_t)b * T * ld + h * HS;
  write_acc<HS>(dqkv + ob, dqkv16 ? dqkv16 + ob : NULL, ld, row0, T, dq, scale, scale);
#endif
}

/* ---- launches ---- */

int tc_cu_flash_ok(int hs) { return hs == 16 || hs == 32 || hs == 64 || hs == 128; }

template <int HS>
static int fwd_launch(struct tc_cuda_ctx *c, float *out, float *lse, const bf16_t *qkv, int B,
                      int T, int C, int H) {
  size_t smem = fl<HS>::fwd_smem;
  int r = CU(cudaFuncSetAttribute(flash_fwd<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)smem), "flash attention shared memory");
  if (r < 0) return r;
  dim3 grid((unsigned)((T + FT - 1) / FT), (unsigned)(B * H));
  bf16_t *out16 = tc_cu_keep_claim(c, out, (size_t)B * T * C); /* the next product's operand */
  flash_fwd<HS><<<grid, FTH, smem, c->stream>>>(out, out16, lse, qkv, T, C, H,
                                                LOG2E / sqrtf((float)HS));
  return LAUNCHED("flash attention forward");
}

template <int HS>
static int bwd_launch(struct tc_cuda_ctx *c, float *dqkv, float *D, const float *dout,
                      const float *out, const bf16_t *qkv, const bf16_t *dout16, const float *lse,
                      int B, int T, int C, int H) {
  size_t smem = fl<HS>::bwd_smem, rows = (size_t)B * H * T;
  int r = CU(cudaFuncSetAttribute(flash_bwd_kv<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)smem), "flash attention shared memory");
  if (r == 0)
    r = CU(cudaFuncSetAttribute(flash_bwd_q<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)smem), "flash attention shared memory");
  if (r < 0) return r;
  flash_rowdot<<<blocks_for(rows * 32, 256), 256, 0, c->stream>>>(D, dout, out, B, T, C, H, HS);
  dim3 grid((unsigned)((T + FT - 1) / FT), (unsigned)(B * H));
  float scale = 1.0f / sqrtf((float)HS), sl2 = LOG2E * scale;
  bf16_t *d16 = tc_cu_keep_claim(c, dqkv, (size_t)B * T * 3 * C); /* the next product's operand */
  flash_bwd_kv<HS><<<grid, FTH, smem, c->stream>>>(dqkv, d16, qkv, dout16, lse, D, T, C, H, sl2,
                                                   scale);
  flash_bwd_q<HS><<<grid, FTH, smem, c->stream>>>(dqkv, d16, qkv, dout16, lse, D, T, C, H, sl2,
                                                  scale);
  return LAUNCHED("flash attention backward");
}

int tc_cu_flash_forward(struct tc_cuda_ctx *c, float *out, float *lse, const bf16_t *qkv, int B,
                        int T, int C, int H) {
  switch (C / H) {
  case 16: return fwd_launch<16>(c, out, lse, qkv, B, T, C, H);
  case 32: return fwd_launch<32>(c, out, lse, qkv, B, T, C, H);
  case 64: return fwd_launch<64>(c, out, lse, qkv, B, T, C, H);
  case 128: return fwd_launch<128>(c, out, lse, qkv, B, T, C, H);
  }
  return -EINVAL;
}

int tc_cu_flash_backward(struct tc_cuda_ctx *c, float *dqkv, float *D, const float *dout,
                         const float *out, const bf16_t *qkv, const bf16_t *dout16,
                         const float *lse, int B, int T, int C, int H) {
  switch (C / H) {
  case 16: return bwd_launch<16>(c, dqkv, D, dout, out, qkv, dout16, lse, B, T, C, H);
  case 32: return bwd_launch<32>(c, dqkv, D, dout, out, qkv, dout16, lse, B, T, C, H);
  case 64: return bwd_launch<64>(c, dqkv, D, dout, out, qkv, dout16, lse, B, T, C, H);
  case 128: return bwd_launch<128>(c, dqkv, D, dout, out, qkv, dout16, lse, B, T, C, H);
  }
  return -EINVAL;
}
