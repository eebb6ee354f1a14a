/* `--check aws` (see aws_check.h). Every check is a dry run, so nothing is
 * launched, tagged or terminated. A check whose request depends on an
 * earlier one (a tagged launch on a plain launch) is skipped, with a line
 * saying so, when the earlier one failed: its answer would name the wrong
 * permission. TerminateInstances is asked about a running spotlab instance
 * when there is one, because a policy that allows it only on instances
 * tagged spotlab:gateway refuses it for any other id. With several regions
 * every region is checked in turn, with its own zone or subnet: a region
 * may need opting in, and a policy may name regions. */
#include "aws_check.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "aws_ec2.h"
#include "conf.h"
#include "sl_awscreds.h"
#include "sl_err.h"
#include "sl_http.h"

#define DEFAULT_IMAGE "resolve:ssm:/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"
#define DEFAULT_TYPE "t3.micro"
#define LIST_MAX 16

struct check {
  struct aws_ec2 *ec2;
  FILE *out;
  int result;                   /* the first failure, 0 while all pass */
};

static void fail(struct check *k, int err) {
  if (k->result == 0)
    k->result = err;
}

/* One line for the outcome r of check name; permission names what an
 * UnauthorizedOperation means. Returns r. */
static int report(struct check *k, const char *name, const char *permission, int r,
                  const struct aws_ec2_error *e) {
  if (r == 0) {
    fprintf(k->out, "%s: ok\n", name);
  } else if (strcmp(e->code, "UnauthorizedOperation") == 0) {
    fprintf(k->out, "%s: missing IAM permission %s\n", name, permission);
  } else if (e->code[0]) {
    fprintf(k->out, "%s: EC2 error %s: %s\n", name, e->code, e->message);
  } else {
    fprintf(k->out, "%s: %s (%s)\n", name, e->message[0] ? e->message : sl_strerror(r),
            sl_errname(r));
  }
  if (r < 0)
    fail(k, r);
  return r;
}

static void check_launch(struct check *k, const struct gw_aws_check_opts *o) {
  struct aws_ec2_error e = {0};
  bool ssm = strncmp(o->image_id, "resolve:ssm:", 12) == 0;
  struct aws_run_req req = {
    .image_id = o->image_id,
    .instance_type = o->instance_type,
    .zone = o->zone,
    .subnet_id = o->subnet_id,
    .security_group_ids = o->security_group_ids,
    .n_security_groups = o->n_security_groups,
    .spot = true,
    .dry_run = true,
  };
  int r = aws_ec2_run_instances(k->ec2, &req, NULL, &e);
  if (report(k, "RunInstances",
             ssm ? "ec2:RunInstances (or ssm:GetParameters for the resolve:ssm: image)"
                 : "ec2:RunInstances",
             r, &e) < 0) {
    fprintf(k->out, "CreateTags (on launch): not checked: RunInstances failed\n");
    if (o->iam_instance_profile)
      fprintf(k->out, "PassRole (instance profile): not checked: RunInstances failed\n");
    return;
  }
  req.tags[0] = (struct aws_tag){"spotlab:gateway", "check"};
  req.tags[1] = (struct aws_tag){"spotlab:instance", "check"};
  req.tags[2] = (struct aws_tag){"spotlab:job", "0"};
  req.n_tags = 3;
  memset(&e, 0, sizeof e);
  r = aws_ec2_run_instances(k->ec2, &req, NULL, &e);
  report(k, "CreateTags (on launch)", "ec2:CreateTags (on launch)", r, &e);
  if (o->iam_instance_profile) {
    req.n_tags = 0;
    req.iam_instance_profile = o->iam_instance_profile;
    memset(&e, 0, sizeof e);
    r = aws_ec2_run_instances(k->ec2, &req, NULL, &e);
    report(k, "PassRole (instance profile)", "iam:PassRole (the instance profile's role)", r, &e);
  }
}

