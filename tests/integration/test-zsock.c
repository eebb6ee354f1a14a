/* jk_zsock against the real libzmq: ROUTER, PUB and REP sockets served on
 * this thread, with libzmq DEALER, REQ, SUB and PUSH sockets (and raw TCP
 * clients, some sending broken streams) as peers, and a jk_zsock DEALER
 * connecting to libzmq ROUTERs. Every wait pumps the jk_zsock and has a deadline. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <zmq.h>

#include "harness.h"
#include "sl_err.h"
#include "sl_frame.h"
#include "sl_time.h"
#include "zmtp_codec.h"
#include "zsock.h"

#define WAIT_US (10 * SL_US_PER_S) /* how long an expected event may take (sanitizers are slow) */
#define MIB (1u << 20)

static void *ctx;

static int64_t now_us(void) { return sl_time_mono_us(); }

/* ---- driving a jk_zsock --------------------------------------------------- */

/* One round of the caller's loop: poll for up to timeout_ms (less when a
 * handshake deadline falls due sooner), handle, flush. */
static void pump(struct jk_zsock *s, int timeout_ms) {
  size_t cap = jk_zsock_nfds(s);
  struct pollfd *fds = calloc(cap, sizeof *fds);
  size_t n = jk_zsock_pollfds(s, fds);
  CHECK(n >= 1 && n <= cap);
  int64_t wake = jk_zsock_wake_at_us(s);
  if (wake != INT64_MAX) {
    int64_t left_ms = (wake - now_us() + 999) / 1000;
    if (left_ms < 0)
      left_ms = 0;
    if (left_ms < timeout_ms)
      timeout_ms = (int)left_ms;
  }
  if (poll(fds, (nfds_t)n, timeout_ms) < 0 && errno != EINTR) {
    CHECK(!"poll failed");
  }
  jk_zsock_handle(s, fds, n);
  jk_zsock_flush(s);
  free(fds);
}

/* Pumps s for a while: only where the test is about time passing. */
static void pump_for(struct jk_zsock *s, int64_t duration_us) {
  int64_t until = now_us() + duration_us;
  while (now_us() < until)
    pump(s, 5);
}

/* Waits for a message on s; m is always initialised afterwards. */
static int zs_wait(struct jk_zsock *s, struct sl_msg *m) {
  int64_t deadline = now_us() + WAIT_US;
  for (;;) {
    if (jk_zsock_has_msg(s))
      return jk_zsock_recv(s, m);
    if (now_us() >= deadline) {
      sl_msg_init(m, SL_LIMITS_DEFAULT);
      fprintf(stderr, "timed out waiting for a message on the jk_zsock\n");
      return -ETIMEDOUT;
    }
    pump(s, 10);
  }
}

/* Waits for a message on the libzmq socket z, pumping s meanwhile. */
static int z_wait(struct jk_zsock *s, void *z, struct sl_msg *m) {
  int64_t deadline = now_us() + WAIT_US;
  sl_msg_init(m, SL_LIMITS_DEFAULT);
  for (;;) {
    int r = sl_zmq_recv(z, m, ZMQ_DONTWAIT);
    if (r != -EAGAIN)
      return r;
    if (now_us() >= deadline) {
      fprintf(stderr, "timed out waiting for a message on a libzmq socket\n");
      return -ETIMEDOUT;
    }
    pump(s, 2);
  }
}

static bool wait_peers(struct jk_zsock *s, size_t n) {
  int64_t deadline = now_us() + WAIT_US;
  while (jk_zsock_peers(s) != n && now_us() < deadline)
    pump(s, 5);
  return jk_zsock_peers(s) == n;
}

/* Sends the NULL-terminated list of strings as one message and flushes. */
static void zs_send(struct jk_zsock *s, const char *first, ...) {
  va_list ap;
  va_start(ap, first);
  const char *cur = first;
  while (cur) {
    const char *next = va_arg(ap, const char *);
    CHECK_INT(jk_zsock_send(s, cur, strlen(cur), next != NULL), 0);
    cur = next;
  }
  va_end(ap);
  jk_zsock_flush(s);
}

static void z_send(void *z, const char *first, ...) {
  va_list ap;
  va_start(ap, first);
  const char *cur = first;
  while (cur) {
    const char *next = va_arg(ap, const char *);
    CHECK_INT(zmq_send(z, cur, strlen(cur), next ? ZMQ_SNDMORE : 0), (int)strlen(cur));
    cur = next;
  }
  va_end(ap);
}

static void print_msg(const struct sl_msg *m) {
  fprintf(stderr, "  message of %zu frames:", m->n);
  for (size_t i = 0; i < m->n; i++) {
    fprintf(stderr, " [");
    for (size_t k = 0; k < m->frames[i].len && k < 40; k++) {
      uint8_t c = m->frames[i].data[k];
      fprintf(stderr, c >= 0x20 && c < 0x7f ? "%c" : "\\x%02x", c);
    }
    fprintf(stderr, m->frames[i].len > 40 ? "...]" : "]");
  }
  fprintf(stderr, "\n");
}

static bool frame_eq(const struct sl_msg *m, size_t i, const char *want) {
  return i < m->n && m->frames[i].len == strlen(want) && memcmp(m->frames[i].data, want, m->frames[i].len) == 0;
}

/* Whether frames from..n of m are exactly the NULL-terminated strings;
 * prints m when not. */
static bool msg_is(const struct sl_msg *m, size_t from, ...) {
  va_list ap;
  va_start(ap, from);
  bool ok = true;
  size_t i = from;
  for (const char *want; (want = va_arg(ap, const char *)); i++) {
    if (!frame_eq(m, i, want))
      ok = false;
  }
  va_end(ap);
  if (i != m->n)
    ok = false;
  if (!ok)
    print_msg(m);
  return ok;
}

/* Waits for a message on the jk_zsock s, checks that its frames from `from`
 * on are exactly the strings given, and frees it. */
#define EXPECT_ZS(s, from, ...)                                                  \
  do {                                                                           \
    struct sl_msg m_;                                                            \
    CHECK_INT(zs_wait((s), &m_), 0);                                             \
    CHECK(msg_is(&m_, (from), __VA_ARGS__, NULL));                               \
    sl_msg_done(&m_);                                                            \
  } while (0)

/* The same for a message on the libzmq socket z, pumping s meanwhile. */
#define EXPECT_Z(s, z, from, ...)                                                \
  do {                                                                           \
    struct sl_msg m_;                                                            \
    CHECK_INT(z_wait((s), (z), &m_), 0);                                         \
    CHECK(msg_is(&m_, (from), __VA_ARGS__, NULL));                               \
    sl_msg_done(&m_);                                                            \
  } while (0)

/* ---- endpoints and peers -------------------------------------------------- */

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int port = -1;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0)
    close(fd);
  return port;
}

/* Binds a jk_zsock on a free loopback port; ep gets the endpoint. */
static struct jk_zsock *bind_tcp(enum jk_zsock_type type, const struct jk_zsock_options *o, char ep[64],
                                 int *ret_port) {
  for (int attempt = 0; attempt < 50; attempt++) {
    int port = free_port();
    if (port <= 0)
      continue;
    snprintf(ep, 64, "tcp://127.0.0.1:%d", port);
    struct jk_zsock *s = NULL;
    int r = jk_zsock_bind(ep, type, o, &s);
    if (r == -EADDRINUSE)
      continue;
    CHECK_INT(r, 0);
    if (r < 0)
      return NULL;
    if (ret_port)
      *ret_port = port;
    return s;
  }
  CHECK(!"no free port found");
  return NULL;
}

static void *z_new(int type) {
  void *z = zmq_socket(ctx, type);
  int zero = 0;
  zmq_setsockopt(z, ZMQ_LINGER, &zero, sizeof zero);
  return z;
}

static void *z_dealer(const char *ep, const char *routing_id) {
  void *z = z_new(ZMQ_DEALER);
  if (routing_id)
    zmq_setsockopt(z, ZMQ_ROUTING_ID, routing_id, strlen(routing_id));
  CHECK_INT(zmq_connect(z, ep), 0);
  return z;
}

static int tcp_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
    close(fd);
    fd = -1;
  }
  CHECK(fd >= 0);
  return fd;
}

/* Reads from a raw client, pumping s, until want bytes came (want > 0) or
 * the connection closed. Returns the bytes read (those past cap are
 * counted, not kept); *ret_closed says whether it closed. */
