/* The options of [provider.aws]: declared once in gw_aws_options (name,
 * default, help), each value checked alone by gw_aws_check_option when the
 * configuration is read, and read together (with the checks that span
 * options and the gateway's own settings) by gw_aws_config_load when the
 * provider opens. */
#include "aws_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog.h"
#include "conf.h"
#include "sl_awscreds.h"
#include "sl_err.h"
#include "sl_time.h"

#define NAME "aws"
#define LIST_MAX 64

const struct gw_provider_option gw_aws_options[] = {
  {"region", "", "AWS region; empty: AWS_REGION, AWS_DEFAULT_REGION or the profile's region"},
  {"regions", "", "instead of region: several regions to launch in (comma list, the first "
                  "preferred among equal prices)"},
  {"zones", "", "availability zones to launch in (comma list, each in one of the regions); "
                "empty: every zone the regions report prices for, else the catalog's"},
  {"subnets", "", "instead of zones: subnets, as zone=subnet-... pairs or a plain list (one "
                  "region only)"},
  {"transfer_usd_per_gb", "0.02", "what AWS charges per GB to copy a checkpoint from the "
                                  "store's region to another region"},
  {"instance_types", "", "instance types offered (comma list, each in the catalog); empty: "
                         "every type of the catalog"},
  {"ami", "", "image: ami-... or resolve:ssm:/aws/service/... (required)"},
  {"worker_prefix", "", "where spotlab is installed on the image (PREFIX/bin/spotlab-worker); "
                        "empty: instances fetch the worker bundle from the store"},
  {"advertise", "", "the worker address as instances reach it (tcp://HOST:PORT); required "
                    "when [gateway] workers is a loopback or wildcard address"},
  {"orphan_timeout", "15m", "a worker that cannot reach the gateway this long powers its "
                            "instance off"},
  {"security_groups", "", "security group ids (comma list, at most 5); empty: the VPC's default"},
  {"iam_instance_profile", "", "instance profile name or ARN; empty: none"},
  {"key_name", "", "EC2 key pair for ssh; empty: none"},
  {"catalog", "", "CSV of instance types (GPUs, on-demand prices, interruption buckets); empty: "
                  "the built-in catalog"},
  {"poll", "15s", "how often instance states and spot prices are read from EC2"},
  {"capacity_memory", "10m", "how long a capacity failure of a type in a zone is remembered"},
  {NULL, NULL, NULL},
};

/* Splits a comma list (spaces trimmed, empty items skipped) into at most
 * max items of item_size bytes. The count, or SL_ELIMIT. */
static int split_list(const char *value, char *items, size_t item_size, size_t max) {
  size_t n = 0;
  const char *p = value;
  while (*p) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    const char *s = p;
    while (len && (*s == ' ' || *s == '\t'))
      s++, len--;
    while (len && (s[len - 1] == ' ' || s[len - 1] == '\t'))
      len--;
    if (len) {
      if (n == max || len >= item_size)
        return SL_ELIMIT;
      memcpy(items + n * item_size, s, len);
      items[n * item_size + len] = '\0';
      n++;
    }
    if (!end)
      break;
    p = end + 1;
  }
  return (int)n;
}

static bool only(const char *s, const char *set) { return *s && strspn(s, set) == strlen(s); }

#define LOWER_DIGITS "abcdefghijklmnopqrstuvwxyz0123456789"

static bool zone_name(const char *s) { return strlen(s) < 32 && only(s, LOWER_DIGITS "-"); }

static bool prefixed_id(const char *s, const char *prefix) {
  size_t n = strlen(prefix);
  return !strncmp(s, prefix, n) && strlen(s) < 64 && only(s + n, "0123456789abcdef");
}

static bool printable(const char *s, bool spaces) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++)
    if (*p < 0x20 || *p >= 0x7f || (!spaces && *p == ' ') || *p == '\'' || *p == '\\')
      return false;
  return true;
}

static int check_duration(const char *name, const char *value, int64_t min_us, int64_t max_us,
                          int64_t *ret, char *err, size_t size) {
  int64_t us;
  if (sl_time_parse_duration(value, &us) < 0 || us < min_us || us > max_us) {
    char lo[32], hi[32];
    sl_time_format_duration(min_us, lo, sizeof lo);
    sl_time_format_duration(max_us, hi, sizeof hi);
    snprintf(err, size, "%s: \"%s\" is not a duration from %s to %s (\"90s\", \"15m\")", name,
             value, lo, hi);
    return SL_ECONFIG;
  }
  *ret = us;
  return 0;
}

