/* The kernel protocol's client table (protocols.md §1): hello, the
 * per-connection secret, the per-user connection limit, and forgetting
 * closed connections.
 *
 * A client says hello with a valid token before anything else; the reply
 * gives it a random secret ("auth") that every later request carries. A
 * request counts as the client's only when it comes from the routing id that
 * said hello AND carries that secret (compared in constant time): a routing
 * id is chosen by the peer, and another peer may take it once the client
 * disconnects, so the id alone proves nothing. A request from a known
 * routing id without the right secret means the peer behind it changed: the
 * entry is forgotten. So is the entry of a connection that closed (the
 * socket monitor says so, and it is read before every message in or out),
 * so nothing (events, notices) goes to a routing id once another peer may
 * hold it.
 *
 * Each user holds at most max_clients_per_user entries: a hello beyond that
 * forgets that user's least recently active one, never another user's. */
#include "kproto_int.h"

#include "config.h"
#include "sl_err.h"
#include "sl_hmac.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>
#include <zmq.h>

static struct gw_client *client_find(struct gw_kproto *g, const uint8_t *rid, size_t len) {
  if (!len)
    return NULL;
  for (size_t i = 0; i < g->n_clients; i++)
    if (g->clients[i].rid_len == len && !memcmp(g->clients[i].rid, rid, len))
      return &g->clients[i];
  return NULL;
}

void gw_kproto_client_forget(struct gw_client *c) {
  sodium_memzero(c, sizeof *c);
}

/* Forgets the clients whose connection the monitor says closed. Read
 * before each message in and out: the monitor's event comes before the
 * socket frees the routing id for another peer, so what goes out after a
 * drain never reaches a peer that took a closed client's routing id. */
void gw_kproto_drain(struct gw_kproto *g) {
  if (!g->env.monitor)
    return;
  for (;;) {
    uint8_t ev[6];
    int n = zmq_recv(g->env.monitor, ev, sizeof ev, ZMQ_DONTWAIT);
    if (n < 0)
      return;
    int more = 0;
    size_t more_len = sizeof more;
    char addr[8];
    while (zmq_getsockopt(g->env.monitor, ZMQ_RCVMORE, &more, &more_len) == 0 && more)
      zmq_recv(g->env.monitor, addr, sizeof addr, 0); /* the endpoint: not needed */
    uint16_t event;
    uint32_t fd;
    if (n < 6)
      continue;
    memcpy(&event, ev, sizeof event);
    memcpy(&fd, ev + 2, sizeof fd);
    if (!(event & ZMQ_EVENT_DISCONNECTED))
      continue;
    gw_kproto_pending_forget(g, NULL, 0, (int)fd);
    for (size_t i = 0; i < g->n_clients; i++)
      if (g->clients[i].rid_len && g->clients[i].fd >= 0 && (uint32_t)g->clients[i].fd == fd)
        gw_kproto_client_forget(&g->clients[i]);
  }
}

/* Whether auth (from a request, may be NULL) is c's secret. */
static bool client_auth_ok(const struct gw_client *c, const char *auth) {
  return auth && strlen(auth) == AUTH_HEX && sodium_memcmp(c->auth, auth, AUTH_HEX) == 0;
}

struct gw_client *gw_kproto_client_of(struct gw_kproto *g, const uint8_t *rid, size_t rid_len,
                                      const char *auth) {
  struct gw_client *c = client_find(g, rid, rid_len);
  if (c && !client_auth_ok(c, auth)) {
    /* the routing id said hello, but the peer behind it now does not hold
     * its secret: the connection that said hello is gone */
    gw_kproto_client_forget(c);
    c = NULL;
  }
  return c;
}

/* A free slot, growing the table up to GW_MAX_CLIENTS; NULL when full.
 * Moves the table: no slot pointer survives a call. */
static struct gw_client *client_slot(struct gw_kproto *g) {
  for (size_t i = 0; i < g->n_clients; i++)
    if (!g->clients[i].rid_len)
      return &g->clients[i];
  if (g->n_clients == g->cap_clients) {
    size_t cap = g->cap_clients * 2;
    if (cap > GW_MAX_CLIENTS)
      cap = GW_MAX_CLIENTS;
    if (cap == g->cap_clients)
      return NULL;
    struct gw_client *t = realloc(g->clients, cap * sizeof *t);
    if (!t)
      return NULL;
    g->clients = t;
    g->cap_clients = cap;
  }
  struct gw_client *c = &g->clients[g->n_clients++];
  memset(c, 0, sizeof *c);
  return c;
}

/* Makes room for one more entry of user: at max_clients_per_user, forgets
 * the user's least recently active entry (a kernel that went away without
 * a word leaves its entry behind; a flood of hellos only churns its own). */
