/* NCCL with world size 1 (a one-GPU machine: NCCL refuses two ranks on one
 * GPU): the all-reduce and broadcast results, and three training steps
 * through a 1-rank communicator (gradient all-reduce in place) matching the
 * same steps without NCCL bit for bit. Exit 77 (skipped) without a GPU. */
#include <stdint.h>

#include "gpu_check.h"
#include "tc_model.h"
#include "tc_nccl.h"

static int steps(const struct tc_config *c, const struct tc_model *init, struct tc_batch *b,
                 int use_nccl, double *losses, float *params) {
  struct tc_cuda_model *cm = NULL;
  struct tc_nccl *nc = NULL;
  struct tc_adamw hp = {0.9f, 0.95f, 1e-8f, 0.1f};
  int r = tc_cuda_model_new(c, b->B, 0, 0, &cm);
  if (r == 0) r = tc_cuda_model_put(cm, init);
  if (r == 0 && use_nccl) {
    uint8_t id[TC_NCCL_ID_BYTES];
    r = tc_nccl_unique_id(id);
    if (r == 0) r = tc_nccl_new(id, 0, 1, 0, tc_cuda_ctx_stream(tc_cuda_model_ctx(cm)), &nc);
  }
  for (int s = 0; s < 3 && r == 0; s++) {
    double norm;
    r = tc_cuda_forward(cm, b, b->B, &losses[s], NULL);
    if (r == 0 && nc) r = tc_nccl_allreduce_host_f64(nc, &losses[s], 1);
    if (r == 0) r = tc_cuda_backward(cm);
    if (r == 0 && nc)
      r = tc_nccl_allreduce_f32(nc, tc_cuda_model_grads(cm), tc_cuda_model_n_params(cm));
    if (r == 0) r = tc_cuda_clip_grads(cm, 1.0f, &norm);
    if (r == 0) r = tc_cuda_adamw(cm, &hp, 1e-3f);
  }
  if (r == 0) r = tc_cuda_ctx_sync(tc_cuda_model_ctx(cm));
  if (r == 0)
    r = tc_cuda_to_host(params, tc_cuda_model_params(cm), sizeof(float) * init->n_params);
  tc_nccl_free(nc);
  tc_cuda_model_free(cm);
  return r;
}

int main(void) {
  gpu_or_skip("test-gpu-nccl");
  /* the collectives themselves */
  struct tc_cuda_ctx *ctx = NULL;
  struct tc_nccl *nc = NULL;
  uint8_t id[TC_NCCL_ID_BYTES];
  CHECK_INT(tc_cuda_ctx_new(0, 0, &ctx), 0);
  CHECK_INT(tc_nccl_unique_id(id), 0);
  CHECK_INT(tc_nccl_new(id, 0, 1, 0, tc_cuda_ctx_stream(ctx), &nc), 0);
  if (!nc) TEST_MAIN_END();
  size_t n = 4099;
  struct tc_rng r;
  tc_rng_seed(&r, 3, 1);
  float *x = rnd(&r, n, 1.0f), *d_x = dev_copy(x, n * 4);
  CHECK_INT(tc_nccl_allreduce_f32(nc, d_x, n), 0);
  CHECK_INT(tc_cuda_ctx_sync(ctx), 0);
  compare("all-reduce sum, 1 rank", x, host_copy(d_x, n), n, 0.0, 0.0);
  double v[3] = {1.5, -2.25, 1e300};
  CHECK_INT(tc_nccl_allreduce_host_f64(nc, v, 3), 0);
  CHECK(v[0] == 1.5 && v[1] == -2.25 && v[2] == 1e300);
  char msg[32] = "broadcast from rank 0";
  CHECK_INT(tc_nccl_broadcast_host(nc, msg, sizeof msg, 0), 0);
  CHECK_STR(msg, "broadcast from rank 0");
  nc = tc_nccl_free(nc);
  ctx = tc_cuda_ctx_free(ctx);

  /* a 1-rank NCCL run against the run without NCCL */
  struct tc_config c;
  char err[256];
  if (tc_config_parse(&c, "gpt", "layers=2 heads=2 dim=32 ctx=16 vocab=40", err, sizeof err) < 0) {
    fprintf(stderr, "test-gpu-nccl: %s\n", err);
    return 1;
  }
  struct tc_model *init = tc_model_new_buffers(&c);
  tc_model_init(init, &r);
  int B = 4;
  int32_t tok[4 * 16], tg[4 * 16];
  for (int i = 0; i < B * 16; i++) {
    tok[i] = (int32_t)tc_rng_below(&r, 40);
    tg[i] = (int32_t)tc_rng_below(&r, 40);
  }
  struct tc_batch b = {.B = B, .tokens = tok, .targets = tg};
  double l_plain[3], l_nccl[3];
  float *p_plain = malloc(sizeof(float) * init->n_params);
  float *p_nccl = malloc(sizeof(float) * init->n_params);
  CHECK_INT(steps(&c, init, &b, 0, l_plain, p_plain), 0);
  CHECK_INT(steps(&c, init, &b, 1, l_nccl, p_nccl), 0);
  for (int s = 0; s < 3; s++) {
    printf("  step %d loss without NCCL %.17g with 1-rank NCCL %.17g\n", s + 1, l_plain[s],
           l_nccl[s]);
    CHECK(l_plain[s] == l_nccl[s]);
  }
  compare("params after 3 steps", p_plain, p_nccl, init->n_params, 0.0, 0.0);
  TEST_MAIN_END();
}
