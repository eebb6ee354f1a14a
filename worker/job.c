/* Jobs.
 *
 * A job moves RUNNING → (NOTICE_WAIT →) STOPPING → ENDED. In NOTICE_WAIT a
 * train child was asked for a checkpoint and gets until the notice deadline
 * minus the margin to report it durable; then (or as soon as that checkpoint
 * is uploaded) it gets SIGTERM, which makes spotlab-train write one more
 * checkpoint of its latest step; SIGKILL follows when even that overruns.
 * Invariants: every checkpoint event is uploaded before the next line of the
 * metrics stream is handled, so `durable_step` is always in the store; done
 * is sent after the child was reaped and its pipes drained, and after every
 * metric, checkpoint and result of the job; an ENDED job keeps its done (which
 * names its newest step metric and checkpoint) and its sent step metrics, and
 * sends the done again every DONE_RESEND_US, until the gateway answers
 * done_recorded: a gateway that died with them in flight, or that cannot
 * write them yet, hears them again. Its checkpoints are job_ckpt.c's, its
 * output lines job_output.c's. */
#include "job_int.h"

#include "conf.h"
#include "filesync.h"
#include "gang.h"
#include "relay.h"
#include "reserve.h"
#include "sl_err.h"
#include "sl_file.h"
#include "sl_digest.h"
#include "sl_ident.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_path.h"
#include "sl_time.h"
#include "spec.h"
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define TOPIC "worker"
#define ENV_MAX 4096
#define ASSIGN_ENV_MAX 64
#define DONE_RESEND_US (2 * SL_US_PER_S)
#define LAST_ACK_WAIT_US (3 * SL_US_PER_S)

extern char **environ;


const char *wk_job_id(const struct wk_job *j) { return j->id; }
int64_t wk_job_attempt(const struct wk_job *j) { return j->attempt; }
int64_t wk_job_step(const struct wk_job *j) { return j->durable_step > j->step ? j->durable_step : j->step; }
int wk_job_fd(const struct wk_job *j, enum wk_stream s) {
  if (s == WK_STREAM_METRICS && j->metrics_held) return -1;
  return j->child && j->state != ENDED ? wk_child_fd(j->child, s) : -1; /* nothing after done */
}

void wk_job_flow(struct wk_job *j, int64_t now) {
  /* spotlab-train blocks on its metrics pipe rather than have a step metric
   * the gateway has not saved pushed out of the ring (a stopping job goes on) */
  bool held = j->state == RUNNING && wk_relay_full(j->relay);
  if (j->metrics_held && !held && j->exited_at_us) j->exited_at_us = now; /* its grace again */
  j->metrics_held = held;
}

void wk_job_metrics_recorded(struct wk_job *j, int64_t attempt, int64_t step) {
  if (attempt == j->attempt) wk_relay_confirm(j->relay, step);
}
bool wk_job_ended(const struct wk_job *j) { return j->state == ENDED; }

json_t *wk_job_msg_new(const struct wk_job *j, const char *type) {
  return json_pack("{s:s, s:s, s:I}", "type", type, "job", j->id, "attempt", (json_int_t)j->attempt);
}

void wk_job_send(struct wk_job *j, json_t *m, bool reliable) {
  if (m) j->env->send(j->env->ctx, m, reliable);
}

/* ---- preparing the job ---- */

static int check_job_id(const char *id) {
  size_t n = id ? strlen(id) : 0;
  if (n == 0 || n >= 32) return SL_ENAME;
  for (size_t i = 0; i < n; i++)
    if (!((id[i] >= 'A' && id[i] <= 'Z') || (id[i] >= 'a' && id[i] <= 'z') ||
          (id[i] >= '0' && id[i] <= '9') || id[i] == '-' || id[i] == '_'))
      return SL_ENAME;
  return 0;
}

static void clear_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.' && (!e->d_name[1] || !strcmp(e->d_name, ".."))) continue;
    char p[PATH_MAX];
    if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < sizeof p) unlink(p);
  }
  closedir(d);
}

static int valid_env_name(const char *s) {
  if (!s || !*s || (*s >= '0' && *s <= '9')) return 0;
  for (; *s; s++)
    if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_'))
      return 0;
  return 1;
}

/* The child's environment: ours, then the assign's "env", then ours again
 * for SPOTLAB_CHECKPOINT_DIR. Owned strings in an owned array. */