/* subnets: "zone=subnet-..." pairs or plain "subnet-..." ids, not mixed. */
static int parse_subnets(const char *value, struct gw_aws_placement *ret, size_t *ret_n,
                         char *err, size_t size) {
  char items[GW_AWS_MAX_PLACEMENTS][LIST_MAX * 2];
  int n = split_list(value, items[0], sizeof items[0], GW_AWS_MAX_PLACEMENTS);
  if (n < 0)
    return sl_err_say(err, size, SL_ECONFIG, "subnets: more than %d subnets, or one too long",
                      GW_AWS_MAX_PLACEMENTS);
  int pairs = 0;
  for (int i = 0; i < n; i++) {
    char *eq = strchr(items[i], '=');
    const char *subnet = eq ? eq + 1 : items[i];
    if (eq)
      *eq = '\0', pairs++;
    if ((eq && !zone_name(items[i])) || !prefixed_id(subnet, "subnet-"))
      return sl_err_say(err, size, SL_ECONFIG,
                        "subnets: \"%s\" is not subnet-... or ZONE=subnet-...", subnet);
    if (ret) {
      memset(&ret[i], 0, sizeof ret[i]);
      if (snprintf(ret[i].zone, sizeof ret[i].zone, "%s", eq ? items[i] : "") >=
              (int)sizeof ret[i].zone ||
          snprintf(ret[i].subnet, sizeof ret[i].subnet, "%s", subnet) >= (int)sizeof ret[i].subnet)
        return sl_err_say(err, size, SL_ECONFIG, "subnets: \"%s\" is too long", items[i]);
    }
  }
  if (pairs && pairs != n)
    return sl_err_say(err, size, SL_ECONFIG,
                      "subnets: either every item is ZONE=subnet-... or none is");
  if (ret_n)
    *ret_n = (size_t)n;
  return 0;
}

int gw_aws_check_option(const char *name, const char *value, char *err, size_t size) {
  char items[LIST_MAX][LIST_MAX];
  int64_t us;
  if (!strcmp(name, "region"))
    return !*value || (zone_name(value) && strlen(value) < 32)
               ? 0
               : sl_err_say(err, size, SL_ECONFIG, "region: \"%s\" is not a region name", value);
  if (!strcmp(name, "transfer_usd_per_gb")) {
    char *end = NULL;
    double usd = strtod(value, &end);
    return *value && end && !*end && usd >= 0 && usd <= 10
               ? 0
               : sl_err_say(err, size, SL_ECONFIG,
                            "transfer_usd_per_gb: \"%s\" is not a price from 0 to 10 "
                            "USD per GB",
                            value);
  }
  if (!strcmp(name, "zones") || !strcmp(name, "instance_types") ||
      !strcmp(name, "security_groups") || !strcmp(name, "regions")) {
    size_t max = !strcmp(name, "zones") ? GW_AWS_MAX_PLACEMENTS
                 : !strcmp(name, "regions") ? GW_AWS_MAX_REGIONS
                 : !strcmp(name, "security_groups") ? GW_AWS_MAX_SECURITY_GROUPS : LIST_MAX;
    int n = split_list(value, items[0], sizeof items[0], max);
    if (n < 0) {
      snprintf(err, size, "%s: more than %zu items, or one longer than %d bytes", name, max,
               LIST_MAX - 1);
      return SL_ECONFIG;
    }
    for (int i = 0; i < n; i++) {
      bool ok = !strcmp(name, "zones") || !strcmp(name, "regions") ? zone_name(items[i])
                : !strcmp(name, "security_groups") ? prefixed_id(items[i], "sg-")
                : only(items[i], LOWER_DIGITS ".-");
      if (!ok)
        return sl_err_say(err, size, SL_ECONFIG, "%s: \"%s\" is not a valid item", name, items[i]);
    }
    return 0;
  }
  if (!strcmp(name, "subnets"))
    return parse_subnets(value, NULL, NULL, err, size);
  if (!strcmp(name, "ami")) {
    if (!*value || prefixed_id(value, "ami-") ||
        (!strncmp(value, "resolve:ssm:/", 13) && printable(value, false)))
      return 0;
    return sl_err_say(err, size, SL_ECONFIG, "ami: \"%s\" is not ami-... or resolve:ssm:/PARAMETER",
                      value);
  }
  if (!strcmp(name, "worker_prefix"))
    return !*value || (value[0] == '/' && printable(value, true))
               ? 0
               : sl_err_say(err, size, SL_ECONFIG,
                            "worker_prefix: \"%s\" is not an absolute path free of "
                            "quotes and backslashes",
                            value);
  if (!strcmp(name, "advertise"))
    return !*value || (!strncmp(value, "tcp://", 6) && strchr(value + 6, ':') &&
                       printable(value, false))
               ? 0
               : sl_err_say(err, size, SL_ECONFIG, "advertise: \"%s\" is not tcp://HOST:PORT",
                            value);
  if (!strcmp(name, "orphan_timeout"))
    return check_duration(name, value, 10 * SL_US_PER_S, 7 * 86400 * SL_US_PER_S, &us, err, size);
  if (!strcmp(name, "poll"))
    return check_duration(name, value, 50 * SL_US_PER_MS, 3600 * SL_US_PER_S, &us, err, size);
  if (!strcmp(name, "capacity_memory"))
    return check_duration(name, value, 0, 86400 * SL_US_PER_S, &us, err, size);
  if (!strcmp(name, "iam_instance_profile") || !strcmp(name, "key_name"))
    return strlen(value) < 256 && printable(value, true)
               ? 0
               : sl_err_say(err, size, SL_ECONFIG,
                            "%s: \"%s\" is too long or holds control characters", name, value);
  return 0; /* catalog: any path; read when the provider opens */
}

