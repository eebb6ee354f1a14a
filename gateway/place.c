/* Placement policy (place.h): today the cheapest fitting offer, spot first
 * on a tie; a job's instance= list, gpus, spot and max_price options bound
 * the choice. */
#include "place.h"

#include "sl_err.h"
#include "sl_json.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

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

int gw_place_pick(const struct gw_wants *w, const struct gw_offer *offers, size_t n,
                  size_t *ret_i, bool *ret_spot) {
  double best = INFINITY;
  for (size_t i = 0; i < n; i++) {
    const struct gw_instance_type *t = &offers[i].type;
    if (!type_allowed(w, t->name) || (w->gpus && t->gpus < w->gpus))
      continue;
    for (int spot = 1; spot >= 0; spot--) {
      if ((w->spot == 1 && !spot) || (w->spot == 0 && spot))
        continue;
      double price = spot ? t->spot_usd_per_hour : t->on_demand_usd_per_hour;
      if (price <= 0 || (w->max_price && price > w->max_price) || price >= best)
        continue;
      best = price;
      *ret_i = i;
      *ret_spot = spot;
    }
  }
  return isinf(best) ? SL_ENAME : 0;
}
