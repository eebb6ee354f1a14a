/* The event loop: descriptor and ZeroMQ readiness, timers (order, re-arming,
 * moving, removal), registrations changed from callbacks in the middle of a
 * turn, bounds, hooks, wake, stop, signals, and a wait that lasts until the
 * nearest timer rather than spinning. */
#include "harness.h"
#include "loop.h"
#include "sl_err.h"
#include "sl_time.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <zmq.h>

#define MS SL_US_PER_MS

/* Turns until *flag is set or a second has gone by; returns *flag. */
static int run_until(struct gw_loop *l, const int *flag) {
  int64_t deadline = sl_time_mono_us() + SL_US_PER_S;
  while (!*flag && sl_time_mono_us() < deadline)
    if (gw_loop_run_once(l, 10 * MS) < 0)
      break;
  return *flag;
}

/* ---- descriptors ---- */

struct io_rec {
  int calls;
  int fd;
  void *sock;
  int events;
};

static void rec_io(struct gw_loop *l, int fd, void *sock, int events, void *data) {
  (void)l;
  struct io_rec *r = data;
  r->calls++;
  r->fd = fd;
  r->sock = sock;
  r->events = events;
}

static void test_fd(void) {
  struct gw_loop *l = gw_loop_new();
  int sv[2];
  CHECK_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  struct io_rec r = {0};

  /* write interest: an empty socket buffer is writable at once */
  CHECK_INT(gw_loop_add_fd(l, sv[0], GW_LOOP_WRITE, rec_io, &r), 0);
  CHECK_INT(gw_loop_add_fd(l, sv[0], GW_LOOP_READ, rec_io, &r), -EEXIST);
  CHECK_INT(gw_loop_add_fd(l, -1, GW_LOOP_READ, rec_io, &r), -EINVAL);
  CHECK_INT(gw_loop_add_fd(l, sv[1], GW_LOOP_READ, NULL, &r), -EINVAL);
  CHECK_INT(gw_loop_run_once(l, 0), 1);
  CHECK_INT(r.calls, 1);
  CHECK_INT(r.fd, sv[0]);
  CHECK(r.sock == NULL);
  CHECK_INT(r.events, GW_LOOP_WRITE);

  /* read interest: nothing until the peer writes */
  CHECK_INT(gw_loop_mod_fd(l, sv[0], GW_LOOP_READ), 0);
  r.calls = 0;
  CHECK_INT(gw_loop_run_once(l, 0), 0);
  CHECK_INT(r.calls, 0);
  CHECK_INT(write(sv[1], "x", 1), 1);
  CHECK(run_until(l, &r.calls));
  CHECK_INT(r.events, GW_LOOP_READ);

  /* level-triggered: still readable, called again next turn */
  r.calls = 0;
  CHECK_INT(gw_loop_run_once(l, 0), 1);
  CHECK_INT(r.calls, 1);

  /* watched for nothing: kept registered, never called */
  CHECK_INT(gw_loop_mod_fd(l, sv[0], 0), 0);
  r.calls = 0;
  CHECK_INT(gw_loop_run_once(l, 0), 0);
  CHECK_INT(r.calls, 0);
  CHECK_INT(gw_loop_add_fd(l, sv[0], GW_LOOP_READ, rec_io, &r), -EEXIST);
  CHECK_INT(gw_loop_mod_fd(l, sv[1], GW_LOOP_READ), -ENOENT);

  /* nor does a hang-up on it end the wait */
  close(sv[1]);
  int64_t start = sl_time_mono_us();
  CHECK_INT(gw_loop_run_once(l, 20 * MS), 0);
  CHECK(sl_time_mono_us() - start >= 20 * MS);
  CHECK_INT(r.calls, 0);

  /* watched again: the hang-up is reported as an error beside readability */
  CHECK_INT(gw_loop_mod_fd(l, sv[0], GW_LOOP_READ), 0);
  CHECK_INT(gw_loop_run_once(l, 0), 1);
  CHECK_INT(r.events, GW_LOOP_READ | GW_LOOP_ERROR);

  CHECK_INT(gw_loop_del_fd(l, sv[0]), 0);
  CHECK_INT(gw_loop_del_fd(l, sv[0]), -ENOENT);
  r.calls = 0;
  CHECK_INT(gw_loop_run_once(l, 0), 0);
  CHECK_INT(r.calls, 0);
  close(sv[0]);
  l = gw_loop_free(l);
  CHECK(l == NULL);
  CHECK(gw_loop_free(NULL) == NULL);
}

