/* spotlab-train: command line of the training core.
 *
 * Options are declared once in the table below (name, kind, help); parsing
 * fills struct tc_opts and checks bounds. Usage errors exit 2, runtime errors
 * exit 1 (decided in train_loop.c), success 0. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sl_err.h"
#include "sl_log.h"
#include "tc_ckpt.h"
#include "train.h"

enum kind { K_STR, K_LONG, K_DBL, K_U64, K_FLAG };

struct opt {
  const char *name;
  enum kind kind;
  size_t off;
  long min, max; /* K_LONG bounds */
  const char *help;
};

#define O_(f) offsetof(struct tc_opts, f)
static const struct opt OPTS[] = {
    {"model", K_STR, O_(model), 0, 0, "gpt | mlp (default gpt)"},
    {"data", K_STR, O_(data), 0, 0,
     "gpt: moby-dick or a UTF-8 text file; mlp: fashion-mnist or a folder of IDX .gz files"},
    {"layers", K_LONG, O_(layers), 1, 64, "gpt: transformer blocks (4); mlp: hidden layers (2)"},
    {"heads", K_LONG, O_(heads), 1, 256, "gpt: attention heads (4)"},
    {"dim", K_LONG, O_(dim), 1, 8192, "gpt: embedding width (128)"},
    {"ctx", K_LONG, O_(ctx), 1, 8192, "gpt: context length in characters (128)"},
    {"hidden", K_LONG, O_(hidden), 1, 65536, "mlp: hidden width (256)"},
    {"dropout", K_DBL, O_(dropout), 0, 0, "dropout probability; only 0 is supported"},
    {"batch", K_LONG, O_(batch), 1, 65536, "sequences (gpt) or images (mlp) per step (32)"},
    {"lr", K_DBL, O_(lr), 0, 0, "peak learning rate (gpt 3e-4, mlp 1e-3)"},
    {"steps", K_LONG, O_(steps), 0, 100000000, "training steps in total (1000)"},
    {"warmup", K_LONG, O_(warmup), 0, 100000000, "linear warmup steps (min(100, steps/10))"},
    {"weight-decay", K_DBL, O_(weight_decay), 0, 0, "AdamW decay of 2-D weights (0.1)"},
    {"grad-clip", K_DBL, O_(grad_clip), 0, 0, "clip the global gradient norm; 0 = off (1.0)"},
    {"seed", K_U64, O_(seed), 0, 0, "random seed for weights, data order and sampling (1)"},
    {"threads", K_LONG, O_(threads), 1, 256, "CPU threads (number of CPUs)"},
    {"device", K_STR, O_(device), 0, 0, "cpu | cuda (cpu)"},
    {"bf16", K_FLAG, O_(bf16), 0, 0,
     "cuda: matrix products in bf16 (fp32 accumulation, fp32 master weights)"},
    {"gpus", K_LONG, O_(gpus), 1, 64, "cuda: data-parallel ranks on this machine, one per GPU (1)"},
    {"rank", K_LONG, O_(rank), 0, 65535, "this process's rank with --world-size (0)"},
    {"world-size", K_LONG, O_(world_size), 1, 65536,
     "data-parallel ranks in all, one process each: NCCL on cuda, gloo on cpu (1)"},
    {"rendezvous", K_STR, O_(rendezvous), 0, 0,
     "tcp://HOST:PORT of rank 0, reachable by every rank: where the ranks meet (cuda: the NCCL "
     "id; cpu: gloo addresses)"},
    {"dist-timeout", K_LONG, O_(dist_timeout), 1, 86400,
     "seconds a rank waits for the others (rendezvous; cpu: every exchange) before failing (120)"},
    {"grad-slices", K_LONG, O_(grad_slices), 1, 65536,
     "cpu: the batch as S slices, gradients summed in order, S/W per rank; one process with "
     "S = W matches W ranks bit for bit (W)"},
    {"nccl-id", K_STR, O_(nccl_id), 0, 0, "the NCCL unique id as 256 hex digits (instead of --rendezvous)"},
    {"nccl", K_FLAG, O_(nccl), 0, 0, "cuda: use NCCL even with one rank"},
    {"cuda-device", K_LONG, O_(cuda_device), -1, 63, "cuda: GPU index (the local rank)"},
    {"ckpt-dir", K_STR, O_(ckpt_dir), 0, 0, "checkpoint folder ($SPOTLAB_CHECKPOINT_DIR)"},
    {"checkpoint-every", K_LONG, O_(ckpt_every), 0, 100000000,
     "steps between checkpoints; 0 = only at the end and on demand (0)"},
    {"keep", K_LONG, O_(keep), 1, 1000000, "newest checkpoints kept (3)"},
    {"resume", K_FLAG, O_(resume), 0, 0, "continue from the newest valid checkpoint"},
    {"metrics", K_STR, O_(metrics), 0, 0, "JSON-lines metrics: PATH (appended) or fd:N (stdout)"},
    {"eval-every", K_LONG, O_(eval_every), 0, 100000000,
     "steps between evaluations; 0 = at the end only (0)"},
    {"eval-batches", K_LONG, O_(eval_batches), 1, 100000, "gpt: held-out batches per evaluation (8)"},
    {"control", K_STR, O_(control), 0, 0, "fd:N: read commands (\"checkpoint\") from fd N"},
    {"eval", K_FLAG, O_(eval_only), 0, 0, "load the newest checkpoint and print the eval loss"},
    {"sample", K_STR, O_(sample), 0, 0, "gpt: load the newest checkpoint and continue PROMPT"},
    {"tokens", K_LONG, O_(tokens), 0, 1000000, "characters to generate with --sample (200)"},
    {"temperature", K_DBL, O_(temperature), 0, 0, "sampling temperature; 0 = greedy (0.8)"},
    {"top-k", K_LONG, O_(top_k), 0, 256, "sample from the k likeliest; 0 = all (0)"},
    {"dump-init", K_STR, O_(dump_init), 0, 0, "write the initial parameters (raw float32) to FILE"},
    {"dump-batches", K_STR, O_(dump_batches), 0, 0,
     "write every training batch (raw int32/float32) to FILE"},
};
#undef O_

