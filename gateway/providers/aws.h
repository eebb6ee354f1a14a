/* The aws provider: instances are EC2 instances started with RunInstances,
 * each booting spotlab-worker from its user data (docs/internals/aws-provider.md,
 * DESIGN.md §8). */
#ifndef GW_AWS_H
#define GW_AWS_H

#include "provider.h"

#include <stdbool.h>
#include <stdint.h>

/* The class registered as "aws": the options of [provider.aws]. */
extern const struct gw_provider_class gw_aws_provider_class;

/* EC2 takes at most 16 KB of user data (before its base64 encoding). */
#define GW_AWS_USER_DATA_MAX 16384

/* What an instance's user data is made of. Everything is borrowed. */
struct gw_aws_user_data {
  const struct gw_worker_boot *boot; /* keys, metrics_per_s; bundle_url/_sha256 without a prefix */
  const char *gateway;          /* the worker address as instances reach it (advertise) */
  const char *instance, *type, *zone;
  bool spot;
  const char *store;            /* "s3://BUCKET/PREFIX" */
  const char *worker_prefix;    /* NULL or "": the bundle from boot->bundle_url */
  int64_t orphan_timeout_ms;    /* 0: the worker's default */
};

/* The /bin/sh script an instance runs at first boot: writes the worker
 * config (0600) into a 0700 folder ${SPOTLAB_ROOT:-/var/lib/spotlab}, fetches
 * and checks the worker bundle when there is no prefix, runs the worker and
 * powers the instance off when it exits (instance-initiated shutdown
 * terminates it). Owned text in *ret (free()). -EINVAL with a sentence in err
 * for a value the script cannot carry safely (a quote or control character
 * in a URL or path, a bundle without its SHA-256), SL_ELIMIT past
 * GW_AWS_USER_DATA_MAX. The same input always gives the same script. */
int gw_aws_user_data(const struct gw_aws_user_data *u, char **ret, char *err, size_t err_size);

#endif
