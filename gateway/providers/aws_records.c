/* The aws provider's instance records: state_dir/aws/instances/ID.json, one
 * per instance it launched and has not seen end.
 *
 * launch() writes the record before any EC2 call, and the thread rewrites it
 * atomically (0600) at every step: the placement an attempt goes to before
 * the attempt, the EC2 id once RunInstances answers, each new spot price.
 * So a gateway that dies anywhere finds, at its next start, every instance
 * it may have started: those EC2 lists with their spotlab:instance tag are
 * adopted, and a launch whose answer was lost is re-issued with the same
 * ClientToken and user data, which EC2 answers with the instance it already
 * started, if any. Until the launch is resolved the record holds the
 * instance's boot, its secret key included (hence 0600, like the local
 * provider's worker.json). A record that does not parse is moved aside. */
#include "aws_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sl_err.h"
#include "sl_file.h"
#include "sl_json.h"
#include "sl_log.h"

#define RECORD_MAX_BYTES (256 * 1024)

static void record_path(const struct gw_aws *a, const char *id, char *buf, size_t size) {
  snprintf(buf, size, "%s/%s.json", a->cfg.dir, id);
}

struct gw_aws_inst *gw_aws_inst_free(struct gw_aws_inst *in) {
  if (in) {
    gw_aws_drop_boot(in);
    free(in);
  }
  return NULL;
}

void gw_aws_drop_boot(struct gw_aws_inst *in) {
  explicit_bzero(&in->boot_keys, sizeof in->boot_keys);
  if (in->boot_bundle_url) {
    explicit_bzero(in->boot_bundle_url, strlen(in->boot_bundle_url));
    free(in->boot_bundle_url);
    in->boot_bundle_url = NULL;
  }
  in->have_boot = false;
}

void gw_aws_boot_of(const struct gw_aws_inst *in, const char *gateway,
                    struct gw_worker_boot *ret) {
  memset(ret, 0, sizeof *ret);
  ret->gateway = gateway && *gateway ? gateway : in->boot_gateway;
  ret->gateway_public = in->boot_public;
  ret->keys = in->boot_keys;
  ret->train = "";
  ret->metrics_per_s = in->boot_metrics_per_s;
  ret->move_on_rebalance = in->boot_move_on_rebalance;
  ret->data_cache_bytes = in->boot_data_cache_bytes;
  ret->part_bytes = in->boot_part_bytes;
  ret->bundle_url = in->boot_bundle_url;
  ret->bundle_sha256 = in->boot_bundle_sha256[0] ? in->boot_bundle_sha256 : NULL;
}

static json_t *boot_json(const struct gw_aws_inst *in) {
  return json_pack("{s:s,s:s,s:s,s:s,s:I,s:b,s:I,s:I,s:s,s:s}", "gateway", in->boot_gateway,
                   "gateway_public", in->boot_public, "public", in->boot_keys.public_z85,
                   "secret", in->boot_keys.secret_z85, "metrics_per_s",
                   (json_int_t)in->boot_metrics_per_s, "move_on_rebalance", in->boot_move_on_rebalance,
                   "data_cache_bytes", (json_int_t)in->boot_data_cache_bytes, "part_bytes",
                   (json_int_t)in->boot_part_bytes, "bundle_url",
                   in->boot_bundle_url ? in->boot_bundle_url : "", "bundle_sha256",
                   in->boot_bundle_sha256);
}

static const char *state_name(enum gw_aws_inst_state s) {
  return s == GW_AWS_LAUNCHING ? "launching" : s == GW_AWS_RUNNING ? "running" : "ended";
}

int gw_aws_save_record(struct gw_aws *a, const struct gw_aws_inst *in) {
  char path[4300];
  record_path(a, in->id, path, sizeof path);
  json_t *o = json_pack(
      "{s:s,s:s,s:s,s:s,s:b,s:f,s:I,s:s,s:s,s:s,s:s,s:I,s:f,s:b,s:b,s:b}", "instance", in->id,
      "gateway", a->cfg.gateway_id, "type", in->type, "want_zone", in->want_zone, "spot",
      in->spot, "max_price_usd_per_hour", in->max_price_usd_per_hour, "job", (json_int_t)in->job,
      "state", state_name(in->state), "ec2_id", in->ec2_id, "region", in->region, "zone", in->zone, "launched_us",
      (json_int_t)in->launched_us, "price_usd_per_hour", in->price_usd_per_hour, "seen",
      in->seen, "reported", in->reported, "want_terminate", in->want_terminate);
  json_t *tried = json_array(), *prices = json_array();
  for (size_t i = 0; tried && i < in->n_tried; i++)
    json_array_append_new(tried, json_string(in->tried[i]));
  for (size_t i = 0; prices && i < in->n_prices; i++)
    json_array_append_new(prices, json_pack("[I,f]", (json_int_t)in->prices[i].at_us,
                                            in->prices[i].usd_per_hour));
  int r = -ENOMEM;
  if (o && tried && prices) {
    json_object_set_new(o, "placement", json_string(in->placement));
    json_object_set(o, "tried", tried);
    json_object_set(o, "prices", prices);
    if (in->have_boot)
      json_object_set_new(o, "boot", boot_json(in));
    char *text = json_dumps(o, JSON_COMPACT);
    r = text ? sl_file_write_atomic(path, text, strlen(text), 0600) : -ENOMEM;
    if (text) {
      explicit_bzero(text, strlen(text));
      free(text);
    }
  }
  json_decref(tried);
  json_decref(prices);
  json_decref(o);
  if (r < 0)
    sl_warn(GW_AWS_TOPIC, "cannot save %s: %s", path, sl_strerror(r));
  return r;
}

