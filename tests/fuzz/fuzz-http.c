/* Fuzz target: the gateway's HTTP API and /metrics as a client reaches
 * them (gateway/http.c, http_api.c, http_budget.c, libmicrohttpd
 * underneath): raw bytes over TCP to a real server on 127.0.0.1, port 0,
 * run on the loop of the in-process gateway of gw-fixture.h, as
 * gateway.c runs it.
 *
 * The gateway holds users alice (group ml, her own budget) and bob (group
 * ops) with tokens in the store, root, an admin, with one; /metrics needs
 * an admin's token. Alice has a running job and a finished one; bob has a
 * running job that was preempted once and resumed, and one more. Budgets:
 * the gateway's, group ml's, alice's. It is built once per process and
 * again after an input that changed a budget, so every input starts from
 * the same state.
 *
 * Input: a byte choosing the token (modulo 6: none, alice's, bob's,
 * root's, one no user holds, one longer than any the server reads), then
 * the bytes of connections split at "\n--\n" (at most PARTS_MAX, the last
 * takes the rest), each written raw to a connection of its own; every
 * "@T@" in them becomes the token chosen ("" for none), so an input
 * places its own Authorization headers. A connection is read until the
 * server closes it; once the server has nothing more to do with it, its
 * writing side is shut, and after WAIT_US it is dropped.
 *
 * Checks on what comes back over each connection: a sequence of
 * well-formed HTTP responses (status line with a code of 100-599, header
 * lines, the body its Content-Length says, none for HEAD, 1xx, 204 and
 * 304); a JSON answer's body is a JSON object, and one that is not 200 is
 * {"error": {"code": the status, "message"}}; a 401 says
 * WWW-Authenticate; a connection without a user's token gets no JSON or
 * metrics answer of 2xx; no answer names a user's session, model, job or
 * instance, or the user, unless the connection carries that user's or the
 * admin's token, or the input wrote that string itself; no 5xx but 505
 * (the HTTP version, refused by libmicrohttpd); and no budget changes
 * unless the input carries the admin's token. libmicrohttpd 0.9.75 writes
 * the head of its own 400 for a malformed Content-Length twice; a head
 * repeated whole is read as one. Connections are kept alive, so requests
 * pipelined on one connection are answered in turn. No input may crash,
 * leak, hang or hit undefined behaviour. */
#include "gw-fixture.h"

#include "budget.h"
#include "http.h"
#include "store.h"

#include "fuzz.h"
#include "sl_json.h"
#include "sl_time.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PARTS_MAX 16
#define WAIT_US (200 * SL_US_PER_MS) /* one connection at most */
#define REQUEST_MAX (1u << 20)       /* one connection's bytes after the token went in */
#define ANSWER_MAX (4u << 20)        /* what is read back from one connection */
#define SECRETS_MAX 16

enum { ALICE, BOB, ROOT, USERS };

static const char *const user_names[USERS] = {"alice", "bob", "root"};
static const char *const user_tokens[USERS] = {"alice-token-5Rq", "bob-token-8Lm",
                                               "root-token-2Xc"};

struct secret {
  int owner;                    /* ALICE or BOB */
  char text[80];
};

struct world {
  struct fx *f;
  struct gw_budget *budget;
  struct gw_httpd *httpd;
  int port;
  struct secret secrets[SECRETS_MAX];
  size_t n_secrets;
  char long_token[1500];
};

static struct world *world;

/* s (quoted: as a JSON string) as a secret of owner. */
static void secret(struct world *w, int owner, bool quoted, const char *s) {
  if (w->n_secrets == SECRETS_MAX)
    abort();
  struct secret *x = &w->secrets[w->n_secrets++];
  x->owner = owner;
  snprintf(x->text, sizeof x->text, quoted ? "\"%s\"" : "%s", s);
}

static void set(struct gw_config *cfg, const char *sec, const char *key, const char *value) {
  char err[256];
  if (gw_config_set(cfg, sec, key, value, err, sizeof err) < 0) {
    fprintf(stderr, "fuzz-http: [%s] %s: %s\n", sec, key, err);
    abort();
  }
}

/* A job of user's in session, with model and data of their own names; its
 * id. */
