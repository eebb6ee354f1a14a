/* Job specs to command lines: turns an assign's kind and spec into the argv of
 * spotlab-train (train, eval, sample) or of /bin/sh (run), and decides the
 * device a job runs on from its gpus, precision and device options and
 * this instance's GPUs. Pure: no I/O, so every option is unit-tested
 * without a process or a GPU. */
#ifndef WK_SPEC_H
#define WK_SPEC_H

#include "gpuinfo.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define WK_ARGV_MAX 96

enum wk_kind { WK_KIND_TRAIN, WK_KIND_EVAL, WK_KIND_SAMPLE, WK_KIND_RUN };

struct wk_spec_paths {
  const char *train;     /* spotlab-train program */
  const char *ckpt_dir;  /* --ckpt-dir */
  int metrics_fd;        /* --metrics fd:N (child side) */
  int control_fd;        /* --control fd:N (train only); < 0 = none */
  bool resume;           /* --resume (train) */
  const char *run_id;    /* --run-id (train): the job id, so a resume takes only its checkpoints; NULL = none */
  long long checkpoint_every; /* from the assign; <= 0 = take the spec's */
  const struct wk_gpu_inventory *gpus; /* this instance's GPUs; NULL = none */
  const char *instance_type;  /* for messages: "g5.xlarge" */
  bool train_cuda;            /* spotlab-train can use the GPUs (else gpus->unusable says why) */
  /* nodes=N (train): this process is rank `rank` of `world_size` (< 2: the
   * only one), meeting the others at rendezvous (tcp://HOST:PORT) */
  int rank, world_size;
  const char *rendezvous;
};

/* Where a job runs. Defaults: a job that names no gpus uses one GPU when
 * the instance has one (and spotlab-train can use it), else the CPU;
 * precision is bf16 on GPUs and fp32 on the CPU. */
struct wk_device {
  bool cuda;
  int gpus;          /* cuda: GPUs the job uses (>= 1); cpu: 0 */
  bool bf16;
  long long threads; /* cpu: the threads option; 0 = spotlab-train's default (every CPU) */
};

/* "train" → WK_KIND_TRAIN ...; SL_ENAME for anything else. */
int wk_spec_kind(const char *name, enum wk_kind *ret);
const char *wk_spec_kind_name(enum wk_kind kind);
/* The data file a train or eval spec reads, as its definition names it
 * (text("PATH") or fashion_mnist("FOLDER")), borrowed from spec; NULL for
 * none or a data set spotlab-train ships (moby-dick, fashion-mnist). */
const char *wk_spec_data_path(const json_t *spec);

/* Decides where a job of kind with spec (borrowed) runs on the instance p
 * describes. Refusals carry a sentence for the notebook in err: -ENODEV
 * when the job asks for more GPUs than the instance has (never a silent
 * CPU run), SL_ECONFIG for bf16 on the CPU or options that contradict each
 * other, SL_ETYPE for a value of the wrong type. eval and sample run on one
 * GPU whatever gpus asks (spotlab-train runs them in one process). A run
 * job only has its gpus checked. */
int wk_spec_device(enum wk_kind kind, const json_t *spec, const struct wk_spec_paths *p,
                   struct wk_device *ret, char *err, size_t err_size);

/* Builds a NULL-terminated argv, owned by the caller (wk_argv_free), for kind
 * from spec (borrowed), with the device flags of wk_spec_device (--device
 * cuda, --gpus N for a train job on more than one GPU, --bf16). Bad input
 * (missing model, wrong types, a value out of range) returns
 * SL_ECONFIG/SL_ETYPE, and a device the instance lacks -ENODEV, with a
 * reason in err. */
int wk_spec_build_argv(enum wk_kind kind, const json_t *spec, const struct wk_spec_paths *p,
                       char ***ret_argv, char *err, size_t err_size);
char **wk_argv_free(char **argv);

#endif
