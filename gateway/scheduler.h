/* The scheduler: jobs through their life (queue, placement, transitions,
 * loss, cost) over the instances of every enabled provider.
 *
 * It reports what happens on the bus (job events and states, placements,
 * preemptions, costs) and calls none of its listeners. It talks to workers
 * only through the fleet, and to providers only through provider.h. It
 * runs on the gateway's loop: placement runs from a hook once something
 * asked for it (gw_sched_kick), and queued jobs are retried on a timer
 * while they wait for capacity. */
#ifndef GW_SCHED_H
#define GW_SCHED_H

/* A job's stored step metrics (gw_store_thin_metrics): the newest WHOLE
 * stay whole, the older ones are thinned to about OLD, evenly spread over
 * their steps, after every THIN_EVERY stored. A run of any length then
 * keeps at most about 20,000 metric events (5 MB) in the store. */
#define GW_METRICS_WHOLE 10000
#define GW_METRICS_OLD 5000
#define GW_METRICS_THIN_EVERY 5000
/* A job's stored output (gw_store_trim_output): its first HEAD lines and
 * its newest, at most TAIL lines and TAIL_BYTES of text, with one line
 * between that says how much was left out, after every TRIM_EVERY lines
 * stored. Live viewers see every line; a later view (logs, a reopened
 * notebook) sees the start and the end. */
#define GW_OUTPUT_HEAD 1000
#define GW_OUTPUT_TAIL 10000
#define GW_OUTPUT_TAIL_BYTES (8 << 20)
#define GW_OUTPUT_TRIM_EVERY 2000

#include "bus.h"
#include "conf.h"
#include "fleet.h"
#include "job.h"
#include "place.h"
#include "provider.h"
#include "queue.h"
#include "store.h"

#include <stdbool.h>
#include <stdint.h>

struct gw_loop;
struct gw_sched;

struct gw_sched_env {
  const struct gw_config *cfg;
  struct gw_store *store;
  struct gw_fleet *fleet;
  struct gw_queue *queue;
  struct gw_loop *loop;
  const struct gw_bus *bus;
  const char *worker_address;   /* what workers connect to */
  const char *gateway_public;   /* the gateway's CURVE public key (Z85) */
  const char *train_program;    /* spotlab-train as workers run it ("" : theirs) */
};

/* An owned scheduler (everything in env borrowed for its life), or NULL. */
struct gw_sched *gw_sched_new(const struct gw_sched_env *env);
/* Frees the scheduler; the providers it was given are destroyed. */
struct gw_sched *gw_sched_free(struct gw_sched *s);

/* The worker bundle launches of needs_bundle providers hand out (borrowed;
 * NULL: such launches are refused). */
struct gw_bundle;
void gw_sched_set_bundle(struct gw_sched *s, struct gw_bundle *b);

/* Takes an opened provider (see gw_sched_provider_event for its events).
 * SL_ELIMIT past GW_PROVIDERS_MAX. */
int gw_sched_add_provider(struct gw_sched *s, struct gw_provider *p);
size_t gw_sched_n_providers(const struct gw_sched *s);
struct gw_provider *gw_sched_provider_at(struct gw_sched *s, size_t i);
/* The event callback to open providers with (userdata: the scheduler). */
void gw_sched_provider_event(void *userdata, struct gw_provider *p,
                             const struct gw_provider_event *ev);
/* Every offer of every provider, best first is not implied. Up to max
 * into ret; the number written. */
size_t gw_sched_market(struct gw_sched *s, struct gw_offer *ret, size_t max);
/* Whether any offer of the market fits job j's resource options (and its
 * user's allowed types): 0, or SL_ENAME with why none does in err
 * (gw_place_explain); 0 while there is no market yet. */
int gw_sched_check_offers(struct gw_sched *s, const struct gw_job *j, char *err, size_t err_size);
/* offers[0..n) (from gw_sched_market) ranked for w as placement sees them
 * now, best first, at most max into ret (%instances). */
size_t gw_sched_rank_market(struct gw_sched *s, const struct gw_wants *w,
                            const struct gw_offer *offers, size_t n, struct gw_place_ranked *ret,
                            size_t max);