void gw_aws_remove_record(struct gw_aws *a, const char *id) {
  char path[4300];
  record_path(a, id, path, sizeof path);
  if (unlink(path) < 0 && errno != ENOENT)
    sl_warn(GW_AWS_TOPIC, "cannot remove %s: %s", path, strerror(errno));
}

static bool valid_id(const char *id) {
  return strlen(id) == 19 && !strncmp(id, "sl-", 3) &&
         strspn(id + 3, "0123456789abcdef") == 16;
}

static int read_json(const char *path, json_t **ret, char *why, size_t why_size) {
  return sl_json_read_object(path, RECORD_MAX_BYTES, 16, ret, why, why_size);
}

/* Copies s into dst (size bytes); false when it does not fit. */
static bool copy(char *dst, size_t size, const char *s) {
  if (strlen(s) >= size)
    return false;
  memcpy(dst, s, strlen(s) + 1);
  return true;
}

static bool load_boot(struct gw_aws_inst *in, const json_t *b) {
  const char *url = sl_json_get_str(b, "bundle_url", "");
  if (!copy(in->boot_gateway, sizeof in->boot_gateway, sl_json_get_str(b, "gateway", "")) ||
      !copy(in->boot_public, sizeof in->boot_public, sl_json_get_str(b, "gateway_public", "")) ||
      !copy(in->boot_keys.public_z85, sizeof in->boot_keys.public_z85,
            sl_json_get_str(b, "public", "")) ||
      !copy(in->boot_keys.secret_z85, sizeof in->boot_keys.secret_z85,
            sl_json_get_str(b, "secret", "")) ||
      !copy(in->boot_bundle_sha256, sizeof in->boot_bundle_sha256,
            sl_json_get_str(b, "bundle_sha256", "")) ||
      strlen(in->boot_keys.secret_z85) != GW_Z85_KEY_LEN)
    return false;
  in->boot_metrics_per_s = sl_json_get_int(b, "metrics_per_s", 0);
  in->boot_move_on_rebalance = sl_json_get_bool(b, "move_on_rebalance", false);
  in->boot_data_cache_bytes = sl_json_get_int(b, "data_cache_bytes", 0);
  in->boot_part_bytes = sl_json_get_int(b, "part_bytes", 0);
  if (*url && !(in->boot_bundle_url = strdup(url)))
    return false;
  in->have_boot = true;
  return true;
}

/* Makes sure a region of the provider's holds in: a record written before
 * regions were recorded gets its zone's region (else the first one); a
 * region no longer configured is kept, unoffered, so its instance is still
 * listed, billed and terminated. False when there is no room for it. */
