/* EC2's replies read by aws_xml: recorded replies in tests/data/ec2 (one
 * per action, in EC2's documented shapes, one with a namespace prefix),
 * the error form, malformed and hostile XML, the size cap, and the table
 * that maps EC2's error codes to sl_ errors. Argument: the data folder. */
#include "aws_ec2.h"
#include "aws_xml.h"
#include "harness.h"
#include "sl_err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *data_dir;

/* The file's bytes (owned, NUL-terminated) or NULL. */
static char *load(const char *name, size_t *len) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", data_dir, name);
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    return NULL;
  }
  char *buf = malloc(1 << 20);
  size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
  fclose(f);
  if (buf)
    buf[n] = '\0';
  *len = n;
  return buf;
}

static void test_run_instances(void) {
  size_t len, n = 99;
  char *xml = load("run-instances.xml", &len);
  struct aws_instance *arr = NULL;
  char next[AWS_NEXT_TOKEN_MAX] = "x";
  CHECK(xml != NULL);
  CHECK_INT(aws_xml_instances(xml, len, &arr, &n, next), 0);
  CHECK_INT(n, 1);
  CHECK_STR(next, "");
  if (n == 1) {
    CHECK_STR(arr[0].id, "i-0a1b2c3d4e5f60718");
    CHECK_STR(arr[0].type, "g5.xlarge");
    CHECK_STR(arr[0].zone, "us-east-1b");
    CHECK_STR(arr[0].state, "pending");
    CHECK(arr[0].spot);
    CHECK_INT(arr[0].launch_time_unix, 1795497502);  /* 2026-11-24T05:18:22Z */
    /* The instance's address, not its network interface's. */
    CHECK_STR(arr[0].private_ip, "10.0.1.23");
    CHECK_STR(arr[0].public_ip, "");
    CHECK_STR(arr[0].tag_spotlab_gateway, "gw-5e6f7a8b");
    CHECK_STR(arr[0].tag_spotlab_instance, "aws-0042-3");
    CHECK_STR(arr[0].tag_spotlab_job, "42");
    CHECK_STR(arr[0].state_reason, "pending");
  }
  free(arr);
  free(xml);
}

static void test_describe_pages(void) {
  size_t len, n = 0;
  char *xml = load("describe-instances-page1.xml", &len);
  struct aws_instance *arr = NULL;
  char next[AWS_NEXT_TOKEN_MAX];
  CHECK_INT(aws_xml_instances(xml, len, &arr, &n, next), 0);
  CHECK_INT(n, 2);
  CHECK_STR(next, "eyJ2IjoiMiIsImMiOiJwYWdlLTIifQ==");
  if (n == 2) {
    CHECK_STR(arr[0].state, "running");
    CHECK_STR(arr[0].public_ip, "198.51.100.17");
    CHECK_STR(arr[0].private_ip, "10.0.1.23");
    CHECK_STR(arr[0].tag_spotlab_job, "42");
    CHECK_STR(arr[0].tag_spotlab_instance, "aws-0042-3");
    CHECK_STR(arr[1].id, "i-0b2c3d4e5f6071829");
    CHECK_STR(arr[1].type, "g4dn.xlarge");
    CHECK(!arr[1].spot);
    CHECK_INT(arr[1].launch_time_unix, 1795500005);  /* 06:00:05Z, no fraction */
    CHECK_STR(arr[1].tag_spotlab_job, "43");
    CHECK_STR(arr[1].state_reason, "");
  }
  free(arr);
  free(xml);

  /* The last page: a namespace prefix on every element, no nextToken, a
   * spot instance the market took back, a time with an offset. */
  xml = load("describe-instances-page2.xml", &len);
  arr = NULL;
  strcpy(next, "stale");
  CHECK_INT(aws_xml_instances(xml, len, &arr, &n, next), 0);
  CHECK_INT(n, 1);
  CHECK_STR(next, "");
  if (n == 1) {
    CHECK_STR(arr[0].id, "i-0c3d4e5f60718293a");
    CHECK_STR(arr[0].state, "terminated");
    CHECK_STR(arr[0].state_reason, "Server.SpotInstanceTermination");
    CHECK(arr[0].spot);
    CHECK_INT(arr[0].launch_time_unix, 1795466469);  /* 22:41:09+02:00 */
    CHECK_STR(arr[0].tag_spotlab_gateway, "gw-5e6f7a8b");
    CHECK_STR(arr[0].tag_spotlab_job, "");
  }
  free(arr);
  free(xml);

  xml = load("describe-instances-empty.xml", &len);
  arr = (void *)1;
  CHECK_INT(aws_xml_instances(xml, len, &arr, &n, NULL), 0);
  CHECK_INT(n, 0);
  CHECK(arr == NULL);
  free(xml);
}

