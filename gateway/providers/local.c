/* The local provider: instances are spotlab-worker processes on this machine
 * under a simulated spot market (DESIGN.md §5, docs/internals/local-provider.md).
 *
 * An instance is a worker process started in its own session and process
 * group (sid = pgid = pid, proc.c) with its own folder state_dir/instances/ID
 * (cwd, worker.json, work/, worker.log) and its own metadata endpoint
 * (imds.c). The provider chooses the id, writes the worker's config file
 * (0600, it holds the instance's secret key) and offers the checkpoint store
 * file://state_dir/store. Its record, instance.json in that folder
 * (local_records.c), is written before its worker starts (pid 0: not started yet) and rewritten
 * atomically on every change (started, notice), so a gateway that restarts
 * finds its instances again: gw_local_provider_new() and list() adopt every
 * record whose process is still alive (same pid and same kernel start time,
 * so a reused pid is never mistaken for a worker) and bring its metadata
 * endpoint back on the recorded port. destroy() leaves workers running.
 * Time: the market runs on simulated time = (monotonic now - open) ×
 * time_scale; deadlines given out (notices) are wall-clock µs since the
 * epoch, rounded up to a whole second so the time the metadata endpoint
 * prints is exactly when the process group is killed.
 * Invariants: the provider has one timer on the gateway's loop
 * (local_timer.c), re-armed to its next due time whenever that changes;
 * events are queued (bounded) and
 * delivered only from that timer, never from inside an operation, so the
 * callback may call back into the provider. An instance leaves the table
 * only after its GW_PROVIDER_TERMINATED event was queued; then its record is
 * removed (the folder and worker.log stay). At most GW_LOCAL_MAX_INSTANCES.
 * market() hands out one array refreshed when the market ticks, so callers
 * never allocate. */
#include "local_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog.h"
#include "conf.h"
#include "imds.h"
#include "keys.h"
#include "loop.h"
#include "market.h"
#include "proc.h"
#include "sl_err.h"
#include "sl_hmac.h"
#include "sl_ident.h"
#include "sl_log.h"
#include "sl_path.h"
#include "sl_time.h"

#define TERM_GRACE_US (5 * SL_US_PER_S)
#define TOPIC "gateway.local"

static struct gw_local *L(struct gw_provider *p) { return (struct gw_local *)p; }

/* ---- operations --------------------------------------------------------- */

static int pick_zone(const struct gw_local *l, const struct gw_catalog_entry *e, const char *want,
                     char *ret, size_t size) {
  size_t plen = strlen(l->zone_prefix);
  if (!*want || !strcmp(want, l->zone_prefix)) { /* any zone of its one region */
    snprintf(ret, size, "%s%c", l->zone_prefix, e->zones[0]);
    return 0;
  }
  if (strncmp(want, l->zone_prefix, plen) != 0 || strlen(want) != plen + 1 ||
      !strchr(e->zones, want[plen]))
    return SL_ENOTSUP;
  snprintf(ret, size, "%s", want);
  return 0;
}

static size_t live_count(const struct gw_local *l) {
  size_t n = 0;
  for (size_t i = 0; i < l->n; i++)
    n += !l->inst[i]->gone;
  return n;
}

static void fill_info(const struct gw_local *l, const struct gw_local_inst *in, struct gw_instance_info *ret) {
  memset(ret, 0, sizeof *ret);
  snprintf(ret->instance_id, sizeof ret->instance_id, "%s", in->id);
  snprintf(ret->type, sizeof ret->type, "%s", in->type);
  snprintf(ret->zone, sizeof ret->zone, "%s", in->zone);
  ret->spot = in->spot;
  ret->price_usd_per_hour =
      in->spot ? gw_market_price(l->market, (size_t)in->type_idx,
                                 gw_local_sim_us(l, sl_time_mono_us()))
               : in->price_usd_per_hour;
  if (in->port > 0)
    snprintf(ret->metadata_url, sizeof ret->metadata_url, "http://127.0.0.1:%d", in->port);
  ret->launched_us = in->launched_real_us;
  ret->running = !in->gone;
}

