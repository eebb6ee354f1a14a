/* Unit tests of the CPU path's layers: every backward against central finite
 * differences (loss = sum(out * R) accumulated in double), the CBLAS GEMM
 * against the plain-C reference, whole-model gradients, and bit-identical
 * results across thread counts. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tc_model.h"
#include "tc_ops.h"
#include "tc_rng.h"

static struct tc_rng rng;

static float *randv(size_t n, float scale) {
  float *p = malloc(sizeof(float) * n);
  for (size_t i = 0; i < n; i++) p[i] = scale * tc_rng_normal(&rng);
  return p;
}

static float *zeros(size_t n) { return calloc(n, sizeof(float)); }

static double dot(const float *a, const float *b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
  return s;
}

typedef double (*loss_fn)(void *ctx);

/* Compares analytic gradient g of x against central differences at up to 24
 * indices; tolerance |num - ana| <= atol + rtol * |ana|. */
static void check_grad(const char *name, float *x, const float *g, size_t n, loss_fn f,
                       void *ctx, double eps, double atol, double rtol) {
  double worst = 0;
  size_t step = n > 24 ? n / 24 : 1;
  int bad = 0;
  for (size_t i = 0; i < n; i += step) {
    float keep = x[i];
    x[i] = keep + (float)eps;
    double lp = f(ctx);
    x[i] = keep - (float)eps;
    double lm = f(ctx);
    x[i] = keep;
    double num = (lp - lm) / (2 * eps), ana = g[i];
    double err = fabs(num - ana);
    if (err > worst) worst = err;
    if (err > atol + rtol * fabs(ana)) {
      if (bad++ < 3)
        fprintf(stderr, "  %s[%zu]: numeric %.6g analytic %.6g\n", name, i, num, ana);
    }
  }
  fprintf(stderr, "%-18s max |numeric - analytic| = %.3g\n", name, worst);
  CHECK(bad == 0);
}

/* ---- linear ---- */
struct lin { int N, C, OC; float *x, *w, *b, *out, *R; };
static double lin_loss(void *p) {
  struct lin *l = p;
  tc_linear_forward(l->out, l->x, l->w, l->b, l->N, l->C, l->OC);
  return dot(l->out, l->R, (size_t)l->N * l->OC);
}
static void test_linear(void) {
  struct lin l = {.N = 5, .C = 7, .OC = 6};
  l.x = randv(35, 1), l.w = randv(42, 0.5f), l.b = randv(6, 0.5f), l.out = zeros(30);
  l.R = randv(30, 1);
  float *dx = randv(35, 1), *dw = zeros(42), *db = zeros(6);
  float *dx0 = malloc(sizeof(float) * 35);
  memcpy(dx0, dx, sizeof(float) * 35);
  tc_linear_backward(dx, dw, db, l.R, l.x, l.w, l.N, l.C, l.OC, 1); /* accumulate mode */
  for (int i = 0; i < 35; i++) dx[i] -= dx0[i];
  check_grad("linear dinp", l.x, dx, 35, lin_loss, &l, 1e-2, 2e-3, 1e-2);
  check_grad("linear dw", l.w, dw, 42, lin_loss, &l, 1e-2, 2e-3, 1e-2);
  check_grad("linear db", l.b, db, 6, lin_loss, &l, 1e-2, 2e-3, 1e-2);
  free(l.x), free(l.w), free(l.b), free(l.out), free(l.R), free(dx), free(dw), free(db), free(dx0);
}

/* ---- layernorm ---- */
struct ln { int N, C; float *x, *w, *b, *out, *mean, *rstd, *R; };
static double ln_loss(void *p) {
  struct ln *l = p;
  tc_layernorm_forward(l->out, l->mean, l->rstd, l->x, l->w, l->b, l->N, l->C);
  return dot(l->out, l->R, (size_t)l->N * l->C);
}
static void test_layernorm(void) {
  struct ln l = {.N = 4, .C = 9};
  l.x = randv(36, 1), l.w = randv(9, 1), l.b = randv(9, 1), l.out = zeros(36);
  l.mean = zeros(4), l.rstd = zeros(4), l.R = randv(36, 1);
  float *dx = zeros(36), *dw = zeros(9), *db = zeros(9);
  ln_loss(&l);
  tc_layernorm_backward(dx, dw, db, l.R, l.x, l.w, l.mean, l.rstd, l.N, l.C);
  check_grad("layernorm dinp", l.x, dx, 36, ln_loss, &l, 1e-2, 3e-3, 2e-2);
  check_grad("layernorm dw", l.w, dw, 9, ln_loss, &l, 1e-2, 3e-3, 2e-2);
  check_grad("layernorm db", l.b, db, 9, ln_loss, &l, 1e-2, 3e-3, 2e-2);
  free(l.x), free(l.w), free(l.b), free(l.out), free(l.mean), free(l.rstd), free(l.R);
  free(dx), free(dw), free(db);
}

