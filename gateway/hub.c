/* JupyterHub tokens for hello (hub.h).
 *
 * A check asks GET {api}/user with "Authorization: token T". JupyterHub
 * answers any valid token with its owner's model, name and groups included
 * (the identify scopes every token holds); a service's token answers kind
 * "service" and is refused, as is anything the hub does not know (401, 403).
 *
 * Invariants: the token itself is kept nowhere: the cache is keyed by its
 * SHA-256, the request's header buffer is wiped once the HTTP client has
 * copied it, and no message names it. Every table is bounded: checks in
 * flight (the HTTP client's own limit), cached answers (the oldest goes),
 * and the users whose group the hub told (a user beyond it keeps the
 * gateway's [idle] values until a place frees, which never happens while
 * the gateway runs: the bound is far above any hub's user count). */
#include "hub.h"
#include "hub_int.h"

#include "httpc.h"

#include "sl_err.h"
#include "sl_hmac.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>

#define T "gateway.hub"
#define CHECKS_MAX SL_HTTP_MULTI_MAX
#define CACHE_MAX 1024
#define USERS_MAX 8192
#define TOKEN_MAX 1024
#define REPLY_MAX_BYTES 65536   /* a user model with many groups and servers */

struct check {
  uint64_t id;                  /* the HTTP transfer; 0: a free slot */
  char hash[SL_HMAC_HEX_LEN + 1];
  gw_hub_done_fn done;
  void *data;
  struct gw_hub *hub;
};

struct cached {
  char hash[SL_HMAC_HEX_LEN + 1];  /* "": a free slot */
  struct gw_hub_who who;
  int64_t until_mono_us;
};

struct user_group {
  char user[GW_HUB_USER_MAX];
  char group[GW_NAME_MAX];
};

struct gw_hub {
  const struct gw_config *cfg;
  struct gw_httpc *http;
  char url[sizeof ((struct gw_config *)0)->hub_url];  /* without a trailing '/' */
  struct check checks[CHECKS_MAX];
  struct cached cache[CACHE_MAX];
  struct user_group *users;
  size_t n_users;
};

int gw_hub_new(const struct gw_config *cfg, struct gw_httpc *http, struct gw_hub **ret,
               char *err, size_t err_size) {
  *ret = NULL;
  if (!cfg->hub)
    return 0;
  const char *url = cfg->hub_url[0] ? cfg->hub_url : getenv("JUPYTERHUB_API_URL");
  const char *from = cfg->hub_url[0] ? "[hub] url" : "JUPYTERHUB_API_URL";
  if (!url || !*url) {
    snprintf(err, err_size, "[hub]: no url, and JUPYTERHUB_API_URL is not set (a hub-managed"
             " service has it; else set [hub] url = http://HUB:8081/hub/api)");
    return SL_ECONFIG;
  }
  char why[300];
  if (strlen(url) >= sizeof ((struct gw_hub *)0)->url || gw_conf_check_hook_url(url, why, sizeof why) < 0) {
    snprintf(err, err_size, "%s = \"%.200s\" is not an http:// or https:// URL", from, url);
    return SL_ECONFIG;
  }
  struct gw_hub *h = calloc(1, sizeof *h);
  if (!h || !(h->users = calloc(USERS_MAX, sizeof *h->users))) {
    free(h);
    return -ENOMEM;
  }
  h->cfg = cfg;
  h->http = http;
  snprintf(h->url, sizeof h->url, "%s", url);
  size_t n = strlen(h->url);
  while (n && h->url[n - 1] == '/')
    h->url[--n] = 0;
  *ret = h;
  return 0;
}

struct gw_hub *gw_hub_free(struct gw_hub *h) {
  if (!h)
    return NULL;
  for (size_t i = 0; i < CHECKS_MAX; i++)
    if (h->checks[i].id)
      gw_httpc_cancel(h->http, h->checks[i].id);
  sodium_memzero(h->cache, sizeof h->cache);
  free(h->users);
  free(h);
  return NULL;
}

const char *gw_hub_url(const struct gw_hub *h) {
  return h->url;
}

const char *gw_hub_user_group(const void *ctx, const char *user) {
  const struct gw_hub *h = ctx;
  for (size_t i = 0; h && i < h->n_users; i++)
    if (!strcmp(h->users[i].user, user))
      return h->users[i].group[0] ? h->users[i].group : NULL;
  return NULL;
}