static size_t raw_read(struct jk_zsock *s, int fd, uint8_t *buf, size_t cap, size_t want, bool *ret_closed) {
  int64_t deadline = now_us() + WAIT_US;
  size_t got = 0;
  *ret_closed = false;
  while (now_us() < deadline && !(want && got >= want)) {
    uint8_t scratch[4096];
    uint8_t *to = got < cap ? buf + got : scratch;
    size_t room = got < cap ? cap - got : sizeof scratch;
    ssize_t r = recv(fd, to, room, MSG_DONTWAIT);
    if (r > 0) {
      got += (size_t)r;
    } else if (r == 0 || (r < 0 && (errno == ECONNRESET || errno == EPIPE))) {
      *ret_closed = true;
      break;
    } else if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      CHECK(!"recv failed");
      break;
    } else {
      pump(s, 2);
    }
  }
  return got;
}

static bool send_all(int fd, const void *data, size_t len) {
  return send(fd, data, len, MSG_NOSIGNAL) == (ssize_t)len;
}

/* A hand-written ZMTP 3.1 greeting (NULL mechanism, not as-server) and a
 * DEALER's READY without an Identity, as libzmq would send them. */
static void raw_greeting(uint8_t g[64], uint8_t major) {
  memset(g, 0, 64);
  g[0] = 0xff;
  g[9] = 0x7f;
  g[10] = major;
  g[11] = 1;
  memcpy(g + 12, "NULL", 4);
}
static const uint8_t raw_ready[] = "\x04\x1c\x05READY\x0bSocket-Type\x00\x00\x00\x06" "DEALER";

/* ---- ROUTER --------------------------------------------------------------- */

static void router_dealer(void) {
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;
  char ep[64];
  struct jk_zsock *s = bind_tcp(JK_ZSOCK_ROUTER, &o, ep, NULL);
  if (!s)
    return;
  struct sl_msg m;
  void *alice = z_dealer(ep, "alice");
  z_send(alice, "one", "two", "", NULL);
  EXPECT_ZS(s, 0, "alice", "one", "two", "");
  CHECK_INT(jk_zsock_peers(s), 1);

  zs_send(s, "alice", "r1", "", "r2", NULL);
  EXPECT_Z(s, alice, 0, "r1", "", "r2");

  /* Without a routing id: a generated 5-byte one starting with 0. */
  void *anon = z_dealer(ep, NULL);
  z_send(anon, "hi", NULL);
  CHECK_INT(zs_wait(s, &m), 0);
  uint8_t id[5] = {0xee};
  CHECK_INT(m.n, 2);
  if (m.n == 2) {
    CHECK_INT(m.frames[0].len, 5);
    CHECK_INT(m.frames[0].data[0], 0);
    if (m.frames[0].len == 5)
      memcpy(id, m.frames[0].data, 5);
    CHECK(msg_is(&m, 1, "hi", NULL));
  }
  sl_msg_done(&m);
  CHECK_INT(jk_zsock_peers(s), 2);
  CHECK_INT(jk_zsock_send(s, id, sizeof id, true), 0);
  CHECK_INT(jk_zsock_send(s, "back", 4, false), 0);
  jk_zsock_flush(s);
  EXPECT_Z(s, anon, 0, "back");

  /* A message for an unknown peer is dropped (so is an id alone); the
   * next ones still arrive, and nothing else reached either peer. */
  zs_send(s, "bob", "lost", NULL);
  zs_send(s, "alic", "lost", NULL);
  zs_send(s, "alice", NULL);
  zs_send(s, "alice", "after", NULL);
  EXPECT_Z(s, alice, 0, "after");
  CHECK_INT(jk_zsock_send(s, id, sizeof id, true), 0);
  CHECK_INT(jk_zsock_send(s, "after2", 6, false), 0);
  jk_zsock_flush(s);
  EXPECT_Z(s, anon, 0, "after2");
  CHECK(!jk_zsock_has_msg(s));
  CHECK_INT(jk_zsock_recv(s, &m), -EAGAIN);

  /* The longest routing id: libzmq's READY becomes a long frame. */
  char longid[256];
  memset(longid, 'L', 255);
  longid[255] = '\0';
  longid[0] = 'l';
  void *lng = z_dealer(ep, longid);
  z_send(lng, "long", NULL);
  EXPECT_ZS(s, 0, longid, "long");
  zs_send(s, longid, "id", NULL);
  EXPECT_Z(s, lng, 0, "id");

  zmq_close(alice);
  zmq_close(anon);
  zmq_close(lng);
  CHECK(jk_zsock_free(s) == NULL);
}

static void router_handover(void) {
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;
  char ep[64];
  struct jk_zsock *s = bind_tcp(JK_ZSOCK_ROUTER, &o, ep, NULL);
  if (!s)
    return;
  struct sl_msg m;
  void *first = z_dealer(ep, "alice");
  z_send(first, "from1", NULL);
  EXPECT_ZS(s, 0, "alice", "from1");

  void *second = z_dealer(ep, "alice");
  z_send(second, "from2", NULL);
  EXPECT_ZS(s, 0, "alice", "from2");

  zs_send(s, "alice", "to-alice", NULL);
  EXPECT_Z(s, second, 0, "to-alice");
  /* Both were written in the same flush: had the first one been sent
   * anything, it would be there by now (give it a moment to be sure). */
  pump_for(s, 50 * SL_US_PER_MS);
  sl_msg_init(&m, SL_LIMITS_DEFAULT);
  CHECK_INT(sl_zmq_recv(first, &m, ZMQ_DONTWAIT), -EAGAIN);
  sl_msg_done(&m);

  zmq_close(first);
  zmq_close(second);
  jk_zsock_free(s);
}

static void router_req(void) {
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;
  char ep[64];
  struct jk_zsock *s = bind_tcp(JK_ZSOCK_ROUTER, &o, ep, NULL);
  if (!s)
    return;
  void *req = z_new(ZMQ_REQ);
  CHECK_INT(zmq_connect(req, ep), 0);
  struct sl_msg m;
  for (int round = 0; round < 2; round++) {
    char body[16], answer[16];
    snprintf(body, sizeof body, "ping%d", round);
    snprintf(answer, sizeof answer, "pong%d", round);
    z_send(req, body, NULL);
    CHECK_INT(zs_wait(s, &m), 0);
    CHECK_INT(m.n, 3);
    uint8_t id[5] = {0};
    if (m.n == 3) {
      CHECK_INT(m.frames[0].len, 5);
      CHECK_INT(m.frames[0].data[0], 0);
      memcpy(id, m.frames[0].data, m.frames[0].len < 5 ? m.frames[0].len : 5);
      CHECK(msg_is(&m, 1, "", body, NULL));
    }
    sl_msg_done(&m);
    CHECK_INT(jk_zsock_send(s, id, sizeof id, true), 0);
    zs_send(s, "", answer, NULL);
    EXPECT_Z(s, req, 0, answer);
  }
  zmq_close(req);
  jk_zsock_free(s);
}

/* ---- PUB ------------------------------------------------------------------ */

/* Publishes probe until sub gets something. */
static bool wait_subscribed(struct jk_zsock *pub, void *sub, const char *probe) {
  int64_t deadline = now_us() + WAIT_US;
  while (now_us() < deadline) {
    zs_send(pub, probe, NULL);
    int64_t until = now_us() + 20 * SL_US_PER_MS;
    while (now_us() < until) {
      struct sl_msg m;
      sl_msg_init(&m, SL_LIMITS_DEFAULT);
      int r = sl_zmq_recv(sub, &m, ZMQ_DONTWAIT);
      sl_msg_done(&m);
      if (r == 0)
        return true;
      pump(pub, 2);
    }
  }
  fprintf(stderr, "no probe %s arrived\n", probe);
  return false;
}

/* Reads sub until a message that is not one of the probes; checks it is
 * expect. */
static bool next_besides(struct jk_zsock *pub, void *sub, const char *expect, const char *probe1, const char *probe2) {
  for (;;) {
    struct sl_msg m;
    if (z_wait(pub, sub, &m) < 0) {
      sl_msg_done(&m);
      return false;
    }
    bool probe = m.n == 1 && ((probe1 && frame_eq(&m, 0, probe1)) || (probe2 && frame_eq(&m, 0, probe2)));
    if (!probe) {
      bool ok = msg_is(&m, 0, expect, NULL);
      sl_msg_done(&m);
      return ok;
    }
    sl_msg_done(&m);
  }
}

