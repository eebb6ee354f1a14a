/* Running a helper program for its answer, within a deadline. */
#ifndef SL_RUN_H
#define SL_RUN_H

#include <stddef.h>

/* Runs argv[0] (a path) with argv, stdin from /dev/null and stdout and
 * stderr into one pipe, for at most
 * timeout_ms: the end of its output, the last size - 1 bytes, goes to out
 * (NUL-terminated). Returns 0 with *ret_status (waitpid's status) when it
 * ended in time; -ETIMEDOUT when the deadline came first, whether it kept its
 * output open or closed it and went on (it is killed); another negative
 * errno when it could not be started. */
int sl_run_capture(char *const argv[], int timeout_ms, char *out, size_t size, int *ret_status);

#endif
