/* The scheduler's side of placement (sched_int.h): what it remembers for
 * place.h (placemem.h) and the views it hands it. The scheduler calls the
 * gw_sched_note_* hooks where things happen (a launch refused for
 * capacity, a market preemption, an attempt's end, a checkpoint, a
 * resume); picks and the %instances ranking read the memory through
 * gw_sched_place_ctx. A job's shape is a hash of what makes its steps cost
 * what they do (kind, model, batch, context, GPUs, nodes, precision, the
 * script), so an earlier job of the same shape tells how fast this one
 * runs on each type. */
#include "sched_int.h"

#include "placemem.h"

#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define T "gateway.place"

static uint64_t fnv1a(uint64_t h, const char *s) {
  for (; s && *s; s++)
    h = (h ^ (unsigned char)*s) * UINT64_C(0x100000001b3);
  return (h ^ 0xff) * UINT64_C(0x100000001b3); /* a field's end */
}

static uint64_t hash_json(uint64_t h, const json_t *v) {
  char *text = v ? json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY) : NULL;
  h = fnv1a(h, text ? text : "-");
  free(text);
  return h;
}

uint64_t gw_sched_job_shape(const struct gw_job *j) {
  static const char *const opts[] = {"batch", "ctx", "gpus", "nodes", "precision", "threads"};
  const json_t *o = json_object_get(j->spec, "options");
  uint64_t h = fnv1a(UINT64_C(0xcbf29ce484222325), j->kind);
  h = hash_json(h, json_object_get(j->spec, "model"));
  h = hash_json(h, json_object_get(j->spec, "script"));
  for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
    h = hash_json(h, json_object_get(o, opts[i]));
  return h;
}

/* Wall seconds between j's checkpoints, from its interval in steps and a
 * step rate (its own now, else one measured for its shape); 0 unknown. */
static double checkpoint_s(const struct gw_job *j, const struct gw_place_ctx *c) {
  double rate = j->autockpt.steps_per_s;
  for (size_t i = 0; i < c->n_rates && !(rate > 0); i++)
    rate = c->rates[i].steps_per_s;
  if (!(rate > 0) || strcmp(j->kind, "train"))
    return 0;
  const json_t *v = json_object_get(json_object_get(j->spec, "options"), "checkpoint_every");
  double every = json_is_number(v) && json_number_value(v) >= 1 ? json_number_value(v)
                 : j->autockpt.sent_steps > 0                   ? (double)j->autockpt.sent_steps
                                                                : 0;
  if (!every) /* the first interval of checkpoint_every=auto (scheduler.c) */
    every = j->steps / 10 < 10 ? 10 : j->steps / 10 > 500 ? 500 : (double)(j->steps / 10);
  return every / rate;
}

void gw_sched_place_ctx(struct gw_sched *s, const struct gw_job *j, struct gw_place_rate *rates,
                        struct gw_place_ctx *c) {
  memset(c, 0, sizeof *c);
  gw_place_memory_view(s->mem, j ? gw_sched_job_shape(j) : 0, rates, GW_PLACE_RATES_MAX, c);
  c->now_us = sl_time_mono_us();
  c->now_real_us = sl_time_real_us();
  c->pass_us = j ? s->pass_mono_us : c->now_us;
  if (!j) {
    c->n_rates = 0; /* no job: prior units only */
    c->checkpoint_gb = 0;
    return;
  }
  c->checkpoint_s = checkpoint_s(j, c);
  if (!strcmp(j->kind, "train") && j->steps > j->ckpt_step)
    c->remaining_steps = (double)(j->steps - j->ckpt_step);
  if (!j->ckpt_key[0] && strcmp(j->kind, "run"))
    c->checkpoint_gb = 0; /* nothing to move yet */
}

int gw_sched_pick_offer(struct gw_sched *s, const struct gw_job *j, const struct gw_wants *w,
                        struct gw_offer *ret, bool *ret_spot) {
  struct gw_place_rate rates[GW_PLACE_RATES_MAX];
  struct gw_place_ctx c;
  gw_sched_place_ctx(s, j, rates, &c);
  size_t i;
  int r = gw_place_pick(w, &c, s->offers, s->n_offers, &i, ret_spot);
  if (r == 0)
    *ret = s->offers[i];
  return r;
}

bool gw_sched_capacity_error(int error) { return error == -EAGAIN || error == SL_ENOTSUP; }

void gw_sched_note_refused(struct gw_sched *s, struct gw_provider *p, const char *type,
                           const char *zone, bool spot, int error) {
  if (!gw_sched_capacity_error(error))
    return;
  s->refused++;
  sl_info(T, "%s: no capacity for %s%s%s%s; held back for a while", p ? p->name : "?", type,
          zone && *zone ? " in " : "", zone ? zone : "", spot ? " (spot)" : "");
  gw_place_memory_failure(s->mem, p, type, zone, spot, true, sl_time_mono_us());
}

