/* Program and folder lookup shared by the kernel, gateway and worker. */
#include "sl_path.h"

#include <ctype.h>
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"

static int executable(const char *p) { return access(p, X_OK) == 0; }

static int put(char *ret, size_t size, const char *path) {
  if (strlen(path) >= size)
    return -ENAMETOOLONG;
  strcpy(ret, path);
  return 0;
}

int sl_find_program(const char *name, char *ret, size_t size) {
  char var[96], path[4096];
  size_t k = 0;
  k += (size_t)snprintf(var, sizeof var, "SPOTLAB_");
  for (const char *p = name + (strncmp(name, "spotlab-", 8) == 0 ? 8 : 0); *p && k < sizeof var - 5; p++)
    var[k++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
  snprintf(var + k, sizeof var - k, "_BIN");
  const char *env = getenv(var);
  if (env && *env && executable(env))
    return put(ret, size, env);

  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    snprintf(path, sizeof path, "%s/%s", dirname(self), name);
    if (executable(path))
      return put(ret, size, path);
  }
  /* The build tree: each program lives in its component's folder. */
  static const struct {
    const char *name, *dir;
  } tree[] = {
    {"spotlab-kernel", "kernel"}, {"spotlab-gateway", "gateway"}, {"spotlab-worker", "worker"},
    {"spotlab-train", "kernels"}, {"spotlab", "cli"},           {"spotlab-sim", "gateway"},
    {"spotlab-kernel-session", "kernel"},
  };
  for (size_t i = 0; i < sizeof tree / sizeof *tree; i++) {
    if (strcmp(tree[i].name, name) != 0)
      continue;
    snprintf(path, sizeof path, "%s/%s/%s", SPOTLAB_BUILD_ROOT, tree[i].dir, name);
    if (executable(path))
      return put(ret, size, path);
  }
  const char *env_path = getenv("PATH");
  if (env_path) {
    char *copy = strdup(env_path), *save = NULL;
    for (char *dir = copy ? strtok_r(copy, ":", &save) : NULL; dir; dir = strtok_r(NULL, ":", &save)) {
      snprintf(path, sizeof path, "%s/%s", dir, name);
      if (executable(path)) {
        free(copy);
        return put(ret, size, path);
      }
    }
    free(copy);
  }
  return -ENOENT;
}

int sl_train_cuda_backend(const char *train, char *ret, size_t size) {
  char dir[4096], path[4200];
  if (strlen(train) >= sizeof dir)
    return -ENAMETOOLONG;
  strcpy(dir, train);
  const char *d = dirname(dir);
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "%s/%s" SL_TRAIN_CUDA_BACKEND, d, i ? "../lib/spotlab/" : "");
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
      return put(ret, size, path);
  }
  return -ENOENT;
}

int sl_mkdir_p(const char *path, unsigned mode) {
  char tmp[4096];
  if (strlen(path) >= sizeof tmp)
    return -ENAMETOOLONG;
  strcpy(tmp, path);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/')
      continue;
    *p = '\0';
    if (mkdir(tmp, mode) < 0 && errno != EEXIST)
      return -errno;
    *p = '/';
  }
  if (mkdir(tmp, mode) < 0 && errno != EEXIST)
    return -errno;
  return 0;
}

int sl_spotlab_home(char *ret, size_t size) {
  char path[4096];
  const char *home = getenv("SPOTLAB_HOME");
  if (home && *home) {
    snprintf(path, sizeof path, "%s", home);
  } else {
    const char *user = getenv("HOME");
    if (!user || !*user)
      return -ENOENT;
    snprintf(path, sizeof path, "%s/.local/share/spotlab", user);
  }
  int r = sl_mkdir_p(path, 0700);
  if (r < 0)
    return r;
  return put(ret, size, path);
}