static void pub_sub(void) {
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;
  char ep[64];
  struct jk_zsock *pub = bind_tcp(JK_ZSOCK_PUB, &o, ep, NULL);
  if (!pub)
    return;
  void *all = z_new(ZMQ_SUB), *abc = z_new(ZMQ_SUB);
  zmq_setsockopt(all, ZMQ_SUBSCRIBE, "", 0);
  zmq_setsockopt(abc, ZMQ_SUBSCRIBE, "abc", 3);
  CHECK_INT(zmq_connect(all, ep), 0);
  CHECK_INT(zmq_connect(abc, ep), 0);
  CHECK(wait_peers(pub, 2));
  CHECK(wait_subscribed(pub, all, "probe"));
  CHECK(wait_subscribed(pub, abc, "abcprobe"));
  /* A mark that reaches both, after which their streams are known. */
  zs_send(pub, "abcmark", NULL);
  CHECK(next_besides(pub, all, "abcmark", "probe", "abcprobe"));
  CHECK(next_besides(pub, abc, "abcmark", "abcprobe", NULL));

  zs_send(pub, "abcdef", "second frame", NULL);
  zs_send(pub, "xyz", NULL);
  zs_send(pub, "ab", NULL);
  zs_send(pub, "abcfence", NULL);
  EXPECT_Z(pub, all, 0, "abcdef", "second frame");
  CHECK(next_besides(pub, all, "xyz", NULL, NULL));
  CHECK(next_besides(pub, all, "ab", NULL, NULL));
  CHECK(next_besides(pub, all, "abcfence", NULL, NULL));
  EXPECT_Z(pub, abc, 0, "abcdef", "second frame");
  /* Not xyz, nor ab (shorter than the topic): the fence comes next. */
  CHECK(next_besides(pub, abc, "abcfence", NULL, NULL));

  /* Unsubscribe, then subscribe to something else: once that arrives, the
   * unsubscription (sent before it on the same connection) was seen too. */
  zmq_setsockopt(abc, ZMQ_UNSUBSCRIBE, "abc", 3);
  zmq_setsockopt(abc, ZMQ_SUBSCRIBE, "zzz", 3);
  CHECK(wait_subscribed(pub, abc, "zzzprobe"));
  zs_send(pub, "abcnope", NULL);
  zs_send(pub, "zzzfence", NULL);
  CHECK(next_besides(pub, abc, "zzzfence", "zzzprobe", NULL));
  CHECK(next_besides(pub, all, "zzzprobe", "probe", "abcprobe"));
  CHECK(next_besides(pub, all, "abcnope", "zzzprobe", NULL));
  CHECK(next_besides(pub, all, "zzzfence", NULL, NULL));
  /* Subscriptions are not messages for the caller. */
  CHECK(!jk_zsock_has_msg(pub));

  zmq_close(all);
  zmq_close(abc);
  jk_zsock_free(pub);
}

/* A libzmq SUB filters what it receives itself, so it cannot tell whether
 * the publisher did; an XSUB passes on whatever arrives. */
static void pub_xsub(void) {
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;
  char ep[64];
  struct jk_zsock *pub = bind_tcp(JK_ZSOCK_PUB, &o, ep, NULL);
  if (!pub)
    return;
  void *x = z_new(ZMQ_XSUB);
  CHECK_INT(zmq_connect(x, ep), 0);
  CHECK_INT(zmq_send(x, "\1abc", 4, 0), 4);
  CHECK(wait_subscribed(pub, x, "abcprobe"));
  zs_send(pub, "abcmark", NULL);
  CHECK(next_besides(pub, x, "abcmark", "abcprobe", NULL));
  zs_send(pub, "xyz", NULL);
  zs_send(pub, "ab", NULL);
  zs_send(pub, "abc", NULL);
  zs_send(pub, "abcfence", NULL);
  CHECK(next_besides(pub, x, "abc", NULL, NULL));
  CHECK(next_besides(pub, x, "abcfence", NULL, NULL));
  /* Cancel abc, subscribe zzz: once zzz arrives, abc is gone. */
  CHECK_INT(zmq_send(x, "\0abc", 4, 0), 4);
  CHECK_INT(zmq_send(x, "\1zzz", 4, 0), 4);
  CHECK(wait_subscribed(pub, x, "zzzprobe"));
  zs_send(pub, "abcnope", NULL);
  zs_send(pub, "zzzfence", NULL);
  CHECK(next_besides(pub, x, "zzzfence", "zzzprobe", NULL));
  /* A subscription to everything. */
  CHECK_INT(zmq_send(x, "\1", 1, 0), 1);
  CHECK(wait_subscribed(pub, x, "anything"));
  CHECK(!jk_zsock_has_msg(pub));
  zmq_close(x);
  jk_zsock_free(pub);
}

/* A subscriber speaking ZMTP 3.1 by hand, with SUBSCRIBE and CANCEL
 * commands instead of messages; the publisher's frames are decoded with
 * the codec (tested on its own in tests/unit/test-zmtp.c). */
struct raw_peer {
  int fd;
  size_t skip; /* greeting bytes still to skip */
  struct jk_zmtp_decoder dec;
  uint8_t buf[4096];
  size_t off, len;
};

/* The next message from the raw peer, commands skipped; 0, or -ETIMEDOUT
 * after max_wait_us. */
static int raw_next(struct jk_zsock *s, struct raw_peer *rp, struct sl_msg *m, int64_t max_wait_us) {
  int64_t deadline = now_us() + max_wait_us;
  sl_msg_init(m, SL_LIMITS_DEFAULT);
  for (;;) {
    while (rp->off < rp->len) {
      if (rp->skip) {
        size_t k = rp->len - rp->off < rp->skip ? rp->len - rp->off : rp->skip;
        rp->off += k;
        rp->skip -= k;
        continue;
      }
      size_t used = 0;
      int ev = jk_zmtp_decode(&rp->dec, rp->buf + rp->off, rp->len - rp->off, &used);
      CHECK(ev >= 0);
      if (ev < 0)
        return ev;
      rp->off += used;
      if (ev == JK_ZMTP_MESSAGE) {
        sl_msg_done(m);
        return jk_zmtp_decoder_take(&rp->dec, m);
      }
    }
    if (now_us() >= deadline)
      return -ETIMEDOUT;
    ssize_t r = recv(rp->fd, rp->buf, sizeof rp->buf, MSG_DONTWAIT);
    if (r > 0) {
      rp->off = 0;
      rp->len = (size_t)r;
    } else if (r == 0) {
      return -ECONNRESET;
    } else {
      pump(s, 2);
    }
  }
}

static bool raw_wait_subscribed(struct jk_zsock *pub, struct raw_peer *rp, const char *probe) {
  int64_t deadline = now_us() + WAIT_US;
  while (now_us() < deadline) {
    zs_send(pub, probe, NULL);
    struct sl_msg m;
    int r = raw_next(pub, rp, &m, 20 * SL_US_PER_MS);
    bool ok = r == 0 && msg_is(&m, 0, probe, NULL);
    sl_msg_done(&m);
    if (ok)
      return true;
    if (r != -ETIMEDOUT)
      return false;
  }
  return false;
}

static bool raw_next_besides(struct jk_zsock *pub, struct raw_peer *rp, const char *expect, const char *probe) {
  for (;;) {
    struct sl_msg m;
    int r = raw_next(pub, rp, &m, WAIT_US);
    bool is_probe = r == 0 && frame_eq(&m, 0, probe) && m.n == 1;
    bool ok = r == 0 && msg_is(&m, 0, expect, NULL);
    sl_msg_done(&m);
    if (!is_probe)
      return ok;
  }
}

