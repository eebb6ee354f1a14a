/* S3 object storage: where a store lives (s3://BUCKET/PREFIX with a region
 * and an endpoint) and how each operation is presigned. The client that
 * moves files with these URLs is sl_s3_client.c; design notes:
 * docs/internals/s3.md.
 *
 * Invariant: every object request names one key under the store's prefix,
 * encoded once with AWS's unreserved set ('/' kept), so what is signed is
 * what is sent. */
#include "sl_s3.h"
#include "sl_s3_int.h"

#include "sl_awscreds.h"
#include "sl_err.h"
#include "sl_ident.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KEY_MAX 1024              /* S3's limit on a whole key, prefix included */

/* ---- names ---- */

static const char *const op_names[SL_S3_OPS_] = {
  [SL_S3_GET] = "get", [SL_S3_HEAD] = "head", [SL_S3_PUT] = "put", [SL_S3_DELETE] = "delete",
  [SL_S3_LIST] = "list", [SL_S3_MPU_CREATE] = "mpu_create", [SL_S3_MPU_PART] = "mpu_part",
  [SL_S3_MPU_COMPLETE] = "mpu_complete", [SL_S3_MPU_ABORT] = "mpu_abort",
};

const char *sl_s3_op_name(enum sl_s3_op op) {
  return (unsigned)op < SL_S3_OPS_ ? op_names[op] : "unknown";
}

int sl_s3_op_from_name(const char *name) {
  for (int i = 0; name && i < SL_S3_OPS_; i++)
    if (!strcmp(name, op_names[i])) return i;
  return -1;
}

/* ---- where a store lives ---- */

static bool bucket_ok(const char *b, size_t n) {
  if (n < 3 || n > 63 || !isalnum((unsigned char)b[0]) || !isalnum((unsigned char)b[n - 1]))
    return false;
  for (size_t i = 0; i < n; i++)
    if (!(islower((unsigned char)b[i]) || isdigit((unsigned char)b[i]) || b[i] == '.' || b[i] == '-'))
      return false;
  return true;
}

int sl_s3_location_parse(const char *url, const char *region, const char *endpoint,
                         struct sl_s3_location *ret, char *err, size_t err_size) {
  struct sl_s3_location loc = {0};
  if (!url || strncmp(url, "s3://", 5) != 0)
    return sl_err_say(err, err_size, SL_ECONFIG, "a store on S3 is named s3://BUCKET/PREFIX");
  const char *b = url + 5;
  size_t bl = strcspn(b, "/");
  if (!bucket_ok(b, bl))
    return sl_err_say(
        err, err_size, SL_ECONFIG,
        "the store URL's bucket must be 3 to 63 lower-case letters, digits, '.' or '-'");
  memcpy(loc.bucket, b, bl);
  const char *p = b + bl;
  while (*p == '/') p++;
  size_t pl = strlen(p);
  while (pl && p[pl - 1] == '/') pl--;
  if (pl >= sizeof loc.prefix)
    return sl_err_say(err, err_size, SL_ECONFIG, "the store URL's prefix is longer than %zu bytes",
                      sizeof loc.prefix - 1);
  for (size_t i = 0; i < pl; i++)
    if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f || (p[i] == '/' && p[i + 1] == '/'))
      return sl_err_say(err, err_size, SL_ECONFIG,
                        "the store URL's prefix has an empty component or a control character");
  memcpy(loc.prefix, p, pl);
  int r = sl_aws_region(region, loc.region, err, err_size);
  if (r < 0) return r;
  char ep[SL_AWS_ENDPOINT_MAX];
  if (endpoint && *endpoint) {
    snprintf(ep, sizeof ep, "%s", endpoint);
    loc.path_style = true;
  } else {
    if ((r = sl_aws_endpoint("s3", loc.region, ep)) < 0)
      return sl_err_say(err, err_size, r, "no S3 endpoint for region %s", loc.region);
    const char *e1 = getenv("AWS_ENDPOINT_URL_S3"), *e2 = getenv("AWS_ENDPOINT_URL");
    loc.path_style = (e1 && *e1) || (e2 && *e2);
  }
  size_t el = strlen(ep);
  while (el && ep[el - 1] == '/') ep[--el] = 0;
  if ((strncmp(ep, "http://", 7) && strncmp(ep, "https://", 8)) || strpbrk(ep, "?#") ||
      el >= sizeof loc.endpoint || strchr(strstr(ep, "://") + 3, '/'))
    return sl_err_say(err, err_size, SL_ECONFIG, "the S3 endpoint must read http(s)://HOST[:PORT]");
  memcpy(loc.endpoint, ep, el + 1);
  /* A dotted bucket does not fit one certificate label: path-style then. */
  if (strchr(loc.bucket, '.')) loc.path_style = true;
  *ret = loc;
  return 0;
}

