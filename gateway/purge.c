/* Store objects nobody needs removed on a thread (purge.h). */
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

/* One piece of work: the objects of job, or (job 0) key's multipart upload
 * upload_id to abort. */
struct item {
  int64_t job;
  char *key, *upload_id;
};

struct gw_purge {
  char *store_dir;
  struct gw_objstore *o;
  pthread_mutex_t mu;
  pthread_cond_t idle;
  struct item *queue; /* the work: queue[head, n) */
  size_t head, n, cap;
  int64_t *done;   /* jobs whose objects are gone, for the loop to take */
  size_t n_done, cap_done;
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

/* Aborts it's multipart upload: 0 aborted, 1 it was no more (completed, or
 * aborted already), or an error; each said in the log. */
static int abort_upload(struct gw_purge *p, const struct item *it) {
  if (!p->o)
    return 1; /* a file store has no uploads in parts */
  struct sl_s3_signer signer = gw_objstore_signer(p->o);
  struct sl_s3_opts opts = gw_objstore_opts(p->o);
  struct sl_s3_client *c = NULL;
  char why[512] = "";
  int r = sl_s3_client_new(&signer, &opts, &c);
  if (r == 0)
    r = sl_s3_abort_upload(c, it->key, it->upload_id, why, sizeof why);
  sl_s3_client_free(c);
  if (r == 0)
    sl_info(T, "%s: aborted the multipart upload left unfinished (its parts are deleted)", it->key);
  else if (r == -ENOENT)
    sl_debug(T, "%s: the multipart upload %.40s was complete or aborted already", it->key,
             it->upload_id);
  else if (r == -ECANCELED)
    sl_info(T, "%s: the abort of an unfinished multipart upload stopped with the gateway (it goes "
            "on at the next start)", it->key);
  else
    sl_warn(T, "%s: the multipart upload left unfinished could not be aborted: %s (tried again at "
            "the next start)", it->key, why[0] ? why : sl_strerror(r));
  return r == -ENOENT ? 1 : r;
}

/* Removes job's objects: 0 or more removed, or an error; said in the log. */
static int purge_job(struct gw_purge *p, int64_t job) {
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
  return r;
}

/* Under the lock: it is done, for the loop to take (its job, or its upload
 * id, handed over). Without memory it is left out: its row stays, and the
 * next start does it again. */
static void note_done(struct gw_purge *p, struct item *it) {
  if (it->job && p->n_done == p->cap_done) {
    size_t cap = p->cap_done ? 2 * p->cap_done : 64;
    int64_t *grown = realloc(p->done, cap * sizeof *grown);
    if (grown)
      p->done = grown, p->cap_done = cap;
  } else if (!it->job && p->n_aborted == p->cap_aborted) {
    size_t cap = p->cap_aborted ? 2 * p->cap_aborted : 64;
    char **grown = realloc(p->aborted, cap * sizeof *grown);
    if (grown)
      p->aborted = grown, p->cap_aborted = cap;
  }
  if (it->job && p->n_done < p->cap_done)
    p->done[p->n_done++] = it->job;
  else if (!it->job && p->n_aborted < p->cap_aborted)
    p->aborted[p->n_aborted++] = it->upload_id, it->upload_id = NULL;
}

static void *purge_main(void *arg) {
  struct gw_purge *p = arg;
  pthread_mutex_lock(&p->mu);
  while (p->head < p->n && !p->stopping) {
    struct item it = p->queue[p->head++];
    if (p->head == p->n)
      p->head = p->n = 0;
    pthread_mutex_unlock(&p->mu);
    int r = it.job ? purge_job(p, it.job) : abort_upload(p, &it);
    pthread_mutex_lock(&p->mu);
    if (r >= 0)
      note_done(p, &it);
    free(it.key);
    free(it.upload_id);
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

/* Under the lock: room for n more items at the queue's end, the taken
 * ones dropped. */
static int make_room(struct gw_purge *p, size_t n) {
  if (p->head) {
    memmove(p->queue, p->queue + p->head, (p->n - p->head) * sizeof *p->queue);
    p->n -= p->head;
    p->head = 0;
  }
  if (p->n + n > QUEUE_MAX)
    return SL_ELIMIT;
  if (p->n + n > p->cap) {
    size_t cap = (p->n + n) * 2;
    struct item *q = realloc(p->queue, cap * sizeof *q);
    if (!q)
      return -ENOMEM;
    p->queue = q, p->cap = cap;
  }
  return 0;
}

int gw_purge_jobs(struct gw_purge *p, const int64_t *jobs, size_t n) {
  if (!n)
    return 0;
  pthread_mutex_lock(&p->mu);
  int r = make_room(p, n);
  for (size_t i = 0; r == 0 && i < n; i++)
    p->queue[p->n++] = (struct item){.job = jobs[i]};
  if (r == 0)
    r = start(p);
  pthread_mutex_unlock(&p->mu);
  return r;
}

int gw_purge_uploads(struct gw_purge *p, const char *const *keys, const char *const *upload_ids,
                     size_t n) {
  if (!n)
    return 0;
  pthread_mutex_lock(&p->mu);
  int r = make_room(p, n);
  for (size_t i = 0; r == 0 && i < n; i++) {
    struct item it = {.key = strdup(keys[i]), .upload_id = strdup(upload_ids[i])};
    if (it.key && it.upload_id) {
      p->queue[p->n++] = it;
    } else {
      free(it.key);
      free(it.upload_id);
      r = -ENOMEM;
    }
  }
  if (p->n > p->head) { /* those queued before a failure go ahead */
    int started = start(p);
    r = r < 0 ? r : started;
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
  size_t jobs = 0, uploads = 0;
  for (size_t i = p->head; i < p->n; i++) {
    jobs += p->queue[i].job != 0;
    uploads += p->queue[i].job == 0;
    free(p->queue[i].key);
    free(p->queue[i].upload_id);
  }
  if (jobs)
    sl_info(T, "stopping: the objects of %zu jobs are removed at the next start", jobs);
  if (uploads)
    sl_info(T, "stopping: %zu unfinished multipart uploads are aborted at the next start", uploads);
  for (size_t i = 0; i < p->n_aborted; i++)
    free(p->aborted[i]);
  free(p->aborted);
  pthread_cond_destroy(&p->idle);
  pthread_mutex_destroy(&p->mu);
  free(p->queue);
  free(p->done);
  free(p->store_dir);
  free(p);
  return NULL;
}
