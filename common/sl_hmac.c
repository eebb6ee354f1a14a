/* HMAC-SHA256, SHA-256 and random bytes over libsodium, with one fast path.
 *
 * Every Jupyter message the kernel sends or accepts is signed or checked
 * once with the same key, so a prepared key (sl_hmac_key) is the HMAC state
 * after both pad blocks (RFC 2104), copied for each signature. On x86-64
 * CPUs with the SHA extensions a prepared key hashes with those
 * instructions, several times faster than libsodium's portable SHA-256 (the
 * same instructions Python's hmac reaches through OpenSSL); elsewhere it
 * uses libsodium's HMAC state. The one-shot sl_hmac_sha256_hex() always uses
 * libsodium, so the tests compare the two paths. */
#include "sl_hmac.h"
#include "sl_err.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_SHA_NI 1
#include <cpuid.h>
#include <immintrin.h>
#endif

#define BLOCK 64 /* SHA-256 block bytes */
#define HASH 32  /* SHA-256 output bytes */

/* A SHA-256 computation for the SHA-extension path. */
struct sha256 {
  uint32_t h[8];
  uint64_t bytes;           /* hashed so far, block included */
  unsigned char buf[BLOCK]; /* a partial block */
  size_t fill;
};

struct sl_hmac_key {
  bool ni; /* the SHA-extension path: inner/outer, else sodium */
  struct sha256 inner, outer;
  crypto_auth_hmacsha256_state sodium;
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

/* ---- SHA-256 with the SHA extensions ------------------------------------ */

#ifdef HAVE_SHA_NI
static const uint32_t K[64] = {
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static bool cpu_has_sha_ni(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSSE3) || !(c & bit_SSE4_1))
    return false;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 29)); /* CPUID.7.0:EBX.SHA */
}

/* Hashes n whole blocks into h: 16 groups of four rounds, each group's
 * message words made from the four groups before it. */
__attribute__((target("sha,sse4.1,ssse3"))) static void
compress(uint32_t h[8], const unsigned char *data, size_t n) {
  const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
  /* The instructions keep the state as (A,B,E,F) and (C,D,G,H). */
  __m128i t = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[0]), 0xB1);
  __m128i s1 = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[4]), 0x1B);
  __m128i s0 = _mm_alignr_epi8(t, s1, 8);
  s1 = _mm_blend_epi16(s1, t, 0xF0);
  for (; n > 0; n--, data += BLOCK) {
    __m128i save0 = s0, save1 = s1, w[4];
    for (int g = 0; g < 16; g++) {
      __m128i cur;
      if (g < 4) {
        cur = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(data + 16 * g)), bswap);
      } else { /* w[g&3] is group g-4, then g-3, g-2, g-1 */
        __m128i x = _mm_sha256msg1_epu32(w[g & 3], w[(g + 1) & 3]);
        x = _mm_add_epi32(x, _mm_alignr_epi8(w[(g + 3) & 3], w[(g + 2) & 3], 4));
        cur = _mm_sha256msg2_epu32(x, w[(g + 3) & 3]);
      }
      w[g & 3] = cur;
      __m128i m = _mm_add_epi32(cur, _mm_loadu_si128((const __m128i *)&K[4 * g]));
      s1 = _mm_sha256rnds2_epu32(s1, s0, m);
      s0 = _mm_sha256rnds2_epu32(s0, s1, _mm_shuffle_epi32(m, 0x0E));
    }
    s0 = _mm_add_epi32(s0, save0);
    s1 = _mm_add_epi32(s1, save1);
  }
  t = _mm_shuffle_epi32(s0, 0x1B);
  s1 = _mm_shuffle_epi32(s1, 0xB1);
  _mm_storeu_si128((__m128i *)&h[0], _mm_blend_epi16(t, s1, 0xF0));
  _mm_storeu_si128((__m128i *)&h[4], _mm_alignr_epi8(s1, t, 8));
}

static void sha_init(struct sha256 *s) {
  static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(s->h, iv, sizeof iv);
  s->bytes = 0;
  s->fill = 0;
}

static void sha_update(struct sha256 *s, const unsigned char *p, size_t len) {
  s->bytes += len;
  if (s->fill) {
    size_t take = BLOCK - s->fill < len ? BLOCK - s->fill : len;
    memcpy(s->buf + s->fill, p, take);
    s->fill += take;
    p += take;
    len -= take;
    if (s->fill < BLOCK)
      return;
    compress(s->h, s->buf, 1);
    s->fill = 0;
  }
  if (len >= BLOCK) {
    compress(s->h, p, len / BLOCK);
    p += len - len % BLOCK;
    len %= BLOCK;
  }
  memcpy(s->buf, p, len);
  s->fill = len;
}

static void sha_final(struct sha256 *s, unsigned char out[HASH]) {
  uint64_t bits = s->bytes * 8;
  s->buf[s->fill++] = 0x80;
  if (s->fill > BLOCK - 8) {
    memset(s->buf + s->fill, 0, BLOCK - s->fill);
    compress(s->h, s->buf, 1);
    s->fill = 0;
  }
  memset(s->buf + s->fill, 0, BLOCK - 8 - s->fill);
  for (int i = 0; i < 8; i++)
    s->buf[BLOCK - 1 - i] = (unsigned char)(bits >> (8 * i));
  compress(s->h, s->buf, 1);
  for (int i = 0; i < 8; i++)
    for (int k = 0; k < 4; k++)
      out[4 * i + k] = (unsigned char)(s->h[i] >> (24 - 8 * k));
}
#endif

/* ---- prepared keys ------------------------------------------------------ */

struct sl_hmac_key *sl_hmac_key_new(const uint8_t *key, size_t key_len) {
  struct sl_hmac_key *k = calloc(1, sizeof *k);
  if (!k)
    return NULL;
#ifdef HAVE_SHA_NI
  if (cpu_has_sha_ni()) {
    unsigned char block[BLOCK] = {0}, pad[BLOCK];
    if (key_len > BLOCK) /* a long key is hashed first */
      crypto_hash_sha256(block, key, key_len);
    else if (key_len)
      memcpy(block, key, key_len);
    for (size_t i = 0; i < BLOCK; i++)
      pad[i] = block[i] ^ 0x36;
    sha_init(&k->inner);
    sha_update(&k->inner, pad, BLOCK);
    for (size_t i = 0; i < BLOCK; i++)
      pad[i] = block[i] ^ 0x5c;
    sha_init(&k->outer);
    sha_update(&k->outer, pad, BLOCK);
    sodium_memzero(block, sizeof block);
    sodium_memzero(pad, sizeof pad);
    k->ni = true;
    return k;
  }
#endif
  crypto_auth_hmacsha256_init(&k->sodium, key, key_len);
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
  unsigned char mac[HASH];
#ifdef HAVE_SHA_NI
  if (k->ni) {
    struct sha256 st = k->inner;
    unsigned char inner[HASH];
    for (size_t i = 0; i < n_parts; i++)
      sha_update(&st, parts[i].data, parts[i].len);
    sha_final(&st, inner);
    st = k->outer;
    sha_update(&st, inner, HASH);
    sha_final(&st, mac);
    sodium_bin2hex(ret_hex, SL_HMAC_HEX_LEN + 1, mac, sizeof mac);
    sodium_memzero(&st, sizeof st);
    sodium_memzero(inner, sizeof inner);
    return;
  }
#endif
  crypto_auth_hmacsha256_state st = k->sodium;
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
