/* The gateway's event loop (redis's ae.c is the model): a registry of
 * descriptors, ZeroMQ sockets and timers, each with a callback and its own
 * data, served by one zmq_poll on one thread.
 *
 * Everything that wakes the gateway registers here: the kernel and worker
 * sockets, the ZAP handler, a provider's descriptors and timers, libcurl's
 * sockets (sl_http's multi interface), later an HTTP server in external-
 * select mode. Callbacks may add and remove registrations, their own
 * included, at any time; a removed one is never called again. Every table
 * is bounded (GW_LOOP_MAX_IO, GW_LOOP_MAX_TIMERS). Time is monotonic µs
 * (sl_time_mono_us). */
#ifndef GW_LOOP_H
#define GW_LOOP_H

#include <signal.h>
#include <stdint.h>

#define GW_LOOP_MAX_IO 256
#define GW_LOOP_MAX_TIMERS 512
#define GW_LOOP_MAX_HOOKS 16

enum {
  GW_LOOP_READ = 1,
  GW_LOOP_WRITE = 2,
  GW_LOOP_ERROR = 4,            /* reported only (POLLERR/POLLHUP on a descriptor) */
};

/* A timer callback's answer: GW_LOOP_NOMORE removes it. */
#define GW_LOOP_NOMORE INT64_MIN

struct gw_loop;

/* fd is the descriptor (-1 for a ZeroMQ socket), sock the ZeroMQ socket
 * (NULL for a descriptor); events what is ready (GW_LOOP_*). */
typedef void (*gw_loop_io_fn)(struct gw_loop *l, int fd, void *sock, int events, void *data);
/* now_us: the loop's time. Returns when it next runs (monotonic µs; a time
 * already past runs it on the next turn), or GW_LOOP_NOMORE. */
typedef int64_t (*gw_loop_timer_fn)(struct gw_loop *l, int64_t id, int64_t now_us, void *data);
/* Runs once per turn, after the ready callbacks and timers and before the
 * loop waits again (ae's beforesleep). */
typedef void (*gw_loop_hook_fn)(struct gw_loop *l, void *data);

/* An owned loop, or NULL (out of memory). */
struct gw_loop *gw_loop_new(void);
/* Frees the loop; registered descriptors are not closed. Returns NULL. */
struct gw_loop *gw_loop_free(struct gw_loop *l);

/* Watches descriptor fd for events (GW_LOOP_READ | GW_LOOP_WRITE).
 * -EEXIST when fd is watched already, SL_ELIMIT when the table is full,
 * -EINVAL for a negative fd or no callback. */
int gw_loop_add_fd(struct gw_loop *l, int fd, int events, gw_loop_io_fn fn, void *data);
/* Changes what fd is watched for (0: nothing, kept registered). -ENOENT. */
int gw_loop_mod_fd(struct gw_loop *l, int fd, int events);
/* Stops watching fd. -ENOENT when it was not watched. */
int gw_loop_del_fd(struct gw_loop *l, int fd);
/* The same for a ZeroMQ socket (zmq_poll's socket items). */
int gw_loop_add_zsock(struct gw_loop *l, void *sock, int events, gw_loop_io_fn fn, void *data);
int gw_loop_del_zsock(struct gw_loop *l, void *sock);

/* Runs fn at due_us (monotonic µs). Returns the timer's id (> 0), or
 * SL_ELIMIT / -EINVAL. */
int64_t gw_loop_add_timer(struct gw_loop *l, int64_t due_us, gw_loop_timer_fn fn, void *data);
/* Moves a timer to due_us. -ENOENT for an unknown id. */
int gw_loop_set_timer(struct gw_loop *l, int64_t id, int64_t due_us);
/* Removes a timer. -ENOENT for an unknown id (already run out, say). */
int gw_loop_del_timer(struct gw_loop *l, int64_t id);

/* Adds a hook run before each wait. SL_ELIMIT when full. */
int gw_loop_add_hook(struct gw_loop *l, gw_loop_hook_fn fn, void *data);

/* The next wait returns at once: work was queued for a hook (the
 * scheduler's placement, say). Safe only from the loop's thread. */
void gw_loop_wake(struct gw_loop *l);

/* One turn: waits at most max_wait_us (-1: until the nearest timer or an
 * event), runs ready callbacks, due timers and the hooks. Returns the
 * number of callbacks run, or a negative error (the poll failed). */
int gw_loop_run_once(struct gw_loop *l, int64_t max_wait_us);
/* Turns until *stop becomes non-zero (a signal handler sets it) or
 * gw_loop_stop() is called. Waits at most a second at a time, so a signal
 * that interrupts no system call is still seen. 0, or the poll's error. */
int gw_loop_run(struct gw_loop *l, volatile sig_atomic_t *stop);
/* Makes gw_loop_run return after the current turn. */
void gw_loop_stop(struct gw_loop *l);

/* The loop's time (monotonic µs), read once per turn. */
int64_t gw_loop_now_us(const struct gw_loop *l);

#endif
