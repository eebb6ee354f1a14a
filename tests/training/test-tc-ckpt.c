/* Unit tests of checkpoint files, model configs and data loaders: round
 * trip, a flipped byte in each section, truncation at every length, config
 * mismatch, malformed CONF sections, version-1 files written by an earlier
 * spotlab-train (tests/data/ckpt-v1), fallback to the previous checkpoint,
 * pruning, a write that fails (EFBIG) without losing anything, run
 * identities (pruning and loading take only the run's own checkpoints), a
 * folder and a FIFO named like a checkpoint, and malformed IDX files.
 *
 * usage: test-tc-ckpt DATA_DIR (tests/data) */
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
static const char *data_dir;

/* A config from its settings ("layers=2 heads=2 ..."). */
static struct tc_config config(const char *model, const char *settings) {
  struct tc_config c;
  char err[256];
  memset(&c, 0, sizeof c);
  int r = tc_config_parse(&c, model, settings, err, sizeof err);
  CHECK_INT(r, 0);
  if (r < 0) fprintf(stderr, "%s %s: %s\n", model, settings, err);
  return c;
}

static struct tc_config gpt_cfg(void) {
  return config("gpt", "layers=1 heads=2 dim=8 ctx=4 vocab=5");
}

/* Bytes of the CONF section (its header and payload) for config c. */
static long conf_section_bytes(const struct tc_config *c) {
  char text[TC_CKPT_CONF_MAX_BYTES];
  int n = tc_config_encode(c, text, sizeof text);
  CHECK(n > 0);
  return 24 + n;
}

static struct tc_ckpt *make_run_ckpt(struct tc_model **ret_m, uint64_t step, const char *run_id) {
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
  snprintf(meta.run_id, sizeof meta.run_id, "%s", run_id);
  meta.data_hash = 0x0123456789abcdefull;
  struct tc_ckpt *ck = tc_ckpt_new(m->n_params);
  tc_ckpt_capture(ck, m, &meta);
  *ret_m = m;
  return ck;
}

