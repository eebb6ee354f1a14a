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

#include "sl_http.h"
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
  int max_keys;                 /* LIST: keys per page, 1..1000; 0: the service's (1000) */
};

/* The op's wire name ("get", "put", "mpu_part", ...), and back (-1 unknown). */
const char *sl_s3_op_name(enum sl_s3_op op);
int sl_s3_op_from_name(const char *name);

/* Signs n requests into n owned URLs (ret_urls[i], free() each). Returns 0,
 * or an error with a sentence in err; on error no URL is owned. */
struct sl_s3_signer {
  int (*presign)(void *ctx, const struct sl_s3_presign_req *reqs, size_t n, char **ret_urls,
                 char *err, size_t err_size);
  /* Optional (the client never uses them): the same without waiting. ask
   * sends the request and gives its id; take gives 0 while it is
   * unanswered, 1 with its n URLs (owned) in ret_urls, or a negative error
   * with err (a refusal, or no answer in time); after anything but 0 the id
   * is spent. forget drops a request that will not be taken. */
  int (*ask)(void *ctx, const struct sl_s3_presign_req *reqs, size_t n, int64_t *ret_id);
  int (*take)(void *ctx, int64_t id, char **ret_urls, size_t n, char *err, size_t err_size);
  void (*forget)(void *ctx, int64_t id);
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

/* ---- the client ----
 *
 * Blocking calls, safe from one thread at a time per client; a call may run
 * threads of its own (parts). The signer is borrowed for the client's life
 * and is called under the client's lock, never from two threads at once.
 * Every call writes a sentence naming the key into err on failure; no URL
 * (whose query holds the signature) ever reaches it. Design notes:
 * docs/internals/s3.md. */

#define SL_S3_PART_DEFAULT_BYTES (64ull << 20)
#define SL_S3_PART_MIN_BYTES (5ull << 20)    /* S3's smallest part but the last */
#define SL_S3_PARTS_MAX 10000
#define SL_S3_THREADS_DEFAULT 4
#define SL_S3_THREADS_MAX 32
#define SL_S3_LIST_MAX 100000                /* keys one list returns at most */

/* Zeroed fields take the defaults. */
struct sl_s3_opts {
  uint64_t part_bytes;          /* one PUT up to this size, multipart above it, in parts of
                                 * this size (larger when 10000 would not hold the file);
                                 * downloads above it go in ranges of this size.
                                 * 0: SL_S3_PART_DEFAULT_BYTES; at least SL_S3_PART_MIN_BYTES */
  int threads;                  /* parts or ranges in flight; 0: SL_S3_THREADS_DEFAULT */
  int list_page_keys;           /* keys per list page; 0: the service's (1000) */
  struct sl_http_retry retry;   /* per request; zero: 6 tries, 200 ms, 10 s backoff */
  int timeout_ms;               /* a request without data; data requests also get 1 s per
                                 * MiB. 0: 30 s */
  const atomic_bool *cancel;    /* NULL, or a flag that, once set, stops the client's
                                 * requests (sl_http_req.cancel): the operation under way
                                 * fails with -ECANCELED. A multipart upload so stopped
                                 * is still aborted, with one short try. */
  /* NULL, or told of each multipart upload the client begins (open: true),
   * before any part is sent, and again once it is completed or aborted
   * (open: false; not when its abort failed, so the upload stays open).
   * A negative return for open stops the upload: it is aborted, and the
   * operation fails with that error. For a caller that must be able to
   * abort what a killed process left open. */
  int (*mpu_event)(void *ud, const char *key, const char *upload_id, bool open);
  void *mpu_event_ud;
};

struct sl_s3_client;

/* What HEAD tells of an object. */
struct sl_s3_object {
  uint64_t bytes;
  char etag[80];                /* as sent, quotes included */
  char sha256[65];              /* x-amz-meta-sha256; "" when the object has none */
};

/* An owned client that signs with signer (borrowed, see above); opts NULL:
 * the defaults. -EINVAL for a signer without presign or opts out of bounds. */
int sl_s3_client_new(const struct sl_s3_signer *signer, const struct sl_s3_opts *opts,
                     struct sl_s3_client **ret);
struct sl_s3_client *sl_s3_client_free(struct sl_s3_client *c);

/* Uploads the local file src as key, its SHA-256 kept as x-amz-meta-sha256;
 * *ret_bytes (may be NULL) gets its size. Multipart above part_bytes: each
 * part carries Content-MD5 and its ETag is checked; the upload is completed
 * only once every part is in and aborted on any failure, so the previous
 * object with that key stays whole. */
int sl_s3_put_file(struct sl_s3_client *c, const char *key, const char *src,
                   uint64_t *ret_bytes, char *err, size_t err_size);

/* Downloads key into dst through a temporary name beside it, checked
 * against x-amz-meta-sha256 when the object has one before it is renamed
 * into place: SL_ECHECKSUM on a mismatch, dst untouched and no temporary
 * left. -ENOENT if key is absent. */
int sl_s3_get_file(struct sl_s3_client *c, const char *key, const char *dst,
                   uint64_t *ret_bytes, char *err, size_t err_size);

/* HeadObject. -ENOENT if absent. */
int sl_s3_head(struct sl_s3_client *c, const char *key, struct sl_s3_object *ret,
               char *err, size_t err_size);

/* Keys under prefix ("" for all), relative to the store's prefix, sorted,
 * every page read; *ret_keys is an owned NULL-terminated array
 * (sl_s3_keys_free); *ret_n (may be NULL) its length. SL_ELIMIT past
 * SL_S3_LIST_MAX. */
int sl_s3_list(struct sl_s3_client *c, const char *prefix, char ***ret_keys, size_t *ret_n,
               char *err, size_t err_size);
char **sl_s3_keys_free(char **keys);

/* DeleteObject. S3 answers alike whether or not key existed. */
int sl_s3_delete(struct sl_s3_client *c, const char *key, char *err, size_t err_size);

/* AbortMultipartUpload of upload_id for key: the parts already sent are
 * deleted. -ENOENT (NoSuchUpload) when the upload is no more: completed or
 * aborted already. */
int sl_s3_abort_upload(struct sl_s3_client *c, const char *key, const char *upload_id, char *err,
                       size_t err_size);

/* Test hook: the next put's body ends after `bytes` bytes, as a transfer
 * cut off mid-way would (-1 = off). */
void sl_s3_fail_next_put(struct sl_s3_client *c, int64_t bytes);

/* A signer that presigns with fixed credentials for loc (both copied), URLs
 * valid expires_s seconds (0: 3600): for tools and tests; the gateway signs
 * with its credential chain. Owned, free with sl_s3_creds_signer_free. */
struct sl_s3_signer *sl_s3_creds_signer_new(const struct sl_s3_location *loc,
                                            const struct sl_aws_creds *creds, int64_t expires_s);
struct sl_s3_signer *sl_s3_creds_signer_free(struct sl_s3_signer *s);

#endif