static int build_env(struct wk_job *j, const json_t *extra, char ***ret, char *err, size_t err_size) {
  char **v = calloc(ENV_MAX + 1, sizeof *v);
  size_t n = 0;
  if (!v) return -ENOMEM;
  char files[PATH_MAX + 64];
  snprintf(files, sizeof files, "SPOTLAB_CHECKPOINT_DIR=%s/%s", j->dir,
           j->kind == WK_KIND_RUN ? "files" : "ckpt");
  const char *name;
  json_t *val;
  if (extra && !json_is_object(extra)) goto bad;
  if (json_object_size(extra) > ASSIGN_ENV_MAX) goto bad;
  for (char **e = environ; *e && n < ENV_MAX - ASSIGN_ENV_MAX - 1; e++) {
    size_t nl = strcspn(*e, "=");
    bool shadowed = !strncmp(*e, "SPOTLAB_CHECKPOINT_DIR=", 23);
    json_object_foreach((json_t *)extra, name, val) if (strlen(name) == nl && !strncmp(*e, name, nl)) shadowed = true;
    if (!shadowed && !(v[n++] = strdup(*e))) goto oom;
  }
  json_object_foreach((json_t *)extra, name, val) {
    if (!valid_env_name(name) || !json_is_string(val) || !strcmp(name, "SPOTLAB_CHECKPOINT_DIR")) goto bad;
    if (!(v[n] = malloc(strlen(name) + json_string_length(val) + 2))) goto oom;
    sprintf(v[n++], "%s=%s", name, json_string_value(val));
  }
  if (!(v[n++] = strdup(files))) goto oom;
  *ret = v;
  return 0;
bad:
  snprintf(err, err_size, "assign \"env\" must map at most %d names to strings", ASSIGN_ENV_MAX);
  wk_argv_free(v);
  return SL_ECONFIG;
oom:
  wk_argv_free(v);
  return -ENOMEM;
}

static int prepare_dirs(struct wk_job *j, char *err, size_t err_size) {
  snprintf(j->dir, sizeof j->dir, "%s/jobs/%s", j->env->cfg->work_dir, j->id);
  snprintf(j->ckpt_dir, sizeof j->ckpt_dir, "%s/%s", j->dir,
           j->kind == WK_KIND_RUN ? "files" : "ckpt");
  int r = sl_mkdir_p(j->ckpt_dir, 0700);
  if (r < 0) {
    snprintf(err, err_size, "%s: %s", j->ckpt_dir, sl_strerror(r));
    return r;
  }
  clear_dir(j->ckpt_dir); /* a new attempt starts from the store, never from leftovers */
  return 0;
}

static int restore(struct wk_job *j, const char *key, char *err, size_t err_size) {
  if (j->kind != WK_KIND_RUN) return key ? wk_job_restore_ckpt(j, key, err, err_size) : 0;
  char prefix[64];
  snprintf(prefix, sizeof prefix, "%s/files/", j->id);
  int r = wk_filesync_new(j->env->store, j->ckpt_dir, prefix, &j->files);
  if (r >= 0) r = wk_filesync_restore(j->files);
  if (r < 0) snprintf(err, err_size, "restore %s: %s", prefix, sl_strerror(r));
  else if (r > 0) sl_info("worker.store", "%s: restored %d files", j->id, r);
  return r < 0 ? r : 0;
}

static int spawn(struct wk_job *j, const json_t *assign, char *err, size_t err_size) {
  const json_t *restore_key = json_object_get(assign, "restore");
  struct wk_spec_paths p = {
    .train = j->env->train, .ckpt_dir = j->ckpt_dir, .metrics_fd = WK_CHILD_METRICS_FD,
    .control_fd = WK_CHILD_CONTROL_FD, .resume = json_is_string(restore_key),
    .run_id = j->kind == WK_KIND_TRAIN ? j->id : NULL, /* every attempt is the same run */
    .checkpoint_every = json_is_integer(json_object_get(assign, "checkpoint_every"))
                            ? json_integer_value(json_object_get(assign, "checkpoint_every")) : 0,
    .gpus = j->env->gpus, .instance_type = j->env->cfg->type, .train_cuda = j->env->train_cuda,
    .rank = j->gang.rank, .world_size = j->gang.world_size, .rendezvous = j->gang.rendezvous,
  };
  char **argv = NULL, **envp = NULL;
  const json_t *spec = json_object_get(assign, "spec");
  int r = wk_spec_device(j->kind, spec, &p, &j->device, err, err_size);
  if (r < 0 || (r = wk_spec_build_argv(j->kind, spec, &p, &argv, err, err_size)) < 0) return r;
  if ((r = build_env(j, json_object_get(assign, "env"), &envp, err, err_size)) < 0) goto out;
  struct wk_child_opts o = {.argv = argv, .envp = envp, .cwd = j->dir,
                            .metrics = j->kind != WK_KIND_RUN, .control = j->kind == WK_KIND_TRAIN};
  j->spawned_us = sl_time_mono_us();
  if ((r = wk_child_spawn(&o, &j->child)) < 0) snprintf(err, err_size, "start: %s", sl_strerror(r));
  else sl_info(TOPIC, "%s: started %s (pid %d)", j->id, wk_spec_kind_name(j->kind), (int)wk_child_pid(j->child));
out:
  wk_argv_free(argv);
  wk_argv_free(envp);
  return r;
}

