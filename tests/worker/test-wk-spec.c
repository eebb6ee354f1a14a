/* Spec → argv for every kind and option, the device a job runs on against
 * this instance's GPUs (a CPU-only instance, and fake inventories with
 * GPUs), and the refusals. */
#include "harness.h"

#include "sl_err.h"
#include "spec.h"

#include <errno.h>

static const struct wk_gpu_inventory no_gpus = {.reason = "no NVIDIA driver library (libnvidia-ml.so.1)"};
static const struct wk_gpu_inventory two_a10g = {2, "NVIDIA A10G", 22731, "550.54.15", "", ""};
static const struct wk_gpu_inventory two_a10g_no_cuda = {
    2, "NVIDIA A10G", 22731, "550.54.15", "",
    "cannot load the CUDA backend (libcublasLt.so.13: cannot open shared object file)"};

static struct wk_spec_paths paths = {.train = "/opt/spotlab-train", .ckpt_dir = "/w/jobs/J1/ckpt",
                                     .metrics_fd = 3, .control_fd = 4, .gpus = &no_gpus,
                                     .instance_type = "local.cpu", .train_cuda = true};

/* Builds argv and joins it with spaces into out; returns the build result. */
static int joined(enum wk_kind kind, const char *spec_json, const struct wk_spec_paths *p, char *out,
                  size_t size, char *err) {
  json_error_t je;
  json_t *spec = json_loads(spec_json, 0, &je);
  if (!spec) {
    fprintf(stderr, "bad test JSON: %s\n", je.text);
    return -1;
  }
  char **argv = NULL;
  int r = wk_spec_build_argv(kind, spec, p, &argv, err, 256);
  json_decref(spec);
  out[0] = 0;
  if (r < 0) return r;
  for (size_t i = 0; argv[i]; i++) {
    if (i) strncat(out, " ", size - strlen(out) - 1);
    strncat(out, argv[i], size - strlen(out) - 1);
  }
  wk_argv_free(argv);
  return r;
}

static void test_train_every_option(void) {
  char out[2048], err[256];
  const char *spec =
      "{\"model\":{\"name\":\"m\",\"kind\":\"model\",\"spec\":{\"type\":\"gpt\",\"args\":[],"
      "\"options\":{\"layers\":4,\"heads\":{\"t\":\"num\",\"v\":4},\"dim\":128,\"ctx\":64,\"dropout\":0}}},"
      "\"data\":{\"type\":\"text\",\"args\":[\"moby-dick\"]},"
      "\"options\":{\"steps\":3000,\"batch\":32,\"lr\":0.0003,\"seed\":7,\"warmup\":50,"
      "\"weight_decay\":0.05,\"grad_clip\":\"0.5\",\"eval_every\":250,\"eval_batches\":4,\"keep\":2,"
      "\"threads\":2,\"device\":\"cpu\",\"checkpoint_every\":100,\"gpus\":0,\"spot\":\"yes\","
      "\"max_price\":0.6,\"deadline\":{\"t\":\"dur\",\"v\":10800000000}}}";
  CHECK_INT(joined(WK_KIND_TRAIN, spec, &paths, out, sizeof out, err), 0);
  CHECK_STR(out, "/opt/spotlab-train --model gpt --layers 4 --heads 4 --dim 128 --ctx 64 --dropout 0 "
                 "--data moby-dick --checkpoint-every 100 --ckpt-dir /w/jobs/J1/ckpt --metrics fd:3 "
                 "--control fd:4 --steps 3000 --batch 32 --lr 0.0003 --seed 7 --warmup 50 "
                 "--weight-decay 0.05 --grad-clip 0.5 --eval-every 250 --eval-batches 4 --keep 2 "
                 "--threads 2 --device cpu");
  /* the assign's interval wins over the spec's; --resume when restoring,
   * with the job's run id */
  struct wk_spec_paths p = paths;
  p.checkpoint_every = 40;
  p.resume = true;
  p.run_id = "J1";
  CHECK_INT(joined(WK_KIND_TRAIN,
                   "{\"model\":{\"type\":\"mlp\",\"options\":{\"hidden\":256,\"layers\":2}},"
                   "\"data\":{\"type\":\"fashion_mnist\",\"args\":[]},"
                   "\"options\":{\"checkpoint_every\":\"auto\"}}",
                   &p, out, sizeof out, err), 0);
  CHECK_STR(out, "/opt/spotlab-train --model mlp --hidden 256 --layers 2 --data fashion-mnist "
                 "--checkpoint-every 40 --resume --run-id J1 --ckpt-dir /w/jobs/J1/ckpt --metrics fd:3 "
                 "--control fd:4");
  CHECK_INT(joined(WK_KIND_TRAIN,
                   "{\"model\":{\"type\":\"gpt\"},\"data\":{\"type\":\"text\",\"args\":[\"/d/t.txt\"]},"
                   "\"options\":{\"checkpoint_every\":\"auto\"}}",
                   &paths, out, sizeof out, err), 0);
  CHECK_STR(out, "/opt/spotlab-train --model gpt --data /d/t.txt --ckpt-dir /w/jobs/J1/ckpt "
                 "--metrics fd:3 --control fd:4");
}