static void usage(FILE *f) {
  fprintf(f,
          "usage: spotlab-train --model gpt|mlp [options]\n"
          "       spotlab-train --sample PROMPT --ckpt-dir DIR [--tokens N --temperature T "
          "--top-k K]\n"
          "       spotlab-train --eval --ckpt-dir DIR [--data NAME]\n"
          "       spotlab-train --check FILE...\n\noptions:\n");
  for (size_t i = 0; i < sizeof OPTS / sizeof OPTS[0]; i++) {
    const struct opt *o = &OPTS[i];
    char left[48];
    snprintf(left, sizeof left, "--%s%s", o->name, o->kind == K_FLAG ? "" : " X");
    fprintf(f, "  %-22s %s\n", left, o->help);
  }
  fprintf(f, "  %-22s %s\n", "--check FILE...",
          "verify each checkpoint file (header, layout, section checksums); no training");
  fprintf(f, "  %-22s %s\n", "--help", "this text");
  fprintf(f, "\nexit status: 0 ok (also after SIGTERM, once the checkpoint is durable), "
             "1 runtime error, 2 usage error\n");
}

__attribute__((format(printf, 1, 2))) static int bad(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "spotlab-train: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n(try --help)\n");
  va_end(ap);
  return 2;
}

static int set_value(struct tc_opts *o, const struct opt *d, const char *v) {
  char *end;
  void *p = (char *)o + d->off;
  errno = 0;
  switch (d->kind) {
  case K_STR: *(const char **)p = v; return 0;
  case K_LONG: {
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < d->min || x > d->max) return -1;
    *(long *)p = x;
    return 0;
  }
  case K_U64: {
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-') return -1;
    *(uint64_t *)p = x;
    return 0;
  }
  case K_DBL: {
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= 0.0 && x < 1e30)) return -1;
    *(double *)p = x;
    return 0;
  }
  case K_FLAG: return -1;
  }
  return -1;
}

/* --check FILE...: one line per file, "FILE: ok step N" or the reason it is
 * not a valid checkpoint; exit 0 when every file is valid, 1 otherwise. */
static int check_files(int n, char **paths) {
  int bad_files = 0;
  if (n == 0) return bad("--check needs at least one FILE");
  for (int i = 0; i < n; i++) {
    struct tc_ckpt *ck = NULL;
    char err[512] = "";
    int r = tc_ckpt_read(paths[i], NULL, &ck, err, sizeof err);
    if (r < 0) {
      printf("%s\n", err[0] ? err : sl_strerror(r));
      bad_files++;
      continue;
    }
    printf("%s: ok step %llu\n", paths[i], (unsigned long long)ck->meta.step);
    tc_ckpt_free(ck);
  }
  return bad_files ? 1 : 0;
}

