/* Unit tests of checkpoint files and data loaders: round trip, a flipped byte
 * in each section, truncation, config mismatch, fallback to the previous
 * checkpoint, pruning, a write that fails (EFBIG) without losing anything,
 * and malformed IDX files. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "harness.h"
#include "sl_err.h"
#include "tc_ckpt.h"
#include "tc_data.h"

static char dir[256];

static struct tc_config gpt_cfg(void) {
  return (struct tc_config){.kind = TC_MODEL_GPT, .layers = 1, .heads = 2, .dim = 8, .ctx = 4, .vocab = 5};
}

static struct tc_ckpt *make_ckpt(struct tc_model **ret_m, uint64_t step) {
  struct tc_config c = gpt_cfg();
  struct tc_model *m = tc_model_new(&c, 1);
  struct tc_rng r;
  tc_rng_seed(&r, step, 1);
  tc_model_init(m, &r);
  for (size_t i = 0; i < m->n_params; i++) m->m[i] = tc_rng_normal(&r), m->v[i] = tc_rng_uniform(&r);
  m->adam_t = step;
  struct tc_ckpt_meta meta = {.world_size = 1, .step = step, .seed = 99, .data_cursor = 1234,
                              .data_epoch = 2};
  tc_rng_seed(&meta.rng_init, 1, 1);
  tc_rng_seed(&meta.rng_data, 1, 2);
  tc_rng_seed(&meta.rng_sample, 1, 3);
  for (int i = 0; i < 5; i++) meta.symbols[i] = (uint8_t)('a' + i);
  struct tc_ckpt *ck = tc_ckpt_new(m->n_params);
  tc_ckpt_capture(ck, m, &meta);
  *ret_m = m;
  return ck;
}

static void flip_byte(const char *path, long off) {
  int fd = open(path, O_RDWR);
  unsigned char b;
  CHECK(pread(fd, &b, 1, off) == 1);
  b ^= 0x40;
  CHECK(pwrite(fd, &b, 1, off) == 1);
  close(fd);
}

static void test_roundtrip_and_corruption(void) {
  struct tc_model *m;
  struct tc_ckpt *ck = make_ckpt(&m, 10);
  char path[512], err[1024];
  CHECK_INT(tc_ckpt_write(ck, dir, path, sizeof path, err, sizeof err), 0);
  struct tc_ckpt *back = NULL;
  CHECK_INT(tc_ckpt_read(path, &m->cfg, &back, err, sizeof err), 0);
  if (back) {
    CHECK(memcmp(&back->meta, &ck->meta, sizeof ck->meta) == 0);
    CHECK(memcmp(back->params, m->params, sizeof(float) * m->n_params) == 0);
    CHECK(memcmp(back->m, m->m, sizeof(float) * m->n_params) == 0);
    CHECK(memcmp(back->v, m->v, sizeof(float) * m->n_params) == 0);
    struct tc_config c = gpt_cfg();
    struct tc_model *m2 = tc_model_new(&c, 1);
    CHECK_INT(tc_ckpt_restore(back, m2), 0);
    CHECK_INT(m2->adam_t, 10);
    tc_model_free(m2);
  }
  back = tc_ckpt_free(back);
  /* config mismatch: refused with a message naming both configs */
  struct tc_config other = gpt_cfg();
  other.dim = 16;
  CHECK_INT(tc_ckpt_read(path, &other, &back, err, sizeof err), SL_EMISMATCH);
  CHECK(strstr(err, "dim=8") && strstr(err, "dim=16"));
  fprintf(stderr, "mismatch: %s\n", err);
  /* a flipped byte in the header and in each section */
  size_t bytes = m->n_params * sizeof(float);
  long offs[4] = {100, 512 + 24 + 3, (long)(512 + 2 * 24 + bytes + 7), (long)(512 + 3 * 24 + 2 * bytes + bytes - 1)};
  const char *what[4] = {"header", "PARM", "ADMM", "ADMV"};
  for (int i = 0; i < 4; i++) {
    char p2[600];
    snprintf(p2, sizeof p2, "%s/copy.slck", dir);
    /* a fresh copy under another name: write, then rename */
    CHECK_INT(tc_ckpt_write(ck, dir, path, sizeof path, err, sizeof err), 0);
    rename(path, p2);
    flip_byte(p2, offs[i]);
    int r = tc_ckpt_read(p2, &m->cfg, &back, err, sizeof err);
    CHECK_INT(r, SL_ECHECKSUM);
    CHECK(strstr(err, i ? what[i] : "header") != NULL);
    fprintf(stderr, "flip in %s: %s\n", what[i], err);
    unlink(p2);
  }
  /* truncation */
  CHECK_INT(tc_ckpt_write(ck, dir, path, sizeof path, err, sizeof err), 0);
  CHECK(truncate(path, 512 + 24 + 10) == 0);
  CHECK_INT(tc_ckpt_read(path, NULL, &back, err, sizeof err), SL_EFORMAT);
  fprintf(stderr, "truncated: %s\n", err);
  unlink(path);
  tc_ckpt_free(ck);
  tc_model_free(m);
}