static void test_other_kinds(void) {
  char out[2048], err[256];
  CHECK_INT(joined(WK_KIND_EVAL, "{\"model\":{\"type\":\"gpt\"},\"data\":{\"type\":\"text\",\"args\":[\"moby-dick\"]},"
                                 "\"options\":{\"steps\":10,\"threads\":1}}",
                   &paths, out, sizeof out, err), 0);
  CHECK_STR(out, "/opt/spotlab-train --eval --data moby-dick --ckpt-dir /w/jobs/J1/ckpt --metrics fd:3 --threads 1");
  /* eval takes what spotlab-train --eval uses: batch and eval_batches, not steps */
  CHECK_INT(joined(WK_KIND_EVAL, "{\"data\":\"d\",\"options\":{\"batch\":8,\"eval_batches\":2,\"steps\":5}}",
                   &paths, out, sizeof out, err), 0);
  CHECK_STR(out, "/opt/spotlab-train --eval --data d --ckpt-dir /w/jobs/J1/ckpt --metrics fd:3 --batch 8 "
                 "--eval-batches 2");
  CHECK_INT(joined(WK_KIND_SAMPLE, "{\"options\":{\"prompt\":\"Call me\",\"tokens\":200,"
                                   "\"temperature\":0.8,\"top_k\":10,\"seed\":3}}",
                   &paths, out, sizeof out, err), 0);
  CHECK_STR(out, "/opt/spotlab-train --sample Call me --ckpt-dir /w/jobs/J1/ckpt --metrics fd:3 "
                 "--tokens 200 --temperature 0.8 --top-k 10 --seed 3");
  /* no prompt: the model's text from its start; one that is not a string is refused */
  CHECK_INT(joined(WK_KIND_SAMPLE, "{\"options\":{\"tokens\":20}}", &paths, out, sizeof out, err), 0);
  CHECK_STR(out, "/opt/spotlab-train --sample  --ckpt-dir /w/jobs/J1/ckpt --metrics fd:3 --tokens 20");
  CHECK_INT(joined(WK_KIND_RUN, "{\"script\":\"python3 train.py\\necho done\"}", &paths, out, sizeof out, err), 0);
  CHECK_STR(out, "/bin/sh -e -c python3 train.py\necho done");
}

/* The training options of a small gpt job with options opts (a JSON object body). */
static int train_with(const char *opts, const struct wk_spec_paths *p, char *out, size_t size, char *err) {
  char spec[512];
  snprintf(spec, sizeof spec, "{\"model\":{\"type\":\"gpt\"},\"data\":\"d.txt\",\"options\":{%s}}", opts);
  return joined(WK_KIND_TRAIN, spec, p, out, size, err);
}

#define TAIL "/opt/spotlab-train --model gpt --data d.txt --ckpt-dir /w/jobs/J1/ckpt --metrics fd:3 --control fd:4"