int main(int argc, char **argv) {
  sl_log_init("spotlab-train");
  if (argc >= 2 && !strcmp(argv[1], "--check")) return check_files(argc - 2, argv + 2);
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  struct tc_opts o = {
      .model = "gpt", .device = "cpu", .layers = 4, .heads = 4, .dim = 128, .ctx = 128,
      .hidden = 256, .batch = 32, .steps = 1000, .threads = ncpu > 0 ? ncpu : 1, .keep = 3,
      .eval_batches = 8, .tokens = 200, .lr = 3e-4, .weight_decay = 0.1, .grad_clip = 1.0,
      .temperature = 0.8, .seed = 1, .gpus = 1, .world_size = 1, .cuda_device = -1, .dist_timeout = 120, .ckpt_dir = getenv("SPOTLAB_CHECKPOINT_DIR")};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    }
    if (strncmp(a, "--", 2) != 0) return bad("unexpected argument '%s'", a);
    const char *name = a + 2, *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    const struct opt *d = NULL;
    for (size_t k = 0; k < sizeof OPTS / sizeof OPTS[0]; k++)
      if (strlen(OPTS[k].name) == len && !strncmp(OPTS[k].name, name, len)) d = &OPTS[k];
    if (!d) return bad("unknown option '%s'", a);
    if (d->kind == K_FLAG) {
      if (eq) return bad("option --%s takes no value", d->name);
      *(int *)((char *)&o + d->off) = 1;
      continue;
    }
    const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
    if (!v) return bad("option --%s needs a value", d->name);
    if (set_value(&o, d, v) < 0) return bad("bad value '%s' for --%s", v, d->name);
    if (!strcmp(d->name, "layers")) o.set_layers = 1;
    if (!strcmp(d->name, "lr")) o.set_lr = 1;
    if (!strcmp(d->name, "data")) o.set_data = 1;
    if (!strcmp(d->name, "warmup")) o.set_warmup = 1;
    if (!strcmp(d->name, "batch")) o.set_batch = 1;
  }
  const struct tc_model_ops *mo = tc_model_find(o.model);
  char names[128], why[256] = "";
  if (!mo) return bad("unknown model '%s' (%s)", o.model, tc_model_names(names, sizeof names));
  if (strcmp(o.device, "cpu") && strcmp(o.device, "cuda"))
    return bad("unknown device '%s' (cpu or cuda)", o.device);
  if (o.dropout != 0.0)
    return bad("--dropout: only 0 is supported (the training core has no dropout)");
  if (o.lr <= 0.0 || o.lr > 10.0) return bad("--lr must be in (0, 10]");
  if (o.control && strncmp(o.control, "fd:", 3) != 0)
    return bad("--control takes fd:N, not '%s'", o.control);
  if (o.sample && o.eval_only) return bad("--sample and --eval exclude each other");
  if ((o.sample || o.eval_only || o.resume) && !o.ckpt_dir)
    return bad("--sample, --eval and --resume need --ckpt-dir");
  if (mo->opts_defaults) mo->opts_defaults(&o);
  if (!o.set_data) o.data = mo->default_data;
  struct tc_config probe;
  tc_config_init(&probe, mo);
  if (mo->from_opts(tc_config_model(&probe), &o, why, sizeof why) < 0) return bad("%s", why);
  if (!o.set_warmup) o.warmup = o.steps / 10 < 100 ? o.steps / 10 : 100;
  if (o.rendezvous && o.nccl_id) return bad("--rendezvous and --nccl-id exclude each other");
  int cpu = !strcmp(o.device, "cpu");
  long ranks = o.gpus > o.world_size ? o.gpus : o.world_size;
  if (cpu && (o.gpus > 1 || o.nccl || o.bf16 || o.nccl_id))
    return bad("--gpus, --nccl, --nccl-id and --bf16 need --device cuda (on the CPU, start one "
               "process per rank with --rank, --world-size and --rendezvous)");
  if (cpu && o.world_size > 1 && !o.rendezvous)
    return bad("--world-size %ld on the CPU needs --rendezvous tcp://HOST:PORT", o.world_size);
  if (o.rank >= o.world_size) return bad("--rank must be below --world-size");
  if ((o.gpus > 1 || o.world_size > 1) && (o.sample || o.eval_only))
    return bad("--sample and --eval run in one process");
  if (o.batch % ranks) return bad("--batch must be a multiple of the number of ranks");
  if (o.grad_slices && (o.grad_slices % ranks || o.batch % o.grad_slices))
    return bad("--grad-slices must be a multiple of the number of ranks (%ld) and divide --batch",
               ranks);
  if (o.grad_slices && !cpu && o.grad_slices != ranks)
    return bad("--grad-slices: the CUDA path computes one slice per rank");
#if !TC_HAVE_CUDA
  if (!strcmp(o.device, "cuda")) {
    fprintf(stderr, "spotlab-train: --device cuda: this spotlab-train was built without CUDA "
                    "(reconfigure with -Dcuda=enabled on a machine with nvcc), use --device cpu\n");
    return 1;
  }
#endif
#if !TC_HAVE_GLOO
  if (cpu && o.world_size > 1) {
    fprintf(stderr, "spotlab-train: --world-size %ld with --device cpu needs gloo, and this "
                    "spotlab-train was built without it (install libgloo-dev and reconfigure the "
                    "build)\n", o.world_size);
    return 1;
  }
#endif
  if (o.sample) return tc_run_sample(&o);
  if (o.eval_only) return tc_run_eval(&o);
  return tc_run_train(&o);
}