/* ---- ZeroMQ sockets ---- */

struct zrec {
  int calls;
  int events;
  char got[16];
};

static void on_zmsg(struct gw_loop *l, int fd, void *sock, int events, void *data) {
  (void)l;
  struct zrec *z = data;
  CHECK_INT(fd, -1);
  z->calls++;
  z->events = events;
  /* a bounded batch, without blocking: the message may already be gone */
  for (int i = 0; i < 8; i++) {
    char buf[16] = {0};
    int n = zmq_recv(sock, buf, sizeof buf - 1, ZMQ_DONTWAIT);
    if (n < 0)
      break;
    memcpy(z->got, buf, sizeof z->got);
  }
}

static void test_zsock(void) {
  struct gw_loop *l = gw_loop_new();
  void *ctx = zmq_ctx_new();
  void *a = zmq_socket(ctx, ZMQ_PAIR), *b = zmq_socket(ctx, ZMQ_PAIR);
  CHECK_INT(zmq_bind(a, "inproc://test-gw-loop"), 0);
  CHECK_INT(zmq_connect(b, "inproc://test-gw-loop"), 0);
  struct zrec z = {0};
  CHECK_INT(gw_loop_add_zsock(l, b, GW_LOOP_READ, on_zmsg, &z), 0);
  CHECK_INT(gw_loop_add_zsock(l, b, GW_LOOP_READ, on_zmsg, &z), -EEXIST);
  CHECK_INT(gw_loop_add_zsock(l, NULL, GW_LOOP_READ, on_zmsg, &z), -EINVAL);
  CHECK_INT(gw_loop_run_once(l, 0), 0);
  CHECK_INT(z.calls, 0);

  CHECK_INT(zmq_send(a, "hello", 5, 0), 5);
  CHECK(run_until(l, &z.calls));
  CHECK_INT(z.events, GW_LOOP_READ);
  CHECK_STR(z.got, "hello");
  /* drained: no further call */
  z.calls = 0;
  CHECK_INT(gw_loop_run_once(l, 0), 0);
  CHECK_INT(z.calls, 0);

  /* write interest on a second registration: a connected PAIR can send */
  struct io_rec w = {0};
  CHECK_INT(gw_loop_add_zsock(l, a, GW_LOOP_WRITE, rec_io, &w), 0);
  CHECK(run_until(l, &w.calls));
  CHECK(w.sock == a);
  CHECK_INT(w.fd, -1);
  CHECK_INT(w.events, GW_LOOP_WRITE);

  CHECK_INT(gw_loop_del_zsock(l, a), 0);
  CHECK_INT(gw_loop_del_zsock(l, a), -ENOENT);
  CHECK_INT(gw_loop_del_zsock(l, b), 0);
  CHECK_INT(zmq_send(a, "again", 5, 0), 5);
  z.calls = 0;
  CHECK_INT(gw_loop_run_once(l, 5 * MS), 0);
  CHECK_INT(z.calls, 0);

  int linger = 0;
  zmq_setsockopt(a, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(b, ZMQ_LINGER, &linger, sizeof linger);
  zmq_close(a);
  zmq_close(b);
  zmq_ctx_term(ctx);
  gw_loop_free(l);
}

/* ---- registrations changed during a turn ---- */

struct turn {
  struct gw_loop *l;
  int p1[2], p2[2], p3[2];
  int calls_a, calls_b, calls_new;
  int reused;                   /* the new pipe got the old descriptor's number */
  int b_events;
};

static void b_counts(struct gw_loop *l, int fd, void *sock, int events, void *data) {
  (void)l, (void)fd, (void)sock, (void)events;
  ((struct turn *)data)->calls_b++;
}

static void new_counts(struct gw_loop *l, int fd, void *sock, int events, void *data) {
  (void)l, (void)fd, (void)sock, (void)events;
  ((struct turn *)data)->calls_new++;
}

/* Removes the other ready registration. */
static void a_removes_b(struct gw_loop *l, int fd, void *sock, int events, void *data) {
  (void)fd, (void)sock, (void)events;
  struct turn *t = data;
  if (t->calls_a++ == 0)
    CHECK_INT(gw_loop_del_fd(l, t->p2[0]), 0);
}

/* Closes the other ready descriptor and opens an empty pipe under (most
 * likely) the same number. */
static void a_replaces_b(struct gw_loop *l, int fd, void *sock, int events, void *data) {
  (void)fd, (void)sock, (void)events;
  struct turn *t = data;
  t->calls_a++;
  int old = t->p2[0];
  CHECK_INT(gw_loop_del_fd(l, old), 0);
  close(t->p2[0]);
  close(t->p2[1]);
  t->p2[0] = t->p2[1] = -1;
  CHECK_INT(pipe(t->p3), 0);
  t->reused = t->p3[0] == old;
  CHECK_INT(gw_loop_add_fd(l, t->p3[0], GW_LOOP_READ, new_counts, t), 0);
}

/* Narrows the other registration's interest to writing. */
static void a_narrows_b(struct gw_loop *l, int fd, void *sock, int events, void *data) {
  (void)fd, (void)sock, (void)events;
  struct turn *t = data;
  t->calls_a++;
  CHECK_INT(gw_loop_mod_fd(l, t->p2[0], GW_LOOP_WRITE), 0);
}

static void b_events(struct gw_loop *l, int fd, void *sock, int events, void *data) {
  (void)l, (void)fd, (void)sock;
  struct turn *t = data;
  t->calls_b++;
  t->b_events = events;
}

/* Pauses the other ready registration. */
static void a_pauses_b(struct gw_loop *l, int fd, void *sock, int events, void *data) {
  (void)fd, (void)sock, (void)events;
  struct turn *t = data;
  t->calls_a++;
  CHECK_INT(gw_loop_mod_fd(l, t->p2[0], 0), 0);
}

static void a_removes_self(struct gw_loop *l, int fd, void *sock, int events, void *data) {
  (void)sock, (void)events;
  struct turn *t = data;
  t->calls_a++;
  CHECK_INT(gw_loop_del_fd(l, fd), 0);
  CHECK_INT(gw_loop_del_fd(l, fd), -ENOENT);
}

static void turn_setup(struct turn *t, gw_loop_io_fn a) {
  memset(t, 0, sizeof *t);
  t->p3[0] = t->p3[1] = -1;
  t->l = gw_loop_new();
  CHECK_INT(pipe(t->p1), 0);
  CHECK_INT(pipe(t->p2), 0);
  CHECK_INT(write(t->p1[1], "a", 1), 1);
  CHECK_INT(write(t->p2[1], "b", 1), 1);
  /* registration order is dispatch order: a before b */
  CHECK_INT(gw_loop_add_fd(t->l, t->p1[0], GW_LOOP_READ, a, t), 0);
  CHECK_INT(gw_loop_add_fd(t->l, t->p2[0], GW_LOOP_READ, b_counts, t), 0);
}

static void turn_done(struct turn *t) {
  int *fds[] = {t->p1, t->p2, t->p3};
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 2; j++)
      if (fds[i][j] >= 0)
        close(fds[i][j]);
  gw_loop_free(t->l);
}

