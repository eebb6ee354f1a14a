/* The gateway's store: every piece of SQL lives in store.c and the files
 * beside it (store_int.h names them).
 *
 * SQLite in WAL mode with a busy timeout, so several handles (the gateway
 * and an admin's sqlite3 shell, or test threads) can share the file. The
 * schema is versioned; opening an older database migrates it in place, one
 * transaction per step. A job transition (row update plus its event) is one
 * transaction, and event numbers per job start at 1 with no gaps.
 *
 * Writes of the gateway's own state (jobs, events, checkpoints, attempts,
 * costs, instances) that the database refuses (a full disk, an I/O error,
 * a lock held too long) are kept in memory, in order, with every later one,
 * until gw_store_retry writes them all in one transaction: those functions
 * return 0 when written, 1 when kept, and a negative error only for a write
 * that is neither (out of memory, bad input). */
#ifndef GW_STORE_H
#define GW_STORE_H

#include "job.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GW_STORE_SCHEMA_VERSION 11

struct gw_store;

struct gw_instance_row {
  char id[32];
  char type[64];
  char zone[32];
  bool spot;
  double price_usd_per_hour;
  double on_demand_usd_per_hour;
  char public_key[41];          /* Z85 CURVE public key */
  char state[16];               /* launching, idle, busy, terminated */
  int64_t job;                  /* 0: none */
  char user[64];                /* the user of the last job, for idle timeouts */
  int64_t launched_us;
  char provider[32];            /* the provider that owns it ("local") */
};

/* A checkpoint a worker stored for a job (checkpoints table). */
struct gw_checkpoint_row {
  int64_t step;
  char key[256];
  int64_t bytes, write_ms, upload_ms;
};

/* How the store's writes fare: failing while writes are kept (since_us,
 * real time), the last refusal (-ENOSPC for a full disk, -EIO, -EBUSY,
 * -EROFS, SL_ESQLITE) and SQLite's words for it; kept writes now; metric
 * and output events dropped because too many were kept. */
struct gw_store_health {
  bool failing;
  int error;
  char message[160];
  int64_t since_us;
  size_t kept;
  uint64_t dropped;
};

/* Called for each kept event once gw_store_retry wrote it: row is the job's
 * row as written (borrowed), event the event with its "seq" (borrowed),
 * attempt the job's attempt when the event happened, checkpoint whether
 * the event recorded a checkpoint's row. */
typedef void (*gw_store_saved_fn)(void *ctx, const struct gw_job *row, const json_t *event,
                                  int attempt, bool checkpoint);

/* Opens (creating or migrating) the database at path. Returns an owned store
 * in *ret; on error a message in err. */
int gw_store_open(const char *path, struct gw_store **ret, char *err, size_t err_size);
struct gw_store *gw_store_free(struct gw_store *s);
/* The schema version of the open database. */
int gw_store_schema_version(struct gw_store *s);
/* SQLite's words for the store's last error ("list instances: disk I/O
 * error"); "" before any. */
const char *gw_store_last_error(const struct gw_store *s);

/* Users: only the token's SHA-256 is kept. */
int gw_store_user_put(struct gw_store *s, const char *name, const char *token_sha256,
                      const char *group);
/* A user as the configuration names them (all borrowed). */
struct gw_store_user {
  const char *name, *token_sha256, *group;
};
#define GW_STORE_USERS_REPORTED 32
/* Makes the users table hold exactly users[0..n), in one transaction: a user
 * not among them can no longer log in, while their jobs, sessions and costs
 * stay (named again, they find them). on_removed, when not NULL, is called
 * after the commit with the name of each user removed (the first
 * GW_STORE_USERS_REPORTED). Returns how many were removed, or an error with
 * the table unchanged. */
int gw_store_users_sync(struct gw_store *s, const struct gw_store_user *users, size_t n,
                        void (*on_removed)(const char *name, void *data), void *data);
/* SL_EAUTH when no user has this token hash. */
int gw_store_user_by_token(struct gw_store *s, const char *token_sha256, char *ret_name,
                           size_t size);

