/* sl_sigpipe: a signal leaves its number on the pipe for the next poll, the
 * handler keeps errno and survives a full pipe, interrupted calls go on, and
 * the former action comes back through the one sigaction gave. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "sl_sigpipe.h"

static int pending(int timeout_ms) {
  struct pollfd p = {.fd = sl_sigpipe_fd(), .events = POLLIN};
  return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

static int data_pipe[2];
static pthread_t main_thread;

/* Signals the process while main waits in read(), then gives it its byte. */
static void *signal_then_write(void *unused) {
  (void)unused;
  struct timespec gap = {0, 100 * 1000 * 1000};
  nanosleep(&gap, NULL);
  pthread_kill(main_thread, SIGUSR1); /* to the thread in read() */
  nanosleep(&gap, NULL);
  if (write(data_pipe[1], "x", 1) != 1)
    return (void *)1;
  return NULL;
}

int main(void) {
  CHECK_INT(sl_sigpipe_fd(), -1);
  CHECK_INT(sl_sigpipe_next(), 0);
  CHECK_INT(sl_sigpipe_catch(0, NULL), -EINVAL);

  struct sigaction old;
  CHECK_INT(sl_sigpipe_catch(SIGUSR1, &old), 0);
  CHECK(old.sa_handler == SIG_DFL);
  CHECK_INT(sl_sigpipe_catch(SIGUSR2, NULL), 0);
  CHECK(sl_sigpipe_fd() >= 0);
  CHECK(!pending(0));

  /* A signal while nothing polls waits on the pipe for the next poll. */
  errno = ERANGE;
  raise(SIGUSR2);
  CHECK_INT(errno, ERANGE); /* the handler put errno back */
  raise(SIGUSR1);
  CHECK(pending(0));
  CHECK_INT(sl_sigpipe_next(), SIGUSR2);
  CHECK_INT(sl_sigpipe_next(), SIGUSR1);
  CHECK_INT(sl_sigpipe_next(), 0);
  CHECK(!pending(0));

  /* drain: the first, and nothing left. */
  raise(SIGUSR1);
  raise(SIGUSR2);
  raise(SIGUSR2);
  CHECK_INT(sl_sigpipe_drain(), SIGUSR1);
  CHECK(!pending(0));
  CHECK_INT(sl_sigpipe_drain(), 0);

  /* More signals than the pipe holds: the extra ones are dropped, quietly. */
  for (int i = 0; i < 70000; i++)
    raise(i % 2 ? SIGUSR2 : SIGUSR1);
  CHECK(pending(0));
  CHECK_INT(sl_sigpipe_next(), SIGUSR1);
  int n = 1;
  while (sl_sigpipe_next())
    n++;
  CHECK(n >= 4096 && n < 70000);

  /* A blocking read that a signal comes in goes on and gets its byte. */
  CHECK_INT(pipe(data_pipe), 0);
  pthread_t t;
  main_thread = pthread_self();
  CHECK_INT(pthread_create(&t, NULL, signal_then_write, NULL), 0);
  char b = 0;
  errno = 0;
  ssize_t got = read(data_pipe[0], &b, 1);
  CHECK_INT((int)got, 1);
  CHECK_INT(errno, 0);
  CHECK(b == 'x');
  void *res;
  pthread_join(t, &res);
  CHECK(res == NULL);
  CHECK_INT(sl_sigpipe_next(), SIGUSR1);

  /* The former action back. */
  CHECK_INT(sigaction(SIGUSR1, &old, NULL), 0);
  struct sigaction now;
  sigaction(SIGUSR1, NULL, &now);
  CHECK(now.sa_handler == SIG_DFL);
  TEST_MAIN_END();
}
