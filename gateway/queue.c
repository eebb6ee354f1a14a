/* Fair queue: an array of users in ring order, each with a bounded FIFO.
 * Invariants: a job id appears at most once; users with an empty FIFO are
 * dropped from the ring; `next` indexes the user to serve first. */
#include "queue.h"

#include "sl_err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct user_fifo {
  char name[64];
  int64_t *jobs;
  size_t n, cap;
};

struct gw_queue {
  struct user_fifo *users;
  size_t n_users, cap_users;
  size_t next;
  size_t total;
};

struct gw_queue *gw_queue_new(void) { return calloc(1, sizeof(struct gw_queue)); }

struct gw_queue *gw_queue_free(struct gw_queue *q) {
  if (q) {
    for (size_t i = 0; i < q->n_users; i++)
      free(q->users[i].jobs);
    free(q->users);
    free(q);
  }
  return NULL;
}

static int find(const struct gw_queue *q, int64_t job, size_t *ret_u, size_t *ret_i) {
  for (size_t u = 0; u < q->n_users; u++)
    for (size_t i = 0; i < q->users[u].n; i++)
      if (q->users[u].jobs[i] == job) {
        *ret_u = u;
        *ret_i = i;
        return 0;
      }
  return -ENOENT;
}

static struct user_fifo *user_slot(struct gw_queue *q, const char *user) {
  for (size_t u = 0; u < q->n_users; u++)
    if (!strcmp(q->users[u].name, user))
      return &q->users[u];
  if (q->n_users == q->cap_users) {
    size_t cap = q->cap_users ? 2 * q->cap_users : 8;
    struct user_fifo *g = realloc(q->users, cap * sizeof *g);
    if (!g)
      return NULL;
    q->users = g;
    q->cap_users = cap;
  }
  /* A new user joins just before `next`'s turn comes round again: at the end of the ring. */
  struct user_fifo *f = &q->users[q->n_users++];
  memset(f, 0, sizeof *f);
  snprintf(f->name, sizeof f->name, "%s", user);
  return f;
}

int gw_queue_push(struct gw_queue *q, const char *user, int64_t job, int front) {
  size_t u, i;
  if (find(q, job, &u, &i) == 0)
    return -EEXIST;
  if (q->total >= GW_QUEUE_MAX)
    return SL_ELIMIT;
  struct user_fifo *f = user_slot(q, user);
  if (!f)
    return -ENOMEM;
  if (f->n == f->cap) {
    size_t cap = f->cap ? 2 * f->cap : 8;
    int64_t *g = realloc(f->jobs, cap * sizeof *g);
    if (!g)
      return -ENOMEM;
    f->jobs = g;
    f->cap = cap;
  }
  if (front) {
    memmove(f->jobs + 1, f->jobs, f->n * sizeof *f->jobs);
    f->jobs[0] = job;
  } else {
    f->jobs[f->n] = job;
  }
  f->n++;
  q->total++;
  return 0;
}

static void drop_user(struct gw_queue *q, size_t u) {
  free(q->users[u].jobs);
  memmove(&q->users[u], &q->users[u + 1], (q->n_users - u - 1) * sizeof *q->users);
  q->n_users--;
  if (q->next > u)
    q->next--;
  if (q->next >= q->n_users)
    q->next = 0;
}

static void remove_at(struct gw_queue *q, size_t u, size_t i) {
  struct user_fifo *f = &q->users[u];
  memmove(f->jobs + i, f->jobs + i + 1, (f->n - i - 1) * sizeof *f->jobs);
  f->n--;
  q->total--;
  if (!f->n)
    drop_user(q, u);
}

int gw_queue_remove(struct gw_queue *q, int64_t job) {
  size_t u, i;
  if (find(q, job, &u, &i) < 0)
    return -ENOENT;
  remove_at(q, u, i);
  return 0;
}

size_t gw_queue_order(const struct gw_queue *q, int64_t *ret, size_t max) {
  size_t n = 0;
  for (size_t depth = 0; n < max; depth++) {
    size_t added = 0;
    for (size_t k = 0; k < q->n_users && n < max; k++) {
      const struct user_fifo *f = &q->users[(q->next + k) % q->n_users];
      if (depth < f->n) {
        ret[n++] = f->jobs[depth];
        added++;
      }
    }
    if (!added)
      break;
  }
  return n;
}

int gw_queue_take(struct gw_queue *q, int64_t job) {
  size_t u, i;
  if (find(q, job, &u, &i) < 0)
    return -ENOENT;
  size_t before = q->n_users;
  remove_at(q, u, i);
  /* serve the user after u next: if u is still in the ring that is u+1, else u's old slot */
  if (q->n_users == before)
    q->next = q->n_users ? (u + 1) % q->n_users : 0;
  else
    q->next = q->n_users ? u % q->n_users : 0;
  return 0;
}

size_t gw_queue_len(const struct gw_queue *q) { return q->total; }