static void pub_raw_commands(void) {
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;
  char ep[64];
  int port;
  struct jk_zsock *pub = bind_tcp(JK_ZSOCK_PUB, &o, ep, &port);
  if (!pub)
    return;
  struct raw_peer *rp = calloc(1, sizeof *rp);
  rp->fd = tcp_connect(port);
  rp->skip = 64;
  jk_zmtp_decoder_init(&rp->dec, SL_LIMITS_DEFAULT);
  uint8_t g[64];
  raw_greeting(g, 3);
  static const uint8_t ready[] = "\x04\x19\x05READY\x0bSocket-Type\x00\x00\x00\x03" "SUB";
  static const uint8_t sub_top[] = "\x04\x0d\x09SUBSCRIBEtop";
  static const uint8_t cancel_top[] = "\x04\x0a\x06" "CANCELtop";
  static const uint8_t sub_zzz[] = "\x04\x0d\x09SUBSCRIBEzzz";
  CHECK(send_all(rp->fd, g, sizeof g));
  CHECK(send_all(rp->fd, ready, sizeof ready - 1));
  CHECK(send_all(rp->fd, sub_top, sizeof sub_top - 1));
  CHECK(raw_wait_subscribed(pub, rp, "top-probe"));
  zs_send(pub, "other", NULL);
  zs_send(pub, "top", "two", NULL);
  struct sl_msg m;
  CHECK_INT(raw_next(pub, rp, &m, WAIT_US), 0);
  CHECK(msg_is(&m, 0, "top", "two", NULL));
  sl_msg_done(&m);
  CHECK(send_all(rp->fd, cancel_top, sizeof cancel_top - 1));
  CHECK(send_all(rp->fd, sub_zzz, sizeof sub_zzz - 1));
  CHECK(raw_wait_subscribed(pub, rp, "zzz-probe"));
  zs_send(pub, "top-nope", NULL);
  zs_send(pub, "zzz-fence", NULL);
  CHECK(raw_next_besides(pub, rp, "zzz-fence", "zzz-probe"));
  close(rp->fd);
  jk_zmtp_decoder_done(&rp->dec);
  free(rp);
  jk_zsock_free(pub);
}

/* ---- REP ------------------------------------------------------------------ */

static void rep_req(void) {
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;
  char ep[64];
  struct jk_zsock *rep = bind_tcp(JK_ZSOCK_REP, &o, ep, NULL);
  if (!rep)
    return;
  void *req[2] = {z_new(ZMQ_REQ), z_new(ZMQ_REQ)};
  CHECK_INT(zmq_connect(req[0], ep), 0);
  CHECK_INT(zmq_connect(req[1], ep), 0);
  struct sl_msg m;
  for (int round = 0; round < 3; round++) {
    char body[2][32];
    for (int k = 0; k < 2; k++) {
      snprintf(body[k], sizeof body[k], "req%d-round%d", k, round);
      z_send(req[k], body[k], NULL);
    }
    /* Answer each request as it is taken: the answer goes to its sender
     * even when the other request is already waiting. */
    for (int k = 0; k < 2; k++) {
      CHECK_INT(zs_wait(rep, &m), 0);
      CHECK_INT(m.n, 2);
      if (m.n >= 1)
        CHECK_INT(m.frames[0].len, 0); /* the REQ's delimiter */
      for (size_t i = 0; i < m.n; i++)
        CHECK_INT(jk_zsock_send(rep, m.frames[i].data, m.frames[i].len, i + 1 < m.n), 0);
      jk_zsock_flush(rep);
      sl_msg_done(&m);
    }
    for (int k = 0; k < 2; k++) {
      CHECK_INT(z_wait(rep, req[k], &m), 0);
      CHECK(msg_is(&m, 0, body[k], NULL));
      sl_msg_done(&m);
    }
  }
  zmq_close(req[0]);
  zmq_close(req[1]);
  jk_zsock_free(rep);
}

/* ---- big messages and output buffering ------------------------------------ */

static void fill(uint8_t *p, size_t len, unsigned seed) {
  for (size_t i = 0; i < len; i++)
    p[i] = (uint8_t)(i * 7 + (i >> 12) + seed);
}

static bool filled(const uint8_t *p, size_t len, unsigned seed) {
  for (size_t i = 0; i < len; i++)
    if (p[i] != (uint8_t)(i * 7 + (i >> 12) + seed))
      return false;
  return true;
}

static void big_messages(void) {
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;
  char ep[64];
  struct jk_zsock *s = bind_tcp(JK_ZSOCK_ROUTER, &o, ep, NULL);
  if (!s)
    return;
  size_t len = 5 * MIB;
  uint8_t *big = malloc(len);
  fill(big, len, 1);
  void *d = z_dealer(ep, "big");
  CHECK_INT(zmq_send(d, big, len, 0), (int)len);
  struct sl_msg m;
  CHECK_INT(zs_wait(s, &m), 0);
  CHECK_INT(m.n, 2);
  if (m.n == 2) {
    CHECK(frame_eq(&m, 0, "big"));
    CHECK_INT(m.frames[1].len, len);
    CHECK(m.frames[1].len == len && filled(m.frames[1].data, len, 1));
  }
  sl_msg_done(&m);

  fill(big, len, 2);
  CHECK_INT(jk_zsock_send(s, "big", 3, true), 0);
  CHECK_INT(jk_zsock_send(s, big, len, false), 0);
  jk_zsock_flush(s);
  CHECK_INT(z_wait(s, d, &m), 0);
  CHECK_INT(m.n, 1);
  if (m.n == 1) {
    CHECK_INT(m.frames[0].len, len);
    CHECK(m.frames[0].len == len && filled(m.frames[0].data, len, 2));
  }
  sl_msg_done(&m);
  free(big);
  zmq_close(d);
  jk_zsock_free(s);
}

#define SLOW_CHUNKS 40

struct reader {
  void *z;
  int want;
  int got, bad;
};

/* Reads want 1 MiB messages numbered in their first byte. */
static void *read_chunks(void *arg) {
  struct reader *r = arg;
  for (int i = 0; i < r->want; i++) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, r->z, 0) < 0) { /* ZMQ_RCVTIMEO bounds this */
      zmq_msg_close(&msg);
      break;
    }
    const uint8_t *p = zmq_msg_data(&msg);
    if (zmq_msg_size(&msg) == MIB && p[0] == (uint8_t)i && filled(p + 1, MIB - 1, (unsigned)i))
      r->got++;
    else
      r->bad++;
    zmq_msg_close(&msg);
  }
  return NULL;
}

static void chunk(uint8_t *p, int i) {
  p[0] = (uint8_t)i;
  fill(p + 1, MIB - 1, (unsigned)i);
}

/* 40 MiB for a peer that does not read: it waits in the output buffer and
 * flush_wait delivers all of it once the peer reads. */