/* The job's device event (a metric event; the display shows it): on the
 * CPU the worker's own, {"device":"cpu","threads","precision",
 * "world_size":1}, since spotlab-train reports no device there; on GPUs
 * spotlab-train's (its "device" names the GPU, rank and precision, with
 * "world_size"), to which the worker adds what NVML said: "gpus",
 * "gpu_model", "memory_mib" (per GPU) and "precision". One per attempt:
 * the first wins (each rank of a multi-GPU run may report). Takes ev. */
static void send_device(struct wk_job *j, json_t *ev) {
  if (j->device_sent) {
    json_decref(ev);
    return;
  }
  const struct wk_device *d = &j->device;
  if (!ev) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    ev = json_pack("{s:s, s:s, s:I, s:i}", "event", "device", "device", "cpu", "threads",
                   (json_int_t)(d->threads > 0 ? d->threads : ncpu > 0 ? ncpu : 1), "world_size", 1);
    /* GPUs the instance has (and is billed for) that spotlab-train cannot use */
    const struct wk_gpu_inventory *g = j->env->gpus;
    if (ev && g && g->count > 0 && g->unusable[0]) {
      json_object_set_new(ev, "gpus_unused", json_integer(g->count));
      json_object_set_new(ev, "gpu_model", json_string(g->model));
      json_object_set_new(ev, "gpus_unusable", json_string(g->unusable));
    }
  } else if (d->cuda && j->env->gpus) {
    json_object_set_new(ev, "gpus", json_integer(d->gpus));
    json_object_set_new(ev, "gpu_model", json_string(j->env->gpus->model));
    json_object_set_new(ev, "memory_mib", json_integer(j->env->gpus->memory_mib));
  }
  if (!ev) return;
  json_object_set_new(ev, "precision", json_string(d->bf16 ? "bf16" : "fp32"));
  j->device_sent = true;
  json_t *m = wk_job_msg_new(j, "metric");
  if (m) json_object_set_new(m, "data", ev);
  else json_decref(ev);
  wk_job_send(j, m, true);
}

/* nodes=N: this job is one rank of a data-parallel run; rank 0 makes the
 * rendezvous (a free port on the address the other instances reach). */
static int join_gang(struct wk_job *j, const json_t *field, char *err, size_t err_size) {
  int r = wk_gang_parse(field, &j->gang, err, err_size);
  if (r < 0 || !j->gang.world_size)
    return r;
  if (j->kind != WK_KIND_TRAIN) {
    snprintf(err, err_size, "a gang (nodes=N) runs train jobs only");
    return SL_ECONFIG;
  }
  if (j->gang.rank > 0)
    return 0;
  char host[128];
  if ((r = wk_gang_host(j->env->cfg->address, j->env->cfg->gateway, host, sizeof host)) < 0) {
    snprintf(err, err_size, "\"address\": %s", sl_strerror(r));
    return r;
  }
  if ((r = wk_gang_rendezvous(&j->gang, host, err, err_size)) < 0)
    return r;
  sl_info(TOPIC, "%s: rank 0 of %d; rendezvous %s", j->id, j->gang.world_size, j->gang.rendezvous);
  return 0;
}

/* What the run record holds of this attempt, added to the started message:
 * this worker's and spotlab-train's build ids and the data file's SHA-256,
 * or a data set folder's id (a relative path is the child's, under the
 * job's folder). A rerun's spec
 * names the hash the data had ("expect_data_sha256"): another one refuses
 * the run, so that a rerun never trains on other data unnoticed. */
