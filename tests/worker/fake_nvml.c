/* A stand-in for NVIDIA's libnvidia-ml.so.1 with one "NVIDIA A10G": the
 * functions worker/gpuinfo.c looks up, with NVML's signatures (the structs
 * as nvml.h lays them out). A test puts its folder on LD_LIBRARY_PATH to
 * give a worker GPUs on a machine that has none. */
#include <stdio.h>

struct fake_memory { unsigned long long total, free, used; };
struct fake_utilization { unsigned gpu, memory; };

#define EXPORT __attribute__((visibility("default")))
#define NVML_SUCCESS 0
#define NVML_ERROR_INVALID_ARGUMENT 2

int nvmlInit_v2(void);
int nvmlShutdown(void);
int nvmlDeviceGetCount_v2(unsigned *n);
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **ret);
int nvmlDeviceGetName(void *dev, char *name, unsigned size);
int nvmlDeviceGetMemoryInfo(void *dev, struct fake_memory *m);
int nvmlDeviceGetUtilizationRates(void *dev, struct fake_utilization *u);
int nvmlSystemGetDriverVersion(char *v, unsigned size);
const char *nvmlErrorString(int r);

static int device; /* the handle's target */

EXPORT int nvmlInit_v2(void) { return NVML_SUCCESS; }
EXPORT int nvmlShutdown(void) { return NVML_SUCCESS; }
EXPORT int nvmlDeviceGetCount_v2(unsigned *n) {
  *n = 1;
  return NVML_SUCCESS;
}
EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **ret) {
  if (i != 0) return NVML_ERROR_INVALID_ARGUMENT;
  *ret = &device;
  return NVML_SUCCESS;
}
EXPORT int nvmlDeviceGetName(void *dev, char *name, unsigned size) {
  (void)dev;
  snprintf(name, size, "NVIDIA A10G");
  return NVML_SUCCESS;
}
EXPORT int nvmlDeviceGetMemoryInfo(void *dev, struct fake_memory *m) {
  (void)dev;
  m->total = 22731ULL << 20;
  m->used = 1ULL << 20;
  m->free = m->total - m->used;
  return NVML_SUCCESS;
}
EXPORT int nvmlDeviceGetUtilizationRates(void *dev, struct fake_utilization *u) {
  (void)dev;
  u->gpu = 0;
  u->memory = 0;
  return NVML_SUCCESS;
}
EXPORT int nvmlSystemGetDriverVersion(char *v, unsigned size) {
  snprintf(v, size, "550.54.15");
  return NVML_SUCCESS;
}
EXPORT const char *nvmlErrorString(int r) { return r ? "Unknown Error" : "Success"; }
