/* The aws provider (DESIGN.md §8, docs/internals/aws-provider.md): EC2
 * instances started with RunInstances, each running spotlab-worker from its
 * user data (aws_boot.c), tagged spotlab:gateway, spotlab:instance and
 * spotlab:job.
 *
 * This file is the gateway's side: the class, open(), the operations and
 * the delivery of events. Operations never call EC2: they change the table
 * under mu, write records, and wake the provider's thread (aws_thread.c),
 * which makes the calls and queues what came of them. The thread wakes the
 * loop through an eventfd registered on it; events are delivered only from
 * that descriptor's callback, never from inside an operation, so the event
 * callback may call the provider again. Instance ids are spotlab's own
 * ("sl-" + 16 hex), chosen before EC2 is asked, so a record exists for every
 * instance EC2 may have started. */
#include "aws_int.h"
#include "aws_check.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "catalog.h"
#include "conf.h"
#include "loop.h"
#include "sl_err.h"
#include "sl_hmac.h"
#include "sl_http.h"
#include "sl_ident.h"
#include "sl_log.h"
#include "sl_path.h"
#include "sl_time.h"

#define T GW_AWS_TOPIC

static struct gw_aws *A(struct gw_provider *p) { return (struct gw_aws *)p; }
static void lock(struct gw_aws *a) { pthread_mutex_lock(&a->mu); }
static void unlock(struct gw_aws *a) { pthread_mutex_unlock(&a->mu); }

/* Wakes the provider's thread: work was queued (mu held). */
static void kick(struct gw_aws *a) {
  a->kick = true;
  pthread_cond_broadcast(&a->cv);
}

struct gw_aws_inst *gw_aws_find(struct gw_aws *a, const char *id) {
  for (size_t i = 0; i < a->n; i++)
    if (!strcmp(a->inst[i]->id, id))
      return a->inst[i];
  return NULL;
}

int gw_aws_region_index(const struct gw_aws *a, const char *name) {
  for (size_t i = 0; i < a->n_regions; i++)
    if (!strcmp(a->regions[i].name, name))
      return (int)i;
  return -1;
}

int gw_aws_region_of_zone(const struct gw_aws *a, const char *zone) {
  char names[GW_AWS_MAX_REGIONS][32];
  for (size_t i = 0; i < a->n_regions; i++)
    memcpy(names[i], a->regions[i].name, sizeof names[i]);
  return gw_aws_zone_region((const char(*)[32])names, a->n_regions, zone);
}

struct gw_provider_event *gw_aws_queue_event(struct gw_aws *a, enum gw_provider_event_kind kind,
                                             const char *id) {
  struct gw_provider_event *ev = gw_evqueue_push(&a->events, kind, id, T);
  if (!ev)
    return NULL;
  uint64_t one = 1;
  if (write(a->efd, &one, sizeof one) < 0 && errno != EAGAIN)
    sl_warn(T, "cannot wake the gateway's loop: %s", strerror(errno));
  return ev;
}

void gw_aws_fill_info(const struct gw_aws *a, const struct gw_aws_inst *in,
                      struct gw_instance_info *ret) {
  (void)a;
  memset(ret, 0, sizeof *ret);
  snprintf(ret->instance_id, sizeof ret->instance_id, "%s", in->id);
  snprintf(ret->type, sizeof ret->type, "%s", in->type);
  snprintf(ret->zone, sizeof ret->zone, "%s", in->state == GW_AWS_RUNNING ? in->zone : "");
  ret->spot = in->spot;
  ret->price_usd_per_hour = in->n_prices ? in->prices[in->n_prices - 1].usd_per_hour
                                         : in->price_usd_per_hour;
  ret->launched_us = in->launched_us;
  ret->running = in->state != GW_AWS_ENDED;
}

/* Frees ended instances past GW_AWS_MAX_ENDED, oldest first (thread, mu held). */
static void evict_ended(struct gw_aws *a) {
  for (;;) {
    size_t ended = 0, oldest = a->n;
    for (size_t i = 0; i < a->n; i++)
      if (a->inst[i]->state == GW_AWS_ENDED) {
        ended++;
        if (oldest == a->n || a->inst[i]->ended_us < a->inst[oldest]->ended_us)
          oldest = i;
      }
    if (ended <= GW_AWS_MAX_ENDED)
      return;
    gw_aws_inst_free(a->inst[oldest]);
    a->inst[oldest] = a->inst[--a->n];
  }
}

