/* spotlab: the command-line client for users and admins.
 *
 * Commands that talk to the gateway (status, jobs, logs, show, rerun, cancel,
 * cost, instances, inject) connect like the kernel does (SPOTLAB_GATEWAY, else the
 * embedded default ipc://$SPOTLAB_HOME/gateway.sock, token from SPOTLAB_TOKEN
 * or $SPOTLAB_HOME/token) but never start a gateway: with none running they
 * say so. `spotlab gateway stop` asks the gateway to stop (gateway_cmd.c).
 * Exit status: 0 ok, 1 error (with a message on stderr), 2 usage. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "conn.h"
#include "display.h"
#include "gateway_cmd.h"
#include "gwformat.h"
#include "gwrecord.h"
#include "textbuf.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#define TIMEOUT_MS 15000
#define LOGS_PAGE 1000
#define LOGS_MAX_PAGES 1000

static const struct {
  const char *name, *args, *help;
} commands[] = {
  {"status", "[--json]", "gateway, workers, idle timers and budget"},
  {"jobs", "[--json]", "jobs of this user"},
  {"logs", "JOB [-f] [--json]", "a job's events and output (--json: one per line); -f follows it"},
  {"show", "JOB [--json]", "a job's run record: spec, definitions, seed, hashes, build ids, attempts"},
  {"rerun", "JOB [--force]", "the same run again (--force: even if the data file changed)"},
  {"cancel", "JOB", "cancel a job"},
  {"cost", "[--json]", "spend so far and savings against on-demand"},
  {"sessions", "[rm NAME] [--user USER] [--json]",
   "notebook sessions that hold names, models or jobs; rm: delete one; --user: another user's (admins)"},
  {"data", "[rm SHA256] [--user USER] [--json]",
   "data files uploaded for jobs; rm: delete one from the store; --user: another user's (admins)"},
  {"instances", "[--json]", "running instances"},
  {"budget", "[set gateway|group NAME|user NAME USD] [--json]", "monthly budgets; set: raise one live (admin)"},
  {"inject", "preempt|kill|rebalance INSTANCE [--notice 120s]",
   "trigger a preemption, or a rebalance recommendation (simulated market)"},
  {"gateway", "stop [--force] | status [--json]", "stop this user's gateway and its idle workers now"},
  {"version", "", "print the version"},
};

static void usage(FILE *f) {
  fprintf(f, "usage: spotlab COMMAND [ARGS]\n\ncommands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
    fprintf(f, "  %-10s %-38s %s\n", commands[i].name, commands[i].args, commands[i].help);
  fprintf(f, "\nEnvironment: SPOTLAB_GATEWAY (tcp://HOST:PORT or ipc://PATH), SPOTLAB_TOKEN, SPOTLAB_HOME.\n");
}

struct opts {
  bool json, follow, force;
  const char *pos[4]; /* budget set group NAME USD */
  int n_pos;
  const char *notice;
  const char *user;   /* sessions, data --user */
};

/* 0, or 2 after a usage message. */
static int parse(int argc, char **argv, struct opts *o) {
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0)
      o->json = true;
    else if (strcmp(argv[i], "--force") == 0 && (!strcmp(argv[1], "gateway") || !strcmp(argv[1], "rerun")))
      o->force = true;
    else if (strcmp(argv[i], "-f") == 0 || strcmp(argv[i], "--follow") == 0)
      o->follow = true;
    else if (strcmp(argv[i], "--notice") == 0 && i + 1 < argc)
      o->notice = argv[++i];
    else if (strcmp(argv[i], "--user") == 0 && i + 1 < argc && (!strcmp(argv[1], "sessions") || !strcmp(argv[1], "data")))
      o->user = argv[++i];
    else if (strncmp(argv[i], "--notice=", 9) == 0)
      o->notice = argv[i] + 9;
    else if (strcmp(argv[i], "--notice") == 0) {
      fprintf(stderr, "spotlab %s: --notice needs a value (--notice 120s)\n", argv[1]);
      return 2;
    } else if (argv[i][0] == '-' && argv[i][1] && !isdigit((unsigned char)argv[i][1]) && argv[i][1] != '.') {
      /* (a negative number is an argument, an amount, for its command to judge) */
      fprintf(stderr, "spotlab %s: unknown option '%s'\n", argv[1], argv[i]);
      return 2;
    } else if (o->n_pos < (int)(sizeof o->pos / sizeof *o->pos))
      o->pos[o->n_pos++] = argv[i];
    else {
      fprintf(stderr, "spotlab %s: too many arguments\n", argv[1]);
      return 2;
    }
  }
  return 0;
}