static void slow_reader(void) {
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;
  char ep[64];
  struct jk_zsock *s = bind_tcp(JK_ZSOCK_ROUTER, &o, ep, NULL);
  if (!s)
    return;
  void *d = z_new(ZMQ_DEALER);
  int one = 1, small = 64 << 10, timeout_ms = 20000;
  zmq_setsockopt(d, ZMQ_RCVHWM, &one, sizeof one);
  zmq_setsockopt(d, ZMQ_RCVBUF, &small, sizeof small);
  zmq_setsockopt(d, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
  zmq_setsockopt(d, ZMQ_ROUTING_ID, "slow", 4);
  CHECK_INT(zmq_connect(d, ep), 0);
  z_send(d, "hello", NULL);
  EXPECT_ZS(s, 0, "slow", "hello");

  uint8_t *buf = malloc(MIB);
  for (int i = 0; i < SLOW_CHUNKS; i++) {
    chunk(buf, i);
    CHECK_INT(jk_zsock_send(s, "slow", 4, true), 0);
    CHECK_INT(jk_zsock_send(s, buf, MIB, false), 0);
    jk_zsock_flush(s);
  }
  free(buf);
  /* The peer's buffers hold a few MiB at most: the rest is still here. */
  CHECK_INT(jk_zsock_flush_wait(s, now_us() + 200 * SL_US_PER_MS), -ETIMEDOUT);

  struct reader r = {d, SLOW_CHUNKS, 0, 0};
  pthread_t t;
  CHECK_INT(pthread_create(&t, NULL, read_chunks, &r), 0);
  CHECK_INT(jk_zsock_flush_wait(s, now_us() + 3 * WAIT_US), 0);
  pthread_join(t, NULL);
  CHECK_INT(r.got, SLOW_CHUNKS);
  CHECK_INT(r.bad, 0);

  /* The connection is still good afterwards. */
  zs_send(s, "slow", "done", NULL);
  EXPECT_Z(s, d, 0, "done");
  zmq_close(d);
  jk_zsock_free(s);
}

/* max_out_bytes: messages that would start past the cap are dropped for
 * that peer; the ones before it and those after the buffer drained arrive. */
static void output_cap(void) {
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;
  o.max_out_bytes = 4 * MIB;
  char ep[64];
  struct jk_zsock *s = bind_tcp(JK_ZSOCK_ROUTER, &o, ep, NULL);
  if (!s)
    return;
  void *d = z_dealer(ep, "capped");
  z_send(d, "hello", NULL);
  struct sl_msg m;
  CHECK_INT(zs_wait(s, &m), 0);
  sl_msg_done(&m);
  CHECK_INT(jk_zsock_flush_wait(s, now_us() + WAIT_US), 0);

  uint8_t *buf = malloc(MIB);
  for (int i = 0; i < 10; i++) { /* no flush in between: all of it waits */
    chunk(buf, i);
    CHECK_INT(jk_zsock_send(s, "capped", 6, true), 0);
    CHECK_INT(jk_zsock_send(s, buf, MIB, false), 0);
  }
  free(buf);
  CHECK_INT(jk_zsock_flush_wait(s, now_us() + WAIT_US), 0);
  zs_send(s, "capped", "end", NULL);
  int received = 0;
  for (;;) {
    if (z_wait(s, d, &m) < 0) {
      sl_msg_done(&m);
      break;
    }
    bool end = m.n != 1 || m.frames[0].len != MIB;
    if (end) {
      CHECK(msg_is(&m, 0, "end", NULL));
      sl_msg_done(&m);
      break;
    }
    CHECK(m.n == 1 && m.frames[0].data[0] == received && filled(m.frames[0].data + 1, MIB - 1, (unsigned)received));
    received++;
    sl_msg_done(&m);
  }
  /* Messages 0-3 start below 4 MiB of waiting output; 4 would start past it. */
  CHECK_INT(received, 4);
  zmq_close(d);
  jk_zsock_free(s);
}

/* ---- limits --------------------------------------------------------------- */

static void limits(void) {
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;
  o.limits = (struct sl_limits){4, 1024, 4096};
  char ep[64];
  struct jk_zsock *s = bind_tcp(JK_ZSOCK_ROUTER, &o, ep, NULL);
  if (!s)
    return;
  void *d = z_dealer(ep, "lim");
  z_send(d, "f0", "f1", "f2", "f3", "f4", "f5", "f6", "f7", "f8", "f9", NULL);
  struct sl_msg m;
  /* Four frames with the routing id. */
  CHECK_INT(zs_wait(s, &m), SL_ELIMIT);
  CHECK(msg_is(&m, 0, "lim", "f0", "f1", "f2", NULL));
  CHECK_INT(m.dropped_frames, 7);
  CHECK_INT(m.oversized_frames, 0);
  sl_msg_done(&m);

  char big[2001];
  memset(big, 'x', 2000);
  big[2000] = '\0';
  z_send(d, "a", big, "b", NULL);
  CHECK_INT(zs_wait(s, &m), SL_ELIMIT);
  CHECK(msg_is(&m, 0, "lim", "a", "b", NULL));
  CHECK_INT(m.dropped_frames, 1);
  CHECK_INT(m.oversized_frames, 1);
  sl_msg_done(&m);

  z_send(d, "next", "ok", NULL);
  CHECK_INT(zs_wait(s, &m), 0);
  CHECK(msg_is(&m, 0, "lim", "next", "ok", NULL));
  CHECK_INT(m.dropped_frames, 0);
  sl_msg_done(&m);
  zmq_close(d);
  jk_zsock_free(s);
}

/* The limits count the routing id (zsock.h: "per incoming message, routing
 * id included"), bytes as well as frames. */
static void limits_count_routing_id(void) {
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;
  o.limits = (struct sl_limits){4, 1024, 2048};
  char ep[64];
  struct jk_zsock *s = bind_tcp(JK_ZSOCK_ROUTER, &o, ep, NULL);
  if (!s)
    return;
  void *d = z_dealer(ep, "alice");
  char half[1025];
  memset(half, 'h', 1024);
  half[1024] = '\0';
  z_send(d, half, half, NULL); /* 2048 bytes, 2053 with "alice" */
  struct sl_msg m;
  int r = zs_wait(s, &m);
  CHECK_INT(r, SL_ELIMIT);
  CHECK(m.total_bytes <= 2048);
  CHECK_INT(m.n, 2);
  CHECK_INT(m.dropped_frames, 1);
  sl_msg_done(&m);
  zmq_close(d);
  jk_zsock_free(s);
}

/* max_queued: reading pauses while messages wait, and none is lost. */
static void queue_backpressure(void) {
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;
  o.max_queued = 2;
  char ep[64];
  struct jk_zsock *s = bind_tcp(JK_ZSOCK_ROUTER, &o, ep, NULL);
  if (!s)
    return;
  void *d = z_dealer(ep, "q");
  for (int i = 0; i < 200; i++) {
    char body[16];
    snprintf(body, sizeof body, "m%d", i);
    z_send(d, body, NULL);
  }
  int in_order = 0;
  for (int i = 0; i < 200; i++) {
    struct sl_msg m;
    char body[16];
    snprintf(body, sizeof body, "m%d", i);
    int r = zs_wait(s, &m);
    if (r == 0 && msg_is(&m, 0, "q", body, NULL))
      in_order++;
    sl_msg_done(&m);
    if (r < 0)
      break;
  }
  CHECK_INT(in_order, 200);
  zmq_close(d);
  jk_zsock_free(s);
}

/* What a peer can make the socket hold while the caller does not read is
 * bounded (zsock.c: "max_queued complete messages (plus what one read of
 * READ_CHUNK bytes decodes to)"): with tiny messages already waiting in the
 * kernel, one round must not queue more than that. The listener's receive
 * buffer is enlarged (accepted sockets inherit it) to stand for a buffer
 * that TCP autotuning grew during a fast transfer. */
#define READ_CHUNK_BYTES (64u << 10)
static void queue_bound(void) {
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;
  o.max_queued = 2;
  char ep[64];
  struct jk_zsock *s = bind_tcp(JK_ZSOCK_ROUTER, &o, ep, NULL);
  if (!s)
    return;
  struct pollfd fds[4];
  CHECK_INT(jk_zsock_nfds(s), 1); /* no peer yet: the one descriptor is the listener */
  jk_zsock_pollfds(s, fds);
  int listen_fd = fds[0].fd, rcvbuf = 1 << 20;
  CHECK_INT(setsockopt(listen_fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf), 0);

  void *d = z_new(ZMQ_DEALER);
  int hwm = 1000000;
  zmq_setsockopt(d, ZMQ_SNDHWM, &hwm, sizeof hwm);
  CHECK_INT(zmq_connect(d, ep), 0);
  CHECK(wait_peers(s, 1));
  enum { N = 100000 }; /* 3 bytes each on the wire */
  for (int i = 0; i < N; i++)
    zmq_send(d, "x", 1, 0);
  /* Wait, without handling, until most of it sits in the kernel. */
  CHECK_INT(jk_zsock_nfds(s), 2);
  size_t n = jk_zsock_pollfds(s, fds);
  int peer_fd = n == 2 ? fds[fds[0].fd == listen_fd ? 1 : 0].fd : -1;
  int avail = 0;
  int64_t deadline = now_us() + WAIT_US;
  while (peer_fd >= 0 && now_us() < deadline) {
    CHECK_INT(ioctl(peer_fd, FIONREAD, &avail), 0);
    if (avail >= 5 * (int)READ_CHUNK_BYTES / 2)
      break;
    poll(NULL, 0, 1); /* readable long before it is full: check the level again shortly */
  }
  CHECK(avail >= 5 * (int)READ_CHUNK_BYTES / 2);
  /* One round. */
  CHECK(poll(fds, (nfds_t)n, 1000) > 0);
  jk_zsock_handle(s, fds, n);
  size_t queued = 0;
  struct sl_msg m;
  while (jk_zsock_recv(s, &m) != -EAGAIN) {
    queued++;
    sl_msg_done(&m);
  }
  size_t bound = o.max_queued + READ_CHUNK_BYTES / 3 + 1;
  fprintf(stderr, "%d bytes waiting: one round queued %zu messages (bound %zu)\n", avail, queued, bound);
  CHECK(queued >= 1);
  CHECK(queued <= bound);
  zmq_close(d);
  jk_zsock_free(s);
}

/* ---- peers that are refused ----------------------------------------------- */

static void refuse_push(void) {
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;
  char ep[64];
  struct jk_zsock *s = bind_tcp(JK_ZSOCK_ROUTER, &o, ep, NULL);
  if (!s)
    return;
  void *push = z_new(ZMQ_PUSH);
  int never = -1;
  zmq_setsockopt(push, ZMQ_RECONNECT_IVL, &never, sizeof never);
  CHECK_INT(zmq_connect(push, ep), 0);
  zmq_send(push, "x", 1, ZMQ_DONTWAIT);
  /* Wait for the connection to come and go. */
  int64_t deadline = now_us() + WAIT_US;
  bool seen = false, gone = false;
  size_t active = 0;
  while (now_us() < deadline && !gone) {
    pump(s, 5);
    active += jk_zsock_peers(s);
    if (jk_zsock_nfds(s) >= 2)
      seen = true;
    else if (seen)
      gone = true;
  }
  CHECK(seen);
  CHECK(gone);
  CHECK_INT(active, 0);
  CHECK(!jk_zsock_has_msg(s));
  zmq_close(push);
  jk_zsock_free(s);
}

/* Raw TCP clients: garbage, a bad frame after a good handshake, a ZMTP 2.0
 * greeting; each is closed, and a DEALER afterwards is served. */
static void refuse_garbage(void) {
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;
  char ep[64];
  int port;
  struct jk_zsock *s = bind_tcp(JK_ZSOCK_ROUTER, &o, ep, &port);
  if (!s)
    return;
  uint8_t got[4096];
  bool closed;

  int c = tcp_connect(port);
  char junk[64];
  memset(junk, 'x', sizeof junk);
  memcpy(junk, "GET / HTTP/1.1\r\nHost: x\r\n", 25);
  CHECK(send_all(c, junk, sizeof junk));
  size_t n = raw_read(s, c, got, sizeof got, 0, &closed);
  CHECK(closed);
  CHECK_INT(n, 64); /* our greeting, and nothing more */
  CHECK(n >= 11 && got[0] == 0xff && got[9] == 0x7f && got[10] == 3);
  close(c);

  uint8_t g[64];
  raw_greeting(g, 3);
  c = tcp_connect(port);
  CHECK(send_all(c, g, sizeof g));
  CHECK(send_all(c, raw_ready, sizeof raw_ready - 1));
  CHECK(send_all(c, "\x08\x01x", 3)); /* a reserved flag bit */
  raw_read(s, c, got, sizeof got, 0, &closed);
  CHECK(closed);
  close(c);

  /* A message before READY. */
  c = tcp_connect(port);
  CHECK(send_all(c, g, sizeof g));
  CHECK(send_all(c, "\x00\x02hi", 4));
  raw_read(s, c, got, sizeof got, 0, &closed);
  CHECK(closed);
  close(c);

  raw_greeting(g, 1);
  c = tcp_connect(port);
  CHECK(send_all(c, g, sizeof g));
  raw_read(s, c, got, sizeof got, 0, &closed);
  CHECK(closed);
  close(c);
  CHECK_INT(jk_zsock_peers(s), 0);
  CHECK(!jk_zsock_has_msg(s));

  void *d = z_dealer(ep, "good");
  z_send(d, "still", "served", NULL);
  EXPECT_ZS(s, 0, "good", "still", "served");
  zs_send(s, "good", "yes", NULL);
  EXPECT_Z(s, d, 0, "yes");
  zmq_close(d);
  jk_zsock_free(s);
}

/* A client speaking ZMTP by hand: handshake, a message, PING -> PONG. */
static void raw_zmtp_client(void) {
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;
  char ep[64];
  int port;
  struct jk_zsock *s = bind_tcp(JK_ZSOCK_ROUTER, &o, ep, &port);
  if (!s)
    return;
  int c = tcp_connect(port);
  uint8_t g[64];
  raw_greeting(g, 3);
  CHECK(send_all(c, g, sizeof g));
  CHECK(send_all(c, raw_ready, sizeof raw_ready - 1));
  CHECK(send_all(c, "\x01\x00\x00\x03" "abc", 7));
  CHECK(send_all(c, "\x04\x0a\x04PING\x00\x0a" "ctx", 12));
  struct sl_msg m;
  CHECK_INT(zs_wait(s, &m), 0);
  CHECK_INT(m.n, 3);
  if (m.n == 3) {
    CHECK_INT(m.frames[0].len, 5);
    CHECK(msg_is(&m, 1, "", "abc", NULL));
  }
  sl_msg_done(&m);
  /* greeting, READY (ROUTER, empty Identity), PONG with the ping's context. */
  static const uint8_t ready[] = "\x04\x29\x05READY\x0bSocket-Type\x00\x00\x00\x06" "ROUTER"
                                 "\x08Identity\x00\x00\x00\x00";
  static const uint8_t pong[] = "\x04\x08\x04PONGctx";
  size_t want = 64 + sizeof ready - 1 + sizeof pong - 1;
  uint8_t got[256];
  bool closed;
  size_t n = raw_read(s, c, got, sizeof got, want, &closed);
  CHECK_INT(n, want);
  CHECK(!closed);
  if (n == want) {
    CHECK(got[0] == 0xff && got[9] == 0x7f && got[10] == 3);
    CHECK(memcmp(got + 12, "NULL", 5) == 0);
    CHECK(memcmp(got + 64, ready, sizeof ready - 1) == 0);
    CHECK(memcmp(got + 64 + sizeof ready - 1, pong, sizeof pong - 1) == 0);
  }
  CHECK_INT(jk_zsock_peers(s), 1);
  close(c);
  CHECK(wait_peers(s, 0));
  jk_zsock_free(s);
}

static void handshake_timeout(void) {
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;
  o.handshake_timeout_us = 200 * SL_US_PER_MS;
  char ep[64];
  int port;
  struct jk_zsock *s = bind_tcp(JK_ZSOCK_ROUTER, &o, ep, &port);
  if (!s)
    return;
  int64_t t0 = now_us();
  int c = tcp_connect(port);
  uint8_t got[256];
  bool closed;
  size_t n = raw_read(s, c, got, sizeof got, 0, &closed);
  int64_t waited = now_us() - t0;
  CHECK(closed);
  CHECK_INT(n, 64);
  CHECK(waited >= 200 * SL_US_PER_MS);
  CHECK(waited < 2 * SL_US_PER_S);
  fprintf(stderr, "silent client closed after %lld ms\n", (long long)(waited / SL_US_PER_MS));
  close(c);

  /* Half a greeting is no better. */
  c = tcp_connect(port);
  uint8_t g[64];
  raw_greeting(g, 3);
  CHECK(send_all(c, g, 20));
  raw_read(s, c, got, sizeof got, 0, &closed);
  CHECK(closed);
  close(c);
  CHECK_INT(jk_zsock_wake_at_us(s), INT64_MAX);
  jk_zsock_free(s);
}

static void max_peers(void) {
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;
  o.max_peers = 1;
  char ep[64];
  int port;
  struct jk_zsock *s = bind_tcp(JK_ZSOCK_ROUTER, &o, ep, &port);
  if (!s)
    return;
  void *d = z_dealer(ep, "only");
  CHECK(wait_peers(s, 1));
  int c = tcp_connect(port);
  uint8_t got[256];
  bool closed;
  size_t n = raw_read(s, c, got, sizeof got, 0, &closed);
  CHECK(closed);
  CHECK_INT(n, 0); /* closed at once, without a greeting */
  close(c);
  z_send(d, "still here", NULL);
  EXPECT_ZS(s, 0, "only", "still here");
  zmq_close(d);
  jk_zsock_free(s);
}

/* ---- heartbeats ----------------------------------------------------------- */

static void heartbeats(void) {
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;
  char ep[64];
  struct jk_zsock *s = bind_tcp(JK_ZSOCK_ROUTER, &o, ep, NULL);
  if (!s)
    return;
  void *d = z_new(ZMQ_DEALER);
  int ivl = 50, timeout = 200;
  zmq_setsockopt(d, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl);
  zmq_setsockopt(d, ZMQ_HEARTBEAT_TIMEOUT, &timeout, sizeof timeout);
  CHECK_INT(zmq_connect(d, ep), 0);
  z_send(d, "first", NULL);
  struct sl_msg m;
  CHECK_INT(zs_wait(s, &m), 0);
  uint8_t id1[8] = {0}, id2[8] = {1};
  if (m.n >= 1 && m.frames[0].len == 5)
    memcpy(id1, m.frames[0].data, 5);
  CHECK(msg_is(&m, 1, "first", NULL));
  sl_msg_done(&m);
  /* Five times the heartbeat timeout with nothing but PINGs and PONGs. */
  pump_for(s, SL_US_PER_S);
  CHECK_INT(jk_zsock_peers(s), 1);
  CHECK_INT(jk_zsock_nfds(s), 2);
  z_send(d, "second", NULL);
  CHECK_INT(zs_wait(s, &m), 0);
  if (m.n >= 1 && m.frames[0].len == 5)
    memcpy(id2, m.frames[0].data, 5);
  CHECK(msg_is(&m, 1, "second", NULL));
  CHECK(memcmp(id1, id2, 5) == 0); /* the same connection: no reconnect */
  sl_msg_done(&m);
  zmq_close(d);
  jk_zsock_free(s);
}

/* ---- ipc and binding ------------------------------------------------------ */

static void ipc(void) {
  char path[108], ep[128];
  snprintf(path, sizeof path, "/tmp/jk-zsock-test-%d.sock", (int)getpid());
  snprintf(ep, sizeof ep, "ipc://%s", path);
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;

  /* A stale socket file left by a dead process is replaced. */
  int u = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
  unlink(path);
  CHECK_INT(bind(u, (struct sockaddr *)&sa, sizeof sa), 0);
  close(u);

  struct jk_zsock *s = NULL;
  CHECK_INT(jk_zsock_bind(ep, JK_ZSOCK_ROUTER, &o, &s), 0);
  if (!s)
    return;
  void *d = z_dealer(ep, "local");
  z_send(d, "over", "ipc", NULL);
  EXPECT_ZS(s, 0, "local", "over", "ipc");
  zs_send(s, "local", "back", NULL);
  EXPECT_Z(s, d, 0, "back");
  zmq_close(d);
  struct stat st;
  CHECK_INT(lstat(path, &st), 0);
  jk_zsock_free(s);
  CHECK_INT(lstat(path, &st), -1);
  CHECK_INT(errno, ENOENT);

  /* Anything but a socket at the path is left alone. */
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (f)
    fclose(f);
  s = NULL;
  CHECK(jk_zsock_bind(ep, JK_ZSOCK_ROUTER, &o, &s) < 0);
  CHECK(s == NULL);
  jk_zsock_free(s);
  CHECK_INT(lstat(path, &st), 0);
  CHECK(S_ISREG(st.st_mode));
  unlink(path);
}

/* ---- hostile streams ------------------------------------------------------ */

static uint64_t rng_state;

static uint32_t rng(void) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(rng_state >> 33);
}