static void test_spot_prices(void) {
  size_t len, n = 0;
  char *xml = load("spot-price-history.xml", &len);
  struct aws_spot_price *p = NULL;
  char next[AWS_NEXT_TOKEN_MAX] = "x";
  CHECK_INT(aws_xml_spot_prices(xml, len, &p, &n, next), 0);
  CHECK_INT(n, 3);
  CHECK_STR(next, "");
  if (n == 3) {
    CHECK_STR(p[0].type, "g5.xlarge");
    CHECK_STR(p[0].zone, "us-east-1b");
    CHECK_NEAR(p[0].usd_per_hour, 0.4024, 1e-9);
    CHECK_INT(p[0].time_unix, 1795496233);
    CHECK_STR(p[2].type, "g4dn.xlarge");
    CHECK_NEAR(p[2].usd_per_hour, 0.2158, 1e-9);
  }
  free(p);
  free(xml);
}

static void test_scores(void) {
  size_t len, n = 0;
  char *xml = load("spot-placement-scores.xml", &len);
  struct aws_placement_score *s = NULL;
  CHECK_INT(aws_xml_placement_scores(xml, len, &s, &n, NULL), 0);
  CHECK_INT(n, 3);
  if (n == 3) {
    CHECK_STR(s[0].region, "us-east-1");
    CHECK_STR(s[0].zone_id, "use1-az4");
    CHECK_STR(s[0].zone, "");
    CHECK_INT(s[0].score, 9);
    CHECK_INT(s[2].score, 1);
  }
  free(s);
  free(xml);
}

static void test_terminate(void) {
  size_t len, n = 0;
  char *xml = load("terminate-instances.xml", &len);
  struct aws_state_change *c = NULL;
  CHECK_INT(aws_xml_state_changes(xml, len, &c, &n), 0);
  CHECK_INT(n, 1);
  if (n == 1) {
    CHECK_STR(c[0].id, "i-0a1b2c3d4e5f60718");
    CHECK_STR(c[0].current, "shutting-down");
    CHECK_STR(c[0].previous, "running");
  }
  free(c);
  free(xml);
}

