/* spotlab: the command-line client for users and admins.
 *
 * Commands that talk to the gateway (status, jobs, logs, show, rerun, cancel,
 * cost, instances, inject) connect like the kernel does (SPOTLAB_GATEWAY, else the
 * embedded default ipc://$SPOTLAB_HOME/gateway.sock, token from SPOTLAB_TOKEN
 * or $SPOTLAB_HOME/token) but never start a gateway: with none running they
 * say so. `spotlab gateway stop` asks the gateway to stop (gateway_cmd.c).
 * Exit status: 0 ok, 1 error (with a message on stderr), 2 usage. Output
 * that could not be written (a full disk, a closed pipe) is an error: every
 * command ends by checking stdout, and logs -f stops at the first failed
 * write. Each command takes its own options only; an argument that goes
 * into a request must be UTF-8 text (JSON carries nothing else). */
#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "config.h"
#include "conn.h"
#include "display.h"
#include "gateway_cmd.h"
#include "gwformat.h"
#include "gwrecord.h"
#include "textbuf.h"
#include "sl_json.h"
#include "sl_opt.h"
#include "sl_log.h"
#include "sl_time.h"

#define TIMEOUT_MS 15000
#define LOGS_PAGE 1000
#define LOGS_MAX_PAGES 1000
#define TOKEN_MAX_BYTES 4095      /* the longest token the gateway's hello takes */
#define NOTICE_MIN_US SL_US_PER_S /* a preemption notice under 1 s is a hard kill */
#define NOTICE_MAX_S 86400        /* the longest notice the gateway's providers take */

/* The options a command takes. */
enum { OPT_JSON = 1, OPT_FOLLOW = 2, OPT_FORCE = 4, OPT_NOTICE = 8, OPT_USER = 16 };

static const struct {
  const char *name, *args, *help;
  unsigned opts;
} commands[] = {
  {"status", "[--json]", "gateway, workers, idle timers and budget", OPT_JSON},
  {"jobs", "[--json]", "jobs of this user", OPT_JSON},
  {"logs", "JOB [-f] [--json]", "a job's events and output (--json: one per line); -f follows it",
   OPT_FOLLOW | OPT_JSON},
  {"show", "JOB [--json]", "a job's run record: spec, definitions, seed, hashes, build ids, attempts", OPT_JSON},
  {"rerun", "JOB [--force]", "the same run again (--force: even if the data file changed)", OPT_FORCE},
  {"cancel", "JOB", "cancel a job", 0},
  {"cost", "[--json]", "spend so far and savings against on-demand", OPT_JSON},
  {"sessions", "[rm NAME] [--user USER] [--json]",
   "notebook sessions that hold names, models or jobs; rm: delete one; --user: another user's (admins)",
   OPT_USER | OPT_JSON},
  {"data", "[rm SHA256] [--user USER] [--json]",
   "data files uploaded for jobs; rm: delete one from the store; --user: another user's (admins)",
   OPT_USER | OPT_JSON},
  {"instances", "[--json]", "running instances", OPT_JSON},
  {"budget", "[set gateway|group NAME|user NAME USD] [--json]", "monthly budgets; set: raise one live (admin)",
   OPT_JSON},
  {"inject", "preempt|kill|rebalance INSTANCE [--notice 120s]",
   "trigger a preemption, or a rebalance recommendation (simulated market)", OPT_NOTICE},
  {"gateway", "stop [--force] | status [--json]", "stop this user's gateway and its idle workers now",
   OPT_FORCE | OPT_JSON},
  {"version", "", "print the version", 0},
};

/* ---- output --------------------------------------------------------------- */

static int out_errno; /* why a write to stdout failed first, or 0 */

/* Writes s to stdout, noting a failure. */
static void emit(const char *s) {
  if (fputs(s, stdout) == EOF && !out_errno)
    out_errno = errno ? errno : EIO;
}

/* Flushes stdout: true when all that was written reached it. */
static bool output_flushed(void) {
  errno = 0;
  if (fflush(stdout) != 0 && !out_errno)
    out_errno = errno ? errno : EIO;
  if (ferror(stdout) && !out_errno)
    out_errno = EIO;
  return !out_errno;
}

/* A command's exit status once its output is checked: 1 with a message
 * when some of it could not be written (a usage error stays 2). */
