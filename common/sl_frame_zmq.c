/* ZeroMQ receive and send of owned multipart messages (sl_frame.h), and
 * ZeroMQ's errors as project errors. */
#include "sl_frame.h"
#include "sl_err.h"

#include <errno.h>
#include <stdbool.h>
#include <zmq.h>

int sl_err_from_zmq(int zerr) {
  if (zerr == EAGAIN || zerr == EINTR || zerr == ETERM || zerr == ENOMEM)
    return -zerr;
  return zerr > 0 && zerr < 10000 ? -zerr : SL_EZMQ;
}

int sl_zmq_recv(void *socket, struct sl_msg *m, int flags) {
  bool more = true;
  bool first = true;
  while (more) {
    zmq_msg_t part;
    zmq_msg_init(&part);
    if (zmq_msg_recv(&part, socket, first ? flags : 0) < 0) {
      int e = zmq_errno();
      zmq_msg_close(&part);
      /* Mid-message errors cannot happen with ZeroMQ's atomic delivery,
       * but never hand back half a message. */
      sl_msg_done(m);
      return sl_err_from_zmq(e);
    }
    first = false;
    more = zmq_msg_more(&part);
    if (!more) /* the peer's frames carry its connection; a ROUTER's routing id does not */
      m->src_fd = zmq_msg_get(&part, ZMQ_SRCFD);
    size_t len = zmq_msg_size(&part);
    int r = sl_msg_add(m, zmq_msg_data(&part), len);
    if (r == SL_ELIMIT) {
      m->dropped_frames++;
      if (len > m->limits.max_frame_bytes)
        m->oversized_frames++;
    } else if (r < 0) {
      zmq_msg_close(&part);
      sl_msg_done(m);
      return r;
    }
    zmq_msg_close(&part);
  }
  return m->dropped_frames ? SL_ELIMIT : 0;
}

int sl_zmq_send(void *socket, const struct sl_msg *m, int flags) {
  for (size_t i = 0; i < m->n; i++) {
    int f = flags | (i + 1 < m->n ? ZMQ_SNDMORE : 0);
    if (zmq_send(socket, m->frames[i].data, m->frames[i].len, f) < 0)
      return sl_err_from_zmq(zmq_errno());
  }
  return 0;
}

void sl_zmq_ctx_term(void *ctx) {
  while (zmq_ctx_term(ctx) < 0 && zmq_errno() == EINTR) {
  }
}
