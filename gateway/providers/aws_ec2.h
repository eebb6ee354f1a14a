/* Amazon EC2's Query API (version 2016-11-15), the calls the aws provider
 * makes: signed with SigV4 (sl_sigv4), sent with sl_http_do (blocking: the
 * provider calls these from its own thread, never from the gateway's loop),
 * replies read by aws_xml. Every EC2 error code maps to an sl_ error in one
 * place (aws_ec2_error_to_sl); the code itself and EC2's message are kept
 * for the caller. Nothing here logs a secret. */
#ifndef GW_AWS_EC2_H
#define GW_AWS_EC2_H

#include "sl_awscreds.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AWS_EC2_API_VERSION "2016-11-15"
#define AWS_ID_MAX 64
#define AWS_TAGS_MAX 8

struct aws_ec2;

/* The outcome of a call that failed with an EC2 error. */
struct aws_ec2_error {
  long http_status;             /* 0: no answer (transport) */
  char code[64];                /* "InsufficientInstanceCapacity", "" for transport */
  char message[256];            /* EC2's message, or the transport's */
  char request_id[64];
};

/* Opens a client for region with the credential chain (borrowed) at
 * endpoint (sl_aws_endpoint("ec2", region)). */
int aws_ec2_new(struct sl_aws_chain *chain, const char *region, const char *endpoint,
                struct aws_ec2 **ret);
struct aws_ec2 *aws_ec2_free(struct aws_ec2 *c);

/* EC2's error code as an sl_ error:
 *   InsufficientInstanceCapacity, InsufficientCapacity, InsufficientHostCapacity,
 *   InsufficientReservedInstanceCapacity, SpotMaxPriceTooLow, MaxSpotInstanceCountExceeded,
 *   InstanceLimitExceeded, VcpuLimitExceeded, Unsupported            -> -EAGAIN (try elsewhere)
 *   RequestLimitExceeded, Throttling, InternalError, ServiceUnavailable -> -EBUSY (back off, retry)
 *   AuthFailure, ExpiredToken, RequestExpired, SignatureDoesNotMatch,
 *   UnauthorizedOperation, OptInRequired, InvalidClientTokenId        -> SL_EAUTH
 *   DryRunOperation                                                   -> 0
 *   InvalidParameterValue, InvalidParameter*, Invalid*.Malformed, MissingParameter,
 *   InvalidAMIID.*                                                    -> -EINVAL
 *   Invalid*.NotFound                                                 -> -ENOENT
 *   anything else                                                     -> SL_ENOTSUP */
int aws_ec2_error_to_sl(const char *code);

struct aws_tag {
  const char *key, *value;
};

struct aws_run_req {
  const char *image_id;         /* "ami-..." or "resolve:ssm:/aws/service/..." */
  const char *instance_type;
  const char *zone;             /* "" or NULL: EC2 chooses (or the subnet's) */
  const char *subnet_id;        /* NULL: default VPC */
  const char **security_group_ids; size_t n_security_groups;
  const char *iam_instance_profile; /* name or ARN; NULL: none */
  const char *key_name;         /* NULL: none */
  bool spot;
  double max_price_usd_per_hour;/* spot: 0 = on-demand price cap (EC2's default) */
  const char *user_data;        /* plain text; base64-encoded here */
  const char *client_token;     /* idempotency: same token, same instance */
  struct aws_tag tags[AWS_TAGS_MAX]; size_t n_tags;
  bool dry_run;
};

struct aws_instance {
  char id[AWS_ID_MAX];          /* "i-0123..." */
  char type[64];
  char zone[32];
  char state[24];               /* pending, running, shutting-down, terminated, stopping, stopped */
  bool spot;
  int64_t launch_time_unix;
  char private_ip[48];
  char public_ip[48];
  char tag_spotlab_instance[64];
  char tag_spotlab_job[64];
  char tag_spotlab_gateway[64];
  char state_reason[128];       /* e.g. "Server.SpotInstanceTermination" */
};

struct aws_spot_price {
  char type[64];
  char zone[32];
  double usd_per_hour;
  int64_t time_unix;
};

struct aws_placement_score {
  char zone[32];                /* the zone's name; "" when scored per region or when only the
                                 * id is known (GetSpotPlacementScores answers with ids, and
                                 * names are per account) */
  char zone_id[32];             /* "use1-az1"; "" when scored per region */
  char region[32];
  int score;                    /* 1..10 */
};

/* Each call: 0, or an sl_ error with *err filled (err may be NULL). */
int aws_ec2_run_instances(struct aws_ec2 *c, const struct aws_run_req *req,
                          struct aws_instance *ret, struct aws_ec2_error *err);
int aws_ec2_terminate_instances(struct aws_ec2 *c, const char *const *ids, size_t n,
                                struct aws_ec2_error *err);
/* Instances with tag key=value (NULL key: all; NULL value: any with the
 * key), all pages; owned array (free()). Asked by ids, instances in every
 * state (terminated ones tell how they ended: state_reason); otherwise
 * every state but terminated. */
int aws_ec2_describe_instances(struct aws_ec2 *c, const char *tag_key, const char *tag_value,
                               const char *const *ids, size_t n_ids,
                               struct aws_instance **ret, size_t *ret_n,
                               struct aws_ec2_error *err);
/* Newest Linux/UNIX spot price of each (type, zone) among types; owned array. */
int aws_ec2_spot_prices(struct aws_ec2 *c, const char *const *types, size_t n_types,
                        struct aws_spot_price **ret, size_t *ret_n, struct aws_ec2_error *err);
/* GetSpotPlacementScores for types (at least 3) and capacity (instances),
 * per zone in region; owned array. */
int aws_ec2_placement_scores(struct aws_ec2 *c, const char *const *types, size_t n_types,
                             int capacity, struct aws_placement_score **ret, size_t *ret_n,
                             struct aws_ec2_error *err);
/* Calls action with DryRun=true and the minimal parameters it needs: 0 when
 * EC2 answers DryRunOperation (allowed), SL_EAUTH for UnauthorizedOperation,
 * else the call's error. */
int aws_ec2_dry_run(struct aws_ec2 *c, const char *action, struct aws_ec2_error *err);
/* TerminateInstances of ids with DryRun=true (a policy that allows it only
 * on tagged instances is checked against real ones); as aws_ec2_dry_run. */
int aws_ec2_terminate_dry_run(struct aws_ec2 *c, const char *const *ids, size_t n,
                              struct aws_ec2_error *err);

#endif
