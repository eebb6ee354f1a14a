/* The aws provider's market: the configured types with the catalog's GPUs,
 * on-demand prices and interruption buckets; the spot prices EC2 reports
 * (DescribeSpotPriceHistory in each region, newest per type and zone); the
 * capacity failures it remembers per type and placement; and what each
 * instance cost.
 *
 * The market offers each type once per region (the provider picks the
 * zone there) and once per zone EC2 priced it in, each with the cost of
 * bringing a checkpoint there from the store's region. Zone names are
 * unique across regions, so prices and failures are keyed by zone (or
 * subnet) alone.
 *
 * Billing follows EC2's rule for Linux: per second from the launch to the
 * termination, at least 60 seconds, at the price in force over that time.
 * A spot instance keeps its own price history (the points the provider saw
 * for its type and zone while it ran, in its record), so its bill survives
 * a gateway restart. Everything here runs under the provider's mutex. */
#include "aws_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog.h"
#include "sl_err.h"
#include "sl_time.h"

#define BILL_MIN_S 60

int gw_aws_market_init(struct gw_aws *a, char *err, size_t err_size) {
  size_t n = a->cfg.n_types;
  a->types = calloc(n ? n : 1, sizeof *a->types);
  a->types_out = calloc(n ? n : 1, sizeof *a->types_out);
  if (!a->types || !a->types_out) {
    snprintf(err, err_size, "out of memory");
    return -ENOMEM;
  }
  for (size_t i = 0; i < n; i++) {
    const struct gw_catalog_entry *e =
        gw_catalog_get(a->cat, (size_t)gw_catalog_find(a->cat, a->cfg.types[i]));
    struct gw_instance_type *t = &a->types[i];
    snprintf(t->name, sizeof t->name, "%s", e->name);
    t->gpus = e->gpus;
    snprintf(t->gpu_model, sizeof t->gpu_model, "%s", e->gpu_model);
    t->on_demand_usd_per_hour = e->on_demand_usd_per_hour;
    t->spot_usd_per_hour = e->spot_usd_per_hour; /* typical, until EC2 tells */
    t->interruption = gw_catalog_bucket_label(e->bucket);
    t->mean_time_to_preempt_s = gw_catalog_bucket_mean_s(e->bucket);
  }
  memcpy(a->types_out, a->types, n * sizeof *a->types);
  a->types_cap = n ? n : 1;
  return 0;
}

double gw_aws_on_demand_price(const struct gw_aws *a, const char *type) {
  int i = gw_catalog_find(a->cat, type);
  return i < 0 ? 0 : gw_catalog_get(a->cat, (size_t)i)->on_demand_usd_per_hour;
}

double gw_aws_spot_price(const struct gw_aws *a, const char *type, const char *zone) {
  for (size_t i = 0; i < a->n_prices; i++)
    if (!strcmp(a->prices[i].type, type) && !strcmp(a->prices[i].zone, zone))
      return a->prices[i].usd_per_hour;
  return 0;
}

/* True when zone is one the configuration lets instances go to: in an
 * offered region, and among the configured placements when there are any. */
static bool zone_allowed(const struct gw_aws *a, const char *zone) {
  int r = gw_aws_region_of_zone(a, zone);
  if (r < 0 || !a->regions[r].offered)
    return false;
  if (!a->cfg.n_placements)
    return true;
  for (size_t i = 0; i < a->cfg.n_placements; i++)
    if (!a->cfg.placements[i].zone[0] || !strcmp(a->cfg.placements[i].zone, zone))
      return true;
  return false;
}

static bool in_region(const struct gw_aws *a, const char *zone, const char *region) {
  int r = gw_aws_region_of_zone(a, zone);
  return r >= 0 && !strcmp(a->regions[r].name, region);
}

double gw_aws_region_spot_price(const struct gw_aws *a, const char *type, const char *region) {
  double best = 0;
  for (size_t i = 0; i < a->n_prices; i++)
    if (!strcmp(a->prices[i].type, type) && in_region(a, a->prices[i].zone, region) &&
        zone_allowed(a, a->prices[i].zone) && (best == 0 || a->prices[i].usd_per_hour < best))
      best = a->prices[i].usd_per_hour;
  return best;
}

