/* What identifies a run's inputs and programs: SHA-256 as this project
 * writes it, a data set's id and the build id (ELF .note.gnu.build-id) of
 * an executable. Hashing files is sl_digest.h's (libcrypto), for the
 * programs that read large ones. */
#ifndef SL_IDENT_H
#define SL_IDENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_SHA256_HEX_LEN 64
#define SL_BUILD_ID_HEX_MAX 128 /* a build id note holds at most 64 bytes here */

/* A job's id as written ("J000012"): 'J', then the number, at least six
 * digits; the longest is SL_JOB_ID_MAX - 1 bytes. */
#define SL_JOB_ID_MAX 24
char *sl_job_id_str(int64_t id, char *buf, size_t size);
/* The number of a job id as a user may write it (leading zeros as many as
 * they like, "J0000012" for J000012: 7 to 12 bytes), or -1. */
int64_t sl_job_id_parse(const char *s);

/* Whether s is a SHA-256 as this project writes one: 64 lowercase hex digits. */
bool sl_sha256_hex_ok(const char *s);
/* The build id of the ELF file at path ("/proc/self/exe" for this program)
 * as lowercase hex into ret_hex (size >= 2 * 64 + 1). SL_EFORMAT when the
 * file is not a 64-bit little-endian ELF file, SL_ENAME when it has no
 * build id note, -errno when it cannot be read. */
int sl_build_id(const char *path, char *ret_hex, size_t size);

/* The files of an image data set folder (fashion_mnist("FOLDER")) as
 * spotlab-train reads them (kernels/tc_data.c): an eval job the test
 * split's, the first SL_IMAGE_SET_EVAL_FILES; a training job all
 * SL_IMAGE_SET_FILES. */
#define SL_IMAGE_SET_FILES 4
#define SL_IMAGE_SET_EVAL_FILES 2
extern const char *const sl_image_set_files[SL_IMAGE_SET_FILES];
/* The SHA-256 that identifies a data set folder's first n files, given
 * theirs (hexes, in sl_image_set_files' order): of the lines
 * "SHA256  NAME\n" that sha256sum prints for them, in that order. */
void sl_image_set_sha256(const char *const hexes[], size_t n, char ret_hex[SL_SHA256_HEX_LEN + 1]);

#endif
