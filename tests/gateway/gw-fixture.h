/* A gateway in one process with no sockets, for the unit tests of the
 * scheduler, the kernel and worker protocols and idle shutdown.
 *
 * The pieces are built and wired as gateway.c wires them (loop, store,
 * queue, fleet, bus, scheduler, ledger, idle, kproto, wproto), with three
 * differences: the fleet's worker transport and the kernel protocol's
 * client transport capture what they are given instead of sending it, a
 * sink on the bus records every event, and the only provider is a scripted
 * fake whose launches, terminations and market events the test decides.
 * The state folder is a fresh temporary one, removed by fx_free.
 *
 * Time is driven, never slept: provider events are delivered from a loop
 * timer (as a real provider's are), fx_settle turns the loop until the
 * scheduler and the fake have nothing left to do, and tests that need the
 * clock to move pass now_us themselves (gw_idle_check) or turn the loop
 * with a deadline. */
#ifndef TESTS_GW_FIXTURE_H
#define TESTS_GW_FIXTURE_H

#include "bus.h"
#include "conf.h"
#include "fleet.h"
#include "idle.h"
#include "kproto.h"
#include "ledger.h"
#include "loop.h"
#include "provider.h"
#include "queue.h"
#include "scheduler.h"
#include "store.h"
#include "uploads.h"
#include "wproto.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- the scripted provider ---- */

/* What the fake does with the next launch. */
enum fp_launch_mode {
  FP_ANSWER,                    /* LAUNCHED follows (from the loop) */
  FP_FAIL,                      /* LAUNCH_FAILED follows */
  FP_REFUSE,                    /* launch() returns -EAGAIN; no event */
  FP_SILENT,                    /* accepted, and nothing ever follows */
};

enum fp_call_kind { FP_CALL_LAUNCH, FP_CALL_TERMINATE, FP_CALL_INJECT };

struct fp_call {
  enum fp_call_kind kind;
  char id[GW_INSTANCE_ID_MAX];  /* "" for a refused launch */
  char type[64];                /* launch */
  bool spot;                    /* launch */
  double max_price;             /* launch */
  int64_t job;                  /* launch */
  bool kill;                    /* inject */
  double notice_s;              /* inject */
};

#define FP_MAX_CALLS 256
#define FP_MAX_INSTS 64
#define FP_MAX_PENDING 64

struct fp_inst {
  char id[GW_INSTANCE_ID_MAX];
  char type[64];
  bool spot;
  bool alive;
};

struct fake_provider {
  struct gw_provider base;      /* first: the scheduler holds &base */
  struct gw_loop *loop;
  int64_t timer;                /* delivers pending events */
  struct gw_instance_type types[4];
  size_t n_types;
  double time_scale;            /* provider seconds per wall second */
  enum fp_launch_mode mode;     /* for every launch until changed */
  char zone[32];                /* LAUNCHED's zone */
  bool terminated_on_terminate; /* terminate() is followed by TERMINATED (default) */
  int capacity;                 /* launches refused (-EAGAIN) with this many alive; 0: no bound */
  bool spot_refused;            /* spot launches refused (-EAGAIN): no spot capacity */
  int next_id;
  struct fp_inst insts[FP_MAX_INSTS];
  size_t n_insts;
  struct fp_call calls[FP_MAX_CALLS];
  size_t n_calls;
  struct gw_provider_event pending[FP_MAX_PENDING];
  size_t n_pending;
};

/* Calls of kind (to instance id, NULL: any). */
size_t fp_count(const struct fake_provider *p, enum fp_call_kind kind, const char *id);
/* The newest call of kind, or NULL. */
const struct fp_call *fp_last(const struct fake_provider *p, enum fp_call_kind kind);
/* Queues an event for delivery from the loop (the next fx_settle). */
void fp_post(struct fake_provider *p, const struct gw_provider_event *ev);
/* LAUNCHED for instance id (one launched in FP_SILENT mode, say). */
void fp_launched(struct fake_provider *p, const char *id);
void fp_launch_failed(struct fake_provider *p, const char *id);
/* A preemption notice for id, deadline_us from now. */
void fp_notice(struct fake_provider *p, const char *id, int64_t in_us);
/* id taken back by the market (by_market), or gone for another reason. */
void fp_terminated(struct fake_provider *p, const char *id, bool by_market);
void fp_capacity(struct fake_provider *p);