static void test_changes_in_turn(void) {
  struct turn t;

  /* both ready; a removes b: b is not called, this turn or later */
  turn_setup(&t, a_removes_b);
  CHECK_INT(gw_loop_run_once(t.l, 0), 1);
  CHECK_INT(gw_loop_run_once(t.l, 0), 1);
  CHECK_INT(t.calls_a, 2);
  CHECK_INT(t.calls_b, 0);
  turn_done(&t);

  /* a replaces b by a new, empty descriptor with b's number: the new one
   * is not called with b's readiness */
  turn_setup(&t, a_replaces_b);
  CHECK_INT(gw_loop_run_once(t.l, 0), 1);
  CHECK_INT(t.calls_a, 1);
  CHECK_INT(t.calls_b, 0);
  CHECK_INT(t.calls_new, 0);
  CHECK(t.reused);
  /* and it works once it is really readable */
  CHECK_INT(gw_loop_del_fd(t.l, t.p1[0]), 0);
  CHECK_INT(write(t.p3[1], "c", 1), 1);
  CHECK(run_until(t.l, &t.calls_new));
  turn_done(&t);

  /* a stops watching b: the interest is obeyed within the turn */
  turn_setup(&t, a_pauses_b);
  CHECK_INT(gw_loop_run_once(t.l, 0), 1);
  CHECK_INT(t.calls_b, 0);
  turn_done(&t);

  /* a narrows b's interest from read and write to write: b, readable and
   * writable, is told only of writing */
  turn_setup(&t, a_narrows_b);
  CHECK_INT(gw_loop_del_fd(t.l, t.p2[0]), 0);
  close(t.p2[0]);
  close(t.p2[1]);
  CHECK_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, t.p2), 0);
  CHECK_INT(write(t.p2[1], "b", 1), 1);
  CHECK_INT(gw_loop_add_fd(t.l, t.p2[0], GW_LOOP_READ | GW_LOOP_WRITE, b_events, &t), 0);
  CHECK_INT(gw_loop_run_once(t.l, 0), 2);
  CHECK_INT(t.calls_b, 1);
  CHECK_INT(t.b_events, GW_LOOP_WRITE);
  turn_done(&t);

  /* a removes itself: b still runs, a never again */
  turn_setup(&t, a_removes_self);
  CHECK_INT(gw_loop_run_once(t.l, 0), 2);
  CHECK_INT(gw_loop_run_once(t.l, 0), 1);
  CHECK_INT(t.calls_a, 1);
  CHECK_INT(t.calls_b, 2);
  turn_done(&t);
}