static void print_json(const json_t *v) {
  char *s = json_dumps(v, JSON_INDENT(2) | JSON_SORT_KEYS);
  if (s)
    printf("%s\n", s);
  free(s);
}

/* One JSON value on one line (JSON lines). */
static void print_line(const json_t *v) {
  char *s = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
  if (s)
    printf("%s\n", s);
  free(s);
}

static void print_text(char *text) {
  if (text)
    fputs(text, stdout);
  free(text);
}

/* Runs one request and prints the reply with render (or as JSON). */
static int simple(struct cli_conn *conn, const char *cmd, json_t *req, bool json, const char *json_key,
                  char *(*render)(const json_t *)) {
  json_t *reply = NULL;
  char err[800];
  if (cli_request(conn, req, TIMEOUT_MS, &reply, err, sizeof err) < 0) {
    fprintf(stderr, "spotlab %s: %s\n", cmd, err);
    return 1;
  }
  if (json) {
    json_t *part = json_key ? json_object_get(reply, json_key) : reply;
    print_json(part ? part : reply);
  } else if (render) {
    print_text(render(reply));
  }
  json_decref(reply);
  return 0;
}

/* The sessions, none of them this process's own. */
static char *format_sessions(const json_t *reply) { return jk_format_sessions(reply, NULL); }
static char *format_uploads(const json_t *reply) { return jk_format_uploads(reply, "spotlab data rm"); }

/* ---- logs --------------------------------------------------------------- */

struct follow_state {
  struct jk_display *d;
  bool tty, json, bar_drawn;
  long long first_us;
};

static void clear_bar(struct follow_state *f) {
  if (f->bar_drawn)
    fputs("\r\033[K", stdout);
  f->bar_drawn = false;
}

static bool on_event(void *ud, const json_t *ev) {
  struct follow_state *f = ud;
  if (jk_display_event(f->d, ev) <= 0)
    return true;
  if (!f->first_us)
    f->first_us = (long long)sl_json_get_int(ev, "time_us", 0);
  const char *kind = sl_json_get_str(ev, "event", "");
  if (f->json) {
    print_line(ev);
  } else if (!f->tty || strcmp(kind, "metric") != 0) {
    clear_bar(f);
    if (strcmp(kind, "output") == 0 && f->tty)
      fputs(sl_json_get_str(ev, "text", ""), stdout);
    else
      print_text(jk_format_event(ev, f->first_us));
  }
  if (f->tty && !f->json) {
    char *line = jk_display_line(f->d, 100);
    if (line) {
      clear_bar(f);
      fputs(line, stdout);
      f->bar_drawn = true;
    }
    free(line);
  }
  fflush(stdout);
  return !jk_display_finished(f->d);
}

static int logs_follow(struct cli_conn *conn, const char *job, bool json) {
  struct follow_state f = {.d = jk_display_new(job, ""), .tty = isatty(STDOUT_FILENO) == 1, .json = json};
  if (!f.d)
    return 1;
  char err[800];
  json_t *reply = NULL;
  int r = cli_follow(conn, job, 0, on_event, &f, &reply, err, sizeof err);
  if (f.bar_drawn) {
    clear_bar(&f);
    print_text(jk_display_line(f.d, 100));
    fputs("\n", stdout);
  }
  json_decref(reply);
  int rc = 0;
  if (r < 0) {
    fprintf(stderr, "spotlab logs: %s\n", err);
    rc = 1;
  } else if (strcmp(jk_display_state(f.d), "succeeded") != 0) {
    fprintf(stderr, "spotlab logs: job %s %s%s%s\n", job, jk_display_state(f.d), *jk_display_reason(f.d) ? ": " : "",
            jk_display_reason(f.d));
    rc = 1;
  }
  jk_display_free(f.d);
  return rc;
}