/* Notebook sessions. get returns owned {"vars":{},"defs":[],"models":{}}. */
int gw_store_session_touch(struct gw_store *s, const char *user, const char *session,
                           int64_t now_us);
int gw_store_session_get(struct gw_store *s, const char *user, const char *session,
                         json_t **ret);
/* Replaces the listed vars and defs and deletes the names in del (each may
 * be NULL), in one transaction. SL_ETYPE for a malformed entry; nothing
 * changes when the session's variables and definitions would pass
 * GW_SESSION_BYTES_MAX (SL_ELIMIT: a client reads a session whole, in one
 * message) or all of the user's sessions GW_USER_SESSIONS_BYTES_MAX
 * (-EDQUOT). */
#define GW_SESSION_BYTES_MAX (512 * 1024)
#define GW_USER_SESSIONS_BYTES_MAX (32 * 1024 * 1024)
int gw_store_session_set(struct gw_store *s, const char *user, const char *session,
                         const json_t *vars, const json_t *defs, const json_t *del);
/* The definition {"name","kind","spec"} of name with that kind, owned; SL_ENAME. */
int gw_store_session_def(struct gw_store *s, const char *user, const char *session,
                         const char *name, const char *kind, json_t **ret);
int gw_store_session_model_set(struct gw_store *s, const char *user, const char *session,
                               const char *model, int64_t job, int64_t step, const char *ckpt);
/* Moves user's session from (its names, models and jobs) to the name to,
 * in one transaction: a notebook renamed. A session to that holds anything
 * is first moved aside, to the name aside, so nothing is lost. 0 moved, 2
 * moved and the old one put aside, 1 nothing to move (from holds nothing;
 * from and to the same). */
int gw_store_session_move(struct gw_store *s, const char *user, const char *from, const char *to,
                          const char *aside);
/* Deletes user's session (its names and models) in one transaction; its
 * jobs, all ended (the caller checks), stay for costs and records under the
 * name aside. *ret_jobs (owned, *ret_n of them): the jobs whose store
 * objects may go, their checkpoint rows removed (those a model of another
 * session names are kept), and listed in the purge table until
 * gw_store_purge_done. 0 deleted, 1 nothing there, or an error. */
int gw_store_session_delete(struct gw_store *s, const char *user, const char *session,
                            const char *aside, int64_t **ret_jobs, size_t *ret_n);
/* user's sessions that hold anything (names, models or jobs), the most
 * recently active first, at most max: owned [{"name", "last_active_us"
 * (absent when never seen), "vars", "defs", "models", "jobs"}]. */
int gw_store_sessions_list(struct gw_store *s, const char *user, size_t max, json_t **ret);
/* The jobs whose store objects are still to be removed (a gateway stopped
 * before it was done), owned, oldest first; and n of them done. */
int gw_store_purge_list(struct gw_store *s, int64_t **ret, size_t *ret_n);
int gw_store_purge_done(struct gw_store *s, const int64_t *jobs, size_t n);

/* Multipart uploads that workers began in an S3 store (store_multipart.c),
 * so that the gateway aborts those a worker could not finish; instance ""
 * is the gateway's own, of a data file, left open by a run killed
 * (gw_mpu_notes_left_open). seen: the
 * instance asked for the URLs of upload_id's parts of key (a row once; a
 * checkpoint that a job on that instance stores under key removes it);
 * SL_ELIMIT for a new upload once instance has max rows. list: the rows of
 * instance (NULL: every row), owned [{"upload_id", "key", "instance"}].
 * done: the uploads that are no more (aborted, or found completed). */
#define GW_MULTIPART_PER_INSTANCE 1000 /* rows one instance may have (seen refuses more) */
int gw_store_multipart_seen(struct gw_store *s, const char *instance, const char *key,
                            const char *upload_id, int64_t now_us, int max);
int gw_store_multipart_list(struct gw_store *s, const char *instance, json_t **ret);
int gw_store_multipart_done(struct gw_store *s, const char *const *upload_ids, size_t n);

