/* spotlab-train's options and the three things it runs: train, eval, sample. */
#ifndef TC_TRAIN_H
#define TC_TRAIN_H

#include <stdint.h>

struct tc_opts {
  const char *model, *data, *device, *ckpt_dir, *metrics, *control;
  const char *dump_init, *dump_batches, *sample;
  const char *rendezvous, *nccl_id;             /* data parallelism across machines */
  const char *run_id;                           /* NULL: random at a fresh start */
  long gpus, rank, world_size, cuda_device;     /* cuda_device -1: the local rank */
  long grad_slices, dist_timeout;               /* slices of the batch (0: the world size); s */
  int bf16, nccl;
  long layers, heads, dim, ctx, hidden, batch, steps, threads, ckpt_every, eval_every;
  long warmup, keep, tokens, top_k, eval_batches;
  double lr, weight_decay, grad_clip, temperature, dropout;
  uint64_t seed;
  int resume, eval_only;
  int resume_other, force_new; /* what --resume and a fresh start may do to another run */
  /* which options were given on the command line (for model-kind defaults) */
  int set_layers, set_lr, set_data, set_warmup, set_batch;
};

/* Each returns the process exit status: 0 ok, 1 runtime error. */
int tc_run_train(const struct tc_opts *o);
int tc_run_eval(const struct tc_opts *o);
int tc_run_sample(const struct tc_opts *o);

#endif
