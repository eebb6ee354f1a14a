/* Layer kernels of the CPU path (see tc_ops.h).
 *
 * Matrix products go through single-threaded cblas_sgemm calls over a few
 * slices fixed by the shape, run in parallel by tc_par; elementwise loops run
 * over fixed blocks; every other loop has a reduction order fixed by the data
 * shape alone. So each number is the same whatever the thread count. */
#include "tc_ops.h"

#include <cblas.h>
#ifdef __AVX__
#include <immintrin.h>
#endif
#include <math.h>
#include <string.h>

#include "tc_par.h"

static int g_threads = 1; /* process-wide, as OpenBLAS's own setting is */

void tc_set_threads(int n) {
  if (n < 1) n = 1;
  g_threads = n;
  /* OpenBLAS's own threading is not bit-stable across thread counts, so BLAS
   * always runs single-threaded and tc_sgemm parallelises over fixed tiles. */
  openblas_set_num_threads(1);
  tc_par_set_threads(n);
}

int tc_get_threads(void) { return g_threads; }

struct gemm {
  CBLAS_TRANSPOSE ta, tb;
  int M, N, K, lda, ldb, ldc, split_rows, chunk, parts;
  float alpha, beta;
  const float *A, *B;
  float *C;
};

static void gemm_chunks(void *arg, size_t lo, size_t hi) {
  const struct gemm *g = arg;
  for (size_t t = lo; t < hi; t++) {
    int i0 = 0, j0 = 0, m = g->M, n = g->N;
    if (g->split_rows) {
      i0 = (int)t * g->chunk;
      m = g->M - i0 < g->chunk ? g->M - i0 : g->chunk;
    } else {
      j0 = (int)t * g->chunk;
      n = g->N - j0 < g->chunk ? g->N - j0 : g->chunk;
    }
    const float *a = g->ta == CblasTrans ? g->A + i0 : g->A + (size_t)i0 * g->lda;
    const float *b = g->tb == CblasTrans ? g->B + (size_t)j0 * g->ldb : g->B + j0;
    cblas_sgemm(CblasRowMajor, g->ta, g->tb, m, n, g->K, g->alpha, a, g->lda, b, g->ldb, g->beta,
                g->C + (size_t)i0 * g->ldc + j0, g->ldc);
  }
}

/* Few large slices: the larger output dimension is cut into a number of
 * slices that depends on the shape only, never on the thread count, and each
 * slice is one single-threaded CBLAS call over the whole K. Every output
 * element is thus always computed by the same call with the same summation
 * order. Each slice re-packs the operand that is not cut, so slices stay at
 * least GEMM_MIN_ROWS wide: one thread then loses little against a single
 * call, while two or more threads still have slices to share. */
#define GEMM_MIN_WORK (1u << 21) /* M*N*K below which one call does it all */
#define GEMM_MIN_ROWS 256
#define GEMM_MAX_SLICES 8
#define GEMM_ALIGN 16 /* slice edges on OpenBLAS's micro-tile grid */

static int gemm_slices(int dim, double work) {
  if (work < GEMM_MIN_WORK || dim < 2 * GEMM_ALIGN) return 1;
  int s = 2;
  while (s < GEMM_MAX_SLICES && dim / (2 * s) >= GEMM_MIN_ROWS) s *= 2;
  return s;
}

void tc_sgemm(enum tc_trans ta, enum tc_trans tb, int M, int N, int K, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta, float *C,
              int ldc) {
  if (M <= 0 || N <= 0) return;
  struct gemm g = {ta == TC_T ? CblasTrans : CblasNoTrans, tb == TC_T ? CblasTrans : CblasNoTrans,
                   M, N, K, lda, ldb, ldc, M >= N, 0, 1, alpha, beta, A, B, C};
  int dim = g.split_rows ? M : N;
  int slices = gemm_slices(dim, (double)M * N * (K > 0 ? K : 1));
  int chunk = (dim + slices - 1) / slices;
  chunk = (chunk + GEMM_ALIGN - 1) / GEMM_ALIGN * GEMM_ALIGN;
  g.chunk = chunk;
  g.parts = (dim + chunk - 1) / chunk;
  tc_par_for((size_t)g.parts, 1, gemm_chunks, &g);
}

