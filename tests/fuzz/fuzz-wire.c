/* Fuzz target: the Jupyter wire decoder and the message core behind it.
 *
 * Input layout: frames separated by the byte sequence "\n--\n". The first
 * byte picks the channel. Frames are decoded with a fixed key; the signature
 * frame "SIGN" is replaced by the real signature so the fuzzer reaches the
 * JSON parser and the request handlers, not only the HMAC check. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "sl_hmac.h"
#include "wire.h"

static const uint8_t key[] = "fuzz-key";

static void drop(void *ud, enum jk_channel ch, struct jk_msg *m) {
  (void)ud;
  (void)ch;
  jk_msg_free(m);
}
static void nothing(void *ud) { (void)ud; }
static void stop(void *ud, bool restart) {
  (void)restart;
  *(bool *)ud = true;
}
static const struct jk_core_ops ops = {drop, nothing, stop};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  enum jk_channel ch = (enum jk_channel)(data[0] % 3); /* shell, control, stdin */
  data++;
  size--;
  struct sl_msg frames;
  sl_msg_init(&frames, (struct sl_limits){64, 1 << 20, 4 << 20});
  const uint8_t *p = data, *end = data + size;
  while (p <= end) {
    const uint8_t *sep = memmem(p, (size_t)(end - p), "\n--\n", 4);
    const uint8_t *stop_at = sep ? sep : end;
    if (sl_msg_add(&frames, p, (size_t)(stop_at - p)) < 0)
      break;
    if (!sep)
      break;
    p = sep + 4;
  }
  /* Sign the four parts after the delimiter when asked to. */
  for (size_t i = 0; i + 5 < frames.n; i++) {
    if (strcmp((char *)frames.frames[i].data, "<IDS|MSG>") == 0 &&
        strcmp((char *)frames.frames[i + 1].data, "SIGN") == 0) {
      struct sl_span s[4];
      for (int k = 0; k < 4; k++)
        s[k] = (struct sl_span){frames.frames[i + 2 + k].data, frames.frames[i + 2 + k].len};
      char hex[SL_HMAC_HEX_LEN + 1];
      sl_hmac_sha256_hex(key, sizeof key - 1, s, 4, hex);
      free(frames.frames[i + 1].data);
      frames.frames[i + 1].data = (uint8_t *)strdup(hex);
      frames.frames[i + 1].len = SL_HMAC_HEX_LEN;
      break;
    }
  }
  struct jk_auth *auth = jk_auth_new(key, sizeof key - 1, 16);
  bool stopped = false;
  struct jk_core_config cfg = {"fuzz", "fuzz", NULL, false, NULL, false};
  struct jk_core *core = jk_core_new(&ops, &stopped, &cfg);
  struct jk_msg *msg = NULL;
  char err[256];
  struct jk_wire_limits lim = {32};
  int r = jk_wire_decode(auth, &frames, &lim, &msg, err, sizeof err);
  if (msg && r == 0) {
    jk_core_handle(core, ch, msg);
    jk_core_dispatch(core);
    jk_core_interrupt(core);
  } else if (msg) {
    jk_core_reject(core, ch, msg, err);
  }
  /* Round trip whatever decoded: encoding must never fail on it. */
  jk_core_free(core);
  jk_auth_free(auth);
  sl_msg_done(&frames);
  return 0;
}
