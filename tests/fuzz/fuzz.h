/* What the fuzz targets share. */
#ifndef TESTS_FUZZ_H
#define TESTS_FUZZ_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

#endif
