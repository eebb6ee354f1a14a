/* The worker's presigner against a gateway that dies with a request
 * unanswered: a real CURVE ROUTER (the gateway's side) takes the request and
 * closes without an answer, a second one binds the same address, and the
 * presigner's copy of the request is answered there, well within its
 * timeout. The answers to the copies that arrive after the first are dropped
 * by the next request, which gets its own.
 *
 * Then a gateway whose ZAP handler refuses the presigner's key twice (as one
 * that does not know the instance yet) and then admits it: libzmq gives up
 * on a refused connection, so the presigner must open a new one by itself,
 * and its request is answered within its timeout.
 *
 * Then requests asked without waiting (the jobs' orphan URLs, asked from the
 * agent's loop): one held by the gateway and answered while a store call
 * waits for its own (the store call's wait keeps it for its take), one
 * answered while the caller polls the socket, one forgotten; no more than
 * WK_PRESIGN_ASKED_MAX at once. */
#include "harness.h"

#include "conf.h"
#include "presign.h"
#include "presign_int.h"
#include "sl_err.h"
#include "sl_time.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

struct fake_gw {
  void *zctx;
  char endpoint[128];
  char secret[WK_KEY_Z85_LEN + 1];
  int answered;   /* presign requests the second gateway answered */
  int first_seen; /* the first gateway took one */
  int refuse;     /* the refusing gateway: handshakes to refuse */
  int zap_asked, zap_refused, zap_answered;
  long long async_order[3]; /* the async gateway's answers, in order */
};

static void *router(struct fake_gw *f) {
  void *s = zmq_socket(f->zctx, ZMQ_ROUTER);
  int one = 1, zero = 0;
  zmq_setsockopt(s, ZMQ_CURVE_SERVER, &one, sizeof one);
  zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, f->secret, WK_KEY_Z85_LEN + 1);
  zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
  if (zmq_bind(s, f->endpoint) < 0) {
    fprintf(stderr, "bind %s: %s\n", f->endpoint, zmq_strerror(zmq_errno()));
    zmq_close(s);
    return NULL;
  }
  return s;
}

/* One request (routing id and body) within ms; the body's presign id or -1. */
static long long take(void *s, long ms, char *rid, size_t *rid_len) {
  zmq_pollitem_t it = {s, 0, ZMQ_POLLIN, 0};
  if (zmq_poll(&it, 1, ms) <= 0)
    return -1;
  int n = zmq_recv(s, rid, 255, 0);
  char body[4096];
  int m = zmq_recv(s, body, sizeof body - 1, 0);
  if (n < 0 || m < 0)
    return -1;
  *rid_len = (size_t)n;
  body[m < (int)sizeof body - 1 ? m : (int)sizeof body - 1] = 0;
  json_t *v = json_loads(body, 0, NULL);
  long long id = json_integer_value(json_object_get(v, "id"));
  json_decref(v);
  return id;
}

static void answer(void *s, const char *rid, size_t rid_len, long long id) {
  char body[160];
  snprintf(body, sizeof body, "{\"type\":\"presigned\",\"id\":%lld,\"urls\":[\"http://s3.test/%lld\"]}", id, id);
  zmq_send(s, rid, rid_len, ZMQ_SNDMORE);
  zmq_send(s, body, strlen(body), 0);
}

static void *gateway_thread(void *arg) {
  struct fake_gw *f = arg;
  char rid[256];
  size_t rid_len;
  /* the first gateway dies with the request unanswered */
  void *s = router(f);
  if (!s)
    return NULL;
  f->first_seen = take(s, 10000, rid, &rid_len) == 1;
  zmq_close(s);
  usleep(300 * 1000); /* down a while, as a gateway restarting */
  if (!(s = router(f)))
    return NULL;
  /* its successor answers every copy of request 1, then request 2 */
  for (;;) {
    long long id = take(s, 15000, rid, &rid_len);
    if (id < 0)
      break;
    answer(s, rid, rid_len, id);
    f->answered++;
    if (id == 2)
      break;
  }
  zmq_close(s);
  return NULL;
}

