/* The in-process gateway of the unit tests (gw-fixture.h).
 *
 * Built in the order gateway.c builds it and subscribed in the same order,
 * so the kernel protocol and the ledger see the bus exactly as they do in
 * the gateway; the capturing sink comes last and sees every kind. The fake
 * provider keeps its events pending until its loop timer runs, as the
 * provider contract asks (events never arrive from inside an operation). */
#include "gw-fixture.h"

#include "sl_err.h"
#include "sl_file.h"
#include "sl_hmac.h"
#include "sl_json.h"
#include "sl_time.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the scripted provider ---- */

static struct fake_provider *fp_of(struct gw_provider *p) {
  return (struct fake_provider *)p;
}

static struct fp_call *fp_record(struct fake_provider *p, enum fp_call_kind kind, const char *id) {
  if (p->n_calls == FP_MAX_CALLS)
    return NULL;
  struct fp_call *c = &p->calls[p->n_calls++];
  memset(c, 0, sizeof *c);
  c->kind = kind;
  snprintf(c->id, sizeof c->id, "%s", id ? id : "");
  return c;
}

static struct fp_inst *fp_inst(struct fake_provider *p, const char *id) {
  for (size_t i = 0; i < p->n_insts; i++)
    if (!strcmp(p->insts[i].id, id))
      return &p->insts[i];
  return NULL;
}

size_t fp_count(const struct fake_provider *p, enum fp_call_kind kind, const char *id) {
  size_t n = 0;
  for (size_t i = 0; i < p->n_calls; i++)
    if (p->calls[i].kind == kind && (!id || !strcmp(p->calls[i].id, id)))
      n++;
  return n;
}

const struct fp_call *fp_last(const struct fake_provider *p, enum fp_call_kind kind) {
  for (size_t i = p->n_calls; i-- > 0;)
    if (p->calls[i].kind == kind)
      return &p->calls[i];
  return NULL;
}

void fp_post(struct fake_provider *p, const struct gw_provider_event *ev) {
  if (p->n_pending == FP_MAX_PENDING) {
    fprintf(stderr, "fake provider: too many pending events\n");
    return;
  }
  p->pending[p->n_pending++] = *ev;
  gw_loop_set_timer(p->loop, p->timer, 0); /* due now: the next turn delivers */
}

void fp_launched(struct fake_provider *p, const char *id) {
  struct gw_provider_event ev = {.kind = GW_PROVIDER_LAUNCHED};
  snprintf(ev.instance_id, sizeof ev.instance_id, "%s", id);
  struct fp_inst *in = fp_inst(p, id);
  snprintf(ev.info.instance_id, sizeof ev.info.instance_id, "%s", id);
  snprintf(ev.info.zone, sizeof ev.info.zone, "%s", p->zone);
  if (in) {
    snprintf(ev.info.type, sizeof ev.info.type, "%s", in->type);
    ev.info.spot = in->spot;
  }
  ev.info.running = true;
  ev.info.launched_us = sl_time_real_us();
  fp_post(p, &ev);
}

void fp_launch_failed(struct fake_provider *p, const char *id) {
  struct gw_provider_event ev = {.kind = GW_PROVIDER_LAUNCH_FAILED, .error = -EAGAIN};
  snprintf(ev.instance_id, sizeof ev.instance_id, "%s", id);
  snprintf(ev.message, sizeof ev.message, "no capacity (fake)");
  struct fp_inst *in = fp_inst(p, id);
  if (in)
    in->alive = false;
  fp_post(p, &ev);
}

void fp_notice(struct fake_provider *p, const char *id, int64_t in_us) {
  struct gw_provider_event ev = {.kind = GW_PROVIDER_NOTICE,
                                 .deadline_us = sl_time_real_us() + in_us};
  snprintf(ev.instance_id, sizeof ev.instance_id, "%s", id);
  fp_post(p, &ev);
}

void fp_terminated(struct fake_provider *p, const char *id, bool by_market) {
  struct gw_provider_event ev = {.kind = GW_PROVIDER_TERMINATED, .by_market = by_market};
  snprintf(ev.instance_id, sizeof ev.instance_id, "%s", id);
  struct fp_inst *in = fp_inst(p, id);
  if (in)
    in->alive = false;
  fp_post(p, &ev);
}

void fp_capacity(struct fake_provider *p) {
  fp_post(p, &(struct gw_provider_event){.kind = GW_PROVIDER_CAPACITY});
}

