/* Loading spotlab-train's CUDA backend (tc_cuda_api.h). */
#include "tc_cuda_api.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "sl_path.h"

static const struct tc_cuda_api *loaded;

const struct tc_cuda_api *tc_cuda_load(char *err, size_t es) {
  if (loaded)
    return loaded;
  char self[4096], path[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    snprintf(err, es, "cannot tell where spotlab-train is (/proc/self/exe: %s), so not where its "
                      "CUDA backend is", strerror(errno));
    return NULL;
  }
  self[n] = '\0';
  if (sl_train_cuda_backend(self, path, sizeof path) < 0) {
    snprintf(err, es, "this spotlab-train has no CUDA backend: " SL_TRAIN_CUDA_BACKEND " is neither "
                      "beside it nor in ../lib/spotlab/ (a build without nvcc makes none)");
    return NULL;
  }
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    snprintf(err, es, "cannot load the CUDA backend (%s): it needs CUDA 13's cudart, cuBLAS, "
                      "cuBLASLt and NCCL 2 on the loader's path", why ? why : path);
    return NULL;
  }
  const struct tc_cuda_api *api = dlsym(h, TC_CUDA_API_SYMBOL);
  static const size_t sizes[] = TC_CUDA_API_SIZES;
  if (!api || api->version != TC_CUDA_API_VERSION || strcmp(api->build, SPOTLAB_VERSION) ||
      memcmp(api->sizes, sizes, sizeof sizes)) {
    snprintf(err, es, "%s is not this spotlab-train's CUDA backend (%s): reinstall the two together",
             path, !api ? "no " TC_CUDA_API_SYMBOL " in it" : "another build");
    dlclose(h);
    return NULL;
  }
  api->log_init("spotlab-train");
  return loaded = api; /* kept loaded for the life of the process */
}
