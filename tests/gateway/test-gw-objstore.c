/* The gateway's S3 presigner: a worker gets URLs only for keys under the
 * prefixes it is given (its jobs), well-formed requests only, and URLs that
 * carry a signature but never the secret. No network: presigning is local. */
#include "harness.h"
#include "objstore.h"
#include "sl_err.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SECRET "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"

static int presign1(struct gw_objstore *o, struct sl_s3_presign_req q, const char *prefix,
                    char **url) {
  const char *p[] = {prefix};
  char err[256] = "";
  *url = NULL;
  return gw_objstore_presign_for(o, &q, 1, p, 1, url, err, sizeof err);
}

int main(void) {
  setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
  setenv("AWS_SECRET_ACCESS_KEY", SECRET, 1);
  unsetenv("AWS_SESSION_TOKEN");
  setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9", 1);
  setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
  setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent", 1);
  setenv("AWS_CONFIG_FILE", "/nonexistent", 1);

  struct gw_objstore *o = NULL;
  char err[256] = "";
  CHECK_INT(gw_objstore_open("file:///tmp/x", "us-east-1", &o, err, sizeof err), 0);
  CHECK(o == NULL); /* nothing to sign for a folder */
  CHECK_INT(gw_objstore_open("s3://team-bucket/spotlab", "us-east-1", &o, err, sizeof err), 0);
  CHECK(o != NULL);
  if (!o) TEST_MAIN_END();

  char *url;
  struct sl_s3_presign_req put = {.op = SL_S3_PUT, .key = "J000003/ckpt-00000400.tc"};
  CHECK_INT(presign1(o, put, "J000003/", &url), 0);
  if (url) {
    CHECK(!strncmp(url, "http://127.0.0.1:9/team-bucket/spotlab/J000003/ckpt-00000400.tc?", 64));
    CHECK(strstr(url, "X-Amz-Signature=") != NULL);
    CHECK(strstr(url, "X-Amz-Expires=3600") != NULL);
    CHECK(strstr(url, SECRET) == NULL);
    free(url);
  }
  /* another job's key, a key that only starts like the prefix, climbing out */
  struct sl_s3_presign_req other = {.op = SL_S3_GET, .key = "J000004/ckpt-00000400.tc"};
  CHECK_INT(presign1(o, other, "J000003/", &url), SL_EAUTH);
  CHECK(url == NULL);
  struct sl_s3_presign_req longer = {.op = SL_S3_GET, .key = "J0000031/x"};
  CHECK_INT(presign1(o, longer, "J000003/", &url), SL_EAUTH);
  struct sl_s3_presign_req climb = {.op = SL_S3_DELETE, .key = "J000003/../J000004/ckpt-1.tc"};
  CHECK_INT(presign1(o, climb, "J000003/", &url), -EINVAL);
  struct sl_s3_presign_req bundle = {.op = SL_S3_PUT, .key = "_spotlab/bundle-0.tar.gz"};
  CHECK_INT(presign1(o, bundle, "J000003/", &url), SL_EAUTH);
  /* malformed requests */
  struct sl_s3_presign_req nopart = {.op = SL_S3_MPU_PART, .key = "J000003/k", .upload_id = "u"};
  CHECK_INT(presign1(o, nopart, "J000003/", &url), -EINVAL);
  struct sl_s3_presign_req noid = {.op = SL_S3_MPU_COMPLETE, .key = "J000003/k"};
  CHECK_INT(presign1(o, noid, "J000003/", &url), -EINVAL);
  struct sl_s3_presign_req badop = {.op = SL_S3_OPS_, .key = "J000003/k"};
  CHECK_INT(presign1(o, badop, "J000003/", &url), -EINVAL);
  struct sl_s3_presign_req part = {.op = SL_S3_MPU_PART, .key = "J000003/k", .upload_id = "u1", .part = 2};
  CHECK_INT(presign1(o, part, "J000003/", &url), 0);
  if (url) {
    CHECK(strstr(url, "partNumber=2") != NULL && strstr(url, "uploadId=u1") != NULL);
    free(url);
  }
  /* no prefixes at all: nothing is signed */
  char *urls[2] = {NULL, NULL};
  CHECK_INT(gw_objstore_presign_for(o, &put, 1, NULL, 0, urls, err, sizeof err), SL_EAUTH);
  CHECK(strstr(err, "not under a job") != NULL);
  /* a batch fails whole: nothing is owned */
  struct sl_s3_presign_req two[2] = {put, other};
  const char *pre[] = {"J000003/"};
  CHECK_INT(gw_objstore_presign_for(o, two, 2, pre, 1, urls, err, sizeof err), SL_EAUTH);
  /* the gateway's own GET (the bundle) */
  char u[SL_S3_URL_MAX];
  CHECK_INT(gw_objstore_presign_get(o, "_spotlab/bundle-0.tar.gz", 21600, u, sizeof u, err, sizeof err), 0);
  CHECK(strstr(u, "X-Amz-Expires=21600") != NULL);
  CHECK_INT(gw_objstore_presign_get(o, "_spotlab/bundle-0.tar.gz", 21600, u, 16, err, sizeof err), SL_ELIMIT);
  gw_objstore_free(o);

  /* no credentials anywhere: a sentence, no URL */
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  CHECK_INT(gw_objstore_open("s3://team-bucket/spotlab", "us-east-1", &o, err, sizeof err), 0);
  if (o) {
    CHECK(presign1(o, put, "J000003/", &url) < 0);
    CHECK(url == NULL);
    gw_objstore_free(o);
  }
  /* a bucket name S3 would refuse */
  CHECK(gw_objstore_open("s3:///nobucket", "us-east-1", &o, err, sizeof err) < 0);
  TEST_MAIN_END();
}