static int logs(struct cli_conn *conn, const struct opts *o) {
  if (o->n_pos != 1) {
    fprintf(stderr, "usage: spotlab logs JOB [-f] [--json]\n");
    return 2;
  }
  const char *job = o->pos[0];
  if (o->follow)
    return logs_follow(conn, job, o->json);
  long long after = 0, first = 0;
  for (int page = 0; page < LOGS_MAX_PAGES; page++) {
    json_t *reply = NULL;
    char err[800];
    json_t *req = json_pack("{s:s, s:s, s:I, s:i}", "type", "logs", "job", job, "after", (json_int_t)after, "limit",
                            LOGS_PAGE);
    if (cli_request(conn, req, TIMEOUT_MS, &reply, err, sizeof err) < 0) {
      fprintf(stderr, "spotlab logs: %s\n", err);
      return 1;
    }
    const json_t *events = json_object_get(reply, "events");
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev) {
      if (!first)
        first = (long long)sl_json_get_int(ev, "time_us", 0);
      if (o->json)
        print_line(ev);
      else
        print_text(jk_format_event(ev, first));
      after = (long long)sl_json_get_int(ev, "seq", after);
    }
    bool more = sl_json_get_bool(reply, "more", false) && json_array_size(events);
    json_decref(reply);
    if (!more)
      break;
  }
  return 0;
}

/* ---- run records --------------------------------------------------------- */

static int show(struct cli_conn *conn, const struct opts *o) {
  if (o->n_pos != 1) {
    fprintf(stderr, "usage: spotlab show JOB [--json]\n");
    return 2;
  }
  json_t *reply = NULL;
  char err[800];
  if (cli_request(conn, json_pack("{s:s, s:s}", "type", "record", "job", o->pos[0]), TIMEOUT_MS, &reply, err,
                  sizeof err) < 0) {
    fprintf(stderr, "spotlab show: %s\n", err);
    return 1;
  }
  const json_t *rec = json_object_get(reply, "record");
  if (o->json)
    print_json(rec);
  else
    print_text(jk_format_record(rec));
  json_decref(reply);
  return 0;
}

/* Waits for a rerun to start (or end): a worker refuses one whose data
 * file changed, and that refusal is the command's answer. */
struct rerun_wait {
  char state[24], reason[256];
};

static bool rerun_event(void *ud, const json_t *ev) {
  struct rerun_wait *w = ud;
  if (strcmp(sl_json_get_str(ev, "event", ""), "state") != 0)
    return true;
  snprintf(w->state, sizeof w->state, "%s", sl_json_get_str(ev, "state", ""));
  snprintf(w->reason, sizeof w->reason, "%s", sl_json_get_str(ev, "reason", ""));
  jk_text_clean(w->reason, true); /* the reason reaches a terminal */
  return strcmp(w->state, "running") && strcmp(w->state, "succeeded") && strcmp(w->state, "failed") &&
         strcmp(w->state, "cancelled");
}

static int rerun(struct cli_conn *conn, const struct opts *o) {
  if (o->n_pos != 1) {
    fprintf(stderr, "usage: spotlab rerun JOB [--force]\n");
    return 2;
  }
  json_t *reply = NULL;
  char err[800];
  if (cli_request(conn, json_pack("{s:s, s:s, s:b}", "type", "rerun", "job", o->pos[0], "force", o->force),
                  TIMEOUT_MS, &reply, err, sizeof err) < 0) {
    fprintf(stderr, "spotlab rerun: %s\n", err);
    return 1;
  }
  char job[32];
  snprintf(job, sizeof job, "%s", sl_json_get_str(reply, "job", ""));
  json_decref(reply);
  printf("%s: a rerun of %s (its spec, definitions and seed); waiting for it to start\n", job, o->pos[0]);
  fflush(stdout);
  struct rerun_wait w = {{0}, {0}};
  if (cli_follow(conn, job, 0, rerun_event, &w, NULL, err, sizeof err) < 0) {
    fprintf(stderr, "spotlab rerun: %s\n", err);
    return 1;
  }
  if (!strcmp(w.state, "failed") || !strcmp(w.state, "cancelled")) {
    fprintf(stderr, "spotlab rerun: %s %s: %s\n", job, w.state, w.reason);
    return 1;
  }
  printf("%s %s (spotlab logs %s -f follows it)\n", job, w.state, job);
  return 0;
}