/* ---- presigning ---- */

static const char *op_method(enum sl_s3_op op) {
  switch (op) {
  case SL_S3_GET: case SL_S3_LIST: return "GET";
  case SL_S3_HEAD: return "HEAD";
  case SL_S3_PUT: case SL_S3_MPU_PART: return "PUT";
  case SL_S3_DELETE: case SL_S3_MPU_ABORT: return "DELETE";
  case SL_S3_MPU_CREATE: case SL_S3_MPU_COMPLETE: return "POST";
  default: return NULL;
  }
}

int sl_s3_cat(char *buf, size_t size, size_t *len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *len, size - *len, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= size - *len) return SL_ELIMIT;
  *len += (size_t)n;
  return 0;
}

/* Appends s percent-encoded. */
static int cat_enc(char *buf, size_t size, size_t *len, const char *s, bool keep_slash) {
  int r = sl_aws_uri_encode(s, keep_slash, buf + *len, size - *len);
  if (r < 0) return r;
  *len += strlen(buf + *len);
  return 0;
}

int sl_s3_presign(const struct sl_s3_location *loc, const struct sl_aws_creds *creds,
                  int64_t now_unix, int64_t expires_s, const struct sl_s3_presign_req *req,
                  char *buf, size_t size) {
  const char *method = op_method(req->op);
  if (!method || !loc || !creds) return -EINVAL;
  const char *key = req->key ? req->key : "";
  bool mpu = req->op == SL_S3_MPU_PART || req->op == SL_S3_MPU_COMPLETE || req->op == SL_S3_MPU_ABORT;
  if ((req->op != SL_S3_LIST && !*key) || (mpu && (!req->upload_id || !*req->upload_id)) ||
      (req->op == SL_S3_MPU_PART && (req->part < 1 || req->part > SL_S3_PARTS_MAX)) ||
      (req->sha256 && !sl_sha256_hex_ok(req->sha256)) || req->max_keys < 0 || req->max_keys > 1000)
    return -EINVAL;
  char full[sizeof loc->prefix + KEY_MAX + 2];
  if ((size_t)snprintf(full, sizeof full, "%s%s%s", loc->prefix, *loc->prefix ? "/" : "", key) >
      KEY_MAX)
    return SL_ELIMIT;

  char url[SL_S3_URL_MAX];
  size_t n = 0;
  const char *host = strstr(loc->endpoint, "://");
  if (!host) return -EINVAL;
  host += 3;
  int r;
  if (loc->path_style)
    r = sl_s3_cat(url, sizeof url, &n, "%s/%s", loc->endpoint, loc->bucket);
  else
    r = sl_s3_cat(url, sizeof url, &n, "%.*s%s.%s", (int)(host - loc->endpoint), loc->endpoint,
            loc->bucket, host);
  if (r < 0) return r;
  if (req->op == SL_S3_LIST) {
    if (!loc->path_style) r = sl_s3_cat(url, sizeof url, &n, "/");
    if (r >= 0) r = sl_s3_cat(url, sizeof url, &n, "?list-type=2&prefix=");
    if (r >= 0) r = cat_enc(url, sizeof url, &n, *key ? full : loc->prefix, false);
    if (r >= 0 && !*key && *loc->prefix) r = sl_s3_cat(url, sizeof url, &n, "%%2F");
    if (r >= 0 && req->continuation) {
      r = sl_s3_cat(url, sizeof url, &n, "&continuation-token=");
      if (r >= 0) r = cat_enc(url, sizeof url, &n, req->continuation, false);
    }
    if (r >= 0 && req->max_keys) r = sl_s3_cat(url, sizeof url, &n, "&max-keys=%d", req->max_keys);
  } else {
    r = sl_s3_cat(url, sizeof url, &n, "/");
    if (r >= 0) r = cat_enc(url, sizeof url, &n, full, true);
    if (r >= 0 && req->op == SL_S3_MPU_CREATE) r = sl_s3_cat(url, sizeof url, &n, "?uploads=");
    if (r >= 0 && req->op == SL_S3_MPU_PART) r = sl_s3_cat(url, sizeof url, &n, "?partNumber=%d&uploadId=", req->part);
    if (r >= 0 && (req->op == SL_S3_MPU_COMPLETE || req->op == SL_S3_MPU_ABORT))
      r = sl_s3_cat(url, sizeof url, &n, "?uploadId=");
    if (r >= 0 && mpu) r = cat_enc(url, sizeof url, &n, req->upload_id, false);
  }
  if (r < 0) return r;

  struct sl_sigv4_header meta = {"x-amz-meta-sha256", req->sha256};
  bool with_meta = req->sha256 && (req->op == SL_S3_PUT || req->op == SL_S3_MPU_CREATE);
  struct sl_sigv4_req sr = {
    .method = method, .url = url, .headers = with_meta ? &meta : NULL, .n_headers = with_meta,
    .region = loc->region, .service = "s3", .time_unix = now_unix, .s3 = true,
    .payload_sha256 = SL_SIGV4_UNSIGNED_PAYLOAD,
  };
  return sl_sigv4_presign(&sr, creds, expires_s, buf, size);
}