static void test_errors(void) {
  static const struct {
    const char *file, *code;
    int mapped;
  } cases[] = {
    {"error-insufficient-capacity.xml", "InsufficientInstanceCapacity", -EAGAIN},
    {"error-request-limit.xml", "RequestLimitExceeded", -EBUSY},
    {"error-unauthorized.xml", "UnauthorizedOperation", SL_EAUTH},
    {"error-dry-run.xml", "DryRunOperation", 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t len;
    char *xml = load(cases[i].file, &len);
    struct aws_ec2_error e = {.http_status = 503};
    CHECK_INT(aws_xml_error(xml, len, &e), 0);
    CHECK_STR(e.code, cases[i].code);
    CHECK_STR(e.request_id, "4f5a6b7c-8d9e-4f0a-9b1c-2d3e4f5a6b7c");
    CHECK(e.message[0] != '\0');
    CHECK_INT(e.http_status, 503);   /* untouched */
    CHECK_INT(aws_ec2_error_to_sl(e.code), cases[i].mapped);
    /* A success reply is not an error form, and an error is no instance list. */
    struct aws_instance *arr = NULL;
    size_t n;
    CHECK_INT(aws_xml_instances(xml, len, &arr, &n, NULL), SL_EPARSE);
    free(xml);
  }
  size_t len;
  char *xml = load("run-instances.xml", &len);
  struct aws_ec2_error e = {0};
  CHECK_INT(aws_xml_error(xml, len, &e), SL_EPARSE);
  free(xml);
  /* The long message is cut to fit, never overflowing. */
  xml = load("error-insufficient-capacity.xml", &len);
  CHECK_INT(aws_xml_error(xml, len, &e), 0);
  CHECK(strlen(e.message) < sizeof e.message && strlen(e.message) > sizeof e.message - 8);
  free(xml);
  const char *other = "<ErrorResponse><Error><Code>Throttling</Code><Message>Rate exceeded"
                      "</Message></Error><RequestId>abc</RequestId></ErrorResponse>";
  CHECK_INT(aws_xml_error(other, strlen(other), &e), 0);
  CHECK_STR(e.code, "Throttling");
  CHECK_STR(e.request_id, "abc");
  const char *no_code = "<Response><Errors><Error><Message>m</Message></Error></Errors></Response>";
  CHECK_INT(aws_xml_error(no_code, strlen(no_code), &e), SL_EPARSE);
}

static void test_error_table(void) {
  static const struct {
    const char *code;
    int err;
  } table[] = {
    {"InsufficientInstanceCapacity", -EAGAIN}, {"InsufficientCapacity", -EAGAIN},
    {"InsufficientHostCapacity", -EAGAIN}, {"InsufficientReservedInstanceCapacity", -EAGAIN},
    {"SpotMaxPriceTooLow", -EAGAIN}, {"MaxSpotInstanceCountExceeded", -EAGAIN},
    {"InstanceLimitExceeded", -EAGAIN}, {"VcpuLimitExceeded", -EAGAIN}, {"Unsupported", -EAGAIN},
    {"RequestLimitExceeded", -EBUSY}, {"Throttling", -EBUSY}, {"InternalError", -EBUSY},
    {"ServiceUnavailable", -EBUSY},
    {"AuthFailure", SL_EAUTH}, {"ExpiredToken", SL_EAUTH}, {"RequestExpired", SL_EAUTH},
    {"SignatureDoesNotMatch", SL_EAUTH}, {"UnauthorizedOperation", SL_EAUTH},
    {"OptInRequired", SL_EAUTH}, {"InvalidClientTokenId", SL_EAUTH},
    {"DryRunOperation", 0},
    {"InvalidParameterValue", -EINVAL}, {"InvalidParameterCombination", -EINVAL},
    {"InvalidParameter", -EINVAL}, {"InvalidInstanceID.Malformed", -EINVAL},
    {"InvalidSubnetID.Malformed", -EINVAL}, {"MissingParameter", -EINVAL},
    {"InvalidAMIID.NotFound", -EINVAL}, {"InvalidAMIID.Unavailable", -EINVAL},
    {"InvalidInstanceID.NotFound", -ENOENT}, {"InvalidSubnetID.NotFound", -ENOENT},
    {"InvalidGroup.NotFound", -ENOENT},
    {"IdempotentParameterMismatch", SL_ENOTSUP}, {"", SL_ENOTSUP}, {NULL, SL_ENOTSUP},
    {"insufficientinstancecapacity", SL_ENOTSUP}, {"Invalid", SL_ENOTSUP},
    {"InvalidInstanceID", SL_ENOTSUP}, {"UnauthorizedOperationX", SL_ENOTSUP},
  };
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    int got = aws_ec2_error_to_sl(table[i].code);
    if (got != table[i].err)
      fprintf(stderr, "code %s\n", table[i].code ? table[i].code : "(null)");
    CHECK_INT(got, table[i].err);
  }
}

