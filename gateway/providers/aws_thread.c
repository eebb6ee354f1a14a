/* The aws provider's thread: every EC2 call, blocking, one at a time.
 *
 * Its loop: the first poll (which reconciles EC2 with the records after a
 * restart), then queued work (launches, terminations) as it comes, and a
 * poll every cfg.poll_us. Outcomes go to the gateway's loop as queued events
 * (aws.c). mu is held except around EC2 calls and backoff sleeps.
 *
 * A launch tries the type's placements in order, across every offered
 * region (cheapest spot price first, those with a remembered capacity
 * failure left out), each attempt recorded before it is made, with a
 * ClientToken derived from the gateway, the instance and the placement: an
 * attempt re-issued (after a transport error, or by a restarted gateway)
 * never starts a second instance. An account limit holds for its region
 * only, so the launch goes on in the next region. Throttling
 * and server errors are retried with full-jitter backoff, a bounded number
 * of times. Polls are in aws_poll.c. */
#include "aws_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sl_err.h"
#include "sl_hmac.h"
#include "sl_ident.h"
#include "sl_log.h"
#include "sl_time.h"

#define T GW_AWS_TOPIC
#define SCORES_EVERY_US (600 * SL_US_PER_S)

static void lock(struct gw_aws *a) { pthread_mutex_lock(&a->mu); }
static void unlock(struct gw_aws *a) { pthread_mutex_unlock(&a->mu); }

/* Waits on cv (mu held) until due_mono_us at the latest. */
static void wait_until(struct gw_aws *a, int64_t due_mono_us) {
  struct timespec ts = {.tv_sec = (time_t)(due_mono_us / SL_US_PER_S),
                        .tv_nsec = (long)(due_mono_us % SL_US_PER_S) * 1000};
  pthread_cond_timedwait(&a->cv, &a->mu, &ts);
}

/* Sleeps ms unless the provider stops meanwhile (mu not held). True when it stops. */
static bool nap(struct gw_aws *a, int64_t ms) {
  lock(a);
  int64_t due = sl_time_mono_us() + ms * SL_US_PER_MS;
  while (!a->stop && sl_time_mono_us() < due)
    wait_until(a, due);
  bool stop = a->stop;
  unlock(a);
  return stop;
}

/* Throttling and server trouble, or no answer at all: worth another try.
 * A coded error goes by its code (EC2 sends InsufficientInstanceCapacity
 * with a 500, and that is an answer). */
static bool transient(int r, const struct aws_ec2_error *e) {
  if (r == -EBUSY)
    return true;
  if (e->code[0])
    return false;
  if (e->http_status >= 500)
    return true;
  return e->http_status == 0 && sl_err_unanswered(r);
}

/* After a failed try (0-based): sleeps a full-jitter backoff and returns
 * true when the call should be made again. */
bool gw_aws_again(struct gw_aws *a, int r, const struct aws_ec2_error *e, int try) {
  if (r == 0 || !transient(r, e) || try + 1 >= a->cfg.backoff_tries)
    return false;
  int64_t cap = a->cfg.backoff_base_ms << (try < 20 ? try : 20);
  if (cap > a->cfg.backoff_cap_ms)
    cap = a->cfg.backoff_cap_ms;
  uint64_t rnd;
  sl_random_bytes(&rnd, sizeof rnd);
  int64_t ms = cap > 0 ? (int64_t)(rnd % (uint64_t)(cap + 1)) : 0;
  sl_debug(T, "EC2 answered %s; trying again in %lld ms", e->code[0] ? e->code : sl_errname(r),
           (long long)ms);
  return !nap(a, ms);
}

/* A sentence for an error (never a secret: EC2's messages hold none). */
void gw_aws_describe_error(int r, const struct aws_ec2_error *e, char *buf, size_t size) {
  if (e->code[0])
    snprintf(buf, size, "%s%s%s", e->code, e->message[0] ? ": " : "", e->message);
  else
    snprintf(buf, size, "%s%s%s", sl_strerror(r), e->message[0] ? ": " : "", e->message);
}

