/* Asynchronous checkpoint writer (see tc_writer.h). State machine under one
 * mutex: idle -> (submit) busy -> (thread finishes) idle. */
#include "tc_writer.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sl_time.h"

struct tc_ckpt_writer {
  char *dir;
  int keep;
  struct tc_ckpt *buf;
  tc_ckpt_done_fn done;
  void *done_ctx;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int busy, stop, last_err;
  int64_t submit_us;
  struct tc_ckpt_result res;
};

static void *writer_main(void *p) {
  struct tc_ckpt_writer *w = p;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (!w->busy && !w->stop) pthread_cond_wait(&w->cv, &w->mu);
    if (!w->busy && w->stop) break;
    pthread_mutex_unlock(&w->mu);
    struct tc_ckpt_result *res = &w->res;
    memset(res, 0, sizeof *res);
    res->step = w->buf->meta.step;
    res->err = tc_ckpt_write(w->buf, w->dir, res->path, sizeof res->path, res->text,
                             sizeof res->text);
    if (res->err == 0) tc_ckpt_prune(w->dir, w->keep, w->buf->meta.run_id);
    res->write_ms = (double)(sl_time_mono_us() - w->submit_us) / 1000.0;
    if (w->done) w->done(w->done_ctx, res);
    pthread_mutex_lock(&w->mu);
    w->last_err = res->err;
    w->busy = 0;
    pthread_cond_broadcast(&w->cv);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

struct tc_ckpt_writer *tc_ckpt_writer_new(const char *dir, int keep, size_t n_params,
                                          tc_ckpt_done_fn done, void *done_ctx) {
  struct tc_ckpt_writer *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  w->dir = strdup(dir);
  w->buf = tc_ckpt_new(n_params);
  w->keep = keep;
  w->done = done;
  w->done_ctx = done_ctx;
  if (!w->dir || !w->buf) goto fail;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  if (pthread_create(&w->thread, NULL, writer_main, w) != 0) {
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    goto fail;
  }
  return w;
fail:
  free(w->dir);
  tc_ckpt_free(w->buf);
  free(w);
  return NULL;
}

struct tc_ckpt_writer *tc_ckpt_writer_free(struct tc_ckpt_writer *w) {
  if (!w) return NULL;
  pthread_mutex_lock(&w->mu);
  w->stop = 1;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  pthread_join(w->thread, NULL);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  tc_ckpt_free(w->buf);
  free(w->dir);
  free(w);
  return NULL;
}

struct tc_ckpt *tc_ckpt_writer_acquire(struct tc_ckpt_writer *w) {
  tc_ckpt_writer_wait(w);
  return w->buf;
}

void tc_ckpt_writer_submit(struct tc_ckpt_writer *w) {
  pthread_mutex_lock(&w->mu);
  w->submit_us = sl_time_mono_us();
  w->busy = 1;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

int tc_ckpt_writer_wait(struct tc_ckpt_writer *w) {
  pthread_mutex_lock(&w->mu);
  while (w->busy) pthread_cond_wait(&w->cv, &w->mu);
  int r = w->last_err;
  pthread_mutex_unlock(&w->mu);
  return r;
}

int tc_ckpt_writer_busy(struct tc_ckpt_writer *w) {
  pthread_mutex_lock(&w->mu);
  int b = w->busy;
  pthread_mutex_unlock(&w->mu);
  return b;
}
