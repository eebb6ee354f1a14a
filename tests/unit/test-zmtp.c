/* The ZMTP 3.0 codec: greetings, frame headers, the READY command, and the
 * incremental decoder (chunking must not change what it produces, malformed
 * framing is -EPROTO, limits keep memory bounded whatever a peer announces). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "sl_err.h"
#include "sl_frame.h"
#include "zmtp_codec.h"

/* ---- a growable byte buffer for building streams -------------------------- */

struct buf {
  uint8_t *p;
  size_t len, cap;
};

static void buf_put(struct buf *b, const void *data, size_t len) {
  if (b->len + len > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + len)
      cap *= 2;
    b->p = realloc(b->p, cap);
    if (!b->p)
      abort();
    b->cap = cap;
  }
  if (len)
    memcpy(b->p + b->len, data, len);
  b->len += len;
}

static void buf_done(struct buf *b) {
  free(b->p);
  *b = (struct buf){0};
}

static void put_frame(struct buf *b, const void *data, size_t len, bool more, bool command) {
  uint8_t h[JK_ZMTP_FRAME_HEADER_MAX];
  buf_put(b, h, jk_zmtp_frame_header(h, len, more, command));
  buf_put(b, data, len);
}

static void put_str(struct buf *b, const char *s, bool more) { put_frame(b, s, strlen(s), more, false); }

/* A frame with the LONG flag even though its size fits in one byte. */
static void put_long_frame(struct buf *b, const void *data, uint64_t len, bool more) {
  uint8_t h[9] = {(uint8_t)(0x02 | (more ? 0x01 : 0))};
  for (int i = 0; i < 8; i++)
    h[1 + i] = (uint8_t)(len >> (56 - 8 * i));
  buf_put(b, h, 9);
  buf_put(b, data, (size_t)len);
}

/* ---- greeting ------------------------------------------------------------- */

static void greeting(void) {
  uint8_t g[JK_ZMTP_GREETING_BYTES], bad[JK_ZMTP_GREETING_BYTES];
  char why[200];
  memset(g, 0xaa, sizeof g);
  jk_zmtp_greeting(g);
  CHECK_INT(g[0], 0xff);
  for (int i = 1; i < 9; i++)
    CHECK_INT(g[i], 0);
  CHECK_INT(g[9], 0x7f);
  CHECK_INT(g[10], 3);
  CHECK_INT(g[11], 0);
  CHECK(memcmp(g + 12, "NULL", 4) == 0);
  for (int i = 16; i < 64; i++) /* mechanism padding, as-server 0, filler */
    CHECK_INT(g[i], 0);

  strcpy(why, "untouched");
  CHECK_INT(jk_zmtp_greeting_check(g, why, sizeof why), 0);
  /* A ZMTP 3.1 peer (libzmq 4.3) is served too. */
  memcpy(bad, g, sizeof g);
  bad[11] = 1;
  CHECK_INT(jk_zmtp_greeting_check(bad, why, sizeof why), 0);

  /* ZMTP 2.0: byte 10 is the revision 1. */
  memcpy(bad, g, sizeof g);
  bad[10] = 1;
  why[0] = '\0';
  CHECK_INT(jk_zmtp_greeting_check(bad, why, sizeof why), -EPROTO);
  CHECK(strstr(why, "ZMTP 2.0") != NULL);
  CHECK(strstr(why, "not supported") != NULL);

  /* Not the 0xff ... 0x7f signature: not ZMTP at all. */
  memcpy(bad, g, sizeof g);
  bad[0] = 'G';
  why[0] = '\0';
  CHECK_INT(jk_zmtp_greeting_check(bad, why, sizeof why), -EPROTO);
  CHECK_STR(why, "not a ZMTP 3 greeting");
  memcpy(bad, g, sizeof g);
  bad[9] = 0x7e;
  why[0] = '\0';
  CHECK_INT(jk_zmtp_greeting_check(bad, why, sizeof why), -EPROTO);
  CHECK_STR(why, "not a ZMTP 3 greeting");

  /* Another mechanism is named in the reason. */
  memcpy(bad, g, sizeof g);
  memset(bad + 12, 0, 20);
  memcpy(bad + 12, "CURVE", 5);
  why[0] = '\0';
  CHECK_INT(jk_zmtp_greeting_check(bad, why, sizeof why), -EPROTO);
  CHECK(strstr(why, "CURVE") != NULL);
  CHECK(strstr(why, "only NULL") != NULL);
  memcpy(bad + 12, "PLAIN", 5);
  CHECK_INT(jk_zmtp_greeting_check(bad, why, sizeof why), -EPROTO);
  CHECK(strstr(why, "PLAIN") != NULL);
  /* Unprintable mechanism bytes never reach the reason. */
  memset(bad + 12, 0x01, 20);
  CHECK_INT(jk_zmtp_greeting_check(bad, why, sizeof why), -EPROTO);
  CHECK(strstr(why, "(unreadable)") != NULL);
  /* NULL followed by garbage is not NULL. */
  memcpy(bad, g, sizeof g);
  bad[16] = 'X';
  CHECK_INT(jk_zmtp_greeting_check(bad, why, sizeof why), -EPROTO);

  /* A tiny reason buffer is truncated, never overrun. */
  memcpy(bad, g, sizeof g);
  bad[0] = 0;
  char tiny[6];
  memset(tiny, 'z', sizeof tiny);
  CHECK_INT(jk_zmtp_greeting_check(bad, tiny, sizeof tiny), -EPROTO);
  CHECK_INT(strlen(tiny), 5);
}

