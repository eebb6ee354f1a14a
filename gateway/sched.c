/* Jobs through their life: placement, transitions, loss, cost.
 *
 * Invariants: a live job (not succeeded/failed/cancelled) is in g->jobs; a
 * queued job is also in g->queue and has no instance; a job in provisioning
 * or later names exactly one instance whose row.job is that job. Every
 * state change goes through gw_sched_transition, which saves the row and
 * its event in one transaction and then tells attached clients. Cost is
 * accrued from the attempt's price times wall time times the local
 * provider's time_scale (simulated hours), and flushed every few seconds. */
#include "core.h"

#include "sl_err.h"
#include "sl_hmac.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_path.h"
#include "sl_time.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define T "gateway.sched"
#define COST_FLUSH_US (5 * SL_US_PER_S)

int gw_sched_emit(struct gw *g, struct gw_job *j, json_t *event) {
  j->updated_us = sl_time_real_us();
  int r = gw_store_job_save(g->store, j, event);
  if (r < 0) {
    char id[16];
    sl_err(T, "%s: cannot save job: %s", gw_job_id_str(j->id, id, sizeof id), sl_strerror(r));
    return r;
  }
  if (event)
    gw_kproto_fanout(g, j->id, event);
  return 0;
}

int gw_sched_transition(struct gw *g, struct gw_job *j, enum gw_job_state s, const char *reason) {
  j->state = s;
  snprintf(j->reason, sizeof j->reason, "%s", reason ? reason : "");
  json_t *ev = json_pack("{s:s,s:s,s:s}", "event", "state", "state", gw_job_state_name(s),
                         "reason", j->reason);
  int r = gw_sched_emit(g, j, ev);
  json_decref(ev);
  char id[16];
  sl_info(T, "%s -> %s%s%s", gw_job_id_str(j->id, id, sizeof id), gw_job_state_name(s),
          j->reason[0] ? ": " : "", j->reason);
  return r;
}

void gw_sched_set_inst_state(struct gw *g, struct gw_inst *inst, const char *state, int64_t job) {
  snprintf(inst->row.state, sizeof inst->row.state, "%s", state);
  inst->row.job = job;
  if (!strcmp(state, "idle"))
    inst->idle_since_mono_us = sl_time_mono_us();
  if (gw_store_instance_put(g->store, &inst->row) < 0)
    sl_err(T, "%s: cannot save instance", inst->row.id);
}

static void drop_live(struct gw *g, struct gw_job *j) {
  for (size_t i = 0; i < g->n_jobs; i++)
    if (g->jobs[i] == j) {
      memmove(&g->jobs[i], &g->jobs[i + 1], (g->n_jobs - i - 1) * sizeof *g->jobs);
      g->n_jobs--;
      break;
    }
  gw_job_done(j);
  free(j);
}

static void clear_placement(struct gw_job *j) {
  j->instance[0] = j->instance_type[0] = j->zone[0] = 0;
  j->price_usd_per_hour = j->on_demand_usd_per_hour = 0;
  j->spot = false;
}

void gw_sched_flush_cost(struct gw *g, struct gw_job *j, bool force) {
  if (!j->instance[0] || !j->cost_accrued_mono_us)
    return;
  int64_t now = sl_time_mono_us();
  double scale = g->cfg->local_time_scale > 0 ? g->cfg->local_time_scale : 1;
  double hours = (double)(now - j->cost_accrued_mono_us) / 3.6e9 * scale;
  double usd = hours * j->price_usd_per_hour, od = hours * j->on_demand_usd_per_hour;
  j->cost_accrued_mono_us = now;
  /* attempt_* hold what is accrued but not yet in the cost table */
  j->attempt_cost_usd += usd;
  j->attempt_on_demand_usd += od;
  j->pending_cost_s += hours * 3600;
  j->cost_usd += usd;
  j->on_demand_usd += od;
  if (!force && now < g->next_cost_flush_mono_us)
    return;
  gw_store_cost_add(g->store, j, j->attempt_cost_usd, j->attempt_on_demand_usd, j->pending_cost_s,
                    sl_time_real_us());
  j->attempt_cost_usd = j->attempt_on_demand_usd = j->pending_cost_s = 0;
  json_t *ev = json_pack("{s:s,s:o,s:o}", "event", "cost", "cost_usd", sl_json_real(j->cost_usd),
                         "on_demand_usd", sl_json_real(j->on_demand_usd));
  gw_sched_emit(g, j, ev);
  json_decref(ev);
}