/* Notebooks' stored data files, one per user and content (store_data.c).
 * seen: a submit named user's file sha256 (bytes, from path on the
 * notebook's machine) at now_us, stored; the row made, or its path and
 * last use updated and a deletion mark cleared. */
int gw_store_upload_seen(struct gw_store *s, const char *user, const char *sha256, int64_t bytes,
                         const char *path, int64_t now_us);
/* stored: user's upload of sha256 (bytes) is in the store, as data.have
 * found it; a row made (its path "" until a submit names it) unless there
 * is one. */
int gw_store_upload_stored(struct gw_store *s, const char *user, const char *sha256, int64_t bytes,
                           int64_t now_us);
/* user's stored files, the most recently used first: owned [{"sha256",
 * "bytes", "path", "first_us", "last_us", "deleting", "jobs" (that named
 * it), "live_jobs" (of them, not ended), "last_job" (absent: none)}]; user
 * NULL: every user's, each row with its "user". */
int gw_store_uploads_list(struct gw_store *s, const char *user, json_t **ret);
struct gw_store_upload {
  char sha256[65];
  int64_t bytes;
  char path[1024];
  bool deleting;
};
/* user's stored file whose hash starts with prefix (6 to 64 lower-case hex
 * digits): SL_ETYPE for another prefix, SL_ENAME for none, SL_EMISMATCH for
 * several. */
int gw_store_upload_find(struct gw_store *s, const char *user, const char *prefix,
                         struct gw_store_upload *ret);
/* Marks the row as being deleted (or no longer); forget removes a row so
 * marked, once its object is gone. */
int gw_store_upload_deleting(struct gw_store *s, const char *user, const char *sha256, bool deleting);
int gw_store_upload_forget(struct gw_store *s, const char *user, const char *sha256);
/* Of the SHA-256s in shas (an array of strings), those that no stored file
 * has (no row, or rows being deleted): an owned array, in their order. */
int gw_store_uploads_unknown(struct gw_store *s, const json_t *shas, json_t **ret);
/* Per user with stored files (user NULL: every one; else that one), the
 * most bytes first: owned [{"user", "files", "bytes"}] (the table alone:
 * cheap enough for every metrics scrape). */
int gw_store_uploads_by_user(struct gw_store *s, const char *user, json_t **ret);
/* The rows marked as being deleted (a gateway stopped before it was done),
 * owned [{"user", "sha256", "bytes"}]. */
int gw_store_uploads_deleting(struct gw_store *s, json_t **ret);

/* Jobs. create fills j->id, created/updated times and writes the first
 * event (state queued); j->spec is borrowed. Refused (the kept writes'
 * error) while writes are kept. */
int gw_store_job_create(struct gw_store *s, struct gw_job *j);
/* Writes j's row and, when event is non-NULL, appends it (adding "seq",
 * "time_us" and "job" to it) in one transaction; j->last_seq follows.
 * 1: kept (a copy of the row and event; the event is numbered when written
 * and then given to the saved function). SL_ELIMIT: a metric or output
 * event dropped (too many kept), the row kept. */
int gw_store_job_save(struct gw_store *s, struct gw_job *j, json_t *event);
/* The same, with the row of checkpoint ck (of j's current attempt) and, for
 * a train job with a model, the session's model at j's newest checkpoint,
 * in the same transaction. */
int gw_store_job_save_checkpoint(struct gw_store *s, struct gw_job *j, json_t *event,
                                 const struct gw_checkpoint_row *ck);
/* The same for a placement: j's row, its "placed" event and the row of its
 * new attempt (j->attempt, from from_step), in one transaction, so that no
 * crash leaves a job placed for an attempt that has no row. Kept, all
 * three, in order, while the database refuses writes (1). */
int gw_store_job_save_placed(struct gw_store *s, struct gw_job *j, json_t *event, int64_t from_step,
                             int64_t now_us);
/* Appends an event to job id without touching the rest of the row. */
int gw_store_event_append(struct gw_store *s, int64_t job, json_t *event, int64_t *ret_seq);
/* Fills *ret (owned fields: gw_job_done) or SL_ENAME. */
int gw_store_job_get(struct gw_store *s, int64_t id, struct gw_job *ret);
/* Jobs of user (NULL: everyone), newest first, at most max; live_only keeps
 * non-final ones. Owned array of owned jobs. */
