/* The S3 client: files up and down over presigned URLs.
 *
 * The client knows no credentials: every request's URL comes from the
 * caller's signer, so it serves the gateway (its own keys) and a worker (URLs
 * from its gateway) alike. Invariants: an object is written whole or not at
 * all (one PUT, or a multipart upload completed only when every part is in
 * and aborted otherwise); a download reaches its destination only after its
 * bytes matched the object's x-amz-meta-sha256; no URL reaches an error
 * sentence or a log line (its query holds the signature). XML replies are
 * read in sl_s3_xml.c and nowhere else. Design notes: docs/internals/s3.md. */
#include "sl_s3.h"
#include "sl_s3_int.h"
#include "sl_strv.h"

#include "sl_err.h"
#include "sl_ident.h"
#include "sl_log.h"
#include "sl_path.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TOPIC "s3"
#define SIGN_BATCH 32             /* part URLs asked of the signer at once */
#define LIST_BODY_MAX (8u << 20)  /* one page of 1000 keys of 1 KiB, with room */
#define HASH_CHUNK (1u << 20)
#define ABORT_WHEN_CANCELLED_MS 5000 /* the one try of an abort after a cancel */




/* ---- hashing (libcrypto: SHA-256 with the CPU's instructions) ---- */

static void hexify(const unsigned char *d, size_t n, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[d[i] >> 4];
    out[2 * i + 1] = digits[d[i] & 15];
  }
  out[2 * n] = 0;
}

/* Digests len bytes of fd from off with md (EVP_sha256, EVP_md5) into out.
 * -EIO when the file ends before the range does. */
static int digest_range(int fd, uint64_t off, uint64_t len, const EVP_MD *md, unsigned char *out,
                        unsigned *out_len) {
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  char *buf = malloc(HASH_CHUNK);
  int r = 0;
  if (!ctx || !buf || !EVP_DigestInit_ex(ctx, md, NULL)) {
    r = -ENOMEM;
    goto done;
  }
  for (uint64_t done = 0; done < len;) {
    size_t want = len - done < HASH_CHUNK ? (size_t)(len - done) : HASH_CHUNK;
    ssize_t k = pread(fd, buf, want, (off_t)(off + done));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      r = k < 0 ? -errno : -EIO;
      goto done;
    }
    EVP_DigestUpdate(ctx, buf, (size_t)k);
    done += (uint64_t)k;
  }
  if (!EVP_DigestFinal_ex(ctx, out, out_len)) r = -ENOMEM;
done:
  free(buf);
  EVP_MD_CTX_free(ctx);
  return r;
}

int sl_s3_sha256_range(int fd, uint64_t off, uint64_t len, char hex[65]) {
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned dl = 0;
  int r = digest_range(fd, off, len, EVP_sha256(), d, &dl);
  if (r == 0) hexify(d, 32, hex);
  return r;
}

/* The range's MD5 as hex (ETag) and base64 (Content-MD5). */
static int md5_range(int fd, uint64_t off, uint64_t len, char hex[33], char b64[25]) {
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned dl = 0;
  int r = digest_range(fd, off, len, EVP_md5(), d, &dl);
  if (r == 0) {
    hexify(d, 16, hex);
    EVP_EncodeBlock((unsigned char *)b64, d, 16);
  }
  return r;
}

/* ---- the client ---- */

int sl_s3_client_new(const struct sl_s3_signer *signer, const struct sl_s3_opts *opts,
                     struct sl_s3_client **ret) {
  struct sl_s3_opts o = opts ? *opts : (struct sl_s3_opts){0};
  if (!signer || !signer->presign) return -EINVAL;
  if (!o.part_bytes) o.part_bytes = SL_S3_PART_DEFAULT_BYTES;
  if (!o.threads) o.threads = SL_S3_THREADS_DEFAULT;
  if (!o.retry.max_tries) o.retry = (struct sl_http_retry){6, 200, 10000};
  if (!o.timeout_ms) o.timeout_ms = 30000;
  if (o.part_bytes < SL_S3_PART_MIN_BYTES || o.threads < 1 || o.threads > SL_S3_THREADS_MAX ||
      o.list_page_keys < 0 || o.list_page_keys > 1000 || o.timeout_ms < 0)
    return -EINVAL;
  int r = sl_http_global_init();
  if (r < 0) return r;
  sl_s3_xml_init();
  struct sl_s3_client *c = calloc(1, sizeof *c);
  if (!c) return -ENOMEM;
  c->signer = *signer;
  c->o = o;
  c->fail_after = -1;
  pthread_mutex_init(&c->sign_lock, NULL);
  *ret = c;
  return 0;
}