/* One ZAP request answered: refused while f->refuse lasts, then admitted. */
static void zap_answer(struct fake_gw *f, void *zap) {
  zmq_msg_t part[8];
  int n = 0, more = 1;
  while (more && n < 8) {
    zmq_msg_init(&part[n]);
    if (zmq_msg_recv(&part[n], zap, 0) < 0)
      break;
    more = zmq_msg_more(&part[n++]);
  }
  f->zap_asked++;
  bool refuse = f->zap_refused < f->refuse;
  f->zap_refused += refuse;
  const char *reply[6] = {"1.0", NULL, refuse ? "400" : "200", refuse ? "unknown key" : "OK",
                          refuse ? "" : "i-0123456789ab", ""};
  for (int i = 0; i < 6; i++) {
    const void *d = i == 1 && n > 1 ? zmq_msg_data(&part[1]) : reply[i];
    size_t len = i == 1 ? (n > 1 ? zmq_msg_size(&part[1]) : 0) : strlen(reply[i]);
    zmq_send(zap, d, len, i < 5 ? ZMQ_SNDMORE : 0);
  }
  for (int i = 0; i < n; i++)
    zmq_msg_close(&part[i]);
}

/* A gateway with a ZAP handler: it answers presign requests 1 and 2. */
static void *refusing_gateway_thread(void *arg) {
  struct fake_gw *f = arg;
  void *zap = zmq_socket(f->zctx, ZMQ_REP);
  int zero = 0;
  zmq_setsockopt(zap, ZMQ_LINGER, &zero, sizeof zero);
  if (zmq_bind(zap, "inproc://zeromq.zap.01") < 0) {
    fprintf(stderr, "bind the ZAP handler: %s\n", zmq_strerror(zmq_errno()));
    zmq_close(zap);
    return NULL;
  }
  void *s = router(f);
  zmq_setsockopt(s, ZMQ_ZAP_DOMAIN, "spotlab", 7);
  char rid[256];
  size_t rid_len;
  for (int idle = 0; s && idle < 300;) {
    zmq_pollitem_t it[2] = {{zap, 0, ZMQ_POLLIN, 0}, {s, 0, ZMQ_POLLIN, 0}};
    if (zmq_poll(it, 2, 100) <= 0) {
      idle++;
      continue;
    }
    if (it[0].revents)
      zap_answer(f, zap);
    if (it[1].revents) {
      long long id = take(s, 0, rid, &rid_len);
      if (id > 0) {
        answer(s, rid, rid_len, id);
        f->zap_answered++;
      }
      if (id == 2)
        break;
    }
  }
  if (s)
    zmq_close(s);
  zmq_close(zap);
  return NULL;
}

/* Answers request 1 at once (the connection is up then); holds the next
 * one (asked without waiting) until a later one (a store call's) has come,
 * and answers both, the held one first; then answers each later request
 * after 200 ms, until request 5. Copies of a request already seen are
 * skipped. */
static void *async_gateway_thread(void *arg) {
  struct fake_gw *f = arg;
  void *s = router(f);
  if (!s)
    return NULL;
  char rid[256];
  size_t rid_len;
  long long id = take(s, 20000, rid, &rid_len), seen = id;
  if (id == 1)
    answer(s, rid, rid_len, id);
  long long held = -1, next = -1;
  while (seen > 0 && held < 0) /* the one asked without waiting */
    if ((id = take(s, 20000, rid, &rid_len)) > seen || id < 0)
      held = seen = id;
  while (seen > 0 && next < 0) /* the store call's */
    if ((id = take(s, 20000, rid, &rid_len)) > seen || id < 0)
      next = seen = id;
  if (held > 0 && next > 0) {
    answer(s, rid, rid_len, held);
    answer(s, rid, rid_len, next);
    f->async_order[0] = held;
    f->async_order[1] = next;
  }
  while (seen > 0 && seen < 5) {
    if ((id = take(s, 20000, rid, &rid_len)) <= seen)
      continue;
    seen = id;
    usleep(200 * 1000);
    answer(s, rid, rid_len, id);
    if (id == 4)
      f->async_order[2] = id;
  }
  zmq_close(s);
  return NULL;
}

/* take for id, the socket polled and read meanwhile, for up to ms. */
static int take_polling(struct sl_s3_signer *sg, struct wk_presigner *p, int64_t id, char **url,
                        char *err, size_t size, long ms) {
  int64_t until = sl_time_mono_us() + ms * 1000;
  for (;;) {
    int r = sg->take(sg->ctx, id, url, 1, err, size);
    if (r != 0 || sl_time_mono_us() > until)
      return r;
    zmq_pollitem_t it = {wk_presigner_socket(p), 0, ZMQ_POLLIN, 0};
    zmq_poll(&it, 1, 20);
    wk_presigner_read(p);
    wk_presigner_tend(p, sl_time_mono_us(), true);
  }
}

static int64_t mono_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int sign(struct sl_s3_signer *signer, const char *key, char **url, char *err, size_t size) {
  struct sl_s3_presign_req req = {.op = SL_S3_GET, .key = key};
  *url = NULL;
  return signer->presign(signer->ctx, &req, 1, url, err, size);
}

