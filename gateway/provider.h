/* The provider interface: where instances come from.
 *
 * A provider launches, lists and terminates instances and prices them. The
 * local provider runs workers as local processes under a simulated spot
 * market; EC2 and others implement the same operations. Providers never
 * block the gateway loop for long: launch returns once the instance is
 * requested (a process forked, an API call answered); the worker's register
 * message tells the gateway it is up. */
#ifndef GW_PROVIDER_H
#define GW_PROVIDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gw_instance_type {
  char name[64];                /* "g5.xlarge" */
  int gpus;
  char gpu_model[32];           /* "A10G" */
  double on_demand_usd_per_hour;
  double spot_usd_per_hour;     /* current market price */
  const char *interruption;     /* advisor bucket: "<5%", ..., ">20%" */
  double mean_time_to_preempt_s;/* observed or modelled, for checkpoint_every=auto */
};

struct gw_launch {
  char instance_id[32];         /* chosen by the gateway: "i-" + 12 hex */
  char type[64];
  char zone[32];                /* "" lets the provider choose */
  bool spot;
  double max_price_usd_per_hour;/* 0: no cap */
  char worker_config[4096];     /* path of the 0600 worker config file (protocols.md §2) */
};

struct gw_instance_info {
  char instance_id[32];
  char type[64];
  char zone[32];
  bool spot;
  double price_usd_per_hour;
  char metadata_url[128];       /* the instance's metadata endpoint (local provider) */
  int64_t launched_us;
  bool running;
};

enum gw_provider_event_kind {
  GW_PROVIDER_NOTICE,           /* a preemption notice was issued (deadline_us set) */
  GW_PROVIDER_TERMINATED,       /* the instance is gone (preempted, killed or terminated) */
  GW_PROVIDER_CAPACITY,         /* capacity came back (instance_id empty): retry queued jobs */
};

struct gw_provider_event {
  enum gw_provider_event_kind kind;
  char instance_id[32];
  int64_t deadline_us;
  bool by_market;               /* preempted by the market, not by terminate() */
};

typedef void (*gw_provider_event_fn)(void *userdata, const struct gw_provider_event *ev);

struct gw_provider;

struct gw_provider_ops {
  const char *name;
  /* Requests an instance; *ret filled on success. SL_ENOTSUP / -EAGAIN when
   * no capacity of that type/zone exists now (the scheduler tries another). */
  int (*launch)(struct gw_provider *p, const struct gw_launch *req, struct gw_instance_info *ret);
  int (*terminate)(struct gw_provider *p, const char *instance_id);
  /* Every instance the provider knows, owned array in *ret (free()). */
  int (*list)(struct gw_provider *p, struct gw_instance_info **ret, size_t *ret_n);
  /* Instance types on offer with current prices, owned array (free()). */
  int (*types)(struct gw_provider *p, struct gw_instance_type **ret, size_t *ret_n);
  /* Advances the provider's clock (market ticks, notice deadlines, reaping
   * exited processes); events go to the callback given at creation. */
  void (*tick)(struct gw_provider *p, int64_t now_us);
  /* Test hook and `spotlab inject`: preempt with notice_s of notice (0: none). */
  int (*inject)(struct gw_provider *p, const char *instance_id, bool kill, double notice_s);
  /* Monotonic µs at which tick() next needs to run, or INT64_MAX. */
  int64_t (*next_tick_us)(struct gw_provider *p);
  void (*destroy)(struct gw_provider *p);
};

struct gw_provider {
  const struct gw_provider_ops *ops;
  gw_provider_event_fn on_event;
  void *userdata;
};

#endif
