/* The worker's checkpoint store through its S3 backend, against the S3
 * service at AWS_ENDPOINT_URL_S3 (test_s3.py starts s3rver and sets it):
 * put/get/list/remove as the folder backend answers them, multipart puts,
 * an interrupted put that must leave the previous object readable, and a
 * download whose bytes do not match their x-amz-meta-sha256.
 *
 * argv[1]: the store URL (s3://BUCKET/PREFIX); argv[2]: a scratch folder. */
#include "harness.h"

#include "sl_err.h"
#include "sl_s3.h"
#include "store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *dir;

static void write_file(const char *path, const char *text, size_t n) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  for (size_t i = 0; i < n; i++) fputs(text, f);
  fclose(f);
}

/* Compares two files byte for byte. */
static int same_file(const char *a, const char *b) {
  FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
  int same = fa && fb;
  while (same) {
    int ca = fgetc(fa), cb = fgetc(fb);
    if (ca != cb) same = 0;
    if (ca == EOF || cb == EOF) break;
  }
  if (fa) fclose(fa);
  if (fb) fclose(fb);
  return same;
}

static void test_roundtrip(struct wk_store *s) {
  char src[512], dst[512];
  snprintf(src, sizeof src, "%s/src.bin", dir);
  snprintf(dst, sizeof dst, "%s/out/dst.bin", dir);
  write_file(src, "version-1;", 3);
  uint64_t bytes = 0;
  CHECK_INT(wk_store_put_file(s, "J000001/ckpt-00000010.tc", src, &bytes), 0);
  CHECK_INT(bytes, 30);
  CHECK_INT(wk_store_put_file(s, "J000001/files/a/b c.txt", src, NULL), 0);
  CHECK_INT(wk_store_put_file(s, "J000002/ckpt-00000010.tc", src, NULL), 0);
  CHECK_INT(wk_store_get_file(s, "J000001/ckpt-00000010.tc", dst, &bytes), 0);
  CHECK_INT(bytes, 30);
  CHECK(same_file(src, dst));
  char **keys = NULL;
  size_t n = 0;
  CHECK_INT(wk_store_list(s, "J000001/", &keys, &n), 0);
  CHECK_INT(n, 2);
  if (n == 2) {
    CHECK_STR(keys[0], "J000001/ckpt-00000010.tc");
    CHECK_STR(keys[1], "J000001/files/a/b c.txt");
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
  CHECK(strstr(wk_store_error(s), "J000002/ckpt-00000010.tc") != NULL);
}

/* Above the store's 64 MiB part size: a multipart upload and a ranged
 * download. */
static void test_large(struct wk_store *s) {
  char src[512], dst[512];
  snprintf(src, sizeof src, "%s/large.bin", dir);
  snprintf(dst, sizeof dst, "%s/large.out", dir);
  write_file(src, "0123456789abcdef-large-object;", 2400000); /* 72 MB: 2 parts */
  uint64_t bytes = 0;
  CHECK_INT(wk_store_put_file(s, "J000003/ckpt-00000100.tc", src, &bytes), 0);
  CHECK_INT(bytes, 72000000);
  CHECK_INT(wk_store_get_file(s, "J000003/ckpt-00000100.tc", dst, &bytes), 0);
  CHECK_INT(bytes, 72000000);
  CHECK(same_file(src, dst));
}

static void test_interrupted_put(struct wk_store *s) {
  char src[512], dst[512], old[512];
  snprintf(old, sizeof old, "%s/src.bin", dir);
  snprintf(src, sizeof src, "%s/src2.bin", dir);
  snprintf(dst, sizeof dst, "%s/dst2.bin", dir);
  write_file(src, "version-2;", 3);
  /* the upload is cut off after 7 bytes: the previous object stays */
  wk_store_fail_next_put(s, 7);
  CHECK(wk_store_put_file(s, "J000001/ckpt-00000010.tc", src, NULL) < 0);
  CHECK_INT(wk_store_get_file(s, "J000001/ckpt-00000010.tc", dst, NULL), 0);
  CHECK(same_file(old, dst));
  /* the same for a multipart upload cut off in its second part */
  char big[512];
  snprintf(big, sizeof big, "%s/large.bin", dir);
  wk_store_fail_next_put(s, 66 << 20);
  CHECK(wk_store_put_file(s, "J000001/ckpt-00000010.tc", big, NULL) < 0);
  CHECK_INT(wk_store_get_file(s, "J000001/ckpt-00000010.tc", dst, NULL), 0);
  CHECK(same_file(old, dst));
  /* a source that vanished */
  char gone[512];
  snprintf(gone, sizeof gone, "%s/missing.bin", dir);
  CHECK_INT(wk_store_put_file(s, "J000001/ckpt-00000010.tc", gone, NULL), -ENOENT);
  /* the next put works and replaces the object whole */
  CHECK_INT(wk_store_put_file(s, "J000001/ckpt-00000010.tc", src, NULL), 0);
  CHECK_INT(wk_store_get_file(s, "J000001/ckpt-00000010.tc", dst, NULL), 0);
  CHECK(same_file(src, dst));
}

static void test_keys(struct wk_store *s) {
  static const char *const bad[] = {"", "/abs", "J1/../x", "J1//x", "J1/", "a\nb"};
  char src[512];
  snprintf(src, sizeof src, "%s/src.bin", dir);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    CHECK_INT(wk_store_put_file(s, bad[i], src, NULL), SL_ENAME);
  char **keys;
  CHECK_INT(wk_store_list(s, "../", &keys, NULL), SL_ENAME);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: test-s3-store s3://BUCKET/PREFIX SCRATCH\n");
    return 2;
  }
  dir = argv[2];
  struct sl_aws_creds creds = {0};
  const char *id = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");
  CHECK(id && secret);
  if (!id || !secret) TEST_MAIN_END();
  snprintf(creds.access_key_id, sizeof creds.access_key_id, "%s", id);
  snprintf(creds.secret_access_key, sizeof creds.secret_access_key, "%s", secret);
  struct sl_s3_location loc;
  char err[512] = "";
  CHECK_INT(sl_s3_location_parse(argv[1], NULL, NULL, &loc, err, sizeof err), 0);
  struct sl_s3_signer *signer = sl_s3_creds_signer_new(&loc, &creds, 0);
  CHECK(signer != NULL);
  struct wk_store *s = NULL;
  CHECK_INT(wk_store_open(argv[1], signer, 0, &s), 0);
  if (!s) TEST_MAIN_END();
  test_roundtrip(s);
  test_large(s);
  test_interrupted_put(s);
  test_keys(s);
  wk_store_free(s);
  sl_s3_creds_signer_free(signer);
  TEST_MAIN_END();
}