/* ---- frame headers -------------------------------------------------------- */

static void frame_headers(void) {
  uint8_t h[JK_ZMTP_FRAME_HEADER_MAX];
  CHECK_INT(jk_zmtp_frame_header(h, 0, false, false), 2);
  CHECK_INT(h[0], 0x00);
  CHECK_INT(h[1], 0);
  CHECK_INT(jk_zmtp_frame_header(h, 255, true, false), 2);
  CHECK_INT(h[0], 0x01);
  CHECK_INT(h[1], 255);
  CHECK_INT(jk_zmtp_frame_header(h, 255, false, true), 2);
  CHECK_INT(h[0], 0x04);
  CHECK_INT(h[1], 255);

  static const uint8_t long256[9] = {0x02, 0, 0, 0, 0, 0, 0, 1, 0};
  CHECK_INT(jk_zmtp_frame_header(h, 256, false, false), 9);
  CHECK(memcmp(h, long256, 9) == 0);
  CHECK_INT(jk_zmtp_frame_header(h, 256, true, false), 9);
  CHECK_INT(h[0], 0x03);
  CHECK_INT(jk_zmtp_frame_header(h, 256, false, true), 9);
  CHECK_INT(h[0], 0x06);
  CHECK_INT(jk_zmtp_frame_header(h, 256, true, true), 9);
  CHECK_INT(h[0], 0x07);
  static const uint8_t big[9] = {0x02, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef};
  CHECK_INT(jk_zmtp_frame_header(h, UINT64_C(0x0123456789abcdef), false, false), 9);
  CHECK(memcmp(h, big, 9) == 0);
}

/* ---- READY and other commands --------------------------------------------- */