/* ---- the rest ----------------------------------------------------------- */

static int inject(struct cli_conn *conn, const struct opts *o) {
  if (o->n_pos != 2 || (strcmp(o->pos[0], "preempt") != 0 && strcmp(o->pos[0], "kill") != 0 &&
                        strcmp(o->pos[0], "rebalance") != 0)) {
    fprintf(stderr, "usage: spotlab inject preempt|kill|rebalance INSTANCE [--notice 120s]\n");
    return 2;
  }
  int64_t notice_us = 120 * SL_US_PER_S;
  if (o->notice && (sl_time_parse_duration(o->notice, &notice_us) < 0 || notice_us < 0)) {
    fprintf(stderr, "spotlab inject: --notice takes a duration such as 120s or 2m, not '%s'\n", o->notice);
    return 2;
  }
  json_t *req = json_pack("{s:s, s:s, s:s, s:I}", "type", "inject", "action", o->pos[0], "instance", o->pos[1],
                          "notice_s", (json_int_t)(notice_us / SL_US_PER_S));
  json_t *reply = NULL;
  char err[800];
  if (cli_request(conn, req, TIMEOUT_MS, &reply, err, sizeof err) < 0) {
    fprintf(stderr, "spotlab inject: %s\n", err);
    return 1;
  }
  printf("%s injected on %s\n", o->pos[0], o->pos[1]);
  json_decref(reply);
  return 0;
}

static int cancel(struct cli_conn *conn, const struct opts *o) {
  if (o->n_pos != 1) {
    fprintf(stderr, "usage: spotlab cancel JOB\n");
    return 2;
  }
  json_t *reply = NULL;
  char err[800];
  if (cli_request(conn, json_pack("{s:s, s:s}", "type", "cancel", "job", o->pos[0]), TIMEOUT_MS, &reply, err,
                  sizeof err) < 0) {
    fprintf(stderr, "spotlab cancel: %s\n", err);
    return 1;
  }
  printf("cancel requested for %s\n", o->pos[0]);
  json_decref(reply);
  return 0;
}

/* sessions, or sessions rm NAME: the session's names and models deleted,
 * and its jobs' checkpoints removed from the store. */
static int sessions(struct cli_conn *conn, const struct opts *o) {
  if (o->n_pos && (strcmp(o->pos[0], "rm") || o->n_pos != 2)) {
    fprintf(stderr, "usage: spotlab sessions [rm NAME] [--user USER] [--json]\n");
    return 2;
  }
  json_t *req = o->n_pos ? json_pack("{s:s, s:s}", "type", "session.delete", "session", o->pos[1])
                         : json_pack("{s:s}", "type", "sessions");
  if (req && o->user)
    json_object_set_new(req, "user", json_string(o->user));
  if (!o->n_pos)
    return simple(conn, "sessions", req, o->json, "sessions", format_sessions);
  return simple(conn, "sessions rm", req, o->json, NULL, jk_format_session_deleted);
}

/* data, or data rm SHA256: a stored data file deleted (the start of its
 * hash is enough when it names one). */
static int data(struct cli_conn *conn, const struct opts *o) {
  if (o->n_pos && (strcmp(o->pos[0], "rm") || o->n_pos != 2)) {
    fprintf(stderr, "usage: spotlab data [rm SHA256] [--user USER] [--json]\n");
    return 2;
  }
  json_t *req = o->n_pos ? json_pack("{s:s, s:s}", "type", "data.delete", "sha256", o->pos[1])
                         : json_pack("{s:s}", "type", "data.list");
  if (req && o->user)
    json_object_set_new(req, "user", json_string(o->user));
  if (!o->n_pos)
    return simple(conn, "data", req, o->json, "uploads", format_uploads);
  return simple(conn, "data rm", req, o->json, NULL, jk_format_upload_deleted);
}

