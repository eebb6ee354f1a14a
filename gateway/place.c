/* Placement policy (place.h): every (offer, market) a job's options allow
 * is scored by expected cost per unit of work (sl_policy_rank): the price
 * of the job's instances; the work an hour of them gives this job, from
 * its measured step rates (its own and earlier same-shaped jobs', scaled
 * between types by the prior) or else the prior of speed.c; the work lost
 * to interruptions (spot: 1 / mean time to preemption, each one costing the
 * restart and, without a usable notice, half a checkpoint interval); and
 * the one-off move of its checkpoint into another region. A placement
 * that failed lately (a preemption, a refused launch) costs more for a
 * while, so it is not the first choice again, and one refused capacity in
 * the current placement pass is not tried again in it. A gang (nodes=N) is N instances of one provider,
 * type and market, idle workers first, placed all or none.
 *
 * Durations become hours of the offer's provider (its prices and mean
 * times to preemption are in its clock): measured ones are wall-clock and
 * are multiplied by its time_scale. */
#include "place.h"

#include "speed.h"

#include "sl_err.h"
#include "sl_json.h"
#include "sl_policy.h"
#include "sl_strv.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gw_place_nodes(const json_t *options) {
  json_t *v = json_object_get(options, "nodes");
  if (json_is_object(v) && json_object_get(v, "v"))
    v = json_object_get(v, "v"); /* a session value {"t":"num","v":N} */
  if (!v)
    return 1;
  if (!json_is_number(v))
    return -1;
  double d = json_number_value(v);
  return d >= 1 && d <= GW_GANG_MAX && d == floor(d) ? (int)d : -1;
}

/* The names of the list TYPE,TYPE in buf (changed) into out. */
static size_t split_types(char *buf, char out[GW_WANTS_TYPES_MAX][64]) {
  size_t n = 0;
  char *save = NULL;
  for (char *t = strtok_r(buf, ", ", &save); t && n < GW_WANTS_TYPES_MAX;
       t = strtok_r(NULL, ", ", &save))
    snprintf(out[n++], sizeof out[0], "%s", t);
  return n;
}

void gw_place_wants(const struct gw_job *j, struct gw_wants *w) {
  memset(w, 0, sizeof *w);
  json_t *o = json_object_get(j->spec, "options");
  w->gpus = (int)sl_json_get_int(o, "gpus", 0);
  w->max_price = sl_json_get_num(o, "max_price", 0);
  const char *spot = sl_json_get_str(o, "spot", NULL);
  json_t *sv = json_object_get(o, "spot");
  w->spot = json_is_boolean(sv) ? json_is_true(sv) : !spot || !strcmp(spot, "auto") ? -1
                                                      : !strcmp(spot, "yes");
  json_t *inst = json_object_get(o, "instance");
  char buf[1024] = "";
  if (json_is_string(inst)) {
    snprintf(buf, sizeof buf, "%s", json_string_value(inst));
  } else if (json_is_array(inst)) {
    size_t i;
    json_t *v;
    json_array_foreach(inst, i, v) {
      if (json_is_string(v) && strlen(buf) + json_string_length(v) + 2 < sizeof buf) {
        strcat(buf, json_string_value(v));
        strcat(buf, ",");
      }
    }
  }
  w->n_types = split_types(buf, w->types);
  int nodes = gw_place_nodes(o);
  w->nodes = nodes < 1 ? 1 : nodes;
  snprintf(w->region, sizeof w->region, "%s", sl_json_get_str(o, "region", ""));
}

void gw_place_allow(struct gw_wants *w, const char *list) {
  char buf[GW_WANTS_TYPES_MAX * 65];
  snprintf(buf, sizeof buf, "%s", list ? list : "");
  w->n_allowed = split_types(buf, w->allowed);
}

static bool in_list(const char (*list)[64], size_t n, const char *type) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(list[i], type))
      return true;
  return false;
}

