/* The local provider: instances are spotlab-worker processes on this machine
 * under a simulated spot market (DESIGN.md §5, docs/internals/local-provider.md).
 *
 * An instance is a worker process started in its own session and process
 * group (sid = pgid = pid) with its own folder state_dir/instances/ID (cwd, worker.log) and its
 * own metadata endpoint (imds.c). Its record, instance.json in that folder,
 * is written before its worker starts (pid 0: not started yet) and rewritten
 * atomically on every change (started, notice), so a gateway
 * that restarts finds its instances again: gw_local_provider_new() and
 * list() adopt every record whose process is still alive (same pid and same
 * kernel start time, so a reused pid is never mistaken for a worker) and
 * bring its metadata endpoint back on the recorded port. destroy() leaves
 * workers running.
 * Time: the market runs on simulated time = (monotonic now - open) ×
 * time_scale; deadlines given out (notices) are wall-clock µs since the
 * epoch, rounded up to a whole second so the time the metadata endpoint
 * prints is exactly when the process group is killed.
 * Invariants: events are queued (bounded) and delivered only from tick(),
 * never from inside launch/terminate/inject, so the callback may call back
 * into the provider. An instance leaves the table only after its
 * GW_PROVIDER_TERMINATED event was delivered; then its record is removed
 * (the folder and worker.log stay). At most GW_LOCAL_MAX_INSTANCES. */
#include "local.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "catalog.h"
#include "imds.h"
#include "market.h"
#include "sl_err.h"
#include "sl_file.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_path.h"
#include "sl_time.h"

#define GW_LOCAL_MAX_INSTANCES 256
#define MAX_EVENTS 1024
#define TERM_GRACE_US (5 * SL_US_PER_S)
#define REAP_POLL_US (20 * SL_US_PER_MS)
#define RECORD_MAX_BYTES (64 * 1024)
#define TOPIC "gateway.local"

extern char **environ;

struct inst {
  char id[32], type[64], zone[32];
  bool spot;
  int type_idx;
  pid_t pid;
  unsigned long long start_ticks;  /* /proc/PID/stat field 22: guards against pid reuse */
  struct gw_imds *imds;
  int port;
  int64_t launched_real_us;
  double price_usd_per_hour;       /* at launch; spot instances report the current price */
  int64_t notice_at_mono_us;       /* random model: when the market preempts; INT64_MAX none */
  int64_t rebalance_at_mono_us;    /* INT64_MAX none */
  int64_t deadline_real_us;        /* notice given: kill at this wall time; 0 none */
  int64_t deadline_mono_us;
  int64_t kill_at_mono_us;         /* terminate(): SIGKILL after the grace; 0 none */
  bool by_market;                  /* the end came from the market or inject */
  bool signalled;                  /* SIGKILL sent; waiting to see it gone */
  bool gone;                       /* process gone; TERMINATED pending */
};

struct local {
  struct gw_provider base;         /* first: the provider pointer is the struct */
  int slots;
  double time_scale;
  char *state_dir, *worker_program, *zone_prefix;
  struct gw_catalog *cat;
  struct gw_market *market;
  int64_t open_mono_us;
  struct inst *inst[GW_LOCAL_MAX_INSTANCES];
  size_t n;
  struct gw_provider_event events[MAX_EVENTS];
  size_t n_events;
  int last_capacity;               /* the trace's capacity at the last tick */
  bool capacity_known;
};

static struct local *L(struct gw_provider *p) { return (struct local *)p; }

static int64_t sim_us(const struct local *l, int64_t mono_us) {
  return (int64_t)((double)(mono_us - l->open_mono_us) * l->time_scale);
}

static int64_t wall_us_of_sim(const struct local *l, double sim_s) {
  return (int64_t)(sim_s * 1e6 / l->time_scale);
}

static void queue_event(struct local *l, enum gw_provider_event_kind kind, const struct inst *in,
                        int64_t deadline_us, bool by_market) {
  if (l->n_events == MAX_EVENTS) {
    sl_warn(TOPIC, "event queue full; dropping an event for %s", in->id);
    return;
  }
  struct gw_provider_event *ev = &l->events[l->n_events++];
  memset(ev, 0, sizeof *ev);
  ev->kind = kind;
  snprintf(ev->instance_id, sizeof ev->instance_id, "%s", in->id);
  ev->deadline_us = deadline_us;
  ev->by_market = by_market;
}

