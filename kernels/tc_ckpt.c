/* Checkpoint files (format in tc_ckpt.h and docs/internals/training.md).
 *
 * Invariant: a file named ckpt-*.slck is complete and durable. Writers only
 * ever create a hidden temporary, and readers verify the header CRC and each
 * section CRC before anything is copied into a model. Anything else a folder
 * holds under such a name (a folder, a FIFO, a device) is reported, never
 * opened for reading. A folder of checkpoints (listing, pruning, setting
 * aside, the newest valid one) is tc_ckpt_dir.c's. */
#include "tc_ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sl_err.h"
#include "sl_file.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "format is little-endian");

static const char MAGIC[8] = {'S', 'L', 'T', 'C', 'K', 'P', 'T', 0};
static const char *TAGS[3] = {"PARM", "ADMM", "ADMV"};
static const char CONF_TAG[4] = {'C', 'O', 'N', 'F'};
#define SECTION_HEADER_BYTES 24

/* ---- CRC32C ---- */

static uint32_t crc_table[256];

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    crc_table[i] = c;
  }
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const uint8_t *p,
                                                          size_t n) {
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    c64 = __builtin_ia32_crc32di(c64, w);
  }
  c = (uint32_t)c64;
  for (; n; n--) c = __builtin_ia32_crc32qi(c, *p++);
  return c;
}
#endif

uint32_t tc_crc32c(uint32_t crc, const void *buf, size_t n) {
  const uint8_t *p = buf;
  uint32_t c = ~crc;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("sse4.2")) return ~crc_hw(c, p, n);
#endif
  static int ready;
  if (!ready) crc_init(), ready = 1;
  for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return ~c;
}

uint64_t tc_hash64(uint64_t h, const void *buf, size_t n) {
  const uint8_t *p = buf;
  const uint64_t prime = 0x100000001b3ull; /* FNV-1a's, over words */
  h ^= 0x9e3779b97f4a7c15ull * (n + 1);
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    h = (h ^ w) * prime;
    h ^= h >> 32;
  }
  for (; n; n--) h = (h ^ *p++) * prime;
  return h ^ (h >> 29);
}

/* ---- run identity ---- */

int tc_run_id_valid(const char *s) {
  size_t n = s ? strlen(s) : 0;
  if (n == 0 || n > TC_RUN_ID_MAX) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '.' || c == '_' || c == '-'))
      return 0;
  }
  return 1;
}