/* Ends the current attempt: final cost, attempts row, instance freed. */
static void end_attempt(struct gw *g, struct gw_job *j, const char *outcome, const char *inst_state) {
  if (!j->instance[0])
    return;
  gw_sched_flush_cost(g, j, true);
  gw_store_attempt_end(g->store, j->id, j->attempt, outcome, sl_time_real_us());
  struct gw_inst *inst = gw_inst_find(g, j->instance);
  if (inst && inst->row.job == j->id)
    gw_sched_set_inst_state(g, inst, inst_state, 0);
  j->cost_accrued_mono_us = 0;
  g->kick = true;
}

void gw_sched_finish(struct gw *g, struct gw_job *j, enum gw_job_state s, const char *reason) {
  gw_queue_remove(g->queue, j->id);
  end_attempt(g, j, gw_job_state_name(s), "idle");
  gw_sched_transition(g, j, s, reason);
  drop_live(g, j);
}

void gw_sched_requeue(struct gw *g, struct gw_job *j, bool notice, const char *reason) {
  if (j->cancel_requested) {
    gw_sched_finish(g, j, GW_JOB_CANCELLED, "cancelled");
    return;
  }
  /* a %%run job has no steps: its checkpoint is a folder the worker keeps */
  json_t *ev = json_pack("{s:s,s:o,s:b,s:s}", "event", "preempted", "step",
                         !strcmp(j->kind, "run") ? json_null() : json_integer(j->ckpt_step),
                         "notice", notice, "instance", j->instance);
  gw_sched_emit(g, j, ev);
  json_decref(ev);
  end_attempt(g, j, "preempted", "draining");
  gw_sched_transition(g, j, GW_JOB_PREEMPTED, reason);
  clear_placement(j);
  j->preempted_mono_us = sl_time_mono_us();
  j->wait_register_until_us = 0;
  j->step = j->ckpt_step;
  gw_queue_push(g->queue, j->user, j->id, 1);
  gw_sched_transition(g, j, GW_JOB_QUEUED, "resuming from the latest checkpoint");
  g->kick = true;
}

bool gw_sched_retry(struct gw *g, struct gw_job *j, int64_t exit_code) {
  if (exit_code <= 128 || exit_code > 128 + 64 || j->process_retries >= g->cfg->process_retries)
    return false;
  j->process_retries++;
  char reason[160];
  snprintf(reason, sizeof reason, "the job's process was killed by signal %d (retry %d of %lld)",
           (int)(exit_code - 128), j->process_retries, (long long)g->cfg->process_retries);
  gw_sched_requeue(g, j, false, reason);
  return true;
}

int gw_sched_submit(struct gw *g, struct gw_job *j) {
  if (g->n_jobs >= GW_MAX_LIVE_JOBS)
    return SL_ELIMIT;
  j->created_us = j->updated_us = sl_time_real_us();
  int r = gw_store_job_create(g->store, j);
  if (r < 0)
    return r;
  if ((r = gw_queue_push(g->queue, j->user, j->id, 0)) < 0) {
    gw_sched_transition(g, j, GW_JOB_FAILED, "queue full");
    return r;
  }
  g->jobs[g->n_jobs++] = j;
  g->kick = true;
  return 0;
}

