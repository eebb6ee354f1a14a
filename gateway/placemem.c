/* Placement's memory (placemem.h). Bounded tables, no I/O, no clock (times
 * come in): a failure is one entry per (provider, type, zone, market),
 * counted while each comes within GW_PLACE_MEMORY_US of the last; a rate
 * is one entry per (shape, type), an exponential average (weight 0.3 for
 * the newest) so a type's speed follows the job's recent attempts. Restart
 * times are one gateway-wide average: how long a restart takes depends on
 * the provider and the store more than on the job. The memory is written
 * to JSON and read back from it for the scheduler to keep across gateway
 * restarts. */
#include "placemem.h"

#include "provider.h"

#include "sl_json.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#define NEW_WEIGHT 0.3
#define SHAPES_MAX 64
#define RESTART_MAX_S (7 * 86400.0)
#define FAILURE_COUNT_MAX 1000

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
  uint64_t changes;
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

/* The entry of (prov, type, zone, market): found, or a new empty one (the
 * oldest entry's place when full). */
static struct gw_place_failure *failure_entry(struct gw_place_memory *m,
                                              const struct gw_provider *prov, const char *type,
                                              const char *zone, bool spot) {
  size_t oldest = 0;
  for (size_t i = 0; i < m->n_failures; i++) {
    struct gw_place_failure *e = &m->failures[i];
    if (e->prov == prov && e->spot == spot && !strcmp(e->type, type) && !strcmp(e->zone, zone))
      return e;
    if (e->at_us < m->failures[oldest].at_us)
      oldest = i;
  }
  struct gw_place_failure *f = m->n_failures < GW_PLACEMEM_FAILURES_MAX
                                   ? &m->failures[m->n_failures++]
                                   : &m->failures[oldest];
  memset(f, 0, sizeof *f);
  f->prov = prov;
  snprintf(f->type, sizeof f->type, "%s", type);
  snprintf(f->zone, sizeof f->zone, "%s", zone);
  f->spot = spot;
  return f;
}

void gw_place_memory_failure(struct gw_place_memory *m, const struct gw_provider *prov,
                             const char *type, const char *zone, bool spot, bool capacity,
                             int64_t now_us) {
  if (!m || !type)
    return;
  struct gw_place_failure *f = failure_entry(m, prov, type, zone ? zone : "", spot);
  f->count = f->count && now_us - f->at_us < GW_PLACE_MEMORY_US ? f->count + 1 : 1;
  f->at_us = now_us;
  f->capacity = capacity;
  m->changes++;
}

void gw_place_memory_release(struct gw_place_memory *m, const struct gw_provider *prov) {
  if (!m)
    return;
  for (size_t i = 0; i < m->n_failures;)
    if (m->failures[i].prov == prov && m->failures[i].capacity) {
      m->failures[i] = m->failures[--m->n_failures];
      m->changes++;
    } else
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
  m->changes++;
}

