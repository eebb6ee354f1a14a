/* Unit tests for client/gwclient.c, the protocol side of the gateway
 * connection, through a recording transport: hello first with the token,
 * requests held until hello succeeds, replies matched by id, events passed
 * on, failures and timeouts reported to the owner, a restarted gateway
 * (SL_EAUTH after hello) answered with a new hello and a resend, the
 * embedded gateway's start failing, hostile input dropped, and a token file
 * that is not UTF-8. */
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "gwclient.h"
#include "harness.h"
#include "sl_time.h"

struct rec {
  char opened[256];
  int opens, closes;
  json_t *sent[64];
  int n_sent;
  int64_t reply_id[64];
  char reply_err[64][256];
  bool reply_has[64];
  int n_replies;
  int n_events, n_ready, n_lost;
};

static int t_open(void *ud, const char *address) {
  struct rec *r = ud;
  snprintf(r->opened, sizeof r->opened, "%s", address);
  r->opens++;
  return 0;
}
static void t_close(void *ud) { ((struct rec *)ud)->closes++; }
static int t_send(void *ud, const char *data, size_t len) {
  struct rec *r = ud;
  if (r->n_sent < 64)
    r->sent[r->n_sent++] = json_loadb(data, len, 0, NULL);
  return 0;
}
static const struct jk_gw_transport transport = {t_open, t_close, t_send, NULL};

/* A transport that sends messages of several frames: the frame after a
 * send_more is kept as the data of the JSON frame before it. */
static bool more_pending;
static char more_data[64][64];
static size_t more_len[64];
static int t_send_more(void *ud, const char *data, size_t len) {
  t_send(ud, data, len);
  more_pending = true;
  return 0;
}
static int t_send_frame(void *ud, const char *data, size_t len) {
  struct rec *r = ud;
  if (!more_pending)
    return t_send(ud, data, len);
  more_pending = false;
  int i = r->n_sent - 1;
  if (i >= 0 && len <= sizeof more_data[0]) {
    memcpy(more_data[i], data, len);
    more_len[i] = len;
  }
  return 0;
}
static const struct jk_gw_transport transport_more = {t_open, t_close, t_send_frame, t_send_more};

static void h_reply(void *ud, int64_t id, const json_t *reply, const char *error) {
  struct rec *r = ud;
  int i = r->n_replies++;
  r->reply_id[i] = id;
  r->reply_has[i] = reply != NULL;
  snprintf(r->reply_err[i], sizeof r->reply_err[i], "%s", error ? error : "");
}
static void h_event(void *ud, const json_t *event) { ((struct rec *)ud)->n_events++; }
static void h_state(void *ud, bool ready, const char *why) {
  struct rec *r = ud;
  if (ready)
    r->n_ready++;
  else
    r->n_lost++;
}
static const struct jk_gw_handler handler = {h_reply, h_event, h_state, NULL};

/* fmt is always one of this file's literals holding one %lld. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
static void input(struct jk_gw *gw, const char *fmt, long long id) {
  char buf[512];
  snprintf(buf, sizeof buf, fmt, id);
  jk_gw_input(gw, buf, strlen(buf));
}
#pragma GCC diagnostic pop

static const char *sent_type(struct rec *r, int i) {
  return i < r->n_sent ? json_string_value(json_object_get(r->sent[i], "type")) : NULL;
}
static long long sent_id(struct rec *r, int i) {
  return i < r->n_sent ? (long long)json_integer_value(json_object_get(r->sent[i], "id")) : -1;
}

static void rec_done(struct rec *r) {
  for (int i = 0; i < r->n_sent; i++)
    json_decref(r->sent[i]);
  memset(r, 0, sizeof *r);
}

/* Ticks until the client has nothing due or deadline_ms passes, waiting in
 * poll() for its own wake time in between. */
static void run_until(struct jk_gw *gw, struct rec *r, int want_replies, int deadline_ms) {
  int64_t end = sl_time_mono_us() + (int64_t)deadline_ms * 1000;
  for (;;) {
    jk_gw_tick(gw);
    int64_t now = sl_time_mono_us();
    if (r->n_replies >= want_replies || now >= end)
      return;
    int64_t at = jk_gw_wake_at_us(gw);
    if (at > end)
      at = end;
    int ms = at <= now ? 0 : (int)((at - now + 999) / 1000);
    poll(NULL, 0, ms);
  }
}