int gw_sched_cancel(struct gw *g, struct gw_job *j) {
  struct gw_inst *inst = j->instance[0] ? gw_inst_find(g, j->instance) : NULL;
  switch (j->state) {
  case GW_JOB_STARTING:
  case GW_JOB_RUNNING:
  case GW_JOB_CHECKPOINTING:
    if (inst && inst->registered) {
      char id[16];
      j->cancel_requested = true;
      gw_sched_emit(g, j, NULL);
      json_t *m = json_pack("{s:s,s:s}", "type", "cancel", "job", gw_job_id_str(j->id, id, sizeof id));
      gw_wproto_send(g, inst, m);
      json_decref(m);
      return 0;
    }
    /* no worker to tell */
    /* fall through */
  default:
    gw_sched_finish(g, j, GW_JOB_CANCELLED, "cancelled by user");
    return 0;
  }
}

/* ---- placement ---- */

struct wants {
  int gpus;
  int spot;                     /* 1 yes, 0 no, -1 auto */
  double max_price;
  char types[16][64];
  size_t n_types;
};

static void read_wants(const struct gw_job *j, struct wants *w) {
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
  for (char *t = strtok_r(buf, ", ", &save); t && w->n_types < 16; t = strtok_r(NULL, ", ", &save))
    snprintf(w->types[w->n_types++], sizeof w->types[0], "%s", t);
}

static bool type_allowed(const struct wants *w, const char *type) {
  if (!w->n_types)
    return true;
  for (size_t i = 0; i < w->n_types; i++)
    if (!strcmp(w->types[i], type))
      return true;
  return false;
}

static bool inst_fits(const struct wants *w, const struct gw_inst *in) {
  if (!type_allowed(w, in->row.type) || (w->gpus && in->gpus && in->gpus < w->gpus))
    return false;
  if ((w->spot == 1 && !in->row.spot) || (w->spot == 0 && in->row.spot))
    return false;
  return !w->max_price || in->row.price_usd_per_hour <= w->max_price;
}

/* The cheapest type that fits; SL_ENAME when none ever could. */
static int pick_type(struct gw *g, const struct wants *w, struct gw_instance_type *ret,
                     bool *ret_spot) {
  struct gw_instance_type *types = NULL;
  size_t n = 0;
  int r = g->prov->ops->types(g->prov, &types, &n);
  if (r < 0)
    return r;
  double best = INFINITY;
  for (size_t i = 0; i < n; i++) {
    const struct gw_instance_type *t = &types[i];
    if (!type_allowed(w, t->name) || (w->gpus && t->gpus < w->gpus))
      continue;
    for (int spot = 1; spot >= 0; spot--) {
      if ((w->spot == 1 && !spot) || (w->spot == 0 && spot))
        continue;
      double price = spot ? t->spot_usd_per_hour : t->on_demand_usd_per_hour;
      if (price <= 0 || (w->max_price && price > w->max_price) || price >= best)
        continue;
      best = price;
      *ret = *t;
      *ret_spot = spot;
    }
  }
  free(types);
  return isinf(best) ? SL_ENAME : 0;
}

static size_t active_instances(struct gw *g) {
  size_t n = 0;
  for (size_t i = 0; i < g->n_insts; i++)
    if (strcmp(g->insts[i].row.state, "draining"))
      n++;
  return n;
}

static void write_placement(struct gw_job *j, const struct gw_inst *in) {
  snprintf(j->instance, sizeof j->instance, "%s", in->row.id);
  snprintf(j->instance_type, sizeof j->instance_type, "%s", in->row.type);
  snprintf(j->zone, sizeof j->zone, "%s", in->row.zone);
  j->spot = in->row.spot;
  j->price_usd_per_hour = in->row.price_usd_per_hour;
  j->on_demand_usd_per_hour = in->row.on_demand_usd_per_hour;
  j->attempt++;
  j->metric_step = -1;
  j->attempt_cost_usd = j->attempt_on_demand_usd = j->pending_cost_s = 0;
  j->attempt_started_mono_us = j->cost_accrued_mono_us = sl_time_mono_us();
  gw_autockpt_new_attempt(&j->autockpt);
  j->autockpt.mtbp_s = 0;
}