/* ---- a signer with fixed credentials ---- */

struct creds_signer {
  struct sl_s3_signer s; /* first: the signer's address is the struct's */
  struct sl_s3_location loc;
  struct sl_aws_creds creds;
  int64_t expires_s;
};

static int creds_presign(void *ctx, const struct sl_s3_presign_req *reqs, size_t n, char **ret_urls,
                         char *err, size_t err_size) {
  struct creds_signer *cs = ctx;
  char *buf = malloc(SL_S3_URL_MAX);
  if (!buf) return -ENOMEM;
  int64_t now = (int64_t)time(NULL);
  size_t i = 0;
  int r = 0;
  for (; i < n; i++) {
    if ((r = sl_s3_presign(&cs->loc, &cs->creds, now, cs->expires_s, &reqs[i], buf, SL_S3_URL_MAX)) < 0) {
      sl_err_say(err, err_size, r, "cannot presign S3 %s of %s: %s", sl_s3_op_name(reqs[i].op),
                 reqs[i].key ? reqs[i].key : "", sl_strerror(r));
      break;
    }
    if (!(ret_urls[i] = strdup(buf))) {
      r = sl_err_say(err, err_size, -ENOMEM, "out of memory presigning S3 requests");
      break;
    }
  }
  free(buf);
  if (r < 0)
    while (i > 0) free(ret_urls[--i]);
  return r;
}

struct sl_s3_signer *sl_s3_creds_signer_new(const struct sl_s3_location *loc,
                                            const struct sl_aws_creds *creds, int64_t expires_s) {
  struct creds_signer *cs = calloc(1, sizeof *cs);
  if (!cs) return NULL;
  cs->loc = *loc;
  cs->creds = *creds;
  cs->expires_s = expires_s > 0 ? expires_s : 3600;
  cs->s.presign = creds_presign;
  cs->s.ctx = cs;
  return &cs->s;
}

struct sl_s3_signer *sl_s3_creds_signer_free(struct sl_s3_signer *s) {
  if (s) {
    struct creds_signer *cs = s->ctx;
    explicit_bzero(&cs->creds, sizeof cs->creds);
    free(cs);
  }
  return NULL;
}