static void test_malformed(void) {
  static const char *const files[] = {"malformed-truncated.xml", "malformed-entities.xml",
                                      "malformed-external.xml"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    size_t len, n;
    char *xml = load(files[i], &len);
    struct aws_instance *arr = NULL;
    struct aws_ec2_error e = {0};
    CHECK(xml != NULL);
    CHECK_INT(aws_xml_instances(xml, len, &arr, &n, NULL), SL_EPARSE);
    CHECK_INT(aws_xml_error(xml, len, &e), SL_EPARSE);
    CHECK_STR(e.code, "");
    free(xml);
  }
  static const char *const bad[] = {
    "", "not xml", "<", "<a>", "<?xml version=\"1.0\"?>",
    "<DescribeInstancesResponse><reservationSet><item><instancesSet><item>"
    "<instanceType>t3.micro</instanceType></item></instancesSet></item></reservationSet>"
    "</DescribeInstancesResponse>",                    /* an instance without an id */
    "<RunInstancesResponse><instancesSet><item><instanceId>i-1</instanceId>"
    "<launchTime>yesterday</launchTime></item></instancesSet></RunInstancesResponse>",
    "<RunInstancesResponse><instancesSet><item><instanceId>i-1</instanceId>"
    "<launchTime>2026-13-01T00:00:00Z</launchTime></item></instancesSet></RunInstancesResponse>",
    "<OtherResponse><instancesSet/></OtherResponse>",  /* not the action's reply */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct aws_instance *arr = NULL;
    size_t n;
    CHECK_INT(aws_xml_instances(bad[i], strlen(bad[i]), &arr, &n, NULL), SL_EPARSE);
  }
  CHECK_INT(aws_xml_instances(NULL, 0, NULL, NULL, NULL), SL_EPARSE);

  /* An id longer than its field refuses the reply rather than cutting it. */
  char longid[512];
  snprintf(longid, sizeof longid,
           "<RunInstancesResponse><instancesSet><item><instanceId>i-%0200d</instanceId>"
           "</item></instancesSet></RunInstancesResponse>", 7);
  struct aws_instance *arr = NULL;
  size_t n;
  CHECK_INT(aws_xml_instances(longid, strlen(longid), &arr, &n, NULL), SL_EPARSE);

  /* A spotlab tag too long to be spotlab's leaves the instance untagged. */
  char longtag[512];
  snprintf(longtag, sizeof longtag,
           "<RunInstancesResponse><instancesSet><item><instanceId>i-1</instanceId><tagSet>"
           "<item><key>spotlab:gateway</key><value>gw-%0100d</value></item></tagSet>"
           "</item></instancesSet></RunInstancesResponse>", 1);
  CHECK_INT(aws_xml_instances(longtag, strlen(longtag), &arr, &n, NULL), 0);
  CHECK_INT(n, 1);
  if (n == 1)
    CHECK_STR(arr[0].tag_spotlab_gateway, "");
  free(arr);

  static const char *const bad_prices[] = {
    "<DescribeSpotPriceHistoryResponse><spotPriceHistorySet><item><instanceType>g5.xlarge"
    "</instanceType><spotPrice>cheap</spotPrice><timestamp>2026-11-24T04:57:13Z</timestamp>"
    "</item></spotPriceHistorySet></DescribeSpotPriceHistoryResponse>",
    "<DescribeSpotPriceHistoryResponse><spotPriceHistorySet><item><instanceType>g5.xlarge"
    "</instanceType><spotPrice>-1</spotPrice><timestamp>2026-11-24T04:57:13Z</timestamp>"
    "</item></spotPriceHistorySet></DescribeSpotPriceHistoryResponse>",
    "<DescribeSpotPriceHistoryResponse><spotPriceHistorySet><item><instanceType>g5.xlarge"
    "</instanceType><spotPrice>0.4</spotPrice></item></spotPriceHistorySet>"
    "</DescribeSpotPriceHistoryResponse>",
  };
  for (size_t i = 0; i < sizeof bad_prices / sizeof bad_prices[0]; i++) {
    struct aws_spot_price *p = NULL;
    CHECK_INT(aws_xml_spot_prices(bad_prices[i], strlen(bad_prices[i]), &p, &n, NULL), SL_EPARSE);
  }
  const char *bad_score = "<GetSpotPlacementScoresResponse><spotPlacementScoreSet><item>"
                          "<region>us-east-1</region><score>11</score></item>"
                          "</spotPlacementScoreSet></GetSpotPlacementScoresResponse>";
  struct aws_placement_score *s = NULL;
  CHECK_INT(aws_xml_placement_scores(bad_score, strlen(bad_score), &s, &n, NULL), SL_EPARSE);
}

