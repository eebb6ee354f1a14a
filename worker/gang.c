/* A rank of a nodes=N job: the assign's gang field and rank 0's rendezvous
 * (gang.h). */
#include "gang.h"

#include "sl_err.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define WORLD_MAX 65536

int wk_gang_parse(const json_t *field, struct wk_gang *g, char *err, size_t err_size) {
  memset(g, 0, sizeof *g);
  if (!field || json_is_null(field))
    return 0;
  json_t *rank = json_object_get(field, "rank"), *world = json_object_get(field, "world_size");
  json_t *rdv = json_object_get(field, "rendezvous");
  if (!json_is_object(field) || !json_is_integer(rank) || !json_is_integer(world) ||
      json_integer_value(world) < 2 || json_integer_value(world) > WORLD_MAX ||
      json_integer_value(rank) < 0 || json_integer_value(rank) >= json_integer_value(world)) {
    snprintf(err, err_size, "assign \"gang\" must hold a rank in [0, world_size) and a world_size"
             " from 2 to %d", WORLD_MAX);
    return SL_ECONFIG;
  }
  g->rank = (int)json_integer_value(rank);
  g->world_size = (int)json_integer_value(world);
  if (g->rank == 0)
    return 0;
  const char *s = json_string_value(rdv);
  if (!s || strncmp(s, "tcp://", 6) || strlen(s) >= sizeof g->rendezvous || strpbrk(s, " \t\r\n")) {
    snprintf(err, err_size, "assign \"gang\" of rank %d needs a rendezvous tcp://HOST:PORT", g->rank);
    return SL_ECONFIG;
  }
  snprintf(g->rendezvous, sizeof g->rendezvous, "%s", s);
  return 0;
}

/* "tcp://HOST:PORT" → HOST (brackets of an IPv6 address dropped). */
static int endpoint_host(const char *ep, char *host, size_t size) {
  if (strncmp(ep, "tcp://", 6))
    return -EINVAL;
  const char *h = ep + 6, *end;
  if (*h == '[') {
    end = strchr(++h, ']');
  } else {
    end = strrchr(h, ':');
  }
  if (!end || end == h || (size_t)(end - h) >= size)
    return -EINVAL;
  memcpy(host, h, (size_t)(end - h));
  host[end - h] = 0;
  return 0;
}

int wk_gang_host(const char *address, const char *gateway, char *host, size_t size) {
  if (address && *address) {
    if (strlen(address) >= size)
      return -ENAMETOOLONG;
    snprintf(host, size, "%s", address);
    return 0;
  }
  snprintf(host, size, "127.0.0.1");
  char gw[256];
  if (!gateway || endpoint_host(gateway, gw, sizeof gw) < 0 || !strcmp(gw, "*") ||
      !strcmp(gw, "0.0.0.0") || !strcmp(gw, "::"))
    return 0; /* ipc://, inproc://: the gateway and its workers share this machine */
  /* the source address of a route to the gateway; a UDP connect sends nothing */
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM}, *ai = NULL;
  if (getaddrinfo(gw, "9", &hints, &ai) != 0)
    return 0;
  int r = -EHOSTUNREACH;
  for (struct addrinfo *a = ai; a && r < 0; a = a->ai_next) {
    int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
      continue;
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(fd, (struct sockaddr *)&ss, &len) == 0 &&
        getnameinfo((struct sockaddr *)&ss, len, host, (socklen_t)size, NULL, 0, NI_NUMERICHOST) == 0)
      r = 0;
    close(fd);
  }
  freeaddrinfo(ai);
  if (r < 0)
    snprintf(host, size, "127.0.0.1");
  return 0;
}

int wk_gang_rendezvous(struct wk_gang *g, const char *host, char *err, size_t err_size) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_NUMERICHOST}, *ai = NULL;
  int gr = getaddrinfo(host, "0", &hints, &ai);
  if (gr != 0) {
    snprintf(err, err_size, "rendezvous address \"%s\": %s", host, gai_strerror(gr));
    return SL_ECONFIG;
  }
  int r = -EADDRNOTAVAIL, port = 0;
  for (struct addrinfo *a = ai; a && r < 0; a = a->ai_next) {
    int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      r = -errno;
      continue;
    }
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && getsockname(fd, (struct sockaddr *)&ss, &len) == 0) {
      port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                            : ((struct sockaddr_in *)&ss)->sin_port);
      r = 0;
    } else {
      r = -errno;
    }
    close(fd);
  }
  freeaddrinfo(ai);
  if (r < 0) {
    snprintf(err, err_size, "no free port on %s for the rendezvous: %s", host, strerror(-r));
    return r;
  }
  bool v6 = strchr(host, ':') != NULL;
  snprintf(g->rendezvous, sizeof g->rendezvous, v6 ? "tcp://[%s]:%d" : "tcp://%s:%d", host, port);
  return 0;
}
