/* AWS credentials, region and endpoints, found the way the AWS SDKs find
 * them.
 *
 * Credentials, first source that has them wins:
 *   1. the environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
 *      AWS_SESSION_TOKEN (both of the first two, or neither);
 *   2. the shared credentials file (AWS_SHARED_CREDENTIALS_FILE, default
 *      ~/.aws/credentials), profile AWS_PROFILE (default "default"), then
 *      the shared config file (AWS_CONFIG_FILE, default ~/.aws/config;
 *      section [profile NAME], or [default]);
 *   3. the instance role through IMDSv2 (token PUT, then
 *      /latest/meta-data/iam/security-credentials/ and the role's document),
 *      at AWS_EC2_METADATA_SERVICE_ENDPOINT or http://169.254.169.254;
 *      skipped when AWS_EC2_METADATA_DISABLED=true.
 * Credentials that expire are fetched again from their source before they do
 * (sl_aws_creds_get refreshes within 5 minutes of expiry).
 *
 * Region: the caller's value, else AWS_REGION, else AWS_DEFAULT_REGION, else
 * the profile's `region`. Endpoints: AWS_ENDPOINT_URL_<SERVICE> (EC2, S3),
 * else AWS_ENDPOINT_URL, else https://SERVICE.REGION.amazonaws.com.
 *
 * No secret ever reaches a log line or an error message: messages name the
 * source and the field, never a value. */
#ifndef SL_AWSCREDS_H
#define SL_AWSCREDS_H

#include "sl_sigv4.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_AWS_REGION_MAX 64
#define SL_AWS_ENDPOINT_MAX 512

enum sl_aws_creds_source {
  SL_AWS_CREDS_NONE = 0,
  SL_AWS_CREDS_ENV,
  SL_AWS_CREDS_SHARED_FILE,     /* credentials or config file */
  SL_AWS_CREDS_IMDS,            /* instance role */
};

struct sl_aws_chain;

/* An owned chain that reads the process environment. err gets a sentence
 * when a source is present but broken (a credentials file that does not
 * parse, a profile without a secret); a chain with no source at all is not
 * an error here: sl_aws_creds_get says so. */
int sl_aws_chain_new(struct sl_aws_chain **ret, char *err, size_t err_size);
struct sl_aws_chain *sl_aws_chain_free(struct sl_aws_chain *c);

/* Current credentials into *ret, refreshed from their source when they are
 * within 5 minutes of expiry (or past it). Thread-safe. SL_EAUTH (with a
 * sentence in err) when no source has credentials or a refresh failed and
 * the previous ones have expired; a failed refresh of ones still valid keeps
 * them and returns 0. */
int sl_aws_creds_get(struct sl_aws_chain *c, struct sl_aws_creds *ret, char *err, size_t err_size);
/* The clock the chain reads expiry against, seconds since the epoch (tests
 * move it; NULL: the real clock). */
void sl_aws_chain_set_clock(struct sl_aws_chain *c, int64_t (*now_unix)(void *ctx), void *ctx);
/* Where the current credentials came from. */
enum sl_aws_creds_source sl_aws_creds_source(struct sl_aws_chain *c);
const char *sl_aws_creds_source_name(enum sl_aws_creds_source s); /* "environment", ... */

/* The region: configured (may be NULL or ""), else the environment, else
 * the profile's. SL_ECONFIG with a sentence when none is set. */
int sl_aws_region(const char *configured, char ret[SL_AWS_REGION_MAX], char *err, size_t err_size);

/* The endpoint for service ("ec2", "s3") in region, without a trailing
 * slash: AWS_ENDPOINT_URL_EC2 / AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else
 * https://SERVICE.REGION.amazonaws.com. */
int sl_aws_endpoint(const char *service, const char *region, char ret[SL_AWS_ENDPOINT_MAX]);

/* The instance metadata service's base URL (AWS_EC2_METADATA_SERVICE_ENDPOINT
 * or http://169.254.169.254), without a trailing slash. */
void sl_aws_imds_endpoint(char ret[SL_AWS_ENDPOINT_MAX]);

#endif
