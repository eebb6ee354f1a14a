/* Shared by the gpu tests: skip without a GPU, random inputs, device copies
 * and the CPU-vs-CUDA comparison that prints the max differences. */
#ifndef TESTS_GPU_CHECK_H
#define TESTS_GPU_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tc_cuda.h"
#include "tc_rng.h"

/* Exit status 77 (meson: skipped) only where the machine has no GPU or no
 * NVIDIA driver; any other CUDA error is a failure (exit 1). */
static inline void gpu_or_skip(const char *prog) {
  int n = tc_cuda_device_count();
  if (n == 0) {
    printf("%s: SKIP: no GPU (cudaGetDeviceCount: no device or no driver)\n", prog);
    exit(77);
  }
  if (n < 0) {
    printf("%s: FAIL: cudaGetDeviceCount failed with an error other than no device\n", prog);
    exit(1);
  }
  char name[256];
  printf("%s: %d GPU(s); device 0: %s\n", prog, n, tc_cuda_device_name(name, sizeof name));
}

static inline float *rnd(struct tc_rng *r, size_t n, float scale) {
  float *p = malloc(sizeof(float) * (n ? n : 1));
  for (size_t i = 0; i < n; i++) p[i] = scale * tc_rng_normal(r);
  return p;
}

static inline void *dev_copy(const void *h, size_t bytes) {
  void *d = NULL;
  if (tc_cuda_alloc(&d, bytes) < 0 || tc_cuda_to_device(d, h, bytes) < 0) {
    fprintf(stderr, "device allocation/copy failed\n");
    exit(1);
  }
  return d;
}

static inline float *host_copy(const float *d, size_t n) {
  float *h = malloc(sizeof(float) * (n ? n : 1));
  if (tc_cuda_to_host(h, d, sizeof(float) * n) < 0) {
    fprintf(stderr, "copy to host failed\n");
    exit(1);
  }
  return h;
}

/* n bf16 values on the device as floats on the host */
static inline float *host_copy16(const void *d, size_t n) {
  uint16_t *u = malloc(2 * (n ? n : 1));
  float *f = malloc(sizeof(float) * (n ? n : 1));
  if (tc_cuda_to_host(u, d, 2 * n) < 0) {
    fprintf(stderr, "copy to host failed\n");
    exit(1);
  }
  for (size_t i = 0; i < n; i++) {
    uint32_t bits = (uint32_t)u[i] << 16;
    memcpy(&f[i], &bits, 4);
  }
  free(u);
  return f;
}

/* Elementwise |gpu - cpu| <= atol + rtol |cpu|; prints max abs and max rel
 * difference (rel over elements with |cpu| > 1e-3). */
static inline int compare(const char *what, const float *cpu, const float *gpu, size_t n, double atol,
                   double rtol) {
  double max_abs = 0.0, max_rel = 0.0;
  size_t bad = 0, worst = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)gpu[i] - (double)cpu[i]), c = fabs((double)cpu[i]);
    if (!(d <= atol + rtol * c)) bad++, worst = i;
    if (!(d <= max_abs)) max_abs = d; /* NaN propagates */
    if (c > 1e-3 && d / c > max_rel) max_rel = d / c;
  }
  printf("  %-28s n=%-8zu max abs diff %.3e  max rel diff %.3e  (tol %.1e + %.1e|x|)%s\n", what,
         n, max_abs, max_rel, atol, rtol, bad ? "  FAIL" : "");
  if (bad)
    printf("    %zu elements out of tolerance, e.g. [%zu] cpu %.9g gpu %.9g\n", bad, worst,
           (double)cpu[worst], (double)gpu[worst]);
  th_checks++;
  if (bad) th_failures++;
  return bad == 0;
}

#endif