static void test_device_with_gpus(void) {
  char out[2048], err[256];
  struct wk_spec_paths p = paths;
  p.gpus = &two_a10g;
  p.instance_type = "g5.12xlarge";
  /* gpus=N: --device cuda, --gpus only past one, bf16 by default on GPUs */
  CHECK_INT(train_with("\"gpus\":2", &p, out, sizeof out, err), 0);
  CHECK_STR(out, TAIL " --device cuda --gpus 2 --bf16");
  CHECK_INT(train_with("\"gpus\":1", &p, out, sizeof out, err), 0);
  CHECK_STR(out, TAIL " --device cuda --bf16");
  CHECK_INT(train_with("\"gpus\":2,\"precision\":\"fp32\"", &p, out, sizeof out, err), 0);
  CHECK_STR(out, TAIL " --device cuda --gpus 2");
  CHECK_INT(train_with("\"gpus\":1,\"precision\":{\"t\":\"str\",\"v\":\"bf16\"}", &p, out, sizeof out, err), 0);
  CHECK_STR(out, TAIL " --device cuda --bf16");
  /* no gpus option: one GPU when there is one and spotlab-train has CUDA */
  CHECK_INT(train_with("\"steps\":5", &p, out, sizeof out, err), 0);
  CHECK_STR(out, TAIL " --steps 5 --device cuda --bf16");
  struct wk_spec_paths nocuda = p;
  nocuda.train_cuda = false;
  nocuda.gpus = &two_a10g_no_cuda;
  CHECK_INT(train_with("\"steps\":5", &nocuda, out, sizeof out, err), 0);
  CHECK_STR(out, TAIL " --steps 5");
  /* ... and a job that asks for them is told why not, never run on the CPU */
  CHECK_INT(train_with("\"gpus\":1", &nocuda, out, sizeof out, err), SL_ECUDA);
  CHECK_STR(err, "gpus=1 asked, but spotlab-train cannot use this instance's GPUs: cannot load the "
                 "CUDA backend (libcublasLt.so.13: cannot open shared object file)");
  CHECK_INT(train_with("\"device\":\"cuda\"", &nocuda, out, sizeof out, err), SL_ECUDA);
  CHECK(strstr(err, "device=cuda asked, but spotlab-train cannot use") == err);
  CHECK_INT(train_with("\"precision\":\"bf16\"", &nocuda, out, sizeof out, err), SL_ECONFIG);
  CHECK(strstr(err, "(spotlab-train cannot use this instance's GPUs: cannot load the CUDA backend") != NULL);
  /* gpus=0 or device=cpu: the CPU, fp32 */
  CHECK_INT(train_with("\"gpus\":0", &p, out, sizeof out, err), 0);
  CHECK_STR(out, TAIL);
  CHECK_INT(train_with("\"device\":\"cpu\",\"threads\":3", &p, out, sizeof out, err), 0);
  CHECK_STR(out, TAIL " --threads 3 --device cpu");
  CHECK_INT(train_with("\"device\":\"cuda\"", &p, out, sizeof out, err), 0);
  CHECK_STR(out, TAIL " --device cuda --bf16");
  /* more GPUs than the instance has: refused, never a CPU run */
  CHECK_INT(train_with("\"gpus\":4", &p, out, sizeof out, err), -ENODEV);
  CHECK_STR(err, "gpus=4 asked, but this instance (g5.12xlarge) has 2 GPUs");
  /* eval and sample run in one process: one GPU, whatever gpus asks */
  CHECK_INT(joined(WK_KIND_EVAL, "{\"data\":\"d.txt\",\"options\":{\"gpus\":2}}", &p, out, sizeof out, err), 0);
  CHECK_STR(out, "/opt/spotlab-train --eval --data d.txt --ckpt-dir /w/jobs/J1/ckpt --metrics fd:3 --device cuda --bf16");
  CHECK_INT(joined(WK_KIND_SAMPLE, "{\"options\":{\"prompt\":\"a\",\"precision\":\"fp32\"}}", &p, out, sizeof out, err), 0);
  CHECK_STR(out, "/opt/spotlab-train --sample a --ckpt-dir /w/jobs/J1/ckpt --metrics fd:3 --device cuda");
  /* the decision itself, as the job keeps it */
  json_t *spec = json_pack("{s:{s:i, s:s}}", "options", "gpus", 2, "precision", "bf16");
  struct wk_device d = {0};
  CHECK_INT(wk_spec_device(WK_KIND_TRAIN, spec, &p, &d, err, sizeof err), 0);
  CHECK(d.cuda && d.gpus == 2 && d.bf16 && d.threads == 0);
  CHECK_INT(wk_spec_device(WK_KIND_SAMPLE, spec, &p, &d, err, sizeof err), 0);
  CHECK(d.cuda && d.gpus == 1);
  json_decref(spec);
}

