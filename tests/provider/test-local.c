/* The local provider end to end on a real gateway loop, with a stand-in
 * worker (argv[1], a script that takes --config FILE): launch with a
 * provider-chosen id and the LAUNCHED event, the worker config it writes
 * (the id, the metadata URL, the store), notices over the metadata endpoint
 * and the kill at the deadline, inject kill, terminate, slots and refusals,
 * list, the market array and the store, adoption by a new provider on the
 * same state_dir (at open and through list), a trace-driven capacity loss, a
 * random market preemption, and the class: its options in the gateway's
 * configuration and the errors of open. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "conf.h"
#include "harness.h"
#include "keys.h"
#include "local.h"
#include "local_int.h"
#include "loop.h"
#include "proc.h"
#include "prov-test.h"
#include "sl_err.h"
#include "sl_hmac.h"
#include "sl_json.h"
#include "sl_path.h"

static char state[] = "/tmp/spotlab-local-XXXXXX";
static const char *worker;
static struct gw_loop *loop;
static struct gw_worker_boot boot;
static struct gw_keypair gateway_keys;

static struct gw_provider *open_in(const char *dir, const char *program, const char *market,
                                   double scale, int slots, struct recorder *rec) {
  char err[512] = "";
  struct gw_local_config cfg = {.slots = slots, .market = market, .time_scale = scale,
                                .state_dir = dir, .worker_program = program};
  struct gw_provider *p = gw_local_provider_new(&cfg, loop, record, rec, err, sizeof err);
  if (!p)
    fprintf(stderr, "provider: %s\n", err);
  return p;
}

static struct gw_provider *open_provider(const char *market, double scale, int slots,
                                         struct recorder *rec) {
  return open_in(state, worker, market, scale, slots, rec);
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

static json_t *load(const char *path) {
  json_error_t e;
  return json_load_file(path, 0, &e);
}

static void inst_file(const char *id, const char *name, char *buf, size_t size) {
  snprintf(buf, size, "%s/instances/%s/%s", state, id, name);
}

static pid_t pid_of(const char *id) {
  char path[512];
  inst_file(id, "instance.json", path, sizeof path);
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

/* A stand-in for instance id's worker, a child of this process: a shell in a
 * session of its own (as the provider starts workers) whose command line
 * holds "--config state/instances/ID/worker.json", as a worker's does. */
static pid_t fake_worker(const char *id) {
  char dir[512], cfg[600];
  snprintf(dir, sizeof dir, "%s/instances/%s", state, id);
  mkdir(dir, 0700);
  snprintf(cfg, sizeof cfg, "%s/worker.json", dir);
  pid_t pid = fork();
  if (pid == 0) {
    setsid();
    execl("/bin/sh", "sh", "-c", "sleep 60; :", "--config", cfg, (char *)NULL);
    _exit(127);
  }
  char cmdline[64], seen[1024] = "";
  snprintf(cmdline, sizeof cmdline, "/proc/%d/cmdline", (int)pid);
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
  return pid;
}

/* True once child pid has ended and is reaped, within timeout_ms; else it
 * is killed and reaped, and false. */
