/* A job's checkpoints (job_int.h): restoring the one the assign names (and
 * an orphaned attempt's newer one), uploading each one spotlab-train
 * writes and reporting it, pruning the old ones once the gateway saved a
 * newer resume point, and the orphan copy a worker that lost its gateway
 * saves through the URLs signed ahead. */
#include "job_int.h"

#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"
#include "store.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Downloads the checkpoint key into the folder under the name spotlab-train
 * looks for (ckpt-<10 digits>.slck). The step comes from the key's name. */
int wk_job_restore_ckpt(struct wk_job *j, const char *key, char *err, size_t err_size) {
  const char *base = strrchr(key, '/');
  base = base ? base + 1 : key;
  unsigned long long step;
  int used = 0;
  if (sscanf(base, "ckpt-%llu.tc%n", &step, &used) != 1 || base[used]) {
    snprintf(err, err_size, "restore key \"%s\" is not a ckpt-STEP.tc key", key);
    return SL_ENAME;
  }
  char dst[PATH_MAX + 32];
  snprintf(dst, sizeof dst, "%s/ckpt-%010llu.slck", j->ckpt_dir, step);
  uint64_t bytes = 0;
  int64_t t0 = sl_time_mono_us();
  int r = wk_store_get_file(j->env->store, key, dst, &bytes);
  if (r < 0) {
    const char *why = wk_store_error(j->env->store);
    snprintf(err, err_size, "restore %s: %s", key, why[0] ? why : sl_strerror(r));
    return r;
  }
  j->step = j->durable_step = (int64_t)step;
  j->fetch_ms = (sl_time_mono_us() - t0) / 1000;
  j->load_ms = -1;
  j->restore_pending = true;
  sl_info("worker.store", "%s: restored %s (%llu bytes, %lld ms)", j->id, key,
          (unsigned long long)bytes, (long long)j->fetch_ms);
  if (j->kind == WK_KIND_TRAIN && j->env->signer) restore_orphan(j, (int64_t)step);
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
  json_t *m = wk_job_msg_new(j, "output");
  json_object_set_new(m, "stream", json_string("stderr"));
  json_object_set_new(m, "text", wk_relay_text(text, strlen(text), WK_OUTPUT_LINE_MAX));
  wk_job_send(j, m, true);
  if (j->state == NOTICE_WAIT && step >= j->notice_step) wk_job_terminate(j, j->kill_at_us);
}

static int cmp_keys(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
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