/* ---- gelu, relu ---- */
struct ew { size_t n; float *x, *out, *R; int relu; };
static double ew_loss(void *p) {
  struct ew *e = p;
  if (e->relu) tc_relu_forward(e->out, e->x, e->n);
  else tc_gelu_forward(e->out, e->x, e->n);
  return dot(e->out, e->R, e->n);
}
static void test_elementwise(void) {
  struct ew e = {.n = 40};
  e.x = randv(40, 2), e.out = zeros(40), e.R = randv(40, 1);
  for (int i = 0; i < 40; i++) /* keep ReLU's kink out of the difference interval */
    if (fabsf(e.x[i]) < 0.05f) e.x[i] = 0.5f;
  float *dx = zeros(40);
  tc_gelu_backward(dx, e.x, e.R, 40);
  check_grad("gelu", e.x, dx, 40, ew_loss, &e, 1e-2, 2e-3, 1e-2);
  /* the tanh approximation itself, against libm at a few points */
  float xs[5] = {-3.0f, -0.5f, 0.0f, 0.7f, 4.0f}, ys[5];
  tc_gelu_forward(ys, xs, 5);
  for (int i = 0; i < 5; i++) {
    double x = xs[i], ref = 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    CHECK_NEAR(ys[i], ref, 1e-6);
  }
  e.relu = 1;
  tc_relu_backward(dx, e.x, e.R, 40);
  check_grad("relu", e.x, dx, 40, ew_loss, &e, 1e-2, 1e-3, 1e-3);
  free(e.x), free(e.out), free(e.R), free(dx);
}

/* ---- attention ---- */
struct at { int B, T, C, H; float *qkv, *out, *att, *R; };
static double at_loss(void *p) {
  struct at *a = p;
  tc_attention_forward(a->out, a->att, a->qkv, a->B, a->T, a->C, a->H);
  return dot(a->out, a->R, (size_t)a->B * a->T * a->C);
}
static void test_attention_at(int T) {
  struct at a = {.B = 2, .T = T, .C = 8, .H = 2};
  size_t n3 = (size_t)a.B * a.T * 3 * a.C, n = (size_t)a.B * a.T * a.C;
  a.qkv = randv(n3, 1), a.out = zeros(n), a.att = zeros((size_t)a.B * a.H * a.T * a.T);
  a.R = randv(n, 1);
  float *dqkv = zeros(n3), *scratch = zeros(tc_attention_scratch_floats(a.T) * 8);
  at_loss(&a);
  /* causality: probabilities above the diagonal are zero, rows sum to one */
  for (int r = 0; r < a.B * a.H * a.T; r++) {
    int t = r % a.T;
    double s = 0;
    for (int j = 0; j < a.T; j++) {
      s += a.att[r * a.T + j];
      if (j > t) CHECK(a.att[r * a.T + j] == 0.0f);
    }
    CHECK_NEAR(s, 1.0, 1e-5);
  }
  tc_attention_backward(dqkv, scratch, a.R, a.qkv, a.att, a.B, a.T, a.C, a.H);
  check_grad("attention dqkv", a.qkv, dqkv, n3, at_loss, &a, 1e-2, 3e-3, 2e-2);
  free(a.qkv), free(a.out), free(a.att), free(a.R), free(dqkv), free(scratch);
}

static void test_attention(void) { test_attention_at(5); }

/* Rows longer than one 32-row block of the blocked path. Run last: it draws
 * from the shared generator, and the other tests' inputs stay as they were. */
static void test_attention_long(void) { test_attention_at(70); }

