/* A job's checkpoints (job_int.h): restoring the one the assign names (and
 * an orphaned attempt's newer one), uploading each one spotlab-train
 * writes and reporting it, pruning the old ones once the gateway saved a
 * newer resume point, and the orphan copy a worker that lost its gateway
 * saves through the URLs signed ahead. */
#include "job_int.h"

#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_run.h"
#include "sl_time.h"
#include "store.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* An orphaned worker's checkpoint newer than the restored one (step) goes
 * beside it: spotlab-train --resume takes the newest that is valid, so a
 * partial or corrupt one falls back to the regular checkpoint. A missing
 * orphan is the usual case; one that cannot be read only costs its steps. */
static void restore_orphan(struct wk_job *j, int64_t step) {
  char tmp[PATH_MAX + 32], dst[PATH_MAX + 32];
  snprintf(tmp, sizeof tmp, "%s/.orphan-step", j->dir);
  int64_t orphan = -1;
  int r = wk_orphan_step(j->env->store, j->id, tmp, &orphan);
  if (r == -ENOENT) return;
  j->orphan_left = true;
  if (r < 0) {
    sl_warn("worker.store", "%s: the orphan checkpoint's step is unreadable (%s); resuming from step %lld",
            j->id, sl_strerror(r), (long long)step);
    return;
  }
  if (orphan <= step) return;
  snprintf(dst, sizeof dst, "%s/ckpt-%010lld.slck", j->ckpt_dir, (long long)orphan);
  uint64_t bytes = 0;
  if ((r = wk_orphan_fetch(j->env->store, j->id, dst, &bytes)) < 0) {
    sl_warn("worker.store", "%s: the orphan checkpoint of step %lld is not readable (%s); resuming from step %lld",
            j->id, (long long)orphan, sl_strerror(r), (long long)step);
    return;
  }
  sl_info("worker.store", "%s: restored the orphan checkpoint of step %lld too (%llu bytes)", j->id,
          (long long)orphan, (unsigned long long)bytes);
}