/* A fresh id ("i-" + 12 lowercase hex) that no instance, live or recorded
 * in a folder, has had. */
static int new_id(struct gw_local *l, char ret[GW_INSTANCE_ID_MAX]) {
  for (int tries = 0; tries < 16; tries++) {
    uint8_t rnd[6];
    char id[GW_INSTANCE_ID_MAX], dir[4200];
    sl_random_bytes(rnd, sizeof rnd);
    snprintf(id, sizeof id, "i-%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3], rnd[4],
             rnd[5]);
    gw_local_inst_path(l, id, NULL, dir, sizeof dir);
    if (!gw_local_find(l, id) && access(dir, F_OK) != 0) {
      memcpy(ret, id, sizeof id);
      return 0;
    }
  }
  return -EEXIST;
}

/* Starts in's worker: its folders, metadata endpoint, worker config, record
 * and process. On failure a message in err, and nothing is left of it but
 * its folder (with worker.log once a spawn was tried): the worker config,
 * which holds a secret key, is removed. */
static int start_instance(struct gw_local *l, struct gw_local_inst *in,
                          const struct gw_worker_boot *boot, char *err, size_t err_size) {
  char dir[4200], work[4300], cfg[4300], log_path[4300], url[64];
  gw_local_inst_path(l, in->id, NULL, dir, sizeof dir);
  gw_local_inst_path(l, in->id, "work", work, sizeof work);
  gw_local_inst_path(l, in->id, "worker.json", cfg, sizeof cfg);
  gw_local_inst_path(l, in->id, "worker.log", log_path, sizeof log_path);
  int r = sl_mkdir_p(work, 0700);
  if (r < 0) {
    snprintf(err, err_size, "%s: %s", work, sl_strerror(r));
    goto undo_dirs;
  }
  if ((r = gw_imds_new(in->id, in->type, in->zone, 0, &in->imds)) < 0) {
    snprintf(err, err_size, "metadata endpoint: %s", sl_strerror(r));
    goto undo_dirs;
  }
  in->port = gw_imds_port(in->imds);
  snprintf(url, sizeof url, "http://127.0.0.1:%d", in->port);
  struct gw_worker_file wf = {
    .boot = boot, .instance = in->id, .type = in->type, .zone = in->zone, .spot = in->spot,
    .metadata = url, .work_dir = work, .store = l->store_url,
  };
  if ((r = gw_keys_write_worker_file(cfg, &wf)) < 0) {
    snprintf(err, err_size, "%s: %s", cfg, sl_strerror(r));
    goto undo_dirs;
  }
  /* pid 0 until it runs: a restart finds the worker by its config. Without a
   * record no restart would know the worker, and its folder would be swept
   * while it ran: no record, no worker. */
  if ((r = gw_local_save_record(l, in)) < 0) {
    snprintf(err, err_size, "cannot save the instance's record: %s", sl_strerror(r));
    unlink(cfg);
    goto undo_dirs;
  }
  char *argv[] = {l->worker_program, "--config", cfg, NULL};
  if ((r = gw_proc_spawn(argv, dir, log_path, &in->pid)) < 0) {
    snprintf(err, err_size, "cannot start %s: %s", l->worker_program, sl_strerror(r));
    gw_local_remove_record(l, in->id);
    unlink(cfg);
    goto undo_dirs;
  }
  char state;
  if (gw_proc_stat(in->pid, &in->start_ticks, &state) < 0)
    in->start_ticks = 0;
  return 0;
undo_dirs:
  rmdir(work);
  rmdir(dir); /* fails, keeping it, once worker.log exists */
  return r;
}

