/* One EC2 call through the client (aws_ec2), for test_aws_ec2_live.py: the
 * region, endpoint and credentials come from the environment, as in the
 * gateway. Prints one JSON object on stdout: the result, or
 * {"error": NAME, "code", "message", "status"} with exit status 1.
 *
 *   aws-ec2-tool run TYPE [--spot] [--max-price P] [--zone Z] [--ami A]
 *                [--user-data TEXT] [--token T] [--tag K=V]... [--dry-run]
 *   aws-ec2-tool describe [--tag K=V | --tag-key K] [--id ID]...
 *   aws-ec2-tool terminate ID...
 *   aws-ec2-tool prices TYPE...
 *   aws-ec2-tool scores CAPACITY TYPE...
 *   aws-ec2-tool dry-run ACTION
 *   aws-ec2-tool check [--ami A] [--type T] [--profile P]  (gw_aws_check's lines, its status) */
#include "aws_check.h"
#include "aws_ec2.h"
#include "sl_awscreds.h"
#include "sl_err.h"
#include "sl_http.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(int r, const struct aws_ec2_error *e) {
  json_t *o = json_pack("{s:s, s:s, s:s, s:I}", "error", sl_errname(r), "code", e->code,
                        "message", e->message, "status", (json_int_t)e->http_status);
  json_dumpf(o, stdout, JSON_COMPACT);
  printf("\n");
  json_decref(o);
  return 1;
}

static json_t *instance_json(const struct aws_instance *i) {
  return json_pack("{s:s, s:s, s:s, s:s, s:b, s:I, s:s, s:s, s:s, s:s, s:s, s:s}", "id", i->id,
                   "type", i->type, "zone", i->zone, "state", i->state, "spot", i->spot,
                   "launch_time", (json_int_t)i->launch_time_unix, "private_ip", i->private_ip,
                   "public_ip", i->public_ip, "tag_instance", i->tag_spotlab_instance,
                   "tag_job", i->tag_spotlab_job, "tag_gateway", i->tag_spotlab_gateway,
                   "state_reason", i->state_reason);
}

static int print(json_t *o) {
  json_dumpf(o, stdout, JSON_COMPACT);
  printf("\n");
  json_decref(o);
  return 0;
}

static int run(struct aws_ec2 *c, int argc, char **argv) {
  struct aws_run_req req = {.instance_type = argv[0], .image_id = "ami-0123456789abcdef0"};
  static char keys[AWS_TAGS_MAX][128];
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--spot")) {
      req.spot = true;
    } else if (!strcmp(a, "--dry-run")) {
      req.dry_run = true;
    } else if (v && !strcmp(a, "--max-price")) {
      req.max_price_usd_per_hour = atof(v), i++;
    } else if (v && !strcmp(a, "--zone")) {
      req.zone = v, i++;
    } else if (v && !strcmp(a, "--ami")) {
      req.image_id = v, i++;
    } else if (v && !strcmp(a, "--user-data")) {
      req.user_data = v, i++;
    } else if (v && !strcmp(a, "--token")) {
      req.client_token = v, i++;
    } else if (v && !strcmp(a, "--tag") && strchr(v, '=') && req.n_tags < AWS_TAGS_MAX) {
      size_t k = (size_t)(strchr(v, '=') - v);
      snprintf(keys[req.n_tags], sizeof keys[0], "%.*s", (int)k, v);
      req.tags[req.n_tags] = (struct aws_tag){keys[req.n_tags], v + k + 1};
      req.n_tags++;
      i++;
    } else {
      fprintf(stderr, "run: bad argument %s\n", a);
      return 2;
    }
  }
  struct aws_instance inst;
  struct aws_ec2_error e = {0};
  int r = aws_ec2_run_instances(c, &req, &inst, &e);
  if (r < 0)
    return fail(r, &e);
  return print(req.dry_run ? json_pack("{s:b}", "dry_run_ok", 1) : instance_json(&inst));
}

