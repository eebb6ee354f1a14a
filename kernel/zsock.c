/* ZMTP 3.0 sockets on the caller's thread (see zsock.h for the contract).
 *
 * Invariants:
 *   - every byte a read returns is handed to the peer's decoder at once, so
 *     a peer holds no raw input between rounds; what a peer may make us hold
 *     is bounded by the message limits, max_queued complete messages (plus
 *     what one read of READ_CHUNK bytes decodes to) and max_out_bytes;
 *   - a peer is freed only between messages (in jk_zsock_pollfds() and
 *     jk_zsock_free()), never while jk_zsock_send() is filling one, so a
 *     failure in the middle of a message only marks the peer dead;
 *   - peers keep their order in the array between jk_zsock_pollfds() and
 *     jk_zsock_handle(), so the i-th pollfd after the listener is the i-th
 *     peer (checked against its descriptor). */
#include "zsock.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "sl_err.h"
#include "sl_log.h"
#include "sl_time.h"
#include "zmtp_codec.h"
#include "zsock_endpoint.h"

#define READ_CHUNK (64u << 10)
#define READS_PER_ROUND 16 /* reads from one peer before the others get a turn */
#define ACCEPTS_PER_ROUND 64
#define SHRINK_BYTES (1u << 20) /* an emptied output buffer larger than this is freed */
#define MAX_TOPICS 256
#define ACCEPT_PAUSE_US (100 * 1000LL) /* after running out of descriptors */
#define RECONNECT_US (100 * 1000LL)    /* between a DEALER's connection attempts, as libzmq's default */

enum peer_state { P_CONNECTING, P_GREETING, P_READY, P_ACTIVE };

struct topic {
  uint8_t *data;
  size_t len;
};

struct peer {
  int fd;
  enum peer_state state;
  bool dead;
  bool target; /* receives the message being sent */
  uint64_t serial;
  int64_t deadline_us;
  uint8_t greeting[JK_ZMTP_GREETING_BYTES];
  size_t greeting_have;
  struct jk_zmtp_decoder dec;
  uint8_t id[JK_ZMTP_IDENTITY_MAX];
  size_t id_len;
  uint8_t *out; /* output not yet written: out[out_off, out_len) */
  size_t out_off, out_len, out_cap;
  struct topic *topics;
  size_t ntopics;
  bool warned_topics;
};

struct queued {
  struct sl_msg msg;
  int status; /* 0 or SL_ELIMIT */
  uint64_t serial;
};

struct jk_zsock {
  enum jk_zsock_type type;
  struct jk_zsock_options opts;
  int listen_fd;
  char ipc_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
  struct peer **peers;
  size_t npeers, peers_cap;
  struct queued *q; /* ring */
  size_t q_head, q_count, q_cap;
  uint64_t next_serial;
  uint32_t next_id;
  bool sending;        /* inside a message */
  uint64_t reply_to;   /* REP: serial of the peer that sent the last message received */
  int64_t accept_paused_until_us;
  /* A connecting DEALER: where to, when to try again, and the messages sent
   * while no connection is ready (they go out once one is). */
  bool client;
  struct jk_zsock_endpoint remote;
  int64_t reconnect_at_us;
  uint8_t *outbox;
  size_t outbox_len, outbox_cap;
  bool to_outbox;      /* the message being sent goes to the outbox */
  size_t outbox_msg_start;
};

static const char *const type_name[] = {
  [JK_ZSOCK_ROUTER] = "ROUTER", [JK_ZSOCK_PUB] = "PUB", [JK_ZSOCK_REP] = "REP", [JK_ZSOCK_DEALER] = "DEALER",
};

static void start_connect(struct jk_zsock *s);
static size_t live_peers(const struct jk_zsock *s);

/* ---- binding and connecting ------------------------------------------- */

