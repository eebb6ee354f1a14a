/* The gateway protocol client: connection state, requests and replies.
 *
 * States: IDLE (never tried) → CONNECTING (hello sent, waiting) → READY, or
 * FAILED (why kept in last_error; the next request tries again). Requests
 * made before READY wait in the pending table unsent and go out in order
 * once hello is accepted; a failed attempt fails every waiting request with
 * the reason. Every request after hello carries the secret ("auth") that
 * the gateway's reply to hello gave this connection: the gateway takes a
 * request as ours only with it. Every sent request has a deadline. The owner's handler is only
 * ever called from jk_gw_input() and jk_gw_tick(), never from inside a call
 * the owner made, so the owner may issue requests from its callbacks.
 * The embedded gateway is started at most once per client, and only when the
 * address is the embedded default and a request allowed it. */
#include "gwclient.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_path.h"
#include "sl_time.h"

#define MAX_PENDING 256
#define MAX_FRAME_BYTES (1u << 20)
#define JSON_DEPTH 32
#define SPAWN_AGAIN_US (10 * SL_US_PER_S) /* the embedded gateway is started at most this often */
#define MAX_TOKEN_BYTES 4096

extern char **environ;

struct pending {
  int64_t id;
  json_t *req;          /* owned; kept until answered so it can be resent */
  void *data;           /* owned: the message's second frame, or NULL */
  size_t data_len;
  bool sent;
  bool retried;         /* resent once after the gateway forgot our hello */
  bool failed;          /* fail at the next tick with error */
  char *error;
  int64_t deadline_us;  /* when sent */
};

struct jk_gw {
  const struct jk_gw_transport *t;
  void *tud;
  const struct jk_gw_handler *h;
  void *hud;
  char *client, *session, *explicit_addr;
  char home[4096];             /* SPOTLAB_HOME, found (and made) once */
  bool may_spawn;
  int64_t hello_timeout_us, spawn_timeout_us, request_timeout_us;

  enum jk_gw_state state;
  bool open;
  char addr[4200];
  bool embedded;
  int64_t next_id;
  int64_t hello_id, hello_deadline_us, hello_timeout_now_us;
  bool want_connect;       /* start an attempt at the next tick */
  bool attempt_may_spawn;  /* the current attempt may start the gateway */
  int64_t spawned_us;      /* when it last started the embedded gateway; 0: never */
  bool attempt_spawned;    /* the current attempt waits for the gateway it started */
  pid_t child;
  bool notify;             /* tell the handler about a state change at the next tick */
  char user[128];
  char auth[160];          /* hello's secret for this connection; "" none */
  char last_error[600];
  long n_malformed;         /* malformed messages dropped unreported (warned once) */
  long n_malformed_attempt; /* dropped while waiting for hello's reply */
  struct pending p[MAX_PENDING];
  size_t n_p;
};

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

struct jk_gw *jk_gw_new(const struct jk_gw_transport *t, void *tud,
                        const struct jk_gw_handler *h, void *hud,
                        const struct jk_gw_config *cfg) {
  struct jk_gw *gw = calloc(1, sizeof *gw);
  if (!gw)
    return NULL;
  gw->t = t;
  gw->tud = tud;
  gw->h = h;
  gw->hud = hud;
  gw->client = strdup(cfg->client ? cfg->client : "kernel");
  gw->session = strdup(cfg->session ? cfg->session : "");
  gw->explicit_addr = dup_or_null(cfg->address);
  gw->may_spawn = cfg->may_spawn;
  gw->hello_timeout_us = cfg->hello_timeout_us > 0 ? cfg->hello_timeout_us : 2 * SL_US_PER_S;
  gw->spawn_timeout_us = cfg->spawn_timeout_us > 0 ? cfg->spawn_timeout_us : 20 * SL_US_PER_S;
  gw->request_timeout_us = cfg->request_timeout_us > 0 ? cfg->request_timeout_us : 30 * SL_US_PER_S;
  gw->next_id = 1;
  gw->child = -1;
  if (!gw->client || !gw->session || (cfg->address && !gw->explicit_addr))
    return jk_gw_free(gw);
  return gw;
}

