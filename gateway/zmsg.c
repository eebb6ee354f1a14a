/* JSON messages on ROUTER sockets (zmsg.h). */
#include "zmsg.h"

#include "sl_err.h"
#include "sl_frame.h"
#include "sl_json.h"

#include <errno.h>
#include <stdlib.h>
#include <zmq.h>

int gw_zmsg_send(void *sock, const uint8_t *rid, size_t rid_len, const json_t *msg) {
  size_t len;
  char *text = sl_json_dump(msg, &len);
  if (!text)
    return -ENOMEM;
  int r = 0;
  if (zmq_send(sock, rid, rid_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
      zmq_send(sock, text, len, ZMQ_DONTWAIT) < 0)
    r = sl_err_from_zmq(zmq_errno());
  free(text);
  return r;
}