/* Remembers the group the hub's groups of user select, as of now. */
static void remember_group(struct gw_hub *h, const struct gw_hub_who *who) {
  size_t i = 0;
  while (i < h->n_users && strcmp(h->users[i].user, who->user))
    i++;
  if (i == h->n_users) {
    if (h->n_users == USERS_MAX) {
      sl_warn(T, "%d hub users known already: %s keeps the [idle] defaults", USERS_MAX, who->user);
      return;
    }
    h->n_users++;
    snprintf(h->users[i].user, sizeof h->users[i].user, "%s", who->user);
  }
  snprintf(h->users[i].group, sizeof h->users[i].group, "%s", who->group);
}

static struct cached *cache_find(struct gw_hub *h, const char *hash) {
  for (size_t i = 0; i < CACHE_MAX; i++)
    if (h->cache[i].hash[0] && !strcmp(h->cache[i].hash, hash))
      return &h->cache[i];
  return NULL;
}

static void cache_put(struct gw_hub *h, const char *hash, const struct gw_hub_who *who) {
  if (h->cfg->hub_cache_us <= 0)
    return;
  struct cached *e = cache_find(h, hash);
  for (size_t i = 0; !e && i < CACHE_MAX; i++)
    if (!h->cache[i].hash[0])
      e = &h->cache[i];
  if (!e) { /* full: the answer that expires first goes */
    e = &h->cache[0];
    for (size_t i = 1; i < CACHE_MAX; i++)
      if (h->cache[i].until_mono_us < e->until_mono_us)
        e = &h->cache[i];
  }
  snprintf(e->hash, sizeof e->hash, "%s", hash);
  e->who = *who;
  e->until_mono_us = sl_time_mono_us() + h->cfg->hub_cache_us;
}

/* The first [group.NAME] of the file (file order) that the hub's groups
 * name: an admin orders the sections to say which wins. "" if none. */
static void select_group(const struct gw_config *cfg, const json_t *groups, char *ret,
                         size_t size) {
  ret[0] = 0;
  for (size_t i = 0; i < cfg->n_groups; i++) {
    size_t k;
    const json_t *g;
    json_array_foreach(groups, k, g)
      if (json_is_string(g) && json_string_length(g) == strlen(cfg->groups[i].name) &&
          !strcmp(json_string_value(g), cfg->groups[i].name)) {
        snprintf(ret, size, "%s", cfg->groups[i].name);
        return;
      }
  }
}

/* A user name the gateway can hold: no control characters (log lines). */
static bool usable_name(const char *s) {
  size_t n = s ? strlen(s) : 0;
  if (!n || n >= GW_HUB_USER_MAX)
    return false;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
      return false;
  return true;
}

/* The hub's answer as who, or an error with msg. */
static int parse_answer(struct gw_hub *h, const struct sl_http_resp *resp, struct gw_hub_who *who,
                        char *msg, size_t size) {
  if (resp->status == 401 || resp->status == 403 || resp->status == 404) {
    snprintf(msg, size, "JupyterHub does not accept this token (HTTP %ld): it is unknown,"
             " expired or revoked", resp->status);
    return SL_EAUTH;
  }
  if (resp->status != 200) {
    snprintf(msg, size, "JupyterHub at %.200s answered HTTP %ld to the token check", h->url,
             resp->status);
    return SL_ECURL;
  }
  json_t *j = NULL;
  char why[160];
  if (sl_json_parse(resp->body, resp->body_len, 16, &j, why, sizeof why) < 0 || !json_is_object(j)) {
    json_decref(j);
    snprintf(msg, size, "JupyterHub at %.200s answered the token check with something other than"
             " a user (is [hub] url its API, ending in /hub/api?)", h->url);
    return SL_ECURL;
  }
  const char *kind = sl_json_get_whole_str(j, "kind", "user");
  const char *name = sl_json_get_whole_str(j, "name", "");
  int r = 0;
  if (!kind || strcmp(kind, "user")) {
    snprintf(msg, size, "this JupyterHub token belongs to a %.32s, not a user", kind ? kind : "?");
    r = SL_EAUTH;
  } else if (!usable_name(name)) {
    snprintf(msg, size, "the JupyterHub user name is empty, longer than %d bytes or holds"
             " control characters", GW_HUB_USER_MAX - 1);
    r = SL_EAUTH;
  } else {
    memset(who, 0, sizeof *who);
    snprintf(who->user, sizeof who->user, "%s", name);
    select_group(h->cfg, json_object_get(j, "groups"), who->group, sizeof who->group);
  }
  json_decref(j);
  return r;
}