static int local_launch(struct gw_provider *p, const struct gw_launch *req,
                        char ret_id[GW_INSTANCE_ID_MAX]) {
  struct gw_local *l = L(p);
  if (!req->boot || !req->boot->gateway || !req->boot->gateway_public)
    return -EINVAL;
  int t = gw_catalog_find(l->cat, req->type);
  if (t < 0)
    return SL_ENAME;
  const struct gw_catalog_entry *e = gw_catalog_get(l->cat, (size_t)t);
  char zone[32], err[4400] = "";
  int r = pick_zone(l, e, req->zone, zone, sizeof zone);
  if (r < 0)
    return r;
  int64_t now = sl_time_mono_us();
  double price = req->spot ? gw_market_price(l->market, (size_t)t, gw_local_sim_us(l, now))
                           : e->on_demand_usd_per_hour;
  if (live_count(l) >= (size_t)l->slots || l->n == GW_LOCAL_MAX_INSTANCES)
    return SL_ELIMIT; /* every slot taken: no offer launches until an instance ends */
  if ((req->spot && gw_local_spot_running(l, t, false) >= gw_market_capacity(l->market, gw_local_sim_us(l, now))) ||
      (req->max_price_usd_per_hour > 0 && price > req->max_price_usd_per_hour))
    return -EAGAIN;
  struct gw_local_inst *in = calloc(1, sizeof *in);
  if (!in)
    return -ENOMEM;
  if ((r = new_id(l, in->id)) < 0) {
    snprintf(err, sizeof err, "no free instance id");
    goto fail;
  }
  snprintf(in->type, sizeof in->type, "%s", e->name);
  snprintf(in->zone, sizeof in->zone, "%s", zone);
  in->type_idx = t;
  in->spot = req->spot;
  in->price_usd_per_hour = price;
  in->launched_real_us = sl_time_real_us();
  in->notice_at_mono_us = in->rebalance_at_mono_us = INT64_MAX;
  if ((r = start_instance(l, in, req->boot, err, sizeof err)) < 0)
    goto fail;
  if (in->spot) {
    int64_t after_sim, lead_sim;
    gw_market_draw(l->market, (size_t)t, &after_sim, &lead_sim);
    if (after_sim != INT64_MAX) {
      in->notice_at_mono_us = now + (int64_t)((double)after_sim / l->time_scale);
      if (lead_sim > 0)
        in->rebalance_at_mono_us =
            now + (int64_t)((double)(after_sim > lead_sim ? after_sim - lead_sim : 0) /
                            l->time_scale);
    }
  }
  gw_local_save_record(l, in);
  l->inst[l->n++] = in;
  struct gw_provider_event *ev = gw_local_queue_event(l, GW_PROVIDER_LAUNCHED, in->id);
  if (ev) {
    fill_info(l, in, &ev->info);
    ev->info.price_usd_per_hour = in->price_usd_per_hour; /* the price it launched at, as recorded */
  }
  gw_local_rearm(l);
  memcpy(ret_id, in->id, GW_INSTANCE_ID_MAX);
  char jid[24];
  sl_info(TOPIC, "launched %s (%s %s%s, pid %d, metadata port %d) for job %s", in->id,
          in->type, in->zone, in->spot ? " spot" : "", (int)in->pid, in->port,
          sl_job_id_str(req->job, jid, sizeof jid));
  return 0;
fail:
  sl_err(TOPIC, "launch of a %s instance: %s", req->type, err[0] ? err : sl_strerror(r));
  gw_local_inst_free(in);
  return r;
}

static int local_terminate(struct gw_provider *p, const char *instance_id) {
  struct gw_local *l = L(p);
  struct gw_local_inst *in = gw_local_find(l, instance_id);
  if (!in)
    return SL_ENAME;
  if (in->gone || in->kill_at_mono_us)
    return 0;
  gw_proc_signal_group(in->pid, SIGTERM);
  in->kill_at_mono_us = sl_time_mono_us() + TERM_GRACE_US;
  in->by_market = false;
  gw_local_rearm(l);
  return 0;
}

static int local_inject(struct gw_provider *p, const char *instance_id, bool kill_now,
                        double notice_s) {
  struct gw_local *l = L(p);
  struct gw_local_inst *in = gw_local_find(l, instance_id);
  if (!in)
    return SL_ENAME;
  if (in->gone)
    return SL_ESTATE;
  if (!(notice_s >= 0 && notice_s <= 86400))
    return -EINVAL;
  if (kill_now || notice_s == 0) {
    gw_proc_kill_session(in->pid);
    in->signalled = true;
    in->by_market = true;
  } else {
    if (in->deadline_real_us > 0)
      return SL_ESTATE;
    gw_local_give_notice(l, in, notice_s, sl_time_mono_us());
  }
  gw_local_rearm(l);
  return 0;
}

