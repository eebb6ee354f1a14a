/* The kernel's message core: answers Jupyter requests and runs cells.
 *
 * The core sees parsed messages and hands back messages to send; it never
 * touches a socket (the channel loop in channels.c owns ZeroMQ), so tests and
 * fuzzers can drive it directly. Shell requests are queued and run one at a
 * time; a statement that waits (sleep, input) leaves the execution pending
 * while control requests (interrupt, shutdown) are still answered. */
#ifndef JK_CORE_H
#define JK_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "connfile.h"
#include "wire.h"

struct jk_core_ops {
  /* Sends msg on ch (replies go to msg->idents; iopub uses them as topic).
   * Takes msg. */
  void (*send)(void *userdata, enum jk_channel ch, struct jk_msg *msg);
  /* Hands every shell message already waiting on the socket to
   * jk_core_handle(), so stop_on_error can abort them. */
  void (*drain_shell)(void *userdata);
  /* Asks the loop to stop once the current message is answered. */
  void (*shutdown)(void *userdata, bool restart);
};

/* The gateway socket (docs/internals/protocols.md §1), called with the
 * core's userdata. gw_open connects a DEALER to address (closing any open
 * one); gw_send sends one frame (borrowed). 0 or negative. */
struct jk_core_gw_ops {
  int (*gw_open)(void *userdata, const char *address);
  void (*gw_close)(void *userdata);
  int (*gw_send)(void *userdata, const char *data, size_t len);
  int (*gw_send_more)(void *userdata, const char *data, size_t len); /* more frames follow */
};

struct jk_core_config {
  const char *kernel_id;      /* this process's id, for headers and default session */
  const char *notebook;       /* notebook session name (JPY_SESSION_NAME) or NULL */
  const char *history_dir;    /* folder for persisted history, NULL for memory only */
  bool follows;               /* notebook is the notebook's path, followed when renamed (rename.h) */
  const char *server_file;    /* the Jupyter server to ask for that path again, or NULL */
  bool server_named;          /* notebook is that server's own answer: its paths are names as they are */
};

struct jk_core;

/* ops and userdata are borrowed for the core's life; cfg strings are copied. */
struct jk_core *jk_core_new(const struct jk_core_ops *ops, void *userdata,
                            const struct jk_core_config *cfg);
struct jk_core *jk_core_free(struct jk_core *core);

/* Takes msg. Control and stdin messages are handled at once; shell requests
 * are queued until jk_core_dispatch(). */
void jk_core_handle(struct jk_core *core, enum jk_channel ch, struct jk_msg *msg);
/* Runs queued shell requests until the queue is empty or one is pending. */
void jk_core_dispatch(struct jk_core *core);
/* Answers a message that was authentic but broke a limit or did not parse
 * (partial holds at least its idents and header). Takes partial. */
void jk_core_reject(struct jk_core *core, enum jk_channel ch, struct jk_msg *partial,
                    const char *reason);
/* Gives the core a gateway socket (ops borrowed for the core's life) and
 * starts loading the notebook session's state in the background. Without
 * this, gateway statements answer GatewayUnavailable. 0 or -ENOMEM. */
int jk_core_set_gateway(struct jk_core *core, const struct jk_core_gw_ops *ops);
/* One frame received on the gateway socket (borrowed). */
void jk_core_gateway_input(struct jk_core *core, const char *data, size_t len);
/* Monotonic time (µs) at which jk_core_tick() should run, or INT64_MAX. */
int64_t jk_core_wake_at_us(const struct jk_core *core);
void jk_core_tick(struct jk_core *core);
/* Whether the running execution's input_request is still unanswered. */
bool jk_core_awaits_input(const struct jk_core *core);
/* Interrupts the running execution, if any (interrupt_request or SIGINT). */
void jk_core_interrupt(struct jk_core *core);

#endif
