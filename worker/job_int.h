/* The inside of a job, shared by its files: job.c (its life: spawn, the
 * child's streams, the end), job_ckpt.c (its checkpoints: restore, upload,
 * prune, the orphan copy), job_data.c (its uploaded data files) and
 * job_output.c (its output lines). Nothing else includes this header. */
#ifndef WK_JOB_INT_H
#define WK_JOB_INT_H

#include "job.h"
#include "cpumeter.h"

#include "filesync.h"
#include "gang.h"
#include "relay.h"
#include "reserve.h"
#include "spec.h"

#include "sl_digest.h"
#include "sl_ident.h"

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#define STDERR_TAIL 1024
#define HELD_LINES 5
/* The newest output messages a done carries again (at most this many, and
 * OUTPUT_TAIL_BYTES of text): lines in flight when a gateway died. */
#define OUTPUT_TAIL 16
#define OUTPUT_TAIL_BYTES (16 * 1024)

enum state { RUNNING, NOTICE_WAIT, STOPPING, ENDED };

struct wk_job {
  const struct wk_job_env *env;
  char id[32];
  int64_t attempt;
  enum wk_kind kind;
  enum state state;
  struct wk_gang gang;  /* nodes=N: this rank (gang.world_size 0: a job of its own) */
  struct wk_child *child;
  struct wk_relay *relay;
  struct wk_filesync *files;
  int64_t keep;         /* checkpoints kept in the store (assign "keep"; 0: all) */
  int64_t recorded_step; /* the gateway's saved resume point (checkpoint_recorded); -1: none yet */
  int64_t reported_step; /* the newest checkpoint this attempt stored and reported; -1: none */
  char dir[PATH_MAX - 64], ckpt_dir[PATH_MAX];
  struct wk_device device;
  bool device_sent;   /* the device event of this attempt went out */
  bool usage_pending; /* usage goes out with the next step metric */
  struct wk_gpu_usage usage;
  int64_t step, durable_step, notice_step;
  bool cancelled, noticed, terminated;
  bool core_terminated; /* spotlab-train stopped early on a SIGTERM (its own or a peer rank's) */
  bool core_done;       /* spotlab-train said it trained to the end ("done") */
  int64_t wait_until_us, kill_at_us, next_sync_us, exited_at_us;
  /* Restore timing, reported once on the first step metric after a restore:
   * assign received, checkpoint downloaded (ms), child started, its resume
   * event seen (ms after the start). restore_pending until reported. */
  int64_t assigned_us, fetch_ms, spawned_us, load_ms;
  bool restore_pending;
  int exit_status;
  bool have_eval;
  double eval_loss;
  char *result_text;
  size_t result_len;
  char lost_why[256]; /* why the newest checkpoint that failed did not become durable */
  /* The restore fell back (job_ckpt.c): the key restored instead of the
   * assign's, and why the newer ones were passed over; "" when it did not. */
  char restored_key[256], passed_over[768];
  /* The uploaded data files it reads from the worker's data folder (their
   * SHA-256s: a file's, or a data set's and its files'), n_data of them. */
  char data_sha[1 + SL_IMAGE_SET_FILES][SL_SHA256_HEX_LEN + 1];
  size_t n_data;
  /* S3 train job (rank 0): URLs an orphaned worker saves its checkpoint to,
   * refreshed from next_reserve_us on; orphan_left: JOB/orphan/ may hold an
   * earlier attempt's checkpoint, deleted after the next regular one */
  struct wk_reserve reserve;
  int64_t next_reserve_us;
  bool orphaned, orphan_left;
  char tail[STDERR_TAIL];
  size_t tail_len;
  /* The newest output lines the rate limit dropped since a line last went
   * out (a ring of HELD_LINES): sent at the end, so that a script's last
   * lines are seen even after a flood. */
  struct held_line {
    enum wk_stream stream;
    size_t len;
    char *text; /* WK_OUTPUT_LINE_MAX bytes, allocated at first use */
  } held[HELD_LINES];
  size_t held_n, held_next;
  int64_t output_seq;   /* output messages of this attempt so far: each one's "oseq" */
  json_t *output_tail[OUTPUT_TAIL]; /* the newest of them ({"oseq","stream","text"}), a ring */
  size_t output_tail_next;
  json_t *last_ckpt;    /* the newest checkpoint message's fields, for the done */
  json_t *done;         /* ENDED: the done message, until done_recorded */
  bool metrics_held;    /* the resend ring is full of step metrics not confirmed saved */
  int64_t done_sent_us;
  struct wk_cpu_meter cpu; /* the child's tree, sampled at each heartbeat */
};

/* job.c */
/* A message of type about the job's attempt (owned). */
json_t *wk_job_msg_new(const struct wk_job *j, const char *type);
/* Sends m (owned; NULL: nothing), kept for a resend when reliable. */
void wk_job_send(struct wk_job *j, json_t *m, bool reliable);
/* Sends a metric's data (owned; NULL: nothing) with what goes along with it. */
void wk_job_send_metric(struct wk_job *j, json_t *data);
/* SIGTERM to the child; SIGKILL at kill_at (an earlier one stays). */
void wk_job_terminate(struct wk_job *j, int64_t kill_at);

/* job_output.c */
#define RESULT_TEXT_MAX (64 * 1024)
/* A line the child wrote on stdout or stderr (cut: longer than WK_LINE_MAX). */
void wk_job_output_line(struct wk_job *j, enum wk_stream s, const char *line, size_t len, bool cut);
/* Says how many lines the rate limit dropped; at the end (last) the newest
 * of them follow, as the script wrote them. */
void wk_job_flush_dropped(struct wk_job *j, bool last);
/* The newest output messages, oldest first (owned; NULL: none), for the done. */
json_t *wk_job_output_tail(const struct wk_job *j);

/* job_data.c */
/* For an assign whose spec names an uploaded data file ("data_upload"):
 * its checked copy in the worker's data folder, fetched when not there
 * yet, and in *ret_assign (owned) the assign with the spec's data that
 * copy's path. *ret_assign NULL when the spec names none. */
int wk_job_fetch_data(struct wk_job *j, const json_t *assign, json_t **ret_assign, char *err, size_t err_size);

/* job_ckpt.c */
/* Downloads the checkpoint key into the job's checkpoint folder (and an
 * orphaned attempt's newer one beside it); its step becomes the job's. */
int wk_job_restore_ckpt(struct wk_job *j, const char *key, char *err, size_t err_size);
/* Uploads the checkpoint a metrics event announced and reports it. */
void wk_job_upload_checkpoint(struct wk_job *j, const json_t *ev);
/* Tells the user that the checkpoint of step did not become durable (what
 * did not happen to it, and why). */
void wk_job_report_lost_checkpoint(struct wk_job *j, int64_t step, const char *what, const char *why);

#endif