static struct inst *find(struct local *l, const char *id) {
  for (size_t i = 0; i < l->n; i++)
    if (strcmp(l->inst[i]->id, id) == 0)
      return l->inst[i];
  return NULL;
}

static bool valid_id(const char *id) {
  size_t n = strlen(id);
  if (n < 3 || n >= 32 || id[0] == '.')
    return false;
  for (const char *p = id; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-'))
      return false;
  return true;
}

/* ---- processes ---------------------------------------------------------- */

/* Start time (clock ticks since boot) and state letter of pid; -ESRCH if none. */
static int proc_stat(pid_t pid, unsigned long long *ret_ticks, char *ret_state) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -ESRCH;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0)
    return -ESRCH;
  buf[n] = '\0';
  char *p = strrchr(buf, ')');  /* the command name may hold spaces and ')' */
  if (!p || p[1] != ' ')
    return -EIO;
  char state = p[2];
  p += 3;
  for (int field = 4; field < 22 && p; field++) {  /* skip fields 4..21 */
    p = strchr(p, ' ');
    if (p)
      p++;
  }
  if (!p)
    return -EIO;
  *ret_ticks = strtoull(p, NULL, 10);
  *ret_state = state;
  return 0;
}

/* True while the instance's worker process exists and is not a zombie. */
static bool alive(struct inst *in) {
  int status;
  pid_t w = waitpid(in->pid, &status, WNOHANG);
  if (w == in->pid)
    return false;
  unsigned long long ticks;
  char state;
  if (proc_stat(in->pid, &ticks, &state) < 0)
    return false;
  return ticks == in->start_ticks && state != 'Z' && state != 'X';
}

static void signal_group(struct inst *in, int sig) {
  if (in->pid > 1 && kill(-in->pid, sig) < 0 && errno == ESRCH)
    kill(in->pid, sig);
}

/* Session id (field 6 of /proc/PID/stat) of pid; -1 if unknown. */
static pid_t proc_session(const char *pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%s/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0)
    return -1;
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  int ppid, pgrp, sid;
  if (!p || sscanf(p + 1, " %*c %d %d %d", &ppid, &pgrp, &sid) != 3)
    return -1;
  return sid;
}

/* The instance is lost: SIGKILL to everything on it. The worker runs its
 * jobs in process groups of their own, which outlive a dead worker, but
 * they stay in its session, so the session is killed as well as the group. */
static void kill_instance(struct inst *in) {
  signal_group(in, SIGKILL);
  if (in->pid <= 1)
    return;
  DIR *d = opendir("/proc");
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] >= '1' && e->d_name[0] <= '9' && proc_session(e->d_name) == in->pid)
      kill((pid_t)strtol(e->d_name, NULL, 10), SIGKILL);
  closedir(d);
}

static int spawn_worker(struct local *l, struct inst *in, const char *dir,
                        const char *config_path) {
  char log_path[4300];
  snprintf(log_path, sizeof log_path, "%s/worker.log", dir);
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&at);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  posix_spawn_file_actions_addchdir_np(&fa, dir);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &all);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK |
                                    POSIX_SPAWN_SETSIGDEF);
  char *argv[] = {l->worker_program, "--config", (char *)config_path, NULL};
  pid_t pid;
  int r = posix_spawn(&pid, l->worker_program, &fa, &at, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (r != 0)
    return -r;
  in->pid = pid;
  char state;
  if (proc_stat(pid, &in->start_ticks, &state) < 0)
    in->start_ticks = 0;
  return 0;
}

/* ---- files -------------------------------------------------------------- */

/* Writes text to path atomically, readable by the owner only. */
static int write_atomic(const char *path, const char *text) {
  return sl_file_write_atomic(path, text, strlen(text), 0600);
}

static int read_json(const char *path, json_t **ret, char *why, size_t why_size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return snprintf(why, why_size, "%s", strerror(errno)), -errno;
  char *buf = malloc(RECORD_MAX_BYTES + 1);
  ssize_t n = buf ? read(fd, buf, RECORD_MAX_BYTES + 1) : -1;
  close(fd);
  int r;
  if (n < 0 || n > RECORD_MAX_BYTES) {
    snprintf(why, why_size, "unreadable or larger than %d bytes", RECORD_MAX_BYTES);
    r = n < 0 ? -EIO : SL_ELIMIT;
  } else {
    r = sl_json_parse(buf, (size_t)n, 16, ret, why, why_size);
    if (r == 0 && !json_is_object(*ret)) {
      json_decref(*ret);
      snprintf(why, why_size, "not a JSON object");
      r = SL_EJSON;
    }
  }
  free(buf);
  return r;
}

