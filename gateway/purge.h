/* Removing the store objects nobody needs any more: those of a deleted
 * session's jobs (their checkpoints and files, under JID/ in the checkpoint
 * store), and the parts of multipart uploads that a worker began and could
 * not finish (its instance went while it uploaded; S3 bills the parts
 * until the upload is aborted). The work is done on a thread of its own,
 * one job or upload after another, so the loop never waits on a store.
 * Both are also rows of the store (the purge and multipart tables) until
 * the loop takes them back as done (gw_purge_take_done,
 * gw_purge_take_aborted), so a gateway that stops (or fails to reach the
 * store) goes on with the rest at its next start. */
#ifndef GW_PURGE_H
#define GW_PURGE_H

#include <stddef.h>
#include <stdint.h>

struct gw_purge;
struct gw_objstore;

/* Removes from the file store at store_dir (o NULL), or from the S3 store
 * o (borrowed; store_dir NULL). */
int gw_purge_new(const char *store_dir, struct gw_objstore *o, struct gw_purge **ret);
/* Waits for the job under way; the ones still queued are logged and left. */
struct gw_purge *gw_purge_free(struct gw_purge *p);

/* Queues the objects of n jobs (their ids) for removal. */
int gw_purge_jobs(struct gw_purge *p, const int64_t *jobs, size_t n);
/* Waits until the queue is empty (tests: a settled gateway). */
void gw_purge_wait(struct gw_purge *p);
/* Moves up to max ids of jobs whose objects are gone into out: their count. */
size_t gw_purge_take_done(struct gw_purge *p, int64_t *out, size_t max);

/* Queues the aborts of n multipart uploads (upload_ids[i] of keys[i],
 * copied). */
int gw_purge_uploads(struct gw_purge *p, const char *const *keys, const char *const *upload_ids,
                     size_t n);
/* Moves up to max upload ids (owned) of uploads that are no more (aborted,
 * or found complete or aborted already) into out: their count. */
size_t gw_purge_take_aborted(struct gw_purge *p, char **out, size_t max);

#endif