static void ready(void) {
  uint8_t out[600];
  struct jk_zmtp_ready_info info;
  char why[200];

  /* The exact bytes libzmq expects. */
  static const uint8_t want[] = "\x04\x2e"
                                "\x05READY"
                                "\x0bSocket-Type\x00\x00\x00\x06" "DEALER"
                                "\x08Identity\x00\x00\x00\x05" "alice";
  size_t n = jk_zmtp_ready(out, sizeof out, "DEALER", (const uint8_t *)"alice", 5);
  CHECK_INT(n, sizeof want - 1);
  CHECK(n == sizeof want - 1 && memcmp(out, want, n) == 0);
  CHECK_INT(jk_zmtp_ready_parse(out + 2, n - 2, &info, why, sizeof why), 0);
  CHECK_STR(info.socket_type, "DEALER");
  CHECK_INT(info.identity_len, 5);
  CHECK(memcmp(info.identity, "alice", 5) == 0);

  /* Without an Identity property. */
  n = jk_zmtp_ready(out, sizeof out, "PUB", NULL, 0);
  CHECK_INT(n, 2 + 6 + 1 + 11 + 4 + 3);
  CHECK_INT(out[0], 0x04);
  memset(&info, 0x55, sizeof info);
  CHECK_INT(jk_zmtp_ready_parse(out + 2, n - 2, &info, why, sizeof why), 0);
  CHECK_STR(info.socket_type, "PUB");
  CHECK_INT(info.identity_len, 0);

  /* An empty Identity is still announced (a ROUTER does that). */
  static const uint8_t empty = 0;
  n = jk_zmtp_ready(out, sizeof out, "ROUTER", &empty, 0);
  CHECK_INT(n, 2 + 6 + 1 + 11 + 4 + 6 + 1 + 8 + 4);
  CHECK(memcmp(out + n - 13, "\x08Identity\0\0\0\0", 13) == 0);
  CHECK_INT(jk_zmtp_ready_parse(out + 2, n - 2, &info, why, sizeof why), 0);
  CHECK_STR(info.socket_type, "ROUTER");
  CHECK_INT(info.identity_len, 0);

  /* The longest identity makes the command a long frame. */
  uint8_t id[JK_ZMTP_IDENTITY_MAX + 1];
  for (size_t i = 0; i < sizeof id; i++)
    id[i] = (uint8_t)(i * 7 + 1);
  n = jk_zmtp_ready(out, sizeof out, "REQ", id, JK_ZMTP_IDENTITY_MAX);
  CHECK_INT(n, 9 + 6 + 1 + 11 + 4 + 3 + 1 + 8 + 4 + 255);
  CHECK_INT(out[0], 0x06);
  CHECK_INT(jk_zmtp_ready_parse(out + 9, n - 9, &info, why, sizeof why), 0);
  CHECK_STR(info.socket_type, "REQ");
  CHECK_INT(info.identity_len, 255);
  CHECK(memcmp(info.identity, id, 255) == 0);
  /* Too long an identity or socket type, or too small an output: 0. */
  CHECK_INT(jk_zmtp_ready(out, sizeof out, "REQ", id, JK_ZMTP_IDENTITY_MAX + 1), 0);
  CHECK_INT(jk_zmtp_ready(out, sizeof out, "SIXTEEN-LETTERS!", NULL, 0), 0);
  CHECK_INT(jk_zmtp_ready(out, 10, "DEALER", NULL, 0), 0);
  size_t exact = jk_zmtp_ready(out, sizeof out, "DEALER", NULL, 0);
  CHECK_INT(jk_zmtp_ready(out, exact, "DEALER", NULL, 0), exact);
  CHECK_INT(jk_zmtp_ready(out, exact - 1, "DEALER", NULL, 0), 0);

  /* Property names are case-insensitive; unknown ones are skipped. */
  static const uint8_t mixed[] = "\x05READY"
                                 "\x07X-Extra\x00\x00\x00\x03" "abc"
                                 "\x0bsOCKET-tYPE\x00\x00\x00\x03" "SUB"
                                 "\x08IDENTITY\x00\x00\x00\x02" "id";
  CHECK_INT(jk_zmtp_ready_parse(mixed, sizeof mixed - 1, &info, why, sizeof why), 0);
  CHECK_STR(info.socket_type, "SUB");
  CHECK_INT(info.identity_len, 2);
  CHECK(memcmp(info.identity, "id", 2) == 0);

  /* Cut anywhere inside the property, the command is refused and *ret is
   * left alone; the reason says it was cut short. */
  size_t full = jk_zmtp_ready(out, sizeof out, "DEALER", NULL, 0) - 2;
  const uint8_t *body = out + 2;
  for (size_t cut = 7; cut < full; cut++) {
    memset(&info, 0x55, sizeof info);
    why[0] = '\0';
    CHECK_INT(jk_zmtp_ready_parse(body, cut, &info, why, sizeof why), -EPROTO);
    CHECK(strstr(why, "cut short") != NULL);
    CHECK_INT(info.identity_len, (size_t)0x5555555555555555ull);
  }
  /* A value length pointing past the end. */
  static const uint8_t overlong[] = "\x05READY\x0bSocket-Type\x00\x00\x01\x00" "DEALER";
  CHECK_INT(jk_zmtp_ready_parse(overlong, sizeof overlong - 1, &info, why, sizeof why), -EPROTO);
  CHECK_STR(why, "READY property Socket-Type cut short");
  static const uint8_t huge_len[] = "\x05READY\x0bSocket-Type\xff\xff\xff\xff" "DEALER";
  CHECK_INT(jk_zmtp_ready_parse(huge_len, sizeof huge_len - 1, &info, why, sizeof why), -EPROTO);
  /* No Socket-Type at all, a socket type too long, an identity too long. */
  CHECK_INT(jk_zmtp_ready_parse((const uint8_t *)"\x05READY", 6, &info, why, sizeof why), -EPROTO);
  CHECK_STR(why, "READY without a Socket-Type");
  static const uint8_t long_type[] = "\x05READY\x0bSocket-Type\x00\x00\x00\x10" "0123456789abcdef";
  CHECK_INT(jk_zmtp_ready_parse(long_type, sizeof long_type - 1, &info, why, sizeof why), -EPROTO);
  struct buf b = {0};
  buf_put(&b, "\x05READY\x0bSocket-Type\x00\x00\x00\x06" "DEALER\x08Identity\x00\x00\x01\x00", 6 + 16 + 6 + 13);
  for (int i = 0; i < 256; i++)
    buf_put(&b, "x", 1);
  CHECK_INT(jk_zmtp_ready_parse(b.p, b.len, &info, why, sizeof why), -EPROTO);
  CHECK(strstr(why, "identity longer than 255") != NULL);
  buf_done(&b);

  /* An ERROR command: its reason is passed on. */
  static const uint8_t error[] = "\x05" "ERROR\x0c" "bad identity";
  CHECK_INT(jk_zmtp_ready_parse(error, sizeof error - 1, &info, why, sizeof why), -EPROTO);
  CHECK_STR(why, "peer refused the handshake: bad identity");
  /* A reason shorter than announced is clamped; an empty ERROR has none. */
  static const uint8_t error_cut[] = "\x05" "ERROR\x40" "abc";
  CHECK_INT(jk_zmtp_ready_parse(error_cut, sizeof error_cut - 1, &info, why, sizeof why), -EPROTO);
  CHECK_STR(why, "peer refused the handshake: abc");
  CHECK_INT(jk_zmtp_ready_parse((const uint8_t *)"\x05" "ERROR", 6, &info, why, sizeof why), -EPROTO);
  CHECK_STR(why, "peer refused the handshake: ");

  /* Not READY: PING, a nameless command, a malformed one. */
  static const uint8_t ping[] = "\x04PING\x00\x0a" "ctx";
  CHECK_INT(jk_zmtp_ready_parse(ping, sizeof ping - 1, &info, why, sizeof why), -EPROTO);
  CHECK_STR(why, "expected READY, got a PING command");
  CHECK_INT(jk_zmtp_ready_parse((const uint8_t *)"\x00", 1, &info, why, sizeof why), -EPROTO);
  CHECK_STR(why, "expected READY, got a nameless command");
  CHECK_INT(jk_zmtp_ready_parse((const uint8_t *)"\x09READY", 6, &info, why, sizeof why), -EPROTO);
  CHECK_STR(why, "malformed command");
  CHECK_INT(jk_zmtp_ready_parse(NULL, 0, &info, why, sizeof why), -EPROTO);
  /* "READY" must match exactly. */
  static const uint8_t lower[] = "\x05ready\x0bSocket-Type\x00\x00\x00\x03SUB";
  CHECK_INT(jk_zmtp_ready_parse(lower, sizeof lower - 1, &info, why, sizeof why), -EPROTO);
}