static int describe(struct aws_ec2 *c, int argc, char **argv) {
  const char *ids[64], *key = NULL, *value = NULL;
  size_t n_ids = 0;
  static char keybuf[128];
  for (int i = 0; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--id") && n_ids < 64) {
      ids[n_ids++] = argv[i + 1];
    } else if (!strcmp(argv[i], "--tag-key")) {
      key = argv[i + 1];
    } else if (!strcmp(argv[i], "--tag") && strchr(argv[i + 1], '=')) {
      size_t k = (size_t)(strchr(argv[i + 1], '=') - argv[i + 1]);
      snprintf(keybuf, sizeof keybuf, "%.*s", (int)k, argv[i + 1]);
      key = keybuf;
      value = argv[i + 1] + k + 1;
    } else {
      fprintf(stderr, "describe: bad argument %s\n", argv[i]);
      return 2;
    }
  }
  struct aws_instance *arr = NULL;
  size_t n = 0;
  struct aws_ec2_error e = {0};
  int r = aws_ec2_describe_instances(c, key, value, n_ids ? ids : NULL, n_ids, &arr, &n, &e);
  if (r < 0)
    return fail(r, &e);
  json_t *a = json_array();
  for (size_t i = 0; i < n; i++)
    json_array_append_new(a, instance_json(&arr[i]));
  free(arr);
  return print(a);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: see the comment at the top of aws-ec2-tool.c\n");
    return 2;
  }
  char region[SL_AWS_REGION_MAX], endpoint[SL_AWS_ENDPOINT_MAX], msg[256] = "";
  struct sl_aws_chain *chain = NULL;
  struct aws_ec2 *c = NULL;
  struct aws_ec2_error e = {0};
  int r, status = 1;
  const char *cmd = argv[1];
  argc -= 2;
  argv += 2;

  if (!strcmp(cmd, "check")) {
    struct gw_aws_check_opts o = {0};
    for (int i = 0; i + 1 < argc; i += 2) {
      if (!strcmp(argv[i], "--ami"))
        o.image_id = argv[i + 1];
      else if (!strcmp(argv[i], "--type"))
        o.instance_type = argv[i + 1];
      else if (!strcmp(argv[i], "--profile"))
        o.iam_instance_profile = argv[i + 1];
    }
    r = gw_aws_check_with(&o, stdout);
    printf("result: %s\n", r == 0 ? "ok" : sl_errname(r));
    return r == 0 ? 0 : 1;
  }

  if (sl_http_global_init() < 0 || sl_aws_region(NULL, region, msg, sizeof msg) < 0 ||
      sl_aws_endpoint("ec2", region, endpoint) < 0 ||
      sl_aws_chain_new(&chain, msg, sizeof msg) < 0 ||
      aws_ec2_new(chain, region, endpoint, &c) < 0) {
    fprintf(stderr, "setup failed: %s\n", msg);
    goto out;
  }
  if (!strcmp(cmd, "run") && argc >= 1) {
    status = run(c, argc, argv);
  } else if (!strcmp(cmd, "describe")) {
    status = describe(c, argc, argv);
  } else if (!strcmp(cmd, "terminate") && argc >= 1) {
    r = aws_ec2_terminate_instances(c, (const char *const *)argv, (size_t)argc, &e);
    status = r < 0 ? fail(r, &e) : print(json_pack("{s:i}", "terminated", argc));
  } else if (!strcmp(cmd, "prices") && argc >= 1) {
    struct aws_spot_price *p = NULL;
    size_t n = 0;
    r = aws_ec2_spot_prices(c, (const char *const *)argv, (size_t)argc, &p, &n, &e);
    if (r < 0) {
      status = fail(r, &e);
    } else {
      json_t *a = json_array();
      for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_pack("{s:s, s:s, s:f, s:I}", "type", p[i].type, "zone",
                                           p[i].zone, "usd_per_hour", p[i].usd_per_hour, "time",
                                           (json_int_t)p[i].time_unix));
      free(p);
      status = print(a);
    }
  } else if (!strcmp(cmd, "scores") && argc >= 2) {
    struct aws_placement_score *s = NULL;
    size_t n = 0;
    r = aws_ec2_placement_scores(c, (const char *const *)argv + 1, (size_t)argc - 1,
                                 atoi(argv[0]), &s, &n, &e);
    if (r < 0) {
      status = fail(r, &e);
    } else {
      json_t *a = json_array();
      for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_pack("{s:s, s:s, s:i}", "region", s[i].region, "zone_id",
                                           s[i].zone_id, "score", s[i].score));
      free(s);
      status = print(a);
    }
  } else if (!strcmp(cmd, "dry-run") && argc == 1) {
    r = aws_ec2_dry_run(c, argv[0], &e);
    status = r < 0 ? fail(r, &e) : print(json_pack("{s:b}", "dry_run_ok", 1));
  } else {
    fprintf(stderr, "unknown command %s\n", cmd);
    status = 2;
  }
out:
  aws_ec2_free(c);
  sl_aws_chain_free(chain);
  return status;
}
