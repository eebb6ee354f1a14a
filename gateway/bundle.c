/* The worker bundle (bundle.h). */
#include "bundle.h"

#include "objstore.h"

#include "sl_err.h"
#include "sl_log.h"
#include "sl_path.h"
#include "sl_s3.h"
#include "sl_sigv4.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sodium.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define T "gateway.bundle"
#define LIBS_MAX 128

extern char **environ;

struct gw_bundle {
  struct gw_objstore *store;
  char dir[PATH_MAX];
  pthread_t thread;
  pthread_mutex_t mu;
  int state;                    /* -EAGAIN building; 0 published; < 0 failed */
  char key[128];
  char sha256[65];
  char why[256];
};

/* Runs argv; stdout to out_fd when >= 0. Returns the exit status or an error. */
static int run(char *const argv[], int out_fd) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (out_fd >= 0)
    posix_spawn_file_actions_adddup2(&fa, out_fd, STDOUT_FILENO);
  pid_t pid;
  int r = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (r)
    return -r;
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR)
      return -errno;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* A library the instance's image is expected to have itself. */
static bool system_lib(const char *name, const char *path) {
  static const char *const libc[] = {"linux-vdso", "ld-linux", "libc.so", "libm.so", "libpthread.so",
                                     "libdl.so", "librt.so", "libresolv.so", "libutil.so",
                                     "libgcc_s.so", "libstdc++.so", "libcuda.so", "libnvidia-"};
  for (size_t i = 0; i < sizeof libc / sizeof *libc; i++)
    if (!strncmp(name, libc[i], strlen(libc[i])))
      return true;
  return !strncmp(path, "/usr/local/cuda", 15) || strstr(name, "libcudart") || strstr(name, "libcublas") ||
         strstr(name, "libnccl");
}

/* Copies the non-system libraries program needs (ldd) into libdir. */
static int copy_libs(const char *program, const char *libdir, char *err, size_t err_size) {
  char tmp[] = "/tmp/spotlab-ldd.XXXXXX";
  int fd = mkstemp(tmp);
  if (fd < 0)
    return -errno;
  unlink(tmp);
  char *argv[] = {"ldd", (char *)program, NULL};
  int r = run(argv, fd);
  if (r != 0) {
    close(fd);
    snprintf(err, err_size, "ldd %s failed (%d)", program, r);
    return r < 0 ? r : SL_ENOTSUP;
  }
  FILE *f = fdopen(fd, "r");
  if (!f) {
    close(fd);
    return -errno;
  }
  rewind(f);
  char line[1024];
  int n = 0;
  r = 0;
  while (fgets(line, sizeof line, f) && r == 0) {
    char name[256], path[768];
    if (sscanf(line, " %255s => %767s", name, path) != 2 || path[0] != '/' || system_lib(name, path))
      continue;
    if (++n > LIBS_MAX) {
      snprintf(err, err_size, "%s needs more than %d libraries", program, LIBS_MAX);
      r = SL_ELIMIT;
      break;
    }
    char *cp[] = {"cp", "-L", "--", path, (char *)libdir, NULL};
    if (run(cp, -1) != 0) {
      snprintf(err, err_size, "cannot copy %s", path);
      r = -EIO;
    }
  }
  fclose(f);
  return r;
}

static int sha256_file(const char *path, char out[65]) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  crypto_hash_sha256_state st;
  crypto_hash_sha256_init(&st);
  static __thread unsigned char buf[1 << 16];
  ssize_t k;
  while ((k = read(fd, buf, sizeof buf)) > 0)
    crypto_hash_sha256_update(&st, buf, (unsigned long long)k);
  int r = k < 0 ? -errno : 0;
  close(fd);
  unsigned char h[crypto_hash_sha256_BYTES];
  crypto_hash_sha256_final(&st, h);
  for (int i = 0; i < 32; i++)
    snprintf(out + 2 * i, 3, "%02x", h[i]);
  return r;
}

