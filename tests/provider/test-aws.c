/* The aws provider end to end against the EC2 stand-in (argv[1],
 * tests/pylib/ec2_standin.py) on a real gateway loop. Instances run their
 * user data on this machine; the worker is a stand-in under worker_prefix
 * that keeps the config it was given and sleeps.
 *
 * Checked: a spot launch goes to the cheapest zone with its tags, its
 * ClientToken and instance-initiated shutdown = terminate, and its worker
 * gets the config (advertised address, its own id, metadata "aws", the s3
 * store, the gateway's [worker] and [store] part_mib settings); a capacity failure in one zone moves the launch to another and
 * is remembered (a launch there is refused at once, market() tells when a
 * type has no zone left); RequestLimitExceeded is retried with the same
 * token; expired credentials fail with a sentence naming their source and
 * never the secret; the bill (60-second minimum, the spot price over time,
 * on-demand); terminate and a spot interruption end instances (by_market
 * only for the latter); a restart adopts known instances, terminates a
 * tagged instance no record knows, and a launch cut short by the restart
 * (reported or not, answered or not) ends with exactly one instance; every
 * call the stand-in saw was correctly signed; open()'s refusals. */
#include <errno.h>
#include <fcntl.h>
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
#include "sl_hmac.h"
#include "sl_json.h"

#define GATEWAY_ID "gw-test-1"
#define SECRET "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
#define AMI "ami-0123456789abcdef0"

static char tmp[] = "/tmp/spotlab-aws-XXXXXX";
static char control_url[128], endpoint[128], state_dir[600];
static pid_t standin_pid;
static struct gw_loop *loop;
static struct gw_config cfg;
static struct gw_worker_boot boot;
static struct gw_keypair gateway_keys;

/* ---- the stand-in's control API ------------------------------------------ */

/* GET (body NULL) or POST body to control_url/path; the JSON answer or NULL. */
static json_t *control(const char *path, const char *body) {
  return standin_control(control_url, path, body);
}

static void post(const char *path, const char *body) {
  json_t *o = control(path, body);
  CHECK(o != NULL);
  json_decref(o);
}

/* The stand-in's instances tagged spotlab:instance=id (NULL: all), newest last. */
static json_t *instances_of(const char *id) {
  json_t *all = control("instances", NULL), *out = json_array();
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(all, "instances"), i, v) {
    const char *tag = sl_json_get_str(json_object_get(v, "tags"), "spotlab:instance", "");
    if (!id || !strcmp(tag, id))
      json_array_append(out, v);
  }
  json_decref(all);
  return out;
}

/* The one stand-in instance of id: a new reference, or NULL. */
static json_t *instance_of(const char *id) {
  json_t *list = instances_of(id);
  json_t *one = json_array_size(list) == 1 ? json_incref(json_array_get(list, 0)) : NULL;
  json_decref(list);
  return one;
}

static int calls_seq(void) {
  json_t *o = control("calls", NULL);
  json_t *calls = json_object_get(o, "calls");
  int seq = (int)sl_json_get_int(json_array_get(calls, json_array_size(calls) - 1), "seq", 0);
  json_decref(o);
  return seq;
}

/* The calls of action after seq. */
static json_t *calls_since(int seq, const char *action) {
  char path[128];
  snprintf(path, sizeof path, "calls?since=%d&action=%s", seq, action);
  json_t *o = control(path, NULL);
  json_t *calls = json_incref(json_object_get(o, "calls"));
  json_decref(o);
  return calls ? calls : json_array();
}

static const char *state_of(const char *ec2_or_tag) {
  static char state[32];
  json_t *all = control("instances", NULL);
  size_t i;
  json_t *v;
  state[0] = '\0';
  json_array_foreach(json_object_get(all, "instances"), i, v)
    if (!strcmp(sl_json_get_str(v, "id", ""), ec2_or_tag))
      snprintf(state, sizeof state, "%s", sl_json_get_str(v, "state", ""));
  json_decref(all);
  return state;
}

/* Turns the loop until the stand-in says ec2_id is shutting down or gone. */
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

