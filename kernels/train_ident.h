/* Which run a start of spotlab-train continues, and which folder it may write.
 *
 * A checkpoint folder belongs to one run (tc_ckpt.h: a run id, the seed and
 * the data hash in every header). A fresh start refuses a folder that holds
 * checkpoints unless asked to set them aside; --resume continues the run
 * --run-id names, else the folder's only one, and only with its seed and
 * data unless --resume-other. Messages name the runs and the way out. */
#ifndef TC_TRAIN_IDENT_H
#define TC_TRAIN_IDENT_H

#include <stddef.h>
#include <stdint.h>

#include "tc_ckpt.h"
#include "tc_data.h"
#include "train.h"

/* The training data as a run's identity holds it: the text (vocabulary and
 * token ids) or the training images and labels; either may be NULL. */
uint64_t tc_ident_data_hash(const struct tc_text *text, const struct tc_images *train);

/* A fresh start of run run_id in dir: -EEXIST with the reason in err when dir
 * holds checkpoints, unless force_new, which moves them into a subfolder
 * (its path in ret_sub). Returns how many files were set aside. */
int tc_ident_claim(const char *dir, const char *run_id, int force_new, char *ret_sub,
                   size_t sub_size, char *err, size_t es);

/* Which run --resume continues in o->ckpt_dir: ret_id gets its id, "" for
 * any (the folder holds no identity, or o->resume_other). SL_EMISMATCH when
 * the choice is not clear or not this run's. */
int tc_ident_pick(const struct tc_opts *o, char ret_id[TC_RUN_ID_MAX + 1], char *err, size_t es);

/* Whether checkpoint ck (at path) may continue this start: one without an
 * identity always may, one with needs o's seed and data_hash. */
int tc_ident_check(const struct tc_opts *o, const struct tc_ckpt_meta *ck, uint64_t data_hash,
                   const char *path, char *err, size_t es);

#endif