static void check_terminate(struct check *k, bool can_describe) {
  struct aws_ec2_error e = {0};
  struct aws_instance *found = NULL;
  size_t n = 0;
  const char *id = NULL;
  if (can_describe &&
      aws_ec2_describe_instances(k->ec2, "spotlab:gateway", NULL, NULL, 0, &found, &n, &e) == 0)
    for (size_t i = 0; i < n && !id; i++)
      if (strcmp(found[i].state, "running") == 0 || strcmp(found[i].state, "pending") == 0)
        id = found[i].id;
  memset(&e, 0, sizeof e);
  if (id) {
    report(k, "TerminateInstances", "ec2:TerminateInstances", 
           aws_ec2_terminate_dry_run(k->ec2, &id, 1, &e), &e);
  } else {
    /* Without an instance of ours only an unconditional grant can be
     * seen; a refusal may be the tag condition, so it is not a failure. */
    int r = aws_ec2_dry_run(k->ec2, "TerminateInstances", &e);
    if (r == 0)
      fprintf(k->out, "TerminateInstances: ok\n");
    else
      fprintf(k->out, "TerminateInstances: not checked: no spotlab instance runs, and a policy "
                      "may allow it only on instances tagged spotlab:gateway\n");
  }
  free(found);
}

int gw_aws_check_with(const struct gw_aws_check_opts *opts, FILE *out) {
  struct gw_aws_check_opts o = *opts;
  if (!o.image_id || !*o.image_id)
    o.image_id = DEFAULT_IMAGE;
  if (!o.instance_type || !*o.instance_type)
    o.instance_type = DEFAULT_TYPE;
  if (o.iam_instance_profile && !*o.iam_instance_profile)
    o.iam_instance_profile = NULL;

  struct check k = {.out = out};
  struct sl_aws_chain *chain = NULL;
  char region[SL_AWS_REGION_MAX], endpoint[SL_AWS_ENDPOINT_MAX], msg[256] = "";
  int r = sl_http_global_init();
  if (r < 0) {
    fprintf(out, "http: %s\n", sl_strerror(r));
    return r;
  }
  if ((r = sl_aws_region(o.region, region, msg, sizeof msg)) < 0) {
    fprintf(out, "region: %s\n", msg[0] ? msg : sl_strerror(r));
    return r;
  }
  if ((r = sl_aws_endpoint("ec2", region, endpoint)) < 0) {
    fprintf(out, "endpoint: %s\n", sl_strerror(r));
    return r;
  }
  fprintf(out, "region: %s\nendpoint: %s\n", region, endpoint);
  if ((r = sl_aws_chain_new(&chain, msg, sizeof msg)) < 0) {
    fprintf(out, "credentials: %s\n", msg[0] ? msg : sl_strerror(r));
    return r;
  }
  struct sl_aws_creds creds;
  r = sl_aws_creds_get(chain, &creds, msg, sizeof msg);
  memset(&creds, 0, sizeof creds);
  if (r < 0) {
    fprintf(out, "credentials: %s\n", msg[0] ? msg : sl_strerror(r));
    goto out;
  }
  fprintf(out, "credentials: %s\n", sl_aws_creds_source_name(sl_aws_creds_source(chain)));
  if ((r = aws_ec2_new(chain, region, endpoint, &k.ec2)) < 0) {
    fprintf(out, "endpoint: %s\n", sl_strerror(r));
    goto out;
  }

  static const char *const reads[][2] = {
    {"DescribeInstances", "ec2:DescribeInstances"},
    {"DescribeSpotPriceHistory", "ec2:DescribeSpotPriceHistory"},
    {"GetSpotPlacementScores", "ec2:GetSpotPlacementScores"},
  };
  bool can_describe = false;
  for (size_t i = 0; i < sizeof reads / sizeof reads[0]; i++) {
    struct aws_ec2_error e = {0};
    int rr = report(&k, reads[i][0], reads[i][1], aws_ec2_dry_run(k.ec2, reads[i][0], &e), &e);
    if (i == 0)
      can_describe = rr == 0;
  }
  check_launch(&k, &o);
  check_terminate(&k, can_describe);
  r = k.result;
out:
  aws_ec2_free(k.ec2);
  sl_aws_chain_free(chain);
  return r;
}