/* ---- the fixture ---- */

#define FX_MAX_BUS 4096
#define FX_MAX_BLOCKED 16

/* One event seen on the bus, copied: the bus lends its pointers for the
 * call only. */
struct fx_bus_rec {
  enum gw_bus_kind kind;
  int64_t job;                  /* 0 when none */
  enum gw_job_state state;      /* the job's state when it was reported */
  char reason[256];
  char instance[GW_INSTANCE_ID_MAX];
  bool notice;
  double usd, on_demand_usd, seconds;
  char user[64], session[256];
  char why[160];
  json_t *json;                 /* owned copy of event (JOB_EVENT) or msg (NOTICE) */
};

struct fx {
  char dir[256];
  struct gw_config cfg;
  struct gw_loop *loop;
  struct gw_store *store;
  struct gw_queue *queue;
  struct gw_fleet *fleet;
  struct gw_bus bus;
  struct gw_sched *sched;
  struct gw_ledger *ledger;
  struct gw_idle *idle;
  struct gw_kproto *kproto;
  struct gw_wproto *wproto;
  struct gw_uploads *uploads;   /* cfg upload_data "yes": into the file store dir/store */
  struct fake_provider *fp;     /* owned by the scheduler */
  /* captured sends: arrays of {"to": routing id, "msg": message} */
  json_t *to_workers;
  json_t *to_clients;
  json_t *auths;                /* routing id -> the secret its last hello got */
  struct fx_bus_rec bus_log[FX_MAX_BUS];
  size_t n_bus;
  /* clients whose transport answers -EAGAIN once their allowance is spent */
  struct {
    char rid[64];
    int64_t allow;
  } blocked[FX_MAX_BLOCKED];
  size_t n_blocked;
  int next_req_id;
};

/* gw_config_defaults with the fixture's short timeouts; tests change it
 * further before fx_new. */
void fx_config(struct gw_config *cfg);
/* A fixture with cfg (NULL: fx_config's), or NULL with a message on stderr. */
struct fx *fx_new(const struct gw_config *cfg);
struct fx *fx_free(struct fx *f);

/* Turns the loop (no waiting) until a few turns in a row ran nothing new;
 * provider events, placement and paced replays happen here. */
void fx_settle(struct fx *f);
/* Turns the loop (waiting at most 2 ms a turn) until done(f, data) says
 * so or deadline_us from now has passed. Returns done's last answer. */
bool fx_run_until(struct fx *f, int64_t deadline_us, bool (*done)(struct fx *f, void *data),
                  void *data);

/* Bus log. */
size_t fx_bus_count(const struct fx *f, enum gw_bus_kind kind, int64_t job);
/* The newest record of kind about job (0: any), or NULL. */
const struct fx_bus_rec *fx_bus_last(const struct fx *f, enum gw_bus_kind kind, int64_t job);
/* The newest job event named event ("placed") of job, or NULL (borrowed). */
const json_t *fx_job_event(const struct fx *f, int64_t job, const char *event);
size_t fx_job_events(const struct fx *f, int64_t job, const char *event);
/* Whether job reached state st (per the bus's JOB_STATE records). */
bool fx_job_was(const struct fx *f, int64_t job, enum gw_job_state st);
/* The reason of job's newest JOB_STATE record with state st ("" if none). */
const char *fx_state_reason(const struct fx *f, int64_t job, enum gw_job_state st);
/* How many JOB_STATE records of job have state st and (unless NULL) reason. */
size_t fx_state_count(const struct fx *f, int64_t job, enum gw_job_state st, const char *reason);
void fx_bus_clear(struct fx *f);

/* Captured worker messages to instance id's routing id ("w:ID"). */
size_t fx_to_worker_count(const struct fx *f, const char *inst, const char *type);
/* The newest message of type (NULL: any) to inst, or NULL (borrowed). */
const json_t *fx_to_worker_last(const struct fx *f, const char *inst, const char *type);
/* Captured client messages to rid. */
size_t fx_to_client_count(const struct fx *f, const char *rid, const char *type);
const json_t *fx_to_client_last(const struct fx *f, const char *rid, const char *type);
/* The i-th message to rid (of any type), or NULL. */
const json_t *fx_to_client_at(const struct fx *f, const char *rid, size_t i);
void fx_captures_clear(struct fx *f);
/* From now on rid's transport accepts allow more messages, then answers
 * -EAGAIN (allow < 0: no limit again). */
