/* Signals as bytes on a pipe, for a loop that waits in zmq_poll or poll.
 *
 * The handler writes the signal's number as one byte to a non-blocking pipe
 * whose read end the loop polls, so a signal that comes while the loop does
 * something else still wakes its next wait (a full pipe drops the byte: one is
 * pending already). The handler restarts interrupted calls (SA_RESTART): a
 * write that a signal comes in goes on whole, rather than failing with EINTR.
 * One pipe a process, made at the first sl_sigpipe_catch; its ends are
 * close-on-exec. */
#ifndef SL_SIGPIPE_H
#define SL_SIGPIPE_H

#include <signal.h>

/* Catches signo on the pipe; old, when not NULL, receives the action it
 * replaces (for sigaction to put back). 0 or -errno. */
int sl_sigpipe_catch(int signo, struct sigaction *old);
/* The pipe's read end for the loop's poll, or -1 before the first catch. */
int sl_sigpipe_fd(void);
/* The next signal the pipe holds, or 0 when it holds none. */
int sl_sigpipe_next(void);
/* Empties the pipe; the first signal it held, or 0. */
int sl_sigpipe_drain(void);

#endif