static int local_rebalance(struct gw_provider *p, const char *instance_id) {
  struct gw_local *l = L(p);
  struct gw_local_inst *in = gw_local_find(l, instance_id);
  if (!in)
    return SL_ENAME;
  if (in->gone || in->deadline_real_us > 0)
    return SL_ESTATE;
  in->rebalance_at_mono_us = sl_time_mono_us();
  gw_local_rearm(l);
  return 0;
}

static int local_list(struct gw_provider *p, struct gw_instance_info **ret, size_t *ret_n) {
  struct gw_local *l = L(p);
  gw_local_rescan(l);
  struct gw_instance_info *a = calloc(l->n ? l->n : 1, sizeof *a);
  if (!a)
    return -ENOMEM;
  for (size_t i = 0; i < l->n; i++) {
    struct gw_local_inst *in = l->inst[i];
    if (!in->gone && !gw_local_alive(in))
      in->gone = true;
    fill_info(l, in, &a[i]);
  }
  gw_local_rearm(l);
  *ret = a;
  *ret_n = l->n;
  return 0;
}

static int local_market(struct gw_provider *p, const struct gw_instance_type **ret,
                        size_t *ret_n) {
  struct gw_local *l = L(p);
  *ret = l->types;
  *ret_n = l->n_types;
  return 0;
}

static int local_store_url(struct gw_provider *p, char *buf, size_t size) {
  struct gw_local *l = L(p);
  if (strlen(l->store_url) >= size)
    return SL_ELIMIT;
  memcpy(buf, l->store_url, strlen(l->store_url) + 1);
  return 0;
}

static double local_time_scale(struct gw_provider *p) { return L(p)->time_scale; }

static void local_destroy(struct gw_provider *p) {
  struct gw_local *l = L(p);
  if (!l)
    return;
  if (l->timer > 0)
    gw_loop_del_timer(l->loop, l->timer);
  for (size_t i = 0; i < l->n; i++)
    gw_local_inst_free(l->inst[i]); /* workers keep running; their records stay */
  free(l->types);
  free(l->type_cat);
  gw_market_free(l->market);
  gw_catalog_free(l->cat);
  free(l->state_dir);
  free(l->worker_program);
  free(l->zone_prefix);
  free(l);
}

static const struct gw_provider_ops local_ops = {
    .launch = local_launch,
    .terminate = local_terminate,
    .list = local_list,
    .market = local_market,
    .store_url = local_store_url,
    .time_scale = local_time_scale,
    .inject = local_inject,
    .rebalance = local_rebalance,
    .destroy = local_destroy,
};

/* The catalog as the market array, one offer per type and zone (a launch
 * of an offer asks for its zone); the region is zone_prefix. Prices filled
 * by gw_local_refresh_market(). */
static int make_types(struct gw_local *l) {
  size_t n = 0;
  for (size_t i = 0; i < gw_catalog_count(l->cat); i++)
    n += strlen(gw_catalog_get(l->cat, i)->zones);
  l->types = calloc(n ? n : 1, sizeof *l->types);
  l->type_cat = calloc(n ? n : 1, sizeof *l->type_cat);
  if (!l->types || !l->type_cat)
    return -ENOMEM;
  l->n_types = 0;
  for (size_t i = 0; i < gw_catalog_count(l->cat); i++) {
    const struct gw_catalog_entry *e = gw_catalog_get(l->cat, i);
    for (const char *z = e->zones; *z; z++) {
      struct gw_instance_type *t = &l->types[l->n_types];
      l->type_cat[l->n_types++] = i;
      snprintf(t->name, sizeof t->name, "%s", e->name);
      t->gpus = e->gpus;
      snprintf(t->gpu_model, sizeof t->gpu_model, "%s", e->gpu_model);
      t->on_demand_usd_per_hour = e->on_demand_usd_per_hour;
      t->interruption = gw_catalog_bucket_label(e->bucket);
      t->mean_time_to_preempt_s = gw_market_mean_time_to_preempt_s(l->market, i);
      snprintf(t->region, sizeof t->region, "%s", l->zone_prefix);
      snprintf(t->zone, sizeof t->zone, "%s%c", l->zone_prefix, *z);
    }
  }
  gw_local_refresh_market(l, l->open_mono_us);
  return 0;
}