/* ---- timers ---- */

struct tlog {
  int order[16];
  int n;
  int64_t ids[8];
  int64_t early_us;             /* the most a timer ran before it was due */
};

struct tctx {
  struct tlog *log;
  int tag;
  int left;                     /* re-arms this many more times */
  int64_t step_us;
  int64_t due_us;
  int64_t victim;               /* a timer to delete or move */
  int64_t victim_due;
};

static int64_t log_timer(struct gw_loop *l, int64_t id, int64_t now_us, void *data) {
  (void)id;
  struct tctx *c = data;
  CHECK_INT(now_us, gw_loop_now_us(l));
  if (now_us < c->due_us && c->due_us - now_us > c->log->early_us)
    c->log->early_us = c->due_us - now_us;
  if (c->log->n < 16)
    c->log->order[c->log->n++] = c->tag;
  if (c->left-- > 0) {
    c->due_us = now_us + c->step_us;
    return c->due_us;
  }
  return GW_LOOP_NOMORE;
}

static int64_t move_victim(struct gw_loop *l, int64_t id, int64_t now_us, void *data) {
  struct tctx *c = data;
  CHECK_INT(gw_loop_set_timer(l, c->victim, c->victim_due), 0);
  return log_timer(l, id, now_us, data);
}

static int64_t delete_victim(struct gw_loop *l, int64_t id, int64_t now_us, void *data) {
  struct tctx *c = data;
  CHECK_INT(gw_loop_del_timer(l, c->victim), 0);
  return log_timer(l, id, now_us, data);
}

static int64_t delete_self(struct gw_loop *l, int64_t id, int64_t now_us, void *data) {
  CHECK_INT(gw_loop_del_timer(l, id), 0);
  log_timer(l, id, now_us, data);
  return now_us;              /* ignored: the timer is gone */
}

