/* Fuzz target: the ZMTP 3.0 codec (greeting check, frame decoder, READY and
 * command parsing).
 *
 * Input layout:
 *   byte 0      bits 0-3: how many chunk-size bytes follow (0: the stream is
 *               fed whole); bits 4-5: which small limits the decoder gets;
 *               bit 6: the stream opens with a 64-byte greeting to check
 *   chunk sizes one byte each, used in turn: b < 128 feeds b + 1 bytes,
 *               otherwise (b - 127) * 512
 *   stream      the bytes a peer would send
 * The first 64 bytes of the input also go to jk_zmtp_greeting_check as they
 * are. Anything the decoder hands back must respect its limits; a READY that
 * parses must survive being built and parsed again. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sl_err.h"
#include "sl_frame.h"
#include "zmtp_codec.h"

#define REQUIRE(cond)                                                           \
  do {                                                                          \
    if (!(cond))                                                                \
      abort();                                                                  \
  } while (0)

static const struct sl_limits limit_sets[4] = {
  {4, 64, 256},
  {1, 0, 0},
  {8, 4096, 8192},
  {2, 300, 400},
};

static void check_greeting(const uint8_t *g) {
  char why[128];
  memset(why, 'x', sizeof why);
  if (jk_zmtp_greeting_check(g, why, sizeof why) < 0)
    REQUIRE(memchr(why, '\0', sizeof why) != NULL);
}

static void check_message(struct jk_zmtp_decoder *d, struct sl_limits lim) {
  struct sl_msg m;
  int r = jk_zmtp_decoder_take(d, &m);
  REQUIRE(r == 0 || r == SL_ELIMIT);
  REQUIRE((r == SL_ELIMIT) == (m.dropped_frames > 0));
  REQUIRE(m.oversized_frames <= m.dropped_frames);
  REQUIRE(m.n <= lim.max_frames);
  size_t total = 0;
  for (size_t i = 0; i < m.n; i++) {
    REQUIRE(m.frames[i].len <= lim.max_frame_bytes);
    REQUIRE(m.frames[i].data[m.frames[i].len] == '\0');
    total += m.frames[i].len;
  }
  REQUIRE(total == m.total_bytes && total <= lim.max_total_bytes);
  sl_msg_done(&m);
  /* The decoder starts the next message empty. */
  REQUIRE(d->msg.n == 0 && d->msg.dropped_frames == 0 && !d->in_message);
}

static void check_command(const uint8_t *body, size_t len) {
  char name[256], why[160];
  const uint8_t *data;
  size_t data_len;
  if (jk_zmtp_command_name(body, len, name, &data, &data_len) == 0)
    REQUIRE(data >= body && data + data_len == body + len && strlen(name) <= 255);
  struct jk_zmtp_ready_info info;
  memset(why, 'x', sizeof why);
  if (jk_zmtp_ready_parse(body, len, &info, why, sizeof why) < 0) {
    REQUIRE(memchr(why, '\0', sizeof why) != NULL);
    return;
  }
  REQUIRE(info.socket_type[0] != '\0' && memchr(info.socket_type, '\0', sizeof info.socket_type));
  REQUIRE(info.identity_len <= JK_ZMTP_IDENTITY_MAX);
  /* Build it again and parse that: the same socket type and identity. */
  uint8_t out[512];
  size_t n = jk_zmtp_ready(out, sizeof out, info.socket_type, info.identity, info.identity_len);
  REQUIRE(n > 2);
  size_t h = (out[0] & 0x02) ? 9 : 2;
  struct jk_zmtp_ready_info again;
  REQUIRE(jk_zmtp_ready_parse(out + h, n - h, &again, why, sizeof why) == 0);
  REQUIRE(strcmp(again.socket_type, info.socket_type) == 0);
  REQUIRE(again.identity_len == info.identity_len);
  REQUIRE(memcmp(again.identity, info.identity, info.identity_len) == 0);
}

/* Feeds one chunk; false once the decoder refused the stream. */
static bool feed(struct jk_zmtp_decoder *d, struct sl_limits lim, const uint8_t *p, size_t n) {
  for (;;) {
    size_t used = 0;
    int ev = jk_zmtp_decode(d, p, n, &used);
    if (ev < 0) {
      REQUIRE(ev == -EPROTO || ev == -ENOMEM);
      return false; /* the framing cannot be trusted: a caller stops here */
    }
    REQUIRE(used <= n);
    p += used;
    n -= used;
    if (ev == JK_ZMTP_MESSAGE) {
      check_message(d, lim);
    } else if (ev == JK_ZMTP_COMMAND) {
      REQUIRE(d->command_len <= JK_ZMTP_COMMAND_MAX);
      check_command(d->command_buf, d->command_len);
    } else {
      REQUIRE(ev == JK_ZMTP_NEED_MORE && n == 0);
      return true;
    }
    if (n == 0)
      return true;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size >= JK_ZMTP_GREETING_BYTES)
    check_greeting(data);
  if (size < 1)
    return 0;
  size_t nsizes = data[0] & 0x0f;
  struct sl_limits lim = limit_sets[(data[0] >> 4) & 3];
  bool greeting = data[0] & 0x40;
  data++;
  size--;
  if (nsizes > size)
    nsizes = size;
  const uint8_t *sizes = data;
  data += nsizes;
  size -= nsizes;
  if (greeting && size >= JK_ZMTP_GREETING_BYTES) {
    check_greeting(data);
    data += JK_ZMTP_GREETING_BYTES;
    size -= JK_ZMTP_GREETING_BYTES;
  }
  /* The stream as a bare command body too, to reach the parsers directly. */
  check_command(data, size < JK_ZMTP_COMMAND_MAX ? size : JK_ZMTP_COMMAND_MAX);

  struct jk_zmtp_decoder *d = malloc(sizeof *d);
  if (!d)
    return 0;
  jk_zmtp_decoder_init(d, lim);
  size_t off = 0, turn = 0;
  while (off < size) {
    size_t chunk = size - off;
    if (nsizes) {
      uint8_t b = sizes[turn++ % nsizes];
      size_t want = b < 128 ? (size_t)b + 1 : (size_t)(b - 127) * 512;
      if (want < chunk)
        chunk = want;
    }
    if (!feed(d, lim, data + off, chunk))
      break;
    off += chunk;
  }
  jk_zmtp_decoder_done(d);
  free(d);
  return 0;
}