void gw_aws_price_point(struct gw_aws_inst *in, int64_t at_us, double usd_per_hour) {
  if (in->n_prices) {
    struct gw_aws_price_point *last = &in->prices[in->n_prices - 1];
    if (last->usd_per_hour == usd_per_hour)
      return;
    if (at_us < last->at_us)
      at_us = last->at_us;
    if (at_us == last->at_us || in->n_prices == GW_AWS_MAX_PRICE_POINTS) {
      last->usd_per_hour = usd_per_hour; /* full: the newest price wins */
      return;
    }
  }
  in->prices[in->n_prices].at_us = at_us;
  in->prices[in->n_prices++].usd_per_hour = usd_per_hour;
}

/* Keeps p's price as the newest for its type and zone: 1 when the price
 * in force changed, 0 when not, -ENOMEM. */
static int merge_price(struct gw_aws *a, const struct aws_spot_price *p) {
  for (size_t i = 0; i < a->n_prices; i++)
    if (!strcmp(a->prices[i].type, p->type) && !strcmp(a->prices[i].zone, p->zone)) {
      if (p->time_unix < a->prices[i].time_unix)
        return 0;
      bool moved = p->usd_per_hour != a->prices[i].usd_per_hour;
      a->prices[i] = *p;
      return moved;
    }
  struct aws_spot_price *grown = realloc(a->prices, (a->n_prices + 1) * sizeof *grown);
  if (!grown)
    return -ENOMEM;
  a->prices = grown;
  a->prices[a->n_prices++] = *p;
  return 1;
}

bool gw_aws_market_prices(struct gw_aws *a, const struct aws_spot_price *p, size_t n) {
  bool changed = false;
  for (size_t i = 0; i < n; i++)
    if (p[i].usd_per_hour > 0 && p[i].usd_per_hour < 1e5 &&
        gw_catalog_find(a->cat, p[i].type) >= 0 && gw_aws_region_of_zone(a, p[i].zone) >= 0)
      changed |= merge_price(a, &p[i]) > 0;
  for (size_t i = 0; i < a->n; i++) {
    struct gw_aws_inst *in = a->inst[i];
    if (in->state != GW_AWS_RUNNING || !in->spot)
      continue;
    for (size_t k = 0; k < a->n_prices; k++) {
      const struct aws_spot_price *sp = &a->prices[k];
      if (strcmp(sp->type, in->type) || strcmp(sp->zone, in->zone))
        continue;
      size_t before = in->n_prices;
      double last = before ? in->prices[before - 1].usd_per_hour : 0;
      int64_t at = sp->time_unix * SL_US_PER_S;
      gw_aws_price_point(in, at > in->launched_us ? at : in->launched_us, sp->usd_per_hour);
      if (in->n_prices != before || last != sp->usd_per_hour)
        gw_aws_save_record(a, in);
    }
  }
  return changed;
}

const char *gw_aws_placement_key(const struct gw_aws_placement *p) {
  return p->subnet[0] ? p->subnet : p->zone;
}

/* Every placement of type in offered region r, unsorted: the configured
 * ones, else the zones EC2 reported prices for, else the catalog's zones. */
static size_t candidates(const struct gw_aws *a, const char *type, size_t r,
                         struct gw_aws_placement *ret, size_t max) {
  const char *region = a->regions[r].name;
  size_t n = 0;
  if (a->cfg.n_placements) {
    for (size_t i = 0; i < a->cfg.n_placements && n < max; i++)
      if (!strcmp(a->cfg.placements[i].region, region))
        ret[n++] = a->cfg.placements[i];
    return n;
  }
  for (size_t i = 0; i < a->n_prices && n < max; i++)
    if (!strcmp(a->prices[i].type, type) && in_region(a, a->prices[i].zone, region)) {
      memset(&ret[n], 0, sizeof ret[n]);
      snprintf(ret[n].region, sizeof ret[0].region, "%s", region);
      snprintf(ret[n++].zone, sizeof ret[0].zone, "%s", a->prices[i].zone);
    }
  int c = gw_catalog_find(a->cat, type);
  if (n || c < 0)
    return n;
  for (const char *z = gw_catalog_get(a->cat, (size_t)c)->zones; *z && n < max; z++) {
    memset(&ret[n], 0, sizeof ret[n]);
    snprintf(ret[n].region, sizeof ret[0].region, "%s", region);
    snprintf(ret[n++].zone, sizeof ret[0].zone, "%.30s%c", region, *z);
  }
  return n;
}

/* The placements of type in where: "" every offered region, a region's
 * name, or a zone. */
