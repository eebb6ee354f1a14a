/* A test provider class, "fake": each instance is the program named by
 * $SPOTLAB_FAKE_WORKER run with its worker config file as its one argument.
 *
 * It keeps the contract of provider.h the way a real provider does: it
 * chooses instance ids, writes each worker's config file itself
 * (state_dir/instances/ID/worker.json, 0600), offers the store
 * file://state_dir/store, and delivers every event from its one timer on the
 * gateway's loop, never from inside an operation. Two instance types with
 * fixed prices; a preemption queues a notice event and sends SIGTERM, a kill
 * SIGKILL; a child that exits is reported terminated (the timer reaps every
 * 50 ms). destroy() leaves children running, like a real cloud when the
 * gateway stops; a new provider does not know them (list() is empty). */
#include "fake_provider.h"

#include "conf.h"
#include "keys.h"
#include "loop.h"

#include "sl_err.h"
#include "sl_hmac.h"
#include "sl_path.h"
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
#define MAX_EVENTS 256
#define REAP_US (50 * SL_US_PER_MS)

struct fake {
  struct gw_provider base;
  struct gw_loop *loop;
  int64_t timer;
  bool in_timer;
  int slots;
  double time_scale;
  char state_dir[1024], store_url[1100];
  struct gw_instance_info inst[MAX_FAKE];
  pid_t pid[MAX_FAKE];
  size_t n;
  struct gw_provider_event events[MAX_EVENTS];
  size_t n_events;
  /* workers told of a preemption notice, to be sent SIGTERM once the notice
   * has reached the gateway (as a real notice comes before the shutdown) */
  pid_t term_after_notice[MAX_FAKE];
  size_t n_term;
};

static const struct gw_instance_type catalog[] = {
  {.name = "fake.small", .gpus = 1, .gpu_model = "T4", .on_demand_usd_per_hour = 1.00, .spot_usd_per_hour = 0.30, .interruption = ">20%", .mean_time_to_preempt_s = 3600},
  {.name = "fake.big", .gpus = 4, .gpu_model = "A100", .on_demand_usd_per_hour = 8.00, .spot_usd_per_hour = 2.50, .interruption = "10-15%", .mean_time_to_preempt_s = 7200},
};
#define N_TYPES (sizeof catalog / sizeof catalog[0])

static struct fake *F(struct gw_provider *p) { return (struct fake *)p; }

static struct gw_provider_event *queue_event(struct fake *f, enum gw_provider_event_kind kind,
                                             const char *id) {
  if (f->n_events == MAX_EVENTS)
    return NULL;
  struct gw_provider_event *ev = &f->events[f->n_events++];
  memset(ev, 0, sizeof *ev);
  ev->kind = kind;
  snprintf(ev->instance_id, sizeof ev->instance_id, "%s", id);
  if (f->timer > 0 && !f->in_timer)
    gw_loop_set_timer(f->loop, f->timer, sl_time_mono_us());
  return ev;
}

static int64_t on_timer(struct gw_loop *l, int64_t id, int64_t now_us, void *data) {
  struct fake *f = data;
  (void)l;
  (void)id;
  f->in_timer = true;
  for (size_t i = 0; i < f->n; i++) {
    if (!f->inst[i].running || waitpid(f->pid[i], NULL, WNOHANG) != f->pid[i])
      continue;
    f->inst[i].running = false;
    queue_event(f, GW_PROVIDER_TERMINATED, f->inst[i].instance_id);
  }
  size_t n = f->n_events;
  struct gw_provider_event batch[MAX_EVENTS];
  memcpy(batch, f->events, n * sizeof *batch);
  f->n_events = 0;
  for (size_t i = 0; i < n; i++)
    f->base.on_event(f->base.userdata, &f->base, &batch[i]);
  for (size_t i = 0; i < f->n_term; i++)
    kill(f->term_after_notice[i], SIGTERM);
  f->n_term = 0;
  f->in_timer = false;
  return f->n_events ? now_us : sl_time_mono_us() + REAP_US;
}

