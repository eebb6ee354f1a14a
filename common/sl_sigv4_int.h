/* What sl_sigv4.c (the canonical request and the signature) and
 * sl_sigv4_check.c (the request's fields checked, its URL taken apart)
 * share. Nothing else includes this header. */
#ifndef SL_SIGV4_INT_H
#define SL_SIGV4_INT_H

#include "sl_sigv4.h"

#include <stdbool.h>
#include <stddef.h>

struct url {
  const char *scheme; size_t scheme_len;
  const char *authority; size_t authority_len;  /* as given */
  const char *path; size_t path_len;            /* may be empty */
  const char *query; size_t query_len;          /* without '?' */
  char host[300];                               /* Host header: lowercase, default port dropped */
};

/* ---- sl_sigv4.c ---- */
/* The value of hex digit c, -1 when it is none. */
int sl_sigv4_hexval(char c);

/* ---- sl_sigv4_check.c ---- */
/* url split into *u (its host as the Host header says it): -EINVAL for a
 * malformed URL (not http(s), controls, userinfo, a bad port), SL_ELIMIT
 * past SL_SIGV4_URL_MAX. u borrows url. */
int sl_sigv4_parse_url(const char *url, struct url *u);
/* The request's fields and the credentials within their bounds: 0, -EINVAL
 * or SL_ELIMIT. */
int sl_sigv4_check_req(const struct sl_sigv4_req *req, const struct sl_aws_creds *creds);

#endif
