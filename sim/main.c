/* spotlab-sim: how a job of N steps fares on a spot market replayed from a
 * trace. With --policy it evaluates a placement policy instead (eval.c). It starts a private embedded gateway whose local provider replays
 * the trace at a high time_scale, submits a %%run job that simulates the
 * training run in simulated time, follows the job's events until it ends
 * and prints the report (report.c). Exit status: 0 when the job succeeded,
 * 1 on any failure, 2 on a usage error. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conn.h"
#include "sim.h"
#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#define REQUEST_TIMEOUT_MS 15000
/* The worker relays at most 100 output lines per second per job, and the
 * job prints one per step. */
#define MIN_STEP_WALL_S 0.012
/* Wall time a new instance takes from launch to the job's first step on
 * this machine (worker start, registration, the script's start), generous:
 * a capacity window shorter than this (in simulated time) is useless. */
#define START_WALL_S 0.5

struct args {
  const char *trace, *type;
  struct sim_job job;
  bool auto_every, json, events;
  bool unknown_type; /* the catalog has no --type: a usage error */
  double timeout_s;
  struct sim_trace *capacity; /* what the trace offers, for the default timeout */
};

static void usage(FILE *f) {
  fputs("usage: spotlab-sim --trace PATH --steps N [--step-s SECONDS] [--checkpoint-every STEPS|auto]\n"
        "                   [--checkpoint-s SECONDS] [--time-scale X] [--type TYPE] [--timeout SECONDS] [--json] [--events]\n"
        "  --trace PATH            spot trace ({\"metadata\":{\"gap_seconds\":G},\"data\":[n,...]})\n"
        "  --steps N               steps of the simulated training job\n"
        "  --step-s SECONDS        simulated seconds per step (default 60)\n"
        "  --checkpoint-every K    steps between checkpoints, 0 for none, auto for Young/Daly (default auto)\n"
        "  --checkpoint-s SECONDS  simulated seconds one checkpoint takes (default 10)\n"
        "  --time-scale X          simulated seconds per wall second (default 1000)\n"
        "  --type TYPE             instance type (default g5.xlarge)\n"
        "  --timeout SECONDS       give up after this many wall seconds (default: from the job and the trace)\n"
        "  --json                  print the report as JSON\n"
        "  --events                print each job event on stderr as it arrives\n"
        "This mode replays a job through a real gateway at accelerated time. With --policy NAME,\n"
        "spotlab-sim instead evaluates a placement policy on traces in the tick model\n"
        "(spotlab-sim --policy spotlab --help lists that mode's options; docs/sim.md);\n"
        "spotlab-sim --batch evaluates one such job a line of its input (JSON arrays of\n"
        "those options) and prints one JSON object a line.\n",
        f);
}

