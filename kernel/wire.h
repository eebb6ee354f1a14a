/* The Jupyter wire format (messaging protocol 5.3).
 *
 * A message on the wire is: routing identities, "<IDS|MSG>", the HMAC
 * signature, then header, parent_header, metadata and content as JSON, then
 * optional binary buffers. This module turns frames into a struct jk_msg and
 * back, signs, verifies and rejects replays. It never touches a socket: the
 * channel loop hands it frames (which is also how the fuzzer drives it). */
#ifndef JK_WIRE_H
#define JK_WIRE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sl_frame.h"

struct jk_msg {
  struct sl_msg idents;   /* routing frames (or the iopub topic when sending) */
  json_t *header;         /* owned; NULL in a message built to be sent, see header_text */
  json_t *parent_header;  /* owned */
  json_t *metadata;       /* owned */
  json_t *content;        /* owned */
  struct sl_msg buffers;  /* binary buffers */
  /* Serialised forms that jk_wire_encode() sends instead of encoding header
   * or parent_header (owned, NUL-terminated, or NULL): a decoded message
   * keeps its header exactly as it came, and a message built by
   * jk_msg_reply() or jk_msg_child() holds only its header's text (nothing
   * reads a header that is being sent) and a copy of its parent's, so a
   * request's header goes back byte for byte as the parent_header of
   * everything it causes. Code that changes parent_header of such a message
   * must also free and clear parent_text. */
  char *header_text, *parent_text;
  size_t header_len, parent_len;
};

struct jk_msg *jk_msg_new(void);
struct jk_msg *jk_msg_free(struct jk_msg *msg);
/* The msg_type of a decoded message; "" for one built to be sent. */
const char *jk_msg_type(const struct jk_msg *msg);

/* A message replying to (or caused by) parent: copies its idents, shares
 * parent's header as parent_header and writes a fresh header (header_text)
 * with the given type. parent may be NULL. content is taken (may be NULL for
 * {}). NULL on OOM or when session_id or msg_type is not UTF-8. */
struct jk_msg *jk_msg_reply(const struct jk_msg *parent, const char *msg_type, json_t *content,
                            const char *session_id);
/* As jk_msg_reply() without the routing identities, and with username
 * "kernel": a message caused by parent (may be NULL) on iopub, where the
 * caller adds the topic. */
struct jk_msg *jk_msg_child(const struct jk_msg *parent, const char *msg_type, json_t *content,
                            const char *session_id);

struct jk_auth;

/* key is borrowed (only its hashed HMAC pads are kept); an empty key
 * disables signing (accepts unsigned messages, as Jupyter does).
 * replay_window bounds how many recent signatures are remembered. */
struct jk_auth *jk_auth_new(const uint8_t *key, size_t key_len, size_t replay_window);
struct jk_auth *jk_auth_free(struct jk_auth *auth);

struct jk_wire_limits {
  int max_json_depth;
};

/* Decodes frames into an owned message in *ret_msg. frames may be a view of
 * a socket's buffers: they are only read within their lengths (not
 * NUL-terminated), and may break frames->limits (max_frame_bytes,
 * max_total_bytes), which decode then enforces; the message's idents and
 * buffers take those limits too.
 *  SL_EWIRE     no delimiter or fewer than four parts after it
 *  SL_EHMAC     signature missing or wrong
 *  SL_EREPLAY   the signature of an already accepted message
 *  SL_EJSON / SL_EJSONDEPTH  a signed part is not acceptable JSON
 *  SL_ELIMIT    authentic, but a frame or the whole is over frames->limits:
 *               nothing is parsed but the header (when it is itself within
 *               the limit), and no buffer is kept.
 * After the last three, *ret_msg is still set when the header parsed, with
 * the idents and that header, so the caller can answer with an error. */
int jk_wire_decode(struct jk_auth *auth, const struct sl_msg *frames,
                   const struct jk_wire_limits *limits, struct jk_msg **ret_msg,
                   char *err, size_t err_size);

/* Signs and serialises msg into out (initialised, empty). */
int jk_wire_encode(struct jk_auth *auth, const struct jk_msg *msg, struct sl_msg *out);
/* Signs msg and hands its frames, in order, to frame() (data borrowed for
 * the call; more: frames follow), without copying them into a struct sl_msg
 * first: the sending loop passes them straight to its socket. Stops at the
 * first negative frame() result and returns it; 0 when all were handed. */
int jk_wire_encode_each(struct jk_auth *auth, const struct jk_msg *msg,
                        int (*frame)(void *ud, const void *data, size_t len, bool more), void *ud);

/* A new random id ("hex-uuid" form) into buf (37 bytes). */
void jk_new_id(char buf[37]);

#endif