/* ---- the stand-in process ------------------------------------------------- */

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
    /* instances keep their own root under their folder; no sbin on PATH,
     * so no script ever finds the real shutdown */
    setenv("SPOTLAB_ROOT", "spotlab", 1);
    setenv("PATH", "/usr/bin:/bin", 1);
    execl("/usr/bin/python3", "python3", script, "--state-dir", dir, "--port", "0",
          "--time-scale", "60", "--boot-seconds", "6", "--grace-seconds", "6", "--zones", "abc",
          "--price", "g5.xlarge/us-east-1b=0.25", (char *)NULL);
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

static void stop_standin(void) {
  if (standin_pid > 0) {
    kill(standin_pid, SIGTERM);
    waitpid(standin_pid, NULL, 0);
  }
}

/* ---- the provider ---------------------------------------------------------- */

static struct gw_provider *open_aws(struct recorder *rec, const char *store, char *err,
                                    size_t err_size) {
  struct gw_provider_env env = {.cfg = &cfg, .state_dir = state_dir, .gateway_id = GATEWAY_ID,
                                .store_url = store, .loop = loop, .on_event = record,
                                .userdata = rec};
  return gw_aws_provider_class.open(&env, err, err_size);
}

static struct gw_provider *open_ok(struct recorder *rec) {
  char err[512] = "";
  struct gw_provider *p = open_aws(rec, "s3://bucket/team", err, sizeof err);
  if (!p)
    fprintf(stderr, "open: %s\n", err);
  return p;
}

static struct gw_launch request(const char *type, bool spot) {
  struct gw_launch req;
  memset(&req, 0, sizeof req);
  snprintf(req.type, sizeof req.type, "%s", type);
  req.spot = spot;
  req.job = 7;
  snprintf(req.user, sizeof req.user, "alice");
  req.boot = &boot;
  return req;
}

static int launch(struct gw_provider *p, const char *type, bool spot, char id[GW_INSTANCE_ID_MAX]) {
  struct gw_launch req = request(type, spot);
  return p->ops->launch(p, &req, id);
}

static const struct gw_instance_type *market_type(struct gw_provider *p, const char *name) {
  const struct gw_instance_type *t;
  size_t n;
  if (p->ops->market(p, &t, &n) < 0)
    return NULL;
  for (size_t i = 0; i < n; i++)
    if (!strcmp(t[i].name, name))
      return &t[i];
  return NULL;
}

/* The config the stand-in worker kept (waited for with a deadline). */
static json_t *seen_config(const char *dir, int timeout_ms) {
  char path[700];
  snprintf(path, sizeof path, "%s/spotlab/seen-config.json", dir);
  int64_t end = sl_time_mono_us() + (int64_t)timeout_ms * 1000;
  for (;;) {
    json_error_t e;
    json_t *o = json_load_file(path, 0, &e);
    if (o || sl_time_mono_us() > end)
      return o;
    run_for(loop, 50); /* the file has no event to wait on */
  }
}

static void expected_token(const char *id, const char *zone, char ret[48]) {
  char text[256], hex[SL_HMAC_HEX_LEN + 1];
  int n = snprintf(text, sizeof text, "%s/%s/%s", GATEWAY_ID, id, zone);
  sl_sha256_hex(text, (size_t)n, hex);
  snprintf(ret, 48, "sl-%.40s", hex);
}

/* ---- the tests -------------------------------------------------------------- */

static void test_open_refusals(void) {
  struct recorder rec = {0};
  char err[512] = "";
  CHECK(open_aws(&rec, "file:///var/lib/spotlab/store", err, sizeof err) == NULL);
  CHECK(strstr(err, "s3://") != NULL);
  err[0] = '\0';
  CHECK(open_aws(&rec, NULL, err, sizeof err) == NULL);
  CHECK(strstr(err, "s3://") != NULL);
  struct gw_config saved = cfg;
  char msg[256];
  CHECK_INT(gw_config_set(&cfg, "provider.aws", "advertise", "", msg, sizeof msg), 0);
  err[0] = '\0';
  CHECK(open_aws(&rec, "s3://bucket/team", err, sizeof err) == NULL);
  CHECK(strstr(err, "advertise") != NULL);
  cfg = saved;
  CHECK_INT(gw_config_set(&cfg, "provider.aws", "ami", "", msg, sizeof msg), 0);
  err[0] = '\0';
  CHECK(open_aws(&rec, "s3://bucket/team", err, sizeof err) == NULL);
  CHECK(strstr(err, "ami") != NULL);
  cfg = saved;
  CHECK_INT(gw_config_set(&cfg, "provider.aws", "instance_types", "g5.xlarge,x9.huge", msg,
                          sizeof msg), 0);
  err[0] = '\0';
  CHECK(open_aws(&rec, "s3://bucket/team", err, sizeof err) == NULL);
  CHECK(strstr(err, "x9.huge") != NULL);
  cfg = saved;
  /* option values are checked as the file is read */
  CHECK(gw_config_set(&cfg, "provider.aws", "poll", "soon", msg, sizeof msg) < 0);
  CHECK(gw_config_set(&cfg, "provider.aws", "ami", "ubuntu", msg, sizeof msg) < 0);
  CHECK(gw_config_set(&cfg, "provider.aws", "subnets", "us-east-1a=subnet-1,subnet-2", msg,
                      sizeof msg) < 0);
  CHECK(gw_config_set(&cfg, "provider.aws", "worker_prefix", "opt/spotlab", msg, sizeof msg) < 0);
  cfg = saved;
}