bool gw_sched_market_action(const char *action) {
  return !strcmp(action, "terminate") || !strcmp(action, "stop") || !strcmp(action, "hibernate") ||
         !strcmp(action, "preempted");
}

void gw_sched_note_preempted(struct gw_sched *s, struct gw_inst *in) {
  if (!in->row.spot || in->market_noted)
    return;
  in->market_noted = true;
  sl_info(T, "%s: %s%s%s preempted; placed elsewhere first for a while", in->row.provider,
          in->row.type, in->row.zone[0] ? " in " : "", in->row.zone);
  gw_place_memory_failure(s->mem, in->prov, in->row.type, in->row.zone, true, false,
                          sl_time_mono_us());
}

void gw_sched_note_capacity(struct gw_sched *s, struct gw_provider *p) {
  gw_place_memory_release(s->mem, p);
}

void gw_sched_note_attempt(struct gw_sched *s, const struct gw_job *j) {
  if (!(j->autockpt.steps_per_s > 0) || !j->instance_type[0])
    return;
  struct gw_inst *in = gw_fleet_inst(s->fleet, j->instance);
  struct gw_instance_type t;
  memset(&t, 0, sizeof t);
  if (!in || !in->prov || gw_provider_type(in->prov, j->instance_type, &t) < 0)
    t.gpus = in ? in->gpus : 0;
  gw_place_memory_rate(s->mem, gw_sched_job_shape(j), j->instance_type, t.gpu_model, t.gpus,
                       j->autockpt.steps_per_s);
}

void gw_sched_note_event(struct gw_sched *s, const struct gw_job *j, const json_t *event) {
  const char *kind = sl_json_get_str(event, "event", "");
  if (!strcmp(kind, "checkpoint"))
    gw_place_memory_checkpoint(s->mem, gw_sched_job_shape(j), sl_json_get_int(event, "bytes", 0));
  else if (!strcmp(kind, "resumed") && json_is_number(json_object_get(event, "after_s")))
    gw_place_memory_restart(s->mem, sl_json_get_num(event, "after_s", 0));
}

void gw_sched_offer_fill(struct gw_sched *s, struct gw_offer *o) {
  o->time_scale = gw_provider_time_scale(o->prov);
  const char *region = o->type.region[0] ? o->type.region
                       : s->cfg ? gw_config_provider_option(s->cfg, o->prov->name, "region")
                                : NULL;
  snprintf(o->region, sizeof o->region, "%s", region ? region : "");
}

size_t gw_sched_rank_market(struct gw_sched *s, const struct gw_wants *w,
                            const struct gw_offer *offers, size_t n, struct gw_place_ranked *ret,
                            size_t max) {
  struct gw_place_rate rates[GW_PLACE_RATES_MAX];
  struct gw_place_ctx c;
  gw_sched_place_ctx(s, NULL, rates, &c);
  return gw_place_rank(w, &c, offers, n, ret, max);
}

int gw_sched_check_offers(struct gw_sched *s, const struct gw_job *j, char *err, size_t err_size) {
  static struct gw_offer offers[GW_SCHED_MARKET_MAX];
  size_t n = gw_sched_market(s, offers, GW_SCHED_MARKET_MAX);
  if (!n)
    return 0; /* no market to judge by yet: placement decides */
  struct gw_wants w;
  gw_sched_wants(s, j, &w);
  if (json_object_get(json_object_get(j->spec, "options"), "deadline"))
    w.spot = -1; /* a deadline may use either market, whatever spot= says */
  return gw_place_explain(&w, offers, n, err, err_size);
}

int gw_sched_check_region(struct gw_sched *s, const char *region, char *err, size_t err_size) {
  static struct gw_offer offers[GW_SCHED_MARKET_MAX];
  size_t n = gw_sched_market(s, offers, GW_SCHED_MARKET_MAX);
  if (!region || !*region || !n)
    return 0; /* no market to judge by yet: placement decides */
  char known[160] = "";
  size_t len = 0;
  for (size_t i = 0; i < n; i++) {
    if (!strcmp(offers[i].region, region))
      return 0;
    if (!offers[i].region[0] || strstr(known, offers[i].region))
      continue;
    int k = snprintf(known + len, sizeof known - len, "%s%s", len ? ", " : "", offers[i].region);
    if (k > 0 && (size_t)k < sizeof known - len)
      len += (size_t)k;
  }
  snprintf(err, err_size, "no provider offers region \"%.40s\"%s%s", region,
           len ? " (regions: " : "", len ? known : "");
  if (len && strlen(err) + 1 < err_size)
    strcat(err, ")");
  return SL_ENAME;
}
