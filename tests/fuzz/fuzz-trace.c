/* Fuzz target: the spot trace files spotlab-sim reads, through both of its
 * readers, and what it does with a trace that loads: sim_zone_load and the
 * evaluation of every policy (sim_eval_setup, sim_eval_run: what --policy
 * runs), and sim_trace_load with the estimates the accelerated mode takes
 * its default timeout from (sim_trace_length_s, sim_trace_first_capacity_s,
 * sim_trace_time_for_s).
 *
 * The first input byte chooses the job; the rest is the file, or several
 * split at "\n--\n" (the zones of one --policy run, each also read by
 * sim_trace_load). Each file is handed over as a memory file (memfd, named
 * by /proc/self/fd/N). The job's bits: 0-1 the work (1, 2.5 or 13 ticks, or
 * 2 h), 2-3 the restart overhead (0, 0.5, 1 or 3 ticks; with 2 h of work 0,
 * 0.2, 1 or 3 h), 4-5 the deadline's slack past work and overhead (-1, 0, 2
 * or 9 ticks; -0.5, 0, 1 or 24 h), 6 the start tick (0 or 2), 7 the nodes
 * (1 or 2). Hours outside the command line's bounds are brought to them, so
 * every job is one spotlab-sim can be asked for; a few ticks of work keep an
 * input to milliseconds.
 *
 * Checks: a refusal comes with a sentence. A file both readers read has the
 * same length and first capacity in both. The estimates are finite:
 * the first capacity is -1 or a time within the trace, and the time by
 * which the trace gives the work is -1 (always, when it has no capacity) or
 * comes after that capacity and the overhead and within its passes and a
 * notice. Every policy's evaluation succeeds with a finite cost >= 0 and a
 * finish within the window when it says the deadline is met. When
 * on-demand from the first tick keeps the deadline (work + overhead ticks
 * within the window), the optimum exists and costs no more than any policy,
 * and every policy meets the deadline (the safety net, sl_policy_decide);
 * when it does not, the optimum is refused with -ERANGE and every policy
 * runs on on-demand from the first tick, as on-demand does. On-demand costs
 * its work and overhead ticks at its price. No input may crash, leak, hang
 * or hit undefined behaviour. */
#include "fuzz.h"
#include "sim.h"
#include "sl_err.h"
#include "sl_policy.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* the command line's default prices (eval.c) */
#define SPOT_USD 0.918
#define OD_USD 3.06

static const char *const policies[] = {"spotlab", "uniform-progress", "greedy", "ondemand"};
#define N_POLICIES (sizeof policies / sizeof policies[0])

static int fds[SL_POLICY_ZONES_MAX];
static char paths[SL_POLICY_ZONES_MAX][64];
static bool ready;

static void setup_once(void) {
  if (ready)
    return;
  for (size_t i = 0; i < SL_POLICY_ZONES_MAX; i++) {
    if ((fds[i] = memfd_create("fuzz-trace.json", 0)) < 0) {
      perror("fuzz-trace: memfd_create");
      abort();
    }
    snprintf(paths[i], sizeof paths[i], "/proc/self/fd/%d", fds[i]);
  }
  ready = true;
}

static void put_file(size_t i, const uint8_t *p, size_t len) {
  if (ftruncate(fds[i], 0) < 0 || pwrite(fds[i], p, len, 0) != (ssize_t)len)
    abort();
}

/* A refusal: a known error with a terminated, non-empty sentence. */
static void refused(int r, const char *err, size_t err_size) {
  if (r >= 0 || !memchr(err, 0, err_size) || (r != -ENOMEM && !err[0]))
    abort();
}

static double clamp(double x, double lo, double hi) { return x < lo ? lo : x > hi ? hi : x; }

/* The job the selector byte asks for, in hours, within the command line's
 * bounds. */
static struct sim_eval_job job_for(uint8_t sel, double gap_s) {
  static const double work_ticks[] = {1, 2.5, 13}, over_ticks[] = {0, 0.5, 1, 3},
                      slack_ticks[] = {-1, 0, 2, 9}, over_h[] = {0, 0.2, 1, 3},
                      slack_h[] = {-0.5, 0, 1, 24};
  unsigned w = sel & 3, o = (sel >> 2) & 3, s = (sel >> 4) & 3;
  double tick_h = gap_s / 3600.0, work_h, over, deadline_h;
  if (w == 3) {
    work_h = 2;
    over = over_h[o];
    deadline_h = work_h + over + slack_h[s];
  } else {
    work_h = work_ticks[w] * tick_h;
    over = over_ticks[o] * tick_h;
    deadline_h = (ceil(work_ticks[w]) + ceil(over_ticks[o]) + slack_ticks[s]) * tick_h;
  }
  return (struct sim_eval_job){.start_tick = sel & 64 ? 2 : 0,
                               .work_h = clamp(work_h, 1e-6, 1e5),
                               .deadline_h = clamp(deadline_h, 1e-6, 1e6),
                               .overhead_h = clamp(over, 0, 1e4),
                               .spot_usd = SPOT_USD,
                               .od_usd = OD_USD,
                               .nodes = sel & 128 ? 2 : 1};
}

static bool close_to(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b)) + 1e-12; }

/* What a result of the tick model must be, whatever the policy. */
static void check_result(const struct sl_sim_result *res, const struct sl_sim_job *t) {
  if (!isfinite(res->cost_usd) || res->cost_usd < 0 || res->spot_ticks < 0 ||
      res->ondemand_ticks < 0 || res->preemptions < 0 || res->segments < 0)
    abort();
  if (res->deadline_met && (!res->finished || res->finish_tick < 1 || res->finish_tick > t->window))
    abort();
  if (res->finished && res->spot_ticks + res->ondemand_ticks < t->work)
    abort(); /* every tick of progress is a tick billed */
}