void gw_place_memory_restart(struct gw_place_memory *m, double after_s) {
  if (m && after_s > 0 && after_s < RESTART_MAX_S) {
    m->restart_s = average(m->restart_s, after_s);
    m->changes++;
  }
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
  m->changes++;
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

uint64_t gw_place_memory_changes(const struct gw_place_memory *m) { return m ? m->changes : 0; }

/* ---- kept across restarts ---- */

static json_t *shape_json(uint64_t shape) {
  char hex[17];
  snprintf(hex, sizeof hex, "%016" PRIx64, shape);
  return json_string(hex);
}

static bool shape_of(const json_t *e, uint64_t *ret) {
  const char *hex = json_string_value(json_object_get(e, "shape"));
  if (!hex || strlen(hex) != 16 || strspn(hex, "0123456789abcdef") != 16)
    return false;
  *ret = strtoull(hex, NULL, 16);
  return true;
}

/* A string member that fits size bytes (its terminator included). */
static const char *text_of(const json_t *e, const char *key, size_t size) {
  const char *v = json_string_value(json_object_get(e, key));
  return v && strlen(v) < size ? v : NULL;
}

/* A finite number member (an integer too), else NAN. */
static double number_of(const json_t *e, const char *key) {
  const json_t *v = json_object_get(e, key);
  return json_is_number(v) && isfinite(json_number_value(v)) ? json_number_value(v) : NAN;
}

json_t *gw_place_memory_json(const struct gw_place_memory *m, int64_t now_us, int64_t now_real_us) {
  if (!m)
    return NULL;
  json_t *rates = json_array(), *ckpts = json_array(), *fails = json_array();
  json_t *o = json_pack("{s:o,s:o,s:o,s:o}", "restart_s", sl_json_real(m->restart_s), "rates", rates,
                        "checkpoints", ckpts, "failures", fails);
  if (!o)
    return NULL;
  /* rates oldest first: read back in order, the oldest goes first again */
  uint64_t after = 0;
  for (size_t k = 0; k < m->n_rates; k++) {
    const struct rate_entry *e = NULL;
    for (size_t i = 0; i < m->n_rates; i++)
      if (m->rates[i].used > after && (!e || m->rates[i].used < e->used))
        e = &m->rates[i];
    if (!e)
      break;
    after = e->used;
    json_array_append_new(rates, json_pack("{s:o,s:s,s:s,s:i,s:o}", "shape", shape_json(e->shape),
                                           "type", e->r.type, "gpu_model", e->r.gpu_model, "gpus",
                                           e->r.gpus, "steps_per_s", sl_json_real(e->r.steps_per_s)));
  }
  for (size_t i = 0; i < m->n_ckpt; i++)
    json_array_append_new(ckpts, json_pack("{s:o,s:o}", "shape", shape_json(m->ckpt[i].shape), "gb",
                                           sl_json_real(m->ckpt[i].gb)));
  for (size_t i = 0; i < m->n_failures; i++) {
    const struct gw_place_failure *f = &m->failures[i];
    if (!f->prov || now_us - f->at_us >= GW_PLACE_MEMORY_US)
      continue;
    json_array_append_new(fails, json_pack("{s:s,s:s,s:s,s:b,s:b,s:i,s:I}", "provider", f->prov->name,
                                           "type", f->type, "zone", f->zone, "spot", f->spot,
                                           "capacity", f->capacity, "count", f->count, "at_us",
                                           (json_int_t)(now_real_us - (now_us - f->at_us))));
  }
  return o;
}

static bool load_rate(struct gw_place_memory *m, const json_t *e) {
  uint64_t shape;
  const char *type = text_of(e, "type", sizeof m->rates[0].r.type);
  const char *model = text_of(e, "gpu_model", sizeof m->rates[0].r.gpu_model);
  double gpus = number_of(e, "gpus"), rate = number_of(e, "steps_per_s");
  if (!shape_of(e, &shape) || !type || !*type || !model || !(gpus >= 0 && gpus <= 1024) ||
      gpus != floor(gpus) || !(rate > 0))
    return false;
  gw_place_memory_rate(m, shape, type, model, (int)gpus, rate);
  return true;
}

static bool load_checkpoint(struct gw_place_memory *m, const json_t *e) {
  uint64_t shape;
  double gb = number_of(e, "gb");
  if (!shape_of(e, &shape) || !(gb > 0 && gb < 1e6))
    return false;
  gw_place_memory_checkpoint(m, shape, (int64_t)(gb * 1e9));
  return true;
}

/* 1: added; 0: not remembered any more, or of a provider gone; -1: malformed. */
static int load_failure(struct gw_place_memory *m, const json_t *e,
                         struct gw_provider *const *provs, size_t n_provs, int64_t now_us,
                         int64_t now_real_us) {
  const char *name = json_string_value(json_object_get(e, "provider"));
  const char *type = text_of(e, "type", sizeof m->failures[0].type);
  const char *zone = text_of(e, "zone", sizeof m->failures[0].zone);
  const json_t *spot = json_object_get(e, "spot"), *capacity = json_object_get(e, "capacity");
  const json_t *count = json_object_get(e, "count"), *at = json_object_get(e, "at_us");
  if (!name || !type || !*type || !zone || !json_is_boolean(spot) || !json_is_boolean(capacity) ||
      !json_is_integer(count) || json_integer_value(count) < 1 || !json_is_integer(at))
    return -1;
  struct gw_provider *prov = NULL;
  for (size_t i = 0; i < n_provs && !prov; i++)
    if (provs[i] && !strcmp(provs[i]->name, name))
      prov = provs[i];
  /* compared before the age is taken: at_us may be any integer (a damaged row) */
  int64_t at_us = (int64_t)json_integer_value(at);
  if (!prov || at_us <= now_real_us - GW_PLACE_MEMORY_US)
    return 0;
  int64_t age_us = now_real_us - at_us;
  struct gw_place_failure *f = failure_entry(m, prov, type, zone, json_is_true(spot));
  json_int_t n = json_integer_value(count);
  f->count = n > FAILURE_COUNT_MAX ? FAILURE_COUNT_MAX : (int)n;
  f->at_us = now_us - (age_us > 0 ? age_us : 0);
  f->capacity = json_is_true(capacity);
  m->changes++;
  return 1;
}

size_t gw_place_memory_load(struct gw_place_memory *m, const json_t *j,
                            struct gw_provider *const *provs, size_t n_provs, int64_t now_us,
                            int64_t now_real_us, size_t *ret_skipped) {
  size_t n = 0, skipped = 0, i;
  const json_t *e;
  if (m && json_is_object(j)) {
    double restart_s = number_of(j, "restart_s");
    if (restart_s > 0 && restart_s < RESTART_MAX_S) {
      m->restart_s = restart_s;
      n++;
    } else if (json_object_get(j, "restart_s") && restart_s != 0) {
      skipped++;
    }
    json_array_foreach(json_object_get(j, "rates"), i, e) {
      bool ok = load_rate(m, e);
      n += ok;
      skipped += !ok;
    }
    json_array_foreach(json_object_get(j, "checkpoints"), i, e) {
      bool ok = load_checkpoint(m, e);
      n += ok;
      skipped += !ok;
    }
    json_array_foreach(json_object_get(j, "failures"), i, e) {
      int r = load_failure(m, e, provs, n_provs, now_us, now_real_us);
      n += r > 0;
      skipped += r < 0;
    }
  }
  if (ret_skipped)
    *ret_skipped = skipped;
  return n;
}