bool gw_place_type_allowed(const struct gw_wants *w, const char *type) {
  return (!w->n_types || in_list(w->types, w->n_types, type)) &&
         (!w->n_allowed || in_list(w->allowed, w->n_allowed, type));
}

bool gw_place_fits(const struct gw_wants *w, const struct gw_inst *in) {
  if (!gw_place_type_allowed(w, in->row.type) || (w->gpus && in->gpus && in->gpus < w->gpus))
    return false;
  if ((w->spot == 1 && !in->row.spot) || (w->spot == 0 && in->row.spot))
    return false;
  /* a zone is named after its region ("us-east-1a", "local-1a") */
  if (w->region[0] && in->row.zone[0] && strncmp(in->row.zone, w->region, strlen(w->region)))
    return false;
  return !w->max_price || in->row.price_usd_per_hour <= w->max_price;
}

/* The price per hour of one instance of o in the market spot when it fits
 * w, else -1. */
static double offer_price(const struct gw_wants *w, const struct gw_offer *o, bool spot) {
  const struct gw_instance_type *t = &o->type;
  if (!gw_place_type_allowed(w, t->name) || (w->gpus && t->gpus < w->gpus))
    return -1;
  if ((w->spot == 1 && !spot) || (w->spot == 0 && spot))
    return -1;
  if (w->region[0] && strcmp(w->region, o->region))
    return -1;
  double price = spot ? t->spot_usd_per_hour : t->on_demand_usd_per_hour;
  return price <= 0 || (w->max_price && price > w->max_price) ? -1 : price;
}

/* The distinct type names of offers[0..n) that keep[i] marks, comma separated. */
static void type_names(const struct gw_offer *offers, size_t n, const bool *keep, char *buf, size_t size) {
  buf[0] = 0;
  for (size_t i = 0; i < n; i++) {
    bool seen = false;
    for (size_t k = 0; k < i && !seen; k++)
      seen = keep[k] && !strcmp(offers[k].type.name, offers[i].type.name);
    if (keep[i] && !seen)
      sl_strv_join(buf, size, offers[i].type.name);
  }
}

static int explain(const struct gw_wants *w, const struct gw_offer *offers, size_t n, bool *keep, char *why,
                   size_t why_size);

int gw_place_explain(const struct gw_wants *w, const struct gw_offer *offers, size_t n, char *why,
                     size_t why_size) {
  for (size_t i = 0; i < n; i++)
    if (offer_price(w, &offers[i], true) >= 0 || offer_price(w, &offers[i], false) >= 0)
      return 0;
  bool *keep = calloc(n ? n : 1, sizeof *keep);
  if (!keep) {
    snprintf(why, why_size, "no instance type matches the job's gpus, spot, max_price, instance and "
             "region options");
    return SL_ENAME;
  }
  int r = explain(w, offers, n, keep, why, why_size);
  free(keep);
  return r;
}