static void test_device_without_gpus(void) {
  char out[2048], err[256];
  /* not asked: the CPU, fp32, and the device event's thread count */
  CHECK_INT(train_with("\"threads\":2", &paths, out, sizeof out, err), 0);
  CHECK_STR(out, TAIL " --threads 2");
  json_t *spec = json_pack("{s:{s:i}}", "options", "threads", 2);
  struct wk_device d = {.cuda = true};
  CHECK_INT(wk_spec_device(WK_KIND_TRAIN, spec, &paths, &d, err, sizeof err), 0);
  CHECK(!d.cuda && d.gpus == 0 && !d.bf16 && d.threads == 2);
  json_decref(spec);
  CHECK_INT(train_with("\"gpus\":0,\"precision\":\"fp32\"", &paths, out, sizeof out, err), 0);
  CHECK_STR(out, TAIL);
  /* asked for GPUs this instance lacks: the notebook's message, with the reason */
  err[0] = 0;
  CHECK_INT(train_with("\"gpus\":2", &paths, out, sizeof out, err), -ENODEV);
  CHECK_STR(err, "gpus=2 asked, but this instance (local.cpu) has 0 GPUs "
                 "(no NVIDIA driver library (libnvidia-ml.so.1))");
  struct wk_spec_paths none = paths;
  none.gpus = NULL;
  none.instance_type = "g5.12xlarge";
  CHECK_INT(train_with("\"gpus\":1", &none, out, sizeof out, err), -ENODEV);
  CHECK(strncmp(err, "gpus=1 asked, but this instance (g5.12xlarge) has 0 GPUs", 56) == 0);
  CHECK_INT(train_with("\"device\":\"cuda\"", &paths, out, sizeof out, err), -ENODEV);
  CHECK(strncmp(err, "device=cuda asked, but this instance (local.cpu) has 0 GPUs", 59) == 0);
  CHECK_INT(joined(WK_KIND_EVAL, "{\"data\":\"d\",\"options\":{\"gpus\":1}}", &paths, out, sizeof out, err),
            -ENODEV);
  CHECK_INT(joined(WK_KIND_RUN, "{\"script\":\"nvidia-smi\",\"options\":{\"gpus\":1}}", &paths, out,
                   sizeof out, err), -ENODEV);
  CHECK(strstr(err, "gpus=1 asked") != NULL);
  CHECK_INT(joined(WK_KIND_RUN, "{\"script\":\"true\",\"options\":{\"gpus\":0}}", &paths, out, sizeof out,
                   err), 0);
  /* bf16 only on GPUs */
  CHECK_INT(train_with("\"precision\":\"bf16\"", &paths, out, sizeof out, err), SL_ECONFIG);
  CHECK(strstr(err, "precision=bf16 needs a GPU") && strstr(err, "this instance (local.cpu) has no GPU"));
  CHECK_INT(train_with("\"gpus\":0,\"precision\":\"bf16\"", &paths, out, sizeof out, err), SL_ECONFIG);
  CHECK(strstr(err, "(gpus=0)") != NULL);
}

