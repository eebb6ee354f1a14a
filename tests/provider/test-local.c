/* The local provider end to end with a stand-in worker (argv[1], a script
 * that takes --config FILE): launch, the metadata URL written into the
 * worker config, notices over the metadata endpoint and the kill at the
 * deadline, inject kill, terminate, slots, list, rediscovery by a new
 * provider on the same state_dir, a trace-driven capacity loss, a random
 * market preemption, and configuration errors. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "local.h"
#include "prov-test.h"
#include "sl_err.h"
#include "sl_json.h"

static char state[] = "/tmp/spotlab-local-XXXXXX";
static const char *worker;

static struct gw_provider *open_provider(const char *market, double scale, int slots,
                                         struct recorder *rec) {
  char err[512] = "";
  struct gw_local_config cfg = {.slots = slots, .market = market, .time_scale = scale,
                                .state_dir = state, .worker_program = worker};
  struct gw_provider *p = gw_local_provider_new(&cfg, record, rec, err, sizeof err);
  if (!p)
    fprintf(stderr, "provider: %s\n", err);
  return p;
}

/* A launch request with a fresh worker config file. */
static struct gw_launch request(const char *id, const char *type, bool spot) {
  struct gw_launch req;
  memset(&req, 0, sizeof req);
  snprintf(req.instance_id, sizeof req.instance_id, "%s", id);
  snprintf(req.type, sizeof req.type, "%s", type);
  req.spot = spot;
  snprintf(req.worker_config, sizeof req.worker_config, "%s/%s.conf", state, id);
  FILE *f = fopen(req.worker_config, "w");
  fprintf(f, "{\"gateway\":\"ipc:///nowhere\",\"instance\":\"%s\",\"type\":\"%s\"}", id, type);
  fclose(f);
  chmod(req.worker_config, 0600);
  return req;
}

static json_t *load(const char *path) {
  json_error_t e;
  return json_load_file(path, 0, &e);
}

static pid_t pid_of(const char *id) {
  char path[512];
  snprintf(path, sizeof path, "%s/instances/%s/instance.json", state, id);
  json_t *o = load(path);
  pid_t pid = o ? (pid_t)sl_json_get_int(o, "pid", 0) : 0;
  json_decref(o);
  return pid;
}

static bool running(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f)
    return false;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  return p && p[2] != 'Z';
}

/* The pid in the file the stand-in worker writes (waited for with a deadline); 0 if none. */
static pid_t job_pid(const char *path, int timeout_ms) {
  int64_t end = sl_time_mono_us() + (int64_t)timeout_ms * 1000;
  for (;;) {
    FILE *f = fopen(path, "r");
    int pid = 0;
    if (f) {
      if (fscanf(f, "%d", &pid) != 1)
        pid = 0;
      fclose(f);
    }
    if (pid > 0 || sl_time_mono_us() > end)
      return pid;
    usleep(20000); /* a file appearing has no event to wait on here */
  }
}

/* Waits (with a deadline) until pid is dead: SIGKILL is delivered asynchronously. */
static bool gone_within(pid_t pid, int timeout_ms) {
  int64_t end = sl_time_mono_us() + (int64_t)timeout_ms * 1000;
  while (running(pid) && sl_time_mono_us() < end)
    usleep(10000); /* another process's death has no event to wait on without a pidfd */
  return !running(pid);
}