static void evaluate(const struct sim_zone *zones, size_t n_zones, uint8_t sel) {
  char err[2048];
  memset(err, 'x', sizeof err);
  err[sizeof err - 1] = 0;
  struct sim_eval_job job = job_for(sel, zones[0].trace->gap_s);
  struct sim_eval e;
  int r = sim_eval_setup(&e, zones, n_zones, &job, err, sizeof err);
  if (r < 0) {
    if (r != -EINVAL)
      abort();
    refused(r, err, sizeof err);
    return;
  }
  const struct sl_sim_job *t = &e.ticks;
  if (t->window < 1 || t->work < 1 || t->overhead < 0)
    abort();
  bool feasible = t->work + t->overhead <= t->window; /* on-demand from the first tick */

  struct sl_sim_result opt, res[N_POLICIES];
  r = sim_eval_run(&e, NULL, &opt, err, sizeof err);
  if (r == -ENOMEM)
    return;
  if (feasible ? r != 0 : r != -ERANGE)
    abort();
  if (r < 0)
    refused(r, err, sizeof err);
  else {
    check_result(&opt, t);
    if (!opt.finished || !opt.deadline_met)
      abort();
  }
  for (size_t k = 0; k < N_POLICIES; k++) {
    struct sl_policy *pol = NULL;
    if (sl_policy_new(policies[k], &pol) < 0)
      abort();
    r = sim_eval_run(&e, pol, &res[k], err, sizeof err);
    sl_policy_free(pol);
    if (r < 0)
      abort(); /* a job setup accepts runs */
    check_result(&res[k], t);
    if (feasible && !res[k].deadline_met)
      abort(); /* the safety net keeps what on-demand from the first tick keeps */
    if (feasible && opt.cost_usd > res[k].cost_usd && !close_to(opt.cost_usd, res[k].cost_usd))
      abort(); /* nothing that finishes in time costs less than the optimum */
  }
  const struct sl_sim_result *od = &res[N_POLICIES - 1];
  double od_cost = (double)(t->work + t->overhead) * OD_USD * job.nodes * e.gap_s / 3600.0;
  if (!od->finished || od->finish_tick != t->work + t->overhead || !close_to(od->cost_usd, od_cost))
    abort();
  for (size_t k = 0; !feasible && k < N_POLICIES; k++)
    if (res[k].deadline_met || res[k].finish_tick != od->finish_tick || res[k].spot_ticks ||
        !close_to(res[k].cost_usd, od->cost_usd))
      abort(); /* no slack from the start: on-demand to the end */
}

/* The accelerated mode's reader and estimates; zone is the same file as
 * --policy read it, NULL when that refused it. */
static void estimate(const char *path, const struct sim_zone *zone, uint8_t sel) {
  char err[2048];
  memset(err, 'x', sizeof err);
  err[sizeof err - 1] = 0;
  struct sim_trace *tr = NULL;
  int r = sim_trace_load(path, &tr, err, sizeof err);
  if (r < 0) {
    if ((r != -EINVAL && r != -ENOMEM) || tr)
      abort();
    refused(r, err, sizeof err);
    return;
  }
  double len_s = sim_trace_length_s(tr), first_s = sim_trace_first_capacity_s(tr);
  if (!isfinite(len_s) || len_s <= 0 || (first_s != -1 && !(first_s >= 0 && first_s < len_s)))
    abort();
  if (zone) { /* read by both: the same ticks, the same first capacity */
    size_t i = 0;
    while (i < zone->trace->n && zone->trace->capacity[i] <= 0)
      i++;
    if (len_s != (double)zone->trace->n * zone->trace->gap_s ||
        first_s != (i < zone->trace->n ? (double)i * zone->trace->gap_s : -1))
      abort();
  }
  /* spotlab-sim asks for a job's work in simulated seconds with the start
   * of an instance (half a wall second) at a time_scale of 0.001..1e6 */
  const double work_s = (double[]){1, len_s / 7, 3 * len_s, 7200}[sel & 3],
               over_s = (double[]){0, 0.0005, 60, 5e5}[(sel >> 2) & 3];
  double done_s = sim_trace_time_for_s(tr, work_s, over_s);
  if (done_s != -1 && (first_s == -1 || !isfinite(done_s) || done_s < first_s + over_s ||
                       done_s > (SIM_TRACE_MAX_PASSES * len_s + SIM_NOTICE_S) * (1 + 1e-9)))
    abort();
  sim_trace_free(tr);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  setup_once();
  uint8_t sel = data[0];
  const uint8_t *p = data + 1, *end = data + size;
  struct sim_zone zones[SL_POLICY_ZONES_MAX];
  memset(zones, 0, sizeof zones);
  size_t n = 0;
  while (n < SL_POLICY_ZONES_MAX) {
    const uint8_t *cut = memmem(p, (size_t)(end - p), "\n--\n", 4);
    size_t len = cut ? (size_t)(cut - p) : (size_t)(end - p);
    put_file(n, p, len);
    zones[n].path = paths[n];
    n++;
    if (!cut)
      break;
    p = cut + 4;
  }
  bool all = true;
  for (size_t i = 0; i < n; i++) {
    char err[2048];
    memset(err, 'x', sizeof err);
    err[sizeof err - 1] = 0;
    int r = sim_zone_load(&zones[i], err, sizeof err);
    if (r < 0) {
      if (r != -EINVAL && r != -ENOMEM)
        abort();
      refused(r, err, sizeof err);
      all = false;
    }
    estimate(paths[i], r < 0 ? NULL : &zones[i], sel);
  }
  if (all)
    evaluate(zones, n, sel);
  for (size_t i = 0; i < n; i++)
    sim_zone_done(&zones[i]);
  return 0;
}
