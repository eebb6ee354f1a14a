/* EC2 Query API bodies (see aws_query.h). A query is one growing buffer;
 * every pair is appended encoded, so the buffer is always a valid body.
 * The first failed addition sticks in `err` and later additions are
 * ignored, which keeps the builders free of per-line checks. */
#include "aws_query.h"

#include <errno.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sl_err.h"

struct aws_query {
  char *buf;
  size_t len, cap;
  int err;
};

static void grow(struct aws_query *q, size_t more) {
  if (q->err)
    return;
  if (q->len + more + 1 > AWS_QUERY_MAX_BYTES) {
    q->err = SL_ELIMIT;
    return;
  }
  if (q->len + more + 1 <= q->cap)
    return;
  size_t cap = q->cap ? q->cap : 256;
  while (cap < q->len + more + 1)
    cap *= 2;
  char *b = realloc(q->buf, cap);
  if (!b) {
    q->err = -ENOMEM;
    return;
  }
  q->buf = b;
  q->cap = cap;
}

static bool unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
         c == '-' || c == '_' || c == '.' || c == '~';
}

static void put_encoded(struct aws_query *q, const char *s) {
  static const char hex[] = "0123456789ABCDEF";
  size_t n = strlen(s);
  grow(q, 3 * n);
  if (q->err)
    return;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (unreserved(*p)) {
      q->buf[q->len++] = (char)*p;
    } else {
      q->buf[q->len++] = '%';
      q->buf[q->len++] = hex[*p >> 4];
      q->buf[q->len++] = hex[*p & 15];
    }
  }
  q->buf[q->len] = '\0';
}

static void put_char(struct aws_query *q, char c) {
  grow(q, 1);
  if (q->err)
    return;
  q->buf[q->len++] = c;
  q->buf[q->len] = '\0';
}

void aws_query_add(struct aws_query *q, const char *name, const char *value) {
  if (q->len)
    put_char(q, '&');
  put_encoded(q, name);
  put_char(q, '=');
  put_encoded(q, value ? value : "");
}

void aws_query_addf(struct aws_query *q, const char *value, const char *name_fmt, ...) {
  char name[128];
  va_list ap;
  va_start(ap, name_fmt);
  int k = vsnprintf(name, sizeof name, name_fmt, ap);
  va_end(ap);
  if (k < 0 || (size_t)k >= sizeof name) {
    if (!q->err)
      q->err = SL_ELIMIT;
    return;
  }
  aws_query_add(q, name, value);
}

struct aws_query *aws_query_new(const char *action) {
  struct aws_query *q = calloc(1, sizeof *q);
  if (!q)
    return NULL;
  aws_query_add(q, "Action", action);
  aws_query_add(q, "Version", AWS_EC2_API_VERSION);
  if (q->err)
    q = aws_query_free(q);
  return q;
}

struct aws_query *aws_query_free(struct aws_query *q) {
  if (q) {
    free(q->buf);
    free(q);
  }
  return NULL;
}

int aws_query_body(const struct aws_query *q, const char **ret, size_t *ret_len) {
  if (q->err)
    return q->err;
  *ret = q->buf;
  *ret_len = q->len;
  return 0;
}

/* Hands q to *ret unless an addition failed. */
static int finish(struct aws_query *q, struct aws_query **ret) {
  int r = q->err;
  if (r < 0) {
    aws_query_free(q);
    return r;
  }
  *ret = q;
  return 0;
}

static bool empty(const char *s) {
  return !s || !*s;
}

static void add_list(struct aws_query *q, const char *prefix, const char *const *values, size_t n) {
  for (size_t i = 0; i < n; i++)
    aws_query_addf(q, values[i], "%s.%zu", prefix, i + 1);
}

static void add_dry_run(struct aws_query *q, bool dry_run) {
  if (dry_run)
    aws_query_add(q, "DryRun", "true");
}

static void add_time(struct aws_query *q, const char *name, int64_t unix_s) {
  char buf[32];
  struct tm tm;
  time_t t = (time_t)unix_s;
  gmtime_r(&t, &tm);
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  aws_query_add(q, name, buf);
}

/* ---- RunInstances ---- */

static int add_user_data(struct aws_query *q, const char *text) {
  size_t n = strlen(text);
  if (n > AWS_USER_DATA_MAX_BYTES)
    return SL_ELIMIT;
  size_t size = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
  char *b64 = malloc(size);
  if (!b64)
    return -ENOMEM;
  sodium_bin2base64(b64, size, (const unsigned char *)text, n, sodium_base64_VARIANT_ORIGINAL);
  aws_query_add(q, "UserData", b64);
  free(b64);
  return 0;
}

