/* The instance metadata service's replies as sl_awscreds.c reads them, one
 * function per reply of the chain's fetch (token, role name, credentials
 * document), reachable by the tests that feed replies without a service
 * (the fuzz target replies). Each borrows resp, whose body is
 * NUL-terminated as sl_http leaves it, and names imds (the service's URL)
 * in its messages, never a value it read. */
#ifndef SL_AWSCREDS_INT_H
#define SL_AWSCREDS_INT_H

#include "sl_awscreds.h"
#include "sl_http.h"

#include <stddef.h>
#include <stdint.h>

#define SL_AWS_ROLE_MAX 160      /* bytes of a role name, NUL included */

/* The token reply (PUT /latest/api/token) as the header later requests
 * send, into hdr: 0, or SL_EAUTH with a sentence in err. Trims resp's body
 * in place. */
int sl_aws_imds_token_reply(const char *imds, struct sl_http_resp *resp, char *hdr,
                            size_t hdr_size, char *err, size_t err_size);
/* The role listing's first line into ret: 0, or SL_EAUTH with a sentence
 * in err. Trims resp's body in place. */
int sl_aws_imds_role_reply(const char *imds, struct sl_http_resp *resp,
                           char ret[SL_AWS_ROLE_MAX], char *err, size_t err_size);
/* Role role's credentials document into *ret (written only on success):
 * 0, or SL_EAUTH with a sentence in err naming the field at fault. Whether
 * the credentials have expired is the caller's question. */
int sl_aws_imds_creds_reply(const char *imds, const char *role, const struct sl_http_resp *resp,
                            struct sl_aws_creds *ret, char *err, size_t err_size);
/* "2026-01-02T03:04:05Z" as seconds since the epoch; fractions of a
 * second and "+00:00" allowed. -EINVAL for anything else. */
int sl_aws_parse_expiration(const char *s, int64_t *ret);

#endif