static int output_checked(int rc) {
  if (output_flushed())
    return rc;
  fprintf(stderr, "spotlab: cannot write the output: %s\n", strerror(out_errno));
  return rc == 2 ? 2 : 1;
}

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

/* What a command's i-th argument is, for a message. */
static const char *arg_role(const char *cmd, const struct opts *o, int i) {
  if (!strcmp(cmd, "logs") || !strcmp(cmd, "show") || !strcmp(cmd, "rerun") || !strcmp(cmd, "cancel"))
    return "the job id";
  if (!strcmp(cmd, "inject"))
    return i == 1 ? "the instance id" : "the action";
  if (!strcmp(cmd, "sessions"))
    return i == 1 ? "the session name" : "the subcommand";
  if (!strcmp(cmd, "data"))
    return i == 1 ? "the hash" : "the subcommand";
  if (!strcmp(cmd, "budget"))
    return i == 2 && o->n_pos == 4 ? "the group or user name" : i == 0 ? "the subcommand" : "an argument";
  return "an argument";
}

/* 0, or 2 after a message: arguments that go into requests are UTF-8 text. */
static int check_text(const char *cmd, const struct opts *o) {
  for (int i = 0; i < o->n_pos; i++)
    if (!sl_json_utf8_ok(o->pos[i], strlen(o->pos[i]))) {
      fprintf(stderr, "spotlab %s: %s (argument %d) is not UTF-8 text\n", cmd, arg_role(cmd, o, i), i + 1);
      return 2;
    }
  if (o->user && !sl_json_utf8_ok(o->user, strlen(o->user))) {
    fprintf(stderr, "spotlab %s: the user name (--user) is not UTF-8 text\n", cmd);
    return 2;
  }
  return 0;
}

/* Whether cmd takes option opt; says so when not. */
static bool takes(const char *cmd, unsigned allowed, unsigned opt, const char *arg) {
  if (allowed & opt)
    return true;
  fprintf(stderr, "spotlab %s: %s takes no option '%s' (spotlab help lists what each command takes)\n", cmd,
          cmd, arg);
  return false;
}

/* Whether a is the option name, alone or as name=VALUE. */
static bool is_option(const char *a, const char *name) {
  size_t n = strlen(name);
  return !strncmp(a, name, n) && (!a[n] || a[n] == '=');
}

/* The value of the option at argv[*i] (name=VALUE, or the next argument,
 * which *i then passes); NULL after a usage message when there is none. */
static const char *option_value(const char *cmd, const char *name, const char *example, int argc, char **argv,
                                int *i) {
  const char *a = argv[*i] + strlen(name);
  if (*a == '=')
    return a + 1;
  if (*i + 1 < argc)
    return argv[++*i];
  fprintf(stderr, "spotlab %s: %s needs a value (%s %s)\n", cmd, name, name, example);
  return NULL;
}

/* 0, or 2 after a usage message. */
static int parse(int argc, char **argv, unsigned allowed, struct opts *o) {
  const char *cmd = argv[1];
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--json") == 0) {
      if (!takes(cmd, allowed, OPT_JSON, a))
        return 2;
      o->json = true;
    } else if (strcmp(a, "--force") == 0) {
      if (!takes(cmd, allowed, OPT_FORCE, a))
        return 2;
      o->force = true;
    } else if (strcmp(a, "-f") == 0 || strcmp(a, "--follow") == 0) {
      if (!takes(cmd, allowed, OPT_FOLLOW, a))
        return 2;
      o->follow = true;
    } else if (is_option(a, "--notice")) {
      if (!takes(cmd, allowed, OPT_NOTICE, "--notice") ||
          !(o->notice = option_value(cmd, "--notice", "120s", argc, argv, &i)))
        return 2;
    } else if (is_option(a, "--user")) {
      if (!takes(cmd, allowed, OPT_USER, "--user") || !(o->user = option_value(cmd, "--user", "NAME", argc, argv, &i)))
        return 2;
      if (!*o->user) {
        fprintf(stderr, "spotlab %s: --user needs a user name, not ''\n", cmd);
        return 2;
      }
    } else if (a[0] == '-' && a[1] && !isdigit((unsigned char)a[1]) && a[1] != '.') {
      /* (a negative number is an argument, an amount, for its command to judge) */
      fprintf(stderr, "spotlab %s: unknown option '%s'\n", cmd, a);
      return 2;
    } else if (o->n_pos < (int)(sizeof o->pos / sizeof *o->pos))
      o->pos[o->n_pos++] = a;
    else {
      fprintf(stderr, "spotlab %s: too many arguments\n", cmd);
      return 2;
    }
  }
  return check_text(cmd, o);
}

