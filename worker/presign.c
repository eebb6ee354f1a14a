/* A worker's presigned URLs from its gateway (presign.h).
 *
 * One DEALER socket, used only from the thread that calls the store, with
 * the instance's CURVE keys: the gateway admits it like the agent's own
 * connection and answers a presign to the connection that asked. Requests
 * carry an id; an answer to an older, timed-out request is read and
 * dropped. A request still unanswered after RESEND_FIRST_MS is sent again,
 * then at growing intervals up to RESEND_MAX_MS: a gateway killed with it
 * unanswered never answers, and its successor (a restart takes a second or
 * two) answers the copy. Signing changes nothing, so a copy answered twice
 * costs only the second answer, which is dropped like a late one. A
 * gateway that refused the connection (link.h) gets a new one, and the
 * request again, as soon as the link's backoff allows.
 *
 * A request asked without waiting (ask) keeps a slot until it is taken:
 * its answer is read by wk_presigner_read between store calls, or by a
 * store call's own wait (which reads every answer the socket holds), and
 * waits in the slot; its copies go out from wk_presigner_tend on the same
 * schedule as a waiting request's. */
#include "presign.h"
#include "presign_int.h"

#include "conf.h"
#include "link.h"

#include "sl_err.h"
#include "sl_frame.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define TOPIC "worker.store"
#define ANSWER_TIMEOUT_MS 20000
#define RESEND_FIRST_MS 1000
#define RESEND_MAX_MS 4000
#define MAX_ANSWER_BYTES (4 << 20)

/* A request asked without waiting; id 0: a free slot. */
struct asked {
  int64_t id;
  char *text; /* the request, for its copies */
  size_t len, n;
  bool tried; /* sent once at least (or tried to be) */
  int64_t deadline_us, next_send_us, wait_ms;
  json_t *answer; /* once it came */
};

struct wk_presigner {
  struct wk_link *link;
  int64_t next_id;
  struct asked asked[WK_PRESIGN_ASKED_MAX];
};

int wk_presigner_new(const struct wk_config *c, void *zctx, struct wk_presigner **ret) {
  struct wk_presigner *p = calloc(1, sizeof *p);
  if (!p) return -ENOMEM;
  p->next_id = 1;
  struct wk_link_opts o = {.name = "presign", .max_msg_bytes = MAX_ANSWER_BYTES};
  int r = wk_link_new(zctx, c, &o, &p->link);
  if (r < 0) {
    free(p);
    return r;
  }
  *ret = p;
  return 0;
}

static void send_asked(struct wk_presigner *p, int64_t now, bool renewed);

static void asked_clear(struct asked *q) {
  free(q->text);
  json_decref(q->answer);
  memset(q, 0, sizeof *q);
}

struct wk_presigner *wk_presigner_free(struct wk_presigner *p) {
  if (!p) return NULL;
  for (size_t i = 0; i < WK_PRESIGN_ASKED_MAX; i++) asked_clear(&p->asked[i]);
  wk_link_free(p->link);
  free(p);
  return NULL;
}

/* The wait before a request's next copy, after one of wait_ms. */
static int64_t next_wait_ms(int64_t wait_ms) {
  return wait_ms * 2 < RESEND_MAX_MS ? wait_ms * 2 : RESEND_MAX_MS;
}

/* The request's JSON text (owned), NULL without memory. */
static char *request_text(int64_t id, const struct sl_s3_presign_req *reqs, size_t n) {
  json_t *list = json_array();
  for (size_t i = 0; i < n && list; i++) {
    const struct sl_s3_presign_req *q = &reqs[i];
    json_t *e = json_pack("{s:s, s:s}", "op", sl_s3_op_name(q->op), "key", q->key ? q->key : "");
    if (!e) break;
    if (q->upload_id) json_object_set_new(e, "upload_id", json_string(q->upload_id));
    if (q->part) json_object_set_new(e, "part", json_integer(q->part));
    if (q->sha256) json_object_set_new(e, "sha256", json_string(q->sha256));
    if (q->continuation) json_object_set_new(e, "continuation", json_string(q->continuation));
    json_array_append_new(list, e);
  }
  if (!list || json_array_size(list) != n) {
    json_decref(list);
    return NULL;
  }
  json_t *req = json_pack("{s:s, s:I, s:o}", "type", "presign", "id", (json_int_t)id, "requests", list);
  char *text = req ? json_dumps(req, JSON_COMPACT) : NULL;
  json_decref(req);
  return text;
}

