/* Rendezvous for data-parallel ranks (see tc_rdv.h for the protocol).
 *
 * Every blocking step waits with poll() against one deadline computed at the
 * start, so a rank that never shows up costs at most timeout_ms and an error
 * naming it; nothing here retries forever. Messages have fixed sizes. */
#include "tc_rdv.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "sl_err.h"

#define HELLO_MAGIC "SLRDV001"
#define REPLY_OK "SLRDV-OK"
#define REPLY_NO "SLRDV-NO"
#define XHELLO_MAGIC "SLRDV002"
enum { HELLO_BYTES = 16, REPLY_BYTES = 8 + TC_RDV_ID_BYTES, MAX_WORLD = 65536, XHELLO_BYTES = 24 };

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int left_ms(int64_t deadline) {
  int64_t d = deadline - now_ms();
  return d < 0 ? 0 : d > 1000000000 ? 1000000000 : (int)d;
}

/* The run's stop flag (a SIGTERM): read between waits of at most
 * STOP_CHECK_MS, so a stop during the rendezvous is not held to its deadline. */
#define STOP_CHECK_MS 100
static volatile sig_atomic_t *stop_flag;

void tc_rdv_set_stop(volatile sig_atomic_t *flag) { stop_flag = flag; }

static int stopped(void) { return stop_flag && *stop_flag; }

/* poll() of one fd until the deadline: > 0 ready, 0 the deadline passed,
 * -ECANCELED the run is stopping, else -errno. */
static int wait_fd(struct pollfd *p, int64_t deadline) {
  for (;;) {
    if (stopped()) return -ECANCELED;
    int left = left_ms(deadline), slice = left < STOP_CHECK_MS ? left : STOP_CHECK_MS;
    int k = poll(p, p ? 1 : 0, slice);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return -errno;
    if (k > 0) return k;
    if (left <= STOP_CHECK_MS) return 0;
  }
}

/* A pause of up to 100 ms before trying again: 0, or -ECANCELED. */
static int nap(int64_t deadline) {
  int64_t until = now_ms() + 100;
  int r = wait_fd(NULL, until < deadline ? until : deadline);
  return r == -ECANCELED ? r : 0;
}

void tc_rdv_hex(const uint8_t id[TC_RDV_ID_BYTES], char *out) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < TC_RDV_ID_BYTES; i++) {
    out[2 * i] = digits[id[i] >> 4];
    out[2 * i + 1] = digits[id[i] & 15];
  }
  out[TC_RDV_HEX_CHARS] = 0;
}

static int nibble(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int tc_rdv_unhex(const char *hex, uint8_t id[TC_RDV_ID_BYTES]) {
  if (!hex || strlen(hex) != TC_RDV_HEX_CHARS) return -EINVAL;
  uint8_t tmp[TC_RDV_ID_BYTES];
  for (int i = 0; i < TC_RDV_ID_BYTES; i++) {
    int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return -EINVAL;
    tmp[i] = (uint8_t)(hi << 4 | lo);
  }
  memcpy(id, tmp, sizeof tmp);
  return 0;
}

int tc_rdv_parse(const char *spec, char *host, size_t hs, char *port, size_t ps) {
  if (!spec || strncmp(spec, "tcp://", 6) != 0) return -EINVAL;
  const char *h = spec + 6, *colon, *hend;
  if (*h == '[') {
    hend = strchr(h, ']');
    if (!hend || hend[1] != ':') return -EINVAL;
    colon = hend + 1;
    h++;
  } else {
    colon = strrchr(h, ':');
    if (!colon) return -EINVAL;
    hend = colon;
  }
  size_t hl = (size_t)(hend - h), pl = strlen(colon + 1);
  if (hl == 0 || hl >= hs || pl == 0 || pl >= ps || pl > 5) return -EINVAL;
  for (const char *p = colon + 1; *p; p++)
    if (*p < '0' || *p > '9') return -EINVAL;
  if (atoi(colon + 1) > 65535) return -EINVAL;
  memcpy(host, h, hl);
  host[hl] = 0;
  memcpy(port, colon + 1, pl + 1);
  return 0;
}

static int resolve(const char *spec, int passive, struct addrinfo **ret, char *err, size_t es) {
  char host[256], port[8];
  if (tc_rdv_parse(spec, host, sizeof host, port, sizeof port) < 0) {
    snprintf(err, es, "rendezvous '%s': expected tcp://HOST:PORT", spec ? spec : "");
    return -EINVAL;
  }
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = passive ? AI_PASSIVE : 0};
  int g = getaddrinfo(host, port, &hints, ret);
  if (g != 0) {
    snprintf(err, es, "rendezvous '%s': %s", spec, gai_strerror(g));
    return -EHOSTUNREACH;
  }
  return 0;
}