static struct jk_zsock *new_sock(enum jk_zsock_type type, const struct jk_zsock_options *opts) {
  struct jk_zsock *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->type = type;
  s->opts = *opts;
  if (s->opts.max_peers == 0)
    s->opts.max_peers = 1;
  /* A ROUTER's routing id is a frame of the message, within its limits
   * (its bytes are taken off per peer, in set_id). */
  if (type == JK_ZSOCK_ROUTER && s->opts.limits.max_frames > 1)
    s->opts.limits.max_frames--;
  s->listen_fd = -1;
  s->next_id = 1;
  return s;
}

int jk_zsock_bind(const char *endpoint, enum jk_zsock_type type, const struct jk_zsock_options *opts,
                  struct jk_zsock **ret_sock) {
  if (type == JK_ZSOCK_DEALER)
    return -EINVAL;
  struct jk_zsock_endpoint ep;
  int fd = -1;
  int r = jk_zsock_endpoint_parse(endpoint, true, &ep);
  if (r == 0)
    r = jk_zsock_endpoint_listen(&ep, &fd);
  if (r < 0)
    return r;
  struct jk_zsock *s = new_sock(type, opts);
  if (!s) {
    close(fd);
    return -ENOMEM;
  }
  s->listen_fd = fd;
  if (ep.sa.ss_family == AF_UNIX)
    snprintf(s->ipc_path, sizeof s->ipc_path, "%s", ((struct sockaddr_un *)&ep.sa)->sun_path);
  *ret_sock = s;
  return 0;
}

int jk_zsock_connect(const char *endpoint, enum jk_zsock_type type, const struct jk_zsock_options *opts,
                     struct jk_zsock **ret_sock) {
  if (type != JK_ZSOCK_DEALER)
    return -EINVAL;
  struct jk_zsock_endpoint ep;
  int r = jk_zsock_endpoint_parse(endpoint, false, &ep);
  if (r < 0)
    return r;
  struct jk_zsock *s = new_sock(type, opts);
  if (!s)
    return -ENOMEM;
  s->client = true;
  s->remote = ep;
  s->opts.max_peers = 1;
  start_connect(s);
  *ret_sock = s;
  return 0;
}

/* ---- peers -------------------------------------------------------------- */

static void peer_free(struct peer *p) {
  if (!p)
    return;
  close(p->fd);
  jk_zmtp_decoder_done(&p->dec);
  free(p->out);
  for (size_t i = 0; i < p->ntopics; i++)
    free(p->topics[i].data);
  free(p->topics);
  free(p);
}

static void reap(struct jk_zsock *s) {
  size_t k = 0;
  for (size_t i = 0; i < s->npeers; i++) {
    if (!s->peers[i]->dead) {
      s->peers[k++] = s->peers[i];
      continue;
    }
    peer_free(s->peers[i]);
    if (s->client)
      s->reconnect_at_us = sl_time_mono_us() + RECONNECT_US;
  }
  s->npeers = k;
}

struct jk_zsock *jk_zsock_free(struct jk_zsock *s) {
  if (!s)
    return NULL;
  for (size_t i = 0; i < s->npeers; i++)
    peer_free(s->peers[i]);
  free(s->peers);
  for (size_t i = 0; i < s->q_count; i++)
    sl_msg_done(&s->q[(s->q_head + i) % s->q_cap].msg);
  free(s->q);
  free(s->outbox);
  if (s->listen_fd >= 0)
    close(s->listen_fd);
  if (s->ipc_path[0])
    unlink(s->ipc_path);
  free(s);
  return NULL;
}

static int buf_append(uint8_t **buf, size_t *len, size_t *cap, const void *data, size_t n) {
  if (*len + n > *cap) {
    size_t c = *cap ? *cap : 4096;
    while (c < *len + n)
      c *= 2;
    uint8_t *b = realloc(*buf, c);
    if (!b)
      return -ENOMEM;
    *buf = b;
    *cap = c;
  }
  memcpy(*buf + *len, data, n);
  *len += n;
  return 0;
}

