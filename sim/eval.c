/* spotlab-sim --policy: evaluates a placement policy on spot traces in the
 * tick model (sl_policy.h), without a gateway. Several --trace files are
 * several zones aligned by tick. Exit status: 0 after the report (a missed
 * deadline included), 1 when the job cannot be evaluated (a deadline that
 * not even on-demand from the first tick keeps, for --policy optimal), 2 on
 * a usage error. Reading a zone's file and the evaluation itself
 * (sim_zone_load, sim_eval_setup, sim_eval_run) say what went wrong in a
 * sentence and print nothing, so the tests call the code --policy runs. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "sim.h"
#include "sl_err.h"
#include "sl_opt.h"
#include "sl_policy.h"
#include "sl_trace.h"

/* p3.2xlarge (1 V100, the traces' usual type) in us-west-2: on-demand, and
 * the spot price the traces' own price columns hold. */
#define DEFAULT_SPOT_USD 0.918
#define DEFAULT_ONDEMAND_USD 3.06

struct eval_args {
  const char *policy;
  struct sim_zone zones[SL_POLICY_ZONES_MAX];
  size_t n_zones;
  struct sim_eval_job job;
  bool json;
};

static void eval_usage(FILE *f) {
  fputs("usage: spotlab-sim --policy NAME --trace FILE [--trace FILE ...] --start-tick N --work HOURS\n"
        "                   --deadline HOURS --restart-overhead HOURS [--spot-price USD --ondemand-price USD]\n"
        "                   [--nodes N] [--json]\n"
        "  --policy NAME             spotlab (the gateway's), uniform-progress, greedy, optimal, ondemand\n"
        "  --trace FILE              a zone's spot trace; several are several zones aligned by tick\n"
        "  --start-tick N            the job starts at this tick (earlier ticks are history)\n"
        "  --work HOURS              hours of progress the job needs\n"
        "  --deadline HOURS          hours from the start by which it must finish\n"
        "  --restart-overhead HOURS  hours billed without progress at each (re)start or switch\n"
        "  --spot-price USD          spot price per hour where a trace has no prices (default 0.918)\n"
        "  --ondemand-price USD      on-demand price per hour (default 3.06)\n"
        "  --nodes N                 instances the job needs at once (spot needs N in a zone; default 1)\n"
        "  --json                    one JSON object\n"
        "spotlab-sim --batch: one job a line of standard input, a JSON array of the options above\n"
        "(--json implied), one JSON object a line of output: the report, or {\"exit\": N, \"error\": ...}\n",
        f);
}

int sim_num_arg(FILE *errf, const char *name, const char *v, bool whole, double lo, double hi,
                double *ret) {
  char why[256];
  double x;
  /* decimal only: strtod alone takes "0x10" as 16, and "inf" */
  if (sl_opt_parse_number(name, v, whole, lo, hi, &x, why, sizeof why) < 0) {
    fprintf(errf, "spotlab-sim: %s must be %s in %g..%g, not '%s'\n", name,
            whole ? "a whole number" : "a number", lo, hi, v);
    return -EINVAL;
  }
  *ret = x;
  return 0;
}

int sim_zone_load(struct sim_zone *z, char *err, size_t err_size) {
  /* the gateway's reader and bounds; shorter ticks than a second would make
   * the command line's hours more ticks than an int64_t holds */
  int r = sl_trace_read(z->path, &z->trace, err, err_size);
  return r < 0 ? (r == -ENOMEM ? r : -EINVAL) : 0;
}

void sim_zone_done(struct sim_zone *z) { z->trace = sl_trace_free(z->trace); }

/* -EINVAL with a sentence in err when z's ticks are not z0's. */
static int same_ticks(const struct sim_zone *z, const struct sim_zone *z0, char *err,
                      size_t err_size) {
  if (z->trace->gap_s == z0->trace->gap_s)
    return 0;
  snprintf(err, err_size, "%s has ticks of %g s, %s of %g s: zones must share their ticks", z->path,
           z->trace->gap_s, z0->path, z0->trace->gap_s);
  return -EINVAL;
}