void tc_sgemm_ref(enum tc_trans ta, enum tc_trans tb, int M, int N, int K, float alpha,
                  const float *A, int lda, const float *B, int ldb, float beta, float *C,
                  int ldc) {
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double s = 0.0;
      for (int k = 0; k < K; k++) {
        float a = ta == TC_T ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
        float b = tb == TC_T ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
        s += (double)a * b;
      }
      float *c = &C[(size_t)i * ldc + j];
      *c = (float)(alpha * s + (beta == 0.0f ? 0.0 : (double)beta * *c));
    }
}

void tc_linear_forward(float *out, const float *inp, const float *w, const float *bias,
                       int N, int C, int OC) {
  if (bias) {
    for (int n = 0; n < N; n++) memcpy(out + (size_t)n * OC, bias, sizeof(float) * OC);
  }
  tc_sgemm(TC_N, TC_T, N, OC, C, 1.0f, inp, C, w, C, bias ? 1.0f : 0.0f, out, OC);
}

void tc_linear_backward(float *dinp, float *dw, float *dbias, const float *dout,
                        const float *inp, const float *w, int N, int C, int OC, int acc_dinp) {
  if (dinp) tc_sgemm(TC_N, TC_N, N, C, OC, 1.0f, dout, OC, w, C, acc_dinp ? 1.0f : 0.0f, dinp, C);
  tc_sgemm(TC_T, TC_N, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C);
  if (dbias) {
    for (int n = 0; n < N; n++) {
      const float *d = dout + (size_t)n * OC;
      for (int o = 0; o < OC; o++) dbias[o] += d[o];
    }
  }
}

/* e^x for x in [-87, 88]: x = k ln2 + r with |r| <= ln2/2 (k rounded to
 * nearest even: adding and removing 1.5 * 2^23 leaves no fraction), then a
 * degree-7 Taylor polynomial of e^r (relative error below 2e-7) scaled by 2^k
 * through the exponent bits. Callers clamp x on its bit pattern first. */
static inline float exp_in_range(float x) {
  float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - k * 0.693145751953125f - k * 1.428606765330187e-06f;
  float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 +
                                              r * (1.0f / 720 + r * (1.0f / 5040)))))));
  union {
    int32_t i;
    float f;
  } scale = {.i = ((int32_t)k + 127) << 23};
  return p * scale.f;
}

/* e^x for x <= 0, saturating at e^-87 (the clamp compares bit patterns as
 * unsigned: for negative floats those grow with the magnitude). */
static inline float fast_exp_neg(float x) {
  union {
    float f;
    uint32_t u;
  } v = {.f = x};
  const uint32_t min_bits = 0xc2ae0000u; /* -87.0f */
  v.u = v.u > min_bits ? min_bits : v.u;
  x = v.f;
  return exp_in_range(x);
}

/* Row reductions use eight interleaved lanes (one GCC vector) combined in a
 * fixed order, then the tail in order: the same result for a given n wherever
 * the row sits. */
typedef float v8f __attribute__((vector_size(32)));