static void test_hello_and_requests(void) {
  struct rec r = {0};
  setenv("SPOTLAB_TOKEN", "tok-123", 1);
  struct jk_gw_config cfg = {.client = "kernel", .session = "nb.ipynb", .address = "tcp://127.0.0.1:9"};
  struct jk_gw *gw = jk_gw_new(&transport, &r, &handler, &r, &cfg);
  CHECK_INT(jk_gw_state(gw), JK_GW_IDLE);
  int64_t a = jk_gw_request(gw, json_pack("{s:s}", "type", "session.get"), 0);
  int64_t b = jk_gw_request(gw, json_pack("{s:s}", "type", "jobs"), 0);
  CHECK(a > 0 && b > a);
  CHECK_INT(r.n_sent, 0); /* nothing before the loop runs */
  jk_gw_tick(gw);
  CHECK_STR(r.opened, "tcp://127.0.0.1:9");
  CHECK_INT(r.n_sent, 1);
  CHECK_STR(sent_type(&r, 0), "hello");
  CHECK_STR(json_string_value(json_object_get(r.sent[0], "token")), "tok-123");
  CHECK_STR(json_string_value(json_object_get(r.sent[0], "client")), "kernel");
  CHECK_STR(json_string_value(json_object_get(r.sent[0], "session")), "nb.ipynb");
  CHECK_INT(jk_gw_state(gw), JK_GW_CONNECTING);
  input(gw, "{\"type\":\"reply\",\"re\":%lld,\"ok\":true,\"user\":\"alice\"}", sent_id(&r, 0));
  CHECK_INT(jk_gw_state(gw), JK_GW_READY);
  CHECK_INT(r.n_ready, 1);
  CHECK_STR(jk_gw_user(gw), "alice");
  CHECK_INT(r.n_sent, 3); /* both requests, in order */
  CHECK_STR(sent_type(&r, 1), "session.get");
  CHECK_INT(sent_id(&r, 1), a);
  CHECK_STR(sent_type(&r, 2), "jobs");
  /* Replies in any order, each delivered once. */
  input(gw, "{\"type\":\"reply\",\"re\":%lld,\"ok\":false,\"error\":{\"code\":\"SL_ENAME\",\"message\":\"no such job\"}}",
        b);
  input(gw, "{\"type\":\"reply\",\"re\":%lld,\"ok\":true,\"vars\":{}}", a);
  input(gw, "{\"type\":\"reply\",\"re\":%lld,\"ok\":true}", a);
  CHECK_INT(r.n_replies, 2);
  CHECK_INT(r.reply_id[0], b);
  CHECK_STR(r.reply_err[0], "no such job");
  CHECK(r.reply_has[0]);
  CHECK_INT(r.reply_id[1], a);
  CHECK_STR(r.reply_err[1], "");
  /* Events pass; a forgotten request's reply does not. */
  input(gw, "{\"type\":\"event\",\"job\":\"J000001\",\"seq\":%lld,\"event\":\"state\"}", 1);
  CHECK_INT(r.n_events, 1);
  int64_t c = jk_gw_request(gw, json_pack("{s:s}", "type", "ping"), 0);
  jk_gw_forget(gw, c);
  input(gw, "{\"type\":\"reply\",\"re\":%lld,\"ok\":true}", c);
  jk_gw_tick(gw);
  CHECK_INT(r.n_replies, 2);
  /* The gateway restarted and forgot us: hello again, resend, one answer. */
  int64_t d = jk_gw_request(gw, json_pack("{s:s}", "type", "status"), 0);
  int before = r.n_sent;
  input(gw, "{\"type\":\"reply\",\"re\":%lld,\"ok\":false,\"error\":{\"code\":\"SL_EAUTH\",\"message\":\"hello first\"}}",
        d);
  CHECK_INT(r.n_replies, 2);
  CHECK_STR(sent_type(&r, before), "hello");
  input(gw, "{\"type\":\"reply\",\"re\":%lld,\"ok\":true,\"user\":\"alice\"}", sent_id(&r, before));
  CHECK_STR(sent_type(&r, before + 1), "status");
  CHECK_INT(sent_id(&r, before + 1), d);
  input(gw, "{\"type\":\"reply\",\"re\":%lld,\"ok\":true}", d);
  CHECK_INT(r.n_replies, 3);
  CHECK_INT(r.reply_id[2], d);
  CHECK_INT(r.n_ready, 2);
  jk_gw_free(gw);
  CHECK_INT(r.closes, 1);
  rec_done(&r);
}