struct sl_s3_client *sl_s3_client_free(struct sl_s3_client *c) {
  if (c) {
    pthread_mutex_destroy(&c->sign_lock);
    free(c);
  }
  return NULL;
}

void sl_s3_fail_next_put(struct sl_s3_client *c, int64_t bytes) { c->fail_after = bytes; }

static int sign(struct sl_s3_client *c, const struct sl_s3_presign_req *reqs, size_t n,
                char **ret_urls, char *err, size_t err_size) {
  char why[256] = "";
  pthread_mutex_lock(&c->sign_lock);
  int r = c->signer.presign(c->signer.ctx, reqs, n, ret_urls, why, sizeof why);
  pthread_mutex_unlock(&c->sign_lock);
  if (r < 0)
    return sl_err_say(err, err_size, r, "cannot get a signed S3 %s request for %s: %s",
                      sl_s3_op_name(reqs[0].op), reqs[0].key ? reqs[0].key : "",
                      *why ? why : sl_strerror(r));
  return 0;
}

int sl_s3_sign1(struct sl_s3_client *c, const struct sl_s3_presign_req *req, char **ret_url,
                 char *err, size_t err_size) {
  return sign(c, req, 1, ret_url, err, err_size);
}

/* A request with the client's retry policy; data_bytes lengthens the
 * timeout by 1 s per MiB, so a large part is not cut off on a slow link. */
void sl_s3_req_init(const struct sl_s3_client *c, struct sl_http_req *r, const char *method,
                     const char *url, uint64_t data_bytes) {
  memset(r, 0, sizeof *r);
  r->method = method;
  r->url = url;
  r->retry = c->o.retry;
  uint64_t ms = (uint64_t)c->o.timeout_ms + (data_bytes >> 20) * 1000;
  r->timeout_ms = ms > INT_MAX ? INT_MAX : (int)ms;
  r->connect_timeout_ms = c->o.timeout_ms;
  r->use_env_proxy = true;
  r->cancel = c->o.cancel;
}

/* The sentence and code for a request that got no answer. */
int sl_s3_transport_error(int r, const char *what, const char *key, char *err, size_t err_size) {
  return sl_err_say(err, err_size, r, "S3 %s of %s failed: %s", what, key, sl_strerror(r));
}

/* The sentence and code for an answer that is not the one hoped for. */
int sl_s3_answer_error(const struct sl_http_resp *resp, const char *what, const char *key,
                        char *err, size_t err_size) {
  char code[64], msg[200];
  sl_s3_xml_error(resp->body, resp->body_len, code, msg);
  int r;
  if (resp->status == 404) r = -ENOENT;
  else if (resp->status == 401 || resp->status == 403) r = SL_EAUTH;
  else if (resp->status == 412) r = -ESTALE;
  else if (!strcmp(code, "BadDigest") || !strcmp(code, "InvalidDigest")) r = SL_ECHECKSUM;
  else if (resp->status == 429 || resp->status >= 500) r = -EAGAIN;
  else r = -EIO;
  return sl_err_say(err, err_size, r, "S3 %s of %s: HTTP %ld%s%s%s%s (%d %s)", what, key,
                    resp->status, *code ? " " : "", code, *msg ? ": " : "", msg, resp->tries,
                    resp->tries == 1 ? "try" : "tries");
}

/* "abc" with or without its quotes equals hex, in any case. */
static bool etag_is(const char *etag, const char *hex) {
  if (!etag) return false;
  size_t n = strlen(etag);
  if (n >= 2 && etag[0] == '"' && etag[n - 1] == '"') {
    etag++;
    n -= 2;
  }
  return n == strlen(hex) && !strncasecmp(etag, hex, n);
}

