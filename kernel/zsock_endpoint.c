/* Endpoints for zsock.c: parsing, resolving, listening and connecting.
 * Descriptors are always non-blocking and close-on-exec. */
#include "zsock_endpoint.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static int parse_tcp(const char *spec, bool passive, struct jk_zsock_endpoint *ret) {
  const char *colon = strrchr(spec, ':');
  if (!colon || colon == spec || !colon[1])
    return -EINVAL;
  char host[256], port[8];
  size_t hl = (size_t)(colon - spec);
  if (hl >= sizeof host || strlen(colon + 1) >= sizeof port)
    return -EINVAL;
  memcpy(host, spec, hl);
  host[hl] = '\0';
  strcpy(port, colon + 1);
  for (const char *p = port; *p; p++)
    if (*p < '0' || *p > '9')
      return -EINVAL;
  if (atoi(port) > 65535)
    return -EINVAL;
  char *h = host;
  if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
    h[hl - 1] = '\0';
    h++;
  }
  if (strcmp(h, "*") == 0) {
    if (!passive)
      return -EINVAL;
    h = "0.0.0.0";
  }
  struct addrinfo hints = {.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0), .ai_socktype = SOCK_STREAM};
  struct addrinfo *res = NULL;
  int g = getaddrinfo(h, port, &hints, &res);
  if (g != 0)
    return g == EAI_MEMORY ? -ENOMEM : -EADDRNOTAVAIL;
  /* Like libzmq, prefer IPv4 when a name has both. */
  struct addrinfo *pick = res;
  for (struct addrinfo *a = res; a; a = a->ai_next)
    if (a->ai_family == AF_INET) {
      pick = a;
      break;
    }
  int r = -EADDRNOTAVAIL;
  if (pick->ai_addrlen <= sizeof ret->sa) {
    memset(ret, 0, sizeof *ret);
    memcpy(&ret->sa, pick->ai_addr, pick->ai_addrlen);
    ret->len = pick->ai_addrlen;
    r = 0;
  }
  freeaddrinfo(res);
  return r;
}

int jk_zsock_endpoint_parse(const char *endpoint, bool passive, struct jk_zsock_endpoint *ret) {
  if (strncmp(endpoint, "tcp://", 6) == 0)
    return parse_tcp(endpoint + 6, passive, ret);
  if (strncmp(endpoint, "ipc://", 6) != 0)
    return -EPROTONOSUPPORT;
  const char *path = endpoint + 6;
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof sa.sun_path)
    return -EINVAL;
  memcpy(sa.sun_path, path, n + 1);
  memset(ret, 0, sizeof *ret);
  memcpy(&ret->sa, &sa, sizeof sa);
  ret->len = sizeof sa;
  return 0;
}

int jk_zsock_endpoint_listen(const struct jk_zsock_endpoint *ep, int *ret_fd) {
  if (ep->sa.ss_family == AF_UNIX) {
    /* A socket file left by an earlier kernel is replaced, as libzmq does;
     * anything else at that path is not touched. */
    const char *path = ((const struct sockaddr_un *)&ep->sa)->sun_path;
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
      unlink(path);
  }
  int fd = socket(ep->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -errno;
  if (ep->sa.ss_family != AF_UNIX) {
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  }
  if (bind(fd, (const struct sockaddr *)&ep->sa, ep->len) < 0 || listen(fd, 128) < 0) {
    int r = -errno;
    close(fd);
    return r;
  }
  *ret_fd = fd;
  return 0;
}

int jk_zsock_endpoint_connect(const struct jk_zsock_endpoint *ep, int *ret_fd, bool *ret_done) {
  int fd = socket(ep->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -errno;
  if (ep->sa.ss_family != AF_UNIX) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  int r = connect(fd, (const struct sockaddr *)&ep->sa, ep->len);
  /* Interrupted, a non-blocking connect goes on by itself, as when in progress. */
  if (r < 0 && errno != EINPROGRESS && errno != EINTR) {
    r = -errno; /* a unix socket's full backlog (EAGAIN) counts as a failure: try again later */
    close(fd);
    return r;
  }
  *ret_fd = fd;
  *ret_done = r == 0;
  return 0;
}