static int cmp_keys(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A line on the job's stderr, from the worker. */
static void tell_stderr(struct wk_job *j, const char *text) {
  json_t *m = wk_job_msg_new(j, "output");
  json_object_set_new(m, "stream", json_string("stderr"));
  json_object_set_new(m, "text", wk_relay_text(text, strlen(text), WK_OUTPUT_LINE_MAX));
  wk_job_send(j, m, true);
}

/* The step of a checkpoint key ("J000003/ckpt-00000400.tc"), or -1. */
static int64_t key_step(const char *key) {
  const char *base = strrchr(key, '/');
  base = base ? base + 1 : key;
  unsigned long long step;
  int used = 0;
  if (sscanf(base, "ckpt-%llu.tc%n", &step, &used) != 1 || base[used] || step > 99999999) return -1;
  return (int64_t)step;
}

#define CHECK_TIMEOUT_MS 300000 /* reading back the largest checkpoint */

struct ckpt_check {
  const char *train, *path;
  char out[512];
};

/* spotlab-train --check on a downloaded checkpoint (a store call, so the
 * worker's heartbeats go on): 0 when valid, SL_EFORMAT with its reason in
 * out when not. A check that cannot run, or is killed before its verdict
 * (a signal: it said nothing of the checkpoint), counts as passed:
 * spotlab-train itself decides then, as before. */
static int check_ckpt(void *arg) {
  struct ckpt_check *c = arg;
  char *argv[] = {(char *)c->train, "--check", (char *)c->path, NULL};
  int status = 0;
  int r = sl_run_capture(argv, CHECK_TIMEOUT_MS, c->out, sizeof c->out, &status);
  if (r < 0) {
    sl_warn("worker.store", "cannot check %s (%s): %s", c->path, c->train, sl_strerror(r));
    return 0;
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  if (WIFSIGNALED(status)) {
    sl_warn("worker.store", "the check of %s ended by signal %d; the checkpoint is taken as it is",
            c->path, WTERMSIG(status));
    return 0;
  }
  c->out[strcspn(c->out, "\n")] = 0;
  if (!c->out[0]) snprintf(c->out, sizeof c->out, "not a valid checkpoint");
  return SL_EFORMAT;
}

/* Downloads key (of step) into the folder under the name spotlab-train
 * looks for (ckpt-<10 digits>.slck) and checks it: 0, or negative with the
 * reason in why (a download that fails, or a checkpoint that is not valid:
 * then removed). */
static int fetch_checked(struct wk_job *j, const char *key, int64_t step, uint64_t *bytes, char *why,
                         size_t why_size) {
  char dst[PATH_MAX + 32];
  snprintf(dst, sizeof dst, "%s/ckpt-%010lld.slck", j->ckpt_dir, (long long)step);
  int r = wk_store_get_file(j->env->store, key, dst, bytes);
  if (r < 0) {
    const char *e = wk_store_error(j->env->store);
    snprintf(why, why_size, "%s", e[0] ? e : sl_strerror(r));
    return r;
  }
  struct ckpt_check c = {.train = j->env->train, .path = dst};
  if (!c.train || !c.train[0] || (r = wk_store_run(j->env->store, check_ckpt, &c)) == 0) return 0;
  const char *reason = strstr(c.out, dst) == c.out ? c.out + strlen(dst) : c.out; /* "PATH: why" */
  reason += strspn(reason, ": ");
  snprintf(why, why_size, "%s", *reason ? reason : c.out);
  unlink(dst);
  return r;
}

/* Whether a restore that failed this way may fall back to an older
 * checkpoint: the object is gone, or its bytes are not a checkpoint. A
 * store that does not answer is not a reason to lose steps. */
static bool unusable(int r) { return r == -ENOENT || r == SL_ECHECKSUM || r == SL_EFORMAT; }

/* The restore key failed (why): the newest older checkpoint of the same
 * run that is valid, its key into used (*ret_step its step). The user is
 * told of each one passed over. */
static int fall_back(struct wk_job *j, const char *key, int64_t step, char *used, size_t used_size,
                     int64_t *ret_step, uint64_t *bytes, char *err, size_t err_size) {
  bool tried = false;
  char prefix[128];
  const char *base = strrchr(key, '/');
  snprintf(prefix, sizeof prefix, "%.*sckpt-", base ? (int)(base - key + 1) : 0, key);
  char **keys = NULL;
  size_t n = 0, said = strlen(err);
  int r = wk_store_list(j->env->store, prefix, &keys, &n);
  if (r == -ENOENT) /* a store that names nothing under the prefix */
    r = 0, n = 0;
  if (r < 0) {
    snprintf(err + said, err_size - said, "; the older ones cannot be listed: %s", sl_strerror(r));
    return r;
  }
  if (n) qsort(keys, n, sizeof *keys, cmp_keys);
  r = -ENOENT;
  for (size_t i = n; i-- > 0;) {
    int64_t s = key_step(keys[i]);
    if (s < 0 || s >= step) continue;
    char why[512];
    tried = true;
    r = fetch_checked(j, keys[i], s, bytes, why, sizeof why);
    if (r == 0) {
      snprintf(used, used_size, "%s", keys[i]);
      *ret_step = s;
      break;
    }
    said = strlen(err);
    snprintf(err + said, err_size - said, "; %s: %s", keys[i], why);
    if (!unusable(r)) break;
  }
  wk_store_keys_free(keys);
  if (!tried) {
    said = strlen(err);
    snprintf(err + said, err_size - said, "; no older checkpoint of that run");
  }
  return r;
}

/* Restores the checkpoint key into the job's folder; when it is gone or
 * not valid, the newest valid one of the same run before it, and says so
 * on the job's stderr (steps since then are lost). The step comes from the
 * key's name. */
int wk_job_restore_ckpt(struct wk_job *j, const char *key, char *err, size_t err_size) {
  int64_t step = key_step(key);
  if (step < 0) {
    snprintf(err, err_size, "restore key \"%s\" is not a ckpt-STEP.tc key", key);
    return SL_ENAME;
  }
  uint64_t bytes = 0;
  int64_t t0 = sl_time_mono_us();
  char why[512], used[256];
  snprintf(used, sizeof used, "%s", key);
  int r = fetch_checked(j, key, step, &bytes, why, sizeof why);
  if (r < 0) {
    snprintf(err, err_size, "restore %s: %s", key, why);
    if (!unusable(r)) return r;
    int64_t older = -1;
    if ((r = fall_back(j, key, step, used, sizeof used, &older, &bytes, err, err_size)) < 0)
      return r;
    char text[WK_OUTPUT_LINE_MAX];
    snprintf(text, sizeof text, "[spotlab-worker: checkpoint %s is not usable (%s); restored %s, of step %lld, "
             "instead]", key, why, used, (long long)older);
    sl_warn("worker.store", "%s: %s", j->id, text);
    tell_stderr(j, text);
    snprintf(j->restored_key, sizeof j->restored_key, "%s", used);
    snprintf(j->passed_over, sizeof j->passed_over, "%s", err + strlen("restore "));
    err[0] = 0;
    step = older;
  }
  key = used;
  j->step = j->durable_step = step;
  j->fetch_ms = (sl_time_mono_us() - t0) / 1000;
  j->load_ms = -1;
  j->restore_pending = true;
  sl_info("worker.store", "%s: restored %s (%llu bytes, %lld ms)", j->id, key,
          (unsigned long long)bytes, (long long)j->fetch_ms);
  if (j->kind == WK_KIND_TRAIN && j->env->signer) restore_orphan(j, step);
  return 0;
}

/* Tells the job's user, as a stderr output line, that a checkpoint did not
 * become durable and where the job would resume from: without it a full disk
 * or a failing store would go unnoticed until a preemption. The checkpoint a
 * notice asked for will not come now, so the child is stopped at once: the
 * one it writes on SIGTERM is the retry there is time for. */
void wk_job_report_lost_checkpoint(struct wk_job *j, int64_t step, const char *what, const char *why) {
  char resume[64], text[WK_OUTPUT_LINE_MAX];
  if (j->durable_step >= 0) snprintf(resume, sizeof resume, "step %lld", (long long)j->durable_step);
  else snprintf(resume, sizeof resume, "the start");
  snprintf(text, sizeof text, "[spotlab-worker: checkpoint of step %lld not %s (%s); a restart resumes from %s]",
           (long long)step, what, why, resume);
  sl_warn("worker.store", "%s: checkpoint of step %lld not %s: %s", j->id, (long long)step, what, why);
  snprintf(j->lost_why, sizeof j->lost_why, "not %s: %s", what, why);
  tell_stderr(j, text);
  if (j->state == NOTICE_WAIT && step >= j->notice_step) wk_job_terminate(j, j->kill_at_us);
}


/* Deletes the job's stored checkpoints older than `recorded` (the newest
 * one the gateway has saved as its resume point, checkpoint_recorded) that
 * are not among the newest `keep` (keys sort by step). The gateway's resume
 * point and anything newer are never deleted: a report still in flight when
 * a gateway dies leaves it resuming from an older one, which must be there.
 * A failure only leaves an old object behind. */
static void prune_checkpoints(struct wk_job *j, int64_t recorded) {
  if (j->keep <= 0 || j->gang.rank != 0 || recorded < 0) return;
  char prefix[64], bound[64];
  snprintf(prefix, sizeof prefix, "%s/ckpt-", j->id);
  snprintf(bound, sizeof bound, "%s/ckpt-%08lld.tc", j->id, (long long)recorded);
  char **keys = NULL;
  size_t n = 0;
  if (wk_store_list(j->env->store, prefix, &keys, &n) < 0) return;
  if (n) qsort(keys, n, sizeof *keys, cmp_keys);
  for (size_t i = 0; i + (size_t)j->keep < n && strcmp(keys[i], bound) < 0; i++) {
    int r = wk_store_remove(j->env->store, keys[i]);
    if (r < 0 && r != -ENOENT)
      sl_warn("worker.store", "%s: cannot delete the old checkpoint %s: %s", j->id, keys[i], sl_strerror(r));
  }
  wk_store_keys_free(keys);
}

void wk_job_checkpoint_recorded(struct wk_job *j, int64_t attempt, int64_t step) {
  if (attempt != j->attempt || step < 0 || step > 99999999 || step <= j->recorded_step) return;
  j->recorded_step = step;
  prune_checkpoints(j, step);
}

/* The notice's checkpoint is stored: SIGTERM makes spotlab-train write
 * one more of its latest step and exit. */
static void notice_checkpoint_stored(struct wk_job *j, int64_t step) {
  if (j->state == NOTICE_WAIT && step >= j->notice_step) {
    wk_child_signal(j->child, SIGTERM);
    j->terminated = true;
    j->state = STOPPING;
  }
}

/* Orphaned: the gateway signs no URL, so the checkpoint goes to the URLs
 * signed ahead (reserve.h); no checkpoint message could reach the gateway,
 * and the next attempt finds the checkpoint at its restore. A step already
 * in the store needs no copy. */
static void save_orphan(struct wk_job *j, int64_t step, const char *path) {
  if (step > j->durable_step) {
    char err[512] = "";
    uint64_t bytes = 0;
    int r = wk_reserve_put(&j->reserve, path, step, &bytes, err, sizeof err);
    if (r == -ENOENT) return; /* pruned by spotlab-train for a newer one, which follows */
    if (r < 0) {
      wk_job_report_lost_checkpoint(j, step, "saved (the gateway is unreachable)", err);
      return;
    }
    sl_warn("worker.store", "%s: gateway unreachable: checkpoint of step %lld saved as %s/orphan/ckpt.tc "
            "(%llu bytes)", j->id, (long long)step, j->id, (unsigned long long)bytes);
  }
  notice_checkpoint_stored(j, step);
}

/* After a regular checkpoint: an earlier attempt's orphan checkpoint must
 * never be used again. A failure is tried again after the next one. */
static void clear_orphan(struct wk_job *j) {
  int r = wk_orphan_clear(j->env->store, j->id);
  if (r < 0) {
    sl_warn("worker.store", "%s: cannot delete the orphan checkpoint: %s", j->id, sl_strerror(r));
    return;
  }
  j->orphan_left = false;
  sl_info("worker.store", "%s: deleted the orphan checkpoint", j->id);
}

/* Uploads the checkpoint a metrics event announced and reports it. */
void wk_job_upload_checkpoint(struct wk_job *j, const json_t *ev) {
  const char *path = sl_json_get_str(ev, "path", NULL);
  int64_t step = sl_json_get_int(ev, "step", -1);
  size_t dl = strlen(j->ckpt_dir);
  if (!path || step < 0 || strncmp(path, j->ckpt_dir, dl) != 0 || path[dl] != '/' || strstr(path, "/..")) {
    sl_warn("worker.store", "%s: checkpoint event without a path in the job folder", j->id);
    return;
  }
  if (j->orphaned && wk_reserve_ready(&j->reserve)) {
    save_orphan(j, step, path);
    return;
  }
  char key[64];
  snprintf(key, sizeof key, "%s/ckpt-%08lld.tc", j->id, (long long)step);
  uint64_t bytes = 0;
  int64_t t0 = sl_time_mono_us();
  int r = wk_store_put_file(j->env->store, key, path, &bytes);
  int64_t upload_ms = (sl_time_mono_us() - t0) / 1000;
  if (r < 0) {
    /* -ENOENT: spotlab-train already pruned it for a newer one, which follows. */
    if (r != -ENOENT) wk_job_report_lost_checkpoint(j, step, "uploaded", sl_strerror(r));
    return;
  }
  if (step > j->durable_step) j->durable_step = step;
  if (step > j->reported_step) j->reported_step = step;
  sl_debug("worker.store", "%s: uploaded %s (%llu bytes, %lld ms)", j->id, key,
           (unsigned long long)bytes, (long long)upload_ms);
  json_t *m = wk_job_msg_new(j, "checkpoint");
  json_object_set_new(m, "step", json_integer(step));
  json_object_set_new(m, "key", json_string(key));
  json_object_set_new(m, "bytes", json_integer((json_int_t)bytes));
  json_object_set_new(m, "write_ms", sl_json_real(sl_json_get_num(ev, "write_ms", 0)));
  json_object_set_new(m, "upload_ms", json_integer(upload_ms));
  json_decref(j->last_ckpt);
  j->last_ckpt = json_pack("{s:I, s:s, s:I, s:O, s:I}", "step", (json_int_t)step, "key", key, "bytes",
                           (json_int_t)bytes, "write_ms", json_object_get(m, "write_ms"), "upload_ms",
                           (json_int_t)upload_ms);
  wk_job_send_metric(j, wk_relay_pending(j->relay, 0, true));
  wk_job_send(j, m, true);
  /* the last one a job stores may end it before the gateway's answer comes:
   * prune against the resume point it saved before */
  prune_checkpoints(j, j->recorded_step);
  if (j->orphan_left) clear_orphan(j);
  notice_checkpoint_stored(j, step);
}