static int find(struct fake *f, const char *id) {
  for (size_t i = 0; i < f->n; i++)
    if (!strcmp(f->inst[i].instance_id, id) && f->inst[i].running)
      return (int)i;
  return -1;
}

static int fake_launch(struct gw_provider *p, const struct gw_launch *req,
                       char ret_id[GW_INSTANCE_ID_MAX]) {
  struct fake *f = F(p);
  const char *prog = getenv("SPOTLAB_FAKE_WORKER");
  size_t live = 0;
  for (size_t i = 0; i < f->n; i++)
    live += f->inst[i].running;
  const struct gw_instance_type *t = NULL;
  for (size_t i = 0; i < N_TYPES; i++)
    if (!strcmp(catalog[i].name, req->type))
      t = &catalog[i];
  if (!t)
    return SL_ENAME;
  if (!req->boot)
    return -EINVAL;
  if (!prog)
    return -EAGAIN;
  if (live >= (size_t)f->slots || f->n == MAX_FAKE)
    return SL_ELIMIT; /* as the local provider: every slot taken */
  uint8_t rnd[6];
  char id[GW_INSTANCE_ID_MAX];
  do {
    sl_random_bytes(rnd, sizeof rnd);
    snprintf(id, sizeof id, "i-%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3], rnd[4],
             rnd[5]);
  } while (find(f, id) >= 0);
  char dir[1200], work[1300], cfg[1300];
  snprintf(dir, sizeof dir, "%s/instances/%s", f->state_dir, id);
  snprintf(work, sizeof work, "%s/work", dir);
  snprintf(cfg, sizeof cfg, "%s/worker.json", dir);
  int r = sl_mkdir_p(work, 0700);
  if (r < 0)
    return r;
  struct gw_worker_file wf = {
    .boot = req->boot, .instance = id, .type = t->name, .zone = "fake-1a", .spot = req->spot,
    .metadata = "", .work_dir = work, .store = f->store_url,
  };
  if ((r = gw_keys_write_worker_file(cfg, &wf)) < 0)
    return r;
  char *argv[] = {(char *)prog, cfg, NULL};
  pid_t pid;
  if ((r = posix_spawn(&pid, prog, NULL, NULL, argv, environ)) != 0) {
    unlink(cfg); /* it holds a secret key */
    return -r;
  }
  struct gw_instance_info *in = &f->inst[f->n];
  memset(in, 0, sizeof *in);
  snprintf(in->instance_id, sizeof in->instance_id, "%s", id);
  snprintf(in->type, sizeof in->type, "%s", t->name);
  snprintf(in->zone, sizeof in->zone, "fake-1a");
  in->spot = req->spot;
  in->price_usd_per_hour = req->spot ? t->spot_usd_per_hour : t->on_demand_usd_per_hour;
  in->launched_us = sl_time_real_us();
  in->running = true;
  f->pid[f->n++] = pid;
  struct gw_provider_event *ev = queue_event(f, GW_PROVIDER_LAUNCHED, id);
  if (ev)
    ev->info = *in;
  memcpy(ret_id, id, sizeof id);
  return 0;
}

static int fake_terminate(struct gw_provider *p, const char *id) {
  struct fake *f = F(p);
  int i = find(f, id);
  if (i < 0)
    return SL_ENAME;
  kill(f->pid[i], SIGKILL);
  return 0;
}