/* Sets "metadata" in the worker's config file (protocols.md §2). */
static int set_metadata_url(const char *config_path, const char *url, char *err, size_t err_size) {
  json_t *cfg = NULL;
  char why[200];
  int r = read_json(config_path, &cfg, why, sizeof why);
  if (r < 0) {
    snprintf(err, err_size, "worker config %s: %s", config_path, why);
    return r;
  }
  char *text = NULL;
  if (json_object_set_new(cfg, "metadata", json_string(url)) < 0 ||
      !(text = json_dumps(cfg, JSON_COMPACT))) {
    r = -ENOMEM;
  } else {
    r = write_atomic(config_path, text);
  }
  if (r < 0)
    snprintf(err, err_size, "worker config %s: %s", config_path, sl_strerror(r));
  free(text);
  json_decref(cfg);
  return r;
}

static void inst_dir(const struct local *l, const char *id, char *buf, size_t size) {
  snprintf(buf, size, "%s/instances/%s", l->state_dir, id);
}

static int save_record(struct local *l, const struct inst *in) {
  char path[4200];
  inst_dir(l, in->id, path, sizeof path);
  strncat(path, "/instance.json", sizeof path - strlen(path) - 1);
  json_t *o = json_pack("{s:s,s:I,s:I,s:s,s:s,s:b,s:f,s:i,s:I,s:I}", "instance", in->id,
                        "pid", (json_int_t)in->pid, "start_ticks", (json_int_t)in->start_ticks,
                        "type", in->type, "zone", in->zone, "spot", in->spot,
                        "price_usd_per_hour", in->price_usd_per_hour, "metadata_port",
                        in->port, "launched_us", (json_int_t)in->launched_real_us,
                        "deadline_us", (json_int_t)in->deadline_real_us);
  char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
  int r = text ? write_atomic(path, text) : -ENOMEM;
  free(text);
  json_decref(o);
  if (r < 0)
    sl_warn(TOPIC, "cannot save %s: %s", path, sl_strerror(r));
  return r;
}

static void remove_record(struct local *l, const char *id) {
  char path[4200];
  inst_dir(l, id, path, sizeof path);
  strncat(path, "/instance.json", sizeof path - strlen(path) - 1);
  unlink(path);
}

static struct inst *inst_free(struct inst *in) {
  if (in) {
    gw_imds_free(in->imds);
    free(in);
  }
  return NULL;
}

static void drop(struct local *l, size_t i) {
  inst_free(l->inst[i]);
  l->inst[i] = l->inst[--l->n];
}

/* The pid of the spotlab-worker running with this instance's worker.json as
 * its config, 0 if none: a record saved before its worker started (the
 * gateway died inside launch) names no pid, but the worker may run. */
static pid_t find_worker(const struct local *l, const char *id) {
  char cfg[4300];
  inst_dir(l, id, cfg, sizeof cfg);
  strncat(cfg, "/worker.json", sizeof cfg - strlen(cfg) - 1);
  DIR *d = opendir("/proc");
  pid_t found = 0;
  struct dirent *e;
  while (d && !found && (e = readdir(d))) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9')
      continue;
    char path[300], buf[8192];
    snprintf(path, sizeof path, "/proc/%.20s/cmdline", e->d_name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      continue;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
      continue;
    buf[n] = '\0';
    for (char *a = buf; a < buf + n; a += strlen(a) + 1)
      if (!strcmp(a, "--config") && a + strlen(a) + 1 < buf + n && !strcmp(a + strlen(a) + 1, cfg))
        found = (pid_t)strtol(e->d_name, NULL, 10);
  }
  if (d)
    closedir(d);
  return found;
}

/* Adopts one record found on disk (after a gateway restart). A record whose
 * process is gone is adopted as gone, so tick() reports it terminated. */