static int64_t fp_deliver(struct gw_loop *l, int64_t id, int64_t now_us, void *data) {
  (void)l; (void)id; (void)now_us;
  struct fake_provider *p = data;
  /* one event at a time off the front: a callback may post more */
  while (p->n_pending) {
    struct gw_provider_event ev = p->pending[0];
    memmove(&p->pending[0], &p->pending[1], (p->n_pending - 1) * sizeof *p->pending);
    p->n_pending--;
    p->base.on_event(p->base.userdata, &p->base, &ev);
  }
  return INT64_MAX;
}

static int fp_launch_op(struct gw_provider *gp, const struct gw_launch *req,
                        char ret_id[GW_INSTANCE_ID_MAX]) {
  struct fake_provider *p = fp_of(gp);
  struct fp_call *c = fp_record(p, FP_CALL_LAUNCH, NULL);
  if (c) {
    snprintf(c->type, sizeof c->type, "%s", req->type);
    c->spot = req->spot;
    c->max_price = req->max_price_usd_per_hour;
    c->job = req->job;
  }
  struct gw_instance_type t;
  if (gw_provider_type(gp, req->type, &t) < 0)
    return SL_ENAME;
  if (p->mode == FP_REFUSE || (p->spot_refused && req->spot))
    return -EAGAIN;
  int alive = 0;
  for (size_t i = 0; i < p->n_insts; i++)
    alive += p->insts[i].alive;
  if (p->capacity && alive >= p->capacity)
    return -EAGAIN;
  if (p->n_insts == FP_MAX_INSTS)
    return -EAGAIN;
  struct fp_inst *in = &p->insts[p->n_insts++];
  memset(in, 0, sizeof *in);
  snprintf(in->id, sizeof in->id, "f-%d", ++p->next_id);
  snprintf(in->type, sizeof in->type, "%s", req->type);
  in->spot = req->spot;
  in->alive = true;
  if (c)
    snprintf(c->id, sizeof c->id, "%s", in->id);
  snprintf(ret_id, GW_INSTANCE_ID_MAX, "%s", in->id);
  if (p->mode == FP_ANSWER)
    fp_launched(p, in->id);
  else if (p->mode == FP_FAIL)
    fp_launch_failed(p, in->id);
  return 0;
}

static int fp_terminate_op(struct gw_provider *gp, const char *id) {
  struct fake_provider *p = fp_of(gp);
  fp_record(p, FP_CALL_TERMINATE, id);
  struct fp_inst *in = fp_inst(p, id);
  if (!in)
    return SL_ENAME;
  if (in->alive && p->terminated_on_terminate)
    fp_terminated(p, id, false);
  in->alive = false;
  return 0;
}

static int fp_list_op(struct gw_provider *gp, struct gw_instance_info **ret, size_t *ret_n) {
  struct fake_provider *p = fp_of(gp);
  struct gw_instance_info *a = calloc(p->n_insts ? p->n_insts : 1, sizeof *a);
  if (!a)
    return -ENOMEM;
  size_t n = 0;
  for (size_t i = 0; i < p->n_insts; i++) {
    if (!p->insts[i].alive)
      continue;
    snprintf(a[n].instance_id, sizeof a[n].instance_id, "%s", p->insts[i].id);
    snprintf(a[n].type, sizeof a[n].type, "%s", p->insts[i].type);
    a[n].spot = p->insts[i].spot;
    a[n].running = true;
    n++;
  }
  *ret = a;
  *ret_n = n;
  return 0;
}

static int fp_market_op(struct gw_provider *gp, const struct gw_instance_type **ret,
                        size_t *ret_n) {
  struct fake_provider *p = fp_of(gp);
  *ret = p->types;
  *ret_n = p->n_types;
  return 0;
}

static int fp_store_url_op(struct gw_provider *gp, char *buf, size_t size) {
  (void)gp;
  snprintf(buf, size, "file:///nonexistent/fake-store");
  return 0;
}

static double fp_time_scale_op(struct gw_provider *gp) {
  return fp_of(gp)->time_scale;
}

