/* The provider interface: where instances come from, and the registry of
 * providers by name (SQLite's VFS registry is the model).
 *
 * A provider class is registered once, by name, before the gateway starts:
 * the built-in ones by spotlab-gateway's main(), a test's own by the test
 * program. The config enables providers with [provider.NAME] sections; the
 * gateway opens each enabled class, which returns a provider instance.
 *
 * A provider owns everything about its instances: their ids, how a worker
 * gets its configuration (a local file, EC2 user data), the checkpoint
 * store it offers, and its clock (cost accrues in the provider's own hours).
 * Operations never block the gateway's loop: launch() returns at once and
 * its outcome arrives later as an event (GW_PROVIDER_LAUNCHED or
 * GW_PROVIDER_LAUNCH_FAILED); a provider registers its own descriptors and
 * timers on the loop it is given. Events are delivered only from the loop
 * (a timer or descriptor callback of the provider's), never from inside an
 * operation, so the event callback may call the provider again. */
#ifndef GW_PROVIDER_H
#define GW_PROVIDER_H

#include "keys.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define GW_PROVIDER_NAME_MAX 32
#define GW_INSTANCE_ID_MAX 32
#define GW_PROVIDERS_MAX 16

struct gw_config;
struct gw_httpc;
struct gw_loop;

/* One offer of a provider's market: a type, its prices and how often spot
 * capacity of it is taken back. */
struct gw_instance_type {
  char name[64];                /* "g5.xlarge" */
  int gpus;
  char gpu_model[32];           /* "A10G" */
  double on_demand_usd_per_hour;
  double spot_usd_per_hour;     /* current market price */
  const char *interruption;     /* advisor bucket: "<5%", ..., ">20%" (static string) */
  double mean_time_to_preempt_s;/* in the provider's seconds; 0 unknown */
  int placement_score;          /* the cloud's capacity hint, 1 (unlikely) .. 10; 0 unknown */
  int64_t unavailable_until_us; /* wall clock: a recent capacity failure is remembered until then; 0 none */
  char region[32];              /* the region of this offer; "": the provider's only region */
  char zone[32];                /* one zone's offer (launch there); "": the provider picks the zone */
  double move_usd_per_gb;       /* bringing a checkpoint here from the store's region, per GB (0: same region) */
  bool spot_none;               /* the market shows no spot capacity of this offer now (a trace's tick of 0) */
};

struct gw_launch {
  char type[64];
  char zone[32];                /* "" lets the provider choose */
  bool spot;
  double max_price_usd_per_hour;/* 0: no cap */
  int64_t job;                  /* the job it is for (tags, logs) */
  char user[64];
  const struct gw_worker_boot *boot; /* borrowed for the call */
};

struct gw_instance_info {
  char instance_id[GW_INSTANCE_ID_MAX];
  char type[64];
  char zone[32];
  bool spot;
  double price_usd_per_hour;
  char metadata_url[128];       /* the instance's metadata endpoint (local provider) */
  int64_t launched_us;
  bool running;
};

enum gw_provider_event_kind {
  GW_PROVIDER_LAUNCHED,         /* a launch succeeded: info holds zone and price */
  GW_PROVIDER_LAUNCH_FAILED,    /* a launch failed: error, message (SL_ENOTSUP / -EAGAIN: no capacity) */
  GW_PROVIDER_NOTICE,           /* a preemption notice was issued (deadline_us set) */
  GW_PROVIDER_TERMINATED,       /* the instance is gone (preempted, killed or terminated) */
  GW_PROVIDER_CAPACITY,         /* capacity or prices changed (instance_id empty) */
};

struct gw_provider_event {
  enum gw_provider_event_kind kind;
  char instance_id[GW_INSTANCE_ID_MAX];
  int64_t deadline_us;
  bool by_market;               /* preempted by the market, not by terminate() */
  int error;                    /* LAUNCH_FAILED */
  char message[160];            /* LAUNCH_FAILED */
  struct gw_instance_info info; /* LAUNCHED */
};

struct gw_provider;
typedef void (*gw_provider_event_fn)(void *userdata, struct gw_provider *p,
                                     const struct gw_provider_event *ev);