int tc_rdv_listen(const char *spec, int *ret_fd, char *err, size_t es) {
  struct addrinfo *ai = NULL;
  int r = resolve(spec, 1, &ai, err, es);
  if (r < 0) return r;
  int fd = -1;
  r = -EADDRNOTAVAIL;
  for (struct addrinfo *a = ai; a; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 64) == 0) {
      r = 0;
      break;
    }
    r = -errno;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(ai);
  if (r < 0) {
    snprintf(err, es, "rendezvous %s: cannot listen: %s", spec, strerror(-r));
    return r;
  }
  *ret_fd = fd;
  return 0;
}

int tc_rdv_port(int fd) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0) return -errno;
  if (ss.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
  return -EAFNOSUPPORT;
}

/* Reads or writes exactly n bytes before the deadline. */
static int xfer(int fd, void *buf, size_t n, int writing, int64_t deadline) {
  size_t done = 0;
  while (done < n) {
    struct pollfd p = {.fd = fd, .events = writing ? POLLOUT : POLLIN};
    int k = wait_fd(&p, deadline);
    if (k < 0) return k;
    if (k == 0) return -ETIMEDOUT;
    ssize_t m = writing ? send(fd, (char *)buf + done, n - done, MSG_NOSIGNAL)
                        : read(fd, (char *)buf + done, n - done);
    if (m < 0 && writing && errno == ENOTSOCK) m = write(fd, (char *)buf + done, n - done);
    if (m < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (m < 0) return -errno;
    if (m == 0) return -EPIPE;
    done += (size_t)m;
  }
  return 0;
}

static uint32_t get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

int tc_rdv_serve(int lfd, int world, const uint8_t id[TC_RDV_ID_BYTES], int timeout_ms, char *err,
                 size_t es) {
  if (world < 1 || world > MAX_WORLD) return -EINVAL;
  uint8_t *served = calloc((size_t)world, 1);
  if (!served) return -ENOMEM;
  int64_t deadline = now_ms() + timeout_ms;
  int remaining = world - 1, r = 0;
  while (remaining > 0) {
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    int k = wait_fd(&p, deadline);
    if (k == -ECANCELED) {
      snprintf(err, es, "rendezvous: stopped");
      r = k;
      break;
    }
    if (k <= 0) {
      size_t off = (size_t)snprintf(err, es, "rendezvous: ranks never asked for the id:");
      for (int i = 1; i < world && off < es; i++)
        if (!served[i]) off += (size_t)snprintf(err + off, es - off, " %d", i);
      r = k < 0 ? k : -ETIMEDOUT;
      break;
    }
    int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (cfd < 0) continue;
    /* each peer gets a short slice so a silent one cannot hold up the rest */
    int64_t peer_deadline = now_ms() + 2000;
    if (peer_deadline > deadline) peer_deadline = deadline;
    uint8_t hello[HELLO_BYTES], reply[REPLY_BYTES] = {0};
    if (xfer(cfd, hello, sizeof hello, 0, peer_deadline) == 0) {
      uint32_t rank = get_u32(hello + 8), w = get_u32(hello + 12);
      int ok = memcmp(hello, HELLO_MAGIC, 8) == 0 && w == (uint32_t)world && rank >= 1 &&
               rank < (uint32_t)world && !served[rank];
      memcpy(reply, ok ? REPLY_OK : REPLY_NO, 8);
      if (ok) memcpy(reply + 8, id, TC_RDV_ID_BYTES);
      if (xfer(cfd, reply, sizeof reply, 1, peer_deadline) == 0 && ok) {
        served[rank] = 1;
        remaining--;
      }
    }
    close(cfd);
  }
  free(served);
  return r;
}

/* Connects to spec before the deadline, trying again every 100 ms while
 * nobody listens there. Returns the connected fd, -ETIMEDOUT (*last: the last
 * connect error) or -EINVAL for a bad spec. */
static int dial(const char *spec, int64_t deadline, int *last, char *err, size_t es) {
  for (;;) {
    struct addrinfo *ai = NULL;
    int r = resolve(spec, 0, &ai, err, es);
    if (r == -EINVAL) return r;
    for (struct addrinfo *a = ai; a && r == 0; a = a->ai_next) {
      int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
      if (fd < 0) continue;
      int c = connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : -errno;
      if (c == -EINPROGRESS) { /* an unreachable host costs the deadline, not the SYN retries */
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int k = wait_fd(&p, deadline);
        int soerr = 0;
        socklen_t len = sizeof soerr;
        c = k == 0 ? -ETIMEDOUT
                   : k < 0 ? k
                   : getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0 ? -errno : -soerr;
        if (c == -ECANCELED) {
          close(fd);
          freeaddrinfo(ai);
          return c;
        }
      }
      if (c == 0 && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) == 0) {
        freeaddrinfo(ai);
        return fd;
      }
      *last = c;
      close(fd);
    }
    if (ai) freeaddrinfo(ai);
    if (left_ms(deadline) == 0) return -ETIMEDOUT;
    /* rank 0 is not listening yet: wait a little (bounded by the deadline) */
    if (nap(deadline) < 0) return -ECANCELED;
  }
}