static int identify(const struct wk_job *j, const json_t *spec, json_t *started, char *err,
                    size_t err_size) {
  char id[SL_BUILD_ID_HEX_MAX + 1], hex[SL_SHA256_HEX_LEN + 1], path[PATH_MAX];
  if (sl_build_id("/proc/self/exe", id, sizeof id) == 0)
    json_object_set_new(started, "build_id", json_string(id));
  if (j->kind != WK_KIND_RUN && j->env->train && sl_build_id(j->env->train, id, sizeof id) == 0)
    json_object_set_new(started, "train_build_id", json_string(id));
  const char *data = j->kind == WK_KIND_TRAIN || j->kind == WK_KIND_EVAL ? wk_spec_data_path(spec) : NULL;
  const char *want = json_string_value(json_object_get(spec, "expect_data_sha256"));
  if (!data) return 0;
  if (data[0] == '/') snprintf(path, sizeof path, "%s", data);
  else snprintf(path, sizeof path, "%s/%s", j->dir, data);
  json_object_set_new(started, "data_path", json_string(path));
  /* a copy of an uploaded file was checked against its hash when it was
   * fetched (job_data.c): not read again for it */
  const char *fetched = json_string_value(json_object_get(json_object_get(spec, "data_upload"), "sha256"));
  int r = 0;
  if (fetched) snprintf(hex, sizeof hex, "%s", fetched);
  else r = sl_sha256_file(path, 0, hex);
  if (r == -EISDIR) /* a data set folder: the id of the files the job reads (sl_ident.h) */
    r = sl_sha256_image_set(path, j->kind == WK_KIND_TRAIN ? SL_IMAGE_SET_FILES : SL_IMAGE_SET_EVAL_FILES, hex);
  if (r == 0) json_object_set_new(started, "data_sha256", json_string(hex));
  if (want && r < 0) {
    snprintf(err, err_size, "the data file %s cannot be read to check it is the one the original run read: %s",
             path, sl_strerror(r));
    return r;
  }
  if (want && strcmp(want, hex)) {
    snprintf(err, err_size, "the data file %s changed since the original run (sha256 %.12s… then, %.12s… now); "
             "rerun with force to run on it anyway", path, want, hex);
    return SL_ECHECKSUM;
  }
  return 0;
}

int wk_job_start(const struct wk_job_env *env, const json_t *assign, struct wk_job **ret,
                 char *err, size_t err_size) {
  const char *id = json_string_value(json_object_get(assign, "job"));
  const json_t *rk = json_object_get(assign, "restore");
  enum wk_kind kind;
  if (check_job_id(id) < 0) return snprintf(err, err_size, "assign has no valid \"job\""), SL_ENAME;
  if (wk_spec_kind(json_string_value(json_object_get(assign, "kind")), &kind) < 0)
    return snprintf(err, err_size, "assign \"kind\" must be train, eval, sample or run"), SL_ENAME;
  if (rk && !json_is_null(rk) && !json_is_string(rk))
    return snprintf(err, err_size, "assign \"restore\" must be a key or null"), SL_ETYPE;
  struct wk_job *j = calloc(1, sizeof *j);
  if (!j) return -ENOMEM;
  j->env = env;
  snprintf(j->id, sizeof j->id, "%s", id);
  j->attempt = sl_json_get_int(assign, "attempt", 1);
  j->keep = sl_json_get_int(assign, "keep", 0);
  j->recorded_step = j->reported_step = -1;
  if (j->keep < 0) j->keep = 0;
  j->kind = kind;
  j->durable_step = -1;
  j->assigned_us = sl_time_mono_us();
  int r = wk_relay_new(env->cfg->metrics_per_s, env->cfg->output_lines_per_s, &j->relay);
  if (r >= 0)
    r = join_gang(j, json_object_get(assign, "gang"), err, err_size);
  /* spotlab-train's rank 0 alone reads checkpoints: the other ranks resume
   * from what it broadcasts, so they download nothing */
  const char *key = j->gang.rank > 0 ? NULL : json_string_value(rk);
  json_t *started = wk_job_msg_new(j, "started"), *local = NULL;
  if (r >= 0 && !started) r = -ENOMEM;
  if (r < 0 || (r = prepare_dirs(j, err, err_size)) < 0 ||
      (r = wk_job_fetch_data(j, assign, &local, err, err_size)) < 0 ||
      (r = identify(j, json_object_get(local ? local : assign, "spec"), started, err, err_size)) < 0 ||
      (r = restore(j, key, err, err_size)) < 0 || (r = spawn(j, local ? local : assign, err, err_size)) < 0) {
    json_decref(local);
    json_decref(started);
    wk_job_free(j);
    return r;
  }
  json_decref(local);
  if (j->restored_key[0]) { /* not the assign's checkpoint: the gateway says which, and why */
    json_object_set_new(started, "restored_key", json_string(j->restored_key));
    json_object_set_new(started, "restored_step", json_integer(j->step));
    json_object_set_new(started, "passed_over", wk_relay_text(j->passed_over, strlen(j->passed_over), 600));
  }
  j->next_sync_us = sl_time_mono_us() + env->cfg->run_sync_ms * SL_US_PER_MS;
  /* the job runs from here on: the gateway moves it to running (a %%run job
   * sends no metric that could say so); rank 0 of a gang names where its
   * spotlab-train listens, so that the gateway can start the other ranks */
  if (j->gang.world_size) {
    json_object_set_new(started, "rank", json_integer(j->gang.rank));
    json_object_set_new(started, "rendezvous", json_string(j->gang.rendezvous));
  }
  wk_job_send(j, started, true);
  if (j->kind != WK_KIND_RUN && !j->device.cuda) send_device(j, NULL);
  *ret = j;
  return 0;
}

void wk_job_remove_folder(struct wk_job *j) {
  int r = sl_file_remove_tree(j->dir);
  if (r < 0)
    sl_warn(TOPIC, "%s: cannot remove all of %s: %s", j->id, j->dir, sl_strerror(r));
}

