/* Job specs to command lines: turns an assign's kind and spec into the argv of
 * spotlab-train (train, eval, sample) or of /bin/sh (run). Pure: no I/O, so
 * every option is unit-tested without a process. */
#ifndef WK_SPEC_H
#define WK_SPEC_H

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
  long long checkpoint_every; /* from the assign; <= 0 = take the spec's */
  /* nodes=N (train): this process is rank `rank` of `world_size` (< 2: the
   * only one), meeting the others at rendezvous (tcp://HOST:PORT) */
  int rank, world_size;
  const char *rendezvous;
};

/* "train" → WK_KIND_TRAIN ...; SL_ENAME for anything else. */
int wk_spec_kind(const char *name, enum wk_kind *ret);
const char *wk_spec_kind_name(enum wk_kind kind);

/* Builds a NULL-terminated argv, owned by the caller (wk_argv_free), for kind
 * from spec (borrowed). Bad input (missing model, wrong types, a value out of
 * range) returns SL_ECONFIG/SL_ETYPE with a reason in err. */
int wk_spec_build_argv(enum wk_kind kind, const json_t *spec, const struct wk_spec_paths *p,
                       char ***ret_argv, char *err, size_t err_size);
char **wk_argv_free(char **argv);

#endif
