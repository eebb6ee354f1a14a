/* ZMTP 3.0 framing for the NULL mechanism.
 *
 * A frame is a flags byte (MORE 0x01, LONG 0x02, COMMAND 0x04; the other
 * bits must be zero), a size (one byte, or eight big-endian bytes when LONG),
 * and the body. The decoder is a small state machine fed any number of bytes
 * at a time: it never holds more than the limits allow, because a frame past
 * them is skipped as it streams by, and commands are capped at
 * JK_ZMTP_COMMAND_MAX. Anything malformed is -EPROTO: after it the stream's
 * framing cannot be trusted, so the caller drops the connection. */
#include "zmtp_codec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sl_err.h"

#define FLAG_MORE 0x01
#define FLAG_LONG 0x02
#define FLAG_COMMAND 0x04

enum { ST_HEADER, ST_BODY };

void jk_zmtp_greeting(uint8_t out[JK_ZMTP_GREETING_BYTES]) {
  memset(out, 0, JK_ZMTP_GREETING_BYTES);
  out[0] = 0xff;
  out[9] = 0x7f;
  out[10] = 3; /* major */
  out[11] = 0; /* minor: 3.0, so peers send subscriptions as messages */
  memcpy(out + 12, "NULL", 4);
}

int jk_zmtp_greeting_check(const uint8_t in[JK_ZMTP_GREETING_BYTES], char *why, size_t why_size) {
  if (in[0] != 0xff || !(in[9] & 0x01)) {
    snprintf(why, why_size, "not a ZMTP 3 greeting");
    return -EPROTO;
  }
  if (in[10] < 3) {
    snprintf(why, why_size, "peer speaks ZMTP %s (libzmq before 4.0), which is not supported",
             in[10] == 1 ? "2.0" : "1.0");
    return -EPROTO;
  }
  static const uint8_t null_mechanism[20] = "NULL";
  if (memcmp(in + 12, null_mechanism, sizeof null_mechanism) != 0) {
    char mech[21];
    size_t n = 0;
    for (; n < 20 && in[12 + n] >= 0x20 && in[12 + n] < 0x7f; n++)
      mech[n] = (char)in[12 + n];
    mech[n] = '\0';
    snprintf(why, why_size, "peer asks for the %s security mechanism; only NULL is served", n ? mech : "(unreadable)");
    return -EPROTO;
  }
  return 0;
}

size_t jk_zmtp_frame_header(uint8_t out[JK_ZMTP_FRAME_HEADER_MAX], uint64_t len, bool more, bool command) {
  uint8_t flags = (uint8_t)((more ? FLAG_MORE : 0) | (command ? FLAG_COMMAND : 0));
  if (len <= 255) {
    out[0] = flags;
    out[1] = (uint8_t)len;
    return 2;
  }
  out[0] = flags | FLAG_LONG;
  for (int i = 0; i < 8; i++)
    out[1 + i] = (uint8_t)(len >> (56 - 8 * i));
  return 9;
}

static size_t put_property(uint8_t *p, const char *name, const uint8_t *value, size_t len) {
  size_t n = strlen(name), k = 0;
  p[k++] = (uint8_t)n;
  memcpy(p + k, name, n);
  k += n;
  for (int i = 0; i < 4; i++)
    p[k++] = (uint8_t)(len >> (24 - 8 * i));
  if (len)
    memcpy(p + k, value, len);
  return k + len;
}

size_t jk_zmtp_ready(uint8_t *out, size_t out_size, const char *socket_type, const uint8_t *identity,
                     size_t identity_len) {
  uint8_t body[6 + 16 + 20 + 13 + JK_ZMTP_IDENTITY_MAX];
  size_t type_len = strlen(socket_type);
  if (type_len > 15 || identity_len > JK_ZMTP_IDENTITY_MAX)
    return 0;
  size_t k = 0;
  body[k++] = 5;
  memcpy(body + k, "READY", 5);
  k += 5;
  k += put_property(body + k, "Socket-Type", (const uint8_t *)socket_type, type_len);
  if (identity)
    k += put_property(body + k, "Identity", identity, identity_len);
  uint8_t header[JK_ZMTP_FRAME_HEADER_MAX];
  size_t h = jk_zmtp_frame_header(header, k, false, true);
  if (h + k > out_size)
    return 0;
  memcpy(out, header, h);
  memcpy(out + h, body, k);
  return h + k;
}

