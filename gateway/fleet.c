/* The fleet (fleet.h): two bounded tables and the worker transport.
 *
 * Jobs are pointers (a job's address is stable while it lives); instances
 * are kept in one array in launch order, so removal shifts the entries
 * after it. Instance rows are saved on every change here, in one place. */
#include "fleet.h"

#include "sl_err.h"
#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T "gateway.fleet"

struct gw_fleet {
  struct gw_store *store;
  struct gw_job **jobs;
  size_t n_jobs, max_jobs;
  struct gw_inst *insts;
  size_t n_insts;
  gw_worker_send_fn send;
  void *send_ctx;
};

struct gw_fleet *gw_fleet_new(struct gw_store *store, size_t max_jobs) {
  struct gw_fleet *f = calloc(1, sizeof *f);
  if (!f)
    return NULL;
  f->store = store;
  f->max_jobs = max_jobs;
  f->jobs = calloc(max_jobs ? max_jobs : 1, sizeof *f->jobs);
  f->insts = calloc(GW_MAX_INSTANCES, sizeof *f->insts);
  if (!f->jobs || !f->insts)
    return gw_fleet_free(f);
  return f;
}

struct gw_fleet *gw_fleet_free(struct gw_fleet *f) {
  if (!f)
    return NULL;
  for (size_t i = 0; f->jobs && i < f->n_jobs; i++) {
    gw_job_done(f->jobs[i]);
    free(f->jobs[i]);
  }
  free(f->jobs);
  free(f->insts);
  free(f);
  return NULL;
}

void gw_fleet_set_transport(struct gw_fleet *f, gw_worker_send_fn fn, void *ctx) {
  f->send = fn;
  f->send_ctx = ctx;
}

size_t gw_fleet_n_jobs(const struct gw_fleet *f) { return f->n_jobs; }

struct gw_job *gw_fleet_job_at(struct gw_fleet *f, size_t i) {
  return i < f->n_jobs ? f->jobs[i] : NULL;
}

struct gw_job *gw_fleet_job(struct gw_fleet *f, int64_t id) {
  for (size_t i = 0; i < f->n_jobs; i++)
    if (f->jobs[i]->id == id)
      return f->jobs[i];
  return NULL;
}

int gw_fleet_job_add(struct gw_fleet *f, struct gw_job *j) {
  if (f->n_jobs >= f->max_jobs)
    return SL_ELIMIT;
  f->jobs[f->n_jobs++] = j;
  return 0;
}

void gw_fleet_job_drop(struct gw_fleet *f, struct gw_job *j) {
  for (size_t i = 0; i < f->n_jobs; i++)
    if (f->jobs[i] == j) {
      memmove(&f->jobs[i], &f->jobs[i + 1], (f->n_jobs - i - 1) * sizeof *f->jobs);
      f->n_jobs--;
      break;
    }
  gw_job_done(j);
  free(j);
}

size_t gw_fleet_n_insts(const struct gw_fleet *f) { return f->n_insts; }

struct gw_inst *gw_fleet_inst_at(struct gw_fleet *f, size_t i) {
  return i < f->n_insts ? &f->insts[i] : NULL;
}

struct gw_inst *gw_fleet_inst(struct gw_fleet *f, const char *id) {
  for (size_t i = 0; i < f->n_insts; i++)
    if (!strcmp(f->insts[i].row.id, id))
      return &f->insts[i];
  return NULL;
}

struct gw_inst *gw_fleet_inst_by_key(struct gw_fleet *f, const char *z85) {
  for (size_t i = 0; i < f->n_insts; i++)
    if (!strcmp(f->insts[i].row.public_key, z85) && strcmp(f->insts[i].row.state, "terminated"))
      return &f->insts[i];
  return NULL;
}

struct gw_inst *gw_fleet_inst_add(struct gw_fleet *f, const struct gw_inst *in) {
  if (f->n_insts >= GW_MAX_INSTANCES || gw_fleet_inst(f, in->row.id))
    return NULL;
  struct gw_inst *p = &f->insts[f->n_insts++];
  *p = *in;
  gw_fleet_inst_save(f, p);
  return p;
}

void gw_fleet_inst_remove(struct gw_fleet *f, const char *id) {
  struct gw_inst *in = gw_fleet_inst(f, id);
  if (!in)
    return;
  size_t i = (size_t)(in - f->insts);
  memmove(&f->insts[i], &f->insts[i + 1], (f->n_insts - i - 1) * sizeof *f->insts);
  f->n_insts--;
}

int gw_fleet_inst_save(struct gw_fleet *f, const struct gw_inst *in) {
  int r = gw_store_instance_put(f->store, &in->row);
  if (r < 0)
    sl_err(T, "%s: cannot save instance", in->row.id);
  return r;
}

void gw_fleet_inst_set_state(struct gw_fleet *f, struct gw_inst *in, const char *state, int64_t job) {
  snprintf(in->row.state, sizeof in->row.state, "%s", state);
  in->row.job = job;
  if (!strcmp(state, "idle"))
    in->idle_since_mono_us = sl_time_mono_us();
  gw_fleet_inst_save(f, in);
}

size_t gw_fleet_active_insts(const struct gw_fleet *f) {
  size_t n = 0;
  for (size_t i = 0; i < f->n_insts; i++)
    if (strcmp(f->insts[i].row.state, "draining"))
      n++;
  return n;
}

int gw_fleet_send(struct gw_fleet *f, struct gw_inst *in, const json_t *msg) {
  if (!in->registered)
    return -ENOTCONN;
  if (!f->send)
    return -ENOTCONN;
  int r = f->send(f->send_ctx, in->rid, in->rid_len, msg);
  if (r < 0)
    sl_debug("gateway.zmq", "send to %s dropped: %s", in->row.id, sl_strerror(r));
  return r;
}

int gw_fleet_send_rid(struct gw_fleet *f, const uint8_t *rid, size_t rid_len, const json_t *msg) {
  if (!f->send || !rid_len)
    return -ENOTCONN;
  return f->send(f->send_ctx, rid, rid_len, msg);
}
