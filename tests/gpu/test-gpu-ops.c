/* CUDA kernels against the CPU path, one kernel group per run:
 *   test-gpu-ops layernorm|gelu|attention|xent|adamw|linear|embed|sumsq
 *   test-gpu-ops attention-bf16|linear-bf16|mlp-bf16   (a bf16 context's products)
 * Small random inputs; each comparison prints its max abs/rel difference and
 * the tolerance it is held to. Exit 77 (skipped) without a GPU. */
#include <stdint.h>

#include "gpu_check.h"
#include "tc_ops.h"

static struct tc_cuda_ctx *ctx;
static int bf16;

static int layernorm(struct tc_rng *r) {
  int N = 37, C = 96;
  size_t nc = (size_t)N * C;
  float *x = rnd(r, nc, 1.5f), *w = rnd(r, C, 1.0f), *b = rnd(r, C, 0.5f), *dy = rnd(r, nc, 1.0f);
  float *y = calloc(nc, 4), *mean = calloc(N, 4), *rstd = calloc(N, 4);
  float *dx = calloc(nc, 4), *dw = calloc(C, 4), *db = calloc(C, 4);
  tc_layernorm_forward(y, mean, rstd, x, w, b, N, C);
  tc_layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, N, C);
  float *zc = calloc(nc, 4);
  float *d_x = dev_copy(x, nc * 4), *d_w = dev_copy(w, C * 4), *d_b = dev_copy(b, C * 4);
  float *d_dy = dev_copy(dy, nc * 4), *d_y = dev_copy(zc, nc * 4), *d_m = dev_copy(zc, N * 4);
  float *d_rs = dev_copy(zc, N * 4), *d_dx = dev_copy(zc, nc * 4), *d_dw = dev_copy(zc, C * 4);
  float *d_db = dev_copy(zc, C * 4);
  CHECK(tc_cu_layernorm_forward(ctx, d_y, d_m, d_rs, d_x, d_w, d_b, N, C) == 0);
  CHECK(tc_cu_layernorm_backward(ctx, d_dx, d_dw, d_db, d_dy, d_x, d_w, d_m, d_rs, N, C) == 0);
  compare("layernorm out", y, host_copy(d_y, nc), nc, 1e-5, 1e-5);
  compare("layernorm mean", mean, host_copy(d_m, N), N, 1e-6, 1e-5);
  compare("layernorm rstd", rstd, host_copy(d_rs, N), N, 1e-6, 1e-5);
  compare("layernorm dinp", dx, host_copy(d_dx, nc), nc, 1e-5, 1e-4);
  compare("layernorm dw", dw, host_copy(d_dw, C), C, 1e-4, 1e-4);
  compare("layernorm db", db, host_copy(d_db, C), C, 1e-4, 1e-4);
  return 0;
}

static int gelu(struct tc_rng *r) {
  size_t n = 10007;
  float *x = rnd(r, n, 3.0f), *dy = rnd(r, n, 1.0f), *y = calloc(n, 4), *dx = calloc(n, 4);
  tc_gelu_forward(y, x, n);
  tc_gelu_backward(dx, x, dy, n);
  float *d_x = dev_copy(x, n * 4), *d_dy = dev_copy(dy, n * 4), *d_y = dev_copy(y, n * 4);
  float *d_dx = dev_copy(dx, n * 4);
  CHECK(tc_cu_gelu_forward(ctx, d_y, d_x, n) == 0);
  CHECK(tc_cu_gelu_backward(ctx, d_dx, d_x, d_dy, n) == 0);
  compare("gelu forward", y, host_copy(d_y, n), n, 1e-6, 1e-5);
  compare("gelu backward", dx, host_copy(d_dx, n), n, 1e-6, 1e-5);
  return 0;
}

