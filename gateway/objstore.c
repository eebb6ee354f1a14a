/* The gateway's side of an S3 checkpoint store: the credential chain and
 * the presigner (objstore.h). */
#include "objstore.h"

#include "sl_awscreds.h"
#include "sl_err.h"
#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T "gateway.store"

struct gw_objstore {
  struct sl_s3_location loc;
  struct sl_aws_chain *chain;
  uint64_t part_bytes;           /* 0: the client's default */
  atomic_bool stopping;          /* gw_objstore_stop */
};

int gw_objstore_open(const char *url, const char *region, struct gw_objstore **ret, char *err,
                     size_t err_size) {
  *ret = NULL;
  if (!url || strncmp(url, "s3://", 5))
    return 0;
  struct gw_objstore *o = calloc(1, sizeof *o);
  if (!o)
    return -ENOMEM;
  char reg[SL_AWS_REGION_MAX];
  int r = sl_aws_region(region, reg, err, err_size);
  if (r < 0)
    goto fail;
  if ((r = sl_s3_location_parse(url, reg, NULL, &o->loc, err, err_size)) < 0)
    goto fail;
  if ((r = sl_aws_chain_new(&o->chain, err, err_size)) < 0)
    goto fail;
  sl_info(T, "checkpoints in %s (region %s, %s)", url, reg, o->loc.endpoint);
  *ret = o;
  return 0;
fail:
  free(o);
  return r;
}

struct gw_objstore *gw_objstore_free(struct gw_objstore *o) {
  if (o) {
    sl_aws_chain_free(o->chain);
    free(o);
  }
  return NULL;
}

struct sl_s3_opts gw_objstore_opts(struct gw_objstore *o) {
  return (struct sl_s3_opts){.cancel = &o->stopping, .part_bytes = o->part_bytes};
}

void gw_objstore_set_part_bytes(struct gw_objstore *o, uint64_t bytes) {
  if (o)
    o->part_bytes = bytes;
}

void gw_objstore_stop(struct gw_objstore *o) {
  if (o)
    atomic_store(&o->stopping, true);
}

/* Signs each request with the current credentials; on failure nothing is owned. */
static int presign(struct gw_objstore *o, const struct sl_s3_presign_req *reqs, size_t n,
                   int64_t expires_s, char **urls, char *err, size_t err_size) {
  struct sl_aws_creds c;
  int r = sl_aws_creds_get(o->chain, &c, err, err_size);
  if (r < 0)
    return r;
  /* a URL cannot outlive the credentials that signed it */
  int64_t now = sl_time_real_us() / 1000000;
  if (c.expires_unix > 0 && c.expires_unix - now < expires_s)
    expires_s = c.expires_unix - now > 60 ? c.expires_unix - now : 60;
  size_t i = 0;
  for (; i < n; i++) {
    char *buf = malloc(SL_S3_URL_MAX);
    if (!buf) {
      r = -ENOMEM;
      break;
    }
    if ((r = sl_s3_presign(&o->loc, &c, now, expires_s, &reqs[i], buf, SL_S3_URL_MAX)) < 0) {
      free(buf);
      snprintf(err, err_size, "cannot sign %s of \"%s\": %s", sl_s3_op_name(reqs[i].op),
               reqs[i].key ? reqs[i].key : "", sl_strerror(r));
      break;
    }
    urls[i] = buf;
  }
  sodium_memzero(&c, sizeof c);
  if (r < 0) {
    while (i > 0)
      free(urls[--i]);
    return r;
  }
  return 0;
}

static int self_presign(void *ctx, const struct sl_s3_presign_req *reqs, size_t n, char **ret_urls,
                        char *err, size_t err_size) {
  return presign(ctx, reqs, n, GW_PRESIGN_EXPIRES_S, ret_urls, err, err_size);
}

struct sl_s3_signer gw_objstore_signer(struct gw_objstore *o) {
  return (struct sl_s3_signer){.presign = self_presign, .ctx = o};
}

/* A key a worker may name: relative, no "..", no empty segment. */
static bool key_ok(const char *key) {
  if (!key || !*key || *key == '/' || strlen(key) > 512)
    return false;
  for (const char *s = key; *s; s++)
    if ((unsigned char)*s < 0x20 || *s == 0x7f)
      return false;
  return !strstr(key, "//") && strcmp(key, "..") && strncmp(key, "../", 3) && !strstr(key, "/../") &&
         !(strlen(key) >= 3 && !strcmp(key + strlen(key) - 3, "/.."));
}

int gw_objstore_presign_for(struct gw_objstore *o, const struct sl_s3_presign_req *reqs, size_t n,
                            const char *const *prefixes, size_t n_prefixes, char **ret_urls,
                            char *err, size_t err_size) {
  if (n > GW_PRESIGN_MAX) {
    snprintf(err, err_size, "at most %d URLs per request", GW_PRESIGN_MAX);
    return SL_ELIMIT;
  }
  for (size_t i = 0; i < n; i++) {
    const struct sl_s3_presign_req *q = &reqs[i];
    if ((unsigned)q->op >= SL_S3_OPS_ || !key_ok(q->key)) {
      snprintf(err, err_size, "request %zu: not a valid operation and key", i + 1);
      return -EINVAL;
    }
    bool mpu = q->op == SL_S3_MPU_PART || q->op == SL_S3_MPU_COMPLETE || q->op == SL_S3_MPU_ABORT;
    if (mpu && (!q->upload_id || !*q->upload_id || strlen(q->upload_id) > 1024)) {
      snprintf(err, err_size, "request %zu: %s needs an upload id", i + 1, sl_s3_op_name(q->op));
      return -EINVAL;
    }
    if (q->op == SL_S3_MPU_PART && (q->part < 1 || q->part > 10000)) {
      snprintf(err, err_size, "request %zu: part numbers run from 1 to 10000", i + 1);
      return -EINVAL;
    }
    bool allowed = false;
    for (size_t p = 0; p < n_prefixes && !allowed; p++)
      allowed = !strncmp(q->key, prefixes[p], strlen(prefixes[p]));
    if (!allowed) {
      snprintf(err, err_size, "\"%.80s\" is not under a job this instance runs", q->key);
      return SL_EAUTH;
    }
  }
  return presign(o, reqs, n, GW_PRESIGN_EXPIRES_S, ret_urls, err, err_size);
}

int gw_objstore_presign_get(struct gw_objstore *o, const char *key, long expires_s, char *url,
                            size_t url_size, char *err, size_t err_size) {
  struct sl_s3_presign_req q = {.op = SL_S3_GET, .key = key};
  char *u = NULL;
  int r = presign(o, &q, 1, expires_s, &u, err, err_size);
  if (r < 0)
    return r;
  if (strlen(u) >= url_size) {
    free(u);
    snprintf(err, err_size, "the presigned URL is longer than %zu bytes", url_size);
    return SL_ELIMIT;
  }
  memcpy(url, u, strlen(u) + 1);
  free(u);
  return 0;
}
