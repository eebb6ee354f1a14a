/* Asynchronous checkpoint writer.
 *
 * One background thread and one host snapshot buffer. The training loop calls
 * acquire (which waits only if the previous checkpoint is still being
 * written), copies its state into the buffer, and submits; it then continues
 * training while the thread writes, fsyncs, renames, prunes its run's
 * checkpoints to the newest `keep` and reports through the done callback (called on the writer thread).
 * A failed write (ENOSPC, EFBIG, ...) is reported the same way and leaves the
 * earlier checkpoints in place. */
#ifndef TC_WRITER_H
#define TC_WRITER_H

#include <stdint.h>

#include "tc_ckpt.h"

struct tc_ckpt_result {
  uint64_t step;
  int err;          /* 0 when durable */
  char path[4096];  /* final path when durable */
  char text[1024];  /* error text when err < 0 */
  double write_ms;  /* submit to durable */
};

typedef void (*tc_ckpt_done_fn)(void *ctx, const struct tc_ckpt_result *res);

struct tc_ckpt_writer;

/* dir is copied. NULL on OOM or if the thread cannot start. */
struct tc_ckpt_writer *tc_ckpt_writer_new(const char *dir, int keep, size_t n_params,
                                          tc_ckpt_done_fn done, void *done_ctx);
/* Waits for any write in flight, then joins the thread. */
struct tc_ckpt_writer *tc_ckpt_writer_free(struct tc_ckpt_writer *w);
/* The snapshot buffer to fill (borrowed); waits while a write is in flight. */
struct tc_ckpt *tc_ckpt_writer_acquire(struct tc_ckpt_writer *w);
/* Starts writing the buffer filled after acquire. */
void tc_ckpt_writer_submit(struct tc_ckpt_writer *w);
/* Waits until nothing is in flight; returns the last write's error (0 if ok). */
int tc_ckpt_writer_wait(struct tc_ckpt_writer *w);
/* Nonzero while a write is in flight. */
int tc_ckpt_writer_busy(struct tc_ckpt_writer *w);

#endif