int tc_rdv_fetch(const char *spec, int rank, int world, uint8_t id[TC_RDV_ID_BYTES],
                 int timeout_ms, char *err, size_t es) {
  if (world < 2 || rank < 1 || rank >= world || world > MAX_WORLD) return -EINVAL;
  int64_t deadline = now_ms() + timeout_ms;
  int last = -ETIMEDOUT, fd;
  while ((fd = dial(spec, deadline, &last, err, es)) >= 0) {
    uint8_t hello[HELLO_BYTES], reply[REPLY_BYTES];
    memcpy(hello, HELLO_MAGIC, 8);
    put_u32(hello + 8, (uint32_t)rank);
    put_u32(hello + 12, (uint32_t)world);
    int x = xfer(fd, hello, sizeof hello, 1, deadline);
    if (x == 0) x = xfer(fd, reply, sizeof reply, 0, deadline);
    close(fd);
    if (x == -ECANCELED || (x < 0 && nap(deadline) < 0)) {
      fd = -ECANCELED;
      break;
    }
    if (x < 0) {
      last = x;
      continue;
    }
    if (memcmp(reply, REPLY_OK, 8) != 0) {
      snprintf(err, es, "rendezvous %s refused rank %d of world size %d (another world size, "
               "or the rank was already served)", spec, rank, world);
      return SL_EMISMATCH;
    }
    memcpy(id, reply + 8, TC_RDV_ID_BYTES);
    return 0;
  }
  if (fd == -EINVAL) return fd;
  if (fd == -ECANCELED) {
    snprintf(err, es, "rendezvous %s: stopped", spec);
    return fd;
  }
  snprintf(err, es, "rendezvous %s: no answer from rank 0 within %d ms (%s)", spec, timeout_ms,
           strerror(-last));
  return -ETIMEDOUT;
}

/* ---- the all-to-all exchange of small slots (gloo addresses) ---- */

static int exchange_bounds(int world, size_t slot_bytes) {
  if (world < 2 || world > MAX_WORLD || slot_bytes == 0 || slot_bytes > TC_RDV_SLOT_MAX)
    return -EINVAL;
  if ((double)world * world * slot_bytes > TC_RDV_EXCHANGE_MAX_BYTES) return -E2BIG;
  return 0;
}

static void exchange_hello(uint8_t *h, int rank, int world, size_t slot_bytes) {
  memset(h, 0, XHELLO_BYTES);
  memcpy(h, XHELLO_MAGIC, 8);
  put_u32(h + 8, (uint32_t)rank);
  put_u32(h + 12, (uint32_t)world);
  put_u32(h + 16, (uint32_t)slot_bytes);
}

