/* The GPU inventory and usage samples from a fake source (gpuinfo.h): the
 * count, model, memory and driver a register reports, GPUs that do not
 * answer, no source at all, and the loader on this machine; whether
 * spotlab-train can use the GPUs, from stand-in programs. */
#include "harness.h"

#include "gpuinfo.h"
#include "sl_err.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MIB (1024ull * 1024ull)

/* A fake machine: n GPUs with names, memory and utilisation; bad marks a
 * GPU whose queries fail; count_error fails the count itself. */
struct fake {
  unsigned n;
  const char *names[4];
  uint64_t total_mib[4], used_mib[4];
  unsigned util[4];
  int bad; /* -1: none */
  bool count_error, driver_error;
};

static int f_count(void *ctx, unsigned *ret, char *why, size_t size) {
  struct fake *f = ctx;
  if (f->count_error) {
    snprintf(why, size, "NVML: Driver Not Loaded");
    return -ENODEV;
  }
  *ret = f->n;
  return 0;
}

static int f_name(void *ctx, unsigned i, char *buf, size_t size, char *why, size_t why_size) {
  struct fake *f = ctx;
  if ((int)i == f->bad) {
    snprintf(why, why_size, "NVML: GPU is lost");
    return -ENODEV;
  }
  snprintf(buf, size, "%s", f->names[i]);
  return 0;
}

static int f_memory(void *ctx, unsigned i, uint64_t *total, uint64_t *used, char *why, size_t why_size) {
  struct fake *f = ctx;
  if ((int)i == f->bad) {
    snprintf(why, why_size, "NVML: GPU is lost");
    return -ENODEV;
  }
  *total = f->total_mib[i] * MIB;
  *used = f->used_mib[i] * MIB;
  return 0;
}

static int f_util(void *ctx, unsigned i, unsigned *pct, char *why, size_t why_size) {
  struct fake *f = ctx;
  *pct = f->util[i];
  return 0;
}

static int f_driver(void *ctx, char *buf, size_t size, char *why, size_t why_size) {
  struct fake *f = ctx;
  if (f->driver_error) return -EIO;
  snprintf(buf, size, "550.54.15");
  return 0;
}

static struct wk_gpu_source source_of(struct fake *f) {
  return (struct wk_gpu_source){f, f_count, f_name, f_memory, f_util, f_driver};
}

static void test_inventory(void) {
  struct fake f = {2, {"NVIDIA A10G", "NVIDIA A10G"}, {23028, 22731}, {100, 2000}, {50, 90}, -1, false, false};
  struct wk_gpu_source src = source_of(&f);
  struct wk_gpu_inventory inv;
  wk_gpu_inventory_read(&src, NULL, &inv);
  CHECK_INT(inv.count, 2);
  CHECK_STR(inv.model, "NVIDIA A10G");
  CHECK_INT(inv.memory_mib, 22731); /* per GPU: the smallest */
  CHECK_STR(inv.driver, "550.54.15");
  CHECK_STR(inv.reason, "");
  json_t *j = wk_gpu_inventory_json(&inv);
  char *text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
  CHECK_STR(text, "{\"count\":2,\"driver\":\"550.54.15\",\"memory_mib\":22731,\"model\":\"NVIDIA A10G\"}");
  free(text);
  json_decref(j);

  /* a GPU that does not answer is left out, and the reason says which */
  f.bad = 1;
  wk_gpu_inventory_read(&src, NULL, &inv);
  CHECK_INT(inv.count, 1);
  CHECK_INT(inv.memory_mib, 23028);
  CHECK_STR(inv.reason, "GPU 1: no name: NVML: GPU is lost");

  /* models differ: the first, marked */
  f.bad = -1;
  f.names[1] = "Tesla T4";
  wk_gpu_inventory_read(&src, NULL, &inv);
  CHECK_INT(inv.count, 2);
  CHECK_STR(inv.model, "NVIDIA A10G (and other models)");

  /* the driver answers but sees no GPU; an unknown driver version stays empty */
  f.n = 0;
  f.driver_error = true;
  wk_gpu_inventory_read(&src, NULL, &inv);
  CHECK_INT(inv.count, 0);
  CHECK_STR(inv.model, "");
  CHECK_STR(inv.driver, "");
  CHECK_STR(inv.reason, "the NVIDIA driver reports no GPU");

  f.count_error = true;
  wk_gpu_inventory_read(&src, NULL, &inv);
  CHECK_INT(inv.count, 0);
  CHECK_STR(inv.reason, "cannot count GPUs: NVML: Driver Not Loaded");

  /* no source: zero GPUs, the loader's reason kept and reported */
  wk_gpu_inventory_read(NULL, "no NVIDIA driver library (libnvidia-ml.so.1: not found)", &inv);
  CHECK_INT(inv.count, 0);
  CHECK_INT(inv.memory_mib, 0);
  j = wk_gpu_inventory_json(&inv);
  text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
  CHECK_STR(text, "{\"count\":0,\"driver\":\"\",\"memory_mib\":0,\"model\":\"\","
                  "\"reason\":\"no NVIDIA driver library (libnvidia-ml.so.1: not found)\"}");
  free(text);
  json_decref(j);
}

