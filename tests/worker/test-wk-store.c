/* Checkpoint store, folder backend: put/get/list/remove, key checks, and
 * interrupted puts that must leave the previous object readable; a put's
 * sweep of the temporaries that puts which will never finish left behind
 * (their writer gone, or untouched for an hour), and of nothing else; the same
 * with a pump set (each call on a thread of its own), and the pump running
 * on the caller's thread while a call waits. */
#include "harness.h"

#include "sl_err.h"
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char root[] = "/tmp/wk-store-XXXXXX";

static void write_file(const char *path, const char *text, size_t n) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  for (size_t i = 0; i < n; i++) fputs(text, f);
  fclose(f);
}

/* Reads a whole small file into buf; returns its length or -1. */
static long read_file(const char *path, char *buf, size_t size) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  size_t n = fread(buf, 1, size - 1, f);
  buf[n] = 0;
  fclose(f);
  return (long)n;
}

static void test_roundtrip(struct wk_store *s) {
  char src[128], dst[128], buf[256];
  snprintf(src, sizeof src, "%s/src.bin", root);
  snprintf(dst, sizeof dst, "%s/out/dst.bin", root);
  write_file(src, "version-1;", 3);
  uint64_t bytes = 0;
  CHECK_INT(wk_store_put_file(s, "J000001/ckpt-00000010.tc", src, &bytes), 0);
  CHECK_INT(bytes, 30);
  CHECK_INT(wk_store_put_file(s, "J000001/files/a/b.txt", src, NULL), 0);
  CHECK_INT(wk_store_put_file(s, "J000002/ckpt-00000010.tc", src, NULL), 0);
  CHECK_INT(wk_store_get_file(s, "J000001/ckpt-00000010.tc", dst, &bytes), 0);
  CHECK_INT(bytes, 30);
  CHECK_INT(read_file(dst, buf, sizeof buf), 30);
  CHECK_STR(buf, "version-1;version-1;version-1;");
  char **keys = NULL;
  size_t n = 0;
  CHECK_INT(wk_store_list(s, "J000001/", &keys, &n), 0);
  CHECK_INT(n, 2);
  if (n == 2) {
    CHECK_STR(keys[0], "J000001/ckpt-00000010.tc");
    CHECK_STR(keys[1], "J000001/files/a/b.txt");
  }
  keys = wk_store_keys_free(keys);
  CHECK_INT(wk_store_list(s, "J000001/ckpt-", &keys, &n), 0);
  CHECK_INT(n, 1);
  keys = wk_store_keys_free(keys);
  CHECK_INT(wk_store_list(s, "J000009/", &keys, &n), 0);
  CHECK_INT(n, 0);
  CHECK(keys != NULL && keys[0] == NULL);
  keys = wk_store_keys_free(keys);
  CHECK_INT(wk_store_remove(s, "J000002/ckpt-00000010.tc"), 0);
  CHECK_INT(wk_store_remove(s, "J000002/ckpt-00000010.tc"), -ENOENT);
  CHECK_INT(wk_store_get_file(s, "J000002/ckpt-00000010.tc", dst, NULL), -ENOENT);
}

