/* SHA-256 of large inputs with libcrypto, which uses the CPU's SHA
 * instructions where it has them (libsodium's code is portable C; bench/
 * upload measures the difference): files that identify a run, uploads as
 * they arrive, fetched copies. In the S3 library (meson: s3_dep), so
 * that only the programs that handle large files load libcrypto; the
 * kernel, whose memory is measured, hashes with libsodium. */
#ifndef SL_DIGEST_H
#define SL_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#include "sl_ident.h"

struct sl_sha256;

/* A running hash; NULL on OOM. */
struct sl_sha256 *sl_sha256_new(void);
struct sl_sha256 *sl_sha256_free(struct sl_sha256 *h);
/* Starts over, as new. */
void sl_sha256_reset(struct sl_sha256 *h);
void sl_sha256_update(struct sl_sha256 *h, const void *data, size_t len);
/* The hash of what was given as lowercase hex; h starts over. */
void sl_sha256_final_hex(struct sl_sha256 *h, char hex[SL_SHA256_HEX_LEN + 1]);

/* SHA-256 of the regular file at path as lowercase hex into ret_hex.
 * -errno (-EISDIR for a folder), or SL_ELIMIT past max_bytes (0: none). */
int sl_sha256_file(const char *path, int64_t max_bytes, char ret_hex[SL_SHA256_HEX_LEN + 1]);
/* The id of the first n files of the data set folder dir (sl_ident.h), its
 * files read and hashed. -errno of the first that cannot be (-ENOENT: it
 * is missing). */
int sl_sha256_image_set(const char *dir, size_t n, char ret_hex[SL_SHA256_HEX_LEN + 1]);

#endif
