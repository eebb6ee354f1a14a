/* Front-end services of the cell language: is_complete and completion.
 *
 * Completion looks only at the logical line holding the cursor (physical
 * lines joined by trailing backslashes), up to the word being typed. It
 * splits that text into rough tokens, which is enough to tell which
 * statement the line is and which slot the cursor is in, even when the line
 * does not parse yet. Jupyter counts cursor positions in code points; bytes
 * are used inside and converted at the edges. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lang.h"
#include "sl_err.h"
#include "sl_opt.h"

#define MAX_LINE_TOKENS 256

enum jk_completeness jk_is_complete(const char *code, size_t len) {
  struct jk_cell *cell = NULL;
  struct jk_parse_error err;
  int r = jk_parse(code, len, &cell, &err);
  if (r == 0) {
    jk_cell_free(cell);
    return JK_COMPLETE;
  }
  return r == SL_EPARSE && err.incomplete ? JK_INCOMPLETE : JK_INVALID;
}

void jk_completions_done(struct jk_completions *c) {
  if (!c)
    return;
  for (size_t i = 0; i < c->n; i++)
    free(c->matches[i]);
  free(c->matches);
  memset(c, 0, sizeof *c);
}

/* ---- the matches being collected --------------------------------------- */

struct collector {
  const char *prefix;
  size_t prefix_len;
  char **matches;
  size_t n, cap;
  int err;
};

/* Adds word + suffix when it starts with the typed prefix. */
static void offer(struct collector *c, const char *word, const char *suffix) {
  if (c->err || strncmp(word, c->prefix, c->prefix_len) != 0)
    return;
  if (c->n == c->cap) {
    size_t cap = c->cap ? c->cap * 2 : 16;
    char **m = realloc(c->matches, cap * sizeof *m);
    if (!m) {
      c->err = -ENOMEM;
      return;
    }
    c->matches = m;
    c->cap = cap;
  }
  size_t a = strlen(word), b = strlen(suffix);
  char *s = malloc(a + b + 1);
  if (!s) {
    c->err = -ENOMEM;
    return;
  }
  memcpy(s, word, a);
  memcpy(s + a, suffix, b + 1);
  c->matches[c->n++] = s;
}

static void offer_kind(struct collector *c, enum jk_word_kind want) {
  enum jk_word_kind kind;
  const char *w;
  for (size_t i = 0; (w = jk_lang_word(i, &kind)); i++)
    if (kind == want)
      offer(c, w, "");
}


static int compare(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* ---- the line before the cursor ---------------------------------------- */

struct ltok {
  const char *s;
  size_t n;
  char kind; /* 'w' word, 's' string, 'n' number, 'm' magic (with %), or the char itself */
};

struct line {
  struct ltok t[MAX_LINE_TOKENS];
  size_t n;
  bool dead; /* inside a string or comment, or too long: offer nothing */
};

static bool word_char(int c) {
  return c == '_' || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z');
}

static bool tok_is(const struct ltok *t, const char *word) {
  return t->n == strlen(word) && memcmp(t->s, word, t->n) == 0;
}

static void split_line(const char *s, size_t n, struct line *l) {
  size_t i = 0;
  l->n = 0;
  l->dead = false;
  while (i < n && !l->dead) {
    char c = s[i];
    size_t j = i + 1;
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\\') {
      i++;
      continue;
    }
    if (c == '#') {
      l->dead = true;
      break;
    }
    char kind = c;
    if (c == '"') {
      while (j < n && s[j] != '"')
        j += s[j] == '\\' && j + 1 < n ? 2 : 1;
      if (j >= n)
        l->dead = true;
      j++;
      kind = 's';
    } else if (word_char(c) || c == '%') {
      while (j < n && (word_char(s[j]) || s[j] == '.' || s[j] == '-' || s[j] == '%'))
        j++;
      kind = c == '%' ? 'm' : (c >= '0' && c <= '9') ? 'n' : 'w';
    }
    if (l->n == MAX_LINE_TOKENS) {
      l->dead = true;
      break;
    }
    l->t[l->n++] = (struct ltok){s + i, (j > n ? n : j) - i, kind};
    i = j;
  }
}

/* Byte offset of code point cp (clamped to len). */
static size_t byte_offset(const char *s, size_t len, size_t cp) {
  size_t off = 0;
  for (; off < len && cp > 0; cp--) {
    off++;
    while (off < len && ((unsigned char)s[off] & 0xC0) == 0x80)
      off++;
  }
  return off;
}

static size_t code_points(const char *s, size_t len) {
  size_t n = 0;
  for (size_t i = 0; i < len; i++)
    n += ((unsigned char)s[i] & 0xC0) != 0x80;
  return n;
}