static void emit_placed(struct gw *g, struct gw_job *j) {
  json_t *ev = json_pack("{s:s,s:s,s:s,s:s,s:b,s:o,s:o,s:i}", "event", "placed", "instance",
                         j->instance, "instance_type", j->instance_type, "zone", j->zone, "spot",
                         j->spot, "price_usd_per_hour", sl_json_real(j->price_usd_per_hour),
                         "on_demand_usd_per_hour", sl_json_real(j->on_demand_usd_per_hour),
                         "attempt", j->attempt);
  gw_sched_emit(g, j, ev);
  json_decref(ev);
  gw_store_attempt_begin(g->store, j, j->ckpt_step, sl_time_real_us());
}

static int launch(struct gw *g, struct gw_job *j, const struct gw_instance_type *t, bool spot) {
  if (g->n_insts >= GW_MAX_INSTANCES)
    return -EAGAIN;
  struct gw_inst in;
  memset(&in, 0, sizeof in);
  uint8_t rnd[6];
  sl_random_bytes(rnd, sizeof rnd);
  snprintf(in.row.id, sizeof in.row.id, "i-%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2],
           rnd[3], rnd[4], rnd[5]);
  struct gw_keypair keys;
  int r = gw_keys_generate(&keys);
  if (r < 0)
    return r;
  snprintf(in.row.type, sizeof in.row.type, "%s", t->name);
  in.row.spot = spot;
  in.row.price_usd_per_hour = spot ? t->spot_usd_per_hour : t->on_demand_usd_per_hour;
  in.row.on_demand_usd_per_hour = t->on_demand_usd_per_hour;
  memcpy(in.row.public_key, keys.public_z85, sizeof in.row.public_key);
  snprintf(in.row.user, sizeof in.row.user, "%s", j->user);
  in.row.launched_us = sl_time_real_us();
  in.gpus = t->gpus;
  in.register_by_mono_us = sl_time_mono_us() + g->cfg->register_timeout_us;

  struct gw_launch req;
  memset(&req, 0, sizeof req);
  char dir[1200], work[1300], store[1300];
  snprintf(dir, sizeof dir, "%s/instances/%s", g->cfg->state_dir, in.row.id);
  snprintf(work, sizeof work, "%s/work", dir);
  snprintf(store, sizeof store, "file://%s/store", g->cfg->state_dir);
  if (sl_mkdir_p(work, 0700) < 0)
    return -EIO;
  snprintf(req.worker_config, sizeof req.worker_config, "%s/worker.json", dir);
  snprintf(req.instance_id, sizeof req.instance_id, "%s", in.row.id);
  snprintf(req.type, sizeof req.type, "%s", t->name);
  req.spot = spot;
  struct wants w;
  read_wants(j, &w);
  req.max_price_usd_per_hour = w.max_price;
  struct gw_worker_file wf = {
    .gateway = g->worker_address, .gateway_public = g->keys.public_z85, .keys = &keys,
    .instance = in.row.id, .type = t->name, .zone = "", .spot = spot, .metadata = "",
    .work_dir = work, .store = store, .train = g->train_program,
    .metrics_per_s = g->cfg->worker_metrics_per_s,
  };
  if ((r = gw_keys_write_worker_file(req.worker_config, &wf)) < 0)
    return r;
  /* the key is recorded before the instance exists, so its first handshake passes */
  snprintf(in.row.state, sizeof in.row.state, "launching");
  in.row.job = j->id;
  snprintf(in.session, sizeof in.session, "%s", j->session);
  g->insts[g->n_insts++] = in;
  gw_store_instance_put(g->store, &in.row);
  struct gw_instance_info info;
  memset(&info, 0, sizeof info);
  r = g->prov->ops->launch(g->prov, &req, &info);
  struct gw_inst *pin = gw_inst_find(g, in.row.id);
  if (r < 0) {
    sl_debug(T, "launch of %s failed: %s", t->name, sl_strerror(r));
    unlink(req.worker_config); /* holds a secret key nobody will use */
    snprintf(pin->row.state, sizeof pin->row.state, "terminated");
    gw_store_instance_put(g->store, &pin->row);
    gw_inst_remove(g, in.row.id);
    return r;
  }
  snprintf(pin->row.zone, sizeof pin->row.zone, "%s", info.zone);
  if (info.price_usd_per_hour > 0)
    pin->row.price_usd_per_hour = info.price_usd_per_hour;
  gw_store_instance_put(g->store, &pin->row);
  sl_info(T, "launched %s (%s%s, %s) for job %lld", pin->row.id, t->name, spot ? " spot" : "",
          pin->row.zone, (long long)j->id);
  write_placement(j, pin);
  gw_sched_transition(g, j, GW_JOB_PROVISIONING, "launching an instance");
  emit_placed(g, j);
  return 0;
}