static void drop_pending(struct jk_gw *gw, size_t i) {
  json_decref(gw->p[i].req);
  free(gw->p[i].data);
  free(gw->p[i].error);
  memmove(&gw->p[i], &gw->p[i + 1], (gw->n_p - i - 1) * sizeof gw->p[0]);
  gw->n_p--;
}

/* Says how many more malformed messages were dropped since the warning. */
static void report_malformed(struct jk_gw *gw) {
  if (gw->n_malformed > 1)
    sl_warn("kernel.gateway", "dropped %ld more malformed messages from %s", gw->n_malformed - 1, gw->addr);
  gw->n_malformed = 0;
}

struct jk_gw *jk_gw_free(struct jk_gw *gw) {
  if (!gw)
    return NULL;
  report_malformed(gw);
  if (gw->open)
    gw->t->close(gw->tud);
  while (gw->n_p)
    drop_pending(gw, gw->n_p - 1);
  if (gw->child > 0)
    waitpid(gw->child, NULL, WNOHANG);
  free(gw->client);
  free(gw->session);
  free(gw->explicit_addr);
  free(gw);
  return NULL;
}

/* ---- address, token ----------------------------------------------------- */

static void resolve_address(struct jk_gw *gw) {
  const char *env = getenv("SPOTLAB_GATEWAY");
  gw->embedded = false;
  if (gw->explicit_addr) {
    snprintf(gw->addr, sizeof gw->addr, "%s", gw->explicit_addr);
  } else if (env && *env) {
    snprintf(gw->addr, sizeof gw->addr, "%s", env);
  } else {
    if (!gw->home[0] && sl_spotlab_home(gw->home, sizeof gw->home) < 0)
      snprintf(gw->home, sizeof gw->home, "/tmp/spotlab-%d", (int)getuid());
    snprintf(gw->addr, sizeof gw->addr, "ipc://%s/gateway.sock", gw->home);
    gw->embedded = true;
  }
}

const char *jk_gw_address(struct jk_gw *gw) {
  if (gw->state == JK_GW_IDLE || !gw->addr[0])
    resolve_address(gw);
  return gw->addr;
}

bool jk_gw_is_embedded(struct jk_gw *gw) {
  jk_gw_address(gw);
  return gw->embedded;
}

/* SPOTLAB_TOKEN; else, for a team gateway, JUPYTERHUB_API_TOKEN (a kernel
 * of a single-user server: the gateway checks it with the hub); else the
 * first line of $SPOTLAB_HOME/token, up to its first blank (none when that
 * is not UTF-8). Owned or NULL. */
static char *read_token(const struct jk_gw *gw) {
  const char *env = getenv("SPOTLAB_TOKEN");
  if (env && *env)
    return strdup(env);
  const char *hub = getenv("JUPYTERHUB_API_TOKEN");
  if (!gw->embedded && hub && *hub)
    return strdup(hub);
  char home[4096], path[4200];
  if (sl_spotlab_home(home, sizeof home) < 0)
    return NULL;
  snprintf(path, sizeof path, "%s/token", home);
  FILE *f = fopen(path, "re");
  if (!f)
    return NULL;
  char buf[MAX_TOKEN_BYTES];
  char *line = fgets(buf, sizeof buf, f);
  fclose(f);
  if (!line)
    return NULL;
  buf[strcspn(buf, "\r\n \t")] = '\0';
  if (!sl_json_utf8_ok(buf, strlen(buf))) {
    /* hello could not carry it; the gateway's refusal of none says the rest */
    sl_warn("kernel.gateway", "%s: the token is not UTF-8 text; hello goes without one", path);
    return NULL;
  }
  return buf[0] ? strdup(buf) : NULL;
}

/* ---- connecting --------------------------------------------------------- */

static void fail_all(struct jk_gw *gw, const char *why) {
  for (size_t i = 0; i < gw->n_p; i++) {
    if (gw->p[i].failed)
      continue;
    gw->p[i].failed = true;
    gw->p[i].error = strdup(why);
  }
}