static int attention_shape(struct tc_rng *r, int B, int T, int C, int H) {
  printf(" B=%d T=%d C=%d H=%d\n", B, T, C, H);
  size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * H * T * T;
  float *qkv = rnd(r, nq, 1.0f), *dout = rnd(r, no, 1.0f);
  float *out = calloc(no, 4), *att = calloc(na, 4), *dqkv = calloc(nq, 4);
  float *scratch = calloc(tc_attention_scratch_floats(T), 4);
  tc_attention_forward(out, att, qkv, B, T, C, H);
  tc_attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, H);
  float *d_qkv = dev_copy(qkv, nq * 4), *d_dout = dev_copy(dout, no * 4);
  float *d_out = dev_copy(out, no * 4), *d_att = dev_copy(att, na * 4);
  float *d_dqkv = dev_copy(dqkv, nq * 4), *d_datt = dev_copy(att, na * 4);
  CHECK(tc_cu_attention_forward(ctx, d_out, d_att, d_qkv, B, T, C, H) == 0);
  CHECK(tc_cu_attention_backward(ctx, d_dqkv, d_datt, d_dout, d_out, d_qkv, d_att, B, T, C, H) ==
        0);
  if (bf16) { /* bf16 operands and bf16 probabilities: about 8 significant bits */
    compare("attention out", out, host_copy(d_out, no), no, 2e-2, 2e-2);
    compare("attention dqkv", dqkv, host_copy(d_dqkv, nq), nq, 3e-2, 3e-2);
    return 0;
  }
  compare("attention out", out, host_copy(d_out, no), no, 1e-5, 1e-4);
  compare("attention probabilities", att, host_copy(d_att, na), na, 1e-6, 1e-4);
  compare("attention dqkv", dqkv, host_copy(d_dqkv, nq), nq, 1e-5, 1e-4);
  return 0;
}

/* T=17, head size 12: the general softmax; T=264 (a multiple of 8, over
 * 256): the bf16 context's vectorised one with two pieces per lane, or (head
 * size 32) its fused attention, five key tiles with a partial last one. A
 * bf16 context also runs the fused kernels at head size 64 on a partial
 * tile and at GPT-2 small's shape (T=1024, 12 heads of 64). */
static int attention(struct tc_rng *r) {
  attention_shape(r, 3, 17, 48, 4);
  attention_shape(r, 2, 264, 64, 2);
  if (bf16) {
    attention_shape(r, 2, 200, 128, 2);
    attention_shape(r, 1, 1024, 768, 12);
  }
  return 0;
}

static int xent(struct tc_rng *r) {
  int N = 300, V = 77;
  size_t n = (size_t)N * V;
  float *logits = rnd(r, n, 2.0f), *dl = calloc(n, 4), *losses = calloc(N, 4);
  int32_t *tg = malloc(sizeof(int32_t) * N), *correct = calloc(N, 4);
  for (int i = 0; i < N; i++) tg[i] = (int32_t)tc_rng_below(r, (uint64_t)V);
  int64_t right = 0;
  double mean = tc_softmax_xent(dl, losses, logits, tg, N, V, 1.0f / N, &right);
  float *d_l = dev_copy(logits, n * 4), *d_losses = dev_copy(losses, N * 4);
  int32_t *d_tg = dev_copy(tg, N * 4), *d_c = dev_copy(correct, N * 4);
  CHECK(tc_cu_softmax_xent(ctx, d_l, d_losses, d_c, d_l, d_tg, N, V, 1.0f / N) == 0);
  float *g_losses = host_copy(d_losses, N);
  compare("xent losses", losses, g_losses, N, 1e-5, 1e-5);
  compare("xent dlogits", dl, host_copy(d_l, n), n, 1e-7, 1e-4);
  double gmean = 0.0;
  for (int i = 0; i < N; i++) gmean += g_losses[i];
  gmean /= N;
  printf("  xent mean loss cpu %.9g gpu %.9g diff %.3e\n", mean, gmean, fabs(mean - gmean));
  CHECK_NEAR(gmean, mean, 1e-5);
  CHECK(tc_cuda_to_host(correct, d_c, N * 4) == 0);
  int64_t gright = 0;
  for (int i = 0; i < N; i++) gright += correct[i];
  CHECK_INT(gright, right);
  return 0;
}

