/* GPU inventory and usage (gpuinfo.h).
 *
 * NVML is reached only through the few entry points declared below, looked
 * up with dlsym in a library opened with dlopen: spotlab builds and runs on
 * machines without any NVIDIA package, and there the inventory is zero
 * GPUs with the loader's reason. The prototypes are NVML's stable C API
 * (nvml.h, the _v2 names since driver 325); only the structs that cross it
 * (nvmlMemory_t, nvmlUtilization_t) are repeated here. Every string NVML
 * writes is into a buffer of the size nvml.h asks for and is terminated
 * here again, so a driver that fills the buffer cannot overrun it. */
#include "gpuinfo.h"

#include "sl_err.h"
#include "sl_run.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define MIB (1024 * 1024)

/* ---- inventory and usage: pure functions of a source ---- */

/* The first reason sticks: it is the one that explains the rest. */
static void set_reason(struct wk_gpu_inventory *inv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_reason(struct wk_gpu_inventory *inv, const char *fmt, ...) {
  if (inv->reason[0]) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(inv->reason, sizeof inv->reason, fmt, ap);
  va_end(ap);
}

void wk_gpu_inventory_read(const struct wk_gpu_source *src, const char *no_source,
                           struct wk_gpu_inventory *ret) {
  memset(ret, 0, sizeof *ret);
  if (!src) {
    snprintf(ret->reason, sizeof ret->reason, "%s", no_source && *no_source ? no_source : "no GPU source");
    return;
  }
  char why[WK_GPU_REASON_MAX] = "";
  unsigned n = 0;
  if (src->count(src->ctx, &n, why, sizeof why) < 0) {
    set_reason(ret, "cannot count GPUs: %s", why[0] ? why : "unknown error");
    return;
  }
  if (n > WK_GPU_MAX) n = WK_GPU_MAX;
  bool mixed = false;
  for (unsigned i = 0; i < n; i++) {
    char name[WK_GPU_MODEL_MAX] = "", what[32];
    uint64_t total = 0, used = 0;
    snprintf(what, sizeof what, "GPU %u", i);
    why[0] = 0;
    if (src->name(src->ctx, i, name, sizeof name, why, sizeof why) < 0) {
      set_reason(ret, "%s: no name: %s", what, why[0] ? why : "unknown error");
      continue;
    }
    name[sizeof name - 1] = 0;
    why[0] = 0;
    if (src->memory(src->ctx, i, &total, &used, why, sizeof why) < 0) {
      set_reason(ret, "%s: no memory size: %s", what, why[0] ? why : "unknown error");
      continue;
    }
    int64_t mib = (int64_t)(total / MIB);
    if (ret->count == 0) {
      snprintf(ret->model, sizeof ret->model, "%s", name);
      ret->memory_mib = mib;
    } else {
      if (strcmp(name, ret->model)) mixed = true;
      if (mib < ret->memory_mib) ret->memory_mib = mib;
    }
    ret->count++;
  }
  if (mixed) {
    size_t len = strlen(ret->model), room = sizeof ret->model - 1;
    const char *tag = " (and other models)";
    if (len + strlen(tag) > room) len = room - strlen(tag);
    snprintf(ret->model + len, sizeof ret->model - len, "%s", tag);
  }
  if (n == 0) set_reason(ret, "the NVIDIA driver reports no GPU");
  why[0] = 0;
  if (src->driver(src->ctx, ret->driver, sizeof ret->driver, why, sizeof why) < 0) ret->driver[0] = 0;
  ret->driver[sizeof ret->driver - 1] = 0;
}

json_t *wk_gpu_inventory_json(const struct wk_gpu_inventory *inv) {
  json_t *o = json_pack("{s:i, s:s, s:I, s:s}", "count", inv->count, "model", inv->model, "memory_mib",
                        (json_int_t)inv->memory_mib, "driver", inv->driver);
  if (o && inv->reason[0]) json_object_set_new(o, "reason", json_string(inv->reason));
  if (o && inv->unusable[0]) json_object_set_new(o, "unusable", json_string(inv->unusable));
  return o;
}

int wk_gpu_usage_read(const struct wk_gpu_source *src, unsigned first, unsigned n, struct wk_gpu_usage *ret) {
  struct wk_gpu_usage u = {0};
  double util = 0;
  char why[WK_GPU_REASON_MAX];
  for (unsigned i = first; src && i < first + n && i < WK_GPU_MAX; i++) {
    uint64_t total = 0, used = 0;
    unsigned pct = 0;
    if (src->memory(src->ctx, i, &total, &used, why, sizeof why) < 0 ||
        src->utilization(src->ctx, i, &pct, why, sizeof why) < 0)
      continue;
    u.n++;
    util += pct > 100 ? 100 : pct;
    u.mem_used_mib += (int64_t)(used / MIB);
    u.mem_total_mib += (int64_t)(total / MIB);
  }
  if (!u.n) return -ENODEV;
  u.util_pct = util / u.n;
  *ret = u;
  return 0;
}

/* ---- NVML ---- */

typedef int nvml_return;        /* nvmlReturn_t */
typedef struct nvml_device *nvml_device; /* nvmlDevice_t */
struct nvml_memory { unsigned long long total, free, used; };   /* nvmlMemory_t */
struct nvml_utilization { unsigned gpu, memory; };               /* nvmlUtilization_t */

enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_NAME_SIZE = 96,          /* NVML_DEVICE_NAME_V2_BUFFER_SIZE */
  NVML_DRIVER_SIZE = 80,        /* NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE */
};

