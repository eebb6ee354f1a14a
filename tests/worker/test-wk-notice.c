/* Notice replies (good, malformed, wrong types) and request building. */
#include "harness.h"

#include <errno.h>

#include "notice.h"
#include "sl_err.h"

#define NOW INT64_C(1700000000000000)

static int aws(const char *body, struct wk_notice *n) {
  return wk_notice_parse_aws_action(body, strlen(body), NOW, n);
}

static void test_aws_action(void) {
  struct wk_notice n;
  CHECK_INT(aws("{\"action\":\"terminate\",\"time\":\"2026-11-22T10:00:00Z\"}", &n), 1);
  CHECK_STR(n.action, "terminate");
  CHECK_INT(n.deadline_us, INT64_C(1795341600) * 1000000);
  CHECK_INT(aws("{\"action\":\"stop\",\"time\":\"2026-11-22T10:00:00.250Z\"}", &n), 1);
  CHECK_INT(n.deadline_us, INT64_C(1795341600) * 1000000 + 250000);
  CHECK_INT(aws("{\"action\":\"hibernate\"}", &n), 1);
  CHECK_INT(n.deadline_us, NOW + WK_NOTICE_AWS_LEAD_US);
  /* an unreadable time still counts as a notice, with the standard lead */
  CHECK_INT(aws("{\"action\":\"terminate\",\"time\":\"tomorrow\"}", &n), 1);
  CHECK_INT(n.deadline_us, NOW + WK_NOTICE_AWS_LEAD_US);
  memset(&n, 0x33, sizeof n);
  CHECK_INT(aws("{\"action\":\"terminate\",", &n), SL_EJSON);
  CHECK_INT(aws("", &n), SL_EJSON);
  CHECK_INT(aws("[\"terminate\"]", &n), SL_ETYPE);
  CHECK_INT(aws("{\"action\":7}", &n), SL_ETYPE);
  CHECK_INT(aws("{\"action\":\"terminate\",\"time\":1700000000}", &n), SL_ETYPE);
  CHECK_INT(aws("{\"time\":\"2026-11-22T10:00:00Z\"}", &n), SL_ETYPE);
  CHECK_INT(aws("{\"action\":\"reboot\"}", &n), SL_ECONFIG);
  CHECK_INT(n.deadline_us, 0x3333333333333333); /* untouched on failure */
}

static void test_rebalance_gcp(void) {
  struct wk_notice n;
  const char *good = "{\"noticeTime\":\"2026-11-22T10:00:00Z\"}";
  CHECK_INT(wk_notice_parse_aws_rebalance(good, strlen(good), NOW, &n), 1);
  CHECK_STR(n.action, "rebalance");
  CHECK_INT(wk_notice_parse_aws_rebalance("{\"noticeTime\":5}", 16, NOW, &n), SL_ETYPE);
  CHECK_INT(wk_notice_parse_aws_rebalance("nope", 4, NOW, &n), SL_EJSON);
  CHECK_INT(wk_notice_parse_gcp("TRUE", 4, NOW, &n), 1);
  CHECK_STR(n.action, "preempted");
  CHECK_INT(n.deadline_us, NOW + WK_NOTICE_GCP_LEAD_US);
  CHECK_INT(wk_notice_parse_gcp("FALSE\n", 6, NOW, &n), 0);
  CHECK_INT(wk_notice_parse_gcp("MAYBE", 5, NOW, &n), SL_EJSON);
  int64_t t;
  CHECK_INT(wk_notice_parse_time("2026-11-22T10:00:00+00:00", &t), 0);
  CHECK_INT(wk_notice_parse_time("2026-13-22T10:00:00Z", &t), -EINVAL);
  CHECK_INT(wk_notice_parse_time("2026-11-22T10:00:00", &t), -EINVAL);
  CHECK_INT(wk_notice_parse_time("2026-11-22T10:00:00Zjunk", &t), -EINVAL);
}

static void test_requests(void) {
  struct wk_notice_req q;
  CHECK_INT(wk_notice_build(WK_REQ_AWS_TOKEN, "http://169.254.169.254/", NULL, 500, &q), 0);
  CHECK_STR(q.http.method, "PUT");
  CHECK_STR(q.http.url, "http://169.254.169.254/latest/api/token");
  CHECK_STR(q.http.headers[0], "X-aws-ec2-metadata-token-ttl-seconds: 21600");
  CHECK(q.http.headers[1] == NULL);
  CHECK_INT(q.http.timeout_ms, 500);
  CHECK_INT(wk_notice_build(WK_REQ_AWS_ACTION, "http://169.254.169.254", "TOKEN", 500, &q), 0);
  CHECK_STR(q.http.method, "GET");
  CHECK_STR(q.http.url, "http://169.254.169.254/latest/meta-data/spot/instance-action");
  CHECK_STR(q.http.headers[0], "X-aws-ec2-metadata-token: TOKEN");
  CHECK_INT(wk_notice_build(WK_REQ_AWS_REBALANCE, "http://h:1", "T", 500, &q), 0);
  CHECK_STR(q.http.url, "http://h:1/latest/meta-data/events/recommendations/rebalance");
  CHECK_INT(wk_notice_build(WK_REQ_GCP_PREEMPTED, "http://metadata.google.internal", NULL, 500, &q), 0);
  CHECK_STR(q.http.url, "http://metadata.google.internal/computeMetadata/v1/instance/preempted");
  CHECK_STR(q.http.headers[0], "Metadata-Flavor: Google");
  char huge[600];
  memset(huge, 'a', sizeof huge - 1);
  huge[sizeof huge - 1] = 0;
  CHECK_INT(wk_notice_build(WK_REQ_AWS_ACTION, huge, "T", 500, &q), SL_ELIMIT);
  CHECK_INT(wk_notice_build(WK_REQ_AWS_ACTION, "http://h", huge, 500, &q), SL_ELIMIT);
}

int main(void) {
  test_aws_action();
  test_rebalance_gcp();
  test_requests();
  TEST_MAIN_END();
}