int tc_rdv_exchange_serve(int lfd, int world, size_t slot_bytes, const uint8_t *mine,
                          uint8_t *ret_slots, int *keep_fds, int timeout_ms, char *err,
                          size_t es) {
  int r = exchange_bounds(world, slot_bytes);
  if (r < 0) {
    snprintf(err, es, "rendezvous: %d ranks of %zu-byte slots is too many", world, slot_bytes);
    return r;
  }
  size_t row = (size_t)world * slot_bytes; /* one rank's slots, slot k for rank k */
  uint8_t *table = malloc(row * (size_t)world), *col = malloc(8 + row);
  int *fds = malloc(sizeof(int) * (size_t)world);
  if (fds) /* none open: the way out closes none */
    for (int i = 0; i < world; i++) fds[i] = -1;
  if (!table || !col || !fds) {
    r = -ENOMEM;
    goto out;
  }
  memcpy(table, mine, row);
  int64_t deadline = now_ms() + timeout_ms;
  int remaining = world - 1;
  while (remaining > 0) {
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    int k = wait_fd(&p, deadline);
    if (k == -ECANCELED) {
      snprintf(err, es, "rendezvous: stopped");
      r = k;
      goto out;
    }
    if (k <= 0) {
      size_t off = (size_t)snprintf(err, es, "rendezvous: no word within %d ms from rank(s)",
                                    timeout_ms);
      for (int i = 1; i < world && off < es; i++)
        if (fds[i] < 0) off += (size_t)snprintf(err + off, es - off, " %d", i);
      r = k < 0 ? k : -ETIMEDOUT;
      goto out;
    }
    int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (cfd < 0) continue;
    /* each peer gets a short slice so a silent one cannot hold up the rest */
    int64_t peer_deadline = now_ms() + 2000;
    if (peer_deadline > deadline) peer_deadline = deadline;
    uint8_t hello[XHELLO_BYTES];
    if (xfer(cfd, hello, sizeof hello, 0, peer_deadline) == 0) {
      uint32_t rank = get_u32(hello + 8);
      int ok = memcmp(hello, XHELLO_MAGIC, 8) == 0 && get_u32(hello + 12) == (uint32_t)world &&
               get_u32(hello + 16) == (uint32_t)slot_bytes && rank >= 1 &&
               rank < (uint32_t)world && fds[rank] < 0;
      if (ok && xfer(cfd, table + rank * row, row, 0, peer_deadline) == 0) {
        fds[rank] = cfd; /* answered once everyone is here */
        remaining--;
        continue;
      }
      if (!ok) xfer(cfd, REPLY_NO, 8, 1, peer_deadline);
    }
    close(cfd);
  }
  /* rank k gets slot k of every rank's row */
  memcpy(col, REPLY_OK, 8);
  for (int k = 0; k < world; k++) {
    uint8_t *dst = k == 0 ? ret_slots : col + 8;
    for (int i = 0; i < world; i++)
      memcpy(dst + (size_t)i * slot_bytes, table + (size_t)i * row + (size_t)k * slot_bytes,
             slot_bytes);
    if (k == 0) continue;
    int x = xfer(fds[k], col, 8 + row, 1, now_ms() + 5000);
    if (x < 0 && r == 0) {
      snprintf(err, es, "rendezvous: cannot answer rank %d: %s", k, strerror(-x));
      r = x;
    }
  }
out:
  if (fds && r == 0 && keep_fds) {
    memcpy(keep_fds, fds, sizeof(int) * (size_t)world);
  } else if (fds) {
    for (int i = 0; i < world; i++)
      if (fds[i] >= 0) close(fds[i]);
  }
  free(fds);
  free(col);
  free(table);
  return r;
}

