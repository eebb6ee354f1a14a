/* The training step on the chosen device, and data parallelism.
 *
 * spotlab-train's loop talks to this module only: it dispatches forward,
 * backward, clipping and AdamW to the CPU path (tc_model.h) or the CUDA
 * backend (cuda/tc_cuda.h). The loop hands every rank the same global batch
 * of B rows, cut into S equal slices (S = --grad-slices, by default the world
 * size W; S is a multiple of W): slice s is rows [B s/S, B (s+1)/S), rank r
 * computes slices [r S/W, (r+1) S/W) one after the other, adding their
 * gradients in slice order, and the ranks' sums are added over ranks —
 * through NCCL (CUDA) or through a gloo group in rank order (CPU,
 * tc_group.h). Losses and stop flags are summed the same way, so all ranks
 * take the same update. The host model always holds the layout and the host
 * copies of params/m/v that checkpoints are made from. */
#ifndef TC_TRAIN_DEV_H
#define TC_TRAIN_DEV_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tc_model.h"

#define TC_MAX_LOCAL_GPUS 64

struct tc_dev_opts {
  const char *device;       /* "cpu" | "cuda" */
  int bf16, nccl;           /* --bf16; --nccl: communicator even for world size 1 */
  long gpus;                /* --gpus N: fork N ranks on this machine */
  long rank, world;         /* --rank R --world-size W (one process per rank) */
  long cuda_device;         /* --cuda-device D; -1: the rank for forked ranks, else 0 */
  long grad_slices;         /* --grad-slices S; 0: the world size */
  const char *rendezvous;   /* tcp://HOST:PORT */
  const char *nccl_id;      /* 256 hex digits */
  int timeout_ms;           /* rendezvous, and each CPU collective */
};

/* Which rank this process is; caller-allocated. */
struct tc_launch {
  int rank, world, forked;
  int fds[TC_MAX_LOCAL_GPUS];    /* rank 0: write ends [1..world); child: read end in [0] */
  pid_t pids[TC_MAX_LOCAL_GPUS]; /* rank 0 of a forked run: the children */
};

/* Decides rank and world size; with --gpus N > 1 forks the other ranks here,
 * so it must run before any thread or CUDA call. */
int tc_launch_start(const struct tc_dev_opts *o, struct tc_launch *ret, char *err, size_t es);
/* Rank 0 of a forked run: waits for the children (killing them first when
 * ok == 0, since they would wait in a collective for ever). 0 if all exited 0. */
int tc_launch_finish(struct tc_launch *l, int ok);

struct tc_dev;

/* Slices of the global batch for these options (S above); the CPU path's
 * host model needs activations for batch / S rows. */
int tc_dev_slices(const struct tc_dev_opts *o, const struct tc_launch *l);

/* Backend for host model `host` (borrowed for the life of the device) and
 * global batch size `batch` rows; joins the other ranks when there are any.
 * CPU: host must have activations for batch / tc_dev_slices rows. CUDA: host
 * needs only its buffers (tc_model_new_buffers). */
int tc_dev_new(const struct tc_dev_opts *o, struct tc_launch *l, struct tc_model *host,
               int batch, struct tc_dev **ret, char *err, size_t es);
struct tc_dev *tc_dev_free(struct tc_dev *d);
int tc_dev_rank(const struct tc_dev *d);
int tc_dev_world(const struct tc_dev *d);
int tc_dev_distributed(const struct tc_dev *d);
const char *tc_dev_describe(const struct tc_dev *d, char *buf, size_t size);
size_t tc_dev_mem_bytes(const struct tc_dev *d);

/* Host model state (params, m, v, adam_t) -> device; with NCCL rank 0's state
 * and the `shared` bytes (run metadata) go to every rank. */
int tc_dev_start(struct tc_dev *d, void *shared, size_t shared_bytes);
/* Forward (evaluation, sampling) over this rank's slices of the global batch
 * b. *ret_loss: the mean over the whole global batch (summed over slices and
 * ranks), *ret_correct likewise. */
int tc_dev_forward(struct tc_dev *d, const struct tc_batch *b, double *ret_loss,
                   int64_t *ret_correct);
/* One training step's gradients: forward and backward over this rank's
 * slices of b, summed over slices and ranks; *ret_loss as above. */
int tc_dev_grads(struct tc_dev *d, const struct tc_batch *b, double *ret_loss);
int tc_dev_clip(struct tc_dev *d, float max_norm, double *ret_norm);
int tc_dev_adamw(struct tc_dev *d, const struct tc_adamw *hp, float lr);
/* Device -> host model (params, m, v, adam_t), for a checkpoint. */
int tc_dev_to_host(struct tc_dev *d);
/* Sums n small flags over ranks in place (no-op for one process). */
int tc_dev_agree(struct tc_dev *d, int *flags, int n);
/* A generating model, after a forward without targets: host pointer to
 * logits rows [0, rows). */
const float *tc_dev_logits(struct tc_dev *d, size_t rows);
/* Why the last collective failed (a rank died, a timeout), or "". */
const char *tc_dev_error(const struct tc_dev *d);

#endif
