/* Spec → argv for every kind and option, and the refusals. */
#include "harness.h"

#include "sl_err.h"
#include "spec.h"

static struct wk_spec_paths paths = {.train = "/opt/spotlab-train", .ckpt_dir = "/w/jobs/J1/ckpt",
                                     .metrics_fd = 3, .control_fd = 4};

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
      "\"threads\":2,\"device\":\"cpu\",\"checkpoint_every\":100,\"gpus\":1,\"spot\":\"yes\","
      "\"max_price\":0.6,\"deadline\":{\"t\":\"dur\",\"v\":10800000000}}}";
  CHECK_INT(joined(WK_KIND_TRAIN, spec, &paths, out, sizeof out, err), 0);
  CHECK_STR(out, "/opt/spotlab-train --model gpt --layers 4 --heads 4 --dim 128 --ctx 64 --dropout 0 "
                 "--data moby-dick --checkpoint-every 100 --ckpt-dir /w/jobs/J1/ckpt --metrics fd:3 "
                 "--control fd:4 --steps 3000 --batch 32 --lr 0.0003 --seed 7 --warmup 50 "
                 "--weight-decay 0.05 --grad-clip 0.5 --eval-every 250 --eval-batches 4 --keep 2 "
                 "--threads 2 --device cpu");
  /* the assign's interval wins over the spec's; --resume when restoring */
  struct wk_spec_paths p = paths;
  p.checkpoint_every = 40;
  p.resume = true;
  CHECK_INT(joined(WK_KIND_TRAIN,
                   "{\"model\":{\"type\":\"mlp\",\"options\":{\"hidden\":256,\"layers\":2}},"
                   "\"data\":{\"type\":\"fashion_mnist\",\"args\":[]},"
                   "\"options\":{\"checkpoint_every\":\"auto\"}}",
                   &p, out, sizeof out, err), 0);
  CHECK_STR(out, "/opt/spotlab-train --model mlp --hidden 256 --layers 2 --data fashion-mnist "
                 "--checkpoint-every 40 --resume --ckpt-dir /w/jobs/J1/ckpt --metrics fd:3 --control fd:4");
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
  CHECK_INT(joined(WK_KIND_SAMPLE, "{\"options\":{\"prompt\":\"Call me\",\"tokens\":200,"
                                   "\"temperature\":0.8,\"top_k\":10,\"seed\":3}}",
                   &paths, out, sizeof out, err), 0);
  CHECK_STR(out, "/opt/spotlab-train --sample Call me --ckpt-dir /w/jobs/J1/ckpt --metrics fd:3 "
                 "--tokens 200 --temperature 0.8 --top-k 10 --seed 3");
  CHECK_INT(joined(WK_KIND_RUN, "{\"script\":\"python3 train.py\\necho done\"}", &paths, out, sizeof out, err), 0);
  CHECK_STR(out, "/bin/sh -e -c python3 train.py\necho done");
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
    {"{\"stepz\":3}", SL_ENAME, "stepz"},
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
  CHECK_INT(joined(WK_KIND_SAMPLE, "{\"options\":{\"tokens\":5}}", &paths, out, sizeof out, err), SL_ECONFIG);
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
  test_refusals();
  TEST_MAIN_END();
}