static const char *opt(const struct gw_provider_env *env, const char *key) {
  const char *v = gw_config_provider_option(env->cfg, NAME, key);
  return v ? v : "";
}

/* True when workers connect to addr only from this machine (or a wildcard
 * bind, which the gateway hands out as loopback). */
static bool loopback(const char *addr) {
  static const char *const local[] = {"ipc://", "inproc://", "tcp://127.", "tcp://localhost",
                                      "tcp://[::1]", "tcp://0.0.0.0", "tcp://*", "tcp://[::]"};
  for (size_t i = 0; i < sizeof local / sizeof local[0]; i++)
    if (!strncmp(addr, local[i], strlen(local[i])))
      return true;
  return false;
}

int gw_aws_zone_region(const char (*regions)[32], size_t n, const char *zone) {
  int best = -1;
  size_t best_len = 0, zlen = strlen(zone);
  for (size_t i = 0; i < n; i++) {
    size_t len = strlen(regions[i]);
    if (len > best_len && zlen > len && !strncmp(zone, regions[i], len))
      best = (int)i, best_len = len;
  }
  return best;
}

/* regions (or region, else the environment's), the store's region and the
 * price of moving a checkpoint out of it. */
static int load_regions(const struct gw_provider_env *env, struct gw_aws_config *c, char *err,
                        size_t size) {
  const char *list = opt(env, "regions"), *one = opt(env, "region");
  char why[256] = "", region[SL_AWS_REGION_MAX];
  if (*list && *one)
    return sl_err_say(err, size, SL_ECONFIG,
                      "[provider.aws] region and regions are alternatives; set one");
  if (*list) {
    char items[GW_AWS_MAX_REGIONS][32];
    int n = split_list(list, items[0], sizeof items[0], GW_AWS_MAX_REGIONS);
    if (n <= 0)
      return sl_err_say(err, size, SL_ECONFIG, "[provider.aws] regions: no region named");
    for (int i = 0; i < n; i++) {
      for (size_t k = 0; k < c->n_regions; k++)
        if (!strcmp(c->regions[k], items[i]))
          return sl_err_say(err, size, SL_ECONFIG, "[provider.aws] regions: %s is listed twice",
                            items[i]);
      memcpy(c->regions[c->n_regions++], items[i], 32);
    }
  } else {
    if (sl_aws_region(one, region, why, sizeof why) < 0)
      return sl_err_say(err, size, SL_ECONFIG, "[provider.aws] region: %s",
                        why[0] ? why : "no region set (region, regions or AWS_REGION)");
    if (snprintf(c->regions[c->n_regions], sizeof c->regions[0], "%s", region) >=
        (int)sizeof c->regions[0])
      return sl_err_say(err, size, SL_ECONFIG, "[provider.aws] region: \"%s\" is too long", region);
    c->n_regions++;
  }
  /* the store's region as the gateway finds it: [store] region, else this
   * section's region, else the environment's; else the first region */
  const char *store = env->cfg->store_region;
  if (!*store && *one)
    store = one;
  if (!*store && sl_aws_region(NULL, region, why, sizeof why) == 0)
    store = region;
  snprintf(c->store_region, sizeof c->store_region, "%s", *store ? store : c->regions[0]);
  c->transfer_usd_per_gb = strtod(opt(env, "transfer_usd_per_gb"), NULL);
  return 0;
}

