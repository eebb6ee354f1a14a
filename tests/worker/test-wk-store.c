/* Checkpoint store, folder backend: put/get/list/remove, key checks, and
 * interrupted puts that must leave the previous object readable. */
#include "harness.h"

#include "sl_err.h"
#include "store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
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
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf %s", root);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
  TEST_MAIN_END();
}
