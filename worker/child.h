/* A child process with its output split into lines.
 *
 * The child gets stdout and stderr on pipes, optionally a metrics pipe and a
 * control pipe at fixed descriptor numbers, and its own process group so a
 * signal reaches a whole %%run script. Reading never blocks; lines are
 * bounded (longer ones are cut and flagged). */
#ifndef WK_CHILD_H
#define WK_CHILD_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

enum wk_stream { WK_STREAM_STDOUT, WK_STREAM_STDERR, WK_STREAM_METRICS, WK_STREAM_N };

#define WK_CHILD_METRICS_FD 3
#define WK_CHILD_CONTROL_FD 4
#define WK_LINE_MAX 65536

struct wk_child;

struct wk_child_opts {
  char *const *argv;  /* borrowed; argv[0] is the program path */
  char *const *envp;  /* borrowed; the full environment */
  const char *cwd;    /* NULL = inherit */
  bool metrics;       /* a pipe at WK_CHILD_METRICS_FD */
  bool control;       /* a pipe at WK_CHILD_CONTROL_FD */
};

/* Called once per complete line (without the newline). truncated says the
 * line was longer than WK_LINE_MAX and was cut. */
typedef void wk_line_fn(void *ctx, enum wk_stream stream, const char *line, size_t len,
                        bool truncated);

int wk_child_spawn(const struct wk_child_opts *o, struct wk_child **ret);
/* Kills (SIGKILL) a child still running, reaps it, closes the pipes. */
struct wk_child *wk_child_free(struct wk_child *c);

pid_t wk_child_pid(const struct wk_child *c);
/* The read end of stream, or -1 once it reached end of file. */
int wk_child_fd(const struct wk_child *c, enum wk_stream stream);
/* Reads what is available on stream and calls fn for each complete line; at
 * end of file the last partial line is delivered and the pipe closed. At
 * most 64 reads; and once stop(ctx) (stop not NULL) is true after a read's
 * lines were delivered it returns, the rest left in the pipe for the next
 * call: fn may make a store call, during which the caller takes what must
 * not wait behind the next lines (a notice). */
int wk_child_read(struct wk_child *c, enum wk_stream stream, wk_line_fn *fn, void *ctx,
                  bool (*stop)(void *ctx));
/* True once every output pipe reached end of file. */
bool wk_child_drained(const struct wk_child *c);
/* Writes line + "\n" to the control pipe; -EAGAIN if it is full, -EPIPE if gone. */
int wk_child_control(struct wk_child *c, const char *line);
/* Signals the child's process group. */
int wk_child_signal(struct wk_child *c, int sig);
/* 1 and *ret_status (a waitpid status) once the child exited, 0 while it runs. */
int wk_child_reap(struct wk_child *c, int *ret_status);
/* Once the child was reaped: kills (SIGKILL) what is left of its process
 * group, the processes it started in the background. */
void wk_child_end_group(struct wk_child *c);

#endif