static int out_append(struct peer *p, const void *data, size_t len) {
  return buf_append(&p->out, &p->out_len, &p->out_cap, data, len);
}

static void peer_write(struct peer *p) {
  if (p->state == P_CONNECTING)
    return; /* the greeting waits until the connection is made */
  while (!p->dead && p->out_off < p->out_len) {
    ssize_t w = send(p->fd, p->out + p->out_off, p->out_len - p->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p->out_off += (size_t)w;
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    } else {
      sl_debug("kernel.zmtp", "peer %d: write failed: %s", p->fd, w < 0 ? strerror(errno) : "closed");
      p->dead = true;
    }
  }
  if (p->out_off == p->out_len) {
    p->out_off = p->out_len = 0;
    if (p->out_cap > SHRINK_BYTES) {
      free(p->out);
      p->out = NULL;
      p->out_cap = 0;
    }
  }
}

static struct peer *find_id(struct jk_zsock *s, const uint8_t *id, size_t len) {
  for (size_t i = 0; i < s->npeers; i++) {
    struct peer *p = s->peers[i];
    if (p->state == P_ACTIVE && !p->dead && p->id_len == len && memcmp(p->id, id, len) == 0)
      return p;
  }
  return NULL;
}

/* A ROUTER's routing id counts against a message's limits (a frame and its
 * bytes), as it did when libzmq handed it over as the first frame. */
static void set_id(struct jk_zsock *s, struct peer *p, const uint8_t *id, size_t len) {
  memcpy(p->id, id, len);
  p->id_len = len;
  struct sl_limits lim = s->opts.limits;
  lim.max_total_bytes = lim.max_total_bytes > len ? lim.max_total_bytes - len : 0;
  p->dec.msg.limits = lim;
}