static void adopt(struct local *l, const char *id) {
  char path[4200], why[200];
  inst_dir(l, id, path, sizeof path);
  strncat(path, "/instance.json", sizeof path - strlen(path) - 1);
  json_t *o = NULL;
  if (read_json(path, &o, why, sizeof why) < 0) {
    char aside[4300];
    snprintf(aside, sizeof aside, "%s.bad", path);
    sl_warn(TOPIC, "%s: %s; moved aside to %s", path, why, aside);
    rename(path, aside);
    return;
  }
  struct inst *in = calloc(1, sizeof *in);
  const char *type = sl_json_get_str(o, "type", ""), *zone = sl_json_get_str(o, "zone", "");
  int64_t pid = sl_json_get_int(o, "pid", 0);
  bool unstarted = pid == 0;
  if (!in || strlen(id) >= sizeof in->id ||
      strcmp(sl_json_get_str(o, "instance", ""), id) != 0 || (pid <= 1 && !unstarted) ||
      pid > INT32_MAX ||
      strlen(type) >= sizeof in->type || strlen(zone) >= sizeof in->zone ||
      gw_catalog_find(l->cat, type) < 0 || l->n == GW_LOCAL_MAX_INSTANCES) {
    sl_warn(TOPIC, "%s: not a usable instance record; moved aside to .bad", path);
    char aside[4300];
    snprintf(aside, sizeof aside, "%s.bad", path);
    rename(path, aside);
    free(in);
    json_decref(o);
    return;
  }
  strcpy(in->id, id);
  strcpy(in->type, type);
  strcpy(in->zone, zone);
  in->type_idx = gw_catalog_find(l->cat, type);
  in->spot = sl_json_get_bool(o, "spot", false);
  in->pid = (pid_t)pid;
  in->start_ticks = (unsigned long long)sl_json_get_int(o, "start_ticks", 0);
  in->port = (int)sl_json_get_int(o, "metadata_port", 0);
  in->launched_real_us = sl_json_get_int(o, "launched_us", 0);
  in->price_usd_per_hour = sl_json_get_num(o, "price_usd_per_hour", 0);
  in->deadline_real_us = sl_json_get_int(o, "deadline_us", 0);
  in->notice_at_mono_us = in->rebalance_at_mono_us = INT64_MAX;
  json_decref(o);
  int64_t now = sl_time_mono_us();
  if (in->deadline_real_us > 0) {
    in->deadline_mono_us = now + (in->deadline_real_us - sl_time_real_us());
    in->by_market = true;
  }
  if (unstarted) {
    char state;
    in->pid = find_worker(l, id);
    if (in->pid > 1 && proc_stat(in->pid, &in->start_ticks, &state) == 0)
      save_record(l, in);
  }
  if (in->pid <= 1 || !alive(in)) {
    in->gone = true;
  } else if (in->port > 0 && in->port < 65536) {
    int r = gw_imds_new(in->id, in->type, in->zone, in->port, &in->imds);
    if (r < 0)
      sl_warn(TOPIC, "%s: metadata port %d: %s", id, in->port, sl_strerror(r));
    else if (in->deadline_real_us > 0)
      gw_imds_set_notice(in->imds, "terminate", in->deadline_real_us);
  }
  l->inst[l->n++] = in;
  sl_info(TOPIC, "found instance %s (pid %d, %s)", id, (int)in->pid,
          in->gone ? "gone" : "running");
}

static void rescan(struct local *l) {
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/instances", l->state_dir);
  DIR *d = opendir(dir);
  if (!d)
    return;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (!valid_id(de->d_name) || find(l, de->d_name))
      continue;
    char rec[4200 + 300];
    snprintf(rec, sizeof rec, "%s/%s/instance.json", dir, de->d_name);
    if (access(rec, F_OK) == 0)
      adopt(l, de->d_name);
  }
  closedir(d);
}

/* ---- notices and the market --------------------------------------------- */

/* Gives in a notice of notice_sim_s simulated seconds: the metadata endpoint
 * answers instance-action from now on and the group dies at the deadline. */
static void give_notice(struct local *l, struct inst *in, double notice_sim_s, int64_t now_mono) {
  if (in->deadline_real_us > 0 || in->gone)
    return;
  int64_t real = sl_time_real_us();
  int64_t deadline = real + wall_us_of_sim(l, notice_sim_s);
  deadline = (deadline + SL_US_PER_S - 1) / SL_US_PER_S * SL_US_PER_S;
  in->deadline_real_us = deadline;
  in->deadline_mono_us = now_mono + (deadline - real);
  in->by_market = true;
  if (in->imds)
    gw_imds_set_notice(in->imds, "terminate", deadline);
  save_record(l, in);
  queue_event(l, GW_PROVIDER_NOTICE, in, deadline, true);
  sl_info(TOPIC, "instance %s: spot notice, terminated in %.1f s", in->id,
          (double)(deadline - real) / 1e6);
}