static struct tc_ckpt *make_ckpt(struct tc_model **ret_m, uint64_t step) {
  return make_run_ckpt(ret_m, step, "run-a");
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
  /* the file is version 3, its CONF section the config's settings */
  {
    FILE *f = fopen(path, "rb");
    unsigned char head[512 + 24 + 64];
    CHECK(f && fread(head, 1, sizeof head, f) == sizeof head);
    if (f) fclose(f);
    uint32_t version;
    memcpy(&version, head + 8, 4);
    CHECK_INT(version, 3);
    CHECK_STR((const char *)head + 16, "gpt");
    CHECK(memcmp(head + 464, "run-a\0", 6) == 0); /* the run identity */
    CHECK(memcmp(head + 512, "CONF", 4) == 0);
    CHECK(memcmp(head + 512 + 24, "layers=1\nheads=2\ndim=8\nctx=4\nvocab=5\n", 37) == 0);
  }
  /* config mismatch: refused with a message naming both configs */
  struct tc_config other = config("gpt", "layers=1 heads=2 dim=16 ctx=4 vocab=5");
  CHECK_INT(tc_ckpt_read(path, &other, &back, err, sizeof err), SL_EMISMATCH);
  CHECK(strstr(err, "dim=8") && strstr(err, "dim=16"));
  fprintf(stderr, "mismatch: %s\n", err);
  /* a flipped byte in the header and in each section */
  size_t bytes = m->n_params * sizeof(float);
  long cs = conf_section_bytes(&m->cfg);
  long offs[5] = {100, 512 + 24 + 5, 512 + cs + 24 + 3, (long)(512 + cs + 2 * 24 + bytes + 7),
                  (long)(512 + cs + 3 * 24 + 2 * bytes + bytes - 1)};
  const char *what[5] = {"header", "CONF", "PARM", "ADMM", "ADMV"};
  for (int i = 0; i < 5; i++) {
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
  CHECK_INT(tc_ckpt_prune(dir, 3, "run-a"), 0);
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
  CHECK_INT(tc_ckpt_load_newest(dir, &c, NULL, count_warn, NULL, &got, used, sizeof used, err, sizeof err), 0);
  CHECK_INT(warnings, 1);
  CHECK(got && got->meta.step == 40);
  CHECK(strstr(used, "ckpt-0000000040.slck") != NULL);
  tc_ckpt_free(got);
  /* another config: refused, not skipped */
  struct tc_config other = config("gpt", "layers=2 heads=2 dim=8 ctx=4 vocab=5");
  CHECK_INT(tc_ckpt_load_newest(dir, &other, NULL, count_warn, NULL, &got, used, sizeof used, err, sizeof err),
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
  CHECK_INT(tc_ckpt_load_newest(empty, &c, NULL, NULL, NULL, &got, NULL, 0, err, sizeof err), -ENOENT);
}

/* ---- configs and the model registry ---- */

/* The largest configs the options allow lay out every tensor (no table overflow). */
static void test_largest_layouts(void) {
  static struct tc_model m; /* large: off the stack */
  struct tc_config c = config("gpt", "layers=64 heads=1 dim=8 ctx=4 vocab=5");
  CHECK_INT(tc_model_layout(&c, &m), 0);
  CHECK_INT(m.n_tensors, 2 + 12 * 64 + 2);
  CHECK_STR(m.tensors[m.n_tensors - 1].name, "lnf_b");
  c = config("mlp", "layers=64 hidden=4 in_dim=784 classes=10");
  CHECK_INT(tc_model_layout(&c, &m), 0);
  CHECK_INT(m.n_tensors, 2 * 65);
}

static void test_config(void) {
  char err[256], buf[512];
  /* every registered model's table is usable by the generic code */
  for (int i = 0; tc_model_at(i); i++) {
    const struct tc_model_ops *o = tc_model_at(i);
    CHECK(strlen(o->name) > 0 && strlen(o->name) < TC_MODEL_NAME_BYTES);
    CHECK(tc_model_find(o->name) == o);
    CHECK(o->config_bytes <= TC_CONFIG_BYTES && o->n_fields > 0 && o->n_fields <= 64);
    for (int k = 0; k < o->n_fields; k++)
      CHECK(o->fields[k].offset + 4 <= o->config_bytes && o->fields[k].min <= o->fields[k].max);
    CHECK(o->opts_defaults && o->from_opts && o->shape && o->layout && o->init_std && o->acts_new && o->acts_free &&
          o->forward && o->backward && o->rate_metric && o->default_data);
    CHECK(!o->generates || (o->logits && o->data == TC_DATA_TEXT));
  }
  CHECK(tc_model_find("rnn") == NULL);
  CHECK_STR(tc_model_names(buf, sizeof buf), "gpt, mlp");
  /* text -> config -> text */
  struct tc_config c = config("gpt", " vocab=5\nctx=4  dim=8 heads=2 layers=1 ");
  struct tc_config d = gpt_cfg();
  CHECK(tc_config_equal(&c, &d));
  CHECK_INT(tc_config_validate(&c, err, sizeof err), 0);
  CHECK_STR(tc_config_describe(&c, buf, sizeof buf), "gpt layers=1 heads=2 dim=8 ctx=4 vocab=5");
  int n = tc_config_encode(&c, buf, sizeof buf);
  CHECK_INT(n, 37);
  CHECK_INT(tc_config_encode(&c, buf, 20), -ENOSPC);
  uint32_t v = 0;
  CHECK_INT(tc_config_get(&c, "dim", &v), 0);
  CHECK_INT(v, 8);
  CHECK_INT(tc_config_get(&c, "hidden", &v), -ENOENT);
  struct tc_config m = config("mlp", "layers=2 hidden=5 in_dim=784 classes=10");
  CHECK(!tc_config_equal(&c, &m));
  struct tc_row_shape sh;
  tc_config_shape(&m, &sh);
  CHECK(sh.inputs == 784 && sh.targets == 1 && sh.classes == 10 && sh.tokens == 0);
  tc_config_shape(&c, &sh);
  CHECK(sh.tokens == 4 && sh.targets == 4 && sh.classes == 5 && sh.inputs == 0);
  /* bad settings are refused with a reason, and cfg is left alone */
  struct {
    const char *model, *text, *needle;
  } bad[] = {
      {"rnn", "layers=1", "unknown model"},
      {"gpt", "layers=1 heads=2 dim=8 ctx=4 vocab=5 rope=1", "no setting 'rope'"},
      {"gpt", "layers=1 heads=2 dim=8 ctx=4", "needs vocab"},
      {"gpt", "layers=1 layers=2 heads=2 dim=8 ctx=4 vocab=5", "twice"},
      {"gpt", "layers=x heads=2 dim=8 ctx=4 vocab=5", "whole number"},
      {"gpt", "layers= heads=2 dim=8 ctx=4 vocab=5", "whole number"},
      {"gpt", "layers=-1 heads=2 dim=8 ctx=4 vocab=5", "whole number"},
      {"gpt", "layers=4294967296 heads=2 dim=8 ctx=4 vocab=5", "whole number"},
      {"gpt", "layers heads=2 dim=8 ctx=4 vocab=5", "name=value"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct tc_config keep = c;
    err[0] = 0;
    CHECK_INT(tc_config_parse(&keep, bad[i].model, bad[i].text, err, sizeof err), -EINVAL);
    CHECK(strstr(err, bad[i].needle) != NULL);
    CHECK(tc_config_equal(&keep, &c));
    fprintf(stderr, "bad settings '%s': %s\n", bad[i].text, err);
  }
  /* parsed but invalid: ranges and the model's own rules */
  const char *invalid[] = {"layers=0 heads=2 dim=8 ctx=4 vocab=5", "layers=1 heads=3 dim=8 ctx=4 vocab=5",
                           "layers=1 heads=2 dim=8 ctx=4 vocab=300"};
  for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
    struct tc_config x = config("gpt", invalid[i]);
    CHECK_INT(tc_config_validate(&x, err, sizeof err), -EINVAL);
    fprintf(stderr, "invalid '%s': %s\n", invalid[i], err);
  }
  struct tc_config x = config("mlp", "layers=2 hidden=5 in_dim=100 classes=10");
  CHECK_INT(tc_config_validate(&x, err, sizeof err), -EINVAL);
  struct tc_config unknown = c;
  memcpy(unknown.model, "rnn", 4);
  CHECK_INT(tc_config_validate(&unknown, err, sizeof err), -EINVAL);
  CHECK(tc_config_ops(&unknown) == NULL);
}

/* ---- version-1 files from an earlier spotlab-train ---- */

static struct tc_ckpt *read_v1(const char *model, int step, char *path, size_t size) {
  char err[1024];
  struct tc_ckpt *ck = NULL;
  snprintf(path, size, "%s/ckpt-v1/%s/ckpt-%010d.slck", data_dir, model, step);
  int r = tc_ckpt_read(path, NULL, &ck, err, sizeof err);
  CHECK_INT(r, 0);
  if (r < 0) fprintf(stderr, "%s\n", err);
  return ck;
}

static void test_v1_files(void) {
  char path[600], out[600], err[1024], desc[256];
  /* what the run that wrote them was (tests/data/ckpt-v1/README.md) */
  struct {
    const char *model, *desc;
    uint64_t cursor[2];
  } runs[] = {
      {"gpt", "gpt layers=1 heads=2 dim=16 ctx=16 vocab=", {12, 24}},
      {"mlp", "mlp layers=1 hidden=8 in_dim=784 classes=10", {48, 96}},
  };
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < 2; i++) {
      int step = 3 * (i + 1);
      struct tc_ckpt *ck = read_v1(runs[k].model, step, path, sizeof path);
      if (!ck) continue;
      tc_config_describe(&ck->meta.cfg, desc, sizeof desc);
      CHECK(strncmp(desc, runs[k].desc, strlen(runs[k].desc)) == 0);
      fprintf(stderr, "%s: %s step %llu\n", path, desc, (unsigned long long)ck->meta.step);
      CHECK_INT(ck->meta.step, step);
      CHECK_INT(ck->meta.adam_t, step);
      CHECK_INT(ck->meta.seed, 7);
      CHECK_INT(ck->meta.world_size, 1);
      CHECK_INT(ck->meta.data_cursor, runs[k].cursor[i]);
      CHECK_INT(ck->meta.data_epoch, 0);
      /* the state restores into a model of that config */
      struct tc_model *m = tc_model_new_buffers(&ck->meta.cfg);
      CHECK(m != NULL);
      if (m) {
        CHECK_INT(m->n_params, ck->n_params);
        CHECK_INT(tc_ckpt_restore(ck, m), 0);
        CHECK(memcmp(m->params, ck->params, sizeof(float) * m->n_params) == 0);
        CHECK_INT(m->adam_t, step);
      }
      tc_model_free(m);
      /* version 1 has no run identity; written again (with one) it is
       * version 3 with the same contents */
      CHECK_STR(ck->meta.run_id, "");
      snprintf(ck->meta.run_id, sizeof ck->meta.run_id, "from-v1");
      char sub[400];
      snprintf(sub, sizeof sub, "%s/v1-to-v2-%s", dir, runs[k].model);
      mkdir(sub, 0755);
      CHECK_INT(tc_ckpt_write(ck, sub, out, sizeof out, err, sizeof err), 0);
      struct tc_ckpt *back = NULL;
      CHECK_INT(tc_ckpt_read(out, &ck->meta.cfg, &back, err, sizeof err), 0);
      if (back) {
        CHECK(memcmp(&back->meta, &ck->meta, sizeof ck->meta) == 0);
        CHECK(back->n_params == ck->n_params);
        size_t b = sizeof(float) * ck->n_params;
        CHECK(memcmp(back->params, ck->params, b) == 0 && memcmp(back->m, ck->m, b) == 0 &&
              memcmp(back->v, ck->v, b) == 0);
      }
      tc_ckpt_free(back);
      tc_ckpt_free(ck);
    }
  }
  /* the moments moved between the two checkpoints of a run: they are read, not zero */
  struct tc_ckpt *a = read_v1("gpt", 3, path, sizeof path), *b = read_v1("gpt", 6, path, sizeof path);
  if (a && b) CHECK(memcmp(a->m, b->m, sizeof(float) * a->n_params) != 0);
  tc_ckpt_free(a);
  tc_ckpt_free(b);
}

