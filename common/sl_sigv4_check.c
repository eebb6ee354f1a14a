/* The request as the caller describes it, checked before anything is built
 * from it (sl_sigv4_int.h): its URL taken apart into struct url, the host
 * and port checked and the Host header made from them; the method, region,
 * service, credentials, payload hash, time and counts within their bounds.
 * Malformed input is -EINVAL, input past a bound SL_ELIMIT. */
#include "sl_sigv4.h"
#include "sl_sigv4_int.h"

#include "sl_err.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define MAX_TIME_UNIX INT64_C(253402300799)      /* 9999-12-31T23:59:59Z */

/* ---- the URL ---- */

static bool host_char(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_';
}

static int parse_authority(struct url *u, bool https) {
  const char *a = u->authority, *end = a + u->authority_len;
  const char *host = a, *host_end, *port = NULL;
  if (u->authority_len == 0 || u->authority_len >= sizeof u->host)
    return u->authority_len ? SL_ELIMIT : -EINVAL;
  if (*a == '[') {                       /* [IPv6]:port */
    const char *close = memchr(a, ']', u->authority_len);
    if (!close || close == a + 1)
      return -EINVAL;
    for (const char *p = a + 1; p < close; p++)
      if (sl_sigv4_hexval(*p) < 0 && *p != ':' && *p != '.')
        return -EINVAL;
    host_end = close + 1;
    if (host_end < end && *host_end != ':')
      return -EINVAL;
  } else {
    host_end = a;
    while (host_end < end && *host_end != ':') {
      if (!host_char((unsigned char)*host_end))
        return -EINVAL;              /* userinfo ('@'), spaces, controls */
      host_end++;
    }
    if (host_end == a)
      return -EINVAL;
  }
  long port_n = -1;
  if (host_end < end) {
    port = host_end + 1;
    if (port == end || end - port > 5)
      return -EINVAL;
    port_n = 0;
    for (const char *p = port; p < end; p++) {
      if (*p < '0' || *p > '9')
        return -EINVAL;
      port_n = port_n * 10 + (*p - '0');
    }
    if (port_n < 1 || port_n > 65535)
      return -EINVAL;
  }
  size_t hn = (size_t)(host_end - host);
  for (size_t i = 0; i < hn; i++) {
    char c = host[i];
    u->host[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
  }
  u->host[hn] = '\0';
  if (port_n > 0 && port_n != (https ? 443 : 80))
    snprintf(u->host + hn, sizeof u->host - hn, ":%ld", port_n);
  return 0;
}

int sl_sigv4_parse_url(const char *url, struct url *u) {
  memset(u, 0, sizeof *u);
  size_t n = strnlen(url, SL_SIGV4_URL_MAX + 1);
  if (n > SL_SIGV4_URL_MAX)
    return SL_ELIMIT;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)url[i];
    if (c < 0x20 || c == 0x7f)
      return -EINVAL;
  }
  bool https;
  if (strncasecmp(url, "https://", 8) == 0) {
    https = true;
    u->scheme_len = 5;
  } else if (strncasecmp(url, "http://", 7) == 0) {
    https = false;
    u->scheme_len = 4;
  } else {
    return -EINVAL;
  }
  u->scheme = url;
  const char *a = url + u->scheme_len + 3, *end = url + n;
  const char *p = a;
  while (p < end && *p != '/' && *p != '?' && *p != '#')
    p++;
  u->authority = a;
  u->authority_len = (size_t)(p - a);
  const char *frag = memchr(p, '#', (size_t)(end - p));
  if (frag)
    end = frag;                          /* a fragment is never sent */
  const char *q = memchr(p, '?', (size_t)(end - p));
  u->path = p;
  u->path_len = (size_t)((q ? q : end) - p);
  if (q) {
    u->query = q + 1;
    u->query_len = (size_t)(end - q - 1);
  } else {
    u->query = end;
  }
  return parse_authority(u, https);
}

/* ---- validation ---- */

static bool word_ok(const char *s, size_t max, const char *extra) {
  size_t n = s ? strnlen(s, max + 1) : 0;
  if (n == 0 || n > max)
    return false;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          strchr(extra, c)))
      return false;
  }
  return true;
}

static bool printable_ok(const char *s, size_t size, bool may_be_empty) {
  size_t n = strnlen(s, size);
  if (n == size || (n == 0 && !may_be_empty))
    return false;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] == 0x7f)
      return false;
  return true;
}

static bool payload_ok(const char *p) {
  size_t n = strnlen(p, 65);
  if (n == 0 || n > 64)
    return false;
  bool hex = n == 64, word = true;
  for (size_t i = 0; i < n; i++) {
    char c = p[i];
    hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
    word = word && ((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-');
  }
  return hex || word;                    /* a digest, or UNSIGNED-PAYLOAD and its kin */
}

int sl_sigv4_check_req(const struct sl_sigv4_req *req, const struct sl_aws_creds *creds) {
  if (!req || !creds || !req->url || !req->method)
    return -EINVAL;
  if (!word_ok(req->method, 16, "") || !word_ok(req->region, 64, "-_.") ||
      !word_ok(req->service, 64, "-_."))
    return -EINVAL;
  for (const char *m = req->method; *m; m++)
    if (*m < 'A' || *m > 'Z')
      return -EINVAL;
  if (!word_ok(creds->access_key_id, SL_AWS_KEY_ID_MAX - 1, "") ||
      !printable_ok(creds->secret_access_key, SL_AWS_SECRET_MAX, false) ||
      !printable_ok(creds->session_token, SL_AWS_TOKEN_MAX, true))
    return -EINVAL;
  if (req->n_headers > SL_SIGV4_MAX_HEADERS)
    return SL_ELIMIT;
  if (req->n_headers && !req->headers)
    return -EINVAL;
  if (req->body_len && !req->body)
    return -EINVAL;
  if (req->payload_sha256 && !payload_ok(req->payload_sha256))
    return -EINVAL;
  if (req->time_unix < 0 || req->time_unix > MAX_TIME_UNIX)
    return -EINVAL;
  return 0;
}
