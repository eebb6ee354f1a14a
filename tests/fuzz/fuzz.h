/* What the fuzz targets share. */
#ifndef TESTS_FUZZ_H
#define TESTS_FUZZ_H

#include "sl_log.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A copy of data[0..len) in a block of exactly that length (one byte for
 * none), for readers that take a length: any read past it is seen (ASan).
 * Owned; never NULL. */
static inline char *fuzz_exact_copy(const uint8_t *data, size_t len) {
  char *p = malloc(len ? len : 1);
  if (!p)
    abort();
  memcpy(p, data, len);
  return p;
}

/* The same with a terminating NUL after the len bytes, for readers of C
 * strings. */
static inline char *fuzz_string_copy(const uint8_t *data, size_t len) {
  char *p = malloc(len + 1);
  if (!p)
    abort();
  memcpy(p, data, len);
  p[len] = 0;
  return p;
}

/* A part of an input: p[0..len). */
struct fuzz_part {
  const uint8_t *p;
  size_t len;
};

/* data split at "\n--\n" into ret, at most max parts (the last takes the
 * rest); returns how many, at least one. */
static inline size_t fuzz_split(const uint8_t *data, size_t size, struct fuzz_part *ret, size_t max) {
  size_t n = 0;
  while (n < max - 1) {
    const uint8_t *s = memmem(data, size, "\n--\n", 4);
    if (!s)
      break;
    ret[n++] = (struct fuzz_part){data, (size_t)(s - data)};
    size -= (size_t)(s - data) + 4;
    data = s + 4;
  }
  ret[n++] = (struct fuzz_part){data, size};
  return n;
}

/* Once per process: spotlab's info lines off (SPOTLAB_QUIET, unless set),
 * and the temporary folders in memory (/dev/shm) when TMPDIR is unset. */
static inline void fuzz_quiet_once(void) {
  static int done;
  if (done)
    return;
  done = 1;
  setenv("SPOTLAB_QUIET", "1", 0);
  sl_log_init(NULL);
  if (!getenv("TMPDIR") && access("/dev/shm", W_OK) == 0)
    setenv("TMPDIR", "/dev/shm", 1);
}

/* A fresh folder under $TMPDIR (/tmp when unset), its name after target,
 * into dir (size bytes). */
static inline void fuzz_make_dir(char *dir, size_t size, const char *target) {
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, size, "%s/fuzz-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", target);
  if (!mkdtemp(dir)) {
    perror("fuzz: mkdtemp");
    abort();
  }
}

static inline int fuzz_remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

/* Removes dir and everything in it. */
static inline void fuzz_remove_dir(const char *dir) {
  nftw(dir, fuzz_remove_one, 8, FTW_DEPTH | FTW_PHYS);
}

/* Writes the file at path (0600) with p[0..n). */
static inline void fuzz_write_file(const char *path, const uint8_t *p, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || (n && write(fd, p, n) != (ssize_t)n)) {
    perror("fuzz: write");
    abort();
  }
  close(fd);
}

#endif