static void test_usage(void) {
  struct fake f = {3, {"H100", "H100", "H100"}, {81559, 81559, 81559}, {1000, 3000, 5}, {80, 100, 7}, -1,
                   false, false};
  struct wk_gpu_source src = source_of(&f);
  struct wk_gpu_usage u = {0};
  CHECK_INT(wk_gpu_usage_read(&src, 0, 2, &u), 0); /* the job's two GPUs, not the third */
  CHECK_INT(u.n, 2);
  CHECK_NEAR(u.util_pct, 90.0, 1e-9);
  CHECK_INT(u.mem_used_mib, 4000);
  CHECK_INT(u.mem_total_mib, 2 * 81559);
  f.bad = 0; /* one does not answer: the others still count */
  CHECK_INT(wk_gpu_usage_read(&src, 0, 2, &u), 0);
  CHECK_INT(u.n, 1);
  CHECK_NEAR(u.util_pct, 100.0, 1e-9);
  u.n = 42;
  CHECK_INT(wk_gpu_usage_read(&src, 0, 1, &u), -ENODEV);
  CHECK_INT(u.n, 42); /* untouched */
  CHECK_INT(wk_gpu_usage_read(NULL, 0, 1, &u), -ENODEV);
}

/* The real loader on this machine: either NVML starts and reports what it
 * sees, or it does not and says why; both are a consistent inventory. */
static void test_this_machine(void) {
  struct wk_nvml *n = NULL;
  char why[WK_GPU_REASON_MAX] = "";
  int r = wk_nvml_open(&n, why, sizeof why);
  struct wk_gpu_inventory inv;
  wk_gpu_inventory_read(wk_nvml_source(n), why, &inv);
  if (r < 0) {
    CHECK(n == NULL);
    CHECK(why[0] != 0);
    CHECK_INT(inv.count, 0);
    CHECK_STR(inv.reason, why);
  } else {
    CHECK(inv.count > 0 ? inv.model[0] && inv.memory_mib > 0 : inv.reason[0] != 0);
    struct wk_gpu_usage u = {0};
    if (inv.count > 0) { /* a GPU machine: a usage sample of GPU 0 reads back too */
      CHECK_INT(wk_gpu_usage_read(wk_nvml_source(n), 0, 1, &u), 0);
      CHECK(u.n == 1 && u.mem_total_mib >= inv.memory_mib && u.util_pct >= 0 && u.util_pct <= 100);
      fprintf(stderr, "GPU 0 now: %.0f%% busy, %lld of %lld MiB used; driver %s\n", u.util_pct,
              (long long)u.mem_used_mib, (long long)u.mem_total_mib, inv.driver);
    }
  }
  fprintf(stderr, "this machine: %d GPUs%s%s%s%s\n", inv.count, inv.count ? ": " : "", inv.model,
          inv.reason[0] ? "; " : "", inv.reason);
  CHECK(wk_nvml_free(n) == NULL);
  CHECK(wk_nvml_free(NULL) == NULL);
}

/* A stand-in for spotlab-train --check-cuda: the shell text body. */
static void program(char *path, size_t size, const char *dir, const char *name, const char *body) {
  snprintf(path, size, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return;
  fprintf(f, "#!/bin/sh\n%s\n", body);
  fclose(f);
  chmod(path, 0700);
}

static void test_train_cuda_check(void) {
  char dir[] = "/tmp/test-wk-gpuinfo-XXXXXX", path[256], why[WK_GPU_REASON_MAX];
  CHECK(mkdtemp(dir) != NULL);
  /* it can: exit 0, no reason */
  program(path, sizeof path, dir, "ok", "[ \"$1\" = --check-cuda ] || exit 2; echo 'CUDA: 1 GPU'");
  snprintf(why, sizeof why, "stale");
  CHECK_INT(wk_train_cuda_check(path, 5000, why, sizeof why), 1);
  CHECK_STR(why, "");
  /* it cannot: its last line, without the program's prefix */
  program(path, sizeof path, dir, "no", "echo 'some warning' >&2; echo 'spotlab-train: cannot load the "
                                        "CUDA backend (libcudart.so.13: missing)' >&2; exit 1");
  CHECK_INT(wk_train_cuda_check(path, 5000, why, sizeof why), 0);
  CHECK_STR(why, "cannot load the CUDA backend (libcudart.so.13: missing)");
  /* a failure that says nothing, a signal */
  program(path, sizeof path, dir, "mute", "exit 3");
  CHECK_INT(wk_train_cuda_check(path, 5000, why, sizeof why), 0);
  CHECK_STR(why, "spotlab-train --check-cuda failed (status 3)");
  program(path, sizeof path, dir, "killed", "kill -9 $$");
  CHECK_INT(wk_train_cuda_check(path, 5000, why, sizeof why), 0);
  CHECK_STR(why, "spotlab-train --check-cuda failed (status 137)");
  /* one that hangs (a driver that never answers) is killed at the deadline */
  program(path, sizeof path, dir, "hang", "exec sleep 30");
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK_INT(wk_train_cuda_check(path, 1000, why, sizeof why), 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  CHECK_STR(why, "spotlab-train --check-cuda gave no answer in 1 s");
  double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  CHECK(took >= 0.9 && took < 5);
  /* one that closes its output and goes on is killed at the deadline too */
  program(path, sizeof path, dir, "quiet", "exec >&- 2>&-; exec sleep 30");
  CHECK_INT(wk_train_cuda_check(path, 1000, why, sizeof why), 0);
  CHECK_STR(why, "spotlab-train --check-cuda gave no answer in 1 s");
  /* a program that is not there */
  snprintf(path, sizeof path, "%s/none", dir);
  CHECK_INT(wk_train_cuda_check(path, 5000, why, sizeof why), 0);
  CHECK(strstr(why, "cannot start") == why && strstr(why, "No such file") != NULL);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK_INT(system(cmd), 0);
}

int main(void) {
  test_train_cuda_check();
  test_inventory();
  test_usage();
  test_this_machine();
  TEST_MAIN_END();
}
