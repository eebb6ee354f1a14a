/* AWS Signature Version 4, header and presigned-URL forms.
 *
 * One pass builds everything a signature needs (struct canon): the URL split
 * into its parts, the signed headers sorted, the query decoded and
 * re-encoded, the canonical request. Both forms and the diagnostic getters
 * share it, so they cannot disagree about a canonical request.
 *
 * Every input is bounded before it is used (URL, header count, name and
 * value sizes, query parameters), and every string is built in a buffer that
 * refuses growth past BUILD_MAX, so malformed or huge input ends in -EINVAL
 * or SL_ELIMIT, never in a crash. Keys derived from the secret are wiped
 * after use. The request's fields are checked and its URL taken apart in
 * sl_sigv4_check.c (sl_sigv4_int.h between the two). */
#include "sl_sigv4.h"
#include "sl_sigv4_int.h"

#include "sl_err.h"
#include "sl_hmac.h"                     /* sl_sha256_hex, declared in both headers */

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define BUILD_MAX (256u * 1024)                   /* any string built here */
#define N_ADDED 4                                 /* host, x-amz-date, token, content sha */
#define ALGORITHM "AWS4-HMAC-SHA256"

/* ---- a bounded growing string ---- */

struct buf {
  char *p;
  size_t len, cap;
  int err;                  /* first failure; later appends do nothing */
};

static void buf_add(struct buf *b, const char *s, size_t n) {
  if (b->err)
    return;
  if (n > BUILD_MAX - b->len) {
    b->err = SL_ELIMIT;
    return;
  }
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1)
      cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->err = -ENOMEM;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void buf_str(struct buf *b, const char *s) { buf_add(b, s, strlen(s)); }
static void buf_ch(struct buf *b, char c) { buf_add(b, &c, 1); }

static void buf_done(struct buf *b) {
  free(b->p);
  memset(b, 0, sizeof *b);
}

/* ---- encoding ---- */

static bool unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.' || c == '~';
}

static void buf_encode(struct buf *b, const char *s, size_t n, bool keep_slash) {
  static const char hex[] = "0123456789ABCDEF";
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (unreserved(c) || (keep_slash && c == '/')) {
      buf_ch(b, (char)c);
    } else {
      char e[3] = {'%', hex[c >> 4], hex[c & 15]};
      buf_add(b, e, 3);
    }
  }
}

int sl_aws_uri_encode(const char *s, bool keep_slash, char *buf, size_t size) {
  if (!s || !buf || size == 0)
    return -EINVAL;
  struct buf b = {0};
  buf_encode(&b, s, strlen(s), keep_slash);
  buf_add(&b, "", 0);
  int r = b.err;
  if (!r && b.len >= size)
    r = SL_ELIMIT;
  if (!r)
    memcpy(buf, b.p, b.len + 1);
  buf_done(&b);
  return r;
}

int sl_sigv4_hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Percent-decodes s[0..n) into a new string, then encodes it with the
 * unreserved set: a query name or value as AWS canonicalises it. '+' is a
 * literal plus, as AWS reads it. */
static int query_canon(const char *s, size_t n, char **ret) {
  struct buf dec = {0}, enc = {0};
  for (size_t i = 0; i < n; i++) {
    if (s[i] != '%') {
      buf_ch(&dec, s[i]);
      continue;
    }
    int hi = i + 1 < n ? sl_sigv4_hexval(s[i + 1]) : -1;
    int lo = i + 2 < n ? sl_sigv4_hexval(s[i + 2]) : -1;
    if (hi < 0 || lo < 0) {
      buf_done(&dec);
      return -EINVAL;
    }
    buf_ch(&dec, (char)(hi << 4 | lo));
    i += 2;
  }
  buf_add(&dec, "", 0);
  if (dec.err) {
    int r = dec.err;
    buf_done(&dec);
    return r;
  }
  buf_encode(&enc, dec.p, dec.len, false);
  buf_add(&enc, "", 0);
  buf_done(&dec);
  if (enc.err) {
    int r = enc.err;
    buf_done(&enc);
    return r;
  }
  *ret = enc.p;
  return 0;
}

static void hmac(const unsigned char *key, size_t key_len, const char *msg, size_t msg_len,
                 unsigned char out[crypto_auth_hmacsha256_BYTES]) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, key, key_len);
  crypto_auth_hmacsha256_update(&st, (const unsigned char *)msg, msg_len);
  crypto_auth_hmacsha256_final(&st, out);
  sodium_memzero(&st, sizeof st);
}

/* ---- the URL ---- */