static bool known_region(struct gw_aws *a, struct gw_aws_inst *in) {
  if (!in->region[0]) {
    int r = in->zone[0] ? gw_aws_region_of_zone(a, in->zone) : -1;
    if (r < 0 && (in->ec2_id[0] || in->placement[0]))
      r = 0;
    if (r >= 0)
      snprintf(in->region, sizeof in->region, "%s", a->regions[r].name);
    return true; /* a launch never tried: any region may take it */
  }
  if (gw_aws_region_index(a, in->region) >= 0)
    return true;
  /* it becomes part of an endpoint's host name */
  if (a->n_regions == GW_AWS_MAX_REGIONS ||
      strspn(in->region, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(in->region))
    return false;
  struct gw_aws_region *g = &a->regions[a->n_regions++];
  memset(g, 0, sizeof *g);
  snprintf(g->name, sizeof g->name, "%s", in->region);
  sl_warn(GW_AWS_TOPIC, "instance %s is in %s, which is no longer configured: it is still "
                        "watched there, and nothing new is launched there", in->id, in->region);
  return true;
}

/* Fills in from record o; false when a field is missing or does not fit. */
static bool parse(struct gw_aws *a, const char *id, const json_t *o, struct gw_aws_inst *in) {
  const char *state = sl_json_get_str(o, "state", "");
  if (strcmp(sl_json_get_str(o, "instance", ""), id) ||
      strcmp(sl_json_get_str(o, "gateway", ""), a->cfg.gateway_id) ||
      !copy(in->type, sizeof in->type, sl_json_get_str(o, "type", "")) || !in->type[0] ||
      !copy(in->want_zone, sizeof in->want_zone, sl_json_get_str(o, "want_zone", "")) ||
      !copy(in->ec2_id, sizeof in->ec2_id, sl_json_get_str(o, "ec2_id", "")) ||
      !copy(in->region, sizeof in->region, sl_json_get_str(o, "region", "")) ||
      !copy(in->zone, sizeof in->zone, sl_json_get_str(o, "zone", "")) ||
      !copy(in->placement, sizeof in->placement, sl_json_get_str(o, "placement", "")))
    return false;
  if (!strcmp(state, "launching"))
    in->state = GW_AWS_LAUNCHING;
  else if (!strcmp(state, "running") && in->ec2_id[0])
    in->state = GW_AWS_RUNNING;
  else
    return false;
  strcpy(in->id, id);
  in->spot = sl_json_get_bool(o, "spot", false);
  in->max_price_usd_per_hour = sl_json_get_num(o, "max_price_usd_per_hour", 0);
  in->job = sl_json_get_int(o, "job", 0);
  in->launched_us = sl_json_get_int(o, "launched_us", 0);
  in->price_usd_per_hour = sl_json_get_num(o, "price_usd_per_hour", 0);
  in->seen = sl_json_get_bool(o, "seen", false);
  in->reported = sl_json_get_bool(o, "reported", false);
  in->want_terminate = sl_json_get_bool(o, "want_terminate", false);
  const json_t *tried = json_object_get(o, "tried"), *prices = json_object_get(o, "prices");
  size_t i;
  const json_t *v;
  json_array_foreach(tried, i, v) {
    if (in->n_tried == GW_AWS_MAX_PLACEMENTS || !json_is_string(v) ||
        !copy(in->tried[in->n_tried], sizeof in->tried[0], json_string_value(v)))
      return false;
    in->n_tried++;
  }
  json_array_foreach(prices, i, v) {
    if (in->n_prices == GW_AWS_MAX_PRICE_POINTS || json_array_size(v) != 2 ||
        !json_is_integer(json_array_get(v, 0)) || !json_is_number(json_array_get(v, 1)))
      return false;
    in->prices[in->n_prices].at_us = json_integer_value(json_array_get(v, 0));
    in->prices[in->n_prices++].usd_per_hour = json_number_value(json_array_get(v, 1));
  }
  const json_t *boot = json_object_get(o, "boot");
  if (boot && (!json_is_object(boot) || !load_boot(in, boot)))
    return false;
  return known_region(a, in);
}

static void load_one(struct gw_aws *a, const char *id) {
  char path[4300], aside[4400], why[200];
  record_path(a, id, path, sizeof path);
  snprintf(aside, sizeof aside, "%s.bad", path);
  json_t *o = NULL;
  if (read_json(path, &o, why, sizeof why) < 0) {
    sl_warn(GW_AWS_TOPIC, "%s: %s; moved aside to %s", path, why, aside);
    rename(path, aside);
    return;
  }
  struct gw_aws_inst *in = calloc(1, sizeof *in);
  if (!in || a->n == GW_AWS_MAX_INSTANCES || !parse(a, id, o, in)) {
    sl_warn(GW_AWS_TOPIC, "%s: not a usable instance record; moved aside to %s", path, aside);
    rename(path, aside);
    gw_aws_inst_free(in);
  } else {
    a->inst[a->n++] = in;
    sl_info(GW_AWS_TOPIC, "found instance %s (%s)", id,
            in->state == GW_AWS_LAUNCHING ? "its launch was in flight" : in->ec2_id);
  }
  json_decref(o);
}

void gw_aws_load_records(struct gw_aws *a) {
  sl_file_sweep_temporaries(a->cfg.dir); /* a record's write cut short by a kill */
  DIR *d = opendir(a->cfg.dir);
  if (!d)
    return;
  struct dirent *de;
  while ((de = readdir(d))) {
    size_t n = strlen(de->d_name);
    if (n <= 5 || strcmp(de->d_name + n - 5, ".json"))
      continue;
    char id[GW_INSTANCE_ID_MAX];
    if (n - 5 >= sizeof id)
      continue;
    memcpy(id, de->d_name, n - 5);
    id[n - 5] = '\0';
    if (valid_id(id) && !gw_aws_find(a, id))
      load_one(a, id);
  }
  closedir(d);
}