/* Names the credential source, never a value. */
void gw_aws_auth_message(struct gw_aws *a, const char *what, const char *why, char *buf,
                         size_t size) {
  enum sl_aws_creds_source src = sl_aws_creds_source(a->chain);
  if (src == SL_AWS_CREDS_NONE)
    snprintf(buf, size, "%s: no usable AWS credentials (environment, shared files or instance "
                        "role): %s", what, why);
  else
    snprintf(buf, size, "EC2 refused %s with the credentials from the %s: %s", what,
             sl_aws_creds_source_name(src), why);
}

void gw_aws_client_token(const struct gw_aws *a, const struct gw_aws_inst *in,
                         const char *placement, char ret[48]) {
  char text[512], hex[SL_HMAC_HEX_LEN + 1];
  int n = snprintf(text, sizeof text, "%s/%s/%s", a->cfg.gateway_id, in->id, placement);
  sl_sha256_hex(text, (size_t)n < sizeof text ? (size_t)n : sizeof text - 1, hex);
  snprintf(ret, 48, "sl-%.40s", hex);
}

/* Whether list (codes separated by spaces) holds code; never for "" (a
 * failure without EC2's code: a dropped connection, a reply not XML). */
static bool has(const char *list, const char *code) {
  size_t n = strlen(code);
  if (!n)
    return false;
  for (const char *p = list; (p = strstr(p, code)); p += n)
    if ((p == list || p[-1] == ' ') && (p[n] == ' ' || !p[n]))
      return true;
  return false;
}

#define CAPACITY_CODES "InsufficientInstanceCapacity InsufficientCapacity " \
                       "InsufficientHostCapacity InsufficientReservedInstanceCapacity Unsupported"
#define LIMIT_CODES "MaxSpotInstanceCountExceeded InstanceLimitExceeded VcpuLimitExceeded"

/* ---- ends ---------------------------------------------------------------- */

/* The launch failed: LAUNCH_FAILED queued, the record removed (mu held). */
static void launch_failed(struct gw_aws *a, struct gw_aws_inst *in, int error, const char *msg) {
  struct gw_provider_event *ev = gw_aws_queue_event(a, GW_PROVIDER_LAUNCH_FAILED, in->id);
  if (ev) {
    ev->error = error;
    snprintf(ev->message, sizeof ev->message, "%.*s", (int)sizeof ev->message - 1, msg); /* cut */
  }
  sl_warn(T, "launch of %s (%s%s): %s", in->id, in->type, in->spot ? " spot" : "", msg);
  in->launched_us = 0;
  in->state = GW_AWS_ENDED;
  in->ended_us = sl_time_real_us();
  gw_aws_drop_boot(in);
  gw_aws_remove_record(a, in->id);
}

/* in runs as EC2 instance got (mu held): recorded, LAUNCHED queued unless reported. */
void gw_aws_adopt(struct gw_aws *a, struct gw_aws_inst *in, const struct aws_instance *got) {
  snprintf(in->ec2_id, sizeof in->ec2_id, "%s", got->id);
  if (got->zone[0])
    snprintf(in->zone, sizeof in->zone, "%s", got->zone);
  int r = gw_aws_region_of_zone(a, in->zone);
  if (r >= 0)
    snprintf(in->region, sizeof in->region, "%s", a->regions[r].name);
  in->launched_us = got->launch_time_unix > 0 ? got->launch_time_unix * SL_US_PER_S
                                              : sl_time_real_us();
  double price = in->spot ? gw_aws_spot_price(a, in->type, in->zone) : 0;
  if (in->spot && price == 0) /* the zone's price comes with the next poll */
    price = gw_aws_region_spot_price(a, in->type, in->region);
  for (size_t t = 0; in->spot && price == 0 && t < a->cfg.n_types; t++)
    if (!strcmp(a->types[t].name, in->type))
      price = a->types[t].spot_usd_per_hour; /* the catalog's typical price */
  in->price_usd_per_hour = in->spot ? price : gw_aws_on_demand_price(a, in->type);
  in->n_prices = 0;
  if (in->spot)
    gw_aws_price_point(in, in->launched_us, price);
  in->state = GW_AWS_RUNNING;
  gw_aws_drop_boot(in);
  gw_aws_save_record(a, in);
  if (!in->reported) {
    struct gw_provider_event *ev = gw_aws_queue_event(a, GW_PROVIDER_LAUNCHED, in->id);
    if (ev)
      gw_aws_fill_info(a, in, &ev->info);
  }
  sl_info(T, "instance %s is EC2 %s (%s %s%s, $%.4f/h)", in->id, in->ec2_id, in->type, in->zone,
          in->spot ? " spot" : "", in->price_usd_per_hour);
}

