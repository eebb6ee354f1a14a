/* The client side of the kernel ↔ gateway protocol (docs/internals/protocols.md §1).
 *
 * This module holds the protocol, not the socket: it decides where to connect
 * (SPOTLAB_GATEWAY, %gateway ADDR, or the embedded default
 * ipc://$SPOTLAB_HOME/gateway.sock), says hello with the user's token, numbers
 * requests, matches replies to them, passes events on, enforces timeouts and,
 * for the embedded default only, starts `spotlab-gateway --embedded --daemon`
 * once when nothing answers. The process's socket loop supplies a transport
 * (open/close/send one frame) and feeds received frames to jk_gw_input(); the
 * kernel's channel loop and the spotlab CLI both do so. No zmq.h here. */
#ifndef JK_GWCLIENT_H
#define JK_GWCLIENT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct jk_gw;

/* The socket side, supplied by the process's loop. */
struct jk_gw_transport {
  /* Opens a DEALER connected to address, closing any open one. 0 or negative. */
  int (*open)(void *ud, const char *address);
  void (*close)(void *ud);
  /* Sends one frame (borrowed). 0 or negative. */
  int (*send)(void *ud, const char *data, size_t len);
  /* Sends one frame with more to follow: the next send ends the message.
   * NULL: requests that carry data (jk_gw_request_data) fail. */
  int (*send_more)(void *ud, const char *data, size_t len);
};

/* What the client tells its owner. Calls never happen inside jk_gw_request()
 * or jk_gw_set_*(); they come from jk_gw_input() and jk_gw_tick(). */
struct jk_gw_handler {
  /* The reply to request id: reply is the reply object (borrowed) when one
   * came, error NULL when it says ok. On failure error says why (for people)
   * and reply may be NULL (no answer, connection failed). */
  void (*reply)(void *ud, int64_t id, const json_t *reply, const char *error);
  /* An event object (borrowed) for some job. */
  void (*event)(void *ud, const json_t *event);
  /* The connection became ready (hello accepted), or was lost (why set). */
  void (*state)(void *ud, bool ready, const char *why);
  /* A session notice object (borrowed), e.g. an idle warning; may be NULL. */
  void (*notice)(void *ud, const json_t *notice);
};

struct jk_gw_config {
  const char *client;        /* "kernel" or "cli" */
  const char *session;       /* notebook session, may be NULL (CLI) */
  const char *address;       /* explicit address or NULL for SPOTLAB_GATEWAY / embedded */
  bool may_spawn;            /* may start the embedded gateway (kernel yes, CLI no) */
  int64_t hello_timeout_us;  /* 0: 2 s */
  int64_t spawn_timeout_us;  /* 0: 20 s */
  int64_t request_timeout_us; /* 0: 30 s */
};

enum jk_gw_state { JK_GW_IDLE, JK_GW_CONNECTING, JK_GW_READY, JK_GW_FAILED };

/* Request flags. */
#define JK_GW_SPAWN 1u     /* may start the embedded gateway to serve this request */
#define JK_GW_NO_CONNECT 2u /* fail unless already connected */

/* transport, handler and their userdata are borrowed for the client's life;
 * cfg strings are copied. NULL on OOM. */
struct jk_gw *jk_gw_new(const struct jk_gw_transport *t, void *tud,
                        const struct jk_gw_handler *h, void *hud,
                        const struct jk_gw_config *cfg);
struct jk_gw *jk_gw_free(struct jk_gw *gw);

/* Sends req (taken; "id" is set here) once connected, connecting first when
 * needed. Returns the request id (> 0) or negative (-ENOMEM, SL_ELIMIT when
 * too many requests are outstanding). The answer comes through
 * handler->reply, also for a failure to connect. */
int64_t jk_gw_request(struct jk_gw *gw, json_t *req, unsigned flags);
/* As jk_gw_request, with len bytes of data (copied; len may be 0) sent as
 * the message's second frame (data.put). -ENOTSUP when the transport has no
 * send_more. */
int64_t jk_gw_request_data(struct jk_gw *gw, json_t *req, const void *data, size_t len, unsigned flags);
/* Drops interest in request id: its reply, if it comes, is ignored. */
void jk_gw_forget(struct jk_gw *gw, int64_t id);
/* One received frame (borrowed). Bad input is logged and dropped. */
void jk_gw_input(struct jk_gw *gw, const char *data, size_t len);
/* Monotonic µs at which jk_gw_tick() should run, or INT64_MAX. */
int64_t jk_gw_wake_at_us(const struct jk_gw *gw);
void jk_gw_tick(struct jk_gw *gw);

/* A new explicit address (NULL: back to SPOTLAB_GATEWAY / embedded).
 * Disconnects; pending requests fail. Copies address. 0 or -ENOMEM. */
int jk_gw_set_address(struct jk_gw *gw, const char *address);
/* A new notebook session name; when connected, says hello again with it. */
int jk_gw_set_session(struct jk_gw *gw, const char *session);

enum jk_gw_state jk_gw_state(const struct jk_gw *gw);
/* The address in use or that would be used (borrowed, valid until the next
 * call that changes it). */
const char *jk_gw_address(struct jk_gw *gw);
/* The user name the gateway answered hello with, or NULL. Borrowed. */
const char *jk_gw_user(const struct jk_gw *gw);
/* Why the last connection attempt failed, or "" (borrowed). */
const char *jk_gw_last_error(const struct jk_gw *gw);
/* Whether the address came from the embedded default. */
bool jk_gw_is_embedded(struct jk_gw *gw);

#endif
