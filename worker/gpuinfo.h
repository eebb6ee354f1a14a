/* This instance's GPUs: how many, which model, how much memory, which
 * driver (the inventory a worker reports in its register), and how busy
 * they are while a job runs.
 *
 * The facts come from a source, a table of functions: NVML in production,
 * loaded at run time with dlopen("libnvidia-ml.so.1") so the build needs no
 * NVIDIA package and a machine without the driver simply has zero GPUs,
 * with the reason kept; a fake in tests. Turning a source's answers into an
 * inventory or a usage sample is pure and unit-tested without a GPU. */
#ifndef WK_GPUINFO_H
#define WK_GPUINFO_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define WK_GPU_MAX 64          /* GPUs looked at per instance */
#define WK_GPU_MODEL_MAX 96    /* NVML_DEVICE_NAME_V2_BUFFER_SIZE */
#define WK_GPU_DRIVER_MAX 80   /* NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE */
#define WK_GPU_REASON_MAX 256

struct wk_gpu_inventory {
  int count;                       /* GPUs that answered; 0 when none (reason says why) */
  char model[WK_GPU_MODEL_MAX];    /* GPU 0's name, "NVIDIA A10G"; "" when none */
  int64_t memory_mib;              /* per GPU: the smallest of them; 0 when none */
  char driver[WK_GPU_DRIVER_MAX];  /* "550.54.15"; "" when unknown */
  char reason[WK_GPU_REASON_MAX];  /* why count is 0, or why a GPU was left out; "" when all is well */
  char unusable[WK_GPU_REASON_MAX]; /* why spotlab-train cannot train on them; "" when it can */
};

/* How busy GPUs [first, first+n) are: the mean utilisation and the memory
 * in use over them. */
struct wk_gpu_usage {
  int n;                           /* GPUs that answered */
  double util_pct;
  int64_t mem_used_mib, mem_total_mib;
};

/* A source of GPU facts. Every function returns 0, or a negative error
 * with a reason written into why (why_size bytes). ctx is the source's. */
struct wk_gpu_source {
  void *ctx;
  int (*count)(void *ctx, unsigned *ret, char *why, size_t why_size);
  int (*name)(void *ctx, unsigned i, char *buf, size_t size, char *why, size_t why_size);
  int (*memory)(void *ctx, unsigned i, uint64_t *ret_total_bytes, uint64_t *ret_used_bytes, char *why,
                size_t why_size);
  int (*utilization)(void *ctx, unsigned i, unsigned *ret_pct, char *why, size_t why_size);
  int (*driver)(void *ctx, char *buf, size_t size, char *why, size_t why_size);
};

/* Fills *ret from src (borrowed). With src NULL the inventory is zero GPUs
 * and no_source (why there is no source) is its reason. A GPU whose name or
 * memory cannot be read is left out of the count, and the first such
 * failure is the reason; an unknown driver version leaves driver empty. */
void wk_gpu_inventory_read(const struct wk_gpu_source *src, const char *no_source,
                           struct wk_gpu_inventory *ret);
/* The register's "gpus" object: {"count","model","memory_mib","driver"},
 * "reason" and "unusable" when there are. Owned; NULL on OOM. */
json_t *wk_gpu_inventory_json(const struct wk_gpu_inventory *inv);

/* Samples GPUs [first, first+n) of src into *ret. -ENODEV when none of
 * them answered (*ret untouched). */
int wk_gpu_usage_read(const struct wk_gpu_source *src, unsigned first, unsigned n,
                      struct wk_gpu_usage *ret);

/* ---- NVML ---- */

struct wk_nvml;

/* Loads libnvidia-ml.so.1 and initialises NVML into an owned handle.
 * -ENOENT when the library is not there, another negative error when it
 * is but NVML does not start (-ENODEV: no driver loaded): a reason is in
 * why either way. */
int wk_nvml_open(struct wk_nvml **ret, char *why, size_t why_size);
/* Shuts NVML down and unloads it; NULL is a no-op. Returns NULL. */
struct wk_nvml *wk_nvml_free(struct wk_nvml *n);
/* The handle as a source (borrowed, valid until wk_nvml_free). */
const struct wk_gpu_source *wk_nvml_source(struct wk_nvml *n);

/* Whether the spotlab-train at train can train on this instance's GPUs
 * (spotlab-train --check-cuda: its CUDA backend loads and sees them),
 * waiting at most timeout_ms: 1 when it can; 0 when not, with its reason
 * in why. */
int wk_train_cuda_check(const char *train, int timeout_ms, char *why, size_t why_size);

#endif