static void command_names(void) {
  char name[256];
  const uint8_t *data = NULL;
  size_t len = 99;
  static const uint8_t ping[] = "\x04PING\x00\x64" "ab";
  CHECK_INT(jk_zmtp_command_name(ping, sizeof ping - 1, name, &data, &len), 0);
  CHECK_STR(name, "PING");
  CHECK_INT(len, 4);
  CHECK(data == ping + 5);
  CHECK_INT(jk_zmtp_command_name((const uint8_t *)"\x00", 1, name, &data, &len), 0);
  CHECK_STR(name, "");
  CHECK_INT(len, 0);
  /* The longest name, with no data. */
  uint8_t longest[256];
  longest[0] = 255;
  memset(longest + 1, 'N', 255);
  CHECK_INT(jk_zmtp_command_name(longest, sizeof longest, name, &data, &len), 0);
  CHECK_INT(strlen(name), 255);
  CHECK_INT(len, 0);
  CHECK_INT(jk_zmtp_command_name(longest, sizeof longest - 1, name, &data, &len), -EPROTO);
  CHECK_INT(jk_zmtp_command_name((const uint8_t *)"\x05PING", 5, name, &data, &len), -EPROTO);
  CHECK_INT(jk_zmtp_command_name(NULL, 0, name, &data, &len), -EPROTO);
}

/* ---- the decoder ---------------------------------------------------------- */

/* Every event a decoder produced, serialised: 'M' n {len bytes}... status,
 * dropped, oversized for a message, 'C' len bytes for a command. Two runs
 * over the same stream must give the same record whatever the chunking. */
struct run {
  struct buf log;
  size_t messages, commands;
  int error; /* the first negative result, or 0 */
};

static void log_size(struct buf *b, uint64_t v) { buf_put(b, &v, sizeof v); }

static void record_message(struct run *r, struct jk_zmtp_decoder *d) {
  struct sl_msg m;
  int st = jk_zmtp_decoder_take(d, &m);
  buf_put(&r->log, "M", 1);
  log_size(&r->log, m.n);
  for (size_t i = 0; i < m.n; i++) {
    log_size(&r->log, m.frames[i].len);
    buf_put(&r->log, m.frames[i].data, m.frames[i].len);
    if (m.frames[i].data[m.frames[i].len] != '\0') /* frames are NUL-terminated */
      buf_put(&r->log, "!nul", 4);
  }
  log_size(&r->log, (uint64_t)(int64_t)st);
  log_size(&r->log, m.dropped_frames);
  log_size(&r->log, m.oversized_frames);
  sl_msg_done(&m);
  r->messages++;
}

static void record_command(struct run *r, const struct jk_zmtp_decoder *d) {
  buf_put(&r->log, "C", 1);
  log_size(&r->log, d->command_len);
  buf_put(&r->log, d->command_buf, d->command_len);
  r->commands++;
}

/* Feeds one chunk to the decoder, recording events until it is used up.
 * Returns false once the decoder failed. */
static bool feed(struct run *r, struct jk_zmtp_decoder *d, const uint8_t *p, size_t n) {
  if (r->error)
    return false;
  for (;;) {
    size_t used = (size_t)-1;
    int ev = jk_zmtp_decode(d, p, n, &used);
    if (ev < 0) {
      r->error = ev;
      return false;
    }
    if (used > n) {
      CHECK(used <= n);
      r->error = -EFAULT;
      return false;
    }
    p += used;
    n -= used;
    if (ev == JK_ZMTP_MESSAGE) {
      record_message(r, d);
    } else if (ev == JK_ZMTP_COMMAND) {
      record_command(r, d);
    } else {
      if (ev != JK_ZMTP_NEED_MORE || n != 0) { /* NEED_MORE means every byte was taken */
        CHECK_INT(ev, JK_ZMTP_NEED_MORE);
        CHECK_INT(n, 0);
        r->error = -EFAULT;
        return false;
      }
      return true;
    }
    if (n == 0)
      return true;
  }
}