/* ---- softmax cross-entropy ---- */
struct xe { int N, V; float *logits; int32_t *y; };
static double xe_loss(void *p) {
  struct xe *x = p;
  return tc_softmax_xent(NULL, NULL, x->logits, x->y, x->N, x->V, 1.0f, NULL);
}
static void test_xent(void) {
  struct xe x = {.N = 6, .V = 11};
  x.logits = randv(66, 2);
  int32_t y[6] = {0, 3, 10, 5, 5, 1};
  x.y = y;
  float *d = zeros(66);
  double l = tc_softmax_xent(d, NULL, x.logits, y, 6, 11, 1.0f / 6, NULL);
  /* reference loss in double */
  double ref = 0;
  for (int n = 0; n < 6; n++) {
    double mx = -1e30, s = 0;
    for (int i = 0; i < 11; i++) mx = fmax(mx, x.logits[n * 11 + i]);
    for (int i = 0; i < 11; i++) s += exp(x.logits[n * 11 + i] - mx);
    ref += mx + log(s) - x.logits[n * 11 + y[n]];
  }
  CHECK_NEAR(l, ref / 6, 1e-5);
  check_grad("xent dlogits", x.logits, d, 66, xe_loss, &x, 1e-2, 2e-3, 1e-2);
  free(x.logits), free(d);
}

/* ---- GEMM: CBLAS against the plain-C reference ---- */
static void test_gemm(void) {
  int M = 37, N = 29, K = 41;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 5;
      float *A = randv((size_t)(ta ? K : M) * lda, 1), *B = randv((size_t)(tb ? N : K) * ldb, 1);
      float *C1 = randv((size_t)M * ldc, 1), *C2 = malloc(sizeof(float) * M * ldc);
      memcpy(C2, C1, sizeof(float) * M * ldc);
      tc_sgemm(ta, tb, M, N, K, 0.7f, A, lda, B, ldb, 0.3f, C1, ldc);
      tc_sgemm_ref(ta, tb, M, N, K, 0.7f, A, lda, B, ldb, 0.3f, C2, ldc);
      double worst = 0;
      for (int i = 0; i < M; i++)
        for (int j = 0; j < ldc; j++) {
          double d = fabs(C1[i * ldc + j] - C2[i * ldc + j]);
          if (j >= N) CHECK(C1[i * ldc + j] == C2[i * ldc + j]); /* padding untouched */
          worst = d > worst ? d : worst;
        }
      fprintf(stderr, "sgemm %c%c             max |cblas - reference| = %.3g\n", ta ? 'T' : 'N',
              tb ? 'T' : 'N', worst);
      CHECK(worst < 1e-4);
      free(A), free(B), free(C1), free(C2);
    }
}

/* A config from its settings ("layers=2 heads=2 ..."). */
static struct tc_config config(const char *model, const char *settings) {
  struct tc_config c;
  char err[256];
  memset(&c, 0, sizeof c);
  int r = tc_config_parse(&c, model, settings, err, sizeof err);
  CHECK_INT(r, 0);
  if (r < 0) fprintf(stderr, "%s %s: %s\n", model, settings, err);
  return c;
}

/* ---- whole models: gradients by finite differences ---- */
struct mdl { struct tc_model *m; struct tc_batch b; };
static double model_loss(void *p) {
  struct mdl *x = p;
  float loss;
  tc_model_forward(x->m, &x->b, &loss);
  return loss;
}

static void test_models(void) {
  struct tc_config g = config("gpt", "layers=2 heads=2 dim=8 ctx=6 vocab=7");
  struct tc_model *m = tc_model_new(&g, 2);
  CHECK(m != NULL);
  struct tc_rng r;
  tc_rng_seed(&r, 7, 1);
  tc_model_init(m, &r);
  for (size_t i = 0; i < m->n_params; i++) m->params[i] += 0.05f * tc_rng_normal(&r);
  int32_t tok[12], tgt[12];
  for (int i = 0; i < 12; i++) tok[i] = (int32_t)tc_rng_below(&r, 7), tgt[i] = (int32_t)tc_rng_below(&r, 7);
  struct mdl x = {m, {.B = 2, .tokens = tok, .targets = tgt}};
  float loss;
  CHECK_INT(tc_model_forward(m, &x.b, &loss), 0);
  CHECK_INT(tc_model_backward(m), 0);
  float *g0 = malloc(sizeof(float) * m->n_params);
  memcpy(g0, m->grads, sizeof(float) * m->n_params);
  for (int t = 0; t < m->n_tensors; t++) {
    const struct tc_tensor *ts = &m->tensors[t];
    check_grad(ts->name, m->params + ts->offset, g0 + ts->offset, ts->numel, model_loss, &x, 1e-2,
               1e-3, 3e-2);
  }
  free(g0);
  m = tc_model_free(m);

  struct tc_config c = config("mlp", "layers=2 hidden=5 in_dim=784 classes=10");
  m = tc_model_new(&c, 3);
  tc_model_init(m, &r);
  float *in = randv(3 * 784, 0.3f);
  int32_t lab[3] = {1, 9, 4};
  struct mdl y = {m, {.B = 3, .inputs = in, .targets = lab}};
  CHECK_INT(tc_model_forward(m, &y.b, &loss), 0);
  CHECK_INT(tc_model_backward(m), 0);
  g0 = malloc(sizeof(float) * m->n_params);
  memcpy(g0, m->grads, sizeof(float) * m->n_params);
  for (int t = 0; t < m->n_tensors; t++) {
    const struct tc_tensor *ts = &m->tensors[t];
    check_grad(ts->name, m->params + ts->offset, g0 + ts->offset, ts->numel, model_loss, &y, 1e-3,
               1e-3, 3e-2);
  }
  /* a label out of range is refused, not read out of bounds */
  int32_t badlab[3] = {1, 10, 4};
  struct tc_batch bb = {.B = 3, .inputs = in, .targets = badlab};
  CHECK(tc_model_forward(m, &bb, &loss) < 0);
  free(g0), free(in);
  tc_model_free(m);
}

