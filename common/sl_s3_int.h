/* What sl_s3.c (presigning) and sl_s3_client.c (transfers) share. */
#ifndef SL_S3_INT_H
#define SL_S3_INT_H

#include <stdbool.h>
#include <stddef.h>

/* s is 64 lowercase hex digits (a SHA-256). */
bool sl_s3_hex64(const char *s);
/* Appends printf output to buf at *len; SL_ELIMIT when it does not fit. */
int sl_s3_cat(char *buf, size_t size, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Writes the message into err (when there is room) and returns r. */
int sl_s3_say(char *err, size_t size, int r, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