static int64_t submit(struct fx *f, const char *user, const char *session, const char *model) {
  struct gw_job *j = calloc(1, sizeof *j);
  if (!j)
    abort();
  snprintf(j->user, sizeof j->user, "%s", user);
  snprintf(j->session, sizeof j->session, "%s", session);
  snprintf(j->kind, sizeof j->kind, "train");
  snprintf(j->model, sizeof j->model, "%s", model);
  snprintf(j->data, sizeof j->data, "%s-data", model);
  j->spec = json_pack("{s:{},s:{s:s},s:{s:s}}", "options", "model", "name", model, "data", "name",
                      j->data);
  j->steps = 100;
  if (gw_sched_submit(f->sched, j) < 0)
    abort();
  return j->id;
}

/* The job's id and its instance's as secrets of owner. */
static void job_secrets(struct world *w, int owner, int64_t id) {
  char jid[16];
  secret(w, owner, true, fx_jid(id, jid));
  struct gw_job *j = fx_job(w->f, id);
  if (j && j->instance[0])
    secret(w, owner, true, j->instance);
}

static struct world *world_new(void) {
  struct world *w = calloc(1, sizeof *w);
  struct gw_config *cfg = malloc(sizeof *cfg);
  if (!w || !cfg)
    abort();
  memset(w->long_token, 'k', sizeof w->long_token - 1);
  fx_config(cfg);
  set(cfg, "gateway", "http", "127.0.0.1:0");
  set(cfg, "gateway", "metrics_auth", "yes");
  set(cfg, "gateway", "heartbeat_timeout", "86400s"); /* nothing times out during a run */
  set(cfg, "budget", "monthly_usd", "100");
  set(cfg, "group.ml", "monthly_usd", "10");
  set(cfg, "user.alice", "group", "ml");
  set(cfg, "user.alice", "monthly_usd", "5");
  set(cfg, "user.bob", "group", "ops");
  set(cfg, "user.root", "admin", "yes");
  struct fx *f = w->f = fx_new(cfg);
  free(cfg);
  if (!f)
    abort();
  for (int u = 0; u < USERS; u++)
    fx_user(f, user_names[u], user_tokens[u]);
  struct gw_budget_env be = {.cfg = &f->cfg, .store = f->store, .ledger = f->ledger,
                             .fleet = f->fleet, .sched = f->sched, .bus = &f->bus};
  if (!(w->budget = gw_budget_new(&be)))
    abort();

  /* alice: one finished, one running; bob: one preempted and resumed, one more */
  int64_t a1 = submit(f, "alice", "alice-session-3Vw", "alices-model-2Jm");
  char inst[GW_INSTANCE_ID_MAX];
  if (!fx_run_job(f, a1, inst))
    abort();
  fx_done(f, inst, a1, "succeeded", 0);
  fx_settle(f);
  int64_t a2 = submit(f, "alice", "alice-session-3Vw", "alices-model-2Jm");
  int64_t b1 = submit(f, "bob", "bob-session-7Qx", "bobs-model-9Kz");
  if (!fx_run_job(f, a2, NULL) || !fx_run_job(f, b1, inst))
    abort();
  fp_terminated(f->fp, inst, true);
  fx_settle(f);
  if (!fx_run_job(f, b1, NULL))
    abort();
  int64_t b2 = submit(f, "bob", "bob-session-7Qx", "bobs-model-9Kz");
  fx_settle(f);

  for (int u = ALICE; u <= BOB; u++)
    secret(w, u, true, user_names[u]);
  secret(w, ALICE, false, "alice-session-3Vw");
  secret(w, ALICE, false, "alices-model-2Jm");
  secret(w, BOB, false, "bob-session-7Qx");
  secret(w, BOB, false, "bobs-model-9Kz");
  job_secrets(w, ALICE, a1);
  job_secrets(w, ALICE, a2);
  job_secrets(w, BOB, b1);
  job_secrets(w, BOB, b2);

  struct gw_httpd_env he = {.cfg = &f->cfg, .store = f->store, .fleet = f->fleet,
                            .ledger = f->ledger, .kproto = f->kproto, .loop = f->loop,
                            .started_us = sl_time_real_us(), .budget = w->budget};
  char err[256] = "";
  if (gw_httpd_new(&he, &w->httpd, err, sizeof err) < 0) {
    fprintf(stderr, "fuzz-http: %s\n", err);
    abort();
  }
  w->port = gw_httpd_port(w->httpd);
  return w;
}

