/* The request bodies of EC2's Query API: form-encoded name=value pairs
 * (application/x-www-form-urlencoded), Action and Version first, lists
 * numbered from 1 (SecurityGroupId.1, TagSpecification.1.Tag.2.Key,
 * Filter.1.Value.3).
 *
 * Building never sends anything, so tests compare a body with the one
 * expected byte for byte. Additions to a query record their first failure
 * (no memory, over AWS_QUERY_MAX_BYTES) and aws_query_body reports it, so a
 * builder checks once at the end, as curl's dynbuf does. */
#ifndef GW_AWS_QUERY_H
#define GW_AWS_QUERY_H

#include "aws_ec2.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AWS_QUERY_MAX_BYTES (256 << 10)
#define AWS_USER_DATA_MAX_BYTES 16384   /* EC2's limit, before base64 */
#define AWS_CLIENT_TOKEN_MAX 64         /* EC2's limit, ASCII */
#define AWS_DESCRIBE_PAGE 200           /* MaxResults of a DescribeInstances page */

struct aws_query;

/* An owned query holding Action=action&Version=2016-11-15, or NULL. */
struct aws_query *aws_query_new(const char *action);
struct aws_query *aws_query_free(struct aws_query *q);

/* Appends name=value, both percent-encoded with the unreserved set of RFC
 * 3986 (A-Z a-z 0-9 - _ . ~; a space is %20). */
void aws_query_add(struct aws_query *q, const char *name, const char *value);
/* Appends a pair whose name is formatted ("Filter.%zu.Value.%zu"). */
void aws_query_addf(struct aws_query *q, const char *value, const char *name_fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The body so far (borrowed from q, NUL-terminated) and its length: 0, or
 * the first error an addition met (-ENOMEM, SL_ELIMIT). */
int aws_query_body(const struct aws_query *q, const char **ret, size_t *ret_len);

/* The bodies of the calls aws_ec2 makes; each returns an owned query, or
 * -EINVAL for a request EC2 would refuse (no image or type, a client token
 * over 64 characters, too few types), SL_ELIMIT for user data over 16 KiB,
 * -ENOMEM. */
int aws_query_run(const struct aws_run_req *req, struct aws_query **ret);
int aws_query_terminate(const char *const *ids, size_t n, bool dry_run, struct aws_query **ret);
/* Instances tagged key=value (value NULL: with the key; key NULL: all),
 * or the given ids; without ids, terminated ones are left out. next: the
 * page to ask for (NULL or "": the first). */
int aws_query_describe(const char *tag_key, const char *tag_value, const char *const *ids,
                       size_t n_ids, const char *next, bool dry_run, struct aws_query **ret);
/* Linux/UNIX spot prices of types in force at now_unix. */
int aws_query_spot_prices(const char *const *types, size_t n_types, int64_t now_unix,
                          const char *next, bool dry_run, struct aws_query **ret);
/* Placement scores per zone of region for capacity instances of types (3 or more). */
int aws_query_placement_scores(const char *const *types, size_t n_types, int capacity,
                               const char *region, const char *next, bool dry_run,
                               struct aws_query **ret);
/* action with DryRun=true and the fewest parameters EC2 accepts for it:
 * RunInstances, TerminateInstances, DescribeInstances, CreateTags,
 * DescribeSpotPriceHistory, GetSpotPlacementScores; -EINVAL for others. */
int aws_query_dry_run(const char *action, const char *region, int64_t now_unix,
                      struct aws_query **ret);

#endif