/* The first launch: cheapest zone, tags, token, worker config, bill. */
static void test_launch(struct gw_provider *p, struct recorder *rec, char id[GW_INSTANCE_ID_MAX]) {
  CHECK(p->needs_bundle == false);
  char out[GW_INSTANCE_ID_MAX];
  CHECK_INT(launch(p, "x9.huge", true, out), SL_ENAME);
  int seq = calls_seq();
  CHECK_INT(launch(p, "g5.xlarge", true, id), 0);
  CHECK(!strncmp(id, "sl-", 3) && strlen(id) == 19);
  char record[800];
  snprintf(record, sizeof record, "%s/aws/instances/%s.json", state_dir, id);
  struct stat st;
  CHECK(stat(record, &st) == 0 && (st.st_mode & 0777) == 0600); /* before any EC2 call */
  CHECK_INT(count_events(rec, GW_PROVIDER_LAUNCHED), 0); /* never from inside launch() */
  int i = wait_event(loop, rec, GW_PROVIDER_LAUNCHED, id, 15000);
  CHECK(i >= 0);
  if (i < 0)
    return;
  CHECK_STR(rec->ev[i].info.zone, "us-east-1b");
  CHECK_NEAR(rec->ev[i].info.price_usd_per_hour, 0.25, 1e-9);
  CHECK(rec->ev[i].info.spot);
  json_t *inst = instance_of(id);
  CHECK(inst != NULL);
  if (!inst)
    return;
  json_t *tags = json_object_get(inst, "tags");
  CHECK_STR(sl_json_get_str(tags, "spotlab:gateway", ""), GATEWAY_ID);
  CHECK_STR(sl_json_get_str(tags, "spotlab:job", ""), "J000007");
  CHECK(sl_json_get_bool(inst, "spot", false));
  CHECK_STR(sl_json_get_str(inst, "shutdown_behavior", ""), "terminate");
  CHECK_STR(sl_json_get_str(inst, "image", ""), AMI);
  char token[48];
  expected_token(id, "us-east-1b", token);
  CHECK_STR(sl_json_get_str(inst, "client_token", ""), token);
  json_t *calls = calls_since(seq, "RunInstances");
  CHECK_INT(json_array_size(calls), 1);
  json_decref(calls);
  json_t *wc = seen_config(sl_json_get_str(inst, "dir", ""), 15000);
  CHECK(wc != NULL);
  CHECK_STR(sl_json_get_str(wc, "instance", ""), id);
  CHECK_STR(sl_json_get_str(wc, "gateway", ""), "tcp://10.0.0.5:7401");
  CHECK_STR(sl_json_get_str(wc, "gateway_public", ""), gateway_keys.public_z85);
  CHECK_STR(sl_json_get_str(wc, "secret", ""), boot.keys.secret_z85);
  CHECK_STR(sl_json_get_str(wc, "metadata", ""), "aws");
  CHECK_STR(sl_json_get_str(wc, "zone", ""), "us-east-1b");
  CHECK_STR(sl_json_get_str(wc, "store", ""), "s3://bucket/team");
  CHECK_INT(sl_json_get_int(wc, "orphan_timeout_ms", 0), 900000);
  /* the gateway's [worker] and [store] settings reach the instance's worker */
  CHECK(sl_json_get_bool(wc, "move_on_rebalance", false));
  CHECK(sl_json_get_int(wc, "data_cache_bytes", 0) == 3LL << 30);
  CHECK(sl_json_get_int(wc, "part_bytes", 0) == 16 << 20);
  json_decref(wc);
  json_decref(inst);
  /* the bill: a 60-second minimum, then per second at the price in force */
  struct gw_instance_info *list = NULL;
  size_t n = 0;
  CHECK_INT(p->ops->list(p, &list, &n), 0);
  CHECK_INT(n, 1);
  int64_t launched = n ? list[0].launched_us : 0;
  free(list);
  double usd = -1;
  CHECK_INT(p->ops->billed_usd(p, id, launched + 5 * SL_US_PER_S, &usd), 0);
  CHECK_NEAR(usd, 0.25 * 60 / 3600, 1e-9);
  CHECK_INT(p->ops->billed_usd(p, id, launched + 150 * SL_US_PER_S, &usd), 0);
  CHECK_NEAR(usd, 0.25 * 150 / 3600, 1e-9);
  CHECK_INT(p->ops->billed_usd(p, "sl-0000000000000000", launched, &usd), -ENOENT);
  /* a new spot price in its zone: the bill follows it from then on */
  post("prices", "{\"type\":\"g5.xlarge\",\"zone\":\"us-east-1b\",\"price\":0.5}");
  int64_t end = sl_time_mono_us() + 10 * SL_US_PER_S;
  const struct gw_instance_type *t;
  while ((t = market_type(p, "g5.xlarge")) && t->spot_usd_per_hour == 0.25 &&
         sl_time_mono_us() < end)
    run_for(loop, 50);
  CHECK(t && t->spot_usd_per_hour > 0.25 && t->spot_usd_per_hour < 0.5); /* now zones a, c */
  int64_t later = sl_time_real_us() + 1000 * SL_US_PER_S;
  CHECK_INT(p->ops->billed_usd(p, id, later, &usd), 0);
  double secs = (double)((later - launched) / SL_US_PER_S);
  /* EC2's price times are whole seconds: a change in the launch's second
   * applies from the launch */
  CHECK(usd > 0.5 * (secs - 30) / 3600 && usd <= 0.5 * secs / 3600 + 1e-9);
}