struct wk_job *wk_job_free(struct wk_job *j) {
  if (!j) return NULL;
  wk_child_free(j->child);
  wk_relay_free(j->relay);
  for (size_t i = 0; i < HELD_LINES; i++)
    free(j->held[i].text);
  for (size_t i = 0; i < OUTPUT_TAIL; i++)
    json_decref(j->output_tail[i]);
  wk_filesync_free(j->files);
  wk_reserve_done(&j->reserve, j->env->signer);
  free(j->result_text);
  json_decref(j->last_ckpt);
  json_decref(j->done);
  free(j);
  return NULL;
}

/* ---- what the child says ---- */

/* The first step metric after a restore says how long the restore took on
 * this worker (protocols.md §2): the download, spotlab-train's start up to
 * its resume event, and everything from the assign to this step. */
static void add_restore_timing(struct wk_job *j, json_t *data) {
  if (!j->restore_pending || json_object_get(data, "event") || !json_is_number(json_object_get(data, "loss")))
    return;
  j->restore_pending = false;
  json_object_set_new(data, "restore_fetch_ms", json_integer(j->fetch_ms));
  if (j->load_ms >= 0) json_object_set_new(data, "restore_load_ms", json_integer(j->load_ms));
  json_object_set_new(data, "restore_ms", json_integer((sl_time_mono_us() - j->assigned_us) / 1000));
}

/* The newest GPU sample rides on the next step metric. */
static void add_gpu_usage(struct wk_job *j, json_t *data) {
  if (!j->usage_pending || json_object_get(data, "event") || !json_is_number(json_object_get(data, "loss")))
    return;
  j->usage_pending = false;
  json_object_set_new(data, "gpu_util_pct", sl_json_real(j->usage.util_pct));
  json_object_set_new(data, "gpu_mem_used_mib", json_integer(j->usage.mem_used_mib));
  json_object_set_new(data, "gpu_mem_total_mib", json_integer(j->usage.mem_total_mib));
}

void wk_job_send_metric(struct wk_job *j, json_t *data) {
  if (!data) return;
  add_restore_timing(j, data);
  add_gpu_usage(j, data);
  wk_relay_sent(j->relay, data);
  json_t *m = wk_job_msg_new(j, "metric");
  if (m) json_object_set_new(m, "data", data);
  else json_decref(data);
  wk_job_send(j, m, false);
}

static void on_metrics_line(struct wk_job *j, const char *line, size_t len) {
  json_t *obj = NULL;
  if (sl_json_parse(line, len, 8, &obj, NULL, 0) < 0 || !json_is_object(obj)) {
    json_decref(obj);
    sl_debug(TOPIC, "%s: metrics line is not a JSON object", j->id);
    return;
  }
  const char *event = sl_json_get_str(obj, "event", NULL);
  int64_t now = sl_time_mono_us();
  if (event && !strcmp(event, "checkpoint")) {
    wk_job_upload_checkpoint(j, obj);
    json_decref(obj);
    return;
  }
  if (event && !strcmp(event, "terminated"))
    j->core_terminated = true;
  if (event && !strcmp(event, "done"))
    j->core_done = true;
  if (event && !strcmp(event, "device")) {
    send_device(j, obj);
    return;
  }
  if (event && !strcmp(event, "resume") && j->restore_pending && j->load_ms < 0)
    j->load_ms = (now - j->spawned_us) / 1000;
  if (event && !strcmp(event, "error") && !strcmp(sl_json_get_str(obj, "op", ""), "checkpoint"))
    wk_job_report_lost_checkpoint(j, sl_json_get_int(obj, "step", -1), "written",
                           sl_json_get_str(obj, "error", "unknown error"));
  if (event && !strcmp(event, "eval") && json_is_number(json_object_get(obj, "eval_loss"))) {
    j->have_eval = true;
    j->eval_loss = json_number_value(json_object_get(obj, "eval_loss"));
  }
  if (!event && json_is_integer(json_object_get(obj, "step")))
    j->step = json_integer_value(json_object_get(obj, "step"));
  bool urgent = event || json_object_get(obj, "eval_loss");
  wk_job_send_metric(j, wk_relay_metric(j->relay, obj, urgent, now));
}

static void on_line(void *ctx, enum wk_stream s, const char *line, size_t len, bool truncated) {
  struct wk_job *j = ctx;
  if (s == WK_STREAM_METRICS) {
    if (!truncated) on_metrics_line(j, line, len);
    return;
  }
  wk_job_output_line(j, s, line, len, truncated);
}

static bool agent_held(void *ctx) {
  const struct wk_job *j = ctx;
  return j->env->held && j->env->held(j->env->ctx);
}