struct wk_nvml {
  void *lib;
  struct wk_gpu_source source;
  nvml_return (*init)(void);
  nvml_return (*shutdown)(void);
  const char *(*error_string)(nvml_return);
  nvml_return (*get_count)(unsigned *);
  nvml_return (*get_handle)(unsigned, nvml_device *);
  nvml_return (*get_name)(nvml_device, char *, unsigned);
  nvml_return (*get_memory)(nvml_device, struct nvml_memory *);
  nvml_return (*get_utilization)(nvml_device, struct nvml_utilization *);
  nvml_return (*get_driver)(char *, unsigned);
};

/* NVML's error space in one place: a negative error, with NVML's own words
 * in why. */
static int err_from_nvml(struct wk_nvml *n, nvml_return r, char *why, size_t why_size) {
  const char *text = n->error_string ? n->error_string(r) : NULL;
  if (why && why_size) snprintf(why, why_size, "NVML: %s", text ? text : "error");
  switch (r) {
  case NVML_SUCCESS: return 0;
  case NVML_ERROR_NOT_SUPPORTED: return SL_ENOTSUP;
  case NVML_ERROR_NO_PERMISSION: return -EACCES;
  case NVML_ERROR_DRIVER_NOT_LOADED:
  case NVML_ERROR_GPU_IS_LOST: return -ENODEV;
  case NVML_ERROR_LIBRARY_NOT_FOUND: return -ENOENT;
  default: return -EIO;
  }
}

static int handle(struct wk_nvml *n, unsigned i, nvml_device *ret, char *why, size_t why_size) {
  nvml_return r = n->get_handle(i, ret);
  return r == NVML_SUCCESS ? 0 : err_from_nvml(n, r, why, why_size);
}

static int nvml_count(void *ctx, unsigned *ret, char *why, size_t why_size) {
  struct wk_nvml *n = ctx;
  nvml_return r = n->get_count(ret);
  return r == NVML_SUCCESS ? 0 : err_from_nvml(n, r, why, why_size);
}

static int nvml_name(void *ctx, unsigned i, char *buf, size_t size, char *why, size_t why_size) {
  struct wk_nvml *n = ctx;
  nvml_device d;
  char name[NVML_NAME_SIZE] = "";
  int e = handle(n, i, &d, why, why_size);
  if (e < 0) return e;
  nvml_return r = n->get_name(d, name, sizeof name);
  if (r != NVML_SUCCESS) return err_from_nvml(n, r, why, why_size);
  name[sizeof name - 1] = 0;
  snprintf(buf, size, "%s", name);
  return 0;
}

static int nvml_memory(void *ctx, unsigned i, uint64_t *ret_total, uint64_t *ret_used, char *why,
                       size_t why_size) {
  struct wk_nvml *n = ctx;
  nvml_device d;
  struct nvml_memory m = {0};
  int e = handle(n, i, &d, why, why_size);
  if (e < 0) return e;
  nvml_return r = n->get_memory(d, &m);
  if (r != NVML_SUCCESS) return err_from_nvml(n, r, why, why_size);
  *ret_total = m.total;
  *ret_used = m.used;
  return 0;
}

static int nvml_utilization(void *ctx, unsigned i, unsigned *ret_pct, char *why, size_t why_size) {
  struct wk_nvml *n = ctx;
  nvml_device d;
  struct nvml_utilization u = {0};
  int e = handle(n, i, &d, why, why_size);
  if (e < 0) return e;
  nvml_return r = n->get_utilization(d, &u);
  if (r != NVML_SUCCESS) return err_from_nvml(n, r, why, why_size);
  *ret_pct = u.gpu;
  return 0;
}