static int fp_inject_op(struct gw_provider *gp, const char *id, bool kill, double notice_s) {
  struct fake_provider *p = fp_of(gp);
  struct fp_call *c = fp_record(p, FP_CALL_INJECT, id);
  if (c) {
    c->kill = kill;
    c->notice_s = notice_s;
  }
  struct fp_inst *in = fp_inst(p, id);
  if (!in || !in->alive)
    return SL_ENAME;
  if (!(notice_s >= 0 && notice_s <= 86400))
    return -EINVAL; /* as the local provider refuses it */
  if (kill)
    fp_terminated(p, id, true);
  else
    fp_notice(p, id, (int64_t)(notice_s * 1e6));
  return 0;
}

static void fp_destroy_op(struct gw_provider *gp) {
  struct fake_provider *p = fp_of(gp);
  if (p->loop && p->timer > 0)
    gw_loop_del_timer(p->loop, p->timer);
  free(p);
}

static const struct gw_provider_ops fp_ops = {
  .launch = fp_launch_op, .terminate = fp_terminate_op, .list = fp_list_op,
  .market = fp_market_op, .store_url = fp_store_url_op, .time_scale = fp_time_scale_op,
  .inject = fp_inject_op, .destroy = fp_destroy_op,
};

static struct fake_provider *fp_new(struct gw_loop *loop, gw_provider_event_fn on_event,
                                    void *userdata) {
  struct fake_provider *p = calloc(1, sizeof *p);
  if (!p)
    return NULL;
  p->base = (struct gw_provider){.ops = &fp_ops, .name = "fake", .on_event = on_event,
                                 .userdata = userdata};
  p->loop = loop;
  p->time_scale = 1;
  p->mode = FP_ANSWER;
  p->terminated_on_terminate = true;
  snprintf(p->zone, sizeof p->zone, "fz-1a");
  p->types[0] = (struct gw_instance_type){.name = "t.small", .gpus = 1, .gpu_model = "T1",
                                          .on_demand_usd_per_hour = 1.00,
                                          .spot_usd_per_hour = 0.30, .interruption = "<5%",
                                          .mean_time_to_preempt_s = 3600};
  p->types[1] = (struct gw_instance_type){.name = "t.big", .gpus = 4, .gpu_model = "T4x",
                                          .on_demand_usd_per_hour = 4.00,
                                          .spot_usd_per_hour = 1.20, .interruption = "5-10%",
                                          .mean_time_to_preempt_s = 7200};
  p->n_types = 2;
  p->timer = gw_loop_add_timer(loop, INT64_MAX, fp_deliver, p);
  if (p->timer < 0) {
    free(p);
    return NULL;
  }
  return p;
}

/* ---- captures ---- */

/* A copy, as the receiver would parse it: the sender may change or free
 * its object once the send returned. */
static void capture(json_t *log, const uint8_t *rid, size_t rid_len, const json_t *msg) {
  json_array_append_new(log, json_pack("{s:s%,s:o}", "to", (const char *)rid, rid_len, "msg",
                                       json_deep_copy(msg)));
}

static int worker_send(void *ctx, const uint8_t *rid, size_t rid_len, const json_t *msg) {
  struct fx *f = ctx;
  capture(f->to_workers, rid, rid_len, msg);
  return 0;
}

static int client_send(void *ctx, const uint8_t *rid, size_t rid_len, const json_t *msg) {
  struct fx *f = ctx;
  for (size_t i = 0; i < f->n_blocked; i++) {
    if (strlen(f->blocked[i].rid) == rid_len && !memcmp(f->blocked[i].rid, rid, rid_len)) {
      if (f->blocked[i].allow == 0)
        return -EAGAIN;
      if (f->blocked[i].allow > 0)
        f->blocked[i].allow--;
    }
  }
  capture(f->to_clients, rid, rid_len, msg);
  return 0;
}

void fx_client_allow(struct fx *f, const char *rid, int64_t allow) {
  for (size_t i = 0; i < f->n_blocked; i++)
    if (!strcmp(f->blocked[i].rid, rid)) {
      f->blocked[i].allow = allow;
      return;
    }
  if (f->n_blocked < FX_MAX_BLOCKED) {
    snprintf(f->blocked[f->n_blocked].rid, sizeof f->blocked[0].rid, "%s", rid);
    f->blocked[f->n_blocked++].allow = allow;
  }
}