/* ---- damaged files: every truncation, every header byte, crafted CONF ---- */

static size_t slurp(const char *path, unsigned char **ret) {
  FILE *f = fopen(path, "rb");
  CHECK(f != NULL);
  if (!f) return 0;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  *ret = malloc((size_t)n);
  CHECK(fread(*ret, 1, (size_t)n, f) == (size_t)n);
  fclose(f);
  return (size_t)n;
}

static void spill(const char *path, const void *a, size_t na, const void *b, size_t nb) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  if (na) fwrite(a, 1, na, f);
  if (nb) fwrite(b, 1, nb, f);
  fclose(f);
}

/* A copy of the valid file `good` (config c) with its header patched by
 * `model` (NULL: kept) and `n_params` (0: kept), and its CONF payload
 * replaced by text of `n` bytes, checksums made right, so only the parsing
 * can refuse it. */
static int read_crafted(const unsigned char *good, size_t size, const struct tc_config *c,
                        const char *model, uint64_t n_params, const char *text, size_t n,
                        uint64_t len_field, char *err, size_t es) {
  long cs = conf_section_bytes(c);
  size_t tail = size - 512 - (size_t)cs;
  unsigned char *buf = malloc(512 + 24 + n + tail);
  memcpy(buf, good, 512);
  if (model || n_params) {
    if (model) {
      memset(buf + 16, 0, 16);
      memcpy(buf + 16, model, strlen(model) < 16 ? strlen(model) : 16);
    }
    if (n_params)
      memcpy(buf + 104, &n_params, 8);
    uint32_t crc = tc_crc32c(0, buf, 508);
    memcpy(buf + 508, &crc, 4);
  }
  memcpy(buf + 512, "CONF", 4);
  uint32_t crc = tc_crc32c(0, text, n);
  memcpy(buf + 516, &crc, 4);
  memcpy(buf + 520, &len_field, 8);
  memset(buf + 528, 0, 8);
  memcpy(buf + 536, text, n);
  memcpy(buf + 536 + n, good + 512 + cs, tail);
  char path[600];
  snprintf(path, sizeof path, "%s/crafted.slck", dir);
  spill(path, buf, 536 + n + tail, NULL, 0);
  free(buf);
  struct tc_ckpt *ck = NULL;
  int r = tc_ckpt_read(path, NULL, &ck, err, es);
  tc_ckpt_free(ck);
  return r;
}

