/* What sl_s3.c (presigning), sl_s3_client.c (transfers) and sl_s3_get.c
 * (downloads) share. */
#ifndef SL_S3_INT_H
#define SL_S3_INT_H

#include "sl_s3.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* s is 64 lowercase hex digits (a SHA-256). */
bool sl_s3_hex64(const char *s);
/* Appends printf output to buf at *len; SL_ELIMIT when it does not fit. */
int sl_s3_cat(char *buf, size_t size, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- sl_s3_client.c, for sl_s3_get.c ---- */

struct sl_s3_client {
  struct sl_s3_signer signer;
  struct sl_s3_opts o;
  pthread_mutex_t sign_lock;
  int64_t fail_after;       /* test hook; -1: off */
  unsigned tmp_counter;
};

/* The URL of one presigned request (owned), or the reason in err. */
int sl_s3_sign1(struct sl_s3_client *c, const struct sl_s3_presign_req *req, char **ret_url,
                char *err, size_t err_size);
/* A request with the client's retry policy and a timeout that grows with data_bytes. */
void sl_s3_req_init(const struct sl_s3_client *c, struct sl_http_req *r, const char *method,
                    const char *url, uint64_t data_bytes);
/* The sentence and code for a request that got no answer (r) ... */
int sl_s3_transport_error(int r, const char *what, const char *key, char *err, size_t err_size);
/* ... and for an answer that is not the one hoped for. */
int sl_s3_answer_error(const struct sl_http_resp *resp, const char *what, const char *key,
                       char *err, size_t err_size);
/* The SHA-256 of bytes [off, off+len) of fd, as 64 hex digits. */
int sl_s3_sha256_range(int fd, uint64_t off, uint64_t len, char hex[65]);

#endif