/* Waits (with a deadline) for a file the stand-in worker writes. */
static json_t *wait_file(const char *path, int timeout_ms) {
  int64_t end = sl_time_mono_us() + timeout_ms * 1000;
  while (sl_time_mono_us() < end) {
    json_t *o = load(path);
    if (o)
      return o;
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

static void test_notice_and_kill(void) {
  struct recorder rec = {0};
  struct gw_provider *p = open_provider("random:7", 60, 2, &rec);
  CHECK(p != NULL);
  if (!p)
    return;
  struct gw_instance_info info;
  struct gw_launch req = request("i-000000000001", "g5.xlarge", false);
  CHECK_INT(p->ops->launch(p, &req, &info), 0);
  CHECK_STR(info.instance_id, "i-000000000001");
  CHECK_STR(info.zone, "local-1a");
  CHECK(!info.spot && info.running);
  CHECK_NEAR(info.price_usd_per_hour, 1.006, 1e-9);
  CHECK(strncmp(info.metadata_url, "http://127.0.0.1:", 17) == 0);

  /* The worker config now names the metadata endpoint and stays private. */
  json_t *cfg = load(req.worker_config);
  CHECK_STR(sl_json_get_str(cfg, "metadata", NULL), info.metadata_url);
  CHECK_STR(sl_json_get_str(cfg, "gateway", NULL), "ipc:///nowhere");
  json_decref(cfg);
  struct stat st;
  CHECK(stat(req.worker_config, &st) == 0 && (st.st_mode & 0777) == 0600);
  char path[512];
  snprintf(path, sizeof path, "%s/instances/i-000000000001/seen-config.json", state);
  json_t *seen = wait_file(path, 3000);
  CHECK_STR(sl_json_get_str(seen, "metadata", NULL), info.metadata_url);
  json_decref(seen);
  pid_t pid = pid_of("i-000000000001");
  CHECK(pid > 0 && running(pid));
  CHECK(getpgid(pid) == pid && getsid(pid) == pid);
  /* the stand-in's job runs in a group of its own, in the worker's session */
  snprintf(path, sizeof path, "%s/instances/i-000000000001/job.pid", state);
  pid_t job = job_pid(path, 3000);
  CHECK(job > 0 && running(job) && getpgid(job) == job && getsid(job) == pid);

  /* Before the notice: 404; inject a 120 s (simulated) notice: 2 s here. */
  char tok[64];
  struct body b;
  CHECK_INT(get_token(info.metadata_url, tok), 200);
  CHECK_INT(get_meta(info.metadata_url, NULL, "spot/instance-action", &b), 401);
  CHECK_INT(get_meta(info.metadata_url, tok, "spot/instance-action", &b), 404);
  CHECK_INT(p->ops->inject(p, "i-000000000001", false, 120), 0);
  int64_t injected = sl_time_real_us();
  int n = wait_event(p, &rec, GW_PROVIDER_NOTICE, "i-000000000001", 1000);
  CHECK(n >= 0);
  if (n < 0)
    return;
  int64_t deadline = rec.ev[n].deadline_us;
  CHECK(rec.ev[n].by_market);
  CHECK(deadline >= injected + 2000000 && deadline <= injected + 3000000);
  CHECK_INT(deadline % 1000000, 0);
  CHECK_INT(get_meta(info.metadata_url, tok, "spot/instance-action", &b), 200);
  json_t *act = json_loads(b.text, 0, NULL);
  CHECK_STR(sl_json_get_str(act, "action", NULL), "terminate");
  char when[40];
  time_t secs = (time_t)(deadline / 1000000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  CHECK_STR(sl_json_get_str(act, "time", NULL), when);
  json_decref(act);
  CHECK(running(pid));
  CHECK_INT(p->ops->inject(p, "i-000000000001", false, 120), SL_ESTATE);

  /* At the deadline the process group is killed, not before. */
  n = wait_event(p, &rec, GW_PROVIDER_TERMINATED, "i-000000000001", 5000);
  CHECK(n >= 0);
  if (n >= 0) {
    CHECK(rec.ev[n].by_market);
    CHECK(rec.at_real_us[n] >= deadline);
    CHECK(rec.at_real_us[n] < deadline + 1000000);
  }
  CHECK(!running(pid));
  CHECK(kill(pid, 0) < 0 && errno == ESRCH);
  CHECK(job > 0 && gone_within(job, 2000)); /* a lost instance takes its jobs along */
  snprintf(path, sizeof path, "%s/instances/i-000000000001/instance.json", state);
  CHECK(access(path, F_OK) < 0);
  CHECK_INT(p->ops->inject(p, "i-000000000001", true, 0), SL_ENAME);

  /* Slots, bad requests, inject kill, terminate, list. */
  struct gw_launch r2 = request("i-000000000002", "g4dn.xlarge", true);
  struct gw_launch r3 = request("i-000000000003", "p3.2xlarge", false);
  struct gw_launch r4 = request("i-000000000004", "p3.2xlarge", false);
  struct gw_launch bad = request("i-000000000005", "x9.huge", false);
  CHECK_INT(p->ops->launch(p, &bad, &info), SL_ENOTSUP);
  bad = request("i-000000000005", "p5.48xlarge", false);
  snprintf(bad.zone, sizeof bad.zone, "local-1b");  /* p5 is only in zone a */
  CHECK_INT(p->ops->launch(p, &bad, &info), SL_ENOTSUP);
  bad = request("i-000000000005", "g5.xlarge", true);
  bad.max_price_usd_per_hour = 0.01;
  CHECK_INT(p->ops->launch(p, &bad, &info), -EAGAIN);
  bad = request("../etc", "g5.xlarge", false);
  CHECK_INT(p->ops->launch(p, &bad, &info), -EINVAL);
  CHECK_INT(p->ops->launch(p, &r2, &info), 0);
  CHECK(info.spot && info.price_usd_per_hour > 0.17 && info.price_usd_per_hour < 0.22);
  CHECK_INT(p->ops->launch(p, &r2, &info), -EEXIST);
  snprintf(r3.zone, sizeof r3.zone, "local-1c");
  CHECK_INT(p->ops->launch(p, &r3, &info), 0);
  CHECK_STR(info.zone, "local-1c");
  CHECK_INT(p->ops->launch(p, &r4, &info), -EAGAIN);  /* both slots taken */
  struct gw_instance_info *list = NULL;
  size_t n_list = 0;
  CHECK_INT(p->ops->list(p, &list, &n_list), 0);
  CHECK_INT(n_list, 2);
  free(list);
  pid_t pid2 = pid_of("i-000000000002"), pid3 = pid_of("i-000000000003");
  CHECK_INT(p->ops->inject(p, "i-000000000002", true, 0), 0);
  n = wait_event(p, &rec, GW_PROVIDER_TERMINATED, "i-000000000002", 2000);
  CHECK(n >= 0 && rec.ev[n].by_market);
  CHECK(!running(pid2));
  CHECK_INT(p->ops->terminate(p, "i-000000000003"), 0);
  n = wait_event(p, &rec, GW_PROVIDER_TERMINATED, "i-000000000003", 2000);
  CHECK(n >= 0 && !rec.ev[n].by_market);
  CHECK(!running(pid3));
  CHECK_INT(p->ops->terminate(p, "i-000000000003"), SL_ENAME);
  CHECK_INT(p->ops->list(p, &list, &n_list), 0);
  CHECK_INT(n_list, 0);
  free(list);

  /* Types carry the catalog and the market's current price. */
  struct gw_instance_type *types = NULL;
  size_t n_types = 0;
  CHECK_INT(p->ops->types(p, &types, &n_types), 0);
  CHECK(n_types >= 5);
  for (size_t i = 0; i < n_types; i++) {
    CHECK(types[i].spot_usd_per_hour > 0 &&
          types[i].spot_usd_per_hour < types[i].on_demand_usd_per_hour);
    CHECK(types[i].interruption && types[i].mean_time_to_preempt_s >= 7200);
  }
  free(types);
  p->ops->destroy(p);
}

static void test_rediscovery(void) {
  struct recorder rec = {0};
  struct gw_provider *a = open_provider("random:1", 60, 2, &rec);
  CHECK(a != NULL);
  if (!a)
    return;
  struct gw_instance_info info;
  struct gw_launch req = request("i-00000000000a", "g5.xlarge", false);
  CHECK_INT(a->ops->launch(a, &req, &info), 0);
  pid_t pid = pid_of("i-00000000000a");
  a->ops->destroy(a);  /* a gateway going away leaves its workers running */
  CHECK(running(pid));

  /* A record whose process is gone: reported terminated by the next provider. */
  char dir[512], path[600];
  pid_t dead = fork();
  if (dead == 0)
    _exit(0);
  waitpid(dead, NULL, 0);
  snprintf(dir, sizeof dir, "%s/instances/i-00000000dead", state);
  mkdir(dir, 0700);
  snprintf(path, sizeof path, "%s/instance.json", dir);
  FILE *f = fopen(path, "w");
  fprintf(f, "{\"instance\":\"i-00000000dead\",\"pid\":%d,\"start_ticks\":1,\"type\":\"g5.xlarge\","
             "\"zone\":\"local-1a\",\"spot\":true,\"metadata_port\":0}", (int)dead);
  fclose(f);
  /* Records saved before their worker started (a gateway that died inside
   * launch): one whose worker runs is found by its config path, one whose
   * worker never started is reported terminated. */
  char cfg[600];
  snprintf(dir, sizeof dir, "%s/instances/i-00000000000c", state);
  mkdir(dir, 0700);
  snprintf(cfg, sizeof cfg, "%s/worker.json", dir);
  pid_t orphan = fork();
  if (orphan == 0) {
    setsid(); /* as the provider starts workers */
    execl("/bin/sh", "sh", "-c", "sleep 60; :", "--config", cfg, (char *)NULL);
    _exit(127);
  }
  char cmdline[64], seen[1024] = "";
  snprintf(cmdline, sizeof cmdline, "/proc/%d/cmdline", (int)orphan);
  for (int i = 0; i < 300 && !strstr(seen, "sleep 60"); i++) { /* until it has exec'd */
    FILE *c = fopen(cmdline, "r");
    size_t got = c ? fread(seen, 1, sizeof seen - 1, c) : 0;
    if (c)
      fclose(c);
    for (size_t k = 0; k < got; k++)
      seen[k] = seen[k] ? seen[k] : ' ';
    seen[got] = 0;
    if (!strstr(seen, "sleep 60"))
      usleep(10000); /* another process's exec has no event to wait on */
  }
  for (int i = 0; i < 2; i++) {
    snprintf(dir, sizeof dir, "%s/instances/i-00000000000%c", state, i ? 'd' : 'c');
    mkdir(dir, 0700);
    snprintf(path, sizeof path, "%s/instance.json", dir);
    f = fopen(path, "w");
    fprintf(f, "{\"instance\":\"i-00000000000%c\",\"pid\":0,\"start_ticks\":0,"
               "\"type\":\"g5.xlarge\",\"zone\":\"local-1a\",\"spot\":false,\"metadata_port\":0}",
            i ? 'd' : 'c');
    fclose(f);
  }
  /* A corrupt record is ignored, not fatal. */
  snprintf(dir, sizeof dir, "%s/instances/i-0000000000bb", state);
  mkdir(dir, 0700);
  snprintf(path, sizeof path, "%s/instance.json", dir);
  f = fopen(path, "w");
  fputs("{\"instance\":", f);
  fclose(f);

  struct gw_provider *b = open_provider("random:1", 60, 2, &rec);
  CHECK(b != NULL);
  if (!b)
    return;
  struct gw_instance_info *list = NULL;
  size_t n = 0;
  CHECK_INT(b->ops->list(b, &list, &n), 0);
  bool found = false;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(list[i].instance_id, "i-00000000000a") == 0) {
      found = true;
      CHECK(list[i].running);
      CHECK_STR(list[i].type, "g5.xlarge");
      CHECK_STR(list[i].metadata_url, info.metadata_url);
    }
  }
  CHECK(found);
  free(list);
  /* The metadata endpoint is back on the same port. */
  char tok[64];
  struct body body;
  CHECK_INT(get_token(info.metadata_url, tok), 200);
  CHECK_INT(get_meta(info.metadata_url, tok, "instance-id", &body), 200);
  CHECK_STR(body.text, "i-00000000000a");
  CHECK(wait_event(b, &rec, GW_PROVIDER_TERMINATED, "i-00000000dead", 1000) >= 0);
  CHECK(wait_event(b, &rec, GW_PROVIDER_TERMINATED, "i-00000000000d", 1000) >= 0);
  snprintf(path, sizeof path, "%s/instances/i-00000000000c/instance.json", state);
  json_t *found_rec = load(path);
  CHECK_INT((int)sl_json_get_int(found_rec, "pid", 0), (int)orphan);
  json_decref(found_rec);
  CHECK_INT(b->ops->terminate(b, "i-00000000000c"), 0);
  CHECK(wait_event(b, &rec, GW_PROVIDER_TERMINATED, "i-00000000000c", 3000) >= 0);
  CHECK(!running(orphan)); /* the provider reaped it: it is this process's child */
  if (running(orphan)) {
    kill(orphan, SIGKILL);
    waitpid(orphan, NULL, 0);
  }
  CHECK_INT(b->ops->terminate(b, "i-00000000000a"), 0);
  int k = wait_event(b, &rec, GW_PROVIDER_TERMINATED, "i-00000000000a", 3000);
  CHECK(k >= 0 && !rec.ev[k].by_market);
  CHECK(!running(pid));
  b->ops->destroy(b);
}

static void test_trace_market(void) {
  char spec[600], path[512];
  snprintf(path, sizeof path, "%s/trace.json", state);
  FILE *f = fopen(path, "w");
  fputs("{\"metadata\":{\"gap_seconds\":60},\"data\":[1,0,0,0,1]}", f);
  fclose(f);
  snprintf(spec, sizeof spec, "trace:%s", path);
  struct recorder rec = {0};
  struct gw_provider *p = open_provider(spec, 60, 3, &rec);  /* one tick per second */
  CHECK(p != NULL);
  if (!p)
    return;
  struct gw_instance_info info;
  struct gw_launch r1 = request("i-0000000000c1", "p3.2xlarge", true);
  struct gw_launch r2 = request("i-0000000000c2", "p3.2xlarge", true);
  struct gw_launch r3 = request("i-0000000000c3", "p3.2xlarge", false);
  CHECK_INT(p->ops->launch(p, &r1, &info), 0);
  CHECK_INT(p->ops->launch(p, &r2, &info), -EAGAIN);  /* the trace holds one */
  int n = wait_event(p, &rec, GW_PROVIDER_NOTICE, "i-0000000000c1", 2500);
  CHECK(n >= 0 && rec.ev[n].by_market);
  CHECK_INT(p->ops->launch(p, &r2, &info), -EAGAIN);  /* capacity gone */
  CHECK_INT(p->ops->launch(p, &r3, &info), 0);        /* on-demand is unaffected */
  n = wait_event(p, &rec, GW_PROVIDER_TERMINATED, "i-0000000000c1", 5000);
  CHECK(n >= 0 && rec.ev[n].by_market);
  CHECK_INT(p->ops->terminate(p, "i-0000000000c3"), 0);
  CHECK(wait_event(p, &rec, GW_PROVIDER_TERMINATED, "i-0000000000c3", 3000) >= 0);
  p->ops->destroy(p);
}

static void test_random_market(void) {
  /* Mean lifetime 2 h simulated; at 20000× that is 0.36 s of wall time. */
  struct recorder rec = {0};
  struct gw_provider *p = open_provider("random:5", 20000, 1, &rec);
  CHECK(p != NULL);
  if (!p)
    return;
  struct gw_instance_info info;
  struct gw_launch r = request("i-0000000000d1", "g5.xlarge", true);
  CHECK_INT(p->ops->launch(p, &r, &info), 0);
  CHECK(wait_event(p, &rec, GW_PROVIDER_NOTICE, "i-0000000000d1", 4000) >= 0);
  int n = wait_event(p, &rec, GW_PROVIDER_TERMINATED, "i-0000000000d1", 3000);
  CHECK(n >= 0 && rec.ev[n].by_market);
  p->ops->destroy(p);
}

static void test_config_errors(void) {
  char err[512], path[512];
  snprintf(path, sizeof path, "%s/bad.csv", state);
  FILE *f = fopen(path, "w");
  fputs("instance_type,gpus,gpu_model,on_demand_usd_per_hour,spot_usd_per_hour,interruption,zones\n"
        "a,1,T4,1,0.5,>20%,a\nb,1\n", f);
  fclose(f);
  struct gw_local_config cfg = {.slots = 1, .market = "random:1", .time_scale = 60,
                                .catalog = path, .state_dir = state, .worker_program = worker};
  CHECK(gw_local_provider_new(&cfg, NULL, NULL, err, sizeof err) == NULL);
  CHECK(strstr(err, "bad.csv:3:") != NULL);
  cfg.catalog = NULL;
  cfg.market = "trace:/nonexistent.json";
  CHECK(gw_local_provider_new(&cfg, NULL, NULL, err, sizeof err) == NULL);
  CHECK(strstr(err, "/nonexistent.json") != NULL);
  cfg.market = "random:1";
  cfg.slots = 0;
  CHECK(gw_local_provider_new(&cfg, NULL, NULL, err, sizeof err) == NULL);
  CHECK(strstr(err, "slots") != NULL);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FAKE-WORKER\n", argv[0]);
    return 2;
  }
  worker = argv[1];
  curl_global_init(CURL_GLOBAL_DEFAULT);
  CHECK(mkdtemp(state) != NULL);
  test_notice_and_kill();
  test_rediscovery();
  test_trace_market();
  test_random_market();
  test_config_errors();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", state);
  CHECK_INT(system(cmd), 0);
  curl_global_cleanup();
  TEST_MAIN_END();
}