int gw_store_jobs_list(struct gw_store *s, const char *user, bool live_only, size_t max,
                       struct gw_job **ret, size_t *ret_n);
void gw_store_jobs_free(struct gw_job *jobs, size_t n);
/* The highest step of the metric events since the job's latest placed event
 * (its current attempt) into *ret_step; -1 when there is none. */
int gw_store_attempt_metric_step(struct gw_store *s, int64_t job, int64_t *ret_step);
/* The highest "oseq" of the job's own output events (not a gang's other
 * ranks') since its latest placed event into *ret_seq; 0 when there is none. */
int gw_store_attempt_output_seq(struct gw_store *s, int64_t job, int64_t *ret_seq);
/* Whether job's events hold a notice for instance that its jobs leave for
 * (*ret_leaving) or one they went on through (*ret_at_risk, a rebalance
 * recommendation): what a gateway heard of the instance before a restart. */
int gw_store_instance_noticed(struct gw_store *s, int64_t job, const char *instance,
                              bool *ret_leaving, bool *ret_at_risk);
/* Events with seq > after, at most limit, as an owned array; *ret_more when
 * more follow. */
int gw_store_events(struct gw_store *s, int64_t job, int64_t after, int64_t limit, json_t **ret,
                    bool *ret_more);
/* Thins job's stored step metrics: the newest keep_whole stay as they are;
 * of the older ones, those without an evaluation or restore timings keep
 * the newest of each step bucket of a power-of-two stride, the smallest
 * that leaves at most about keep_old of them, evenly spread over their
 * steps (so a long run's start stays in its curve). Other events, and rows
 * that are not JSON, are left alone. The rows deleted into *ret_deleted,
 * the stride into *ret_stride (0: nothing to thin). */
int gw_store_thin_metrics(struct gw_store *s, int64_t job, int64_t keep_whole, int64_t keep_old,
                          int64_t *ret_deleted, int64_t *ret_stride);
/* Leaves out the middle of job's output: its first keep_head output events
 * and its newest ones, at most keep_tail of them and tail_bytes of text
 * (the newest always), stay; those between are deleted and counted in one
 * marker, an output event on stderr at the gap whose text says how many
 * lines (and bytes) were left out, with the counts in elided_lines and
 * elided_bytes. Later trims add to the same marker. The rows deleted into
 * *ret_deleted (0: nothing to trim). */
int gw_store_trim_output(struct gw_store *s, int64_t job, int64_t keep_head, int64_t keep_tail,
                         int64_t tail_bytes, int64_t *ret_deleted);

int gw_store_attempt_begin(struct gw_store *s, const struct gw_job *j, int64_t from_step,
                           int64_t now_us);
int gw_store_attempt_end(struct gw_store *s, int64_t job, int attempt, const char *outcome,
                         int64_t now_us);
int gw_store_checkpoint_add(struct gw_store *s, int64_t job, int attempt, int64_t step,
                            const char *key, int64_t bytes, int64_t write_ms, int64_t upload_ms,
                            int64_t now_us);

/* Until when attempt of job is charged: the cost table's last addition to
 * it, else the attempt's start (0 when neither is on record). */
int gw_store_cost_accrued_until(struct gw_store *s, int64_t job, int attempt, int64_t *ret_us);
/* What the cost table charged job, over all its attempts. */
int gw_store_cost_of_job(struct gw_store *s, int64_t job, double *ret_usd, double *ret_on_demand_usd);
/* Adds to the cost of j's current attempt. */
int gw_store_cost_add(struct gw_store *s, const struct gw_job *j, double usd,
                      double on_demand_usd, double seconds, int64_t now_us);
/* Totals since since_us for user (NULL: everyone). */
int gw_store_cost_totals(struct gw_store *s, const char *user, int64_t since_us,
                         double *ret_usd, double *ret_on_demand_usd);