int sim_eval_setup(struct sim_eval *e, const struct sim_zone *zones, size_t n_zones,
                   const struct sim_eval_job *job, char *err, size_t err_size) {
  if (!n_zones || n_zones > SL_POLICY_ZONES_MAX) {
    snprintf(err, err_size, "between 1 and %d zones, not %zu", SL_POLICY_ZONES_MAX, n_zones);
    return -EINVAL;
  }
  *e = (struct sim_eval){.hours = *job, .n_zones = n_zones, .gap_s = zones[0].trace->gap_s};
  for (size_t i = 0; i < n_zones; i++) {
    if (same_ticks(&zones[i], &zones[0], err, err_size) < 0)
      return -EINVAL;
    const struct sl_trace *t = zones[i].trace;
    e->views[i] = (struct sl_zone_view){.avail = t->capacity, .price = t->price, .n = t->n,
                                        .spot_price = job->spot_usd};
  }
  double gap = e->gap_s;
  e->ticks = (struct sl_sim_job){.window = sl_ticks_floor(job->deadline_h, gap),
                                 .work = sl_ticks_ceil(job->work_h, gap),
                                 .overhead = sl_ticks_ceil(job->overhead_h, gap)};
  e->origin = (size_t)job->start_tick;
  for (size_t i = 0; i < n_zones; i++) {
    if (e->origin + (size_t)e->ticks.window > zones[i].trace->n) {
      snprintf(err, err_size, "the window (ticks %zu..%zu) ends past %s (%zu ticks)", e->origin,
               e->origin + (size_t)e->ticks.window, zones[i].path, zones[i].trace->n);
      return -EINVAL;
    }
  }
  if (e->ticks.window < 1) {
    snprintf(err, err_size, "a deadline of %g h is shorter than one tick (%g s)", job->deadline_h,
             gap);
    return -EINVAL;
  }
  return 0;
}

int sim_eval_run(const struct sim_eval *e, struct sl_policy *pol, struct sl_sim_result *ret,
                 char *err, size_t err_size) {
  const struct sim_eval_job *a = &e->hours;
  struct sl_market_view m = {.zones = e->views, .n_zones = e->n_zones, .origin = e->origin,
                             .ondemand_price = a->od_usd, .gap_s = e->gap_s, .nodes = (int)a->nodes};
  int r = pol ? sl_policy_simulate(pol, &m, &e->ticks, ret) : sl_policy_optimal(&m, &e->ticks, ret);
  if (r == -ERANGE)
    snprintf(err, err_size, "%g h of work and %g h of overhead do not fit in a deadline of %g h,"
                            " even on on-demand", a->work_h, a->overhead_h, a->deadline_h);
  else if (r == SL_ELIMIT)
    snprintf(err, err_size, "the optimum of %lld ticks of work with an overhead of %lld ticks"
                            " would need more than 2 GiB: use a trace with longer ticks",
             (long long)e->ticks.work, (long long)e->ticks.overhead);
  else if (r < 0)
    snprintf(err, err_size, "%s", sl_strerror(r));
  return r;
}

/* 0, 1 after --help, 2 after a usage message (on errf). In a batch (one
 * job of --batch's input) --json is implied and --help is an unknown
 * option: the output is one JSON object a job. */
static int eval_parse(int argc, char **argv, bool batch, FILE *errf, struct eval_args *a) {
  *a = (struct eval_args){.job = {.start_tick = -1, .work_h = -1, .deadline_h = -1, .overhead_h = -1,
                                  .spot_usd = DEFAULT_SPOT_USD, .od_usd = DEFAULT_ONDEMAND_USD,
                                  .nodes = 1},
                          .json = batch};
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i];
    if (!batch && (!strcmp(o, "--help") || !strcmp(o, "-h"))) {
      eval_usage(stdout);
      return 1;
    }
    if (!strcmp(o, "--json")) {
      a->json = true;
      continue;
    }
    if (i + 1 >= argc) {
      fprintf(errf, "spotlab-sim: unknown option or missing value: '%s'\n", o);
      if (!batch)
        eval_usage(errf);
      return 2;
    }
    const char *v = argv[++i];
    int r = 0;
    if (!strcmp(o, "--policy"))
      a->policy = v;
    else if (!strcmp(o, "--trace")) {
      if (a->n_zones == SL_POLICY_ZONES_MAX) {
        fprintf(errf, "spotlab-sim: at most %d --trace files\n", SL_POLICY_ZONES_MAX);
        return 2;
      }
      a->zones[a->n_zones++].path = v;
    } else if (!strcmp(o, "--start-tick"))
      r = sim_num_arg(errf, o, v, true, 0, 1e9, &a->job.start_tick);
    else if (!strcmp(o, "--work"))
      r = sim_num_arg(errf, o, v, false, 1e-6, 1e5, &a->job.work_h);
    else if (!strcmp(o, "--deadline"))
      r = sim_num_arg(errf, o, v, false, 1e-6, 1e6, &a->job.deadline_h);
    else if (!strcmp(o, "--restart-overhead"))
      r = sim_num_arg(errf, o, v, false, 0, 1e4, &a->job.overhead_h);
    else if (!strcmp(o, "--spot-price"))
      r = sim_num_arg(errf, o, v, false, 0, 1e6, &a->job.spot_usd);
    else if (!strcmp(o, "--ondemand-price"))
      r = sim_num_arg(errf, o, v, false, 0, 1e6, &a->job.od_usd);
    else if (!strcmp(o, "--nodes"))
      r = sim_num_arg(errf, o, v, true, 1, 1e6, &a->job.nodes);
    else {
      fprintf(errf, "spotlab-sim: unknown option '%s'\n", o);
      if (!batch)
        eval_usage(errf);
      return 2;
    }
    if (r < 0)
      return 2;
  }
  if (!a->policy || !a->n_zones || a->job.start_tick < 0 || a->job.work_h < 0 ||
      a->job.deadline_h < 0 || a->job.overhead_h < 0) {
    fprintf(errf, "spotlab-sim: --policy, --trace, --start-tick, --work, --deadline and"
                  " --restart-overhead are required\n");
    if (!batch)
      eval_usage(errf);
    return 2;
  }
  if (a->job.start_tick != floor(a->job.start_tick) || a->job.nodes != floor(a->job.nodes)) {
    fprintf(errf, "spotlab-sim: --start-tick and --nodes are whole numbers\n");
    return 2;
  }
  return 0;
}

