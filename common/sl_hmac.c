/* HMAC-SHA256, SHA-256 and random bytes, all through libsodium.
 *
 * Every Jupyter message the kernel sends or accepts is signed or checked
 * once with the same key, so a prepared key (sl_hmac_key) is libsodium's
 * HMAC state after both pad blocks (RFC 2104), copied for each signature. */
#include "sl_hmac.h"
#include "sl_err.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

struct sl_hmac_key {
  crypto_auth_hmacsha256_state st;
};

int sl_crypto_init(void) { return sodium_init() < 0 ? SL_ENOTSUP : 0; }

void sl_hmac_sha256_hex(const uint8_t *key, size_t key_len, const struct sl_span *parts,
                        size_t n_parts, char ret_hex[SL_HMAC_HEX_LEN + 1]) {
  crypto_auth_hmacsha256_state st;
  unsigned char mac[crypto_auth_hmacsha256_BYTES];
  crypto_auth_hmacsha256_init(&st, key, key_len);
  for (size_t i = 0; i < n_parts; i++)
    crypto_auth_hmacsha256_update(&st, parts[i].data, parts[i].len);
  crypto_auth_hmacsha256_final(&st, mac);
  sodium_bin2hex(ret_hex, SL_HMAC_HEX_LEN + 1, mac, sizeof mac);
  sodium_memzero(&st, sizeof st);
}

/* ---- prepared keys ------------------------------------------------------ */

struct sl_hmac_key *sl_hmac_key_new(const uint8_t *key, size_t key_len) {
  struct sl_hmac_key *k = calloc(1, sizeof *k);
  if (!k)
    return NULL;
  crypto_auth_hmacsha256_init(&k->st, key, key_len);
  return k;
}

struct sl_hmac_key *sl_hmac_key_free(struct sl_hmac_key *k) {
  if (k) {
    sodium_memzero(k, sizeof *k);
    free(k);
  }
  return NULL;
}

void sl_hmac_key_sign_hex(const struct sl_hmac_key *k, const struct sl_span *parts, size_t n_parts,
                          char ret_hex[SL_HMAC_HEX_LEN + 1]) {
  unsigned char mac[crypto_auth_hmacsha256_BYTES];
  crypto_auth_hmacsha256_state st = k->st;
  for (size_t i = 0; i < n_parts; i++)
    crypto_auth_hmacsha256_update(&st, parts[i].data, parts[i].len);
  crypto_auth_hmacsha256_final(&st, mac);
  sodium_bin2hex(ret_hex, SL_HMAC_HEX_LEN + 1, mac, sizeof mac);
  sodium_memzero(&st, sizeof st);
}

bool sl_hmac_hex_equal(const char *expected_hex, const void *got, size_t got_len) {
  if (got_len != SL_HMAC_HEX_LEN)
    return false;
  return sodium_memcmp(expected_hex, got, SL_HMAC_HEX_LEN) == 0;
}

void sl_sha256_hex(const void *data, size_t len, char ret_hex[SL_HMAC_HEX_LEN + 1]) {
  unsigned char h[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(h, data, len);
  sodium_bin2hex(ret_hex, SL_HMAC_HEX_LEN + 1, h, sizeof h);
}

void sl_random_bytes(void *buf, size_t n) { randombytes_buf(buf, n); }
