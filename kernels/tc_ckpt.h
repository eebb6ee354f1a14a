/* Checkpoints: one device-independent file format for every backend.
 *
 * Layout, version 3 (all integers little-endian, floats IEEE-754 binary32
 * little-endian):
 *   header, 512 bytes: magic "SLTCKPT\0", version, the model's name, world
 *     size and rank, step, AdamW step, seed, data position, the three RNG
 *     states, the text vocabulary, the run's identity (run id and data
 *     hash); CRC32C of bytes [0,508) in bytes [508,512).
 *   section "CONF": the model's settings as "name=value\n" lines, at most
 *     TC_CKPT_CONF_MAX_BYTES, so a new setting does not change the format.
 *   three sections "PARM", "ADMM", "ADMV" (parameters, first and second
 *     moments) of n_params floats in the model layout.
 * Each section is a 24-byte section header (tag, CRC32C of the payload,
 * payload bytes, reserved) followed by its payload. Versions 1 and 2 are
 * read, never written: version 2 had no identity (its checkpoints belong to
 * no run in particular), version 1 neither, and no CONF section but nine
 * fixed config fields in the header.
 * Files are named ckpt-<step, 10 digits>.slck so names sort by step; they are
 * written to a hidden temporary name, fsynced, renamed and the folder fsynced.
 * docs/internals/training.md has the byte offsets. */
#ifndef TC_CKPT_H
#define TC_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "tc_model.h"
#include "tc_rng.h"

#define TC_CKPT_VERSION 3
#define TC_CKPT_HEADER_BYTES 512
#define TC_CKPT_CONF_MAX_BYTES 4096
#define TC_RUN_ID_MAX 32 /* characters of a run id: [A-Za-z0-9._-] */

struct tc_ckpt_meta {
  struct tc_config cfg;
  uint32_t world_size, rank;
  uint64_t step;   /* training steps completed */
  uint64_t adam_t; /* AdamW bias-correction step */
  uint64_t seed;
  uint64_t data_cursor; /* text: windows drawn; images: index into the epoch's permutation */
  uint64_t data_epoch;  /* images: epoch number */
  struct tc_rng rng_init, rng_data, rng_sample;
  uint8_t symbols[256]; /* text: id -> byte, one entry per vocabulary id */
  /* The run's identity: which run wrote the checkpoint. run_id is chosen at
   * a fresh start (or given) and kept by every resume; "" in a checkpoint
   * of version 1 or 2, which has no identity. data_hash: tc_hash64 of the
   * training data the run started on. The seed above is part of it too. */
  char run_id[TC_RUN_ID_MAX + 1];
  uint64_t data_hash;
};

/* A host snapshot: what a checkpoint file holds. */
struct tc_ckpt {
  struct tc_ckpt_meta meta;
  size_t n_params;
  float *params, *m, *v; /* (n_params) each */
};

struct tc_ckpt *tc_ckpt_new(size_t n_params);
struct tc_ckpt *tc_ckpt_free(struct tc_ckpt *ck);
/* Copies model buffers and meta into ck (sizes must match). */
void tc_ckpt_capture(struct tc_ckpt *ck, const struct tc_model *m,
                     const struct tc_ckpt_meta *meta);
/* Copies ck's parameters and moments into m; config must match. */
int tc_ckpt_restore(const struct tc_ckpt *ck, struct tc_model *m);

/* CRC32C (Castagnoli), hardware-accelerated where the CPU has SSE4.2. */
uint32_t tc_crc32c(uint32_t crc, const void *buf, size_t n);
/* A 64-bit hash of buf continuing h (start with 0): tells data sets apart
 * by accident, not against an adversary. */
uint64_t tc_hash64(uint64_t h, const void *buf, size_t n);