/* A request with data (data.put): its JSON frame, then the data as the
 * message's second frame, copied when asked for, and both sent again when
 * the gateway forgot the hello. A transport without send_more: -ENOTSUP. */
static void test_request_data(void) {
  struct rec r = {0};
  setenv("SPOTLAB_TOKEN", "tok-123", 1);
  struct jk_gw_config cfg = {.client = "kernel", .session = "nb.ipynb", .address = "tcp://127.0.0.1:9"};
  struct jk_gw *gw = jk_gw_new(&transport_more, &r, &handler, &r, &cfg);
  char chunk[] = "some bytes\0and more";
  int64_t a = jk_gw_request_data(gw, json_pack("{s:s}", "type", "data.put"), chunk, sizeof chunk, 0);
  int64_t b = jk_gw_request_data(gw, json_pack("{s:s}", "type", "data.put"), "", 0, 0);
  memset(chunk, 'x', sizeof chunk); /* copied: the caller's buffer may go */
  CHECK(a > 0 && b > a);
  jk_gw_tick(gw);
  input(gw, "{\"type\":\"reply\",\"re\":%lld,\"ok\":true,\"user\":\"alice\"}", sent_id(&r, 0));
  CHECK_INT(r.n_sent, 3);
  CHECK_STR(sent_type(&r, 1), "data.put");
  CHECK_INT(sent_id(&r, 1), a);
  CHECK_INT((long long)more_len[1], (long long)sizeof chunk);
  CHECK(memcmp(more_data[1], "some bytes\0and more", sizeof chunk) == 0);
  CHECK_INT(sent_id(&r, 2), b);
  CHECK_INT((long long)more_len[2], 0); /* an empty second frame */
  CHECK(!more_pending);
  input(gw, "{\"type\":\"reply\",\"re\":%lld,\"ok\":true}", b);
  input(gw, "{\"type\":\"reply\",\"re\":%lld,\"ok\":false,\"error\":{\"code\":\"SL_EAUTH\",\"message\":\"hello first\"}}",
        a);
  CHECK_STR(sent_type(&r, 3), "hello");
  input(gw, "{\"type\":\"reply\",\"re\":%lld,\"ok\":true,\"user\":\"alice\"}", sent_id(&r, 3));
  CHECK_INT(sent_id(&r, 4), a);
  CHECK_INT((long long)more_len[4], (long long)sizeof chunk);
  CHECK(memcmp(more_data[4], "some bytes\0and more", sizeof chunk) == 0);
  jk_gw_free(gw);
  rec_done(&r);
  gw = jk_gw_new(&transport, &r, &handler, &r, &cfg);
  CHECK_INT(jk_gw_request_data(gw, json_pack("{s:s}", "type", "data.put"), "x", 1, 0), -ENOTSUP);
  jk_gw_free(gw);
  rec_done(&r);
}

static void test_refused_and_timeouts(void) {
  struct rec r = {0};
  struct jk_gw_config cfg = {.client = "cli", .address = "tcp://127.0.0.1:9", .hello_timeout_us = 1000,
                             .request_timeout_us = 1000};
  struct jk_gw *gw = jk_gw_new(&transport, &r, &handler, &r, &cfg);
  int64_t a = jk_gw_request(gw, json_pack("{s:s}", "type", "jobs"), 0);
  jk_gw_tick(gw);
  input(gw, "{\"type\":\"reply\",\"re\":%lld,\"ok\":false,\"error\":{\"code\":\"SL_EAUTH\",\"message\":\"bad token\"}}",
        sent_id(&r, 0));
  jk_gw_tick(gw);
  CHECK_INT(r.n_replies, 1);
  CHECK_INT(r.reply_id[0], a);
  CHECK(strstr(r.reply_err[0], "refused hello: bad token") != NULL);
  CHECK_INT(jk_gw_state(gw), JK_GW_FAILED);
  CHECK(strstr(jk_gw_last_error(gw), "bad token") != NULL);
  /* A new request tries again; no answer to hello within the timeout. */
  int64_t b = jk_gw_request(gw, json_pack("{s:s}", "type", "jobs"), 0);
  run_until(gw, &r, 2, 5000);
  CHECK_INT(r.n_replies, 2);
  CHECK_INT(r.reply_id[1], b);
  CHECK(strstr(r.reply_err[1], "no answer to hello") != NULL);
  CHECK(!r.reply_has[1]);
  /* Connected, but the request itself is never answered. */
  int64_t c = jk_gw_request(gw, json_pack("{s:s}", "type", "jobs"), 0);
  jk_gw_tick(gw);
  input(gw, "{\"type\":\"reply\",\"re\":%lld,\"ok\":true}", sent_id(&r, r.n_sent - 1));
  run_until(gw, &r, 3, 5000);
  CHECK_INT(r.n_replies, 3);
  CHECK_INT(r.reply_id[2], c);
  CHECK(strstr(r.reply_err[2], "no reply from the gateway") != NULL);
  /* Only when connected. */
  jk_gw_set_address(gw, "tcp://127.0.0.1:10");
  int64_t d = jk_gw_request(gw, json_pack("{s:s}", "type", "ping"), JK_GW_NO_CONNECT);
  jk_gw_tick(gw);
  CHECK_INT(r.n_replies, 4);
  CHECK_INT(r.reply_id[3], d);
  jk_gw_free(gw);
  rec_done(&r);
}

