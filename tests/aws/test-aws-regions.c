/* The aws provider with two regions (regions = us-east-1, us-west-2)
 * against the EC2 stand-in (argv[1], tests/pylib/ec2_standin.py) serving
 * both, on a real gateway loop. The store is in us-east-1.
 *
 * Checked: the market offers each type per region and per priced zone,
 * with region and zone filled and the transfer price out of the store's
 * region (0 in it); with no spot capacity anywhere in us-east-1 (the
 * cheaper region) a launch fails over to us-west-2 at once, every refusal
 * in us-east-1, and market() marks the type unavailable in us-east-1 only;
 * a launch asked for a zone or a region goes there (a remembered failure
 * is refused at once, an unknown zone is not supported); a restarted
 * provider finds its instances in both regions, reports neither again,
 * and terminates an instance tagged for it that no record knows in the
 * second region; terminate() ends instances in either region; every call
 * was signed for the region it went to; --check aws checks each region
 * and names the one where a permission is missing; configurations that
 * cannot work are refused when the provider opens. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "aws.h"
#include "aws_ec2.h"
#include "conf.h"
#include "harness.h"
#include "keys.h"
#include "loop.h"
#include "prov-test.h"
#include "sl_awscreds.h"
#include "sl_err.h"
#include "standin-control.h"
#include "sl_json.h"

#define GATEWAY_ID "gw-regions-1"
#define SECRET "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
#define AMI "ami-0123456789abcdef0"
#define EAST "us-east-1"
#define WEST "us-west-2"

static char tmp[] = "/tmp/spotlab-aws-regions-XXXXXX";
static char control_url[128], endpoint[128], state_dir[600];
static pid_t standin_pid;
static struct gw_loop *loop;
static struct gw_config cfg;
static struct gw_worker_boot boot;
static struct gw_keypair gateway_keys;

/* ---- the stand-in ------------------------------------------------------------ */

/* GET (body NULL) or POST body to control_url/path; the JSON answer or NULL. */
static json_t *control(const char *path, const char *body) {
  return standin_control(control_url, path, body);
}

static void post(const char *path, const char *body) {
  json_t *o = control(path, body);
  CHECK(o != NULL);
  json_decref(o);
}

/* The stand-in's newest instance tagged spotlab:instance=id: a new reference, or NULL. */
static json_t *instance_of(const char *id) {
  json_t *all = control("instances", NULL), *found = NULL;
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(all, "instances"), i, v)
    if (!strcmp(sl_json_get_str(json_object_get(v, "tags"), "spotlab:instance", ""), id))
      found = v;
  json_incref(found);
  json_decref(all);
  return found;
}

static const char *state_of(const char *ec2_id) {
  static char state[32];
  json_t *all = control("instances", NULL);
  size_t i;
  json_t *v;
  state[0] = '\0';
  json_array_foreach(json_object_get(all, "instances"), i, v)
    if (!strcmp(sl_json_get_str(v, "id", ""), ec2_id))
      snprintf(state, sizeof state, "%s", sl_json_get_str(v, "state", ""));
  json_decref(all);
  return state;
}

static bool ends_within(const char *ec2_id, int timeout_ms) {
  int64_t end = sl_time_mono_us() + (int64_t)timeout_ms * 1000;
  while (sl_time_mono_us() < end) {
    const char *s = state_of(ec2_id);
    if (!strcmp(s, "shutting-down") || !strcmp(s, "terminated"))
      return true;
    run_for(loop, 100);
  }
  return false;
}

static int calls_seq(void) {
  json_t *o = control("calls", NULL);
  json_t *calls = json_object_get(o, "calls");
  int seq = (int)sl_json_get_int(json_array_get(calls, json_array_size(calls) - 1), "seq", 0);
  json_decref(o);
  return seq;
}

static json_t *calls_since(int seq, const char *action) {
  char path[128];
  snprintf(path, sizeof path, "calls?since=%d&action=%s", seq, action);
  json_t *o = control(path, NULL);
  json_t *calls = json_incref(json_object_get(o, "calls"));
  json_decref(o);
  return calls ? calls : json_array();
}

