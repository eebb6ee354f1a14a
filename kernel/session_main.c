/* spotlab-kernel-session FILE KERNEL_ID WAIT_MS: the path of the notebook
 * whose session holds KERNEL_ID, asked of the Jupyter server whose runtime
 * file is FILE (jpserver.c), on stdout. spotlab-kernel runs it for classic
 * Notebook, which does not name the notebook to its kernels. Exit status: 0,
 * JK_JPSERVER_NOT_FOUND when the server does not know the kernel, 1 with the
 * reason on stderr when it cannot be asked, 2 for a usage error. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "jpserver.h"
#include "sl_err.h"

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s SERVER-RUNTIME-FILE KERNEL-ID WAIT-MS\n", argv[0]);
    return 2;
  }
  char *end;
  long wait_ms = strtol(argv[3], &end, 10);
  if (end == argv[3] || *end || wait_ms < 0 || wait_ms > 600000) {
    fprintf(stderr, "%s: WAIT-MS must be 0 to 600000\n", argv[0]);
    return 2;
  }
  char path[4096];
  int r = jk_jpserver_notebook(argv[1], argv[2], (int)wait_ms, path, sizeof path);
  if (r == 0) {
    printf("%s\n", path);
    return fflush(stdout) == 0 ? 0 : 1;
  }
  if (r == -ENOENT)
    return JK_JPSERVER_NOT_FOUND;
  if (r == -EACCES) /* an answer other than 200: a token it does not take, say */
    fprintf(stderr, "the Jupyter server refused to list its sessions\n");
  else
    fprintf(stderr, "%s\n", sl_strerror(r));
  return 1;
}