/* 0 when some offer of the market is in region (or no market is known
 * yet); SL_ENAME with a message naming the known regions in err. */
int gw_sched_check_region(struct gw_sched *s, const char *region, char *err, size_t err_size);
/* Preempts (notice_s of notice) or kills the instance through its provider. */
int gw_sched_inject(struct gw_sched *s, struct gw_inst *in, bool kill, double notice_s);
/* A rebalance recommendation for the instance, through its provider. */
int gw_sched_inject_rebalance(struct gw_sched *s, struct gw_inst *in);

/* Loads the live jobs and instances a previous run left (after the
 * providers were added). */
int gw_sched_load(struct gw_sched *s);

/* deadline= of j (before submit): 0 when it has none or can meet it;
 * SL_ECONFIG with a sentence in why (a malformed value, or the earliest
 * possible finish on on-demand, which is past the deadline). */
int gw_sched_deadline_check(struct gw_sched *s, const struct gw_job *j, char *why, size_t size);
int gw_sched_submit(struct gw_sched *s, struct gw_job *j);
int gw_sched_cancel(struct gw_sched *s, struct gw_job *j);
/* Saves j's row with event (borrowed, may be NULL) and reports it: 0 when
 * saved and reported, 1 when the store keeps it (reported once written),
 * a negative error when it was lost. */
int gw_sched_emit(struct gw_sched *s, struct gw_job *j, json_t *event);
/* A spot instance taken back by its market (its provider's notice, its
 * worker's, or its end, whichever comes first; once per instance): its
 * (type, zone) is placed elsewhere first for a while. */
void gw_sched_note_preempted(struct gw_sched *s, struct gw_inst *in);
/* Whether a notice's action (protocols.md §2 "notice") is the market
 * taking the instance back, not a rebalance hint or a signal. */
bool gw_sched_market_action(const char *action);
/* The same for a checkpoint event with its row (store.h). Acknowledge the
 * checkpoint to the worker only on 0: a kept one is acknowledged once
 * written (gw_sched_checkpoint_recorded). */
int gw_sched_emit_checkpoint(struct gw_sched *s, struct gw_job *j, json_t *event,
                             const struct gw_checkpoint_row *ck);
/* Tells j's worker (its attempt's) that j's newest checkpoint is saved: it
 * may delete older ones. */
void gw_sched_checkpoint_recorded(struct gw_sched *s, const struct gw_job *j, int attempt);
/* While the store keeps writes it refused: why new work is refused (a
 * sentence for the client), else NULL. */
const char *gw_sched_refusal(const struct gw_sched *s);
/* The worker reports j cancelled: ended as cancelled, or back in the queue
 * when it was stopped for its budget (asked, or held by a spent budget and
 * no cancel asked, as after a gateway restart in between). */
void gw_sched_worker_cancelled(struct gw_sched *s, struct gw_job *j, const char *reason);
/* The state store's health for the status reply, owned:
 * {"ok":false,"error":"disk full","message","since_us","kept_writes"}. */
json_t *gw_sched_store_json(const struct gw_sched *s);
int gw_sched_transition(struct gw_sched *s, struct gw_job *j, enum gw_job_state st,
                        const char *reason);
void gw_sched_finish(struct gw_sched *s, struct gw_job *j, enum gw_job_state st, const char *reason);
void gw_sched_requeue(struct gw_sched *s, struct gw_job *j, bool notice, const char *reason);
/* The job's process died by a signal its worker did not send (exit_code
 * 128 + N), or its worker could not start it for a reason that may pass
 * (transient: the worker's message, as when the store or the gateway did not
 * answer; NULL otherwise): re-queues it from its latest checkpoint, at most
 * [gateway] process_retries times without a new checkpoint in between; a
 * transient one is placed again after a wait (gw_sched_requeue_retry).
 * False when the job should fail instead. */
bool gw_sched_retry(struct gw_sched *s, struct gw_job *j, int64_t exit_code, const char *transient);
int gw_sched_assign(struct gw_sched *s, struct gw_job *j, struct gw_inst *inst);
/* The worker's cancel of attempt of job (a "J000012" id): the worker
 * holds one attempt of a job, and a cancel meant for an attempt that is over
 * must not stop the one it runs now. attempt <= 0: none named. */
