/* Store objects of jobs removed on a thread (purge.h). */
#include "purge.h"

#include "job.h"
#include "objstore.h"

#include "sl_err.h"
#include "sl_file.h"
#include "sl_log.h"
#include "sl_s3.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define T "gateway.purge"
#define QUEUE_MAX 65536

struct abort_item {
  char *key, *upload_id;
};

struct gw_purge {
  char *store_dir;
  struct gw_objstore *o;
  pthread_mutex_t mu;
  pthread_cond_t idle;
  int64_t *queue;  /* jobs to purge: queue[head, n) */
  size_t head, n, cap;
  int64_t *done;   /* jobs whose objects are gone, for the loop to take */
  size_t n_done, cap_done;
  struct abort_item *aborts; /* multipart uploads to abort: aborts[head_aborts, n_aborts) */
  size_t head_aborts, n_aborts, cap_aborts;
  char **aborted;  /* upload ids of uploads that are no more, for the loop to take */
  size_t n_aborted, cap_aborted;
  bool running;  /* the thread is started (and not yet joined) */
  bool exited;   /* and has left its loop: joined before the next starts */
  bool stopping;
  pthread_t thread;
};

int gw_purge_new(const char *store_dir, struct gw_objstore *o, struct gw_purge **ret) {
  struct gw_purge *p = calloc(1, sizeof *p);
  if (!p || (store_dir && !(p->store_dir = strdup(store_dir)))) {
    free(p);
    return -ENOMEM;
  }
  p->o = o;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->idle, NULL);
  *ret = p;
  return 0;
}