/* Tries to start job j now: an idle worker that fits, else a new instance
 * unless *no_capacity (a launch already failed in this pass). -EAGAIN: not now. */
static int place_one(struct gw *g, struct gw_job *j, bool *no_capacity) {
  struct wants w;
  read_wants(j, &w);
  for (size_t i = 0; i < g->n_insts; i++) {
    struct gw_inst *in = &g->insts[i];
    if (in->registered && !in->row.job && !strcmp(in->row.state, "idle") && inst_fits(&w, in)) {
      gw_queue_take(g->queue, j->id);
      write_placement(j, in);
      emit_placed(g, j);
      return gw_sched_assign(g, j, in);
    }
  }
  if (!g->prov || *no_capacity || active_instances(g) >= (size_t)g->cfg->max_instances)
    return -EAGAIN;
  struct gw_instance_type t;
  bool spot = false;
  int r = pick_type(g, &w, &t, &spot);
  if (r == SL_ENAME) {
    gw_sched_finish(g, j, GW_JOB_FAILED, "no instance type matches the job's gpus, spot,"
                                         " max_price and instance options");
    return 0;
  }
  if (r == 0)
    r = launch(g, j, &t, spot);
  if (r < 0 && r != -EAGAIN && r != SL_ENOTSUP && r != SL_ELIMIT) {
    char why[160];
    snprintf(why, sizeof why, "cannot launch a %s instance: %s", t.name, sl_strerror(r));
    sl_err(T, "%s", why);
    gw_sched_finish(g, j, GW_JOB_FAILED, why);
    return 0;
  }
  if (r < 0) {
    *no_capacity = true;
    return -EAGAIN;
  }
  gw_queue_take(g->queue, j->id);
  return 0;
}

void gw_sched_place(struct gw *g) {
  int64_t order[64];
  size_t n = gw_queue_order(g->queue, order, 64);
  bool no_capacity = false;
  for (size_t i = 0; i < n; i++) {
    struct gw_job *j = gw_live_job(g, order[i]);
    if (!j) {
      gw_queue_remove(g->queue, order[i]);
      continue;
    }
    place_one(g, j, &no_capacity);
  }
}

/* The fixed checkpoint_every option, or 0 for auto (absent, "auto" or not a positive number). */
static int64_t fixed_checkpoint_every(const struct gw_job *j) {
  json_t *v = json_object_get(json_object_get(j->spec, "options"), "checkpoint_every");
  if (json_is_integer(v) && json_integer_value(v) > 0)
    return json_integer_value(v);
  if (json_is_real(v) && json_real_value(v) >= 1)
    return (int64_t)json_real_value(v);
  return 0;
}

static int64_t checkpoint_every(const struct gw_job *j) {
  int64_t every = fixed_checkpoint_every(j);
  if (every)
    return every;
  /* auto: the Young/Daly interval once known (from an earlier attempt);
   * before that a tenth of the run, at least every 10 and at most every
   * 500 steps, until the first step rate is measured */
  if (j->autockpt.sent_steps > 0)
    return j->autockpt.sent_steps;
  every = j->steps / 10;
  return every < 10 ? 10 : every > 500 ? 500 : every;
}