/* The reading of an answer's URLs: each must be one to hand the HTTP
 * client as it is (http:// or https://, whole, no control characters), or
 * the answer is refused. */
static void test_answer_urls(void) {
  static const char *const bad[] = {
      "{\"urls\": [\"httpx://s3.test/1\"]}",
      "{\"urls\": [\"ftp://s3.test/1\"]}",
      "{\"urls\": [\"http://s3.test/1\\r\\nX-Injected: 1\"]}",
      "{\"urls\": [\"http://s3.test/1\\u0000?X-Amz-Signature=0\"]}",
      "{\"urls\": [5]}",
  };
  char err[256], *urls[1];
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    json_t *v = json_loads(bad[i], JSON_ALLOW_NUL, NULL);
    CHECK(v != NULL);
    err[0] = 0;
    urls[0] = NULL;
    CHECK_INT(wk_presign_answer_urls(v, 1, urls, err, sizeof err), SL_EWIRE);
    CHECK_STR(err, "the gateway's answer holds a malformed URL");
    CHECK(urls[0] == NULL);
  }
  json_t *v = json_loads("{\"type\": \"presigned\", \"id\": 3, "
                         "\"urls\": [\"https://s3.test/1?a=b\"]}", 0, NULL);
  CHECK_INT(wk_presign_answer_id(v), 3);
  CHECK_INT(wk_presign_answer_urls(v, 1, urls, err, sizeof err), 0);
  CHECK_STR(urls[0], "https://s3.test/1?a=b");
  free(urls[0]);
}

