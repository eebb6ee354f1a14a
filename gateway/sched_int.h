/* The scheduler's inside, shared by its files: scheduler.c (one instance
 * per job), sched_launch.c (launching an instance), sched_assign.c (the
 * assign message, the checkpoint interval), sched_load.c (a gateway
 * restart), sched_gang.c (nodes=N: gangs), sched_place.c (what placement
 * remembers), sched_deadline.c (deadline=) and sched_save.c (the store's
 * kept writes). Nothing outside those includes this header. */
#ifndef GW_SCHED_INT_H
#define GW_SCHED_INT_H

#include "scheduler.h"

#define GW_SCHED_MARKET_MAX 256

struct gw_sched {
  const struct gw_config *cfg;
  struct gw_store *store;
  struct gw_fleet *fleet;
  struct gw_queue *queue;
  struct gw_loop *loop;
  const struct gw_bus *bus;
  const char *worker_address, *gateway_public, *train_program;
  struct gw_bundle *bundle;
  struct gw_provider *provs[GW_PROVIDERS_MAX];
  size_t n_provs;
  bool kick;                    /* placement should run */
  int64_t retry_timer;          /* queued jobs wait for capacity: placement again then */
  int64_t next_cost_flush_mono_us;
  struct gw_offer offers[GW_SCHED_MARKET_MAX]; /* the market as the current placement pass sees it */
  size_t n_offers;
  struct gw_dl *dl;             /* owned: deadline= jobs (sched_deadline.c) */
  struct gw_place_memory *mem;  /* owned: failures, step rates, restart times */
  unsigned refused;             /* launches refused for capacity so far (a retry tries another) */
  int64_t pass_mono_us;         /* the current placement pass began */
  char room_inst[GW_INSTANCE_ID_MAX]; /* the idle worker make_room shut down, until its provider
                                 * says it has gone (or ROOM_WAIT_US); "" none */
  int64_t room_mono_us;
  int64_t save_timer;           /* retries the store's kept writes; 0: none armed */
  int64_t save_backoff_us;
  uint64_t learned_saved[2];    /* what was learned, as of its last write (sched_learned.c) */
  int64_t learned_saved_us;     /* monotonic: the last write */
  bool learned_failing;         /* the last write was refused (logged once) */
  gw_sched_hold_fn hold;        /* what keeps queued jobs back (budgets); NULL: nothing */
  void *hold_data;
};

/* scheduler.c, sched_launch.c */
void gw_sched_report(struct gw_sched *s, struct gw_bus_event ev);
/* What j asks for (gw_place_wants), within the instance types its user may
 * run on. */
void gw_sched_wants(const struct gw_sched *s, const struct gw_job *j, struct gw_wants *w);
/* Asks o's provider for an instance for job j (spot or on-demand): on
 * success it is in the fleet, launching, its row naming j, and its id in
 * ret_id. The job itself is left as it is. */
int gw_sched_launch_inst(struct gw_sched *s, struct gw_job *j, const struct gw_offer *o, bool spot,
                         char ret_id[GW_INSTANCE_ID_MAX]);
/* Forgets an instance launched in this placement pass and asks its
 * provider to stop it (a gang that could not be launched whole). */
void gw_sched_discard_launch(struct gw_sched *s, const char *id);
/* A new attempt on in (the job's instance, a gang's rank 0). */
void gw_sched_write_placement(struct gw_job *j, const struct gw_inst *in);
/* The placed event and the attempt's row. */
void gw_sched_emit_placed(struct gw_sched *s, struct gw_job *j);
/* Ends the attempt (cost, attempts row) and frees its instances that still
 * name j, into inst_state. */
void gw_sched_end_attempt(struct gw_sched *s, struct gw_job *j, const char *outcome,
                          const char *inst_state);
/* The job has no placement any more (a gang's is freed). */
void gw_sched_clear_placement(struct gw_job *j);
/* gw_sched_requeue with the preempted event naming instance (the gang
 * member that was taken away). */
void gw_sched_requeue_at(struct gw_sched *s, struct gw_job *j, bool notice, const char *reason,
                         const char *instance);
/* gw_sched_requeue_at without a notice, for a start a worker refused for a
 * reason that may pass: the job is not placed again before a wait (5 s after
 * its first retry, doubling up to 2 min), and its queued reason says so. */
void gw_sched_requeue_retry(struct gw_sched *s, struct gw_job *j, const char *reason,
                            const char *instance);

/* sched_gang.c */
/* Places a gang for j (w->nodes > 1) now, all or none: -EAGAIN when not
 * now, 0 when placed or when the job failed (no group can ever fit). */
int gw_sched_place_gang(struct gw_sched *s, struct gw_job *j, const struct gw_wants *w,
                        bool *no_capacity);
/* A member launched or registered: the placed event once every member is
 * launched, rank 0's assign once every member is registered. */
void gw_sched_gang_progress(struct gw_sched *s, struct gw_job *j);
/* The instance of gang member rank is gone (its provider, a missing
 * heartbeat, a failed launch). */