json_t *gw_sched_cancel_msg(const char *job, int64_t attempt);
/* Sends the assign message again, with no state change. */
int gw_sched_send_assign(struct gw_sched *s, struct gw_job *j, struct gw_inst *inst);
/* The worker of inst registered before its provider reported the launch:
 * the launch is done. */
void gw_sched_launched(struct gw_sched *s, struct gw_inst *inst);
/* checkpoint_every=auto: recomputes the interval after a metric or a
 * checkpoint was recorded in j->autockpt; tells the worker and emits a
 * checkpoint_interval event when it moved by more than 20%. */
void gw_sched_autockpt(struct gw_sched *s, struct gw_job *j, bool lookup_mtbp);
/* in's rank in job j: 0 for a one-instance job's instance and a gang's
 * rank 0, R for gang member R, -1 when in does not run j. */
int gw_sched_rank(const struct gw_job *j, const struct gw_inst *in);
/* The worker of in says j's process runs: the job is running (a gang's once
 * every rank runs). Rank 0 of a gang names its rendezvous (tcp://HOST:PORT,
 * where its spotlab-train listens): the other ranks are assigned then. */
void gw_sched_started(struct gw_sched *s, struct gw_job *j, struct gw_inst *in,
                      const char *rendezvous);
/* A gang member's done (the worker message, borrowed). */
void gw_sched_gang_done(struct gw_sched *s, struct gw_job *j, struct gw_inst *in, const json_t *done);
/* Whether in's rank of gang job j (in's job, if any) has its assign sent. */
bool gw_sched_gang_assigned(const struct gw_job *j, const struct gw_inst *in);
/* A gang member's worker registered; listed: its register names the job;
 * assigned_before: its rank was assigned before this register (a rank this
 * register assigned is not one the worker lost). */
void gw_sched_gang_register(struct gw_sched *s, struct gw_job *j, struct gw_inst *in, bool listed,
                            bool was_registered, bool assigned_before);
/* Shuts the instance down (worker told, provider asked) and forgets it. */
void gw_sched_terminate(struct gw_sched *s, struct gw_inst *in, const char *why);
void gw_sched_instance_gone(struct gw_sched *s, const char *id, const char *why);

/* Whether queued job j must wait (a spent budget): true with a sentence
 * in why. */
typedef bool (*gw_sched_hold_fn)(void *data, const struct gw_job *j, char *why, size_t size);
/* Placement asks fn (data borrowed) before it starts a queued job; a held
 * job stays queued with the reason "paused: WHY". */
void gw_sched_set_hold(struct gw_sched *s, gw_sched_hold_fn fn, void *data);
/* Pauses j for why: a running job's worker is told to stop it with a
 * final checkpoint (as a cancel does), and its end puts it back in the
 * queue, resumable from that checkpoint, instead of ending it; a queued
 * one is marked paused. 0 when asked now, 1 when there was nothing to do
 * (asked before, or not started yet). A gang's ranks are all stopped; rank
 * 0 writes the checkpoint. */
int gw_sched_pause(struct gw_sched *s, struct gw_job *j, const char *why);

/* Placement should run (soon, from the loop). */
void gw_sched_kick(struct gw_sched *s);
/* Places queued jobs now. */
void gw_sched_place(struct gw_sched *s);
/* Heartbeat and registration timeouts, idle workers, cost accrual. */
void gw_sched_housekeeping(struct gw_sched *s);
/* Accrues j's cost up to now; writes it to the ledger every few seconds,
 * or now when force. */
void gw_sched_flush_cost(struct gw_sched *s, struct gw_job *j, bool force);
/* What the live jobs of user (NULL: every one) cost, accrued to now, that
 * the cost table does not hold yet: the ledger's pending function (ctx: the
 * scheduler), gw_ledger_set_pending. */
void gw_sched_cost_pending(void *ctx, const char *user, double *ret_usd, double *ret_on_demand_usd);

#endif
