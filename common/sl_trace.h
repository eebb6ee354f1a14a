/* The spot-traces file format: {"metadata":{"gap_seconds":G},"data":[n,...],
 * "prices":[p,...]?}. Tick k covers seconds [k*G, (k+1)*G); data[k] is the
 * spot capacity (instances on offer) in it and prices[k], when the file has
 * prices, the spot price in it. One reader for every program that replays a
 * trace, so they all take and refuse the same files. */
#ifndef SL_TRACE_H
#define SL_TRACE_H

#include <stddef.h>
#include <stdint.h>

#define SL_TRACE_MAX_BYTES (64u << 20)    /* a larger file is refused unread */
#define SL_TRACE_MAX_TICKS 10000000       /* entries of "data" */
#define SL_TRACE_MAX_GAP_S 86400          /* gap_seconds is in 1..this */
#define SL_TRACE_MAX_CAPACITY 1000000     /* each data[k] is a whole number 0..this */
#define SL_TRACE_MAX_PRICE 1e6            /* each prices[k] is > 0 and below this */
#define SL_TRACE_MAX_DEPTH 8              /* JSON nesting a file may have */

/* A trace as read; the fields are the caller's to read, not to change. */
struct sl_trace {
  double gap_s;       /* seconds per tick, 1..SL_TRACE_MAX_GAP_S */
  size_t n;           /* ticks, 1..SL_TRACE_MAX_TICKS */
  int32_t *capacity;  /* capacity[k], k < n: 0..SL_TRACE_MAX_CAPACITY */
  double *price;      /* price[k], k < n: in (0, SL_TRACE_MAX_PRICE); NULL when the file
                       * has no "prices" */
};

/* Reads the file at path (at most SL_TRACE_MAX_BYTES, nested at most
 * SL_TRACE_MAX_DEPTH deep) and checks all of it: the top is an object,
 * metadata.gap_seconds a number in 1..86400, "data" a non-empty array of at
 * most SL_TRACE_MAX_TICKS whole numbers (JSON integers, not reals such as
 * 1.0) in 0..1000000, and "prices", when present, an array as long as
 * "data" of numbers > 0 and < 1e6. Other members are ignored. Returns 0
 * and an owned trace in *ret, or a negative error with a sentence in err
 * that starts with path and names the fault (for JSON syntax, its line and
 * column; for an entry, its index): -errno when the file cannot be opened
 * or read, SL_ELIMIT when it is too large, SL_EJSON / SL_EJSONDEPTH when it
 * is not JSON or nested too deep, SL_EFORMAT when it is JSON but not a
 * trace, -ENOMEM. */
int sl_trace_read(const char *path, struct sl_trace **ret, char *err, size_t err_size);
/* Frees t and its arrays; NULL is a no-op. Returns NULL. */
struct sl_trace *sl_trace_free(struct sl_trace *t);

#endif