int aws_query_run(const struct aws_run_req *req, struct aws_query **ret) {
  if (empty(req->image_id) || empty(req->instance_type) || req->n_tags > AWS_TAGS_MAX ||
      (req->client_token && strlen(req->client_token) > AWS_CLIENT_TOKEN_MAX) ||
      (req->n_security_groups && !req->security_group_ids) || req->max_price_usd_per_hour < 0)
    return -EINVAL;
  for (size_t i = 0; i < req->n_tags; i++)
    if (empty(req->tags[i].key))
      return -EINVAL;
  struct aws_query *q = aws_query_new("RunInstances");
  if (!q)
    return -ENOMEM;
  aws_query_add(q, "ImageId", req->image_id);
  aws_query_add(q, "InstanceType", req->instance_type);
  aws_query_add(q, "MinCount", "1");
  aws_query_add(q, "MaxCount", "1");
  if (!empty(req->client_token))
    aws_query_add(q, "ClientToken", req->client_token);
  if (!empty(req->zone))
    aws_query_add(q, "Placement.AvailabilityZone", req->zone);
  if (!empty(req->subnet_id))
    aws_query_add(q, "SubnetId", req->subnet_id);
  add_list(q, "SecurityGroupId", req->security_group_ids, req->n_security_groups);
  if (!empty(req->iam_instance_profile))
    aws_query_add(q, strncmp(req->iam_instance_profile, "arn:", 4) == 0 ? "IamInstanceProfile.Arn"
                                                                         : "IamInstanceProfile.Name",
                  req->iam_instance_profile);
  if (!empty(req->key_name))
    aws_query_add(q, "KeyName", req->key_name);
  /* A worker that powers its instance off ends it: nothing is left stopped
   * (and billed for its volume). */
  aws_query_add(q, "InstanceInitiatedShutdownBehavior", "terminate");
  /* The worker reads the metadata service with IMDSv2 tokens only. */
  aws_query_add(q, "MetadataOptions.HttpTokens", "required");
  if (req->spot) {
    aws_query_add(q, "InstanceMarketOptions.MarketType", "spot");
    aws_query_add(q, "InstanceMarketOptions.SpotOptions.SpotInstanceType", "one-time");
    aws_query_add(q, "InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior", "terminate");
    if (req->max_price_usd_per_hour > 0) {
      char price[32];
      snprintf(price, sizeof price, "%.6f", req->max_price_usd_per_hour);
      aws_query_add(q, "InstanceMarketOptions.SpotOptions.MaxPrice", price);
    }
  }
  if (req->n_tags) {
    aws_query_add(q, "TagSpecification.1.ResourceType", "instance");
    for (size_t i = 0; i < req->n_tags; i++) {
      aws_query_addf(q, req->tags[i].key, "TagSpecification.1.Tag.%zu.Key", i + 1);
      aws_query_addf(q, req->tags[i].value ? req->tags[i].value : "",
                     "TagSpecification.1.Tag.%zu.Value", i + 1);
    }
  }
  if (!empty(req->user_data)) {
    int r = add_user_data(q, req->user_data);
    if (r < 0) {
      aws_query_free(q);
      return r;
    }
  }
  add_dry_run(q, req->dry_run);
  return finish(q, ret);
}

/* ---- the other calls ---- */

int aws_query_terminate(const char *const *ids, size_t n, bool dry_run, struct aws_query **ret) {
  if (n == 0 || n > 1000 || !ids)
    return -EINVAL;
  for (size_t i = 0; i < n; i++)
    if (empty(ids[i]))
      return -EINVAL;
  struct aws_query *q = aws_query_new("TerminateInstances");
  if (!q)
    return -ENOMEM;
  add_list(q, "InstanceId", ids, n);
  add_dry_run(q, dry_run);
  return finish(q, ret);
}

