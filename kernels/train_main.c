/* spotlab-train: command line of the training core.
 *
 * Options are declared once in train_opts.c's table (name, type, default,
 * bounds, help, where the cell language has them); the option engine
 * (sl_opt.h) fills struct tc_opts from it and checks each value's bounds,
 * and main() checks what spans options. Usage errors exit 2, runtime errors
 * exit 1 (decided in train_loop.c), success 0. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "sl_err.h"
#include "sl_log.h"
#include "sl_opt.h"
#include "tc_ckpt.h"
#include "tc_cuda_api.h"
#include "train.h"
#include "train_opts.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: spotlab-train --model gpt|mlp [options]\n"
          "       spotlab-train --sample PROMPT --ckpt-dir DIR [--tokens N --temperature T "
          "--top-k K]\n"
          "       spotlab-train --eval --ckpt-dir DIR [--data NAME]\n"
          "       spotlab-train --check FILE...\n"
          "       spotlab-train --check-cuda\n"
          "       spotlab-train --describe-options --json\n\noptions:\n");
  sl_opt_usage(tc_train_opts, tc_train_opts_n, f);
  fprintf(f, "\nactions:\n");
  fprintf(f, "  %-22s %s\n", "--check FILE...",
          "verify each checkpoint file (header, layout, section checksums); no training");
  fprintf(f, "  %-22s %s\n", "--check-cuda",
          "whether --device cuda can run here: the CUDA backend loads and sees a GPU");
  fprintf(f, "  --describe-options --json\n  %-22s %s\n", "",
          "print the options listed under \"options:\" as JSON (name, type, default, bounds, "
          "help, contexts)");
  fprintf(f, "  %-22s %s\n", "--help", "this text");
  fprintf(f, "  %-22s %s\n", "--version", "the version");
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

/* --describe-options --json: the option table as a JSON array, for tools and
 * for the test that holds the kernel and the worker to it. */
static int describe(int argc, char **argv) {
  if (argc != 3 || strcmp(argv[2], "--json") != 0)
    return bad("--describe-options takes --json (the only format)");
  json_t *all = sl_opt_describe(tc_train_opts, tc_train_opts_n, tc_train_context_names,
                                TC_OPT_N_CONTEXTS);
  char *text = all ? json_dumps(all, JSON_INDENT(1) | JSON_PRESERVE_ORDER) : NULL;
  json_decref(all);
  if (!text) {
    fprintf(stderr, "spotlab-train: out of memory\n");
    return 1;
  }
  int ok = puts(text) >= 0 && fflush(stdout) == 0;
  free(text);
  return ok ? 0 : 1;
}

/* Whether the option named name was given on the command line. */
static int was_given(uint64_t given, const char *name) {
  const struct sl_opt *d = sl_opt_find(tc_train_opts, tc_train_opts_n, name);
  return d && (given >> (d - tc_train_opts) & 1);
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

/* --check-cuda: whether --device cuda can run here; the reason when not. */
static int check_cuda(int argc) {
  if (argc != 2) return bad("--check-cuda takes no other option");
  char err[1024];
  const struct tc_cuda_api *cu = tc_cuda_load(err, sizeof err);
  int n = cu ? cu->device_count() : 0;
  if (cu && n > 0) {
    printf("CUDA: %d GPU%s\n", n, n == 1 ? "" : "s");
    return 0;
  }
  if (cu)
    snprintf(err, sizeof err, "%s", n < 0 ? "the CUDA driver is not usable here (the driver is "
                                            "missing or older than the CUDA runtime)"
                                          : "CUDA sees no GPU");
  fprintf(stderr, "spotlab-train: %s\n", err);
  return 1;
}

int main(int argc, char **argv) {
  sl_log_init("spotlab-train");
  if (argc >= 2 && !strcmp(argv[1], "--check")) return check_files(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "--check-cuda")) return check_cuda(argc);
  if (argc >= 2 && !strcmp(argv[1], "--describe-options")) return describe(argc, argv);
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  /* the table's defaults, then those it leaves to the machine and the model */
  struct tc_opts o = {0};
  sl_opt_defaults(tc_train_opts, tc_train_opts_n, &o);
  o.threads = ncpu > 0 ? ncpu : 1;
  o.cuda_device = -1;
  o.ckpt_dir = getenv("SPOTLAB_CHECKPOINT_DIR");
  uint64_t given = 0; /* bit k: tc_train_opts[k] was on the command line */
  for (int i = 1; i < argc;) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    }
    if (!strcmp(a, "--version")) {
      printf("spotlab-train %s\n", SPOTLAB_VERSION);
      return 0;
    }
    char err[512];
    int k = sl_opt_parse_arg(tc_train_opts, tc_train_opts_n, &o, argc, argv, &i, err, sizeof err);
    if (k < 0) return bad("%s", err);
    given |= UINT64_C(1) << k;
  }
  o.set_layers = was_given(given, "layers");
  o.set_lr = was_given(given, "lr");
  o.set_data = was_given(given, "data");
  o.set_warmup = was_given(given, "warmup");
  o.set_batch = was_given(given, "batch");
  const struct tc_model_ops *mo = tc_model_find(o.model);
  char names[128], why[256] = "";
  if (!mo) return bad("unknown model '%s' (%s)", o.model, tc_model_names(names, sizeof names));
  if (o.control && strncmp(o.control, "fd:", 3) != 0)
    return bad("--control takes fd:N, not '%s'", o.control);
  if (o.sample && o.eval_only) return bad("--sample and --eval exclude each other");
  if ((o.sample || o.eval_only || o.resume) && !o.ckpt_dir)
    return bad("--sample, --eval and --resume need --ckpt-dir");
  if (o.run_id && !tc_run_id_valid(o.run_id))
    return bad("--run-id takes 1 to %d of A-Z a-z 0-9 . _ -, not '%s'", TC_RUN_ID_MAX, o.run_id);
  if (o.resume_other && !o.resume) return bad("--resume-other goes with --resume");
  if (o.force_new && o.resume)
    return bad("--force-new starts a new run and --resume continues one: give one of them");
  mo->opts_defaults(&o); /* the model's own layers and lr, where not given */
  if (o.lr <= 0.0 || o.lr > 10.0) return bad("--lr must be in (0, 10]");
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