/* ---- launches ----------------------------------------------------------- */

/* One RunInstances attempt of in at placement pl, retried while EC2
 * throttles. 0 and *got, or the error with *e. */
static int run_once(struct gw_aws *a, struct gw_aws_inst *in, const struct gw_aws_placement *pl,
                    struct aws_instance *got, struct aws_ec2_error *e, char *why, size_t why_size) {
  *e = (struct aws_ec2_error){0}; /* a failure before the call has no EC2 code */
  struct gw_worker_boot boot;
  gw_aws_boot_of(in, a->cfg.advertise, &boot);
  struct gw_aws_user_data u = {
      .boot = &boot, .gateway = boot.gateway, .instance = in->id, .type = in->type,
      .zone = pl->zone, .spot = in->spot, .store = a->cfg.store_url,
      .worker_prefix = a->cfg.worker_prefix, .orphan_timeout_ms = a->cfg.orphan_timeout_ms,
  };
  char *user_data = NULL;
  int r = gw_aws_user_data(&u, &user_data, why, why_size);
  if (r < 0)
    return r;
  char token[48], job[32];
  gw_aws_client_token(a, in, gw_aws_placement_key(pl), token);
  sl_job_id_str(in->job, job, sizeof job);
  const char *groups[GW_AWS_MAX_SECURITY_GROUPS];
  for (size_t i = 0; i < a->cfg.n_security_groups; i++)
    groups[i] = a->cfg.security_groups[i];
  struct aws_run_req req = {
      .image_id = a->cfg.ami, .instance_type = in->type,
      .zone = pl->subnet[0] ? NULL : pl->zone, .subnet_id = pl->subnet[0] ? pl->subnet : NULL,
      .security_group_ids = groups, .n_security_groups = a->cfg.n_security_groups,
      .iam_instance_profile = a->cfg.iam_instance_profile[0] ? a->cfg.iam_instance_profile : NULL,
      .key_name = a->cfg.key_name[0] ? a->cfg.key_name : NULL, .spot = in->spot,
      .max_price_usd_per_hour = in->max_price_usd_per_hour, .user_data = user_data,
      .client_token = token,
      .tags = {{"spotlab:gateway", a->cfg.gateway_id}, {"spotlab:instance", in->id},
               {"spotlab:job", job}},
      .n_tags = 3,
  };
  for (int try = 0;; try++) {
    memset(e, 0, sizeof *e);
    r = aws_ec2_run_instances(gw_aws_ec2(a, pl->region), &req, got, e);
    if (!gw_aws_again(a, r, e, try))
      break;
  }
  explicit_bzero(user_data, strlen(user_data));
  free(user_data);
  if (r < 0)
    gw_aws_describe_error(r, e, why, why_size);
  return r;
}

/* The placements a launch goes through: the one in flight before a restart
 * first, then the best ones not tried yet (mu held). */
static size_t launch_order(struct gw_aws *a, struct gw_aws_inst *in, struct gw_aws_placement *ret,
                           size_t max) {
  size_t n = 0;
  if (in->placement[0]) {
    memset(&ret[0], 0, sizeof ret[0]);
    snprintf(ret[0].region, sizeof ret[0].region, "%s", in->region);
    snprintf(ret[0].zone, sizeof ret[0].zone, "%s", in->zone);
    if (!strncmp(in->placement, "subnet-", 7))
      snprintf(ret[0].subnet, sizeof ret[0].subnet, "%s", in->placement);
    n = 1;
  }
  struct gw_aws_placement pl[GW_AWS_MAX_PLACEMENTS * 4];
  size_t np = gw_aws_placements(a, in->type, in->want_zone, in->spot, pl, sizeof pl / sizeof pl[0]);
  for (size_t i = 0; i < np && n < max; i++) {
    const char *key = gw_aws_placement_key(&pl[i]);
    bool skip = in->placement[0] && !strcmp(key, in->placement);
    for (size_t k = 0; k < in->n_tried && !skip; k++)
      skip = !strcmp(in->tried[k], key);
    if (!skip)
      ret[n++] = pl[i];
  }
  return n;
}