int aws_query_describe(const char *tag_key, const char *tag_value, const char *const *ids,
                       size_t n_ids, const char *next, bool dry_run, struct aws_query **ret) {
  if ((n_ids && !ids) || n_ids > 1000)
    return -EINVAL;
  struct aws_query *q = aws_query_new("DescribeInstances");
  if (!q)
    return -ENOMEM;
  size_t f = 0;
  if (!empty(tag_key)) {
    if (tag_value) {
      char name[160];
      snprintf(name, sizeof name, "tag:%s", tag_key);
      aws_query_addf(q, name, "Filter.%zu.Name", ++f);
      aws_query_addf(q, tag_value, "Filter.%zu.Value.1", f);
    } else {
      aws_query_addf(q, "tag-key", "Filter.%zu.Name", ++f);
      aws_query_addf(q, tag_key, "Filter.%zu.Value.1", f);
    }
  }
  if (n_ids) {
    /* Asked by id, every state counts: a terminated instance and its state
     * reason tell how it ended. EC2 refuses MaxResults beside ids. */
    add_list(q, "InstanceId", ids, n_ids);
  } else {
    static const char *const live[] = {"pending", "running", "shutting-down", "stopping",
                                       "stopped"};
    aws_query_addf(q, "instance-state-name", "Filter.%zu.Name", ++f);
    for (size_t i = 0; i < sizeof live / sizeof live[0]; i++)
      aws_query_addf(q, live[i], "Filter.%zu.Value.%zu", f, i + 1);
    char page[16];
    snprintf(page, sizeof page, "%d", AWS_DESCRIBE_PAGE);
    aws_query_add(q, "MaxResults", page);
  }
  if (!empty(next))
    aws_query_add(q, "NextToken", next);
  add_dry_run(q, dry_run);
  return finish(q, ret);
}

int aws_query_spot_prices(const char *const *types, size_t n_types, int64_t now_unix,
                          const char *next, bool dry_run, struct aws_query **ret) {
  if (n_types == 0 || !types)
    return -EINVAL;
  struct aws_query *q = aws_query_new("DescribeSpotPriceHistory");
  if (!q)
    return -ENOMEM;
  add_list(q, "InstanceType", types, n_types);
  aws_query_add(q, "ProductDescription.1", "Linux/UNIX");
  /* Start and end at now: EC2 answers with the price in force then for
   * each type and zone. */
  add_time(q, "StartTime", now_unix);
  add_time(q, "EndTime", now_unix);
  aws_query_add(q, "MaxResults", "1000");
  if (!empty(next))
    aws_query_add(q, "NextToken", next);
  add_dry_run(q, dry_run);
  return finish(q, ret);
}

int aws_query_placement_scores(const char *const *types, size_t n_types, int capacity,
                               const char *region, const char *next, bool dry_run,
                               struct aws_query **ret) {
  if (n_types < 3 || !types || capacity < 1 || empty(region))
    return -EINVAL;
  struct aws_query *q = aws_query_new("GetSpotPlacementScores");
  if (!q)
    return -ENOMEM;
  char cap[16];
  snprintf(cap, sizeof cap, "%d", capacity);
  add_list(q, "InstanceType", types, n_types);
  aws_query_add(q, "TargetCapacity", cap);
  aws_query_add(q, "TargetCapacityUnitType", "units");
  aws_query_add(q, "SingleAvailabilityZone", "true");
  aws_query_add(q, "RegionName.1", region);
  aws_query_add(q, "MaxResults", "10");
  if (!empty(next))
    aws_query_add(q, "NextToken", next);
  add_dry_run(q, dry_run);
  return finish(q, ret);
}

/* A well-formed instance id that names no instance. */
#define PLACEHOLDER_INSTANCE "i-00000000000000000"

int aws_query_dry_run(const char *action, const char *region, int64_t now_unix,
                      struct aws_query **ret) {
  static const char *const small_types[] = {"t3.micro", "t3.small", "t3.medium"};
  static const char *const placeholder[] = {PLACEHOLDER_INSTANCE};
  if (empty(action))
    return -EINVAL;
  if (strcmp(action, "RunInstances") == 0) {
    struct aws_run_req req = {
      .image_id = "resolve:ssm:/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64",
      .instance_type = "t3.micro",
      .dry_run = true,
    };
    return aws_query_run(&req, ret);
  }
  if (strcmp(action, "TerminateInstances") == 0)
    return aws_query_terminate(placeholder, 1, true, ret);
  if (strcmp(action, "DescribeInstances") == 0)
    return aws_query_describe(NULL, NULL, NULL, 0, NULL, true, ret);
  if (strcmp(action, "DescribeSpotPriceHistory") == 0)
    return aws_query_spot_prices(small_types, 1, now_unix, NULL, true, ret);
  if (strcmp(action, "GetSpotPlacementScores") == 0)
    return aws_query_placement_scores(small_types, 3, 1, region, NULL, true, ret);
  if (strcmp(action, "CreateTags") == 0) {
    struct aws_query *q = aws_query_new("CreateTags");
    if (!q)
      return -ENOMEM;
    aws_query_add(q, "ResourceId.1", PLACEHOLDER_INSTANCE);
    aws_query_add(q, "Tag.1.Key", "spotlab:check");
    aws_query_add(q, "Tag.1.Value", "dry-run");
    add_dry_run(q, true);
    return finish(q, ret);
  }
  return -EINVAL;
}