/* 0, or 2 after a message: SPOTLAB_TOKEN as hello can carry it. */
static int check_token(void) {
  const char *t = getenv("SPOTLAB_TOKEN");
  if (!t || !*t)
    return 0;
  if (strlen(t) > TOKEN_MAX_BYTES) {
    fprintf(stderr, "spotlab: SPOTLAB_TOKEN is too long (%zu bytes; a token has at most %d)\n", strlen(t),
            TOKEN_MAX_BYTES);
    return 2;
  }
  if (!sl_json_utf8_ok(t, strlen(t))) {
    fprintf(stderr, "spotlab: SPOTLAB_TOKEN is not UTF-8 text\n");
    return 2;
  }
  return 0;
}

static void print_json(const json_t *v) {
  char *s = json_dumps(v, JSON_INDENT(2) | JSON_SORT_KEYS);
  if (s) {
    emit(s);
    emit("\n");
  }
  free(s);
}

/* One JSON value on one line (JSON lines). */
static void print_line(const json_t *v) {
  char *s = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
  if (s) {
    emit(s);
    emit("\n");
  }
  free(s);
}

static void print_text(char *text) {
  if (text)
    emit(text);
  free(text);
}

/* A reply printed whole under --json: without the protocol's own fields. */
static void print_reply_json(const json_t *reply) {
  json_t *copy = json_copy((json_t *)reply);
  if (!copy) {
    print_json(reply);
    return;
  }
  json_object_del(copy, "ok");
  json_object_del(copy, "re");
  json_object_del(copy, "type");
  json_object_del(copy, "id");
  print_json(copy);
  json_decref(copy);
}

/* Runs one request (taken): the owned reply, or NULL after a message. */
static json_t *request(struct cli_conn *conn, const char *cmd, json_t *req) {
  json_t *reply = NULL;
  char err[800];
  if (cli_request(conn, req, TIMEOUT_MS, &reply, err, sizeof err) < 0) {
    fprintf(stderr, "spotlab %s: %s\n", cmd, err);
    return NULL;
  }
  return reply;
}

/* Runs one request and prints the reply with render (or as JSON). */
static int simple(struct cli_conn *conn, const char *cmd, json_t *req, bool json, const char *json_key,
                  char *(*render)(const json_t *)) {
  json_t *reply = request(conn, cmd, req);
  if (!reply)
    return 1;
  const json_t *part = json_key ? json_object_get(reply, json_key) : NULL;
  if (json && part)
    print_json(part);
  else if (json)
    print_reply_json(reply);
  else if (render)
    print_text(render(reply));
  json_decref(reply);
  return 0;
}

/* The sessions, none of them this process's own. */
static char *format_sessions(const json_t *reply) { return jk_format_sessions(reply, NULL); }
static char *format_uploads(const json_t *reply) { return jk_format_uploads(reply, "spotlab data rm"); }

/* ---- logs --------------------------------------------------------------- */

/* The live progress line goes to a terminal that takes escapes (not
 * TERM=dumb); elsewhere every event is a line of its own. */
struct follow_state {
  struct jk_display *d; /* made at the first event, under the job's canonical id */
  bool tty, json, bar_drawn, no_memory;
  long long first_us;
};


/* The terminal's width in columns: stdout's, else $COLUMNS, else 80. */
static int term_width(void) {
  struct winsize ws;
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
    return ws.ws_col;
  const char *env = getenv("COLUMNS");
  char *end;
  long n = env ? strtol(env, &end, 10) : 0;
  if (env && *env && !*end && n > 0 && n <= 10000)
    return (int)n;
  return 80;
}

/* The progress line, one column short of the width so it never wraps. */
static char *bar_line(const struct follow_state *f) {
  int w = term_width() - 1;
  return jk_display_line(f->d, w > 0 ? w : 1);
}

static void clear_bar(struct follow_state *f) {
  if (f->bar_drawn)
    emit("\r\033[K");
  f->bar_drawn = false;
}