static void test_timers(void) {
  struct gw_loop *l = gw_loop_new();
  struct tlog log = {0};
  int64_t now = sl_time_mono_us();

  /* three due at different times, added out of order, run in order */
  struct tctx c3 = {&log, 3, 0, 0, now + 6 * MS, 0, 0};
  struct tctx c1 = {&log, 1, 0, 0, now + 2 * MS, 0, 0};
  struct tctx c2 = {&log, 2, 0, 0, now + 4 * MS, 0, 0};
  int64_t id3 = gw_loop_add_timer(l, c3.due_us, log_timer, &c3);
  int64_t id1 = gw_loop_add_timer(l, c1.due_us, log_timer, &c1);
  int64_t id2 = gw_loop_add_timer(l, c2.due_us, log_timer, &c2);
  CHECK(id3 > 0 && id1 > id3 && id2 > id1);
  int64_t deadline = now + SL_US_PER_S;
  while (log.n < 3 && sl_time_mono_us() < deadline)
    gw_loop_run_once(l, -1);
  CHECK_INT(log.n, 3);
  CHECK_INT(log.order[0], 1);
  CHECK_INT(log.order[1], 2);
  CHECK_INT(log.order[2], 3);
  CHECK_INT(log.early_us, 0);
  /* ran out (GW_LOOP_NOMORE): gone */
  CHECK_INT(gw_loop_del_timer(l, id1), -ENOENT);
  CHECK_INT(gw_loop_set_timer(l, id2, now), -ENOENT);

  /* three already due in the same turn run in due order */
  log.n = 0;
  now = sl_time_mono_us();
  c3.due_us = now - 1 * MS;
  c1.due_us = now - 3 * MS;
  c2.due_us = now - 2 * MS;
  gw_loop_add_timer(l, c3.due_us, log_timer, &c3);
  gw_loop_add_timer(l, c2.due_us, log_timer, &c2);
  gw_loop_add_timer(l, c1.due_us, log_timer, &c1);
  CHECK_INT(gw_loop_run_once(l, 0), 3);
  CHECK_INT(log.n, 3);
  CHECK_INT(log.order[0], 1);
  CHECK_INT(log.order[1], 2);
  CHECK_INT(log.order[2], 3);

  /* re-armed by its return value, then GW_LOOP_NOMORE */
  log.n = 0;
  struct tctx r = {&log, 7, 2, 1 * MS, sl_time_mono_us(), 0, 0};
  int64_t rid = gw_loop_add_timer(l, r.due_us, log_timer, &r);
  while (log.n < 3 && sl_time_mono_us() < deadline + SL_US_PER_S)
    gw_loop_run_once(l, 20 * MS);
  CHECK_INT(log.n, 3);
  CHECK_INT(gw_loop_del_timer(l, rid), -ENOENT);
  CHECK_INT(gw_loop_run_once(l, 0), 0);
  CHECK_INT(log.n, 3);

  /* a return value already past: once per turn, not again in the same one */
  log.n = 0;
  struct tctx p = {&log, 8, 100, -5 * MS, 0, 0, 0};
  int64_t pid = gw_loop_add_timer(l, 0, log_timer, &p);
  CHECK_INT(gw_loop_run_once(l, 0), 1);
  CHECK_INT(gw_loop_run_once(l, 0), 1);
  CHECK_INT(log.n, 2);
  CHECK_INT(gw_loop_del_timer(l, pid), 0);
  CHECK_INT(gw_loop_del_timer(l, pid), -ENOENT);
  CHECK_INT(gw_loop_run_once(l, 0), 0);

  /* gw_loop_set_timer moves a far timer to now, and a due one away */
  log.n = 0;
  now = sl_time_mono_us();
  struct tctx m = {&log, 9, 0, 0, 0, 0, 0};
  int64_t mid = gw_loop_add_timer(l, now + 10 * SL_US_PER_S, log_timer, &m);
  CHECK_INT(gw_loop_run_once(l, 0), 0);
  CHECK_INT(gw_loop_set_timer(l, mid, now), 0);
  CHECK_INT(gw_loop_run_once(l, 0), 1);
  CHECK_INT(log.n, 1);
  mid = gw_loop_add_timer(l, now, log_timer, &m);
  CHECK_INT(gw_loop_set_timer(l, mid, now + 10 * SL_US_PER_S), 0);
  CHECK_INT(gw_loop_run_once(l, 0), 0);
  CHECK_INT(gw_loop_del_timer(l, mid), 0);

  /* del_timer before it is due: never runs */
  log.n = 0;
  struct tctx d = {&log, 10, 0, 0, 0, 0, 0};
  int64_t did = gw_loop_add_timer(l, now, log_timer, &d);
  CHECK_INT(gw_loop_del_timer(l, did), 0);
  CHECK_INT(gw_loop_run_once(l, 0), 0);
  CHECK_INT(log.n, 0);

  /* ids are never reused */
  int64_t fresh = gw_loop_add_timer(l, now + SL_US_PER_S, log_timer, &d);
  CHECK(fresh > did);
  CHECK_INT(gw_loop_del_timer(l, fresh), 0);
  CHECK_INT(gw_loop_set_timer(l, 999999, now), -ENOENT);
  CHECK_INT(gw_loop_add_timer(l, now, NULL, &d), -EINVAL);
  CHECK_INT(gw_loop_add_timer(l, GW_LOOP_NOMORE, log_timer, &d), -EINVAL);

  /* an earlier due timer deletes, or moves away, a later due one */
  log.n = 0;
  now = sl_time_mono_us();
  struct tctx v = {&log, 12, 0, 0, now - 1 * MS, 0, 0};
  struct tctx k = {&log, 11, 0, 0, now - 2 * MS, 0, 0};
  k.victim = gw_loop_add_timer(l, v.due_us, log_timer, &v);
  gw_loop_add_timer(l, k.due_us, delete_victim, &k);
  CHECK_INT(gw_loop_run_once(l, 0), 1);
  CHECK_INT(log.n, 1);
  CHECK_INT(log.order[0], 11);
  log.n = 0;
  k.victim = gw_loop_add_timer(l, v.due_us, log_timer, &v);
  k.victim_due = now + 10 * SL_US_PER_S;
  gw_loop_add_timer(l, k.due_us, move_victim, &k);
  CHECK_INT(gw_loop_run_once(l, 0), 1);
  CHECK_INT(log.n, 1);
  CHECK_INT(gw_loop_del_timer(l, k.victim), 0);

  /* a timer that deletes itself, whatever it returns */
  log.n = 0;
  struct tctx s = {&log, 13, 0, 0, 0, 0, 0};
  gw_loop_add_timer(l, now, delete_self, &s);
  CHECK_INT(gw_loop_run_once(l, 0), 1);
  CHECK_INT(gw_loop_run_once(l, 0), 0);
  CHECK_INT(log.n, 1);
  gw_loop_free(l);
}

