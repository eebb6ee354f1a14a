/* Owned multipart messages and the ZeroMQ receive/send that fill and drain them. */
#include "sl_frame.h"
#include "sl_err.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

void sl_msg_init(struct sl_msg *m, struct sl_limits limits) {
  memset(m, 0, sizeof *m);
  m->limits = limits;
}

void sl_msg_done(struct sl_msg *m) {
  for (size_t i = 0; i < m->n; i++)
    free(m->frames[i].data);
  free(m->frames);
  struct sl_limits l = m->limits;
  memset(m, 0, sizeof *m);
  m->limits = l;
}

int sl_msg_add_owned(struct sl_msg *m, uint8_t *data, size_t len) {
  if (m->n >= m->limits.max_frames || len > m->limits.max_frame_bytes ||
      m->total_bytes + len > m->limits.max_total_bytes) {
    free(data);
    return SL_ELIMIT;
  }
  if (m->n == m->cap) {
    size_t cap = m->cap ? m->cap * 2 : 8;
    struct sl_frame *f = realloc(m->frames, cap * sizeof *f);
    if (!f) {
      free(data);
      return -ENOMEM;
    }
    m->frames = f;
    m->cap = cap;
  }
  data[len] = '\0';
  m->frames[m->n++] = (struct sl_frame){data, len};
  m->total_bytes += len;
  return 0;
}

int sl_msg_add(struct sl_msg *m, const void *data, size_t len) {
  if (len > m->limits.max_frame_bytes)
    return SL_ELIMIT;
  uint8_t *copy = malloc(len + 1);
  if (!copy)
    return -ENOMEM;
  if (len)
    memcpy(copy, data, len);
  return sl_msg_add_owned(m, copy, len);
}

int sl_msg_add_str(struct sl_msg *m, const char *s) { return sl_msg_add(m, s, strlen(s)); }

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