/* The region of a configured placement's zone; SL_ECONFIG when it is in none. */
static int place_in_region(struct gw_aws_config *c, struct gw_aws_placement *pl, char *err,
                           size_t size) {
  if (!pl->zone[0]) { /* a plain subnet: EC2 knows its zone */
    if (c->n_regions > 1)
      return sl_err_say(err, size, SL_ECONFIG,
                        "[provider.aws] subnets: with several regions, name each "
                        "subnet's zone (ZONE=%s)",
                        pl->subnet);
    snprintf(pl->region, sizeof pl->region, "%s", c->regions[0]);
    return 0;
  }
  int r = gw_aws_zone_region(c->regions, c->n_regions, pl->zone);
  if (r < 0)
    return sl_err_say(err, size, SL_ECONFIG,
                      "[provider.aws] zone %s is in none of the regions (%s%s)", pl->zone,
                      c->regions[0], c->n_regions > 1 ? ", ..." : "");
  snprintf(pl->region, sizeof pl->region, "%s", c->regions[r]);
  return 0;
}

static int load_lists(const struct gw_provider_env *env, struct gw_aws_config *c, char *err,
                      size_t size) {
  const char *zones = opt(env, "zones"), *subnets = opt(env, "subnets");
  if (*zones && *subnets)
    return sl_err_say(err, size, SL_ECONFIG,
                      "[provider.aws] zones and subnets are alternatives; set one");
  if (*subnets) {
    if (parse_subnets(subnets, c->placements, &c->n_placements, err, size) < 0)
      return SL_ECONFIG;
  } else {
    char items[GW_AWS_MAX_PLACEMENTS][32];
    int n = split_list(zones, items[0], sizeof items[0], GW_AWS_MAX_PLACEMENTS);
    for (int i = 0; i < n; i++)
      memcpy(c->placements[c->n_placements++].zone, items[i], 32);
  }
  for (size_t i = 0; i < c->n_placements; i++)
    if (place_in_region(c, &c->placements[i], err, size) < 0)
      return SL_ECONFIG;
  /* a region left without a place to launch would be offered but never used */
  for (size_t r = 0; c->n_placements && r < c->n_regions; r++) {
    bool used = false;
    for (size_t i = 0; i < c->n_placements && !used; i++)
      used = !strcmp(c->placements[i].region, c->regions[r]);
    if (!used)
      return sl_err_say(err, size, SL_ECONFIG,
                        "[provider.aws] region %s has none of the configured %s", c->regions[r],
                        *subnets ? "subnets" : "zones");
  }
  char groups[GW_AWS_MAX_SECURITY_GROUPS][64];
  int n = split_list(opt(env, "security_groups"), groups[0], 64, GW_AWS_MAX_SECURITY_GROUPS);
  for (int i = 0; i < n; i++)
    memcpy(c->security_groups[c->n_security_groups++], groups[i], 64);
  return 0;
}

int gw_aws_config_types(struct gw_aws_config *c, const struct gw_catalog *cat, const char *value,
                        char *err, size_t size) {
  char items[LIST_MAX][LIST_MAX];
  int n = split_list(value, items[0], sizeof items[0], LIST_MAX);
  if (n < 0)
    return sl_err_say(err, size, SL_ECONFIG, "[provider.aws] instance_types: too many types");
  size_t count = n ? (size_t)n : gw_catalog_count(cat);
  c->types = calloc(count ? count : 1, sizeof *c->types);
  if (!c->types)
    return -ENOMEM;
  for (size_t i = 0; i < count; i++) {
    const char *name = n ? items[i] : gw_catalog_get(cat, i)->name;
    if (gw_catalog_find(cat, name) < 0)
      return sl_err_say(err, size, SL_ECONFIG,
                        "[provider.aws] instance_types: %s is not in the catalog", name);
    for (size_t k = 0; k < c->n_types; k++)
      if (!strcmp(c->types[k], name))
        return sl_err_say(err, size, SL_ECONFIG,
                          "[provider.aws] instance_types: %s is listed twice", name);
    snprintf(c->types[c->n_types++], 64, "%s", name);
  }
  return 0;
}

