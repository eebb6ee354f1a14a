/* Placement's memory (placemem.h). Bounded tables, no I/O, no clock (times
 * come in): a failure is one entry per (provider, type, zone, market),
 * counted while each comes within GW_PLACE_MEMORY_US of the last; a rate
 * is one entry per (shape, type), an exponential average (weight 0.3 for
 * the newest) so a type's speed follows the job's recent attempts. Restart
 * times are one gateway-wide average: how long a restart takes depends on
 * the provider and the store more than on the job. */
#include "placemem.h"

#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#define NEW_WEIGHT 0.3
#define SHAPES_MAX 64

struct rate_entry {
  uint64_t shape;
  struct gw_place_rate r;
  uint64_t used;                /* insertion order: the oldest goes when full */
};

struct gw_place_memory {
  struct gw_place_failure failures[GW_PLACEMEM_FAILURES_MAX];
  size_t n_failures;
  struct rate_entry rates[GW_PLACEMEM_RATES_MAX];
  size_t n_rates;
  uint64_t clock;
  double restart_s;
  struct {
    uint64_t shape;
    double gb;
  } ckpt[SHAPES_MAX];
  size_t n_ckpt, next_ckpt;
};

static double average(double old, double v) {
  return old > 0 ? (1 - NEW_WEIGHT) * old + NEW_WEIGHT * v : v;
}

struct gw_place_memory *gw_place_memory_new(void) {
  return calloc(1, sizeof(struct gw_place_memory));
}

struct gw_place_memory *gw_place_memory_free(struct gw_place_memory *m) {
  free(m);
  return NULL;
}

void gw_place_memory_failure(struct gw_place_memory *m, const struct gw_provider *prov,
                             const char *type, const char *zone, bool spot, bool capacity,
                             int64_t now_us) {
  if (!m || !type)
    return;
  zone = zone ? zone : "";
  struct gw_place_failure *f = NULL;
  size_t oldest = 0;
  for (size_t i = 0; i < m->n_failures; i++) {
    struct gw_place_failure *e = &m->failures[i];
    if (e->prov == prov && e->spot == spot && !strcmp(e->type, type) && !strcmp(e->zone, zone)) {
      f = e;
      break;
    }
    if (e->at_us < m->failures[oldest].at_us)
      oldest = i;
  }
  if (!f) {
    f = m->n_failures < GW_PLACEMEM_FAILURES_MAX ? &m->failures[m->n_failures++]
                                                 : &m->failures[oldest];
    memset(f, 0, sizeof *f);
    f->prov = prov;
    snprintf(f->type, sizeof f->type, "%s", type);
    snprintf(f->zone, sizeof f->zone, "%s", zone);
    f->spot = spot;
  }
  f->count = f->count && now_us - f->at_us < GW_PLACE_MEMORY_US ? f->count + 1 : 1;
  f->at_us = now_us;
  f->capacity = capacity;
}

void gw_place_memory_release(struct gw_place_memory *m, const struct gw_provider *prov) {
  if (!m)
    return;
  for (size_t i = 0; i < m->n_failures;)
    if (m->failures[i].prov == prov && m->failures[i].capacity)
      m->failures[i] = m->failures[--m->n_failures];
    else
      i++;
}

void gw_place_memory_rate(struct gw_place_memory *m, uint64_t shape, const char *type,
                          const char *gpu_model, int gpus, double steps_per_s) {
  if (!m || !type || !*type || !(steps_per_s > 0))
    return;
  struct rate_entry *e = NULL;
  size_t oldest = 0;
  for (size_t i = 0; i < m->n_rates && !e; i++) {
    if (m->rates[i].shape == shape && !strcmp(m->rates[i].r.type, type))
      e = &m->rates[i];
    else if (m->rates[i].used < m->rates[oldest].used)
      oldest = i;
  }
  if (!e) {
    e = m->n_rates < GW_PLACEMEM_RATES_MAX ? &m->rates[m->n_rates++] : &m->rates[oldest];
    memset(e, 0, sizeof *e);
    e->shape = shape;
    snprintf(e->r.type, sizeof e->r.type, "%s", type);
  }
  snprintf(e->r.gpu_model, sizeof e->r.gpu_model, "%s", gpu_model ? gpu_model : "");
  e->r.gpus = gpus;
  e->r.steps_per_s = average(e->r.steps_per_s, steps_per_s);
  e->used = ++m->clock;
}

void gw_place_memory_restart(struct gw_place_memory *m, double after_s) {
  if (m && after_s > 0 && after_s < 7 * 86400)
    m->restart_s = average(m->restart_s, after_s);
}

void gw_place_memory_checkpoint(struct gw_place_memory *m, uint64_t shape, int64_t bytes) {
  if (!m || bytes <= 0)
    return;
  size_t i = 0;
  while (i < m->n_ckpt && m->ckpt[i].shape != shape)
    i++;
  if (i == m->n_ckpt) {
    if (m->n_ckpt < SHAPES_MAX)
      m->n_ckpt++;
    else
      i = m->next_ckpt++ % SHAPES_MAX;
  }
  m->ckpt[i].shape = shape;
  m->ckpt[i].gb = (double)bytes / 1e9;
}

void gw_place_memory_view(const struct gw_place_memory *m, uint64_t shape,
                          struct gw_place_rate *rates, size_t max, struct gw_place_ctx *c) {
  c->failures = m ? m->failures : NULL;
  c->n_failures = m ? m->n_failures : 0;
  c->rates = rates;
  c->n_rates = 0;
  c->restart_s = m ? m->restart_s : 0;
  c->checkpoint_gb = 0;
  if (!m)
    return;
  for (size_t i = 0; i < m->n_rates && c->n_rates < max; i++)
    if (m->rates[i].shape == shape)
      rates[c->n_rates++] = m->rates[i].r;
  for (size_t i = 0; i < m->n_ckpt; i++)
    if (m->ckpt[i].shape == shape)
      c->checkpoint_gb = m->ckpt[i].gb;
}