static int fake_list(struct gw_provider *p, struct gw_instance_info **ret, size_t *ret_n) {
  struct fake *f = F(p);
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

static int fake_market(struct gw_provider *p, const struct gw_instance_type **ret,
                       size_t *ret_n) {
  (void)p;
  *ret = catalog;
  *ret_n = N_TYPES;
  return 0;
}

static int fake_store_url(struct gw_provider *p, char *buf, size_t size) {
  struct fake *f = F(p);
  if (strlen(f->store_url) >= size)
    return SL_ELIMIT;
  snprintf(buf, size, "%s", f->store_url);
  return 0;
}

static double fake_time_scale(struct gw_provider *p) { return F(p)->time_scale; }

static int fake_inject(struct gw_provider *p, const char *id, bool kill_now, double notice_s) {
  struct fake *f = F(p);
  int i = find(f, id);
  if (i < 0)
    return SL_ENAME;
  if (!kill_now) {
    struct gw_provider_event *ev = queue_event(f, GW_PROVIDER_NOTICE, id);
    if (ev && f->n_term < MAX_FAKE) {
      ev->by_market = true;
      ev->deadline_us = sl_time_real_us() + (int64_t)(notice_s * 1e6);
      f->term_after_notice[f->n_term++] = f->pid[i];
      return 0;
    }
  }
  kill(f->pid[i], kill_now ? SIGKILL : SIGTERM);
  return 0;
}

static void fake_destroy(struct gw_provider *p) {
  struct fake *f = F(p);
  if (f && f->timer > 0)
    gw_loop_del_timer(f->loop, f->timer);
  free(f);
}

static const struct gw_provider_ops fake_ops = {
  .launch = fake_launch,
  .terminate = fake_terminate,
  .list = fake_list,
  .market = fake_market,
  .store_url = fake_store_url,
  .time_scale = fake_time_scale,
  .inject = fake_inject,
  .destroy = fake_destroy,
};

static const struct gw_provider_option fake_options[] = {
  {"slots", "2", "fake instances that may run at once"},
  {"time_scale", "1", "provider seconds per wall-clock second (costs accrue in them)"},
  {NULL, NULL, NULL},
};

static int fake_check_option(const char *name, const char *value, char *err, size_t size) {
  double d;
  if (!strcmp(name, "slots"))
    return gw_config_parse_number(name, value, true, 1, MAX_FAKE, &d, err, size);
  return gw_config_parse_number(name, value, false, 0.001, 1e6, &d, err, size);
}

static struct gw_provider *fake_open(const struct gw_provider_env *env, char *err,
                                     size_t err_size) {
  double slots, scale;
  char why[256];
  if (gw_config_parse_number("slots", gw_config_provider_option(env->cfg, "fake", "slots"), true,
                             1, MAX_FAKE, &slots, why, sizeof why) < 0 ||
      gw_config_parse_number("time_scale",
                             gw_config_provider_option(env->cfg, "fake", "time_scale"), false,
                             0.001, 1e6, &scale, why, sizeof why) < 0) {
    snprintf(err, err_size, "[provider.fake] %s", why);
    return NULL;
  }
  const char *state = env->state_dir ? env->state_dir : env->cfg->state_dir;
  struct fake *f = calloc(1, sizeof *f);
  if (!f) {
    snprintf(err, err_size, "out of memory");
    return NULL;
  }
  f->base.ops = &fake_ops;
  f->base.name = fake_provider_class.name;
  f->base.on_event = env->on_event;
  f->base.userdata = env->userdata;
  f->loop = env->loop;
  f->slots = (int)slots;
  f->time_scale = scale;
  snprintf(f->state_dir, sizeof f->state_dir, "%s", state);
  snprintf(f->store_url, sizeof f->store_url, "file://%s/store", state);
  char store[1100];
  snprintf(store, sizeof store, "%s/store", state);
  int r = sl_mkdir_p(store, 0700);
  int64_t id = r < 0 ? r : gw_loop_add_timer(f->loop, sl_time_mono_us() + REAP_US, on_timer, f);
  if (id <= 0) {
    snprintf(err, err_size, "fake provider: %s", sl_strerror((int)id));
    free(f);
    return NULL;
  }
  f->timer = id;
  return &f->base;
}

const struct gw_provider_class fake_provider_class = {
  .name = "fake",
  .options = fake_options,
  .check_option = fake_check_option,
  .open = fake_open,
};