static void test_limits(void) {
  /* Over the byte cap: refused before parsing. */
  size_t big = AWS_XML_MAX_BYTES + 1;
  char *xml = malloc(big + 1);
  const char *head = "<DescribeInstancesResponse><reservationSet>";
  memset(xml, ' ', big);
  memcpy(xml, head, strlen(head));
  xml[big] = '\0';
  struct aws_instance *arr = NULL;
  size_t n;
  struct aws_ec2_error e;
  CHECK_INT(aws_xml_instances(xml, big, &arr, &n, NULL), SL_ELIMIT);
  CHECK_INT(aws_xml_error(xml, big, &e), SL_ELIMIT);
  free(xml);

  /* Under the byte cap but with more items than allowed. */
  const char *item = "<item><instanceId>i-1</instanceId></item>";
  size_t k = AWS_XML_MAX_ITEMS + 1, cap = k * strlen(item) + 256;
  xml = malloc(cap);
  size_t len = (size_t)sprintf(xml, "<RunInstancesResponse><instancesSet>");
  for (size_t i = 0; i < k; i++)
    len += (size_t)sprintf(xml + len, "%s", item);
  len += (size_t)sprintf(xml + len, "</instancesSet></RunInstancesResponse>");
  CHECK(len <= AWS_XML_MAX_BYTES);
  CHECK_INT(aws_xml_instances(xml, len, &arr, &n, NULL), SL_ELIMIT);
  free(xml);

  /* A nextToken longer than its buffer. */
  char tok[AWS_NEXT_TOKEN_MAX + 200];
  len = (size_t)sprintf(tok, "<DescribeInstancesResponse><reservationSet/><nextToken>");
  memset(tok + len, 'a', AWS_NEXT_TOKEN_MAX);
  len += AWS_NEXT_TOKEN_MAX;
  len += (size_t)sprintf(tok + len, "</nextToken></DescribeInstancesResponse>");
  char next[AWS_NEXT_TOKEN_MAX];
  CHECK_INT(aws_xml_instances(tok, len, &arr, &n, next), SL_EPARSE);
}

static void test_time(void) {
  int64_t t = -1;
  CHECK_INT(aws_xml_parse_time("1970-01-01T00:00:00Z", &t), 0);
  CHECK_INT(t, 0);
  CHECK_INT(aws_xml_parse_time("2026-11-24T05:18:22.123456Z", &t), 0);
  CHECK_INT(t, 1795497502);
  CHECK_INT(aws_xml_parse_time("2026-11-24T07:18:22+02:00", &t), 0);
  CHECK_INT(t, 1795497502);
  CHECK_INT(aws_xml_parse_time("2026-11-24T03:18:22-02:00", &t), 0);
  CHECK_INT(t, 1795497502);
  static const char *const bad[] = {"", "2026-11-24", "2026-11-24T05:18:22", "2026-11-24 05:18:22Z",
                                    "2026-11-24T05:18:22.Z", "2026-11-24T25:00:00Z",
                                    "2026-11-24T05:18:22Zjunk", "2026-11-24T05:18:22+0200",
                                    "1969-12-31T23:59:59Z"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    CHECK_INT(aws_xml_parse_time(bad[i], &t), SL_EPARSE);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s DATA_DIR\n", argv[0]);
    return 2;
  }
  data_dir = argv[1];
  test_run_instances();
  test_describe_pages();
  test_spot_prices();
  test_scores();
  test_terminate();
  test_errors();
  test_error_table();
  test_malformed();
  test_limits();
  test_time();
  TEST_MAIN_END();
}
