/* spotlab-kernel: the Jupyter kernel's command line.
 *
 *   spotlab-kernel -f CONNECTION_FILE     serve a front end
 *   spotlab-kernel install [...]          install the kernelspec
 *   spotlab-kernel --version | --help */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "channels.h"
#include "config.h"
#include "connfile.h"
#include "install.h"
#include "jpserver.h"
#include "sl_err.h"
#include "sl_hmac.h"
#include "sl_log.h"
#include "sl_path.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: spotlab-kernel -f CONNECTION_FILE\n"
          "       spotlab-kernel install [--user | --prefix DIR | --sys-prefix]\n"
          "                              [--name NAME] [--display-name TEXT]\n"
          "       spotlab-kernel --version\n"
          "\n"
          "The spotlab Jupyter kernel. Front ends start it with a connection file;\n"
          "`install` registers it with Jupyter, as the kernel 'spotlab' by default.\n"
          "Environment: SPOTLAB_GATEWAY, SPOTLAB_HOME, SPOTLAB_DEBUG=kernel,kernel.wire,\n"
          "SPOTLAB_KERNEL_LOG=PATH|stderr (default: $SPOTLAB_HOME/logs/kernel.log)\n");
}

/* "kernel-<id>.json" -> "<id>"; any other name: the name without ".json". */
static void kernel_id_from_path(const char *path, char *buf, size_t size) {
  char *copy = strdup(path);
  const char *base = copy ? basename(copy) : "kernel";
  if (strncmp(base, "kernel-", 7) == 0)
    base += 7;
  snprintf(buf, size, "%s", base);
  char *dot = strrchr(buf, '.');
  if (dot && strcmp(dot, ".json") == 0)
    *dot = '\0';
  free(copy);
}

/* Every front end holds a connection per channel, each a descriptor: the
 * kernel serves as many as the hard limit allows, not the soft default. */
static void raise_fd_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rlim_t was = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
      sl_debug("kernel", "cannot raise the descriptor limit from %llu: %s", (unsigned long long)was, strerror(errno));
  }
}

#define LOOKUP_WAIT_MS 5000 /* for the server to record this kernel's session */
#define LOG_KEEP_BYTES (8 << 20) /* a log past this is moved to kernel.log.1 at start */

/* Front ends show a kernel's stderr among the cell outputs (jupyter console
 * prints it in the terminal): once the kernel serves, it logs to a file
 * instead, SPOTLAB_KERNEL_LOG or $SPOTLAB_HOME/logs/kernel.log; "stderr"
 * keeps stderr. A gateway the kernel starts inherits that file until it
 * detaches, so why one could not start is there too; once started it logs
 * to $SPOTLAB_HOME/gateway.log. Errors before this point (a bad connection
 * file) still reach the person who started the kernel. */
static void log_to_file(void) {
  const char *env = getenv("SPOTLAB_KERNEL_LOG");
  char path[4096];
  if (env && (strcmp(env, "stderr") == 0 || strcmp(env, "-") == 0))
    return;
  if (env && *env) {
    snprintf(path, sizeof path, "%s", env);
  } else {
    char home[4000];
    if (sl_spotlab_home(home, sizeof home) < 0)
      return;
    snprintf(path, sizeof path, "%s/logs", home);
    if (sl_mkdir_p(path, 0700) < 0)
      return;
    snprintf(path, sizeof path, "%s/logs/kernel.log", home);
  }
  struct stat st;
  if (stat(path, &st) == 0 && st.st_size > LOG_KEEP_BYTES) {
    char old[4200];
    snprintf(old, sizeof old, "%s.1", path);
    rename(path, old);
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) {
    sl_warn("kernel", "cannot open the log %s: %s; logging to stderr", path, strerror(errno));
    return;
  }
  fflush(stderr);
  if (dup2(fd, STDERR_FILENO) < 0)
    sl_warn("kernel", "cannot log to %s: %s", path, strerror(errno));
  close(fd);
}