static int explain(const struct gw_wants *w, const struct gw_offer *offers, size_t n, bool *keep, char *why,
                   size_t why_size) {
  size_t left = 0;
  char names[512];
  /* the options in turn, each on what the ones before it left */
  for (size_t i = 0; i < n; i++)
    left += (keep[i] = gw_place_type_allowed(w, offers[i].type.name));
  if (!left) {
    for (size_t i = 0; i < n; i++)
      keep[i] = !w->n_allowed || in_list(w->allowed, w->n_allowed, offers[i].type.name);
    type_names(offers, n, keep, names, sizeof names);
    char asked[256] = "";
    for (size_t k = 0, used = 0; k < w->n_types && used < sizeof asked; k++) {
      int m = snprintf(asked + used, sizeof asked - used, "%s%s", k ? "," : "", w->types[k]);
      used += m > 0 ? (size_t)m : 0;
    }
    if (w->n_types)
      snprintf(why, why_size, "instance=%s: no such type is offered%s (offered: %s)", asked,
               w->n_allowed ? " to you" : "", names[0] ? names : "none");
    else
      snprintf(why, why_size, "none of the instance types you may use is offered");
    return SL_ENAME;
  }
  left = 0;
  for (size_t i = 0; i < n; i++)
    left += (keep[i] = keep[i] && (!w->region[0] || !strcmp(w->region, offers[i].region)));
  if (!left) {
    snprintf(why, why_size, "no such instance type is offered in region %s", w->region);
    return SL_ENAME;
  }
  left = 0;
  int most = 0;
  const char *most_on = "";
  for (size_t i = 0; i < n; i++) {
    if (keep[i] && offers[i].type.gpus > most) {
      most = offers[i].type.gpus;
      most_on = offers[i].type.name;
    }
    left += (keep[i] = keep[i] && (!w->gpus || offers[i].type.gpus >= w->gpus));
  }
  if (!left) {
    snprintf(why, why_size, "gpus=%d: no such instance type has that many (the most: %d%s%s)", w->gpus, most,
             most ? ", on " : "", most_on);
    return SL_ENAME;
  }
  /* the market, then the price: the cheapest offer in the markets asked */
  double cheapest = -1;
  const char *cheapest_on = "";
  bool cheapest_spot = false;
  for (size_t i = 0; i < n; i++)
    for (int spot = 0; keep[i] && spot < 2; spot++) {
      if ((w->spot == 1 && !spot) || (w->spot == 0 && spot))
        continue;
      double price = spot ? offers[i].type.spot_usd_per_hour : offers[i].type.on_demand_usd_per_hour;
      if (price > 0 && (cheapest < 0 || price < cheapest)) {
        cheapest = price;
        cheapest_on = offers[i].type.name;
        cheapest_spot = spot;
      }
    }
  if (cheapest < 0)
    snprintf(why, why_size, "spot=%s: no such instance type is offered %s", w->spot == 1 ? "yes" : "no",
             w->spot == 1 ? "on spot" : "on demand");
  else
    snprintf(why, why_size, "max_price=%g: below every such offer (the cheapest: %s %s at $%.4f/h)",
             w->max_price, cheapest_on, cheapest_spot ? "spot" : "on-demand", cheapest);
  return SL_ENAME;
}

/* The prior work per hour of nodes instances with gpus GPUs of gpu_model
 * for w: the GPUs the job uses (gpus=N, else one, as the worker does)
 * times their relative speed (a CPU-only type counts as a twentieth of a
 * GPU). */
static double prior_work(const struct gw_wants *w, const char *gpu_model, int gpus, int nodes) {
  int want = w->gpus > 0 ? w->gpus : 1;
  int used = want < gpus ? want : gpus;
  double speed = gw_speed_relative(gpu_model);
  if (used <= 0)
    return 0.05 * nodes;
  return (speed > 0 ? speed : 1.0) * used * nodes;
}

/* Steps per wall second of nodes instances of t for w: measured on t, else
 * measured on another type and scaled by the two priors; 0 when nothing is
 * measured. A gang's rate is the whole gang's (its shape names nodes). */
static double steps_per_s(const struct gw_wants *w, const struct gw_place_ctx *c,
                          const struct gw_instance_type *t, int nodes) {
  for (size_t i = 0; i < c->n_rates; i++)
    if (c->rates[i].steps_per_s > 0 && !strcmp(c->rates[i].type, t->name))
      return c->rates[i].steps_per_s;
  for (size_t i = 0; i < c->n_rates; i++) {
    const struct gw_place_rate *r = &c->rates[i];
    double from = prior_work(w, r->gpu_model, r->gpus, nodes);
    if (r->steps_per_s > 0 && from > 0)
      return r->steps_per_s * prior_work(w, t->gpu_model, t->gpus, nodes) / from;
  }
  return 0;
}

/* How much the recent failures of (o, spot) weigh (0: none); *ret_held when
 * a capacity failure still holds it; the newest one described in why. */