int main(void) {
  test_answer_urls();
  struct fake_gw f = {.zctx = zmq_ctx_new()};
  struct wk_config cfg;
  memset(&cfg, 0, sizeof cfg);
  char server_public[WK_KEY_Z85_LEN + 1];
  CHECK_INT(zmq_curve_keypair(server_public, f.secret), 0);
  CHECK_INT(zmq_curve_keypair(cfg.public_key, cfg.secret_key), 0);
  memcpy(cfg.gateway_public, server_public, sizeof server_public);

  /* an ipc address: a TCP port let go and bound again could meanwhile be
   * taken, even by the presigner's own reconnects (a loopback connect to a
   * port nobody listens on can connect to itself) */
  char dir[] = "/tmp/wk-presign-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  snprintf(f.endpoint, sizeof f.endpoint, "ipc://%s/gw.sock", dir);
  snprintf(cfg.gateway, sizeof cfg.gateway, "%s", f.endpoint);

  pthread_t th;
  CHECK_INT(pthread_create(&th, NULL, gateway_thread, &f), 0);
  struct wk_presigner *p = NULL;
  CHECK_INT(wk_presigner_new(&cfg, f.zctx, &p), 0);
  struct sl_s3_signer signer = wk_presigner_signer(p);
  char err[256] = "", *url;
  int64_t t0 = mono_ms();
  CHECK_INT(sign(&signer, "J000001/ckpt-50.tc", &url, err, sizeof err), 0);
  int64_t took = mono_ms() - t0;
  if (err[0])
    fprintf(stderr, "presign: %s\n", err);
  CHECK_STR(url, "http://s3.test/1");
  free(url);
  fprintf(stderr, "answered after %lld ms by the second gateway\n", (long long)took);
  /* copies of request 1 may be answered again: the next request gets its own */
  CHECK_INT(sign(&signer, "J000001/ckpt-100.tc", &url, err, sizeof err), 0);
  CHECK_STR(url, "http://s3.test/2");
  free(url);
  pthread_join(th, NULL);
  CHECK(f.first_seen);
  CHECK(f.answered >= 2);
  wk_presigner_free(p);
  unlink(f.endpoint + strlen("ipc://"));

  /* refused twice, then admitted */
  f.refuse = 2;
  snprintf(f.endpoint, sizeof f.endpoint, "ipc://%s/gw2.sock", dir);
  snprintf(cfg.gateway, sizeof cfg.gateway, "%s", f.endpoint);
  CHECK_INT(pthread_create(&th, NULL, refusing_gateway_thread, &f), 0);
  usleep(100 * 1000); /* the handler bound before the first handshake */
  p = NULL;
  CHECK_INT(wk_presigner_new(&cfg, f.zctx, &p), 0);
  signer = wk_presigner_signer(p);
  t0 = mono_ms();
  err[0] = 0;
  url = NULL;
  CHECK_INT(sign(&signer, "J000002/ckpt-50.tc", &url, err, sizeof err), 0);
  took = mono_ms() - t0;
  if (err[0])
    fprintf(stderr, "presign: %s\n", err);
  CHECK_STR(url, "http://s3.test/1");
  free(url);
  fprintf(stderr, "refused %d times, then answered after %lld ms\n", f.zap_refused, (long long)took);
  CHECK(took < 10000); /* a new connection after 1 s, then 2 s: not the 20 s timeout */
  /* a request after the refusals goes on the connection that was admitted */
  url = NULL;
  CHECK_INT(sign(&signer, "J000002/ckpt-100.tc", &url, err, sizeof err), 0);
  CHECK_STR(url, "http://s3.test/2");
  free(url);
  pthread_join(th, NULL);
  CHECK_INT(f.zap_refused, 2);
  CHECK(f.zap_asked >= 3);
  wk_presigner_free(p);
  unlink(f.endpoint + strlen("ipc://"));

  /* asked without waiting: in a context of its own, since the refusing
   * gateway's ZAP handler stays bound in the old one until libzmq's reaper
   * has closed it, and a CURVE handshake there would wait for its answer */
  zmq_ctx_term(f.zctx);
  f.zctx = zmq_ctx_new();
  snprintf(f.endpoint, sizeof f.endpoint, "ipc://%s/gw3.sock", dir);
  snprintf(cfg.gateway, sizeof cfg.gateway, "%s", f.endpoint);
  CHECK_INT(pthread_create(&th, NULL, async_gateway_thread, &f), 0);
  p = NULL;
  CHECK_INT(wk_presigner_new(&cfg, f.zctx, &p), 0);
  signer = wk_presigner_signer(p);
  struct sl_s3_presign_req put = {.op = SL_S3_PUT, .key = "J000003/orphan/ckpt.tc"};
  url = NULL;
  CHECK_INT(sign(&signer, "J000003/ckpt-5.tc", &url, err, sizeof err), 0); /* connected */
  CHECK_STR(url, "http://s3.test/1");
  free(url);
  int64_t asked = 0;
  CHECK_INT(signer.ask(signer.ctx, &put, 1, &asked), 0);
  CHECK_INT(asked, 2);
  url = NULL;
  CHECK_INT(signer.take(signer.ctx, asked, &url, 1, err, sizeof err), 0); /* held */
  CHECK_INT(signer.take(signer.ctx, asked, &url, 2, err, sizeof err), -ENOENT); /* not its count */
  /* the store call's wait reads the held answer first and keeps it */
  CHECK_INT(sign(&signer, "J000003/ckpt-10.tc", &url, err, sizeof err), 0);
  CHECK_STR(url, "http://s3.test/3");
  free(url);
  url = NULL;
  CHECK_INT(signer.take(signer.ctx, asked, &url, 1, err, sizeof err), 1);
  CHECK_STR(url, "http://s3.test/2");
  free(url);
  CHECK_INT(signer.take(signer.ctx, asked, &url, 1, err, sizeof err), -ENOENT); /* spent */
  /* answered while the caller polls */
  CHECK_INT(signer.ask(signer.ctx, &put, 1, &asked), 0);
  url = NULL;
  t0 = mono_ms();
  CHECK_INT(take_polling(&signer, p, asked, &url, err, sizeof err, 5000), 1);
  took = mono_ms() - t0;
  CHECK_STR(url, "http://s3.test/4");
  free(url);
  fprintf(stderr, "asked without waiting: answered after %lld ms (the gateway waits 200)\n",
          (long long)took);
  CHECK(took >= 150 && took < 5000);
  /* forgotten: its answer, when it comes, is dropped */
  CHECK_INT(signer.ask(signer.ctx, &put, 1, &asked), 0);
  signer.forget(signer.ctx, asked);
  CHECK_INT(signer.take(signer.ctx, asked, &url, 1, err, sizeof err), -ENOENT);
  pthread_join(th, NULL);
  CHECK_INT(f.async_order[0], 2);
  CHECK_INT(f.async_order[1], 3);
  CHECK_INT(f.async_order[2], 4);
  /* slots for WK_PRESIGN_ASKED_MAX at once */
  int64_t ids[WK_PRESIGN_ASKED_MAX];
  for (int i = 0; i < WK_PRESIGN_ASKED_MAX; i++)
    CHECK_INT(signer.ask(signer.ctx, &put, 1, &ids[i]), 0);
  CHECK_INT(signer.ask(signer.ctx, &put, 1, &asked), -EBUSY);
  signer.forget(signer.ctx, ids[5]);
  CHECK_INT(signer.ask(signer.ctx, &put, 1, &asked), 0);
  wk_presigner_free(p); /* with requests unanswered: nothing leaks */
  zmq_ctx_term(f.zctx);
  unlink(f.endpoint + strlen("ipc://"));
  rmdir(dir);
  TEST_MAIN_END();
}