void gw_sched_gang_lost(struct gw_sched *s, struct gw_job *j, int rank, const char *why);
/* The assign's "gang" object for rank of j's gang, owned. */
json_t *gw_sched_gang_assign_field(const struct gw_job *j, int rank);
/* Cancel of a started gang: every member is told to stop. */
void gw_sched_gang_cancel(struct gw_sched *s, struct gw_job *j);
/* Stops every rank of j (pause_requested set) as a cancel does; its end
 * puts it back in the queue (gw_sched_paused) rather than ending it. */
void gw_sched_gang_pause(struct gw_sched *s, struct gw_job *j);
/* j stopped for its budget at its final checkpoint: back in the queue, held
 * there until the budget allows it again. */
void gw_sched_paused(struct gw_sched *s, struct gw_job *j);
/* The gang's members cost this much per hour now (those not ended). */
void gw_sched_gang_price(const struct gw_job *j, double *ret_usd, double *ret_on_demand_usd);
/* After a gateway restart: j (provisioning or later) gets its gang back
 * from the instance rows that name it. */
void gw_sched_gang_load(struct gw_sched *s, struct gw_job *j);

/* sched_learned.c */
/* Reads back what an earlier gateway learned (after the providers are
 * added). */
void gw_sched_learned_load(struct gw_sched *s);
/* Writes what changed since the last write: when now, at once, else at
 * most every few seconds. */
void gw_sched_learned_save(struct gw_sched *s, bool now);

/* sched_save.c */
/* Retries the store's kept writes on the loop. */
int gw_sched_save_init(struct gw_sched *s);
void gw_sched_save_done(struct gw_sched *s);
/* Whether writes are kept (the gateway takes no new work). */
bool gw_sched_store_failing(const struct gw_sched *s);

/* sched_deadline.c */
struct gw_dl *gw_sched_deadline_new(struct gw_sched *s);
struct gw_dl *gw_sched_deadline_free(struct gw_dl *d);
/* What deadline planning measured, to keep across restarts: {"startup_s",
 * "steps": [{"model", "step_s"}]} (a model: 16 hex digits), owned. */
json_t *gw_sched_deadline_json(const struct gw_dl *d);
/* Adds what gw_sched_deadline_json wrote; a malformed entry is skipped and
 * counted in *ret_skipped. Returns the entries added. */
size_t gw_sched_deadline_load(struct gw_dl *d, const json_t *j, size_t *ret_skipped);
/* How many times those measurements changed. */
uint64_t gw_sched_deadline_changes(const struct gw_dl *d);
/* Placement of j (w its options): a job with a deadline gets the market
 * its policy decided, w narrowed to on-demand or to the one spot type;
 * -EAGAIN while it decided to wait. 0 and w as it was for other jobs. */
int gw_sched_deadline_wants(struct gw_sched *s, struct gw_job *j, struct gw_wants *w);
/* j's state changed (after gw_sched_transition set it): start-up and run
 * time measured, a job that ended forgotten. */
void gw_sched_deadline_state(struct gw_sched *s, struct gw_job *j);
/* A spot capacity failure or a preemption of prov's type (zone NULL: any):
 * the offer counts as without capacity in the tick under way. */
void gw_sched_deadline_lost(struct gw_sched *s, const struct gw_provider *prov, const char *type,
                            const char *zone);
/* sched_place.c */
/* The hash of what makes j's steps cost what they do. */
uint64_t gw_sched_job_shape(const struct gw_job *j);
/* What placement knows for j (NULL: no job, prior units), rates into
 * rates[0..GW_PLACE_RATES_MAX); borrowed from s and rates. */
void gw_sched_place_ctx(struct gw_sched *s, const struct gw_job *j, struct gw_place_rate *rates,
                        struct gw_place_ctx *c);
/* gw_place_pick over the pass's market for j: 0 with the offer in *ret,
 * SL_ENAME (none fits), -EAGAIN (every fitting one held). */
int gw_sched_pick_offer(struct gw_sched *s, const struct gw_job *j, const struct gw_wants *w,
                        struct gw_offer *ret, bool *ret_spot);
/* Whether a launch's error says the provider has no capacity for it. */
bool gw_sched_capacity_error(int error);
/* Hooks: a launch of (type, zone, market) refused with error (remembered
 * when it is for capacity); a provider's capacity changed; an attempt of j
 * ends (its step rate); an event of j (checkpoint sizes, restart times).
 * A spot instance preempted by its market: gw_sched_note_preempted. */
void gw_sched_note_refused(struct gw_sched *s, struct gw_provider *p, const char *type,
                           const char *zone, bool spot, int error);
void gw_sched_note_capacity(struct gw_sched *s, struct gw_provider *p);
void gw_sched_note_attempt(struct gw_sched *s, const struct gw_job *j);
void gw_sched_note_event(struct gw_sched *s, const struct gw_job *j, const json_t *event);
/* Fills o's region (its type's, else its provider's) and time_scale. */
void gw_sched_offer_fill(struct gw_sched *s, struct gw_offer *o);

#endif