/* The catalog, the market over it and the market array. */
static int open_market(struct gw_local *l, const struct gw_local_config *cfg, char *err,
                       size_t err_size) {
  char catalog_path[4096];
  const char *cat = cfg->catalog;
  if (!cat) {
    if (gw_catalog_default_path(catalog_path, sizeof catalog_path) < 0) {
      snprintf(err, err_size, "built-in catalog.csv not found (share/spotlab or source tree)");
      return -ENOENT;
    }
    cat = catalog_path;
  }
  int r = gw_catalog_load(cat, &l->cat, err, err_size);
  if (r == 0)
    r = gw_market_new(cfg->market ? cfg->market : "random:1", l->cat, &l->market, err,
                      err_size);
  if (r == 0 && (r = make_types(l)) < 0)
    snprintf(err, err_size, "out of memory");
  return r;
}

struct gw_provider *gw_local_provider_new(const struct gw_local_config *cfg, struct gw_loop *loop,
                                          gw_provider_event_fn on_event, void *userdata,
                                          char *err, size_t err_size) {
  char dir[4200];
  const char *prefix = cfg->zone_prefix && *cfg->zone_prefix ? cfg->zone_prefix : "local-1";
  if (cfg->slots < 1 || cfg->slots > GW_LOCAL_MAX_INSTANCES) {
    snprintf(err, err_size, "provider.local: slots must be 1..%d", GW_LOCAL_MAX_INSTANCES);
    return NULL;
  }
  if (!(cfg->time_scale >= 0.001 && cfg->time_scale <= 1e6)) {
    snprintf(err, err_size, "provider.local: time_scale must be in 0.001..1000000");
    return NULL;
  }
  if (!loop || !cfg->state_dir || !*cfg->state_dir || !cfg->worker_program ||
      !*cfg->worker_program || strlen(prefix) > 24 || strlen(cfg->state_dir) > 4000) {
    snprintf(err, err_size, "provider.local: a loop, state_dir (at most 4000 bytes) and "
                            "worker_program are required, zone_prefix at most 24 bytes");
    return NULL;
  }
  struct gw_local *l = calloc(1, sizeof *l);
  if (!l) {
    snprintf(err, err_size, "out of memory");
    return NULL;
  }
  l->base.ops = &local_ops;
  l->base.name = "local";
  l->base.simulated = true;
  l->base.lists_all = true; /* instance.json is saved before the worker starts */
  l->base.on_event = on_event;
  l->base.userdata = userdata;
  l->loop = loop;
  l->slots = cfg->slots;
  l->time_scale = cfg->time_scale;
  l->open_mono_us = sl_time_mono_us();
  l->state_dir = strdup(cfg->state_dir);
  /* absolute: workers start in their instance folders */
  l->worker_program = realpath(cfg->worker_program, NULL);
  if (!l->worker_program)
    l->worker_program = strdup(cfg->worker_program);
  l->zone_prefix = strdup(prefix);
  if (!l->state_dir || !l->worker_program || !l->zone_prefix) {
    snprintf(err, err_size, "out of memory");
    goto fail;
  }
  if (open_market(l, cfg, err, err_size) < 0)
    goto fail;
  const char *sub[] = {"instances", "store"};
  for (size_t i = 0; i < 2; i++) {
    snprintf(dir, sizeof dir, "%s/%s", l->state_dir, sub[i]);
    int r = sl_mkdir_p(dir, 0700);
    if (r < 0) {
      snprintf(err, err_size, "%s: %s", dir, sl_strerror(r));
      goto fail;
    }
  }
  if (cfg->store_url && *cfg->store_url)
    snprintf(l->store_url, sizeof l->store_url, "%s", cfg->store_url);
  else
    snprintf(l->store_url, sizeof l->store_url, "file://%s/store", l->state_dir);
  gw_local_rescan(l);
  gw_local_sweep_folders(l);
  l->swept_mono_us = sl_time_mono_us();
  l->sweep_every_us = GW_LOCAL_SWEEP_EVERY_US;
  int64_t id = gw_loop_add_timer(loop, gw_local_next_due(l, sl_time_mono_us()), gw_local_on_timer, l);
  if (id <= 0) {
    snprintf(err, err_size, "provider.local: cannot add a timer: %s", sl_strerror((int)id));
    goto fail;
  }
  l->timer = id;
  return &l->base;
fail:
  local_destroy(&l->base);
  return NULL;
}