int tc_run_id_new(char ret[TC_RUN_ID_MAX + 1]) {
  uint8_t b[TC_RUN_ID_MAX / 2];
  size_t got = 0;
  while (got < sizeof b) {
    ssize_t k = getrandom(b + got, sizeof b - got, 0);
    if (k < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    got += (size_t)k;
  }
  for (size_t i = 0; i < sizeof b; i++) snprintf(ret + 2 * i, 3, "%02x", b[i]);
  return 0;
}

/* ---- snapshot ---- */

struct tc_ckpt *tc_ckpt_new(size_t n_params) {
  struct tc_ckpt *ck = calloc(1, sizeof *ck);
  if (!ck) return NULL;
  ck->n_params = n_params;
  ck->params = malloc(sizeof(float) * (n_params ? n_params : 1));
  ck->m = malloc(sizeof(float) * (n_params ? n_params : 1));
  ck->v = malloc(sizeof(float) * (n_params ? n_params : 1));
  if (!ck->params || !ck->m || !ck->v) return tc_ckpt_free(ck);
  return ck;
}

struct tc_ckpt *tc_ckpt_free(struct tc_ckpt *ck) {
  if (!ck) return NULL;
  free(ck->params);
  free(ck->m);
  free(ck->v);
  free(ck);
  return NULL;
}

void tc_ckpt_capture(struct tc_ckpt *ck, const struct tc_model *m,
                     const struct tc_ckpt_meta *meta) {
  ck->meta = *meta;
  ck->meta.cfg = m->cfg;
  ck->meta.adam_t = m->adam_t;
  memcpy(ck->params, m->params, sizeof(float) * m->n_params);
  memcpy(ck->m, m->m, sizeof(float) * m->n_params);
  memcpy(ck->v, m->v, sizeof(float) * m->n_params);
}

int tc_ckpt_restore(const struct tc_ckpt *ck, struct tc_model *m) {
  if (!tc_config_equal(&ck->meta.cfg, &m->cfg) || ck->n_params != m->n_params)
    return SL_EMISMATCH;
  memcpy(m->params, ck->params, sizeof(float) * m->n_params);
  memcpy(m->m, ck->m, sizeof(float) * m->n_params);
  memcpy(m->v, ck->v, sizeof(float) * m->n_params);
  m->adam_t = ck->meta.adam_t;
  return 0;
}

/* ---- header encoding ---- */

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* Version 1 held the config as nine fixed fields at [16,52): kind, layers,
 * heads, dim, ctx, vocab, hidden, in_dim, classes, with kind 1 gpt and 2 mlp
 * and a kind's unused fields zero. This table turns them into settings. */
static const char *const V1_FIELDS[9] = {"kind", "layers", "heads", "dim", "ctx",
                                         "vocab", "hidden", "in_dim", "classes"};
static const struct {
  uint32_t kind;
  const char *model;
  uint16_t used; /* bit i: V1_FIELDS[i] belongs to the model */
} V1_KINDS[] = {
    {1, "gpt", 1u << 1 | 1u << 2 | 1u << 3 | 1u << 4 | 1u << 5},
    {2, "mlp", 1u << 1 | 1u << 6 | 1u << 7 | 1u << 8},
};

static int config_from_v1(const uint8_t *h, struct tc_config *ret, char *err, size_t err_size,
                          const char *path) {
  uint32_t f[9];
  for (int i = 0; i < 9; i++) f[i] = get32(h + 16 + 4 * i);
  for (size_t k = 0; k < sizeof V1_KINDS / sizeof V1_KINDS[0]; k++) {
    if (V1_KINDS[k].kind != f[0]) continue;
    char text[256], why[256];
    size_t off = 0;
    for (int i = 1; i < 9; i++) {
      int used = (V1_KINDS[k].used >> i) & 1;
      if (!used && f[i] != 0) {
        snprintf(err, err_size, "%s: version-1 header sets %s, which %s does not have", path,
                 V1_FIELDS[i], V1_KINDS[k].model);
        return SL_EFORMAT;
      }
      if (used)
        off += (size_t)snprintf(text + off, sizeof text - off, "%s=%u ", V1_FIELDS[i], f[i]);
    }
    if (tc_config_parse(ret, V1_KINDS[k].model, text, why, sizeof why) < 0) {
      snprintf(err, err_size, "%s: version-1 header: %s", path, why);
      return SL_EFORMAT;
    }
    return 0;
  }
  snprintf(err, err_size, "%s: version-1 header names unknown model kind %u", path, f[0]);
  return SL_EFORMAT;
}

/* Offsets: see docs/internals/training.md. */
static void encode_header(const struct tc_ckpt *ck, uint8_t h[TC_CKPT_HEADER_BYTES]) {
  const struct tc_ckpt_meta *mt = &ck->meta;
  memset(h, 0, TC_CKPT_HEADER_BYTES);
  memcpy(h, MAGIC, 8);
  put32(h + 8, TC_CKPT_VERSION);
  put32(h + 12, TC_CKPT_HEADER_BYTES);
  memcpy(h + 16, mt->cfg.model, TC_MODEL_NAME_BYTES);
  put32(h + 52, mt->world_size);
  put32(h + 56, mt->rank);
  put32(h + 60, 4); /* sections: CONF and three arrays */
  uint64_t u[6] = {mt->step, mt->adam_t, mt->seed, mt->data_cursor, mt->data_epoch,
                   (uint64_t)ck->n_params};
  for (int i = 0; i < 6; i++) put64(h + 64 + 8 * i, u[i]);
  const struct tc_rng *r[3] = {&mt->rng_init, &mt->rng_data, &mt->rng_sample};
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < 4; i++) put64(h + 112 + 32 * k + 8 * i, r[k]->s[i]);
  memcpy(h + 208, mt->symbols, 256);
  memcpy(h + 464, mt->run_id, strnlen(mt->run_id, TC_RUN_ID_MAX));
  put64(h + 496, mt->data_hash);
  put32(h + 508, tc_crc32c(0, h, 508));
}