static void world_free(struct world *w) {
  if (!w)
    return;
  gw_httpd_free(w->httpd);
  gw_budget_free(w->budget);
  fx_free(w->f);
  free(w);
}

/* ---- one connection ---- */

/* pt with every "@T@" replaced by token, into an owned block; its length
 * in *ret_len (at most REQUEST_MAX: the rest is left out). */
static char *with_token(struct fuzz_part pt, const char *token, size_t *ret_len) {
  size_t tl = strlen(token), cap = pt.len + 1, n = 0;
  char *out = malloc(cap);
  if (!out)
    abort();
  for (size_t i = 0; i < pt.len && n < REQUEST_MAX;) {
    bool at = i + 3 <= pt.len && !memcmp(pt.p + i, "@T@", 3);
    size_t add = at ? tl : 1;
    if (n + add > cap) {
      cap = (n + add) * 2;
      if (!(out = realloc(out, cap)))
        abort();
    }
    memcpy(out + n, at ? (const uint8_t *)token : pt.p + i, add);
    n += add;
    i += at ? 3 : 1;
  }
  *ret_len = n < REQUEST_MAX ? n : REQUEST_MAX;
  return out;
}

/* Writes req to a fresh connection to the server and reads what comes
 * back into ans (ANSWER_MAX bytes), turning the gateway's loop in between.
 * Its length; *ret_cut when the connection was dropped before the server
 * closed it (an answer may be partial then). */
static size_t exchange(struct world *w, const char *req, size_t n, char *ans, bool *ret_cut) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)w->port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (fd < 0)
    abort();
  /* a signal (libFuzzer's timeout alarm) may interrupt a connect that
   * waits: the handshake goes on, and connect says how it ended */
  int r = connect(fd, (struct sockaddr *)&sa, sizeof sa);
  while (r < 0 && (errno == EINTR || errno == EALREADY)) {
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    poll(&p, 1, 100);
    r = connect(fd, (struct sockaddr *)&sa, sizeof sa);
  }
  if (r < 0 && errno != EISCONN) {
    perror("fuzz-http: connect");
    abort();
  }
  if (fcntl(fd, F_SETFL, O_NONBLOCK) < 0)
    abort();
  size_t sent = 0, got = 0;
  bool closed = false, shut = false;
  int quiet = 0;
  int64_t end = sl_time_mono_us() + WAIT_US;
  while (!closed && got < ANSWER_MAX && sl_time_mono_us() < end) {
    bool moved = false;
    if (sent < n) {
      ssize_t k = send(fd, req + sent, n - sent, MSG_NOSIGNAL);
      if (k > 0)
        sent += (size_t)k, moved = true;
      else if (k < 0 && errno != EAGAIN && errno != EINTR)
        sent = n; /* the server closed its side: read what it said */
    }
    int ran = gw_loop_run_once(w->f->loop, SL_US_PER_MS);
    if (ran < 0)
      abort();
    for (;;) {
      ssize_t k = recv(fd, ans + got, ANSWER_MAX - got, 0);
      if (k > 0) {
        got += (size_t)k, moved = true;
        if (got == ANSWER_MAX)
          break;
      } else {
        if (k == 0 || (errno != EAGAIN && errno != EINTR))
          closed = true;
        break;
      }
    }
    /* all written and nothing left to do: shut the writing side, so a
     * server waiting for the rest of a request hears that none comes */
    quiet = moved || ran > 0 ? 0 : quiet + 1;
    if (sent == n && !shut && quiet >= 2) {
      shutdown(fd, SHUT_WR);
      shut = true;
    }
  }
  close(fd);
  /* the server sees the close and frees the connection */
  for (int i = 0; i < 4; i++)
    gw_loop_run_once(w->f->loop, 0);
  *ret_cut = !closed;
  return got;
}

/* ---- what comes back ---- */

static void fail(const char *why, const char *ans, size_t n) {
  fprintf(stderr, "fuzz-http: %s; the answers:\n%.*s\n", why, (int)(n < 4096 ? n : 4096), ans);
  abort();
}

static bool has(const void *hay, size_t n, const char *needle) {
  return memmem(hay, n, needle, strlen(needle)) != NULL;
}

/* Whether p[0..m) may begin the next response: nothing, or "HTTP/" (its
 * start only, when the connection was dropped). */