static double failure_penalty(const struct gw_place_ctx *c, const struct gw_offer *o, bool spot,
                              bool *ret_held, char *why, size_t why_size) {
  double penalty = 0;
  int64_t newest = INT64_MIN;
  *ret_held = false;
  for (size_t i = 0; i < c->n_failures; i++) {
    const struct gw_place_failure *f = &c->failures[i];
    if (f->prov != o->prov || f->spot != spot || strcmp(f->type, o->type.name))
      continue;
    if (f->zone[0] && o->type.zone[0] && strcmp(f->zone, o->type.zone))
      continue; /* another zone of the type */
    int64_t age = c->now_us > f->at_us ? c->now_us - f->at_us : 0;
    if (age >= GW_PLACE_MEMORY_US)
      continue;
    penalty += (f->count > 3 ? 3 : f->count) * (1 - (double)age / (double)GW_PLACE_MEMORY_US);
    if (f->capacity && f->at_us >= (c->pass_us ? c->pass_us : c->now_us))
      *ret_held = true;
    if (f->at_us > newest) {
      newest = f->at_us;
      snprintf(why, why_size, "%s %s %.0f s ago", f->capacity ? "capacity refused" : "preempted",
               f->zone[0] ? f->zone : "here", (double)age / 1e6);
    }
  }
  return penalty;
}

int gw_place_score(const struct gw_wants *w, const struct gw_place_ctx *c,
                   const struct gw_offer *o, bool spot, struct gw_place_score *ret) {
  double price = offer_price(w, o, spot);
  if (price < 0)
    return -1;
  const struct gw_instance_type *t = &o->type;
  int nodes = w->nodes > 0 ? w->nodes : 1;
  double scale = o->time_scale > 0 ? o->time_scale : 1;
  double rate = steps_per_s(w, c, t, nodes);
  struct sl_offer_est e = {
    .usd_per_hour = price * nodes,
    .work_per_hour = rate > 0 ? rate * 3600 / scale : prior_work(w, t->gpu_model, t->gpus, nodes),
    /* any member of a gang lost stops all of it */
    .interrupts_per_hour = spot ? nodes * 3600 / (t->mean_time_to_preempt_s > 0
                                                      ? t->mean_time_to_preempt_s : GW_PLACE_MTTP_S)
                                : 0,
    .restart_h = (c->restart_s > 0 ? c->restart_s * scale : GW_PLACE_RESTART_S) / 3600,
    .checkpoint_h = (c->checkpoint_s > 0 ? c->checkpoint_s * scale : GW_PLACE_CHECKPOINT_S) / 3600,
    .notice_share = GW_PLACE_NOTICE_SHARE,
    .move_usd = t->move_usd_per_gb * c->checkpoint_gb,
  };
  e.remaining_units = rate > 0 && c->remaining_steps > 0 ? c->remaining_steps
                                                         : GW_PLACE_REMAINING_H * e.work_per_hour;
  struct sl_offer_rank r;
  sl_policy_rank(&e, &r);
  memset(ret, 0, sizeof *ret);
  ret->efficiency = r.efficiency;
  ret->measured = rate > 0;
  char failed[96] = "";
  ret->penalty = 1 + failure_penalty(c, o, spot, &ret->held, failed, sizeof failed);
  if (t->unavailable_until_us && t->unavailable_until_us > c->now_real_us) {
    ret->held = true; /* every zone of it refused capacity lately (the provider remembers) */
    snprintf(failed, sizeof failed, "no capacity in any zone lately");
  }
  ret->usd_per_unit = r.usd_per_unit * ret->penalty;
  snprintf(ret->why, sizeof ret->why, "%s%s%s%s", ret->measured ? "" : "prior speed; ", r.why,
           failed[0] ? "; " : "", failed);
  return 0;
}

/* Whether a scored (usd_per_unit, spot) goes before the best so far. */
static bool better(double u, bool spot, double best_u, bool best_spot) {
  if (isinf(best_u))
    return u < best_u || (u == best_u && spot && !best_spot);
  return u < best_u - 1e-12 * fabs(best_u) || (u <= best_u + 1e-12 * fabs(best_u) && spot && !best_spot);
}