struct gw_provider_ops {
  /* Requests an instance. The provider chooses its id and writes it to
   * ret_id; the outcome follows as LAUNCHED or LAUNCH_FAILED for that id.
   * A refusal known at once returns an error and no event follows:
   * SL_ENOTSUP / -EAGAIN when it has no capacity of that type or zone now
   * (the scheduler tries another, and holds that one back for a while),
   * SL_ELIMIT when it runs as many instances as it may (the local
   * provider's slots: none of its offers launches until one ends), SL_ENAME
   * for a type it does not offer. */
  int (*launch)(struct gw_provider *p, const struct gw_launch *req,
                char ret_id[GW_INSTANCE_ID_MAX]);
  /* Asks for the instance to be stopped; TERMINATED follows. */
  int (*terminate)(struct gw_provider *p, const char *instance_id);
  /* Every instance the provider knows from its own records, owned array
   * in *ret (free()); no remote call. */
  int (*list)(struct gw_provider *p, struct gw_instance_info **ret, size_t *ret_n);
  /* The market as the provider last saw it: a borrowed array, valid until
   * the provider's next callback runs. No remote call. */
  int (*market)(struct gw_provider *p, const struct gw_instance_type **ret, size_t *ret_n);
  /* The checkpoint store its workers use ("file:///...", "s3://..."). */
  int (*store_url)(struct gw_provider *p, char *buf, size_t size);
  /* Provider seconds per wall-clock second: prices are per provider hour
   * (a simulated market runs faster than the wall clock). NULL: 1. */
  double (*time_scale)(struct gw_provider *p);
  /* Test hook and `spotlab inject`: preempt with notice_s of notice (0:
   * none), or kill. NULL when the provider cannot. */
  int (*inject)(struct gw_provider *p, const char *instance_id, bool kill, double notice_s);
  /* Test hook and `spotlab inject rebalance`: a rebalance recommendation
   * for the instance now. NULL when the provider cannot. */
  int (*rebalance)(struct gw_provider *p, const char *instance_id);
  /* What instance_id cost from its launch up to now_us (wall clock), as
   * the cloud bills it (AWS: per second, a 60-second minimum, at the spot
   * price in force while it ran). NULL: the gateway's own accrual (price
   * times provider hours). 0, or -ENOENT for an instance it never had. */
  int (*billed_usd)(struct gw_provider *p, const char *instance_id, int64_t now_us, double *ret);
  /* Frees the provider; its instances keep running (a restarted gateway
   * finds them again through list()). */
  void (*destroy)(struct gw_provider *p);
};

struct gw_provider {
  const struct gw_provider_ops *ops;
  const char *name;             /* the class name, static */
  bool simulated;               /* its instances only play their types on this machine (the local
                                 * provider): their GPUs are this machine's, not the catalog's */
  bool needs_bundle;            /* its instances fetch spotlab from the store: the gateway
                                 * publishes the worker bundle and fills boot->bundle_url */
  bool lists_all;               /* list() holds every instance it launched that has not been
                                 * reported ended, across gateway restarts (its records are
                                 * written before launch() returns and removed at the end):
                                 * one the gateway's table holds and list() lacks has ended */
  gw_provider_event_fn on_event;
  void *userdata;
};

/* What a provider class is opened with. Everything is borrowed for the
 * provider's life. */
struct gw_provider_env {
  const struct gw_config *cfg;  /* gateway options (state_dir) and the provider's section */
  const char *state_dir;        /* the provider may keep files under state_dir/NAME or instances/ */
  const char *gateway_id;       /* this gateway's stable id (tags: spotlab:gateway) */
  const char *store_url;        /* [store] url, or NULL: the provider's own store */
  struct gw_loop *loop;         /* where its descriptors and timers go */
  struct gw_httpc *http;        /* HTTP transfers on that loop (httpc.h) */
  gw_provider_event_fn on_event;
  void *userdata;
};

/* One option of a [provider.NAME] section: declared by the class, checked
 * and printed by the config (gw_config_dump). */
struct gw_provider_option {
  const char *name;
  const char *def;              /* the default, as the file would hold it */
  const char *help;
};

struct gw_provider_class {
  const char *name;             /* "local", "aws": the section is [provider.NAME] */
  const struct gw_provider_option *options; /* terminated by a {NULL} row */
  /* Checks one option's value (NULL: any text). 0, or SL_ECONFIG with a
   * message in err. */
  int (*check_option)(const char *name, const char *value, char *err, size_t err_size);
  /* Returns an owned provider with base filled, or NULL with a message
   * (the gateway's start fails with it), or NULL with an empty message when
   * its options turn it off. Values of its options:
   * gw_config_provider_option(env->cfg, name, key). */
  struct gw_provider *(*open)(const struct gw_provider_env *env, char *err, size_t err_size);
  /* `spotlab-gateway --check NAME`: checks what the class needs in its
   * cloud with the configuration cfg, printing a line per check to out.
   * 0 when all pass. NULL: nothing to check. */
  int (*check)(const struct gw_config *cfg, FILE *out);
};

/* Registers cls (borrowed; static storage). -EEXIST for a name already
 * registered, SL_ELIMIT past GW_PROVIDERS_MAX. Not thread-safe: register
 * before the gateway starts. */
int gw_provider_register(const struct gw_provider_class *cls);
/* The class registered as name, or NULL. */
const struct gw_provider_class *gw_provider_find(const char *name);
/* The i-th registered class (registration order), or NULL past the end. */
const struct gw_provider_class *gw_provider_class_at(size_t i);
/* Forgets every registration (tests). */
void gw_provider_registry_clear(void);

/* The type of p's market named name, copied into *ret: 0 or SL_ENAME. */
int gw_provider_type(struct gw_provider *p, const char *name, struct gw_instance_type *ret);
/* p's clock: provider seconds per wall second (1 when it has none). */
double gw_provider_time_scale(struct gw_provider *p);

#endif
