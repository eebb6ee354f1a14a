/* S3 object storage: the store's operations on s3://BUCKET/PREFIX, done
 * over presigned URLs.
 *
 * Every request is signed by a signer the caller supplies: the gateway
 * signs with its own credentials (sl_s3_presign, below); a worker, which
 * holds no credentials, asks its gateway for the URLs (protocols.md §2,
 * presign). So one client serves both, and a worker can only ever reach the
 * objects its gateway signs for.
 *
 * Keys are relative to the store's prefix ("J000003/ckpt-00000400.tc"). */
#ifndef SL_S3_H
#define SL_S3_H

#include "sl_sigv4.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_S3_URL_MAX 8192            /* a presigned URL, session token included */

enum sl_s3_op {
  SL_S3_GET,          /* GetObject key */
  SL_S3_HEAD,         /* HeadObject key */
  SL_S3_PUT,          /* PutObject key (x-amz-meta-sha256 signed when sha256 is set) */
  SL_S3_DELETE,       /* DeleteObject key */
  SL_S3_LIST,         /* ListObjectsV2, prefix key (continuation token optional) */
  SL_S3_MPU_CREATE,   /* CreateMultipartUpload key (x-amz-meta-sha256 as for PUT) */
  SL_S3_MPU_PART,     /* UploadPart key, upload_id, part */
  SL_S3_MPU_COMPLETE, /* CompleteMultipartUpload key, upload_id */
  SL_S3_MPU_ABORT,    /* AbortMultipartUpload key, upload_id */
  SL_S3_OPS_
};

/* One request to presign. Strings are borrowed. */
struct sl_s3_presign_req {
  enum sl_s3_op op;
  const char *key;              /* relative to the store's prefix; LIST: the prefix listed */
  const char *upload_id;        /* MPU_PART, MPU_COMPLETE, MPU_ABORT */
  int part;                     /* MPU_PART: 1..10000 */
  const char *sha256;           /* PUT, MPU_CREATE: the object's SHA-256 (hex) kept as metadata; NULL: none */
  const char *continuation;     /* LIST: the previous page's continuation token; NULL: first page */
};

/* The op's wire name ("get", "put", "mpu_part", ...), and back (-1 unknown). */
const char *sl_s3_op_name(enum sl_s3_op op);
int sl_s3_op_from_name(const char *name);

/* Signs n requests into n owned URLs (ret_urls[i], free() each). Returns 0,
 * or an error with a sentence in err; on error no URL is owned. */
struct sl_s3_signer {
  int (*presign)(void *ctx, const struct sl_s3_presign_req *reqs, size_t n, char **ret_urls,
                 char *err, size_t err_size);
  void *ctx;
};

/* Where a store lives: parsed from "s3://BUCKET/PREFIX" with the region
 * and endpoint (sl_aws_endpoint). Path-style addressing (ENDPOINT/BUCKET/KEY)
 * when the endpoint was configured (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL),
 * virtual-hosted (https://BUCKET.s3.REGION.amazonaws.com/KEY) otherwise. */
struct sl_s3_location {
  char bucket[64];
  char prefix[512];             /* without leading or trailing "/"; may be "" */
  char region[64];
  char endpoint[512];           /* scheme://host[:port], no trailing "/" */
  bool path_style;
};

/* Parses url (s3://BUCKET[/PREFIX]) with region and endpoint (NULL or "":
 * from the environment, as sl_aws_endpoint). SL_ECONFIG with a sentence. */
int sl_s3_location_parse(const char *url, const char *region, const char *endpoint,
                         struct sl_s3_location *ret, char *err, size_t err_size);

/* Presigns one request for loc with creds at now_unix, valid expires_s. */
int sl_s3_presign(const struct sl_s3_location *loc, const struct sl_aws_creds *creds,
                  int64_t now_unix, int64_t expires_s, const struct sl_s3_presign_req *req,
                  char *buf, size_t size);

#endif
