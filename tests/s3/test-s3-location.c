/* sl_s3: store URLs, endpoints and addressing, op names, and the requests
 * presigning refuses. (What each op signs is checked against botocore in
 * test_s3.py's presign case.) */
#include "harness.h"

#include "sl_err.h"
#include "sl_s3.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const struct sl_aws_creds creds = {"AKIDEXAMPLE", "secret", "", 0};

static int presign(const struct sl_s3_location *loc, struct sl_s3_presign_req req, char *buf,
                   size_t size) {
  return sl_s3_presign(loc, &creds, 1700000000, 60, &req, buf, size);
}

static void test_parse(void) {
  struct sl_s3_location loc;
  char err[256], url[SL_S3_URL_MAX];
  unsetenv("AWS_ENDPOINT_URL_S3");
  unsetenv("AWS_ENDPOINT_URL");
  CHECK_INT(sl_s3_location_parse("s3://bkt/a/b/", "eu-west-1", "http://127.0.0.1:9000/", &loc, err,
                                 sizeof err), 0);
  CHECK_STR(loc.bucket, "bkt");
  CHECK_STR(loc.prefix, "a/b");
  CHECK_STR(loc.region, "eu-west-1");
  CHECK_STR(loc.endpoint, "http://127.0.0.1:9000");
  CHECK(loc.path_style);
  CHECK_INT(presign(&loc, (struct sl_s3_presign_req){.op = SL_S3_GET, .key = "k 1"}, url, sizeof url), 0);
  CHECK(!strncmp(url, "http://127.0.0.1:9000/bkt/a/b/k%201?", 36));
  /* no endpoint configured: virtual-hosted on AWS */
  CHECK_INT(sl_s3_location_parse("s3://bkt", "eu-west-1", NULL, &loc, err, sizeof err), 0);
  CHECK_STR(loc.prefix, "");
  CHECK(!loc.path_style);
  CHECK_INT(presign(&loc, (struct sl_s3_presign_req){.op = SL_S3_PUT, .key = "J1/x"}, url, sizeof url), 0);
  CHECK(!strncmp(url, "https://bkt.s3.eu-west-1.amazonaws.com/J1/x?", 44));
  CHECK_INT(presign(&loc, (struct sl_s3_presign_req){.op = SL_S3_LIST}, url, sizeof url), 0);
  CHECK(!strncmp(url, "https://bkt.s3.eu-west-1.amazonaws.com/?list-type=2&prefix=&", 60));
  /* from the environment: path-style */
  setenv("AWS_ENDPOINT_URL_S3", "http://localhost:4568", 1);
  CHECK_INT(sl_s3_location_parse("s3://bkt/p", "us-east-1", "", &loc, err, sizeof err), 0);
  CHECK_STR(loc.endpoint, "http://localhost:4568");
  CHECK(loc.path_style);
  unsetenv("AWS_ENDPOINT_URL_S3");
  /* a dotted bucket does not fit a certificate's one label */
  CHECK_INT(sl_s3_location_parse("s3://my.bucket/p", "us-east-1", NULL, &loc, err, sizeof err), 0);
  CHECK(loc.path_style);
  static const char *const bad[] = {"file:///x", "s3://", "s3://UPPER/x", "s3://ab/x", "s3://bkt/a//b",
                                    "s3://-bkt/x", "s3:/bkt"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = 0;
    CHECK_INT(sl_s3_location_parse(bad[i], "us-east-1", NULL, &loc, err, sizeof err), SL_ECONFIG);
    CHECK(err[0] != 0);
  }
  CHECK_INT(sl_s3_location_parse("s3://bkt", "us-east-1", "ftp://x", &loc, err, sizeof err), SL_ECONFIG);
  CHECK_INT(sl_s3_location_parse("s3://bkt", "us-east-1", "http://x/path", &loc, err, sizeof err),
            SL_ECONFIG);
}

static void test_refused(void) {
  struct sl_s3_location loc;
  char err[256], url[SL_S3_URL_MAX];
  CHECK_INT(sl_s3_location_parse("s3://bkt/p", "us-east-1", "http://h:1", &loc, err, sizeof err), 0);
  CHECK_INT(presign(&loc, (struct sl_s3_presign_req){.op = SL_S3_GET, .key = ""}, url, sizeof url), -EINVAL);
  CHECK_INT(presign(&loc, (struct sl_s3_presign_req){.op = SL_S3_MPU_PART, .key = "k", .upload_id = "u"},
                    url, sizeof url), -EINVAL); /* part 0 */
  CHECK_INT(presign(&loc, (struct sl_s3_presign_req){.op = SL_S3_MPU_PART, .key = "k", .upload_id = "u",
                                                     .part = 10001}, url, sizeof url), -EINVAL);
  CHECK_INT(presign(&loc, (struct sl_s3_presign_req){.op = SL_S3_MPU_ABORT, .key = "k"}, url, sizeof url),
            -EINVAL); /* no upload id */
  CHECK_INT(presign(&loc, (struct sl_s3_presign_req){.op = SL_S3_PUT, .key = "k", .sha256 = "abc"}, url,
                    sizeof url), -EINVAL);
  CHECK_INT(presign(&loc, (struct sl_s3_presign_req){.op = SL_S3_OPS_, .key = "k"}, url, sizeof url), -EINVAL);
  char key[1100];
  memset(key, 'k', sizeof key - 1);
  key[sizeof key - 1] = 0;
  CHECK_INT(presign(&loc, (struct sl_s3_presign_req){.op = SL_S3_GET, .key = key}, url, sizeof url), SL_ELIMIT);
  CHECK(presign(&loc, (struct sl_s3_presign_req){.op = SL_S3_GET, .key = "k"}, url, 40) < 0);
}

static void test_names(void) {
  for (int op = 0; op < SL_S3_OPS_; op++) CHECK_INT(sl_s3_op_from_name(sl_s3_op_name(op)), op);
  CHECK_STR(sl_s3_op_name(SL_S3_MPU_PART), "mpu_part");
  CHECK_INT(sl_s3_op_from_name("nope"), -1);
  CHECK_INT(sl_s3_op_from_name(NULL), -1);
}

int main(void) {
  test_parse();
  test_refused();
  test_names();
  TEST_MAIN_END();
}