void wk_job_readable(struct wk_job *j, enum wk_stream s) {
  if (j->child) wk_child_read(j->child, s, on_line, j, agent_held);
}

/* ---- ending ---- */

static void send_result(struct wk_job *j) {
  if (j->kind == WK_KIND_EVAL && j->have_eval) {
    json_t *m = wk_job_msg_new(j, "result");
    json_object_set_new(m, "eval_loss", sl_json_real(j->eval_loss));
    wk_job_send(j, m, true);
  } else if (j->kind == WK_KIND_SAMPLE) {
    json_t *m = wk_job_msg_new(j, "result");
    json_object_set_new(m, "text", wk_relay_text(j->result_text ? j->result_text : "", j->result_len,
                                                 RESULT_TEXT_MAX));
    wk_job_send(j, m, true);
  }
}

static const char *final_status(struct wk_job *j, int st, char *msg, size_t size) {
  bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
  if (j->cancelled) return "cancelled";
  if (j->noticed && j->terminated) return "preempted";
  /* a SIGTERM from elsewhere (to another rank of a gang, which stops every
   * rank): the run stopped short, at a durable checkpoint */
  if (ok && j->core_terminated && j->kind == WK_KIND_TRAIN) {
    snprintf(msg, size, "spotlab-train stopped at step %lld before the end of the run",
             (long long)j->step);
    return "preempted";
  }
  /* A train run is the model it leaves: its last step must be in the store
   * (rank 0's, in a gang: the other ranks write no checkpoint). spotlab-train
   * that trained to the end but could not write its final checkpoint exits 1. */
  bool trained = ok || (j->core_done && WIFEXITED(st) && WEXITSTATUS(st) == 1);
  if (trained && j->kind == WK_KIND_TRAIN && j->gang.rank == 0 && j->durable_step < j->step) {
    char newest[48] = "none";
    if (j->durable_step >= 0) snprintf(newest, sizeof newest, "step %lld", (long long)j->durable_step);
    snprintf(msg, size, "the final checkpoint (step %lld) is %s; the newest durable checkpoint: %s",
             (long long)j->step, j->lost_why[0] ? j->lost_why : "not durable", newest);
    return "failed";
  }
  if (ok) return "succeeded";
  if (WIFSIGNALED(st)) snprintf(msg, size, "killed by signal %d", WTERMSIG(st));
  else snprintf(msg, size, "exit status %d", WEXITSTATUS(st));
  if (j->tail_len) {
    size_t n = strlen(msg);
    snprintf(msg + n, size - n, ": %.*s", (int)j->tail_len, j->tail);
  }
  return "failed";
}

static void finish(struct wk_job *j) {
  /* what the job started in the background ends with it (before its folder's
   * last upload): the next job on this worker must not meet it */
  wk_child_end_group(j->child);
  wk_job_send_metric(j, wk_relay_pending(j->relay, 0, true));
  wk_job_flush_dropped(j, true);
  if (j->files) {
    uint64_t bytes = 0;
    int r = wk_filesync_sync(j->files, &bytes);
    if (r < 0) sl_warn("worker.store", "%s: final folder upload: %s", j->id, sl_strerror(r));
  }
  int st = j->exit_status;
  char message[STDERR_TAIL + 64] = "";
  const char *status = final_status(j, st, message, sizeof message);
  if (!strcmp(status, "succeeded")) send_result(j);
  json_t *m = wk_job_msg_new(j, "done");
  json_object_set_new(m, "status", json_string(status));
  json_object_set_new(m, "exit_code", json_integer(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st)));
  json_object_set_new(m, "message", wk_relay_text(message, strlen(message), sizeof message));
  int64_t step = !strcmp(status, "preempted") || !strcmp(status, "cancelled") ? j->durable_step : wk_job_step(j);
  json_object_set_new(m, "step", step >= 0 ? json_integer(step) : json_null());
  /* what the gateway must hold before it records the end */
  int64_t metric_step = wk_relay_last_step(j->relay);
  if (metric_step >= 0) json_object_set_new(m, "metric_step", json_integer(metric_step));
  if (j->last_ckpt) json_object_set(m, "checkpoint", j->last_ckpt);
  json_t *tail = wk_job_output_tail(j);
  if (tail) json_object_set_new(m, "output_tail", tail);
  sl_info(TOPIC, "%s: %s (step %lld)", j->id, status, (long long)step);
  j->done = json_incref(m);
  j->done_sent_us = sl_time_mono_us();
  wk_job_send(j, m, true);
  j->state = ENDED;
}

void wk_job_send_done(struct wk_job *j) {
  if (j->state != ENDED || !j->done) return;
  j->done_sent_us = sl_time_mono_us();
  wk_job_send(j, json_incref(j->done), true);
}