/* The canonical URI for services other than S3: dot segments and empty
 * segments removed (AWS wants "//" folded too), each segment encoded once
 * more, a trailing "/" kept. */
static int canonical_path(const struct url *u, struct buf *out) {
  const char *p = u->path, *end = p + u->path_len;
  if (u->path_len == 0) {
    buf_ch(out, '/');
    return out->err;
  }
  size_t max = u->path_len / 2 + 2, n = 0;
  struct seg { const char *s; size_t n; } *segs = calloc(max, sizeof *segs);
  if (!segs)
    return -ENOMEM;
  while (p <= end) {
    const char *s = p;
    while (p < end && *p != '/')
      p++;
    size_t len = (size_t)(p - s);
    if (len == 2 && s[0] == '.' && s[1] == '.') {
      if (n)
        n--;
    } else if (len && !(len == 1 && s[0] == '.') && n < max) {
      segs[n].s = s;
      segs[n].n = len;
      n++;
    }
    p++;
  }
  if (u->path[0] == '/')
    buf_ch(out, '/');
  for (size_t i = 0; i < n; i++) {
    if (i)
      buf_ch(out, '/');
    buf_encode(out, segs[i].s, segs[i].n, false);
  }
  if (n && u->path[u->path_len - 1] == '/')
    buf_ch(out, '/');
  free(segs);
  return out->err;
}

/* ---- headers and query ---- */

struct hdr {
  char name[SL_SIGV4_HEADER_NAME_MAX + 1]; /* lowercase */
  const char *value;
  size_t order;                             /* duplicates keep their order */
};

struct qparam {
  char *name, *value;                       /* canonical (encoded) */
};

struct canon {
  bool presign;
  struct url url;
  char amz_date[17];
  char scope[160];                          /* DATE/REGION/SERVICE/aws4_request */
  char payload[65];
  struct hdr hdrs[SL_SIGV4_MAX_HEADERS + N_ADDED];
  size_t n_hdrs;
  struct qparam *params;
  size_t n_params;
  struct buf signed_headers;
  struct buf creq;
};

static void canon_done(struct canon *c) {
  for (size_t i = 0; i < c->n_params; i++) {
    free(c->params[i].name);
    free(c->params[i].value);
  }
  free(c->params);
  buf_done(&c->signed_headers);
  buf_done(&c->creq);
}

static bool token_char(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static bool hspace(unsigned char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

static int add_hdr(struct canon *c, const char *name, const char *value) {
  if (!name || !value)
    return -EINVAL;
  size_t n = strnlen(name, SL_SIGV4_HEADER_NAME_MAX + 1);
  if (n == 0)
    return -EINVAL;
  if (n > SL_SIGV4_HEADER_NAME_MAX)
    return SL_ELIMIT;
  size_t vn = strnlen(value, SL_SIGV4_HEADER_VALUE_MAX + 1);
  if (vn > SL_SIGV4_HEADER_VALUE_MAX)
    return SL_ELIMIT;
  for (size_t i = 0; i < vn; i++) {
    unsigned char ch = (unsigned char)value[i];
    if ((ch < 0x20 && !hspace(ch)) || ch == 0x7f)
      return -EINVAL;
  }
  if (c->n_hdrs >= sizeof c->hdrs / sizeof c->hdrs[0])
    return SL_ELIMIT;
  struct hdr *h = &c->hdrs[c->n_hdrs];
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)name[i];
    if (!token_char(ch))
      return -EINVAL;
    h->name[i] = (ch >= 'A' && ch <= 'Z') ? (char)(ch - 'A' + 'a') : (char)ch;
  }
  h->name[n] = '\0';
  h->value = value;
  h->order = c->n_hdrs++;
  return 0;
}

static int hdr_cmp(const void *a, const void *b) {
  const struct hdr *x = a, *y = b;
  int r = strcmp(x->name, y->name);
  return r ? r : (x->order < y->order ? -1 : x->order > y->order);
}

/* Value trimmed, inner runs of white space folded to one space. */
static void buf_trimall(struct buf *b, const char *v) {
  while (*v && hspace((unsigned char)*v))
    v++;
  while (*v) {
    const char *s = v;
    while (*v && !hspace((unsigned char)*v))
      v++;
    buf_add(b, s, (size_t)(v - s));
    while (*v && hspace((unsigned char)*v))
      v++;
    if (*v)
      buf_ch(b, ' ');
  }
}

static int param_cmp(const void *a, const void *b) {
  const struct qparam *x = a, *y = b;
  int r = strcmp(x->name, y->name);
  return r ? r : strcmp(x->value, y->value);
}