static int warnings;
static void count_warn(void *ctx, const char *path, int err, const char *text) {
  (void)ctx, (void)path, (void)err, (void)text;
  warnings++;
}

static void test_fallback_prune_and_enospc(void) {
  char path[512], err[1024];
  struct tc_model *m;
  for (uint64_t s = 1; s <= 5; s++) {
    struct tc_ckpt *ck = make_ckpt(&m, s * 10);
    CHECK_INT(tc_ckpt_write(ck, dir, path, sizeof path, err, sizeof err), 0);
    tc_ckpt_free(ck);
    tc_model_free(m);
  }
  CHECK_INT(tc_ckpt_prune(dir, 3), 0);
  char **names;
  int n;
  CHECK_INT(tc_ckpt_list(dir, &names, &n), 0);
  CHECK_INT(n, 3);
  CHECK_STR(names[0], "ckpt-0000000050.slck");
  CHECK_STR(names[2], "ckpt-0000000030.slck");
  tc_ckpt_list_free(names, n);
  /* newest corrupt: falls back to step 40 with one warning */
  snprintf(path, sizeof path, "%s/ckpt-0000000050.slck", dir);
  flip_byte(path, 600);
  struct tc_config c = gpt_cfg();
  struct tc_ckpt *got = NULL;
  char used[512];
  warnings = 0;
  CHECK_INT(tc_ckpt_load_newest(dir, &c, count_warn, NULL, &got, used, sizeof used, err, sizeof err), 0);
  CHECK_INT(warnings, 1);
  CHECK(got && got->meta.step == 40);
  CHECK(strstr(used, "ckpt-0000000040.slck") != NULL);
  tc_ckpt_free(got);
  /* another config: refused, not skipped */
  struct tc_config other = c;
  other.layers = 2;
  CHECK_INT(tc_ckpt_load_newest(dir, &other, count_warn, NULL, &got, used, sizeof used, err, sizeof err),
            SL_EMISMATCH);
  /* a write that hits the file size limit fails cleanly and keeps the rest */
  signal(SIGXFSZ, SIG_IGN);
  struct rlimit old, lim = {.rlim_cur = 600, .rlim_max = RLIM_INFINITY};
  getrlimit(RLIMIT_FSIZE, &old);
  lim.rlim_max = old.rlim_max;
  CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  struct tc_ckpt *ck = make_ckpt(&m, 60);
  int r = tc_ckpt_write(ck, dir, path, sizeof path, err, sizeof err);
  setrlimit(RLIMIT_FSIZE, &old);
  CHECK_INT(r, -EFBIG);
  fprintf(stderr, "file too large: %s\n", err);
  CHECK_INT(tc_ckpt_list(dir, &names, &n), 0);
  CHECK_INT(n, 3);
  CHECK_STR(names[0], "ckpt-0000000050.slck");
  tc_ckpt_list_free(names, n);
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s/.ckpt-0000000060.slck.tmp", dir);
  CHECK(access(tmp, F_OK) != 0);
  tc_ckpt_free(ck);
  tc_model_free(m);
  /* empty folder */
  char empty[300];
  snprintf(empty, sizeof empty, "%s/empty", dir);
  mkdir(empty, 0755);
  CHECK_INT(tc_ckpt_load_newest(empty, &c, NULL, NULL, &got, NULL, 0, err, sizeof err), -ENOENT);
}

static void write_gz(const char *path, const void *buf, size_t n) {
  gzFile g = gzopen(path, "wb");
  gzwrite(g, buf, (unsigned)n);
  gzclose(g);
}

static void be32(unsigned char *p, uint32_t v) {
  p[0] = v >> 24, p[1] = v >> 16, p[2] = v >> 8, p[3] = v;
}

