/* Fuzz target: the gateway's kernel/CLI protocol (gw_kproto_recv and
 * gw_kproto_handle), over the in-process gateway of gw-fixture.h.
 *
 * Input layout: the first byte chooses what exists before the requests
 * arrive (bits below); the rest is a list of messages separated by
 * "\n--\n", and the frames of one message by "\n++\n" (one frame: the JSON
 * body of a request, as clients send it). Each message goes from client
 * "ka" through a real ROUTER socket (inproc, no network) to gw_kproto_recv,
 * so the frame limits, the JSON parser and the handlers all see it; the
 * gateway's loop then settles (placements, provider events, replays).
 *
 * A message whose first frame parses as a JSON object without "auth" gets
 * the secret of ka's last hello in it, as a client's would, so that the
 * handlers behind the check are reached; other bytes go as they are.
 *
 * Each input gets a fresh gateway (its own temporary state folder and
 * SQLite store), so a crash replays from its input alone. Nothing may
 * crash, leak, hang or hit undefined behaviour, whatever the bytes. */
#include "gw-fixture.h"

#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

enum {
  HELLO = 1 << 0,       /* "ka" is alice, in session "nb" */
  DEFINE = 1 << 1,      /* alice's session defines model "m" and data "d" */
  BOB_JOB = 1 << 2,     /* bob's job runs on an instance (another user's job) */
  OWN_JOB = 1 << 3,     /* alice's own job runs on an instance */
  LIVE = 1 << 4,        /* after each message the running jobs report a step */
  SLOW = 1 << 5,        /* ka's transport takes two messages, then is full */
  UPLOADS = 1 << 6,     /* [store] upload_data = yes: data.have, data.put, submits asked to upload */
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void *zctx, *router, *dealer;

/* The socket pair, made once per process: the fixture's gateway reads from
 * router what the dealer ("ka") sends. */
static void sockets_once(void) {
  if (zctx)
    return;
  setenv("SPOTLAB_QUIET", "1", 0); /* info lines: one per hello, launch, state change */
  sl_log_init(NULL);
  /* a fresh store per input: in memory, SQLite's syncs stay off the disk */
  if (!getenv("TMPDIR") && access("/dev/shm", W_OK) == 0)
    setenv("TMPDIR", "/dev/shm", 1);
  static const char ep[] = "inproc://fuzz-kproto";
  zctx = zmq_ctx_new();
  router = zctx ? zmq_socket(zctx, ZMQ_ROUTER) : NULL;
  dealer = zctx ? zmq_socket(zctx, ZMQ_DEALER) : NULL;
  int linger = 0;
  if (!router || !dealer || zmq_bind(router, ep) < 0 ||
      zmq_setsockopt(dealer, ZMQ_ROUTING_ID, "ka", 2) < 0 ||
      zmq_setsockopt(dealer, ZMQ_LINGER, &linger, sizeof linger) < 0 ||
      zmq_connect(dealer, ep) < 0) {
    fprintf(stderr, "fuzz-kproto: cannot make the sockets: %s\n", zmq_strerror(zmq_errno()));
    abort();
  }
}

/* Sends one message (frames split at "\n++\n") and lets the gateway read it. */
static void deliver(struct fx *f, const uint8_t *p, size_t n) {
  const uint8_t *first_end = memmem(p, n, "\n++\n", 4);
  size_t first = first_end ? (size_t)(first_end - p) : n;
  json_t *body = json_loadb((const char *)p, first, JSON_DECODE_ANY, NULL);
  json_t *auth = json_object_get(f->auths, "ka");
  char *signed_msg = NULL;
  size_t signed_len = 0;
  if (json_is_object(body) && auth && !json_object_get(body, "auth") && json_object_set(body, "auth", auth) == 0) {
    char *text = json_dumps(body, JSON_COMPACT);
    size_t tl = text ? strlen(text) : 0;
    if (text && (signed_msg = malloc(tl + (n - first) + 1))) {
      memcpy(signed_msg, text, tl);
      memcpy(signed_msg + tl, p + first, n - first); /* the frames after the first, as they were */
      signed_len = tl + (n - first);
      p = (const uint8_t *)signed_msg;
      n = signed_len;
    }
    free(text);
  }
  json_decref(body);
  const uint8_t *end = p + n;
  for (;;) {
    const uint8_t *sep = memmem(p, (size_t)(end - p), "\n++\n", 4);
    const uint8_t *stop = sep ? sep : end;
    if (zmq_send(dealer, p, (size_t)(stop - p), sep ? ZMQ_SNDMORE : 0) < 0)
      abort();
    if (!sep)
      break;
    p = sep + 4;
  }
  zmq_pollitem_t it = {router, 0, ZMQ_POLLIN, 0};
  if (zmq_poll(&it, 1, 5000) != 1) {
    fprintf(stderr, "fuzz-kproto: the message never arrived\n");
    abort();
  }
  free(signed_msg);
  gw_kproto_recv(f->kproto, router);
}

/* bob's or alice's job, placed and running on an instance; 0 if not. */
static int64_t running_job(struct fx *f, const char *rid, const char *token) {
  if (!fx_hello(f, rid, token, "nb") || !fx_define(f, rid))
    return 0;
  const json_t *r = fx_ksubmit(f, rid, json_pack("{s:i}", "steps", 50));
  int64_t id = gw_job_id_parse(sl_json_get_str(r, "job", NULL));
  return id > 0 && fx_run_job(f, id, NULL) ? id : 0;
}

static void report_step(struct fx *f, int64_t job, int64_t step) {
  struct gw_job *j = job ? fx_job(f, job) : NULL;
  if (j && j->instance[0])
    fx_metric(f, j->instance, job, step, 2.5);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  sockets_once();
  unsigned flags = data[0];
  data++;
  size--;
  static struct gw_config cfg;
  fx_config(&cfg);
  if (flags & UPLOADS)
    snprintf(cfg.upload_data, sizeof cfg.upload_data, "yes");
  struct fx *f = fx_new(&cfg);
  if (!f)
    abort();
  fx_user(f, "alice", "alice-token");
  fx_user(f, "bob", "bob-token");
  int64_t bob = flags & BOB_JOB ? running_job(f, "kb", "bob-token") : 0;
  int64_t own = flags & OWN_JOB ? running_job(f, "ka", "alice-token") : 0;
  if (flags & HELLO)
    fx_hello(f, "ka", "alice-token", "nb");
  if (flags & DEFINE)
    fx_define(f, "ka");
  if (flags & SLOW)
    fx_client_allow(f, "ka", 2);
  const uint8_t *p = data, *end = data + size;
  for (int64_t step = 1;; step++) {
    const uint8_t *sep = memmem(p, (size_t)(end - p), "\n--\n", 4);
    const uint8_t *stop = sep ? sep : end;
    deliver(f, p, (size_t)(stop - p));
    fx_settle(f);
    if (flags & LIVE) {
      report_step(f, own, step);
      report_step(f, bob, step);
      fx_settle(f);
    }
    fx_captures_clear(f);
    fx_bus_clear(f);
    if (!sep)
      break;
    p = sep + 4;
  }
  fx_free(f);
  return 0;
}
