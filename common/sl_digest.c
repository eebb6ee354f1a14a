/* SHA-256 with libcrypto (sl_digest.h). */
#include "sl_digest.h"

#include "sl_err.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define BUF_BYTES (1u << 20)

struct sl_sha256 {
  EVP_MD_CTX *ctx;
};

struct sl_sha256 *sl_sha256_new(void) {
  struct sl_sha256 *h = calloc(1, sizeof *h);
  if (!h || !(h->ctx = EVP_MD_CTX_new()) || !EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL))
    return sl_sha256_free(h);
  return h;
}

struct sl_sha256 *sl_sha256_free(struct sl_sha256 *h) {
  if (h)
    EVP_MD_CTX_free(h->ctx);
  free(h);
  return NULL;
}

void sl_sha256_reset(struct sl_sha256 *h) { EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL); }

void sl_sha256_update(struct sl_sha256 *h, const void *data, size_t len) { EVP_DigestUpdate(h->ctx, data, len); }

void sl_sha256_final_hex(struct sl_sha256 *h, char hex[SL_SHA256_HEX_LEN + 1]) {
  static const char digits[] = "0123456789abcdef";
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  EVP_DigestFinal_ex(h->ctx, md, &n);
  for (unsigned i = 0; i < 32; i++) {
    hex[2 * i] = digits[md[i] >> 4];
    hex[2 * i + 1] = digits[md[i] & 15];
  }
  hex[SL_SHA256_HEX_LEN] = '\0';
  sl_sha256_reset(h);
}

int sl_sha256_file(const char *path, int64_t max_bytes, char ret_hex[SL_SHA256_HEX_LEN + 1]) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return -errno;
  struct stat st;
  int bad = fstat(fd, &st) < 0 ? -errno : S_ISDIR(st.st_mode) ? -EISDIR
                                        : !S_ISREG(st.st_mode) ? -EINVAL : 0;
  if (bad < 0) {
    close(fd);
    return bad;
  }
  struct sl_sha256 *h = sl_sha256_new();
  unsigned char *buf = malloc(BUF_BYTES);
  if (!h || !buf) {
    close(fd);
    sl_sha256_free(h);
    free(buf);
    return -ENOMEM;
  }
  int64_t total = 0;
  int r = 0;
  for (;;) {
    ssize_t n = read(fd, buf, BUF_BYTES);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      r = -errno;
      break;
    }
    if (n == 0)
      break;
    total += n;
    if (max_bytes > 0 && total > max_bytes) {
      r = SL_ELIMIT;
      break;
    }
    sl_sha256_update(h, buf, (size_t)n);
  }
  close(fd);
  free(buf);
  if (r == 0)
    sl_sha256_final_hex(h, ret_hex);
  sl_sha256_free(h);
  return r;
}


int sl_sha256_image_set(const char *dir, size_t n, char ret_hex[SL_SHA256_HEX_LEN + 1]) {
  char hex[SL_IMAGE_SET_FILES][SL_SHA256_HEX_LEN + 1];
  const char *hexes[SL_IMAGE_SET_FILES];
  if (n > SL_IMAGE_SET_FILES)
    n = SL_IMAGE_SET_FILES;
  for (size_t i = 0; i < n; i++) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, sl_image_set_files[i]) >= sizeof path)
      return -ENAMETOOLONG;
    int r = sl_sha256_file(path, 0, hex[i]);
    if (r < 0)
      return r;
    hexes[i] = hex[i];
  }
  sl_image_set_sha256(hexes, n, ret_hex);
  return 0;
}

