/* The boundary between the message core (core.c: the Jupyter protocol) and
 * the interpreter that runs cells (exec.c and its helpers).
 *
 * The core hands requests to the interpreter through struct jk_interp_ops
 * and gives it a struct jk_publisher to answer through; neither sees the
 * other's struct. The core owns the protocol's bookkeeping (queue, status,
 * execution count, history, replies); the interpreter owns the language,
 * the notebook's names and the gateway. One execution runs at a time: after
 * execute(), the interpreter calls publisher->finished() exactly once, at
 * once or later (a cell that sleeps, asks for input or waits on the
 * gateway), and publishes nothing for that execution afterwards. */
#ifndef JK_INTERP_H
#define JK_INTERP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gwclient.h"
#include "history.h"
#include "lang.h"

/* Which cell output goes under. */
enum jk_pub_cell {
  JK_PUB_RUNNING, /* the running execution */
  JK_PUB_LAST,    /* between cells: the last non-silent execution that finished */
};

/* What the core offers the interpreter; every function gets the userdata
 * given to jk_interp_new(). Output functions return 0, or -ENOENT when there
 * is no such cell or its output is not shown (silent): the content is then
 * dropped. Strings are borrowed; json_t arguments are taken. */
struct jk_publisher {
  /* A stream ("stdout" or "stderr"). */
  int (*stream)(void *ud, enum jk_pub_cell cell, const char *name, const char *text);
  /* display_data, or update_display_data when update; data is a MIME
   * bundle; display_id may be NULL (no update possible then). */
  int (*display)(void *ud, enum jk_pub_cell cell, json_t *data, const char *display_id, bool update);
  /* clear_output on the running cell. */
  int (*clear_output)(void *ud, bool wait);
  /* An input_request on stdin for the running cell; the answer comes
   * through jk_interp_ops.input_reply. */
  int (*input_request)(void *ud, const char *prompt, bool password);
  /* The running execution ended: error NULL when it succeeded, with result
   * the MIME bundle of its value (or NULL); otherwise error holds ename,
   * evalue and traceback. */
  void (*finished)(void *ud, json_t *result, json_t *error);
};

struct jk_exec_args {
  const char *code;
  bool silent;        /* nothing is published for it (the core drops it) */
  bool allow_stdin;   /* input() may ask the front end */
  bool terminal;      /* sent by a front end that asked is_complete: a terminal console,
                       * which shows display_data once and ignores its updates */
};

struct jk_interp;

/* The interpreter's entry points, called only by the core. */
struct jk_interp_ops {
  /* Runs a cell (args borrowed for the call). */
  void (*execute)(struct jk_interp *ip, const struct jk_exec_args *args);
  /* execute_request's user_expressions (borrowed): the owned object of results. */
  json_t *(*user_expressions)(struct jk_interp *ip, const json_t *exprs);
  /* The value of an input_reply (borrowed). */
  void (*input_reply)(struct jk_interp *ip, const char *value);
  /* Whether the running execution waits for an input_reply. */
  bool (*awaits_input)(const struct jk_interp *ip);
  /* Ends the running execution, if any, with an error. */
  void (*interrupt)(struct jk_interp *ip);
  /* An execute_request from another front end (another client session)
   * waits behind the running execution: one that only watches a job may
   * end so the request runs (NULL: nothing to do). */
  void (*other_front_end)(struct jk_interp *ip);
  /* The terminal console that sent the running execution is back at its
   * prompt: one that only watches a job ends as on an interrupt (detached,
   * the job runs on); anything else runs on (NULL: nothing to do). */
  void (*terminal_back)(struct jk_interp *ip);
  /* Completion at cursor (code points) into *ret: 0 or negative. */
  int (*complete)(struct jk_interp *ip, const char *code, size_t len, size_t cursor,
                  struct jk_completions *ret);
  /* Help for the word at cursor (code points), owned, or NULL. */
  char *(*inspect)(struct jk_interp *ip, const char *code, size_t len, size_t cursor, int detail);
  enum jk_completeness (*is_complete)(struct jk_interp *ip, const char *code, size_t len);
  /* Gives the interpreter a gateway socket (transport and tud borrowed for
   * its life). 0 or -ENOMEM. */
  int (*set_gateway)(struct jk_interp *ip, const struct jk_gw_transport *t, void *tud);
  /* One frame from the gateway socket (borrowed). */
  void (*gateway_input)(struct jk_interp *ip, const char *data, size_t len);
  /* Monotonic µs at which tick() should run, or INT64_MAX. */
  int64_t (*wake_at_us)(const struct jk_interp *ip);
  void (*tick)(struct jk_interp *ip);
  struct jk_interp *(*free)(struct jk_interp *ip);
};

struct jk_interp_config {
  const char *kernel_id;        /* copied */
  const char *notebook;         /* notebook session name, copied */
  struct jk_history *history;   /* the core's history, borrowed (for %history, %session) */
  bool follows;                 /* notebook is the notebook's path: followed when renamed */
  const char *server_file;      /* the Jupyter server that knows that path (copied), or NULL */
  bool server_named;            /* notebook is that server's answer, not JPY_SESSION_NAME */
};

/* The spotlab interpreter: its ops, and a new one publishing through pub
 * (borrowed with ud for its life). NULL on OOM. */
extern const struct jk_interp_ops jk_spotlab_interp;
struct jk_interp *jk_interp_new(const struct jk_publisher *pub, void *ud,
                                const struct jk_interp_config *cfg);

#endif
