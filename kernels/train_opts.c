/* The table of spotlab-train's options (train_opts.h).
 *
 * Help lines serve both --help and the cell language's help, so they speak
 * of the option, not of a flag or a statement. Defaults that depend on the
 * model or the machine are left NULL here, computed by spotlab-train's
 * main(), and stated in the help line. */
#include "train_opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sl_err.h"
#include "train.h"

const char *const tc_train_context_names[TC_OPT_N_CONTEXTS] = {"train", "eval", "sample", "gpt",
                                                               "mlp"};

#define T_ TC_OPT_TRAIN
#define E_ TC_OPT_EVAL
#define S_ TC_OPT_SAMPLE
#define GPT_ TC_OPT_GPT
#define MLP_ TC_OPT_MLP
/* strings borrow argv (size 0): struct tc_opts holds const char pointers */
#define ROWX(name, type, field, def, min, max, choices, metavar, example, contexts, flags, check,   \
             help)                                                                                 \
  {name, type, offsetof(struct tc_opts, field),                                                    \
   (type) == SL_OPT_STR ? 0 : sizeof(((struct tc_opts *)0)->field), def, min, max, choices, metavar, \
   example, help, NULL, contexts, flags, check}
#define ROW(name, type, field, def, min, max, choices, metavar, example, contexts, help)          \
  ROWX(name, type, field, def, min, max, choices, metavar, example, contexts, 0, NULL, help)
#define NOSTEPS 100000000

/* dropout: declared for the models' signatures, and refused above 0 wherever
 * it is given (a cell, the worker, the command line). */
static int dropout_zero(const char *text, char *why, size_t why_size) {
  if (strtod(text, NULL) == 0.0)
    return 0;
  snprintf(why, why_size, "%s: only 0 is supported (the training core has no dropout)", text);
  return SL_ECONFIG;
}

