/* The gateway's event loop: fixed tables of descriptors and ZeroMQ sockets,
 * timers and hooks, served by one zmq_poll per turn (redis's ae.c is the
 * model). A turn is: wait, read the time once, call the ready io callbacks,
 * call the due timers in due order, call the hooks.
 *
 * Invariants. The tables are compact arrays (a removal moves the last entry
 * into the hole) and never grow past their bound, so nothing is allocated
 * after gw_loop_new. Every io registration carries a generation number that
 * is never reused; a turn records, for each poll item, the generation it
 * polled, and calls a callback only when a registration with that
 * generation still exists. So a registration removed during the turn is not
 * called, and one added during the turn (a closed descriptor re-added under
 * the same number included) never sees the revents of the old one. What is
 * reported is also masked by the current interest: a gw_loop_mod_fd during
 * the turn is obeyed at once. A descriptor watched for nothing (events 0)
 * stays registered but is left out of the poll, so a hang-up on it does not
 * wake the loop. Timers are identified by ids from a counter that never goes
 * back; the due timers of a turn are the ones due when the timer phase
 * starts, each called at most once that turn.
 *
 * ZeroMQ sockets: zmq_poll reports a socket's level readiness (it checks
 * ZMQ_EVENTS before it sleeps on ZMQ_FD), but that readiness changes as a
 * side effect of sends and receives on the socket, also from other
 * callbacks of the same turn. A socket's callback therefore receives with
 * ZMQ_DONTWAIT and takes EAGAIN as "nothing after all", and drains a
 * bounded batch of messages per call: the loop calls it again next turn
 * while messages remain, and the other registrations get their turn in
 * between. */
#include "loop.h"

#include "sl_err.h"
#include "sl_frame.h"             /* sl_err_from_zmq */
#include "sl_time.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <zmq.h>

struct io {
  int fd;                       /* -1 for a ZeroMQ socket */
  void *sock;                   /* NULL for a descriptor */
  int events;                   /* GW_LOOP_READ | GW_LOOP_WRITE */
  gw_loop_io_fn fn;
  void *data;
  uint64_t gen;                 /* unique to this registration */
};

struct timer {
  int64_t id;
  int64_t due_us;
  gw_loop_timer_fn fn;
  void *data;
};

struct hook {
  gw_loop_hook_fn fn;
  void *data;
};

/* A due timer as the timer phase found it: slot is a hint (the table may
 * have been reshuffled since), id decides. */
struct due {
  int64_t due_us;
  int64_t id;
  size_t slot;
};

struct gw_loop {
  struct io io[GW_LOOP_MAX_IO];
  size_t n_io;
  uint64_t next_gen;

  /* This turn's poll: items[k] polled the registration at slot
   * polled_slot[k] with generation polled_gen[k]. */
  zmq_pollitem_t items[GW_LOOP_MAX_IO];
  size_t polled_slot[GW_LOOP_MAX_IO];
  uint64_t polled_gen[GW_LOOP_MAX_IO];

  struct timer timers[GW_LOOP_MAX_TIMERS];
  size_t n_timers;
  int64_t next_timer_id;
  struct due due[GW_LOOP_MAX_TIMERS];

  struct hook hooks[GW_LOOP_MAX_HOOKS];
  size_t n_hooks;

  int64_t now_us;
  bool woken;                   /* gw_loop_wake since the last wait */
  bool stopping;                /* gw_loop_stop since gw_loop_run last returned */
  bool in_turn;
};

struct gw_loop *gw_loop_new(void) {
  struct gw_loop *l = calloc(1, sizeof *l);
  if (!l)
    return NULL;
  l->next_gen = 1;
  l->next_timer_id = 1;
  l->now_us = sl_time_mono_us();
  return l;
}

struct gw_loop *gw_loop_free(struct gw_loop *l) {
  free(l);
  return NULL;
}

/* ---- descriptors and sockets ---- */

static struct io *find_io(struct gw_loop *l, int fd, void *sock) {
  for (size_t i = 0; i < l->n_io; i++)
    if (sock ? l->io[i].sock == sock : (!l->io[i].sock && l->io[i].fd == fd))
      return &l->io[i];
  return NULL;
}

static int add_io(struct gw_loop *l, int fd, void *sock, int events, gw_loop_io_fn fn,
                  void *data) {
  if (!l || !fn || (events & ~(GW_LOOP_READ | GW_LOOP_WRITE)))
    return -EINVAL;
  if (find_io(l, fd, sock))
    return -EEXIST;
  if (l->n_io == GW_LOOP_MAX_IO)
    return SL_ELIMIT;
  l->io[l->n_io++] = (struct io){
    .fd = fd, .sock = sock, .events = events, .fn = fn, .data = data, .gen = l->next_gen++};
  return 0;
}

static int del_io(struct gw_loop *l, int fd, void *sock) {
  if (!l)
    return -EINVAL;
  struct io *r = find_io(l, fd, sock);
  if (!r)
    return -ENOENT;
  *r = l->io[--l->n_io];
  return 0;
}

