/* EC2 request bodies (aws_query): the exact bodies of a launch and a
 * describe page against tests/data/ec2, the encoding of characters outside
 * the unreserved set, numbered lists, and the requests refused before
 * anything is sent. Argument: the data folder. */
#include "aws-query-cases.h"
#include "harness.h"
#include "sl_err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *data_dir;

static char *load(const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", data_dir, name);
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    return NULL;
  }
  char *buf = calloc(1, 65536);
  if (buf)
    (void)fread(buf, 1, 65535, f);
  fclose(f);
  return buf;
}

/* The body of a built query, or "" when it failed. */
static const char *body_of(const struct aws_query *q) {
  const char *b;
  size_t n;
  return q && aws_query_body(q, &b, &n) == 0 && strlen(b) == n ? b : "";
}

static void test_expected_bodies(void) {
  static const struct {
    const char *name, *file;
  } cases[] = {{"run-full", "run-instances-request.txt"},
               {"describe-tag", "describe-instances-request.txt"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct aws_query *q = NULL;
    char *want = load(cases[i].file);
    CHECK_INT(case_build(cases[i].name, &q), 0);
    CHECK_STR(body_of(q), want ? want : "(missing)");
    aws_query_free(q);
    free(want);
  }
}

static void test_encoding(void) {
  struct aws_query *q = aws_query_new("CreateTags");
  aws_query_add(q, "Tag.1.Key", "a b+c/d=e&f~g_h-i.j");
  aws_query_add(q, "Tag.1.Value", "\xc3\xa9\x01\x7f%");
  aws_query_add(q, "Tag.2.Value", "");
  aws_query_add(q, "Tag.3.Value", NULL);
  aws_query_addf(q, "v", "Filter.%zu.Value.%zu", (size_t)3, (size_t)12);
  CHECK_STR(body_of(q), "Action=CreateTags&Version=2016-11-15"
                        "&Tag.1.Key=a%20b%2Bc%2Fd%3De%26f~g_h-i.j"
                        "&Tag.1.Value=%C3%A9%01%7F%25"
                        "&Tag.2.Value=&Tag.3.Value="
                        "&Filter.3.Value.12=v");
  aws_query_free(q);
}

static void test_lists(void) {
  const char *ids[12];
  char names[12][24];
  for (int i = 0; i < 12; i++) {
    snprintf(names[i], sizeof names[i], "i-%017d", i);
    ids[i] = names[i];
  }
  struct aws_query *q = NULL;
  CHECK_INT(aws_query_terminate(ids, 12, false, &q), 0);
  const char *b = body_of(q);
  CHECK(strstr(b, "&InstanceId.1=i-00000000000000000&InstanceId.2=") != NULL);
  CHECK(strstr(b, "&InstanceId.10=i-00000000000000009&InstanceId.11=i-00000000000000010"
                  "&InstanceId.12=i-00000000000000011") != NULL);
  CHECK(strstr(b, "DryRun") == NULL);
  aws_query_free(q);

  /* No spot options on an on-demand launch; MaxPrice only when capped. */
  struct aws_run_req r = case_run_full();
  r.spot = false;
  CHECK_INT(aws_query_run(&r, &q), 0);
  CHECK(strstr(body_of(q), "InstanceMarketOptions") == NULL);
  aws_query_free(q);
  r.spot = true;
  r.max_price_usd_per_hour = 0;
  CHECK_INT(aws_query_run(&r, &q), 0);
  CHECK(strstr(body_of(q), "InstanceMarketOptions.MarketType=spot") != NULL);
  CHECK(strstr(body_of(q), "MaxPrice") == NULL);
  aws_query_free(q);
  r = case_run_small();
  CHECK_INT(aws_query_run(&r, &q), 0);
  CHECK(strstr(body_of(q), "&IamInstanceProfile.Arn=arn%3Aaws%3Aiam%3A%3A111122223333%3A"
                           "instance-profile%2Fspotlab-worker&") != NULL);
  CHECK(strstr(body_of(q), "TagSpecification") == NULL);
  CHECK(strstr(body_of(q), "&DryRun=true") != NULL);
  aws_query_free(q);
}

static void test_refused(void) {
  struct aws_query *q = (void *)1;
  struct aws_run_req r = case_run_full();
  r.image_id = "";
  CHECK_INT(aws_query_run(&r, &q), -EINVAL);
  r = case_run_full();
  r.instance_type = NULL;
  CHECK_INT(aws_query_run(&r, &q), -EINVAL);
  r = case_run_full();
  r.client_token = "0123456789012345678901234567890123456789012345678901234567890123X";
  CHECK_INT(aws_query_run(&r, &q), -EINVAL);
  r = case_run_full();
  r.n_tags = AWS_TAGS_MAX + 1;
  CHECK_INT(aws_query_run(&r, &q), -EINVAL);
  r = case_run_full();
  r.tags[1].key = "";
  CHECK_INT(aws_query_run(&r, &q), -EINVAL);
  r = case_run_full();
  r.max_price_usd_per_hour = -1;
  CHECK_INT(aws_query_run(&r, &q), -EINVAL);

  /* User data: 16 KiB passes, one byte more does not. */
  char *ud = malloc(AWS_USER_DATA_MAX_BYTES + 2);
  memset(ud, 'x', AWS_USER_DATA_MAX_BYTES);
  ud[AWS_USER_DATA_MAX_BYTES] = '\0';
  r = case_run_full();
  r.user_data = ud;
  CHECK_INT(aws_query_run(&r, &q), 0);
  aws_query_free(q);
  ud[AWS_USER_DATA_MAX_BYTES] = 'x';
  ud[AWS_USER_DATA_MAX_BYTES + 1] = '\0';
  q = (void *)1;
  CHECK_INT(aws_query_run(&r, &q), SL_ELIMIT);
  CHECK(q == (void *)1);
  free(ud);

  const char *types[] = {"a", "b", "c"};
  CHECK_INT(aws_query_placement_scores(types, 2, 1, "us-east-1", NULL, false, &q), -EINVAL);
  CHECK_INT(aws_query_placement_scores(types, 3, 0, "us-east-1", NULL, false, &q), -EINVAL);
  CHECK_INT(aws_query_spot_prices(types, 0, 0, NULL, false, &q), -EINVAL);
  CHECK_INT(aws_query_terminate(types, 0, false, &q), -EINVAL);
  CHECK_INT(aws_query_dry_run("DeleteVpc", "us-east-1", 0, &q), -EINVAL);
  CHECK_INT(aws_query_dry_run(NULL, "us-east-1", 0, &q), -EINVAL);

  /* The body cap: additions past it stick as SL_ELIMIT. */
  struct aws_query *big = aws_query_new("CreateTags");
  char value[4096];
  memset(value, 'v', sizeof value - 1);
  value[sizeof value - 1] = '\0';
  for (int i = 0; i < (AWS_QUERY_MAX_BYTES / 4096) + 2; i++)
    aws_query_addf(big, value, "Tag.%d.Value", i + 1);
  const char *b;
  size_t n;
  CHECK_INT(aws_query_body(big, &b, &n), SL_ELIMIT);
  aws_query_free(big);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s DATA_DIR\n", argv[0]);
    return 2;
  }
  data_dir = argv[1];
  test_expected_bodies();
  test_encoding();
  test_lists();
  test_refused();
  for (size_t i = 0; case_names[i]; i++) {
    struct aws_query *q = NULL;
    CHECK_INT(case_build(case_names[i], &q), 0);
    aws_query_free(q);
  }
  TEST_MAIN_END();
}
