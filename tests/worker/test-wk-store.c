/* Checkpoint store, folder backend: put/get/list/remove, key checks, and
 * interrupted puts that must leave the previous object readable; the same
 * with a pump set (each call on a thread of its own), and the pump running
 * on the caller's thread while a call waits. */
#include "harness.h"

#include "sl_err.h"
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
  CHECK_INT(wk_store_open("s3://bucket/prefix", NULL, &t), SL_ECONFIG); /* no signer */
  CHECK_INT(wk_store_open("gs://bucket/prefix", NULL, &t), SL_ENOTSUP);
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

static void pump_count(void *ctx) { ++*(int *)ctx; }

int main(void) {
  CHECK(mkdtemp(root) != NULL);
  char url[128];
  snprintf(url, sizeof url, "file://%s/store", root);
  struct wk_store *s = NULL;
  CHECK_INT(wk_store_open(url, NULL, &s), 0);
  if (!s) TEST_MAIN_END();
  test_roundtrip(s);
  test_interrupted_put(s);
  test_keys(s);
  wk_store_free(s);
  /* the same calls, each on a thread of its own, answer the same */
  snprintf(url, sizeof url, "file://%s/store2", root);
  int pumped = 0;
  CHECK_INT(wk_store_open(url, NULL, &s), 0);
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