int gw_aws_check(const char *region, FILE *out) {
  struct gw_aws_check_opts o = {.region = region};
  return gw_aws_check_with(&o, out);
}

/* The first entry of a comma-separated list, into buf ("" when none). */
static const char *first(const char *list, char *buf, size_t size) {
  buf[0] = '\0';
  if (!list)
    return NULL;
  list += strspn(list, " \t,");
  size_t n = strcspn(list, ", \t");
  if (n == 0 || n >= size)
    return NULL;
  memcpy(buf, list, n);
  buf[n] = '\0';
  return buf;
}

/* The first entry of list that lies in region (a zone, or a ZONE=subnet
 * pair whose zone does), into buf; NULL when none. */
static const char *first_in(const char *list, const char *region, char *buf, size_t size) {
  char items[LIST_MAX * 130];
  if (!list || strlen(list) >= sizeof items)
    return NULL;
  strcpy(items, list);
  char *save = NULL;
  size_t rlen = strlen(region);
  for (char *t = strtok_r(items, ", \t", &save); t; t = strtok_r(NULL, ", \t", &save)) {
    char *eq = strchr(t, '=');
    size_t zlen = eq ? (size_t)(eq - t) : strlen(t);
    if (zlen <= rlen || strncmp(t, region, rlen) || strlen(t) >= size)
      continue;
    strcpy(buf, t);
    return buf;
  }
  return NULL;
}

int gw_aws_check_config(const struct gw_config *cfg, FILE *out) {
  char type[64], zone[64], subnet[130], groups[LIST_MAX * 64], regions[LIST_MAX * 33];
  const char *group_ids[LIST_MAX], *region_list[LIST_MAX];
  size_t n_groups = 0, n_regions = 0;
  const char *sg = gw_config_provider_option(cfg, "aws", "security_groups");
  if (sg && strlen(sg) < sizeof groups) {
    strcpy(groups, sg);
    char *save = NULL;
    for (char *t = strtok_r(groups, ", \t", &save); t && n_groups < LIST_MAX;
         t = strtok_r(NULL, ", \t", &save))
      group_ids[n_groups++] = t;
  }
  /* regions = A, B: each one checked in turn; else region (or the
   * environment's) */
  const char *list = gw_config_provider_option(cfg, "aws", "regions");
  if (list && strlen(list) < sizeof regions) {
    strcpy(regions, list);
    char *save = NULL;
    for (char *t = strtok_r(regions, ", \t", &save); t && n_regions < LIST_MAX;
         t = strtok_r(NULL, ", \t", &save))
      region_list[n_regions++] = t;
  }
  if (!n_regions)
    region_list[n_regions++] = gw_config_provider_option(cfg, "aws", "region");
  const char *zones = gw_config_provider_option(cfg, "aws", "zones");
  const char *subnets = gw_config_provider_option(cfg, "aws", "subnets");
  int result = 0;
  for (size_t i = 0; i < n_regions; i++) {
    bool one = n_regions == 1;
    struct gw_aws_check_opts o = {
      .region = region_list[i],
      .image_id = gw_config_provider_option(cfg, "aws", "ami"),
      .instance_type = first(gw_config_provider_option(cfg, "aws", "instance_types"), type,
                             sizeof type),
      .zone = one ? first(zones, zone, sizeof zone)
                  : first_in(zones, region_list[i], zone, sizeof zone),
      .subnet_id = one ? first(subnets, subnet, sizeof subnet)
                       : first_in(subnets, region_list[i], subnet, sizeof subnet),
      .security_group_ids = group_ids,
      .n_security_groups = n_groups,
      .iam_instance_profile = gw_config_provider_option(cfg, "aws", "iam_instance_profile"),
    };
    /* A subnet fixes the zone; naming both could disagree. A zone=subnet
     * pair names the subnet after its "=". */
    if (o.subnet_id) {
      char *eq = strchr(subnet, '=');
      if (eq)
        memmove(subnet, eq + 1, strlen(eq));
      o.zone = NULL;
    }
    if (i)
      fprintf(out, "\n");
    int r = gw_aws_check_with(&o, out);
    if (r < 0 && result == 0)
      result = r;
  }
  return result;
}