void gw_aws_end(struct gw_aws *a, struct gw_aws_inst *in, bool by_market) {
  struct gw_provider_event *ev = gw_aws_queue_event(a, GW_PROVIDER_TERMINATED, in->id);
  if (ev)
    ev->by_market = by_market;
  in->state = GW_AWS_ENDED;
  in->by_market = by_market;
  if (!in->ended_us)
    in->ended_us = sl_time_real_us();
  gw_aws_drop_boot(in);
  gw_aws_remove_record(a, in->id);
  evict_ended(a);
}

/* ---- the loop side ------------------------------------------------------ */

/* The thread queued events: delivers them, outside mu. */
static void on_wake(struct gw_loop *loop, int fd, void *sock, int events, void *data) {
  struct gw_aws *a = data;
  (void)loop;
  (void)sock;
  (void)events;
  uint64_t count;
  if (read(fd, &count, sizeof count) < 0 && errno != EAGAIN)
    sl_warn(T, "eventfd: %s", strerror(errno));
  lock(a);
  struct gw_provider_event *batch = NULL;
  size_t n = 0;
  if (gw_evqueue_take(&a->events, &batch, &n) < 0) {
    uint64_t one = 1; /* kept queued; the next turn tries again */
    if (write(a->efd, &one, sizeof one) < 0)
      sl_warn(T, "eventfd: %s", strerror(errno));
  }
  unlock(a);
  for (size_t i = 0; batch && i < n; i++) {
    if (a->base.on_event)
      a->base.on_event(a->base.userdata, &a->base, &batch[i]);
    if (batch[i].kind != GW_PROVIDER_LAUNCHED)
      continue;
    lock(a);
    struct gw_aws_inst *in = gw_aws_find(a, batch[i].instance_id);
    if (in && in->state == GW_AWS_RUNNING && !in->reported) {
      in->reported = true; /* a restart does not report it again */
      gw_aws_save_record(a, in);
    }
    unlock(a);
  }
  free(batch);
}

/* ---- operations --------------------------------------------------------- */

static int type_index(const struct gw_aws *a, const char *type) {
  for (size_t i = 0; i < a->cfg.n_types; i++)
    if (!strcmp(a->cfg.types[i], type))
      return (int)i;
  return -1;
}

