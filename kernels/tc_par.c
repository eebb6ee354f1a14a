/* Fork-join pool (see tc_par.h). Workers sleep on a condition variable and
 * wake on a generation counter; the caller runs its own range, then waits for
 * the count of finished workers. */
#include "tc_par.h"

#include <pthread.h>
#include <stdlib.h>

#define MAX_THREADS 64

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv_work = PTHREAD_COND_INITIALIZER;
static pthread_cond_t cv_done = PTHREAD_COND_INITIALIZER;
static pthread_t workers[MAX_THREADS];
static int n_threads = 1;     /* including the caller */
static unsigned long generation;
static int pending;
static int stopping;
static unsigned long spawn_generation; /* jobs before a worker started are not its */
static tc_par_fn job_fn;
static void *job_arg;
static size_t job_n, job_chunk;
static int job_parts;
static _Thread_local int worker_id;
static _Thread_local int in_region; /* nested calls run inline */

static void range_of(int part, int parts, size_t n, size_t *lo, size_t *hi) {
  *lo = n * (size_t)part / (size_t)parts;
  *hi = n * (size_t)(part + 1) / (size_t)parts;
}

static void *worker_main(void *p) {
  int id = (int)(size_t)p;
  worker_id = id;
  unsigned long seen = spawn_generation;
  pthread_mutex_lock(&mu);
  for (;;) {
    while (generation == seen && !stopping) pthread_cond_wait(&cv_work, &mu);
    if (stopping) break;
    seen = generation;
    tc_par_fn fn = job_fn;
    void *arg = job_arg;
    int parts = job_parts;
    size_t n = job_n;
    pthread_mutex_unlock(&mu);
    if (id < parts) {
      size_t lo, hi;
      range_of(id, parts, n, &lo, &hi);
      in_region = 1;
      if (hi > lo) fn(arg, lo, hi);
      in_region = 0;
    }
    pthread_mutex_lock(&mu);
    if (--pending == 0) pthread_cond_signal(&cv_done);
  }
  pthread_mutex_unlock(&mu);
  return NULL;
}

static void stop_pool(void) {
  pthread_mutex_lock(&mu);
  stopping = 1;
  pthread_cond_broadcast(&cv_work);
  pthread_mutex_unlock(&mu);
  for (int i = 1; i < n_threads; i++) pthread_join(workers[i], NULL);
  stopping = 0;
  n_threads = 1;
}

void tc_par_set_threads(int n) {
  if (n < 1) n = 1;
  if (n > MAX_THREADS) n = MAX_THREADS;
  if (n == n_threads) return;
  stop_pool();
  spawn_generation = generation;
  int started = 1;
  for (int i = 1; i < n; i++) {
    if (pthread_create(&workers[i], NULL, worker_main, (void *)(size_t)i) != 0) break;
    started++;
  }
  n_threads = started;
}

int tc_par_threads(void) { return n_threads; }
int tc_par_worker(void) { return worker_id; }

void tc_par_for(size_t n, size_t min_chunk, tc_par_fn fn, void *arg) {
  if (n == 0) return;
  if (min_chunk < 1) min_chunk = 1;
  size_t parts = n / min_chunk;
  if (parts > (size_t)n_threads) parts = (size_t)n_threads;
  if (parts <= 1 || in_region) {
    fn(arg, 0, n);
    return;
  }
  pthread_mutex_lock(&mu);
  job_fn = fn;
  job_arg = arg;
  job_n = n;
  job_chunk = min_chunk;
  job_parts = (int)parts;
  pending = n_threads - 1;
  generation++;
  pthread_cond_broadcast(&cv_work);
  pthread_mutex_unlock(&mu);
  size_t lo, hi;
  range_of(0, (int)parts, n, &lo, &hi);
  in_region = 1;
  fn(arg, lo, hi);
  in_region = 0;
  pthread_mutex_lock(&mu);
  while (pending > 0) pthread_cond_wait(&cv_done, &mu);
  pthread_mutex_unlock(&mu);
}
