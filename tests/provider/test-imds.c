/* The metadata endpoint over real HTTP: the IMDSv2 token flow, 401 without
 * a token, 404 before a notice, the notice and rebalance bodies, identity
 * keys, bad requests. */
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "imds.h"
#include "prov-test.h"

int main(void) {
  struct gw_imds *m = NULL;
  struct body b;
  char base[64], url[128], tok[64];
  curl_global_init(CURL_GLOBAL_DEFAULT);
  CHECK_INT(gw_imds_new("i-0123456789ab", "g5.xlarge", "local-1a", 0, &m), 0);
  if (!m)
    TEST_MAIN_END();
  CHECK(gw_imds_port(m) > 0);
  snprintf(base, sizeof base, "http://127.0.0.1:%d", gw_imds_port(m));

  /* Token: needs a TTL of 1..21600 seconds, PUT only, no X-Forwarded-For. */
  snprintf(url, sizeof url, "%s/latest/api/token", base);
  CHECK_INT(http("PUT", url, NULL, NULL, &b), 400);
  CHECK_INT(http("PUT", url, "X-aws-ec2-metadata-token-ttl-seconds: 0", NULL, &b), 400);
  CHECK_INT(http("PUT", url, "X-aws-ec2-metadata-token-ttl-seconds: 21601", NULL, &b), 400);
  CHECK_INT(http("PUT", url, "X-aws-ec2-metadata-token-ttl-seconds: 5x", NULL, &b), 400);
  CHECK_INT(http("PUT", url, "X-aws-ec2-metadata-token-ttl-seconds: 60", "X-Forwarded-For: 1.2.3.4",
                 &b), 403);
  CHECK_INT(http("GET", url, "X-aws-ec2-metadata-token-ttl-seconds: 60", NULL, &b), 405);
  CHECK_INT(http("PUT", url, "X-aws-ec2-metadata-token-ttl-seconds: 21600", NULL, &b), 200);
  CHECK_INT(get_token(base, tok), 200);
  CHECK_INT(strlen(tok), 48);

  /* Metadata needs a live token. */
  CHECK_INT(get_meta(base, NULL, "spot/instance-action", &b), 401);
  CHECK_INT(get_meta(base, "0000", "spot/instance-action", &b), 401);
  CHECK_INT(get_meta(base, "000000000000000000000000000000000000000000000000", "instance-id", &b),
            401);
  CHECK_INT(get_meta(base, tok, "instance-id", &b), 200);
  CHECK_STR(b.text, "i-0123456789ab");
  CHECK_INT(get_meta(base, tok, "instance-type", &b), 200);
  CHECK_STR(b.text, "g5.xlarge");
  CHECK_INT(get_meta(base, tok, "placement/availability-zone", &b), 200);
  CHECK_STR(b.text, "local-1a");
  CHECK_INT(get_meta(base, tok, "no/such/key", &b), 404);
  snprintf(url, sizeof url, "%s/latest/user-data", base);
  CHECK_INT(http("GET", url, NULL, NULL, &b), 404);
  snprintf(url, sizeof url, "%s/latest/meta-data/instance-id", base);
  CHECK_INT(http("POST", url, NULL, NULL, &b), 405);

  /* Before a notice: 404; after: the action and the deadline. */
  CHECK_INT(get_meta(base, tok, "spot/instance-action", &b), 404);
  CHECK_INT(get_meta(base, tok, "spot/termination-time", &b), 404);
  CHECK_INT(get_meta(base, tok, "events/recommendations/rebalance", &b), 404);
  /* 2026-11-22T14:00:00Z */
  gw_imds_set_notice(m, "terminate", INT64_C(1795356000) * 1000000);
  CHECK_INT(get_meta(base, tok, "spot/instance-action", &b), 200);
  CHECK_STR(b.text, "{\"action\":\"terminate\",\"time\":\"2026-11-22T14:00:00Z\"}");
  CHECK_INT(get_meta(base, tok, "spot/termination-time", &b), 200);
  CHECK_STR(b.text, "2026-11-22T14:00:00Z");
  gw_imds_set_rebalance(m, INT64_C(1795355400) * 1000000);
  CHECK_INT(get_meta(base, tok, "events/recommendations/rebalance", &b), 200);
  CHECK_STR(b.text, "{\"noticeTime\":\"2026-11-22T13:50:00Z\"}");

  /* Many tokens: older ones give way, the newest always works. */
  char last[64];
  for (int i = 0; i < 40; i++)
    CHECK_INT(get_token(base, last), 200);
  CHECK_INT(get_meta(base, last, "instance-id", &b), 200);

  /* A second endpoint cannot take a port in use. */
  struct gw_imds *m2 = NULL;
  CHECK(gw_imds_new("i-0123456789ac", "g5.xlarge", "local-1a", gw_imds_port(m), &m2) < 0);
  CHECK(gw_imds_new("i-x", "t", "z", 70000, &m2) < 0);
  m = gw_imds_free(m);
  CHECK(m == NULL);
  CHECK_INT(http("GET", url, NULL, NULL, &b), -1);  /* stopped: connection refused */
  curl_global_cleanup();
  TEST_MAIN_END();
}