/* Version 3's identity at [464,508): the run id, NUL-padded to 32 bytes
 * (all 32 may be used), the data hash, 4 zero bytes. */
static int decode_identity(const uint8_t *h, struct tc_ckpt_meta *mt, char *err, size_t err_size,
                           const char *path) {
  memcpy(mt->run_id, h + 464, TC_RUN_ID_MAX);
  mt->run_id[TC_RUN_ID_MAX] = 0;
  size_t n = strlen(mt->run_id);
  int padded = 1;
  for (size_t i = n; i < TC_RUN_ID_MAX; i++) padded &= h[464 + i] == 0;
  if (!tc_run_id_valid(mt->run_id) || !padded || get32(h + 504) != 0) {
    mt->run_id[0] = 0;
    snprintf(err, err_size, "%s: the run identity in the header is malformed", path);
    return SL_EFORMAT;
  }
  mt->data_hash = get64(h + 496);
  return 0;
}

/* Everything but the config, which versions 2 and 3 keep in their CONF
 * section: *ret_version says whether to read it (>= 2) or take it from the
 * v1 fields (1). */
static int decode_header(const uint8_t *h, struct tc_ckpt_meta *mt, uint64_t *ret_n,
                         uint32_t *ret_version, char *err, size_t err_size, const char *path) {
  if (memcmp(h, MAGIC, 8) != 0) {
    snprintf(err, err_size, "%s: not a spotlab checkpoint (bad magic)", path);
    return SL_EFORMAT;
  }
  if (tc_crc32c(0, h, 508) != get32(h + 508)) {
    snprintf(err, err_size, "%s: header checksum mismatch", path);
    return SL_ECHECKSUM;
  }
  uint32_t version = get32(h + 8);
  if (version < 1 || version > TC_CKPT_VERSION || get32(h + 12) != TC_CKPT_HEADER_BYTES ||
      get32(h + 60) != (version == 1 ? 3 : 4)) {
    snprintf(err, err_size, "%s: unsupported checkpoint version %u", path, version);
    return SL_EFORMAT;
  }
  memset(mt, 0, sizeof *mt);
  int r = 0;
  if (version == 1) {
    r = config_from_v1(h, &mt->cfg, err, err_size, path);
  } else if (!memchr(h + 16, 0, TC_MODEL_NAME_BYTES)) {
    snprintf(err, err_size, "%s: model name is not terminated", path);
    r = SL_EFORMAT;
  } else {
    memcpy(mt->cfg.model, h + 16, TC_MODEL_NAME_BYTES);
  }
  if (r < 0) return r;
  mt->world_size = get32(h + 52);
  mt->rank = get32(h + 56);
  uint64_t *u[5] = {&mt->step, &mt->adam_t, &mt->seed, &mt->data_cursor, &mt->data_epoch};
  for (int i = 0; i < 5; i++) *u[i] = get64(h + 64 + 8 * i);
  *ret_n = get64(h + 104);
  struct tc_rng *rs[3] = {&mt->rng_init, &mt->rng_data, &mt->rng_sample};
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < 4; i++) rs[k]->s[i] = get64(h + 112 + 32 * k + 8 * i);
  memcpy(mt->symbols, h + 208, 256);
  if (version >= 3 && (r = decode_identity(h, mt, err, err_size, path)) < 0) return r;
  *ret_version = version;
  return 0;
}

/* ---- writing ---- */