int64_t wk_presign_answer_id(const json_t *v) {
  json_t *jid = json_object_get(v, "id");
  if (!v || strcmp(sl_json_get_str(v, "type", ""), "presigned") || !json_is_integer(jid)) return 0;
  return json_integer_value(jid) > 0 ? json_integer_value(jid) : 0;
}

static struct asked *asked_find(struct wk_presigner *p, int64_t id) {
  for (size_t i = 0; id > 0 && i < WK_PRESIGN_ASKED_MAX; i++)
    if (p->asked[i].id == id) return &p->asked[i];
  return NULL;
}

/* Takes v (owned, may be NULL): the first answer to a request asked without
 * waiting is kept in its slot; anything else (a late answer to a request
 * that timed out, a copy's second answer) is dropped. */
static void keep_or_drop(struct wk_presigner *p, json_t *v) {
  struct asked *q = asked_find(p, wk_presign_answer_id(v));
  if (q && !q->answer) {
    q->answer = v;
    return;
  }
  json_decref(v);
}

/* One message from the socket without waiting: owned JSON (NULL for one
 * that is not), 0 when there was none. */
static int recv_one(void *sock, json_t **ret) {
  zmq_msg_t m;
  zmq_msg_init(&m);
  if (zmq_msg_recv(&m, sock, ZMQ_DONTWAIT) < 0) {
    zmq_msg_close(&m);
    return 0;
  }
  bool more = zmq_msg_more(&m);
  json_t *v = NULL;
  char why[96];
  if (sl_json_parse(zmq_msg_data(&m), zmq_msg_size(&m), 8, &v, why, sizeof why) < 0) v = NULL;
  zmq_msg_close(&m);
  while (more) { /* a well-formed answer has one frame */
    zmq_msg_init(&m);
    more = zmq_msg_recv(&m, sock, 0) >= 0 && zmq_msg_more(&m);
    zmq_msg_close(&m);
  }
  *ret = v;
  return 1;
}

/* Waits for the answer to id until deadline (monotonic µs): owned JSON, or
 * NULL with -ETIMEDOUT, or -ECONNRESET when a refused connection was just
 * replaced (what it held is gone: the request must go again). */
static json_t *await(struct wk_presigner *p, int64_t id, int64_t deadline, int *ret_err) {
  for (;;) {
    int64_t now = sl_time_mono_us();
    if (wk_link_tick(p->link, now) > 0) {
      *ret_err = -ECONNRESET;
      return NULL;
    }
    int64_t until = wk_link_due_us(p->link) < deadline ? wk_link_due_us(p->link) : deadline;
    int64_t left = (until - now + 999) / 1000;
    if (now >= deadline) {
      *ret_err = -ETIMEDOUT;
      return NULL;
    }
    void *sock = wk_link_socket(p->link);
    zmq_pollitem_t it[2] = {{sock, 0, ZMQ_POLLIN, 0}, {wk_link_monitor(p->link), 0, ZMQ_POLLIN, 0}};
    int r = zmq_poll(it, 2, (long)(left > 0 ? left : 0));
    if (r < 0 && zmq_errno() != EINTR) {
      *ret_err = sl_err_from_zmq(zmq_errno());
      return NULL;
    }
    if (r > 0 && it[1].revents) wk_link_events(p->link);
    if (r <= 0 || !it[0].revents || wk_link_socket(p->link) != sock) continue; /* replaced meanwhile */
    json_t *v;
    if (!recv_one(sock, &v)) continue;
    if (wk_presign_answer_id(v) == id) return v;
    keep_or_drop(p, v);
  }
}

