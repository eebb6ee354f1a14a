/* The orphan checkpoint of a train job on an S3 store.
 *
 * A worker cut off from its gateway cannot have any URL signed, so while
 * the gateway answers it keeps, per train job, two presigned PUT URLs
 * signed ahead: JOB/orphan/ckpt.tc and JOB/orphan/step (the reserve). An
 * orphaned worker puts its last checkpoint there; the job's next attempt
 * downloads it when it is newer than the checkpoint it restores, and the
 * next regular checkpoint deletes it. Design notes: docs/internals/worker.md
 * (Preemption). */
#ifndef WK_RESERVE_H
#define WK_RESERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sl_time.h"

struct sl_s3_signer;
struct wk_store;

/* The URLs live an hour; refreshed this often, a reserve is still valid
 * when an orphan timeout (15 minutes by default) uses it. */
#define WK_RESERVE_REFRESH_US (20 * 60 * SL_US_PER_S)
#define WK_RESERVE_RETRY_US (60 * SL_US_PER_S) /* after a refresh that failed */

/* Embedded in a job; zeroed: no URLs yet, none asked for. */
struct wk_reserve {
  char *ckpt_url, *step_url; /* owned; presigned: never logged */
  int64_t asked;             /* the signer's id of the URLs asked for; 0: none */
};

/* The key of the orphan checkpoint ("ckpt.tc") or of its step ("step") of
 * job into buf. */
void wk_reserve_key(const char *job, const char *name, char *buf, size_t size);

/* Asks signer (borrowed; one with ask and take) for the two URLs of job,
 * without waiting for them: wk_reserve_take collects them. The signer's
 * answer may take seconds (a gateway restarting, or busy), and the agent's
 * loop must go on meanwhile (notices, heartbeats). */
int wk_reserve_ask(struct wk_reserve *r, const struct sl_s3_signer *signer, const char *job,
                   char *err, size_t err_size);
/* The answer to the last ask: 0 while it has not come, 1 when the new URLs
 * replaced the old, negative with err when it was refused or never came
 * (the previous URLs stay). -ENOENT when nothing was asked. */
int wk_reserve_take(struct wk_reserve *r, const struct sl_s3_signer *signer, char *err,
                    size_t err_size);
/* Frees the URLs, and forgets a request not taken (signer may be NULL when
 * nothing was asked). */
void wk_reserve_done(struct wk_reserve *r, const struct sl_s3_signer *signer);
bool wk_reserve_ready(const struct wk_reserve *r);

/* Puts the checkpoint file path to the reserve, then step as decimal text:
 * the step never names a checkpoint older than the one stored. -ENOENT when
 * path is gone; *ret_bytes (may be NULL) gets its size. */
int wk_reserve_put(const struct wk_reserve *r, const char *path, int64_t step, uint64_t *ret_bytes,
                   char *err, size_t err_size);

/* The step of job's orphan checkpoint in s, read through the scratch file
 * tmp (removed after): -ENOENT when there is none, SL_EPARSE when the
 * object is not a step. */
int wk_orphan_step(struct wk_store *s, const char *job, const char *tmp, int64_t *ret_step);
/* Downloads job's orphan checkpoint into dst. */
int wk_orphan_fetch(struct wk_store *s, const char *job, const char *dst, uint64_t *ret_bytes);
/* Deletes job's orphan objects; ones already gone count as deleted. */
int wk_orphan_clear(struct wk_store *s, const char *job);

#endif