static void add_tried(struct gw_aws_inst *in, const char *key) {
  if (in->n_tried < GW_AWS_MAX_PLACEMENTS)
    snprintf(in->tried[in->n_tried++], sizeof in->tried[0], "%s", key);
  in->placement[0] = '\0';
}

static bool listed(char (*list)[32], size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(list[i], name))
      return true;
  return false;
}

/* Launches in (mu held on entry and exit). */
static void do_launch(struct gw_aws *a, struct gw_aws_inst *in) {
  char why[400], msg[512], zones[200] = "", last_code[64] = "", limit[512] = "";
  char limited[GW_AWS_MAX_REGIONS][32]; /* regions whose account limit was hit */
  size_t n_limited = 0;
  struct gw_aws_placement order[GW_AWS_MAX_PLACEMENTS];
  if (!in->have_boot) {
    launch_failed(a, in, -EIO, "the launch was interrupted by a gateway restart and its boot "
                               "record is gone");
    return;
  }
  size_t n = launch_order(a, in, order, GW_AWS_MAX_PLACEMENTS);
  for (size_t i = 0; i < n; i++) {
    if (in->want_terminate || a->stop) {
      if (in->want_terminate)
        gw_aws_end(a, in, false);
      return;
    }
    const struct gw_aws_placement *pl = &order[i];
    if (listed(limited, n_limited, pl->region))
      continue;
    const char *key = gw_aws_placement_key(pl);
    snprintf(in->placement, sizeof in->placement, "%s", key);
    snprintf(in->region, sizeof in->region, "%s", pl->region);
    snprintf(in->zone, sizeof in->zone, "%s", pl->zone);
    gw_aws_save_record(a, in); /* before the attempt: a restart re-issues it */
    unlock(a);
    struct aws_instance got;
    struct aws_ec2_error e = {0};
    int r = run_once(a, in, pl, &got, &e, why, sizeof why);
    lock(a);
    if (r == 0) {
      gw_aws_adopt(a, in, &got);
      return;
    }
    if (a->stop && transient(r, &e))
      return; /* the record keeps the attempt; the next start re-issues it */
    snprintf(last_code, sizeof last_code, "%s", e.code);
    size_t used = strlen(zones);
    snprintf(zones + used, sizeof zones - used, "%s%s", used ? ", " : "", key);
    if (has(CAPACITY_CODES, e.code)) {
      gw_aws_remember_failure(a, in->type, key);
      add_tried(in, key);
      sl_info(T, "launch of %s: no %s capacity in %s (%s)", in->id, in->type, key, e.code);
      continue;
    }
    if (!strcmp(e.code, "SpotMaxPriceTooLow")) {
      add_tried(in, key); /* the price cap is the request's; other zones may be cheaper */
      continue;
    }
    if (has(LIMIT_CODES, e.code)) {
      /* EC2's quotas are per account and region: no other zone of this
       * region can take it, another region may */
      if (n_limited < GW_AWS_MAX_REGIONS)
        snprintf(limited[n_limited++], sizeof limited[0], "%s", pl->region);
      add_tried(in, key);
      snprintf(limit, sizeof limit, "EC2 account limit for %s in %s: %.300s", in->type, pl->region,
               why);
      sl_info(T, "launch of %s: %s", in->id, limit);
      continue;
    }
    if (r == SL_EAUTH) {
      gw_aws_auth_message(a, "RunInstances", why, msg, sizeof msg);
      launch_failed(a, in, SL_EAUTH, msg);
    } else {
      snprintf(msg, sizeof msg, "RunInstances for %s in %s: %s", in->type, key, why);
      launch_failed(a, in, r == -EAGAIN ? SL_ENOTSUP : r, msg);
    }
    return;
  }
  if (!n)
    snprintf(msg, sizeof msg, "no capacity for %s: every zone failed in the last %lld s",
             in->type, (long long)(a->cfg.capacity_memory_us / SL_US_PER_S));
  else if (limit[0] && has(LIMIT_CODES, last_code))
    snprintf(msg, sizeof msg, "%s", limit);
  else
    snprintf(msg, sizeof msg, "no capacity for %s in %s (%s)", in->type, zones, last_code);
  launch_failed(a, in, -EAGAIN, msg);
  if (!has(LIMIT_CODES, last_code))
    gw_aws_queue_event(a, GW_PROVIDER_CAPACITY, "");
}

/* ---- terminations ------------------------------------------------------- */