/* Whether u is a URL to hand the HTTP client: http:// or https://, whole
 * (no NUL inside the string), without control characters (a CR or LF
 * would end the request line). */
static bool url_ok(const json_t *u) {
  const char *s = json_string_value(u);
  if (!s || strlen(s) != json_string_length(u)) return false;
  if (strncmp(s, "http://", 7) && strncmp(s, "https://", 8)) return false;
  for (; *s; s++)
    if ((unsigned char)*s < 0x20 || *s == 0x7f) return false;
  return true;
}

int wk_presign_answer_urls(json_t *ans, size_t n, char **ret_urls, char *err, size_t err_size) {
  int r;
  json_t *e = json_object_get(ans, "error");
  json_t *urls = json_object_get(ans, "urls");
  if (e || !json_is_array(urls) || json_array_size(urls) != n) {
    snprintf(err, err_size, "the gateway refused the URLs: %.200s",
             e ? sl_json_get_str(e, "message", "?") : "malformed answer");
    r = e && !strcmp(sl_json_get_str(e, "code", ""), "SL_EAUTH") ? SL_EAUTH : SL_EWIRE;
    json_decref(ans);
    return r;
  }
  size_t i = 0;
  r = 0;
  for (; i < n && r == 0; i++) {
    const json_t *u = json_array_get(urls, i);
    if (!url_ok(u)) r = SL_EWIRE;
    else if (!(ret_urls[i] = strdup(json_string_value(u)))) r = -ENOMEM;
  }
  json_decref(ans);
  if (r < 0) {
    for (i--; i > 0;) free(ret_urls[--i]); /* the URLs copied before the one at fault */
    snprintf(err, err_size, "%s", r == -ENOMEM ? "out of memory" : "the gateway's answer holds a malformed URL");
  }
  return r;
}

static int presign(void *ctx, const struct sl_s3_presign_req *reqs, size_t n, char **ret_urls,
                   char *err, size_t err_size) {
  struct wk_presigner *p = ctx;
  int64_t id = p->next_id++;
  char *text = request_text(id, reqs, n);
  if (!text) return -ENOMEM;
  size_t len = strlen(text);
  /* never a blocking send: a refused connection's socket has no peer to
   * queue for, and would hold the store's thread for ever */
  wk_presigner_tend(p, sl_time_mono_us(), true);
  if (zmq_send(wk_link_socket(p->link), text, len, ZMQ_DONTWAIT) < 0)
    sl_debug(TOPIC, "presign request %lld not queued (%s); sent again later", (long long)id,
             zmq_strerror(zmq_errno()));
  int r = 0;
  int64_t deadline = sl_time_mono_us() + (int64_t)ANSWER_TIMEOUT_MS * SL_US_PER_MS;
  int64_t wait_ms = RESEND_FIRST_MS;
  json_t *ans;
  for (;;) {
    int64_t until = sl_time_mono_us() + wait_ms * SL_US_PER_MS;
    ans = await(p, id, until < deadline ? until : deadline, &r);
    if (ans || (r != -ETIMEDOUT && r != -ECONNRESET) || sl_time_mono_us() >= deadline)
      break;
    /* a new connection: what the old one held is gone, the requests asked
     * without waiting too */
    if (r == -ECONNRESET) send_asked(p, sl_time_mono_us(), true);
    /* a full queue (no gateway for a while) keeps the copies it holds */
    if (zmq_send(wk_link_socket(p->link), text, len, ZMQ_DONTWAIT) == 0)
      sl_debug(TOPIC, "presign request %lld %s; sent again", (long long)id,
               r == -ECONNRESET ? "on a new connection" : "unanswered");
    if (r == -ETIMEDOUT) wait_ms = next_wait_ms(wait_ms);
  }
  free(text);
  if (!ans && r == -ECONNRESET) r = -ETIMEDOUT;
  if (!ans) {
    snprintf(err, err_size, "the gateway did not answer a presign request: %s", sl_strerror(r));
    return r;
  }
  return wk_presign_answer_urls(ans, n, ret_urls, err, err_size);
}

