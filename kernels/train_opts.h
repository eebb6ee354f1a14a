/* spotlab-train's options, declared once: the flags spotlab-train parses, and
 * for each the statements (train, eval, sample) or model definitions (gpt(),
 * mlp()) of the cell language where it is an option of the same name. The
 * kernel's vocabulary and the worker's spec → flags translation are built
 * from this table, so the three cannot disagree. It depends on common/ alone
 * (no BLAS, no CUDA), so the kernel and the worker link it. */
#ifndef TC_TRAIN_OPTS_H
#define TC_TRAIN_OPTS_H

#include <stddef.h>

#include "sl_opt.h"

/* Where an option appears in the cell language (struct sl_opt.contexts);
 * bit i is named tc_train_context_names[i]. No bit: a flag only. */
enum {
  TC_OPT_TRAIN = 1 << 0,
  TC_OPT_EVAL = 1 << 1,
  TC_OPT_SAMPLE = 1 << 2,
  TC_OPT_GPT = 1 << 3,
  TC_OPT_MLP = 1 << 4,
};
#define TC_OPT_N_CONTEXTS 5
extern const char *const tc_train_context_names[TC_OPT_N_CONTEXTS];

/* The rows, in --help order; offsets into struct tc_opts (train.h). */
extern const struct sl_opt tc_train_opts[];
extern const size_t tc_train_opts_n;

/* The context bit named name ("train", "gpt"); 0 for any other. */
unsigned tc_train_context(const char *name);

/* Checks text as a value of o (a row of tc_train_opts) without storing it:
 * 0, or SL_ECONFIG with "LABEL: reason" in err. */
int tc_train_opt_check(const struct sl_opt *o, const char *label, const char *text, char *err,
                       size_t err_size);

#endif