bool wk_job_done_recorded(const struct wk_job *j, int64_t attempt) {
  return j->state == ENDED && attempt == j->attempt;
}

static void sync_files(struct wk_job *j, int64_t now) {
  uint64_t bytes = 0;
  int r = wk_filesync_sync(j->files, &bytes);
  if (r < 0) sl_warn("worker.store", "%s: folder upload: %s", j->id, sl_strerror(r));
  else if (r > 0) sl_debug("worker.store", "%s: %d objects synced (%llu bytes)", j->id, r, (unsigned long long)bytes);
  j->next_sync_us = now + j->env->cfg->run_sync_ms * SL_US_PER_MS;
}

void wk_job_terminate(struct wk_job *j, int64_t kill_at) {
  if (j->state == STOPPING) {
    if (kill_at < j->kill_at_us) j->kill_at_us = kill_at;
    return;
  }
  wk_child_signal(j->child, SIGTERM);
  j->terminated = true;
  j->state = STOPPING;
  j->kill_at_us = kill_at;
}

/* A train job that ended by itself holds its done a moment for the
 * gateway's word on its last checkpoint (checkpoint_recorded): on that word
 * it deletes the checkpoints [store] keep no longer wants, with URLs the
 * gateway signs only while the job runs on this instance. Its last
 * checkpoints come in quick succession, and a done ahead of their words
 * would leave them in the store for good. LAST_ACK_WAIT_US at most: a
 * gateway that cannot save (its writes kept) answers only later. */
static bool awaiting_last_ack(const struct wk_job *j, int64_t now) {
  return j->kind == WK_KIND_TRAIN && j->gang.rank == 0 && j->keep > 0 && !j->terminated &&
         !j->cancelled && j->reported_step > j->recorded_step &&
         now - j->exited_at_us < LAST_ACK_WAIT_US;
}

int wk_job_tick(struct wk_job *j, int64_t now, bool may_end) {
  if (j->state == ENDED) {
    if (may_end && now - j->done_sent_us >= DONE_RESEND_US) wk_job_send_done(j);
    return 0;
  }
  wk_job_send_metric(j, wk_relay_pending(j->relay, now, false));
  if (j->files && now >= j->next_sync_us) sync_files(j, now);
  if (j->state == NOTICE_WAIT && now >= j->wait_until_us) {
    sl_warn(TOPIC, "%s: no durable checkpoint before the notice margin; stopping", j->id);
    wk_job_terminate(j, j->kill_at_us);
  }
  if (j->state == STOPPING && now >= j->kill_at_us) {
    wk_child_signal(j->child, SIGKILL);
    j->kill_at_us = INT64_MAX;
  }
  int st;
  if (!j->exited_at_us && wk_child_reap(j->child, &st) == 1) {
    j->exit_status = st;
    j->exited_at_us = now;
  }
  /* A child that exited but left a descendant holding its pipes gets a second. */
  if (may_end && j->exited_at_us && !j->metrics_held &&
      (wk_child_drained(j->child) || now - j->exited_at_us > SL_US_PER_S) && !awaiting_last_ack(j, now)) {
    finish(j);
    return 1;
  }
  return 0;
}

void wk_job_cancel(struct wk_job *j) { wk_job_stop(j, j->env->cfg->kill_grace_ms); }

void wk_job_stop(struct wk_job *j, int64_t grace_ms) {
  if (j->state == ENDED) return;
  j->cancelled = true;
  wk_job_terminate(j, sl_time_mono_us() + grace_ms * SL_US_PER_MS);
}

void wk_job_checkpoint_now(struct wk_job *j) {
  if (j->state == ENDED) return;
  /* a gang's rank above 0 reads no command: the gateway asks rank 0's worker */
  if (j->kind == WK_KIND_TRAIN && j->gang.rank > 0) return;
  if (j->kind == WK_KIND_TRAIN) {
    int r = wk_child_control(j->child, "checkpoint");
    if (r < 0) sl_warn(TOPIC, "%s: checkpoint request: %s", j->id, sl_strerror(r));
  } else if (j->files) {
    sync_files(j, sl_time_mono_us());
  }
}

void wk_job_set_checkpoint_every(struct wk_job *j, int64_t steps) {
  /* a stopping process takes no new interval (its control pipe may be closed) */
  if (j->state == ENDED || j->state == STOPPING || j->kind != WK_KIND_TRAIN || steps < 0) return;
  char line[64];
  snprintf(line, sizeof line, "checkpoint_every %lld", (long long)steps);
  int r = wk_child_control(j->child, line);
  if (r == -EPIPE) /* it has exited; its end is on the way */
    sl_debug(TOPIC, "%s: checkpoint interval not sent: the process has ended", j->id);
  else if (r < 0)
    sl_warn(TOPIC, "%s: checkpoint interval: %s", j->id, sl_strerror(r));
}

