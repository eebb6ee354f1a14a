/* The kernel's upload hash (khash.h): libcrypto, loaded on first use, and
 * libsodium give the same SHA-256 as the standard's test vectors, for
 * inputs given whole or in pieces of every size; libcrypto is the one used
 * where it is installed (as on every machine that has libcurl), and a hash
 * dropped unfinished frees what it held (the sanitizer build checks). */
#include "harness.h"
#include "khash.h"

#include <stdlib.h>
#include <string.h>

static void hex_of(bool fast, const void *data, size_t len, size_t piece, char hex[65]) {
  struct jk_hash h;
  jk_hash_init(&h, fast);
  for (size_t off = 0; off < len; off += piece)
    jk_hash_update(&h, (const char *)data + off, len - off < piece ? len - off : piece);
  jk_hash_final_hex(&h, hex);
}

int main(void) {
  struct jk_hash h;
  jk_hash_init(&h, true);
  CHECK(jk_hash_is_fast(&h));
  jk_hash_drop(&h);
  jk_hash_init(&h, false);
  CHECK(!jk_hash_is_fast(&h));
  jk_hash_final_hex(&h, (char[65]){0});

  /* FIPS 180-2's examples */
  static const struct {
    const char *in, *out;
  } v[] = {
    {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
    {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
    {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
     "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
  };
  char hex[65];
  for (size_t i = 0; i < sizeof v / sizeof *v; i++)
    for (int fast = 0; fast < 2; fast++) {
      hex_of(fast, v[i].in, strlen(v[i].in), 1, hex);
      CHECK_STR(hex, v[i].out);
      hex_of(fast, v[i].in, strlen(v[i].in), 64, hex);
      CHECK_STR(hex, v[i].out);
    }
  /* a million 'a's */
  size_t n = 1000000;
  char *a = malloc(n);
  if (a) {
    memset(a, 'a', n);
    for (int fast = 0; fast < 2; fast++) {
      hex_of(fast, a, n, 4093, hex);
      CHECK_STR(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    }
    free(a);
  }
  /* the two agree on odd pieces of random bytes */
  unsigned char buf[70000];
  randombytes_buf(buf, sizeof buf);
  char x[65], y[65];
  for (size_t piece = 1; piece < sizeof buf; piece = piece * 3 + 7) {
    hex_of(true, buf, sizeof buf, piece, x);
    hex_of(false, buf, sizeof buf, piece, y);
    CHECK_STR(x, y);
  }
  TEST_MAIN_END();
}
