/* The cell language's lexer. It works on demand over the whole cell: `\` at
 * the end of a line and newlines inside parentheses are whitespace, `#`
 * starts a comment, strings may span lines. Lines and columns are 1-based;
 * columns count code points. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lang_int.h"
#include "sl_err.h"
#include "sl_time.h"

__attribute__((format(printf, 4, 5))) int jk_lang_error(struct jk_parse_error *err, int line,
                                                           int col, const char *fmt, ...) {
  if (err && err->line == 0) {
    va_list ap;
    va_start(ap, fmt);
    err->line = line;
    err->col = col;
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
  }
  return SL_EPARSE;
}

int jk_lx_peekc(const struct lexer *lx, size_t ahead) {
  return lx->pos + ahead < lx->len ? (unsigned char)lx->s[lx->pos + ahead] : -1;
}

void jk_lx_bump(struct lexer *lx) {
  unsigned char c = (unsigned char)lx->s[lx->pos++];
  if (c == '\n') {
    lx->line++;
    lx->col = 1;
  } else if ((c & 0xC0) != 0x80) {
    lx->col++;
  }
}

/* Skips blanks, comments and line continuations; stops at a newline that
 * ends a statement. */
void jk_lx_skip(struct lexer *lx) {
  for (;;) {
    int c = jk_lx_peekc(lx, 0);
    if (c == ' ' || c == '\t' || c == '\r' || (c == '\n' && lx->depth > 0)) {
      jk_lx_bump(lx);
    } else if (c == '#') {
      while (jk_lx_peekc(lx, 0) != -1 && jk_lx_peekc(lx, 0) != '\n')
        jk_lx_bump(lx);
    } else if (c == '\\') {
      size_t k = 1;
      while (jk_lx_peekc(lx, k) == ' ' || jk_lx_peekc(lx, k) == '\t' || jk_lx_peekc(lx, k) == '\r')
        k++;
      int after = jk_lx_peekc(lx, k);
      if (after != '\n' && after != -1)
        return;
      while (k-- > 0)
        jk_lx_bump(lx);
      if (after == '\n')
        jk_lx_bump(lx);
      /* nothing but blanks after the continuation: more lines are expected,
       * unless a blank line came, which ends the statement (a console's
       * Enter on an empty line sends the cell) */
      size_t rest = lx->pos, newlines = 0;
      while (rest < lx->len && strchr(" \t\r\n", lx->s[rest]))
        newlines += lx->s[rest++] == '\n';
      if (rest == lx->len && newlines == 0)
        lx->trailing_escape = true;
    } else {
      return;
    }
  }
}

static int lex_string(struct lexer *lx, struct tok *t) {
  size_t size = 1; /* the decoded string is no longer than its source text */
  while (lx->pos + size < lx->len && lx->s[lx->pos + size] != '"')
    size += lx->s[lx->pos + size] == '\\' ? 2 : 1;
  char *buf = malloc(size);
  size_t n = 0;
  if (!buf)
    return -ENOMEM;
  jk_lx_bump(lx); /* the opening quote */
  for (;;) {
    int c = jk_lx_peekc(lx, 0);
    if (c == -1) {
      lx->open_string = true;
      free(buf);
      return jk_lang_error(lx->err, t->line, t->col, "unterminated string (expected a closing '\"')");
    }
    if (c == '"')
      break;
    if (c == '\\') {
      int e = jk_lx_peekc(lx, 1);
      char d = e == '"' ? '"' : e == '\\' ? '\\' : e == 'n' ? '\n' : e == 't' ? '\t' : 0;
      if (!d) {
        int line = lx->line, col = lx->col;
        free(buf);
        if (e == -1) {
          lx->open_string = true;
          return jk_lang_error(lx->err, t->line, t->col, "unterminated string (expected a closing '\"')");
        }
        return jk_lang_error(lx->err, line, col,
                         "unknown escape in string (expected \\\", \\\\, \\n or \\t)");
      }
      jk_lx_bump(lx);
      c = d;
    }
    jk_lx_bump(lx);
    buf[n++] = (char)c;
  }
  jk_lx_bump(lx);
  buf[n] = '\0';
  t->kind = T_STR;
  t->str = buf;
  return 0;
}

