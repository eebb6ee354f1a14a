/* The gateway's job queue: FIFO per user, round-robin between users.
 *
 * Users with queued jobs form a ring; the next job offered comes from the
 * user after the one served last, so one user's hundred jobs do not starve
 * another's one. A preempted job goes back to the front of its user's FIFO.
 * The queue holds job ids only and is bounded (GW_QUEUE_MAX jobs). */
#ifndef GW_QUEUE_H
#define GW_QUEUE_H

#include <stddef.h>
#include <stdint.h>

#define GW_QUEUE_MAX 4096

struct gw_queue;

struct gw_queue *gw_queue_new(void);
struct gw_queue *gw_queue_free(struct gw_queue *q);
/* Adds job for user at the back (front = 0) or the front (front = 1) of
 * that user's FIFO. SL_ELIMIT when full, -EEXIST when already queued. */
int gw_queue_push(struct gw_queue *q, const char *user, int64_t job, int front);
/* Removes job wherever it is; -ENOENT if absent. */
int gw_queue_remove(struct gw_queue *q, int64_t job);
/* Writes up to max job ids in the order the scheduler should try them:
 * the head of each user's FIFO starting after the user served last, then
 * the second of each, and so on. Returns the count. */
size_t gw_queue_order(const struct gw_queue *q, int64_t *ret, size_t max);
/* Marks job as placed: removes it and moves the round-robin past its user. */
int gw_queue_take(struct gw_queue *q, int64_t job);
size_t gw_queue_len(const struct gw_queue *q);

#endif
