/* The fair queue: round-robin between users, FIFO within a user, preempted
 * jobs at the front, bounds. */
#include "harness.h"
#include "queue.h"
#include "sl_err.h"

#include <errno.h>

/* Takes jobs one by one as the scheduler would (always the first offered). */
static size_t drain(struct gw_queue *q, int64_t *out, size_t max) {
  size_t n = 0;
  int64_t order[64];
  while (n < max && gw_queue_order(q, order, 64) > 0) {
    out[n++] = order[0];
    CHECK_INT(gw_queue_take(q, order[0]), 0);
  }
  return n;
}

int main(void) {
  struct gw_queue *q = gw_queue_new();
  /* alice submits 4 jobs, then bob 2, then carol 1 */
  CHECK_INT(gw_queue_push(q, "alice", 1, 0), 0);
  CHECK_INT(gw_queue_push(q, "alice", 2, 0), 0);
  CHECK_INT(gw_queue_push(q, "alice", 3, 0), 0);
  CHECK_INT(gw_queue_push(q, "alice", 4, 0), 0);
  CHECK_INT(gw_queue_push(q, "bob", 11, 0), 0);
  CHECK_INT(gw_queue_push(q, "bob", 12, 0), 0);
  CHECK_INT(gw_queue_push(q, "carol", 21, 0), 0);
  CHECK_INT(gw_queue_push(q, "carol", 21, 0), -EEXIST);
  CHECK_INT(gw_queue_len(q), 7);
  int64_t got[16];
  size_t n = drain(q, got, 16);
  int64_t want[] = {1, 11, 21, 2, 12, 3, 4};
  CHECK_INT(n, 7);
  for (size_t i = 0; i < 7 && i < n; i++)
    CHECK_INT(got[i], want[i]);
  CHECK_INT(gw_queue_len(q), 0);

  /* the offered order interleaves users; a preempted job goes first for its user */
  gw_queue_push(q, "alice", 1, 0);
  gw_queue_push(q, "alice", 2, 0);
  gw_queue_push(q, "bob", 11, 0);
  gw_queue_push(q, "alice", 9, 1);
  int64_t order[8];
  CHECK_INT(gw_queue_order(q, order, 8), 4);
  CHECK_INT(order[0], 9);
  CHECK_INT(order[1], 11);
  CHECK_INT(order[2], 1);
  CHECK_INT(order[3], 2);
  /* a job taken out of turn (the first could not be placed) still moves the ring on */
  CHECK_INT(gw_queue_take(q, 11), 0);
  CHECK_INT(gw_queue_order(q, order, 8), 3);
  CHECK_INT(order[0], 9);
  CHECK_INT(gw_queue_remove(q, 1), 0);
  CHECK_INT(gw_queue_remove(q, 1), -ENOENT);
  CHECK_INT(gw_queue_len(q), 2);
  q = gw_queue_free(q);
  CHECK(q == NULL);

  /* bounded */
  q = gw_queue_new();
  int r = 0;
  for (int64_t i = 1; i <= GW_QUEUE_MAX + 1 && r == 0; i++)
    r = gw_queue_push(q, i % 2 ? "a" : "b", i, 0);
  CHECK_INT(r, SL_ELIMIT);
  CHECK_INT(gw_queue_len(q), GW_QUEUE_MAX);
  gw_queue_free(q);
  TEST_MAIN_END();
}