static void test_capacity(struct gw_provider *p, struct recorder *rec) {
  post("fail", "{\"code\":\"InsufficientInstanceCapacity\",\"type\":\"g5.xlarge\","
               "\"zone\":\"us-east-1b\",\"count\":-1}");
  post("prices", "{\"type\":\"g5.xlarge\",\"zone\":\"us-east-1b\",\"price\":0.2}");
  int64_t end = sl_time_mono_us() + 10 * SL_US_PER_S; /* b is the cheapest zone again */
  const struct gw_instance_type *t;
  while ((t = market_type(p, "g5.xlarge")) && t->spot_usd_per_hour != 0.2 &&
         sl_time_mono_us() < end)
    run_for(loop, 50);
  CHECK(t && t->spot_usd_per_hour == 0.2);
  char id[GW_INSTANCE_ID_MAX];
  CHECK_INT(launch(p, "g5.xlarge", true, id), 0);
  int i = wait_event(loop, rec, GW_PROVIDER_LAUNCHED, id, 15000);
  CHECK(i >= 0);
  if (i >= 0) {
    CHECK(strcmp(rec->ev[i].info.zone, "us-east-1b") != 0);
    CHECK(!strncmp(rec->ev[i].info.zone, "us-east-1", 9));
  }
  /* every refusal was in b (the EC2 client's own HTTP retries may repeat one) */
  json_t *tried = calls_since(0, "RunInstances");
  int failed = 0, failed_elsewhere = 0;
  size_t k;
  json_t *c;
  json_array_foreach(tried, k, c) {
    if (strcmp(sl_json_get_str(c, "code", ""), "InsufficientInstanceCapacity"))
      continue;
    failed++;
    failed_elsewhere += !!strcmp(sl_json_get_str(json_object_get(c, "params"),
                                                 "Placement.AvailabilityZone", ""), "us-east-1b");
  }
  json_decref(tried);
  CHECK(failed >= 1);
  CHECK_INT(failed_elsewhere, 0);
  t = market_type(p, "g5.xlarge");
  CHECK(t && t->unavailable_until_us == 0); /* zones a and c are still there */
  struct gw_launch req = request("g5.xlarge", true);
  snprintf(req.zone, sizeof req.zone, "us-east-1b");
  char out[GW_INSTANCE_ID_MAX];
  CHECK_INT(p->ops->launch(p, &req, out), -EAGAIN); /* remembered: refused at once */
  snprintf(req.zone, sizeof req.zone, "eu-west-1a");
  CHECK_INT(p->ops->launch(p, &req, out), SL_ENOTSUP);
  CHECK_INT(p->ops->terminate(p, id), 0);
  CHECK(wait_event(loop, rec, GW_PROVIDER_TERMINATED, id, 15000) >= 0);

  /* no zone has any: LAUNCH_FAILED -EAGAIN, and the type is unavailable */
  post("fail", "{\"code\":\"InsufficientInstanceCapacity\",\"type\":\"g4dn.xlarge\",\"count\":-1}");
  CHECK_INT(launch(p, "g4dn.xlarge", true, id), 0);
  i = wait_event(loop, rec, GW_PROVIDER_LAUNCH_FAILED, id, 15000);
  CHECK(i >= 0);
  if (i >= 0) {
    CHECK_INT(rec->ev[i].error, -EAGAIN);
    CHECK(strstr(rec->ev[i].message, "g4dn.xlarge") != NULL);
    CHECK(strstr(rec->ev[i].message, "us-east-1a") != NULL);
    CHECK(strstr(rec->ev[i].message, "us-east-1c") != NULL);
  }
  t = market_type(p, "g4dn.xlarge");
  CHECK(t && t->unavailable_until_us > sl_time_real_us());
  CHECK_INT(launch(p, "g4dn.xlarge", true, out), -EAGAIN);
  post("fail", "{\"clear\":true}");
}