static int start_standin(const char *script) {
  int fds[2];
  if (pipe(fds) < 0)
    return -errno;
  char dir[700];
  snprintf(dir, sizeof dir, "%s/ec2", tmp);
  standin_pid = fork();
  if (standin_pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    setenv("SPOTLAB_ROOT", "spotlab", 1);
    setenv("PATH", "/usr/bin:/bin", 1); /* no sbin: no script finds the real shutdown */
    /* us-east-1 is the cheaper region for g5.xlarge, so it is tried first */
    execl("/usr/bin/python3", "python3", script, "--state-dir", dir, "--port", "0",
          "--time-scale", "60", "--boot-seconds", "6", "--grace-seconds", "6", "--region",
          EAST "," WEST, "--zones", "ab", "--price", "g5.xlarge/" EAST "=0.2", "--price",
          "g5.xlarge/" WEST "=0.3", "--price", "g5.xlarge/" WEST "b=0.31", (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  char line[512] = "";
  FILE *f = fdopen(fds[0], "r");
  if (!f || !fgets(line, sizeof line, f)) {
    if (f)
      fclose(f);
    return -EIO;
  }
  fclose(f);
  json_error_t e;
  json_t *o = json_loads(line, 0, &e);
  int port = (int)sl_json_get_int(o, "port", 0);
  snprintf(control_url, sizeof control_url, "%s", sl_json_get_str(o, "control", ""));
  json_decref(o);
  if (port <= 0)
    return -EIO;
  snprintf(endpoint, sizeof endpoint, "http://127.0.0.1:%d", port);
  return 0;
}

/* ---- the provider ---------------------------------------------------------------- */

static struct gw_provider *open_aws(struct recorder *rec, char *err, size_t err_size) {
  struct gw_provider_env env = {.cfg = &cfg, .state_dir = state_dir, .gateway_id = GATEWAY_ID,
                                .store_url = "s3://bucket/team", .loop = loop,
                                .on_event = record, .userdata = rec};
  return gw_aws_provider_class.open(&env, err, err_size);
}

static struct gw_provider *open_ok(struct recorder *rec) {
  char err[512] = "";
  struct gw_provider *p = open_aws(rec, err, sizeof err);
  if (!p)
    fprintf(stderr, "open: %s\n", err);
  return p;
}

static int launch_in(struct gw_provider *p, const char *type, const char *zone,
                     char id[GW_INSTANCE_ID_MAX]) {
  struct gw_launch req;
  memset(&req, 0, sizeof req);
  snprintf(req.type, sizeof req.type, "%s", type);
  snprintf(req.zone, sizeof req.zone, "%s", zone);
  req.spot = true;
  req.job = 9;
  snprintf(req.user, sizeof req.user, "alice");
  req.boot = &boot;
  return p->ops->launch(p, &req, id);
}

/* The offer of type in region and zone ("": the region's own), or NULL. */
static const struct gw_instance_type *offer(struct gw_provider *p, const char *type,
                                            const char *region, const char *zone) {
  const struct gw_instance_type *t;
  size_t n;
  if (p->ops->market(p, &t, &n) < 0)
    return NULL;
  for (size_t i = 0; i < n; i++)
    if (!strcmp(t[i].name, type) && !strcmp(t[i].region, region) && !strcmp(t[i].zone, zone))
      return &t[i];
  return NULL;
}

static void set(const char *section, const char *key, const char *value) {
  char err[256];
  int r = gw_config_set(&cfg, section, key, value, err, sizeof err);
  if (r < 0)
    fprintf(stderr, "%s: %s\n", key, err);
  CHECK_INT(r, 0);
}

/* ---- the tests ------------------------------------------------------------------- */

static void refused(const char *key, const char *value, const char *says) {
  struct gw_config saved = cfg;
  struct recorder rec = {0};
  char err[512] = "";
  set("provider.aws", key, value);
  struct gw_provider *p = open_aws(&rec, err, sizeof err);
  CHECK(p == NULL);
  if (p)
    p->ops->destroy(p);
  if (!strstr(err, says))
    fprintf(stderr, "%s = %s: \"%s\" does not say \"%s\"\n", key, value, err, says);
  CHECK(strstr(err, says) != NULL);
  cfg = saved;
}

static void test_refusals(void) {
  refused("region", EAST, "alternatives");
  refused("zones", "us-east-1a, eu-west-1a", "eu-west-1a is in none of the regions");
  refused("zones", "us-east-1a, us-east-1b", "region us-west-2 has none");
  refused("subnets", "subnet-0123456789abcdef0", "name each subnet's zone");
  refused("regions", EAST ", " EAST, "listed twice");
  char err[256];
  CHECK(gw_config_set(&cfg, "provider.aws", "transfer_usd_per_gb", "cheap", err, sizeof err) < 0);
  CHECK(gw_config_set(&cfg, "provider.aws", "regions", "us-east-1,US_WEST", err, sizeof err) < 0);
}

/* Offers per region and per priced zone, with the transfer price. */
static void test_market(struct gw_provider *p) {
  int64_t end = sl_time_mono_us() + 10 * SL_US_PER_S;
  while (!offer(p, "g5.xlarge", WEST, WEST "b") && sl_time_mono_us() < end)
    run_for(loop, 50); /* the first poll's prices */
  const struct gw_instance_type *e = offer(p, "g5.xlarge", EAST, "");
  const struct gw_instance_type *w = offer(p, "g5.xlarge", WEST, "");
  const struct gw_instance_type *wb = offer(p, "g5.xlarge", WEST, WEST "b");
  CHECK(e && w && wb);
  if (!e || !w || !wb)
    return;
  CHECK_NEAR(e->spot_usd_per_hour, 0.2, 1e-9);
  CHECK_NEAR(e->move_usd_per_gb, 0, 1e-12); /* the store's region */
  CHECK_NEAR(w->spot_usd_per_hour, 0.3, 1e-9); /* the region's cheapest zone */
  CHECK_NEAR(w->move_usd_per_gb, 0.02, 1e-12);
  CHECK_NEAR(wb->spot_usd_per_hour, 0.31, 1e-9);
  CHECK_NEAR(wb->move_usd_per_gb, 0.02, 1e-12);
  CHECK_INT(wb->gpus, 1);
  CHECK(offer(p, "g5.xlarge", EAST, EAST "a") && offer(p, "g5.xlarge", EAST, EAST "b"));
  CHECK(!offer(p, "g5.xlarge", EAST, EAST "c")); /* the stand-in has no zone c */
  CHECK(offer(p, "p3.2xlarge", WEST, WEST "a") != NULL);
  struct gw_instance_type first;
  CHECK_INT(gw_provider_type(p, "g5.xlarge", &first), 0); /* by name: the first region's */
  CHECK_STR(first.region, EAST);
  CHECK_STR(first.zone, "");
}

/* No spot capacity anywhere in us-east-1: the launch goes to us-west-2. */
static void test_failover(struct gw_provider *p, struct recorder *rec,
                          char west_id[GW_INSTANCE_ID_MAX]) {
  post("fail", "{\"code\":\"InsufficientInstanceCapacity\",\"region\":\"" EAST "\","
               "\"count\":-1}");
  int seq = calls_seq();
  CHECK_INT(launch_in(p, "g5.xlarge", "", west_id), 0);
  int i = wait_event(loop, rec, GW_PROVIDER_LAUNCHED, west_id, 15000);
  CHECK(i >= 0);
  if (i >= 0) {
    CHECK(!strncmp(rec->ev[i].info.zone, WEST, strlen(WEST)));
    CHECK_NEAR(rec->ev[i].info.price_usd_per_hour, 0.3, 1e-9);
  }
  json_t *inst = instance_of(west_id);
  CHECK_STR(inst ? sl_json_get_str(inst, "region", "") : "", WEST);
  CHECK_STR(inst ? sl_json_get_str(json_object_get(inst, "tags"), "spotlab:gateway", "") : "",
            GATEWAY_ID);
  json_decref(inst);
  json_t *calls = calls_since(seq, "RunInstances");
  size_t k;
  json_t *c;
  int east_refused = 0, west_ok = 0, other = 0;
  json_array_foreach(calls, k, c) {
    const char *region = sl_json_get_str(c, "region", ""), *code = sl_json_get_str(c, "code", "");
    if (!strcmp(region, EAST) && !strcmp(code, "InsufficientInstanceCapacity"))
      east_refused++;
    else if (!strcmp(region, WEST) && !strcmp(code, "OK"))
      west_ok++;
    else
      other++;
  }
  json_decref(calls);
  CHECK_INT(east_refused, 2); /* zones a and b, each once */
  CHECK_INT(west_ok, 1);
  CHECK_INT(other, 0);
  const struct gw_instance_type *e = offer(p, "g5.xlarge", EAST, "");
  const struct gw_instance_type *w = offer(p, "g5.xlarge", WEST, "");
  CHECK(e && e->unavailable_until_us > sl_time_real_us());
  CHECK(w && w->unavailable_until_us == 0);
  e = offer(p, "g5.xlarge", EAST, EAST "a");
  CHECK(e && e->unavailable_until_us > sl_time_real_us());

  char out[GW_INSTANCE_ID_MAX];
  CHECK_INT(launch_in(p, "g5.xlarge", EAST, out), -EAGAIN); /* remembered: refused at once */
  CHECK_INT(launch_in(p, "g5.xlarge", EAST "b", out), -EAGAIN);
  CHECK_INT(launch_in(p, "g5.xlarge", "eu-west-1a", out), SL_ENOTSUP);
  CHECK_INT(launch_in(p, "g5.xlarge", "eu-west-1", out), SL_ENOTSUP);
  post("fail", "{\"clear\":true}");
}

/* A launch asked for a zone, and one asked for a region. */
static void test_asked(struct gw_provider *p, struct recorder *rec, char zone_id[GW_INSTANCE_ID_MAX],
                       char east_id[GW_INSTANCE_ID_MAX]) {
  CHECK_INT(launch_in(p, "g5.xlarge", WEST "b", zone_id), 0);
  int i = wait_event(loop, rec, GW_PROVIDER_LAUNCHED, zone_id, 15000);
  CHECK(i >= 0);
  if (i >= 0)
    CHECK_STR(rec->ev[i].info.zone, WEST "b");
  CHECK_INT(launch_in(p, "p3.2xlarge", EAST, east_id), 0);
  i = wait_event(loop, rec, GW_PROVIDER_LAUNCHED, east_id, 15000);
  CHECK(i >= 0);
  if (i >= 0)
    CHECK(!strncmp(rec->ev[i].info.zone, EAST, strlen(EAST)));
  char path[800];
  snprintf(path, sizeof path, "%s/aws/instances/%s.json", state_dir, east_id);
  json_error_t e;
  json_t *o = json_load_file(path, 0, &e);
  CHECK_STR(o ? sl_json_get_str(o, "region", "") : "", EAST); /* the record carries it */
  json_decref(o);
}

/* Starts an instance in region tagged for this gateway that no record knows. */
static void start_stray(const char *region, char ec2_id[64]) {
  struct sl_aws_chain *chain = NULL;
  struct aws_ec2 *ec2 = NULL;
  char err[256];
  struct aws_instance got;
  struct aws_ec2_error e;
  memset(&got, 0, sizeof got);
  ec2_id[0] = '\0';
  CHECK_INT(sl_aws_chain_new(&chain, err, sizeof err), 0);
  CHECK_INT(aws_ec2_new(chain, region, endpoint, &ec2), 0);
  struct aws_run_req req = {.image_id = AMI, .instance_type = "g4dn.xlarge",
                            .client_token = "stray-west",
                            .tags = {{"spotlab:gateway", GATEWAY_ID},
                                     {"spotlab:instance", "sl-eeeeeeeeeeeeeeee"}},
                            .n_tags = 2};
  CHECK_INT(aws_ec2_run_instances(ec2, &req, &got, &e), 0);
  snprintf(ec2_id, 64, "%s", got.id);
  aws_ec2_free(ec2);
  sl_aws_chain_free(chain);
}

static bool listed(const struct gw_instance_info *list, size_t n, const char *id,
                   const char *region) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(list[i].instance_id, id))
      return !strncmp(list[i].zone, region, strlen(region)) && list[i].running;
  return false;
}

/* A restart finds instances in both regions and ends a stray in the second. */
static struct gw_provider *test_restart(struct gw_provider *p, const char *west_id,
                                        const char *zone_id, const char *east_id) {
  p->ops->destroy(p);
  char stray[64];
  start_stray(WEST, stray);
  int seq = calls_seq();
  static struct recorder rec2;
  memset(&rec2, 0, sizeof rec2);
  p = open_ok(&rec2);
  CHECK(p != NULL);
  if (!p)
    return NULL;
  struct gw_instance_info *list = NULL;
  size_t n = 0;
  CHECK_INT(p->ops->list(p, &list, &n), 0);
  CHECK_INT(n, 3);
  CHECK(listed(list, n, west_id, WEST) && listed(list, n, zone_id, WEST) &&
        listed(list, n, east_id, EAST));
  free(list);
  CHECK(ends_within(stray, 10000));
  run_for(loop, 600); /* two polls of both regions */
  CHECK_INT(count_events(&rec2, GW_PROVIDER_LAUNCHED), 0); /* reported before the restart */
  CHECK_INT(count_events(&rec2, GW_PROVIDER_TERMINATED), 0);
  json_t *calls = calls_since(seq, "TerminateInstances");
  size_t k;
  json_t *c;
  int west_terms = 0;
  json_array_foreach(calls, k, c) {
    json_t *params = json_object_get(c, "params");
    CHECK_STR(sl_json_get_str(params, "InstanceId.1", ""), stray); /* nothing else */
    west_terms += !strcmp(sl_json_get_str(c, "region", ""), WEST);
  }
  CHECK(west_terms >= 1);
  json_decref(calls);
  calls = calls_since(seq, "DescribeInstances");
  int east = 0, west = 0;
  json_array_foreach(calls, k, c) {
    east += !strcmp(sl_json_get_str(c, "region", ""), EAST);
    west += !strcmp(sl_json_get_str(c, "region", ""), WEST);
  }
  json_decref(calls);
  CHECK(east >= 1 && west >= 1);
  /* the ends: terminate() in either region */
  CHECK_INT(p->ops->terminate(p, west_id), 0);
  CHECK_INT(p->ops->terminate(p, zone_id), 0);
  CHECK_INT(p->ops->terminate(p, east_id), 0);
  CHECK(wait_event(loop, &rec2, GW_PROVIDER_TERMINATED, west_id, 15000) >= 0);
  CHECK(wait_event(loop, &rec2, GW_PROVIDER_TERMINATED, zone_id, 15000) >= 0);
  CHECK(wait_event(loop, &rec2, GW_PROVIDER_TERMINATED, east_id, 15000) >= 0);
  json_t *w = instance_of(west_id), *e = instance_of(east_id);
  CHECK(w && e);
  if (w && e) {
    CHECK(ends_within(sl_json_get_str(w, "id", ""), 5000));
    CHECK(ends_within(sl_json_get_str(e, "id", ""), 5000));
  }
  json_decref(w);
  json_decref(e);
  double usd = 0;
  CHECK_INT(p->ops->billed_usd(p, west_id, sl_time_real_us(), &usd), 0);
  CHECK(usd > 0);
  return p;
}

/* --check aws: each region in turn; a denial in one is named there. */
static void test_check(void) {
  char *text = NULL;
  size_t size = 0;
  FILE *out = open_memstream(&text, &size);
  CHECK_INT(gw_aws_provider_class.check(&cfg, out), 0);
  fclose(out);
  CHECK(text && strstr(text, "region: " EAST) && strstr(text, "region: " WEST));
  CHECK(text && !strstr(text, "missing"));
  free(text);
  post("deny", "{\"action\":\"RunInstances\",\"region\":\"" WEST "\"}");
  text = NULL;
  out = open_memstream(&text, &size);
  CHECK(gw_aws_provider_class.check(&cfg, out) < 0);
  fclose(out);
  const char *west = text ? strstr(text, "region: " WEST) : NULL;
  const char *missing = text ? strstr(text, "missing IAM permission ec2:RunInstances") : NULL;
  CHECK(west && missing && missing > west); /* named in us-west-2's section only */
  if (!(west && missing && missing > west))
    fprintf(stderr, "--check aws:\n%s\n", text ? text : "");
  free(text);
  post("deny", "{\"action\":\"RunInstances\",\"region\":\"" WEST "\",\"deny\":false}");
}

static void test_signed(void) {
  json_t *all = control("calls", NULL);
  size_t i, bad = 0, n = 0, regions = 0;
  json_t *c;
  json_array_foreach(json_object_get(all, "calls"), i, c) {
    n++;
    bad += !sl_json_get_bool(c, "signature_ok", false);
    const char *r = sl_json_get_str(c, "region", "");
    regions += !strcmp(r, EAST) || !strcmp(r, WEST);
  }
  json_decref(all);
  CHECK(n > 10);
  CHECK_INT(bad, 0);
  CHECK_INT(regions, n);
}

static int write_worker(const char *prefix) {
  char path[800];
  snprintf(path, sizeof path, "%s/bin", prefix);
  if (mkdir(prefix, 0700) < 0 || mkdir(path, 0700) < 0)
    return -errno;
  snprintf(path, sizeof path, "%s/bin/spotlab-worker", prefix);
  FILE *f = fopen(path, "w");
  if (!f)
    return -errno;
  fputs("#!/bin/sh\n# stands in for spotlab-worker: waits to be stopped\nexec sleep 600\n", f);
  fclose(f);
  return chmod(path, 0700) < 0 ? -errno : 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s EC2_STANDIN.py\n", argv[0]);
    return 2;
  }
  if (!mkdtemp(tmp)) {
    perror("mkdtemp");
    return 1;
  }
  curl_global_init(CURL_GLOBAL_DEFAULT);
  if (start_standin(argv[1]) < 0) {
    fprintf(stderr, "the EC2 stand-in did not start\n");
    return 1;
  }
  snprintf(state_dir, sizeof state_dir, "%s/state", tmp);
  char prefix[700];
  snprintf(prefix, sizeof prefix, "%s/prefix", tmp);
  CHECK_INT(write_worker(prefix), 0);
  setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
  setenv("AWS_SECRET_ACCESS_KEY", SECRET, 1);
  unsetenv("AWS_SESSION_TOKEN");
  unsetenv("AWS_PROFILE");
  unsetenv("AWS_REGION");
  unsetenv("AWS_DEFAULT_REGION");
  setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent", 1);
  setenv("AWS_CONFIG_FILE", "/nonexistent", 1);
  setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
  setenv("AWS_ENDPOINT_URL_EC2", endpoint, 1); /* one endpoint serves both regions */

  loop = gw_loop_new();
  CHECK_INT(gw_provider_register(&gw_aws_provider_class), 0);
  gw_config_defaults(&cfg);
  set("store", "region", EAST);
  set("provider.aws", "regions", EAST ", " WEST);
  set("provider.aws", "instance_types", "g5.xlarge,g4dn.xlarge,p3.2xlarge");
  set("provider.aws", "ami", AMI);
  set("provider.aws", "worker_prefix", prefix);
  set("provider.aws", "advertise", "tcp://10.0.0.5:7401");
  set("provider.aws", "poll", "200ms");
  CHECK_INT(gw_keys_generate(&gateway_keys), 0);
  boot.gateway = "tcp://127.0.0.1:7401";
  boot.gateway_public = gateway_keys.public_z85;
  CHECK_INT(gw_keys_generate(&boot.keys), 0);

  test_refusals();
  struct recorder rec = {0};
  struct gw_provider *p = open_ok(&rec);
  CHECK(p != NULL);
  if (p) {
    char west_id[GW_INSTANCE_ID_MAX] = "", zone_id[GW_INSTANCE_ID_MAX] = "",
         east_id[GW_INSTANCE_ID_MAX] = "";
    test_market(p);
    test_failover(p, &rec, west_id);
    test_asked(p, &rec, zone_id, east_id);
    test_check();
    p = test_restart(p, west_id, zone_id, east_id);
    if (p)
      p->ops->destroy(p);
  }
  test_signed();
  CHECK(!rec.overflow);
  if (standin_pid > 0) {
    kill(standin_pid, SIGTERM);
    waitpid(standin_pid, NULL, 0);
  }
  gw_loop_free(loop);
  char cmd[800];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
  if (!th_failures && system(cmd) != 0)
    fprintf(stderr, "cannot remove %s\n", tmp);
  if (th_failures)
    fprintf(stderr, "left %s for a look\n", tmp);
  TEST_MAIN_END();
}
