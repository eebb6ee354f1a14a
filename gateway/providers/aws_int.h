/* The aws provider's state, shared by its files: aws.c (the class, open,
 * the operations and the loop side), aws_conf.c (options), aws_thread.c
 * (every EC2 call, on the provider's own thread), aws_market.c (prices,
 * capacity memory, billing) and aws_records.c (instance records on disk).
 * Not for other modules: they use aws.h.
 *
 * Threads: the gateway's loop calls the operations; the provider's thread
 * makes every EC2 call. Everything under "shared" is guarded by mu. The
 * thread reads an instance's fixed fields (id, type, spot, boot) without mu;
 * it alone writes ec2_id, state, region, zone and the prices, always under mu, and
 * it alone frees instances (destroy() after joining it). */
#ifndef GW_AWS_INT_H
#define GW_AWS_INT_H

#include "aws.h"
#include "aws_ec2.h"
#include "evqueue.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GW_AWS_MAX_INSTANCES 512    /* live and ended (kept for billed_usd) */
#define GW_AWS_MAX_ENDED 128
#define GW_AWS_MAX_PLACEMENTS 16
#define GW_AWS_MAX_SECURITY_GROUPS 5
#define GW_AWS_MAX_FAILURES 256
#define GW_AWS_MAX_PRICE_POINTS 256
#define GW_AWS_MAX_REGIONS 8
#define GW_AWS_TOPIC "gateway.aws"

struct gw_catalog;

/* Where an instance may go: a region and a zone, a subnet, or both. */
struct gw_aws_placement {
  char region[32];
  char zone[32];                /* "" : the subnet's (learnt from EC2's answers) */
  char subnet[64];              /* "" : the default VPC's subnet in zone */
};

enum gw_aws_inst_state {
  GW_AWS_LAUNCHING,             /* recorded; RunInstances not answered yet */
  GW_AWS_RUNNING,               /* EC2 has it (ec2_id) */
  GW_AWS_ENDED,                 /* TERMINATED queued, record removed; kept for billing */
};

struct gw_aws_price_point {
  int64_t at_us;                /* wall clock: in force from then */
  double usd_per_hour;
};

struct gw_aws_inst {
  /* fixed at launch() */
  char id[GW_INSTANCE_ID_MAX];  /* "sl-" + 16 hex */
  char type[64];
  char want_zone[32];           /* the request's zone, or a region ("" : any) */
  bool spot;
  double max_price_usd_per_hour;
  int64_t job;
  /* the boot, kept (and recorded, 0600) until the launch is resolved: a
   * restarted gateway re-issues an unanswered RunInstances with the same
   * user data and ClientToken */
  bool have_boot;
  char boot_gateway[512];       /* the gateway's own idea of its worker address */
  char boot_public[GW_Z85_KEY_LEN + 1];
  struct gw_keypair boot_keys;
  int64_t boot_metrics_per_s;
  bool boot_move_on_rebalance;
  int64_t boot_data_cache_bytes, boot_part_bytes;
  char *boot_bundle_url;
  char boot_bundle_sha256[65];
  /* written by the thread (under mu) */
  enum gw_aws_inst_state state;
  char ec2_id[AWS_ID_MAX];
  char region[32];              /* the region tried or got ("" : no attempt yet) */
  char zone[32];                /* the zone tried or got */
  char placement[64];           /* the placement key of the attempt in flight (zone or subnet) */
  char tried[GW_AWS_MAX_PLACEMENTS][64]; /* placement keys that failed for this launch */
  size_t n_tried;
  int64_t launched_us;          /* EC2's launch time (wall clock) */
  int64_t ended_us;             /* wall clock: terminated or seen gone */
  double price_usd_per_hour;    /* on-demand: the catalog's; spot: at launch */
  struct gw_aws_price_point prices[GW_AWS_MAX_PRICE_POINTS]; /* spot price in force over time */
  size_t n_prices;
  bool seen;                    /* DescribeInstances listed it at least once */
  bool by_market;
  int64_t retry_terminate_mono_us; /* a failed TerminateInstances is tried again then */
  /* written by the loop (under mu) */
  bool want_terminate;
  bool reported;                /* LAUNCHED delivered */
};

/* A capacity failure of a type in a placement, remembered until until_us. */
struct gw_aws_failure {
  char type[64];
  char placement[64];
  int64_t until_us;             /* wall clock */
};