static int budget(struct cli_conn *conn, const struct opts *o) {
  char args[256] = "", err[160];
  for (int i = 0; i < (int)o->n_pos; i++) {
    size_t len = strlen(args);
    if (snprintf(args + len, sizeof args - len, "%s%s", i ? " " : "", o->pos[i]) >=
        (int)(sizeof args - len)) {
      fprintf(stderr, "spotlab budget: the arguments are too long\n");
      return 2;
    }
  }
  json_t *req = jk_budget_request(args, err, sizeof err);
  if (!req) {
    fprintf(stderr, "spotlab budget: %s\n", err);
    return 2;
  }
  return simple(conn, "budget", req, o->json, NULL, jk_format_budgets);
}

static int run(const char *cmd, const struct opts *o) {
  if (!strcmp(cmd, "gateway"))
    return o->n_pos > 1 ? (fprintf(stderr, "spotlab gateway: unexpected argument '%s'\n", o->pos[1]), 2)
                        : cli_gateway(o->pos[0], o->force, o->json);
  bool takes_pos = !strcmp(cmd, "logs") || !strcmp(cmd, "cancel") || !strcmp(cmd, "inject") ||
                   !strcmp(cmd, "budget") || !strcmp(cmd, "show") || !strcmp(cmd, "rerun") ||
                   !strcmp(cmd, "sessions") || !strcmp(cmd, "data");
  if (!takes_pos && o->n_pos) {
    fprintf(stderr, "spotlab %s: unexpected argument '%s'\n", cmd, o->pos[0]);
    return 2;
  }
  struct cli_conn *conn = cli_conn_new();
  if (!conn) {
    fprintf(stderr, "spotlab: out of memory\n");
    return 1;
  }
  int rc;
  if (!strcmp(cmd, "status"))
    rc = simple(conn, cmd, json_pack("{s:s}", "type", "status"), o->json, NULL, jk_format_status);
  else if (!strcmp(cmd, "jobs"))
    rc = simple(conn, cmd, json_pack("{s:s, s:b}", "type", "jobs", "all", 0), o->json, "jobs", jk_format_jobs);
  else if (!strcmp(cmd, "cost"))
    rc = simple(conn, cmd, json_pack("{s:s}", "type", "cost"), o->json, NULL, jk_format_cost);
  else if (!strcmp(cmd, "sessions"))
    rc = sessions(conn, o);
  else if (!strcmp(cmd, "data"))
    rc = data(conn, o);
  else if (!strcmp(cmd, "instances"))
    rc = simple(conn, cmd, json_pack("{s:s}", "type", "instances"), o->json, "instances", jk_format_instances);
  else if (!strcmp(cmd, "budget"))
    rc = budget(conn, o);
  else if (!strcmp(cmd, "logs"))
    rc = logs(conn, o);
  else if (!strcmp(cmd, "show"))
    rc = show(conn, o);
  else if (!strcmp(cmd, "rerun"))
    rc = rerun(conn, o);
  else if (!strcmp(cmd, "cancel"))
    rc = cancel(conn, o);
  else
    rc = inject(conn, o);
  cli_conn_free(conn);
  return rc;
}

int main(int argc, char **argv) {
  sl_log_init("spotlab");
  if (argc < 2 || strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 ||
      strcmp(argv[1], "-h") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
    printf("spotlab %s\n", SPOTLAB_VERSION);
    return 0;
  }
  for (size_t i = 0; i + 1 < sizeof commands / sizeof *commands; i++) {
    if (strcmp(argv[1], commands[i].name) == 0) {
      struct opts o = {0};
      if (parse(argc, argv, &o) != 0)
        return 2;
      return run(argv[1], &o);
    }
  }
  fprintf(stderr, "spotlab: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