/* Counts live spot instances of a type that have no notice yet. */
static int spot_running(const struct local *l, int type_idx, bool without_notice) {
  int n = 0;
  for (size_t i = 0; i < l->n; i++) {
    const struct inst *in = l->inst[i];
    if (in->spot && in->type_idx == type_idx && !in->gone && in->kill_at_mono_us == 0 &&
        (!without_notice || in->deadline_real_us == 0))
      n++;
  }
  return n;
}

/* Trace model: a type holding more spot instances than the tick's capacity
 * loses the newest ones (they get notices). */
static void apply_capacity(struct local *l, int64_t now) {
  int cap = gw_market_capacity(l->market, sim_us(l, now));
  /* Capacity coming back is news for jobs waiting in the gateway's queue. */
  if (l->capacity_known && cap > l->last_capacity && l->n_events < MAX_EVENTS) {
    struct gw_provider_event *ev = &l->events[l->n_events++];
    memset(ev, 0, sizeof *ev);
    ev->kind = GW_PROVIDER_CAPACITY;
    ev->by_market = true;
  }
  l->last_capacity = cap;
  l->capacity_known = true;
  for (size_t t = 0; t < gw_catalog_count(l->cat); t++) {
    int excess = spot_running(l, (int)t, true) - cap;
    while (excess-- > 0) {
      struct inst *newest = NULL;
      for (size_t i = 0; i < l->n; i++) {
        struct inst *in = l->inst[i];
        if (in->spot && in->type_idx == (int)t && !in->gone && in->deadline_real_us == 0 &&
            in->kill_at_mono_us == 0 &&
            (!newest || in->launched_real_us > newest->launched_real_us))
          newest = in;
      }
      if (!newest)
        break;
      give_notice(l, newest, GW_MARKET_NOTICE_S, now);
    }
  }
}

/* ---- operations --------------------------------------------------------- */

static int pick_zone(const struct local *l, const struct gw_catalog_entry *e, const char *want,
                     char *ret, size_t size) {
  size_t plen = strlen(l->zone_prefix);
  if (!*want) {
    snprintf(ret, size, "%s%c", l->zone_prefix, e->zones[0]);
    return 0;
  }
  if (strncmp(want, l->zone_prefix, plen) != 0 || strlen(want) != plen + 1 ||
      !strchr(e->zones, want[plen]))
    return SL_ENOTSUP;
  snprintf(ret, size, "%s", want);
  return 0;
}

static size_t live_count(const struct local *l) {
  size_t n = 0;
  for (size_t i = 0; i < l->n; i++)
    n += !l->inst[i]->gone;
  return n;
}

static void fill_info(const struct local *l, const struct inst *in, struct gw_instance_info *ret) {
  memset(ret, 0, sizeof *ret);
  snprintf(ret->instance_id, sizeof ret->instance_id, "%s", in->id);
  snprintf(ret->type, sizeof ret->type, "%s", in->type);
  snprintf(ret->zone, sizeof ret->zone, "%s", in->zone);
  ret->spot = in->spot;
  ret->price_usd_per_hour =
      in->spot ? gw_market_price(l->market, (size_t)in->type_idx,
                                 sim_us(l, sl_time_mono_us()))
               : in->price_usd_per_hour;
  if (in->port > 0)
    snprintf(ret->metadata_url, sizeof ret->metadata_url, "http://127.0.0.1:%d", in->port);
  ret->launched_us = in->launched_real_us;
  ret->running = !in->gone;
}