static int add_param(struct canon *c, size_t cap, char *name, char *value) {
  if (c->n_params >= cap) {
    free(name);
    free(value);
    return SL_ELIMIT;
  }
  c->params[c->n_params].name = name;
  c->params[c->n_params].value = value;
  c->n_params++;
  return 0;
}

static const char *const presign_params[] = {
  "X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
  "X-Amz-SignedHeaders", "X-Amz-Security-Token", "X-Amz-Signature",
};

static bool is_presign_param(const char *name) {
  for (size_t i = 0; i < sizeof presign_params / sizeof presign_params[0]; i++)
    if (strcasecmp(name, presign_params[i]) == 0)
      return true;
  return false;
}

/* Every piece between '&'s is a parameter, an empty one too ("a&&b" has
 * three), as botocore counts them. */
static int parse_query(struct canon *c, size_t cap) {
  const char *p = c->url.query, *end = p + c->url.query_len;
  if (c->url.query_len == 0)
    return 0;
  for (;;) {
    const char *s = p;
    while (p < end && *p != '&')
      p++;
    const char *eq = memchr(s, '=', (size_t)(p - s));
    char *name = NULL, *value = NULL;
    int r = query_canon(s, (size_t)((eq ? eq : p) - s), &name);
    if (!r)
      r = eq ? query_canon(eq + 1, (size_t)(p - eq - 1), &value) : query_canon("", 0, &value);
    if (!r && c->presign && is_presign_param(name))
      r = -EINVAL;                     /* already presigned */
    if (r) {
      free(name);
      free(value);
      return r;
    }
    if ((r = add_param(c, cap, name, value)))
      return r;
    if (p == end)
      return 0;
    p++;
  }
}

static int add_param_str(struct canon *c, size_t cap, const char *name, const char *value) {
  char *n = NULL, *v = NULL;
  struct buf b = {0};
  buf_encode(&b, value, strlen(value), false);
  buf_add(&b, "", 0);
  if (b.err) {
    int r = b.err;
    buf_done(&b);
    return r;
  }
  v = b.p;
  n = strdup(name);
  if (!n) {
    free(v);
    return -ENOMEM;
  }
  return add_param(c, cap, n, v);
}

/* ---- the canonical request ---- */

static bool replaced_by_signer(const char *lname, const struct sl_sigv4_req *req,
                               const struct sl_aws_creds *creds) {
  return strcmp(lname, "authorization") == 0 || strcmp(lname, "x-amz-date") == 0 ||
         (creds->session_token[0] && strcmp(lname, "x-amz-security-token") == 0) ||
         (req->s3 && strcmp(lname, "x-amz-content-sha256") == 0);
}

/* Headers: the caller's (less those the header form sets itself), then
 * ours, Host from the URL when the caller gave none; sorted, and the
 * signed-headers list made from them. */
static int collect_headers(struct canon *c, const struct sl_sigv4_req *req,
                           const struct sl_aws_creds *creds) {
  bool have_host = false;
  int r;
  for (size_t i = 0; i < req->n_headers; i++) {
    if ((r = add_hdr(c, req->headers[i].name, req->headers[i].value)))
      return r;
    const char *lname = c->hdrs[c->n_hdrs - 1].name;
    if (!c->presign && replaced_by_signer(lname, req, creds))
      c->n_hdrs--;
    else if (strcmp(lname, "host") == 0)
      have_host = true;
  }
  if (!have_host && (r = add_hdr(c, "host", c->url.host)))
    return r;
  if (!c->presign) {
    if ((r = add_hdr(c, "x-amz-date", c->amz_date)))
      return r;
    if (creds->session_token[0] && (r = add_hdr(c, "x-amz-security-token", creds->session_token)))
      return r;
    if (req->s3 && (r = add_hdr(c, "x-amz-content-sha256", c->payload)))
      return r;
  }
  qsort(c->hdrs, c->n_hdrs, sizeof c->hdrs[0], hdr_cmp);
  for (size_t i = 0; i < c->n_hdrs; i++) {
    if (i && strcmp(c->hdrs[i].name, c->hdrs[i - 1].name) == 0)
      continue;
    if (c->signed_headers.len)
      buf_ch(&c->signed_headers, ';');
    buf_str(&c->signed_headers, c->hdrs[i].name);
  }
  return c->signed_headers.err;
}

