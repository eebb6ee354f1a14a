/* Running a helper program for its answer, within a deadline (sl_run.h). */
#include "sl_run.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sl_time.h"

extern char **environ;

int sl_run_capture(char *const argv[], int timeout_ms, char *out, size_t size, int *ret_status) {
  int fds[2];
  if (size == 0)
    return -EINVAL;
  out[0] = '\0';
  if (pipe2(fds, O_CLOEXEC) < 0)
    return -errno;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDERR_FILENO);
  pid_t pid;
  int r = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (r) {
    close(fds[0]);
    return -r;
  }
  size_t len = 0;
  int64_t end = sl_time_mono_us() + (int64_t)timeout_ms * SL_US_PER_MS;
  bool late = false;
  for (;;) {
    int64_t left = end - sl_time_mono_us();
    struct pollfd p = {.fd = fds[0], .events = POLLIN};
    if (left <= 0 || (r = poll(&p, 1, (int)(left / SL_US_PER_MS) + 1)) == 0) {
      late = true;
      break;
    }
    if (r < 0 && errno == EINTR)
      continue;
    ssize_t n = r < 0 ? -1 : read(fds[0], out + len, size - 1 - len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    len += (size_t)n;
    if (len == size - 1)
      len = 0; /* keep the end of a long answer */
  }
  out[len] = '\0';
  close(fds[0]);
  /* its end, by the same deadline: one that closed its output and went on
   * is killed as one that said nothing */
  int st = 0;
  pid_t w = 0;
  while (!late && (w = waitpid(pid, &st, WNOHANG)) == 0) {
    if (sl_time_mono_us() >= end) {
      late = true;
      break;
    }
    usleep(10 * 1000);
  }
  if (late) {
    kill(pid, SIGKILL);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return -ETIMEDOUT;
  }
  if (w < 0)
    return -errno;
  *ret_status = st;
  return 0;
}
