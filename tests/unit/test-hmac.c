/* HMAC-SHA256: RFC 4231 vectors, and a mode that signs stdin-supplied cases
 * so test_hmac_python.py can compare against Python's hmac module. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "sl_hmac.h"

static size_t unhex(const char *hex, unsigned char *out) {
  size_t n = strlen(hex) / 2;
  for (size_t i = 0; i < n; i++)
    sscanf(hex + 2 * i, "%2hhx", &out[i]);
  return n;
}

static void rfc4231(void) {
  static const struct {
    const char *key_hex, *data_hex, *mac;
  } v[] = {
    {"0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", "4869205468657265",
     "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
    {"4a656665", "7768617420646f2079612077616e7420666f72206e6f7468696e673f",
     "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
    /* 131-byte key: longer than the block, so the key is hashed first. */
    {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
     "54657374205573696e67204c6172676572205468616e20426c6f636b2d53697a65204b6579202d2048617368204b"
     "6579204669727374",
     "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
  };
  for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
    unsigned char key[256], data[256];
    size_t kl = unhex(v[i].key_hex, key), dl = unhex(v[i].data_hex, data);
    char hex[SL_HMAC_HEX_LEN + 1];
    /* Split the data in two parts: the result must not depend on the split. */
    struct sl_span parts[2] = {{data, dl / 3}, {data + dl / 3, dl - dl / 3}};
    sl_hmac_sha256_hex(key, kl, parts, 2, hex);
    CHECK_STR(hex, v[i].mac);
    CHECK(sl_hmac_hex_equal(v[i].mac, hex, strlen(hex)));
  }
  /* A prepared key signs as the one-shot call does, again and again. */
  unsigned char k3[256], d3[256];
  size_t k3l = unhex(v[2].key_hex, k3), d3l = unhex(v[2].data_hex, d3);
  struct sl_hmac_key *pk = sl_hmac_key_new(k3, k3l);
  struct sl_span whole = {d3, d3l};
  for (int i = 0; i < 2 && pk; i++) {
    char phex[SL_HMAC_HEX_LEN + 1];
    sl_hmac_key_sign_hex(pk, &whole, 1, phex);
    CHECK_STR(phex, v[2].mac);
  }
  CHECK(pk != NULL);
  CHECK(sl_hmac_key_free(pk) == NULL);
  char hex[SL_HMAC_HEX_LEN + 1];
  struct sl_span one = {"x", 1};
  sl_hmac_sha256_hex((const unsigned char *)"k", 1, &one, 1, hex);
  char wrong[SL_HMAC_HEX_LEN + 1];
  memcpy(wrong, hex, sizeof wrong);
  wrong[10] = wrong[10] == 'a' ? 'b' : 'a';
  CHECK(!sl_hmac_hex_equal(hex, wrong, SL_HMAC_HEX_LEN));
  CHECK(!sl_hmac_hex_equal(hex, hex, SL_HMAC_HEX_LEN - 1));
  CHECK(!sl_hmac_hex_equal(hex, "", 0));
}

/* A prepared key (libsodium state copied per signature) against the
 * one-shot call (libsodium) over every key length around the block size and
 * messages cut into parts at every kind of offset. */
static void prepared_matches_one_shot(void) {
  unsigned char key[300], data[1100];
  for (size_t i = 0; i < sizeof key; i++)
    key[i] = (unsigned char)(i * 7 + 3);
  for (size_t i = 0; i < sizeof data; i++)
    data[i] = (unsigned char)(i * 13 + 5);
  size_t key_lens[] = {0, 1, 36, 63, 64, 65, 128, 299};
  size_t data_lens[] = {0, 1, 55, 56, 63, 64, 65, 119, 120, 128, 500, 1099};
  int mismatches = 0;
  for (size_t a = 0; a < sizeof key_lens / sizeof *key_lens; a++) {
    struct sl_hmac_key *pk = sl_hmac_key_new(key, key_lens[a]);
    CHECK(pk != NULL);
    for (size_t b = 0; pk && b < sizeof data_lens / sizeof *data_lens; b++) {
      size_t dl = data_lens[b];
      for (size_t cut = 0; cut <= dl; cut += dl / 7 + 1) {
        size_t cut2 = cut + (dl - cut) / 2;
        struct sl_span parts[3] = {{data, cut}, {data + cut, cut2 - cut}, {data + cut2, dl - cut2}};
        char want[SL_HMAC_HEX_LEN + 1], got[SL_HMAC_HEX_LEN + 1];
        sl_hmac_sha256_hex(key, key_lens[a], parts, 3, want);
        sl_hmac_key_sign_hex(pk, parts, 3, got);
        mismatches += strcmp(want, got) != 0;
      }
    }
    sl_hmac_key_free(pk);
  }
  CHECK_INT(mismatches, 0);
}

/* Reads lines "KEYHEX PART1HEX PART2HEX ..." and prints the HMAC of each,
 * signed with a prepared key. */
static int sign_stdin(void) {
  char *line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, stdin) > 0) {
    unsigned char *bufs[16];
    struct sl_span parts[16];
    size_t n = 0, kl = 0;
    unsigned char *key = NULL;
    for (char *tok = strtok(line, " \n"); tok && n < 16; tok = strtok(NULL, " \n")) {
      unsigned char *b = malloc(strlen(tok) / 2 + 1);
      size_t len = unhex(tok, b);
      if (!key) {
        key = b;
        kl = len;
      } else {
        bufs[n] = b;
        parts[n++] = (struct sl_span){b, len};
      }
    }
    char hex[SL_HMAC_HEX_LEN + 1] = "";
    struct sl_hmac_key *pk = sl_hmac_key_new(key, kl);
    if (pk)
      sl_hmac_key_sign_hex(pk, parts, n, hex);
    sl_hmac_key_free(pk);
    printf("%s\n", hex);
    free(key);
    for (size_t i = 0; i < n; i++)
      free(bufs[i]);
  }
  free(line);
  return 0;
}

int main(int argc, char **argv) {
  sl_crypto_init();
  if (argc > 1 && strcmp(argv[1], "--sign-stdin") == 0)
    return sign_stdin();
  rfc4231();
  prepared_matches_one_shot();
  TEST_MAIN_END();
}