/* Query: the URL's parameters, and the presigned form's own; sorted. */
static int collect_query(struct canon *c, const struct sl_aws_creds *creds, int64_t expires_s) {
  size_t cap = SL_SIGV4_QUERY_MAX + 8;
  int r;
  c->params = calloc(cap, sizeof *c->params);
  if (!c->params)
    return -ENOMEM;
  if ((r = parse_query(c, SL_SIGV4_QUERY_MAX)))
    return r;
  if (c->presign) {
    char cred[SL_AWS_KEY_ID_MAX + 170], exp[24];
    if (expires_s < 1 || expires_s > 604800)
      return -EINVAL;
    snprintf(cred, sizeof cred, "%s/%s", creds->access_key_id, c->scope);
    snprintf(exp, sizeof exp, "%lld", (long long)expires_s);
    if ((r = add_param_str(c, cap, "X-Amz-Algorithm", ALGORITHM)) ||
        (r = add_param_str(c, cap, "X-Amz-Credential", cred)) ||
        (r = add_param_str(c, cap, "X-Amz-Date", c->amz_date)) ||
        (r = add_param_str(c, cap, "X-Amz-Expires", exp)) ||
        (r = add_param_str(c, cap, "X-Amz-SignedHeaders", c->signed_headers.p)))
      return r;
    if (creds->session_token[0] &&
        (r = add_param_str(c, cap, "X-Amz-Security-Token", creds->session_token)))
      return r;
  }
  qsort(c->params, c->n_params, sizeof c->params[0], param_cmp);
  return 0;
}

static int write_creq(struct canon *c, const struct sl_sigv4_req *req) {
  struct buf *b = &c->creq;
  int r;
  buf_str(b, req->method);
  buf_ch(b, '\n');
  if (req->s3) {
    if (c->url.path_len)
      buf_add(b, c->url.path, c->url.path_len);
    else
      buf_ch(b, '/');
  } else if ((r = canonical_path(&c->url, b))) {
    return r;
  }
  buf_ch(b, '\n');
  for (size_t i = 0; i < c->n_params; i++) {
    if (i)
      buf_ch(b, '&');
    buf_str(b, c->params[i].name);
    buf_ch(b, '=');
    buf_str(b, c->params[i].value);
  }
  buf_ch(b, '\n');
  for (size_t i = 0; i < c->n_hdrs; i++) {
    if (i && strcmp(c->hdrs[i].name, c->hdrs[i - 1].name) == 0) {
      buf_ch(b, ',');                    /* a repeated header: values joined in order */
    } else {
      if (i)
        buf_ch(b, '\n');
      buf_str(b, c->hdrs[i].name);
      buf_ch(b, ':');
    }
    buf_trimall(b, c->hdrs[i].value);
  }
  buf_str(b, "\n\n");
  buf_add(b, c->signed_headers.p, c->signed_headers.len);
  buf_ch(b, '\n');
  buf_str(b, c->payload);
  return b->err;
}

static int build(const struct sl_sigv4_req *req, const struct sl_aws_creds *creds, bool presign,
                 int64_t expires_s, struct canon *c) {
  memset(c, 0, sizeof *c);
  c->presign = presign;
  int r = sl_sigv4_check_req(req, creds);
  if (!r)
    r = sl_sigv4_parse_url(req->url, &c->url);
  if (r)
    return r;
  time_t t = (time_t)req->time_unix;
  struct tm tm;
  if (!gmtime_r(&t, &tm))
    return -EINVAL;
  strftime(c->amz_date, sizeof c->amz_date, "%Y%m%dT%H%M%SZ", &tm);
  snprintf(c->scope, sizeof c->scope, "%.8s/%s/%s/aws4_request", c->amz_date, req->region,
           req->service);
  if (req->payload_sha256)
    snprintf(c->payload, sizeof c->payload, "%s", req->payload_sha256);
  else if (presign)
    snprintf(c->payload, sizeof c->payload, "%s", SL_SIGV4_UNSIGNED_PAYLOAD);
  else
    sl_sha256_hex(req->body ? req->body : "", req->body_len, c->payload);
  if ((r = collect_headers(c, req, creds)) || (r = collect_query(c, creds, expires_s)))
    return r;
  return write_creq(c, req);
}

static int string_to_sign(const struct canon *c, struct buf *out) {
  char h[65];
  sl_sha256_hex(c->creq.p, c->creq.len, h);
  buf_str(out, ALGORITHM "\n");
  buf_str(out, c->amz_date);
  buf_ch(out, '\n');
  buf_str(out, c->scope);
  buf_ch(out, '\n');
  buf_str(out, h);
  return out->err;
}

