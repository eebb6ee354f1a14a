/* The kernel's half of asking the Jupyter server for this kernel's notebook
 * (jpserver.c): finding the server's runtime file, and running
 * spotlab-kernel-session, which asks the server over HTTP, so that the
 * kernel itself never loads libcurl. */
#include "jpserver.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "sl_path.h"
#include "sl_run.h"

#define ANSWER_MARGIN_MS 3000 /* the program's start and its last try, past wait_ms */

/* Jupyter's runtime folder, as jupyter_core's jupyter_runtime_dir() finds it. */
static int runtime_dir(char *buf, size_t size) {
  const char *env = getenv("JUPYTER_RUNTIME_DIR"), *data = getenv("JUPYTER_DATA_DIR");
  const char *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
  int n;
  if (env && *env)
    n = snprintf(buf, size, "%s", env);
  else if (data && *data)
    n = snprintf(buf, size, "%s/runtime", data);
  else if (xdg && *xdg)
    n = snprintf(buf, size, "%s/jupyter/runtime", xdg);
  else if (home && *home)
    n = snprintf(buf, size, "%s/.local/share/jupyter/runtime", home);
  else
    return -ENOENT;
  return n > 0 && (size_t)n < size ? 0 : -ENAMETOOLONG;
}

/* Whether dir holds the server's runtime file: its path into ret. Only
 * that it is there: spotlab-kernel-session reads it. */
static int file_in(const char *dir, long pid, char *ret, size_t size) {
  static const char *const names[] = {"jpserver", "nbserver"};
  for (size_t i = 0; dir && i < 2; i++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s-%ld.json", dir, names[i], pid);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && strlen(path) < size) {
      snprintf(ret, size, "%s", path);
      return 0;
    }
  }
  return -ENOENT;
}

int jk_jpserver_file(long parent_pid, const char *conn_dir, char *ret, size_t size) {
  if (parent_pid <= 0)
    return -ENOENT;
  char dir[4096];
  if (file_in(conn_dir, parent_pid, ret, size) == 0)
    return 0;
  if (runtime_dir(dir, sizeof dir) == 0 && file_in(dir, parent_pid, ret, size) == 0)
    return 0;
  return -ENOENT;
}

int jk_jpserver_ask(const char *file, const char *kernel_id, int wait_ms, char *ret, size_t size, char *why,
                    size_t why_size) {
  char program[4096], wait[16], out[8192];
  why[0] = '\0';
  int r = sl_find_program(JK_JPSERVER_PROGRAM, program, sizeof program);
  if (r < 0) {
    snprintf(why, why_size, "%s is not installed beside the kernel", JK_JPSERVER_PROGRAM);
    return r;
  }
  snprintf(wait, sizeof wait, "%d", wait_ms);
  char *argv[] = {program, (char *)file, (char *)kernel_id, wait, NULL};
  int st = 0;
  r = sl_run_capture(argv, wait_ms + ANSWER_MARGIN_MS, out, sizeof out, &st);
  if (r < 0) {
    snprintf(why, why_size, "%s: %s", JK_JPSERVER_PROGRAM,
             r == -ETIMEDOUT ? "no answer in time" : strerror(-r));
    return r;
  }
  size_t n = strlen(out);
  if (n && out[n - 1] == '\n')
    out[--n] = '\0';
  if (WIFEXITED(st) && WEXITSTATUS(st) == JK_JPSERVER_NOT_FOUND)
    return -ENOENT;
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || n == 0 || n >= size) {
    snprintf(why, why_size, "%s: %.300s", JK_JPSERVER_PROGRAM, n ? out : "no answer");
    return -EPROTO;
  }
  memcpy(ret, out, n + 1);
  return 0;
}