/* Numbers: 2000, 0.60, .5, 3e-4; a letter suffix makes a duration (90s). */
static int lex_number(struct lexer *lx, struct tok *t) {
  size_t start = lx->pos;
  while (is_digit(jk_lx_peekc(lx, 0)))
    jk_lx_bump(lx);
  if (jk_lx_peekc(lx, 0) == '.' && is_digit(jk_lx_peekc(lx, 1)))
    for (jk_lx_bump(lx); is_digit(jk_lx_peekc(lx, 0));)
      jk_lx_bump(lx);
  int e1 = jk_lx_peekc(lx, 1);
  if ((jk_lx_peekc(lx, 0) | 32) == 'e' &&
      (is_digit(e1) || ((e1 == '+' || e1 == '-') && is_digit(jk_lx_peekc(lx, 2))))) {
    jk_lx_bump(lx);
    jk_lx_bump(lx);
    while (is_digit(jk_lx_peekc(lx, 0)))
      jk_lx_bump(lx);
  }
  size_t num_end = lx->pos;
  while (is_word(jk_lx_peekc(lx, 0)))
    jk_lx_bump(lx);
  char text[64];
  size_t n = lx->pos - start;
  if (n >= sizeof text)
    return jk_lang_error(lx->err, t->line, t->col, "number too long");
  memcpy(text, lx->s + start, n);
  text[n] = '\0';
  if (lx->pos > num_end) {
    if (sl_time_parse_duration(text, &t->dur_us) < 0)
      return jk_lang_error(lx->err, t->line, t->col,
                       "invalid number or duration '%s' (expected a unit ms, s, m, h or d)", text);
    t->kind = T_DUR;
    return 0;
  }
  t->num = strtod(text, NULL);
  if (!isfinite(t->num))
    return jk_lang_error(lx->err, t->line, t->col, "number '%s' out of range", text);
  t->kind = T_NUM;
  return 0;
}

/* Lexes the next token into *t (t->str owned by the caller). Returns 0, or
 * SL_EPARSE with lx->err filled (t->kind T_ERR), or -ENOMEM. */
int jk_lex(struct lexer *lx, struct tok *t) {
  memset(t, 0, sizeof *t);
  jk_lx_skip(lx);
  t->start = lx->pos;
  t->line = lx->line;
  t->col = lx->col;
  int c = jk_lx_peekc(lx, 0), r = 0;
  if (c == -1) {
    t->kind = T_EOF;
  } else if (c == '\n') {
    jk_lx_bump(lx);
    t->kind = T_NEWLINE;
  } else if (is_alpha(c)) {
    while (is_word(jk_lx_peekc(lx, 0)))
      jk_lx_bump(lx);
    t->kind = T_NAME;
  } else if (is_digit(c) || (c == '.' && is_digit(jk_lx_peekc(lx, 1)))) {
    r = lex_number(lx, t);
  } else if (c == '"') {
    r = lex_string(lx, t);
  } else if (c == '%') {
    jk_lx_bump(lx);
    t->kind = T_PCT;
    if (jk_lx_peekc(lx, 0) == '%') {
      jk_lx_bump(lx);
      t->kind = T_PCT2;
    }
  } else if (c != 0 && strchr("=+-*/(),", c)) {
    jk_lx_bump(lx);
    t->kind = T_OP;
    t->op = (char)c;
    if (c == '(')
      lx->depth++;
    else if (c == ')' && lx->depth > 0)
      lx->depth--;
  } else if (c < 0x20 || c == 0x7f) {
    r = jk_lang_error(lx->err, t->line, t->col, "unexpected control character (code %d)", c);
  } else if (c < 0x80) {
    r = jk_lang_error(lx->err, t->line, t->col, "unexpected character '%c'", c);
  } else {
    r = jk_lang_error(lx->err, t->line, t->col, "unexpected non-ASCII character");
  }
  if (r < 0) {
    free(t->str);
    t->str = NULL;
    t->kind = T_ERR;
  }
  t->end = lx->pos;
  return r;
}