/* Ends the attempt or connection: every outstanding request fails with why. */
static void disconnect(struct jk_gw *gw, const char *why) {
  report_malformed(gw);
  if (gw->open)
    gw->t->close(gw->tud);
  gw->open = false;
  gw->state = JK_GW_FAILED;
  gw->user[0] = '\0';
  explicit_bzero(gw->auth, sizeof gw->auth);
  sl_utf8_copy(gw->last_error, sizeof gw->last_error, why);
  sl_debug("kernel.gateway", "gateway %s: %s", gw->addr, why);
  fail_all(gw, why);
  gw->notify = true;
}

/* obj as one frame, or (data) followed by data as a second. */
static int send_json(struct jk_gw *gw, const json_t *obj, const void *data, size_t data_len) {
  size_t len = 0;
  if (data && !gw->t->send_more)
    return -ENOTSUP;
  char *text = sl_json_dump(obj, &len);
  if (!text)
    return -ENOMEM;
  int r = data ? gw->t->send_more(gw->tud, text, len) : gw->t->send(gw->tud, text, len);
  if (r == 0 && data)
    r = gw->t->send(gw->tud, data, data_len);
  free(text);
  return r;
}

static int send_hello(struct jk_gw *gw, int64_t timeout_us) {
  char *token = read_token(gw);
  gw->hello_id = gw->next_id++;
  json_t *hello = json_pack("{s:s, s:I, s:s, s:s, s:s, s:s}", "type", "hello", "id",
                            (json_int_t)gw->hello_id, "token", token ? token : "", "client",
                            gw->client, "session", gw->session, "version", SPOTLAB_VERSION);
  if (token) {
    memset(token, 0, strlen(token));
    free(token);
  }
  if (!hello)
    return -ENOMEM;
  int r = send_json(gw, hello, NULL, 0);
  json_decref(hello);
  gw->hello_deadline_us = sl_time_mono_us() + timeout_us;
  gw->hello_timeout_now_us = timeout_us;
  gw->state = JK_GW_CONNECTING;
  gw->n_malformed_attempt = 0;
  return r;
}

static int open_and_hello(struct jk_gw *gw, int64_t timeout_us) {
  int r = gw->t->open(gw->tud, gw->addr);
  if (r < 0)
    return r;
  gw->open = true;
  return send_hello(gw, timeout_us);
}

static bool ipc_socket_missing(const char *addr) {
  struct stat st;
  return strncmp(addr, "ipc://", 6) == 0 && stat(addr + 6, &st) < 0;
}

/* Whether an ipc address names a socket file nobody listens on, as a
 * gateway that was killed (or a machine that rebooted) leaves behind: a
 * connection there is refused at once, so there is no need to wait out a
 * hello. A listener that is only busy (a full backlog) does not count. */
static bool ipc_socket_stale(const char *addr) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (strncmp(addr, "ipc://", 6) != 0 || strlen(addr + 6) >= sizeof sa.sun_path)
    return false;
  strcpy(sa.sun_path, addr + 6);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return false;
  bool stale = connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 && errno == ECONNREFUSED;
  close(fd);
  return stale;
}