static void generate_id(struct jk_zsock *s, struct peer *p) {
  uint32_t n = s->next_id++;
  uint8_t id[5] = {0, (uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
  set_id(s, p, id, sizeof id);
}

static bool peer_type_ok(enum jk_zsock_type type, const char *peer) {
  switch (type) {
  case JK_ZSOCK_ROUTER:
    return !strcmp(peer, "DEALER") || !strcmp(peer, "REQ") || !strcmp(peer, "ROUTER");
  case JK_ZSOCK_PUB:
    return !strcmp(peer, "SUB") || !strcmp(peer, "XSUB");
  case JK_ZSOCK_REP:
    return !strcmp(peer, "REQ") || !strcmp(peer, "DEALER");
  case JK_ZSOCK_DEALER:
    return !strcmp(peer, "ROUTER") || !strcmp(peer, "DEALER") || !strcmp(peer, "REP");
  }
  return false;
}

static void drop_peer(struct peer *p, const char *why) {
  sl_debug("kernel.zmtp", "closing peer %d: %s", p->fd, why);
  p->dead = true;
}

static void on_ready(struct jk_zsock *s, struct peer *p) {
  struct jk_zmtp_ready_info info;
  char why[160];
  if (jk_zmtp_ready_parse(p->dec.command_buf, p->dec.command_len, &info, why, sizeof why) < 0)
    return drop_peer(p, why);
  if (!peer_type_ok(s->type, info.socket_type)) {
    snprintf(why, sizeof why, "a %s socket cannot talk to a %s", type_name[s->type], info.socket_type);
    return drop_peer(p, why);
  }
  if (s->type == JK_ZSOCK_ROUTER) {
    /* Routing ids starting with a zero byte are reserved for generated ones. */
    if (info.identity_len && info.identity[0] != 0) {
      struct peer *old = find_id(s, info.identity, info.identity_len);
      if (old)
        generate_id(s, old); /* handover: the newcomer takes the id */
      set_id(s, p, info.identity, info.identity_len);
    } else {
      generate_id(s, p);
    }
  }
  p->state = P_ACTIVE;
  if (s->client && s->outbox_len) {
    /* What was sent while no connection was ready goes out now, in order. */
    if (out_append(p, s->outbox, s->outbox_len) < 0)
      return drop_peer(p, "out of memory");
    s->outbox_len = 0;
  }
}

static void set_topic(struct peer *p, const uint8_t *topic, size_t len, bool subscribe) {
  for (size_t i = 0; i < p->ntopics; i++) {
    if (p->topics[i].len == len && (len == 0 || memcmp(p->topics[i].data, topic, len) == 0)) {
      if (!subscribe) {
        free(p->topics[i].data);
        p->topics[i] = p->topics[--p->ntopics];
      }
      return;
    }
  }
  if (!subscribe)
    return;
  if (p->ntopics >= MAX_TOPICS) {
    if (!p->warned_topics)
      sl_warn("kernel.zmtp", "a subscriber asked for more than %d topics; the rest are ignored", MAX_TOPICS);
    p->warned_topics = true;
    return;
  }
  struct topic *t = realloc(p->topics, (p->ntopics + 1) * sizeof *t);
  if (!t)
    return;
  p->topics = t;
  uint8_t *copy = malloc(len ? len : 1);
  if (!copy)
    return;
  if (len)
    memcpy(copy, topic, len);
  p->topics[p->ntopics++] = (struct topic){copy, len};
}

static void on_command(struct jk_zsock *s, struct peer *p) {
  char name[256];
  const uint8_t *data;
  size_t len;
  if (jk_zmtp_command_name(p->dec.command_buf, p->dec.command_len, name, &data, &len) < 0)
    return drop_peer(p, "malformed command");
  if (strcmp(name, "PING") == 0) {
    /* PONG echoes the ping's context (what follows its two-byte TTL). */
    size_t ctx = len > 2 ? len - 2 : 0;
    if (ctx > 16)
      ctx = 16;
    uint8_t frame[JK_ZMTP_FRAME_HEADER_MAX + 5 + 16];
    size_t h = jk_zmtp_frame_header(frame, 5 + ctx, false, true);
    memcpy(frame + h, "\4PONG", 5);
    if (ctx)
      memcpy(frame + h + 5, data + 2, ctx);
    if (out_append(p, frame, h + 5 + ctx) < 0)
      drop_peer(p, "out of memory");
  } else if (s->type == JK_ZSOCK_PUB && (strcmp(name, "SUBSCRIBE") == 0 || strcmp(name, "CANCEL") == 0)) {
    set_topic(p, data, len, name[0] == 'S');
  }
  /* Other commands (PONG, ...) need no answer. */
}

static int enqueue(struct jk_zsock *s, struct peer *p, struct sl_msg *msg, int status) {
  if (s->q_count == s->q_cap) {
    size_t cap = s->q_cap ? s->q_cap * 2 : 16;
    struct queued *q = malloc(cap * sizeof *q);
    if (!q)
      return -ENOMEM;
    for (size_t i = 0; i < s->q_count; i++)
      q[i] = s->q[(s->q_head + i) % s->q_cap];
    free(s->q);
    s->q = q;
    s->q_cap = cap;
    s->q_head = 0;
  }
  struct queued *e = &s->q[(s->q_head + s->q_count) % s->q_cap];
  e->msg = *msg;
  e->status = status;
  e->serial = p->serial;
  s->q_count++;
  return 0;
}

/* A ROUTER message gets its routing id in front. */
static int prefix_id(struct peer *p, struct sl_msg *msg) {
  struct sl_frame *f = malloc((msg->n + 1) * sizeof *f);
  uint8_t *id = malloc(p->id_len + 1);
  if (!f || !id) {
    free(f);
    free(id);
    return -ENOMEM;
  }
  memcpy(id, p->id, p->id_len);
  id[p->id_len] = '\0';
  f[0] = (struct sl_frame){id, p->id_len};
  if (msg->n)
    memcpy(f + 1, msg->frames, msg->n * sizeof *f);
  free(msg->frames);
  msg->frames = f;
  msg->n++;
  msg->cap = msg->n;
  msg->total_bytes += p->id_len;
  return 0;
}

static void on_message(struct jk_zsock *s, struct peer *p) {
  struct sl_msg msg;
  int status = jk_zmtp_decoder_take(&p->dec, &msg);
  if (s->type == JK_ZSOCK_PUB) {
    /* A subscriber sends only (un)subscriptions: 1 or 0, then the topic. */
    if (status == 0 && msg.n == 1 && msg.frames[0].len >= 1 && msg.frames[0].data[0] <= 1)
      set_topic(p, msg.frames[0].data + 1, msg.frames[0].len - 1, msg.frames[0].data[0] == 1);
    sl_msg_done(&msg);
    return;
  }
  if ((s->type == JK_ZSOCK_ROUTER && prefix_id(p, &msg) < 0) || enqueue(s, p, &msg, status) < 0) {
    sl_msg_done(&msg);
    drop_peer(p, "out of memory");
  }
}

/* Hands n bytes a peer sent to its handshake or its decoder. */
static void feed(struct jk_zsock *s, struct peer *p, const uint8_t *buf, size_t n) {
  while (n && !p->dead) {
    if (p->state == P_GREETING) {
      size_t k = JK_ZMTP_GREETING_BYTES - p->greeting_have;
      if (k > n)
        k = n;
      memcpy(p->greeting + p->greeting_have, buf, k);
      p->greeting_have += k;
      buf += k;
      n -= k;
      if (p->greeting_have < JK_ZMTP_GREETING_BYTES)
        return;
      char why[160];
      if (jk_zmtp_greeting_check(p->greeting, why, sizeof why) < 0)
        return drop_peer(p, why);
      uint8_t ready[512];
      static const uint8_t no_id[1];
      bool routing = s->type == JK_ZSOCK_ROUTER || s->type == JK_ZSOCK_DEALER;
      size_t len = jk_zmtp_ready(ready, sizeof ready, type_name[s->type], routing ? no_id : NULL, 0);
      if (out_append(p, ready, len) < 0)
        return drop_peer(p, "out of memory");
      p->state = P_READY;
      continue;
    }
    size_t used = 0;
    int ev = jk_zmtp_decode(&p->dec, buf, n, &used);
    buf += used;
    n -= used;
    if (ev < 0)
      return drop_peer(p, ev == -ENOMEM ? "out of memory" : "malformed frame");
    if (p->state == P_READY) {
      if (ev == JK_ZMTP_MESSAGE)
        return drop_peer(p, "message before READY");
      if (ev == JK_ZMTP_COMMAND)
        on_ready(s, p);
    } else if (ev == JK_ZMTP_COMMAND) {
      on_command(s, p);
    } else if (ev == JK_ZMTP_MESSAGE) {
      on_message(s, p);
    }
  }
}

static void peer_read(struct jk_zsock *s, struct peer *p) {
  static __thread uint8_t buf[READ_CHUNK];
  for (int i = 0; i < READS_PER_ROUND && !p->dead; i++) {
    if (i > 0 && s->q_count >= s->opts.max_queued)
      return; /* the queue is full: the rest waits in the kernel's socket buffer */
    ssize_t r = recv(p->fd, buf, sizeof buf, MSG_DONTWAIT);
    if (r > 0) {
      feed(s, p, buf, (size_t)r);
      if ((size_t)r < sizeof buf)
        return;
    } else if (r < 0 && errno == EINTR) {
      continue;
    } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    } else {
      return drop_peer(p, r == 0 ? "peer closed the connection" : strerror(errno));
    }
  }
}

static int grow_peers(struct jk_zsock *s) {
  if (s->npeers < s->peers_cap)
    return 0;
  size_t cap = s->peers_cap ? 2 * s->peers_cap : 8;
  struct peer **p = realloc(s->peers, cap * sizeof *p);
  if (!p)
    return -ENOMEM;
  s->peers = p;
  s->peers_cap = cap;
  return 0;
}

/* A new connection on fd (owned from here on), with this side's greeting
 * waiting in its output; NULL when out of memory (fd closed). */
static struct peer *add_peer(struct jk_zsock *s, int fd, enum peer_state state) {
  struct peer *p = NULL;
  uint8_t greeting[JK_ZMTP_GREETING_BYTES];
  jk_zmtp_greeting(greeting);
  if (grow_peers(s) < 0 || !(p = calloc(1, sizeof *p))) {
    close(fd);
    return NULL;
  }
  p->fd = fd;
  p->state = state;
  p->serial = ++s->next_serial;
  p->deadline_us = sl_time_mono_us() + s->opts.handshake_timeout_us;
  jk_zmtp_decoder_init(&p->dec, s->opts.limits);
  if (out_append(p, greeting, sizeof greeting) < 0) {
    peer_free(p);
    return NULL;
  }
  s->peers[s->npeers++] = p;
  return p;
}

static void accept_peers(struct jk_zsock *s) {
  for (int i = 0; i < ACCEPTS_PER_ROUND; i++) {
    int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        /* The connection stays in the backlog and the listener readable:
         * rest instead of spinning on it. */
        sl_warn("kernel.zmtp", "cannot accept a connection: %s; retrying shortly", strerror(errno));
        s->accept_paused_until_us = sl_time_mono_us() + ACCEPT_PAUSE_US;
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
        sl_debug("kernel.zmtp", "accept failed: %s", strerror(errno));
      }
      return;
    }
    size_t live = live_peers(s);
    if (live >= s->opts.max_peers) {
      sl_debug("kernel.zmtp", "refused a connection: %zu peers already", live);
      close(fd);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* fails harmlessly on ipc */
    struct peer *p = add_peer(s, fd, P_GREETING);
    if (p)
      peer_write(p);
  }
}