static bool on_event(void *ud, const json_t *ev) {
  struct follow_state *f = ud;
  if (!f->d && !(f->d = jk_display_new(sl_json_get_str(ev, "job", ""), ""))) {
    f->no_memory = true;
    return false;
  }
  if (jk_display_event(f->d, ev) <= 0)
    return true;
  if (!f->first_us)
    f->first_us = (long long)sl_json_get_int(ev, "time_us", 0);
  const char *kind = sl_json_get_str(ev, "event", "");
  if (f->json) {
    print_line(ev);
  } else if (!f->tty || strcmp(kind, "metric") != 0) {
    clear_bar(f);
    if (strcmp(kind, "output") == 0 && f->tty) {
      emit(sl_json_get_str(ev, "text", "")); /* one line, without its line end */
      emit("\n");
    } else
      print_text(jk_format_event(ev, f->first_us));
  }
  if (f->tty && !f->json) {
    char *line = bar_line(f);
    if (line) {
      clear_bar(f);
      emit(line);
      f->bar_drawn = true;
    }
    free(line);
  }
  /* a closed pipe or a full disk ends following at once */
  return output_flushed() && !jk_display_finished(f->d);
}

static void on_link(void *ud, bool up) {
  struct follow_state *f = ud;
  clear_bar(f);
  output_flushed();
  fprintf(stderr, up ? "spotlab logs: the gateway is back; following again\n"
                     : "spotlab logs: gateway unreachable; waiting for it to come back...\n");
}