static void bus_capture(void *data, const struct gw_bus_event *ev) {
  struct fx *f = data;
  if (f->n_bus == FX_MAX_BUS) {
    fprintf(stderr, "fixture: bus log full\n");
    return;
  }
  struct fx_bus_rec *r = &f->bus_log[f->n_bus++];
  memset(r, 0, sizeof *r);
  r->kind = ev->kind;
  if (ev->job) {
    r->job = ev->job->id;
    r->state = ev->job->state;
    snprintf(r->reason, sizeof r->reason, "%s", ev->job->reason);
  }
  snprintf(r->instance, sizeof r->instance, "%s", ev->instance ? ev->instance : "");
  r->notice = ev->notice;
  r->usd = ev->usd;
  r->on_demand_usd = ev->on_demand_usd;
  r->seconds = ev->seconds;
  snprintf(r->user, sizeof r->user, "%s", ev->user ? ev->user : "");
  snprintf(r->session, sizeof r->session, "%s", ev->session ? ev->session : "");
  snprintf(r->why, sizeof r->why, "%s", ev->why ? ev->why : "");
  if (ev->event)
    r->json = json_deep_copy(ev->event);
  else if (ev->msg)
    r->json = json_deep_copy(ev->msg);
}

void fx_bus_clear(struct fx *f) {
  for (size_t i = 0; i < f->n_bus; i++)
    json_decref(f->bus_log[i].json);
  f->n_bus = 0;
}

size_t fx_bus_count(const struct fx *f, enum gw_bus_kind kind, int64_t job) {
  size_t n = 0;
  for (size_t i = 0; i < f->n_bus; i++)
    if (f->bus_log[i].kind == kind && (!job || f->bus_log[i].job == job))
      n++;
  return n;
}

const struct fx_bus_rec *fx_bus_last(const struct fx *f, enum gw_bus_kind kind, int64_t job) {
  for (size_t i = f->n_bus; i-- > 0;)
    if (f->bus_log[i].kind == kind && (!job || f->bus_log[i].job == job))
      return &f->bus_log[i];
  return NULL;
}

const json_t *fx_job_event(const struct fx *f, int64_t job, const char *event) {
  for (size_t i = f->n_bus; i-- > 0;) {
    const struct fx_bus_rec *r = &f->bus_log[i];
    if (r->kind == GW_BUS_JOB_EVENT && r->job == job &&
        !strcmp(sl_json_get_str(r->json, "event", ""), event))
      return r->json;
  }
  return NULL;
}

size_t fx_job_events(const struct fx *f, int64_t job, const char *event) {
  size_t n = 0;
  for (size_t i = 0; i < f->n_bus; i++) {
    const struct fx_bus_rec *r = &f->bus_log[i];
    if (r->kind == GW_BUS_JOB_EVENT && r->job == job &&
        (!event || !strcmp(sl_json_get_str(r->json, "event", ""), event)))
      n++;
  }
  return n;
}

bool fx_job_was(const struct fx *f, int64_t job, enum gw_job_state st) {
  for (size_t i = 0; i < f->n_bus; i++)
    if (f->bus_log[i].kind == GW_BUS_JOB_STATE && f->bus_log[i].job == job &&
        f->bus_log[i].state == st)
      return true;
  return false;
}

const char *fx_state_reason(const struct fx *f, int64_t job, enum gw_job_state st) {
  for (size_t i = f->n_bus; i-- > 0;)
    if (f->bus_log[i].kind == GW_BUS_JOB_STATE && f->bus_log[i].job == job &&
        f->bus_log[i].state == st)
      return f->bus_log[i].reason;
  return "";
}

size_t fx_state_count(const struct fx *f, int64_t job, enum gw_job_state st, const char *reason) {
  size_t n = 0;
  for (size_t i = 0; i < f->n_bus; i++)
    if (f->bus_log[i].kind == GW_BUS_JOB_STATE && f->bus_log[i].job == job &&
        f->bus_log[i].state == st && (!reason || !strcmp(f->bus_log[i].reason, reason)))
      n++;
  return n;
}

static size_t msgs_count(const json_t *log, const char *to, const char *type) {
  size_t n = 0, i;
  json_t *e;
  json_array_foreach(log, i, e) {
    const json_t *m = json_object_get(e, "msg");
    if (!strcmp(sl_json_get_str(e, "to", ""), to) &&
        (!type || !strcmp(sl_json_get_str(m, "type", ""), type)))
      n++;
  }
  return n;
}