static void on_answer(uint64_t id, int err, struct sl_http_resp *resp, void *data) {
  (void)id;
  struct check *c = data;
  struct gw_hub *h = c->hub;
  struct gw_hub_who who = {0};
  char msg[320] = "";
  int r;
  if (err < 0) {
    snprintf(msg, sizeof msg, "cannot reach JupyterHub at %.200s to check the token: %s", h->url,
             sl_strerror(err));
    r = SL_ECURL;
  } else {
    r = parse_answer(h, resp, &who, msg, sizeof msg);
  }
  if (r == 0) {
    cache_put(h, c->hash, &who);
    remember_group(h, &who);
    sl_debug(T, "hub token of %s (group \"%s\")", who.user, who.group);
  } else if (r != SL_EAUTH) {
    sl_warn(T, "%s", msg); /* the hub, not the client, is at fault: the admin should know */
  }
  gw_hub_done_fn done = c->done;
  void *ddata = c->data;
  memset(c, 0, sizeof *c); /* free before done, which may start another check */
  done(ddata, r, r == 0 ? &who : NULL, msg);
}

/* A check slot not in use, or NULL when all CHECKS_MAX are. */
static struct check *free_check(struct gw_hub *h) {
  for (size_t i = 0; i < CHECKS_MAX; i++)
    if (!h->checks[i].id)
      return &h->checks[i];
  return NULL;
}

int gw_hub_answer(struct gw_hub *h, const char *token, int err, struct sl_http_resp *resp,
                  gw_hub_done_fn done, void *data) {
  struct check *c = free_check(h);
  if (!c)
    return SL_ELIMIT;
  *c = (struct check){.id = UINT64_MAX, .done = done, .data = data, .hub = h};
  sl_sha256_hex(token, strlen(token), c->hash);
  on_answer(c->id, err, resp, c);
  return 0;
}

/* Whether token could be sent in a header as it is: printable ASCII, no
 * space (a CR or LF would add headers of the client's choosing). */
static bool header_safe(const char *token) {
  size_t n = strlen(token);
  if (!n || n > TOKEN_MAX)
    return false;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)token[i] <= 0x20 || (unsigned char)token[i] >= 0x7f)
      return false;
  return true;
}

int gw_hub_check(struct gw_hub *h, const char *token, gw_hub_done_fn done, void *data,
                 struct gw_hub_who *ret_who, uint64_t *ret_check) {
  if (!header_safe(token))
    return SL_EAUTH;
  char hash[SL_HMAC_HEX_LEN + 1];
  sl_sha256_hex(token, strlen(token), hash);
  struct cached *e = cache_find(h, hash);
  if (e && e->until_mono_us > sl_time_mono_us()) {
    *ret_who = e->who;
    return 1;
  }
  if (e)
    memset(e, 0, sizeof *e);
  struct check *c = free_check(h);
  if (!c)
    return SL_ELIMIT;
  char url[sizeof h->url + 8], auth[TOKEN_MAX + 32];
  snprintf(url, sizeof url, "%s/user", h->url);
  snprintf(auth, sizeof auth, "Authorization: token %s", token);
  int timeout_ms = (int)(h->cfg->hub_timeout_us / 1000);
  struct sl_http_req req = {.method = "GET", .url = url, .headers = {auth, "Accept: application/json"},
                            .body_max_bytes = REPLY_MAX_BYTES, .timeout_ms = timeout_ms,
                            .connect_timeout_ms = timeout_ms, .use_env_proxy = false};
  uint64_t id = 0;
  int r = gw_httpc_start(h->http, &req, on_answer, c, &id);
  sodium_memzero(auth, sizeof auth);
  if (r < 0)
    return r;
  *c = (struct check){.id = id, .done = done, .data = data, .hub = h};
  snprintf(c->hash, sizeof c->hash, "%s", hash);
  *ret_check = id;
  return 0;
}

int gw_hub_cancel(struct gw_hub *h, uint64_t check) {
  for (size_t i = 0; check && i < CHECKS_MAX; i++)
    if (h->checks[i].id == check) {
      gw_httpc_cancel(h->http, check);
      memset(&h->checks[i], 0, sizeof h->checks[i]);
      return 0;
    }
  return -ENOENT;
}
