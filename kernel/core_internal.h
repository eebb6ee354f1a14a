/* Shared between core.c (protocol) and exec.c (running cells): the core's
 * state. Not for use outside the kernel's message core. */
#ifndef JK_CORE_INTERNAL_H
#define JK_CORE_INTERNAL_H

#include "core.h"
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

enum jk_wait { JK_WAIT_NONE, JK_WAIT_SLEEP, JK_WAIT_INPUT };

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

#endif