int jk_zmtp_command_name(const uint8_t *body, size_t len, char ret_name[256], const uint8_t **ret_data,
                         size_t *ret_data_len) {
  if (len < 1 || (size_t)body[0] + 1 > len)
    return -EPROTO;
  size_t n = body[0];
  memcpy(ret_name, body + 1, n);
  ret_name[n] = '\0';
  *ret_data = body + 1 + n;
  *ret_data_len = len - 1 - n;
  return 0;
}

int jk_zmtp_ready_parse(const uint8_t *body, size_t len, struct jk_zmtp_ready_info *ret, char *why, size_t why_size) {
  char name[256];
  const uint8_t *p;
  size_t left;
  if (jk_zmtp_command_name(body, len, name, &p, &left) < 0) {
    snprintf(why, why_size, "malformed command");
    return -EPROTO;
  }
  if (strcmp(name, "ERROR") == 0) {
    size_t n = 0;
    if (left) {
      n = p[0];
      if (n > left - 1)
        n = left - 1;
    }
    snprintf(why, why_size, "peer refused the handshake: %.*s", (int)n, n ? (const char *)p + 1 : "");
    return -EPROTO;
  }
  if (strcmp(name, "READY") != 0) {
    snprintf(why, why_size, "expected READY, got a %s command", name[0] ? name : "nameless");
    return -EPROTO;
  }
  struct jk_zmtp_ready_info info = {0};
  while (left) {
    size_t nlen = p[0];
    if (1 + nlen + 4 > left) {
      snprintf(why, why_size, "READY property cut short");
      return -EPROTO;
    }
    char pname[256];
    memcpy(pname, p + 1, nlen);
    pname[nlen] = '\0';
    const uint8_t *v = p + 1 + nlen;
    uint64_t vlen = (uint64_t)v[0] << 24 | (uint64_t)v[1] << 16 | (uint64_t)v[2] << 8 | v[3];
    left -= 1 + nlen + 4;
    if (vlen > left) {
      snprintf(why, why_size, "READY property %s cut short", pname);
      return -EPROTO;
    }
    v += 4;
    if (strcasecmp(pname, "Socket-Type") == 0) {
      if (vlen >= sizeof info.socket_type) {
        snprintf(why, why_size, "unknown socket type");
        return -EPROTO;
      }
      memcpy(info.socket_type, v, vlen);
      info.socket_type[vlen] = '\0';
    } else if (strcasecmp(pname, "Identity") == 0) {
      if (vlen > JK_ZMTP_IDENTITY_MAX) {
        snprintf(why, why_size, "identity longer than %d bytes", JK_ZMTP_IDENTITY_MAX);
        return -EPROTO;
      }
      memcpy(info.identity, v, vlen);
      info.identity_len = vlen;
    }
    p = v + vlen;
    left -= vlen;
  }
  if (!info.socket_type[0]) {
    snprintf(why, why_size, "READY without a Socket-Type");
    return -EPROTO;
  }
  *ret = info;
  return 0;
}

void jk_zmtp_decoder_init(struct jk_zmtp_decoder *d, struct sl_limits limits) {
  memset(d, 0, sizeof *d);
  d->state = ST_HEADER;
  sl_msg_init(&d->msg, limits);
}

void jk_zmtp_decoder_done(struct jk_zmtp_decoder *d) {
  free(d->body);
  d->body = NULL;
  sl_msg_done(&d->msg);
  d->in_message = false;
}