/* ---- the class ------------------------------------------------------------ */

static const struct gw_provider_option local_options[] = {
  {"slots", "2", "local instances that may run at once (0 disables the local provider)"},
  {"market", "random:1", "spot market model: trace:PATH or random:SEED"},
  {"time_scale", "60",
   "simulated seconds per wall-clock second (prices and costs use simulated time)"},
  {"catalog", "", "CSV of instance types; empty for the built-in catalog"},
  {NULL, NULL, NULL},
};

static int parse_slots(const char *v, double *ret, char *err, size_t size) {
  return gw_config_parse_number("slots", v, true, 0, 64, ret, err, size);
}

static int parse_time_scale(const char *v, double *ret, char *err, size_t size) {
  return gw_config_parse_number("time_scale", v, false, 0.001, 1e6, ret, err, size);
}

static int local_check_option(const char *name, const char *value, char *err, size_t size) {
  double d;
  if (!strcmp(name, "slots"))
    return parse_slots(value, &d, err, size);
  if (!strcmp(name, "time_scale"))
    return parse_time_scale(value, &d, err, size);
  if (!strcmp(name, "market")) {
    const char *seed = value + 7;
    if (!strncmp(value, "trace:", 6) && value[6])
      return 0;
    if (!strncmp(value, "random:", 7) && *seed && strspn(seed, "0123456789") == strlen(seed) &&
        strlen(seed) <= 19)
      return 0;
    snprintf(err, size, "market: \"%s\" is not trace:PATH or random:SEED (a decimal integer)",
             value);
    return SL_ECONFIG;
  }
  return 0; /* catalog: any path; it is read when the provider opens */
}

static struct gw_provider *local_open(const struct gw_provider_env *env, char *err,
                                      size_t err_size) {
  const char *name = gw_local_provider_class.name;
  const char *market = gw_config_provider_option(env->cfg, name, "market");
  const char *catalog = gw_config_provider_option(env->cfg, name, "catalog");
  const char *slots_text = gw_config_provider_option(env->cfg, name, "slots");
  const char *scale_text = gw_config_provider_option(env->cfg, name, "time_scale");
  double slots, scale;
  char why[512];
  if (parse_slots(slots_text, &slots, why, sizeof why) < 0 ||
      parse_time_scale(scale_text, &scale, why, sizeof why) < 0) {
    snprintf(err, err_size, "[provider.local] %s", why);
    return NULL;
  }
  if (slots == 0) { /* off: no reason, no error */
    if (err_size) err[0] = 0;
    return NULL;
  }
  char worker[1024];
  if (sl_find_program("spotlab-worker", worker, sizeof worker) < 0) {
    snprintf(err, err_size, "spotlab-worker not found (set SPOTLAB_WORKER_BIN)");
    return NULL;
  }
  struct gw_local_config lc = {
    .slots = (int)slots,
    .market = market,
    .time_scale = scale,
    .catalog = catalog && *catalog ? catalog : NULL,
    .state_dir = env->state_dir ? env->state_dir : env->cfg->state_dir,
    .worker_program = worker,
    .store_url = env->store_url,
  };
  return gw_local_provider_new(&lc, env->loop, env->on_event, env->userdata, err, err_size);
}

const struct gw_provider_class gw_local_provider_class = {
  .name = "local",
  .options = local_options,
  .check_option = local_check_option,
  .open = local_open,
};