static bool next_ok(const char *p, size_t m, bool cut) {
  if (m == 0)
    return true;
  return m >= 5 ? !memcmp(p, "HTTP/", 5) : cut && !memcmp(p, "HTTP/", m);
}

/* The value of header name in the header lines h[0..n) ("\r\n" before
 * each), without the blanks around it, into buf; false when absent. */
static bool header(const char *h, size_t n, const char *name, char *buf, size_t size) {
  size_t k = strlen(name);
  for (const char *l = memmem(h, n, "\r\n", 2); l; l = memmem(l + 2, n - (size_t)(l + 2 - h), "\r\n", 2)) {
    const char *s = l + 2, *e = memmem(s, n - (size_t)(s - h), "\r\n", 2);
    size_t len = e ? (size_t)(e - s) : n - (size_t)(s - h);
    if (len > k && s[k] == ':' && !strncasecmp(s, name, k)) {
      const char *v = s + k + 1, *end = s + len;
      while (v < end && *v == ' ')
        v++;
      while (end > v && end[-1] == ' ')
        end--;
      snprintf(buf, size, "%.*s", (int)(end - v), v);
      return true;
    }
  }
  return false;
}

/* What a connection carries: the users whose tokens it holds, and whether
 * a HEAD request may be among its requests. */
struct conn {
  bool user[USERS];
  bool any_user;
  bool head;
};

/* One response: status, its header lines h[0..hn), its body (NULL: none). */
static void check_one(const struct conn *c, int status, const char *h, size_t hn, const char *body,
                      size_t blen, const char *ans, size_t n) {
  char type[128] = "", v[64];
  header(h, hn, "Content-Type", type, sizeof type);
  bool json = !strncmp(type, "application/json", 16);
  if (status >= 500 && status != 505)
    fail("a 5xx, and the gateway is sound", ans, n);
  if (status == 401 && !header(h, hn, "WWW-Authenticate", v, sizeof v))
    fail("a 401 without WWW-Authenticate", ans, n);
  if (!c->any_user && status >= 200 && status < 300 && (json || !strncmp(type, "text/plain", 10)))
    fail("an answer with data to a connection without a user's token", ans, n);
  if (!json || !body)
    return;
  json_t *o = NULL;
  if (sl_json_parse(body, blen, 64, &o, NULL, 0) < 0 || !json_is_object(o))
    fail("a JSON answer whose body is no JSON object", ans, n);
  if (status != 200) {
    const json_t *e = json_object_get(o, "error"), *code = json_object_get(e, "code");
    const json_t *msg = json_object_get(e, "message");
    if (!json_is_integer(code) || json_integer_value(code) != status || !json_is_string(msg) ||
        !json_string_length(msg))
      fail("an error answer without {\"error\": {\"code\": its status, \"message\"}}", ans, n);
  }
  json_decref(o);
}

