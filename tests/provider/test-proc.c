/* The local provider's view of processes (gateway/providers/proc.h): a
 * process's start time read from /proc/PID/stat, checked against the clock
 * since boot, for names with spaces and ')' too; a pid with another start
 * time is not the process recorded (a reused pid). A child whose main
 * thread has exited while another goes on reads as a zombie that waitpid
 * cannot take yet: it stays alive until it can be reaped, and is reaped. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"
#include "harness.h"

/* Clock ticks since boot now (CLOCK_BOOTTIME, which /proc's start times count). */
static unsigned long long boot_ticks(void) {
  struct timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return (unsigned long long)((double)ts.tv_sec * (double)sysconf(_SC_CLK_TCK) +
                              (double)ts.tv_nsec * (double)sysconf(_SC_CLK_TCK) / 1e9);
}

/* A child named name that waits for its parent to close the pipe. */
static pid_t child(const char *name, int *ret_fd) {
  int fds[2];
  if (pipe(fds) < 0)
    return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[1]);
    prctl(PR_SET_NAME, name);
    char c;
    while (read(fds[0], &c, 1) > 0) {}
    _exit(0);
  }
  close(fds[0]);
  *ret_fd = fds[1];
  return pid;
}

static void one(const char *name) {
  unsigned long long before = boot_ticks();
  int fd = -1;
  pid_t pid = child(name, &fd);
  CHECK(pid > 0);
  if (pid <= 0)
    return;
  usleep(50 * 1000); /* the child names itself */
  unsigned long long ticks = 0;
  char state = 0;
  CHECK_INT(gw_proc_stat(pid, &ticks, &state), 0);
  /* started between before and now, within a tick of rounding */
  unsigned long long after = boot_ticks();
  CHECK(ticks + 1 >= before && ticks <= after + 1);
  if (!(ticks + 1 >= before && ticks <= after + 1))
    fprintf(stderr, "%s: start %llu ticks, not within [%llu, %llu]\n", name, ticks, before, after);
  CHECK(state == 'S' || state == 'R');
  CHECK(gw_proc_alive(pid, ticks));
  CHECK(!gw_proc_alive(pid, ticks + 1)); /* another start time: a reused pid */
  CHECK(!gw_proc_alive(pid, 0));
  close(fd);
  usleep(50 * 1000);
  CHECK(!gw_proc_alive(pid, ticks)); /* exited: reaped, and no longer alive */
  CHECK_INT(gw_proc_stat(pid, &ticks, &state), -ESRCH);
}

static void *exit_later(void *arg) {
  int fd = *(int *)arg;
  char c;
  while (read(fd, &c, 1) > 0) {}
  _exit(0);
}

/* A child whose main thread ends first (the exit system call, not
 * exit_group): the leader is a
 * zombie while its other thread lives, as a multi-threaded worker SIGKILLed
 * is for a moment. */
static void zombie_leader(void) {
  int fds[2];
  CHECK(pipe(fds) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[1]);
    pthread_t t;
    if (pthread_create(&t, NULL, exit_later, &fds[0]) != 0)
      _exit(1);
    syscall(SYS_exit, 0); /* this thread only, past what the C library (or a sanitizer) does at exit */
  }
  close(fds[0]);
  usleep(100 * 1000);
  unsigned long long ticks = 0;
  char state = 0;
  CHECK_INT(gw_proc_stat(pid, &ticks, &state), 0);
  CHECK(state == 'Z');
  CHECK(gw_proc_alive(pid, ticks)); /* not reapable yet: not gone */
  int status;
  CHECK_INT(waitpid(pid, &status, WNOHANG), 0);
  close(fds[1]); /* the other thread exits the process */
  usleep(100 * 1000);
  CHECK(!gw_proc_alive(pid, ticks));
  CHECK(waitpid(pid, &status, WNOHANG) < 0 && errno == ECHILD); /* reaped by gw_proc_alive */
}

int main(void) {
  zombie_leader();
  one("worker");
  one("a) b c) d");
  one(") ) )");
  CHECK(!gw_proc_alive(1, 0));
  CHECK(!gw_proc_alive(0, 0));
  TEST_MAIN_END();
}
