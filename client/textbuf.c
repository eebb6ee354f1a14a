/* The growing text buffer behind the kernel's rendered output (textbuf.h).
 * Invariant: s is NUL-terminated whenever it is non-NULL. */
#include "textbuf.h"

#include "sl_json.h"

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

/* Whether s[0..n) is the start of a character cut short: a lead byte and
 * only continuation bytes after it, fewer than the lead asks for. */
static bool cut_short(const unsigned char *s, size_t n) {
  size_t want = s[0] >= 0xC2 && s[0] <= 0xDF ? 2 : s[0] >= 0xE0 && s[0] <= 0xEF ? 3
                : s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : 0;
  if (n >= want)
    return false;
  for (size_t i = 1; i < n; i++)
    if ((s[i] & 0xC0) != 0x80)
      return false;
  return true;
}

char *jk_text_clean(char *s, bool one_line) {
  if (!s) return NULL;
  unsigned char *p = (unsigned char *)s;
  size_t n = strlen(s), o = 0;
  for (size_t i = 0; i < n;) {
    size_t len = sl_utf8_char(s + i, n - i);
    if (len == 0 && cut_short(p + i, n - i)) break; /* cut at the very end: dropped */
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
