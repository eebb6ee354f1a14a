/* AWS Signature Version 4: the Authorization header form and the presigned
 * URL (query-string) form, for any AWS service (EC2's Query API, S3).
 *
 * The request is described as it will be sent: the URL's path and query are
 * already percent-encoded the way they go on the wire. Canonicalisation
 * follows the AWS documentation: header names lowercased, values trimmed and
 * inner runs of spaces folded, headers sorted and duplicates joined with ",";
 * query parameters decoded, re-encoded with the unreserved set and sorted by
 * name then value; the path normalised and encoded once more for every
 * service but S3 (which signs its path as sent).
 *
 * Nothing here logs; secrets leave only as the signature they produce. */
#ifndef SL_SIGV4_H
#define SL_SIGV4_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_AWS_KEY_ID_MAX 128
#define SL_AWS_SECRET_MAX 128
#define SL_AWS_TOKEN_MAX 4096
#define SL_SIGV4_MAX_HEADERS 24
#define SL_SIGV4_AUTH_MAX 1024
#define SL_SIGV4_UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"
#define SL_SIGV4_URL_MAX 8192           /* the URL to sign */
#define SL_SIGV4_QUERY_MAX 256          /* parameters in its query */
#define SL_SIGV4_HEADER_NAME_MAX 128
#define SL_SIGV4_HEADER_VALUE_MAX 8192

/* One set of credentials. session_token "" for long-term keys. */
struct sl_aws_creds {
  char access_key_id[SL_AWS_KEY_ID_MAX];
  char secret_access_key[SL_AWS_SECRET_MAX];
  char session_token[SL_AWS_TOKEN_MAX];
  int64_t expires_unix;         /* 0: does not expire */
};

struct sl_sigv4_header {
  const char *name;             /* any case */
  const char *value;            /* as sent */
};

/* A request to sign. Everything is borrowed for the call. */
struct sl_sigv4_req {
  const char *method;           /* "GET", "POST", ... */
  const char *url;              /* http(s)://host[:port]/path[?query], encoded as sent */
  const struct sl_sigv4_header *headers; /* signed as given; Host is added from the URL when absent */
  size_t n_headers;
  const void *body;             /* hashed when payload_sha256 is NULL (NULL body: empty) */
  size_t body_len;
  const char *payload_sha256;   /* lowercase hex, or SL_SIGV4_UNSIGNED_PAYLOAD; NULL: hash body */
  const char *region;           /* "us-east-1" */
  const char *service;          /* "ec2", "s3" */
  int64_t time_unix;            /* signing time, seconds since the epoch */
  bool s3;                      /* S3's rules: path signed as sent (no normalisation, no second
                                 * encoding); header form adds x-amz-content-sha256 */
};

/* What the header form adds to the request. */
struct sl_sigv4_signed {
  char amz_date[17];                       /* X-Amz-Date: 20150830T123600Z */
  char content_sha256[65];                 /* x-amz-content-sha256 (s3 only; "" otherwise) */
  char authorization[SL_SIGV4_AUTH_MAX];   /* Authorization: AWS4-HMAC-SHA256 Credential=... */
  /* X-Amz-Security-Token is creds->session_token when that is not "" */
};

/* Signs req with creds for the header form: X-Amz-Date (and
 * X-Amz-Security-Token when the credentials carry a token, and
 * x-amz-content-sha256 for S3) are signed as if they were among req's
 * headers, and must be sent with the Authorization header. -EINVAL for a
 * malformed URL or missing field, SL_ELIMIT past the sizes above. */
int sl_sigv4_sign(const struct sl_sigv4_req *req, const struct sl_aws_creds *creds,
                  struct sl_sigv4_signed *ret);

/* The presigned URL of req (query-string form: X-Amz-Algorithm,
 * X-Amz-Credential, X-Amz-Date, X-Amz-Expires, X-Amz-SignedHeaders,
 * X-Amz-Security-Token, X-Amz-Signature added to the URL's query), valid for
 * expires_s seconds (1 to 604800). The payload is UNSIGNED-PAYLOAD unless
 * req->payload_sha256 says otherwise. Headers in req are signed and must be
 * sent as given. Writes a NUL-terminated URL into buf: SL_ELIMIT when it
 * does not fit, -EINVAL as above. */
int sl_sigv4_presign(const struct sl_sigv4_req *req, const struct sl_aws_creds *creds,
                     int64_t expires_s, char *buf, size_t size);

/* The steps, for tests and diagnostics: the canonical request and the
 * string to sign of the header form (owned strings, free()). As
 * sl_sigv4_sign's errors. */
int sl_sigv4_canonical_request(const struct sl_sigv4_req *req, const struct sl_aws_creds *creds,
                               char **ret);
int sl_sigv4_string_to_sign(const struct sl_sigv4_req *req, const struct sl_aws_creds *creds,
                            char **ret);

/* Lowercase hex SHA-256 of data into out[65]. */
void sl_sha256_hex(const void *data, size_t len, char out[65]);

/* Percent-encodes s with AWS's unreserved set (A-Z a-z 0-9 - _ . ~), "/"
 * kept when keep_slash; NUL-terminated into buf. SL_ELIMIT if it does not
 * fit. */
int sl_aws_uri_encode(const char *s, bool keep_slash, char *buf, size_t size);

#endif