int sl_s3_head(struct sl_s3_client *c, const char *key, struct sl_s3_object *ret, char *err,
               size_t err_size) {
  char *url = NULL;
  struct sl_s3_presign_req pr = {.op = SL_S3_HEAD, .key = key};
  int r = sl_s3_sign1(c, &pr, &url, err, err_size);
  if (r < 0) return r;
  struct sl_http_req req;
  sl_s3_req_init(c, &req, "HEAD", url, 0);
  req.resp_headers[0] = "Content-Length";
  req.resp_headers[1] = "ETag";
  req.resp_headers[2] = "x-amz-meta-sha256";
  struct sl_http_resp resp = {0};
  r = sl_http_do(&req, &resp);
  free(url);
  if (r < 0) return sl_s3_transport_error(r, "head", key, err, err_size);
  if (resp.status == 404) {
    r = sl_err_say(err, err_size, -ENOENT, "S3 has no object %s", key);
  } else if (resp.status != 200) {
    r = sl_s3_answer_error(&resp, "head", key, err, err_size);
  } else {
    struct sl_s3_object o = {0};
    const char *len = resp.header_values[0], *sha = resp.header_values[2];
    char *end = NULL;
    errno = 0;
    unsigned long long v = len ? strtoull(len, &end, 10) : 0;
    if (!len || errno || end == len || *end || len[0] == '-')
      r = sl_err_say(err, err_size, SL_EPARSE, "S3 head of %s: no size in the answer", key);
    o.bytes = v;
    snprintf(o.etag, sizeof o.etag, "%s", resp.header_values[1] ? resp.header_values[1] : "");
    if (sha && sl_sha256_hex_ok(sha)) memcpy(o.sha256, sha, 65);
    else if (sha && *sha)
      r = sl_err_say(err, err_size, SL_EPARSE, "S3 object %s has a malformed x-amz-meta-sha256",
                     key);
    if (r == 0) *ret = o;
  }
  sl_http_resp_done(&resp);
  return r;
}

int sl_s3_delete(struct sl_s3_client *c, const char *key, char *err, size_t err_size) {
  char *url = NULL;
  struct sl_s3_presign_req pr = {.op = SL_S3_DELETE, .key = key};
  int r = sl_s3_sign1(c, &pr, &url, err, err_size);
  if (r < 0) return r;
  struct sl_http_req req;
  sl_s3_req_init(c, &req, "DELETE", url, 0);
  struct sl_http_resp resp = {0};
  r = sl_http_do(&req, &resp);
  free(url);
  if (r < 0) return sl_s3_transport_error(r, "delete", key, err, err_size);
  if (resp.status != 204 && resp.status != 200) r = sl_s3_answer_error(&resp, "delete", key, err, err_size);
  sl_http_resp_done(&resp);
  return r;
}

/* ---- list ---- */

