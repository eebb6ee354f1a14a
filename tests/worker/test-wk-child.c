/* Child processes: a signal sent the moment a child is spawned (a cancel
 * that arrives with the job's start) reaches the program the child runs,
 * never the worker's own handler in the child before its exec. */
#include "harness.h"

#include "child.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static int handler_pipe[2];

/* The worker's way: SIGTERM written to a self-pipe (worker/main.c). */
static void on_signal(int sig) {
  unsigned char b = (unsigned char)sig;
  if (write(handler_pipe[1], &b, 1) < 0) {}
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The child's wait status, or -1 if it did not end within 2 s. */
static int reap(struct wk_child *c) {
  int st;
  for (int64_t end = now_ms() + 2000; now_ms() < end;) {
    int r = wk_child_reap(c, &st);
    if (r == 1)
      return st;
    if (r < 0)
      return -1;
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  return -1;
}

static void test_signal_at_spawn(void) {
  CHECK_INT(pipe2(handler_pipe, O_CLOEXEC | O_NONBLOCK), 0);
  struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  char *argv[] = {"/bin/sleep", "60", NULL};
  struct wk_child_opts o = {.argv = argv, .envp = environ};
  int killed = 0, runs = 200;
  for (int i = 0; i < runs; i++) {
    struct wk_child *c;
    if (wk_child_spawn(&o, &c) < 0) {
      CHECK(!"spawn");
      break;
    }
    CHECK_INT(wk_child_signal(c, SIGTERM), 0);
    int st = reap(c);
    wk_child_free(c);
    if (!(st >= 0 && WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM)) {
      fprintf(stderr, "spawn %d: the child outlived its SIGTERM (status %d)\n", i, st);
      break;
    }
    killed++;
  }
  CHECK_INT(killed, runs);
  unsigned char b;
  CHECK(read(handler_pipe[0], &b, 1) < 0 && errno == EAGAIN); /* no child ran the parent's handler */
  /* the ignored SIGPIPE is not inherited either: the default comes back */
  char *sh[] = {"/bin/sh", "-c", "kill -PIPE $$; exit 3", NULL};
  struct wk_child_opts so = {.argv = sh, .envp = environ};
  struct wk_child *c;
  CHECK_INT(wk_child_spawn(&so, &c), 0);
  int st = reap(c);
  CHECK(st >= 0 && WIFSIGNALED(st) && WTERMSIG(st) == SIGPIPE);
  wk_child_free(c);
}

int main(void) {
  test_signal_at_spawn();
  TEST_MAIN_END();
}
