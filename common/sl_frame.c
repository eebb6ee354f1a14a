/* Owned multipart messages. The ZeroMQ receive and send that fill and drain
 * them live in sl_frame_zmq.c, so a program that uses messages without
 * libzmq sockets does not link libzmq. */
#include "sl_frame.h"
#include "sl_err.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

void sl_msg_init(struct sl_msg *m, struct sl_limits limits) {
  memset(m, 0, sizeof *m);
  m->limits = limits;
  m->src_fd = -1;
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