/* 0, 1 after --help, or 2 after a usage message. */
static int parse(int argc, char **argv, struct args *a) {
  *a = (struct args){.type = "g5.xlarge", .auto_every = true,
                     .job = {.step_s = 60, .checkpoint_s = 10, .time_scale = 1000}};
  double steps = -1, x;
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i];
    if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
      usage(stdout);
      return 1;
    }
    if (!strcmp(o, "--json") || !strcmp(o, "--events")) {
      *(o[2] == 'j' ? &a->json : &a->events) = true;
      continue;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "spotlab-sim: unknown option or missing value: '%s'\n", o);
      usage(stderr);
      return 2;
    }
    const char *v = argv[++i];
    int r = 0;
    if (!strcmp(o, "--trace"))
      a->trace = v;
    else if (!strcmp(o, "--type"))
      a->type = v;
    else if (!strcmp(o, "--steps"))
      r = sim_num_arg(stderr, o, v, true, 1, 1e9, &steps);
    else if (!strcmp(o, "--step-s"))
      r = sim_num_arg(stderr, o, v, false, 0.001, 86400, &a->job.step_s);
    else if (!strcmp(o, "--checkpoint-s"))
      r = sim_num_arg(stderr, o, v, false, 0, 86400, &a->job.checkpoint_s);
    else if (!strcmp(o, "--time-scale"))
      r = sim_num_arg(stderr, o, v, false, 0.001, 1e6, &a->job.time_scale);
    else if (!strcmp(o, "--timeout"))
      r = sim_num_arg(stderr, o, v, false, 1, 1e7, &a->timeout_s);
    else if (!strcmp(o, "--checkpoint-every")) {
      a->auto_every = !strcmp(v, "auto");
      if (!a->auto_every && (r = sim_num_arg(stderr, o, v, true, 0, 1e9, &x)) == 0)
        a->job.checkpoint_every = (int64_t)x;
    } else {
      fprintf(stderr, "spotlab-sim: unknown option '%s'\n", o);
      usage(stderr);
      return 2;
    }
    if (r < 0)
      return 2;
  }
  if (!a->trace || steps < 1) {
    fprintf(stderr, "spotlab-sim: --trace and --steps are required\n");
    usage(stderr);
    return 2;
  }
  a->job.steps = (int64_t)steps;
  char err[1200];
  if (sim_trace_load(a->trace, &a->capacity, err, sizeof err) < 0) {
    fprintf(stderr, "spotlab-sim: %s\n", err);
    return 2;
  }
  if (sim_trace_first_capacity_s(a->capacity) < 0) {
    fprintf(stderr, "spotlab-sim: %s offers no spot capacity at any tick: the job could never start\n",
            a->trace);
    return 2;
  }
  if (a->job.step_s / a->job.time_scale < MIN_STEP_WALL_S) {
    fprintf(stderr,
            "spotlab-sim: a step would last %.1f wall ms; at least %.0f ms are needed (the worker relays at"
            " most 100 output lines a second): lower --time-scale or raise --step-s\n",
            a->job.step_s / a->job.time_scale * 1000, MIN_STEP_WALL_S * 1000);
    return 2;
  }
  return 0;
}

/* One request with its reply checked; the reply is owned by the caller when
 * ret is non-NULL. */
/* SIGINT or SIGTERM: the job is cancelled and the private gateway stopped. */
static volatile sig_atomic_t g_stop;

static void on_stop(int sig) { g_stop = sig; }

static int request(struct cli_conn *c, json_t *req, json_t **ret) {
  char err[700];
  json_t *reply = NULL;
  int r = cli_request(c, req, REQUEST_TIMEOUT_MS, &reply, err, sizeof err);
  if (r == SL_EINTERRUPTED)
    g_stop = cli_woken_by(c);
  if (r < 0) {
    fprintf(stderr, "spotlab-sim: %s\n", err);
    return r;
  }
  if (ret)
    *ret = reply;
  else
    json_decref(reply);
  return 0;
}

/* Whether name is one of list's ", "-separated names ("" counts as listed:
 * an entry without a type adds nothing). */
static bool listed(const char *list, const char *name) {
  size_t n = strlen(name);
  if (!n)
    return true;
  for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
    if ((p == list || p[-1] == ' ') && (p[n] == ',' || p[n] == '\0'))
      return true;
  return false;
}

/* The market's entry for --type: -ENOENT and unknown_type, said on stderr,
 * when the catalog has no such type. With --checkpoint-every auto, the
 * interval by Young/Daly: sqrt(2 × checkpoint time × mean time to
 * preemption), with the mean the provider derives from the trace for this
 * type. */