static int adamw(struct tc_rng *r) {
  size_t n = 5003;
  float *p = rnd(r, n, 0.5f), *g = rnd(r, n, 0.1f), *m = rnd(r, n, 0.01f), *v = rnd(r, n, 0.01f);
  for (size_t i = 0; i < n; i++) v[i] = v[i] * v[i];
  float *d_p = dev_copy(p, n * 4), *d_g = dev_copy(g, n * 4), *d_m = dev_copy(m, n * 4);
  float *d_v = dev_copy(v, n * 4);
  float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, decay = 1.0f - lr * 0.1f;
  float step = (float)(lr / (1.0 - pow(b1, 3))), bc2s = (float)sqrt(1.0 - pow(b2, 3));
  for (size_t i = 0; i < n; i++) { /* tc_model_adamw's arithmetic */
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    p[i] = p[i] * decay - step * m[i] / (sqrtf(v[i]) / bc2s + eps);
  }
  uint16_t *p16 = calloc(n, 2), *d_p16 = dev_copy(p16, n * 2);
  CHECK(tc_cu_adamw(ctx, d_p, d_p16, d_g, d_m, d_v, n, b1, b2, eps, decay, step, bc2s) == 0);
  float *gp = host_copy(d_p, n);
  compare("adamw params", p, gp, n, 1e-6, 1e-6);
  /* the bf16 copy written alongside: the new params rounded to nearest even */
  CHECK(tc_cuda_to_host(p16, d_p16, n * 2) == 0);
  size_t off = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &gp[i], 4);
    uint16_t want = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    off += p16[i] != want;
  }
  printf("  adamw bf16 copy: %zu of %zu differ from the rounded params\n", off, n);
  CHECK(off == 0);
  compare("adamw m", m, host_copy(d_m, n), n, 1e-8, 1e-6);
  compare("adamw v", v, host_copy(d_v, n), n, 1e-10, 1e-6);
  return 0;
}

static int linear(struct tc_rng *r) {
  int N = 65, C = 80, OC = 144;
  float *x = rnd(r, (size_t)N * C, 1.0f), *w = rnd(r, (size_t)OC * C, 0.1f);
  float *b = rnd(r, OC, 0.1f), *dy = rnd(r, (size_t)N * OC, 1.0f);
  float *y = calloc((size_t)N * OC, 4), *dx = calloc((size_t)N * C, 4);
  float *dw = calloc((size_t)OC * C, 4), *db = calloc(OC, 4);
  tc_linear_forward(y, x, w, b, N, C, OC);
  tc_linear_backward(dx, dw, db, dy, x, w, N, C, OC, 0);
  float *d_x = dev_copy(x, (size_t)N * C * 4), *d_w = dev_copy(w, (size_t)OC * C * 4);
  float *d_b = dev_copy(b, OC * 4), *d_dy = dev_copy(dy, (size_t)N * OC * 4);
  float *z = calloc((size_t)OC * C + (size_t)N * OC + (size_t)N * C, 4);
  float *d_y = dev_copy(z, (size_t)N * OC * 4), *d_dx = dev_copy(z, (size_t)N * C * 4);
  float *d_dw = dev_copy(z, (size_t)OC * C * 4), *d_db = dev_copy(z, OC * 4);
  CHECK(tc_cu_linear_forward(ctx, d_y, d_x, d_w, d_b, N, C, OC) == 0);
  CHECK(tc_cu_linear_backward(ctx, d_dx, d_dw, d_db, d_dy, d_x, d_w, N, C, OC) == 0);
  double a = bf16 ? 2e-2 : 1e-5, rt = bf16 ? 2e-2 : 1e-4; /* bf16: 8-bit operands */
  compare("linear out (cuBLAS)", y, host_copy(d_y, (size_t)N * OC), (size_t)N * OC, a, rt);
  compare("linear dinp", dx, host_copy(d_dx, (size_t)N * C), (size_t)N * C, a, rt);
  compare("linear dw", dw, host_copy(d_dw, (size_t)OC * C), (size_t)OC * C, bf16 ? 0.2 : 1e-4,
          bf16 ? 2e-2 : 1e-4);
  /* fp32: the sum of dout in both; bf16: the sum of dout's bf16 copy */
  compare("linear dbias", db, host_copy(d_db, OC), OC, bf16 ? 2e-2 : 1e-4, bf16 ? 2e-2 : 1e-4);
  return 0;
}