static void client_limit(struct gw_kproto *g, const char *user) {
  int64_t limit = g->env.cfg->max_clients_per_user > 0 ? g->env.cfg->max_clients_per_user : 256;
  struct gw_client *oldest = NULL;
  int64_t n = 0;
  for (size_t i = 0; i < g->n_clients; i++) {
    struct gw_client *c = &g->clients[i];
    if (!c->rid_len || strcmp(c->who.user, user))
      continue;
    n++;
    if (!oldest || c->last_mono_us < oldest->last_mono_us)
      oldest = c;
  }
  if (n < limit || !oldest)
    return;
  LOG_LIMITED(g, log_hello, SL_LOG_WARN,
              "%s holds %lld connections ([gateway] max_clients_per_user): forgot their least"
              " recently active one", user, (long long)n);
  gw_kproto_client_forget(oldest);
}

/* A new entry with a new secret. */
void gw_kproto_hello_accept(struct gw_kreq *q, const char *user, const char *session,
                            const char *client, const char *how) {
  /* a new hello from a routing id starts over: what the entry held goes */
  struct gw_client *c = client_find(q->g, q->rid, q->rid_len);
  if (c)
    gw_kproto_client_forget(c);
  client_limit(q->g, user);
  if (!(c = client_slot(q->g))) {
    LOG_LIMITED(q->g, log_hello, SL_LOG_WARN, "hello from %s refused: %d connections held", user,
                GW_MAX_CLIENTS);
    return gw_kproto_fail(q, SL_ELIMIT, "the gateway holds too many connections; try again later");
  }
  uint8_t secret[AUTH_BYTES];
  randombytes_buf(secret, sizeof secret);
  sodium_bin2hex(c->auth, sizeof c->auth, secret, sizeof secret);
  sodium_memzero(secret, sizeof secret);
  memcpy(c->rid, q->rid, q->rid_len);
  c->rid_len = q->rid_len;
  c->fd = q->fd;
  gw_access_viewer(&c->who, q->g->env.cfg, user);
  snprintf(c->session, sizeof c->session, "%s", session);
  c->last_mono_us = sl_time_mono_us();
  if (*session) {
    gw_store_session_touch(q->g->env.store, user, session, sl_time_real_us());
    gw_idle_touch(q->g->env.idle, user, session);
  }
  const char *group = gw_config_user_group(q->g->env.cfg, user);
  LOG_LIMITED(q->g, log_hello, SL_LOG_INFO, "hello from %s%s%s%s (%.16s, session \"%.64s\")", user,
              how, group ? ", group " : "", group ? group : "", client, session);
  q->c = c; /* the secret goes to this connection only (reply checks it is still there) */
  json_t *r = json_pack("{s:s,s:s,s:s,s:s,s:b}", "user", user, "session", session, "gateway",
                        SPOTLAB_VERSION, "auth", c->auth, "admin", c->who.admin);
  if (r && group)
    json_object_set_new(r, "group", json_string(group));
  gw_kproto_reply(q, r);
}

void gw_kproto_on_hello(struct gw_kreq *q) {
  const char *token = sl_json_get_str(q->body, "token", NULL);
  const char *session = sl_json_get_str(q->body, "session", "");
  const char *client = sl_json_get_str(q->body, "client", "client");
  char user[64], hash[SL_HMAC_HEX_LEN + 1];
  if (!token || !*token)
    return gw_kproto_fail(q, SL_EAUTH, "a token is required");
  if (strlen(token) > GW_TOKEN_MAX) { /* no token is that long */
    char why[96];
    snprintf(why, sizeof why, "the token is too long (%zu bytes; a token has at most %d)", strlen(token),
             GW_TOKEN_MAX);
    return gw_kproto_fail(q, SL_EAUTH, why);
  }
  if (strlen(session) >= sizeof q->c->session)
    return gw_kproto_fail(q, SL_ELIMIT, "session name too long");
  if (!q->rid_len || q->rid_len > GW_RID_MAX)
    return gw_kproto_fail(q, SL_EWIRE, "no routing id to answer to");
  gw_kproto_pending_forget(q->g, q->rid, q->rid_len, -1); /* a newer hello replaces a waiting one */
  sl_sha256_hex(token, strlen(token), hash);
  int r = gw_store_user_by_token(q->g->env.store, hash, user, sizeof user);
  if (r == 0)
    return gw_kproto_hello_accept(q, user, session, client, "");
  if (r != SL_EAUTH)
    return gw_kproto_fail(q, r, "cannot read the gateway's users");
  gw_kproto_hub_hello(q, token, session, client);
}

size_t gw_kproto_n_clients(struct gw_kproto *g) {
  gw_kproto_drain(g);
  size_t n = 0;
  for (size_t i = 0; i < g->n_clients; i++)
    n += g->clients[i].rid_len > 0;
  return n;
}