static inline v8f load8(const float *p) {
  v8f v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline float hsum8(v8f s) {
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

static float row_max(const float *restrict x, int n) {
  float mx = x[0];
  int j = 0;
#ifdef __AVX__
  /* a float compare-and-select loop does not vectorise under -ftrapping-math */
  if (n >= 8) {
    __m256 m = _mm256_loadu_ps(x);
    for (j = 8; j + 8 <= n; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + j));
    float l[8];
    _mm256_storeu_ps(l, m);
    for (int k = 0; k < 8; k++) mx = l[k] > mx ? l[k] : mx;
  }
#endif
  for (; j < n; j++) mx = x[j] > mx ? x[j] : mx;
  return mx;
}

static float row_dot(const float *restrict x, const float *restrict y, int n) {
  v8f s = {0};
  int j = 0;
  for (; j + 8 <= n; j += 8) s += load8(x + j) * load8(y + j);
  float t = hsum8(s);
  for (; j < n; j++) t += x[j] * y[j];
  return t;
}

static void row_scale(float *restrict row, int n, float s) {
  for (int j = 0; j < n; j++) row[j] *= s;
}

/* Sum of squared deviations from m. */
static float row_sqdev(const float *restrict x, int n, float m) {
  v8f s = {0};
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    v8f d = load8(x + j) - m;
    s += d * d;
  }
  float t = hsum8(s);
  for (; j < n; j++) {
    float d = x[j] - m;
    t += d * d;
  }
  return t;
}

static float row_sum(const float *restrict x, int n) {
  v8f s = {0};
  int j = 0;
  for (; j + 8 <= n; j += 8) s += load8(x + j);
  float t = hsum8(s);
  for (; j < n; j++) t += x[j];
  return t;
}

/* row[0..n) = exp(row - max); returns their sum, as row_sum adds. */
static float row_exp_sum(float *restrict row, int n, float mx) {
  for (int j = 0; j < n; j++) row[j] = fast_exp_neg(row[j] - mx);
  return row_sum(row, n);
}

/* dr = p * (dr - dot) */
static void row_softmax_grad(float *restrict dr, const float *restrict p, int n, float dot) {
  for (int j = 0; j < n; j++) dr[j] = p[j] * (dr[j] - dot);
}

struct ln_fwd {
  float *out, *mean, *rstd;
  const float *inp, *w, *b;
  int C;
};

static void ln_fwd_rows(void *arg, size_t lo, size_t hi) {
  const struct ln_fwd *a = arg;
  int C = a->C;
  const float *restrict w = a->w, *restrict bias = a->b;
  for (size_t n = lo; n < hi; n++) {
    const float *restrict x = a->inp + n * C;
    float *restrict y = a->out + n * C;
    float m = row_sum(x, C) / (float)C;
    float v = row_sqdev(x, C, m) / (float)C;
    float s = 1.0f / sqrtf(v + 1e-5f);
    for (int i = 0; i < C; i++) y[i] = (x[i] - m) * s * w[i] + bias[i];
    a->mean[n] = m;
    a->rstd[n] = s;
  }
}

void tc_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int N, int C) {
  struct ln_fwd a = {out, mean, rstd, inp, w, b, C};
  tc_par_for((size_t)N, 16, ln_fwd_rows, &a);
}

struct ln_bwd {
  float *dinp, *dw, *db;
  const float *dout, *inp, *w, *mean, *rstd;
  int N, C;
};

/* dinp, one row per index; the two row sums go like row_sum's. */
static void ln_bwd_rows(void *arg, size_t lo, size_t hi) {
  const struct ln_bwd *a = arg;
  int C = a->C;
  const float *restrict w = a->w;
  for (size_t n = lo; n < hi; n++) {
    const float *restrict dy = a->dout + n * C, *restrict x = a->inp + n * C;
    float *restrict dx = a->dinp + n * C;
    float m = a->mean[n], s = a->rstd[n];
    v8f sm = {0}, sn = {0};
    int i = 0;
    for (; i + 8 <= C; i += 8) {
      v8f dn = load8(w + i) * load8(dy + i);
      sm += dn;
      sn += dn * ((load8(x + i) - m) * s);
    }
    float dnorm_mean = hsum8(sm), dnorm_norm = hsum8(sn);
    for (; i < C; i++) {
      float dn = w[i] * dy[i];
      dnorm_mean += dn;
      dnorm_norm += dn * ((x[i] - m) * s);
    }
    dnorm_mean /= (float)C;
    dnorm_norm /= (float)C;
    for (i = 0; i < C; i++)
      dx[i] += (w[i] * dy[i] - dnorm_mean - (x[i] - m) * s * dnorm_norm) * s;
  }
}