static void test_idx(void) {
  char path[512], err[1024];
  unsigned char buf[16 + 3 * 784 + 8];
  memset(buf, 0, sizeof buf);
  be32(buf, 0x803), be32(buf + 4, 3), be32(buf + 8, 28), be32(buf + 12, 28);
  for (int i = 0; i < 3 * 784; i++) buf[16 + i] = (unsigned char)i;
  snprintf(path, sizeof path, "%s/t-images-idx3-ubyte.gz", dir);
  write_gz(path, buf, 16 + 3 * 784);
  unsigned char lab[8 + 3] = {0, 0, 8, 1, 0, 0, 0, 3, 7, 0, 9};
  char lpath[512];
  snprintf(lpath, sizeof lpath, "%s/t-labels-idx1-ubyte.gz", dir);
  write_gz(lpath, lab, sizeof lab);
  struct tc_images *im = NULL;
  CHECK_INT(tc_images_load(dir, "t", &im, err, sizeof err), 0);
  CHECK(im && im->n == 3 && im->y[0] == 7 && im->y[2] == 9);
  CHECK(im && im->x[1] == 1.0f / 255.0f);
  tc_images_free(im);

  uint8_t *data;
  uint32_t dims[3];
  struct { const char *name; size_t len; void (*edit)(unsigned char *); int expect; const char *needle; } cases[] = {
      {"truncated data", 16 + 3 * 784 - 100, NULL, SL_EFORMAT, "truncated"},
      {"truncated header", 10, NULL, SL_EFORMAT, "truncated"},
      {"trailing bytes", 16 + 3 * 784 + 8, NULL, SL_EFORMAT, "trailing"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    write_gz(path, buf, cases[i].len);
    int r = tc_idx_load(path, 3, &data, dims, err, sizeof err);
    CHECK_INT(r, cases[i].expect);
    CHECK(strstr(err, cases[i].needle) && strstr(err, path));
    fprintf(stderr, "%s: %s\n", cases[i].name, err);
  }
  buf[2] = 0x09; /* wrong type byte */
  write_gz(path, buf, 16 + 3 * 784);
  CHECK_INT(tc_idx_load(path, 3, &data, dims, err, sizeof err), SL_EFORMAT);
  CHECK(strstr(err, "magic") && strstr(err, path));
  fprintf(stderr, "wrong magic: %s\n", err);
  buf[2] = 0x08;
  be32(buf + 4, 0); /* zero items */
  write_gz(path, buf, 16 + 3 * 784);
  CHECK_INT(tc_idx_load(path, 3, &data, dims, err, sizeof err), SL_EFORMAT);
  fprintf(stderr, "zero dimension: %s\n", err);
  be32(buf + 4, 0x7fffffff); /* absurd count */
  write_gz(path, buf, 16 + 3 * 784);
  CHECK(tc_idx_load(path, 3, &data, dims, err, sizeof err) < 0);
  be32(buf + 4, 3);
  write_gz(path, buf, 16 + 3 * 784);
  /* labels disagree with images, and a label out of range */
  lab[7] = 2;
  write_gz(lpath, lab, sizeof lab - 1);
  CHECK_INT(tc_images_load(dir, "t", &im, err, sizeof err), SL_EFORMAT);
  fprintf(stderr, "count mismatch: %s\n", err);
  lab[7] = 3, lab[9] = 12;
  write_gz(lpath, lab, sizeof lab);
  CHECK_INT(tc_images_load(dir, "t", &im, err, sizeof err), SL_EFORMAT);
  CHECK(strstr(err, "label") != NULL);
  /* not gzip at all, and missing */
  int fd = open(path, O_WRONLY | O_TRUNC);
  CHECK(write(fd, "hello world, not an idx file", 28) == 28);
  close(fd);
  CHECK_INT(tc_idx_load(path, 3, &data, dims, err, sizeof err), SL_EFORMAT);
  unlink(path);
  CHECK_INT(tc_images_load(dir, "t", &im, err, sizeof err), -ENOENT);
  CHECK(strstr(err, path) != NULL);
  fprintf(stderr, "missing: %s\n", err);
}

static void test_text(void) {
  char path[512], err[1024];
  snprintf(path, sizeof path, "%s/short.txt", dir);
  FILE *f = fopen(path, "w");
  fputs("abc", f);
  fclose(f);
  struct tc_text *t = NULL;
  CHECK_INT(tc_text_load(path, 8, &t, err, sizeof err), SL_EFORMAT);
  CHECK(strstr(err, path) != NULL);
  f = fopen(path, "w");
  for (int i = 0; i < 400; i++) fputc("hello world"[i % 11], f);
  fclose(f);
  CHECK_INT(tc_text_load(path, 8, &t, err, sizeof err), 0);
  CHECK(t && t->vocab == 8); /* " dehlorw" */
  CHECK(t && t->symbols[0] == ' ' && t->symbols[7] == 'w');
  CHECK(t && t->n_train == 360);
  tc_text_free(t);
  snprintf(path, sizeof path, "%s/absent.txt", dir);
  CHECK_INT(tc_text_load(path, 8, &t, err, sizeof err), -ENOENT);
  CHECK(strstr(err, path) != NULL);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/tc-ckpt-XXXXXX");
  if (!mkdtemp(dir)) return 1;
  test_roundtrip_and_corruption();
  test_fallback_prune_and_enospc();
  test_idx();
  test_text();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  TEST_MAIN_END();
}