static void test_interrupted_put(struct wk_store *s) {
  char src[128], dst[128], buf[256];
  snprintf(src, sizeof src, "%s/src2.bin", root);
  snprintf(dst, sizeof dst, "%s/dst2.bin", root);
  write_file(src, "version-2;", 3);
  /* the upload dies after 7 bytes: the temporary object stays behind */
  wk_store_fail_next_put(s, 7);
  CHECK_INT(wk_store_put_file(s, "J000001/ckpt-00000010.tc", src, NULL), -EIO);
  CHECK_INT(wk_store_get_file(s, "J000001/ckpt-00000010.tc", dst, NULL), 0);
  CHECK_INT(read_file(dst, buf, sizeof buf), 30);
  CHECK_STR(buf, "version-1;version-1;version-1;");
  char **keys = NULL;
  size_t n = 0;
  CHECK_INT(wk_store_list(s, "J000001/", &keys, &n), 0);
  CHECK_INT(n, 2); /* the partial temporary object is not listed */
  wk_store_keys_free(keys);
  /* a source that vanished: the put fails, the object stays */
  char gone[128];
  snprintf(gone, sizeof gone, "%s/missing.bin", root);
  CHECK_INT(wk_store_put_file(s, "J000001/ckpt-00000010.tc", gone, NULL), -ENOENT);
  CHECK_INT(wk_store_get_file(s, "J000001/ckpt-00000010.tc", dst, NULL), 0);
  CHECK_INT(read_file(dst, buf, sizeof buf), 30);
  CHECK_STR(buf, "version-1;version-1;version-1;");
  /* the next put works and replaces the object whole */
  CHECK_INT(wk_store_put_file(s, "J000001/ckpt-00000010.tc", src, NULL), 0);
  CHECK_INT(wk_store_get_file(s, "J000001/ckpt-00000010.tc", dst, NULL), 0);
  CHECK_STR((read_file(dst, buf, sizeof buf), buf), "version-2;version-2;version-2;");
}

static void test_keys(struct wk_store *s) {
  static const char *const bad[] = {
    "", "/abs", "J1/../x", "J1/./x", "..", "J1//x", "J1/", "J1/.wk-tmp.x", "a\nb", "a\\b",
  };
  char src[128];
  snprintf(src, sizeof src, "%s/src.bin", root);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    CHECK_INT(wk_store_check_key(bad[i]), SL_ENAME);
    CHECK_INT(wk_store_put_file(s, bad[i], src, NULL), SL_ENAME);
  }
  CHECK_INT(wk_store_check_key("J000001/files/.hidden/x y.txt"), 0);
  char **keys;
  CHECK_INT(wk_store_list(s, "../", &keys, NULL), SL_ENAME);
  struct wk_store *t;
  CHECK_INT(wk_store_open("s3://bucket/prefix", NULL, 0, &t), SL_ECONFIG); /* no signer */
  CHECK_INT(wk_store_open("gs://bucket/prefix", NULL, 0, &t), SL_ENOTSUP);
}

/* The pump feeds a FIFO that a put reads: the put can only end if the
 * pump runs while it waits. */
struct feeder {
  const char *fifo;
  int fd, calls, chunks;
};

static void feed(void *ctx) {
  struct feeder *f = ctx;
  f->calls++;
  if (f->chunks == 5) /* fed and closed: never a writer again, or the put would not see its end */
    return;
  if (f->fd < 0) /* no reader yet: ENXIO, try again at the next call */
    f->fd = open(f->fifo, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (f->fd < 0)
    return;
  char chunk[1000];
  memset(chunk, 'a' + f->chunks, sizeof chunk);
  if (write(f->fd, chunk, sizeof chunk) == (ssize_t)sizeof chunk && ++f->chunks == 5) {
    close(f->fd); /* the put reads its end */
    f->fd = -1;
  }
}

static void test_pump(struct wk_store *s) {
  char fifo[128], dst[128], buf[8192];
  snprintf(fifo, sizeof fifo, "%s/feed.fifo", root);
  snprintf(dst, sizeof dst, "%s/fed.bin", root);
  CHECK_INT(mkfifo(fifo, 0600), 0);
  struct feeder f = {.fifo = fifo, .fd = -1};
  wk_store_set_pump(s, feed, &f);
  alarm(30); /* a put on the caller's thread would wait for the pump for ever */
  uint64_t bytes = 0;
  CHECK_INT(wk_store_put_file(s, "J000003/ckpt-00000001.tc", fifo, &bytes), 0);
  alarm(0);
  CHECK_INT(bytes, 5000);
  CHECK_INT(f.chunks, 5);
  CHECK(f.calls >= 5);
  CHECK_INT(wk_store_get_file(s, "J000003/ckpt-00000001.tc", dst, NULL), 0);
  CHECK_INT(read_file(dst, buf, sizeof buf), 5000);
  CHECK(buf[0] == 'a' && buf[999] == 'a' && buf[1000] == 'b' && buf[4999] == 'e');
}

static void make_tmp(const char *dir, const char *name, time_t age_s) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  write_file(path, "part", 1);
  struct timespec t[2] = {{.tv_sec = time(NULL) - age_s}, {.tv_sec = time(NULL) - age_s}};
  CHECK_INT(utimensat(AT_FDCWD, path, t, 0), 0);
}