/* Adds a carbon estimate to the cost row of j's current attempt. While
 * writes are kept it is refused (the job's row carries its total). */
int gw_store_energy_add(struct gw_store *s, const struct gw_job *j, double kwh, double co2e_g,
                        int64_t now_us);
/* Every user's spend for metrics: an owned array, by user, of {"user",
 * "group" (the user's group now; "" for none or a removed user), "usd",
 * "on_demand_usd", "energy_kwh", "co2e_g"}, at most max rows. */
int gw_store_cost_by_user_group(struct gw_store *s, size_t max, json_t **ret);
/* What the metrics' counters start from after a restart: checkpoint() for
 * each checkpoint row, then event() for each "preempted" and "state" event
 * of the jobs with a preempted attempt, in order per job (state: the
 * event's state, "" for none; steps_lost and notice: the preempted event's). */
struct gw_store_history_fns {
  void (*checkpoint)(void *ctx, int64_t write_ms, int64_t upload_ms);
  void (*event)(void *ctx, int64_t job, int64_t time_us, const char *kind, const char *state,
                int64_t steps_lost, bool notice);
};
int gw_store_metric_history(struct gw_store *s, const struct gw_store_history_fns *fns, void *ctx);
/* Budgets. Records that month's (YYYY-MM) alert (kind "alert" at
 * threshold_pct) or cap (kind "cap") of a scope ("gateway", "group",
 * "user") and name: 1 when recorded now, 0 when it was already, or an
 * error. Written at once, never kept: an alert that cannot be recorded is
 * tried again. */
int gw_store_budget_fire(struct gw_store *s, const char *month, const char *scope,
                         const char *name, const char *kind, double threshold_pct,
                         double spent_usd, double budget_usd, int64_t now_us);
/* That month's records, owned: [{"scope","name","kind","threshold_pct",
 * "spent_usd","budget_usd","time_us"}], oldest first. */
int gw_store_budget_fired(struct gw_store *s, const char *month, json_t **ret);
/* Whether user is known here: a user of the file or the users table, or one
 * with a session or a job on record. 1 or 0, or an error. */
int gw_store_user_known(struct gw_store *s, const char *user);
/* A monthly budget an admin (set_by) set live for a scope and name. */
int gw_store_budget_override_set(struct gw_store *s, const char *scope, const char *name,
                                 double monthly_usd, const char *set_by, int64_t now_us);
/* Every such budget, owned: [{"scope","name","monthly_usd","set_by","time_us"}]. */
int gw_store_budget_overrides(struct gw_store *s, json_t **ret);

/* What gw_store_cost_by groups spend by. */
enum gw_cost_by { GW_COST_BY_USER, GW_COST_BY_JOB, GW_COST_BY_TYPE, GW_COST_BY_DAY };
/* Spend since since_us of user (NULL: everyone) grouped by what: an owned
 * array of {"key", "usd", "on_demand_usd", "seconds", "energy_kwh", "co2e_g"}; key is the user, the
 * job's id (an integer), the instance type or the UTC day (YYYY-MM-DD).
 * At most max rows, days oldest first, the rest costliest first. */
int gw_store_cost_by(struct gw_store *s, enum gw_cost_by what, const char *user, int64_t since_us,
                     size_t max, json_t **ret);
/* Counts over every user for metrics, owned: {"jobs": {STATE: N},
 * "preemptions": {"notice": N, "no_notice": N}}. */
int gw_store_counts(struct gw_store *s, json_t **ret);
/* Jobs by state alone, owned: {STATE: N} (one aggregate over the jobs). */
int gw_store_job_counts(struct gw_store *s, json_t **ret);

/* Jobs per user and state over every job ever stored, owned:
 * {USER: {STATE: N}}. */
int gw_store_job_counts_by_user(struct gw_store *s, json_t **ret);
/* The preempted and resumed events of user's jobs (NULL: everyone), the
 * newest max of them, oldest first: an owned array of the events' bodies
 * (with "seq", "time_us" and "job") each with "user" added. */
int gw_store_preemption_events(struct gw_store *s, const char *user, size_t max, json_t **ret);

