/* What sl_s3.c (presigning), sl_s3_client.c (transfers) and sl_s3_get.c
 * (downloads) share. */
#ifndef SL_S3_INT_H
#define SL_S3_INT_H

#include "sl_s3.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

/* ---- sl_s3_xml.c: the store's XML replies ---- */

struct sl_strv;

/* Once per process (any thread) before the functions below. */
void sl_s3_xml_init(void);
/* An error reply's Code and Message ("" when the body has none). */
void sl_s3_xml_error(const char *body, size_t len, char code[64], char msg[200]);
/* Whether the body is XML whose root element is named root. */
bool sl_s3_xml_is(const char *body, size_t len, const char *root);
/* The UploadId of an InitiateMultipartUploadResult into id: its length;
 * SL_EPARSE when there is none, SL_ELIMIT when it does not fit. */
int sl_s3_xml_upload_id(const char *body, size_t len, char *id, size_t size);
/* One page of a ListObjectsV2 into l: each key relative to the store's
 * prefix (the page's Prefix is the one asked for, `prefix`, with the
 * store's own before it, which is cut from every key); the next page's
 * token into next ("" on the last page). SL_EPARSE with a sentence when
 * the page is not one, SL_ELIMIT past SL_S3_LIST_MAX keys. */
int sl_s3_xml_list_page(const char *body, size_t len, const char *prefix, struct sl_strv *l,
                        char *next, size_t next_size, char *err, size_t err_size);

#endif