/* Starts `spotlab-gateway --embedded --daemon`; 0 or negative with why. */
static int spawn_gateway(struct jk_gw *gw, char *why, size_t why_size) {
  char path[4096];
  int r = sl_find_program("spotlab-gateway", path, sizeof path);
  if (r < 0) {
    snprintf(why, why_size, "no gateway answers there, and spotlab-gateway was not found to start one");
    return r;
  }
  char *argv[] = {path, "--embedded", "--daemon", NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid;
  r = posix_spawn(&pid, path, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (r != 0) {
    snprintf(why, why_size, "cannot start %s: %s", path, strerror(r));
    return -r;
  }
  sl_info("kernel.gateway", "started %s --embedded --daemon (its launcher, pid %d: the gateway's own pid is in"
          " gateway.pid once it runs)", path, (int)pid);
  gw->child = pid;
  gw->spawned_us = sl_time_mono_us();
  return 0;
}

/* Whether the embedded gateway may be started (again): once it stopped
 * (`spotlab gateway stop`, its idle timeout), the next request that may
 * start it does so; never twice within SPAWN_AGAIN_US, so a gateway that
 * exits at once is not started in a loop. */
static bool may_spawn_again(const struct jk_gw *gw) {
  return !gw->spawned_us || sl_time_mono_us() - gw->spawned_us >= SPAWN_AGAIN_US;
}

/* Starts the embedded gateway; the hello goes out once its foreground
 * process exits 0 (it does so when its sockets are bound and its token is
 * written), see reap_child(). */
static void try_spawn(struct jk_gw *gw, const char *first_why) {
  char why[4400];
  if (gw->open)
    gw->t->close(gw->tud);
  gw->open = false;
  if (spawn_gateway(gw, why, sizeof why) < 0) {
    char full[600];
    snprintf(full, sizeof full, "%s; %.400s", first_why, why);
    disconnect(gw, full);
    return;
  }
  gw->state = JK_GW_CONNECTING;
  gw->attempt_spawned = true;
  gw->hello_id = -1;
  gw->hello_deadline_us = sl_time_mono_us() + gw->spawn_timeout_us;
  gw->hello_timeout_now_us = gw->spawn_timeout_us;
}

static void start_attempt(struct jk_gw *gw) {
  gw->want_connect = false;
  gw->attempt_spawned = false;
  resolve_address(gw);
  bool can_spawn = gw->may_spawn && gw->attempt_may_spawn && gw->embedded && may_spawn_again(gw);
  bool missing = ipc_socket_missing(gw->addr);
  if (missing || ipc_socket_stale(gw->addr)) {
    if (can_spawn) {
      try_spawn(gw, "no gateway is running");
      return;
    }
    if (missing)
      disconnect(gw, gw->embedded ? "no gateway is running (no socket file)"
                                  : "nothing listens there (no socket file)");
    else
      disconnect(gw, gw->embedded ? "no gateway is running (its socket file is left from an earlier one)"
                                  : "nothing listens there (connection refused)");
    return;
  }
  int r = open_and_hello(gw, gw->hello_timeout_us);
  if (r < 0) {
    char why[300];
    snprintf(why, sizeof why, "cannot connect: %s", sl_strerror(r));
    disconnect(gw, why);
  }
}

/* Sends a request with the connection's secret (a resent one gets the
 * secret of the latest hello). */
static int send_request(struct jk_gw *gw, json_t *req, const void *data, size_t data_len) {
  if (gw->auth[0])
    json_object_set_new(req, "auth", json_string(gw->auth));
  else
    json_object_del(req, "auth");
  int r = send_json(gw, req, data, data_len);
  json_object_del(req, "auth"); /* the secret stays in one place */
  return r;
}

static void send_queued(struct jk_gw *gw) {
  int64_t now = sl_time_mono_us();
  for (size_t i = 0; i < gw->n_p; i++) {
    struct pending *p = &gw->p[i];
    if (p->sent || p->failed)
      continue;
    int r = send_request(gw, p->req, p->data, p->data_len);
    if (r < 0) {
      p->failed = true;
      p->error = strdup(sl_strerror(r));
      continue;
    }
    p->sent = true;
    p->deadline_us = now + gw->request_timeout_us;
  }
}

/* ---- requests ----------------------------------------------------------- */

int64_t jk_gw_request(struct jk_gw *gw, json_t *req, unsigned flags) {
  return jk_gw_request_data(gw, req, NULL, 0, flags);
}

int64_t jk_gw_request_data(struct jk_gw *gw, json_t *req, const void *data, size_t len, unsigned flags) {
  void *copy = data ? malloc(len ? len : 1) : NULL;
  if (!req || (data && !copy)) {
    json_decref(req);
    free(copy);
    return -ENOMEM;
  }
  if (gw->n_p >= MAX_PENDING || (data && !gw->t->send_more)) {
    json_decref(req);
    free(copy);
    return gw->n_p >= MAX_PENDING ? SL_ELIMIT : -ENOTSUP;
  }
  if (copy)
    memcpy(copy, data, len);
  /* a gateway on a socket file that is gone has stopped: no answer would come
   * (a new gateway binds a new file), so the request reconnects, or fails at once */
  if (gw->state == JK_GW_READY && ipc_socket_missing(gw->addr))
    disconnect(gw, gw->embedded ? "the gateway has stopped (its socket file is gone)"
                                : "the gateway there has stopped (its socket file is gone)");
  int64_t id = gw->next_id++;
  json_object_set_new(req, "id", json_integer(id));
  struct pending *p = &gw->p[gw->n_p++];
  *p = (struct pending){.id = id, .req = req, .data = copy, .data_len = len};
  if (gw->state == JK_GW_READY) {
    send_queued(gw);
  } else if (gw->state == JK_GW_CONNECTING) {
    if (flags & JK_GW_SPAWN)
      gw->attempt_may_spawn = true;
  } else if (flags & JK_GW_NO_CONNECT) {
    p->failed = true;
    p->error = strdup(gw->last_error[0] ? gw->last_error : "not connected");
  } else {
    if (!gw->want_connect)
      gw->attempt_may_spawn = false;
    gw->want_connect = true;
    if (flags & JK_GW_SPAWN)
      gw->attempt_may_spawn = true;
  }
  return id;
}

void jk_gw_forget(struct jk_gw *gw, int64_t id) {
  for (size_t i = 0; i < gw->n_p; i++)
    if (gw->p[i].id == id) {
      /* An unsent request is dropped; a sent one stays to absorb its reply. */
      if (!gw->p[i].sent) {
        drop_pending(gw, i);
      } else {
        gw->p[i].failed = true;
        free(gw->p[i].error);
        gw->p[i].error = NULL;
      }
      return;
    }
}

static struct pending *find_pending(struct jk_gw *gw, int64_t id, size_t *ret_i) {
  for (size_t i = 0; i < gw->n_p; i++)
    if (gw->p[i].id == id) {
      *ret_i = i;
      return &gw->p[i];
    }
  return NULL;
}

static void on_hello_reply(struct jk_gw *gw, const json_t *msg) {
  if (!sl_json_get_bool(msg, "ok", false)) {
    const json_t *err = json_object_get(msg, "error");
    char why[600];
    snprintf(why, sizeof why, "the gateway refused hello: %s (%s)",
             sl_json_get_str(err, "message", "no reason given"), sl_json_get_str(err, "code", "?"));
    sl_utf8_fix(why); /* the gateway's text may be cut inside a character */
    disconnect(gw, why);
    return;
  }
  sl_utf8_copy(gw->user, sizeof gw->user, sl_json_get_str(msg, "user", ""));
  /* a gateway older than the secret answers without one */
  const char *auth = sl_json_get_str(msg, "auth", "");
  if (strlen(auth) >= sizeof gw->auth) {
    disconnect(gw, "the gateway's hello reply is malformed (auth too long)");
    return;
  }
  snprintf(gw->auth, sizeof gw->auth, "%s", auth);
  gw->state = JK_GW_READY;
  gw->last_error[0] = '\0';
  sl_debug("kernel.gateway", "connected to %s as %s", gw->addr, gw->user);
  send_queued(gw);
  gw->h->state(gw->hud, true, NULL);
}

/* The gateway answered SL_EAUTH to a request after our hello: it has
 * restarted and forgot us. Say hello again and resend what is unanswered. */
static bool rehello(struct jk_gw *gw, struct pending *p) {
  if (p->retried || gw->state != JK_GW_READY)
    return false;
  for (size_t i = 0; i < gw->n_p; i++)
    if (gw->p[i].sent && !gw->p[i].failed) {
      gw->p[i].sent = false;
      gw->p[i].retried = true;
    }
  if (send_hello(gw, gw->hello_timeout_us) < 0)
    return false;
  return true;
}

static void on_reply(struct jk_gw *gw, const json_t *msg) {
  int64_t re = sl_json_get_int(msg, "re", -1);
  if (re == gw->hello_id && gw->state == JK_GW_CONNECTING) {
    on_hello_reply(gw, msg);
    return;
  }
  size_t i;
  struct pending *p = find_pending(gw, re, &i);
  if (!p || !p->sent) {
    sl_debug("kernel.gateway", "reply to unknown request %lld dropped", (long long)re);
    return;
  }
  bool forgotten = p->failed && !p->error;
  bool ok = sl_json_get_bool(msg, "ok", false);
  const json_t *err = json_object_get(msg, "error");
  if (!ok && !forgotten && strcmp(sl_json_get_str(err, "code", ""), "SL_EAUTH") == 0 && rehello(gw, p))
    return;
  json_t *keep = json_incref((json_t *)msg);
  drop_pending(gw, i);
  if (!forgotten) {
    char why[600];
    if (!ok)
      sl_utf8_copy(why, sizeof why, sl_json_get_str(err, "message", "the gateway refused the request"));
    gw->h->reply(gw->hud, re, keep, ok ? NULL : why);
  }
  json_decref(keep);
}

void jk_gw_input(struct jk_gw *gw, const char *data, size_t len) {
  if (len > MAX_FRAME_BYTES) {
    sl_warn("kernel.gateway", "dropped a gateway message of %zu bytes (limit %u)", len, MAX_FRAME_BYTES);
    return;
  }
  json_t *msg = NULL;
  char why[128];
  if (sl_json_parse(data, len, JSON_DEPTH, &msg, why, sizeof why) < 0 || !json_is_object(msg)) {
    /* once per connection, then counted: a service that is no gateway may send thousands */
    if (!gw->n_malformed++)
      sl_warn("kernel.gateway", "dropped a malformed gateway message: %s (more are counted, not shown)",
              msg ? "not an object" : why);
    if (gw->state == JK_GW_CONNECTING)
      gw->n_malformed_attempt++;
    json_decref(msg);
    return;
  }
  const char *type = sl_json_get_str(msg, "type", "");
  if (strcmp(type, "reply") == 0)
    on_reply(gw, msg);
  else if (strcmp(type, "event") == 0 && gw->state == JK_GW_READY)
    gw->h->event(gw->hud, msg);
  else if (strcmp(type, "notice") == 0 && gw->state == JK_GW_READY && gw->h->notice)
    gw->h->notice(gw->hud, msg);
  else
    sl_debug("kernel.gateway", "ignored a gateway message of type \"%.32s\"", type);
  json_decref(msg);
}

/* ---- time --------------------------------------------------------------- */

int64_t jk_gw_wake_at_us(const struct jk_gw *gw) {
  if (gw->want_connect || gw->notify)
    return 0;
  int64_t at = INT64_MAX;
  if (gw->state == JK_GW_CONNECTING && gw->hello_deadline_us < at)
    at = gw->hello_deadline_us;
  if (gw->child > 0) {
    int64_t poll = sl_time_mono_us() + 200 * SL_US_PER_MS;
    if (poll < at)
      at = poll;
  }
  for (size_t i = 0; i < gw->n_p; i++) {
    if (gw->p[i].failed && (gw->p[i].error || !gw->p[i].sent))
      return 0;
    if (gw->p[i].sent && gw->p[i].deadline_us < at)
      at = gw->p[i].deadline_us;
  }
  return at;
}

static void reap_child(struct jk_gw *gw) {
  int status;
  if (gw->child <= 0 || waitpid(gw->child, &status, WNOHANG) != gw->child)
    return;
  gw->child = -1;
  bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (ok && gw->state == JK_GW_CONNECTING && !gw->open) {
    int r = open_and_hello(gw, gw->hello_timeout_us);
    if (r < 0) {
      char why[300];
      snprintf(why, sizeof why, "cannot connect after starting the gateway: %s", sl_strerror(r));
      disconnect(gw, why);
    }
  } else if (!ok && gw->state == JK_GW_CONNECTING) {
    char why[200];
    if (WIFEXITED(status))
      snprintf(why, sizeof why, "spotlab-gateway --embedded --daemon exited with status %d (see its log)",
               WEXITSTATUS(status));
    else
      snprintf(why, sizeof why, "spotlab-gateway --embedded --daemon died (signal %d)", WTERMSIG(status));
    disconnect(gw, why);
  }
}

static void check_timeouts(struct jk_gw *gw, int64_t now) {
  if (gw->state == JK_GW_CONNECTING && now >= gw->hello_deadline_us) {
    char why[300];
    if (gw->n_malformed_attempt)
      snprintf(why, sizeof why, "it does not answer as a spotlab gateway (%ld messages that are not the "
               "protocol's, no answer to hello within %.1fs)", gw->n_malformed_attempt,
               (double)gw->hello_timeout_now_us / 1e6);
    else
      snprintf(why, sizeof why, "no answer to hello within %.1fs%s",
               (double)gw->hello_timeout_now_us / 1e6,
               gw->attempt_spawned ? " (after starting spotlab-gateway --embedded --daemon)" : "");
    if (gw->may_spawn && gw->attempt_may_spawn && gw->embedded && may_spawn_again(gw))
      try_spawn(gw, why);
    else
      disconnect(gw, why);
  }
  for (size_t i = 0; i < gw->n_p; i++) {
    struct pending *p = &gw->p[i];
    if (p->sent && p->failed && !p->error && now >= p->deadline_us) {
      drop_pending(gw, i--); /* forgotten and never answered */
      continue;
    }
    if (p->sent && !p->failed && now >= p->deadline_us) {
      p->failed = true;
      char why[200];
      snprintf(why, sizeof why, "no reply from the gateway within %.0fs", (double)gw->request_timeout_us / 1e6);
      p->error = strdup(why);
    }
  }
}

void jk_gw_tick(struct jk_gw *gw) {
  reap_child(gw);
  if (gw->want_connect)
    start_attempt(gw);
  check_timeouts(gw, sl_time_mono_us());
  if (gw->notify) {
    gw->notify = false;
    gw->h->state(gw->hud, gw->state == JK_GW_READY, gw->state == JK_GW_READY ? NULL : gw->last_error);
  }
  /* Deliver failures one at a time: the handler may add requests. */
  for (;;) {
    size_t i;
    for (i = 0; i < gw->n_p; i++)
      if (gw->p[i].failed && (gw->p[i].error || !gw->p[i].sent))
        break;
    if (i == gw->n_p)
      break;
    int64_t id = gw->p[i].id;
    char *error = gw->p[i].error;
    gw->p[i].error = NULL;
    drop_pending(gw, i);
    if (error)
      gw->h->reply(gw->hud, id, NULL, error);
    free(error);
  }
}

/* ---- settings ----------------------------------------------------------- */

int jk_gw_set_address(struct jk_gw *gw, const char *address) {
  char *copy = NULL;
  if (address && !(copy = strdup(address)))
    return -ENOMEM;
  free(gw->explicit_addr);
  gw->explicit_addr = copy;
  if (gw->state != JK_GW_IDLE)
    disconnect(gw, "the gateway address changed");
  gw->state = JK_GW_IDLE;
  gw->last_error[0] = '\0';
  resolve_address(gw);
  return 0;
}

int jk_gw_set_session(struct jk_gw *gw, const char *session) {
  char *copy = strdup(session ? session : "");
  if (!copy)
    return -ENOMEM;
  free(gw->session);
  gw->session = copy;
  if (gw->state == JK_GW_READY && send_hello(gw, gw->hello_timeout_us) < 0)
    disconnect(gw, "cannot send hello");
  return 0;
}

enum jk_gw_state jk_gw_state(const struct jk_gw *gw) { return gw->state; }

const char *jk_gw_user(const struct jk_gw *gw) {
  return gw->state == JK_GW_READY && gw->user[0] ? gw->user : NULL;
}

const char *jk_gw_last_error(const struct jk_gw *gw) { return gw->last_error; }