char **sl_s3_keys_free(char **keys) {
  return sl_strv_free(keys);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int sl_s3_list(struct sl_s3_client *c, const char *prefix, char ***ret_keys, size_t *ret_n,
               char *err, size_t err_size) {
  struct sl_strv l = {0};
  char *token = calloc(2, 4096);
  if (!token) return -ENOMEM;
  char *next = token + 4096;
  if (!prefix) prefix = "";
  int r;
  for (int page = 0;; page++) {
    char *url = NULL;
    struct sl_s3_presign_req pr = {.op = SL_S3_LIST, .key = prefix,
                                   .continuation = page ? token : NULL,
                                   .max_keys = c->o.list_page_keys};
    if ((r = sl_s3_sign1(c, &pr, &url, err, err_size)) < 0) goto fail;
    struct sl_http_req req;
    sl_s3_req_init(c, &req, "GET", url, 0);
    req.body_max_bytes = LIST_BODY_MAX;
    struct sl_http_resp resp = {0};
    r = sl_http_do(&req, &resp);
    free(url);
    if (r < 0) {
      sl_s3_transport_error(r, "list", prefix, err, err_size);
      goto fail;
    }
    if (resp.status != 200) r = sl_s3_answer_error(&resp, "list", prefix, err, err_size);
    else r = sl_s3_xml_list_page(resp.body, resp.body_len, prefix, &l, next, 4096, err, err_size);
    sl_http_resp_done(&resp);
    if (r < 0) goto fail;
    if (!*next) break;
    if (!strcmp(next, token)) {
      r = sl_err_say(err, err_size, SL_EPARSE, "S3 list of %s: the service repeated a page",
                     prefix);
      goto fail;
    }
    memcpy(token, next, 4096);
  }
  size_t n = l.n;
  if (n) qsort(l.v, n, sizeof *l.v, cmp_str);
  free(token);
  if (!(*ret_keys = sl_strv_take(&l))) return -ENOMEM;
  if (ret_n) *ret_n = n;
  return 0;
fail:
  free(token);
  sl_strv_free(l.v);
  return r;
}

/* ---- put ---- */

/* The file the body is read from: src itself, or under the test hook a
 * copy of its first fail_after bytes, so the transfer ends short as a
 * cut-off one would. */
static int body_source(struct sl_s3_client *c, int src_fd, int *ret_fd) {
  int64_t n = c->fail_after;
  c->fail_after = -1;
  if (n < 0) {
    *ret_fd = src_fd;
    return 0;
  }
  int fd = memfd_create("sl-s3-short", MFD_CLOEXEC);
  if (fd < 0) return -errno;
  char buf[65536];
  for (int64_t done = 0; done < n;) {
    ssize_t k = pread(src_fd, buf, (size_t)(n - done < (int64_t)sizeof buf ? n - done : (int64_t)sizeof buf),
                      (off_t)done);
    if (k <= 0 || write(fd, buf, (size_t)k) != k) break;
    done += k;
  }
  *ret_fd = fd;
  return 0;
}

/* Sends one body (a whole object or a part) and checks its ETag against
 * the MD5 S3 was told; the MD5 is of fd's range, the bytes sent body_fd's
 * (the same file but under the test hook). */
static int put_body(struct sl_s3_client *c, const char *url, int fd, int body_fd, uint64_t off, uint64_t len,
                    const char *sha256, const char *what, const char *key, char *ret_etag,
                    size_t etag_size, char *err, size_t err_size) {
  char md5_hex[33], md5_b64[25];
  int r = md5_range(fd, off, len, md5_hex, md5_b64);
  if (r < 0)
    return sl_err_say(err, err_size, r, "S3 %s of %s: cannot read the file: %s", what, key,
                      sl_strerror(r));
  char h_md5[64], h_sha[96];
  snprintf(h_md5, sizeof h_md5, "Content-MD5: %s", md5_b64);
  struct sl_http_fd_range body = {body_fd, off, len};
  struct sl_http_req req;
  sl_s3_req_init(c, &req, "PUT", url, len);
  req.headers[0] = h_md5;
  if (sha256) {
    snprintf(h_sha, sizeof h_sha, "x-amz-meta-sha256: %s", sha256);
    req.headers[1] = h_sha;
  }
  req.body_fd = &body;
  req.resp_headers[0] = "ETag";
  struct sl_http_resp resp = {0};
  if ((r = sl_http_do(&req, &resp)) < 0) return sl_s3_transport_error(r, what, key, err, err_size);
  if (resp.status != 200) {
    r = sl_s3_answer_error(&resp, what, key, err, err_size);
  } else if (!etag_is(resp.header_values[0], md5_hex)) {
    r = sl_err_say(err, err_size, SL_ECHECKSUM,
                   "S3 %s of %s: the service's ETag is not the MD5 it was sent", what, key);
  } else if (ret_etag) {
    snprintf(ret_etag, etag_size, "%s", resp.header_values[0]);
  }
  sl_http_resp_done(&resp);
  return r;
}

struct mpu {
  struct sl_s3_client *c;
  const char *key;
  char *upload_id;
  int fd, body_fd;
  uint64_t size, part_bytes;
  int n_parts;
  char (*etags)[80];
  char **urls;              /* part i's URL until a thread takes it */
  pthread_mutex_t lock;     /* the fields below, and the signer through c->sign_lock */
  int next;                 /* the next part to send (0-based) */
  int failed;               /* the first error; no part starts after it */
  char err[512];
};

/* Part i's URL, asking the signer for the next SIGN_BATCH when it has none. */
static int part_url(struct mpu *m, int i, char **ret, char *err, size_t err_size) {
  if (!m->urls[i]) {
    int n = m->n_parts - i < SIGN_BATCH ? m->n_parts - i : SIGN_BATCH;
    struct sl_s3_presign_req pr[SIGN_BATCH];
    for (int k = 0; k < n; k++)
      pr[k] = (struct sl_s3_presign_req){.op = SL_S3_MPU_PART, .key = m->key,
                                         .upload_id = m->upload_id, .part = i + k + 1};
    int r = sign(m->c, pr, (size_t)n, m->urls + i, err, err_size);
    if (r < 0) return r;
  }
  *ret = m->urls[i];
  m->urls[i] = NULL;
  return 0;
}

static void *part_thread(void *arg) {
  struct mpu *m = arg;
  char err[512];
  for (;;) {
    pthread_mutex_lock(&m->lock);
    if (m->failed || m->next >= m->n_parts) {
      pthread_mutex_unlock(&m->lock);
      return NULL;
    }
    int i = m->next++;
    char *url = NULL;
    int r = part_url(m, i, &url, err, sizeof err);
    pthread_mutex_unlock(&m->lock);
    if (r >= 0) {
      uint64_t off = (uint64_t)i * m->part_bytes;
      uint64_t len = m->size - off < m->part_bytes ? m->size - off : m->part_bytes;
      char what[64];
      snprintf(what, sizeof what, "upload of part %d of %d", i + 1, m->n_parts);
      r = put_body(m->c, url, m->fd, m->body_fd, off, len, NULL, what, m->key, m->etags[i], sizeof m->etags[i],
                   err, sizeof err);
      free(url);
    }
    if (r < 0) {
      pthread_mutex_lock(&m->lock);
      if (!m->failed) {
        m->failed = r;
        snprintf(m->err, sizeof m->err, "%s", err);
      }
      pthread_mutex_unlock(&m->lock);
      return NULL;
    }
  }
}

/* A simple exchange: the op's URL, a method, an optional body; the answer's
 * body returned owned on a 2xx. */
static int exchange(struct sl_s3_client *c, const struct sl_s3_presign_req *pr, const char *method,
                    const char *body, size_t body_len, const char *what, char **ret_body,
                    size_t *ret_len, int *ret_tries, char *err, size_t err_size) {
  char *url = NULL;
  int r = sl_s3_sign1(c, pr, &url, err, err_size);
  if (r < 0) return r;
  char h_sha[96];
  struct sl_http_req req;
  sl_s3_req_init(c, &req, method, url, 0);
  if (pr->sha256) {
    snprintf(h_sha, sizeof h_sha, "x-amz-meta-sha256: %s", pr->sha256);
    req.headers[0] = h_sha;
  }
  req.body = body;
  req.body_len = body_len;
  if (pr->op == SL_S3_MPU_ABORT && req.cancel && atomic_load(req.cancel)) {
    /* the parts would stay billed: one short try even so */
    req.cancel = NULL;
    req.retry.max_tries = 1;
    req.timeout_ms = req.connect_timeout_ms = ABORT_WHEN_CANCELLED_MS;
  }
  struct sl_http_resp resp = {0};
  r = sl_http_do(&req, &resp);
  free(url);
  if (r < 0) return sl_s3_transport_error(r, what, pr->key, err, err_size);
  if (ret_tries) *ret_tries = resp.tries;
  if (resp.status < 200 || resp.status > 299) {
    r = sl_s3_answer_error(&resp, what, pr->key, err, err_size);
  } else if (ret_body) {
    *ret_body = resp.body;
    *ret_len = resp.body_len;
    resp.body = NULL;
  }
  sl_http_resp_done(&resp);
  return r;
}

static int mpu_abort(struct mpu *m, char *err, size_t err_size) {
  return sl_s3_abort_upload(m->c, m->key, m->upload_id, err, err_size);
}

int sl_s3_abort_upload(struct sl_s3_client *c, const char *key, const char *upload_id, char *err,
                       size_t err_size) {
  struct sl_s3_presign_req pr = {.op = SL_S3_MPU_ABORT, .key = key, .upload_id = upload_id};
  return exchange(c, &pr, "DELETE", NULL, 0, "abort of the upload", NULL, NULL, NULL, err, err_size);
}

/* CompleteMultipartUpload; its answer may be an error even with 200. A
 * retried completion whose first try went through finds no upload: the
 * object is then checked to be this one. */
static int mpu_complete(struct mpu *m, const char *sha256, char *err, size_t err_size) {
  size_t cap = 64 + (size_t)m->n_parts * 128, n = 0;
  char *xml = malloc(cap);
  if (!xml) return -ENOMEM;
  int r = sl_s3_cat(xml, cap, &n, "<CompleteMultipartUpload>");
  for (int i = 0; r >= 0 && i < m->n_parts; i++)
    r = sl_s3_cat(xml, cap, &n, "<Part><PartNumber>%d</PartNumber><ETag>%s</ETag></Part>", i + 1, m->etags[i]);
  if (r >= 0) r = sl_s3_cat(xml, cap, &n, "</CompleteMultipartUpload>");
  if (r < 0) {
    free(xml);
    return sl_err_say(err, err_size, r, "S3 completion of %s: too many parts", m->key);
  }
  struct sl_s3_presign_req pr = {.op = SL_S3_MPU_COMPLETE, .key = m->key, .upload_id = m->upload_id};
  char *body = NULL;
  size_t len = 0;
  int tries = 0;
  r = exchange(m->c, &pr, "POST", xml, n, "completion of the upload", &body, &len, &tries, err,
               err_size);
  free(xml);
  if (r == -ENOENT && tries > 1) {
    struct sl_s3_object o;
    char why[256];
    if (sl_s3_head(m->c, m->key, &o, why, sizeof why) == 0 && o.bytes == m->size &&
        !strcmp(o.sha256, sha256))
      return 0;
  }
  if (r < 0) return r;
  if (!sl_s3_xml_is(body, len, "CompleteMultipartUploadResult")) {
    char code[64], msg[200];
    sl_s3_xml_error(body, len, code, msg);
    r = sl_err_say(err, err_size,
                   *code && strcmp(code, "InternalError") && strcmp(code, "SlowDown") ? -EIO
                                                                                      : -EAGAIN,
                   "S3 completion of %s failed: %s%s%s", m->key,
                   *code ? code : "an answer that is not XML", *msg ? ": " : "", msg);
  }
  free(body);
  return r;
}

static int put_multipart(struct sl_s3_client *c, const char *key, int fd, int body_fd,
                         uint64_t size, const char *sha256, char *err, size_t err_size) {
  struct mpu m = {.c = c, .key = key, .fd = fd, .body_fd = body_fd, .size = size,
                  .part_bytes = c->o.part_bytes};
  /* at most 10000 parts: larger ones, in whole MiB, when the file needs it */
  if ((size + m.part_bytes - 1) / m.part_bytes > SL_S3_PARTS_MAX)
    m.part_bytes = ((size + SL_S3_PARTS_MAX - 1) / SL_S3_PARTS_MAX + (1u << 20) - 1) & ~(uint64_t)((1u << 20) - 1);
  m.n_parts = (int)((size + m.part_bytes - 1) / m.part_bytes);
  struct sl_s3_presign_req pr = {.op = SL_S3_MPU_CREATE, .key = key, .sha256 = sha256};
  char *body = NULL;
  size_t len = 0;
  int r = exchange(c, &pr, "POST", NULL, 0, "start of an upload", &body, &len, NULL, err, err_size);
  if (r < 0) return r;
  char id[1024];
  if (sl_s3_xml_upload_id(body, len, id, sizeof id) < 0)
    r = sl_err_say(err, err_size, SL_EPARSE,
                   "S3 start of an upload of %s: no UploadId in the answer", key);
  free(body);
  if (r < 0) return r;
  m.upload_id = id;
  if (c->o.mpu_event && (r = c->o.mpu_event(c->o.mpu_event_ud, key, id, true)) < 0) {
    char why[256];
    sl_err_say(err, err_size, r, "the upload of %s was begun but cannot be recorded: %s", key,
               sl_strerror(r));
    if (mpu_abort(&m, why, sizeof why) == 0) c->o.mpu_event(c->o.mpu_event_ud, key, id, false);
    return r;
  }
  m.etags = calloc((size_t)m.n_parts, sizeof *m.etags);
  m.urls = calloc((size_t)m.n_parts, sizeof *m.urls);
  pthread_mutex_init(&m.lock, NULL);
  int n_threads = c->o.threads < m.n_parts ? c->o.threads : m.n_parts;
  pthread_t th[SL_S3_THREADS_MAX];
  int started = 0;
  if (!m.etags || !m.urls) {
    m.failed = -ENOMEM;
    snprintf(m.err, sizeof m.err, "out of memory uploading %s", key);
  }
  for (; !m.failed && started < n_threads; started++)
    if ((r = pthread_create(&th[started], NULL, part_thread, &m)) != 0) {
      pthread_mutex_lock(&m.lock);
      if (!m.failed) {
        m.failed = -r;
        snprintf(m.err, sizeof m.err, "cannot start a thread to upload %s", key);
      }
      pthread_mutex_unlock(&m.lock);
      break;
    }
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  r = m.failed;
  if (r < 0)
    sl_err_say(err, err_size, r, "%s", m.err);
  else r = mpu_complete(&m, sha256, err, err_size);
  bool closed = r == 0;
  if (r < 0) {
    char why[256];
    if (mpu_abort(&m, why, sizeof why) < 0) {
      size_t el = err ? strlen(err) : 0;
      if (err && el < err_size) snprintf(err + el, err_size - el, "; its abort failed too: %s", why);
    } else {
      closed = true;
    }
  }
  if (closed && c->o.mpu_event) c->o.mpu_event(c->o.mpu_event_ud, key, id, false);
  for (int i = 0; m.urls && i < m.n_parts; i++) free(m.urls[i]);
  free(m.urls);
  free(m.etags);
  pthread_mutex_destroy(&m.lock);
  return r;
}

int sl_s3_put_file(struct sl_s3_client *c, const char *key, const char *src, uint64_t *ret_bytes,
                   char *err, size_t err_size) {
  int fd = open(src, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return sl_err_say(err, err_size, -errno, "cannot open %s to upload it: %s", src,
                      strerror(errno));
  struct stat st;
  int r = fstat(fd, &st) < 0 ? -errno : 0;
  if (r == 0 && !S_ISREG(st.st_mode)) r = -EINVAL;
  if (r < 0) {
    close(fd);
    return sl_err_say(err, err_size, r, "cannot upload %s: not a readable file", src);
  }
  uint64_t size = (uint64_t)st.st_size;
  char sha[65];
  if ((r = sl_s3_sha256_range(fd, 0, size, sha)) < 0) {
    close(fd);
    return sl_err_say(err, err_size, r, "cannot read %s to upload it: %s", src, sl_strerror(r));
  }
  int body_fd = fd;
  if ((r = body_source(c, fd, &body_fd)) < 0) {
    close(fd);
    return sl_err_say(err, err_size, r, "cannot upload %s: %s", src, sl_strerror(r));
  }
  if (size <= c->o.part_bytes) {
    char *url = NULL;
    struct sl_s3_presign_req pr = {.op = SL_S3_PUT, .key = key, .sha256 = sha};
    if ((r = sl_s3_sign1(c, &pr, &url, err, err_size)) == 0)
      r = put_body(c, url, fd, body_fd, 0, size, sha, "upload", key, NULL, 0, err, err_size);
    free(url);
  } else {
    r = put_multipart(c, key, fd, body_fd, size, sha, err, err_size);
  }
  if (body_fd != fd) close(body_fd);
  close(fd);
  if (r == 0 && ret_bytes) *ret_bytes = size;
  if (r == 0) sl_debug(TOPIC, "put %s: %llu bytes", key, (unsigned long long)size);
  return r;
}