int gw_bundle_build(const char *dir, char *path, size_t path_size, char sha256[65], char *err,
                    size_t err_size) {
  char stage[PATH_MAX], bin[PATH_MAX + 8], lib[PATH_MAX + 8], tmp[PATH_MAX];
  /* a folder and an archive name of this build's own: a gateway killed
   * mid-build leaves its tar running, which must not touch this one */
  snprintf(stage, sizeof stage, "%s/stage.XXXXXX", dir);
  if (!mkdtemp(stage)) {
    snprintf(err, err_size, "%s: %s", dir, strerror(errno));
    return -errno;
  }
  char *rm[] = {"rm", "-rf", "--", stage, NULL};
  snprintf(bin, sizeof bin, "%s/bin", stage);
  snprintf(lib, sizeof lib, "%s/lib", stage);
  int r;
  if ((r = sl_mkdir_p(bin, 0700)) < 0 || (r = sl_mkdir_p(lib, 0700)) < 0) {
    snprintf(err, err_size, "%s: %s", stage, sl_strerror(r));
    goto fail;
  }
  static const char *const programs[] = {"spotlab-worker", "spotlab-train"};
  for (size_t i = 0; i < 2; i++) {
    char prog[PATH_MAX];
    if ((r = sl_find_program(programs[i], prog, sizeof prog)) < 0) {
      snprintf(err, err_size, "cannot find %s to bundle", programs[i]);
      goto fail;
    }
    char *cp[] = {"cp", "-L", "--", prog, bin, NULL};
    if (run(cp, -1) != 0) {
      snprintf(err, err_size, "cannot copy %s", prog);
      r = -EIO;
      goto fail;
    }
    if ((r = copy_libs(prog, lib, err, err_size)) < 0)
      goto fail;
  }
  if ((size_t)snprintf(path, path_size, "%s/spotlab-worker.tar.gz", dir) >= path_size ||
      (size_t)snprintf(tmp, sizeof tmp, "%s.tar.gz", stage) >= sizeof tmp) {
    run(rm, -1);
    return SL_ELIMIT;
  }
  /* fixed owner, group and times: the same programs give the same archive */
  char *tar[] = {"tar", "--owner=0", "--group=0", "--numeric-owner", "--mtime=@0", "--sort=name",
                 "-czf", tmp, "-C", stage, "bin", "lib", NULL};
  r = run(tar, -1);
  run(rm, -1);
  if (r != 0 || rename(tmp, path) < 0) {
    snprintf(err, err_size, "tar failed (%d)", r);
    unlink(tmp);
    return r < 0 ? r : -EIO;
  }
  if ((r = sha256_file(path, sha256)) < 0)
    snprintf(err, err_size, "%s: %s", path, sl_strerror(r));
  return r;
fail:
  run(rm, -1);
  return r;
}

static void *publish(void *arg) {
  struct gw_bundle *b = arg;
  char path[PATH_MAX], sha[65], why[256] = "";
  int r = gw_bundle_build(b->dir, path, sizeof path, sha, why, sizeof why);
  char key[128];
  snprintf(key, sizeof key, "_spotlab/bundle-%.16s.tar.gz", sha);
  struct sl_s3_client *c = NULL;
  if (r == 0) {
    struct sl_s3_signer signer = gw_objstore_signer(b->store);
    if ((r = sl_s3_client_new(&signer, NULL, &c)) < 0)
      snprintf(why, sizeof why, "S3 client: %s", sl_strerror(r));
  }
  struct sl_s3_object head;
  if (r == 0 && (sl_s3_head(c, key, &head, why, sizeof why) < 0 || strcmp(head.sha256, sha))) {
    why[0] = 0;
    r = sl_s3_put_file(c, key, path, NULL, why, sizeof why);
  }
  sl_s3_client_free(c);
  pthread_mutex_lock(&b->mu);
  b->state = r < 0 ? r : 0;
  snprintf(b->key, sizeof b->key, "%s", key);
  snprintf(b->sha256, sizeof b->sha256, "%s", sha);
  snprintf(b->why, sizeof b->why, "%s", why);
  pthread_mutex_unlock(&b->mu);
  if (r < 0)
    sl_err(T, "the worker bundle could not be published: %s", why);
  else
    sl_info(T, "worker bundle published as %s", key);
  return NULL;
}

int gw_bundle_start(struct gw_objstore *o, const char *state_dir, struct gw_bundle **ret) {
  struct gw_bundle *b = calloc(1, sizeof *b);
  if (!b)
    return -ENOMEM;
  b->store = o;
  b->state = -EAGAIN;
  snprintf(b->dir, sizeof b->dir, "%s/bundle", state_dir);
  int r = sl_mkdir_p(b->dir, 0700);
  pthread_mutex_init(&b->mu, NULL);
  if (r < 0 || (r = -pthread_create(&b->thread, NULL, publish, b)) < 0) {
    pthread_mutex_destroy(&b->mu);
    free(b);
    return r;
  }
  *ret = b;
  return 0;
}

struct gw_bundle *gw_bundle_free(struct gw_bundle *b) {
  if (!b)
    return NULL;
  pthread_join(b->thread, NULL);
  pthread_mutex_destroy(&b->mu);
  free(b);
  return NULL;
}

int gw_bundle_url(struct gw_bundle *b, long expires_s, char *url, size_t url_size, char sha256[65],
                  char *err, size_t err_size) {
  pthread_mutex_lock(&b->mu);
  int r = b->state;
  char key[128];
  snprintf(key, sizeof key, "%s", b->key);
  snprintf(sha256, 65, "%s", b->sha256);
  if (r < 0 && r != -EAGAIN)
    snprintf(err, err_size, "%s", b->why);
  pthread_mutex_unlock(&b->mu);
  if (r < 0)
    return r;
  return gw_objstore_presign_get(b->store, key, expires_s, url, url_size, err, err_size);
}