struct gw_aws_config {
  char regions[GW_AWS_MAX_REGIONS][32]; /* offered, in the configured order */
  size_t n_regions;
  char store_region[64];        /* where the checkpoints are: no transfer cost there */
  double transfer_usd_per_gb;   /* moving a checkpoint to another region */
  char gateway_id[128];
  char store_url[1024];
  char dir[4200];               /* state_dir/aws/instances */
  char ami[512];
  char worker_prefix[1024];     /* "" : the bundle */
  char advertise[512];          /* the worker address as instances reach it */
  char iam_instance_profile[256];
  char key_name[256];
  char security_groups[GW_AWS_MAX_SECURITY_GROUPS][64];
  size_t n_security_groups;
  struct gw_aws_placement placements[GW_AWS_MAX_PLACEMENTS]; /* none: every zone of the type */
  size_t n_placements;
  char catalog[4096];           /* "" : the built-in one */
  char (*types)[64];            /* instance_types; owned */
  size_t n_types;
  int64_t orphan_timeout_ms;
  int64_t poll_us;
  int64_t capacity_memory_us;
  int64_t backoff_base_ms, backoff_cap_ms;
  int backoff_tries;
};

/* One region the provider talks to: its EC2 client and what its polls
 * learnt. Regions are fixed at open: the configured ones first (offered),
 * then any that only instance records name (listed, terminated and billed,
 * never offered). */
struct gw_aws_region {
  char name[32];
  struct aws_ec2 *ec2;
  bool offered;
  int placement_score;          /* best zone score, 1..10; 0 unknown (thread, under mu) */
  char last_error[512];         /* the listing's last error (thread only) */
};

struct gw_aws {
  struct gw_provider base;      /* first: the provider pointer is the struct */
  struct gw_aws_config cfg;     /* read-only once open */
  struct gw_loop *loop;
  int efd;                      /* eventfd: the thread tells the loop that events wait */
  bool efd_watched;
  struct gw_catalog *cat;
  struct sl_aws_chain *chain;
  struct gw_aws_region regions[GW_AWS_MAX_REGIONS]; /* fixed once open */
  size_t n_regions;
  pthread_t thread;
  bool thread_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  /* shared (mu) */
  bool stop;
  bool kick;                    /* work was queued for the thread */
  struct gw_aws_inst *inst[GW_AWS_MAX_INSTANCES];
  size_t n;
  struct gw_evqueue events;
  struct gw_instance_type *types;    /* cfg.types order: the catalog's view of each type */
  struct aws_spot_price *prices;     /* newest spot price per (type, zone) seen; owned */
  size_t n_prices;
  struct gw_aws_failure failures[GW_AWS_MAX_FAILURES];
  size_t n_failures;
  /* loop side */
  struct gw_instance_type *types_out; /* market()'s array */
  size_t types_cap;
  bool in_deliver;
};

/* ---- aws_conf.c ---- */
extern const struct gw_provider_option gw_aws_options[];
int gw_aws_check_option(const char *name, const char *value, char *err, size_t err_size);
/* Reads [provider.aws] and env into cfg. 0, or an error with a sentence. */
int gw_aws_config_load(const struct gw_provider_env *env, struct gw_aws_config *cfg, char *err,
                       size_t err_size);
void gw_aws_config_done(struct gw_aws_config *cfg);
/* The index in regions[0..n) of the region zone lies in (the longest name
 * it starts with), or -1. */
int gw_aws_zone_region(const char (*regions)[32], size_t n, const char *zone);
/* cfg->types from instance_types (value), each checked against the catalog
 * (borrowed); empty: every type of it. */
int gw_aws_config_types(struct gw_aws_config *cfg, const struct gw_catalog *cat,
                        const char *value, char *err, size_t err_size);

/* ---- aws.c (under mu) ---- */
/* Queues an event for the loop and wakes it; NULL when the queue is full. */
struct gw_provider_event *gw_aws_queue_event(struct gw_aws *a, enum gw_provider_event_kind kind,
                                             const char *id);
struct gw_aws_inst *gw_aws_find(struct gw_aws *a, const char *id);
/* in's LAUNCHED info. */
void gw_aws_fill_info(const struct gw_aws *a, const struct gw_aws_inst *in,
                      struct gw_instance_info *ret);
/* Ends in: TERMINATED queued, record removed, kept for billing; evicts the
 * oldest ended instances past GW_AWS_MAX_ENDED. */
void gw_aws_end(struct gw_aws *a, struct gw_aws_inst *in, bool by_market);

/* ---- aws_thread.c (the thread; mu not held unless said) ---- */
int gw_aws_thread_start(struct gw_aws *a);
/* Stops and joins the thread (an EC2 call in flight finishes first). */
void gw_aws_thread_stop(struct gw_aws *a);
/* The ClientToken of an attempt: derived from the gateway, the instance and
 * the placement, so a re-issued attempt never starts a second instance. */
void gw_aws_client_token(const struct gw_aws *a, const struct gw_aws_inst *in,
                         const char *placement, char ret[48]);
/* After failed try number try (0-based) of a call: sleeps a full-jitter
 * backoff and returns true when the call should be made again (throttling,
 * server trouble, no answer; at most cfg.backoff_tries in all). */