/* Decodes stream in chunks: chunk == 0 means all at once, else chunks of
 * that size; split, when not 0, cuts once at that offset instead. */
static void decode_stream(const struct buf *s, struct sl_limits lim, size_t chunk, size_t split, struct run *r) {
  struct jk_zmtp_decoder *d = malloc(sizeof *d);
  jk_zmtp_decoder_init(d, lim);
  *r = (struct run){0};
  r->log.p = malloc(s->len + 4096); /* room for the whole record: no regrowth */
  r->log.cap = s->len + 4096;
  if (split) {
    if (feed(r, d, s->p, split))
      feed(r, d, s->p + split, s->len - split);
  } else if (chunk == 0) {
    feed(r, d, s->p, s->len);
  } else {
    for (size_t off = 0; off < s->len; off += chunk)
      if (!feed(r, d, s->p + off, s->len - off < chunk ? s->len - off : chunk))
        break;
  }
  /* With every byte given, a call with none has nothing to report. */
  if (!r->error) {
    size_t used = 1;
    CHECK_INT(jk_zmtp_decode(d, s->p, 0, &used), JK_ZMTP_NEED_MORE);
    CHECK_INT(used, 0);
  }
  jk_zmtp_decoder_done(d);
  free(d);
}

static void run_done(struct run *r) { buf_done(&r->log); }

static bool same_run(const struct run *a, const struct run *b) {
  return a->error == b->error && a->messages == b->messages && a->commands == b->commands &&
         a->log.len == b->log.len && memcmp(a->log.p, b->log.p, a->log.len) == 0;
}

/* Messages (with empty frames and a 70000-byte long frame) and commands
 * between them. */
static void sample_stream(struct buf *s, uint8_t **ret_big) {
  uint8_t *big = malloc(70000);
  for (size_t i = 0; i < 70000; i++)
    big[i] = (uint8_t)(i * 31 + (i >> 8));
  put_str(s, "hello", false);
  put_frame(s, "\x04PING\x00\x0a" "ctx", 9, false, true);
  put_str(s, "", true);
  put_str(s, "a", true);
  put_str(s, "", false);
  put_frame(s, big, 70000, true, false);
  put_str(s, "tail", false);
  put_str(s, "", false);
  uint8_t ready[300];
  size_t n = jk_zmtp_ready(ready, sizeof ready, "DEALER", (const uint8_t *)"id", 2);
  buf_put(s, ready, n);
  put_frame(s, big, 255, true, false);
  put_frame(s, big, 256, true, false);
  put_long_frame(s, "long-but-short", 14, false);
  put_frame(s, "\x00", 1, false, true); /* an empty-named command */
  *ret_big = big;
}

