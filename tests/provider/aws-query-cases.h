/* The EC2 requests the query tests build: test-aws-query.c compares their
 * bodies with the request files in tests/data/ec2, and aws-query-dump prints them for
 * test_aws_query_botocore.py, which builds the same requests with botocore.
 * A change here needs the same change in that script. */
#ifndef TESTS_AWS_QUERY_CASES_H
#define TESTS_AWS_QUERY_CASES_H

#include "aws_query.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define CASE_TIME_UNIX 1795497502   /* 2026-11-24T05:18:22Z */

static const char *case_groups[] = {"sg-0123456789abcdef0", "sg-0fedcba9876543210"};

/* A spot launch with every option spotlab sets, and a tag of odd characters. */
static __attribute__((unused)) struct aws_run_req case_run_full(void) {
  struct aws_run_req r = {
    .image_id = "resolve:ssm:/aws/service/deeplearning/ami/x86_64/"
                "base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id",
    .instance_type = "g5.xlarge",
    .zone = "us-east-1b",
    .subnet_id = "subnet-0123456789abcdef0",
    .security_group_ids = case_groups,
    .n_security_groups = 2,
    .iam_instance_profile = "spotlab-worker",
    .key_name = "ops key",
    .spot = true,
    .max_price_usd_per_hour = 0.5,
    .user_data = "#!/bin/sh\nexec spotlab-worker --boot /run/spotlab/boot.json\n",
    .client_token = "J000042-a3-7f3e",
    .tags = {{"spotlab:gateway", "gw-5e6f7a8b"}, {"spotlab:instance", "aws-0042-3"},
             {"spotlab:job", "42"}, {"owner name", "Zo\xc3\xab & co/+=~%*'()!"}},
    .n_tags = 4,
  };
  return r;
}

/* An on-demand dry run with an instance profile by ARN and nothing else. */
static __attribute__((unused)) struct aws_run_req case_run_small(void) {
  struct aws_run_req r = {
    .image_id = "ami-0c1d2e3f4a5b6c7d8",
    .instance_type = "t3.micro",
    .iam_instance_profile = "arn:aws:iam::111122223333:instance-profile/spotlab-worker",
    .dry_run = true,
  };
  return r;
}

/* Builds case name into *ret: 0, or -ENOENT for no such case. */
static __attribute__((unused)) int case_build(const char *name, struct aws_query **ret) {
  static const char *const ids[] = {"i-0a1b2c3d4e5f60718", "i-0b2c3d4e5f6071829"};
  static const char *const types[] = {"g5.xlarge", "g4dn.xlarge", "p3.2xlarge"};
  if (!strcmp(name, "run-full")) {
    struct aws_run_req r = case_run_full();
    return aws_query_run(&r, ret);
  }
  if (!strcmp(name, "run-small")) {
    struct aws_run_req r = case_run_small();
    return aws_query_run(&r, ret);
  }
  if (!strcmp(name, "terminate"))
    return aws_query_terminate(ids, 2, false, ret);
  if (!strcmp(name, "describe-tag"))
    return aws_query_describe("spotlab:gateway", "gw-5e6f7a8b", NULL, 0, "page/2+=", false, ret);
  if (!strcmp(name, "describe-key"))
    return aws_query_describe("spotlab:gateway", NULL, NULL, 0, NULL, false, ret);
  if (!strcmp(name, "describe-ids"))
    return aws_query_describe(NULL, NULL, ids, 2, NULL, false, ret);
  if (!strcmp(name, "spot-prices"))
    return aws_query_spot_prices(types, 2, CASE_TIME_UNIX, NULL, false, ret);
  if (!strcmp(name, "scores"))
    return aws_query_placement_scores(types, 3, 2, "us-east-1", NULL, false, ret);
  if (!strncmp(name, "dry-", 4))
    return aws_query_dry_run(name + 4, "us-east-1", CASE_TIME_UNIX, ret);
  return -ENOENT;
}

static __attribute__((unused)) const char *const case_names[] = {
  "run-full", "run-small", "terminate", "describe-tag", "describe-key", "describe-ids",
  "spot-prices", "scores", "dry-RunInstances", "dry-TerminateInstances",
  "dry-DescribeInstances", "dry-CreateTags", "dry-DescribeSpotPriceHistory",
  "dry-GetSpotPlacementScores", NULL,
};

#endif
