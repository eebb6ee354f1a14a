/* One job on this worker: a child process, its relay to the gateway, its
 * checkpoints, and how it ends. The agent owns the jobs and feeds them
 * readable descriptors, timer ticks and gateway requests; a job talks back
 * only through the send callback. */
#ifndef WK_JOB_H
#define WK_JOB_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "child.h"
#include "gpuinfo.h"

struct wk_config;
struct wk_store;
struct wk_job;
struct sl_s3_signer;

/* Takes msg (a JSON object). reliable messages (checkpoint, done, result)
 * must reach the gateway even if it is away for a while. */
typedef void wk_send_fn(void *ctx, json_t *msg, bool reliable);

struct wk_job_env {
  const struct wk_config *cfg;
  struct wk_store *store;
  const char *train;  /* spotlab-train path */
  const struct wk_gpu_inventory *gpus; /* this instance's GPUs */
  bool train_cuda;    /* spotlab-train can train on the GPUs (else gpus->unusable says why) */
  const struct sl_s3_signer *signer; /* an S3 store's (orphan checkpoint URLs); NULL: a folder */
  wk_send_fn *send;
  void *ctx;
  /* Whether a job of this worker that has not ended reads the uploaded
   * data file whose SHA-256 is sha (its copy must stay). */
  bool (*data_in_use)(void *ctx, const char *sha);
  /* NULL, or whether the agent holds a notice or a stop that came during a
   * store call: a job reading its child's output returns to the agent's
   * loop, which acts on it, before it reads (and uploads) more. */
  bool (*held)(void *ctx);
};

/* Starts the job of an assign message (borrowed); once its process runs,
 * sends `started`. On failure returns a negative error with a reason in err;
 * nothing was sent. env is borrowed for the life of the job. */
int wk_job_start(const struct wk_job_env *env, const json_t *assign, struct wk_job **ret,
                 char *err, size_t err_size);
struct wk_job *wk_job_free(struct wk_job *j);

const char *wk_job_id(const struct wk_job *j);
int64_t wk_job_attempt(const struct wk_job *j);
int64_t wk_job_step(const struct wk_job *j);
/* The child's descriptor for stream, -1 when closed or gone. */
int wk_job_fd(const struct wk_job *j, enum wk_stream s);
void wk_job_readable(struct wk_job *j, enum wk_stream s);
/* Timers: metric flushes, kill escalation, %%run sync, reaping, and an
 * ENDED job's done sent again. Returns 1 when the job ended in this call
 * (its done sent); with may_end false a job whose child ended waits, and an
 * ENDED one sends nothing (the gateway link is being re-established). */
int wk_job_tick(struct wk_job *j, int64_t now_mono_us, bool may_end);
/* Once per turn, before the poll: a running job stops reading its metrics
 * stream while another step metric would push out of its resend ring one
 * the gateway has not said it saved (the child waits on the pipe). */
void wk_job_flow(struct wk_job *j, int64_t now_mono_us);
/* The gateway saved the job's step metrics up to step ("recorded"). */
void wk_job_metrics_recorded(struct wk_job *j, int64_t attempt, int64_t step);
/* Whether the job ended (its done sent; kept until done_recorded). */
bool wk_job_ended(const struct wk_job *j);
/* Removes the job's folder on this worker (its checkpoint copies, a run
 * job's files): once the gateway has its end, nothing here reads it. */
void wk_job_remove_folder(struct wk_job *j);
/* Whether the job reads the uploaded data file (or data set) whose SHA-256
 * is sha from the worker's data folder. */
bool wk_job_uses_data(const struct wk_job *j, const char *sha);
/* Removes the worker's copy of the uploaded data file whose SHA-256 is sha
 * from work_dir/data, and the data set folders made from it (the gateway
 * deleted it from the store): how many entries went, or a negative error. */
int wk_data_forget(const char *work_dir, const char *sha);
/* The SHA-256s of the uploaded data files this worker keeps copies of in
 * work_dir/data, at most max of them: an owned array (empty when there is
 * no such folder), NULL when out of memory. */
json_t *wk_data_copies(const char *work_dir, size_t max);
/* The gateway's newest recorded checkpoint of the job is at step (after a
 * register): the newest one reported here, when past it, is reported
 * again (its report was in flight when a gateway died). */
void wk_job_resend_checkpoint(struct wk_job *j, int64_t step);
/* Sends an ENDED job's done again (after its step metrics went again). */
void wk_job_send_done(struct wk_job *j);
/* Whether done_recorded for attempt is this ENDED job's: then it may go. */
bool wk_job_done_recorded(const struct wk_job *j, int64_t attempt);

/* SIGTERM now (the child checkpoints), SIGKILL after the grace. */
void wk_job_cancel(struct wk_job *j);
/* The same with grace_ms instead of kill_grace_ms (0: SIGKILL at once, for
 * a rank whose peers are gone and whose process would wait on them). */
void wk_job_stop(struct wk_job *j, int64_t grace_ms);
/* Asks for a checkpoint now (train: control line; run: a folder sync). A
 * gang's rank above 0 does nothing: its spotlab-train takes no command. */
void wk_job_checkpoint_now(struct wk_job *j);
/* Sets a train job's periodic checkpoint interval (a control line to
 * spotlab-train); steps >= 0. Other kinds ignore it. */
void wk_job_set_checkpoint_every(struct wk_job *j, int64_t steps);
/* The gateway saved step as the job's resume point (checkpoint_recorded):
 * older stored checkpoints past the assign's `keep` are deleted. */
void wk_job_checkpoint_recorded(struct wk_job *j, int64_t attempt, int64_t step);
/* Sends again the kept step metrics after step (the newest one the gateway
 * recorded, -1 for none, which counts as confirmed); returns how many. */
size_t wk_job_resend_metrics(struct wk_job *j, int64_t step);
/* The GPUs a train, eval or sample job trains on, [0, *ret_n): false when
 * it runs on the CPU (and for a run job, whose script reports no steps). */
bool wk_job_gpus(const struct wk_job *j, unsigned *ret_n);
/* A sample of those GPUs (borrowed): it goes out with the job's next step
 * metric as gpu_util_pct, gpu_mem_used_mib and gpu_mem_total_mib. */
void wk_job_gpu_usage(struct wk_job *j, const struct wk_gpu_usage *u);
/* Adds to entry (a heartbeat's job, borrowed) the job's use since the last
 * call: "cpu_util", its process tree's share of this machine's CPUs, once
 * there are two samples, and "gpu_util", the newest NVML sample, when its
 * GPUs were sampled (0..1 each). */
void wk_job_utilisation(struct wk_job *j, int64_t now_mono_us, json_t *entry);
/* A preemption notice: checkpoint, upload, stop before deadline_mono_us.
 * orphan: the notice is the gateway's silence (orphan_timeout_ms), so the
 * checkpoint goes to the job's orphan URLs (reserve.h) when it has them. */
void wk_job_notice(struct wk_job *j, int64_t deadline_mono_us, bool orphan);
/* Keeps an S3 train job's orphan URLs fresh: asks for them (may_ask: the
 * gateway answers and the worker is not stopping) while the job runs, at
 * the first call and then every WK_RESERVE_REFRESH_US, and takes the answer
 * at a later call, in any state but ended. */
void wk_job_keep_reserve(struct wk_job *j, int64_t now_mono_us, bool may_ask);

#endif
