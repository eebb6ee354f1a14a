/* Evaluation of a policy on traces (sl_policy.h): the tick model that
 * spotlab-sim, the tests and bench/policy share, and the rounding of hours
 * to ticks. The simulator hands the policy a view of the market that ends
 * at the tick being decided, so no policy can read the future. */
#include "sl_policy.h"
#include "sl_policy_int.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "sl_err.h"

int64_t sl_ticks_floor(double hours, double gap_s) {
  double x = hours * 3600.0 / gap_s;
  /* 10.0000000001 ticks from 2.5 h at 900 s is 10, not 9 */
  return (int64_t)floor(x + 1e-9);
}

int64_t sl_ticks_ceil(double hours, double gap_s) {
  double x = hours * 3600.0 / gap_s;
  return (int64_t)ceil(x - 1e-9);
}

double sl_policy_zone_price(const struct sl_zone_view *z, size_t tick) {
  return z->price && tick < z->n ? z->price[tick] : z->spot_price;
}

bool sl_policy_zone_up(const struct sl_market_view *m, size_t zone, size_t tick) {
  const struct sl_zone_view *z = &m->zones[zone];
  return tick < z->n && z->avail[tick] >= (m->nodes > 0 ? m->nodes : 1);
}

void sl_sim_begin(struct sl_sim_state *s) {
  memset(s, 0, sizeof *s);
  s->mode = SL_MODE_IDLE;
}

/* Tick t (absolute index a) of a job. Returns true once the job is done. */
bool sl_sim_tick(struct sl_sim_state *s, const struct sl_market_view *m, const struct sl_sim_job *j,
                 int64_t t, int mode, struct sl_sim_result *r) {
  size_t a = m->origin + (size_t)t;
  int nodes = m->nodes > 0 ? m->nodes : 1;
  if (mode >= 0 && ((size_t)mode >= m->n_zones || !sl_policy_zone_up(m, (size_t)mode, a)))
    mode = SL_MODE_IDLE; /* no capacity there: nothing runs */
  if (mode != s->mode) {
    s->mode = mode;
    s->warm_left = mode == SL_MODE_IDLE ? 0 : j->overhead;
    if (mode >= 0)
      s->warm_left += (int64_t)ceil(m->zones[mode].move_ticks - 1e-9);
    if (mode != SL_MODE_IDLE)
      r->segments++;
  }
  if (mode == SL_MODE_IDLE)
    return false;
  double price = mode == SL_MODE_OD ? m->ondemand_price : sl_policy_zone_price(&m->zones[mode], a);
  r->cost_usd += price * nodes * m->gap_s / 3600.0;
  if (mode == SL_MODE_OD)
    r->ondemand_ticks++;
  else
    r->spot_ticks++;
  if (s->warm_left > 0) {
    s->warm_left--;
    return false;
  }
  s->done++;
  if (s->done < j->work)
    return false;
  r->finished = true;
  r->finish_tick = t + 1;
  r->deadline_met = t < j->window;
  return true;
}

/* Before tick t: the segment in force is lost when its zone has no
 * capacity in that tick (a preemption). */
void sl_sim_market(struct sl_sim_state *s, const struct sl_market_view *m, int64_t t,
                   struct sl_sim_result *r) {
  if (s->mode >= 0 && !sl_policy_zone_up(m, (size_t)s->mode, m->origin + (size_t)t)) {
    r->preemptions++;
    s->mode = SL_MODE_IDLE;
    s->warm_left = 0;
  }
}

/* How many ticks past the window a late job may still run (on-demand
 * finishes any job within work + overhead ticks). */
static int64_t horizon(const struct sl_sim_job *j) {
  return j->window + j->work + j->overhead + 1;
}

int sl_policy_simulate(struct sl_policy *p, const struct sl_market_view *m,
                       const struct sl_sim_job *j, struct sl_sim_result *ret) {
  memset(ret, 0, sizeof *ret);
  if (j->work <= 0 || j->window <= 0 || j->overhead < 0 || !m->n_zones ||
      m->n_zones > SL_POLICY_ZONES_MAX || m->gap_s <= 0)
    return -EINVAL;
  struct sl_zone_view seen[SL_POLICY_ZONES_MAX];
  memcpy(seen, m->zones, m->n_zones * sizeof seen[0]);
  struct sl_market_view view = *m;
  view.zones = seen;
  struct sl_sim_state s;
  sl_sim_begin(&s);
  sl_policy_reset(p);
  for (int64_t t = 0, end = horizon(j); t < end; t++) {
    size_t a = m->origin + (size_t)t;
    for (size_t z = 0; z < m->n_zones; z++)
      seen[z].n = a + 1 < m->zones[z].n ? a + 1 : m->zones[z].n; /* up to now, no further */
    sl_sim_market(&s, m, t, ret);
    struct sl_job_view jv = {.window = j->window, .work = j->work, .overhead = j->overhead,
                             .t = t, .done = s.done, .mode = s.mode, .warm_left = s.warm_left};
    struct sl_decision d;
    sl_policy_decide(p, &jv, &view, &d);
    if (sl_sim_tick(&s, m, j, t, d.mode, ret))
      return 0;
  }
  return 0;
}

int sl_policy_simulate_modes(const struct sl_market_view *m, const struct sl_sim_job *j,
                             const int *modes, size_t n, struct sl_sim_result *ret) {
  memset(ret, 0, sizeof *ret);
  struct sl_sim_state s;
  sl_sim_begin(&s);
  for (size_t t = 0; t < n; t++) {
    sl_sim_market(&s, m, (int64_t)t, ret);
    if (sl_sim_tick(&s, m, j, (int64_t)t, modes[t], ret))
      return 0;
  }
  return 0;
}