/* A timer due in 20 ms: the loop waits for it instead of spinning. */
static void hook_count(struct gw_loop *l, void *data) {
  (void)l;
  ++*(int *)data;
}

static void test_no_spin(void) {
  struct gw_loop *l = gw_loop_new();
  struct tlog log = {0};
  int turns = 0;
  CHECK_INT(gw_loop_add_hook(l, hook_count, &turns), 0);
  int64_t start = sl_time_mono_us();
  /* not a whole number of ms, so rounding matters */
  struct tctx c = {&log, 1, 0, 0, start + 20 * MS + 500, 0, 0};
  gw_loop_add_timer(l, c.due_us, log_timer, &c);
  while (log.n < 1 && sl_time_mono_us() < start + SL_US_PER_S)
    gw_loop_run_once(l, -1);
  int64_t took = sl_time_mono_us() - start;
  CHECK_INT(log.n, 1);
  CHECK_INT(log.early_us, 0);
  CHECK(took >= 20 * MS);
  CHECK(took < 500 * MS);
  CHECK(turns >= 1 && turns <= 3);
  fprintf(stderr, "a timer 20.5 ms away: %d turn(s), %.1f ms\n", turns, took / 1000.0);

  /* max_wait_us bounds the wait when no timer is nearer */
  start = sl_time_mono_us();
  CHECK_INT(gw_loop_run_once(l, 15 * MS), 0);
  took = sl_time_mono_us() - start;
  CHECK(took >= 15 * MS && took < 500 * MS);
  gw_loop_free(l);
}