/* Removes every object under prefix ("J000003/"): the count, or an error. */
static int purge_prefix(struct gw_purge *p, const char *prefix, char *why, size_t why_size) {
  if (!p->o) {
    char dir[PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s/%s", p->store_dir, prefix) >= (int)sizeof dir)
      return -ENAMETOOLONG;
    if (access(dir, F_OK) != 0)
      return 0;
    int r = sl_file_remove_tree(dir);
    if (r < 0)
      snprintf(why, why_size, "cannot remove all of %.300s: %s", dir, sl_strerror(r));
    return r < 0 ? r : 1;
  }
  struct sl_s3_signer signer = gw_objstore_signer(p->o);
  struct sl_s3_opts opts = gw_objstore_opts(p->o);
  struct sl_s3_client *c = NULL;
  char **keys = NULL;
  size_t n = 0;
  int r = sl_s3_client_new(&signer, &opts, &c);
  if (r == 0)
    r = sl_s3_list(c, prefix, &keys, &n, why, why_size);
  size_t gone = 0;
  for (size_t i = 0; r == 0 && i < n; i++)
    if ((r = sl_s3_delete(c, keys[i], why, why_size)) == 0)
      gone++;
  sl_s3_keys_free(keys);
  sl_s3_client_free(c);
  return r < 0 ? r : (int)gone;
}

/* Aborts key's multipart upload upload_id: 0 aborted, 1 it was no more
 * (completed, or aborted already), or an error. */
static int abort_upload(struct gw_purge *p, const char *key, const char *upload_id, char *why,
                        size_t why_size) {
  if (!p->o)
    return 1; /* a file store has no uploads in parts */
  struct sl_s3_signer signer = gw_objstore_signer(p->o);
  struct sl_s3_opts opts = gw_objstore_opts(p->o);
  struct sl_s3_client *c = NULL;
  int r = sl_s3_client_new(&signer, &opts, &c);
  if (r == 0)
    r = sl_s3_abort_upload(c, key, upload_id, why, why_size);
  sl_s3_client_free(c);
  return r == -ENOENT ? 1 : r;
}

/* Under the lock: the next upload to abort, taken (the lock is let go and
 * taken again around the call). */
static void abort_next(struct gw_purge *p) {
  struct abort_item it = p->aborts[p->head_aborts++];
  if (p->head_aborts == p->n_aborts)
    p->head_aborts = p->n_aborts = 0;
  pthread_mutex_unlock(&p->mu);
  char why[512] = "";
  int r = abort_upload(p, it.key, it.upload_id, why, sizeof why);
  if (r == 0)
    sl_info(T, "%s: aborted the multipart upload its worker left unfinished (its parts are "
            "deleted)", it.key);
  else if (r == 1)
    sl_debug(T, "%s: the multipart upload %.40s was complete or aborted already", it.key, it.upload_id);
  else if (r == -ECANCELED)
    sl_info(T, "%s: the abort of an unfinished multipart upload stopped with the gateway (it goes "
            "on at the next start)", it.key);
  else
    sl_warn(T, "%s: the multipart upload its worker left unfinished could not be aborted: %s (tried "
            "again at the next start)", it.key, why[0] ? why : sl_strerror(r));
  free(it.key);
  pthread_mutex_lock(&p->mu);
  if (r >= 0 && p->n_aborted == p->cap_aborted) {
    size_t cap = p->cap_aborted ? 2 * p->cap_aborted : 64;
    char **grown = realloc(p->aborted, cap * sizeof *grown);
    if (grown)
      p->aborted = grown, p->cap_aborted = cap;
  }
  if (r >= 0 && p->n_aborted < p->cap_aborted)
    p->aborted[p->n_aborted++] = it.upload_id; /* else its row stays: tried again at the next start */
  else
    free(it.upload_id);
}

static void *purge_main(void *arg) {
  struct gw_purge *p = arg;
  pthread_mutex_lock(&p->mu);
  while ((p->head < p->n || p->head_aborts < p->n_aborts) && !p->stopping) {
    if (p->head_aborts < p->n_aborts) {
      abort_next(p);
      continue;
    }
    int64_t job = p->queue[p->head++];
    if (p->head == p->n)
      p->head = p->n = 0;
    pthread_mutex_unlock(&p->mu);
    char id[16], prefix[24], why[512] = "";
    gw_job_id_str(job, id, sizeof id);
    snprintf(prefix, sizeof prefix, "%s/", id);
    int r = purge_prefix(p, prefix, why, sizeof why);
    if (r == -ECANCELED)
      sl_info(T, "%s: the removal of the job's objects stopped with the gateway (it goes on at "
              "the next start)", id);
    else if (r < 0)
      sl_warn(T, "%s: the job's objects were not all removed: %s (tried again at the next start)", id,
              why[0] ? why : sl_strerror(r));
    else if (r > 0)
      sl_debug(T, "%s: the job's objects removed", id);
    pthread_mutex_lock(&p->mu);
    if (r >= 0 && p->n_done == p->cap_done) {
      size_t cap = p->cap_done ? 2 * p->cap_done : 64;
      int64_t *grown = realloc(p->done, cap * sizeof *grown);
      if (grown)
        p->done = grown, p->cap_done = cap;
    }
    if (r >= 0 && p->n_done < p->cap_done)
      p->done[p->n_done++] = job; /* else its row stays: done again at the next start */
  }
  p->exited = true;
  pthread_cond_broadcast(&p->idle);
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* Under the lock: a thread that works on the queue, or has left its loop
 * (then it is joined, at once, and a new one started). */
static int start(struct gw_purge *p) {
  if (p->stopping || (p->running && !p->exited))
    return 0; /* the thread sees the queue before it leaves */
  if (p->running) {
    pthread_join(p->thread, NULL); /* it only has to return */
    p->running = false;
  }
  int r = pthread_create(&p->thread, NULL, purge_main, p);
  if (r != 0)
    return -r;
  p->running = true;
  p->exited = false;
  return 0;
}

int gw_purge_jobs(struct gw_purge *p, const int64_t *jobs, size_t n) {
  if (!n)
    return 0;
  pthread_mutex_lock(&p->mu);
  int r = 0;
  if (p->head) { /* the taken ones make room */
    memmove(p->queue, p->queue + p->head, (p->n - p->head) * sizeof *p->queue);
    p->n -= p->head;
    p->head = 0;
  }
  if (p->n + n > QUEUE_MAX) {
    r = SL_ELIMIT;
  } else if (p->n + n > p->cap) {
    size_t cap = (p->n + n) * 2;
    int64_t *q = realloc(p->queue, cap * sizeof *q);
    if (!q)
      r = -ENOMEM;
    else
      p->queue = q, p->cap = cap;
  }
  if (r == 0) {
    memcpy(p->queue + p->n, jobs, n * sizeof *jobs);
    p->n += n;
    r = start(p);
  }
  pthread_mutex_unlock(&p->mu);
  return r;
}

int gw_purge_uploads(struct gw_purge *p, const char *const *keys, const char *const *upload_ids,
                     size_t n) {
  if (!n)
    return 0;
  pthread_mutex_lock(&p->mu);
  int r = 0;
  if (p->head_aborts) { /* the taken ones make room */
    memmove(p->aborts, p->aborts + p->head_aborts, (p->n_aborts - p->head_aborts) * sizeof *p->aborts);
    p->n_aborts -= p->head_aborts;
    p->head_aborts = 0;
  }
  if (p->n_aborts + n > QUEUE_MAX) {
    r = SL_ELIMIT;
  } else if (p->n_aborts + n > p->cap_aborts) {
    size_t cap = (p->n_aborts + n) * 2;
    struct abort_item *q = realloc(p->aborts, cap * sizeof *q);
    if (!q)
      r = -ENOMEM;
    else
      p->aborts = q, p->cap_aborts = cap;
  }
  for (size_t i = 0; r == 0 && i < n; i++) {
    struct abort_item it = {strdup(keys[i]), strdup(upload_ids[i])};
    if (!it.key || !it.upload_id) {
      free(it.key);
      free(it.upload_id);
      r = -ENOMEM;
    } else {
      p->aborts[p->n_aborts++] = it;
    }
  }
  if (p->n_aborts > p->head_aborts) {
    int s = start(p);
    r = r < 0 ? r : s;
  }
  pthread_mutex_unlock(&p->mu);
  return r;
}

size_t gw_purge_take_aborted(struct gw_purge *p, char **out, size_t max) {
  pthread_mutex_lock(&p->mu);
  size_t n = p->n_aborted < max ? p->n_aborted : max;
  if (n) {
    memcpy(out, p->aborted, n * sizeof *out);
    memmove(p->aborted, p->aborted + n, (p->n_aborted - n) * sizeof *p->aborted);
    p->n_aborted -= n;
  }
  pthread_mutex_unlock(&p->mu);
  return n;
}

size_t gw_purge_take_done(struct gw_purge *p, int64_t *out, size_t max) {
  pthread_mutex_lock(&p->mu);
  size_t n = p->n_done < max ? p->n_done : max;
  if (n) {
    memcpy(out, p->done, n * sizeof *out);
    memmove(p->done, p->done + n, (p->n_done - n) * sizeof *p->done);
    p->n_done -= n;
  }
  pthread_mutex_unlock(&p->mu);
  return n;
}

void gw_purge_wait(struct gw_purge *p) {
  pthread_mutex_lock(&p->mu);
  while (p->running && !p->exited)
    pthread_cond_wait(&p->idle, &p->mu);
  pthread_mutex_unlock(&p->mu);
}

struct gw_purge *gw_purge_free(struct gw_purge *p) {
  if (!p)
    return NULL;
  pthread_mutex_lock(&p->mu);
  p->stopping = true;
  bool running = p->running;
  pthread_mutex_unlock(&p->mu);
  if (running)
    pthread_join(p->thread, NULL);
  size_t left = p->n - p->head, left_aborts = p->n_aborts - p->head_aborts;
  if (left)
    sl_info(T, "stopping: the objects of %zu jobs are removed at the next start", left);
  if (left_aborts)
    sl_info(T, "stopping: %zu unfinished multipart uploads are aborted at the next start", left_aborts);
  for (size_t i = p->head_aborts; i < p->n_aborts; i++) {
    free(p->aborts[i].key);
    free(p->aborts[i].upload_id);
  }
  for (size_t i = 0; i < p->n_aborted; i++)
    free(p->aborted[i]);
  free(p->aborts);
  free(p->aborted);
  pthread_cond_destroy(&p->idle);
  pthread_mutex_destroy(&p->mu);
  free(p->queue);
  free(p->done);
  free(p->store_dir);
  free(p);
  return NULL;
}