static int local_launch(struct gw_provider *p, const struct gw_launch *req,
                        struct gw_instance_info *ret) {
  struct local *l = L(p);
  char err[4400] = "", dir[4200], url[64];
  int64_t now = sl_time_mono_us();
  if (!valid_id(req->instance_id))
    return -EINVAL;
  int t = gw_catalog_find(l->cat, req->type);
  if (t < 0)
    return SL_ENOTSUP;
  const struct gw_catalog_entry *e = gw_catalog_get(l->cat, (size_t)t);
  struct inst *in = calloc(1, sizeof *in);
  if (!in)
    return -ENOMEM;
  int r = pick_zone(l, e, req->zone, in->zone, sizeof in->zone);
  if (r < 0)
    goto fail;
  if (find(l, req->instance_id)) {
    r = -EEXIST;
    goto fail;
  }
  double price = req->spot ? gw_market_price(l->market, (size_t)t, sim_us(l, now))
                           : e->on_demand_usd_per_hour;
  if (live_count(l) >= (size_t)l->slots || l->n == GW_LOCAL_MAX_INSTANCES ||
      (req->spot && spot_running(l, t, false) >= gw_market_capacity(l->market, sim_us(l, now))) ||
      (req->max_price_usd_per_hour > 0 && price > req->max_price_usd_per_hour)) {
    r = -EAGAIN;
    goto fail;
  }
  snprintf(in->id, sizeof in->id, "%s", req->instance_id);
  snprintf(in->type, sizeof in->type, "%s", e->name);
  in->type_idx = t;
  in->spot = req->spot;
  in->price_usd_per_hour = price;
  in->launched_real_us = sl_time_real_us();
  in->notice_at_mono_us = in->rebalance_at_mono_us = INT64_MAX;
  inst_dir(l, in->id, dir, sizeof dir);
  if ((r = sl_mkdir_p(dir, 0700)) < 0) {
    snprintf(err, sizeof err, "%s: %s", dir, sl_strerror(r));
    goto fail;
  }
  if ((r = gw_imds_new(in->id, in->type, in->zone, 0, &in->imds)) < 0) {
    snprintf(err, sizeof err, "metadata endpoint: %s", sl_strerror(r));
    goto fail;
  }
  in->port = gw_imds_port(in->imds);
  snprintf(url, sizeof url, "http://127.0.0.1:%d", in->port);
  if (req->worker_config[0] && (r = set_metadata_url(req->worker_config, url, err, sizeof err)) < 0)
    goto fail;
  save_record(l, in); /* pid 0 until it runs: a restart finds the worker by its config */
  if ((r = spawn_worker(l, in, dir, req->worker_config)) < 0) {
    remove_record(l, in->id);
    snprintf(err, sizeof err, "cannot start %s: %s", l->worker_program, sl_strerror(r));
    goto fail;
  }
  if (in->spot) {
    int64_t after_sim, lead_sim;
    gw_market_draw(l->market, (size_t)t, &after_sim, &lead_sim);
    if (after_sim != INT64_MAX) {
      in->notice_at_mono_us = now + (int64_t)((double)after_sim / l->time_scale);
      if (lead_sim > 0)
        in->rebalance_at_mono_us =
            now + (int64_t)((double)(after_sim > lead_sim ? after_sim - lead_sim : 0) /
                            l->time_scale);
    }
  }
  save_record(l, in);
  l->inst[l->n++] = in;
  fill_info(l, in, ret);
  sl_info(TOPIC, "launched %s (%s %s%s, pid %d, metadata %s)", in->id, in->type, in->zone,
          in->spot ? " spot" : "", (int)in->pid, url);
  return 0;
fail:
  if (err[0])
    sl_err(TOPIC, "launch %s: %s", req->instance_id, err);
  inst_free(in);
  return r;
}

static int local_terminate(struct gw_provider *p, const char *instance_id) {
  struct local *l = L(p);
  struct inst *in = find(l, instance_id);
  if (!in)
    return SL_ENAME;
  if (in->gone || in->kill_at_mono_us)
    return 0;
  signal_group(in, SIGTERM);
  in->kill_at_mono_us = sl_time_mono_us() + TERM_GRACE_US;
  in->by_market = false;
  return 0;
}

static int local_inject(struct gw_provider *p, const char *instance_id, bool kill_now,
                        double notice_s) {
  struct local *l = L(p);
  struct inst *in = find(l, instance_id);
  if (!in)
    return SL_ENAME;
  if (in->gone)
    return SL_ESTATE;
  if (!(notice_s >= 0 && notice_s <= 86400))
    return -EINVAL;
  if (kill_now || notice_s == 0) {
    kill_instance(in);
    in->signalled = true;
    in->by_market = true;
    return 0;
  }
  if (in->deadline_real_us > 0)
    return SL_ESTATE;
  give_notice(l, in, notice_s, sl_time_mono_us());
  return 0;
}