int gw_loop_add_fd(struct gw_loop *l, int fd, int events, gw_loop_io_fn fn, void *data) {
  if (fd < 0)
    return -EINVAL;
  return add_io(l, fd, NULL, events, fn, data);
}

int gw_loop_mod_fd(struct gw_loop *l, int fd, int events) {
  if (!l || fd < 0 || (events & ~(GW_LOOP_READ | GW_LOOP_WRITE)))
    return -EINVAL;
  struct io *r = find_io(l, fd, NULL);
  if (!r)
    return -ENOENT;
  r->events = events;
  return 0;
}

int gw_loop_del_fd(struct gw_loop *l, int fd) {
  if (fd < 0)
    return -EINVAL;
  return del_io(l, fd, NULL);
}

int gw_loop_add_zsock(struct gw_loop *l, void *sock, int events, gw_loop_io_fn fn,
                      void *data) {
  if (!sock)
    return -EINVAL;
  return add_io(l, -1, sock, events, fn, data);
}

int gw_loop_del_zsock(struct gw_loop *l, void *sock) {
  if (!sock)
    return -EINVAL;
  return del_io(l, -1, sock);
}

/* ---- timers ---- */

static struct timer *find_timer(struct gw_loop *l, int64_t id, size_t hint) {
  if (hint < l->n_timers && l->timers[hint].id == id)
    return &l->timers[hint];
  for (size_t i = 0; i < l->n_timers; i++)
    if (l->timers[i].id == id)
      return &l->timers[i];
  return NULL;
}

static void remove_timer(struct gw_loop *l, struct timer *t) {
  *t = l->timers[--l->n_timers];
}

int64_t gw_loop_add_timer(struct gw_loop *l, int64_t due_us, gw_loop_timer_fn fn, void *data) {
  if (!l || !fn || due_us == GW_LOOP_NOMORE)
    return -EINVAL;
  if (l->n_timers == GW_LOOP_MAX_TIMERS)
    return SL_ELIMIT;
  int64_t id = l->next_timer_id++;
  l->timers[l->n_timers++] = (struct timer){.id = id, .due_us = due_us, .fn = fn, .data = data};
  return id;
}

int gw_loop_set_timer(struct gw_loop *l, int64_t id, int64_t due_us) {
  if (!l || due_us == GW_LOOP_NOMORE)
    return -EINVAL;
  struct timer *t = find_timer(l, id, SIZE_MAX);
  if (!t)
    return -ENOENT;
  t->due_us = due_us;
  return 0;
}

int gw_loop_del_timer(struct gw_loop *l, int64_t id) {
  if (!l)
    return -EINVAL;
  struct timer *t = find_timer(l, id, SIZE_MAX);
  if (!t)
    return -ENOENT;
  remove_timer(l, t);
  return 0;
}

/* ---- hooks, wake, stop, time ---- */

int gw_loop_add_hook(struct gw_loop *l, gw_loop_hook_fn fn, void *data) {
  if (!l || !fn)
    return -EINVAL;
  if (l->n_hooks == GW_LOOP_MAX_HOOKS)
    return SL_ELIMIT;
  l->hooks[l->n_hooks++] = (struct hook){.fn = fn, .data = data};
  return 0;
}

void gw_loop_wake(struct gw_loop *l) { l->woken = true; }

void gw_loop_stop(struct gw_loop *l) { l->stopping = true; }

int64_t gw_loop_now_us(const struct gw_loop *l) { return l->now_us; }

/* ---- one turn ---- */

/* The wait in ms for zmq_poll: 0 when woken, else until the nearest timer
 * capped by max_wait_us (< 0: no cap), -1 for no limit at all. Rounded up
 * to whole ms: rounding down would wake the loop before the timer is due,
 * and the turns until it is would each wait 0 ms. */
static long wait_ms(const struct gw_loop *l, int64_t max_wait_us) {
  if (l->woken)
    return 0;
  int64_t wait_us = max_wait_us < 0 ? -1 : max_wait_us;
  if (l->n_timers) {
    int64_t nearest = l->timers[0].due_us;
    for (size_t i = 1; i < l->n_timers; i++)
      if (l->timers[i].due_us < nearest)
        nearest = l->timers[i].due_us;
    int64_t now = sl_time_mono_us();
    int64_t until = nearest <= now ? 0 : nearest - now;
    if (wait_us < 0 || until < wait_us)
      wait_us = until;
  }
  if (wait_us < 0)
    return -1;
  int64_t ms = wait_us / SL_US_PER_MS + (wait_us % SL_US_PER_MS != 0);
  return ms > INT_MAX ? INT_MAX : (long)ms;
}

static short poll_events(int events) {
  return (short)((events & GW_LOOP_READ ? ZMQ_POLLIN : 0) |
                 (events & GW_LOOP_WRITE ? ZMQ_POLLOUT : 0));
}

/* Fills the poll items from the registrations; returns how many. */
static int build_items(struct gw_loop *l) {
  int n = 0;
  for (size_t i = 0; i < l->n_io; i++) {
    const struct io *r = &l->io[i];
    if (!r->events)
      continue;
    l->items[n] = (zmq_pollitem_t){
      .socket = r->sock, .fd = r->sock ? 0 : r->fd, .events = poll_events(r->events)};
    l->polled_slot[n] = i;
    l->polled_gen[n] = r->gen;
    n++;
  }
  return n;
}