/* A fresh id ("sl-" + 16 hex) no instance or record has had (mu held). */
static int new_id(struct gw_aws *a, char ret[GW_INSTANCE_ID_MAX]) {
  for (int tries = 0; tries < 16; tries++) {
    uint8_t rnd[8];
    char id[GW_INSTANCE_ID_MAX], path[4300];
    sl_random_bytes(rnd, sizeof rnd);
    snprintf(id, sizeof id, "sl-%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2],
             rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
    snprintf(path, sizeof path, "%s/%s.json", a->cfg.dir, id);
    if (!gw_aws_find(a, id) && access(path, F_OK) != 0) {
      memcpy(ret, id, sizeof id);
      return 0;
    }
  }
  return -EEXIST;
}

/* Copies the request's boot into in; -ENOMEM. */
static int keep_boot(struct gw_aws_inst *in, const struct gw_worker_boot *b) {
  snprintf(in->boot_gateway, sizeof in->boot_gateway, "%s", b->gateway);
  snprintf(in->boot_public, sizeof in->boot_public, "%s", b->gateway_public);
  in->boot_keys = b->keys;
  in->boot_metrics_per_s = b->metrics_per_s;
  in->boot_move_on_rebalance = b->move_on_rebalance;
  in->boot_data_cache_bytes = b->data_cache_bytes;
  in->boot_part_bytes = b->part_bytes;
  snprintf(in->boot_bundle_sha256, sizeof in->boot_bundle_sha256, "%s",
           b->bundle_sha256 ? b->bundle_sha256 : "");
  if (b->bundle_url && !(in->boot_bundle_url = strdup(b->bundle_url)))
    return -ENOMEM;
  in->have_boot = true;
  return 0;
}

/* Refusals known at once (mu held): the type, the zone, the capacity
 * remembered, a boot the user data cannot carry. */
static int check_launch(struct gw_aws *a, const struct gw_launch *req, char *why, size_t size) {
  const struct gw_worker_boot *b = req->boot;
  if (!b || !b->gateway || !b->gateway_public) {
    snprintf(why, size, "no worker boot in the request");
    return -EINVAL;
  }
  if (type_index(a, req->type) < 0)
    return SL_ENAME;
  /* the zone names a zone of an offered region, or the region itself */
  const char *where = req->zone;
  int r = *where ? gw_aws_region_index(a, where) : -1;
  bool region = r >= 0;
  if (*where && !region)
    r = gw_aws_region_of_zone(a, where);
  bool configured = !*where || (r >= 0 && a->regions[r].offered);
  if (configured && *where && !region && a->cfg.n_placements) {
    configured = false;
    for (size_t i = 0; i < a->cfg.n_placements && !configured; i++)
      configured = !strcmp(a->cfg.placements[i].zone, where);
  }
  if (!configured) {
    snprintf(why, size, "%s %s is not among the configured ones", region ? "region" : "zone",
             where);
    return SL_ENOTSUP;
  }
  struct gw_aws_placement pl[GW_AWS_MAX_PLACEMENTS * 4];
  if (!gw_aws_placements(a, req->type, req->zone, req->spot, pl, sizeof pl / sizeof pl[0])) {
    snprintf(why, size, "no %s capacity in %s recently", req->type, *where ? where : "any zone");
    return -EAGAIN;
  }
  /* the user data, once, to refuse now what no attempt could send */
  struct gw_aws_user_data u = {
      .boot = b, .gateway = a->cfg.advertise[0] ? a->cfg.advertise : b->gateway,
      .instance = "sl-0000000000000000", .type = req->type, .zone = pl[0].zone, .spot = req->spot,
      .store = a->cfg.store_url, .worker_prefix = a->cfg.worker_prefix,
      .orphan_timeout_ms = a->cfg.orphan_timeout_ms,
  };
  char *text = NULL;
  r = gw_aws_user_data(&u, &text, why, size);
  if (text) {
    explicit_bzero(text, strlen(text));
    free(text);
  }
  return r;
}

static size_t live_count(const struct gw_aws *a) {
  size_t n = 0;
  for (size_t i = 0; i < a->n; i++)
    n += a->inst[i]->state != GW_AWS_ENDED;
  return n;
}

static int aws_launch(struct gw_provider *p, const struct gw_launch *req,
                      char ret_id[GW_INSTANCE_ID_MAX]) {
  struct gw_aws *a = A(p);
  char why[400] = "";
  lock(a);
  int r = check_launch(a, req, why, sizeof why);
  struct gw_aws_inst *in = NULL;
  if (r == 0 && (a->n == GW_AWS_MAX_INSTANCES || live_count(a) >= GW_AWS_MAX_INSTANCES - GW_AWS_MAX_ENDED)) {
    snprintf(why, sizeof why, "%d instances at once at most", GW_AWS_MAX_INSTANCES - GW_AWS_MAX_ENDED);
    r = -EAGAIN;
  }
  if (r == 0 && !(in = calloc(1, sizeof *in)))
    r = -ENOMEM;
  if (r == 0 && (r = new_id(a, in->id)) < 0)
    snprintf(why, sizeof why, "no free instance id");
  if (r == 0 && (r = keep_boot(in, req->boot)) < 0)
    snprintf(why, sizeof why, "out of memory");
  if (r == 0) {
    snprintf(in->type, sizeof in->type, "%s", req->type);
    snprintf(in->want_zone, sizeof in->want_zone, "%s", req->zone);
    in->spot = req->spot;
    in->max_price_usd_per_hour = req->max_price_usd_per_hour > 0 ? req->max_price_usd_per_hour : 0;
    in->job = req->job;
    in->state = GW_AWS_LAUNCHING;
    /* recorded before EC2 hears of it: a restart finds it whatever happens next */
    if ((r = gw_aws_save_record(a, in)) < 0)
      snprintf(why, sizeof why, "cannot write its record in %.200s: %s", a->cfg.dir, sl_strerror(r));
  }
  if (r < 0) {
    unlock(a);
    if (r != -EAGAIN && r != SL_ENAME)
      sl_warn(T, "launch of a %s instance refused: %s", req->type, why[0] ? why : sl_strerror(r));
    gw_aws_inst_free(in);
    return r;
  }
  a->inst[a->n++] = in;
  memcpy(ret_id, in->id, GW_INSTANCE_ID_MAX);
  kick(a);
  unlock(a);
  char jid[24];
  sl_info(T, "launching %s (%s%s%s%s) for job %s", ret_id, req->type, req->zone[0] ? " in " : "",
          req->zone, req->spot ? " spot" : "", sl_job_id_str(req->job, jid, sizeof jid));
  return 0;
}

static int aws_terminate(struct gw_provider *p, const char *instance_id) {
  struct gw_aws *a = A(p);
  lock(a);
  struct gw_aws_inst *in = gw_aws_find(a, instance_id);
  int r = in ? 0 : SL_ENAME;
  if (in && in->state != GW_AWS_ENDED && !in->want_terminate) {
    in->want_terminate = true;
    in->retry_terminate_mono_us = 0;
    gw_aws_save_record(a, in);
    kick(a);
  }
  unlock(a);
  return r;
}

static int aws_list(struct gw_provider *p, struct gw_instance_info **ret, size_t *ret_n) {
  struct gw_aws *a = A(p);
  lock(a);
  struct gw_instance_info *list = calloc(a->n ? a->n : 1, sizeof *list);
  size_t n = 0;
  for (size_t i = 0; list && i < a->n; i++)
    if (a->inst[i]->state != GW_AWS_ENDED)
      gw_aws_fill_info(a, a->inst[i], &list[n++]);
  unlock(a);
  if (!list)
    return -ENOMEM;
  *ret = list;
  *ret_n = n;
  return 0;
}

static int aws_market(struct gw_provider *p, const struct gw_instance_type **ret, size_t *ret_n) {
  struct gw_aws *a = A(p);
  lock(a);
  int n = gw_aws_market_offers(a);
  unlock(a);
  if (n < 0)
    return n;
  *ret = a->types_out;
  *ret_n = (size_t)n;
  return 0;
}

static int aws_store_url(struct gw_provider *p, char *buf, size_t size) {
  struct gw_aws *a = A(p);
  size_t n = strlen(a->cfg.store_url);
  if (n >= size)
    return SL_ELIMIT;
  memcpy(buf, a->cfg.store_url, n + 1);
  return 0;
}

static int aws_billed_usd(struct gw_provider *p, const char *instance_id, int64_t now_us,
                          double *ret) {
  struct gw_aws *a = A(p);
  lock(a);
  struct gw_aws_inst *in = gw_aws_find(a, instance_id);
  double usd = in ? gw_aws_billed(in, now_us) : 0;
  unlock(a);
  if (!in)
    return -ENOENT;
  *ret = usd;
  return 0;
}

static void aws_destroy(struct gw_provider *p) {
  struct gw_aws *a = A(p);
  if (!a)
    return;
  gw_aws_thread_stop(a); /* instances keep running; their records stay */
  if (a->efd_watched)
    gw_loop_del_fd(a->loop, a->efd);
  if (a->efd >= 0)
    close(a->efd);
  for (size_t i = 0; i < a->n; i++)
    gw_aws_inst_free(a->inst[i]);
  free(a->types);
  free(a->types_out);
  free(a->prices);
  for (size_t i = 0; i < a->n_regions; i++)
    aws_ec2_free(a->regions[i].ec2);
  sl_aws_chain_free(a->chain);
  gw_catalog_free(a->cat);
  gw_aws_config_done(&a->cfg);
  pthread_cond_destroy(&a->cv);
  pthread_mutex_destroy(&a->mu);
  free(a);
}

static const struct gw_provider_ops aws_ops = {
    .launch = aws_launch,
    .terminate = aws_terminate,
    .list = aws_list,
    .market = aws_market,
    .store_url = aws_store_url,
    .time_scale = NULL,
    .inject = NULL, /* a real instance cannot be preempted on demand */
    .billed_usd = aws_billed_usd,
    .destroy = aws_destroy,
};

/* ---- open --------------------------------------------------------------- */

static int open_catalog(struct gw_aws *a, const struct gw_provider_env *env, char *err,
                        size_t err_size) {
  char path[4096];
  const char *cat = a->cfg.catalog;
  if (!*cat) {
    if (gw_catalog_default_path(path, sizeof path) < 0) {
      snprintf(err, err_size, "built-in catalog.csv not found (share/spotlab or source tree)");
      return -ENOENT;
    }
    cat = path;
  }
  int r = gw_catalog_load(cat, &a->cat, err, err_size);
  if (r == 0)
    r = gw_aws_config_types(&a->cfg, a->cat,
                            gw_config_provider_option(env->cfg, "aws", "instance_types"), err,
                            err_size);
  if (r == 0)
    r = gw_aws_market_init(a, err, err_size);
  return r;
}

/* The configured regions, offered, in order (records may add others). */
static void init_regions(struct gw_aws *a) {
  for (size_t i = 0; i < a->cfg.n_regions; i++) {
    snprintf(a->regions[i].name, sizeof a->regions[i].name, "%s", a->cfg.regions[i]);
    a->regions[i].offered = true;
  }
  a->n_regions = a->cfg.n_regions;
}

/* The credential chain, then one EC2 client per region: SigV4 scopes each
 * request to its region, and each region has its own endpoint (or the
 * one AWS_ENDPOINT_URL_EC2 names for all). */
static int open_ec2(struct gw_aws *a, char *err, size_t err_size) {
  char why[400] = "", endpoint[SL_AWS_ENDPOINT_MAX];
  int r = sl_http_global_init();
  if (r < 0) {
    snprintf(err, err_size, "cannot start libcurl: %s", sl_strerror(r));
    return r;
  }
  if ((r = sl_aws_chain_new(&a->chain, why, sizeof why)) < 0) {
    snprintf(err, err_size, "AWS credentials: %s", why[0] ? why : sl_strerror(r));
    return r;
  }
  for (size_t i = 0; i < a->n_regions; i++) {
    struct gw_aws_region *g = &a->regions[i];
    if ((r = sl_aws_endpoint("ec2", g->name, endpoint)) < 0 ||
        (r = aws_ec2_new(a->chain, g->name, endpoint, &g->ec2)) < 0) {
      snprintf(err, err_size, "EC2 client for %s: %s", g->name, sl_strerror(r));
      return r;
    }
  }
  return 0;
}

static struct gw_provider *aws_open(const struct gw_provider_env *env, char *err,
                                    size_t err_size) {
  if (!env->loop) {
    snprintf(err, err_size, "provider.aws: no loop");
    return NULL;
  }
  struct gw_aws *a = calloc(1, sizeof *a);
  if (!a) {
    snprintf(err, err_size, "out of memory");
    return NULL;
  }
  a->efd = -1;
  a->loop = env->loop;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* wait_until counts in sl_time_mono_us */
  pthread_cond_init(&a->cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&a->mu, NULL);
  a->base.ops = &aws_ops;
  a->base.name = "aws";
  a->base.on_event = env->on_event;
  a->base.userdata = env->userdata;
  int r;
  if (gw_aws_config_load(env, &a->cfg, err, err_size) < 0 ||
      open_catalog(a, env, err, err_size) < 0)
    goto fail;
  a->base.needs_bundle = !a->cfg.worker_prefix[0];
  a->base.lists_all = true; /* launch() records an instance before any EC2 call */
  if ((r = sl_mkdir_p(a->cfg.dir, 0700)) < 0) {
    snprintf(err, err_size, "%s: %s", a->cfg.dir, sl_strerror(r));
    goto fail;
  }
  init_regions(a);
  gw_aws_load_records(a); /* before the clients: a record may name a region no longer configured */
  if (open_ec2(a, err, err_size) < 0)
    goto fail;
  a->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (a->efd < 0 || (r = gw_loop_add_fd(a->loop, a->efd, GW_LOOP_READ, on_wake, a)) < 0) {
    snprintf(err, err_size, "provider.aws: cannot watch an eventfd: %s",
             a->efd < 0 ? strerror(errno) : sl_strerror(r));
    goto fail;
  }
  a->efd_watched = true;
  for (size_t i = 0; i < a->n; i++) /* found running, but its LAUNCHED never delivered */
    if (a->inst[i]->state == GW_AWS_RUNNING && !a->inst[i]->reported) {
      struct gw_provider_event *ev = gw_aws_queue_event(a, GW_PROVIDER_LAUNCHED, a->inst[i]->id);
      if (ev)
        gw_aws_fill_info(a, a->inst[i], &ev->info);
    }
  if ((r = gw_aws_thread_start(a)) < 0) {
    snprintf(err, err_size, "provider.aws: cannot start its thread: %s", sl_strerror(r));
    goto fail;
  }
  char names[GW_AWS_MAX_REGIONS * 34] = "";
  for (size_t i = 0; i < a->cfg.n_regions; i++)
    snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
             a->cfg.regions[i]);
  sl_info(T, "region%s %s, %zu instance types, %zu records, store %s (region %s), %s",
          a->cfg.n_regions > 1 ? "s" : "", names, a->cfg.n_types, a->n, a->cfg.store_url,
          a->cfg.store_region,
          a->cfg.worker_prefix[0] ? "worker from the image" : "worker bundle from the store");
  return &a->base;
fail:
  aws_destroy(&a->base);
  return NULL;
}

const struct gw_provider_class gw_aws_provider_class = {
  .name = "aws",
  .options = gw_aws_options,
  .check_option = gw_aws_check_option,
  .open = aws_open,
  .check = gw_aws_check_config,
};
