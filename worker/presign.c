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
 * costs only the second answer, which is dropped like a late one. */
#include "presign.h"

#include "conf.h"

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

struct wk_presigner {
  void *sock;
  int64_t next_id;
};

static int set_int(void *s, int opt, int v) { return zmq_setsockopt(s, opt, &v, sizeof v); }

int wk_presigner_new(const struct wk_config *c, void *zctx, struct wk_presigner **ret) {
  struct wk_presigner *p = calloc(1, sizeof *p);
  if (!p) return -ENOMEM;
  int64_t max_msg = MAX_ANSWER_BYTES;
  p->next_id = 1;
  if (!(p->sock = zmq_socket(zctx, ZMQ_DEALER)) ||
      zmq_setsockopt(p->sock, ZMQ_CURVE_SERVERKEY, c->gateway_public, WK_KEY_Z85_LEN + 1) < 0 ||
      zmq_setsockopt(p->sock, ZMQ_CURVE_PUBLICKEY, c->public_key, WK_KEY_Z85_LEN + 1) < 0 ||
      zmq_setsockopt(p->sock, ZMQ_CURVE_SECRETKEY, c->secret_key, WK_KEY_Z85_LEN + 1) < 0 ||
      set_int(p->sock, ZMQ_LINGER, 0) < 0 || set_int(p->sock, ZMQ_RECONNECT_IVL, 100) < 0 ||
      set_int(p->sock, ZMQ_RECONNECT_IVL_MAX, 2000) < 0 ||
      zmq_setsockopt(p->sock, ZMQ_MAXMSGSIZE, &max_msg, sizeof max_msg) < 0 ||
      zmq_connect(p->sock, c->gateway) < 0) {
    int r = sl_err_from_zmq(zmq_errno());
    sl_err(TOPIC, "presign connection to %s: %s", c->gateway, zmq_strerror(zmq_errno()));
    wk_presigner_free(p);
    return r;
  }
  *ret = p;
  return 0;
}

struct wk_presigner *wk_presigner_free(struct wk_presigner *p) {
  if (!p) return NULL;
  if (p->sock) zmq_close(p->sock);
  free(p);
  return NULL;
}

static json_t *request_json(int64_t id, const struct sl_s3_presign_req *reqs, size_t n) {
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
  return json_pack("{s:s, s:I, s:o}", "type", "presign", "id", (json_int_t)id, "requests", list);
}

/* Waits for the answer to id until deadline (monotonic µs): owned JSON or NULL. */
static json_t *await(struct wk_presigner *p, int64_t id, int64_t deadline, int *ret_err) {
  for (;;) {
    int64_t left = (deadline - sl_time_mono_us()) / 1000;
    if (left <= 0) {
      *ret_err = -ETIMEDOUT;
      return NULL;
    }
    zmq_pollitem_t it = {p->sock, 0, ZMQ_POLLIN, 0};
    int r = zmq_poll(&it, 1, (long)left);
    if (r < 0 && zmq_errno() != EINTR) {
      *ret_err = sl_err_from_zmq(zmq_errno());
      return NULL;
    }
    if (r <= 0) continue;
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, p->sock, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&m);
      continue;
    }
    bool more = zmq_msg_more(&m);
    json_t *v = NULL;
    char why[96];
    if (sl_json_parse(zmq_msg_data(&m), zmq_msg_size(&m), 8, &v, why, sizeof why) < 0) v = NULL;
    zmq_msg_close(&m);
    while (more) { /* a well-formed answer has one frame */
      zmq_msg_init(&m);
      more = zmq_msg_recv(&m, p->sock, 0) >= 0 && zmq_msg_more(&m);
      zmq_msg_close(&m);
    }
    json_t *jid = json_object_get(v, "id");
    if (v && !strcmp(sl_json_get_str(v, "type", ""), "presigned") && json_is_integer(jid) &&
        json_integer_value(jid) == id)
      return v;
    json_decref(v); /* late answer to an earlier request, or an error about one */
  }
}

static int presign(void *ctx, const struct sl_s3_presign_req *reqs, size_t n, char **ret_urls,
                   char *err, size_t err_size) {
  struct wk_presigner *p = ctx;
  int64_t id = p->next_id++;
  json_t *req = request_json(id, reqs, n);
  if (!req) return -ENOMEM;
  char *text = json_dumps(req, JSON_COMPACT);
  json_decref(req);
  if (!text) return -ENOMEM;
  size_t len = strlen(text);
  int r = zmq_send(p->sock, text, len, 0) < 0 ? sl_err_from_zmq(zmq_errno()) : 0;
  if (r < 0) {
    free(text);
    snprintf(err, err_size, "cannot ask the gateway for URLs: %s", sl_strerror(r));
    return r;
  }
  int64_t deadline = sl_time_mono_us() + (int64_t)ANSWER_TIMEOUT_MS * SL_US_PER_MS;
  int64_t wait_ms = RESEND_FIRST_MS;
  json_t *ans;
  for (;;) {
    int64_t until = sl_time_mono_us() + wait_ms * SL_US_PER_MS;
    ans = await(p, id, until < deadline ? until : deadline, &r);
    if (ans || r != -ETIMEDOUT || until >= deadline)
      break;
    /* a full queue (no gateway for a while) keeps the copies it holds */
    if (zmq_send(p->sock, text, len, ZMQ_DONTWAIT) == 0)
      sl_debug(TOPIC, "presign request %lld unanswered after %lld ms; sent again", (long long)id,
               (long long)wait_ms);
    wait_ms = wait_ms * 2 < RESEND_MAX_MS ? wait_ms * 2 : RESEND_MAX_MS;
  }
  free(text);
  if (!ans) {
    snprintf(err, err_size, "the gateway did not answer a presign request: %s", sl_strerror(r));
    return r;
  }
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
  for (; i < n; i++) {
    const char *u = json_string_value(json_array_get(urls, i));
    if (!u || strncmp(u, "http", 4) || !(ret_urls[i] = strdup(u))) break;
  }
  json_decref(ans);
  if (i < n) {
    while (i > 0) free(ret_urls[--i]);
    snprintf(err, err_size, "the gateway's answer holds a malformed URL");
    return SL_EWIRE;
  }
  return 0;
}

struct sl_s3_signer wk_presigner_signer(struct wk_presigner *p) {
  return (struct sl_s3_signer){.presign = presign, .ctx = p};
}
