/* HMAC-SHA256 signing and constant-time verification (libsodium).
 *
 * Keys of any length are accepted (Jupyter keys are 36+ bytes), so the
 * init/update/final form is used; the one-shot call takes 32-byte keys only. */
#ifndef SL_HMAC_H
#define SL_HMAC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_HMAC_HEX_LEN 64

struct sl_span {
  const void *data;
  size_t len;
};

/* Library init; safe to call more than once. Returns 0 or SL_ENOTSUP. */
int sl_crypto_init(void);
/* HMAC-SHA256 over the concatenation of parts, as lowercase hex into
 * ret_hex (SL_HMAC_HEX_LEN + 1 bytes, NUL-terminated). */
void sl_hmac_sha256_hex(const uint8_t *key, size_t key_len, const struct sl_span *parts,
                        size_t n_parts, char ret_hex[SL_HMAC_HEX_LEN + 1]);
/* A key prepared once for many signatures: the HMAC pads are hashed at
 * creation, so each signature hashes only the message. */
struct sl_hmac_key;
/* key is copied (and wiped with the object). NULL on OOM. */
struct sl_hmac_key *sl_hmac_key_new(const uint8_t *key, size_t key_len);
struct sl_hmac_key *sl_hmac_key_free(struct sl_hmac_key *k);
/* As sl_hmac_sha256_hex() with a prepared key. */
void sl_hmac_key_sign_hex(const struct sl_hmac_key *k, const struct sl_span *parts, size_t n_parts,
                          char ret_hex[SL_HMAC_HEX_LEN + 1]);
/* Constant-time comparison of a received hex signature against the expected
 * one; any length other than 64 fails. */
bool sl_hmac_hex_equal(const char *expected_hex, const void *got, size_t got_len);
/* SHA-256 of data as lowercase hex (tokens are stored as their hash). */
void sl_sha256_hex(const void *data, size_t len, char ret_hex[SL_HMAC_HEX_LEN + 1]);
/* Fills buf with n random bytes. */
void sl_random_bytes(void *buf, size_t n);

#endif