static void test_damaged_v2(void) {
  char path[600], copy[600], err[1024];
  struct tc_model *m;
  struct tc_ckpt *ck = make_ckpt(&m, 70);
  CHECK_INT(tc_ckpt_write(ck, dir, path, sizeof path, err, sizeof err), 0);
  unsigned char *good = NULL;
  size_t size = slurp(path, &good);
  unlink(path);
  long cs = conf_section_bytes(&m->cfg);
  snprintf(copy, sizeof copy, "%s/damaged.slck", dir);
  struct tc_ckpt *back = NULL;
  /* every length short of the whole file: a format error, nothing returned */
  int bad_trunc = 0;
  for (size_t len = 0; len < size; len += len < (size_t)(512 + cs + 64) ? 1 : 61) {
    spill(copy, good, len, NULL, 0);
    back = NULL;
    int r = tc_ckpt_read(copy, NULL, &back, err, sizeof err);
    if (r != SL_EFORMAT || back) bad_trunc++, fprintf(stderr, "truncated to %zu: %d %s\n", len, r, err);
  }
  CHECK_INT(bad_trunc, 0);
  /* one more byte at the end */
  spill(copy, good, size, "x", 1);
  CHECK_INT(tc_ckpt_read(copy, NULL, &back, err, sizeof err), SL_EFORMAT);
  CHECK(strstr(err, "trailing") != NULL);
  /* every byte of the header and the CONF section flipped: refused */
  int bad_flip = 0;
  unsigned char *dup = malloc(size);
  for (long off = 0; off < 512 + cs; off++) {
    memcpy(dup, good, size);
    dup[off] ^= 0x40;
    spill(copy, dup, size, NULL, 0);
    back = NULL;
    int r = tc_ckpt_read(copy, NULL, &back, err, sizeof err);
    if (r >= 0 || back) bad_flip++, fprintf(stderr, "flip at %ld accepted\n", off);
    tc_ckpt_free(back);
  }
  free(dup);
  CHECK_INT(bad_flip, 0);
  /* CONF payloads with right checksums but wrong contents */
  struct {
    const char *model, *text, *needle;
    int expect;
  } cases[] = {
      {NULL, "vocab=5 ctx=4 dim=8 heads=2 layers=1", NULL, 0}, /* any order, any spacing */
      {NULL, "layers=1\nheads=2\ndim=8\nctx=4\nvocab=5\nrope=1\n", "no setting 'rope'", SL_EFORMAT},
      {NULL, "layers=1\nheads=2\ndim=8\nctx=4\n", "needs vocab", SL_EFORMAT},
      {NULL, "layers=1\nheads=2\ndim=8\nctx=4\nvocab=five\n", "whole number", SL_EFORMAT},
      {NULL, "layers=1\nheads=2\ndim=16\nctx=4\nvocab=5\n", "parameters stored", SL_EFORMAT},
      {NULL, "layers=1\nheads=3\ndim=8\nctx=4\nvocab=5\n", "invalid model", SL_EFORMAT},
      {NULL, "", "needs layers", SL_EFORMAT},
      {"rnn", "layers=1\nheads=2\ndim=8\nctx=4\nvocab=5\n", "does not have", SL_EFORMAT},
      {"mlp", "layers=1\nheads=2\ndim=8\nctx=4\nvocab=5\n", "no setting 'heads'", SL_EFORMAT},
      {"0123456789abcdefXYZ", "layers=1\nheads=2\ndim=8\nctx=4\nvocab=5\n", "not terminated", SL_EFORMAT},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    err[0] = 0;
    int r = read_crafted(good, size, &m->cfg, cases[i].model, 0, cases[i].text,
                         strlen(cases[i].text), strlen(cases[i].text), err, sizeof err);
    CHECK_INT(r, cases[i].expect);
    if (cases[i].needle) CHECK(strstr(err, cases[i].needle) != NULL);
    fprintf(stderr, "CONF '%s': %s\n", cases[i].text, r ? err : "ok");
  }
  /* a NUL inside, and a length field past the limit or past the payload */
  CHECK_INT(read_crafted(good, size, &m->cfg, NULL, 0, "layers=1\0heads=2", 16, 16, err, sizeof err),
            SL_EFORMAT);
  CHECK(strstr(err, "NUL") != NULL);
  const char *t = "layers=1\nheads=2\ndim=8\nctx=4\nvocab=5\n";
  CHECK_INT(read_crafted(good, size, &m->cfg, NULL, 0, t, strlen(t), 1ull << 40, err, sizeof err),
            SL_EFORMAT);
  CHECK(strstr(err, "CONF") != NULL);
  CHECK(read_crafted(good, size, &m->cfg, NULL, 0, t, strlen(t), strlen(t) + 30, err, sizeof err) < 0);
  /* a header and CONF, checksums right, for a model of 50 billion
   * parameters, in a file of a few KB: refused by its size before any
   * buffer is allocated (600 GB would be asked for) */
  const char *huge = "layers=64\nheads=64\ndim=8192\nctx=8192\nvocab=256\n";
  struct tc_config big;
  struct tc_model *layout = calloc(1, sizeof *layout);
  CHECK_INT(tc_config_parse(&big, "gpt", huge, err, sizeof err), 0);
  CHECK_INT(tc_config_validate(&big, err, sizeof err), 0);
  CHECK_INT(tc_model_layout(&big, layout), 0);
  CHECK(layout->n_params > 50000000000ull);
  CHECK_INT(read_crafted(good, size, &m->cfg, NULL, layout->n_params, huge, strlen(huge),
                         strlen(huge), err, sizeof err), SL_EFORMAT);
  CHECK(strstr(err, "truncated") && strstr(err, "its header describes"));
  fprintf(stderr, "a huge model's header in a small file: %s\n", err);
  free(layout);
  free(good);
  tc_ckpt_free(ck);
  tc_model_free(m);
}