static void test_throttled(struct gw_provider *p, struct recorder *rec, char id[GW_INSTANCE_ID_MAX]) {
  int seq = calls_seq();
  post("fail", "{\"code\":\"RequestLimitExceeded\",\"action\":\"RunInstances\",\"count\":2}");
  CHECK_INT(launch(p, "p3.2xlarge", false, id), 0);
  int i = wait_event(loop, rec, GW_PROVIDER_LAUNCHED, id, 20000);
  CHECK(i >= 0);
  if (i >= 0)
    CHECK(!rec->ev[i].info.spot);
  json_t *calls = calls_since(seq, "RunInstances");
  CHECK_INT(json_array_size(calls), 3);
  const char *token = NULL;
  size_t k;
  json_t *c;
  json_array_foreach(calls, k, c) {
    json_t *params = json_object_get(c, "params");
    const char *t = sl_json_get_str(params, "ClientToken", "");
    CHECK(*t);
    if (!token)
      token = t;
    CHECK_STR(t, token); /* a retry is the same request */
    CHECK(!json_object_get(params, "InstanceMarketOptions.MarketType"));
    CHECK_STR(sl_json_get_str(c, "code", ""), k < 2 ? "RequestLimitExceeded" : "OK");
  }
  json_decref(calls);
  double usd = 0;
  struct gw_instance_info *list = NULL;
  size_t n = 0;
  p->ops->list(p, &list, &n);
  for (size_t j = 0; j < n; j++)
    if (!strcmp(list[j].instance_id, id))
      CHECK_INT(p->ops->billed_usd(p, id, list[j].launched_us + 10 * SL_US_PER_S, &usd), 0);
  free(list);
  CHECK_NEAR(usd, 3.06 * 60 / 3600, 1e-9);
}

/* Every RunInstances of a launch loses its connection (no EC2 error code):
 * the same request is tried again, then the launch fails saying so, and
 * the provider goes on (the launch after it is answered). */
