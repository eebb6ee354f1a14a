/* The CPU use of a process tree from /proc: a child and its grandchild
 * spin; the tree's time counts both, keeps the grandchild's once the child
 * reaped it, and the meter turns two samples into a utilisation. */
#include "harness.h"
#include "cpumeter.h"

#include "sl_time.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEADLINE_US (20 * 1000000LL)

static volatile sig_atomic_t spin;

/* The child: starts a spinning grandchild, says its pid, then spins and
 * reaps it once it dies. */
static void child(int fd) {
  pid_t g = fork();
  if (g == 0)
    for (;;)
      spin++;
  if (write(fd, &g, sizeof g) != sizeof g)
    _exit(1);
  for (;;) {
    for (int i = 0; i < 1000000; i++)
      spin++;
    waitpid(-1, NULL, WNOHANG);
  }
}

static double tree(pid_t pid) {
  double s = -1;
  CHECK_INT(wk_proc_tree_cpu_s("/proc", pid, &s), 0);
  return s;
}

/* Waits until pid's tree used at least want CPU seconds. */
static double until_cpu(pid_t pid, double want) {
  int64_t end = sl_time_mono_us() + DEADLINE_US;
  double s = 0;
  while ((s = tree(pid)) < want && sl_time_mono_us() < end)
    usleep(20000);
  return s;
}

int main(void) {
  double s;
  CHECK_INT(wk_proc_tree_cpu_s("/proc", getpid(), &s), 0);
  CHECK(s >= 0);
  CHECK_INT(wk_proc_tree_cpu_s("/proc", 0x3ffffff0, &s), -ESRCH);
  CHECK(wk_proc_tree_cpu_s("/nonexistent-proc", getpid(), &s) < 0);

  int p[2];
  CHECK_INT(pipe(p), 0);
  pid_t c = fork();
  if (c == 0) {
    close(p[0]);
    child(p[1]);
  }
  close(p[1]);
  pid_t g = 0;
  CHECK_INT(read(p[0], &g, sizeof g), (int)sizeof g);
  close(p[0]);

  struct wk_cpu_meter m = {0};
  double u = -1;
  CHECK_INT(wk_cpu_meter_sample(&m, "/proc", c, sl_time_mono_us(), 2, &u), 1); /* nothing to compare */
  double before = until_cpu(c, 0.6);
  CHECK(before >= 0.6);
  /* the grandchild's own time is part of the tree's */
  double gs = tree(g);
  CHECK(gs > 0.05 && before > gs);
  CHECK_INT(wk_cpu_meter_sample(&m, "/proc", c, sl_time_mono_us(), 2, &u), 0);
  CHECK(u > 0 && u <= 1);
  printf("tree %.2f s (grandchild %.2f s), utilisation %.2f of 2 CPUs\n", before, gs, u);

  /* the grandchild dies and is reaped: its time stays, in the child's cutime */
  kill(g, SIGKILL);
  int64_t end = sl_time_mono_us() + DEADLINE_US;
  while (kill(g, 0) == 0 && sl_time_mono_us() < end)
    usleep(20000);
  CHECK(kill(g, 0) < 0);
  CHECK(tree(c) >= before);

  kill(c, SIGKILL);
  waitpid(c, NULL, 0);
  CHECK_INT(wk_proc_tree_cpu_s("/proc", c, &s), -ESRCH);
  TEST_MAIN_END();
}