int gw_aws_config_load(const struct gw_provider_env *env, struct gw_aws_config *c, char *err,
                       size_t size) {
  memset(c, 0, sizeof *c);
  /* every option once more: a value set by the program (not the file) is
   * checked here too */
  for (const struct gw_provider_option *o = gw_aws_options; o->name; o++)
    if (gw_aws_check_option(o->name, opt(env, o->name), err, size) < 0)
      return SL_ECONFIG;
  const char *store = env->store_url ? env->store_url : "";
  if (strncmp(store, "s3://", 5) || strlen(store) >= sizeof c->store_url || !store[5])
    return sl_err_say(err, size, SL_ECONFIG,
                      "[provider.aws] needs an s3:// store ([store] url is \"%s\"): AWS "
                      "instances cannot reach this machine's files",
                      store);
  snprintf(c->store_url, sizeof c->store_url, "%s", store);
  const char *gid = env->gateway_id ? env->gateway_id : "";
  if (!*gid || strlen(gid) >= sizeof c->gateway_id || !printable(gid, false))
    return sl_err_say(err, size, SL_ECONFIG,
                      "[provider.aws] needs the gateway's id (tag spotlab:gateway)");
  snprintf(c->gateway_id, sizeof c->gateway_id, "%s", gid);
  const char *state = env->state_dir ? env->state_dir : env->cfg->state_dir;
  if (strlen(state) > 4000)
    return sl_err_say(err, size, SL_ECONFIG, "[provider.aws] state_dir longer than 4000 bytes");
  snprintf(c->dir, sizeof c->dir, "%s/aws/instances", state);
  if (load_regions(env, c, err, size) < 0)
    return SL_ECONFIG;
  snprintf(c->ami, sizeof c->ami, "%s", opt(env, "ami"));
  if (!c->ami[0])
    return sl_err_say(err, size, SL_ECONFIG,
                      "[provider.aws] ami is required (ami-... or "
                      "resolve:ssm:/aws/service/...)");
  snprintf(c->worker_prefix, sizeof c->worker_prefix, "%s", opt(env, "worker_prefix"));
  snprintf(c->advertise, sizeof c->advertise, "%s", opt(env, "advertise"));
  if (!c->advertise[0] && loopback(env->cfg->workers))
    return sl_err_say(err, size, SL_ECONFIG,
                      "[provider.aws] advertise is required: [gateway] workers is %s, "
                      "which instances cannot reach",
                      env->cfg->workers);
  snprintf(c->iam_instance_profile, sizeof c->iam_instance_profile, "%s",
           opt(env, "iam_instance_profile"));
  snprintf(c->key_name, sizeof c->key_name, "%s", opt(env, "key_name"));
  snprintf(c->catalog, sizeof c->catalog, "%s", opt(env, "catalog"));
  int64_t us = 0; /* checked above already: these fail only on a bug */
  int r = check_duration("orphan_timeout", opt(env, "orphan_timeout"), 0, INT64_MAX, &us, err,
                         size);
  if (r < 0 ||
      (r = check_duration("poll", opt(env, "poll"), 0, INT64_MAX, &c->poll_us, err, size)) < 0 ||
      (r = check_duration("capacity_memory", opt(env, "capacity_memory"), 0, INT64_MAX,
                          &c->capacity_memory_us, err, size)) < 0)
    return r;
  c->orphan_timeout_ms = us / SL_US_PER_MS;
  c->backoff_base_ms = 1000;
  c->backoff_cap_ms = 30000;
  c->backoff_tries = 6;
  return load_lists(env, c, err, size);
}

void gw_aws_config_done(struct gw_aws_config *c) {
  free(c->types);
  c->types = NULL;
  c->n_types = 0;
}