void *wk_presigner_monitor(struct wk_presigner *p) { return wk_link_monitor(p->link); }

/* ---- asked without waiting ---- */

static int ask(void *ctx, const struct sl_s3_presign_req *reqs, size_t n, int64_t *ret_id) {
  struct wk_presigner *p = ctx;
  struct asked *q = NULL;
  for (size_t i = 0; i < WK_PRESIGN_ASKED_MAX && !q; i++)
    if (!p->asked[i].id) q = &p->asked[i];
  if (!q) return -EBUSY;
  int64_t id = p->next_id++;
  char *text = request_text(id, reqs, n);
  if (!text) return -ENOMEM;
  int64_t now = sl_time_mono_us();
  *q = (struct asked){.id = id, .text = text, .len = strlen(text), .n = n,
                      .deadline_us = now + (int64_t)ANSWER_TIMEOUT_MS * SL_US_PER_MS,
                      .next_send_us = now, .wait_ms = RESEND_FIRST_MS};
  wk_presigner_tend(p, now, true); /* sends it */
  *ret_id = id;
  return 0;
}

static int take(void *ctx, int64_t id, char **ret_urls, size_t n, char *err, size_t err_size) {
  struct wk_presigner *p = ctx;
  struct asked *q = asked_find(p, id);
  if (!q || q->n != n) {
    snprintf(err, err_size, "no such presign request");
    return -ENOENT;
  }
  if (!q->answer && sl_time_mono_us() < q->deadline_us) return 0;
  json_t *ans = q->answer;
  q->answer = NULL;
  asked_clear(q);
  if (!ans) {
    snprintf(err, err_size, "the gateway did not answer a presign request: %s", sl_strerror(-ETIMEDOUT));
    return -ETIMEDOUT;
  }
  int r = wk_presign_answer_urls(ans, n, ret_urls, err, err_size);
  return r < 0 ? r : 1;
}

static void forget(void *ctx, int64_t id) {
  struct asked *q = asked_find(ctx, id);
  if (q) asked_clear(q);
}

void *wk_presigner_socket(struct wk_presigner *p) { return wk_link_socket(p->link); }

void wk_presigner_read(struct wk_presigner *p) {
  json_t *v;
  while (recv_one(wk_link_socket(p->link), &v)) keep_or_drop(p, v);
}

void wk_presigner_tend(struct wk_presigner *p, int64_t now, bool events) {
  if (events) wk_link_events(p->link);
  send_asked(p, now, wk_link_tick(p->link, now) > 0);
}

/* Sends the requests asked without waiting that are due, or all that are
 * unanswered when the connection was just renewed (what the old socket
 * held is gone). */
static void send_asked(struct wk_presigner *p, int64_t now, bool renewed) {
  for (size_t i = 0; i < WK_PRESIGN_ASKED_MAX; i++) {
    struct asked *q = &p->asked[i];
    if (!q->id || q->answer || now >= q->deadline_us || (now < q->next_send_us && !renewed)) continue;
    /* a full queue (no gateway for a while) keeps the copies it holds */
    bool again = q->tried;
    q->tried = true;
    if (zmq_send(wk_link_socket(p->link), q->text, q->len, ZMQ_DONTWAIT) == 0 && again)
      sl_debug(TOPIC, "presign request %lld %s; sent again", (long long)q->id,
               renewed ? "on a new connection" : "unanswered");
    q->next_send_us = now + q->wait_ms * SL_US_PER_MS;
    q->wait_ms = next_wait_ms(q->wait_ms);
  }
}

struct sl_s3_signer wk_presigner_signer(struct wk_presigner *p) {
  return (struct sl_s3_signer){.presign = presign, .ask = ask, .take = take, .forget = forget, .ctx = p};
}
