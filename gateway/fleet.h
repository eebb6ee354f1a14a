/* The fleet: the gateway's live jobs and instances, and the sends to
 * workers.
 *
 * A live job (not succeeded, failed or cancelled) is owned here; final jobs
 * are read back from the store. An instance is known from the moment its
 * provider accepted the launch until it is gone; its row is saved in the
 * store on every change, so a restarted gateway knows it again. Both tables
 * are bounded. Pointers into the instance table are valid until the next
 * gw_fleet_inst_add or gw_fleet_inst_remove. Messages to a worker go
 * through the transport the gateway sets (the worker socket); tests set
 * their own. */
#ifndef GW_FLEET_H
#define GW_FLEET_H

#include "gpus.h"
#include "job.h"
#include "store.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GW_MAX_INSTANCES 1024
#define GW_RID_MAX 256

struct gw_provider;

struct gw_inst {
  struct gw_instance_row row;   /* row.state: launching, idle, busy, draining */
  struct gw_provider *prov;     /* its provider; NULL when that provider is not open */
  uint8_t rid[GW_RID_MAX];      /* the worker's routing id on the worker socket */
  size_t rid_len;
  bool launched;                /* the provider reported the launch done (or the worker registered) */
  bool registered;
  bool notice;                  /* a preemption notice was seen for this instance */
  bool at_risk;                 /* a rebalance recommendation its jobs went on through: no
                                 * new job is given to it */
  bool market_noted;            /* its market's taking it back is in the placement memory */
  int64_t last_seen_mono_us;
  int64_t idle_since_mono_us;
  int64_t register_by_mono_us;  /* launching or restarted: must register before this */
  int64_t reregister_mono_us;   /* when "reregister" was last sent to it */
  int gpus;
  struct gw_gpus found_gpus;    /* what its worker reported in register (not stored) */
  char gpu_warning[GW_GPUS_WARNING_MAX]; /* found_gpus disagree with the catalog; "" when they agree */
  char session[256];            /* notebook session of the job it ran last (not stored) */
  double billed_seen_usd;       /* the provider's bill (billed_usd) already charged to jobs */
};

/* Sends msg (borrowed) to the worker whose connection has routing id rid.
 * 0, -EAGAIN (its queue is full) or another negative error. */
typedef int (*gw_worker_send_fn)(void *ctx, const uint8_t *rid, size_t rid_len, const json_t *msg);

struct gw_fleet;

/* An owned, empty fleet that saves instance rows in store (borrowed), or
 * NULL. max_jobs bounds the live jobs. */
struct gw_fleet *gw_fleet_new(struct gw_store *store, size_t max_jobs);
/* Frees the live jobs it owns. Returns NULL. */
struct gw_fleet *gw_fleet_free(struct gw_fleet *f);
void gw_fleet_set_transport(struct gw_fleet *f, gw_worker_send_fn fn, void *ctx);

size_t gw_fleet_n_jobs(const struct gw_fleet *f);
struct gw_job *gw_fleet_job_at(struct gw_fleet *f, size_t i);
/* The live job id, or NULL. */
struct gw_job *gw_fleet_job(struct gw_fleet *f, int64_t id);
/* Takes j (malloc'ed). SL_ELIMIT when full (j stays the caller's). */
int gw_fleet_job_add(struct gw_fleet *f, struct gw_job *j);
/* Forgets and frees the live job j. */
void gw_fleet_job_drop(struct gw_fleet *f, struct gw_job *j);

size_t gw_fleet_n_insts(const struct gw_fleet *f);
struct gw_inst *gw_fleet_inst_at(struct gw_fleet *f, size_t i);
struct gw_inst *gw_fleet_inst(struct gw_fleet *f, const char *id);
/* The instance (not terminated) whose CURVE public key is z85, or NULL. */
struct gw_inst *gw_fleet_inst_by_key(struct gw_fleet *f, const char *z85);
/* Copies in into the table and saves its row. The new entry, or NULL when full. */
struct gw_inst *gw_fleet_inst_add(struct gw_fleet *f, const struct gw_inst *in);
/* Forgets instance id (its row is left as it was last saved). */
void gw_fleet_inst_remove(struct gw_fleet *f, const char *id);
/* Saves in's row. */
int gw_fleet_inst_save(struct gw_fleet *f, const struct gw_inst *in);
/* Sets in's state and job and saves the row; "idle" starts its idle clock. */
void gw_fleet_inst_set_state(struct gw_fleet *f, struct gw_inst *in, const char *state, int64_t job);
/* Instances not draining. */
size_t gw_fleet_active_insts(const struct gw_fleet *f);
/* Sends msg (borrowed) to in's worker: -ENOTCONN before it registered. */
int gw_fleet_send(struct gw_fleet *f, struct gw_inst *in, const json_t *msg);
/* Sends msg (borrowed) to the worker connection rid, registered or not
 * (error answers, "reregister"): the same transport as gw_fleet_send. */
int gw_fleet_send_rid(struct gw_fleet *f, const uint8_t *rid, size_t rid_len, const json_t *msg);

#endif
