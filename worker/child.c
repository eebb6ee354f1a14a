/* Child processes.
 *
 * Everything the child needs (argv, environment, descriptors) is prepared
 * before fork, so the child side calls only async-signal-safe functions. The
 * parent keeps the read ends non-blocking; each stream has one bounded line
 * buffer. Once reaped, the pid is never signalled again, so a recycled pid
 * cannot be hit. */
#include "child.h"

#include "sl_err.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

struct wk_child {
  pid_t pid;
  bool exited;
  int status;
  int fd[WK_STREAM_N];
  int control_fd;
  char *buf[WK_STREAM_N];
  size_t len[WK_STREAM_N];
  bool cutting[WK_STREAM_N]; /* inside an over-long line */
};

static void close_pair(int p[2]) {
  if (p[0] >= 0) close(p[0]);
  if (p[1] >= 0) close(p[1]);
}

/* In the child: move the pipe ends to their numbers and exec. The child
 * dies with the worker (parent: its pid): a trainer left running by a
 * worker that crashed or was killed would hold the instance's CPUs and
 * GPUs, unseen, while the gateway runs its job again elsewhere; a worker
 * started again on the instance would find them taken. */
static void __attribute__((noreturn))
exec_child(const struct wk_child_opts *o, int p[WK_STREAM_N][2], int ctl[2], pid_t parent) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent) _exit(126);
  setpgid(0, 0);
  /* Signals are blocked from before the fork (wk_child_spawn): one sent
   * now (a cancel as the job starts) waits for the default action, not the
   * worker's handler, which would take it for the worker's own SIGTERM. */
  struct sigaction dfl = {.sa_handler = SIG_DFL};
  sigemptyset(&dfl.sa_mask);
  for (int sig = 1; sig < NSIG; sig++)
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, NULL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  int devnull = open("/dev/null", O_RDONLY);
  /* Move every source above the targets first, so no dup2 clobbers another. */
  int src[4] = {p[0][1], p[1][1], o->metrics ? p[2][1] : -1, o->control ? ctl[0] : -1};
  for (int i = 0; i < 4; i++)
    if (src[i] >= 0 && src[i] <= WK_CHILD_CONTROL_FD) src[i] = fcntl(src[i], F_DUPFD, 10);
  if (devnull >= 0) dup2(devnull, 0);
  dup2(src[0], 1);
  dup2(src[1], 2);
  if (src[2] >= 0) dup2(src[2], WK_CHILD_METRICS_FD);
  if (src[3] >= 0) dup2(src[3], WK_CHILD_CONTROL_FD);
  if (o->cwd && chdir(o->cwd) < 0) _exit(126);
  execve(o->argv[0], o->argv, o->envp);
  static const char msg[] = "spotlab-worker: exec failed\n";
  if (write(2, msg, sizeof msg - 1) < 0) {}
  _exit(127);
}

int wk_child_spawn(const struct wk_child_opts *o, struct wk_child **ret) {
  struct wk_child *c = calloc(1, sizeof *c);
  int p[WK_STREAM_N][2], ctl[2] = {-1, -1};
  int r = 0;
  if (!c) return -ENOMEM;
  for (int i = 0; i < WK_STREAM_N; i++) p[i][0] = p[i][1] = -1;
  for (int i = 0; i < WK_STREAM_N; i++) {
    if (i == WK_STREAM_METRICS && !o->metrics) continue;
    if (pipe2(p[i], O_CLOEXEC) < 0 || !(c->buf[i] = malloc(WK_LINE_MAX + 1))) {
      r = errno ? -errno : -ENOMEM;
      goto fail;
    }
  }
  if (o->control && pipe2(ctl, O_CLOEXEC) < 0) {
    r = -errno;
    goto fail;
  }
  pid_t parent = getpid();
  sigset_t all, was;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &was);
  pid_t pid = fork();
  if (pid == 0) exec_child(o, p, ctl, parent);
  int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &was, NULL);
  if (pid < 0) {
    r = -fork_errno;
    goto fail;
  }
  setpgid(pid, pid); /* also in the parent, so a signal sent right away reaches the group */
  c->pid = pid;
  for (int i = 0; i < WK_STREAM_N; i++) {
    c->fd[i] = p[i][0];
    if (p[i][1] >= 0) close(p[i][1]);
    if (c->fd[i] >= 0) fcntl(c->fd[i], F_SETFL, O_NONBLOCK);
  }
  c->control_fd = ctl[1];
  if (ctl[0] >= 0) close(ctl[0]);
  if (c->control_fd >= 0) fcntl(c->control_fd, F_SETFL, O_NONBLOCK);
  *ret = c;
  return 0;
