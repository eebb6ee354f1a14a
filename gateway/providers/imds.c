/* A per-instance loopback endpoint that answers like EC2's IMDSv2.
 *
 * Each local instance gets one libmicrohttpd daemon bound to 127.0.0.1 with
 * its own polling thread, so the worker's notice code talks HTTP exactly as
 * on EC2. Routes:
 *   PUT /latest/api/token          X-aws-ec2-metadata-token-ttl-seconds 1..21600
 *                                  -> a token (400 without a valid TTL, 403 with
 *                                  X-Forwarded-For, as EC2 does)
 *   GET /latest/meta-data/...      X-aws-ec2-metadata-token must name a live
 *                                  token, else 401:
 *       instance-id, instance-type, placement/availability-zone,
 *       spot/instance-action       404 until a notice, then {"action","time"}
 *       spot/termination-time      404 until a notice, then the time
 *       events/recommendations/rebalance  404 until one, then {"noticeTime"}
 *   anything else                  404; a wrong method on a known path 405.
 * Invariants: the notice and token state is shared between the provider's
 * thread and the daemon's thread and is only touched under `lock`. Tokens
 * are random, at most MAX_TOKENS live at once (a new one replaces the one
 * expiring first), and expire on the wall clock (TTL seconds are real, not
 * simulated). Connections, their memory and their idle time are bounded;
 * request bodies are read and dropped. */
#include "imds.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sl_hmac.h"
#include "sl_json.h"
#include "sl_time.h"

#define MAX_TOKENS 32
#define TOKEN_BYTES 24
#define TOKEN_HEX (TOKEN_BYTES * 2)
#define TTL_MAX_S 21600
#define MAX_CONNECTIONS 16
#define CONNECTION_TIMEOUT_S 10

struct token {
  char hex[TOKEN_HEX + 1];
  int64_t expires_mono_us;
};

struct gw_imds {
  struct MHD_Daemon *daemon;
  int port;
  char instance_id[32], type[64], zone[32];
  pthread_mutex_t lock;
  struct token tokens[MAX_TOKENS];
  char action[16];
  int64_t deadline_real_us;   /* 0: no notice */
  int64_t rebalance_real_us;  /* 0: no recommendation */
};

/* AWS prints metadata times to whole seconds: "2026-11-22T10:00:00Z". */
static void format_time(int64_t real_us, char *buf, size_t size) {
  time_t s = (time_t)(real_us / SL_US_PER_S);
  struct tm tm;
  gmtime_r(&s, &tm);
  strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type,
                             const char *body, const char *ttl, const char *allow) {
  struct MHD_Response *r =
      MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
  if (!r)
    return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  MHD_add_response_header(r, "Server", "EC2ws");
  if (ttl)
    MHD_add_response_header(r, "X-aws-ec2-metadata-token-ttl-seconds", ttl);
  if (allow)
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
  enum MHD_Result ok = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ok;
}

static enum MHD_Result plain(struct MHD_Connection *c, unsigned status, const char *body) {
  return reply(c, status, "text/plain", body, NULL, NULL);
}

/* Takes v; a reply of 500 when it could not be built. */
static enum MHD_Result plain_json(struct MHD_Connection *c, json_t *v) {
  char *text = v ? sl_json_dump(v, NULL) : NULL;
  json_decref(v);
  enum MHD_Result r = text ? plain(c, MHD_HTTP_OK, text)
                           : plain(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "Internal Server Error");
  free(text);
  return r;
}

static enum MHD_Result issue_token(struct gw_imds *m, struct MHD_Connection *c) {
  if (MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Forwarded-For"))
    return plain(c, MHD_HTTP_FORBIDDEN, "Forbidden");
  const char *ttl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                "X-aws-ec2-metadata-token-ttl-seconds");
  long v = 0;
  bool ok = ttl && *ttl && strlen(ttl) <= 6;
  for (const char *p = ttl; ok && *p; p++) {
    if (*p < '0' || *p > '9')
      ok = false;
    else
      v = v * 10 + (*p - '0');
  }
  if (!ok || v < 1 || v > TTL_MAX_S)
    return plain(c, MHD_HTTP_BAD_REQUEST, "Bad Request");
  unsigned char raw[TOKEN_BYTES];
  char hex[TOKEN_HEX + 1], ttl_text[16];
  sl_random_bytes(raw, sizeof raw);
  sodium_bin2hex(hex, sizeof hex, raw, sizeof raw);
  int64_t now = sl_time_mono_us();
  pthread_mutex_lock(&m->lock);
  struct token *slot = &m->tokens[0];
  for (size_t i = 0; i < MAX_TOKENS; i++)
    if (m->tokens[i].expires_mono_us < slot->expires_mono_us)
      slot = &m->tokens[i];
  memcpy(slot->hex, hex, sizeof hex);
  slot->expires_mono_us = now + v * SL_US_PER_S;
  pthread_mutex_unlock(&m->lock);
  snprintf(ttl_text, sizeof ttl_text, "%ld", v);
  return reply(c, MHD_HTTP_OK, "text/plain", hex, ttl_text, NULL);
}

static bool token_valid(struct gw_imds *m, const char *tok) {
  if (!tok || strlen(tok) != TOKEN_HEX)
    return false;
  int64_t now = sl_time_mono_us();
  bool found = false;
  pthread_mutex_lock(&m->lock);
  for (size_t i = 0; i < MAX_TOKENS; i++)
    if (m->tokens[i].expires_mono_us > now &&
        sodium_memcmp(m->tokens[i].hex, tok, TOKEN_HEX) == 0)
      found = true;
  pthread_mutex_unlock(&m->lock);
  return found;
}