/* A DEALER's one connection: started at once, and again RECONNECT_US after
 * it failed or was lost (reap() sets the time). */
static void start_connect(struct jk_zsock *s) {
  int fd;
  bool done;
  int r = jk_zsock_endpoint_connect(&s->remote, &fd, &done);
  if (r < 0) {
    sl_debug("kernel.zmtp", "cannot connect: %s", strerror(-r));
    s->reconnect_at_us = sl_time_mono_us() + RECONNECT_US;
    return;
  }
  s->reconnect_at_us = 0;
  struct peer *p = add_peer(s, fd, done ? P_GREETING : P_CONNECTING);
  if (!p)
    s->reconnect_at_us = sl_time_mono_us() + RECONNECT_US;
  else if (done)
    peer_write(p);
}

/* A connection in progress finished (POLLOUT): it either failed or is ready
 * for the greeting, which waits in its output already. */
static void finish_connect(struct peer *p) {
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
    err = errno;
  if (err)
    return drop_peer(p, strerror(err));
  p->state = P_GREETING;
}

/* ---- polling ------------------------------------------------------------ */

size_t jk_zsock_nfds(const struct jk_zsock *s) { return 1 + s->npeers; }

size_t jk_zsock_pollfds(struct jk_zsock *s, struct pollfd *fds) {
  if (!s->sending)
    reap(s);
  size_t n = 0;
  if (s->accept_paused_until_us && s->accept_paused_until_us <= sl_time_mono_us())
    s->accept_paused_until_us = 0;
  fds[n++] = (struct pollfd){s->listen_fd, s->accept_paused_until_us ? 0 : POLLIN, 0}; /* -1 when connecting */
  bool room = s->q_count < s->opts.max_queued;
  for (size_t i = 0; i < s->npeers; i++) {
    struct peer *p = s->peers[i];
    short ev = 0;
    if (!p->dead && p->state == P_CONNECTING)
      ev = POLLOUT;
    else if (!p->dead && (room || p->state != P_ACTIVE || s->type == JK_ZSOCK_PUB))
      ev |= POLLIN;
    if (!p->dead && p->out_off < p->out_len)
      ev |= POLLOUT;
    fds[n++] = (struct pollfd){p->dead ? -1 : p->fd, ev, 0};
  }
  return n;
}