/* dw and db over column blocks [16 lo, 16 hi), each column summed over the
 * rows in order; a full block keeps its sums in registers. */
static void ln_bwd_cols(void *arg, size_t lo, size_t hi) {
  const struct ln_bwd *a = arg;
  int C = a->C;
  for (size_t blk = lo; blk < hi; blk++) {
    int i0 = (int)blk * 16, w = C - i0 < 16 ? C - i0 : 16;
    float *dw = a->dw + i0, *db = a->db + i0;
    if (w == 16) {
      float aw[16], ab[16];
      for (int i = 0; i < 16; i++) aw[i] = dw[i], ab[i] = db[i];
      for (int n = 0; n < a->N; n++) {
        const float *dy = a->dout + (size_t)n * C + i0, *x = a->inp + (size_t)n * C + i0;
        float m = a->mean[n], s = a->rstd[n];
        for (int i = 0; i < 16; i++) {
          aw[i] += (x[i] - m) * s * dy[i];
          ab[i] += dy[i];
        }
      }
      for (int i = 0; i < 16; i++) dw[i] = aw[i], db[i] = ab[i];
    } else {
      for (int n = 0; n < a->N; n++) {
        const float *dy = a->dout + (size_t)n * C + i0, *x = a->inp + (size_t)n * C + i0;
        float m = a->mean[n], s = a->rstd[n];
        for (int i = 0; i < w; i++) {
          dw[i] += (x[i] - m) * s * dy[i];
          db[i] += dy[i];
        }
      }
    }
  }
}

void tc_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                           const float *inp, const float *w, const float *mean,
                           const float *rstd, int N, int C) {
  struct ln_bwd a = {dinp, dw, db, dout, inp, w, mean, rstd, N, C};
  tc_par_for((size_t)N, 16, ln_bwd_rows, &a);
  tc_par_for(((size_t)C + 15) / 16, 1, ln_bwd_cols, &a);
}

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

/* exp(x) for x >= 0, saturating at e^88. Branch-free: the clamp works on the
 * bit pattern (non-negative floats order like their bits) because a float
 * compare would keep GCC from vectorising under -ftrapping-math. */
static inline float fast_exp_pos(float x) {
  union {
    float f;
    int32_t i;
  } v = {.f = x};
  const int32_t max_bits = 0x42b00000; /* 88.0f */
  v.i = v.i > max_bits ? max_bits : v.i;
  x = v.f;
  return exp_in_range(x);
}

/* tanh through exp: absolute error about 1e-7, which is what GELU needs. */
static inline float fast_tanh(float u) {
  float t = 1.0f - 2.0f / (fast_exp_pos(2.0f * fabsf(u)) + 1.0f);
  return copysignf(t, u);
}

/* Elementwise loops run over fixed blocks of EW_BLOCK elements, the unit
 * tc_par hands out; a block is always computed by the same vectorised code
 * whatever the thread count. A span function sees one block; out never
 * overlaps an input except by being equal to it, where the op allows in place
 * (the backward ops' dout, tc_add's a or b). */
#define EW_BLOCK 2048

typedef void (*ew_span_fn)(float *out, const float *a, const float *b, size_t n);

struct ew {
  float *out;
  const float *a, *b;
  size_t n;
  ew_span_fn span;
};

static void ew_blocks(void *arg, size_t lo, size_t hi) {
  const struct ew *e = arg;
  for (size_t blk = lo; blk < hi; blk++) {
    size_t i0 = blk * EW_BLOCK, i1 = i0 + EW_BLOCK < e->n ? i0 + EW_BLOCK : e->n;
    e->span(e->out + i0, e->a + i0, e->b ? e->b + i0 : NULL, i1 - i0);
  }
}