/* Waits; 0 (EINTR included: the turn goes on with nothing ready) or the
 * poll's error. */
static int wait_events(struct gw_loop *l, int n_items, long timeout_ms) {
  int rc;
  if (n_items)
    rc = zmq_poll(l->items, n_items, timeout_ms);
  else if (timeout_ms)
    /* zmq_poll sleeps with usleep() when given no items, which an infinite
     * or long timeout overflows. */
    rc = poll(NULL, 0, timeout_ms < 0 ? -1 : (int)timeout_ms);
  else
    rc = 0;
  if (rc >= 0)
    return 0;
  int e = n_items ? zmq_errno() : errno;
  if (e == EINTR) {
    for (int k = 0; k < n_items; k++)
      l->items[k].revents = 0;
    return 0;
  }
  return n_items ? sl_err_from_zmq(e) : -e;
}

/* The registration item k polled, if it still exists: the generation
 * decides, the slot is where it was when polled. */
static struct io *polled_io(struct gw_loop *l, int k) {
  size_t slot = l->polled_slot[k];
  uint64_t gen = l->polled_gen[k];
  if (slot < l->n_io && l->io[slot].gen == gen)
    return &l->io[slot];
  for (size_t i = 0; i < l->n_io; i++)
    if (l->io[i].gen == gen)
      return &l->io[i];
  return NULL;
}

static int dispatch_io(struct gw_loop *l, int n_items) {
  int calls = 0;
  for (int k = 0; k < n_items; k++) {
    short rev = l->items[k].revents;
    if (!rev)
      continue;
    struct io *r = polled_io(l, k);
    if (!r || !r->events)
      continue;
    int ev = (rev & ZMQ_POLLIN ? GW_LOOP_READ : 0) | (rev & ZMQ_POLLOUT ? GW_LOOP_WRITE : 0);
    ev &= r->events;
    if (rev & ZMQ_POLLERR)
      ev |= GW_LOOP_ERROR;
    if (!ev)
      continue;
    r->fn(l, r->fd, r->sock, ev, r->data);
    calls++;
  }
  return calls;
}

static int cmp_due(const void *a, const void *b) {
  const struct due *x = a, *y = b;
  if (x->due_us != y->due_us)
    return x->due_us < y->due_us ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

/* Calls the timers due at the loop's time, earliest first, each once. A
 * timer's return value decides what becomes of it, even over a
 * gw_loop_set_timer on itself from its own callback; one it deleted itself
 * stays deleted. */
static int run_timers(struct gw_loop *l) {
  size_t n_due = 0;
  int64_t now = l->now_us;
  for (size_t i = 0; i < l->n_timers; i++) {
    const struct timer *t = &l->timers[i];
    if (t->due_us <= now)
      l->due[n_due++] = (struct due){.due_us = t->due_us, .id = t->id, .slot = i};
  }
  if (n_due > 1)
    qsort(l->due, n_due, sizeof l->due[0], cmp_due);
  int calls = 0;
  for (size_t k = 0; k < n_due; k++) {
    const struct due *d = &l->due[k];
    struct timer *t = find_timer(l, d->id, d->slot);
    if (!t || t->due_us > now)  /* deleted, or moved later, by an earlier callback */
      continue;
    int64_t next = t->fn(l, t->id, now, t->data);
    calls++;
    t = find_timer(l, d->id, d->slot);
    if (!t)
      continue;
    if (next == GW_LOOP_NOMORE)
      remove_timer(l, t);
    else
      t->due_us = next;
  }
  return calls;
}

/* Returns the number of io and timer callbacks run (the hooks, which run
 * every turn, are not counted), or a negative error: the poll's, or -EBUSY
 * when called from inside a turn. */
int gw_loop_run_once(struct gw_loop *l, int64_t max_wait_us) {
  if (!l)
    return -EINVAL;
  if (l->in_turn)
    return -EBUSY;
  l->in_turn = true;
  int n_items = build_items(l);
  long timeout_ms = wait_ms(l, max_wait_us);
  l->woken = false;
  int r = wait_events(l, n_items, timeout_ms);
  if (r < 0)
    goto out;
  l->now_us = sl_time_mono_us();
  r = dispatch_io(l, n_items);
  r += run_timers(l);
  /* Hooks added by a hook run from the next turn. */
  for (size_t i = 0, n = l->n_hooks; i < n; i++)
    l->hooks[i].fn(l, l->hooks[i].data);
out:
  l->in_turn = false;
  return r;
}

/* stop may be NULL. A gw_loop_stop made outside gw_loop_run is kept: the
 * next gw_loop_run returns before its first turn. */
int gw_loop_run(struct gw_loop *l, volatile sig_atomic_t *stop) {
  if (!l)
    return -EINVAL;
  int r = 0;
  while (!l->stopping && !(stop && *stop)) {
    r = gw_loop_run_once(l, SL_US_PER_S);
    if (r < 0)
      break;
    r = 0;
  }
  l->stopping = false;
  return r;
}
