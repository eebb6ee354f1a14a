/* spotlab-worker: one per instance. Reads its configuration file, then hands
 * over to the agent. Signals reach the agent through a self-pipe: SIGTERM is
 * a preemption notice (checkpoint, upload, exit), SIGINT a shutdown. Exit
 * status: 0 after a clean stop, 1 runtime error, 2 usage or configuration. */
#include "agent.h"
#include "config.h" /* the build's: SPOTLAB_VERSION */
#include "conf.h"
#include "sl_err.h"
#include "sl_http.h"
#include "sl_log.h"
#include "sl_path.h"
#include "sl_sigpipe.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int install_signals(int *ret_fd) {
  int r;
  if ((r = sl_sigpipe_catch(SIGTERM, NULL)) < 0 || (r = sl_sigpipe_catch(SIGINT, NULL)) < 0) return r;
  signal(SIGPIPE, SIG_IGN);
  *ret_fd = sl_sigpipe_fd();
  return 0;
}

/* Jobs start in their own folder, so the program path is made absolute here.
 * A configured path that does not resolve (say, one relative to the folder of
 * whoever wrote the file) falls back to the usual lookup, with a warning. */
static int find_train(const struct wk_config *cfg, char ret[PATH_MAX]) {
  char found[PATH_MAX];
  if (cfg->train[0]) {
    if (realpath(cfg->train, ret)) return 0;
    sl_warn("worker", "train program %s: %s; looking for spotlab-train", cfg->train, strerror(errno));
  }
  if (sl_find_program("spotlab-train", found, sizeof found) < 0 || !realpath(found, ret)) {
    sl_err("worker", "spotlab-train not found (set \"train\" in the config or SPOTLAB_TRAIN_BIN)");
    return -ENOENT;
  }
  return 0;
}

static void usage(FILE *f) {
  fprintf(f, "usage: spotlab-worker --config FILE\n"
             "  runs the jobs a spotlab gateway assigns to this instance;\n"
             "  FILE is the 0600 JSON file the gateway wrote (docs/internals/protocols.md)\n");
}

int main(int argc, char **argv) {
  sl_log_init("spotlab-worker");
  const char *path = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--config") && i + 1 < argc) path = argv[++i];
    else if (!strcmp(argv[i], "--help")) return usage(stdout), 0;
    else if (!strcmp(argv[i], "--version")) {
      printf("spotlab-worker %s\n", SPOTLAB_VERSION);
      return 0;
    }
    else return usage(stderr), 2;
  }
  if (!path) return usage(stderr), 2;
  static struct wk_config cfg;
  char err[512];
  int r = wk_config_load(path, &cfg, err, sizeof err);
  if (r < 0) {
    sl_err("worker", "config: %s", err);
    return 2;
  }
  char train[PATH_MAX];
  if (find_train(&cfg, train) < 0) return 2;
  int sig_fd = -1;
  struct wk_agent *agent = NULL;
  if (sl_http_global_init() < 0 || install_signals(&sig_fd) < 0) return 1;
  if ((r = wk_agent_new(&cfg, train, &agent)) < 0) return 1;
  sl_info("worker", "instance %s up; gateway %s", cfg.instance, cfg.gateway);
  r = wk_agent_run(agent, sig_fd);
  if (r < 0) sl_err("worker", "agent: %s", sl_strerror(r));
  wk_agent_free(agent);
  return r < 0 ? 1 : 0;
}