static int check_type(struct cli_conn *c, struct args *a) {
  json_t *reply = NULL;
  int r = request(c, json_pack("{s:s}", "type", "market"), &reply);
  if (r < 0)
    return r;
  double mttp = 0;
  bool found = false;
  size_t i;
  json_t *t;
  char offered[512] = "";
  size_t used = 0;
  json_array_foreach(json_object_get(reply, "types"), i, t) {
    const char *name = sl_json_get_str(t, "type", "");
    if (!strcmp(name, a->type)) {
      found = true;
      mttp = sl_json_get_num(t, "mean_time_to_preempt_s", 0);
    }
    if (used < sizeof offered && !listed(offered, name)) { /* one entry a zone */
      int n = snprintf(offered + used, sizeof offered - used, "%s%s", used ? ", " : "", name);
      used += n > 0 ? (size_t)n : 0;
    }
  }
  json_decref(reply);
  if (!found) {
    fprintf(stderr, "spotlab-sim: --type %s: no such instance type is offered (offered: %s)\n", a->type,
            offered[0] ? offered : "none");
    a->unknown_type = true;
    return -ENOENT;
  }
  if (!a->auto_every)
    return 0;
  double c_s = a->job.checkpoint_s > 0 ? a->job.checkpoint_s : a->job.step_s;
  if (mttp <= 0) {
    a->job.checkpoint_every = 0; /* the trace never takes capacity away */
    return 0;
  }
  double k = sqrt(2.0 * c_s * mttp) / a->job.step_s;
  a->job.checkpoint_every = k < 1 ? 1 : (int64_t)llround(k);
  return 0;
}

static bool on_event(void *ud, const json_t *event) {
  struct sim_report *rep = ud;
  if (rep->trace_events) {
    char *s = json_dumps(event, JSON_COMPACT);
    if (s)
      fprintf(stderr, "%s\n", s);
    free(s);
  }
  return !sim_report_event(rep, event);
}


/* The wall seconds to wait for the job: ten times its own work (the
 * gateway, worker and script starts on a busy machine), plus twice the time
 * the trace keeps it waiting. The trace's capacity is replayed from its
 * start, so a trace whose first ticks have none holds the job in the queue
 * for that long; a timeout from the work alone gave up on such a job while
 * it was still queued. Says on stderr when the job will wait, and when the
 * trace's windows look too short for it to finish. */
static double default_timeout_s(const struct args *a) {
  const struct sim_job *j = &a->job;
  double work_s = (double)j->steps * (j->step_s + (j->checkpoint_every > 0
                                                       ? j->checkpoint_s / (double)j->checkpoint_every
                                                       : 0));
  double first_s = sim_trace_first_capacity_s(a->capacity);
  double done_s = sim_trace_time_for_s(a->capacity, work_s, START_WALL_S * j->time_scale);
  double wait_s = done_s - work_s;
  if (done_s < 0) {
    fprintf(stderr,
            "spotlab-sim: warning: the trace's capacity windows are too short for this job at time_scale %g"
            " (a new instance takes about %.1f wall s, %.0f simulated s, to start): it may never finish\n",
            j->time_scale, START_WALL_S, START_WALL_S * j->time_scale);
    wait_s = sim_trace_length_s(a->capacity); /* one pass, then give up */
  }
  if (first_s > 0)
    fprintf(stderr,
            "spotlab-sim: the trace offers no spot capacity for its first %.0f simulated s (%.1f wall s at"
            " time_scale %g); the job waits in the queue until then\n",
            first_s, first_s / j->time_scale, j->time_scale);
  return 60 + 10 * work_s / j->time_scale + 2 * (wait_s > first_s ? wait_s : first_s) / j->time_scale;
}