static const json_t *msgs_last(const json_t *log, const char *to, const char *type) {
  for (size_t i = json_array_size(log); i-- > 0;) {
    const json_t *e = json_array_get(log, i), *m = json_object_get(e, "msg");
    if (!strcmp(sl_json_get_str(e, "to", ""), to) &&
        (!type || !strcmp(sl_json_get_str(m, "type", ""), type)))
      return m;
  }
  return NULL;
}

static void worker_rid(const char *inst, char *buf, size_t size) {
  snprintf(buf, size, "w:%s", inst);
}

size_t fx_to_worker_count(const struct fx *f, const char *inst, const char *type) {
  char rid[64];
  worker_rid(inst, rid, sizeof rid);
  return msgs_count(f->to_workers, rid, type);
}

const json_t *fx_to_worker_last(const struct fx *f, const char *inst, const char *type) {
  char rid[64];
  worker_rid(inst, rid, sizeof rid);
  return msgs_last(f->to_workers, rid, type);
}

size_t fx_to_client_count(const struct fx *f, const char *rid, const char *type) {
  return msgs_count(f->to_clients, rid, type);
}

const json_t *fx_to_client_last(const struct fx *f, const char *rid, const char *type) {
  return msgs_last(f->to_clients, rid, type);
}

const json_t *fx_to_client_at(const struct fx *f, const char *rid, size_t k) {
  size_t n = 0, i;
  json_t *e;
  json_array_foreach(f->to_clients, i, e) {
    if (!strcmp(sl_json_get_str(e, "to", ""), rid) && n++ == k)
      return json_object_get(e, "msg");
  }
  return NULL;
}

void fx_captures_clear(struct fx *f) {
  json_array_clear(f->to_workers);
  json_array_clear(f->to_clients);
}

/* ---- life ---- */

void fx_config(struct gw_config *cfg) {
  gw_config_defaults(cfg);
  char err[256];
  /* values inside the table's bounds go through gw_config_set, the
   * shorter ones the tests need straight into the fields */
  if (gw_config_set(cfg, "gateway", "max_instances", "4", err, sizeof err) < 0 ||
      gw_config_set(cfg, "gateway", "process_retries", "2", err, sizeof err) < 0 ||
      gw_config_set(cfg, "gateway", "heartbeat_timeout", "10s", err, sizeof err) < 0 ||
      gw_config_set(cfg, "budget", "monthly_usd", "0", err, sizeof err) < 0)
    fprintf(stderr, "fixture config: %s\n", err);
  cfg->register_timeout_us = 30 * SL_US_PER_MS;
}

struct fx *fx_new(const struct gw_config *cfg) {
  struct fx *f = calloc(1, sizeof *f);
  if (!f)
    return NULL;
  const char *tmp = getenv("TMPDIR");
  snprintf(f->dir, sizeof f->dir, "%s/spotlab-gw-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(f->dir)) {
    perror("mkdtemp");
    free(f);
    return NULL;
  }
  if (cfg)
    f->cfg = *cfg;
  else
    fx_config(&f->cfg);
  snprintf(f->cfg.state_dir, sizeof f->cfg.state_dir, "%s", f->dir);
  f->to_workers = json_array();
  f->to_clients = json_array();
  f->auths = json_object();
  gw_bus_init(&f->bus);
  char err[512] = "", path[512];
  snprintf(path, sizeof path, "%s/gateway.db", f->dir);
  f->loop = gw_loop_new();
  f->queue = gw_queue_new();
  if (!f->loop || !f->queue || gw_store_open(path, &f->store, err, sizeof err) < 0)
    goto fail;
  f->fleet = gw_fleet_new(f->store, GW_QUEUE_MAX);
  f->ledger = gw_ledger_new(&f->cfg, f->store);
  struct gw_sched_env se = {.cfg = &f->cfg, .store = f->store, .fleet = f->fleet,
                            .queue = f->queue, .loop = f->loop, .bus = &f->bus,
                            .worker_address = "tcp://127.0.0.1:1", .gateway_public = "",
                            .train_program = ""};
  if (!f->fleet || !f->ledger || !(f->sched = gw_sched_new(&se)))
    goto fail;
  if (!(f->idle = gw_idle_new(&f->cfg, f->fleet, f->sched, &f->bus)))
    goto fail;
  f->fp = fp_new(f->loop, gw_sched_provider_event, f->sched);
  if (!f->fp || gw_sched_add_provider(f->sched, &f->fp->base) < 0)
    goto fail;
  snprintf(path, sizeof path, "%s/store", f->dir);
  if (!strcmp(f->cfg.upload_data, "yes") && gw_uploads_new(f->dir, path, NULL, &f->uploads) < 0)
    goto fail;
  struct gw_kproto_env ke = {.cfg = &f->cfg, .store = f->store, .fleet = f->fleet,
                             .queue = f->queue, .sched = f->sched, .idle = f->idle,
                             .ledger = f->ledger, .loop = f->loop, .send = client_send,
                             .send_ctx = f, .started_us = sl_time_real_us(), .uploads = f->uploads};
  if (!(f->kproto = gw_kproto_new(&ke)) ||
      !(f->wproto = gw_wproto_new(&f->cfg, f->store, f->fleet, f->sched, NULL, NULL)))
    goto fail;
  gw_fleet_set_transport(f->fleet, worker_send, f);
  if (gw_bus_subscribe(&f->bus, GW_BUS_JOB_EVENT | GW_BUS_NOTICE, gw_kproto_sink, f->kproto) < 0 ||
      gw_bus_subscribe(&f->bus, GW_BUS_COST, gw_ledger_sink, f->ledger) < 0 ||
      gw_bus_subscribe(&f->bus, ~0u, bus_capture, f) < 0)
    goto fail;
  if (gw_sched_load(f->sched) < 0)
    goto fail;
  return f;
fail:
  fprintf(stderr, "fixture: cannot build the gateway%s%s\n", err[0] ? ": " : "", err);
  return fx_free(f);
}