/* A ZMTP stream that starts well (most of the time) and then goes wrong in
 * some random way: flipped bits, lengths past the data, reserved flags,
 * commands inside messages, frames over the limits, early ends. */
static size_t hostile_stream(uint8_t *buf, size_t cap) {
  size_t n = 0;
  if (rng() % 8) {
    raw_greeting(buf, (uint8_t)(rng() % 5 ? 3 : rng() % 4));
    n = 64;
    if (rng() % 6) {
      memcpy(buf + n, raw_ready, sizeof raw_ready - 1);
      n += sizeof raw_ready - 1;
    }
  }
  while (n + 300 < cap && rng() % 12) {
    uint8_t flags = (uint8_t)(rng() % 8);
    if (rng() % 20 == 0)
      flags |= (uint8_t)(8u << (rng() % 5)); /* reserved bits */
    size_t len = rng() % 200;
    if (flags & 0x02) {
      uint64_t announced = rng() % 4 ? len : ((uint64_t)rng() << 32 | rng());
      buf[n++] = flags;
      for (int k = 0; k < 8; k++)
        buf[n++] = (uint8_t)(announced >> (56 - 8 * k));
    } else {
      buf[n++] = flags;
      buf[n++] = (uint8_t)len;
    }
    for (size_t k = 0; k < len; k++)
      buf[n++] = (uint8_t)rng();
  }
  for (int flips = (int)(rng() % 3); flips > 0 && n > 0; flips--)
    buf[rng() % n] ^= (uint8_t)(1u << (rng() % 8));
  return n;
}

