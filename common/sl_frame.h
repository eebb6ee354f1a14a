/* Multipart messages: a list of owned byte frames with limits.
 *
 * This is the unit every ZeroMQ loop hands to the code above it, so wire
 * parsers can be tested and fuzzed without a socket. Limits are enforced on
 * append: a message over max_frames or a frame over max_frame_bytes is an
 * error (SL_ELIMIT), never a silent truncation. */
#ifndef SL_FRAME_H
#define SL_FRAME_H

#include <stddef.h>
#include <stdint.h>

struct sl_frame {
  uint8_t *data; /* owned; always NUL-terminated one past len */
  size_t len;
};

struct sl_limits {
  size_t max_frames;
  size_t max_frame_bytes;
  size_t max_total_bytes;
};

#define SL_LIMITS_DEFAULT ((struct sl_limits){64, 64u << 20, 128u << 20})

struct sl_msg {
  struct sl_frame *frames;
  size_t n;
  size_t cap;
  size_t total_bytes;
  struct sl_limits limits;
  size_t dropped_frames;   /* frames refused by a limit during sl_zmq_recv */
  size_t oversized_frames; /* of those, frames over max_frame_bytes */
  int src_fd;              /* the connection it came in on (sl_zmq_recv), -1 unknown */
};

void sl_msg_init(struct sl_msg *m, struct sl_limits limits);
void sl_msg_done(struct sl_msg *m);
/* Appends a copy of data. SL_ELIMIT past a limit, -ENOMEM. */
int sl_msg_add(struct sl_msg *m, const void *data, size_t len);
int sl_msg_add_str(struct sl_msg *m, const char *s);
/* Appends data, taking ownership of a malloc'd buffer that has room for a NUL
 * at data[len]. On error data is freed. */
int sl_msg_add_owned(struct sl_msg *m, uint8_t *data, size_t len);

/* Receives one multipart message from a ZeroMQ socket into m (which must be
 * initialised and empty). flags as for zmq_msg_recv (ZMQ_DONTWAIT). When a
 * limit is hit the whole message is still read off the socket (it stays in
 * sync), the frames that fit are kept in m, dropped_frames/oversized_frames
 * count the rest, and SL_ELIMIT is returned: the caller may use the kept
 * frames to answer with an error, and must sl_msg_done() m either way. */
int sl_zmq_recv(void *socket, struct sl_msg *m, int flags);
/* Sends every frame of m as one multipart message. */
int sl_zmq_send(void *socket, const struct sl_msg *m, int flags);
/* zmq_errno() as a negative project error. */
int sl_err_from_zmq(int zerr);
/* zmq_ctx_term, again when a signal interrupts it: the messages its sockets'
 * linger lets go out are sent, not dropped. */
void sl_zmq_ctx_term(void *ctx);

#endif