struct aws_ec2 *gw_aws_ec2(struct gw_aws *a, const char *region) {
  int r = gw_aws_region_index(a, region);
  return a->regions[r < 0 ? 0 : r].ec2;
}

int gw_aws_terminate_ids(struct gw_aws *a, const char *region, const char *const *ids, size_t n,
                         char *why, size_t why_size) {
  struct aws_ec2_error e;
  int r;
  for (int try = 0;; try++) {
    memset(&e, 0, sizeof e);
    r = aws_ec2_terminate_instances(gw_aws_ec2(a, region), ids, n, &e);
    if (!gw_aws_again(a, r, &e, try))
      break;
  }
  if (r < 0)
    gw_aws_describe_error(r, &e, why, why_size);
  return r;
}

/* Terminates in (mu held on entry and exit). */
static void do_terminate(struct gw_aws *a, struct gw_aws_inst *in) {
  const char *ids[1] = {in->ec2_id};
  char why[400], region[32];
  snprintf(region, sizeof region, "%s", in->region);
  unlock(a);
  int r = gw_aws_terminate_ids(a, region, ids, 1, why, sizeof why);
  lock(a);
  if (r == 0 || r == -ENOENT) {
    sl_info(T, "instance %s (EC2 %s in %s) terminated", in->id, in->ec2_id, region);
    gw_aws_end(a, in, false);
    return;
  }
  sl_warn(T, "cannot terminate %s (EC2 %s in %s): %s; trying again", in->id, in->ec2_id, region,
          why);
  in->retry_terminate_mono_us = sl_time_mono_us() + a->cfg.poll_us;
}

/* ---- the thread --------------------------------------------------------- */

/* The next instance with work (mu held): a launch, or a termination due. */
static struct gw_aws_inst *next_work(struct gw_aws *a, bool *ret_launch) {
  int64_t now = sl_time_mono_us();
  for (size_t i = 0; i < a->n; i++) {
    struct gw_aws_inst *in = a->inst[i];
    if (in->state == GW_AWS_LAUNCHING) {
      *ret_launch = true;
      return in;
    }
    if (in->state == GW_AWS_RUNNING && in->want_terminate && in->retry_terminate_mono_us <= now) {
      *ret_launch = false;
      return in;
    }
  }
  return NULL;
}

static void *thread_main(void *data) {
  struct gw_aws *a = data;
  int64_t next_poll = 0, next_scores = 0;
  bool polled = false;
  lock(a);
  while (!a->stop) {
    int64_t now = sl_time_mono_us();
    if (now >= next_poll) {
      bool scores = now >= next_scores;
      unlock(a);
      /* the first poll comes before any launch: a restart adopts what its
       * predecessor started before it re-issues anything */
      gw_aws_poll(a, scores);
      lock(a);
      polled = true;
      next_poll = sl_time_mono_us() + a->cfg.poll_us;
      if (scores)
        next_scores = sl_time_mono_us() + (a->cfg.poll_us > SCORES_EVERY_US ? a->cfg.poll_us
                                                                             : SCORES_EVERY_US);
      continue;
    }
    bool launch = false;
    struct gw_aws_inst *in = polled ? next_work(a, &launch) : NULL;
    if (in) {
      if (launch)
        do_launch(a, in);
      else
        do_terminate(a, in);
      continue;
    }
    /* the earliest retry of a termination, else the next poll */
    int64_t due = next_poll;
    for (size_t i = 0; i < a->n; i++)
      if (a->inst[i]->state == GW_AWS_RUNNING && a->inst[i]->want_terminate &&
          a->inst[i]->retry_terminate_mono_us < due)
        due = a->inst[i]->retry_terminate_mono_us;
    if (!a->kick)
      wait_until(a, due);
    a->kick = false;
  }
  unlock(a);
  return NULL;
}

int gw_aws_thread_start(struct gw_aws *a) {
  int r = pthread_create(&a->thread, NULL, thread_main, a);
  if (r != 0)
    return -r;
  a->thread_started = true;
  return 0;
}

void gw_aws_thread_stop(struct gw_aws *a) {
  if (!a->thread_started)
    return;
  lock(a);
  a->stop = true;
  pthread_cond_broadcast(&a->cv);
  unlock(a);
  pthread_join(a->thread, NULL);
  a->thread_started = false;
}
