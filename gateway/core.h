/* The gateway's shared state, visible only to the gateway's own modules
 * (gateway.c loop, kproto.c kernel protocol, wproto.c worker protocol,
 * sched.c jobs and placement). Nothing outside gateway/ includes this.
 *
 * Ownership: struct gw owns the store, provider, queue, sockets, live jobs
 * (non-final ones only; final jobs are read back from the store), live
 * instances and the client table. Every table is bounded. */
#ifndef GW_CORE_H
#define GW_CORE_H

#include "conf.h"
#include "job.h"
#include "keys.h"
#include "provider.h"
#include "queue.h"
#include "store.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#define GW_MAX_CLIENTS 1024
#define GW_MAX_ATTACH 64
#define GW_MAX_LIVE_JOBS GW_QUEUE_MAX
#define GW_MAX_INSTANCES 1024
#define GW_MAX_SESSIONS 1024
#define GW_RID_MAX 256
#define GW_FRAME_MAX (1u << 20)
#define GW_FRAMES_MAX 8
#define GW_JSON_DEPTH 32

/* A client's interest in one job's events. While replaying, events after
 * replay_after come from the store at the pace the client reads them (the
 * kernel socket's send queue is bounded); live events of the job are not sent
 * meanwhile, since the store has them too and the replay reaches them in
 * order. A live event the client's queue cannot take starts a replay from it,
 * so no event is ever dropped for a slow client. */
struct gw_attach {
  int64_t job;
  int64_t replay_after;         /* last seq sent, while replaying */
  bool replaying;
  bool follow;                  /* a live job: live events follow the replay */
};

struct gw_client {
  uint8_t rid[GW_RID_MAX];
  size_t rid_len;
  bool authed;
  char user[64];
  char session[256];
  struct gw_attach attached[GW_MAX_ATTACH];
  size_t n_attached;
  int64_t last_mono_us;
  int64_t replay_at_mono_us;    /* when to go on replaying; 0: nothing to replay */
  int64_t replay_backoff_us;    /* grows while the client reads nothing */
};

struct gw_inst {
  struct gw_instance_row row;   /* row.state: launching, idle, busy, draining */
  uint8_t rid[GW_RID_MAX];
  size_t rid_len;
  bool registered;
  bool notice;                  /* a preemption notice was seen for this instance */
  int64_t last_seen_mono_us;
  int64_t idle_since_mono_us;
  int64_t register_by_mono_us;  /* launching or restarted: must register before this */
  int64_t reregister_mono_us;   /* when "reregister" was last sent to it */
  int gpus;
  char session[256];            /* notebook session of the job it ran last (not stored) */
};

/* A notebook session's activity, for idle shutdown (idle.c). */
struct gw_idle_session {
  char user[64];
  char session[256];
  int64_t last_active_mono_us;  /* last request from its clients, or a live job seen */
  int state;                    /* idle.c: active, warned, stopped */
};

struct gw {
  const struct gw_config *cfg;
  struct gw_store *store;
  struct gw_provider *prov;
  struct gw_queue *queue;
  void *zctx, *ksock, *wsock, *zap;
  struct gw_keypair keys;
  struct gw_job **jobs;         /* live jobs, owned */
  size_t n_jobs;
  struct gw_inst *insts;        /* live instances */
  size_t n_insts;
  struct gw_client *clients;
  size_t n_clients;
  struct gw_idle_session *sessions; /* notebook sessions heard from, bounded */
  size_t n_sessions;
  char train_program[1024];
  char worker_address[512];     /* what workers connect to */
  int64_t started_us;
  int64_t next_housekeeping_mono_us;
  int64_t next_place_retry_mono_us; /* queued jobs wait for capacity: retry placement then */
  int64_t next_cost_flush_mono_us;
  int64_t next_replay_mono_us;  /* earliest replay_at_mono_us of any client; INT64_MAX none */
  bool kick;                    /* placement should run */
};