/* Whether s is a valid run id: 1 to TC_RUN_ID_MAX of [A-Za-z0-9._-]. */
int tc_run_id_valid(const char *s);
/* A fresh random run id (32 hex digits) into ret (TC_RUN_ID_MAX + 1 bytes). */
int tc_run_id_new(char ret[TC_RUN_ID_MAX + 1]);

/* Writes ck durably into dir; the final path goes to ret_path. On failure the
 * temporary file is removed and earlier checkpoints are untouched. */
int tc_ckpt_write(const struct tc_ckpt *ck, const char *dir, char *ret_path, size_t path_size,
                  char *err, size_t err_size);
/* Reads and verifies a file of version 1, 2 or 3. expect (may be NULL) must
 * equal the stored config, else SL_EMISMATCH. Corruption gives SL_ECHECKSUM
 * or SL_EFORMAT, and so does a model this build does not have, or a path
 * that is no regular file (a folder, a FIFO, a device: never opened for
 * reading, so nothing blocks). err always says why when it fails. */
int tc_ckpt_read(const char *path, const struct tc_config *expect, struct tc_ckpt **ret,
                 char *err, size_t err_size);
/* Reads and verifies the header alone (as tc_ckpt_read does) into *ret. */
int tc_ckpt_read_meta(const char *path, struct tc_ckpt_meta *ret, char *err, size_t err_size);
/* Checkpoint file names in dir, newest first; owned array of owned strings. */
int tc_ckpt_list(const char *dir, char ***ret_names, int *ret_count);
void tc_ckpt_list_free(char **names, int count);
/* Removes all but the newest keep checkpoints of run run_id (by their
 * headers: another run's checkpoints, those without identity and files
 * that are no checkpoint stay), and temporary files; only the folder's
 * single writer calls it (a temporary could be in progress otherwise). */
int tc_ckpt_prune(const char *dir, int keep, const char *run_id);

/* What a folder holds: one entry per run, newest checkpoint first. */
struct tc_ckpt_run {
  char run_id[TC_RUN_ID_MAX + 1]; /* "": checkpoints without identity */
  uint64_t seed, data_hash;       /* of the newest checkpoint */
  uint64_t newest_step;
  int count;
};
/* The runs whose checkpoints dir holds, by header (files whose header does
 * not read are left out), newest first; checkpoints without identity form
 * one entry with run_id "". An owned array in *ret (free()); a missing dir
 * holds none. */
int tc_ckpt_runs(const char *dir, struct tc_ckpt_run **ret, int *ret_count);
/* Moves every file named like a checkpoint in dir into a new subfolder
 * dir/set-aside-XXXXXX, whose path goes to ret_sub ("" when there was none),
 * so that a new run starts in a folder of its own and nothing is deleted.
 * Returns how many were moved. */
int tc_ckpt_set_aside(const char *dir, char *ret_sub, size_t sub_size, char *err, size_t err_size);
/* Renames the regular file at path (a checkpoint that does not read) to
 * PATH.corrupt, or PATH.corrupt-N when that name is taken, so that no later
 * checkpoint of its step replaces it: 0 with the new name in ret_to ("" for
 * anything but a regular file, which is left as it is), or -errno. */
int tc_ckpt_set_aside_corrupt(const char *path, char *ret_to, size_t to_size);

typedef void (*tc_ckpt_warn_fn)(void *ctx, const char *path, int err, const char *text);
/* Loads the newest valid checkpoint in dir, warning through warn (may be NULL)
 * for each corrupt one skipped. run_id (may be NULL: any) takes only that
 * run's checkpoints and those without identity; the others are passed over
 * silently. -ENOENT when there is none; SL_EMISMATCH when the newest readable
 * one has another config. ret_path gets its path. */
int tc_ckpt_load_newest(const char *dir, const struct tc_config *expect, const char *run_id,
                        tc_ckpt_warn_fn warn, void *warn_ctx, struct tc_ckpt **ret,
                        char *ret_path, size_t path_size, char *err, size_t err_size);

#endif
