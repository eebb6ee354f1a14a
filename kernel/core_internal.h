/* Shared between core.c (protocol) and exec.c (running cells): the core's
 * state. Not for use outside the kernel's message core. */
#ifndef JK_CORE_INTERNAL_H
#define JK_CORE_INTERNAL_H

#include "core.h"
#include "display.h"
#include "gwclient.h"
#include "history.h"
#include "lang.h"

struct jk_var {
  char *name;
  struct jk_value value;
};

/* A model or data definition of the notebook session. */
struct jk_def {
  char *name;
  char *kind;      /* "model" or "data" */
  json_t *spec;    /* {"type":"gpt","options":{...}} */
};

enum jk_wait {
  JK_WAIT_NONE,
  JK_WAIT_SLEEP,
  JK_WAIT_INPUT,
  JK_WAIT_SESSION, /* the session state is still loading; the cell has not started */
  JK_WAIT_GATEWAY, /* a gateway reply (gw_req) */
  JK_WAIT_JOB,     /* following a job until it ends (follow) */
};

/* How a statement ended: done, waiting (the execution stays pending), failed. */
enum jk_step { JK_STEP_DONE, JK_STEP_WAIT, JK_STEP_ERROR };

/* A job the running cell follows (jobs.c). */
struct jk_follow;

struct jk_execution {
  struct jk_msg *request;      /* the execute_request being run */
  struct jk_cell *cell;
  size_t pc;
  bool silent, store_history, stop_on_error, allow_stdin;
  int64_t count;
  struct jk_value result;      /* of a bare expression as last statement */
  bool has_result;
  enum jk_wait wait;
  int64_t wake_at_us;
  char *input_target;          /* variable that receives input_reply */
  json_t *error;               /* ename/evalue/traceback of a failed statement */
  int64_t gw_req;              /* the gateway request the statement waits for, 0 none */
  int gw_op;                   /* what its reply continues (jobs.c) */
  struct jk_follow *follow;    /* the job the statement follows, or NULL */
};

struct jk_core {
  const struct jk_core_ops *ops;
  void *userdata;
  char *kernel_id;
  char *notebook;
  struct jk_history *history;
  int64_t execution_count;
  struct jk_msg **queue;       /* shell requests waiting */
  size_t q_head, q_len, q_cap;
  struct jk_execution *running;
  struct jk_var *vars;
  size_t n_vars;
  struct jk_def *defs;
  size_t n_defs;
  char *gateway;               /* %gateway ADDR, or SPOTLAB_GATEWAY */
  const struct jk_core_gw_ops *gw_ops;
  struct jk_gw *gw;            /* NULL when the loop supplies no gateway transport */
  /* session state sync (session.c) */
  char **dirty;                /* names changed since the last session.set */
  size_t n_dirty;
  char **inflight;             /* names of the session.set in flight */
  size_t n_inflight;
  int64_t sess_load_id, sess_set_id;
  int64_t sess_retry_at_us;    /* after a failed load or set: next try at a cell's end */
  bool sess_loading;           /* the first session.get has not answered yet */
  bool sess_applying;          /* loading: changes are not dirty */
  json_t *models;              /* session.get "models": name -> {job, step, checkpoint} */
  int64_t ping_at_us;          /* next keepalive while following a job */
  char pending_notice[1024];   /* session notices that came before any cell ran */
  struct jk_msg *last_request; /* the last non-silent execute_request, kept after it ended */
  struct jk_display *last_display; /* the job display shown last, kept after its cell (jobs.c) */
};

/* core.c */
void jk_core_publish(struct jk_core *core, const struct jk_msg *parent, const char *msg_type,
                     json_t *content);
void jk_core_reply(struct jk_core *core, enum jk_channel ch, const struct jk_msg *request,
                   const char *msg_type, json_t *content);
void jk_core_set_status(struct jk_core *core, const struct jk_msg *parent, const char *state);
/* Aborts queued execute requests (stop_on_error), after draining the socket. */
void jk_core_abort_queued(struct jk_core *core);

/* exec.c */
/* A session notice from the gateway (borrowed): a stderr line on the running
 * cell; between cells, a stderr line on the cell that ran last and an entry in
 * the last job display's timeline; kept for the start of the next cell's
 * output only when no cell ran yet. */
