/* Checkpoints: one device-independent file format for every backend.
 *
 * Layout, version 2 (all integers little-endian, floats IEEE-754 binary32
 * little-endian):
 *   header, 512 bytes: magic "SLTCKPT\0", version, the model's name, world
 *     size and rank, step, AdamW step, seed, data position, the three RNG
 *     states, the text vocabulary; CRC32C of bytes [0,508) in bytes [508,512).
 *   section "CONF": the model's settings as "name=value\n" lines, at most
 *     TC_CKPT_CONF_MAX_BYTES, so a new setting does not change the format.
 *   three sections "PARM", "ADMM", "ADMV" (parameters, first and second
 *     moments) of n_params floats in the model layout.
 * Each section is a 24-byte section header (tag, CRC32C of the payload,
 * payload bytes, reserved) followed by its payload. Version 1 (read, never
 * written) had no CONF section: nine fixed config fields in the header.
 * Files are named ckpt-<step, 10 digits>.slck so names sort by step; they are
 * written to a hidden temporary name, fsynced, renamed and the folder fsynced.
 * docs/internals/training.md has the byte offsets. */
#ifndef TC_CKPT_H
#define TC_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "tc_model.h"
#include "tc_rng.h"

#define TC_CKPT_VERSION 2
#define TC_CKPT_HEADER_BYTES 512
#define TC_CKPT_CONF_MAX_BYTES 4096

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

/* Writes ck durably into dir; the final path goes to ret_path. On failure the
 * temporary file is removed and earlier checkpoints are untouched. */
int tc_ckpt_write(const struct tc_ckpt *ck, const char *dir, char *ret_path, size_t path_size,
                  char *err, size_t err_size);
/* Reads and verifies a file of version 1 or 2. expect (may be NULL) must
 * equal the stored config, else SL_EMISMATCH. Corruption gives SL_ECHECKSUM
 * or SL_EFORMAT, and so does a model this build does not have. */
int tc_ckpt_read(const char *path, const struct tc_config *expect, struct tc_ckpt **ret,
                 char *err, size_t err_size);
/* Checkpoint file names in dir, newest first; owned array of owned strings. */
int tc_ckpt_list(const char *dir, char ***ret_names, int *ret_count);
void tc_ckpt_list_free(char **names, int count);
/* Removes all but the newest keep checkpoints, and temporary files; only the
 * folder's single writer calls it (a temporary could be in progress otherwise). */
int tc_ckpt_prune(const char *dir, int keep);

typedef void (*tc_ckpt_warn_fn)(void *ctx, const char *path, int err, const char *text);
/* Loads the newest valid checkpoint in dir, warning through warn (may be NULL)
 * for each corrupt one skipped. -ENOENT when there is none; SL_EMISMATCH when
 * the newest readable one has another config. ret_path gets its path. */
int tc_ckpt_load_newest(const char *dir, const struct tc_config *expect, tc_ckpt_warn_fn warn,
                        void *warn_ctx, struct tc_ckpt **ret, char *ret_path, size_t path_size,
                        char *err, size_t err_size);

#endif
