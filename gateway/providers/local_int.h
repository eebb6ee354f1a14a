/* The local provider's state, shared by its files: local.c (operations and
 * the class), local_timer.c (the timer that advances the instances and the
 * market and delivers events) and local_records.c (instance records on disk
 * and their adoption after a gateway restart). Not for other modules: they
 * use local.h. */
#ifndef GW_LOCAL_INT_H
#define GW_LOCAL_INT_H

#include "local.h"
#include "evqueue.h"
#include "proc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define GW_LOCAL_MAX_INSTANCES 256

struct gw_catalog;
struct gw_imds;
struct gw_market;

struct gw_local_inst {
  char id[GW_INSTANCE_ID_MAX], type[64], zone[32];
  bool spot;
  int type_idx;
  pid_t pid;
  unsigned long long start_ticks;  /* /proc/PID/stat field 22: guards against pid reuse */
  struct gw_imds *imds;
  int port;
  int64_t launched_real_us;
  double price_usd_per_hour;       /* at launch; spot instances report the current price */
  int64_t notice_at_mono_us;       /* random model: when the market preempts; INT64_MAX none */
  int64_t rebalance_at_mono_us;    /* INT64_MAX none */
  int64_t deadline_real_us;        /* notice given: kill at this wall time; 0 none */
  int64_t deadline_mono_us;
  int64_t kill_at_mono_us;         /* terminate(): SIGKILL after the grace; 0 none */
  bool by_market;                  /* the end came from the market or inject */
  bool signalled;                  /* SIGKILL sent; waiting to see it gone */
  bool gone;                       /* process gone; TERMINATED pending */
};

#define GW_LOCAL_SWEEP_EVERY_US (3600 * INT64_C(1000000)) /* gone instances' folders swept */

struct gw_local {
  struct gw_provider base;         /* first: the provider pointer is the struct */
  struct gw_loop *loop;
  int64_t timer;                   /* its one timer on loop; 0 none */
  bool in_timer;                   /* inside on_timer, whose answer re-arms it */
  int slots;
  double time_scale;
  char *state_dir, *worker_program, *zone_prefix;
  char store_url[4200];
  struct gw_catalog *cat;
  struct gw_market *market;
  struct gw_instance_type *types;  /* market(): one offer per type and zone, catalog order,
                                    * prices as of market_mono_us */
  size_t *type_cat;                /* the catalog index of each offer */
  size_t n_types;
  int64_t market_mono_us;
  int64_t open_mono_us;
  struct gw_local_inst *inst[GW_LOCAL_MAX_INSTANCES];
  size_t n;
  struct gw_evqueue events;
  int last_capacity;               /* the trace's capacity at the last step */
  bool capacity_known;
  int64_t swept_mono_us;           /* the last sweep of gone instances' folders */
  int64_t sweep_every_us;          /* GW_LOCAL_SWEEP_EVERY_US; a test may shorten it */
};

static inline bool gw_local_alive(const struct gw_local_inst *in) {
  return gw_proc_alive(in->pid, in->start_ticks);
}

/* The instance named id, or NULL. */
struct gw_local_inst *gw_local_find(struct gw_local *l, const char *id);
/* state_dir/instances/ID, or a file in it when file is not NULL. */
void gw_local_inst_path(const struct gw_local *l, const char *id, const char *file, char *buf,
                        size_t size);
/* Writes in's record, instance.json (0600, atomically); a failure is logged. */
int gw_local_save_record(struct gw_local *l, const struct gw_local_inst *in);
void gw_local_remove_record(struct gw_local *l, const char *id);
/* Frees in and stops its metadata endpoint (its process is left alone). NULL. */
struct gw_local_inst *gw_local_inst_free(struct gw_local_inst *in);
/* Adopts every record under state_dir/instances that no instance has yet. */
void gw_local_rescan(struct gw_local *l);
/* At open and every hour: the folders of instances gone before (no record)
 * keep only their worker.log, and go whole once it is a week old; in the
 * others, the temporary files of a record's write cut short go. */
void gw_local_sweep_folders(struct gw_local *l);

/* local_timer.c */
struct gw_loop;
/* Simulated µs since the provider opened, at monotonic mono_us. */
int64_t gw_local_sim_us(const struct gw_local *l, int64_t mono_us);
/* Queues an event (delivered by the timer); NULL when the queue is full. */
struct gw_provider_event *gw_local_queue_event(struct gw_local *l, enum gw_provider_event_kind kind,
                                               const char *id);
/* Gives in a notice of notice_sim_s simulated seconds: the metadata endpoint
 * answers instance-action from now on and the group dies at the deadline. */
void gw_local_give_notice(struct gw_local *l, struct gw_local_inst *in, double notice_sim_s,
                          int64_t now_mono);
/* Live spot instances of a type (without_notice: only those with no notice yet). */
int gw_local_spot_running(const struct gw_local *l, int type_idx, bool without_notice);
/* Recomputes market()'s array at now; true when a price moved. */
bool gw_local_refresh_market(struct gw_local *l, int64_t now);
/* When the timer is next due. */
int64_t gw_local_next_due(const struct gw_local *l, int64_t now);
/* Moves the timer to the next due time after an operation changed it. */
void gw_local_rearm(struct gw_local *l);
/* The timer's callback: advances to now, delivers the queued events. */
int64_t gw_local_on_timer(struct gw_loop *loop, int64_t id, int64_t now_us, void *data);

#endif
