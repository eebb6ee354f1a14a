/* What the trace promises the job before it runs: how long it offers no
 * spot capacity at its start, and by which simulated time it has offered
 * enough usable capacity for the job's work. spotlab-sim derives its default
 * timeout from these, so a job that waits days of simulated time for the
 * market (a real trace can start with them: availability/1-node
 * aws-02-15-2023 us-east-1d has no V100 for its first 56 hours) is not given
 * up on while it is still queued. The gateway's own copy of the trace (the
 * local provider's market) stays the authority; this one is read only for
 * the estimate, with the same meaning: data[k] > 0 is capacity during
 * simulated seconds [k*G, (k+1)*G), and the trace repeats. Both read the
 * file with sl_trace_read, so a trace the market would refuse is named with
 * its fault before a gateway starts, and every estimate is a finite time. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"
#include "sl_trace.h"

struct sim_trace {
  double gap_s;
  size_t n;
  bool *up;
};

int sim_trace_load(const char *path, struct sim_trace **ret, char *err, size_t err_size) {
  struct sl_trace *tr = NULL;
  int r = sl_trace_read(path, &tr, err, err_size);
  if (r < 0)
    return r == -ENOMEM ? r : -EINVAL;
  struct sim_trace *t = calloc(1, sizeof *t);
  if (!t || !(t->up = calloc(tr->n, sizeof *t->up))) {
    snprintf(err, err_size, "out of memory");
    r = -ENOMEM;
    goto out;
  }
  t->gap_s = tr->gap_s;
  t->n = tr->n;
  for (size_t i = 0; i < tr->n; i++)
    t->up[i] = tr->capacity[i] > 0;
  *ret = t;
  t = NULL;
out:
  sim_trace_free(t);
  sl_trace_free(tr);
  return r;
}

struct sim_trace *sim_trace_free(struct sim_trace *t) {
  if (t) {
    free(t->up);
    free(t);
  }
  return NULL;
}

double sim_trace_length_s(const struct sim_trace *t) { return (double)t->n * t->gap_s; }

double sim_trace_first_capacity_s(const struct sim_trace *t) {
  for (size_t i = 0; i < t->n; i++)
    if (t->up[i])
      return (double)i * t->gap_s;
  return -1;
}

double sim_trace_time_for_s(const struct sim_trace *t, double work_s, double overhead_s) {
  double done = 0;
  size_t i = 0, total = t->n * SIM_TRACE_MAX_PASSES;
  while (i < total) {
    if (!t->up[i % t->n]) {
      i++;
      continue;
    }
    size_t start = i;
    while (i < total && t->up[i % t->n])
      i++;
    /* The window, plus the notice the drop gives, less getting an instance going. */
    double usable = (double)(i - start) * t->gap_s + SIM_NOTICE_S - overhead_s;
    if (usable <= 0)
      continue;
    if (done + usable >= work_s)
      return (double)start * t->gap_s + overhead_s + (work_s - done);
    done += usable;
  }
  return -1;
}