static void ew_run(float *out, const float *a, const float *b, size_t n, ew_span_fn span) {
  struct ew e = {out, a, b, n, span};
  tc_par_for((n + EW_BLOCK - 1) / EW_BLOCK, 2, ew_blocks, &e);
}

static inline float gelu_fwd1(float x) {
  float u = GELU_K * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + fast_tanh(u));
}

static inline float gelu_grad1(float x) {
  float u = GELU_K * (x + 0.044715f * x * x * x);
  float t = fast_tanh(u);
  float sech2 = 1.0f - t * t;
  return 0.5f * (1.0f + t) + 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
}

static void gelu_fwd_loop(float *restrict out, const float *restrict inp, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = gelu_fwd1(inp[i]);
}

static void gelu_fwd_span(float *out, const float *inp, const float *unused, size_t n) {
  (void)unused;
  gelu_fwd_loop(out, inp, n);
}

void tc_gelu_forward(float *out, const float *inp, size_t n) {
  ew_run(out, inp, NULL, n, gelu_fwd_span);
}

static void gelu_bwd_loop(float *restrict out, const float *restrict inp,
                          const float *restrict dout, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = gelu_grad1(inp[i]) * dout[i];
}

static void gelu_bwd_inplace(float *restrict io, const float *restrict inp, size_t n) {
  for (size_t i = 0; i < n; i++) io[i] = gelu_grad1(inp[i]) * io[i];
}

static void gelu_bwd_span(float *out, const float *inp, const float *dout, size_t n) {
  if (out == dout)
    gelu_bwd_inplace(out, inp, n);
  else
    gelu_bwd_loop(out, inp, dout, n);
}

void tc_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
  ew_run(dinp, inp, dout, n, gelu_bwd_span);
}

static void relu_fwd_loop(float *restrict out, const float *restrict inp, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

static void relu_fwd_span(float *out, const float *inp, const float *unused, size_t n) {
  (void)unused;
  relu_fwd_loop(out, inp, n);
}

void tc_relu_forward(float *out, const float *inp, size_t n) {
  ew_run(out, inp, NULL, n, relu_fwd_span);
}

static void relu_bwd_loop(float *restrict out, const float *restrict inp,
                          const float *restrict dout, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = inp[i] > 0.0f ? dout[i] : 0.0f;
}

static void relu_bwd_inplace(float *restrict io, const float *restrict inp, size_t n) {
  for (size_t i = 0; i < n; i++) io[i] = inp[i] > 0.0f ? io[i] : 0.0f;
}

static void relu_bwd_span(float *out, const float *inp, const float *dout, size_t n) {
  if (out == dout)
    relu_bwd_inplace(out, inp, n);
  else
    relu_bwd_loop(out, inp, dout, n);
}

void tc_relu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
  ew_run(dinp, inp, dout, n, relu_bwd_span);
}

/* Attention works on blocks of ATT_BLOCK query rows: block [r0, r1) only
 * sees keys [0, r1), so the products skip the masked upper triangle except
 * inside the diagonal block, whose upper part is held at zero. */
#define ATT_BLOCK 32

struct attn {
  float *out, *att, *scratch;
  float *dqkv;
  const float *qkv, *dout, *att_c;
  int B, T, C, H;
};