struct fx *fx_free(struct fx *f) {
  if (!f)
    return NULL;
  gw_kproto_free(f->kproto);
  gw_wproto_free(f->wproto);
  gw_uploads_free(f->uploads);
  gw_idle_free(f->idle);
  if (f->sched)
    gw_sched_free(f->sched); /* destroys the fake */
  else if (f->fp)
    f->fp->base.ops->destroy(&f->fp->base);
  gw_ledger_free(f->ledger);
  gw_fleet_free(f->fleet);
  gw_queue_free(f->queue);
  gw_store_free(f->store);
  gw_loop_free(f->loop);
  fx_bus_clear(f);
  json_decref(f->to_workers);
  json_decref(f->to_clients);
  json_decref(f->auths);
  if (f->dir[0])
    sl_file_remove_tree(f->dir);
  free(f);
  return NULL;
}

void fx_settle(struct fx *f) {
  if (f->uploads)
    gw_uploads_wait(f->uploads); /* its checks and publications end first */
  int quiet = 0;
  for (int turns = 0; turns < 200 && quiet < 2; turns++) {
    int r = gw_loop_run_once(f->loop, 0);
    quiet = r == 0 && !f->fp->n_pending ? quiet + 1 : 0;
  }
}

bool fx_run_until(struct fx *f, int64_t deadline_us, bool (*done)(struct fx *f, void *data),
                  void *data) {
  int64_t end = sl_time_mono_us() + deadline_us;
  bool ok = done(f, data);
  while (!ok && sl_time_mono_us() < end) {
    gw_loop_run_once(f->loop, 2 * SL_US_PER_MS);
    ok = done(f, data);
  }
  return ok;
}

/* ---- jobs ---- */

int64_t fx_submit(struct fx *f, const char *user, const char *session, const char *kind,
                  json_t *options) {
  struct gw_job *j = calloc(1, sizeof *j);
  if (!j) {
    json_decref(options);
    return -ENOMEM;
  }
  snprintf(j->user, sizeof j->user, "%s", user);
  snprintf(j->session, sizeof j->session, "%s", session);
  snprintf(j->kind, sizeof j->kind, "%s", kind);
  snprintf(j->model, sizeof j->model, "m");
  snprintf(j->data, sizeof j->data, "d");
  j->spec = json_pack("{s:o,s:{s:s},s:{s:s}}", "options", options ? options : json_object(),
                      "model", "name", "m", "data", "name", "d");
  j->steps = sl_json_get_int(json_object_get(j->spec, "options"), "steps", 100);
  int r = gw_sched_submit(f->sched, j);
  if (r < 0) {
    /* a job the store created is failed there; the struct stays ours */
    gw_job_done(j);
    free(j);
    return r;
  }
  return j->id;
}

struct gw_job *fx_job(struct fx *f, int64_t id) {
  return gw_fleet_job(f->fleet, id);
}