/* ---- run identities and what else a folder holds ---- */

static void write_run(const char *d, uint64_t step, const char *run_id) {
  char path[600], err[1024];
  struct tc_model *m;
  struct tc_ckpt *ck = make_run_ckpt(&m, step, run_id);
  CHECK_INT(tc_ckpt_write(ck, d, path, sizeof path, err, sizeof err), 0);
  tc_ckpt_free(ck);
  tc_model_free(m);
}

/* The header of path patched: bytes [off, off+n) set to b, CRC made right. */
static void patch_header(const char *path, long off, const void *b, size_t n) {
  unsigned char h[512];
  int fd = open(path, O_RDWR);
  CHECK(fd >= 0 && pread(fd, h, 512, 0) == 512);
  memcpy(h + off, b, n);
  uint32_t crc = tc_crc32c(0, h, 508);
  memcpy(h + 508, &crc, 4);
  CHECK(pwrite(fd, h, 512, 0) == 512);
  close(fd);
}

static int has(const char *d, const char *name) {
  char path[700];
  snprintf(path, sizeof path, "%s/%s", d, name);
  return access(path, F_OK) == 0;
}

static void test_identity(void) {
  char d[400], path[600], err[1024], used[600];
  snprintf(d, sizeof d, "%s/identity", dir);
  CHECK(mkdir(d, 0755) == 0);
  /* run a's steps 10..50, run b's 15 and 25; an older file without identity at 5 */
  for (uint64_t s = 10; s <= 50; s += 10) write_run(d, s, "run-a");
  write_run(d, 15, "run-b");
  write_run(d, 25, "run-b");
  write_run(d, 5, "legacy");
  snprintf(path, sizeof path, "%s/ckpt-0000000005.slck", d);
  uint32_t v2 = 2;
  unsigned char zero[44] = {0};
  patch_header(path, 8, &v2, 4);
  patch_header(path, 464, zero, sizeof zero);
  struct tc_ckpt_meta meta;
  CHECK_INT(tc_ckpt_read_meta(path, &meta, err, sizeof err), 0);
  CHECK_STR(meta.run_id, "");
  struct tc_ckpt_run *runs = NULL;
  int n = 0;
  CHECK_INT(tc_ckpt_runs(d, &runs, &n), 0);
  CHECK_INT(n, 3);
  if (n == 3) {
    CHECK_STR(runs[0].run_id, "run-a");
    CHECK_INT(runs[0].newest_step, 50);
    CHECK_INT(runs[0].count, 5);
    CHECK_INT(runs[0].seed, 99);
    CHECK(runs[0].data_hash == 0x0123456789abcdefull);
    CHECK_STR(runs[1].run_id, "run-b");
    CHECK_INT(runs[1].count, 2);
    CHECK_STR(runs[2].run_id, "");
    CHECK_INT(runs[2].count, 1);
  }
  free(runs);
  /* pruning run b keeps one of b's and every other file */
  CHECK_INT(tc_ckpt_prune(d, 1, "run-b"), 0);
  CHECK(has(d, "ckpt-0000000025.slck") && !has(d, "ckpt-0000000015.slck"));
  CHECK(has(d, "ckpt-0000000005.slck") && has(d, "ckpt-0000000010.slck"));
  CHECK_INT(tc_ckpt_prune(d, 2, "run-a"), 0);
  CHECK(has(d, "ckpt-0000000050.slck") && has(d, "ckpt-0000000040.slck"));
  CHECK(!has(d, "ckpt-0000000030.slck") && !has(d, "ckpt-0000000010.slck"));
  CHECK(has(d, "ckpt-0000000025.slck") && has(d, "ckpt-0000000005.slck"));
  CHECK_INT(tc_ckpt_prune(d, 2, ""), -EINVAL); /* no run: nothing is anyone's */
  /* loading run b's newest passes over a's newer ones */
  struct tc_config c = gpt_cfg();
  struct tc_ckpt *got = NULL;
  CHECK_INT(tc_ckpt_load_newest(d, &c, "run-b", NULL, NULL, &got, used, sizeof used, err,
                                sizeof err), 0);
  CHECK(got && got->meta.step == 25 && !strcmp(got->meta.run_id, "run-b"));
  got = tc_ckpt_free(got);
  /* a run with none of its own takes one without identity */
  CHECK_INT(tc_ckpt_load_newest(d, &c, "run-c", NULL, NULL, &got, used, sizeof used, err,
                                sizeof err), 0);
  CHECK(got && got->meta.step == 5 && got->meta.run_id[0] == 0);
  got = tc_ckpt_free(got);
  /* a malformed identity (right CRC) is a format error */
  snprintf(path, sizeof path, "%s/ckpt-0000000025.slck", d);
  patch_header(path, 464, "run b", 5);
  CHECK_INT(tc_ckpt_read_meta(path, &meta, err, sizeof err), SL_EFORMAT);
  CHECK(strstr(err, "run identity") != NULL);
  /* a checkpoint is never written without a run id */
  struct tc_model *m;
  struct tc_ckpt *ck = make_run_ckpt(&m, 60, "");
  CHECK_INT(tc_ckpt_write(ck, d, path, sizeof path, err, sizeof err), -EINVAL);
  tc_ckpt_free(ck);
  tc_model_free(m);
  /* setting aside moves every checkpoint-named file and deletes none */
  char sub[4096];
  CHECK_INT(tc_ckpt_set_aside(d, sub, sizeof sub, err, sizeof err), 4);
  CHECK(strstr(sub, "/set-aside-") != NULL);
  CHECK(has(sub, "ckpt-0000000050.slck") && has(sub, "ckpt-0000000005.slck"));
  CHECK_INT(tc_ckpt_runs(d, &runs, &n), 0);
  CHECK_INT(n, 0);
  free(runs);
  CHECK_INT(tc_ckpt_set_aside(d, sub, sizeof sub, err, sizeof err), 0);
  CHECK_STR(sub, "");
}