static void test_dropped(struct gw_provider *p, struct recorder *rec) {
  int seq = calls_seq();
  post("fail", "{\"code\":\"drop\",\"action\":\"RunInstances\",\"count\":-1}");
  char id[GW_INSTANCE_ID_MAX];
  CHECK_INT(launch(p, "g5.xlarge", true, id), 0);
  /* six tries with full-jitter waits of up to 1, 2, 4, 8 and 16 s between
   * them, each try up to three sends with waits of up to 0.25 and 0.5 s:
   * at most 35.5 s of waiting; 17.75 s on average */
  int i = wait_event(loop, rec, GW_PROVIDER_LAUNCH_FAILED, id, 60000);
  CHECK(i >= 0);
  if (i >= 0) {
    CHECK(rec->ev[i].error < 0 && rec->ev[i].error != -EAGAIN);
    CHECK(strstr(rec->ev[i].message, "RunInstances for g5.xlarge") != NULL);
  }
  json_t *calls = calls_since(seq, "RunInstances");
  CHECK(json_array_size(calls) >= 2);
  json_decref(calls);
  post("fail", "{\"clear\":true}");
  CHECK_INT(launch(p, "g5.xlarge", true, id), 0);
  CHECK(wait_event(loop, rec, GW_PROVIDER_LAUNCHED, id, 20000) >= 0);
  CHECK_INT(p->ops->terminate(p, id), 0);
  CHECK(wait_event(loop, rec, GW_PROVIDER_TERMINATED, id, 15000) >= 0);
}

static void test_auth(struct gw_provider *p, struct recorder *rec) {
  post("credentials", "{\"access_key\":\"AKIDEXAMPLE\",\"expired\":true}");
  char id[GW_INSTANCE_ID_MAX];
  CHECK_INT(launch(p, "g5.xlarge", true, id), 0);
  int i = wait_event(loop, rec, GW_PROVIDER_LAUNCH_FAILED, id, 15000);
  CHECK(i >= 0);
  if (i >= 0) {
    CHECK_INT(rec->ev[i].error, SL_EAUTH);
    CHECK(strstr(rec->ev[i].message, "environment") != NULL);
    CHECK(!strstr(rec->ev[i].message, SECRET));
  }
  post("credentials", "{\"access_key\":\"AKIDEXAMPLE\",\"expired\":false}");
}

static void test_ends(struct gw_provider *p, struct recorder *rec, const char *first,
                      const char *on_demand) {
  json_t *inst = instance_of(on_demand);
  char ec2_id[64] = "";
  snprintf(ec2_id, sizeof ec2_id, "%s", inst ? sl_json_get_str(inst, "id", "") : "");
  json_decref(inst);
  CHECK_INT(p->ops->terminate(p, on_demand), 0);
  int i = wait_event(loop, rec, GW_PROVIDER_TERMINATED, on_demand, 15000);
  CHECK(i >= 0);
  if (i >= 0)
    CHECK(!rec->ev[i].by_market);
  CHECK(ends_within(ec2_id, 5000));
  char body[200];
  snprintf(body, sizeof body, "{\"instance\":\"%s\",\"notice\":false}", first);
  post("interrupt", body);
  i = wait_event(loop, rec, GW_PROVIDER_TERMINATED, first, 15000);
  CHECK(i >= 0);
  if (i >= 0)
    CHECK(rec->ev[i].by_market);
  struct gw_instance_info *list = NULL;
  size_t n = 7;
  CHECK_INT(p->ops->list(p, &list, &n), 0);
  CHECK_INT(n, 0);
  free(list);
  double usd = 0;
  CHECK_INT(p->ops->billed_usd(p, first, sl_time_real_us(), &usd), 0); /* kept after its end */
  CHECK(usd > 0);

  /* taken back while still booting, before any poll listed it: ended at the
   * next poll, not after the grace for a listing that lags */
  post("boot_seconds", "{\"seconds\":60000}");
  char pending[GW_INSTANCE_ID_MAX];
  CHECK_INT(launch(p, "g5.xlarge", true, pending), 0);
  CHECK(wait_event(loop, rec, GW_PROVIDER_LAUNCHED, pending, 15000) >= 0);
  snprintf(body, sizeof body, "{\"instance\":\"%s\",\"notice\":false}", pending);
  post("interrupt", body);
  int64_t t0 = sl_time_mono_us();
  i = wait_event(loop, rec, GW_PROVIDER_TERMINATED, pending, 15000);
  CHECK(i >= 0);
  if (i >= 0)
    CHECK(rec->ev[i].by_market);
  CHECK(sl_time_mono_us() - t0 < 5 * SL_US_PER_S);
  post("boot_seconds", "{\"seconds\":6}");
}