bool gw_aws_again(struct gw_aws *a, int r, const struct aws_ec2_error *e, int try);
/* A sentence for a failed call: EC2's code and message, else ours. */
void gw_aws_describe_error(int r, const struct aws_ec2_error *e, char *buf, size_t size);
/* A sentence for a credentials failure of what, naming the source (never a value). */
void gw_aws_auth_message(struct gw_aws *a, const char *what, const char *why, char *buf,
                         size_t size);
/* The EC2 client of region (a->regions[0]'s when it is not one of them). */
struct aws_ec2 *gw_aws_ec2(struct gw_aws *a, const char *region);
/* TerminateInstances of ids in region, retried as gw_aws_again says; why on failure. */
int gw_aws_terminate_ids(struct gw_aws *a, const char *region, const char *const *ids, size_t n,
                         char *why, size_t why_size);
/* in runs as EC2's got (mu held): recorded, LAUNCHED queued unless reported. */
void gw_aws_adopt(struct gw_aws *a, struct gw_aws_inst *in, const struct aws_instance *got);

/* The region named name (an index into a->regions), or -1. */
int gw_aws_region_index(const struct gw_aws *a, const char *name);
/* The region zone lies in, or -1. */
int gw_aws_region_of_zone(const struct gw_aws *a, const char *zone);

/* ---- aws_poll.c (the thread; mu not held) ---- */
/* One poll of every region: instances, then prices (and placement scores
 * when scores) of the offered ones. A region whose listing fails is left as
 * it was (its error logged when it changes); the others go on. */
void gw_aws_poll(struct gw_aws *a, bool scores);

/* ---- aws_market.c (under mu) ---- */
/* The market array: cfg.types from the catalog, spot price its typical one
 * until EC2 tells. 0 or an error with a sentence. */
int gw_aws_market_init(struct gw_aws *a, char *err, size_t err_size);
/* Takes the newest spot prices of one region's zones (borrowed array): a
 * price point for each live spot instance of that type and zone. True when
 * a price moved. */
bool gw_aws_market_prices(struct gw_aws *a, const struct aws_spot_price *p, size_t n);
/* The newest spot price seen for type in zone, or 0. */
double gw_aws_spot_price(const struct gw_aws *a, const char *type, const char *zone);
/* The cheapest newest spot price of type among the allowed zones of region, or 0. */
double gw_aws_region_spot_price(const struct gw_aws *a, const char *type, const char *region);
/* Where an instance of type may go, best first: the configured placements
 * (or the zones EC2 reported prices for, else the catalog's zones) of every
 * offered region, cheapest spot price first (the configured order among
 * equals), those with a remembered failure left out; only where when it is
 * not "": a zone, or a region's zones. Returns the count. */
size_t gw_aws_placements(struct gw_aws *a, const char *type, const char *where, bool spot,
                         struct gw_aws_placement *ret, size_t max);
/* The market as market() hands it out (a->types_out grown to fit): per type
 * and offered region one offer for the region (zone ""), then one per zone
 * whose spot price EC2 reported. The count, or -ENOMEM. */
int gw_aws_market_offers(struct gw_aws *a);
/* The placement key (subnet, else zone). */
const char *gw_aws_placement_key(const struct gw_aws_placement *p);
void gw_aws_remember_failure(struct gw_aws *a, const char *type, const char *placement);
/* When type is next available in where (a region or a zone; "" every
 * offered region), wall µs; 0 when some placement there is not marked
 * failed. */
int64_t gw_aws_unavailable_until(struct gw_aws *a, const char *type, const char *where);
/* The catalog's on-demand price of type, or 0. */
double gw_aws_on_demand_price(const struct gw_aws *a, const char *type);
/* in's cost from its launch up to now_us (or its end), per second with a
 * 60-second minimum, at the price in force over time. */
double gw_aws_billed(const struct gw_aws_inst *in, int64_t now_us);
/* Appends a price point to in (spot), merging an unchanged price. */
void gw_aws_price_point(struct gw_aws_inst *in, int64_t at_us, double usd_per_hour);

/* ---- aws_records.c ---- */
/* Writes in's record, state_dir/aws/instances/ID.json (0600, atomically). */
int gw_aws_save_record(struct gw_aws *a, const struct gw_aws_inst *in);
void gw_aws_remove_record(struct gw_aws *a, const char *id);
/* Reads every record into the table (at open). A record that does not
 * parse is moved aside (.bad) with a warning. */
void gw_aws_load_records(struct gw_aws *a);
/* Frees in, wiping its boot (secret key). NULL. */
struct gw_aws_inst *gw_aws_inst_free(struct gw_aws_inst *in);
/* Forgets in's boot (once the launch is resolved): wiped, and the record
 * no longer holds it after the next save. */
void gw_aws_drop_boot(struct gw_aws_inst *in);
/* in's boot as a gw_worker_boot (strings borrowed from in). */
void gw_aws_boot_of(const struct gw_aws_inst *in, const char *gateway,
                    struct gw_worker_boot *ret);

#endif
