/* The worker bundle's archive (bundle.h), built from a small program in
 * place of spotlab-worker and spotlab-train (SPOTLAB_WORKER_BIN,
 * SPOTLAB_TRAIN_BIN): it holds both programs and the library they need
 * once; a second build with the same files keeps the archive as it is;
 * a changed program, a damaged manifest or a changed archive build it
 * again (the same files give the same archive, byte for byte); what a
 * build killed midway left is removed.
 *
 * usage: test-gw-bundle PROGRAM */
#include "harness.h"
#include "bundle.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/test-gw-bundle-XXXXXX";
static char out[4096 + 16];

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
  char cmd[16384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  return system(cmd);
}

static bool exists(const char *name) {
  char p[8192];
  snprintf(p, sizeof p, "%s/%s", out, name);
  return access(p, F_OK) == 0;
}

/* Builds into out; returns its result, with the SHA-256 and whether it was kept. */
static int build(char sha[65], bool *reused) {
  char path[8192], err[512] = "";
  int r = gw_bundle_build(out, path, sizeof path, sha, reused, err, sizeof err);
  if (r < 0)
    fprintf(stderr, "build: %s\n", err);
  return r;
}

static void mtime_of(const char *path, struct timespec *t, ino_t *ino) {
  struct stat st;
  memset(t, 0, sizeof *t);
  *ino = 0;
  if (stat(path, &st) == 0) {
    *t = st.st_mtim;
    *ino = st.st_ino;
  }
}

int main(int argc, char **argv) {
  if (argc != 2 || !mkdtemp(dir))
    return 2;
  char worker[8192], train[8192], archive[8192], inputs[8192], list[8192];
  snprintf(out, sizeof out, "%s/out", dir);
  snprintf(worker, sizeof worker, "%s/worker-prog", dir);
  snprintf(train, sizeof train, "%s/train-prog", dir);
  snprintf(archive, sizeof archive, "%s/spotlab-worker.tar.gz", out);
  snprintf(inputs, sizeof inputs, "%s/inputs", out);
  snprintf(list, sizeof list, "%s/list", dir);
  CHECK_INT(mkdir(out, 0700), 0);
  CHECK_INT(sh("cp -- '%s' '%s'", argv[1], worker), 0);
  CHECK_INT(sh("cp -- '%s' '%s'", argv[1], train), 0);
  setenv("SPOTLAB_WORKER_BIN", worker, 1);
  setenv("SPOTLAB_TRAIN_BIN", train, 1);

  /* the first build: both programs, their one library once, a manifest */
  char sha1[65] = "", sha[65] = "";
  bool reused = true;
  CHECK_INT(build(sha1, &reused), 0);
  CHECK(!reused);
  CHECK(strlen(sha1) == 64);
  CHECK(exists("inputs") && exists("spotlab-worker.tar.gz"));
  CHECK_INT(sh("tar tzf '%s' > '%s'", archive, list), 0);
  CHECK_INT(sh("grep -qx 'bin/spotlab-worker' '%s' && grep -qx 'bin/spotlab-train' '%s'", list, list), 0);
  CHECK_INT(sh("test \"$(grep -c '^lib/libsodium' '%s')\" = 1", list), 0);
  CHECK_INT(sh("grep -q '^bin/spotlab-train [0-9a-f]\\{64\\}$' '%s' && grep -q '^archive [0-9a-f]\\{64\\}$' '%s'",
               inputs, inputs), 0);

  /* the same files: the archive is kept, not written again */
  struct timespec t1, t2;
  ino_t i1, i2;
  mtime_of(archive, &t1, &i1);
  CHECK_INT(build(sha, &reused), 0);
  CHECK(reused);
  CHECK_STR(sha, sha1);
  mtime_of(archive, &t2, &i2);
  CHECK(i1 == i2 && t1.tv_sec == t2.tv_sec && t1.tv_nsec == t2.tv_nsec);

  /* a program changed: built again, another archive; then kept again */
  char sha2[65] = "";
  CHECK_INT(sh("printf x >> '%s'", worker), 0);
  CHECK_INT(build(sha2, &reused), 0);
  CHECK(!reused);
  CHECK(strcmp(sha2, sha1) != 0);
  CHECK_INT(build(sha, &reused), 0);
  CHECK(reused);
  CHECK_STR(sha, sha2);

  /* a damaged manifest, an empty one, none, a changed archive: each is
   * built again, to the same bytes */
  const char *damage[] = {"printf 'spotlab worker bundle 1\\nbin/x' >", ": >", "rm -f --"};
  for (size_t i = 0; i < sizeof damage / sizeof *damage; i++) {
    CHECK_INT(sh("%s '%s'", damage[i], inputs), 0);
    CHECK_INT(build(sha, &reused), 0);
    CHECK(!reused);
    CHECK_STR(sha, sha2);
  }
  CHECK_INT(sh("printf x >> '%s'", archive), 0);
  CHECK_INT(build(sha, &reused), 0);
  CHECK(!reused);
  CHECK_STR(sha, sha2);
  CHECK_INT(build(sha, &reused), 0);
  CHECK(reused);

  /* spotlab-train's CUDA backend beside it: bundled where it looks from
   * bin/, its library (the same as the programs') once; without it, the
   * archive of before */
  char backend[8300];
  snprintf(backend, sizeof backend, "%s/libspotlab-train-cuda.so", dir);
  CHECK_INT(sh("cp -- '%s' '%s'", argv[1], backend), 0);
  char sha3[65] = "";
  CHECK_INT(build(sha3, &reused), 0);
  CHECK(!reused);
  CHECK(strcmp(sha3, sha2) != 0);
  CHECK_INT(sh("tar tzf '%s' > '%s'", archive, list), 0);
  CHECK_INT(sh("grep -qx 'lib/spotlab/libspotlab-train-cuda.so' '%s'", list), 0);
  CHECK_INT(sh("test \"$(grep -c '^lib/libsodium' '%s')\" = 1", list), 0);
  CHECK_INT(sh("rm -f -- '%s'", backend), 0);
  CHECK_INT(build(sha, &reused), 0);
  CHECK(!reused);
  CHECK_STR(sha, sha2);

  /* what a build killed midway left: removed, the archive kept */
  CHECK_INT(sh("mkdir -p '%s/stage.Ab12Cd/bin' && printf x > '%s/stage.Ab12Cd.tar.gz'", out, out), 0);
  CHECK_INT(build(sha, &reused), 0);
  CHECK(reused);
  CHECK(!exists("stage.Ab12Cd") && !exists("stage.Ab12Cd.tar.gz"));

  /* a program that cannot be read: an error, and the archive stays */
  CHECK_INT(sh("rm -f -- '%s' && mkdir -- '%s'", worker, worker), 0);
  CHECK(build(sha, &reused) < 0);
  CHECK(exists("spotlab-worker.tar.gz"));

  if (sh("rm -rf -- '%s'", dir) != 0)
    fprintf(stderr, "could not remove %s\n", dir);
  TEST_MAIN_END();
}
