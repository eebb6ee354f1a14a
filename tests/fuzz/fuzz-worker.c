/* Fuzz target: what the worker reads from outside its process without a
 * socket in between: an assign's job spec as the gateway sends it
 * (worker/spec.c: the device a job runs on and spotlab-train's argv), the
 * instance metadata service's notice replies (worker/notice.c), and the
 * bytes a job prints, made into JSON text (worker/relay.c), and an assign's
 * gang of ranks (worker/gang.c).
 *
 * The first input byte chooses (its value modulo 7): 0 a spec, 1 an AWS
 * instance-action reply, 2 an AWS rebalance reply, 3 a GCP preempted
 * reply, 4 a notice time, 5 a job's output, 6 a gang (JSON). For a spec the second byte
 * chooses the kind (bits 0-1: train, eval, sample, run), the instance's GPUs
 * (bits 2-3: none, one, two, eight), whether spotlab-train has CUDA (bit 4),
 * a resume (bit 5) and a rank of a gang (bit 6); the rest is the spec's
 * JSON. A refusal is SL_ECONFIG, SL_ETYPE, SL_ENAME, SL_ELIMIT or -ENODEV
 * with a sentence in err (or -ENOMEM);
 * an argv is NULL-terminated, every element a C string. A notice is 1 with
 * an action that is a terminated string and a deadline, 0 (GCP's "FALSE")
 * or a refusal. Output text is a JSON string of at most the bytes asked,
 * valid UTF-8. A gang reads as no gang, or a rank within its world with a
 * rendezvous (past rank 0) terminated in its field, or is refused with
 * SL_ECONFIG and a sentence. No input may crash, leak or hit undefined
 * behaviour. */
#include "fuzz.h"
#include "gang.h"
#include "notice.h"
#include "relay.h"
#include "sl_err.h"
#include "sl_json.h"
#include "spec.h"

#include <errno.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct wk_gpu_inventory inventories[4] = {
    {.reason = "no NVIDIA driver library (libnvidia-ml.so.1)"},
    {1, "NVIDIA A10G", 22731, "550.54.15", "", ""},
    {2, "NVIDIA A10G", 22731, "550.54.15", "", "cannot load the CUDA backend"},
    {8, "NVIDIA H100 80GB HBM3", 81559, "550.54.15", "", ""},
};

/* A refusal is one of the codes the spec reader documents, with a
 * sentence in err. */
static void refused(int r, const char *err) {
  if (r == -ENOMEM)
    return;
  if (r != SL_ECONFIG && r != SL_ETYPE && r != SL_ENAME && r != SL_ELIMIT && r != -ENODEV &&
      r != SL_ECUDA)
    abort();
  if (!memchr(err, 0, 256) || !err[0])
    abort();
}

static void spec(const uint8_t *data, size_t size) {
  if (size < 1)
    return;
  uint8_t flags = data[0];
  enum wk_kind kind = (enum wk_kind)(flags & 3);
  /* as the worker reads a gateway message: depth 32 at most */
  json_t *s = NULL;
  if (sl_json_parse((const char *)data + 1, size - 1, 32, &s, NULL, 0) < 0)
    return;
  struct wk_spec_paths p = {.train = "/opt/spotlab/spotlab-train",
                            .ckpt_dir = "/w/jobs/J000001/ckpt",
                            .metrics_fd = 3,
                            .control_fd = kind == WK_KIND_TRAIN ? 4 : -1,
                            .resume = flags & 32,
                            .run_id = "J000001",
                            .gpus = &inventories[(flags >> 2) & 3],
                            .instance_type = "g5.12xlarge",
                            .train_cuda = flags & 16,
                            .rank = flags & 64 ? 1 : 0,
                            .world_size = flags & 64 ? 2 : 0,
                            .rendezvous = flags & 64 ? "tcp://10.0.0.7:29500" : NULL};
  char err[256];
  memset(err, 'x', sizeof err);
  err[sizeof err - 1] = 0;
  struct wk_device dev;
  int r = wk_spec_device(kind, s, &p, &dev, err, sizeof err);
  if (r < 0)
    refused(r, err);
  else if (dev.cuda ? dev.gpus < 1 || dev.gpus > p.gpus->count : dev.gpus != 0 || dev.bf16)
    abort(); /* never more GPUs than the instance has, never bf16 on the CPU */
  const char *path = wk_spec_data_path(s);
  if (path && !memchr(path, 0, 1u << 20))
    abort();
  char **argv = NULL;
  r = wk_spec_build_argv(kind, s, &p, &argv, err, sizeof err);
  if (r < 0) {
    refused(r, err);
    if (argv)
      abort();
  } else {
    size_t n = 0;
    for (; argv[n]; n++)
      if (strlen(argv[n]) > (1u << 20))
        abort();
    if (n == 0 || n >= WK_ARGV_MAX)
      abort();
    wk_argv_free(argv);
  }
  json_decref(s);
}

static void notice(int which, const char *body, size_t len) {
  struct wk_notice n;
  memset(&n, 'x', sizeof n);
  const int64_t now = INT64_C(1795000000000000);
  int r = which == 1   ? wk_notice_parse_aws_action(body, len, now, &n)
          : which == 2 ? wk_notice_parse_aws_rebalance(body, len, now, &n)
                       : wk_notice_parse_gcp(body, len, now, &n);
  if (r == 1 ? !memchr(n.action, 0, sizeof n.action) || !n.action[0]
             : r != 0 && r != SL_EJSON && r != SL_ETYPE && r != SL_ECONFIG)
    abort();
  if (r == 0 && which != 3)
    abort(); /* only GCP says "no notice" in a body */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  int which = data[0] % 7;
  size_t len = size - 1;
  char *body = fuzz_exact_copy(data + 1, len);
  switch (which) {
  case 0:
    spec(data + 1, len);
    break;
  case 1:
  case 2:
  case 3:
    notice(which, body, len);
    break;
  case 4: {
    char *text = fuzz_string_copy((const uint8_t *)body, len);
    int64_t t;
    int r = wk_notice_parse_time(text, &t);
    if (r != 0 && r != -EINVAL)
      abort();
    free(text);
    break;
  }
  case 6: {
    json_t *g = NULL;
    if (sl_json_parse(body, len, 32, &g, NULL, 0) < 0)
      break;
    struct wk_gang gang;
    char err[256] = "";
    int r = wk_gang_parse(g, &gang, err, sizeof err);
    if (r < 0 ? r != SL_ECONFIG || !err[0]
              : gang.world_size < 0 || (gang.world_size &&
                                        (gang.rank < 0 || gang.rank >= gang.world_size ||
                                         !memchr(gang.rendezvous, 0, sizeof gang.rendezvous) ||
                                         (gang.rank > 0 && !gang.rendezvous[0]))))
      abort();
    json_decref(g);
    break;
  }
  default: {
    size_t max = len ? (size_t)(uint8_t)body[0] * 16 : 0;
    json_t *s = wk_relay_text(body, len, max);
    if (!s)
      abort();
    const char *v = json_string_value(s);
    if (!v || json_string_length(s) > max)
      abort();
    /* jansson refuses to hold a string that is not UTF-8 */
    json_t *again = json_stringn(v, json_string_length(s));
    if (!again)
      abort();
    json_decref(again);
    json_decref(s);
    break;
  }
  }
  free(body);
  return 0;
}
