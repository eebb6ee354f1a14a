/* Endpoints of zsock.c: "tcp://HOST:PORT" and "ipc://PATH" turned into
 * socket addresses, and the listening or connecting descriptors for them. */
#ifndef JK_ZSOCK_ENDPOINT_H
#define JK_ZSOCK_ENDPOINT_H

#include <stdbool.h>
#include <sys/socket.h>

struct jk_zsock_endpoint {
  struct sockaddr_storage sa;
  socklen_t len;
};

/* Parses endpoint. HOST is an address (IPv6 in brackets or bare), a name
 * (resolved now, IPv4 preferred as libzmq does) or, when passive (binding),
 * "*". 0; -EINVAL for a malformed endpoint, -EPROTONOSUPPORT for another
 * transport, -EADDRNOTAVAIL for a name that does not resolve. */
int jk_zsock_endpoint_parse(const char *endpoint, bool passive, struct jk_zsock_endpoint *ret);
/* A non-blocking listening descriptor bound to ep (an ipc socket file left
 * by an earlier process is replaced; anything else there is not). */
int jk_zsock_endpoint_listen(const struct jk_zsock_endpoint *ep, int *ret_fd);
/* Starts a non-blocking connection to ep: 0 and *ret_fd when it is under
 * way or made (*ret_done says which); negative errno when it failed at once. */
int jk_zsock_endpoint_connect(const struct jk_zsock_endpoint *ep, int *ret_fd, bool *ret_done);

#endif