static int local_list(struct gw_provider *p, struct gw_instance_info **ret, size_t *ret_n) {
  struct local *l = L(p);
  rescan(l);
  struct gw_instance_info *a = calloc(l->n ? l->n : 1, sizeof *a);
  if (!a)
    return -ENOMEM;
  for (size_t i = 0; i < l->n; i++) {
    struct inst *in = l->inst[i];
    if (!in->gone && !alive(in))
      in->gone = true;
    fill_info(l, in, &a[i]);
  }
  *ret = a;
  *ret_n = l->n;
  return 0;
}

static int local_types(struct gw_provider *p, struct gw_instance_type **ret, size_t *ret_n) {
  struct local *l = L(p);
  size_t n = gw_catalog_count(l->cat);
  struct gw_instance_type *a = calloc(n, sizeof *a);
  if (!a)
    return -ENOMEM;
  int64_t now = sim_us(l, sl_time_mono_us());
  for (size_t i = 0; i < n; i++) {
    const struct gw_catalog_entry *e = gw_catalog_get(l->cat, i);
    snprintf(a[i].name, sizeof a[i].name, "%s", e->name);
    a[i].gpus = e->gpus;
    snprintf(a[i].gpu_model, sizeof a[i].gpu_model, "%s", e->gpu_model);
    a[i].on_demand_usd_per_hour = e->on_demand_usd_per_hour;
    a[i].spot_usd_per_hour = gw_market_price(l->market, i, now);
    a[i].interruption = gw_catalog_bucket_label(e->bucket);
    a[i].mean_time_to_preempt_s = gw_market_mean_time_to_preempt_s(l->market, i);
  }
  *ret = a;
  *ret_n = n;
  return 0;
}

static void local_tick(struct gw_provider *p, int64_t now) {
  struct local *l = L(p);
  for (size_t i = 0; i < l->n; i++) {
    struct inst *in = l->inst[i];
    if (in->gone)
      continue;
    if (!alive(in)) {
      in->gone = true;
      kill_instance(in);  /* a lost instance takes everything on it along */
      continue;
    }
    if (in->rebalance_at_mono_us <= now) {
      in->rebalance_at_mono_us = INT64_MAX;
      if (in->imds)
        gw_imds_set_rebalance(in->imds, sl_time_real_us());
      sl_info(TOPIC, "instance %s: rebalance recommendation", in->id);
    }
    if (in->notice_at_mono_us <= now && in->kill_at_mono_us == 0) {
      in->notice_at_mono_us = INT64_MAX;
      give_notice(l, in, GW_MARKET_NOTICE_S, now);
    }
    if (!in->signalled && ((in->deadline_real_us > 0 && in->deadline_mono_us <= now) ||
                           (in->kill_at_mono_us > 0 && in->kill_at_mono_us <= now))) {
      kill_instance(in);
      in->signalled = true;
    }
  }
  if (gw_market_is_trace(l->market))
    apply_capacity(l, now);
  for (size_t i = 0; i < l->n;) {
    struct inst *in = l->inst[i];
    if (!in->gone) {
      i++;
      continue;
    }
    queue_event(l, GW_PROVIDER_TERMINATED, in, in->deadline_real_us, in->by_market);
    sl_info(TOPIC, "instance %s (pid %d) is gone%s", in->id, (int)in->pid,
            in->by_market ? " (preempted)" : "");
    remove_record(l, in->id);
    drop(l, i);
  }
  /* Deliver a snapshot: the callback may call back in and queue more. */
  while (l->n_events) {
    size_t n = l->n_events;
    struct gw_provider_event *batch = malloc(n * sizeof *batch);
    if (!batch)
      return;
    memcpy(batch, l->events, n * sizeof *batch);
    l->n_events = 0;
    for (size_t i = 0; i < n; i++)
      if (p->on_event)
        p->on_event(p->userdata, &batch[i]);
    free(batch);
  }
}