int gw_place_pick(const struct gw_wants *w, const struct gw_place_ctx *c,
                  const struct gw_offer *offers, size_t n, size_t *ret_i, bool *ret_spot) {
  double best = INFINITY;
  bool best_spot = false, fits = false;
  size_t best_i = 0;
  for (size_t i = 0; i < n; i++) {
    for (int spot = 1; spot >= 0; spot--) {
      struct gw_place_score sc;
      if (gw_place_score(w, c, &offers[i], spot, &sc) < 0)
        continue;
      fits = true;
      if (sc.held || isinf(sc.usd_per_unit) || !better(sc.usd_per_unit, spot, best, best_spot))
        continue;
      best = sc.usd_per_unit;
      best_spot = spot;
      best_i = i;
    }
  }
  if (isinf(best))
    return fits ? -EAGAIN : SL_ENAME;
  *ret_i = best_i;
  *ret_spot = best_spot;
  return 0;
}

size_t gw_place_rank(const struct gw_wants *w, const struct gw_place_ctx *c,
                     const struct gw_offer *offers, size_t n, struct gw_place_ranked *ret,
                     size_t max) {
  size_t k = 0;
  for (size_t i = 0; i < n && k < max; i++)
    for (int spot = 1; spot >= 0 && k < max; spot--)
      if (gw_place_score(w, c, &offers[i], spot, &ret[k].score) == 0) {
        ret[k].offer = i;
        ret[k].spot = spot;
        k++;
      }
  /* insertion sort: held last, then by cost per unit; ties keep market order */
  for (size_t a = 1; a < k; a++) {
    struct gw_place_ranked x = ret[a];
    size_t b = a;
    while (b > 0 && (ret[b - 1].score.held > x.score.held ||
                     (ret[b - 1].score.held == x.score.held &&
                      better(x.score.usd_per_unit, x.spot, ret[b - 1].score.usd_per_unit,
                             ret[b - 1].spot)))) {
      ret[b] = ret[b - 1];
      b--;
    }
    ret[b] = x;
  }
  return k;
}

/* ---- gangs ---- */

/* An idle worker joins a gang of its provider and type in either market
 * (the job's spot= permitting): the same hardware, already running. */
static bool in_group(const struct gw_wants *w, const struct gw_inst *in, const struct gw_provider *prov,
                     const char *type) {
  return in->prov == prov && !strcmp(in->row.type, type) && gw_place_fits(w, in);
}

/* The best offer (any zone) of prov's type in market spot that fits w and
 * is not held; SIZE_MAX when none. */
static size_t group_offer(const struct gw_wants *w, const struct gw_place_ctx *c,
                          const struct gw_offer *offers, size_t n, const struct gw_provider *prov,
                          const char *type, bool spot) {
  size_t best = SIZE_MAX;
  double best_u = INFINITY;
  for (size_t i = 0; i < n; i++) {
    struct gw_place_score sc;
    if (offers[i].prov == prov && !strcmp(offers[i].type.name, type) &&
        gw_place_score(w, c, &offers[i], spot, &sc) == 0 && !sc.held &&
        (best == SIZE_MAX || sc.usd_per_unit < best_u)) {
      best = i;
      best_u = sc.usd_per_unit;
    }
  }
  return best;
}

/* The gang of group (prov, type, spot): its idle members (of either
 * market), the rest launched in market spot from offer oi. False when the rest cannot be launched from any offer. */