/* Hundreds of connections sending broken streams in random pieces, several
 * at a time: the socket keeps serving, holds nothing for them once they are
 * gone, and a well-behaved DEALER still gets through. */
static void hostile_clients(void) {
  const char *seed_env = getenv("SPOTLAB_ZSOCK_SEED");
  uint64_t seed = seed_env ? strtoull(seed_env, NULL, 10) : (uint64_t)now_us();
  fprintf(stderr, "hostile_clients: SPOTLAB_ZSOCK_SEED=%llu reproduces this run\n", (unsigned long long)seed);
  rng_state = seed;
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;
  o.limits = (struct sl_limits){8, 512, 2048};
  o.handshake_timeout_us = 2 * SL_US_PER_S;
  char ep[64];
  int port;
  struct jk_zsock *s = bind_tcp(JK_ZSOCK_ROUTER, &o, ep, &port);
  if (!s)
    return;
  enum { AT_ONCE = 8, ROUNDS = 150 };
  int received = 0, refused = 0;
  for (int round = 0; round < ROUNDS; round++) {
    int fds[AT_ONCE];
    size_t len[AT_ONCE], off[AT_ONCE];
    static uint8_t bufs[AT_ONCE][16384];
    for (int k = 0; k < AT_ONCE; k++) {
      fds[k] = tcp_connect(port);
      len[k] = hostile_stream(bufs[k], sizeof bufs[k]);
      off[k] = 0;
    }
    for (bool left = true; left;) {
      left = false;
      for (int k = 0; k < AT_ONCE; k++) {
        if (fds[k] < 0 || off[k] >= len[k])
          continue;
        size_t piece = 1 + rng() % 700;
        if (piece > len[k] - off[k])
          piece = len[k] - off[k];
        ssize_t w = send(fds[k], bufs[k] + off[k], piece, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0)
          off[k] += (size_t)w;
        else if (w < 0 && errno != EAGAIN) {
          off[k] = len[k]; /* closed by the socket: it gave up on this one */
          refused++;
        }
        left |= off[k] < len[k];
      }
      pump(s, 0);
    }
    for (int k = 0; k < AT_ONCE; k++)
      if (fds[k] >= 0)
        close(fds[k]);
    /* What complete messages got through are ordinary messages. */
    struct sl_msg m;
    while (jk_zsock_recv(s, &m) != -EAGAIN) {
      CHECK(m.n >= 1 && m.n <= 8 && m.total_bytes <= 2048);
      received++;
      sl_msg_done(&m);
    }
  }
  fprintf(stderr, "hostile_clients: %d connections, %d messages got through, %d cut off while sending\n",
          AT_ONCE * ROUNDS, received, refused);
  CHECK(received > 0); /* the streams are not all rejected at the first byte */
  /* Every hostile connection goes away (closed by them or by the socket). */
  int64_t deadline = now_us() + WAIT_US;
  while (jk_zsock_nfds(s) > 1 && now_us() < deadline)
    pump(s, 5);
  CHECK_INT(jk_zsock_nfds(s), 1);
  void *d = z_dealer(ep, "calm");
  z_send(d, "still", "here", NULL);
  EXPECT_ZS(s, 0, "calm", "still", "here");
  zmq_close(d);
  jk_zsock_free(s);
}

/* ---- DEALER: connecting, reconnecting, waiting messages ------------------ */

static void *z_router_bind(const char *ep) {
  void *z = z_new(ZMQ_ROUTER);
  CHECK_INT(zmq_bind(z, ep), 0);
  return z;
}

/* A DEALER started before anything listens keeps trying; what it sent
 * meanwhile reaches the ROUTER that comes up, and replies arrive without a
 * routing id frame. */
static void dealer_connects_later(void) {
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;
  char ep[64];
  snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", free_port());
  struct jk_zsock *s = NULL;
  CHECK_INT(jk_zsock_connect(ep, JK_ZSOCK_DEALER, &o, &s), 0);
  if (!s)
    return;
  CHECK_INT(jk_zsock_send(s, "early", 5, true), 0);
  CHECK_INT(jk_zsock_send(s, "bird", 4, false), 0);
  pump_for(s, 300 * 1000); /* a few refused attempts */
  CHECK_INT(jk_zsock_peers(s), 0);
  void *r = z_router_bind(ep);
  struct sl_msg m;
  CHECK_INT(z_wait(s, r, &m), 0);
  CHECK(m.n == 3 && msg_is(&m, 1, "early", "bird", NULL));
  CHECK(m.n == 3 && m.frames[0].len == 5 && m.frames[0].data[0] == 0); /* no Identity given */
  /* The ROUTER's first frame names the DEALER. */
  zmq_send(r, m.frames[0].data, m.frames[0].len, ZMQ_SNDMORE);
  z_send(r, "hello", "again", NULL);
  sl_msg_done(&m);
  EXPECT_ZS(s, 0, "hello", "again");
  CHECK_INT(jk_zsock_peers(s), 1);
  zmq_close(r);
  jk_zsock_free(s);
}

/* The peer goes away: the DEALER notices, keeps what is sent meanwhile, and
 * delivers it to the peer that binds the address again. */