void jk_zsock_handle(struct jk_zsock *s, const struct pollfd *fds, size_t n) {
  int64_t now = sl_time_mono_us();
  for (size_t i = 1; i < n && i - 1 < s->npeers; i++) {
    struct peer *p = s->peers[i - 1];
    if (p->dead || fds[i].fd != p->fd || !fds[i].revents)
      continue;
    if (p->state == P_CONNECTING)
      finish_connect(p);
    if (!p->dead && (fds[i].revents & POLLOUT))
      peer_write(p);
    if (fds[i].revents & (POLLIN | POLLHUP | POLLERR))
      peer_read(s, p);
  }
  for (size_t i = 0; i < s->npeers; i++) {
    struct peer *p = s->peers[i];
    if (!p->dead && p->state != P_ACTIVE && now > p->deadline_us)
      drop_peer(p, "handshake not finished in time");
  }
  if (n > 0 && s->listen_fd >= 0 && fds[0].fd == s->listen_fd && (fds[0].revents & POLLIN))
    accept_peers(s);
  if (s->client && s->reconnect_at_us && now >= s->reconnect_at_us && live_peers(s) == 0)
    start_connect(s);
  jk_zsock_flush(s); /* handshake replies and PONGs */
}

int64_t jk_zsock_wake_at_us(const struct jk_zsock *s) {
  int64_t at = s->accept_paused_until_us ? s->accept_paused_until_us : INT64_MAX;
  if (s->client && s->reconnect_at_us && s->reconnect_at_us < at)
    at = s->reconnect_at_us;
  for (size_t i = 0; i < s->npeers; i++)
    if (!s->peers[i]->dead && s->peers[i]->state != P_ACTIVE && s->peers[i]->deadline_us < at)
      at = s->peers[i]->deadline_us;
  return at;
}

