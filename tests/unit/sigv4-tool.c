/* Signs requests described in JSON, one object per line on stdin, and
 * answers one JSON line each on stdout, for comparison with other signers:
 *
 *   {"method": "GET", "url": "https://...", "headers": [["Name", "value"], ...],
 *    "body_hex": "...", "payload_sha256": "...", "region": "us-east-1",
 *    "service": "s3", "time": 1440938160, "s3": true, "presign_expires": 0,
 *    "creds": {"access_key_id": ..., "secret_access_key": ..., "session_token": ...}}
 *
 * presign_expires 0 (or absent) signs the header form and answers
 * {"x-amz-date", "x-amz-content-sha256", "authorization", "canonical_request"};
 * otherwise {"url"}. A refused request answers {"error": "SL_E..."}. */
#include "sl_err.h"
#include "sl_json.h"
#include "sl_sigv4.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int hexbyte(const char *s) {
  int v = 0;
  for (int i = 0; i < 2; i++) {
    char c = s[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= c - '0';
    else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
    else return -1;
  }
  return v;
}

static json_t *answer(json_t *in) {
  struct sl_sigv4_header hdrs[SL_SIGV4_MAX_HEADERS + 1];
  struct sl_aws_creds creds = {0};
  unsigned char *body = NULL;
  char *url = NULL, *creq = NULL;
  json_t *out = json_object();
  int r = 0;

  json_t *hs = json_object_get(in, "headers");
  size_t n = json_array_size(hs);
  if (n > SL_SIGV4_MAX_HEADERS + 1)
    n = SL_SIGV4_MAX_HEADERS + 1;          /* one more than allowed still reaches the signer */
  for (size_t i = 0; i < n; i++) {
    hdrs[i].name = json_string_value(json_array_get(json_array_get(hs, i), 0));
    hdrs[i].value = json_string_value(json_array_get(json_array_get(hs, i), 1));
  }
  const char *hex = sl_json_get_str(in, "body_hex", "");
  size_t body_len = strlen(hex) / 2;
  body = malloc(body_len + 1);
  if (!body) {
    r = -ENOMEM;
    goto out;
  }
  for (size_t i = 0; i < body_len; i++) {
    int b = hexbyte(hex + 2 * i);
    if (b < 0) {
      r = -EINVAL;
      goto out;
    }
    body[i] = (unsigned char)b;
  }
  json_t *c = json_object_get(in, "creds");
  snprintf(creds.access_key_id, sizeof creds.access_key_id, "%s",
           sl_json_get_str(c, "access_key_id", ""));
  snprintf(creds.secret_access_key, sizeof creds.secret_access_key, "%s",
           sl_json_get_str(c, "secret_access_key", ""));
  snprintf(creds.session_token, sizeof creds.session_token, "%s",
           sl_json_get_str(c, "session_token", ""));
  struct sl_sigv4_req req = {
    .method = sl_json_get_str(in, "method", NULL),
    .url = sl_json_get_str(in, "url", NULL),
    .headers = hdrs,
    .n_headers = n,
    .body = body,
    .body_len = body_len,
    .payload_sha256 = sl_json_get_str(in, "payload_sha256", NULL),
    .region = sl_json_get_str(in, "region", NULL),
    .service = sl_json_get_str(in, "service", NULL),
    .time_unix = sl_json_get_int(in, "time", 0),
    .s3 = sl_json_get_bool(in, "s3", false),
  };
  int64_t expires = sl_json_get_int(in, "presign_expires", 0);
  if (expires) {
    url = malloc(65536);
    if (!url) {
      r = -ENOMEM;
      goto out;
    }
    r = sl_sigv4_presign(&req, &creds, expires, url, 65536);
    if (!r)
      json_object_set_new(out, "url", json_string(url));
  } else {
    struct sl_sigv4_signed sig;
    r = sl_sigv4_sign(&req, &creds, &sig);
    if (!r)
      r = sl_sigv4_canonical_request(&req, &creds, &creq);
    if (!r) {
      json_object_set_new(out, "x-amz-date", json_string(sig.amz_date));
      json_object_set_new(out, "x-amz-content-sha256", json_string(sig.content_sha256));
      json_object_set_new(out, "authorization", json_string(sig.authorization));
      json_object_set_new(out, "canonical_request", json_stringn(creq, strlen(creq)));
    }
  }
out:
  if (r)
    json_object_set_new(out, "error", json_string(sl_errname(r)));
  free(body);
  free(url);
  free(creq);
  return out;
}

int main(void) {
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  int bad = 0;
  while ((len = getline(&line, &cap, stdin)) > 0) {
    json_t *in = NULL;
    char why[128];
    if (sl_json_parse(line, (size_t)len, 8, &in, why, sizeof why) < 0 || !json_is_object(in)) {
      fprintf(stderr, "sigv4-tool: not a JSON object: %s\n", why);
      json_decref(in);
      bad = 1;
      continue;
    }
    json_t *out = answer(in);
    char *text = sl_json_dump(out, NULL);
    if (text)
      printf("%s\n", text);
    else
      printf("{\"error\":\"unprintable\"}\n");
    free(text);
    json_decref(out);
    json_decref(in);
  }
  free(line);
  return bad;
}