static void decoder_stream(void) {
  struct buf s = {0};
  uint8_t *big;
  sample_stream(&s, &big);
  struct sl_limits lim = SL_LIMITS_DEFAULT;

  struct run whole;
  decode_stream(&s, lim, 0, 0, &whole);
  CHECK_INT(whole.error, 0);
  CHECK_INT(whole.messages, 5);
  CHECK_INT(whole.commands, 3);

  /* Spot-check the content of the whole-stream run by decoding again and
   * taking the messages by hand. */
  struct jk_zmtp_decoder d;
  jk_zmtp_decoder_init(&d, lim);
  const uint8_t *p = s.p;
  size_t left = s.len, used;
  struct sl_msg m;
  CHECK_INT(jk_zmtp_decode(&d, p, left, &used), JK_ZMTP_MESSAGE);
  p += used, left -= used;
  CHECK_INT(jk_zmtp_decoder_take(&d, &m), 0);
  CHECK_INT(m.n, 1);
  CHECK_STR((char *)m.frames[0].data, "hello");
  sl_msg_done(&m);
  CHECK_INT(jk_zmtp_decode(&d, p, left, &used), JK_ZMTP_COMMAND);
  p += used, left -= used;
  CHECK_INT(d.command_len, 9);
  CHECK(memcmp(d.command_buf, "\x04PING\x00\x0a" "ctx", 9) == 0);
  CHECK_INT(jk_zmtp_decode(&d, p, left, &used), JK_ZMTP_MESSAGE);
  p += used, left -= used;
  CHECK_INT(jk_zmtp_decoder_take(&d, &m), 0);
  CHECK_INT(m.n, 3);
  if (m.n == 3) {
    CHECK_INT(m.frames[0].len, 0);
    CHECK_STR((char *)m.frames[1].data, "a");
    CHECK_INT(m.frames[2].len, 0);
    CHECK(m.frames[2].data != NULL && m.frames[2].data[0] == '\0');
  }
  sl_msg_done(&m);
  CHECK_INT(jk_zmtp_decode(&d, p, left, &used), JK_ZMTP_MESSAGE);
  p += used, left -= used;
  CHECK_INT(jk_zmtp_decoder_take(&d, &m), 0);
  CHECK_INT(m.n, 2);
  if (m.n == 2) {
    CHECK_INT(m.frames[0].len, 70000);
    CHECK(memcmp(m.frames[0].data, big, 70000) == 0);
    CHECK_STR((char *)m.frames[1].data, "tail");
  }
  CHECK_INT(m.total_bytes, 70004);
  sl_msg_done(&m);
  CHECK_INT(jk_zmtp_decode(&d, p, left, &used), JK_ZMTP_MESSAGE);
  p += used, left -= used;
  CHECK_INT(jk_zmtp_decoder_take(&d, &m), 0);
  CHECK_INT(m.n, 1);
  CHECK_INT(m.frames[0].len, 0);
  sl_msg_done(&m);
  CHECK_INT(jk_zmtp_decode(&d, p, left, &used), JK_ZMTP_COMMAND);
  p += used, left -= used;
  struct jk_zmtp_ready_info info;
  char why[100];
  CHECK_INT(jk_zmtp_ready_parse(d.command_buf, d.command_len, &info, why, sizeof why), 0);
  CHECK_STR(info.socket_type, "DEALER");
  CHECK_INT(jk_zmtp_decode(&d, p, left, &used), JK_ZMTP_MESSAGE);
  p += used, left -= used;
  CHECK_INT(jk_zmtp_decoder_take(&d, &m), 0);
  CHECK_INT(m.n, 3);
  if (m.n == 3) {
    CHECK_INT(m.frames[0].len, 255);
    CHECK_INT(m.frames[1].len, 256);
    CHECK(memcmp(m.frames[1].data, big, 256) == 0);
    CHECK_STR((char *)m.frames[2].data, "long-but-short");
  }
  sl_msg_done(&m);
  CHECK_INT(jk_zmtp_decode(&d, p, left, &used), JK_ZMTP_COMMAND);
  p += used, left -= used;
  CHECK_INT(d.command_len, 1);
  CHECK_INT(left, 0);
  jk_zmtp_decoder_done(&d);

  /* One byte at a time. */
  struct run r;
  decode_stream(&s, lim, 1, 0, &r);
  CHECK(same_run(&whole, &r));
  run_done(&r);
  /* A few other chunk sizes, around the header sizes and READ_CHUNK-like. */
  static const size_t chunks[] = {2, 3, 7, 9, 10, 255, 256, 4096, 65536};
  for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
    decode_stream(&s, lim, chunks[i], 0, &r);
    CHECK(same_run(&whole, &r));
    run_done(&r);
  }
  /* Split in two at every position. */
  size_t differ = 0;
  for (size_t cut = 1; cut < s.len; cut++) {
    decode_stream(&s, lim, 0, cut, &r);
    if (!same_run(&whole, &r)) {
      if (!differ)
        fprintf(stderr, "split at %zu decodes differently\n", cut);
      differ++;
    }
    run_done(&r);
  }
  CHECK_INT(differ, 0);

  run_done(&whole);
  buf_done(&s);
  free(big);
}

/* Decodes the whole of stream and returns the result of the last call. */
static int decode_all(const struct buf *s, struct sl_limits lim, struct run *r) {
  decode_stream(s, lim, 0, 0, r);
  return r->error;
}