/* ---- bounds ---- */

static int64_t never(struct gw_loop *l, int64_t id, int64_t now_us, void *data) {
  (void)l, (void)id, (void)now_us, (void)data;
  CHECK(0);
  return GW_LOOP_NOMORE;
}

static void test_bounds(void) {
  struct gw_loop *l = gw_loop_new();
  struct io_rec r = {0};
  /* descriptors watched for nothing are not polled, so need not be open */
  for (int i = 0; i < GW_LOOP_MAX_IO; i++)
    CHECK_INT(gw_loop_add_fd(l, 1000 + i, 0, rec_io, &r), 0);
  CHECK_INT(gw_loop_add_fd(l, 5000, 0, rec_io, &r), SL_ELIMIT);
  int dummy;
  CHECK_INT(gw_loop_add_zsock(l, &dummy, 0, rec_io, &r), SL_ELIMIT);
  CHECK_INT(gw_loop_add_fd(l, 1000, 0, rec_io, &r), -EEXIST);
  CHECK_INT(gw_loop_del_fd(l, 1100), 0);
  CHECK_INT(gw_loop_add_fd(l, 5000, 0, rec_io, &r), 0);
  CHECK_INT(gw_loop_run_once(l, 0), 0);

  int64_t far = sl_time_mono_us() + 100 * SL_US_PER_S;
  int64_t last = 0;
  for (int i = 0; i < GW_LOOP_MAX_TIMERS; i++)
    last = gw_loop_add_timer(l, far + i, never, NULL);
  CHECK_INT(last, GW_LOOP_MAX_TIMERS);
  CHECK_INT(gw_loop_add_timer(l, far, never, NULL), SL_ELIMIT);
  CHECK_INT(gw_loop_del_timer(l, 100), 0);
  CHECK_INT(gw_loop_add_timer(l, far, never, NULL), GW_LOOP_MAX_TIMERS + 1);

  for (int i = 0; i < GW_LOOP_MAX_HOOKS; i++)
    CHECK_INT(gw_loop_add_hook(l, hook_count, &dummy), 0);
  CHECK_INT(gw_loop_add_hook(l, hook_count, &dummy), SL_ELIMIT);
  dummy = 0;
  CHECK_INT(gw_loop_run_once(l, 0), 0);
  CHECK_INT(dummy, GW_LOOP_MAX_HOOKS);
  gw_loop_free(l);
}

/* ---- hooks, wake, stop ---- */

struct order {
  char seq[32];
  int n;
  int wake_left;
  int stop_after;
  struct gw_loop *l;
};

static void push(struct order *o, char c) {
  if (o->n < 31)
    o->seq[o->n++] = c;
}

static void io_mark(struct gw_loop *l, int fd, void *sock, int events, void *data) {
  (void)l, (void)fd, (void)sock, (void)events;
  push(data, 'i');
}

static int64_t timer_mark(struct gw_loop *l, int64_t id, int64_t now_us, void *data) {
  (void)l, (void)id;
  push(data, 't');
  return now_us;                /* again next turn */
}

static void hook_mark(struct gw_loop *l, void *data) {
  struct order *o = data;
  push(o, 'h');
  if (o->wake_left > 0) {
    o->wake_left--;
    gw_loop_wake(l);
  }
}

static void hook_stop(struct gw_loop *l, void *data) {
  struct order *o = data;
  if (--o->stop_after == 0)
    gw_loop_stop(l);
}

