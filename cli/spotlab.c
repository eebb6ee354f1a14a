/* spotlab: the command-line client for users and admins.
 *
 * Commands that talk to the gateway (status, jobs, logs, cancel, cost,
 * instances, inject) report clearly when no gateway can be reached. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

static const struct {
  const char *name, *args, *help;
} commands[] = {
  {"status", "", "gateway, workers, idle timers and budget"},
  {"jobs", "[--json]", "jobs of this user"},
  {"logs", "JOB [-f]", "a job's events and output; -f follows it"},
  {"cancel", "JOB", "cancel a job"},
  {"cost", "[--json]", "spend so far and savings against on-demand"},
  {"instances", "[--json]", "running instances"},
  {"inject", "preempt|kill INSTANCE [--notice 120s]", "trigger a preemption"},
  {"version", "", "print the version"},
};

static void usage(FILE *f) {
  fprintf(f, "usage: spotlab COMMAND [ARGS]\n\ncommands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
    fprintf(f, "  %-10s %-38s %s\n", commands[i].name, commands[i].args, commands[i].help);
  fprintf(f, "\nEnvironment: SPOTLAB_GATEWAY (tcp://HOST:PORT or ipc://PATH), SPOTLAB_TOKEN.\n");
}

int main(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 ||
      strcmp(argv[1], "-h") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
    printf("spotlab %s\n", SPOTLAB_VERSION);
    return 0;
  }
  for (size_t i = 0; i < sizeof commands / sizeof *commands; i++) {
    if (strcmp(argv[1], commands[i].name) == 0) {
      const char *gw = getenv("SPOTLAB_GATEWAY");
      fprintf(stderr,
              "spotlab %s: no spotlab gateway is reachable%s%s%s; this build has no gateway yet\n",
              argv[1], gw ? " at " : "", gw ? gw : "", gw ? "" : " (SPOTLAB_GATEWAY is not set)");
      return 1;
    }
  }
  fprintf(stderr, "spotlab: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