/* A bf16 context's MLP products with GELU in cublasLt's epilogue: fc + GELU
 * forward, and the next linear's backward through GELU's derivative. */
static int mlp_gelu(struct tc_rng *r) {
  int N = 64, C = 96, OC = 384;
  size_t nh = (size_t)N * OC, nx = (size_t)N * C;
  float *x = rnd(r, nx, 1.0f), *w1 = rnd(r, (size_t)OC * C, 0.15f), *b1 = rnd(r, OC, 0.1f);
  float *w2 = rnd(r, (size_t)C * OC, 0.05f), *dy = rnd(r, nx, 1.0f);
  float *h = calloc(nh, 4), *g = calloc(nh, 4), *dg = calloc(nh, 4), *dh = calloc(nh, 4);
  float *dw2 = calloc((size_t)C * OC, 4), *db2 = calloc(C, 4);
  tc_linear_forward(h, x, w1, b1, N, C, OC);
  tc_gelu_forward(g, h, nh);
  tc_linear_backward(dg, dw2, db2, dy, g, w2, N, OC, C, 0);
  tc_gelu_backward(dh, h, dg, nh);
  float *z = calloc(nh + (size_t)C * OC, 4);
  float *d_x = dev_copy(x, nx * 4), *d_w1 = dev_copy(w1, (size_t)OC * C * 4);
  float *d_b1 = dev_copy(b1, OC * 4), *d_w2 = dev_copy(w2, (size_t)C * OC * 4);
  float *d_dy = dev_copy(dy, nx * 4), *d_g = dev_copy(z, nh * 4), *d_dh = dev_copy(z, nh * 4);
  float *d_dw2 = dev_copy(z, (size_t)C * OC * 4), *d_db2 = dev_copy(z, C * 4);
  void *d_pre16 = dev_copy(z, nh * 2), *d_g16 = dev_copy(z, nh * 2), *d_dh16 = dev_copy(z, nh * 2);
  CHECK(tc_cu_keep_bf16(ctx, d_g, nh, d_g16, 0) == 0);
  CHECK(tc_cu_keep_bf16(ctx, d_dh, nh, d_dh16, 0) == 0);
  /* the path the gpt model takes on this GPU: both directions must have an algorithm */
  CHECK(tc_cu_lt_ready(ctx, 0, N, C, OC, d_pre16));
  CHECK(tc_cu_lt_ready(ctx, 1, N, OC, C, d_pre16));
  CHECK(tc_cu_linear_gelu_forward(ctx, d_g, d_pre16, d_x, d_w1, d_b1, N, C, OC) == 0);
  CHECK(tc_cu_linear_backward_gelu(ctx, d_dh, d_pre16, d_dw2, d_db2, d_dy, d_g, d_w2, N, OC,
                                   C) == 0);
  /* bf16 operands and bf16 outputs: about 8 significant bits */
  compare("fc out before GELU (bf16 aux)", h, host_copy16(d_pre16, nh), nh, 2e-2, 2e-2);
  compare("fc out after GELU (bf16)", g, host_copy16(d_g16, nh), nh, 2e-2, 2e-2);
  compare("dinp through GELU (bf16)", dh, host_copy16(d_dh16, nh), nh, 2e-2, 3e-2);
  compare("proj dw", dw2, host_copy(d_dw2, (size_t)C * OC), (size_t)C * OC, 0.2, 2e-2);
  compare("proj dbias", db2, host_copy(d_db2, C), C, 2e-2, 2e-2);
  return 0;
}