static double time_scale(const struct gw *g) {
  return g->cfg->local_time_scale > 0 ? g->cfg->local_time_scale : 1;
}

/* The mean time to preemption of type, simulated seconds; 0 when unknown. */
static double type_mtbp_s(struct gw *g, const char *type) {
  struct gw_instance_type *types = NULL;
  size_t n = 0;
  double s = 0;
  if (!g->prov || g->prov->ops->types(g->prov, &types, &n) < 0)
    return 0;
  for (size_t i = 0; i < n; i++)
    if (!strcmp(types[i].name, type))
      s = types[i].mean_time_to_preempt_s;
  free(types);
  return s > 0 ? s : 0;
}

void gw_sched_autockpt(struct gw *g, struct gw_job *j, bool lookup_mtbp) {
  struct gw_autockpt *a = &j->autockpt;
  if (strcmp(j->kind, "train") || fixed_checkpoint_every(j) || !j->spot || !j->instance[0])
    return; /* on-demand capacity is not preempted: the first interval stays */
  if (lookup_mtbp || !a->mtbp_s)
    a->mtbp_s = type_mtbp_s(g, j->instance_type);
  double scale = time_scale(g), write_sim = gw_autockpt_write_sim_s(a, scale);
  int64_t steps = gw_autockpt_steps(write_sim, a->mtbp_s, a->steps_per_s, scale, j->steps);
  if (steps <= 0 || (a->announced && !gw_autockpt_changed(a->sent_steps, steps)))
    return;
  struct gw_inst *inst = gw_inst_find(g, j->instance);
  if (a->sent_steps != steps && inst && inst->row.job == j->id) {
    char id[16];
    json_t *m = json_pack("{s:s,s:s,s:I}", "type", "checkpoint_every", "job",
                          gw_job_id_str(j->id, id, sizeof id), "steps", (json_int_t)steps);
    gw_wproto_send(g, inst, m);
    json_decref(m);
  }
  a->sent_steps = steps;
  a->announced = true;
  json_t *ev = json_pack("{s:s,s:I,s:o,s:o,s:o}", "event", "checkpoint_interval", "steps",
                         (json_int_t)steps, "seconds",
                         sl_json_real(gw_young_daly_s(write_sim, a->mtbp_s)), "write_s",
                         sl_json_real(write_sim), "mtbp_s", sl_json_real(a->mtbp_s));
  gw_sched_emit(g, j, ev);
  json_decref(ev);
}

int gw_sched_send_assign(struct gw *g, struct gw_job *j, struct gw_inst *inst) {
  char id[16];
  gw_job_id_str(j->id, id, sizeof id);
  int64_t every = checkpoint_every(j);
  if (!fixed_checkpoint_every(j))
    j->autockpt.sent_steps = every;
  json_t *m = json_pack("{s:s,s:s,s:i,s:s,s:O,s:o,s:I,s:{}}", "type", "assign", "job", id,
                        "attempt", j->attempt, "kind", j->kind, "spec", j->spec, "restore",
                        j->ckpt_key[0] ? json_string(j->ckpt_key) : json_null(),
                        "checkpoint_every", (json_int_t)every, "env");
  int r = gw_wproto_send(g, inst, m);
  json_decref(m);
  return r;
}

