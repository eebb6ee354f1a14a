/* The growing text buffer behind the kernel's rendered output (textbuf.h).
 * Invariant: s is NUL-terminated whenever it is non-NULL. */
#include "textbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void jk_dbuf_printf(struct jk_dbuf *b, const char *fmt, ...) {
  if (b->oom)
    return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->oom = true;
      return;
    }
    if (b->s && b->len + (size_t)n < b->cap) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = (b->cap + (size_t)n + 64) * 2;
    if (cap > JK_DBUF_MAX) {
      b->oom = true;
      return;
    }
    char *s = realloc(b->s, cap);
    if (!s) {
      b->oom = true;
      return;
    }
    b->s = s;
    b->cap = cap;
  }
}

char *jk_dbuf_done(struct jk_dbuf *b) {
  if (b->oom) {
    free(b->s);
    return NULL;
  }
  return b->s ? b->s : strdup("");
}


/* The length of the well-formed UTF-8 character at p (at most n bytes), 0
 * when there is none; *cut is set when the bytes end inside one that was
 * well-formed so far. */
static size_t utf8_char(const unsigned char *p, size_t n, bool *cut) {
  *cut = false;
  size_t len = p[0] < 0x80 ? 1 : p[0] >= 0xC2 && p[0] <= 0xDF ? 2 : p[0] >= 0xE0 && p[0] <= 0xEF ? 3
               : p[0] >= 0xF0 && p[0] <= 0xF4 ? 4 : 0;
  for (size_t i = 1; i < len; i++) {
    if (i == n) {
      *cut = true;
      return 0;
    }
    /* continuation bytes; no overlong forms, surrogates or code points past U+10FFFF */
    unsigned char lo = 0x80, hi = 0xBF;
    if (i == 1 && p[0] == 0xE0) lo = 0xA0;
    if (i == 1 && p[0] == 0xED) hi = 0x9F;
    if (i == 1 && p[0] == 0xF0) lo = 0x90;
    if (i == 1 && p[0] == 0xF4) hi = 0x8F;
    if (p[i] < lo || p[i] > hi) return 0;
  }
  return len;
}

char *jk_text_clean(char *s, bool one_line) {
  if (!s) return NULL;
  unsigned char *p = (unsigned char *)s;
  size_t n = strlen(s), o = 0;
  for (size_t i = 0; i < n;) {
    bool cut;
    size_t len = utf8_char(p + i, n - i, &cut);
    if (cut) break; /* a character cut short at the end */
    if (len == 0) {
      p[o++] = '?';
      i++;
    } else if (len == 1 && (p[i] < 0x20 || p[i] == 0x7F)) {
      bool keep = !one_line && (p[i] == '\n' || p[i] == '\t');
      p[o++] = keep ? p[i] : (p[i] == '\n' || p[i] == '\t') ? ' ' : '?';
      i++;
    } else if (len == 2 && p[i] == 0xC2 && p[i + 1] < 0xA0) {
      p[o++] = '?'; /* U+0080..U+009F: C1 controls, CSI among them */
      i += 2;
    } else {
      memmove(p + o, p + i, len);
      o += len;
      i += len;
    }
  }
  p[o] = 0;
  return s;
}