/* Starts an instance tagged for this gateway that no record knows. */
static void start_stray(char ec2_id[64]) {
  struct sl_aws_chain *chain = NULL;
  struct aws_ec2 *ec2 = NULL;
  char err[256];
  struct aws_instance got;
  struct aws_ec2_error e;
  memset(&got, 0, sizeof got);
  CHECK_INT(sl_aws_chain_new(&chain, err, sizeof err), 0);
  CHECK_INT(aws_ec2_new(chain, "us-east-1", endpoint, &ec2), 0);
  struct aws_run_req req = {.image_id = AMI, .instance_type = "g5.xlarge", .zone = "us-east-1a",
                            .client_token = "stray-1",
                            .tags = {{"spotlab:gateway", GATEWAY_ID},
                                     {"spotlab:instance", "sl-ffffffffffffffff"}},
                            .n_tags = 2};
  CHECK_INT(aws_ec2_run_instances(ec2, &req, &got, &e), 0);
  snprintf(ec2_id, 64, "%s", got.id);
  aws_ec2_free(ec2);
  sl_aws_chain_free(chain);
}

/* Rewrites id's record as a launch in flight whose answer was lost (the
 * boot as the test gave it, so the re-issued request is the same). */
static void unanswered(const char *id) {
  char path[800];
  snprintf(path, sizeof path, "%s/aws/instances/%s.json", state_dir, id);
  json_error_t e;
  json_t *o = json_load_file(path, 0, &e);
  CHECK(o != NULL);
  if (!o)
    return;
  json_object_set_new(o, "state", json_string("launching"));
  json_object_set_new(o, "ec2_id", json_string(""));
  json_object_set_new(o, "reported", json_false());
  json_object_set_new(o, "boot", json_pack("{s:s,s:s,s:s,s:s,s:I,s:s,s:s}", "gateway",
                                           boot.gateway, "gateway_public", boot.gateway_public,
                                           "public", boot.keys.public_z85, "secret",
                                           boot.keys.secret_z85, "metrics_per_s", (json_int_t)0,
                                           "bundle_url", "", "bundle_sha256", ""));
  CHECK_INT(json_dump_file(o, path, JSON_COMPACT), 0);
  json_decref(o);
}

static void test_restart(void) {
  struct recorder rec = {0};
  struct gw_provider *p = open_ok(&rec);
  CHECK(p != NULL);
  if (!p)
    return;
  char kept[GW_INSTANCE_ID_MAX], cut[GW_INSTANCE_ID_MAX], stray[64];
  CHECK_INT(launch(p, "g5.xlarge", true, kept), 0);
  CHECK(wait_event(loop, &rec, GW_PROVIDER_LAUNCHED, kept, 15000) >= 0);
  /* the gateway dies right after a launch: no turn of the loop delivers it */
  CHECK_INT(launch(p, "g5.xlarge", true, cut), 0);
  p->ops->destroy(p);
  start_stray(stray);

  struct recorder rec2 = {0};
  p = open_ok(&rec2);
  CHECK(p != NULL);
  if (!p)
    return;
  CHECK(wait_event(loop, &rec2, GW_PROVIDER_LAUNCHED, cut, 15000) >= 0);
  CHECK(ends_within(stray, 10000)); /* tagged for this gateway, known to no record */
  run_for(loop, 500);
  CHECK_INT(find_event(&rec2, GW_PROVIDER_LAUNCHED, kept), -1); /* reported before */
  CHECK_INT(find_event(&rec2, GW_PROVIDER_TERMINATED, kept), -1);
  json_t *list = instances_of(cut);
  CHECK_INT(json_array_size(list), 1);
  json_decref(list);
  json_t *k = instance_of(kept);
  CHECK_STR(k ? sl_json_get_str(k, "state", "") : "", "running");
  json_decref(k);
  struct gw_instance_info *infos = NULL;
  size_t n = 0;
  CHECK_INT(p->ops->list(p, &infos, &n), 0);
  CHECK_INT(n, 2);
  free(infos);

  /* RunInstances answered, its answer lost with the gateway: the next
   * start finds the instance by its tag and starts no other */
  p->ops->destroy(p);
  unanswered(cut);
  int seq = calls_seq();
  struct recorder rec3 = {0};
  p = open_ok(&rec3);
  CHECK(p != NULL);
  if (!p)
    return;
  int i = wait_event(loop, &rec3, GW_PROVIDER_LAUNCHED, cut, 15000);
  CHECK(i >= 0);
  if (i >= 0)
    CHECK(!strncmp(rec3.ev[i].info.zone, "us-east-1", 9));
  json_t *calls = calls_since(seq, "RunInstances");
  CHECK_INT(json_array_size(calls), 0);
  json_decref(calls);
  list = instances_of(cut);
  CHECK_INT(json_array_size(list), 1);
  json_decref(list);
  CHECK_INT(p->ops->terminate(p, kept), 0);
  CHECK_INT(p->ops->terminate(p, cut), 0);
  CHECK(wait_event(loop, &rec3, GW_PROVIDER_TERMINATED, kept, 15000) >= 0);
  CHECK(wait_event(loop, &rec3, GW_PROVIDER_TERMINATED, cut, 15000) >= 0);
  p->ops->destroy(p);
}

