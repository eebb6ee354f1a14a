/* The kernel/CLI protocol (protocols.md §1): hello with a token, then
 * requests about the notebook session, jobs, instances, the market and
 * cost. Event delivery to attached clients listens on the bus (job events
 * and notebook notices); replies and events go out through the transport
 * the gateway gives it (the kernel ROUTER socket). */
#ifndef GW_KPROTO_H
#define GW_KPROTO_H

#include "bus.h"
#include "conf.h"
#include "fleet.h"
#include "hub.h"
#include "idle.h"
#include "ledger.h"
#include "queue.h"
#include "scheduler.h"
#include "store.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct gw_loop;
struct gw_kproto;
struct gw_budget;
struct gw_uploads;
struct gw_purge;

/* Sends msg (borrowed) to client rid: 0, -EAGAIN when its queue is full,
 * -EHOSTUNREACH when it is gone, or another negative error. */
typedef int (*gw_client_send_fn)(void *ctx, const uint8_t *rid, size_t rid_len, const json_t *msg);

struct gw_kproto_env {
  const struct gw_config *cfg;
  struct gw_store *store;
  struct gw_fleet *fleet;
  struct gw_queue *queue;
  struct gw_sched *sched;
  struct gw_idle *idle;
  struct gw_ledger *ledger;
  struct gw_loop *loop;         /* paced replays run on a timer here */
  gw_client_send_fn send;
  void *send_ctx;
  /* A PAIR socket that receives the kernel socket's ZMQ_EVENT_DISCONNECTED
   * monitor events, or NULL (a transport without connections, as in
   * tests). A routing id whose connection closed may be another peer's
   * next: nothing more goes to it. */
  void *monitor;
  /* [hub]: a token the store does not know is checked with JupyterHub
   * (hub.h); NULL: only the file's tokens. */
  struct gw_hub *hub;
  int64_t started_us;           /* the gateway's start (status) */
  struct gw_budget *budget;     /* monthly budgets (budget.h); NULL: none */
  /* notebooks' data files for workers that cannot read them (uploads.h);
   * NULL: none taken, jobs name the notebook's paths */
  struct gw_uploads *uploads;
  /* the store objects of a deleted session's jobs are removed here (purge.h) */
  struct gw_purge *purge;
};

/* An owned protocol handler (everything in env borrowed), or NULL. */
struct gw_kproto *gw_kproto_new(const struct gw_kproto_env *env);
struct gw_kproto *gw_kproto_free(struct gw_kproto *k);
/* Reads and handles one message from the kernel ROUTER socket, if any. */
void gw_kproto_recv(struct gw_kproto *k, void *sock);
/* Handles one request body (borrowed) from client rid; replies through
 * the transport. What gw_kproto_recv does once a message is parsed. */
void gw_kproto_handle(struct gw_kproto *k, const uint8_t *rid, size_t rid_len, const json_t *body);
/* Reads the monitor's events: forgets the clients whose connection closed.
 * For the loop, when the monitor socket is readable. */
void gw_kproto_drain(struct gw_kproto *k);
/* How many clients are connected now (closed connections forgotten first). */
size_t gw_kproto_n_clients(struct gw_kproto *k);
/* The request handling times by type (metrics.h), borrowed. */
struct gw_metrics_kreq;
const struct gw_metrics_kreq *gw_kproto_request_times(const struct gw_kproto *k);
/* The bus sink (data: the kproto): job events to attached clients,
 * notices to a notebook session's clients. */
void gw_kproto_sink(void *data, const struct gw_bus_event *ev);

#endif