fail:
  for (int i = 0; i < WK_STREAM_N; i++) {
    close_pair(p[i]);
    free(c->buf[i]);
  }
  close_pair(ctl);
  free(c);
  return r;
}

void wk_child_end_group(struct wk_child *c) {
  /* the group outlives its reaped leader while a member is left, and its
   * id is no other process's meanwhile */
  if (c && c->exited && c->pid > 1) kill(-c->pid, SIGKILL);
}

struct wk_child *wk_child_free(struct wk_child *c) {
  if (!c) return NULL;
  if (!c->exited) {
    kill(-c->pid, SIGKILL);
    kill(c->pid, SIGKILL);
    while (waitpid(c->pid, &c->status, 0) < 0 && errno == EINTR) {}
  }
  for (int i = 0; i < WK_STREAM_N; i++) {
    if (c->fd[i] >= 0) close(c->fd[i]);
    free(c->buf[i]);
  }
  if (c->control_fd >= 0) close(c->control_fd);
  free(c);
  return NULL;
}

pid_t wk_child_pid(const struct wk_child *c) { return c->pid; }
int wk_child_fd(const struct wk_child *c, enum wk_stream s) { return c->fd[s]; }

bool wk_child_drained(const struct wk_child *c) {
  for (int i = 0; i < WK_STREAM_N; i++)
    if (c->fd[i] >= 0) return false;
  return true;
}

/* Delivers the complete lines in the buffer and keeps the tail. */
static void split_lines(struct wk_child *c, enum wk_stream s, wk_line_fn *fn, void *ctx, bool eof) {
  char *b = c->buf[s];
  size_t start = 0;
  for (size_t i = 0; i < c->len[s]; i++) {
    if (b[i] != '\n') continue;
    if (!c->cutting[s]) {
      b[i] = 0;
      fn(ctx, s, b + start, i - start, false);
    }
    c->cutting[s] = false;
    start = i + 1;
  }
  memmove(b, b + start, c->len[s] - start);
  c->len[s] -= start;
  if (c->len[s] == WK_LINE_MAX || (eof && c->len[s])) {
    b[c->len[s]] = 0;
    if (!c->cutting[s]) fn(ctx, s, b, c->len[s], c->len[s] == WK_LINE_MAX);
    c->cutting[s] = c->len[s] == WK_LINE_MAX;
    c->len[s] = 0;
  }
}

int wk_child_read(struct wk_child *c, enum wk_stream s, wk_line_fn *fn, void *ctx,
                  bool (*stop)(void *ctx)) {
  if (c->fd[s] < 0) return 0;
  for (int rounds = 0; rounds < 64 && !(stop && stop(ctx)); rounds++) {
    ssize_t k = read(c->fd[s], c->buf[s] + c->len[s], WK_LINE_MAX - c->len[s]);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && errno == EAGAIN) return 0;
    if (k <= 0) {
      split_lines(c, s, fn, ctx, true);
      close(c->fd[s]);
      c->fd[s] = -1;
      return k < 0 ? -errno : 0;
    }
    c->len[s] += (size_t)k;
    split_lines(c, s, fn, ctx, false);
  }
  return 0;
}

int wk_child_control(struct wk_child *c, const char *line) {
  if (c->control_fd < 0) return -EPIPE;
  char buf[256];
  size_t n = strlen(line);
  if (n + 1 > sizeof buf) return SL_ELIMIT;
  memcpy(buf, line, n);
  buf[n++] = '\n';
  ssize_t k = write(c->control_fd, buf, n);
  if (k == (ssize_t)n) return 0;
  return k < 0 ? -errno : -EAGAIN;
}

int wk_child_signal(struct wk_child *c, int sig) {
  if (c->exited) return -ESRCH;
  if (kill(-c->pid, sig) < 0 && kill(c->pid, sig) < 0) return -errno;
  return 0;
}

int wk_child_reap(struct wk_child *c, int *ret_status) {
  if (!c->exited) {
    pid_t p = waitpid(c->pid, &c->status, WNOHANG);
    if (p == 0) return 0;
    if (p < 0 && errno != ECHILD) return -errno;
    c->exited = true;
  }
  *ret_status = c->status;
  return 1;
}