int gw_store_instance_put(struct gw_store *s, const struct gw_instance_row *row);

/* Writes the kept writes in one transaction: 0 when none were kept, the
 * number written, or the database's refusal (they stay kept). After a
 * full disk it first moves the write-ahead log into the database. */
int gw_store_retry(struct gw_store *s);
/* Whether a write of job's row is kept (its newest state is not written). */
bool gw_store_keeps_job(const struct gw_store *s, int64_t job);
/* Makes every committed write durable: commits are not flushed one by one
 * (synchronous=NORMAL), so an operating system's crash or a power loss may
 * take the last ones back. Called before a peer is told it may delete what
 * the store now records (a worker's older checkpoints, a kernel's journal of
 * names, a finished job's folder). 0, or SL_ESQLITE when the flush failed
 * (the caller then says nothing yet). */
int gw_store_sync(struct gw_store *s);
void gw_store_health(const struct gw_store *s, struct gw_store_health *ret);
/* fn(ctx, ...) is called for each kept event gw_store_retry wrote. */
void gw_store_set_saved_fn(struct gw_store *s, gw_store_saved_fn fn, void *ctx);
/* A job's run record (record.h): what it holds beyond the job's row,
 * attempts and checkpoints, as one JSON object. put replaces the job's
 * body (borrowed); get returns it owned, or SL_ENAME when the job has none
 * (a job from before records were kept). */
int gw_store_record_put(struct gw_store *s, int64_t job, const json_t *body);
int gw_store_record_get(struct gw_store *s, int64_t job, json_t **ret);
/* The job's attempts ({"attempt","instance","instance_type","zone","market",
 * "usd_per_hour","on_demand_usd_per_hour","from_step","started_us",
 * ["ended_us","outcome"]}) and checkpoints ({"attempt","step","key","bytes",
 * "write_ms","upload_ms","time_us"}), oldest first, as owned arrays. */
int gw_store_job_history(struct gw_store *s, int64_t job, json_t **ret_attempts,
                         json_t **ret_checkpoints);
/* Instances not yet terminated, owned array. */
int gw_store_instances_live(struct gw_store *s, struct gw_instance_row **ret, size_t *ret_n);

/* ---- the market's history (store_market.c; markethist.h says what it is) ---- */

#define GW_STORE_MARKET_CHUNK_MAX 60

/* A run of one offer's ticks: tick k of the offer is entry k - chunk * size
 * of chunk k / size (size: GW_STORE_MARKET_CHUNK_MAX). */
struct gw_market_chunk {
  char provider[32], type[64], zone[32];
  int64_t chunk;
  int64_t end_us;               /* wall clock of its last tick */
  size_t n;                     /* ticks held; 0: a row that could not be read */
  bool up[GW_STORE_MARKET_CHUNK_MAX];
  double price[GW_STORE_MARKET_CHUNK_MAX];
};

/* Writes the chunks (each replaces its row; an offer's chunks next to each
 * other, oldest first) and drops the rows of their offers more than keep
 * chunks older than each offer's last one, in one transaction. */
int gw_store_market_put(struct gw_store *s, const struct gw_market_chunk *c, size_t n,
                        int64_t keep);
/* Calls fn on every stored chunk, by provider, type, zone and chunk (a
 * malformed row with n = 0, and chunk -1 when its number is out of range);
 * a negative return from fn stops and is returned. */
int gw_store_market_each(struct gw_store *s, int (*fn)(const struct gw_market_chunk *c, void *data),
                         void *data);

/* ---- what the scheduler learned (store_learned.c) ---- */

/* Replaces the learned memory called name ("placement", "deadline") with
 * body (an object), written at time_us (wall clock). Written at once, never
 * kept: the caller writes it again later. */
int gw_store_learned_put(struct gw_store *s, const char *name, const json_t *body, int64_t time_us);
/* The memory called name, owned, in *ret: NULL when none was written;
 * SL_EPARSE when its row is not a JSON object. */
int gw_store_learned_get(struct gw_store *s, const char *name, json_t **ret);

#endif
