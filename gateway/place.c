/* Placement policy (place.h): today the cheapest fitting offer, spot first
 * on a tie, leaving out types whose capacity the provider found exhausted; a job's instance= list, gpus, spot and max_price options bound
 * the choice. A gang (nodes=N) is N instances of one provider, type and
 * market, idle workers first, placed all or none. */
#include "place.h"

#include "sl_err.h"
#include "sl_json.h"
#include "sl_time.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
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
  char *save = NULL;
  for (char *t = strtok_r(buf, ", ", &save); t && w->n_types < GW_WANTS_TYPES_MAX;
       t = strtok_r(NULL, ", ", &save))
    snprintf(w->types[w->n_types++], sizeof w->types[0], "%s", t);
  int nodes = gw_place_nodes(o);
  w->nodes = nodes < 1 ? 1 : nodes;
}

static bool type_allowed(const struct gw_wants *w, const char *type) {
  if (!w->n_types)
    return true;
  for (size_t i = 0; i < w->n_types; i++)
    if (!strcmp(w->types[i], type))
      return true;
  return false;
}

bool gw_place_fits(const struct gw_wants *w, const struct gw_inst *in) {
  if (!type_allowed(w, in->row.type) || (w->gpus && in->gpus && in->gpus < w->gpus))
    return false;
  if ((w->spot == 1 && !in->row.spot) || (w->spot == 0 && in->row.spot))
    return false;
  return !w->max_price || in->row.price_usd_per_hour <= w->max_price;
}

/* The price per hour of type t in the market spot when it fits w, else -1. */
static double offer_price(const struct gw_wants *w, const struct gw_instance_type *t, bool spot) {
  if (!type_allowed(w, t->name) || (w->gpus && t->gpus < w->gpus))
    return -1;
  /* every zone of it refused capacity a moment ago (the provider remembers
   * for a while): another type goes first */
  if (t->unavailable_until_us && t->unavailable_until_us > sl_time_real_us())
    return -1;
  if ((w->spot == 1 && !spot) || (w->spot == 0 && spot))
    return -1;
  double price = spot ? t->spot_usd_per_hour : t->on_demand_usd_per_hour;
  return price <= 0 || (w->max_price && price > w->max_price) ? -1 : price;
}

int gw_place_pick(const struct gw_wants *w, const struct gw_offer *offers, size_t n,
                  size_t *ret_i, bool *ret_spot) {
  double best = INFINITY;
  for (size_t i = 0; i < n; i++) {
    for (int spot = 1; spot >= 0; spot--) {
      double price = offer_price(w, &offers[i].type, spot);
      if (price < 0 || price >= best)
        continue;
      best = price;
      *ret_i = i;
      *ret_spot = spot;
    }
  }
  return isinf(best) ? SL_ENAME : 0;
}

/* ---- gangs ---- */

static bool in_group(const struct gw_wants *w, const struct gw_inst *in, const struct gw_provider *prov,
                     const char *type, bool spot) {
  return in->prov == prov && in->row.spot == spot && !strcmp(in->row.type, type) &&
         gw_place_fits(w, in);
}

/* The first offer of prov's type in market spot that fits w; SIZE_MAX when none. */
static size_t group_offer(const struct gw_wants *w, const struct gw_offer *offers, size_t n,
                          const struct gw_provider *prov, const char *type, bool spot) {
  for (size_t i = 0; i < n; i++)
    if (offers[i].prov == prov && !strcmp(offers[i].type.name, type) &&
        offer_price(w, &offers[i].type, spot) >= 0)
      return i;
  return SIZE_MAX;
}

/* The gang of group (prov, type, spot): its idle members, the rest launched
 * from offer oi. False when the rest cannot be launched from any offer. */
static bool group_gang(const struct gw_wants *w, const struct gw_inst *const *idle, size_t n_idle,
                       const struct gw_offer *offers, size_t oi, const struct gw_provider *prov,
                       const char *type, bool spot, struct gw_gang_pick *p) {
  memset(p, 0, sizeof *p);
  p->offer = oi;
  p->spot = spot;
  for (size_t k = 0; k < n_idle && p->n_idle < (size_t)w->nodes; k++)
    if (in_group(w, idle[k], prov, type, spot)) {
      p->idle[p->n_idle++] = k;
      p->usd_per_hour += idle[k]->row.price_usd_per_hour;
    }
  p->n_launch = (size_t)w->nodes - p->n_idle;
  if (p->n_launch && oi == SIZE_MAX)
    return false;
  if (p->n_launch)
    p->usd_per_hour += (double)p->n_launch * offer_price(w, &offers[oi].type, spot);
  return true;
}

int gw_place_pick_gang(const struct gw_wants *w, const struct gw_inst *const *idle, size_t n_idle,
                       const struct gw_offer *offers, size_t n_offers, size_t max_launch,
                       struct gw_gang_pick *ret) {
  if (w->nodes < 1 || w->nodes > GW_GANG_MAX)
    return SL_ENAME;
  bool found = false, possible = false;
  struct gw_gang_pick best, p;
  memset(&best, 0, sizeof best);
  /* every group: one per idle worker's (provider, type, market), one per
   * offer and market; a group seen twice gives the same gang twice */
  for (size_t c = 0; c < n_idle + 2 * n_offers; c++) {
    const struct gw_provider *prov;
    const char *type;
    bool spot;
    size_t oi;
    if (c < n_idle) {
      if (!gw_place_fits(w, idle[c]))
        continue;
      prov = idle[c]->prov;
      type = idle[c]->row.type;
      spot = idle[c]->row.spot;
      oi = group_offer(w, offers, n_offers, prov, type, spot);
    } else {
      oi = (c - n_idle) / 2;
      spot = (c - n_idle) % 2 == 0;
      if (offer_price(w, &offers[oi].type, spot) < 0)
        continue;
      prov = offers[oi].prov;
      type = offers[oi].type.name;
    }
    if (!group_gang(w, idle, n_idle, offers, oi, prov, type, spot, &p))
      continue;
    possible = true;
    if (p.n_launch > max_launch)
      continue;
    /* idle workers alone start now (as a one-instance job takes an idle
     * worker first); else the cheapest per hour, then fewest launched */
    bool now = !p.n_launch, best_now = found && !best.n_launch;
    if (!found || (now && !best_now) ||
        (now == best_now && (p.usd_per_hour < best.usd_per_hour - 1e-12 ||
                             (p.usd_per_hour <= best.usd_per_hour + 1e-12 &&
                              p.n_launch < best.n_launch)))) {
      best = p;
      found = true;
    }
  }
  if (found)
    *ret = best;
  return found ? 0 : possible ? -EAGAIN : SL_ENAME;
}