static size_t candidates_in(const struct gw_aws *a, const char *type, const char *where,
                            struct gw_aws_placement *ret, size_t max) {
  int only = where && *where ? gw_aws_region_index(a, where) : -1;
  bool zone = where && *where && only < 0;
  if (zone)
    only = gw_aws_region_of_zone(a, where);
  size_t n = 0;
  for (size_t r = 0; r < a->n_regions && n < max; r++)
    if (a->regions[r].offered && (only < 0 || (size_t)only == r))
      n += candidates(a, type, r, ret + n, max - n);
  if (!zone)
    return n;
  if (only < 0 || !a->regions[only].offered)
    return 0;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (!strcmp(ret[i].zone, where))
      ret[k++] = ret[i];
  if (!k && !a->cfg.n_placements) { /* a zone EC2 has not priced yet */
    memset(&ret[0], 0, sizeof ret[0]);
    snprintf(ret[0].region, sizeof ret[0].region, "%s", a->regions[only].name);
    snprintf(ret[0].zone, sizeof ret[0].zone, "%s", where);
    k = 1;
  }
  return k;
}

/* The remembered failure of type in placement key still in force at now_us, or NULL. */
static const struct gw_aws_failure *failure(const struct gw_aws *a, const char *type,
                                            const char *key, int64_t now_us) {
  for (size_t i = 0; i < a->n_failures; i++)
    if (a->failures[i].until_us > now_us && !strcmp(a->failures[i].type, type) &&
        !strcmp(a->failures[i].placement, key))
      return &a->failures[i];
  return NULL;
}

size_t gw_aws_placements(struct gw_aws *a, const char *type, const char *where, bool spot,
                         struct gw_aws_placement *ret, size_t max) {
  struct gw_aws_placement all[GW_AWS_MAX_PLACEMENTS * 4];
  size_t n_all = candidates_in(a, type, where, all, sizeof all / sizeof all[0]);
  int64_t now = sl_time_real_us();
  double price[GW_AWS_MAX_PLACEMENTS * 4];
  size_t n = 0;
  for (size_t i = 0; i < n_all && n < max; i++) {
    if (failure(a, type, gw_aws_placement_key(&all[i]), now))
      continue;
    double p = spot && all[i].zone[0] ? gw_aws_spot_price(a, type, all[i].zone) : 0;
    if (spot && p == 0)
      p = 1e300; /* unpriced zones last */
    /* insertion keeps the configured order among equals */
    size_t k = n++;
    while (k > 0 && price[k - 1] > p) {
      ret[k] = ret[k - 1];
      price[k] = price[k - 1];
      k--;
    }
    ret[k] = all[i];
    price[k] = p;
  }
  return n;
}

void gw_aws_remember_failure(struct gw_aws *a, const char *type, const char *placement) {
  if (a->cfg.capacity_memory_us <= 0)
    return;
  int64_t now = sl_time_real_us();
  struct gw_aws_failure *f = NULL;
  for (size_t i = 0; i < a->n_failures && !f; i++)
    if (!strcmp(a->failures[i].type, type) && !strcmp(a->failures[i].placement, placement))
      f = &a->failures[i];
  for (size_t i = 0; i < a->n_failures && !f; i++)
    if (a->failures[i].until_us <= now)
      f = &a->failures[i];
  if (!f && a->n_failures < GW_AWS_MAX_FAILURES)
    f = &a->failures[a->n_failures++];
  if (!f) { /* full of live ones: the one that expires first goes */
    f = &a->failures[0];
    for (size_t i = 1; i < a->n_failures; i++)
      if (a->failures[i].until_us < f->until_us)
        f = &a->failures[i];
  }
  snprintf(f->type, sizeof f->type, "%s", type);
  snprintf(f->placement, sizeof f->placement, "%s", placement);
  f->until_us = now + a->cfg.capacity_memory_us;
}

int64_t gw_aws_unavailable_until(struct gw_aws *a, const char *type, const char *where) {
  struct gw_aws_placement all[GW_AWS_MAX_PLACEMENTS * 4];
  size_t n = candidates_in(a, type, where, all, sizeof all / sizeof all[0]);
  int64_t now = sl_time_real_us(), until = INT64_MAX;
  for (size_t i = 0; i < n; i++) {
    const struct gw_aws_failure *f = failure(a, type, gw_aws_placement_key(&all[i]), now);
    if (!f)
      return 0;
    if (f->until_us < until)
      until = f->until_us;
  }
  return n ? until : 0;
}