static size_t live_peers(const struct jk_zsock *s) {
  size_t n = 0;
  for (size_t i = 0; i < s->npeers; i++)
    n += !s->peers[i]->dead;
  return n;
}

size_t jk_zsock_peers(const struct jk_zsock *s) {
  size_t n = 0;
  for (size_t i = 0; i < s->npeers; i++)
    n += !s->peers[i]->dead && s->peers[i]->state == P_ACTIVE;
  return n;
}

/* ---- messages ----------------------------------------------------------- */

bool jk_zsock_has_msg(const struct jk_zsock *s) { return s->q_count > 0; }

int jk_zsock_recv(struct jk_zsock *s, struct sl_msg *ret) {
  if (!s->q_count)
    return -EAGAIN;
  struct queued *e = &s->q[s->q_head];
  s->q_head = (s->q_head + 1) % s->q_cap;
  s->q_count--;
  *ret = e->msg;
  s->reply_to = e->serial;
  return e->status;
}

static bool subscribed(const struct peer *p, const uint8_t *data, size_t len) {
  for (size_t i = 0; i < p->ntopics; i++)
    if (p->topics[i].len <= len && memcmp(p->topics[i].data, data, p->topics[i].len) == 0)
      return true;
  return false;
}

/* PUB and REP: picks the peers that get the message whose first frame is
 * data (the subscribers to it; the sender of the last message received). */
static void choose_targets(struct jk_zsock *s, const uint8_t *data, size_t len) {
  for (size_t i = 0; i < s->npeers; i++) {
    struct peer *p = s->peers[i];
    bool open = !p->dead && p->state == P_ACTIVE && p->out_len - p->out_off < s->opts.max_out_bytes;
    p->target = open && (s->type == JK_ZSOCK_PUB ? subscribed(p, data, len) : p->serial == s->reply_to);
  }
}