static int write_all(int fd, const void *buf, size_t n) {
  const uint8_t *p = buf;
  while (n) {
    ssize_t k = write(fd, p, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (k == 0) return -EIO;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

int tc_ckpt_write(const struct tc_ckpt *ck, const char *dir, char *ret_path, size_t path_size,
                  char *err, size_t err_size) {
  char tmp[4096], path[4096];
  unsigned long long step = (unsigned long long)ck->meta.step;
  snprintf(tmp, sizeof tmp, "%s/.ckpt-%010llu.slck.tmp", dir, step);
  snprintf(path, sizeof path, "%s/ckpt-%010llu.slck", dir, step);
  uint8_t h[TC_CKPT_HEADER_BYTES];
  char conf[TC_CKPT_CONF_MAX_BYTES];
  int conf_bytes = tc_config_encode(&ck->meta.cfg, conf, sizeof conf);
  if (conf_bytes < 0) {
    snprintf(err, err_size, "%s: the model config does not encode", path);
    return -EINVAL;
  }
  if (!tc_run_id_valid(ck->meta.run_id)) {
    snprintf(err, err_size, "%s: the checkpoint has no valid run id", path);
    return -EINVAL;
  }
  encode_header(ck, h);
  /* a stale temporary (or anything else under its name: a FIFO would block
   * the open, a link would redirect it) goes first; O_EXCL then makes a new file */
  unlink(tmp);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    int r = -errno;
    snprintf(err, err_size, "%s: %s", tmp, strerror(-r));
    return r;
  }
  int r = write_all(fd, h, sizeof h);
  if (r == 0) {
    uint8_t sh[SECTION_HEADER_BYTES] = {0};
    memcpy(sh, CONF_TAG, 4);
    put32(sh + 4, tc_crc32c(0, conf, (size_t)conf_bytes));
    put64(sh + 8, (uint64_t)conf_bytes);
    r = write_all(fd, sh, sizeof sh);
    if (r == 0) r = write_all(fd, conf, (size_t)conf_bytes);
  }
  const float *bufs[3] = {ck->params, ck->m, ck->v};
  size_t bytes = ck->n_params * sizeof(float);
  for (int s = 0; s < 3 && r == 0; s++) {
    uint8_t sh[SECTION_HEADER_BYTES] = {0};
    memcpy(sh, TAGS[s], 4);
    put32(sh + 4, tc_crc32c(0, bufs[s], bytes));
    put64(sh + 8, bytes);
    r = write_all(fd, sh, sizeof sh);
    if (r == 0) r = write_all(fd, bufs[s], bytes);
  }
  if (r == 0 && fsync(fd) < 0) r = -errno;
  if (close(fd) < 0 && r == 0) r = -errno;
  if (r < 0) {
    snprintf(err, err_size, "%s: %s", tmp, strerror(-r));
    unlink(tmp);
    return r;
  }
  if (rename(tmp, path) < 0) {
    r = -errno;
    snprintf(err, err_size, "%s: cannot put the checkpoint in place: %s", path, strerror(-r));
    unlink(tmp);
    return r;
  }
  r = sl_file_fsync_dir(dir);
  if (r < 0) {
    snprintf(err, err_size, "%s: fsync: %s", dir, strerror(-r));
    return r;
  }
  if (ret_path) snprintf(ret_path, path_size, "%s", path);
  return 0;
}

/* ---- reading ---- */

static int read_all(int fd, void *buf, size_t n, size_t *ret_got) {
  uint8_t *p = buf;
  size_t got = 0;
  while (got < n) {
    ssize_t k = read(fd, p + got, n - got);
    if (k < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (k == 0) break;
    got += (size_t)k;
  }
  *ret_got = got;
  return 0;
}

/* Version 2's CONF section: the model's settings as name=value lines. */
static int read_conf(int fd, struct tc_config *cfg, char *err, size_t err_size,
                     const char *path) {
  uint8_t sh[SECTION_HEADER_BYTES];
  char text[TC_CKPT_CONF_MAX_BYTES + 1], why[256];
  size_t got = 0;
  int r = read_all(fd, sh, sizeof sh, &got);
  if (r < 0) return snprintf(err, err_size, "%s: %s", path, strerror(-r)), r;
  uint64_t bytes = got == sizeof sh ? get64(sh + 8) : 0;
  if (got != sizeof sh || memcmp(sh, CONF_TAG, 4) != 0 || bytes > TC_CKPT_CONF_MAX_BYTES ||
      get64(sh + 16) != 0) {
    snprintf(err, err_size, "%s: section CONF is truncated or malformed", path);
    return SL_EFORMAT;
  }
  r = read_all(fd, text, (size_t)bytes, &got);
  if (r < 0) return snprintf(err, err_size, "%s: %s", path, strerror(-r)), r;
  if (got != bytes) {
    snprintf(err, err_size, "%s: section CONF is truncated or malformed", path);
    return SL_EFORMAT;
  }
  if (tc_crc32c(0, text, (size_t)bytes) != get32(sh + 4)) {
    snprintf(err, err_size, "%s: section CONF checksum mismatch", path);
    return SL_ECHECKSUM;
  }
  text[bytes] = 0;
  if (strlen(text) != bytes) {
    snprintf(err, err_size, "%s: section CONF holds a NUL byte", path);
    return SL_EFORMAT;
  }
  char model[TC_MODEL_NAME_BYTES];
  memcpy(model, cfg->model, sizeof model);
  if (!tc_model_find(model)) {
    char names[128];
    snprintf(err, err_size, "%s: checkpoint is for model '%s', which this spotlab-train does "
             "not have (it has %s)", path, model, tc_model_names(names, sizeof names));
    return SL_EFORMAT;
  }
  if (tc_config_parse(cfg, model, text, why, sizeof why) < 0) {
    snprintf(err, err_size, "%s: section CONF: %s", path, why);
    return SL_EFORMAT;
  }
  return 0;
}

static const char *file_kind(mode_t mode) {
  return S_ISDIR(mode) ? "a folder" : S_ISFIFO(mode) ? "a FIFO" : S_ISSOCK(mode) ? "a socket"
       : S_ISCHR(mode) || S_ISBLK(mode) ? "a device" : "not a plain file";
}

/* Opens path for reading only when it is a regular file. stat() first, so
 * that a FIFO or a device is never opened (opening either can block or act);
 * O_NONBLOCK and fstat() after, for a file swapped in between. */
static int open_regular(const char *path, char *err, size_t err_size) {
  struct stat st;
  if (stat(path, &st) < 0) {
    int r = -errno;
    snprintf(err, err_size, "%s: %s", path, strerror(-r));
    return r;
  }
  if (!S_ISREG(st.st_mode)) {
    snprintf(err, err_size, "%s: not a checkpoint file (%s)", path, file_kind(st.st_mode));
    return SL_EFORMAT;
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    int r = -errno;
    snprintf(err, err_size, "%s: %s", path, strerror(-r));
    return r;
  }
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
    snprintf(err, err_size, "%s: not a checkpoint file (%s)", path,
             S_ISREG(st.st_mode) ? strerror(errno) : file_kind(st.st_mode));
    close(fd);
    return SL_EFORMAT;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

/* Opens path and reads its header and config into *meta: the parts both
 * tc_ckpt_read and tc_ckpt_read_meta verify. Returns the open fd, positioned
 * after the config, or a negative error with err set. */
static int open_and_read_header(const char *path, struct tc_ckpt_meta *meta, uint64_t *ret_n,
                                char *err, size_t err_size) {
  int fd = open_regular(path, err, err_size);
  if (fd < 0) return fd;
  uint8_t h[TC_CKPT_HEADER_BYTES];
  size_t got = 0;
  uint32_t version = 0;
  int r = read_all(fd, h, sizeof h, &got);
  if (r < 0) snprintf(err, err_size, "%s: %s", path, strerror(-r));
  else if (got < sizeof h) {
    snprintf(err, err_size, "%s: truncated header (%zu bytes)", path, got);
    r = SL_EFORMAT;
  }
  if (r == 0) r = decode_header(h, meta, ret_n, &version, err, err_size, path);
  if (r == 0 && version >= 2) r = read_conf(fd, &meta->cfg, err, err_size, path);
  if (r < 0) {
    close(fd);
    return r;
  }
  return fd;
}

int tc_ckpt_read_meta(const char *path, struct tc_ckpt_meta *ret, char *err, size_t err_size) {
  struct tc_ckpt_meta meta;
  uint64_t n = 0;
  int fd = open_and_read_header(path, &meta, &n, err, err_size);
  if (fd < 0) return fd;
  close(fd);
  *ret = meta;
  return 0;
}

int tc_ckpt_read(const char *path, const struct tc_config *expect, struct tc_ckpt **ret,
                 char *err, size_t err_size) {
  struct tc_ckpt *ck = NULL;
  struct tc_ckpt_meta meta;
  uint64_t n = 0;
  size_t got = 0;
  struct tc_model *layout = NULL;
  int fd = open_and_read_header(path, &meta, &n, err, err_size);
  if (fd < 0) return fd;
  int r = 0;
  char why[256] = "";
  if (!(layout = calloc(1, sizeof *layout))) {
    r = -ENOMEM;
    snprintf(err, err_size, "%s: out of memory", path);
    goto out;
  }
  if (tc_config_validate(&meta.cfg, why, sizeof why) == 0 &&
      tc_model_layout(&meta.cfg, layout) == 0 && layout->n_params != n)
    snprintf(why, sizeof why, "%llu parameters stored, its layout has %zu",
             (unsigned long long)n, layout->n_params);
  if (why[0]) {
    snprintf(err, err_size, "%s: header describes an invalid model: %s", path, why);
    r = SL_EFORMAT;
    goto out;
  }
  if (expect && !tc_config_equal(expect, &meta.cfg)) {
    char a[160], b[160];
    snprintf(err, err_size, "%s: checkpoint is for %s, but this run is %s", path,
             tc_config_describe(&meta.cfg, a, sizeof a), tc_config_describe(expect, b, sizeof b));
    r = SL_EMISMATCH;
    goto out;
  }
  /* the three sections' size is known now: a file of another size is
   * refused before its buffers are allocated (a damaged header could ask
   * for more memory than the machine has) */
  struct stat st;
  off_t at = lseek(fd, 0, SEEK_CUR);
  uint64_t want = (uint64_t)at + 3 * (SECTION_HEADER_BYTES + n * sizeof(float));
  if (at < 0 || fstat(fd, &st) < 0) {
    r = -errno;
    snprintf(err, err_size, "%s: %s", path, strerror(errno));
    goto out;
  }
  if ((uint64_t)st.st_size != want) {
    snprintf(err, err_size, "%s: %s: %llu bytes, its header describes %llu", path,
             (uint64_t)st.st_size < want ? "truncated" : "trailing bytes after the last section",
             (unsigned long long)st.st_size, (unsigned long long)want);
    r = SL_EFORMAT;
    goto out;
  }
  ck = tc_ckpt_new((size_t)n);
  if (!ck) {
    r = -ENOMEM;
    snprintf(err, err_size, "%s: out of memory", path);
    goto out;
  }
  ck->meta = meta;
  float *bufs[3] = {ck->params, ck->m, ck->v};
  size_t bytes = (size_t)n * sizeof(float);
  for (int s = 0; s < 3; s++) {
    uint8_t sh[SECTION_HEADER_BYTES];
    int complete = 0;
    r = read_all(fd, sh, sizeof sh, &got);
    if (r == 0 && got == sizeof sh) {
      r = read_all(fd, bufs[s], bytes, &got);
      complete = r == 0 && got == bytes;
    }
    if (r < 0) {
      snprintf(err, err_size, "%s: %s", path, strerror(-r));
      goto out;
    }
    if (!complete || memcmp(sh, TAGS[s], 4) != 0 || get64(sh + 8) != bytes ||
        get64(sh + 16) != 0) {
      snprintf(err, err_size, "%s: section %s is truncated or malformed", path, TAGS[s]);
      r = SL_EFORMAT;
      goto out;
    }
    if (tc_crc32c(0, bufs[s], bytes) != get32(sh + 4)) {
      snprintf(err, err_size, "%s: section %s checksum mismatch", path, TAGS[s]);
      r = SL_ECHECKSUM;
      goto out;
    }
  }
  uint8_t extra;
  if (read_all(fd, &extra, 1, &got) == 0 && got != 0) {
    snprintf(err, err_size, "%s: trailing bytes after the last section", path);
    r = SL_EFORMAT;
  }
out:
  close(fd);
  free(layout);
  if (r < 0) tc_ckpt_free(ck);
  else *ret = ck;
  return r;
}