static void test_signed(void) {
  json_t *all = control("calls", NULL);
  size_t i, bad = 0, n = 0;
  json_t *c;
  json_array_foreach(json_object_get(all, "calls"), i, c) {
    n++;
    bad += !sl_json_get_bool(c, "signature_ok", false);
  }
  json_decref(all);
  CHECK(n > 10);
  CHECK_INT(bad, 0);
}

static void set(const char *key, const char *value) {
  char err[256];
  int r = gw_config_set(&cfg, "provider.aws", key, value, err, sizeof err);
  if (r < 0)
    fprintf(stderr, "%s: %s\n", key, err);
  CHECK_INT(r, 0);
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
  fputs("#!/bin/sh\n# stands in for spotlab-worker: keeps its config, then waits to be stopped\n"
        "cp \"$2\" seen-config.json.tmp && mv seen-config.json.tmp seen-config.json\n"
        "exec sleep 600\n", f);
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
  setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent", 1);
  setenv("AWS_CONFIG_FILE", "/nonexistent", 1);
  setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
  setenv("AWS_REGION", "us-east-1", 1);
  setenv("AWS_ENDPOINT_URL_EC2", endpoint, 1);

  loop = gw_loop_new();
  CHECK_INT(gw_provider_register(&gw_aws_provider_class), 0);
  gw_config_defaults(&cfg);
  set("zones", "us-east-1a, us-east-1b, us-east-1c");
  set("instance_types", "g5.xlarge,g4dn.xlarge,p3.2xlarge");
  set("ami", AMI);
  set("worker_prefix", prefix);
  set("advertise", "tcp://10.0.0.5:7401");
  set("poll", "200ms");
  CHECK_INT(gw_keys_generate(&gateway_keys), 0);
  boot.gateway = "tcp://127.0.0.1:7401";
  boot.gateway_public = gateway_keys.public_z85;
  boot.move_on_rebalance = true;       /* [worker] move_on_rebalance */
  boot.data_cache_bytes = 3LL << 30;   /* [worker] data_cache_mb */
  boot.part_bytes = 16 << 20;          /* [store] part_mib */
  CHECK_INT(gw_keys_generate(&boot.keys), 0);

  test_open_refusals();
  struct recorder rec = {0};
  struct gw_provider *p = open_ok(&rec);
  CHECK(p != NULL);
  if (p) {
    char first[GW_INSTANCE_ID_MAX] = "", on_demand[GW_INSTANCE_ID_MAX] = "";
    CHECK(p->ops->inject == NULL);
    char store[64];
    CHECK_INT(p->ops->store_url(p, store, sizeof store), 0);
    CHECK_STR(store, "s3://bucket/team");
    test_launch(p, &rec, first);
    test_capacity(p, &rec);
    test_throttled(p, &rec, on_demand);
    test_dropped(p, &rec);
    test_auth(p, &rec);
    test_ends(p, &rec, first, on_demand);
    p->ops->destroy(p);
  }
  test_restart();
  test_signed();
  CHECK(!rec.overflow);
  stop_standin();
  gw_loop_free(loop);
  char cmd[800];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
  if (!th_failures && system(cmd) != 0)
    fprintf(stderr, "cannot remove %s\n", tmp);
  if (th_failures)
    fprintf(stderr, "left %s for a look\n", tmp);
  TEST_MAIN_END();
}