static void test_refusals(void) {
  char out[2048], err[256];
  CHECK_INT(joined(WK_KIND_TRAIN, "{\"data\":\"x\"}", &paths, out, sizeof out, err), SL_ECONFIG);
  CHECK(strstr(err, "model") != NULL);
  CHECK_INT(joined(WK_KIND_TRAIN, "{\"model\":{\"type\":\"rnn\"},\"data\":\"x\"}", &paths, out, sizeof out, err),
            SL_ECONFIG);
  CHECK_INT(joined(WK_KIND_TRAIN, "{\"model\":{\"type\":\"gpt\"}}", &paths, out, sizeof out, err), SL_ECONFIG);
  CHECK(strstr(err, "data") != NULL);
  CHECK_INT(joined(WK_KIND_TRAIN, "{\"model\":{\"type\":\"gpt\"},\"data\":{\"type\":\"csv\"}}", &paths, out,
                   sizeof out, err), SL_ECONFIG);
  static const struct { const char *opts; int code; const char *word; } bad[] = {
    {"{\"steps\":\"many\"}", SL_ETYPE, "steps"},
    {"{\"steps\":1.5}", SL_ETYPE, "steps"},
    {"{\"lr\":-1}", SL_ECONFIG, "lr"},
    {"{\"batch\":true}", SL_ETYPE, "batch"},
    {"{\"device\":3}", SL_ETYPE, "device"},
    {"{\"device\":\"tpu\"}", SL_ECONFIG, "device"},
    {"{\"precision\":\"fp16\"}", SL_ECONFIG, "precision must be bf16 or fp32"},
    {"{\"gpus\":-1}", SL_ETYPE, "gpus must be a whole number"},
    {"{\"gpus\":1.5}", SL_ETYPE, "gpus"},
    {"{\"gpus\":\"two\"}", SL_ETYPE, "gpus"},
    {"{\"gpus\":1,\"device\":\"cpu\"}", SL_ECONFIG, "device=cpu contradicts gpus=1"},
    {"{\"gpus\":0,\"device\":\"cuda\"}", SL_ECONFIG, "device=cuda contradicts gpus=0"},
    {"{\"stepz\":3}", SL_ENAME, "stepz"},
    {"{\"batch\":0}", SL_ECONFIG, "option batch: 0 is out of range [1, 65536]"},
    {"{\"keep\":0}", SL_ECONFIG, "option keep: 0 is out of range [1, 1000000]"},
    {"{\"lr\":0}", SL_ECONFIG, "option lr: 0 is out of range (0, 10]"},
    {"{\"checkpoint_every\":200000000}", SL_ECONFIG, "checkpoint_every"},
    {"{\"ckpt_dir\":\"/x\"}", SL_ENAME, "unknown job option \"ckpt_dir\""},
    {"[1]", SL_ETYPE, "options"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char spec[256];
    snprintf(spec, sizeof spec, "{\"model\":{\"type\":\"gpt\"},\"data\":\"x\",\"options\":%s}",
             bad[i].opts);
    err[0] = 0;
    CHECK_INT(joined(WK_KIND_TRAIN, spec, &paths, out, sizeof out, err), bad[i].code);
    CHECK(strstr(err, bad[i].word) != NULL);
  }
  /* a model option of the other model */
  CHECK_INT(joined(WK_KIND_TRAIN, "{\"model\":{\"type\":\"mlp\",\"options\":{\"heads\":4}},\"data\":\"x\"}",
                   &paths, out, sizeof out, err), SL_ENAME);
  CHECK_STR(err, "model option \"heads\" does not apply to mlp");
  CHECK_INT(joined(WK_KIND_SAMPLE, "{\"options\":{\"prompt\":[\"a\"]}}", &paths, out, sizeof out, err), SL_ECONFIG);
  CHECK(strstr(err, "prompt") != NULL);
  CHECK_INT(joined(WK_KIND_RUN, "{\"script\":7}", &paths, out, sizeof out, err), SL_ECONFIG);
  struct wk_spec_paths none = paths;
  none.train = NULL;
  CHECK_INT(joined(WK_KIND_TRAIN, "{\"model\":{\"type\":\"gpt\"},\"data\":\"x\"}", &none, out, sizeof out, err),
            SL_ECONFIG);
  enum wk_kind k;
  CHECK_INT(wk_spec_kind("sample", &k), 0);
  CHECK_INT(k, WK_KIND_SAMPLE);
  CHECK_INT(wk_spec_kind("dance", &k), SL_ENAME);
  CHECK_INT(wk_spec_kind(NULL, &k), SL_ENAME);
}

int main(void) {
  test_train_every_option();
  test_other_kinds();
  test_device_with_gpus();
  test_device_without_gpus();
  test_refusals();
  TEST_MAIN_END();
}
