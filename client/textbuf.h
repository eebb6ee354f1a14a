/* A growing text buffer for building output text. After a failed allocation
 * it stays failed, later appends do nothing, and jk_dbuf_done() returns NULL,
 * so callers check once at the end. Bounded by JK_DBUF_MAX bytes. */
#ifndef JK_TEXTBUF_H
#define JK_TEXTBUF_H

#include <stdbool.h>
#include <stddef.h>

#define JK_DBUF_MAX (64u << 20)

struct jk_dbuf {
  char *s;
  size_t len, cap;
  bool oom;
};

void jk_dbuf_printf(struct jk_dbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The text (owned; "" when nothing was added), or NULL after a failure. */
char *jk_dbuf_done(struct jk_dbuf *b);

/* Makes s, in place, text a terminal shows as text and a JSON string may
 * hold, whatever the gateway sent and wherever a width limit cut it: a
 * control character (C0 but newline and tab, DEL, C1: terminal escapes)
 * and each byte that is not part of well-formed UTF-8 become '?'; a
 * character cut short at the very end is dropped; with one_line, newline
 * and tab become spaces too. Returns s (NULL passes through). */
char *jk_text_clean(char *s, bool one_line);

#endif