/* ---- the traces a batch has read ---- */

/* More than the shared traces' files: a batch over all of them reads each once. */
#define CACHE_MAX 64
/* The traces kept after a job: beyond this the cache is emptied (a job's own
 * traces, up to 16 of them, are held while it runs whatever their size). */
#define CACHE_MAX_BYTES ((size_t)1 << 30)

struct sim_trace_cache {
  struct {
    char *path;
    struct sl_trace *trace;
  } e[CACHE_MAX];
  size_t n;
  size_t bytes;                  /* the traces' arrays */
};

struct sim_trace_cache *sim_trace_cache_new(void) {
  return calloc(1, sizeof(struct sim_trace_cache));
}

static void cache_clear(struct sim_trace_cache *c) {
  for (size_t i = 0; i < c->n; i++) {
    free(c->e[i].path);
    sl_trace_free(c->e[i].trace);
  }
  c->n = 0;
  c->bytes = 0;
}

struct sim_trace_cache *sim_trace_cache_free(struct sim_trace_cache *c) {
  if (c)
    cache_clear(c);
  free(c);
  return NULL;
}

/* Points each of zones[0..n)'s trace at the cache's copy of its file, read
 * now where the cache has none. A job's zones always fit: the cache is
 * emptied first when they might not (no trace a job holds is freed under
 * it). -EINVAL or -ENOMEM with a sentence in err; the zones then hold no
 * trace. */
static int cache_load(struct sim_trace_cache *c, struct sim_zone *zones, size_t n, char *err,
                      size_t err_size) {
  if (c->n + n > CACHE_MAX)
    cache_clear(c);
  for (size_t i = 0; i < n; i++) {
    struct sim_zone *z = &zones[i];
    z->trace = NULL;
    for (size_t k = 0; k < c->n && !z->trace; k++)
      if (!strcmp(c->e[k].path, z->path))
        z->trace = c->e[k].trace;
    if (z->trace)
      continue;
    char *path = strdup(z->path);
    int r = path ? sim_zone_load(z, err, err_size) : -ENOMEM;
    if (r < 0) {
      if (!path)
        snprintf(err, err_size, "out of memory");
      free(path);
      for (size_t k = 0; k < n; k++)
        zones[k].trace = NULL;
      return r;
    }
    c->e[c->n].path = path;
    c->e[c->n].trace = z->trace;
    c->n++;
    const struct sl_trace *t = z->trace;
    c->bytes += t->n * (sizeof *t->capacity + (t->price ? sizeof *t->price : 0));
  }
  return 0;
}

/* ---- one evaluation ---- */

static json_t *hours_or_null(bool finished, double h) {
  return finished ? json_real(h) : json_null();
}

static json_t *result_json(const struct eval_args *a, const struct sim_eval *e,
                           const struct sl_sim_result *res) {
  double gap = e->gap_s, h = gap / 3600.0;
  return json_pack("{s:s,s:f,s:o,s:b,s:f,s:f,s:I,s:I,s:{s:I,s:I,s:I,s:I,s:f}}", "policy",
                   a->policy, "cost_usd", res->cost_usd, "finish_hours",
                   hours_or_null(res->finished, (double)res->finish_tick * h), "deadline_met",
                   res->deadline_met, "spot_hours", (double)res->spot_ticks * h, "ondemand_hours",
                   (double)res->ondemand_ticks * h, "preemptions", (json_int_t)res->preemptions,
                   "segments", (json_int_t)res->segments, "ticks", "window",
                   (json_int_t)e->ticks.window, "work", (json_int_t)e->ticks.work, "overhead",
                   (json_int_t)e->ticks.overhead, "start", (json_int_t)e->origin, "gap_seconds",
                   gap);
}