static bool group_gang(const struct gw_wants *w, const struct gw_place_ctx *c,
                       const struct gw_inst *const *idle, size_t n_idle,
                       const struct gw_offer *offers, size_t oi, const struct gw_provider *prov,
                       const char *type, bool spot, struct gw_gang_pick *p) {
  memset(p, 0, sizeof *p);
  p->offer = oi;
  p->spot = spot;
  /* the cheapest idle members (spot before on-demand), kept in the idle
   * array's order */
  bool taken[GW_MAX_INSTANCES] = {false};
  while (p->n_idle < (size_t)w->nodes) {
    size_t best = SIZE_MAX;
    for (size_t k = 0; k < n_idle && k < GW_MAX_INSTANCES; k++)
      if (!taken[k] && in_group(w, idle[k], prov, type) &&
          (best == SIZE_MAX ||
           idle[k]->row.price_usd_per_hour < idle[best]->row.price_usd_per_hour))
        best = k;
    if (best == SIZE_MAX)
      break;
    taken[best] = true;
    p->n_idle++;
    p->usd_per_hour += idle[best]->row.price_usd_per_hour;
  }
  for (size_t k = 0, i = 0; k < n_idle && k < GW_MAX_INSTANCES && i < p->n_idle; k++)
    if (taken[k])
      p->idle[i++] = k;
  p->n_launch = (size_t)w->nodes - p->n_idle;
  if (p->n_launch && oi == SIZE_MAX)
    return false;
  if (p->n_launch)
    p->usd_per_hour += (double)p->n_launch * offer_price(w, &offers[oi], spot);
  /* per unit of work: the offer's score at the gang's own price (idle
   * members keep the price they were launched at); idle alone with no
   * offer of their type: the price stands for it */
  struct gw_place_score sc;
  double offer_usd = oi == SIZE_MAX ? 0 : offer_price(w, &offers[oi], spot) * w->nodes;
  if (oi != SIZE_MAX && offer_usd > 0 && gw_place_score(w, c, &offers[oi], spot, &sc) == 0)
    p->usd_per_unit = sc.usd_per_unit * p->usd_per_hour / offer_usd;
  else
    p->usd_per_unit = p->usd_per_hour;
  return true;
}

int gw_place_pick_gang(const struct gw_wants *w, const struct gw_place_ctx *c,
                       const struct gw_inst *const *idle, size_t n_idle,
                       const struct gw_offer *offers, size_t n_offers, size_t max_launch,
                       struct gw_gang_pick *ret) {
  if (w->nodes < 1 || w->nodes > GW_GANG_MAX)
    return SL_ENAME;
  bool found = false, possible = false;
  struct gw_gang_pick best, p;
  memset(&best, 0, sizeof best);
  /* every group: one per idle worker's (provider, type, market), one per
   * offer and market; a group seen twice gives the same gang twice */
  for (size_t k = 0; k < n_idle + 2 * n_offers; k++) {
    const struct gw_provider *prov;
    const char *type;
    bool spot;
    size_t oi;
    if (k < n_idle) {
      if (!gw_place_fits(w, idle[k]))
        continue;
      prov = idle[k]->prov;
      type = idle[k]->row.type;
      spot = idle[k]->row.spot;
      oi = group_offer(w, c, offers, n_offers, prov, type, spot);
    } else {
      oi = (k - n_idle) / 2;
      spot = (k - n_idle) % 2 == 0;
      struct gw_place_score sc;
      if (gw_place_score(w, c, &offers[oi], spot, &sc) < 0)
        continue;
      possible = true; /* it fits; held or not, a gang of it may be formed later */
      if (sc.held)
        continue;
      prov = offers[oi].prov;
      type = offers[oi].type.name;
    }
    if (!group_gang(w, c, idle, n_idle, offers, oi, prov, type, spot, &p))
      continue;
    possible = true;
    if (p.n_launch > max_launch)
      continue;
    /* idle workers alone start now (as a one-instance job takes an idle
     * worker first); else the least cost per unit of work, then fewest
     * launched */
    bool now = !p.n_launch, best_now = found && !best.n_launch;
    double tol = 1e-12 * fabs(best.usd_per_unit);
    if (!found || (now && !best_now) ||
        (now == best_now && (p.usd_per_unit < best.usd_per_unit - tol ||
                             (p.usd_per_unit <= best.usd_per_unit + tol &&
                              p.n_launch < best.n_launch)))) {
      best = p;
      found = true;
    }
  }
  if (found)
    *ret = best;
  return found ? 0 : possible ? -EAGAIN : SL_ENAME;
}