static int nvml_driver(void *ctx, char *buf, size_t size, char *why, size_t why_size) {
  struct wk_nvml *n = ctx;
  char v[NVML_DRIVER_SIZE] = "";
  nvml_return r = n->get_driver(v, sizeof v);
  if (r != NVML_SUCCESS) return err_from_nvml(n, r, why, why_size);
  v[sizeof v - 1] = 0;
  snprintf(buf, size, "%s", v);
  return 0;
}

/* dlsym into a function pointer of any type (POSIX guarantees the cast). */
#define LOOKUP(n, field, symbol) (*(void **)&(n)->field = dlsym((n)->lib, symbol))

int wk_nvml_open(struct wk_nvml **ret, char *why, size_t why_size) {
  struct wk_nvml *n = calloc(1, sizeof *n);
  if (!n) return -ENOMEM;
  int e;
  if (!(n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL))) {
    const char *d = dlerror();
    snprintf(why, why_size, "no NVIDIA driver library (%s)", d ? d : "libnvidia-ml.so.1 not found");
    e = -ENOENT;
    goto fail;
  }
  const char *missing = NULL;
  if (!LOOKUP(n, init, "nvmlInit_v2")) missing = "nvmlInit_v2";
  else if (!LOOKUP(n, shutdown, "nvmlShutdown")) missing = "nvmlShutdown";
  else if (!LOOKUP(n, get_count, "nvmlDeviceGetCount_v2")) missing = "nvmlDeviceGetCount_v2";
  else if (!LOOKUP(n, get_handle, "nvmlDeviceGetHandleByIndex_v2")) missing = "nvmlDeviceGetHandleByIndex_v2";
  else if (!LOOKUP(n, get_name, "nvmlDeviceGetName")) missing = "nvmlDeviceGetName";
  else if (!LOOKUP(n, get_memory, "nvmlDeviceGetMemoryInfo")) missing = "nvmlDeviceGetMemoryInfo";
  else if (!LOOKUP(n, get_utilization, "nvmlDeviceGetUtilizationRates")) missing = "nvmlDeviceGetUtilizationRates";
  else if (!LOOKUP(n, get_driver, "nvmlSystemGetDriverVersion")) missing = "nvmlSystemGetDriverVersion";
  LOOKUP(n, error_string, "nvmlErrorString"); /* optional: only for messages */
  if (missing) {
    snprintf(why, why_size, "libnvidia-ml.so.1 has no %s (a driver too old)", missing);
    e = SL_ENOTSUP;
    goto fail;
  }
  nvml_return r = n->init();
  if (r != NVML_SUCCESS) {
    char text[160];
    e = err_from_nvml(n, r, text, sizeof text);
    snprintf(why, why_size, "the NVIDIA driver does not start (%s)", text);
    n->shutdown = NULL; /* not initialised: nothing to shut down */
    goto fail;
  }
  n->source = (struct wk_gpu_source){n, nvml_count, nvml_name, nvml_memory, nvml_utilization, nvml_driver};
  *ret = n;
  return 0;
fail:
  wk_nvml_free(n);
  return e;
}

struct wk_nvml *wk_nvml_free(struct wk_nvml *n) {
  if (!n) return NULL;
  if (n->shutdown && n->source.ctx) n->shutdown();
  if (n->lib) dlclose(n->lib);
  free(n);
  return NULL;
}

const struct wk_gpu_source *wk_nvml_source(struct wk_nvml *n) { return n ? &n->source : NULL; }

/* The last line of text (what a program said last), without the
 * "spotlab-train: " it starts its messages with. */
static void last_line(char *text, char *out, size_t size) {
  size_t n = strlen(text);
  while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == ' ')) text[--n] = '\0';
  char *line = strrchr(text, '\n');
  line = line ? line + 1 : text;
  if (!strncmp(line, "spotlab-train: ", 15)) line += 15;
  snprintf(out, size, "%s", line);
}

int wk_train_cuda_check(const char *train, int timeout_ms, char *why, size_t why_size) {
  char *argv[] = {(char *)train, "--check-cuda", NULL};
  char out[2048];
  int st = 0, r = sl_run_capture(argv, timeout_ms, out, sizeof out, &st);
  if (r == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0) {
    why[0] = '\0';
    return 1;
  }
  char said[WK_GPU_REASON_MAX];
  last_line(out, said, sizeof said);
  if (r == -ETIMEDOUT)
    snprintf(why, why_size, "spotlab-train --check-cuda gave no answer in %d s", timeout_ms / 1000);
  else if (r < 0)
    snprintf(why, why_size, "cannot start %s: %s", train, strerror(-r));
  else if (said[0])
    snprintf(why, why_size, "%s", said);
  else
    snprintf(why, why_size, "spotlab-train --check-cuda failed (status %d)",
             WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
  return 0;
}