/* Answers GET under /latest/meta-data/ once the token checked out. */
static enum MHD_Result meta_data(struct gw_imds *m, struct MHD_Connection *c, const char *key) {
  char when[40];
  if (strcmp(key, "instance-id") == 0)
    return plain(c, MHD_HTTP_OK, m->instance_id);
  if (strcmp(key, "instance-type") == 0)
    return plain(c, MHD_HTTP_OK, m->type);
  if (strcmp(key, "placement/availability-zone") == 0)
    return plain(c, MHD_HTTP_OK, m->zone);
  if (strcmp(key, "spot/instance-action") == 0 || strcmp(key, "spot/termination-time") == 0) {
    pthread_mutex_lock(&m->lock);
    int64_t deadline = m->deadline_real_us;
    char action[16];
    memcpy(action, m->action, sizeof action);
    pthread_mutex_unlock(&m->lock);
    if (deadline <= 0)
      return plain(c, MHD_HTTP_NOT_FOUND, "Not Found");
    format_time(deadline, when, sizeof when);
    if (key[5] == 't')
      return plain(c, MHD_HTTP_OK, when);
    return plain_json(c, json_pack("{s:s, s:s}", "action", action, "time", when));
  }
  if (strcmp(key, "events/recommendations/rebalance") == 0) {
    pthread_mutex_lock(&m->lock);
    int64_t t = m->rebalance_real_us;
    pthread_mutex_unlock(&m->lock);
    if (t <= 0)
      return plain(c, MHD_HTTP_NOT_FOUND, "Not Found");
    format_time(t, when, sizeof when);
    return plain_json(c, json_pack("{s:s}", "noticeTime", when));
  }
  return plain(c, MHD_HTTP_NOT_FOUND, "Not Found");
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **con_cls) {
  struct gw_imds *m = cls;
  /* First call: headers only. Later calls carry body pieces, which are
   * dropped (bounded); the last call (size 0) answers. */
  static size_t seen_marker;
  if (*con_cls == NULL) {
    *con_cls = &seen_marker;
    return MHD_YES;
  }
  if (*upload_data_size) {
    *upload_data_size = 0;
    return MHD_YES;
  }
  static const char token_path[] = "/latest/api/token";
  static const char meta_prefix[] = "/latest/meta-data/";
  bool is_get = strcmp(method, MHD_HTTP_METHOD_GET) == 0 ||
                strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
  if (strcmp(url, token_path) == 0) {
    if (strcmp(method, MHD_HTTP_METHOD_PUT) != 0)
      return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", "Method Not Allowed", NULL,
                   "PUT");
    return issue_token(m, c);
  }
  if (strncmp(url, meta_prefix, sizeof meta_prefix - 1) != 0)
    return plain(c, MHD_HTTP_NOT_FOUND, "Not Found");
  if (!is_get)
    return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", "Method Not Allowed", NULL,
                 "GET, HEAD");
  const char *tok = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-aws-ec2-metadata-token");
  if (!token_valid(m, tok))
    return plain(c, MHD_HTTP_UNAUTHORIZED, "Unauthorized");
  return meta_data(m, c, url + sizeof meta_prefix - 1);
}

int gw_imds_new(const char *instance_id, const char *type, const char *zone, int port,
                struct gw_imds **ret) {
  if (!instance_id || !type || !zone || port < 0 || port > 65535 ||
      strlen(instance_id) >= 32 || strlen(type) >= 64 || strlen(zone) >= 32)
    return -EINVAL;
  struct gw_imds *m = calloc(1, sizeof *m);
  if (!m)
    return -ENOMEM;
  strcpy(m->instance_id, instance_id);
  strcpy(m->type, type);
  strcpy(m->zone, zone);
  strcpy(m->action, "terminate");
  pthread_mutex_init(&m->lock, NULL);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  m->daemon = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, (uint16_t)port, NULL, NULL, handle, m,
      MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_LIMIT,
      (unsigned)MAX_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONNECTION_TIMEOUT_S,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(32 * 1024), MHD_OPTION_END);
  if (!m->daemon) {
    pthread_mutex_destroy(&m->lock);
    free(m);
    return port ? -EADDRINUSE : -EIO;
  }
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(m->daemon, MHD_DAEMON_INFO_BIND_PORT);
  m->port = info ? info->port : port;
  *ret = m;
  return 0;
}

struct gw_imds *gw_imds_free(struct gw_imds *m) {
  if (!m)
    return NULL;
  MHD_stop_daemon(m->daemon);
  pthread_mutex_destroy(&m->lock);
  sodium_memzero(m->tokens, sizeof m->tokens);
  free(m);
  return NULL;
}

int gw_imds_port(const struct gw_imds *m) { return m->port; }

void gw_imds_set_notice(struct gw_imds *m, const char *action, int64_t deadline_real_us) {
  pthread_mutex_lock(&m->lock);
  snprintf(m->action, sizeof m->action, "%s", action ? action : "terminate");
  m->deadline_real_us = deadline_real_us > 0 ? deadline_real_us : 0;
  pthread_mutex_unlock(&m->lock);
}

void gw_imds_set_rebalance(struct gw_imds *m, int64_t notice_real_us) {
  pthread_mutex_lock(&m->lock);
  m->rebalance_real_us = notice_real_us > 0 ? notice_real_us : 0;
  pthread_mutex_unlock(&m->lock);
}