static void test_hooks_wake_stop(void) {
  struct gw_loop *l = gw_loop_new();
  struct order o = {0};
  int sv[2];
  CHECK_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  CHECK_INT(gw_loop_add_fd(l, sv[0], GW_LOOP_WRITE, io_mark, &o), 0);
  int64_t tid = gw_loop_add_timer(l, 0, timer_mark, &o);
  CHECK_INT(gw_loop_add_hook(l, hook_mark, &o), 0);
  CHECK_INT(gw_loop_add_hook(l, NULL, &o), -EINVAL);
  /* io, then timers, then hooks; hooks once per turn */
  CHECK_INT(gw_loop_run_once(l, 0), 2);
  CHECK_INT(gw_loop_run_once(l, 0), 2);
  o.seq[o.n] = 0;
  CHECK_STR(o.seq, "ithith");
  CHECK_INT(gw_loop_del_timer(l, tid), 0);
  CHECK_INT(gw_loop_del_fd(l, sv[0]), 0);

  /* wake: the next wait returns at once though a timer is 300 ms away */
  o.n = 0;
  int64_t now = sl_time_mono_us();
  tid = gw_loop_add_timer(l, now + 300 * MS, timer_mark, &o);
  gw_loop_wake(l);
  CHECK_INT(gw_loop_run_once(l, -1), 0);
  CHECK(sl_time_mono_us() - now < 100 * MS);
  /* a wake from a hook: the turn after it does not wait either */
  o.wake_left = 1;
  now = sl_time_mono_us();
  CHECK_INT(gw_loop_run_once(l, 0), 0);   /* its hook wakes */
  CHECK_INT(gw_loop_run_once(l, -1), 0);  /* so this one does not wait */
  CHECK(sl_time_mono_us() - now < 100 * MS);
  /* the wake was used up: the next wait lasts */
  now = sl_time_mono_us();
  CHECK_INT(gw_loop_run_once(l, 10 * MS), 0);
  CHECK(sl_time_mono_us() - now >= 10 * MS);
  CHECK_INT(gw_loop_del_timer(l, tid), 0);

  /* gw_loop_stop ends gw_loop_run after the current turn */
  o.stop_after = 3;
  o.n = 0;
  gw_loop_wake(l);              /* keep the turns short */
  CHECK_INT(gw_loop_add_hook(l, hook_stop, &o), 0);
  o.wake_left = 100;
  now = sl_time_mono_us();
  CHECK_INT(gw_loop_run(l, NULL), 0);
  CHECK_INT(o.n, 3);            /* three turns' hook_mark */
  CHECK(sl_time_mono_us() - now < 500 * MS);
  close(sv[0]);
  close(sv[1]);
  gw_loop_free(l);
}

/* A signal that sets the stop flag ends gw_loop_run: the poll's EINTR is
 * no error, and the flag is seen at the end of the turn. */
static volatile sig_atomic_t sig_stop;
static void on_alarm(int sig) {
  (void)sig;
  sig_stop = 1;
}

static void test_signal_stop(void) {
  struct gw_loop *l = gw_loop_new();
  struct sigaction sa = {0};
  sa.sa_handler = on_alarm;
  sigemptyset(&sa.sa_mask);
  CHECK_INT(sigaction(SIGALRM, &sa, NULL), 0);
  /* once with nothing registered, once with a socket pair (zmq_poll) */
  int sv[2];
  CHECK_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  for (int pass = 0; pass < 2; pass++) {
    struct io_rec r = {0};
    if (pass == 1)
      CHECK_INT(gw_loop_add_fd(l, sv[0], GW_LOOP_READ, rec_io, &r), 0);
    sig_stop = 0;
    struct itimerval it = {.it_value = {.tv_sec = 0, .tv_usec = 20000}};
    int64_t start = sl_time_mono_us();
    CHECK_INT(setitimer(ITIMER_REAL, &it, NULL), 0);
    CHECK_INT(gw_loop_run(l, &sig_stop), 0);
    int64_t took = sl_time_mono_us() - start;
    CHECK_INT(sig_stop, 1);
    CHECK(took >= 15 * MS && took < 500 * MS);
    CHECK_INT(r.calls, 0);
  }
  close(sv[0]);
  close(sv[1]);
  signal(SIGALRM, SIG_DFL);
  gw_loop_free(l);
}

int main(void) {
  test_signal_stop();
  alarm(20);                    /* a hang fails rather than waits forever */
  test_fd();
  test_zsock();
  test_changes_in_turn();
  test_timers();
  test_no_spin();
  test_bounds();
  test_hooks_wake_stop();
  TEST_MAIN_END();
}