static int64_t local_next_tick_us(struct gw_provider *p) {
  struct local *l = L(p);
  int64_t now = sl_time_mono_us(), next = INT64_MAX;
  if (l->n_events)
    return now;
  for (size_t i = 0; i < l->n; i++) {
    const struct inst *in = l->inst[i];
    int64_t t = now + REAP_POLL_US * 25;  /* a live process is checked twice a second */
    if (in->gone || in->signalled || in->kill_at_mono_us)
      t = now + REAP_POLL_US;
    if (in->notice_at_mono_us < t)
      t = in->notice_at_mono_us;
    if (in->rebalance_at_mono_us < t)
      t = in->rebalance_at_mono_us;
    if (in->deadline_real_us > 0 && !in->signalled && in->deadline_mono_us < t)
      t = in->deadline_mono_us;
    if (in->kill_at_mono_us > 0 && !in->signalled && in->kill_at_mono_us < t)
      t = in->kill_at_mono_us;
    if (t < next)
      next = t;
  }
  if (gw_market_is_trace(l->market)) {
    /* Also with no instance: capacity that comes back is reported. */
    int64_t s = gw_market_next_change_us(l->market, sim_us(l, now));
    int64_t t = l->open_mono_us + (int64_t)((double)s / l->time_scale) + 1;
    if (t < next)
      next = t;
  }
  return next;
}

static void local_destroy(struct gw_provider *p) {
  struct local *l = L(p);
  if (!l)
    return;
  for (size_t i = 0; i < l->n; i++)
    inst_free(l->inst[i]);  /* workers keep running; their records stay */
  gw_market_free(l->market);
  gw_catalog_free(l->cat);
  free(l->state_dir);
  free(l->worker_program);
  free(l->zone_prefix);
  free(l);
}

static const struct gw_provider_ops local_ops = {
    .name = "local",
    .launch = local_launch,
    .terminate = local_terminate,
    .list = local_list,
    .types = local_types,
    .tick = local_tick,
    .inject = local_inject,
    .next_tick_us = local_next_tick_us,
    .destroy = local_destroy,
};

struct gw_provider *gw_local_provider_new(const struct gw_local_config *cfg,
                                          gw_provider_event_fn on_event, void *userdata,
                                          char *err, size_t err_size) {
  char catalog_path[4096], dir[4200];
  const char *prefix = cfg->zone_prefix && *cfg->zone_prefix ? cfg->zone_prefix : "local-1";
  if (cfg->slots < 1 || cfg->slots > GW_LOCAL_MAX_INSTANCES) {
    snprintf(err, err_size, "provider.local: slots must be 1..%d", GW_LOCAL_MAX_INSTANCES);
    return NULL;
  }
  if (!(cfg->time_scale >= 0.001 && cfg->time_scale <= 1e6)) {
    snprintf(err, err_size, "provider.local: time_scale must be in 0.001..1000000");
    return NULL;
  }
  if (!cfg->state_dir || !*cfg->state_dir || !cfg->worker_program || !*cfg->worker_program ||
      strlen(prefix) > 24) {
    snprintf(err, err_size, "provider.local: state_dir and worker_program are required, "
                            "zone_prefix at most 24 bytes");
    return NULL;
  }
  struct local *l = calloc(1, sizeof *l);
  if (!l) {
    snprintf(err, err_size, "out of memory");
    return NULL;
  }
  l->base.ops = &local_ops;
  l->base.on_event = on_event;
  l->base.userdata = userdata;
  l->slots = cfg->slots;
  l->time_scale = cfg->time_scale;
  l->open_mono_us = sl_time_mono_us();
  l->state_dir = strdup(cfg->state_dir);
  l->worker_program = strdup(cfg->worker_program);
  l->zone_prefix = strdup(prefix);
  if (!l->state_dir || !l->worker_program || !l->zone_prefix) {
    snprintf(err, err_size, "out of memory");
    goto fail;
  }
  const char *cat = cfg->catalog;
  if (!cat) {
    if (gw_catalog_default_path(catalog_path, sizeof catalog_path) < 0) {
      snprintf(err, err_size, "built-in catalog.csv not found (share/spotlab or source tree)");
      goto fail;
    }
    cat = catalog_path;
  }
  if (gw_catalog_load(cat, &l->cat, err, err_size) < 0 ||
      gw_market_new(cfg->market ? cfg->market : "random:1", l->cat, &l->market, err,
                    err_size) < 0)
    goto fail;
  snprintf(dir, sizeof dir, "%s/instances", l->state_dir);
  int r = sl_mkdir_p(dir, 0700);
  if (r < 0) {
    snprintf(err, err_size, "%s: %s", dir, sl_strerror(r));
    goto fail;
  }
  rescan(l);
  return &l->base;
fail:
  local_destroy(&l->base);
  return NULL;
}