int main(int argc, char **argv) {
  sl_log_init("spotlab-kernel");
  if (argc >= 2 && strcmp(argv[1], "install") == 0)
    return jk_install_main(argc - 1, argv + 1);
  const char *conn_path = NULL;
  for (int i = 1; i < argc; i++) {
    if ((strcmp(argv[i], "-f") == 0 || strcmp(argv[i], "--connection-file") == 0) && i + 1 < argc) {
      conn_path = argv[++i];
    } else if (strncmp(argv[i], "--connection-file=", 18) == 0) {
      conn_path = argv[i] + 18;
    } else if (strcmp(argv[i], "-f") == 0 || strcmp(argv[i], "--connection-file") == 0) {
      fprintf(stderr, "spotlab-kernel: %s needs a value, the connection file\n", argv[i]);
      usage(stderr);
      return 2;
    } else if (strcmp(argv[i], "--version") == 0) {
      printf("spotlab-kernel %s\n", SPOTLAB_VERSION);
      return 0;
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "spotlab-kernel: unknown argument '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  if (!conn_path) {
    usage(stderr);
    return 2;
  }
  if (sl_crypto_init() < 0) {
    fprintf(stderr, "spotlab-kernel: libsodium failed to initialise\n");
    return 1;
  }
  struct jk_connection conn;
  char err[512];
  int r = jk_connection_load(conn_path, &conn, err, sizeof err);
  if (r < 0) {
    fprintf(stderr, "spotlab-kernel: %s\n", err);
    return 1;
  }
  char kernel_id[128];
  kernel_id_from_path(conn_path, kernel_id, sizeof kernel_id);
  const char *notebook = getenv("JPY_SESSION_NAME");
  char history_dir[4096];
  const char *home = getenv("SPOTLAB_HOME");
  const char *user_home = getenv("HOME");
  const char *hist = NULL;
  if (home && *home)
    hist = snprintf(history_dir, sizeof history_dir, "%s/history", home) < (int)sizeof history_dir ? history_dir : NULL;
  else if (user_home && *user_home)
    hist = snprintf(history_dir, sizeof history_dir, "%s/.local/share/spotlab/history", user_home) < (int)sizeof history_dir ? history_dir : NULL;
  if (hist) {
    /* Make the parents; the history module makes the last component. */
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", hist);
    for (char *p = tmp + 1; *p; p++)
      if (*p == '/') {
        *p = '\0';
        mkdir(tmp, 0700);
        *p = '/';
      }
  }
  raise_fd_limit();
  log_to_file();
  char found[4096], server_file[4096];
  const char *ppid = getenv("JPY_PARENT_PID");
  char *conn_copy = strdup(conn_path);
  /* the server that started this kernel, asked again for a renamed notebook's path */
  bool have_server = jk_jpserver_file(ppid ? strtol(ppid, NULL, 10) : 0, conn_copy ? dirname(conn_copy) : NULL,
                                      server_file, sizeof server_file) == 0;
  free(conn_copy);
  if (!notebook || !*notebook) {
    /* classic Notebook names no session: its server knows the notebook */
    char why[512];
    int lr = have_server && *kernel_id ? jk_jpserver_ask(server_file, kernel_id, LOOKUP_WAIT_MS, found, sizeof found, why,
                                           sizeof why)
                         : -ENOENT;
    if (!have_server || !*kernel_id)
      why[0] = '\0';
    if (lr == 0) {
      notebook = found;
      sl_info("kernel", "notebook session %s (from the Jupyter server that started this kernel)", found);
    } else if (lr != -ENOENT || why[0]) {
      sl_warn("kernel", "cannot ask the Jupyter server for this kernel's notebook: %s",
              why[0] ? why : sl_strerror(lr));
    }
  }
  struct jk_run_options opts = {kernel_id, notebook && *notebook ? notebook : NULL, hist,
                                notebook && *notebook, have_server ? server_file : NULL, notebook == found};
  r = jk_channels_run(&conn, &opts);
  memset(&conn, 0, sizeof conn);
  if (r < 0) {
    fprintf(stderr, "spotlab-kernel: %s\n", sl_strerror(r));
    return 1;
  }
  return 0;
}