int fx_job_state(struct fx *f, int64_t id) {
  struct gw_job *j = fx_job(f, id), tmp;
  if (j)
    return (int)j->state;
  if (gw_store_job_get(f->store, id, &tmp) < 0)
    return -1;
  int st = (int)tmp.state;
  gw_job_done(&tmp);
  return st;
}

const char *fx_jid(int64_t id, char *buf) {
  return gw_job_id_str(id, buf, 16);
}

const char *fx_key(int64_t job, const char *name) {
  static char bufs[4][96];
  static int next;
  char *b = bufs[next++ % 4], id[16];
  snprintf(b, sizeof bufs[0], "%s/%s", fx_jid(job, id), name);
  return b;
}

struct gw_inst *fx_inst(struct fx *f, const char *id) {
  return gw_fleet_inst(f->fleet, id);
}

/* ---- a worker ---- */

void fx_worker(struct fx *f, const char *inst, const json_t *body) {
  struct gw_inst *in = gw_fleet_inst(f->fleet, inst);
  if (!in) {
    fprintf(stderr, "fixture: no instance %s to speak for\n", inst);
    return;
  }
  char rid[64];
  worker_rid(inst, rid, sizeof rid);
  gw_wproto_handle(f->wproto, in, (const uint8_t *)rid, strlen(rid), body);
}

void fx_workerf(struct fx *f, const char *inst, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  json_error_t e;
  json_t *body = json_vpack_ex(&e, 0, fmt, ap);
  va_end(ap);
  if (!body) {
    fprintf(stderr, "fixture: bad message format %s: %s\n", fmt, e.text);
    return;
  }
  fx_worker(f, inst, body);
  json_decref(body);
}

void fx_register(struct fx *f, const char *inst, const json_t *jobs, const json_t *ended) {
  json_t *b = json_pack("{s:s,s:s,s:o,s:o}", "type", "register", "instance", inst, "jobs",
                        jobs ? json_incref((json_t *)jobs) : json_array(), "ended",
                        ended ? json_incref((json_t *)ended) : json_array());
  fx_worker(f, inst, b);
  json_decref(b);
}

void fx_started(struct fx *f, const char *inst, int64_t job) {
  char id[16];
  fx_workerf(f, inst, "{s:s,s:s,s:s}", "type", "started", "instance", inst, "job",
             fx_jid(job, id));
}

void fx_metric(struct fx *f, const char *inst, int64_t job, int64_t step, double loss) {
  char id[16];
  fx_workerf(f, inst, "{s:s,s:s,s:s,s:{s:I,s:f}}", "type", "metric", "instance", inst, "job",
             fx_jid(job, id), "data", "step", (json_int_t)step, "loss", loss);
}

void fx_checkpoint(struct fx *f, const char *inst, int64_t job, int64_t step, const char *key) {
  char id[16];
  fx_workerf(f, inst, "{s:s,s:s,s:s,s:I,s:s,s:I,s:I,s:I}", "type", "checkpoint", "instance",
             inst, "job", fx_jid(job, id), "step", (json_int_t)step, "key", key, "bytes",
             (json_int_t)1000, "write_ms", (json_int_t)10, "upload_ms", (json_int_t)5);
}

void fx_done(struct fx *f, const char *inst, int64_t job, const char *status, int exit_code) {
  char id[16];
  json_t *b = json_pack("{s:s,s:s,s:s,s:s}", "type", "done", "instance", inst, "job",
                        fx_jid(job, id), "status", status);
  if (exit_code >= 0)
    json_object_set_new(b, "exit_code", json_integer(exit_code));
  fx_worker(f, inst, b);
  json_decref(b);
}

void fx_wnotice(struct fx *f, const char *inst) {
  fx_workerf(f, inst, "{s:s,s:s,s:s,s:I}", "type", "notice", "instance", inst, "action",
             "terminate", "deadline_us", (json_int_t)(sl_time_real_us() + 120 * SL_US_PER_S));
}

void fx_wrebalance(struct fx *f, const char *inst, bool leaving) {
  fx_workerf(f, inst, "{s:s,s:s,s:s,s:I,s:b}", "type", "notice", "instance", inst, "action", "rebalance",
             "deadline_us", (json_int_t)(sl_time_real_us() + 120 * SL_US_PER_S), "leaving", leaving);
}