/* A folder or a FIFO under a checkpoint's name: a clear error, at once. */
static void test_odd_files(void) {
  char d[400], path[600], err[1024];
  snprintf(d, sizeof d, "%s/odd", dir);
  CHECK(mkdir(d, 0755) == 0);
  snprintf(path, sizeof path, "%s/ckpt-0000000009.slck", d);
  CHECK(mkdir(path, 0755) == 0);
  struct tc_ckpt *ck = NULL;
  memset(err, 0x7f, sizeof err); /* what the reader does not write shows (no path holds DEL) */
  err[sizeof err - 1] = 0;
  CHECK_INT(tc_ckpt_read(path, NULL, &ck, err, sizeof err), SL_EFORMAT);
  CHECK(strstr(err, "not a checkpoint file (a folder)") != NULL && !strchr(err, 0x7f));
  fprintf(stderr, "folder: %s\n", err);
  snprintf(path, sizeof path, "%s/ckpt-0000000008.slck", d);
  CHECK(mkfifo(path, 0644) == 0);
  CHECK_INT(tc_ckpt_read(path, NULL, &ck, err, sizeof err), SL_EFORMAT);
  CHECK(strstr(err, "not a checkpoint file (a FIFO)") != NULL);
  fprintf(stderr, "fifo: %s\n", err);
  struct tc_ckpt_meta meta;
  CHECK_INT(tc_ckpt_read_meta(path, &meta, err, sizeof err), SL_EFORMAT);
  /* loading skips both with a warning each; a real one after them is found */
  write_run(d, 7, "run-a");
  struct tc_config c = gpt_cfg();
  warnings = 0;
  CHECK_INT(tc_ckpt_load_newest(d, &c, NULL, count_warn, NULL, &ck, NULL, 0, err, sizeof err), 0);
  CHECK(ck && ck->meta.step == 7);
  CHECK_INT(warnings, 2);
  ck = tc_ckpt_free(ck);
  /* pruning leaves what is not the run's */
  CHECK_INT(tc_ckpt_prune(d, 1, "run-a"), 0);
  CHECK(has(d, "ckpt-0000000009.slck") && has(d, "ckpt-0000000008.slck"));
  /* a FIFO under the temporary's name does not block the writer */
  snprintf(path, sizeof path, "%s/.ckpt-0000000011.slck.tmp", d);
  CHECK(mkfifo(path, 0644) == 0);
  write_run(d, 11, "run-a");
  CHECK(has(d, "ckpt-0000000011.slck"));
  snprintf(path, sizeof path, "%s/ckpt-0000000009.slck", d);
  rmdir(path);
}