/* ---- determinism across thread counts ---- */
static void run_steps(int threads, float *ret_params, float *ret_losses) {
  tc_set_threads(threads);
  struct tc_config g = config("gpt", "layers=2 heads=4 dim=64 ctx=32 vocab=20");
  struct tc_model *m = tc_model_new(&g, 6);
  struct tc_rng r;
  tc_rng_seed(&r, 3, 1);
  tc_model_init(m, &r);
  int32_t tok[6 * 32], tgt[6 * 32];
  struct tc_adamw hp = {0.9f, 0.95f, 1e-8f, 0.1f};
  for (int s = 0; s < 4; s++) {
    for (int i = 0; i < 6 * 32; i++) tok[i] = (int32_t)tc_rng_below(&r, 20), tgt[i] = (int32_t)tc_rng_below(&r, 20);
    struct tc_batch b = {.B = 6, .tokens = tok, .targets = tgt};
    tc_model_forward(m, &b, &ret_losses[s]);
    tc_model_backward(m);
    tc_model_clip_grads(m, 1.0f);
    tc_model_adamw(m, &hp, 1e-3f);
  }
  memcpy(ret_params, m->params, sizeof(float) * m->n_params);
  tc_model_free(m);
}

static void test_determinism(void) {
  struct tc_config g = config("gpt", "layers=2 heads=4 dim=64 ctx=32 vocab=20");
  struct tc_model lay;
  tc_model_layout(&g, &lay);
  float *p1 = malloc(sizeof(float) * lay.n_params), *p2 = malloc(sizeof(float) * lay.n_params);
  float *p3 = malloc(sizeof(float) * lay.n_params);
  float l1[4], l2[4], l3[4];
  run_steps(1, p1, l1);
  run_steps(2, p2, l2);
  run_steps(3, p3, l3);
  CHECK(memcmp(l1, l2, sizeof l1) == 0);
  CHECK(memcmp(p1, p2, sizeof(float) * lay.n_params) == 0);
  CHECK(memcmp(p1, p3, sizeof(float) * lay.n_params) == 0);
  fprintf(stderr, "threads 1/2/3: losses %.9g %.9g %.9g, parameters %s\n", l1[3], l2[3], l3[3],
          memcmp(p1, p2, sizeof(float) * lay.n_params) ? "DIFFER" : "bit-identical");
  /* a large GEMM (many tiles) too */
  int M = 300, N = 700, K = 257;
  float *A = randv((size_t)M * K, 1), *B = randv((size_t)K * N, 1);
  float *C1 = zeros((size_t)M * N), *C2 = zeros((size_t)M * N);
  tc_set_threads(1);
  tc_sgemm(TC_N, TC_N, M, N, K, 1, A, K, B, N, 0, C1, N);
  tc_set_threads(2);
  tc_sgemm(TC_N, TC_N, M, N, K, 1, A, K, B, N, 0, C2, N);
  CHECK(memcmp(C1, C2, sizeof(float) * M * N) == 0);
  tc_set_threads(1);
  free(p1), free(p2), free(p3), free(A), free(B), free(C1), free(C2);
}

int main(void) {
  tc_rng_seed(&rng, 42, 0);
  tc_set_threads(1);
  test_gemm();
  test_linear();
  test_layernorm();
  test_elementwise();
  test_attention();
  test_xent();
  test_models();
  test_determinism();
  test_attention_long();
  TEST_MAIN_END();
}
