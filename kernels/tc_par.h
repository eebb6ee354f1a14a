/* A small fork-join pool for the CPU path's elementwise and per-row loops.
 *
 * tc_par_for splits [0, n) into one contiguous range per thread and runs them
 * concurrently; the caller takes range 0. Loop bodies must make each index
 * independent of the others, so the result never depends on the split: that
 * is what keeps training bit-identical across --threads. The pool is
 * process-wide (like OpenBLAS's own) and is used from one thread at a time. */
#ifndef TC_PAR_H
#define TC_PAR_H

#include <stddef.h>

typedef void (*tc_par_fn)(void *arg, size_t lo, size_t hi);

/* Starts or resizes the pool to n threads in total (n >= 1). */
void tc_par_set_threads(int n);
/* Runs fn over [0, n); ranges smaller than min_chunk are not split further. */
void tc_par_for(size_t n, size_t min_chunk, tc_par_fn fn, void *arg);
/* Index of the calling thread inside a tc_par_for body (0 for the caller). */
int tc_par_worker(void);
/* Threads in the pool (1 when none started). */
int tc_par_threads(void);

#endif
