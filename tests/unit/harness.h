/* A small test harness: CHECK records a failure and continues, so one run
 * reports every broken expectation; main returns non-zero if any failed. */
#ifndef TESTS_HARNESS_H
#define TESTS_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int th_failures;
static int th_checks;

#define CHECK(cond)                                                              \
  do {                                                                           \
    th_checks++;                                                                 \
    if (!(cond)) {                                                               \
      th_failures++;                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
    }                                                                            \
  } while (0)

#define CHECK_INT(a, b)                                                          \
  do {                                                                           \
    long long a_ = (long long)(a), b_ = (long long)(b);                          \
    th_checks++;                                                                 \
    if (a_ != b_) {                                                              \
      th_failures++;                                                             \
      fprintf(stderr, "%s:%d: %s == %lld, expected %lld\n", __FILE__, __LINE__,  \
              #a, a_, b_);                                                       \
    }                                                                            \
  } while (0)

#define CHECK_STR(a, b)                                                          \
  do {                                                                           \
    const char *a_ = (a), *b_ = (b);                                             \
    th_checks++;                                                                 \
    if (!a_ || !b_ || strcmp(a_, b_) != 0) {                                     \
      th_failures++;                                                             \
      fprintf(stderr, "%s:%d: %s == \"%s\", expected \"%s\"\n", __FILE__,        \
              __LINE__, #a, a_ ? a_ : "(null)", b_ ? b_ : "(null)");             \
    }                                                                            \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                                    \
  do {                                                                           \
    double a_ = (a), b_ = (b);                                                   \
    th_checks++;                                                                 \
    if (!(fabs(a_ - b_) <= (tol))) {                                             \
      th_failures++;                                                             \
      fprintf(stderr, "%s:%d: %s == %.9g, expected %.9g (tol %g)\n", __FILE__,   \
              __LINE__, #a, a_, b_, (double)(tol));                              \
    }                                                                            \
  } while (0)

#define TEST_MAIN_END()                                                          \
  do {                                                                           \
    fprintf(stderr, "%d checks, %d failed\n", th_checks, th_failures);           \
    return th_failures ? 1 : 0;                                                  \
  } while (0)

#endif