static int simulate(struct args *a, struct sim_report *rep) {
  struct cli_conn *c = cli_conn_new();
  if (!c)
    return -ENOMEM;
  int r = 0;
  char *script = NULL;
  json_t *reply = NULL;
  /* SIGALRM: the deadline */
  if ((r = cli_wake_on_signal(c, SIGINT)) < 0 || (r = cli_wake_on_signal(c, SIGTERM)) < 0 ||
      (r = cli_wake_on_signal(c, SIGALRM)) < 0)
    goto out;
  if (g_stop) { /* while the gateway started */
    r = SL_EINTERRUPTED;
    goto out;
  }
  if ((r = check_type(c, a)) < 0)
    goto out;
  if (!(script = sim_job_script(&a->job))) {
    r = -ENOMEM;
    goto out;
  }
  int64_t submit_us = sl_time_real_us();
  r = request(c, json_pack("{s:s, s:s, s:s, s:{s:s, s:s}}", "type", "submit", "kind", "run", "script", script,
                           "options", "spot", "yes", "instance", a->type),
              &reply);
  if (r < 0)
    goto out;
  char job[32];
  snprintf(job, sizeof job, "%s", sl_json_get_str(reply, "job", ""));
  json_decref(reply);
  reply = NULL;
  sim_report_init(rep, &a->job, submit_us);
  rep->trace_events = a->events;

  double timeout_s = default_timeout_s(a);
  if (a->timeout_s > 0)
    timeout_s = a->timeout_s;
  alarm(timeout_s < UINT_MAX ? (unsigned)ceil(timeout_s) : UINT_MAX); /* a default from a long job may pass it */
  char err[700];
  r = cli_follow(c, job, 0, on_event, rep, &reply, err, sizeof err);
  alarm(0);
  if (r == SL_EINTERRUPTED && cli_woken_by(c) != SIGALRM) {
    g_stop = cli_woken_by(c);
    fprintf(stderr, "spotlab-sim: interrupted; %s is cancelled\n", job);
    request(c, json_pack("{s:s, s:s}", "type", "cancel", "job", job), NULL);
  } else if (r < 0) {
    if (r == SL_EINTERRUPTED)
      fprintf(stderr, "spotlab-sim: %s did not end within %.0f s (it was %s%s); --timeout gives it longer\n",
              job, timeout_s, rep->last_state[0] ? rep->last_state : "queued",
              rep->attempts ? "" : ", never placed: no spot capacity for it yet");
    else
      fprintf(stderr, "spotlab-sim: %s\n", err);
    request(c, json_pack("{s:s, s:s}", "type", "cancel", "job", job), NULL);
  }
out:
  json_decref(reply);
  free(script);
  cli_conn_free(c);
  return r;
}

int main(int argc, char **argv) {
  sl_log_init("spotlab-sim");
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--policy") || !strcmp(argv[i], "--batch")) /* no gateway */
      return sim_eval_main(argc, argv);
  struct args a;
  int r = parse(argc, argv, &a);
  if (r) {
    sim_trace_free(a.capacity);
    return r == 1 ? 0 : 2;
  }
  char err[1200];
  struct sim_home *h = NULL;
  /* from here on a stop removes what the run made, its gateway and workers too */
  struct sigaction sa = {.sa_handler = on_stop, .sa_flags = SA_RESTART};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  if ((r = sim_home_new(a.trace, a.job.time_scale, &h, err, sizeof err)) < 0 ||
      (r = sim_home_start(h, err, sizeof err)) < 0) {
    fprintf(stderr, "spotlab-sim: %s\n", err);
    sim_home_free(h);
    sim_trace_free(a.capacity);
    return 1;
  }
  struct sim_report rep;
  sim_report_init(&rep, &a.job, sl_time_real_us());
  r = simulate(&a, &rep);
  h = sim_home_free(h);
  a.capacity = sim_trace_free(a.capacity);
  if (g_stop)
    return 128 + g_stop;
  if (r < 0)
    return a.unknown_type ? 2 : 1;
  if (a.json) {
    json_t *j = sim_report_json(&rep);
    char *s = j ? json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    if (s)
      printf("%s\n", s);
    free(s);
    json_decref(j);
  } else {
    sim_report_print(&rep, stdout);
  }
  if (strcmp(rep.state, "succeeded") != 0) {
    fprintf(stderr, "spotlab-sim: the job ended %s\n", rep.state);
    return 1;
  }
  return 0;
}