/* ---- damaged version-1 headers ---- */

static void test_damaged_v1(void) {
  char path[600], copy[600], err[1024];
  struct tc_ckpt *probe = read_v1("mlp", 3, path, sizeof path);
  tc_ckpt_free(probe);
  unsigned char *good = NULL;
  size_t size = slurp(path, &good);
  if (!good) return;
  snprintf(copy, sizeof copy, "%s/v1.slck", dir);
  struct {
    int field;
    uint32_t value;
    const char *needle;
  } cases[] = {
      {0, 9, "unknown model kind 9"}, /* kind */
      {2, 4, "sets heads"},           /* heads on an mlp */
      {6, 0, "hidden must be"},       /* hidden 0 */
      {6, 9, "parameters stored"},    /* another width than the arrays */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    unsigned char *dup = malloc(size);
    memcpy(dup, good, size);
    memcpy(dup + 16 + 4 * cases[i].field, &cases[i].value, 4);
    uint32_t crc = tc_crc32c(0, dup, 508);
    memcpy(dup + 508, &crc, 4);
    spill(copy, dup, size, NULL, 0);
    free(dup);
    struct tc_ckpt *ck = NULL;
    err[0] = 0;
    CHECK_INT(tc_ckpt_read(copy, NULL, &ck, err, sizeof err), SL_EFORMAT);
    CHECK(ck == NULL && strstr(err, cases[i].needle) != NULL);
    fprintf(stderr, "v1 field %d = %u: %s\n", cases[i].field, cases[i].value, err);
  }
  /* a flipped parameter byte is caught by the section checksum as before */
  good[size - 5] ^= 0x40;
  spill(copy, good, size, NULL, 0);
  struct tc_ckpt *ck = NULL;
  CHECK_INT(tc_ckpt_read(copy, NULL, &ck, err, sizeof err), SL_ECHECKSUM);
  free(good);
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

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test-tc-ckpt DATA_DIR\n");
    return 2;
  }
  data_dir = argv[1];
  snprintf(dir, sizeof dir, "/tmp/tc-ckpt-XXXXXX");
  if (!mkdtemp(dir)) return 1;
  test_config();
  test_largest_layouts();
  test_roundtrip_and_corruption();
  test_v1_files();
  test_damaged_v2();
  test_damaged_v1();
  test_fallback_prune_and_enospc();
  test_identity();
  test_odd_files();
  test_idx();
  test_text();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  TEST_MAIN_END();
}