static void check_answers(const struct world *w, const struct conn *c, const char *ans, size_t n,
                          bool cut, const uint8_t *input, size_t input_n) {
  for (size_t i = 0; i < w->n_secrets; i++) {
    const struct secret *s = &w->secrets[i];
    if (!c->user[s->owner] && !c->user[ROOT] && has(ans, n, s->text) &&
        !has(input, input_n, s->text)) {
      fprintf(stderr, "fuzz-http: %s's %s reached a connection without their token\n",
              user_names[s->owner], s->text);
      fail("another user's data", ans, n);
    }
  }
  size_t off = 0;
  while (off < n) {
    const char *r = ans + off, *eoh = memmem(r, n - off, "\r\n\r\n", 4);
    if (!eoh) {
      if (cut)
        return;
      fail("a response without the end of its header", ans, n);
    }
    size_t hn = (size_t)(eoh - r) + 2; /* the header lines, each ending "\r\n" */
    if (hn < 14 || (memcmp(r, "HTTP/1.1 ", 9) && memcmp(r, "HTTP/1.0 ", 9)) || r[9] < '1' ||
        r[9] > '5' || r[10] < '0' || r[10] > '9' || r[11] < '0' || r[11] > '9' ||
        (r[12] != ' ' && r[12] != '\r'))
      fail("a response without a status line", ans, n);
    int status = (r[9] - '0') * 100 + (r[10] - '0') * 10 + (r[11] - '0');
    const char *h = memmem(r, hn, "\r\n", 2); /* from the end of the status line */
    for (const char *l = h; l + 2 < r + hn;) {
      const char *s = l + 2, *e = memmem(s, (size_t)(r + hn - s), "\r\n", 2);
      const char *colon = memchr(s, ':', (size_t)(e - s));
      if (!colon || colon == s || memchr(s, '\n', (size_t)(e - s)) || memchr(s, '\r', (size_t)(e - s)) ||
          memchr(s, 0, (size_t)(e - s)))
        fail("a malformed header line", ans, n);
      l = e;
    }
    char v[64];
    long long clen = -1;
    if (header(h, (size_t)(r + hn - h), "Content-Length", v, sizeof v)) {
      char *end = NULL;
      clen = strtoll(v, &end, 10);
      if (!v[0] || *end || clen < 0)
        fail("a malformed Content-Length", ans, n);
    }
    off += hn + 2;
    /* libmicrohttpd (0.9.75) writes the head of its 400 for a malformed
     * Content-Length twice, the body after the second: read as one */
    if (status == 400 && n - off >= hn + 2 && !memcmp(ans + off, r, hn + 2))
      off += hn + 2;
    size_t left = n - off;
    const char *body = NULL;
    size_t blen = 0;
    if (status >= 200 && status != 204 && status != 304) {
      if (clen < 0) {
        if (cut)
          return; /* a body to the close, which did not come */
        body = ans + off, blen = left;
      } else if ((size_t)clen <= left && next_ok(ans + off + clen, left - (size_t)clen, cut)) {
        body = ans + off, blen = (size_t)clen;
      } else if (!(c->head && next_ok(ans + off, left, cut))) {
        if (cut && (size_t)clen > left)
          return;
        fail("a body other than its Content-Length says", ans, n);
      }
    }
    check_one(c, status, h, (size_t)(r + hn - h), body, blen, ans, n);
    off += blen;
  }
}

/* The budgets as set (scope, name, amount, hard cap, alert thresholds,
 * who set one live), without what spend moves; owned. */
static json_t *limits(struct gw_budget *b) {
  json_t *all = gw_budget_json(b, NULL), *list = json_deep_copy(json_object_get(all, "budgets"));
  size_t i;
  json_t *e;
  if (!list)
    abort();
  json_array_foreach(list, i, e) {
    static const char *const moving[] = {"spent_usd", "ratio", "fired", "capped", "cap_fired"};
    for (size_t k = 0; k < sizeof moving / sizeof *moving; k++)
      json_object_del(e, moving[k]);
  }
  json_decref(all);
  return list;
}

static const char *token_of(const struct world *w, unsigned choice) {
  switch (choice % 6) {
  case 1: return user_tokens[ALICE];
  case 2: return user_tokens[BOB];
  case 3: return user_tokens[ROOT];
  case 4: return "no-such-token-0Zz";
  case 5: return w->long_token;
  default: return "";
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  fuzz_quiet_once();
  if (!world)
    world = world_new();
  struct world *w = world;
  const char *token = token_of(w, data[0]);
  json_t *before = limits(w->budget);
  char *ans = malloc(ANSWER_MAX);
  if (!before || !ans)
    abort();
  bool admin = false;
  struct fuzz_part parts[PARTS_MAX];
  size_t n = fuzz_split(data + 1, size - 1, parts, PARTS_MAX);
  for (size_t i = 0; i < n; i++) {
    size_t len;
    char *req = with_token(parts[i], token, &len);
    struct conn c = {.head = has(req, len, "HEAD")};
    for (int u = 0; u < USERS; u++)
      c.any_user |= c.user[u] = has(req, len, user_tokens[u]);
    admin |= c.user[ROOT];
    bool cut;
    size_t got = exchange(w, req, len, ans, &cut);
    check_answers(w, &c, ans, got, cut, data, size);
    free(req);
  }
  free(ans);
  json_t *after = limits(w->budget);
  if (!json_equal(before, after)) {
    if (!admin) {
      fprintf(stderr, "fuzz-http: a budget changed without the admin's token\n");
      abort();
    }
    /* the next input starts from the same budgets again */
    world_free(w);
    world = NULL;
  }
  json_decref(before);
  json_decref(after);
  return 0;
}