void fx_client_allow(struct fx *f, const char *rid, int64_t allow);

/* ---- jobs through the scheduler ---- */

/* Submits a job of kind for (user, session) with options (taken; NULL: {})
 * through gw_sched_submit. Its id, or a negative error. */
int64_t fx_submit(struct fx *f, const char *user, const char *session, const char *kind,
                  json_t *options);
struct gw_job *fx_job(struct fx *f, int64_t id);
/* The job's state: live, else from the store; -1 unknown. */
int fx_job_state(struct fx *f, int64_t id);
/* "J000012" written into buf (16 bytes or more); returns buf. */
const char *fx_jid(int64_t id, char *buf);
/* "J000012/NAME", a key in job's own folder (one of 4 static buffers, in turn). */
const char *fx_key(int64_t job, const char *name);
struct gw_inst *fx_inst(struct fx *f, const char *id);

/* ---- a worker, through gw_wproto_handle ---- */

/* Sends body (borrowed) as instance id's worker, from routing id "w:ID". */
void fx_worker(struct fx *f, const char *inst, const json_t *body);
/* The same from json_pack(fmt, ...) (the body is freed). */
void fx_workerf(struct fx *f, const char *inst, const char *fmt, ...);
/* register with jobs and ended (borrowed, NULL: []). */
void fx_register(struct fx *f, const char *inst, const json_t *jobs, const json_t *ended);
void fx_started(struct fx *f, const char *inst, int64_t job);
void fx_metric(struct fx *f, const char *inst, int64_t job, int64_t step, double loss);
void fx_checkpoint(struct fx *f, const char *inst, int64_t job, int64_t step, const char *key);
/* done with status; exit_code < 0 leaves it out. */
void fx_done(struct fx *f, const char *inst, int64_t job, const char *status, int exit_code);
void fx_wnotice(struct fx *f, const char *inst);
/* inst's worker reports a rebalance recommendation, which its jobs leave
 * for (leaving) or go on through, 120 s ahead. */
void fx_wrebalance(struct fx *f, const char *inst, bool leaving);
/* Launch answered, worker registered, assigned and started: job runs on
 * the newest instance. Its id into ret_inst (GW_INSTANCE_ID_MAX). */
bool fx_run_job(struct fx *f, int64_t job, char *ret_inst);

/* ---- a kernel client, through gw_kproto_handle ---- */

/* Records user with token (its SHA-256 in the store's users table). */
void fx_user(struct fx *f, const char *user, const char *token);
/* Sends the request json_pack(fmt, ...) with a fresh id from client rid;
 * returns its reply (borrowed, valid until the captures are cleared) or
 * NULL when none came. */
const json_t *fx_req(struct fx *f, const char *rid, const char *fmt, ...);
/* {"type": type}: jobs, status, instances, market, cost, ping, or any other. */
const json_t *fx_ktype(struct fx *f, const char *rid, const char *type);
/* {"type": type, "job": "J..."}: attach, detach, cancel, logs. */
const json_t *fx_kjob(struct fx *f, const char *rid, const char *type, int64_t job);
/* submit of a train job of model "m" on data "d" with options (taken; NULL: {}). */
const json_t *fx_ksubmit(struct fx *f, const char *rid, json_t *options);
/* inject action ("preempt", "kill") into instance inst. */
const json_t *fx_kinject(struct fx *f, const char *rid, const char *action, const char *inst);
/* hello; true when the reply was ok. */
bool fx_hello(struct fx *f, const char *rid, const char *token, const char *session);
/* Defines model "m" and data "d" in the client's session (session.set). */
bool fx_define(struct fx *f, const char *rid);
/* Whether reply is there and ok; else the error's code name and message. */
bool fx_ok(const json_t *reply);
const char *fx_err_code(const json_t *reply);
const char *fx_err_msg(const json_t *reply);

#endif
