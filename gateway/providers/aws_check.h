/* `spotlab-gateway --check aws`: finds the credentials the gateway would
 * use and asks EC2, with DryRun, whether each action the aws provider needs
 * is allowed. One line per check on out:
 *   "credentials: environment"                (the source, never a secret)
 *   "RunInstances: ok"
 *   "GetSpotPlacementScores: missing IAM permission ec2:GetSpotPlacementScores"
 *   "DescribeInstances: EC2 error CODE: MESSAGE"  (anything else, plainly)
 * Launch permissions are checked in steps, each adding one thing to the
 * request (tags, the instance profile), so a refusal names what is missing:
 * ec2:RunInstances, ec2:CreateTags on launch, iam:PassRole. */
#ifndef GW_AWS_CHECK_H
#define GW_AWS_CHECK_H

#include <stddef.h>
#include <stdio.h>

struct gw_config;

/* What to launch in the dry runs: the provider's own settings. Strings are
 * borrowed; NULL or empty fields take the defaults noted. */
struct gw_aws_check_opts {
  const char *region;                       /* NULL: AWS_REGION, then the profile's */
  const char *image_id;                     /* NULL: a public Amazon Linux image (resolve:ssm:) */
  const char *instance_type;                /* NULL: t3.micro */
  const char *zone;                         /* NULL: EC2 chooses */
  const char *subnet_id;                    /* NULL: the default VPC */
  const char **security_group_ids;
  size_t n_security_groups;
  const char *iam_instance_profile;         /* NULL: none, iam:PassRole not checked */
};

/* Runs every check with o (borrowed). 0 when all are allowed; SL_EAUTH when
 * a permission is missing or there are no credentials; another negative
 * error when EC2 could not be asked (region, endpoint, network) or answered
 * with another error. */
int gw_aws_check_with(const struct gw_aws_check_opts *o, FILE *out);

/* The checks with the defaults above in region (NULL: the environment's). */
int gw_aws_check(const char *region, FILE *out);

/* The checks with cfg's [provider.aws] options: region (or each of
 * regions in turn, a blank line between them), ami, the first of
 * instance_types, the first of zones and subnets in the region,
 * security_groups, instance_profile. The first failure, or 0. */
int gw_aws_check_config(const struct gw_config *cfg, FILE *out);

#endif
