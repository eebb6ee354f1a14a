/* Internal to the interpreter (exec.c, magics.c, jobs.c, jobs_magics.c): its
 * state and the handlers the command table (commands.def) names. Not for the
 * core. */
#ifndef JK_INTERP_INT_H
#define JK_INTERP_INT_H

#include "display.h"
#include "gwclient.h"
#include "history.h"
#include "interp.h"
#include "lang.h"
#include "session.h"
#include "state.h"

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
  struct jk_cell *cell;
  size_t pc;
  bool silent, allow_stdin;
  bool terminal;               /* its front end ignores display updates (jk_exec_args) */
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

/* What the cell runner (exec.c) tells the statements that go through the
 * gateway (jobs.c), built on it: wired by interp.c, so the runner never
 * calls up into them. */
struct jk_exec_hooks {
  void (*cell_started)(struct jk_interp *ip);  /* a cell begins */
  void (*cell_finished)(struct jk_interp *ip); /* it ended: whatever it followed is let go */
  void (*interrupted)(struct jk_interp *ip);   /* a wait on the gateway was interrupted */
};

struct jk_interp {
  const struct jk_exec_hooks *exec_hooks;
  const struct jk_publisher *pub;
  void *pub_ud;
  struct jk_history *history;  /* the core's (borrowed) */
  char *kernel_id;
  char *notebook;
  bool follows;                /* notebook is the notebook's path (not %session's): renames followed */
  struct jk_rename *rename;    /* asks the Jupyter server for that path again; NULL: none known */
  char *rename_prefix;         /* what the name has before the server's path; NULL: not known yet */
  char *gateway;               /* %gateway ADDR, or SPOTLAB_GATEWAY */
  /* While %gateway ADDR waits for ADDR's answer: the address it replaced
   * (NULL: the default), put back when ADDR cannot be reached. */
  bool gateway_switching;
  char *gateway_before;
  struct jk_state *state;
  struct jk_gw *gw;            /* NULL when the loop supplies no gateway transport */
  struct jk_session *session;  /* with gw only */
  struct jk_execution *running;
  bool cell_ran;               /* a non-silent cell finished: notices go under it */
  int64_t ping_at_us;          /* next keepalive while following a job */
  char pending_notice[1024];   /* session notices that came before any cell ran */
  struct jk_display *last_display; /* the job display shown last, kept after its cell (jobs.c) */
  bool last_attached;          /* its job is still followed: its events update it in place */
};

typedef enum jk_step (*jk_stmt_fn)(struct jk_interp *ip, const struct jk_stmt *s);