int gw_sched_assign(struct gw *g, struct gw_job *j, struct gw_inst *inst) {
  int r = gw_sched_send_assign(g, j, inst);
  if (r < 0)
    return r;
  gw_sched_set_inst_state(g, inst, "busy", j->id);
  snprintf(inst->session, sizeof inst->session, "%s", j->session);
  inst->notice = false;
  /* Every attempt after a preemption resumes (a train job from its newest
   * checkpoint, a %%run job from its folder, without steps); a first attempt
   * that restores a trained model (eval, sample) says so too. after_s is null
   * when the preemption's time is unknown (before a gateway restart). */
  if (j->ckpt_key[0] || j->attempt > 1) {
    double after_s = (double)(sl_time_mono_us() - j->preempted_mono_us) / 1e6;
    json_t *ev = json_pack("{s:s,s:o,s:s,s:s,s:o}", "event", "resumed", "from_step",
                           !strcmp(j->kind, "run") ? json_null() : json_integer(j->ckpt_step),
                           "instance_type", j->instance_type, "zone", j->zone, "after_s",
                           j->preempted_mono_us ? sl_json_real(after_s) : json_null());
    gw_sched_emit(g, j, ev);
    json_decref(ev);
  }
  return gw_sched_transition(g, j, GW_JOB_STARTING, "assigned to a worker");
}

/* ---- loss, idle, provider events ---- */

void gw_sched_instance_gone(struct gw *g, const char *id, const char *why) {
  struct gw_inst *in = gw_inst_find(g, id);
  if (!in)
    return;
  bool notice = in->notice;
  struct gw_job *j = in->row.job ? gw_live_job(g, in->row.job) : NULL;
  sl_info(T, "instance %s gone: %s", id, why);
  if (j && !strcmp(j->instance, id))
    gw_sched_requeue(g, j, notice, why);
  /* after the requeue, whose end of the attempt saves the instance as
   * draining: a row left so would come back to life at the next start */
  snprintf(in->row.state, sizeof in->row.state, "terminated");
  gw_store_instance_put(g->store, &in->row);
  gw_inst_remove(g, id);
  g->kick = true;
}

void gw_sched_terminate(struct gw *g, struct gw_inst *in, const char *why) {
  char id[32];
  snprintf(id, sizeof id, "%s", in->row.id);
  if (in->registered) {
    json_t *m = json_pack("{s:s}", "type", "shutdown");
    gw_wproto_send(g, in, m);
    json_decref(m);
  }
  if (g->prov)
    g->prov->ops->terminate(g->prov, id);
  gw_sched_instance_gone(g, id, why);
}

void gw_sched_on_provider_event(void *userdata, const struct gw_provider_event *ev) {
  struct gw *g = userdata;
  if (ev->kind == GW_PROVIDER_CAPACITY) {
    g->kick = true; /* queued jobs may fit now */
    return;
  }
  struct gw_inst *in = gw_inst_find(g, ev->instance_id);
  if (!in)
    return;
  if (ev->kind == GW_PROVIDER_TERMINATED) {
    gw_sched_instance_gone(g, ev->instance_id,
                           ev->by_market ? "instance preempted by the market" : "instance terminated");
  } else if (ev->kind == GW_PROVIDER_NOTICE && !in->notice) {
    in->notice = true;
    struct gw_job *j = in->row.job ? gw_live_job(g, in->row.job) : NULL;
    if (j) {
      json_t *e = json_pack("{s:s,s:s,s:I,s:s}", "event", "notice", "action", "terminate",
                            "deadline_us", (json_int_t)ev->deadline_us, "instance", in->row.id);
      gw_sched_emit(g, j, e);
      json_decref(e);
    }
  }
}

void gw_sched_housekeeping(struct gw *g) {
  int64_t now = sl_time_mono_us();
  for (size_t i = 0; i < g->n_insts;) {
    struct gw_inst *in = &g->insts[i];
    const char *why = NULL;
    if (!in->registered && in->register_by_mono_us && now > in->register_by_mono_us)
      why = "worker did not register in time";
    else if (in->registered && now - in->last_seen_mono_us > g->cfg->heartbeat_timeout_us)
      why = "worker lost (no heartbeat)";
    else if (in->registered && !in->row.job && !strcmp(in->row.state, "idle") &&
             now - in->idle_since_mono_us > gw_config_worker_timeout_us(g->cfg, in->row.user))
      why = "idle worker shut down";
    if (why) {
      sl_info(T, "%s: %s", in->row.id, why);
      gw_sched_terminate(g, in, why);
      continue; /* the array shifted */
    }
    i++;
  }
  gw_idle_check(g);
  for (size_t i = 0; i < g->n_jobs; i++)
    gw_sched_flush_cost(g, g->jobs[i], false);
  if (now >= g->next_cost_flush_mono_us)
    g->next_cost_flush_mono_us = now + COST_FLUSH_US;
}