bool fx_run_job(struct fx *f, int64_t job, char *ret_inst) {
  fx_settle(f);
  struct gw_job *j = fx_job(f, job);
  if (!j || !j->instance[0])
    return false;
  char inst[GW_INSTANCE_ID_MAX];
  snprintf(inst, sizeof inst, "%s", j->instance);
  struct gw_inst *in = fx_inst(f, inst);
  if (!in)
    return false;
  if (!in->registered)
    fx_register(f, inst, NULL, NULL);
  fx_settle(f);
  if (!(j = fx_job(f, job)) || j->state != GW_JOB_STARTING)
    return false;
  fx_started(f, inst, job);
  if (ret_inst)
    snprintf(ret_inst, GW_INSTANCE_ID_MAX, "%s", inst);
  return (j = fx_job(f, job)) && j->state == GW_JOB_RUNNING;
}

/* ---- a kernel client ---- */

void fx_user(struct fx *f, const char *user, const char *token) {
  char hex[SL_HMAC_HEX_LEN + 1];
  sl_sha256_hex(token, strlen(token), hex);
  if (gw_store_user_put(f->store, user, hex, "") < 0)
    fprintf(stderr, "fixture: cannot record user %s\n", user);
}

const json_t *fx_req(struct fx *f, const char *rid, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  json_error_t e;
  json_t *body = json_vpack_ex(&e, 0, fmt, ap);
  va_end(ap);
  if (!body) {
    fprintf(stderr, "fixture: bad request format %s: %s\n", fmt, e.text);
    return NULL;
  }
  int id = ++f->next_req_id;
  json_object_set_new(body, "id", json_integer(id));
  /* a client sends the secret its last hello got (unless the test set one) */
  bool hello = !strcmp(sl_json_get_str(body, "type", ""), "hello");
  json_t *auth = json_object_get(f->auths, rid);
  if (!hello && auth && !json_object_get(body, "auth"))
    json_object_set(body, "auth", auth);
  gw_kproto_handle(f->kproto, (const uint8_t *)rid, strlen(rid), body);
  json_decref(body);
  for (size_t i = json_array_size(f->to_clients); i-- > 0;) {
    const json_t *c = json_array_get(f->to_clients, i), *m = json_object_get(c, "msg");
    if (!strcmp(sl_json_get_str(c, "to", ""), rid) &&
        !strcmp(sl_json_get_str(m, "type", ""), "reply") &&
        json_integer_value(json_object_get(m, "re")) == id) {
      if (hello && json_is_string(json_object_get(m, "auth")))
        json_object_set(f->auths, rid, json_object_get(m, "auth"));
      return m;
    }
  }
  return NULL;
}

const json_t *fx_ktype(struct fx *f, const char *rid, const char *type) {
  return fx_req(f, rid, "{s:s}", "type", type);
}

const json_t *fx_kjob(struct fx *f, const char *rid, const char *type, int64_t job) {
  char id[16];
  return fx_req(f, rid, "{s:s,s:s}", "type", type, "job", fx_jid(job, id));
}

const json_t *fx_ksubmit(struct fx *f, const char *rid, json_t *options) {
  return fx_req(f, rid, "{s:s,s:s,s:s,s:s,s:o}", "type", "submit", "kind", "train", "model", "m",
                "data", "d", "options", options ? options : json_object());
}

const json_t *fx_kinject(struct fx *f, const char *rid, const char *action, const char *inst) {
  return fx_req(f, rid, "{s:s,s:s,s:s}", "type", "inject", "action", action, "instance", inst);
}

bool fx_hello(struct fx *f, const char *rid, const char *token, const char *session) {
  return fx_ok(fx_req(f, rid, "{s:s,s:s,s:s}", "type", "hello", "token", token, "session",
                      session));
}

bool fx_define(struct fx *f, const char *rid) {
  return fx_ok(fx_req(f, rid, "{s:s,s:[{s:s,s:s,s:{s:i}},{s:s,s:s,s:{s:s}}]}", "type",
                      "session.set", "defs", "name", "m", "kind", "model", "spec", "layers", 2,
                      "name", "d", "kind", "data", "spec", "path", "tiny.txt"));
}

bool fx_ok(const json_t *reply) {
  return reply && json_is_true(json_object_get(reply, "ok"));
}

const char *fx_err_code(const json_t *reply) {
  return sl_json_get_str(json_object_get(reply, "error"), "code", "");
}

const char *fx_err_msg(const json_t *reply) {
  return sl_json_get_str(json_object_get(reply, "error"), "message", "");
}