/* Room for n offers in types_out; -ENOMEM. */
static int reserve(struct gw_aws *a, size_t n) {
  if (n <= a->types_cap)
    return 0;
  struct gw_instance_type *grown = realloc(a->types_out, n * sizeof *grown);
  if (!grown)
    return -ENOMEM;
  a->types_out = grown;
  a->types_cap = n;
  return 0;
}

/* The zones EC2 priced type in, in region r and allowed, sorted by name. */
static size_t priced_zones(const struct gw_aws *a, const char *type, size_t r,
                           const struct aws_spot_price **ret, size_t max) {
  size_t n = 0;
  for (size_t i = 0; i < a->n_prices && n < max; i++) {
    const struct aws_spot_price *p = &a->prices[i];
    if (strcmp(p->type, type) || !in_region(a, p->zone, a->regions[r].name) ||
        !zone_allowed(a, p->zone))
      continue;
    size_t k = n++;
    while (k > 0 && strcmp(ret[k - 1]->zone, p->zone) > 0) {
      ret[k] = ret[k - 1];
      k--;
    }
    ret[k] = p;
  }
  return n;
}

int gw_aws_market_offers(struct gw_aws *a) {
  const struct aws_spot_price *zones[GW_AWS_MAX_PLACEMENTS * 4];
  size_t count = 0;
  for (size_t t = 0; t < a->cfg.n_types; t++)
    for (size_t r = 0; r < a->n_regions; r++)
      if (a->regions[r].offered)
        count += 1 + priced_zones(a, a->types[t].name, r, zones, sizeof zones / sizeof zones[0]);
  if (reserve(a, count) < 0)
    return -ENOMEM;
  size_t n = 0;
  for (size_t t = 0; t < a->cfg.n_types; t++) {
    const struct gw_instance_type *base = &a->types[t];
    for (size_t r = 0; r < a->n_regions; r++) {
      const struct gw_aws_region *g = &a->regions[r];
      if (!g->offered)
        continue;
      struct gw_instance_type *o = &a->types_out[n++];
      *o = *base;
      snprintf(o->region, sizeof o->region, "%s", g->name);
      o->zone[0] = '\0';
      double price = gw_aws_region_spot_price(a, base->name, g->name);
      if (price > 0)
        o->spot_usd_per_hour = price;
      o->placement_score = g->placement_score;
      o->unavailable_until_us = gw_aws_unavailable_until(a, base->name, g->name);
      o->move_usd_per_gb = strcmp(g->name, a->cfg.store_region) ? a->cfg.transfer_usd_per_gb : 0;
      size_t nz = priced_zones(a, base->name, r, zones, sizeof zones / sizeof zones[0]);
      struct gw_instance_type region = *o;
      for (size_t z = 0; z < nz; z++) {
        o = &a->types_out[n++];
        *o = region;
        snprintf(o->zone, sizeof o->zone, "%s", zones[z]->zone);
        o->spot_usd_per_hour = zones[z]->usd_per_hour;
        o->unavailable_until_us = gw_aws_unavailable_until(a, base->name, zones[z]->zone);
      }
    }
  }
  return (int)n;
}

double gw_aws_billed(const struct gw_aws_inst *in, int64_t now_us) {
  if (in->launched_us <= 0)
    return 0; /* never started */
  int64_t end = in->state == GW_AWS_ENDED && in->ended_us > 0 ? in->ended_us : now_us;
  int64_t secs = end > in->launched_us ? (end - in->launched_us) / SL_US_PER_S : 0;
  if (secs < BILL_MIN_S)
    secs = BILL_MIN_S;
  int64_t t = in->launched_us, stop = in->launched_us + secs * SL_US_PER_S;
  if (!in->spot || !in->n_prices)
    return in->price_usd_per_hour * (double)secs / 3600.0;
  /* the price in force at t: the newest point at or before it, else the launch price */
  size_t next = 0;
  while (next < in->n_prices && in->prices[next].at_us <= t)
    next++;
  double price = next ? in->prices[next - 1].usd_per_hour
                 : in->price_usd_per_hour > 0 ? in->price_usd_per_hour : in->prices[0].usd_per_hour;
  double usd = 0;
  while (t < stop) {
    int64_t until = next < in->n_prices && in->prices[next].at_us < stop ? in->prices[next].at_us
                                                                          : stop;
    if (until > t) {
      usd += price * (double)(until - t) / 3.6e9;
      t = until;
    }
    while (next < in->n_prices && in->prices[next].at_us <= t)
      price = in->prices[next++].usd_per_hour;
  }
  return usd;
}
