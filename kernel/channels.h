/* The kernel's ZeroMQ side: the five Jupyter sockets, the heartbeat thread,
 * signals, and the poll loop that feeds the message core. */
#ifndef JK_CHANNELS_H
#define JK_CHANNELS_H

#include "connfile.h"

struct jk_run_options {
  const char *kernel_id;
  const char *notebook;
  const char *history_dir;
};

/* Binds every channel of conn, serves until a shutdown request or SIGTERM.
 * Returns 0 on a clean shutdown, negative on a start-up failure (with a
 * message logged). */
int jk_channels_run(const struct jk_connection *conn, const struct jk_run_options *opts);

#endif