/* One (b, h) pair per index; pairs write disjoint memory. */
static void attn_fwd_pairs(void *arg, size_t lo, size_t hi) {
  const struct attn *a = arg;
  int T = a->T, C = a->C, H = a->H, hs = C / H, C3 = 3 * C;
  float scale = 1.0f / sqrtf((float)hs);
  for (size_t p = lo; p < hi; p++) {
    int b = (int)(p / H), h = (int)(p % H);
    const float *q = a->qkv + (size_t)b * T * C3 + h * hs;
    const float *k = q + C, *v = q + 2 * C;
    float *att = a->att + p * T * T;
    float *out = a->out + (size_t)b * T * C + h * hs;
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
      int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
      float *ab = att + (size_t)r0 * T;
      tc_sgemm(TC_N, TC_T, r1 - r0, r1, hs, scale, q + (size_t)r0 * C3, C3, k, C3, 0.0f, ab, T);
      for (int t = r0; t < r1; t++) {
        float *row = att + (size_t)t * T;
        float mx = row_max(row, t + 1);
        float sum = row_exp_sum(row, t + 1, mx);
        row_scale(row, t + 1, 1.0f / sum);
        memset(row + t + 1, 0, sizeof(float) * (size_t)(T - t - 1));
      }
      tc_sgemm(TC_N, TC_N, r1 - r0, hs, r1, 1.0f, ab, T, v, C3, 0.0f, out + (size_t)r0 * C, C);
    }
  }
}

void tc_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                          int H) {
  struct attn a = {.out = out, .att = att, .qkv = qkv, .B = B, .T = T, .C = C, .H = H};
  tc_par_for((size_t)B * H, 1, attn_fwd_pairs, &a);
}

size_t tc_attention_scratch_floats(int T) { return (size_t)T * T; }

static void attn_bwd_pairs(void *arg, size_t lo, size_t hi) {
  const struct attn *a = arg;
  int T = a->T, C = a->C, H = a->H, hs = C / H, C3 = 3 * C;
  float scale = 1.0f / sqrtf((float)hs);
  float *datt = a->scratch + (size_t)tc_par_worker() * T * T;
  for (size_t p = lo; p < hi; p++) {
    int b = (int)(p / H), h = (int)(p % H);
    const float *q = a->qkv + (size_t)b * T * C3 + h * hs;
    const float *k = q + C, *v = q + 2 * C;
    float *dq = a->dqkv + (size_t)b * T * C3 + h * hs;
    float *dk = dq + C, *dv = dq + 2 * C;
    const float *att = a->att_c + p * T * T;
    const float *dout = a->dout + (size_t)b * T * C + h * hs;
    /* query blocks: datt, the softmax gradient, dq */
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
      int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
      float *db = datt + (size_t)r0 * T;
      tc_sgemm(TC_N, TC_T, r1 - r0, r1, hs, 1.0f, dout + (size_t)r0 * C, C, v, C3, 0.0f, db, T);
      for (int t = r0; t < r1; t++) {
        const float *pr = att + (size_t)t * T;
        float *dr = datt + (size_t)t * T;
        float dot = row_dot(pr, dr, t + 1);
        row_softmax_grad(dr, pr, t + 1, dot);
        for (int j = t + 1; j < r1; j++) dr[j] = 0.0f;
      }
      tc_sgemm(TC_N, TC_N, r1 - r0, hs, r1, scale, db, T, k, C3, 0.0f, dq + (size_t)r0 * C3, C3);
    }
    /* key blocks: key j only receives from queries t >= j */
    for (int c0 = 0; c0 < T; c0 += ATT_BLOCK) {
      int c1 = c0 + ATT_BLOCK < T ? c0 + ATT_BLOCK : T;
      size_t at = (size_t)c0 * T + c0;
      tc_sgemm(TC_T, TC_N, c1 - c0, hs, T - c0, 1.0f, att + at, T, dout + (size_t)c0 * C, C, 0.0f,
               dv + (size_t)c0 * C3, C3);
      tc_sgemm(TC_T, TC_N, c1 - c0, hs, T - c0, scale, datt + at, T, q + (size_t)c0 * C3, C3,
               0.0f, dk + (size_t)c0 * C3, C3);
    }
  }
}

void tc_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                           const float *att, int B, int T, int C, int H) {
  struct attn a = {.dqkv = dqkv, .scratch = scratch, .dout = dout, .qkv = qkv, .att_c = att,
                   .B = B, .T = T, .C = C, .H = H};
  tc_par_for((size_t)B * H, 1, attn_bwd_pairs, &a);
}

struct xent {
  float *dlogits, *losses;
  const float *logits;
  const int32_t *targets;
  int V;
  float dscale;
  int32_t *argmax;
};