/* ---- exec.c ---- */
/* The ops of the same names (interp.h). */
void jk_exec_execute(struct jk_interp *ip, const struct jk_exec_args *args);
void jk_exec_input_reply(struct jk_interp *ip, const char *value);
bool jk_exec_awaits_input(const struct jk_interp *ip);
void jk_exec_interrupt(struct jk_interp *ip);
json_t *jk_exec_user_expressions(struct jk_interp *ip, const json_t *exprs);
/* Frees a running execution without finishing it (the interpreter's end). */
void jk_exec_free_running(struct jk_interp *ip);
/* Resumes a sleep that is over. */
void jk_exec_wake(struct jk_interp *ip);
/* Starts the execution parked on JK_WAIT_SESSION. */
void jk_exec_session_ready(struct jk_interp *ip);
/* Records the running statement's error; returns JK_STEP_ERROR. */
enum jk_step jk_exec_fail(struct jk_interp *ip, const char *ename, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void jk_exec_stream(struct jk_interp *ip, const char *name, const char *text);
/* Continues the pending execution after an asynchronous statement ended. */
void jk_exec_step_ended(struct jk_interp *ip, enum jk_step st);
/* A GatewayUnavailable error for a kernel without a gateway transport. */
enum jk_step jk_exec_needs_gateway(struct jk_interp *ip, const char *what);
/* Evaluates statement options into ret_obj (bare words stay strings). */
enum jk_step jk_exec_eval_options(struct jk_interp *ip, const struct jk_option *opts, size_t n,
                                  json_t *ret_obj);
/* show NAME; extra (may be NULL) is appended as more lines. */
enum jk_step jk_exec_show(struct jk_interp *ip, const struct jk_stmt *s, const char *extra);

/* Statement handlers (commands.def). */
enum jk_step jk_stmt_define(struct jk_interp *ip, const struct jk_stmt *s);
enum jk_step jk_stmt_show(struct jk_interp *ip, const struct jk_stmt *s);
enum jk_step jk_stmt_print(struct jk_interp *ip, const struct jk_stmt *s);
enum jk_step jk_stmt_sleep(struct jk_interp *ip, const struct jk_stmt *s);
enum jk_step jk_stmt_assign(struct jk_interp *ip, const struct jk_stmt *s);
enum jk_step jk_stmt_expr(struct jk_interp *ip, const struct jk_stmt *s);

/* ---- magics.c: magics that read or change this kernel ---- */
enum jk_step jk_magic_status(struct jk_interp *ip, const struct jk_stmt *s);
enum jk_step jk_magic_session(struct jk_interp *ip, const struct jk_stmt *s);
enum jk_step jk_magic_gateway(struct jk_interp *ip, const struct jk_stmt *s);
enum jk_step jk_magic_who(struct jk_interp *ip, const struct jk_stmt *s);
enum jk_step jk_magic_help(struct jk_interp *ip, const struct jk_stmt *s);
enum jk_step jk_magic_version(struct jk_interp *ip, const struct jk_stmt *s);
enum jk_step jk_magic_history(struct jk_interp *ip, const struct jk_stmt *s);
enum jk_step jk_magic_stderr(struct jk_interp *ip, const struct jk_stmt *s);
enum jk_step jk_magic_clear(struct jk_interp *ip, const struct jk_stmt *s);

/* ---- jobs.c, jobs_magics.c: statements through the gateway (ip->gw set) ---- */
/* Another front end's cell waits: a cell that follows a job ends (the job
 * keeps running and its display keeps updating). */
void jk_jobs_other_front_end(struct jk_interp *ip);
/* train, eval, sample, %%run */
enum jk_step jk_stmt_job(struct jk_interp *ip, const struct jk_stmt *s);
/* %status (connected), %idle, %jobs, %cost, %instances, %cancel, %logs */
enum jk_step jk_magic_query(struct jk_interp *ip, const struct jk_stmt *s);
enum jk_step jk_magic_attach(struct jk_interp *ip, const struct jk_stmt *s);
enum jk_step jk_magic_rerun(struct jk_interp *ip, const struct jk_stmt *s);
/* The gateway parts of %session NAME and %gateway ADDR. */
enum jk_step jk_jobs_session(struct jk_interp *ip);
enum jk_step jk_jobs_gateway(struct jk_interp *ip, const char *address);
/* show MODEL with what the gateway knows of its training. */
enum jk_step jk_jobs_show(struct jk_interp *ip, const struct jk_stmt *s);
void jk_jobs_reply(struct jk_interp *ip, int64_t id, const json_t *reply, const char *error);
void jk_jobs_event(struct jk_interp *ip, const json_t *event);
void jk_jobs_reattach(struct jk_interp *ip);
/* The connection to the gateway is lost (why): a cell following a job says
 * so, once until it is back. */
void jk_jobs_gateway_lost(struct jk_interp *ip, const char *why);
/* A session notice between cells (borrowed): folded into the timeline of the
 * last job display, which is updated in place. */
void jk_jobs_notice(struct jk_interp *ip, const json_t *notice);
/* A budget notice in the running cell's live job display, if it has one. */
void jk_jobs_notice_running(struct jk_interp *ip, const json_t *notice);
/* A cell starts: tells a connected gateway the notebook is active (ping). */
void jk_jobs_cell_started(struct jk_interp *ip);
/* Interrupt of a statement waiting on the gateway: records the error (a
 * detach for a followed job). */
void jk_jobs_interrupt(struct jk_interp *ip);
int64_t jk_jobs_wake_at_us(const struct jk_interp *ip);
void jk_jobs_tick(struct jk_interp *ip);
void jk_jobs_free_follow(struct jk_interp *ip);

#endif