static void dealer_reconnects(void) {
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;
  char ep[64];
  snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", free_port());
  void *r = z_router_bind(ep);
  struct jk_zsock *s = NULL;
  CHECK_INT(jk_zsock_connect(ep, JK_ZSOCK_DEALER, &o, &s), 0);
  if (!s) {
    zmq_close(r);
    return;
  }
  zs_send(s, "one", NULL);
  EXPECT_Z(s, r, 1, "one");
  zmq_close(r);
  int64_t deadline = now_us() + WAIT_US;
  while (jk_zsock_peers(s) != 0 && now_us() < deadline)
    pump(s, 5);
  CHECK_INT(jk_zsock_peers(s), 0);
  zs_send(s, "while", "down", NULL);
  r = z_router_bind(ep);
  EXPECT_Z(s, r, 1, "while", "down");
  zmq_close(r);
  jk_zsock_free(s);
}

/* Waiting output is capped: past max_out_bytes a DEALER refuses the next
 * message with -EAGAIN (it never drops half of one), and takes messages
 * again once the connection carried the backlog away. */
static void dealer_cap(void) {
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;
  o.max_out_bytes = 1000;
  char ep[64];
  snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", free_port());
  struct jk_zsock *s = NULL;
  CHECK_INT(jk_zsock_connect(ep, JK_ZSOCK_DEALER, &o, &s), 0);
  if (!s)
    return;
  char big[1200];
  memset(big, 'b', sizeof big);
  CHECK_INT(jk_zsock_send(s, big, sizeof big, false), 0);
  CHECK_INT(jk_zsock_send(s, "more", 4, false), -EAGAIN);
  CHECK_INT(jk_zsock_send(s, "more", 4, true), -EAGAIN); /* refused whole, not begun */
  void *r = z_router_bind(ep);
  struct sl_msg m;
  CHECK_INT(z_wait(s, r, &m), 0);
  CHECK(m.n == 2 && m.frames[1].len == sizeof big);
  sl_msg_done(&m);
  zs_send(s, "after", NULL);
  EXPECT_Z(s, r, 1, "after");
  zmq_close(r);
  jk_zsock_free(s);
}

/* A DEALER over ipc, to a libzmq ROUTER. */
static void dealer_ipc(void) {
  char ep[96];
  snprintf(ep, sizeof ep, "ipc:///tmp/spotlab-zsock-dealer-%d.sock", (int)getpid());
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;
  void *r = z_router_bind(ep);
  struct jk_zsock *s = NULL;
  CHECK_INT(jk_zsock_connect(ep, JK_ZSOCK_DEALER, &o, &s), 0);
  if (s) {
    zs_send(s, "over", "ipc", NULL);
    EXPECT_Z(s, r, 1, "over", "ipc");
    jk_zsock_free(s);
  }
  zmq_close(r);
}

static void connect_errors(void) {
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;
  struct jk_zsock *s = NULL;
  CHECK(jk_zsock_connect("tcp://*:5555", JK_ZSOCK_DEALER, &o, &s) < 0);
  CHECK(jk_zsock_connect("tcp://127.0.0.1", JK_ZSOCK_DEALER, &o, &s) < 0);
  CHECK(jk_zsock_connect("udp://127.0.0.1:5", JK_ZSOCK_DEALER, &o, &s) < 0);
  CHECK(jk_zsock_connect("tcp://name.invalid:5", JK_ZSOCK_DEALER, &o, &s) < 0);
  CHECK_INT(jk_zsock_connect("tcp://127.0.0.1:5", JK_ZSOCK_ROUTER, &o, &s), -EINVAL);
  CHECK_INT(jk_zsock_bind("tcp://127.0.0.1:5", JK_ZSOCK_DEALER, &o, &s), -EINVAL);
  CHECK(s == NULL);
}

static void bind_errors(void) {
  struct jk_zsock_options o = JK_ZSOCK_OPTIONS_DEFAULT;
  char ep[64];
  int port;
  struct jk_zsock *s = bind_tcp(JK_ZSOCK_ROUTER, &o, ep, &port);
  if (!s)
    return;
  static int sentinel;
  struct jk_zsock *const untouched = (struct jk_zsock *)&sentinel;
  struct jk_zsock *t = untouched;
  CHECK_INT(jk_zsock_bind(ep, JK_ZSOCK_PUB, &o, &t), -EADDRINUSE);
  CHECK(t == untouched);
  jk_zsock_free(s);

  static const char *const malformed[] = {
    "tcp://127.0.0.1", "tcp://127.0.0.1:99999", "tcp://127.0.0.1:", "tcp://:5555", "tcp://127.0.0.1:12a",
    "tcp://127.0.0.1:-1", "tcp://127.0.0.1:123456789", "ipc://",
  };
  for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
    t = untouched;
    int r = jk_zsock_bind(malformed[i], JK_ZSOCK_ROUTER, &o, &t);
    if (r != -EINVAL)
      fprintf(stderr, "binding %s: %d\n", malformed[i], r);
    CHECK_INT(r, -EINVAL);
    CHECK(t == untouched);
  }
  static const char *const refused[] = {"udp://x:1", "", "tcp:/127.0.0.1:1", "inproc://x"};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    t = untouched;
    CHECK(jk_zsock_bind(refused[i], JK_ZSOCK_ROUTER, &o, &t) < 0);
    CHECK(t == untouched);
  }
  char longhost[400];
  memset(longhost, 'h', sizeof longhost);
  memcpy(longhost, "tcp://", 6);
  snprintf(longhost + 300, 100, ":1234");
  t = untouched;
  CHECK(jk_zsock_bind(longhost, JK_ZSOCK_ROUTER, &o, &t) < 0);
  CHECK(t == untouched);

  /* "*" and a host name bind too. */
  for (int attempt = 0; attempt < 20; attempt++) {
    port = free_port();
    snprintf(ep, sizeof ep, "tcp://*:%d", port);
    int r = jk_zsock_bind(ep, JK_ZSOCK_PUB, &o, &s);
    if (r == -EADDRINUSE)
      continue;
    CHECK_INT(r, 0);
    if (r == 0) {
      int c = tcp_connect(port);
      uint8_t got[64];
      bool closed;
      CHECK_INT(raw_read(s, c, got, sizeof got, 64, &closed), 64);
      close(c);
      jk_zsock_free(s);
    }
    break;
  }
  for (int attempt = 0; attempt < 20; attempt++) {
    port = free_port();
    snprintf(ep, sizeof ep, "tcp://localhost:%d", port);
    int r = jk_zsock_bind(ep, JK_ZSOCK_REP, &o, &s);
    if (r == -EADDRINUSE)
      continue;
    CHECK_INT(r, 0);
    if (r == 0)
      jk_zsock_free(s);
    break;
  }
  CHECK(jk_zsock_free(NULL) == NULL);
}

int main(void) {
  ctx = zmq_ctx_new();
  static const struct {
    const char *name;
    void (*fn)(void);
  } cases[] = {
    {"router_dealer", router_dealer},
    {"router_handover", router_handover},
    {"router_req", router_req},
    {"pub_sub", pub_sub},
    {"pub_xsub", pub_xsub},
    {"pub_raw_commands", pub_raw_commands},
    {"rep_req", rep_req},
    {"big_messages", big_messages},
    {"slow_reader", slow_reader},
    {"output_cap", output_cap},
    {"limits", limits},
    {"limits_count_routing_id", limits_count_routing_id},
    {"queue_backpressure", queue_backpressure},
    {"queue_bound", queue_bound},
    {"refuse_push", refuse_push},
    {"refuse_garbage", refuse_garbage},
    {"raw_zmtp_client", raw_zmtp_client},
    {"handshake_timeout", handshake_timeout},
    {"max_peers", max_peers},
    {"heartbeats", heartbeats},
    {"ipc", ipc},
    {"bind_errors", bind_errors},
    {"hostile_clients", hostile_clients},
    {"dealer_connects_later", dealer_connects_later},
    {"dealer_reconnects", dealer_reconnects},
    {"dealer_cap", dealer_cap},
    {"dealer_ipc", dealer_ipc},
    {"connect_errors", connect_errors},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int before = th_failures;
    int64_t t0 = now_us();
    cases[i].fn();
    fprintf(stderr, "%-24s %s (%lld ms)\n", cases[i].name, th_failures == before ? "ok" : "FAILED",
            (long long)((now_us() - t0) / SL_US_PER_MS));
  }
  zmq_ctx_term(ctx);
  TEST_MAIN_END();
}