void wk_job_resend_checkpoint(struct wk_job *j, int64_t step) {
  int64_t mine = j->last_ckpt ? sl_json_get_int(j->last_ckpt, "step", -1) : -1;
  if (mine <= step || j->gang.rank > 0) return;
  json_t *m = wk_job_msg_new(j, "checkpoint");
  const char *k;
  json_t *v;
  json_object_foreach(j->last_ckpt, k, v) json_object_set(m, k, v);
  sl_info(TOPIC, "%s: checkpoint of step %lld reported again (the gateway has step %lld)", j->id,
          (long long)mine, (long long)step);
  wk_job_send(j, m, true);
}

size_t wk_job_resend_metrics(struct wk_job *j, int64_t step) {
  wk_relay_confirm(j->relay, step);
  json_t *data[256];
  size_t total = 0, n;
  do { /* in slices: the ring may hold more than WK_RELAY_RESEND_MAX */
    n = wk_relay_since(j->relay, step, data, sizeof data / sizeof *data);
    for (size_t i = 0; i < n; i++) {
      step = json_integer_value(json_object_get(data[i], "step"));
      json_t *m = wk_job_msg_new(j, "metric");
      if (m) json_object_set_new(m, "data", data[i]);
      else json_decref(data[i]);
      wk_job_send(j, m, false);
    }
    total += n;
  } while (n == sizeof data / sizeof *data);
  return total;
}

bool wk_job_gpus(const struct wk_job *j, unsigned *ret_n) {
  if (j->state == ENDED || j->kind == WK_KIND_RUN || !j->device.cuda || j->device.gpus < 1) return false;
  *ret_n = (unsigned)j->device.gpus;
  return true;
}

void wk_job_gpu_usage(struct wk_job *j, const struct wk_gpu_usage *u) {
  j->usage = *u;
  j->usage_pending = true;
}

void wk_job_utilisation(struct wk_job *j, int64_t now_mono_us, json_t *entry) {
  double u;
  pid_t pid = j->child && j->state != ENDED ? wk_child_pid(j->child) : 0;
  if (pid > 0 && wk_cpu_meter_sample(&j->cpu, "/proc", pid, now_mono_us,
                                     (int)sysconf(_SC_NPROCESSORS_ONLN), &u) == 0)
    json_object_set_new(entry, "cpu_util", sl_json_real(u));
  if (j->usage.n > 0 && j->usage.util_pct >= 0 && j->usage.util_pct <= 100)
    json_object_set_new(entry, "gpu_util", sl_json_real(j->usage.util_pct / 100));
}

void wk_job_keep_reserve(struct wk_job *j, int64_t now, bool may_ask) {
  if (!j->env->signer || j->kind != WK_KIND_TRAIN || j->gang.rank > 0 || j->state == ENDED) return;
  char err[512] = "";
  int r;
  if (j->reserve.asked) { /* an answer is taken in any state: an orphan may need it */
    if ((r = wk_reserve_take(&j->reserve, j->env->signer, err, sizeof err)) == 0) return;
  } else {
    if (!may_ask || j->state != RUNNING || now < j->next_reserve_us) return;
    if ((r = wk_reserve_ask(&j->reserve, j->env->signer, j->id, err, sizeof err)) == 0) return;
  }
  j->next_reserve_us = now + (r < 0 ? WK_RESERVE_RETRY_US : WK_RESERVE_REFRESH_US);
  if (r < 0)
    sl_warn("worker.store", "%s: orphan checkpoint URLs not renewed (%s)%s", j->id, err,
            wk_reserve_ready(&j->reserve) ? "; the previous ones stay" : "");
  else
    sl_debug("worker.store", "%s: orphan checkpoint URLs renewed", j->id);
}

void wk_job_notice(struct wk_job *j, int64_t deadline, bool orphan) {
  if (j->state == ENDED || j->noticed) return;
  j->noticed = true;
  j->orphaned = orphan;
  int64_t now = sl_time_mono_us(), left = deadline - now;
  int64_t margin = j->env->cfg->notice_margin_ms * SL_US_PER_MS;
  if (margin > left / 4) margin = left > 0 ? left / 4 : 0;
  j->kill_at_us = deadline - margin / 2;
  if (j->state == STOPPING) return;
  /* a gang's rank above 0 writes no checkpoint: its SIGTERM stops every rank,
   * and rank 0 writes the checkpoint of the step they reached */
  if (j->kind == WK_KIND_TRAIN && j->gang.rank == 0 && j->durable_step < j->step &&
      wk_child_control(j->child, "checkpoint") == 0) {
    j->notice_step = j->step;
    j->wait_until_us = deadline - margin;
    j->state = NOTICE_WAIT;
    return;
  }
  if (j->files) sync_files(j, now);
  wk_job_terminate(j, j->kill_at_us);
}