const struct sl_opt tc_train_opts[] = {
    ROW("model", SL_OPT_STR, model, "gpt", 0, 0, "gpt|mlp", NULL, NULL, 0, "the model to build"),
    ROW("data", SL_OPT_STR, data, NULL, 0, 0, NULL, "NAME", NULL, 0,
        "gpt: moby-dick (default) or a UTF-8 text file; mlp: fashion-mnist (default) or a folder "
        "of IDX .gz files"),
    ROW("layers", SL_OPT_INT, layers, NULL, 1, 64, NULL, NULL, "4", GPT_ | MLP_,
        "gpt: transformer blocks (default 4); mlp: hidden layers (default 2)"),
    ROW("heads", SL_OPT_INT, heads, "4", 1, 256, NULL, NULL, NULL, GPT_,
        "attention heads; must divide dim"),
    ROW("dim", SL_OPT_INT, dim, "128", 1, 8192, NULL, NULL, NULL, GPT_,
        "embedding width, the width of the residual stream"),
    ROW("ctx", SL_OPT_INT, ctx, "128", 1, 8192, NULL, NULL, NULL, GPT_,
        "context length in characters, the longest sequence attended over"),
    ROW("hidden", SL_OPT_INT, hidden, "256", 1, 65536, NULL, NULL, NULL, MLP_,
        "units in each hidden layer"),
    ROWX("dropout", SL_OPT_NUM, dropout, "0", 0, 1, NULL, NULL, NULL, GPT_ | MLP_, 0, dropout_zero,
         "dropout probability; only 0 is supported"),
    ROW("steps", SL_OPT_INT, steps, "1000", 0, NOSTEPS, NULL, NULL, "3000", T_,
        "optimiser steps in total"),
    ROW("batch", SL_OPT_INT, batch, "32", 1, 65536, NULL, NULL, NULL, T_ | E_,
        "sequences (gpt) or images (mlp) per step"),
    ROWX("lr", SL_OPT_NUM, lr, NULL, 0, 10, NULL, "RATE", "3e-4", T_, SL_OPT_ABOVE_MIN, NULL,
         "peak learning rate of AdamW, above 0 (default: gpt 3e-4, mlp 1e-3)"),
    ROW("warmup", SL_OPT_INT, warmup, NULL, 0, NOSTEPS, NULL, "STEPS", "100", T_,
        "steps of linear learning-rate warmup (default min(100, steps/10))"),
    ROW("weight_decay", SL_OPT_NUM, weight_decay, "0.1", 0, 1e30, NULL, NULL, NULL, T_,
        "AdamW decoupled decay of 2-D weights"),
    ROW("grad_clip", SL_OPT_NUM, grad_clip, "1.0", 0, 1e30, NULL, NULL, NULL, T_,
        "clip the global gradient norm to X; 0 = off"),
    ROW("seed", SL_OPT_U64, seed, "1", 0, 0, NULL, NULL, NULL, T_ | S_,
        "random seed for weights, data order and sampling"),
    ROW("threads", SL_OPT_INT, threads, NULL, 1, 256, NULL, NULL, "2", T_ | E_ | S_,
        "CPU threads (default: every CPU)"),
    ROW("eval_every", SL_OPT_INT, eval_every, "0", 0, NOSTEPS, NULL, "STEPS", "250", T_,
        "steps between evaluations; 0 = at the end only"),
    ROW("eval_batches", SL_OPT_INT, eval_batches, "8", 1, 100000, NULL, NULL, NULL, T_ | E_,
        "gpt: held-out batches per evaluation"),
    ROW("keep", SL_OPT_INT, keep, "3", 1, 1000000, NULL, NULL, NULL, T_, "newest checkpoints kept"),
    ROW("tokens", SL_OPT_INT, tokens, "200", 0, 1000000, NULL, NULL, NULL, S_,
        "characters to generate when sampling"),
    ROW("temperature", SL_OPT_NUM, temperature, "0.8", 0, 1e30, NULL, NULL, NULL, S_,
        "sampling temperature: the logits are divided by it; 0 = greedy"),
    ROW("top_k", SL_OPT_INT, top_k, "0", 0, 256, NULL, NULL, "40", S_,
        "sample among the N likeliest tokens; 0 = all"),
    ROW("device", SL_OPT_STR, device, "cpu", 0, 0, "cpu|cuda", NULL, NULL, 0, "where to run"),
    ROW("bf16", SL_OPT_FLAG, bf16, NULL, 0, 0, NULL, NULL, NULL, 0,
        "cuda: matrix products in bf16 (fp32 accumulation, fp32 master weights)"),
    ROW("gpus", SL_OPT_INT, gpus, "1", 1, 64, NULL, NULL, NULL, 0,
        "cuda: data-parallel ranks on this machine, one per GPU"),
    ROW("rank", SL_OPT_INT, rank, "0", 0, 65535, NULL, NULL, NULL, 0,
        "this process's rank with --world-size"),
    ROW("world_size", SL_OPT_INT, world_size, "1", 1, 65536, NULL, NULL, NULL, 0,
        "data-parallel ranks in all, one process each: NCCL on cuda, gloo on cpu"),
    ROW("rendezvous", SL_OPT_STR, rendezvous, NULL, 0, 0, NULL, "tcp://HOST:PORT", NULL, 0,
        "rank 0's address, reachable by every rank: where the ranks meet (cuda: the NCCL id; "
        "cpu: gloo addresses)"),
    ROW("dist_timeout", SL_OPT_INT, dist_timeout, "120", 1, 86400, NULL, "S", NULL, 0,
        "seconds a rank waits for the others (rendezvous; cpu: every exchange) before failing"),
    ROW("grad_slices", SL_OPT_INT, grad_slices, NULL, 1, 65536, NULL, "S", NULL, 0,
        "cpu: the batch as S slices, gradients summed in order, S/W per rank; one process with "
        "S = W matches W ranks bit for bit (default W)"),
    ROW("nccl_id", SL_OPT_STR, nccl_id, NULL, 0, 0, NULL, "HEX", NULL, 0,
        "the NCCL unique id as 256 hex digits (instead of --rendezvous)"),
    ROW("nccl", SL_OPT_FLAG, nccl, NULL, 0, 0, NULL, NULL, NULL, 0, "cuda: use NCCL even with one rank"),
    ROW("cuda_device", SL_OPT_INT, cuda_device, NULL, -1, 63, NULL, NULL, NULL, 0,
        "cuda: GPU index (default: the local rank)"),
    ROW("ckpt_dir", SL_OPT_STR, ckpt_dir, NULL, 0, 0, NULL, "DIR", NULL, 0,
        "checkpoint folder (default $SPOTLAB_CHECKPOINT_DIR)"),
    ROW("checkpoint_every", SL_OPT_INT, ckpt_every, "0", 0, NOSTEPS, NULL, "STEPS", NULL, 0,
        "steps between checkpoints; 0 = only at the end and on demand"),
    ROW("resume", SL_OPT_FLAG, resume, NULL, 0, 0, NULL, NULL, NULL, 0,
        "continue from the newest valid checkpoint of this run"),
    ROW("run_id", SL_OPT_STR, run_id, NULL, 0, 0, NULL, "ID", NULL, 0,
        "the run's identity in its checkpoints, 1-32 of A-Z a-z 0-9 . _ - (default: random at a "
        "fresh start, the checkpoint's on resume); resume takes only this run's checkpoints"),
    ROW("resume_other", SL_OPT_FLAG, resume_other, NULL, 0, 0, NULL, NULL, NULL, 0,
        "resume: continue the newest checkpoint even when another run wrote it (another run id, "
        "seed or data)"),
    ROW("force_new", SL_OPT_FLAG, force_new, NULL, 0, 0, NULL, NULL, NULL, 0,
        "start a new run in a checkpoint folder that holds checkpoints, moving them into a "
        "set-aside-* subfolder first"),
    ROW("metrics", SL_OPT_STR, metrics, NULL, 0, 0, NULL, "PATH|fd:N", NULL, 0,
        "JSON-lines metrics: PATH (appended) or fd:N (default stdout)"),
    ROW("control", SL_OPT_STR, control, NULL, 0, 0, NULL, "fd:N", NULL, 0,
        "read commands (\"checkpoint\") from fd N"),
    ROW("eval", SL_OPT_FLAG, eval_only, NULL, 0, 0, NULL, NULL, NULL, 0,
        "load the newest checkpoint and print the eval loss"),
    ROW("sample", SL_OPT_STR, sample, NULL, 0, 0, NULL, "PROMPT", NULL, 0,
        "gpt: load the newest checkpoint and continue PROMPT"),
    ROW("dump_init", SL_OPT_STR, dump_init, NULL, 0, 0, NULL, "FILE", NULL, 0,
        "write the initial parameters (raw float32) to FILE"),
    ROW("dump_batches", SL_OPT_STR, dump_batches, NULL, 0, 0, NULL, "FILE", NULL, 0,
        "write every training batch (raw int32/float32) to FILE"),
};
const size_t tc_train_opts_n = sizeof tc_train_opts / sizeof tc_train_opts[0];
_Static_assert(sizeof tc_train_opts / sizeof tc_train_opts[0] <= 64,
               "spotlab-train records the options given in a 64-bit mask");

unsigned tc_train_context(const char *name) {
  for (size_t i = 0; name && i < TC_OPT_N_CONTEXTS; i++)
    if (!strcmp(tc_train_context_names[i], name))
      return 1u << i;
  return 0;
}

int tc_train_opt_check(const struct sl_opt *o, const char *label, const char *text, char *err,
                       size_t err_size) {
  struct tc_opts scratch = {0};
  return sl_opt_set(o, &scratch, label, text, err, err_size);
}