static void result_text(const struct eval_args *a, const struct sim_eval *e,
                        const struct sl_sim_result *res, FILE *out) {
  double h = e->gap_s / 3600.0;
  fprintf(out, "policy        %s\n", a->policy);
  fprintf(out, "cost          %.2f USD\n", res->cost_usd);
  if (res->finished)
    fprintf(out, "finished      after %.2f h (deadline %.2f h: %s)\n",
            (double)res->finish_tick * h, (double)e->ticks.window * h,
            res->deadline_met ? "met" : "missed");
  else
    fprintf(out, "finished      no\n");
  fprintf(out, "spot          %.2f h\non-demand     %.2f h\npreemptions   %lld\nsegments      %lld\n",
          (double)res->spot_ticks * h, (double)res->ondemand_ticks * h,
          (long long)res->preemptions, (long long)res->segments);
}

/* Runs the job argv[0..argc) gives (the --policy mode's options) with the
 * traces from cache (read into it where it has none). On success *ret_json
 * is the report as JSON (owned) when a->json or batch, else the text went to
 * out. Returns the exit status: 0, 1 (cannot be evaluated), 2 (usage); the
 * reason is on errf. */
static int evaluate(int argc, char **argv, bool batch, struct sim_trace_cache *cache, FILE *out,
                    FILE *errf, json_t **ret_json) {
  struct eval_args a;
  int r = eval_parse(argc, argv, batch, errf, &a);
  if (r)
    return r == 1 ? 0 : 2;
  int status = 2;
  struct sl_policy *pol = NULL;
  bool optimal = !strcmp(a.policy, "optimal");
  if (!optimal && sl_policy_new(a.policy, &pol) < 0) {
    fprintf(errf, "spotlab-sim: unknown policy '%s' (spotlab, uniform-progress, greedy, optimal,"
                  " ondemand)\n", a.policy);
    return 2;
  }
  char err[2 * PATH_MAX + 256]; /* two paths and a sentence */
  struct sim_eval e;
  if (cache_load(cache, a.zones, a.n_zones, err, sizeof err) < 0) {
    fprintf(errf, "spotlab-sim: %s\n", err);
    goto out;
  }
  for (size_t i = 0; i < a.n_zones; i++) {
    if (same_ticks(&a.zones[i], &a.zones[0], err, sizeof err) < 0) {
      fprintf(errf, "spotlab-sim: %s\n", err);
      goto out;
    }
  }
  if (sim_eval_setup(&e, a.zones, a.n_zones, &a.job, err, sizeof err) < 0) {
    fprintf(errf, "spotlab-sim: %s\n", err);
    goto out;
  }
  struct sl_sim_result res;
  status = 1;
  if (sim_eval_run(&e, pol, &res, err, sizeof err) < 0) {
    fprintf(errf, "spotlab-sim: %s\n", err);
    goto out;
  }
  if (a.json) {
    json_t *o = result_json(&a, &e, &res);
    if (!o) {
      fprintf(errf, "spotlab-sim: out of memory\n");
      goto out;
    }
    *ret_json = o;
  } else {
    result_text(&a, &e, &res, out);
  }
  status = 0;
out:
  sl_policy_free(pol);
  if (cache->bytes > CACHE_MAX_BYTES)
    cache_clear(cache); /* the job is done with them */
  return status;
}

int sim_put_json(json_t *o, FILE *out) {
  char *s = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(10)) : NULL;
  json_decref(o);
  if (!s)
    return -ENOMEM;
  int r = fprintf(out, "%s\n", s) < 0 || fflush(out) ? -EIO : 0;
  free(s);
  return r;
}

int sim_eval_main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--batch")) {
      if (argc != 2) {
        fprintf(stderr, "spotlab-sim: --batch takes no other option (each line of its input"
                        " is one job's options)\n");
        return 2;
      }
      return sim_eval_batch(stdin, stdout);
    }
  }
  struct sim_trace_cache *cache = sim_trace_cache_new();
  if (!cache) {
    fprintf(stderr, "spotlab-sim: out of memory\n");
    return 1;
  }
  json_t *o = NULL;
  int status = evaluate(argc, argv, false, cache, stdout, stderr, &o);
  sim_trace_cache_free(cache);
  if (status == 0 && o && sim_put_json(o, stdout) < 0) {
    fprintf(stderr, "spotlab-sim: cannot write the report\n");
    return 1;
  }
  return status;
}

int sim_eval_line(int argc, char **argv, struct sim_trace_cache *cache, FILE *errf,
                  json_t **ret_json) {
  return evaluate(argc, argv, true, cache, NULL, errf, ret_json);
}
