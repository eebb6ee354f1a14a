/* Internal to the cell language: the lexer shared by the parser. */
#ifndef JK_LANG_INT_H
#define JK_LANG_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lang.h"

enum tok_kind { T_EOF, T_NEWLINE, T_NAME, T_NUM, T_DUR, T_STR, T_OP, T_PCT, T_PCT2, T_ERR };

struct tok {
  enum tok_kind kind;
  size_t start, end; /* byte offsets of the token's text */
  int line, col;
  char op;        /* T_OP: one of = + - * / ( ) , */
  double num;     /* T_NUM */
  int64_t dur_us; /* T_DUR */
  char *str;      /* T_STR: owned, decoded */
};

struct lexer {
  const char *s;
  size_t len, pos;
  int line, col;
  int depth;            /* open parentheses: newlines inside are whitespace */
  bool open_string;     /* the cell ended inside a string */
  bool trailing_escape; /* the cell ended with a line-continuation backslash */
  struct jk_parse_error *err;
};

static inline bool is_alpha(int c) { return c == '_' || ((c | 32) >= 'a' && (c | 32) <= 'z'); }
static inline bool is_digit(int c) { return c >= '0' && c <= '9'; }
static inline bool is_word(int c) { return is_alpha(c) || is_digit(c); }

/* Records the first error (later ones are ignored); returns SL_EPARSE. */
int jk_lang_error(struct jk_parse_error *err, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int jk_lx_peekc(const struct lexer *lx, size_t ahead);
void jk_lx_bump(struct lexer *lx);
/* Skips blanks, comments and continuations. */
void jk_lx_skip(struct lexer *lx);
/* The next token into *t; t->str is owned by the caller. */
int jk_lex(struct lexer *lx, struct tok *t);

#endif