static int signature(const struct canon *c, const struct sl_sigv4_req *req,
                     const struct sl_aws_creds *creds, char ret_hex[65]) {
  struct buf sts = {0};
  int r = string_to_sign(c, &sts);
  if (r) {
    buf_done(&sts);
    return r;
  }
  unsigned char key[4 + SL_AWS_SECRET_MAX], k1[32], k2[32];
  size_t sn = strlen(creds->secret_access_key);
  memcpy(key, "AWS4", 4);
  memcpy(key + 4, creds->secret_access_key, sn);
  hmac(key, 4 + sn, c->amz_date, 8, k1);
  hmac(k1, 32, req->region, strlen(req->region), k2);
  hmac(k2, 32, req->service, strlen(req->service), k1);
  hmac(k1, 32, "aws4_request", 12, k2);
  hmac(k2, 32, sts.p, sts.len, k1);
  sodium_bin2hex(ret_hex, 65, k1, 32);
  sodium_memzero(key, sizeof key);
  sodium_memzero(k1, sizeof k1);
  sodium_memzero(k2, sizeof k2);
  buf_done(&sts);
  return 0;
}

/* ---- the API ---- */

int sl_sigv4_sign(const struct sl_sigv4_req *req, const struct sl_aws_creds *creds,
                  struct sl_sigv4_signed *ret) {
  struct canon c;
  char sig[65];
  int r = build(req, creds, false, 0, &c);
  if (!r)
    r = signature(&c, req, creds, sig);
  if (!r) {
    char auth[SL_SIGV4_AUTH_MAX];
    int n = snprintf(auth, sizeof auth, ALGORITHM " Credential=%s/%s, SignedHeaders=%s, Signature=%s",
                     creds->access_key_id, c.scope, c.signed_headers.p, sig);
    if (n < 0 || (size_t)n >= sizeof auth) {
      r = SL_ELIMIT;
    } else {
      memcpy(ret->amz_date, c.amz_date, sizeof ret->amz_date);
      snprintf(ret->content_sha256, sizeof ret->content_sha256, "%s", req->s3 ? c.payload : "");
      memcpy(ret->authorization, auth, (size_t)n + 1);
    }
  }
  canon_done(&c);
  return r;
}

int sl_sigv4_presign(const struct sl_sigv4_req *req, const struct sl_aws_creds *creds,
                     int64_t expires_s, char *buf, size_t size) {
  struct canon c;
  char sig[65];
  if (!buf || size == 0)
    return -EINVAL;
  int r = build(req, creds, true, expires_s, &c);
  if (!r)
    r = signature(&c, req, creds, sig);
  if (!r) {
    /* The URL as given, its query untouched, our parameters after it. */
    struct buf u = {0};
    const struct url *p = &c.url;
    buf_add(&u, p->scheme, p->scheme_len);
    buf_str(&u, "://");
    buf_add(&u, p->authority, p->authority_len);
    if (p->path_len)
      buf_add(&u, p->path, p->path_len);
    else
      buf_ch(&u, '/');
    buf_ch(&u, '?');
    if (p->query_len) {                /* a trailing '&' was signed as a parameter: keep it one */
      buf_add(&u, p->query, p->query_len);
      buf_ch(&u, '&');
    }
    static const char *const order[] = {
      "X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
      "X-Amz-SignedHeaders", "X-Amz-Security-Token",
    };
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
      for (size_t j = 0; j < c.n_params; j++)
        if (strcmp(c.params[j].name, order[i]) == 0) {
          buf_str(&u, order[i]);
          buf_ch(&u, '=');
          buf_str(&u, c.params[j].value);
          buf_ch(&u, '&');
          break;
        }
    buf_str(&u, "X-Amz-Signature=");
    buf_str(&u, sig);
    r = u.err;
    if (!r && u.len >= size)
      r = SL_ELIMIT;
    if (!r)
      memcpy(buf, u.p, u.len + 1);
    buf_done(&u);
  }
  canon_done(&c);
  return r;
}

int sl_sigv4_canonical_request(const struct sl_sigv4_req *req, const struct sl_aws_creds *creds,
                               char **ret) {
  struct canon c;
  int r = build(req, creds, false, 0, &c);
  if (!r) {
    *ret = c.creq.p;
    c.creq.p = NULL;
  }
  canon_done(&c);
  return r;
}

int sl_sigv4_string_to_sign(const struct sl_sigv4_req *req, const struct sl_aws_creds *creds,
                            char **ret) {
  struct canon c;
  struct buf sts = {0};
  int r = build(req, creds, false, 0, &c);
  if (!r)
    r = string_to_sign(&c, &sts);
  if (!r) {
    *ret = sts.p;
    sts.p = NULL;
  }
  buf_done(&sts);
  canon_done(&c);
  return r;
}