/* Start of the logical line holding offset off. */
static size_t line_start(const char *s, size_t off) {
  size_t start = off;
  while (start > 0 && s[start - 1] != '\n')
    start--;
  while (start > 0) {
    size_t k = start - 1; /* the '\n' ending the previous line */
    while (k > 0 && (s[k - 1] == ' ' || s[k - 1] == '\t' || s[k - 1] == '\r'))
      k--;
    if (k == 0 || s[k - 1] != '\\')
      break;
    for (start = k - 1; start > 0 && s[start - 1] != '\n';)
      start--;
  }
  return start;
}

/* Whether off lies in the body of a %% cell magic. */
static bool in_cell_body(const char *s, size_t len, size_t off) {
  size_t i = 0;
  while (i < len && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n'))
    i++;
  if (i + 1 >= len || s[i] != '%' || s[i + 1] != '%')
    return false;
  while (i < len && s[i] != '\n')
    i++;
  return off > i;
}

/* ---- what fits where --------------------------------------------------- */

struct names {
  const char *const *v;
  const char *kinds; /* 'v', 'm', 'd' per name, or NULL */
  size_t n;
};

/* The names of one kind ('v' variables, 'm' models, 'd' data sets; 0: all). */
static void offer_names(struct collector *c, const struct names *nm, char kind) {
  for (size_t i = 0; nm->v && i < nm->n; i++)
    if (nm->v[i] && (!kind || !nm->kinds || nm->kinds[i] == kind))
      offer(c, nm->v[i], "");
}

/* Options of context not yet given on the line, each with '=' appended. */
static void offer_options(struct collector *c, const char *context, const struct line *l) {
  const char *o;
  for (size_t i = 0; (o = jk_lang_option(context, i)); i++) {
    bool given = false;
    for (size_t k = 0; k + 1 < l->n; k++)
      if (l->t[k].kind == 'w' && l->t[k + 1].kind == '=' && tok_is(&l->t[k], o))
        given = true;
    if (!given)
      offer(c, o, "=");
  }
}

/* After "name=" in an option list: the words its declaration names (yes and
 * no for a boolean, its choices), then names unless only those words fit. */
static void offer_value(struct collector *c, const struct ltok *opt, const struct names *nm) {
  char name[64];
  snprintf(name, sizeof name, "%.*s", (int)(opt->n < sizeof name ? opt->n : 0), opt->s);
  const struct sl_opt *o = jk_lang_option_decl(name);
  if (o && o->type == SL_OPT_BOOL) {
    offer(c, "yes", "");
    offer(c, "no", "");
    return;
  }
  for (const char *p = o ? o->choices : NULL; p && *p;) {
    const char *bar = strchr(p, '|');
    char word[64];
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    snprintf(word, sizeof word, "%.*s", (int)len, p);
    offer(c, word, "");
    p = bar ? bar + 1 : NULL;
  }
  if (o && o->type == SL_OPT_STR && o->choices)
    return;
  offer_names(c, nm, 'v');
}

static void offer_option_slot(struct collector *c, const char *context, const struct line *l,
                              const struct names *nm) {
  const struct ltok *last = &l->t[l->n - 1];
  if (l->n >= 2 && last->kind == '=' && l->t[l->n - 2].kind == 'w')
    offer_value(c, &l->t[l->n - 2], nm);
  else if (last->kind != ',')
    offer_options(c, context, l);
}

/* Inside NAME(...): option names of gpt/mlp, or names. True if the cursor is
 * inside parentheses (then nothing else applies). */
static bool complete_call(struct collector *c, const struct line *l, const struct names *nm) {
  size_t open = 0;
  int depth = 0;
  for (size_t k = l->n; k-- > 0 && !open;) {
    if (l->t[k].kind == ')')
      depth++;
    else if (l->t[k].kind == '(' && depth-- == 0)
      open = k + 1;
  }
  if (!open)
    return false;
  const struct ltok *fn = open >= 2 ? &l->t[open - 2] : NULL, *last = &l->t[l->n - 1];
  bool by_name = fn && (tok_is(fn, "gpt") || tok_is(fn, "mlp"));
  if (by_name && (last->kind == '(' || last->kind == ',')) {
    offer_options(c, tok_is(fn, "gpt") ? "gpt" : "mlp", l);
  } else if (last->kind != 'w' && last->kind != 'n' && last->kind != 's' && last->kind != ')') {
    offer_names(c, nm, 'v');
  }
  return true;
}

static void offer_funcs(struct collector *c, const char *const *funcs) {
  for (size_t i = 0; funcs && funcs[i]; i++)
    offer(c, funcs[i], "");
}

/* After a statement's keyword, what its row in the command table says fits. */
static void complete_statement(struct collector *c, const struct line *l, const struct names *nm) {
  const struct ltok *t = l->t;
  size_t n = l->n;
  char word[16];
  enum jk_cmd id;
  snprintf(word, sizeof word, "%.*s", (int)(t[0].n < 15 ? t[0].n : 15), t[0].s);
  const struct jk_command *cmd = t[0].kind == 'w' && jk_lang_find_command(word, &id) == 0
                                     ? jk_lang_command(id) : NULL;
  if (!cmd || cmd->kind != JK_WORD_STATEMENT) {
    /* NAME = ...: an assignment */
    if (n == 2 && t[1].kind == '=' && t[0].kind == 'w')
      offer_funcs(c, jk_lang_command(JK_CMD_ASSIGN)->funcs);
    offer_names(c, nm, 'v');
    return;
  }
  switch (cmd->complete) {
  case JK_COMPLETE_DECL:
    if (n == 3 && t[2].kind == '=')
      offer_funcs(c, cmd->funcs);
    break;
  case JK_COMPLETE_JOB_ON:
    if (n == 1 || (n == 3 && tok_is(&t[2], "on")))
      offer_names(c, nm, n == 1 ? 'm' : 'd');
    else if (n == 2)
      offer(c, "on", "");
    else if (n >= 4)
      offer_option_slot(c, word, l, nm);
    break;
  case JK_COMPLETE_JOB:
    if (n <= 2)
      offer_names(c, nm, n == 1 ? 'm' : 'v');
    if (n >= 2)
      offer_option_slot(c, word, l, nm);
    break;
  case JK_COMPLETE_NAME:
    if (n == 1)
      offer_names(c, nm, 0);
    break;
  case JK_COMPLETE_EXPR:
    offer_names(c, nm, 'v');
    break;
  case JK_COMPLETE_OPTIONS:
    offer_option_slot(c, word, l, nm);
    break;
  case JK_COMPLETE_NOTHING:
    break;
  }
}

static void complete_line(struct collector *c, const struct line *l, const struct names *nm) {
  if (c->prefix[0] == '%') {
    if (l->n == 0) {
      offer_kind(c, JK_WORD_MAGIC);
      offer_kind(c, JK_WORD_CELL_MAGIC);
    }
    return;
  }
  if (l->n == 0) {
    offer_kind(c, JK_WORD_STATEMENT);
    offer_names(c, nm, 'v');
    return;
  }
  if (l->t[0].kind == 'm') {
    char word[16];
    enum jk_cmd id;
    snprintf(word, sizeof word, "%.*s", (int)(l->t[0].n < 15 ? l->t[0].n : 15), l->t[0].s);
    if (jk_lang_find_command(word, &id) == 0 && jk_lang_command(id)->complete == JK_COMPLETE_OPTIONS)
      offer_option_slot(c, word, l, nm);
    return;
  }
  if (complete_call(c, l, nm))
    return;
  complete_statement(c, l, nm);
}

int jk_complete(const char *code, size_t len, size_t cursor_pos, const char *const *names,
                const char *kinds, size_t n_names, struct jk_completions *ret) {
  struct line *l = NULL;
  struct collector c = {0};
  struct names nm = {names, kinds, n_names};
  if (!code)
    len = 0;
  size_t off = byte_offset(code ? code : "", len, cursor_pos), start = off;
  while (start > 0 && word_char(code[start - 1]))
    start--;
  for (int k = 0; k < 2 && start > 0 && code[start - 1] == '%'; k++)
    start--;
  size_t ls = line_start(code ? code : "", start);
  bool fits = start == ls || strchr(" \t\r\n=,(+-*/\\", code[start - 1]);
  char prefix[64];
  if (off - start < sizeof prefix && fits && !in_cell_body(code, len, off)) {
    memcpy(prefix, code + start, off - start);
    prefix[off - start] = '\0';
    c.prefix = prefix;
    c.prefix_len = off - start;
    if (!(l = malloc(sizeof *l)))
      return -ENOMEM;
    split_line(code + ls, start - ls, l);
    if (!l->dead)
      complete_line(&c, l, &nm);
    free(l);
  }
  if (c.err) {
    struct jk_completions partial = {c.matches, c.n, 0, 0};
    jk_completions_done(&partial);
    return c.err;
  }
  if (c.n > 1)
    qsort(c.matches, c.n, sizeof *c.matches, compare);
  size_t kept = 0;
  for (size_t i = 0; i < c.n; i++) {
    if (kept && strcmp(c.matches[kept - 1], c.matches[i]) == 0)
      free(c.matches[i]);
    else
      c.matches[kept++] = c.matches[i];
  }
  ret->matches = c.matches;
  ret->n = kept;
  ret->cursor_end = code_points(code ? code : "", off);
  ret->cursor_start = ret->cursor_end - (off - start);
  return 0;
}