static bool reaped_within(pid_t pid, int timeout_ms) {
  for (int waited = 0; waited < timeout_ms; waited += 10) {
    if (waitpid(pid, NULL, WNOHANG) == pid)
      return true;
    usleep(10000); /* a child's end seen by polling: the test has no loop on SIGCHLD */
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return false;
}

static bool is_instance_id(const char *id) {
  if (strlen(id) != 14 || strncmp(id, "i-", 2))
    return false;
  for (const char *p = id + 2; *p; p++)
    if (!strchr("0123456789abcdef", *p))
      return false;
  return true;
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

/* Launches and waits for LAUNCHED; the event's index (info in rec), or -1. */
static int launch_ok(struct gw_provider *p, struct recorder *rec, struct gw_launch *req,
                     char id[GW_INSTANCE_ID_MAX]) {
  memset(id, 0, GW_INSTANCE_ID_MAX);
  int r = p->ops->launch(p, req, id);
  CHECK_INT(r, 0);
  if (r < 0)
    return -1;
  CHECK(is_instance_id(id));
  int n = wait_event(loop, rec, GW_PROVIDER_LAUNCHED, id, 1000);
  CHECK(n >= 0);
  if (n >= 0) { /* the price it launched at, as its record has it */
    char path[512];
    inst_file(id, "instance.json", path, sizeof path);
    json_t *o = load(path);
    CHECK(rec->ev[n].info.price_usd_per_hour > 0 &&
          rec->ev[n].info.price_usd_per_hour == sl_json_get_num(o, "price_usd_per_hour", -1));
    json_decref(o);
  }
  return n;
}

static void test_launch_notice_and_kill(void) {
  struct recorder rec = {0};
  struct gw_provider *p = open_provider("random:7", 60, 2, &rec);
  CHECK(p != NULL);
  if (!p)
    return;
  CHECK_STR(p->name, "local");
  char id[GW_INSTANCE_ID_MAX] = "";
  struct gw_launch req = request("g5.xlarge", false);
  CHECK_INT(p->ops->launch(p, &req, id), 0);
  CHECK(is_instance_id(id));
  /* nothing is delivered from inside the call; the loop brings LAUNCHED */
  CHECK_INT(rec.n, 0);
  int n = wait_event(loop, &rec, GW_PROVIDER_LAUNCHED, id, 1000);
  CHECK(n >= 0);
  if (n < 0)
    return;
  struct gw_instance_info info = rec.ev[n].info;
  CHECK_STR(info.instance_id, id);
  CHECK_STR(info.type, "g5.xlarge");
  CHECK_STR(info.zone, "local-1a");
  CHECK(!info.spot && info.running);
  CHECK_NEAR(info.price_usd_per_hour, 1.006, 1e-9);
  CHECK(strncmp(info.metadata_url, "http://127.0.0.1:", 17) == 0);

  /* The worker config the provider wrote: private, naming the instance,
   * its metadata endpoint, its work folder and the provider's store. */
  char path[512], want[600];
  inst_file(id, "worker.json", path, sizeof path);
  struct stat st;
  CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
  json_t *cfg = load(path);
  CHECK(cfg != NULL);
  CHECK_STR(sl_json_get_str(cfg, "instance", NULL), id);
  CHECK_STR(sl_json_get_str(cfg, "metadata", NULL), info.metadata_url);
  CHECK_STR(sl_json_get_str(cfg, "gateway", NULL), "ipc:///nowhere");
  CHECK_STR(sl_json_get_str(cfg, "gateway_public", NULL), gateway_keys.public_z85);
  CHECK_STR(sl_json_get_str(cfg, "public", NULL), boot.keys.public_z85);
  CHECK_STR(sl_json_get_str(cfg, "type", NULL), "g5.xlarge");
  CHECK_STR(sl_json_get_str(cfg, "zone", NULL), "local-1a");
  CHECK(!sl_json_get_bool(cfg, "spot", true));
  snprintf(want, sizeof want, "file://%s/store", state);
  CHECK_STR(sl_json_get_str(cfg, "store", NULL), want);
  snprintf(want, sizeof want, "%s/instances/%s/work", state, id);
  CHECK_STR(sl_json_get_str(cfg, "work_dir", NULL), want);
  CHECK(stat(want, &st) == 0 && S_ISDIR(st.st_mode));
  json_decref(cfg);
  inst_file(id, "seen-config.json", path, sizeof path);
  json_t *seen = wait_file(path, 3000);
  CHECK_STR(sl_json_get_str(seen, "instance", NULL), id);
  json_decref(seen);
  pid_t pid = pid_of(id);
  CHECK(pid > 0 && running(pid));
  CHECK(getpgid(pid) == pid && getsid(pid) == pid);
  /* the stand-in's job runs in a group of its own, in the worker's session */
  inst_file(id, "job.pid", path, sizeof path);
  pid_t job = job_pid(path, 3000);
  CHECK(job > 0 && running(job) && getpgid(job) == job && getsid(job) == pid);

  /* Before the notice: 404; inject a 120 s (simulated) notice: 2 s here. */
  char tok[64];
  struct body b;
  CHECK_INT(get_token(info.metadata_url, tok), 200);
  CHECK_INT(get_meta(info.metadata_url, NULL, "spot/instance-action", &b), 401);
  CHECK_INT(get_meta(info.metadata_url, tok, "spot/instance-action", &b), 404);
  /* the notice's clock is read inside inject(): between these two */
  int64_t before = sl_time_real_us();
  CHECK_INT(p->ops->inject(p, id, false, 120), 0);
  int64_t injected = sl_time_real_us();
  CHECK(find_event(&rec, GW_PROVIDER_NOTICE, id) < 0); /* not from inside inject() */
  n = wait_event(loop, &rec, GW_PROVIDER_NOTICE, id, 1000);
  CHECK(n >= 0);
  if (n < 0)
    return;
  int64_t deadline = rec.ev[n].deadline_us;
  CHECK(rec.ev[n].by_market);
  CHECK(deadline >= before + 2000000 && deadline <= injected + 3000000);
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
  CHECK_INT(p->ops->inject(p, id, false, 120), SL_ESTATE);

  /* At the deadline the process group is killed, not before. */
  n = wait_event(loop, &rec, GW_PROVIDER_TERMINATED, id, 5000);
  CHECK(n >= 0);
  if (n >= 0) {
    CHECK(rec.ev[n].by_market);
    CHECK(rec.at_real_us[n] >= deadline);
    CHECK(rec.at_real_us[n] < deadline + 1000000);
  }
  CHECK(!running(pid));
  CHECK(kill(pid, 0) < 0 && errno == ESRCH);
  CHECK(job > 0 && gone_within(job, 2000)); /* a lost instance takes its jobs along */
  inst_file(id, "instance.json", path, sizeof path);
  CHECK(access(path, F_OK) < 0);
  /* what it leaves but its log goes: its key pair, its work folder */
  inst_file(id, "worker.json", path, sizeof path);
  CHECK(access(path, F_OK) < 0);
  inst_file(id, "work", path, sizeof path);
  CHECK(access(path, F_OK) < 0);
  inst_file(id, "worker.log", path, sizeof path);
  CHECK(access(path, F_OK) == 0);
  CHECK_INT(p->ops->inject(p, id, true, 0), SL_ENAME);

  /* Refusals known at once return an error and no event follows. */
  int launched = count_events(&rec, GW_PROVIDER_LAUNCHED);
  char none[GW_INSTANCE_ID_MAX] = "unchanged";
  struct gw_launch bad = request("x9.huge", false);
  CHECK_INT(p->ops->launch(p, &bad, none), SL_ENAME);
  bad = request("p5.48xlarge", false);
  snprintf(bad.zone, sizeof bad.zone, "local-1b"); /* p5 is only in zone a */
  CHECK_INT(p->ops->launch(p, &bad, none), SL_ENOTSUP);
  bad = request("g5.xlarge", true);
  bad.max_price_usd_per_hour = 0.01;
  CHECK_INT(p->ops->launch(p, &bad, none), -EAGAIN);
  bad = request("g5.xlarge", false);
  bad.boot = NULL;
  CHECK_INT(p->ops->launch(p, &bad, none), -EINVAL);
  CHECK_STR(none, "unchanged"); /* ret_id is written only on success */

  /* Slots, inject kill, terminate, list. */
  char id2[GW_INSTANCE_ID_MAX], id3[GW_INSTANCE_ID_MAX];
  struct gw_launch r2 = request("g4dn.xlarge", true);
  n = launch_ok(p, &rec, &r2, id2);
  if (n >= 0)
    CHECK(rec.ev[n].info.spot && rec.ev[n].info.price_usd_per_hour > 0.17 &&
          rec.ev[n].info.price_usd_per_hour < 0.22);
  struct gw_launch r3 = request("p3.2xlarge", false);
  snprintf(r3.zone, sizeof r3.zone, "local-1c");
  n = launch_ok(p, &rec, &r3, id3);
  if (n >= 0)
    CHECK_STR(rec.ev[n].info.zone, "local-1c");
  CHECK(strcmp(id2, id3) != 0 && strcmp(id2, id) != 0);
  struct gw_launch r4 = request("p3.2xlarge", false);
  CHECK_INT(p->ops->launch(p, &r4, none), SL_ELIMIT); /* both slots taken: not the market's doing */
  run_for(loop, 50);
  CHECK_INT(count_events(&rec, GW_PROVIDER_LAUNCHED), launched + 2);
  struct gw_instance_info *list = NULL;
  size_t n_list = 0;
  CHECK_INT(p->ops->list(p, &list, &n_list), 0);
  CHECK_INT(n_list, 2);
  free(list);
  pid_t pid2 = pid_of(id2), pid3 = pid_of(id3);
  CHECK_INT(p->ops->inject(p, id2, true, 0), 0);
  n = wait_event(loop, &rec, GW_PROVIDER_TERMINATED, id2, 2000);
  CHECK(n >= 0 && rec.ev[n].by_market);
  CHECK(!running(pid2));
  CHECK_INT(p->ops->terminate(p, id3), 0);
  n = wait_event(loop, &rec, GW_PROVIDER_TERMINATED, id3, 2000);
  CHECK(n >= 0 && !rec.ev[n].by_market);
  CHECK(!running(pid3));
  CHECK_INT(p->ops->terminate(p, id3), SL_ENAME);
  CHECK_INT(p->ops->list(p, &list, &n_list), 0);
  CHECK_INT(n_list, 0);
  free(list);

  /* The market: the catalog with current prices, one borrowed array. */
  const struct gw_instance_type *types = NULL, *again = NULL;
  size_t n_types = 0, n_again = 0;
  CHECK_INT(p->ops->market(p, &types, &n_types), 0);
  CHECK_INT(p->ops->market(p, &again, &n_again), 0);
  CHECK(types == again && n_types == n_again);
  CHECK(n_types >= 5);
  for (size_t i = 0; i < n_types; i++) {
    CHECK(types[i].spot_usd_per_hour > 0 &&
          types[i].spot_usd_per_hour < types[i].on_demand_usd_per_hour);
    CHECK(types[i].interruption && types[i].mean_time_to_preempt_s >= 7200);
  }
  struct gw_instance_type t;
  CHECK_INT(gw_provider_type(p, "g5.xlarge", &t), 0);
  CHECK_NEAR(t.on_demand_usd_per_hour, 1.006, 1e-9);
  CHECK_INT(gw_provider_type(p, "x9.huge", &t), SL_ENAME);
  CHECK_NEAR(gw_provider_time_scale(p), 60, 0);
  char url[600], small[8];
  CHECK_INT(p->ops->store_url(p, url, sizeof url), 0);
  snprintf(want, sizeof want, "file://%s/store", state);
  CHECK_STR(url, want);
  CHECK(stat(want + 7, &st) == 0 && S_ISDIR(st.st_mode));
  CHECK_INT(p->ops->store_url(p, small, sizeof small), SL_ELIMIT);
  CHECK(!rec.overflow);
  p->ops->destroy(p);
}

/* A worker that cannot be started: an error from launch, no event, and the
 * worker config (it holds a secret key) is gone. */
static void test_spawn_failure(void) {
  char dir[600], path[900];
  snprintf(dir, sizeof dir, "%s/nospawn", state);
  struct recorder rec = {0};
  struct gw_provider *p = open_in(dir, "/nonexistent/spotlab-worker", "random:1", 60, 1, &rec);
  CHECK(p != NULL);
  if (!p)
    return;
  char id[GW_INSTANCE_ID_MAX] = "";
  struct gw_launch req = request("g5.xlarge", false);
  CHECK_INT(p->ops->launch(p, &req, id), -ENOENT);
  CHECK_STR(id, "");
  run_for(loop, 50);
  CHECK_INT(rec.n, 0);
  snprintf(path, sizeof path, "%s/instances", dir);
  DIR *d = opendir(path);
  int configs = 0;
  struct dirent *e;
  while (d && (e = readdir(d))) {
    snprintf(path, sizeof path, "%s/instances/%.40s/worker.json", dir, e->d_name);
    configs += access(path, F_OK) == 0;
  }
  if (d)
    closedir(d);
  CHECK_INT(configs, 0);
  struct gw_instance_info *list = NULL;
  size_t n = 9;
  CHECK_INT(p->ops->list(p, &list, &n), 0);
  CHECK_INT(n, 0);
  free(list);
  p->ops->destroy(p);
}

/* sl_file_write_atomic (the link wraps it), failing an instance's record
 * with a full disk while fail_records is set. */
static bool fail_records;
int __real_sl_file_write_atomic(const char *path, const void *data, size_t len, unsigned mode);
int __wrap_sl_file_write_atomic(const char *path, const void *data, size_t len, unsigned mode);
int __wrap_sl_file_write_atomic(const char *path, const void *data, size_t len, unsigned mode) {
  const char *rec = "/instance.json";
  size_t n = strlen(path), k = strlen(rec);
  if (fail_records && n >= k && !strcmp(path + n - k, rec))
    return -ENOSPC;
  return __real_sl_file_write_atomic(path, data, len, mode);
}

/* An instance whose record cannot be written is not launched: no restart
 * would know its worker, and its folder would be swept while it ran. */
static void test_record_failure(void) {
  char dir[600], path[900];
  snprintf(dir, sizeof dir, "%s/norecord", state);
  struct recorder rec = {0};
  struct gw_provider *p = open_in(dir, worker, "random:1", 60, 1, &rec);
  CHECK(p != NULL);
  if (!p)
    return;
  char id[GW_INSTANCE_ID_MAX] = "";
  struct gw_launch req = request("g5.xlarge", false);
  fail_records = true;
  CHECK_INT(p->ops->launch(p, &req, id), -ENOSPC);
  fail_records = false;
  CHECK_STR(id, "");
  run_for(loop, 50);
  CHECK_INT(rec.n, 0);
  snprintf(path, sizeof path, "%s/instances", dir);
  DIR *d = opendir(path);
  int configs = 0, logs = 0;
  struct dirent *e;
  while (d && (e = readdir(d))) {
    snprintf(path, sizeof path, "%s/instances/%.40s/worker.json", dir, e->d_name);
    configs += access(path, F_OK) == 0;
    snprintf(path, sizeof path, "%s/instances/%.40s/worker.log", dir, e->d_name);
    logs += access(path, F_OK) == 0; /* a spawn was tried */
  }
  if (d)
    closedir(d);
  CHECK_INT(configs, 0);
  CHECK_INT(logs, 0);
  /* the next launch, with its record written, runs */
  CHECK_INT(p->ops->launch(p, &req, id), 0);
  CHECK(wait_event(loop, &rec, GW_PROVIDER_LAUNCHED, id, 1000) >= 0);
  CHECK_INT(p->ops->terminate(p, id), 0);
  CHECK(wait_event(loop, &rec, GW_PROVIDER_TERMINATED, id, 3000) >= 0);
  p->ops->destroy(p);
}

/* Writes a record as a provider that died inside launch (pid 0) would. */
static void write_unstarted_record(const char *id) {
  char dir[512], path[600];
  snprintf(dir, sizeof dir, "%s/instances/%s", state, id);
  mkdir(dir, 0700);
  snprintf(path, sizeof path, "%s/instance.json", dir);
  FILE *f = fopen(path, "w");
  fprintf(f, "{\"instance\":\"%s\",\"pid\":0,\"start_ticks\":0,\"type\":\"g5.xlarge\","
             "\"zone\":\"local-1a\",\"spot\":false,\"metadata_port\":0}", id);
  fclose(f);
}

static void test_rediscovery(void) {
  struct recorder rec = {0};
  struct gw_provider *a = open_provider("random:1", 60, 2, &rec);
  CHECK(a != NULL);
  if (!a)
    return;
  char id[GW_INSTANCE_ID_MAX];
  struct gw_launch req = request("g5.xlarge", false);
  int n = launch_ok(a, &rec, &req, id);
  if (n < 0)
    return;
  struct gw_instance_info info = rec.ev[n].info;
  pid_t pid = pid_of(id);
  char path[600];
  inst_file(id, "instance.json", path, sizeof path);
  json_t *own = load(path);
  unsigned long long ticks = 0;
  char st;
  CHECK_INT(gw_proc_stat(pid, &ticks, &st), 0);
  CHECK(ticks > 0 && (unsigned long long)sl_json_get_int(own, "start_ticks", 0) == ticks);
  json_decref(own);
  a->ops->destroy(a); /* a gateway going away leaves its workers running */
  CHECK(running(pid));

  /* Records whose pid is now another process's (a pid reused after a
   * reboot): its start time differs (f1), or was not recorded (f2, as
   * earlier gateways wrote it): that process is left alone, and the
   * instance is reported terminated. */
  pid_t stranger = fork();
  if (stranger == 0) {
    setsid();
    execl("/bin/sleep", "sleep", "60", (char *)NULL);
    _exit(127);
  }
  CHECK_INT(gw_proc_stat(stranger, &ticks, &st), 0);
  const char *reused[] = {"i-0000000000f1", "i-0000000000f2"};
  for (int i = 0; i < 2; i++) {
    char rdir[512];
    snprintf(rdir, sizeof rdir, "%s/instances/%s", state, reused[i]);
    mkdir(rdir, 0700);
    inst_file(reused[i], "instance.json", path, sizeof path);
    FILE *rf = fopen(path, "w");
    fprintf(rf, "{\"instance\":\"%s\",\"pid\":%d,\"start_ticks\":%llu,\"type\":\"g5.xlarge\","
                "\"zone\":\"local-1a\",\"spot\":true,\"metadata_port\":0}",
            reused[i], (int)stranger, i == 0 ? ticks + 7 : 0ULL);
    fclose(rf);
  }

  /* A record whose process is gone: reported terminated by the next provider. */
  char dir[512];
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
  pid_t orphan = fake_worker("i-00000000000c");
  write_unstarted_record("i-00000000000c");
  write_unstarted_record("i-00000000000d");
  /* A corrupt record is not fatal: it goes aside, and the worker it
   * recorded is stopped (the gateway will take the instance for gone). */
  pid_t unrecorded = fake_worker("i-0000000000bb");
  snprintf(dir, sizeof dir, "%s/instances/i-0000000000bb", state);
  snprintf(path, sizeof path, "%s/instance.json", dir);
  f = fopen(path, "w");
  fputs("{\"instance\":", f);
  fclose(f);

  /* Folders of instances gone before (no record): cleaned as a gone
   * instance's are, and removed whole once their log is a week old. */
  const char *leftovers[] = {"i-0000000000e1", "i-0000000000e2"};
  for (int i = 0; i < 2; i++) {
    snprintf(dir, sizeof dir, "%s/instances/%s/work/jobs/J000001", state, leftovers[i]);
    CHECK_INT(sl_mkdir_p(dir, 0700), 0);
    snprintf(path, sizeof path, "%s/ckpt-0000000010.slck", dir);
    fclose(fopen(path, "w"));
    inst_file(leftovers[i], "worker.json", path, sizeof path);
    fclose(fopen(path, "w"));
    inst_file(leftovers[i], "worker.log", path, sizeof path);
    fclose(fopen(path, "w"));
  }
  struct timeval old[2] = {{time(NULL) - 8 * 86400, 0}, {time(NULL) - 8 * 86400, 0}};
  inst_file("i-0000000000e1", "worker.log", path, sizeof path);
  CHECK_INT(utimes(path, old), 0);
  snprintf(dir, sizeof dir, "%s/instances/i-0000000000bb/work", state); /* a gone instance's */
  mkdir(dir, 0700);
  /* The temporary file of a record's write that a kill cut short goes; one
   * whose writer runs (this process) stays. */
  pid_t writer = fork();
  if (writer == 0)
    _exit(0);
  waitpid(writer, NULL, 0);
  char cut[640], live[640];
  inst_file(id, "instance.json.tmp.", path, sizeof path);
  snprintf(cut, sizeof cut, "%s%d", path, (int)writer);
  snprintf(live, sizeof live, "%s%d", path, (int)getpid());
  fclose(fopen(cut, "w"));
  fclose(fopen(live, "w"));

  struct gw_provider *b = open_provider("random:1", 60, 2, &rec);
  CHECK(b != NULL);
  if (!b)
    return;
  CHECK(access(cut, F_OK) < 0);
  CHECK(access(live, F_OK) == 0);
  unlink(live);
  snprintf(dir, sizeof dir, "%s/instances/i-0000000000e1", state);
  CHECK(access(dir, F_OK) < 0);
  inst_file("i-0000000000e2", "worker.log", path, sizeof path);
  CHECK(access(path, F_OK) == 0);
  inst_file("i-0000000000e2", "work", path, sizeof path);
  CHECK(access(path, F_OK) < 0);
  inst_file("i-0000000000e2", "worker.json", path, sizeof path);
  CHECK(access(path, F_OK) < 0);
  struct gw_instance_info *list = NULL;
  size_t n_list = 0;
  CHECK_INT(b->ops->list(b, &list, &n_list), 0);
  bool found = false;
  for (size_t i = 0; i < n_list; i++) {
    if (strcmp(list[i].instance_id, id) == 0) {
      found = true;
      CHECK(list[i].running);
      CHECK_STR(list[i].type, "g5.xlarge");
      CHECK_STR(list[i].metadata_url, info.metadata_url);
    }
  }
  CHECK(found);
  free(list);
  /* the record moved aside and its worker stopped; the folder is a gone
   * instance's: its work goes, its log and the record stay for a week */
  CHECK(reaped_within(unrecorded, 3000));
  snprintf(dir, sizeof dir, "%s/instances/i-0000000000bb/work", state);
  CHECK(access(dir, F_OK) < 0);
  snprintf(path, sizeof path, "%s/instances/i-0000000000bb/instance.json.bad", state);
  CHECK(access(path, F_OK) == 0);
  /* The metadata endpoint is back on the same port. */
  char tok[64];
  struct body body;
  CHECK_INT(get_token(info.metadata_url, tok), 200);
  CHECK_INT(get_meta(info.metadata_url, tok, "instance-id", &body), 200);
  CHECK_STR(body.text, id);
  CHECK(wait_event(loop, &rec, GW_PROVIDER_TERMINATED, "i-00000000dead", 1000) >= 0);
  for (int i = 0; i < 2; i++)
    CHECK(wait_event(loop, &rec, GW_PROVIDER_TERMINATED, reused[i], 1000) >= 0);
  CHECK(running(stranger)); /* not the worker it took the pid of */
  kill(stranger, SIGKILL);
  waitpid(stranger, NULL, 0);
  CHECK(wait_event(loop, &rec, GW_PROVIDER_TERMINATED, "i-00000000000d", 1000) >= 0);
  snprintf(path, sizeof path, "%s/instances/i-00000000000c/instance.json", state);
  json_t *found_rec = load(path);
  CHECK_INT((int)sl_json_get_int(found_rec, "pid", 0), (int)orphan);
  json_decref(found_rec);

  /* A record that appears while the provider runs is adopted by list(). */
  write_unstarted_record("i-00000000000e");
  CHECK_INT(b->ops->list(b, &list, &n_list), 0);
  found = false;
  for (size_t i = 0; i < n_list; i++)
    if (!strcmp(list[i].instance_id, "i-00000000000e"))
      found = !list[i].running;
  CHECK(found);
  free(list);
  CHECK(wait_event(loop, &rec, GW_PROVIDER_TERMINATED, "i-00000000000e", 1000) >= 0);

  CHECK_INT(b->ops->terminate(b, "i-00000000000c"), 0);
  CHECK(wait_event(loop, &rec, GW_PROVIDER_TERMINATED, "i-00000000000c", 3000) >= 0);
  CHECK(!running(orphan)); /* the provider reaped it: it is this process's child */
  if (running(orphan)) {
    kill(orphan, SIGKILL);
    waitpid(orphan, NULL, 0);
  }
  CHECK_INT(b->ops->terminate(b, id), 0);
  int k = wait_event(loop, &rec, GW_PROVIDER_TERMINATED, id, 3000);
  CHECK(k >= 0 && !rec.ev[k].by_market);
  CHECK(!running(pid));

  /* While the provider runs, a gone instance's folder whose log turns a week
   * old goes at the next sweep (hourly; a twentieth of a second here): e2's
   * log, kept when the provider opened, is now past the week. Folders with a
   * recent log, or a record moved aside this week, stay. */
  inst_file("i-0000000000e2", "worker.log", path, sizeof path);
  CHECK_INT(utimes(path, old), 0);
  struct gw_local *l = (struct gw_local *)b;
  l->sweep_every_us = 50000;
  gw_loop_set_timer(loop, l->timer, l->swept_mono_us + l->sweep_every_us); /* as the period set it */
  snprintf(dir, sizeof dir, "%s/instances/i-0000000000e2", state);
  for (int64_t until = sl_time_mono_us() + 3000000; access(dir, F_OK) == 0 && sl_time_mono_us() < until;)
    gw_loop_run_once(loop, 50000);
  CHECK(access(dir, F_OK) < 0);
  inst_file(id, "worker.log", path, sizeof path);
  CHECK(access(path, F_OK) == 0);
  snprintf(path, sizeof path, "%s/instances/i-0000000000bb/instance.json.bad", state);
  CHECK(access(path, F_OK) == 0);
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
  struct gw_provider *p = open_provider(spec, 60, 3, &rec); /* one tick per second */
  CHECK(p != NULL);
  if (!p)
    return;
  char id1[GW_INSTANCE_ID_MAX], id3[GW_INSTANCE_ID_MAX], none[GW_INSTANCE_ID_MAX];
  struct gw_launch r1 = request("p3.2xlarge", true);
  struct gw_launch r2 = request("p3.2xlarge", true);
  struct gw_launch r3 = request("p3.2xlarge", false);
  CHECK(launch_ok(p, &rec, &r1, id1) >= 0);
  CHECK_INT(p->ops->launch(p, &r2, none), -EAGAIN); /* the trace holds one */
  int n = wait_event(loop, &rec, GW_PROVIDER_NOTICE, id1, 2500);
  CHECK(n >= 0 && rec.ev[n].by_market);
  CHECK(rec.capacity >= 1); /* the market changed: CAPACITY */
  CHECK_INT(p->ops->launch(p, &r2, none), -EAGAIN); /* capacity gone */
  CHECK(launch_ok(p, &rec, &r3, id3) >= 0);         /* on-demand is unaffected */
  n = wait_event(loop, &rec, GW_PROVIDER_TERMINATED, id1, 5000);
  CHECK(n >= 0 && rec.ev[n].by_market);
  CHECK_INT(p->ops->terminate(p, id3), 0);
  CHECK(wait_event(loop, &rec, GW_PROVIDER_TERMINATED, id3, 3000) >= 0);
  p->ops->destroy(p);
}

static void test_random_market(void) {
  /* Mean lifetime 2 h simulated; at 20000× that is 0.36 s of wall time. */
  struct recorder rec = {0};
  struct gw_provider *p = open_provider("random:5", 20000, 1, &rec);
  CHECK(p != NULL);
  if (!p)
    return;
  char id[GW_INSTANCE_ID_MAX];
  struct gw_launch r = request("g5.xlarge", true);
  CHECK(launch_ok(p, &rec, &r, id) >= 0);
  CHECK(wait_event(loop, &rec, GW_PROVIDER_NOTICE, id, 4000) >= 0);
  int n = wait_event(loop, &rec, GW_PROVIDER_TERMINATED, id, 3000);
  CHECK(n >= 0 && rec.ev[n].by_market);
  CHECK(rec.capacity >= 1); /* prices moved meanwhile */
  p->ops->destroy(p);
}

/* The class: its options in the gateway's configuration, and open(). */
static void test_class(void) {
  static struct gw_config c;
  char err[512], path[512];
  CHECK_INT(gw_provider_register(&gw_local_provider_class), 0);
  gw_config_defaults(&c);
  snprintf(c.state_dir, sizeof c.state_dir, "%s", state);
  CHECK_STR(gw_config_provider_option(&c, "local", "slots"), "2");
  CHECK_STR(gw_config_provider_option(&c, "local", "market"), "random:1");
  CHECK_STR(gw_config_provider_option(&c, "local", "time_scale"), "60");
  CHECK_STR(gw_config_provider_option(&c, "local", "catalog"), "");
  CHECK_INT(gw_config_set(&c, "provider.local", "slots", "1000", err, sizeof err), SL_ECONFIG);
  CHECK(strstr(err, "slots: 1000 is out of range [0, 64]") != NULL);
  CHECK_INT(gw_config_set(&c, "provider.local", "slots", "1.5", err, sizeof err), SL_ECONFIG);
  CHECK(strstr(err, "slots: \"1.5\" is not an integer") != NULL);
  CHECK_INT(gw_config_set(&c, "provider.local", "time_scale", "0", err, sizeof err), SL_ECONFIG);
  CHECK(strstr(err, "time_scale: 0 is out of range") != NULL);
  CHECK_INT(gw_config_set(&c, "provider.local", "market", "random:x", err, sizeof err),
            SL_ECONFIG);
  CHECK(strstr(err, "market: \"random:x\" is not trace:PATH or random:SEED") != NULL);
  CHECK_INT(gw_config_set(&c, "provider.local", "market", "trace:", err, sizeof err), SL_ECONFIG);
  CHECK_INT(gw_config_set(&c, "provider.local", "zones", "a", err, sizeof err), SL_ECONFIG);
  CHECK(strstr(err, "(it accepts: slots, market, time_scale, catalog)") != NULL);
  CHECK_INT(gw_config_set(&c, "provider.local", "market", "random:3", err, sizeof err), 0);

  /* open(): the options as configured, the worker found by SPOTLAB_WORKER_BIN */
  struct recorder rec = {0};
  struct gw_provider_env env = {.cfg = &c, .state_dir = state, .loop = loop,
                                .on_event = record, .userdata = &rec};
  setenv("SPOTLAB_WORKER_BIN", worker, 1);
  CHECK_INT(gw_config_set(&c, "provider.local", "time_scale", "120", err, sizeof err), 0);
  struct gw_provider *p = gw_local_provider_class.open(&env, err, sizeof err);
  CHECK(p != NULL);
  if (p) {
    CHECK_NEAR(gw_provider_time_scale(p), 120, 0);
    char id[GW_INSTANCE_ID_MAX];
    struct gw_launch req = request("g5.xlarge", false);
    CHECK(launch_ok(p, &rec, &req, id) >= 0);
    CHECK_INT(p->ops->terminate(p, id), 0);
    CHECK(wait_event(loop, &rec, GW_PROVIDER_TERMINATED, id, 3000) >= 0);
    p->ops->destroy(p);
  }
  CHECK_INT(gw_config_set(&c, "provider.local", "slots", "0", err, sizeof err), 0);
  CHECK(gw_local_provider_class.open(&env, err, sizeof err) == NULL);
  CHECK_STR(err, ""); /* off, which is no error */
  CHECK_INT(gw_config_set(&c, "provider.local", "slots", "1", err, sizeof err), 0);

  snprintf(path, sizeof path, "%s/bad.csv", state);
  FILE *f = fopen(path, "w");
  fputs("instance_type,gpus,gpu_model,on_demand_usd_per_hour,spot_usd_per_hour,interruption,zones\n"
        "a,1,T4,1,0.5,>20%,a\nb,1\n", f);
  fclose(f);
  CHECK_INT(gw_config_set(&c, "provider.local", "catalog", path, err, sizeof err), 0);
  CHECK(gw_local_provider_class.open(&env, err, sizeof err) == NULL);
  CHECK(strstr(err, "bad.csv:3:") != NULL);
  CHECK_INT(gw_config_set(&c, "provider.local", "catalog", "", err, sizeof err), 0);
  CHECK_INT(gw_config_set(&c, "provider.local", "market", "trace:/nonexistent.json", err,
                          sizeof err), 0);
  CHECK(gw_local_provider_class.open(&env, err, sizeof err) == NULL);
  CHECK(strstr(err, "/nonexistent.json") != NULL);
  setenv("SPOTLAB_WORKER_BIN", "/nonexistent/spotlab-worker", 1);
  CHECK_INT(gw_config_set(&c, "provider.local", "market", "random:1", err, sizeof err), 0);
  /* the build tree's spotlab-worker may be found instead; only a miss is checked */
  p = gw_local_provider_class.open(&env, err, sizeof err);
  if (p)
    p->ops->destroy(p);
  else
    CHECK_STR(err, "spotlab-worker not found (set SPOTLAB_WORKER_BIN)");
  unsetenv("SPOTLAB_WORKER_BIN");

  /* gw_local_provider_new's own checks */
  struct gw_local_config lc = {.slots = 0, .market = "random:1", .time_scale = 60,
                               .state_dir = state, .worker_program = worker};
  CHECK(gw_local_provider_new(&lc, loop, NULL, NULL, err, sizeof err) == NULL);
  CHECK(strstr(err, "slots") != NULL);
  lc.slots = 1;
  CHECK(gw_local_provider_new(&lc, NULL, NULL, NULL, err, sizeof err) == NULL);
  CHECK(strstr(err, "loop") != NULL);
  gw_provider_registry_clear();
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FAKE-WORKER\n", argv[0]);
    return 2;
  }
  worker = argv[1];
  curl_global_init(CURL_GLOBAL_DEFAULT);
  CHECK(sl_crypto_init() == 0);
  CHECK(mkdtemp(state) != NULL);
  loop = gw_loop_new();
  CHECK(loop != NULL);
  CHECK_INT(gw_keys_generate(&gateway_keys), 0);
  CHECK_INT(gw_keys_generate(&boot.keys), 0);
  boot.gateway = "ipc:///nowhere";
  boot.gateway_public = gateway_keys.public_z85;
  boot.train = "";
  test_launch_notice_and_kill();
  test_spawn_failure();
  test_record_failure();
  test_rediscovery();
  test_trace_market();
  test_random_market();
  test_class();
  gw_loop_free(loop);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", state);
  CHECK_INT(system(cmd), 0);
  curl_global_cleanup();
  TEST_MAIN_END();
}