static void decoder_malformed(void) {
  struct sl_limits lim = SL_LIMITS_DEFAULT;
  struct run r;
  struct buf s = {0};

  /* A command with MORE set. */
  put_frame(&s, "\x04PING\x00\x0a", 7, true, true);
  CHECK_INT(decode_all(&s, lim, &r), -EPROTO);
  run_done(&r);
  buf_done(&s);
  /* A command inside a message, after a valid message. */
  put_str(&s, "ok", false);
  put_str(&s, "first", true);
  put_frame(&s, "\x04PING\x00\x0a", 7, false, true);
  CHECK_INT(decode_all(&s, lim, &r), -EPROTO);
  CHECK_INT(r.messages, 1);
  run_done(&r);
  buf_done(&s);

  /* Reserved flag bits, at the start and after a message. */
  static const uint8_t reserved[] = {0x08, 0x10, 0x20, 0x40, 0x80, 0xf8, 0x09};
  for (size_t i = 0; i < sizeof reserved; i++) {
    put_str(&s, "ok", false);
    uint8_t f[3] = {reserved[i], 1, 'x'};
    buf_put(&s, f, sizeof f);
    CHECK_INT(decode_all(&s, lim, &r), -EPROTO);
    CHECK_INT(r.messages, 1);
    run_done(&r);
    /* Even fed alone, the flags byte is refused at once. */
    struct jk_zmtp_decoder d;
    jk_zmtp_decoder_init(&d, lim);
    size_t used;
    CHECK_INT(jk_zmtp_decode(&d, f, 1, &used), -EPROTO);
    /* After an error the decoder stays failed and takes nothing more. */
    static const uint8_t more[] = {0x00, 0x01, 'y', 0x00, 0x00};
    for (int k = 0; k < 3; k++) {
      used = 99;
      CHECK_INT(jk_zmtp_decode(&d, more, sizeof more, &used), -EPROTO);
      CHECK_INT(used, 0);
    }
    jk_zmtp_decoder_done(&d);
    buf_done(&s);
  }

  /* Commands up to JK_ZMTP_COMMAND_MAX are taken, one byte more is not. */
  uint8_t *cmd = calloc(1, JK_ZMTP_COMMAND_MAX + 1);
  memcpy(cmd, "\x04" "BIGC", 5);
  put_frame(&s, cmd, JK_ZMTP_COMMAND_MAX, false, true);
  CHECK_INT(decode_all(&s, lim, &r), 0);
  CHECK_INT(r.commands, 1);
  run_done(&r);
  buf_done(&s);
  put_frame(&s, cmd, JK_ZMTP_COMMAND_MAX + 1, false, true);
  CHECK_INT(decode_all(&s, lim, &r), -EPROTO);
  CHECK_INT(r.commands, 0);
  run_done(&r);
  buf_done(&s);
  /* A huge command is refused from its header alone. */
  static const uint8_t huge_cmd[9] = {0x06, 0, 0, 0, 1, 0, 0, 0, 0};
  buf_put(&s, huge_cmd, sizeof huge_cmd);
  CHECK_INT(decode_all(&s, lim, &r), -EPROTO);
  run_done(&r);
  buf_done(&s);
  free(cmd);

  /* A size with the top bit set. */
  static const uint8_t top_bit[9] = {0x02, 0x80, 0, 0, 0, 0, 0, 0, 1};
  buf_put(&s, top_bit, sizeof top_bit);
  CHECK_INT(decode_all(&s, lim, &r), -EPROTO);
  run_done(&r);
  buf_done(&s);

  /* An empty command frame is an event; its name cannot be parsed. */
  struct jk_zmtp_decoder d;
  jk_zmtp_decoder_init(&d, lim);
  size_t used = 99;
  CHECK_INT(jk_zmtp_decode(&d, (const uint8_t *)"\x04\x00", 2, &used), JK_ZMTP_COMMAND);
  CHECK_INT(used, 2);
  CHECK_INT(d.command_len, 0);
  char name[256];
  const uint8_t *data;
  size_t dlen;
  CHECK_INT(jk_zmtp_command_name(d.command_buf, d.command_len, name, &data, &dlen), -EPROTO);
  /* A zero-length final frame ends its message within the same call. */
  CHECK_INT(jk_zmtp_decode(&d, (const uint8_t *)"\x00\x00", 2, &used), JK_ZMTP_MESSAGE);
  CHECK_INT(used, 2);
  struct sl_msg m;
  CHECK_INT(jk_zmtp_decoder_take(&d, &m), 0);
  CHECK_INT(m.n, 1);
  sl_msg_done(&m);
  jk_zmtp_decoder_done(&d);
}

