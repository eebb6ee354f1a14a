/* Signals as bytes on a pipe (sl_sigpipe.h). */
#include "sl_sigpipe.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

static int sig_pipe[2] = {-1, -1};

static void on_signal(int signo) {
  int saved = errno;
  unsigned char b = (unsigned char)signo;
  if (write(sig_pipe[1], &b, 1) < 0) { /* full: a signal is pending already */
  }
  errno = saved;
}

int sl_sigpipe_catch(int signo, struct sigaction *old) {
  if (signo <= 0 || signo > 255)
    return -EINVAL;
  if (sig_pipe[0] < 0 && pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
    return -errno;
  struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
  sigemptyset(&sa.sa_mask);
  return sigaction(signo, &sa, old) < 0 ? -errno : 0;
}

int sl_sigpipe_fd(void) { return sig_pipe[0]; }

int sl_sigpipe_next(void) {
  unsigned char b;
  if (sig_pipe[0] < 0)
    return 0;
  for (;;) {
    ssize_t n = read(sig_pipe[0], &b, 1);
    if (n == 1)
      return b;
    if (n < 0 && errno == EINTR)
      continue;
    return 0;
  }
}

int sl_sigpipe_drain(void) {
  int first = sl_sigpipe_next();
  while (sl_sigpipe_next()) {
  }
  return first;
}
