/* The kernel's ZeroMQ side: the five Jupyter sockets, the heartbeat thread,
 * signals, and the poll loop that feeds the message core. */
#ifndef JK_CHANNELS_H
#define JK_CHANNELS_H

#include "connfile.h"

#include <stdbool.h>

struct jk_run_options {
  const char *kernel_id;
  const char *notebook;
  const char *history_dir;
  /* The session follows the notebook's path, as the front end or its server
   * named it (not a default): server_file is that server's runtime file,
   * asked again for the path (rename.h), or NULL when none is known. */
  bool follows;
  const char *server_file;
  bool server_named;  /* the notebook is the server's own answer (no JPY_SESSION_NAME) */
};

/* Binds every channel of conn, serves until a shutdown request or SIGTERM.
 * Returns 0 on a clean shutdown, negative on a start-up failure (with a
 * message logged). */
int jk_channels_run(const struct jk_connection *conn, const struct jk_run_options *opts);

#endif