/* gateway.c */
/* Sends msg (borrowed) to the peer rid without blocking; logs a failure. */
int gw_send_to(struct gw *g, void *sock, const uint8_t *rid, size_t rid_len, json_t *msg);
/* The same, silent: -EAGAIN when the peer's queue is full (the kernel socket
 * is ZMQ_ROUTER_MANDATORY), -EHOSTUNREACH when the peer is gone. */
int gw_try_send(void *sock, const uint8_t *rid, size_t rid_len, const json_t *msg);
struct gw_job *gw_live_job(struct gw *g, int64_t id);
struct gw_inst *gw_inst_find(struct gw *g, const char *id);
void gw_inst_remove(struct gw *g, const char *id);

/* kproto.c */
void gw_kproto_recv(struct gw *g);
/* Sends an event of job to every client attached to it (event borrowed,
 * already in the store). */
void gw_kproto_fanout(struct gw *g, int64_t job, const json_t *event);
/* Goes on with the replays that are due at now (monotonic µs); sets
 * g->next_replay_mono_us. Run from the loop. */
void gw_kproto_replay(struct gw *g, int64_t now_us);

/* Sends msg (borrowed) to every client of user's notebook session. */
void gw_kproto_notify(struct gw *g, const char *user, const char *session, json_t *msg);

/* idle.c */
/* A request from a client of (user, session): the notebook is active. */
void gw_idle_touch(struct gw *g, const char *user, const char *session);
/* Warns and stops idle notebooks; run from housekeeping. */
void gw_idle_check(struct gw *g);

/* wproto.c */
void gw_wproto_recv(struct gw *g);
int gw_wproto_send(struct gw *g, struct gw_inst *inst, json_t *msg);
void gw_zap_handle(struct gw *g);

/* sched.c */
int gw_sched_emit(struct gw *g, struct gw_job *j, json_t *event);
int gw_sched_transition(struct gw *g, struct gw_job *j, enum gw_job_state s, const char *reason);
int gw_sched_submit(struct gw *g, struct gw_job *j);
int gw_sched_cancel(struct gw *g, struct gw_job *j);
void gw_sched_finish(struct gw *g, struct gw_job *j, enum gw_job_state s, const char *reason);
void gw_sched_requeue(struct gw *g, struct gw_job *j, bool notice, const char *reason);
/* The job's process died by a signal its worker did not send (exit_code
 * 128 + N): re-queues it from its latest checkpoint, at most
 * [gateway] process_retries times without a new checkpoint in between.
 * False when the job should fail instead. */
bool gw_sched_retry(struct gw *g, struct gw_job *j, int64_t exit_code);
int gw_sched_assign(struct gw *g, struct gw_job *j, struct gw_inst *inst);
/* Sends the assign message again, with no state change. */
int gw_sched_send_assign(struct gw *g, struct gw_job *j, struct gw_inst *inst);
void gw_sched_place(struct gw *g);
void gw_sched_housekeeping(struct gw *g);
void gw_sched_flush_cost(struct gw *g, struct gw_job *j, bool force);
/* Shuts the instance down (worker told, provider asked) and forgets it. */
void gw_sched_terminate(struct gw *g, struct gw_inst *in, const char *why);
void gw_sched_instance_gone(struct gw *g, const char *id, const char *why);
void gw_sched_on_provider_event(void *userdata, const struct gw_provider_event *ev);
int gw_sched_load(struct gw *g);
/* checkpoint_every=auto: recomputes the interval after a metric or a
 * checkpoint was recorded in j->autockpt; tells the worker and emits a
 * checkpoint_interval event when it moved by more than 20%. */
void gw_sched_autockpt(struct gw *g, struct gw_job *j, bool lookup_mtbp);
void gw_sched_set_inst_state(struct gw *g, struct gw_inst *inst, const char *state, int64_t job);

#endif