static int embed(struct tc_rng *r) {
  int B = 3, T = 11, C = 40, V = 29;
  size_t N = (size_t)B * T;
  int32_t *tok = malloc(sizeof(int32_t) * N);
  for (size_t i = 0; i < N; i++) tok[i] = (int32_t)tc_rng_below(r, (uint64_t)V);
  float *wte = rnd(r, (size_t)V * C, 1.0f), *wpe = rnd(r, (size_t)T * C, 1.0f);
  float *dy = rnd(r, N * C, 1.0f), *y = calloc(N * C, 4);
  float *dwte = calloc((size_t)V * C, 4), *dwpe = calloc((size_t)T * C, 4);
  tc_embed_forward(y, tok, wte, wpe, B, T, C);
  tc_embed_backward(dwte, dwpe, dy, tok, B, T, C);
  int32_t *d_tok = dev_copy(tok, N * 4);
  float *d_wte = dev_copy(wte, (size_t)V * C * 4), *d_wpe = dev_copy(wpe, (size_t)T * C * 4);
  float *d_dy = dev_copy(dy, N * C * 4), *d_y = dev_copy(y, N * C * 4);
  float *zero = calloc((size_t)V * C + (size_t)T * C + N * V, 4);
  float *d_dwte = dev_copy(zero, (size_t)V * C * 4), *d_dwpe = dev_copy(zero, (size_t)T * C * 4);
  float *d_oh = dev_copy(zero, N * V * 4);
  CHECK(tc_cu_embed_forward(ctx, d_y, d_tok, d_wte, d_wpe, B, T, C) == 0);
  CHECK(tc_cu_embed_backward(ctx, d_dwte, d_dwpe, d_oh, d_dy, d_tok, B, T, C, V) == 0);
  compare("embedding out", y, host_copy(d_y, N * C), N * C, 0.0, 0.0);
  compare("embedding dwte", dwte, host_copy(d_dwte, (size_t)V * C), (size_t)V * C, 1e-5, 1e-5);
  compare("embedding dwpe", dwpe, host_copy(d_dwpe, (size_t)T * C), (size_t)T * C, 1e-5, 1e-5);
  return 0;
}

static int sumsq(struct tc_rng *r) {
  size_t n = 123457;
  float *x = rnd(r, n, 0.3f);
  double cpu = 0.0, gpu = -1.0, again = -2.0;
  for (size_t i = 0; i < n; i++) cpu += (double)x[i] * x[i];
  float *d_x = dev_copy(x, n * 4);
  CHECK(tc_cu_sumsq(ctx, d_x, n, &gpu) == 0);
  CHECK(tc_cu_sumsq(ctx, d_x, n, &again) == 0);
  printf("  sum of squares cpu %.17g gpu %.17g rel diff %.3e\n", cpu, gpu, fabs(gpu - cpu) / cpu);
  CHECK_NEAR(gpu / cpu, 1.0, 1e-12);
  CHECK(gpu == again); /* fixed order: bit-identical when repeated */
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test-gpu-ops layernorm|gelu|attention|xent|adamw|linear|embed|sumsq"
                    " (attention and linear also with -bf16), mlp-bf16\n");
    return 2;
  }
  gpu_or_skip("test-gpu-ops");
  tc_set_threads(1);
  const char *g = argv[1];
  size_t gl = strlen(g);
  char group[32];
  bf16 = gl > 5 && !strcmp(g + gl - 5, "-bf16");
  snprintf(group, sizeof group, "%.*s", (int)(bf16 ? gl - 5 : gl), g);
  if (tc_cuda_ctx_new(0, bf16, &ctx) < 0) {
    fprintf(stderr, "cannot create the CUDA context\n");
    return 1;
  }
  struct tc_rng r;
  tc_rng_seed(&r, 42, 7);
  g = group;
  printf("%s (%s, CUDA vs CPU path):\n", g, bf16 ? "bf16 products" : "fp32");
  if (!strcmp(g, "layernorm")) layernorm(&r);
  else if (!strcmp(g, "gelu")) gelu(&r);
  else if (!strcmp(g, "attention")) attention(&r);
  else if (!strcmp(g, "xent")) xent(&r);
  else if (!strcmp(g, "adamw")) adamw(&r);
  else if (!strcmp(g, "linear")) linear(&r);
  else if (!strcmp(g, "mlp") && bf16) mlp_gelu(&r);
  else if (!strcmp(g, "embed")) embed(&r);
  else if (!strcmp(g, "sumsq")) sumsq(&r);
  else {
    fprintf(stderr, "unknown group %s\n", g);
    return 2;
  }
  CHECK(tc_cuda_ctx_sync(ctx) == 0);
  ctx = tc_cuda_ctx_free(ctx);
  TEST_MAIN_END();
}