static void decoder_limits(void) {
  struct run r;
  struct buf s = {0};
  struct jk_zmtp_decoder d;
  struct sl_msg m;
  size_t used;

  /* More frames than max_frames: the first ones are kept. */
  struct sl_limits three = {3, 1024, 4096};
  jk_zmtp_decoder_init(&d, three);
  for (int i = 0; i < 5; i++) {
    char f[8];
    snprintf(f, sizeof f, "f%d", i);
    put_str(&s, f, i < 4);
  }
  put_str(&s, "next", false);
  CHECK_INT(jk_zmtp_decode(&d, s.p, s.len, &used), JK_ZMTP_MESSAGE);
  CHECK_INT(jk_zmtp_decoder_take(&d, &m), SL_ELIMIT);
  CHECK_INT(m.n, 3);
  if (m.n == 3) {
    CHECK_STR((char *)m.frames[0].data, "f0");
    CHECK_STR((char *)m.frames[2].data, "f2");
  }
  CHECK_INT(m.dropped_frames, 2);
  CHECK_INT(m.oversized_frames, 0);
  sl_msg_done(&m);
  /* The next message starts clean. */
  size_t off = used;
  CHECK_INT(jk_zmtp_decode(&d, s.p + off, s.len - off, &used), JK_ZMTP_MESSAGE);
  CHECK_INT(used, s.len - off);
  CHECK_INT(jk_zmtp_decoder_take(&d, &m), 0);
  CHECK_INT(m.n, 1);
  CHECK_STR((char *)m.frames[0].data, "next");
  CHECK_INT(m.dropped_frames, 0);
  sl_msg_done(&m);
  jk_zmtp_decoder_done(&d);
  buf_done(&s);

  /* A frame over max_frame_bytes is skipped as it streams by; the frames
   * around it and the next message are intact, byte at a time or not. */
  struct sl_limits small = {8, 100, 1000};
  uint8_t body[5000];
  memset(body, 'B', sizeof body);
  put_str(&s, "before", true);
  put_frame(&s, body, 101, true, false);
  put_frame(&s, body, 5000, true, false);
  put_str(&s, "after", false);
  put_str(&s, "next", true);
  put_frame(&s, body, 100, false, false);
  jk_zmtp_decoder_init(&d, small);
  CHECK_INT(jk_zmtp_decode(&d, s.p, s.len, &used), JK_ZMTP_MESSAGE);
  CHECK_INT(jk_zmtp_decoder_take(&d, &m), SL_ELIMIT);
  CHECK_INT(m.n, 2);
  if (m.n == 2) {
    CHECK_STR((char *)m.frames[0].data, "before");
    CHECK_STR((char *)m.frames[1].data, "after");
  }
  CHECK_INT(m.dropped_frames, 2);
  CHECK_INT(m.oversized_frames, 2);
  CHECK_INT(m.total_bytes, 11);
  sl_msg_done(&m);
  off = used;
  CHECK_INT(jk_zmtp_decode(&d, s.p + off, s.len - off, &used), JK_ZMTP_MESSAGE);
  CHECK_INT(jk_zmtp_decoder_take(&d, &m), 0);
  CHECK_INT(m.n, 2);
  if (m.n == 2) {
    CHECK_STR((char *)m.frames[0].data, "next");
    CHECK_INT(m.frames[1].len, 100);
  }
  sl_msg_done(&m);
  jk_zmtp_decoder_done(&d);
  struct run whole;
  decode_stream(&s, small, 0, 0, &whole);
  decode_stream(&s, small, 1, 0, &r);
  CHECK(same_run(&whole, &r));
  CHECK_INT(r.messages, 2);
  run_done(&r);
  run_done(&whole);
  buf_done(&s);

  /* max_total_bytes: a frame that would pass the total is dropped, but it
   * is not oversized. */
  struct sl_limits total = {8, 300, 300};
  put_frame(&s, body, 200, true, false);
  put_frame(&s, body, 200, false, false);
  jk_zmtp_decoder_init(&d, total);
  CHECK_INT(jk_zmtp_decode(&d, s.p, s.len, &used), JK_ZMTP_MESSAGE);
  CHECK_INT(jk_zmtp_decoder_take(&d, &m), SL_ELIMIT);
  CHECK_INT(m.n, 1);
  CHECK_INT(m.dropped_frames, 1);
  CHECK_INT(m.oversized_frames, 0);
  CHECK(m.total_bytes <= 300);
  sl_msg_done(&m);
  jk_zmtp_decoder_done(&d);
  buf_done(&s);

  /* A long frame announcing 2^62 bytes is never allocated: a megabyte of
   * it streams through with nothing kept (under ASan an allocation of that
   * size would abort; without, malloc failing would be -ENOMEM). */
  struct sl_limits tiny = {4, 16, 64};
  static const uint8_t huge[9] = {0x02, 0x40, 0, 0, 0, 0, 0, 0, 0};
  uint8_t *zeros = calloc(1, 1u << 20);
  for (int pass = 0; pass < 2; pass++) {
    jk_zmtp_decoder_init(&d, pass ? SL_LIMITS_DEFAULT : tiny);
    CHECK_INT(jk_zmtp_decode(&d, huge, sizeof huge, &used), JK_ZMTP_NEED_MORE);
    CHECK_INT(used, sizeof huge);
    CHECK(d.body == NULL);
    CHECK(!d.keep);
    CHECK_INT(jk_zmtp_decode(&d, zeros, 1u << 20, &used), JK_ZMTP_NEED_MORE);
    CHECK_INT(used, 1u << 20);
    CHECK_INT(d.body_have, 1u << 20);
    CHECK(d.body == NULL);
    CHECK_INT(d.msg.dropped_frames, 1);
    CHECK_INT(d.msg.oversized_frames, 1);
    jk_zmtp_decoder_done(&d);
  }
  /* The same with MORE, after a kept frame: the kept frame is freed with
   * the decoder (checked by ASan/LSan). */
  jk_zmtp_decoder_init(&d, tiny);
  put_str(&s, "kept", true);
  uint8_t huge_more[9];
  memcpy(huge_more, huge, 9);
  huge_more[0] |= 0x01;
  buf_put(&s, huge_more, 9);
  buf_put(&s, zeros, 4096);
  CHECK_INT(jk_zmtp_decode(&d, s.p, s.len, &used), JK_ZMTP_NEED_MORE);
  CHECK_INT(used, s.len);
  CHECK_INT(d.msg.n, 1);
  jk_zmtp_decoder_done(&d);
  buf_done(&s);
  free(zeros);

  /* A frame skipped at the end of the stream, then a normal message:
   * byte at a time and in one go agree. */
  put_frame(&s, body, 17, false, false);
  put_str(&s, "fine", false);
  decode_stream(&s, tiny, 0, 0, &whole);
  CHECK_INT(whole.error, 0);
  CHECK_INT(whole.messages, 2);
  decode_stream(&s, tiny, 1, 0, &r);
  CHECK(same_run(&whole, &r));
  run_done(&r);
  run_done(&whole);
  buf_done(&s);
}

int main(void) {
  greeting();
  frame_headers();
  ready();
  command_names();
  decoder_stream();
  decoder_malformed();
  decoder_limits();
  TEST_MAIN_END();
}
