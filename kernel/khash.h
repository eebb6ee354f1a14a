/* SHA-256 of a file the kernel uploads (upload.c). The kernel does not link
 * libcrypto, which would add about 1.4 MiB to every idle kernel (bench/
 * kernel_rtt measures that memory); the first upload loads it with dlopen,
 * for its SHA-256 on the CPU's SHA instructions (bench/upload), and a
 * kernel without it hashes with libsodium. */
#ifndef JK_KHASH_H
#define JK_KHASH_H

#include <sodium.h>
#include <stdbool.h>
#include <stddef.h>

struct jk_hash {
  void *ctx;                        /* libcrypto's EVP_MD_CTX, or NULL: libsodium's below */
  crypto_hash_sha256_state sodium;
};

/* Starts a hash: with libcrypto when fast and it can be loaded. */
void jk_hash_init(struct jk_hash *h, bool fast);
void jk_hash_update(struct jk_hash *h, const void *data, size_t len);
/* The hash as 64 lowercase hex digits; h is done (jk_hash_init again to reuse). */
void jk_hash_final_hex(struct jk_hash *h, char hex[65]);
/* Frees a hash not finished (an upload stopped). */
void jk_hash_drop(struct jk_hash *h);
/* Whether h hashes with libcrypto. */
bool jk_hash_is_fast(const struct jk_hash *h);

#endif