void jk_exec_notice(struct jk_core *core, const json_t *notice);
/* Records the running statement's error; returns JK_STEP_ERROR. */
enum jk_step jk_exec_fail(struct jk_core *core, const char *ename, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void jk_exec_stream(struct jk_core *core, const char *name, const char *text);
/* Continues the pending execution after an asynchronous statement ended. */
void jk_exec_step_ended(struct jk_core *core, enum jk_step st);
/* Starts the execution parked on JK_WAIT_SESSION. */
void jk_exec_session_ready(struct jk_core *core);
/* A GatewayUnavailable error for a kernel without a gateway transport. */
enum jk_step jk_exec_needs_gateway(struct jk_core *core, const char *what);
/* Evaluates statement options into ret_obj (bare words stay strings). */
enum jk_step jk_exec_eval_options(struct jk_core *core, const struct jk_option *opts, size_t n,
                                  json_t *ret_obj);
/* show NAME; extra (may be NULL) is appended as more lines. */
enum jk_step jk_exec_show(struct jk_core *core, const struct jk_stmt *s, const char *extra);
/* magics.c: runs a line magic. */
enum jk_step jk_exec_line_magic(struct jk_core *core, const struct jk_stmt *s);
/* Take value / spec. 0 or negative. */
int jk_exec_set_var(struct jk_core *core, const char *name, struct jk_value *value);
int jk_exec_set_def(struct jk_core *core, const char *name, const char *kind, json_t *spec);
void jk_exec_clear_state(struct jk_core *core);
struct jk_var *jk_exec_find_var(struct jk_core *core, const char *name);
struct jk_def *jk_exec_find_def(struct jk_core *core, const char *name);
/* "gpt(layers=4)": a definition as the language writes it. Owned. */
char *jk_exec_format_spec(const json_t *spec);
/* Starts running an execute_request (takes req). */
void jk_exec_start(struct jk_core *core, struct jk_msg *req);
/* Continues a pending execution after its wait ended. */
void jk_exec_resume(struct jk_core *core);
void jk_exec_input_reply(struct jk_core *core, const struct jk_msg *reply);
void jk_exec_interrupt(struct jk_core *core);
const struct jk_value *jk_exec_lookup(void *core, const char *name);
/* Names of variables, models and data for completion; owned array of borrowed strings. */
const char **jk_exec_names(struct jk_core *core, size_t *ret_n);
/* Text describing a name (for inspect), owned, or NULL. */
char *jk_exec_describe(struct jk_core *core, const char *name);
json_t *jk_exec_user_expressions(struct jk_core *core, const json_t *exprs);
void jk_exec_free_state(struct jk_core *core);

/* session.c: notebook state in the gateway */
void jk_session_touch(struct jk_core *core, const char *name);
/* Sends session.set with the changed names, if any (connecting, never
 * starting a gateway). */
void jk_session_flush(struct jk_core *core);
/* At the end of a cell: jk_session_flush(), unless the gateway was found
 * down less than a retry interval ago (the changes are then kept). */
void jk_session_cell_done(struct jk_core *core);
/* Asks for session.get (at start; never starts a gateway). */
void jk_session_load(struct jk_core *core);
/* Loads a session.get reply into the core. switched: after %session NAME,
 * stored names win over local ones and local-only names are marked to join. */
void jk_session_apply(struct jk_core *core, const json_t *reply, bool switched);
/* Handles replies to session requests; false if id is not one. */
bool jk_session_reply(struct jk_core *core, int64_t id, const json_t *reply, const char *error);
void jk_session_free(struct jk_core *core);
json_t *jk_value_to_json(const struct jk_value *v);
int jk_value_from_json(const json_t *j, struct jk_value *ret);

/* jobs.c: statements through the gateway */
enum jk_step jk_jobs_stmt(struct jk_core *core, const struct jk_stmt *s);
enum jk_step jk_jobs_magic(struct jk_core *core, const struct jk_stmt *s, bool *ret_handled);
enum jk_step jk_jobs_show(struct jk_core *core, const struct jk_stmt *s);
void jk_jobs_reply(struct jk_core *core, int64_t id, const json_t *reply, const char *error);
void jk_jobs_event(struct jk_core *core, const json_t *event);
void jk_jobs_reattach(struct jk_core *core);
/* A session notice between cells (borrowed): folded into the timeline of the
 * last job display, which is updated in place. */
void jk_jobs_notice(struct jk_core *core, const json_t *notice);
/* A cell starts: tells a connected gateway the notebook is active (ping). */
void jk_jobs_cell_started(struct jk_core *core);
/* Interrupt of a statement waiting on the gateway: detaches. */
void jk_jobs_interrupt(struct jk_core *core);
int64_t jk_jobs_wake_at_us(const struct jk_core *core);
void jk_jobs_tick(struct jk_core *core);
void jk_jobs_free_follow(struct jk_core *core);

#endif