/* Decides where the frame whose header is complete goes. */
static int start_body(struct jk_zmtp_decoder *d) {
  uint8_t flags = d->header[0];
  d->more = flags & FLAG_MORE;
  d->command = flags & FLAG_COMMAND;
  if (flags & FLAG_LONG) {
    d->body_len = 0;
    for (int i = 0; i < 8; i++)
      d->body_len = d->body_len << 8 | d->header[1 + i];
    if (d->body_len >> 63)
      return -EPROTO;
  } else {
    d->body_len = d->header[1];
  }
  d->body_have = 0;
  d->keep = false;
  if (d->command) {
    /* A command never continues a message, nor is continued. */
    if (d->more || d->in_message || d->body_len > JK_ZMTP_COMMAND_MAX)
      return -EPROTO;
    d->command_len = 0;
    return 0;
  }
  d->in_message = true;
  const struct sl_limits *lim = &d->msg.limits;
  if (d->msg.n < lim->max_frames && d->body_len <= lim->max_frame_bytes &&
      d->msg.total_bytes + d->body_len <= lim->max_total_bytes) {
    d->body = malloc((size_t)d->body_len + 1);
    if (!d->body)
      return -ENOMEM;
    d->keep = true;
  } else {
    d->msg.dropped_frames++;
    if (d->body_len > lim->max_frame_bytes)
      d->msg.oversized_frames++;
  }
  return 0;
}

/* The frame's body is complete: an event, or JK_ZMTP_NEED_MORE within a message. */
static int end_body(struct jk_zmtp_decoder *d) {
  d->state = ST_HEADER;
  d->header_have = 0;
  if (d->command)
    return JK_ZMTP_COMMAND;
  if (d->keep) {
    int r = sl_msg_add_owned(&d->msg, d->body, (size_t)d->body_len);
    d->body = NULL;
    if (r == SL_ELIMIT) /* the limits shrank since start_body (a new routing id) */
      d->msg.dropped_frames++;
    else if (r < 0)
      return r;
  }
  return d->more ? JK_ZMTP_NEED_MORE : JK_ZMTP_MESSAGE;
}

static int fail(struct jk_zmtp_decoder *d, int error) {
  d->error = error;
  return error;
}

int jk_zmtp_decode(struct jk_zmtp_decoder *d, const uint8_t *buf, size_t len, size_t *ret_used) {
  size_t used = 0;
  int ev = JK_ZMTP_NEED_MORE;
  *ret_used = 0;
  if (d->error)
    return d->error;
  while (used < len || (d->state == ST_BODY && d->body_have == d->body_len)) {
    if (d->state == ST_HEADER) {
      d->header[d->header_have++] = buf[used++];
      if (d->header_have == 1 && (d->header[0] & ~(FLAG_MORE | FLAG_LONG | FLAG_COMMAND)))
        return fail(d, -EPROTO);
      size_t need = (d->header[0] & FLAG_LONG) ? 9 : 2;
      if (d->header_have < need)
        continue;
      int r = start_body(d);
      if (r < 0)
        return fail(d, r);
      d->state = ST_BODY;
    } else {
      uint64_t want = d->body_len - d->body_have;
      size_t n = len - used < want ? len - used : (size_t)want;
      if (d->command)
        memcpy(d->command_buf + d->body_have, buf + used, n);
      else if (d->keep)
        memcpy(d->body + d->body_have, buf + used, n);
      d->body_have += n;
      used += n;
      if (d->body_have < d->body_len)
        continue;
      if (d->command)
        d->command_len = (size_t)d->body_len;
      ev = end_body(d);
      if (ev < 0)
        return fail(d, ev);
      if (ev != JK_ZMTP_NEED_MORE)
        break;
    }
  }
  *ret_used = used;
  return ev;
}

int jk_zmtp_decoder_take(struct jk_zmtp_decoder *d, struct sl_msg *ret) {
  *ret = d->msg;
  int r = d->msg.dropped_frames ? SL_ELIMIT : 0;
  sl_msg_init(&d->msg, ret->limits);
  d->in_message = false;
  return r;
}
