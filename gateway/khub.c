/* The kernel protocol's hellos waiting for JupyterHub (protocols.md §1).
 *
 * On a hub ([hub], hub.h), a token the file does not know may be a
 * JupyterHub token: the hello waits (a pending hello, its routing id, its
 * connection and its request id kept) while the hub is asked on the loop,
 * and is answered when the hub answers. A pending hello goes with its
 * connection, or with a newer hello from its routing id. At most
 * PENDING_MAX wait at once. */
#include "kproto_int.h"

#include "sl_err.h"
#include "sl_log.h"

#include <stdio.h>
#include <string.h>

/* Frees a pending hello's slot (its check, if any, is the caller's). */
static void pending_drop(struct gw_kpending *p) {
  json_decref(p->id);
  memset(p, 0, sizeof *p);
}

void gw_kproto_pending_forget(struct gw_kproto *g, const uint8_t *rid, size_t rid_len, int fd) {
  for (size_t i = 0; i < PENDING_MAX; i++) {
    struct gw_kpending *p = &g->pending[i];
    if (!p->used || !((rid && p->rid_len == rid_len && !memcmp(p->rid, rid, rid_len)) ||
                      (fd >= 0 && p->fd == fd)))
      continue;
    gw_hub_cancel(g->env.hub, p->check);
    pending_drop(p);
  }
}

void gw_kproto_pending_clear(struct gw_kproto *g) {
  for (size_t i = 0; i < PENDING_MAX; i++)
    if (g->pending[i].used) {
      gw_hub_cancel(g->env.hub, g->pending[i].check);
      pending_drop(&g->pending[i]);
    }
}

/* The hub answered a pending hello's token. */
static void hub_checked(void *data, int err, const struct gw_hub_who *who, const char *msg) {
  struct gw_kpending *p = data;
  struct gw_kproto *g = p->g;
  p->check = 0;    /* reported: nothing left to cancel */
  gw_kproto_drain(g); /* drops p if its connection closed: its routing id may be another's */
  if (!p->used)
    return;
  struct gw_kreq q = {.g = g, .rid = p->rid, .rid_len = p->rid_len, .fd = p->fd, .id = p->id};
  if (err < 0) {
    LOG_LIMITED(g, log_auth, SL_LOG_WARN, "hello refused: %s", msg);
    gw_kproto_fail(&q, err, msg);
  } else {
    gw_kproto_hello_accept(&q, who->user, p->session, p->client, ", JupyterHub token");
  }
  pending_drop(p);
}

void gw_kproto_hub_hello(struct gw_kreq *q, const char *token, const char *session,
                         const char *client) {
  if (!q->g->env.hub) {
    LOG_LIMITED(q->g, log_auth, SL_LOG_WARN, "hello refused: unknown token");
    return gw_kproto_fail(q, SL_EAUTH, "unknown token");
  }
  struct gw_kpending *p = NULL;
  for (size_t i = 0; !p && i < PENDING_MAX; i++)
    if (!q->g->pending[i].used)
      p = &q->g->pending[i];
  if (!p) {
    LOG_LIMITED(q->g, log_hello, SL_LOG_WARN, "hello refused: %d hub token checks in flight",
                PENDING_MAX);
    return gw_kproto_fail(q, SL_ELIMIT,
                          "the gateway is checking many tokens with JupyterHub; try again");
  }
  struct gw_hub_who who;
  uint64_t check = 0;
  int r = gw_hub_check(q->g->env.hub, token, hub_checked, p, &who, &check);
  if (r == 1)
    return gw_kproto_hello_accept(q, who.user, session, client, ", JupyterHub token");
  if (r == SL_EAUTH) {
    LOG_LIMITED(q->g, log_auth, SL_LOG_WARN, "hello refused: unknown token");
    return gw_kproto_fail(q, SL_EAUTH,
                          "unknown token (neither the gateway's nor one JupyterHub could issue)");
  }
  if (r < 0) {
    LOG_LIMITED(q->g, log_hello, SL_LOG_WARN, "hello refused: cannot ask JupyterHub: %s",
                sl_strerror(r));
    return gw_kproto_fail(q, r, r == SL_ELIMIT
                          ? "the gateway is checking many tokens with JupyterHub; try again"
                          : "the gateway cannot check the token with JupyterHub");
  }
  *p = (struct gw_kpending){.used = true, .g = q->g, .check = check, .rid_len = q->rid_len,
                            .fd = q->fd, .id = q->id ? json_incref(q->id) : NULL};
  memcpy(p->rid, q->rid, q->rid_len);
  snprintf(p->session, sizeof p->session, "%s", session);
  snprintf(p->client, sizeof p->client, "%s", client);
}