/* A DEALER's message goes to its connection when the handshake is done, to
 * the outbox otherwise; -EAGAIN when the one it would go to is full (as a
 * libzmq DEALER at its high-water mark refuses instead of dropping). */
static int dealer_target(struct jk_zsock *s) {
  struct peer *live = NULL;
  for (size_t i = 0; i < s->npeers; i++) {
    s->peers[i]->target = false;
    if (!s->peers[i]->dead && s->peers[i]->state == P_ACTIVE)
      live = s->peers[i];
  }
  if (live) {
    if (live->out_len - live->out_off >= s->opts.max_out_bytes)
      return -EAGAIN;
    live->target = true;
    return 0;
  }
  if (s->outbox_len >= s->opts.max_out_bytes)
    return -EAGAIN;
  s->to_outbox = true;
  s->outbox_msg_start = s->outbox_len;
  return 0;
}

int jk_zsock_send(struct jk_zsock *s, const void *data, size_t len, bool more) {
  if (!s->sending) {
    s->sending = true;
    if (s->type == JK_ZSOCK_ROUTER) {
      for (size_t i = 0; i < s->npeers; i++)
        s->peers[i]->target = false;
      struct peer *p = find_id(s, data, len);
      if (p && p->out_len - p->out_off < s->opts.max_out_bytes)
        p->target = true;
      if (!more) {
        s->sending = false;
        if (p)
          p->target = false;
      }
      return 0; /* the routing id itself is not sent */
    }
    if (s->type == JK_ZSOCK_DEALER) {
      int r = dealer_target(s);
      if (r < 0) {
        s->sending = false;
        return r;
      }
    } else {
      choose_targets(s, data, len);
    }
  }
  uint8_t header[JK_ZMTP_FRAME_HEADER_MAX];
  size_t h = jk_zmtp_frame_header(header, len, more, false);
  int r = 0;
  if (s->to_outbox && (buf_append(&s->outbox, &s->outbox_len, &s->outbox_cap, header, h) < 0 ||
                       (len && buf_append(&s->outbox, &s->outbox_len, &s->outbox_cap, data, len) < 0))) {
    s->outbox_len = s->outbox_msg_start; /* never half a message */
    s->to_outbox = false;
    r = -ENOMEM;
  }
  for (size_t i = 0; i < s->npeers; i++) {
    struct peer *p = s->peers[i];
    if (!p->target || p->dead)
      continue;
    if (out_append(p, header, h) < 0 || (len && out_append(p, data, len) < 0)) {
      drop_peer(p, "out of memory"); /* half a message went out: the stream is broken */
      r = -ENOMEM;
    }
  }
  if (!more) {
    s->sending = false;
    s->to_outbox = false;
    for (size_t i = 0; i < s->npeers; i++)
      s->peers[i]->target = false;
  }
  return r;
}

void jk_zsock_flush(struct jk_zsock *s) {
  for (size_t i = 0; i < s->npeers; i++)
    if (s->peers[i]->out_off < s->peers[i]->out_len)
      peer_write(s->peers[i]);
}

int jk_zsock_flush_wait(struct jk_zsock *s, int64_t deadline_us) {
  for (;;) {
    jk_zsock_flush(s);
    struct pollfd fds[64];
    nfds_t n = 0;
    for (size_t i = 0; i < s->npeers && n < 64; i++) {
      struct peer *p = s->peers[i];
      if (!p->dead && p->out_off < p->out_len)
        fds[n++] = (struct pollfd){p->fd, POLLOUT, 0};
    }
    if (n == 0)
      return 0;
    int64_t left = deadline_us - sl_time_mono_us();
    if (left <= 0)
      return -ETIMEDOUT;
    if (poll(fds, n, (int)((left + 999) / 1000)) < 0 && errno != EINTR)
      return -errno;
  }
}
