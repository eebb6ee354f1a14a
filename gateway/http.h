/* The gateway's HTTP server on [gateway] http: the JSON API under /api/
 * and /metrics. libmicrohttpd runs in external-select mode on the
 * gateway's own loop (its epoll descriptor and its timeout are registered
 * there), so requests are answered on the loop's thread like every other
 * message and no lock guards the gateway's state. */
#ifndef GW_HTTP_H
#define GW_HTTP_H

#include "conf.h"
#include "fleet.h"
#include "kproto.h"
#include "ledger.h"
#include "loop.h"
#include "queue.h"
#include "store.h"

#include <stddef.h>
#include <stdint.h>

struct gw_webhooks;

struct gw_httpd;
struct gw_metrics_tally;
struct gw_budget;

struct gw_httpd_env {
  const struct gw_config *cfg;  /* cfg->http is the address */
  struct gw_store *store;
  struct gw_fleet *fleet;
  struct gw_ledger *ledger;
  struct gw_kproto *kproto;     /* connected clients (status, metrics) */
  struct gw_loop *loop;
  int64_t started_us;
  const struct gw_metrics_tally *tally; /* /metrics' counters from the bus; NULL: left out */
  struct gw_budget *budget;     /* /api/budgets; NULL: none */
  const struct gw_webhooks *webhooks; /* their counters in /metrics; NULL: none */
};

/* Listens on env->cfg->http (everything in env borrowed) and writes the
 * bound HOST:PORT to STATE_DIR/http.address. Returns 0 and an owned server
 * in *ret, or a negative error with err set (the address is taken, say). */
int gw_httpd_new(const struct gw_httpd_env *env, struct gw_httpd **ret, char *err, size_t err_size);
struct gw_httpd *gw_httpd_free(struct gw_httpd *h);
/* The port it listens on. */
int gw_httpd_port(const struct gw_httpd *h);

#endif
