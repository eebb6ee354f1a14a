/* ZMTP 3.0 wire format (https://rfc.zeromq.org/spec/23/) for the NULL
 * security mechanism: the greeting, the READY command, frame headers, and an
 * incremental decoder that turns a byte stream into messages and commands.
 * No sockets here, so the unit tests and the fuzz target drive it directly. */
#ifndef JK_ZMTP_CODEC_H
#define JK_ZMTP_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sl_frame.h"

#define JK_ZMTP_GREETING_BYTES 64
#define JK_ZMTP_FRAME_HEADER_MAX 9
#define JK_ZMTP_IDENTITY_MAX 255
#define JK_ZMTP_COMMAND_MAX 4096 /* commands (READY, PING, SUBSCRIBE) this side accepts */

/* Writes this side's greeting: version 3.0, mechanism NULL, not as-server. */
void jk_zmtp_greeting(uint8_t out[JK_ZMTP_GREETING_BYTES]);
/* Checks a peer's greeting. 0 when it is ZMTP 3.x with the NULL mechanism;
 * -EPROTO with a reason in why otherwise (an older ZMTP, another mechanism,
 * not ZMTP at all). */
int jk_zmtp_greeting_check(const uint8_t in[JK_ZMTP_GREETING_BYTES], char *why, size_t why_size);

/* Writes a frame header for a body of len bytes into out; returns its size
 * (2 or 9). */
size_t jk_zmtp_frame_header(uint8_t out[JK_ZMTP_FRAME_HEADER_MAX], uint64_t len, bool more, bool command);

/* Builds a READY command frame (header included) announcing socket_type and,
 * when identity is not NULL, an Identity property (which may be empty).
 * Returns its size, or 0 if it does not fit in out_size. */
size_t jk_zmtp_ready(uint8_t *out, size_t out_size, const char *socket_type, const uint8_t *identity,
                     size_t identity_len);

/* What a READY command carried. */
struct jk_zmtp_ready_info {
  char socket_type[16];
  uint8_t identity[JK_ZMTP_IDENTITY_MAX];
  size_t identity_len;
};

/* Parses the body of a command frame as READY. 0 and *ret filled; -EPROTO
 * when it is not a well-formed READY (an ERROR command's reason goes to why). */
int jk_zmtp_ready_parse(const uint8_t *body, size_t len, struct jk_zmtp_ready_info *ret, char *why, size_t why_size);

/* Splits a command body into its name and data. -EPROTO when malformed. */
int jk_zmtp_command_name(const uint8_t *body, size_t len, char ret_name[256], const uint8_t **ret_data,
                         size_t *ret_data_len);

enum jk_zmtp_event {
  JK_ZMTP_NEED_MORE, /* every byte given was taken; no event yet */
  JK_ZMTP_MESSAGE,   /* a whole message is ready: jk_zmtp_decoder_take() */
  JK_ZMTP_COMMAND,   /* a command is ready: d->command, d->command_len */
};

/* The decoder keeps frames within limits in the message it builds; a frame
 * past a limit is read and thrown away, and counted in the message's
 * dropped_frames (and oversized_frames when the frame itself is too big), as
 * sl_zmq_recv() does, so memory never exceeds the limits whatever a peer
 * announces. */
struct jk_zmtp_decoder {
  int state;
  int error; /* once negative, every later call returns it */
  uint8_t header[JK_ZMTP_FRAME_HEADER_MAX];
  size_t header_have;
  uint64_t body_len, body_have;
  bool more, command, keep;
  uint8_t *body;     /* the frame being read, when kept */
  struct sl_msg msg; /* the message being built */
  bool in_message;
  uint8_t command_buf[JK_ZMTP_COMMAND_MAX];
  size_t command_len;
};

void jk_zmtp_decoder_init(struct jk_zmtp_decoder *d, struct sl_limits limits);
void jk_zmtp_decoder_done(struct jk_zmtp_decoder *d);
/* Takes bytes from buf until an event or the end of buf; *ret_used says how
 * many. Returns the event, or -EPROTO (a malformed frame: the stream cannot
 * be trusted any further) or -ENOMEM; after an error the decoder takes
 * nothing more and returns the same error. */
int jk_zmtp_decode(struct jk_zmtp_decoder *d, const uint8_t *buf, size_t len, size_t *ret_used);
/* Moves the finished message into *ret (which it overwrites) and returns 0,
 * or SL_ELIMIT when frames were dropped (the kept ones are still there). */
int jk_zmtp_decoder_take(struct jk_zmtp_decoder *d, struct sl_msg *ret);
#endif