static int logs_follow(struct cli_conn *conn, const char *job, bool json) {
  const char *term = getenv("TERM");
  struct follow_state f = {.tty = isatty(STDOUT_FILENO) == 1 && !(term && !strcmp(term, "dumb")), .json = json};
  /* Ctrl-C ends following, so the line is ended */
  int wake = cli_wake_on_signal(conn, SIGINT);
  cli_set_link_fn(conn, on_link, &f);
  char err[800];
  json_t *reply = NULL;
  int r = cli_follow(conn, job, 0, on_event, &f, &reply, err, sizeof err);
  cli_set_link_fn(conn, NULL, NULL);
  if (wake == 0)
    cli_unwake_signal(conn);
  if (f.bar_drawn) {
    clear_bar(&f);
    print_text(bar_line(&f));
    emit("\n");
  }
  char name[32];
  snprintf(name, sizeof name, "%s", sl_json_get_str(json_object_get(reply, "job"), "job", job));
  json_decref(reply);
  int rc = 0;
  if (!output_flushed()) {
    rc = 1; /* main says why */
  } else if (f.no_memory) {
    fprintf(stderr, "spotlab logs: out of memory\n");
    rc = 1;
  } else if (r < 0) {
    fprintf(stderr, "spotlab logs: %s\n", err);
    rc = 1;
  } else if (strcmp(jk_display_state(f.d), "succeeded") != 0) {
    fprintf(stderr, "spotlab logs: job %s %s%s%s\n", name, jk_display_state(f.d),
            *jk_display_reason(f.d) ? ": " : "", jk_display_reason(f.d));
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
    json_t *req = json_pack("{s:s, s:s, s:I, s:i}", "type", "logs", "job", job, "after", (json_int_t)after, "limit",
                            LOGS_PAGE);
    json_t *reply = request(conn, "logs", req);
    if (!reply)
      return 1;
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
    bool more = sl_json_get_bool(reply, "more", false) && json_array_size(events) && !out_errno;
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
  json_t *reply = request(conn, "show", json_pack("{s:s, s:s}", "type", "record", "job", o->pos[0]));
  if (!reply)
    return 1;
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
  json_t *reply = request(conn, "rerun", json_pack("{s:s, s:s, s:b}", "type", "rerun", "job", o->pos[0], "force",
                                                    o->force));
  if (!reply)
    return 1;
  char err[800], job[32];
  snprintf(job, sizeof job, "%s", sl_json_get_str(reply, "job", ""));
  json_decref(reply);
  printf("%s: a rerun of %s (its spec, definitions and seed); waiting for it to start\n", job, o->pos[0]);
  if (!output_flushed())
    return 1;
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
  if (o->notice && strcmp(o->pos[0], "preempt") != 0) {
    fprintf(stderr, "spotlab inject: --notice is for preempt only (%s gives no notice)\n", o->pos[0]);
    return 2;
  }
  if (o->notice && sl_opt_parse_duration(o->notice, &notice_us) < 0) {
    fprintf(stderr, "spotlab inject: --notice takes a duration such as 120s or 2m, not '%s'\n", o->notice);
    return 2;
  }
  if (notice_us < NOTICE_MIN_US || notice_us > (int64_t)NOTICE_MAX_S * SL_US_PER_S) {
    fprintf(stderr, "spotlab inject: --notice must be from 1s to %ds (24h), not '%s'"
            " (spotlab inject kill takes an instance without notice)\n", NOTICE_MAX_S, o->notice);
    return 2;
  }
  json_t *req = json_pack("{s:s, s:s, s:s, s:f}", "type", "inject", "action", o->pos[0], "instance", o->pos[1],
                          "notice_s", (double)notice_us / SL_US_PER_S);
  json_t *reply = request(conn, "inject", req);
  if (!reply)
    return 1;
  printf("%s injected on %s\n", o->pos[0], o->pos[1]);
  json_decref(reply);
  return 0;
}

static int cancel(struct cli_conn *conn, const struct opts *o) {
  if (o->n_pos != 1) {
    fprintf(stderr, "usage: spotlab cancel JOB\n");
    return 2;
  }
  json_t *reply = request(conn, "cancel", json_pack("{s:s, s:s}", "type", "cancel", "job", o->pos[0]));
  if (!reply)
    return 1;
  printf("cancel requested for %s\n", o->pos[0]);
  json_decref(reply);
  return 0;
}

/* A listing of another user's (--user): an empty one names them, where the
 * shared text says "of yours". */
static int listing(struct cli_conn *conn, const char *cmd, json_t *req, const struct opts *o, const char *key,
                   char *(*render)(const json_t *)) {
  if (!o->user || o->json)
    return simple(conn, cmd, req, o->json, key, render);
  json_t *reply = request(conn, cmd, req);
  if (!reply)
    return 1;
  char *text = render(reply);
  char *yours = text && !json_array_size(json_object_get(reply, key)) ? strstr(text, " of yours ") : NULL;
  if (yours) {
    *yours = '\0';
    printf("%s of %s's %s", text, o->user, yours + 10);
    free(text);
  } else {
    print_text(text);
  }
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
  if (o->n_pos && !*o->pos[1]) {
    fprintf(stderr, "spotlab sessions rm: the session name is empty\n");
    return 2;
  }
  json_t *req = o->n_pos ? json_pack("{s:s, s:s}", "type", "session.delete", "session", o->pos[1])
                         : json_pack("{s:s}", "type", "sessions");
  if (req && o->user)
    json_object_set_new(req, "user", json_string(o->user));
  if (!o->n_pos)
    return listing(conn, "sessions", req, o, "sessions", format_sessions);
  return simple(conn, "sessions rm", req, o->json, NULL, jk_format_session_deleted);
}

/* data, or data rm SHA256: a stored data file deleted (the start of its
 * hash is enough when it names one). */
static int data(struct cli_conn *conn, const struct opts *o) {
  if (o->n_pos && (strcmp(o->pos[0], "rm") || o->n_pos != 2)) {
    fprintf(stderr, "usage: spotlab data [rm SHA256] [--user USER] [--json]\n");
    return 2;
  }
  if (o->n_pos && !*o->pos[1]) {
    fprintf(stderr, "spotlab data rm: the hash is empty\n");
    return 2;
  }
  json_t *req = o->n_pos ? json_pack("{s:s, s:s}", "type", "data.delete", "sha256", o->pos[1])
                         : json_pack("{s:s}", "type", "data.list");
  if (req && o->user)
    json_object_set_new(req, "user", json_string(o->user));
  if (!o->n_pos)
    return listing(conn, "data", req, o, "uploads", format_uploads);
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
  if (check_token() != 0)
    return 2;
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

static int command(int argc, char **argv) {
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
      if (parse(argc, argv, commands[i].opts, &o) != 0)
        return 2;
      return run(argv[1], &o);
    }
  }
  fprintf(stderr, "spotlab: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}

int main(int argc, char **argv) {
  sl_log_init("spotlab");
  return output_checked(command(argc, argv));
}