int tc_rdv_exchange_fetch(const char *spec, int rank, int world, size_t slot_bytes,
                          const uint8_t *mine, uint8_t *ret_slots, int *keep_fd, int timeout_ms,
                          char *err, size_t es) {
  if (keep_fd) *keep_fd = -1;
  if (rank < 1 || rank >= world || exchange_bounds(world, slot_bytes) < 0) return -EINVAL;
  size_t row = (size_t)world * slot_bytes;
  int64_t deadline = now_ms() + timeout_ms;
  int last = -ETIMEDOUT, fd;
  while ((fd = dial(spec, deadline, &last, err, es)) >= 0) {
    uint8_t hello[XHELLO_BYTES], status[8];
    exchange_hello(hello, rank, world, slot_bytes);
    int x = xfer(fd, hello, sizeof hello, 1, deadline);
    if (x == 0) x = xfer(fd, (void *)mine, row, 1, deadline);
    if (x == 0) x = xfer(fd, status, sizeof status, 0, deadline); /* rank 0 waits for all */
    if (x == 0 && memcmp(status, REPLY_OK, 8) == 0) x = xfer(fd, ret_slots, row, 0, deadline);
    if (x == 0 && memcmp(status, REPLY_OK, 8) == 0 && keep_fd) {
      *keep_fd = fd;
      return 0;
    }
    close(fd);
    if (x == 0 && memcmp(status, REPLY_OK, 8) != 0) {
      snprintf(err, es, "rendezvous %s refused rank %d of world size %d (another world size, "
               "or a rank %d is already there)", spec, rank, world, rank);
      return SL_EMISMATCH;
    }
    if (x == 0) return 0;
    if (x == -ECANCELED || (x != -ETIMEDOUT && nap(deadline) < 0)) {
      fd = -ECANCELED;
      break;
    }
    last = x;
    if (x == -ETIMEDOUT) break;
  }
  if (fd == -EINVAL) return fd;
  if (fd == -ECANCELED) {
    snprintf(err, es, "rendezvous %s: stopped", spec);
    return fd;
  }
  snprintf(err, es, "rendezvous %s: nothing heard from rank 0 within %d ms (%s)", spec,
           timeout_ms, strerror(-last));
  return -ETIMEDOUT;
}

int tc_rdv_local_host(const char *spec, char *host, size_t size, char *err, size_t es) {
  struct addrinfo *ai = NULL;
  int r = resolve(spec, 0, &ai, err, es);
  if (r < 0) return r;
  r = -ENETUNREACH;
  for (struct addrinfo *a = ai; a && r < 0; a = a->ai_next) {
    /* connecting a datagram socket sends nothing; it only picks the route */
    int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (connect(fd, a->ai_addr, a->ai_addrlen) < 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
      r = -errno;
    else if (getnameinfo((struct sockaddr *)&ss, len, host, (socklen_t)size, NULL, 0,
                         NI_NUMERICHOST) != 0)
      r = -EINVAL;
    else
      r = 0;
    close(fd);
  }
  freeaddrinfo(ai);
  if (r < 0) snprintf(err, es, "rendezvous %s: no route from this machine (%s)", spec, strerror(-r));
  return r;
}

int tc_rdv_peer_gone(int fd) {
  if (fd < 0) return 0;
  struct pollfd p = {.fd = fd, .events = POLLIN};
  if (poll(&p, 1, 0) <= 0) return 0;
  char c;
  ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

int tc_rdv_fork(int n, int *ret_rank, int *fds, pid_t *pids) {
  if (n < 1) return -EINVAL;
  pid_t parent = getpid();
  for (int r = 1; r < n; r++) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) return -errno;
    pid_t pid = fork();
    if (pid < 0) {
      int e = -errno;
      close(p[0]);
      close(p[1]);
      return e;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1); /* the parent died before prctl */
      for (int k = 1; k < r; k++) close(fds[k]);
      close(p[1]);
      fds[0] = p[0];
      *ret_rank = r;
      return 0;
    }
    close(p[0]);
    fds[r] = p[1];
    pids[r] = pid;
  }
  *ret_rank = 0;
  return 0;
}

int tc_rdv_pipe_send(int fd, const uint8_t id[TC_RDV_ID_BYTES]) {
  return xfer(fd, (void *)id, TC_RDV_ID_BYTES, 1, now_ms() + 10000);
}

int tc_rdv_pipe_recv(int fd, uint8_t id[TC_RDV_ID_BYTES], int timeout_ms) {
  uint8_t tmp[TC_RDV_ID_BYTES];
  int r = xfer(fd, tmp, sizeof tmp, 0, now_ms() + timeout_ms);
  if (r == 0) memcpy(id, tmp, sizeof tmp);
  return r;
}
