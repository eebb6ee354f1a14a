/* A test provider: each instance is the program named by $SPOTLAB_FAKE_WORKER
 * run with the worker config file as its one argument. Two instance types
 * with fixed prices; preemption sends a notice event and SIGTERM, a kill
 * SIGKILL; a child that exits is reported as terminated. destroy() leaves
 * children running, like a real cloud when the gateway stops. */
#include "conf.h"
#include "provider.h"
#include "provider_open.h"

#include "sl_err.h"
#include "sl_time.h"

#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define MAX_FAKE 64

struct fake {
  struct gw_provider base;
  struct gw_instance_info inst[MAX_FAKE];
  pid_t pid[MAX_FAKE];
  size_t n;
  int slots;
  int64_t next_tick_us;
};

static const struct gw_instance_type catalog[] = {
  {"fake.small", 1, "T4", 1.00, 0.30, ">20%", 3600},
  {"fake.big", 4, "A100", 8.00, 2.50, "10-15%", 7200},
};

static int fake_launch(struct gw_provider *p, const struct gw_launch *req, struct gw_instance_info *ret) {
  struct fake *f = (struct fake *)p;
  const char *prog = getenv("SPOTLAB_FAKE_WORKER");
  size_t live = 0;
  for (size_t i = 0; i < f->n; i++)
    live += f->inst[i].running;
  if (!prog || live >= (size_t)f->slots || f->n == MAX_FAKE)
    return -EAGAIN;
  const struct gw_instance_type *t = NULL;
  for (size_t i = 0; i < 2; i++)
    if (!strcmp(catalog[i].name, req->type))
      t = &catalog[i];
  if (!t)
    return SL_ENOTSUP;
  char *argv[] = {(char *)prog, (char *)req->worker_config, NULL};
  pid_t pid;
  if (posix_spawn(&pid, prog, NULL, NULL, argv, environ) != 0)
    return -errno;
  struct gw_instance_info *in = &f->inst[f->n];
  memset(in, 0, sizeof *in);
  snprintf(in->instance_id, sizeof in->instance_id, "%s", req->instance_id);
  snprintf(in->type, sizeof in->type, "%s", req->type);
  snprintf(in->zone, sizeof in->zone, "fake-1a");
  in->spot = req->spot;
  in->price_usd_per_hour = req->spot ? t->spot_usd_per_hour : t->on_demand_usd_per_hour;
  in->launched_us = sl_time_real_us();
  in->running = true;
  f->pid[f->n++] = pid;
  *ret = *in;
  return 0;
}

static int find(struct fake *f, const char *id) {
  for (size_t i = 0; i < f->n; i++)
    if (!strcmp(f->inst[i].instance_id, id) && f->inst[i].running)
      return (int)i;
  return -1;
}

static int fake_terminate(struct gw_provider *p, const char *id) {
  struct fake *f = (struct fake *)p;
  int i = find(f, id);
  if (i < 0)
    return SL_ENAME;
  kill(f->pid[i], SIGKILL);
  return 0;
}

static int fake_list(struct gw_provider *p, struct gw_instance_info **ret, size_t *ret_n) {
  struct fake *f = (struct fake *)p;
  struct gw_instance_info *a = calloc(f->n + 1, sizeof *a);
  size_t n = 0;
  if (!a)
    return -ENOMEM;
  for (size_t i = 0; i < f->n; i++)
    if (f->inst[i].running)
      a[n++] = f->inst[i];
  *ret = a;
  *ret_n = n;
  return 0;
}

static int fake_types(struct gw_provider *p, struct gw_instance_type **ret, size_t *ret_n) {
  struct gw_instance_type *a = malloc(sizeof catalog);
  if (!a)
    return -ENOMEM;
  memcpy(a, catalog, sizeof catalog);
  *ret = a;
  *ret_n = 2;
  return 0;
}

static void fake_tick(struct gw_provider *p, int64_t now_us) {
  struct fake *f = (struct fake *)p;
  f->next_tick_us = now_us + 50 * SL_US_PER_MS;
  for (size_t i = 0; i < f->n; i++) {
    if (!f->inst[i].running || waitpid(f->pid[i], NULL, WNOHANG) != f->pid[i])
      continue;
    f->inst[i].running = false;
    struct gw_provider_event ev = {.kind = GW_PROVIDER_TERMINATED};
    snprintf(ev.instance_id, sizeof ev.instance_id, "%s", f->inst[i].instance_id);
    p->on_event(p->userdata, &ev);
  }
}

static int fake_inject(struct gw_provider *p, const char *id, bool kill_now, double notice_s) {
  struct fake *f = (struct fake *)p;
  int i = find(f, id);
  if (i < 0)
    return SL_ENAME;
  if (!kill_now) {
    struct gw_provider_event ev = {.kind = GW_PROVIDER_NOTICE, .by_market = true};
    snprintf(ev.instance_id, sizeof ev.instance_id, "%s", id);
    ev.deadline_us = sl_time_real_us() + (int64_t)(notice_s * 1e6);
    p->on_event(p->userdata, &ev);
  }
  kill(f->pid[i], kill_now ? SIGKILL : SIGTERM);
  return 0;
}

static int64_t fake_next_tick(struct gw_provider *p) { return ((struct fake *)p)->next_tick_us; }

static void fake_destroy(struct gw_provider *p) { free(p); }

static const struct gw_provider_ops fake_ops = {
  .name = "fake",
  .launch = fake_launch,
  .terminate = fake_terminate,
  .list = fake_list,
  .types = fake_types,
  .tick = fake_tick,
  .inject = fake_inject,
  .next_tick_us = fake_next_tick,
  .destroy = fake_destroy,
};

struct gw_provider *gw_provider_open(const struct gw_config *cfg, gw_provider_event_fn on_event,
                                     void *userdata, char *err, size_t err_size) {
  struct fake *f = calloc(1, sizeof *f);
  if (!f) {
    snprintf(err, err_size, "out of memory");
    return NULL;
  }
  f->base.ops = &fake_ops;
  f->base.on_event = on_event;
  f->base.userdata = userdata;
  f->slots = cfg->local_slots > 0 ? (int)cfg->local_slots : 2;
  return &f->base;
}
