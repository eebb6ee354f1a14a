/* Removing the store objects of jobs nobody needs any more (a session
 * deleted: its jobs' checkpoints and files, under JID/ in the checkpoint
 * store). The work is done on a thread of its own, one job after another,
 * so the loop never waits on a store. The jobs to purge are also rows of
 * the store's purge table until the loop takes them back as done
 * (gw_purge_take_done), so a gateway that stops (or fails to reach the
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

#endif