static void xent_rows(void *arg, size_t lo, size_t hi) {
  const struct xent *x = arg;
  int V = x->V;
  enum { PIECE = 256 };
  float tmp[PIECE];
  for (size_t n = lo; n < hi; n++) {
    const float *l = x->logits + n * V;
    float mx = row_max(l, V);
    int am = 0;
    while (l[am] != mx && am + 1 < V) am++; /* the first maximum */
    int y = x->targets[n];
    float ly = l[y];
    float *d = x->dlogits ? x->dlogits + n * V : NULL; /* may alias l */
    float sum = 0.0f;
    for (int i0 = 0; i0 < V; i0 += PIECE) {
      int c = V - i0 < PIECE ? V - i0 : PIECE;
      for (int i = 0; i < c; i++) tmp[i] = l[i0 + i];
      sum += row_exp_sum(tmp, c, mx);
      if (d) memcpy(d + i0, tmp, sizeof(float) * (size_t)c);
    }
    x->losses[n] = mx + logf(sum) - ly;
    x->argmax[n] = am;
    if (d) {
      float inv = 1.0f / sum;
      for (int i = 0; i < V; i++) d[i] = d[i] * inv * x->dscale;
      d[y] -= x->dscale;
    }
  }
}

double tc_softmax_xent(float *dlogits, float *losses, const float *logits,
                       const int32_t *targets, int N, int V, float dscale,
                       int64_t *ret_correct) {
  struct xent x = {dlogits, losses, logits, targets, V, dscale, NULL};
  /* losses and argmax live in one per-call scratch owned by the caller's buffer:
   * argmax reuses the upper half of a small stack buffer per chunk below. */
  enum { CHUNK = 1024 };
  float lbuf[CHUNK];
  int32_t abuf[CHUNK];
  double total = 0.0;
  int64_t correct = 0;
  for (int n0 = 0; n0 < N; n0 += CHUNK) {
    int n1 = n0 + CHUNK < N ? n0 + CHUNK : N;
    struct xent c = x;
    c.logits = logits + (size_t)n0 * V;
    c.targets = targets + n0;
    c.dlogits = dlogits ? dlogits + (size_t)n0 * V : NULL;
    c.losses = losses ? losses + n0 : lbuf;
    c.argmax = abuf;
    tc_par_for((size_t)(n1 - n0), 16, xent_rows, &c);
    for (int i = 0; i < n1 - n0; i++) {
      total += c.losses[i];
      correct += abuf[i] == targets[n0 + i];
    }
  }
  if (ret_correct) *ret_correct = correct;
  return total / (double)N;
}

void tc_embed_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                      int B, int T, int C) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      float *o = out + ((size_t)b * T + t) * C;
      const float *e = wte + (size_t)tokens[b * T + t] * C, *p = wpe + (size_t)t * C;
      for (int i = 0; i < C; i++) o[i] = e[i] + p[i];
    }
}

void tc_embed_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                       int B, int T, int C) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      const float *d = dout + ((size_t)b * T + t) * C;
      float *e = dwte + (size_t)tokens[b * T + t] * C, *p = dwpe + (size_t)t * C;
      for (int i = 0; i < C; i++) {
        e[i] += d[i];
        p[i] += d[i];
      }
    }
}

static void add_loop(float *restrict out, const float *restrict a, const float *restrict b,
                     size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

static void add_inplace(float *restrict io, const float *restrict b, size_t n) {
  for (size_t i = 0; i < n; i++) io[i] = io[i] + b[i];
}

static void add_span(float *out, const float *a, const float *b, size_t n) {
  if (out == a)
    add_inplace(out, b, n);
  else if (out == b)
    add_inplace(out, a, n);
  else
    add_loop(out, a, b, n);
}

void tc_add(float *out, const float *a, const float *b, size_t n) {
  ew_run(out, a, b, n, add_span);
}