/* ---- restart ---- */

static void load_instances(struct gw *g) {
  struct gw_instance_row *rows = NULL;
  size_t n = 0;
  if (gw_store_instances_live(g->store, &rows, &n) < 0)
    return;
  int64_t by = sl_time_mono_us() + g->cfg->register_timeout_us;
  for (size_t i = 0; i < n && g->n_insts < GW_MAX_INSTANCES; i++) {
    struct gw_inst *in = &g->insts[g->n_insts++];
    memset(in, 0, sizeof *in);
    in->row = rows[i];
    in->register_by_mono_us = by;
    in->idle_since_mono_us = sl_time_mono_us(); /* else an idle worker is stopped at once */
  }
  free(rows);
  /* provider instances the table does not know are stray: stop them */
  struct gw_instance_info *list = NULL;
  size_t nl = 0;
  if (g->prov && g->prov->ops->list(g->prov, &list, &nl) == 0) {
    for (size_t i = 0; i < nl; i++)
      if (!gw_inst_find(g, list[i].instance_id)) {
        sl_warn(T, "terminating unknown instance %s", list[i].instance_id);
        g->prov->ops->terminate(g->prov, list[i].instance_id);
      }
    free(list);
  }
}

int gw_sched_load(struct gw *g) {
  load_instances(g);
  struct gw_job *jobs = NULL;
  size_t n = 0;
  int r = gw_store_jobs_list(g->store, NULL, true, GW_MAX_LIVE_JOBS, &jobs, &n);
  if (r < 0)
    return r;
  int64_t now = sl_time_mono_us();
  for (size_t k = n; k-- > 0;) { /* oldest first keeps FIFO order */
    struct gw_job *j = malloc(sizeof *j);
    if (!j)
      break;
    *j = jobs[k];
    jobs[k].spec = NULL;
    g->jobs[g->n_jobs++] = j;
    json_t *ev = json_pack("{s:s,s:s}", "event", "gateway", "action", "restarted");
    gw_sched_emit(g, j, ev);
    json_decref(ev);
    struct gw_inst *in = j->instance[0] ? gw_inst_find(g, j->instance) : NULL;
    if (j->state == GW_JOB_QUEUED || j->state == GW_JOB_PREEMPTED) {
      clear_placement(j);
      gw_queue_push(g->queue, j->user, j->id, j->state == GW_JOB_PREEMPTED);
      if (j->state == GW_JOB_PREEMPTED)
        gw_sched_transition(g, j, GW_JOB_QUEUED, "resuming after a gateway restart");
    } else if (in && in->row.job == j->id) {
      j->wait_register_until_us = in->register_by_mono_us;
      if (gw_store_attempt_metric_step(g->store, j->id, &j->metric_step) < 0)
        j->metric_step = -1;
      j->attempt_started_mono_us = j->cost_accrued_mono_us = now;
    } else {
      gw_sched_requeue(g, j, false, "instance lost while the gateway was down");
    }
  }
  gw_store_jobs_free(jobs, n);
  /* an instance row can name a job that is not on it: a gateway that died
   * inside launch() saved the row but not the job's placement */
  for (size_t i = 0; i < g->n_insts; i++) {
    struct gw_inst *in = &g->insts[i];
    struct gw_job *j = in->row.job ? gw_live_job(g, in->row.job) : NULL;
    if (in->row.job && (!j || strcmp(j->instance, in->row.id))) {
      in->row.job = 0;
      gw_store_instance_put(g->store, &in->row);
    }
  }
  g->kick = true;
  return 0;
}