static void test_missing_and_spawn(void) {
  struct rec r = {0};
  char home[] = "/tmp/spotlab-gwtest-XXXXXX";
  CHECK(mkdtemp(home) != NULL);
  setenv("SPOTLAB_HOME", home, 1);
  unsetenv("SPOTLAB_GATEWAY");
  /* Embedded default, nothing running, may not start one: fails at once. */
  struct jk_gw_config cfg = {.client = "kernel", .session = "s"};
  struct jk_gw *gw = jk_gw_new(&transport, &r, &handler, &r, &cfg);
  char want[300];
  snprintf(want, sizeof want, "ipc://%s/gateway.sock", home);
  CHECK_STR(jk_gw_address(gw), want);
  CHECK(jk_gw_is_embedded(gw));
  jk_gw_request(gw, json_pack("{s:s}", "type", "jobs"), JK_GW_SPAWN);
  jk_gw_tick(gw);
  CHECK_INT(r.n_replies, 1);
  CHECK(strstr(r.reply_err[0], "no gateway is running") != NULL);
  CHECK_INT(r.opens, 0);
  CHECK_INT(r.n_lost, 1);
  jk_gw_free(gw);
  /* A socket file that nobody listens on (a gateway killed, a machine
   * rebooted): refused at once, without opening or waiting for a hello. */
  int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s/gateway.sock", home);
  CHECK(lfd >= 0 && bind(lfd, (struct sockaddr *)&sa, sizeof sa) == 0);
  close(lfd); /* the file stays */
  gw = jk_gw_new(&transport, &r, &handler, &r, &cfg);
  jk_gw_request(gw, json_pack("{s:s}", "type", "jobs"), JK_GW_SPAWN);
  jk_gw_tick(gw);
  CHECK_INT(r.n_replies, 2);
  CHECK(strstr(r.reply_err[1], "left from an earlier one") != NULL);
  CHECK_INT(r.opens, 0);
  jk_gw_free(gw);
  /* The same file with a listener behind it is a gateway: connected to. */
  lfd = socket(AF_UNIX, SOCK_STREAM, 0);
  unlink(sa.sun_path);
  CHECK(lfd >= 0 && bind(lfd, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(lfd, 4) == 0);
  gw = jk_gw_new(&transport, &r, &handler, &r, &cfg);
  jk_gw_request(gw, json_pack("{s:s}", "type", "jobs"), JK_GW_SPAWN);
  jk_gw_tick(gw);
  CHECK_INT(r.opens, 1);
  jk_gw_free(gw);
  close(lfd);
  unlink(sa.sun_path);
  /* May start one, but the program fails: the reason reaches the request. */
  int before = r.n_replies;
  setenv("SPOTLAB_GATEWAY_BIN", "/bin/false", 1);
  cfg.may_spawn = true;
  gw = jk_gw_new(&transport, &r, &handler, &r, &cfg);
  jk_gw_request(gw, json_pack("{s:s}", "type", "submit"), JK_GW_SPAWN);
  run_until(gw, &r, before + 1, 10000);
  CHECK_INT(r.n_replies, before + 1);
  CHECK(strstr(r.reply_err[before], "exited with status 1") != NULL);
  jk_gw_free(gw);
  unsetenv("SPOTLAB_GATEWAY_BIN");
  rmdir(home);
  rec_done(&r);
}

static void test_hostile_input(void) {
  struct rec r = {0};
  struct jk_gw_config cfg = {.client = "kernel", .address = "tcp://127.0.0.1:9"};
  struct jk_gw *gw = jk_gw_new(&transport, &r, &handler, &r, &cfg);
  jk_gw_request(gw, json_pack("{s:s}", "type", "jobs"), 0);
  jk_gw_tick(gw);
  const char *bad[] = {"", "nope", "[1,2]", "{\"type\":\"reply\"}", "{\"type\":\"reply\",\"re\":\"x\"}",
                       "{\"type\":\"event\"}", "{\"type\":7}", "{\"type\":\"reply\",\"re\":99999,\"ok\":true}"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    jk_gw_input(gw, bad[i], strlen(bad[i]));
  char *deep = malloc(4001);
  memset(deep, '[', 4000);
  deep[4000] = '\0';
  jk_gw_input(gw, deep, 4000);
  free(deep);
  size_t big = (2u << 20);
  char *huge = malloc(big);
  memset(huge, ' ', big);
  jk_gw_input(gw, huge, big);
  free(huge);
  CHECK_INT(r.n_replies, 0);
  CHECK_INT(r.n_events, 0); /* events before hello are not passed on */
  CHECK_INT(jk_gw_state(gw), JK_GW_CONNECTING);
  jk_gw_free(gw);
  rec_done(&r);
}

/* Every request after hello carries the secret hello's reply gave; after
 * the gateway forgets the connection (SL_EAUTH), the new hello's secret goes
 * with the resent request; a hello reply without one (an older gateway)
 * sends none. */
static void test_auth_secret(void) {
  struct rec r = {0};
  setenv("SPOTLAB_TOKEN", "tok-123", 1);
  struct jk_gw_config cfg = {.client = "kernel", .session = "nb", .address = "tcp://127.0.0.1:9"};
  struct jk_gw *gw = jk_gw_new(&transport, &r, &handler, &r, &cfg);
  int64_t a = jk_gw_request(gw, json_pack("{s:s}", "type", "jobs"), 0);
  jk_gw_tick(gw);
  CHECK(!json_object_get(r.sent[0], "auth")); /* hello carries the token, not a secret */
  input(gw, "{\"type\":\"reply\",\"re\":%lld,\"ok\":true,\"user\":\"alice\",\"auth\":\"s1\"}",
        sent_id(&r, 0));
  CHECK_INT(r.n_sent, 2);
  CHECK_STR(json_string_value(json_object_get(r.sent[1], "auth")), "s1");
  CHECK_INT(sent_id(&r, 1), a);
  input(gw, "{\"type\":\"reply\",\"re\":%lld,\"ok\":false,\"error\":{\"code\":\"SL_EAUTH\","
        "\"message\":\"say hello with a valid token first\"}}", a);
  CHECK_INT(r.n_sent, 3);
  CHECK_STR(sent_type(&r, 2), "hello");
  input(gw, "{\"type\":\"reply\",\"re\":%lld,\"ok\":true,\"user\":\"alice\",\"auth\":\"s2\"}",
        sent_id(&r, 2));
  CHECK_INT(r.n_sent, 4);
  CHECK_INT(sent_id(&r, 3), a);
  CHECK_STR(json_string_value(json_object_get(r.sent[3], "auth")), "s2");
  input(gw, "{\"type\":\"reply\",\"re\":%lld,\"ok\":true,\"jobs\":[]}", a);
  jk_gw_tick(gw);
  CHECK_INT(r.n_replies, 1);
  CHECK_STR(r.reply_err[0], "");
  /* a new session says hello again; a reply without a secret leaves none */
  jk_gw_set_session(gw, "other");
  CHECK_STR(sent_type(&r, 4), "hello");
  input(gw, "{\"type\":\"reply\",\"re\":%lld,\"ok\":true,\"user\":\"alice\"}", sent_id(&r, 4));
  int64_t b = jk_gw_request(gw, json_pack("{s:s}", "type", "ping"), 0);
  CHECK_INT(sent_id(&r, 5), b);
  CHECK(!json_object_get(r.sent[5], "auth"));
  jk_gw_free(gw);
  rec_done(&r);
}

/* The token of hello that a client sends to address (NULL: the embedded
 * default, with a listener behind $SPOTLAB_HOME/gateway.sock), or "". */
static void hello_token(const char *address, char *ret, size_t size) {
  struct rec r = {0};
  struct jk_gw_config cfg = {.client = "kernel", .session = "s", .address = address};
  struct jk_gw *gw = jk_gw_new(&transport, &r, &handler, &r, &cfg);
  jk_gw_request(gw, json_pack("{s:s}", "type", "jobs"), JK_GW_SPAWN);
  jk_gw_tick(gw);
  const char *t = r.n_sent && !strcmp(sent_type(&r, 0), "hello")
                      ? json_string_value(json_object_get(r.sent[0], "token")) : NULL;
  snprintf(ret, size, "%s", t ? t : "");
  jk_gw_free(gw);
  rec_done(&r);
}

/* A single-user server of JupyterHub: a team gateway gets the server's
 * JUPYTERHUB_API_TOKEN unless SPOTLAB_TOKEN is set; the embedded gateway
 * always gets its own token file's. */
static void test_hub_token(void) {
  char home[] = "/tmp/spotlab-gwhub-XXXXXX", path[300], tok[128];
  CHECK(mkdtemp(home) != NULL);
  setenv("SPOTLAB_HOME", home, 1);
  unsetenv("SPOTLAB_GATEWAY");
  snprintf(path, sizeof path, "%s/token", home);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  fputs("file-token\n", f);
  fclose(f);
  setenv("JUPYTERHUB_API_TOKEN", "hub-token", 1);
  unsetenv("SPOTLAB_TOKEN");
  hello_token("tcp://127.0.0.1:9", tok, sizeof tok);
  CHECK_STR(tok, "hub-token");
  setenv("SPOTLAB_TOKEN", "spotlab-token", 1);
  hello_token("tcp://127.0.0.1:9", tok, sizeof tok);
  CHECK_STR(tok, "spotlab-token");
  unsetenv("SPOTLAB_TOKEN");
  int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s/gateway.sock", home);
  CHECK(lfd >= 0 && bind(lfd, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(lfd, 4) == 0);
  hello_token(NULL, tok, sizeof tok);
  CHECK_STR(tok, "file-token");
  close(lfd);
  unlink(sa.sun_path);
  unsetenv("JUPYTERHUB_API_TOKEN");
  hello_token("tcp://127.0.0.1:9", tok, sizeof tok);
  CHECK_STR(tok, "file-token");
  unlink(path);
  rmdir(home);
}

/* A token file whose first line is not UTF-8 (a damaged file) is no token:
 * the hello goes without one, for the gateway to refuse with its reason. */
static void test_token_not_utf8(void) {
  char home[] = "/tmp/spotlab-gwtok-XXXXXX", path[300];
  CHECK(mkdtemp(home) != NULL);
  setenv("SPOTLAB_HOME", home, 1);
  unsetenv("SPOTLAB_TOKEN");
  unsetenv("JUPYTERHUB_API_TOKEN");
  snprintf(path, sizeof path, "%s/token", home);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  fputs("\xff\xfe" "0123456789abcdef\n", f);
  fclose(f);
  struct rec r = {0};
  struct jk_gw_config cfg = {.client = "cli", .session = "s", .address = "tcp://127.0.0.1:9"};
  struct jk_gw *gw = jk_gw_new(&transport, &r, &handler, &r, &cfg);
  jk_gw_request(gw, json_pack("{s:s}", "type", "jobs"), 0);
  jk_gw_tick(gw);
  jk_gw_tick(gw);
  CHECK_INT(r.n_sent, 1);
  CHECK_STR(sent_type(&r, 0), "hello");
  CHECK_STR(json_string_value(json_object_get(r.sent[0], "token")), "");
  CHECK_INT(r.n_replies, 0);
  jk_gw_free(gw);
  rec_done(&r);
  unlink(path);
  rmdir(home);
}

int main(void) {
  test_hello_and_requests();
  test_request_data();
  test_auth_secret();
  test_refused_and_timeouts();
  test_missing_and_spawn();
  test_hostile_input();
  test_hub_token();
  test_token_not_utf8();
  TEST_MAIN_END();
}