static bool exists(const char *dir, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return access(path, F_OK) == 0;
}

/* A put removes from its folder the temporaries of writers of this PID space that are gone
 * (exited, or exited and not yet reaped) and any untouched for an hour; it keeps its own
 * process's, those of a live process, and the fresh ones of another PID space or of an
 * older name without one. A folder is read again once puts went elsewhere meanwhile; in
 * between, a put looks again at the temporaries of writers that were alive at the sweep. */
static void test_sweep(struct wk_store *s, const char *store) {
  char dir[160], src[128], name[256];
  snprintf(dir, sizeof dir, "%s/J000005", store);
  snprintf(src, sizeof src, "%s/src5.bin", root);
  write_file(src, "version-5;", 2);
  /* a put that dies midway leaves a temporary that names this process's PID space */
  wk_store_fail_next_put(s, 3);
  CHECK_INT(wk_store_put_file(s, "J000006/ckpt-00000001.tc", src, NULL), -EIO);
  char left[256] = "", space[9] = "";
  snprintf(name, sizeof name, "%s/J000006", store);
  DIR *d = opendir(name);
  CHECK(d != NULL);
  for (struct dirent *e; d && (e = readdir(d));)
    if (!strncmp(e->d_name, ".wk-tmp.", 8)) snprintf(left, sizeof left, "%s", e->d_name);
  if (d) closedir(d);
  int pid = 0;
  unsigned n = 0;
  CHECK(sscanf(left, ".wk-tmp.ckpt-00000001.tc.%8[0-9a-f].%d.%u", space, &pid, &n) == 3);
  CHECK_INT(pid, getpid());
  const char *other = strcmp(space, "00000000") ? "00000000" : "11111111";
  pid_t dead = fork(), zombie;
  if (dead == 0) _exit(0);
  CHECK_INT(waitpid(dead, NULL, 0), dead);
  if ((zombie = fork()) == 0) _exit(0);
  for (int i = 0; i < 200; i++) { /* until the child has exited (and waits to be reaped) */
    char path[64], buf[256] = "";
    snprintf(path, sizeof path, "/proc/%d/stat", (int)zombie);
    FILE *f = fopen(path, "r");
    if (f) { if (!fgets(buf, sizeof buf, f)) buf[0] = 0; fclose(f); }
    char *p = strrchr(buf, ')');
    if (p && p[1] == ' ' && p[2] == 'Z') break;
    usleep(10000);
  }
  struct { const char *obj; long pid; time_t age; bool kept; } c[] = {
      {"ckpt-00000001.tc", getpid(), 0, true},  /* this process's own */
      {"ckpt-00000002.tc", dead, 0, false},     /* writer gone */
      {"ckpt-00000003.tc", zombie, 0, false},   /* writer exited, not reaped */
      {"ckpt-00000004.tc", getppid(), 0, true}, /* writer alive */
      {"ckpt-00000005.tc", getppid(), 2 * 3600, false}, /* alive, PID taken again? */
  };
  CHECK_INT(mkdir(dir, 0700), 0);
  for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
    snprintf(name, sizeof name, ".wk-tmp.%s.%s.%ld.0", c[i].obj, space, c[i].pid);
    make_tmp(dir, name, c[i].age);
  }
  char other_fresh[128], other_old[128];
  snprintf(other_fresh, sizeof other_fresh, ".wk-tmp.ckpt-00000006.tc.%s.%d.0", other, (int)dead);
  snprintf(other_old, sizeof other_old, ".wk-tmp.ckpt-00000007.tc.%s.%d.0", other, (int)dead);
  make_tmp(dir, other_fresh, 60);
  make_tmp(dir, other_old, 3600 + 120);
  make_tmp(dir, ".wk-tmp.ckpt-00000008.tc.123.0", 0);        /* no PID space: by age only */
  make_tmp(dir, ".wk-tmp.ckpt-00000009.tc.123.0", 3 * 3600);
  snprintf(name, sizeof name, "%s/.wk-tmp.d", dir);
  CHECK_INT(mkdir(name, 0700), 0); /* not a file: never removed */

  CHECK_INT(wk_store_put_file(s, "J000005/ckpt-00000010.tc", src, NULL), 0);
  for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
    snprintf(name, sizeof name, ".wk-tmp.%s.%s.%ld.0", c[i].obj, space, c[i].pid);
    if (exists(dir, name) != c[i].kept) {
      fprintf(stderr, "%s: %s\n", name, c[i].kept ? "removed" : "kept");
      CHECK(false);
    }
  }
  CHECK(exists(dir, other_fresh));
  CHECK(!exists(dir, other_old));
  CHECK(exists(dir, ".wk-tmp.ckpt-00000008.tc.123.0"));
  CHECK(!exists(dir, ".wk-tmp.ckpt-00000009.tc.123.0"));
  CHECK(exists(dir, ".wk-tmp.d"));
  CHECK(exists(dir, "ckpt-00000010.tc"));
  char **keys = NULL;
  size_t nk = 0;
  CHECK_INT(wk_store_list(s, "J000005/", &keys, &nk), 0);
  CHECK_INT(nk, 1);
  wk_store_keys_free(keys);

  /* the next put into the same folder does not read it again; one after a put elsewhere does */
  snprintf(name, sizeof name, ".wk-tmp.ckpt-00000011.tc.%s.%d.0", space, (int)dead);
  make_tmp(dir, name, 0);
  CHECK_INT(wk_store_put_file(s, "J000005/ckpt-00000020.tc", src, NULL), 0);
  CHECK(exists(dir, name));
  CHECK_INT(wk_store_put_file(s, "J000006/ckpt-00000020.tc", src, NULL), 0);
  CHECK_INT(wk_store_put_file(s, "J000005/ckpt-00000030.tc", src, NULL), 0);
  CHECK(!exists(dir, name));
  waitpid(zombie, NULL, 0);

  /* a temporary whose writer was alive at the sweep (a hung worker's put) goes at the next
   * put into the folder once that writer is gone, the folder not read again */
  pid_t live = fork();
  if (live == 0) {
    pause();
    _exit(0);
  }
  snprintf(name, sizeof name, ".wk-tmp.ckpt-00000012.tc.%s.%d.0", space, (int)live);
  make_tmp(dir, name, 0);
  CHECK_INT(wk_store_put_file(s, "J000006/ckpt-00000040.tc", src, NULL), 0);
  CHECK_INT(wk_store_put_file(s, "J000005/ckpt-00000040.tc", src, NULL), 0);
  CHECK(exists(dir, name));
  kill(live, SIGKILL);
  CHECK_INT(waitpid(live, NULL, 0), live);
  CHECK_INT(wk_store_put_file(s, "J000005/ckpt-00000050.tc", src, NULL), 0);
  CHECK(!exists(dir, name));
}

static void pump_count(void *ctx) { ++*(int *)ctx; }

int main(void) {
  CHECK(mkdtemp(root) != NULL);
  char url[128];
  snprintf(url, sizeof url, "file://%s/store", root);
  struct wk_store *s = NULL;
  CHECK_INT(wk_store_open(url, NULL, 0, &s), 0);
  if (!s) TEST_MAIN_END();
  test_roundtrip(s);
  test_interrupted_put(s);
  test_keys(s);
  snprintf(url, sizeof url, "%s/store", root);
  test_sweep(s, url);
  wk_store_free(s);
  /* the same calls, each on a thread of its own, answer the same */
  snprintf(url, sizeof url, "file://%s/store2", root);
  int pumped = 0;
  CHECK_INT(wk_store_open(url, NULL, 0, &s), 0);
  if (!s) TEST_MAIN_END();
  wk_store_set_pump(s, pump_count, &pumped);
  test_roundtrip(s);
  test_interrupted_put(s);
  test_keys(s);
  test_pump(s);
  wk_store_free(s);
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf %s", root);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
  TEST_MAIN_END();
}
