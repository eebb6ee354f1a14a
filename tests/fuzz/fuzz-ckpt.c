/* Fuzz target: the checkpoint reader (tc_ckpt_read and tc_ckpt_read_meta),
 * what spotlab-train runs on every file it resumes from or --check's.
 *
 * The first input byte is a set of switches, the rest is the file:
 *   bit 0  make every checksum right before reading (the header's, and each
 *          section's as far as its length field reaches), so that mutations
 *          get past the CRCs to the parsing behind them;
 *   bit 1  read with an expected config (a one-layer gpt), as a resume does.
 * The file is handed over in memory (memfd, named by /proc/self/fd/N). A
 * refusal must say why; a file that reads must describe a valid model of
 * the size it holds and restore into a model built from its config. No input
 * may crash, leak, hang, allocate past what its own size can justify, or hit
 * undefined behaviour. */
#include "tc_ckpt.h"
#include "tc_model.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define HEADER 512
#define SECTION_HEADER 24

static int fd = -1;
static char path[64];
static struct tc_config expect;

static void setup_once(void) {
  if (fd >= 0)
    return;
  char err[256];
  if ((fd = memfd_create("fuzz-ckpt.slck", 0)) < 0 ||
      tc_config_parse(&expect, "gpt", "layers=1 heads=1 dim=4 ctx=4 vocab=28", err, sizeof err) < 0) {
    perror("fuzz-ckpt: setup");
    abort();
  }
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
}

static uint64_t get64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

/* The checksums of f made right: the header's, then each section's over
 * the payload its length field gives (cut at the end of the file). */
static void fix_crcs(uint8_t *f, size_t n) {
  if (n < HEADER)
    return;
  uint32_t crc = tc_crc32c(0, f, 508);
  memcpy(f + 508, &crc, 4);
  size_t at = HEADER;
  for (int s = 0; s < 4 && n - at >= SECTION_HEADER; s++) {
    uint64_t len = get64(f + at + 8);
    size_t have = n - at - SECTION_HEADER;
    size_t take = len < have ? (size_t)len : have;
    crc = tc_crc32c(0, f + at + SECTION_HEADER, take);
    memcpy(f + at + 4, &crc, 4);
    at += SECTION_HEADER + take;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  setup_once();
  if (size < 1)
    return 0;
  uint8_t flags = data[0];
  size_t n = size - 1;
  uint8_t *file = malloc(n ? n : 1);
  if (!file)
    abort();
  memcpy(file, data + 1, n);
  if (flags & 1)
    fix_crcs(file, n);
  if (ftruncate(fd, 0) < 0 || pwrite(fd, file, n, 0) != (ssize_t)n)
    abort();
  free(file);

  char err[1024] = "";
  struct tc_ckpt_meta meta;
  if (tc_ckpt_read_meta(path, &meta, err, sizeof err) < 0 && !err[0])
    abort(); /* every refusal says why */

  err[0] = 0;
  struct tc_ckpt *ck = NULL;
  int r = tc_ckpt_read(path, (flags & 2) ? &expect : NULL, &ck, err, sizeof err);
  if (r < 0) {
    if (!err[0] || ck)
      abort();
    return 0;
  }
  /* what reads is a valid model whose three arrays the file holds */
  char why[256];
  if (!ck || tc_config_validate(&ck->meta.cfg, why, sizeof why) < 0 ||
      (uint64_t)ck->n_params * 3 * sizeof(float) > n)
    abort();
  struct tc_model *m = tc_model_new_buffers(&ck->meta.cfg);
  if (!m || tc_ckpt_restore(ck, m) < 0)
    abort();
  tc_model_free(m);
  tc_ckpt_free(ck);
  return 0;
}
