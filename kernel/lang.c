/* The cell language's parser.
 *
 * The parser keeps one token of lookahead (and peeks one more by lexing from
 * a copy of the lexer state); magics read their line raw. A parse either
 * returns a whole owned cell or fails with the first error and leaves nothing
 * allocated. Input is bounded: cell size, expression nesting and expression
 * size all have limits that give a parse error, so the recursive parser,
 * evaluator and destructor stay shallow. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lang_int.h"
#include "sl_err.h"
#include "sl_time.h"

#define MAX_CELL_BYTES (1u << 20)
#define MAX_NESTING 64     /* parentheses and unary minus */
#define MAX_EXPR_NODES 512 /* nodes in one statement's expressions */

/* ---- syntax tree ------------------------------------------------------- */

static void free_expr(struct jk_expr *e);

static void free_opts(struct jk_option *opts, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(opts[i].name);
    free_expr(opts[i].value);
  }
  free(opts);
}

static void free_exprs(struct jk_expr **items, size_t n) {
  for (size_t i = 0; i < n; i++)
    free_expr(items[i]);
  free(items);
}

static void free_expr(struct jk_expr *e) {
  if (!e)
    return;
  jk_value_done(&e->lit);
  free(e->name);
  free_expr(e->lhs);
  free_expr(e->rhs);
  free_exprs(e->items, e->n_items);
  free_opts(e->opts, e->n_opts);
  free(e);
}

static void free_stmt(struct jk_stmt *s) {
  free(s->name);
  free(s->model);
  free(s->data);
  free_expr(s->expr);
  free_exprs(s->items, s->n_items);
  free_opts(s->opts, s->n_opts);
  free(s->args);
  free(s->body);
}

struct jk_cell *jk_cell_free(struct jk_cell *cell) {
  if (!cell)
    return NULL;
  for (size_t i = 0; i < cell->n; i++)
    free_stmt(&cell->stmts[i]);
  free(cell->stmts);
  free(cell);
  return NULL;
}

/* Appends one zeroed element to a growing array (capacity: the next power
 * of two); *n counts elements. On -ENOMEM the array is unchanged. */
static int grow(void *arrayp, size_t *n, size_t elem_size) {
  void **array = arrayp;
  if (*n == 0 || (*n & (*n - 1)) == 0) {
    void *p = realloc(*array, (*n ? *n * 2 : 1) * elem_size);
    if (!p)
      return -ENOMEM;
    *array = p;
  }
  memset((char *)*array + *n * elem_size, 0, elem_size);
  (*n)++;
  return 0;
}

/* ---- parser: expressions ----------------------------------------------- */

struct parser {
  struct lexer lx;
  struct tok tok; /* the lookahead; owns tok.str */
  struct jk_parse_error *err;
  int nesting, nodes;
  bool no_body; /* a cell magic without its lines: more lines complete it */
};

static int advance(struct parser *p) {
  free(p->tok.str);
  int r = jk_lex(&p->lx, &p->tok);
  if (r == 0 && p->tok.kind == T_EOF && p->lx.trailing_escape)
    r = jk_lang_error(p->err, p->tok.line, p->tok.col, "expected a line after the continuation '\\'");
  return r;
}

/* The kind of the token after the lookahead, and its operator char. */
static enum tok_kind peek(struct parser *p, char *ret_op) {
  struct lexer copy = p->lx;
  struct jk_parse_error scratch = {0};
  struct tok t;
  copy.err = &scratch;
  jk_lex(&copy, &t);
  free(t.str);
  if (ret_op)
    *ret_op = t.op;
  return t.kind;
}

static bool peek_is(struct parser *p, char op) {
  char c;
  return peek(p, &c) == T_OP && c == op;
}

static bool at_op(const struct parser *p, char op) {
  return p->tok.kind == T_OP && p->tok.op == op;
}

static bool at_end(const struct parser *p) {
  return p->tok.kind == T_NEWLINE || p->tok.kind == T_EOF;
}

static bool at_word(const struct parser *p, const char *word) {
  size_t n = p->tok.end - p->tok.start;
  return p->tok.kind == T_NAME && strlen(word) == n && memcmp(p->lx.s + p->tok.start, word, n) == 0;
}

static char *tok_text(const struct parser *p) {
  return strndup(p->lx.s + p->tok.start, p->tok.end - p->tok.start);
}

/* Copies the lookahead's text into buf, truncated. */
static const char *tok_word(const struct parser *p, char *buf, size_t size) {
  size_t n = p->tok.end - p->tok.start;
  if (n >= size)
    n = size - 1;
  memcpy(buf, p->lx.s + p->tok.start, n);
  buf[n] = '\0';
  return buf;
}

static int expected(struct parser *p, const char *what) {
  char text[40];
  const char *found = p->tok.kind == T_EOF       ? "end of cell"
                      : p->tok.kind == T_NEWLINE ? "end of line"
                      : p->tok.kind == T_STR     ? "a string"
                                                 : NULL;
  if (found)
    return jk_lang_error(p->err, p->tok.line, p->tok.col, "expected %s, found %s", what, found);
  return jk_lang_error(p->err, p->tok.line, p->tok.col, "expected %s, found '%s'", what,
                   tok_word(p, text, sizeof text));
}

static int new_expr(struct parser *p, enum jk_expr_kind kind, int line, int col,
                    struct jk_expr **ret) {
  if (++p->nodes > MAX_EXPR_NODES)
    return jk_lang_error(p->err, line, col, "expression too long (more than %d terms)",
                     MAX_EXPR_NODES);
  struct jk_expr *e = calloc(1, sizeof *e);
  if (!e)
    return -ENOMEM;
  e->kind = kind;
  e->line = line;
  e->col = col;
  *ret = e;
  return 0;
}

/* "one, two, three" from a context's options, for error messages. */
static void option_list(const char *context, char *buf, size_t size) {
  const char *o;
  size_t n = 0;
  buf[0] = '\0';
  for (size_t i = 0; (o = jk_lang_option(context, i)) && n < size; i++)
    n += (size_t)snprintf(buf + n, size - n, "%s%s", i ? ", " : "", o);
}

static int unknown_option(struct parser *p, const char *context, const char *what) {
  char name[40], list[200];
  option_list(context, list, sizeof list);
  return jk_lang_error(p->err, p->tok.line, p->tok.col, "unknown option '%s' for %s (expected one of: %s)",
                   tok_word(p, name, sizeof name), what, list);
}

static bool has_opt(const struct jk_option *opts, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(opts[i].name, name) == 0)
      return true;
  return false;
}

static int parse_expr(struct parser *p, struct jk_expr **ret);

/* A function name where calls are not allowed: say where they belong. */
static int misplaced_call(struct parser *p) {
  char name[40];
  static const char *const places[][2] = {
      {"text", "data NAME = text(\"PATH\")"},  {"fashion_mnist", "data NAME = fashion_mnist()"},
      {"gpt", "model NAME = gpt(...)"},        {"mlp", "model NAME = mlp(...)"},
      {"input", "NAME = input(\"PROMPT\")"},   {"password", "NAME = password(\"PROMPT\")"}};
  tok_word(p, name, sizeof name);
  for (size_t i = 0; i < sizeof places / sizeof places[0]; i++)
    if (strcmp(places[i][0], name) == 0)
      return jk_lang_error(p->err, p->tok.line, p->tok.col, "%s() can only be used as %s", name,
                       places[i][1]);
  return jk_lang_error(p->err, p->tok.line, p->tok.col,
                   "unknown function '%s' (expected one of: text, fashion_mnist, gpt, mlp, "
                   "input, password)",
                   name);
}

static int parse_name_or_literal(struct parser *p, struct jk_expr *e) {
  if (at_word(p, "yes") || at_word(p, "no")) {
    e->kind = JK_EXPR_LITERAL;
    e->lit.type = JK_VAL_BOOL;
    e->lit.boolean = at_word(p, "yes");
    return advance(p);
  }
  char word[40];
  if (jk_lang_is_reserved(tok_word(p, word, sizeof word)))
    return jk_lang_error(p->err, p->tok.line, p->tok.col, "'%s' is a keyword, not a value", word);
  if (peek_is(p, '('))
    return misplaced_call(p);
  if (!(e->name = tok_text(p)))
    return -ENOMEM;
  return advance(p);
}

static int parse_primary(struct parser *p, struct jk_expr **ret) {
  struct jk_expr *e = NULL;
  int r = 0;
  enum tok_kind k = p->tok.kind;
  if (k != T_NUM && k != T_DUR && k != T_STR && k != T_NAME && !at_op(p, '('))
    return expected(p, "a value (a number, string, name or '(')");
  if ((r = new_expr(p, JK_EXPR_LITERAL, p->tok.line, p->tok.col, &e)) < 0)
    return r;
  if (k == T_NUM) {
    e->lit.type = JK_VAL_NUM;
    e->lit.num = p->tok.num;
    r = advance(p);
  } else if (k == T_DUR) {
    e->lit.type = JK_VAL_DURATION;
    e->lit.duration_us = p->tok.dur_us;
    r = advance(p);
  } else if (k == T_STR) {
    e->lit.type = JK_VAL_STR;
    e->lit.str = p->tok.str;
    p->tok.str = NULL;
    r = advance(p);
  } else if (k == T_NAME) {
    e->kind = JK_EXPR_NAME;
    r = parse_name_or_literal(p, e);
  } else {
    free(e);
    p->nodes--;
    e = NULL;
    if (++p->nesting > MAX_NESTING)
      return jk_lang_error(p->err, p->tok.line, p->tok.col, "expression nested too deeply");
    if ((r = advance(p)) < 0 || (r = parse_expr(p, &e)) < 0)
      goto fail;
    if (!at_op(p, ')')) {
      r = expected(p, "')'");
      goto fail;
    }
    p->nesting--;
    r = advance(p);
  }
  if (r < 0)
    goto fail;
  *ret = e;
  return 0;
fail:
  free_expr(e);
  return r;
}

static int parse_unary(struct parser *p, struct jk_expr **ret) {
  if (!at_op(p, '-'))
    return parse_primary(p, ret);
  struct jk_expr *e = NULL;
  int r = 0;
  if (++p->nesting > MAX_NESTING)
    return jk_lang_error(p->err, p->tok.line, p->tok.col, "expression nested too deeply");
  if ((r = new_expr(p, JK_EXPR_NEG, p->tok.line, p->tok.col, &e)) < 0)
    return r;
  if ((r = advance(p)) < 0 || (r = parse_unary(p, &e->lhs)) < 0) {
    free_expr(e);
    return r;
  }
  p->nesting--;
  *ret = e;
  return 0;
}

/* level 0: + and -; level 1: * and /. Left-associative. */
static int parse_binary(struct parser *p, int level, struct jk_expr **ret) {
  struct jk_expr *lhs = NULL, *e = NULL;
  const char *ops = level == 0 ? "+-" : "*/";
  int r = level == 0 ? parse_binary(p, 1, &lhs) : parse_unary(p, &lhs);
  if (r < 0)
    return r;
  while (p->tok.kind == T_OP && strchr(ops, p->tok.op)) {
    if ((r = new_expr(p, JK_EXPR_BINOP, p->tok.line, p->tok.col, &e)) < 0)
      goto fail;
    e->op = p->tok.op;
    e->lhs = lhs;
    lhs = e;
    if ((r = advance(p)) < 0)
      goto fail;
    r = level == 0 ? parse_binary(p, 1, &e->rhs) : parse_unary(p, &e->rhs);
    if (r < 0)
      goto fail;
  }
  *ret = lhs;
  return 0;
fail:
  free_expr(lhs);
  return r;
}

static int parse_expr(struct parser *p, struct jk_expr **ret) { return parse_binary(p, 0, ret); }

/* expr[, expr...]: one expression, or a LIST when there is a comma. elem
 * parses one element. */
static int parse_list_of(struct parser *p, int (*elem)(struct parser *, struct jk_expr **),
                         struct jk_expr **ret) {
  struct jk_expr *first = NULL, *list = NULL;
  int r = 0;
  if ((r = elem(p, &first)) < 0)
    return r;
  if (!at_op(p, ',')) {
    *ret = first;
    return 0;
  }
  if ((r = new_expr(p, JK_EXPR_LIST, first->line, first->col, &list)) < 0 ||
      (r = grow(&list->items, &list->n_items, sizeof *list->items)) < 0) {
    free_expr(first);
    free_expr(list);
    return r;
  }
  list->items[0] = first;
  while (at_op(p, ',')) {
    if ((r = advance(p)) < 0 || (r = grow(&list->items, &list->n_items, sizeof *list->items)) < 0)
      goto fail;
    if ((r = elem(p, &list->items[list->n_items - 1])) < 0) {
      list->n_items--;
      goto fail;
    }
  }
  *ret = list;
  return 0;
fail:
  free_expr(list);
  return r;
}

/* An option value element: a bare word (g5.xlarge, us-east-1, auto, lr) or an
 * expression. A bare word with '.' or '-' is a string; a plain one is a bare
 * NAME that evaluates to the variable or else to the word itself. */
static int parse_opt_elem(struct parser *p, struct jk_expr **ret) {
  const char *s = p->lx.s;
  size_t end = p->tok.start;
  if (p->tok.kind != T_NAME || at_word(p, "yes") || at_word(p, "no"))
    return parse_expr(p, ret);
  while (end < p->lx.len && (is_word((unsigned char)s[end]) || s[end] == '.' || s[end] == '-'))
    end++;
  if (end < p->lx.len && !strchr(" \t\r\n,)#\\", s[end]))
    return parse_expr(p, ret);
  struct jk_expr *e = NULL;
  char *word = strndup(s + p->tok.start, end - p->tok.start);
  int r = word ? new_expr(p, JK_EXPR_NAME, p->tok.line, p->tok.col, &e) : -ENOMEM;
  if (r < 0) {
    free(word);
    return r;
  }
  if (end > p->tok.end || jk_lang_is_reserved(word)) {
    e->kind = JK_EXPR_LITERAL;
    e->lit.type = JK_VAL_STR;
    e->lit.str = word;
  } else {
    e->name = word;
    e->bare = true;
  }
  while (p->lx.pos < end)
    jk_lx_bump(&p->lx);
  if ((r = advance(p)) < 0) {
    free_expr(e);
    return r;
  }
  *ret = e;
  return 0;
}

static int parse_opt_value(struct parser *p, struct jk_expr **ret) {
  return parse_list_of(p, parse_opt_elem, ret);
}

/* name=value ... up to the end of the line, appended to *opts. context names
 * the option set (jk_lang_option), what the statement for messages. */
static int parse_options(struct parser *p, const char *context, const char *what,
                         struct jk_option **opts, size_t *n) {
  int r = 0;
  while (p->tok.kind == T_NAME) {
    char name[40];
    tok_word(p, name, sizeof name);
    if (!jk_lang_has_option(context, name))
      return unknown_option(p, context, what);
    if (has_opt(*opts, *n, name))
      return jk_lang_error(p->err, p->tok.line, p->tok.col, "option '%s' given twice", name);
    if ((r = grow(opts, n, sizeof **opts)) < 0)
      return r;
    struct jk_option *o = &(*opts)[*n - 1];
    o->line = p->tok.line;
    o->col = p->tok.col;
    if (!(o->name = strdup(name)))
      return -ENOMEM;
    if ((r = advance(p)) < 0)
      return r;
    if (!at_op(p, '=')) {
      char msg[80];
      snprintf(msg, sizeof msg, "'=' after option '%s'", name);
      return expected(p, msg);
    }
    if ((r = advance(p)) < 0 || (r = parse_opt_value(p, &o->value)) < 0)
      return r;
  }
  return at_end(p) ? 0 : expected(p, "an option (name=value) or the end of the line");
}

/* ---- parser: statements ------------------------------------------------ */

/* A NAME that is not a keyword, for a target or an argument. */
static int expect_name(struct parser *p, const char *what, char **ret) {
  char word[40];
  if (p->tok.kind != T_NAME)
    return expected(p, what);
  if (jk_lang_is_reserved(tok_word(p, word, sizeof word)))
    return jk_lang_error(p->err, p->tok.line, p->tok.col,
                     "'%s' is a keyword and cannot be used as a name", word);
  if (!(*ret = tok_text(p)))
    return -ENOMEM;
  return advance(p);
}

/* NAME(args...) where NAME is one of funcs (NULL-terminated). Keyword
 * arguments of gpt and mlp are checked against their options. */
static int parse_call(struct parser *p, const char *const *funcs, const char *what,
                      struct jk_expr **ret) {
  char name[40];
  size_t k = 0;
  if (p->tok.kind != T_NAME || !peek_is(p, '('))
    return expected(p, what);
  tok_word(p, name, sizeof name);
  while (funcs[k] && strcmp(funcs[k], name) != 0)
    k++;
  if (!funcs[k])
    return jk_lang_error(p->err, p->tok.line, p->tok.col, "unknown function '%s' (expected %s)", name,
                     what);
  bool by_name = strcmp(name, "gpt") == 0 || strcmp(name, "mlp") == 0;
  struct jk_expr *e = NULL;
  int r = new_expr(p, JK_EXPR_CALL, p->tok.line, p->tok.col, &e);
  if (r < 0)
    return r;
  if (!(e->name = strdup(name)) || (r = advance(p)) < 0 || (r = advance(p)) < 0)
    goto fail;
  while (r >= 0 && !at_op(p, ')')) {
    if (p->tok.kind == T_NAME && peek_is(p, '=')) {
      char opt[40];
      tok_word(p, opt, sizeof opt);
      if (!by_name || !jk_lang_has_option(name, opt)) {
        r = by_name ? unknown_option(p, name, name)
                    : jk_lang_error(p->err, p->tok.line, p->tok.col,
                                "%s() takes no argument named '%s'", name, opt);
        goto fail;
      }
      if (has_opt(e->opts, e->n_opts, opt)) {
        r = jk_lang_error(p->err, p->tok.line, p->tok.col, "option '%s' given twice", opt);
        goto fail;
      }
      if ((r = grow(&e->opts, &e->n_opts, sizeof *e->opts)) < 0)
        goto fail;
      struct jk_option *o = &e->opts[e->n_opts - 1];
      o->line = p->tok.line;
      o->col = p->tok.col;
      if (!(o->name = strdup(opt)) || (r = advance(p)) < 0 || (r = advance(p)) < 0 ||
          (r = parse_expr(p, &o->value)) < 0)
        goto fail;
    } else if (by_name) {
      r = jk_lang_error(p->err, p->tok.line, p->tok.col,
                    "%s() takes options by name, such as layers=4", name);
      goto fail;
    } else {
      if ((r = grow(&e->items, &e->n_items, sizeof *e->items)) < 0)
        goto fail;
      if ((r = parse_expr(p, &e->items[e->n_items - 1])) < 0) {
        e->n_items--;
        goto fail;
      }
    }
    if (at_op(p, ','))
      r = advance(p);
    else if (!at_op(p, ')'))
      r = expected(p, "',' or ')'");
  }
  if (r < 0 || (r = advance(p)) < 0)
    goto fail;
  /* text("PATH"), fashion_mnist(["FOLDER"]); a model's are options by name */
  size_t least = strcmp(name, "text") == 0 ? 1 : 0;
  if (e->n_items > 1 || e->n_items < least) {
    r = jk_lang_error(p->err, e->line, e->col, "%s() takes %s", name,
                      least ? "one argument: text(\"PATH\")" : "at most one argument: fashion_mnist(\"FOLDER\")");
    goto fail;
  }
  *ret = e;
  return 0;
fail:
  free_expr(e);
  return r ? r : -ENOMEM;
}

/* train|eval MODEL on DATA opts; sample MODEL [PROMPT] opts. */
static int parse_job(struct parser *p, struct jk_stmt *st, const char *what) {
  char msg[64];
  int r = 0;
  snprintf(msg, sizeof msg, "a model name after '%s'", what);
  if ((r = advance(p)) < 0 || (r = expect_name(p, msg, &st->model)) < 0)
    return r;
  if (st->kind == JK_STMT_SAMPLE) {
    if (!at_end(p) && !(p->tok.kind == T_NAME && peek_is(p, '=')) &&
        (r = parse_expr(p, &st->expr)) < 0)
      return r;
  } else {
    if (!at_word(p, "on"))
      return expected(p, "'on' after the model name");
    if ((r = advance(p)) < 0 ||
        (r = expect_name(p, "a data set name after 'on'", &st->data)) < 0)
      return r;
  }
  return parse_options(p, what, what, &st->opts, &st->n_opts);
}

/* data NAME = text("PATH") | fashion_mnist(); model NAME = gpt(...) | mlp(...) */
static int parse_decl(struct parser *p, struct jk_stmt *st) {
  bool data = st->kind == JK_STMT_DATA;
  int r = 0;
  if ((r = advance(p)) < 0 ||
      (r = expect_name(p, data ? "a name after 'data'" : "a name after 'model'", &st->name)) < 0)
    return r;
  if (!at_op(p, '='))
    return expected(p, "'=' after the name");
  if ((r = advance(p)) < 0)
    return r;
  const char *const *funcs = jk_lang_command(st->cmd)->funcs;
  if (data)
    return parse_call(p, funcs, "text(\"PATH\") or fashion_mnist()", &st->expr);
  return parse_call(p, funcs, "gpt(...) or mlp(...)", &st->expr);
}

static int parse_magic_name(struct parser *p, bool cell, enum jk_magic_args *ret_args,
                            enum jk_cmd *ret_cmd, char **ret_name) {
  static const char *const prefix[] = {"%", "%%"};
  size_t pos = p->lx.pos, start = pos;
  while (pos < p->lx.len && is_word((unsigned char)p->lx.s[pos]))
    pos++;
  if (pos == start)
    return jk_lang_error(p->err, p->lx.line, p->lx.col, "expected a magic name after '%s'",
                     prefix[cell]);
  char name[40], word[48];
  snprintf(name, sizeof name, "%.*s", (int)(pos - start), p->lx.s + start);
  snprintf(word, sizeof word, "%s%s", prefix[cell], name);
  if (jk_lang_find_command(word, ret_cmd) < 0 || jk_lang_magic(name, cell, ret_args) < 0) {
    if (jk_lang_magic(name, !cell, NULL) == 0)
      return jk_lang_error(p->err, p->tok.line, p->tok.col, "'%s%s' is a %s magic: write %s%s",
                       prefix[cell], name, cell ? "line" : "cell", prefix[!cell], name);
    char list[200] = "";
    const char *w;
    enum jk_word_kind kind;
    for (size_t i = 0, n = 0; (w = jk_lang_word(i, &kind)) && n < sizeof list; i++)
      if (kind == (cell ? JK_WORD_CELL_MAGIC : JK_WORD_MAGIC))
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", n ? ", " : "", w);
    return jk_lang_error(p->err, p->tok.line, p->tok.col, "unknown magic '%s%s' (expected one of: %s)",
                     prefix[cell], name, list);
  }
  if (!(*ret_name = strdup(name)))
    return -ENOMEM;
  while (p->lx.pos < pos)
    jk_lx_bump(&p->lx);
  return 0;
}

/* The raw rest of the line after a line magic's name, comment stripped. */
static int parse_magic_args(struct parser *p, struct jk_stmt *st, enum jk_magic_args kind) {
  const char *s = p->lx.s;
  while (p->lx.pos < p->lx.len && (s[p->lx.pos] == ' ' || s[p->lx.pos] == '\t'))
    jk_lx_bump(&p->lx);
  int line = p->lx.line, col = p->lx.col;
  size_t start = p->lx.pos, end = start, stop = start;
  while (stop < p->lx.len && s[stop] != '\n' &&
         !(s[stop] == '#' && (stop == start || s[stop - 1] == ' ' || s[stop - 1] == '\t')))
    stop++;
  for (size_t i = start; i < stop; i++)
    if (!strchr(" \t\r", s[i]))
      end = i + 1;
  if (!(st->args = strndup(s + start, end - start)))
    return -ENOMEM;
  if (kind == JK_MAGIC_ARGS_NONE && end > start)
    return jk_lang_error(p->err, line, col, "%%%s takes no arguments", st->name);
  if (kind == JK_MAGIC_ARGS_ONE && (end == start || strpbrk(st->args, " \t")))
    return jk_lang_error(p->err, line, col, "%%%s takes one argument", st->name);
  if (kind == JK_MAGIC_ARGS_MAYBE_ONE && strpbrk(st->args, " \t"))
    return jk_lang_error(p->err, line, col, "%%%s takes one argument or none", st->name);
  while (p->lx.pos < stop)
    jk_lx_bump(&p->lx);
  while (p->lx.pos < p->lx.len && p->lx.s[p->lx.pos] != '\n')
    jk_lx_bump(&p->lx);
  return advance(p);
}

static int parse_magic(struct parser *p, struct jk_stmt *st, bool first) {
  bool cell = p->tok.kind == T_PCT2;
  enum jk_magic_args kind;
  char context[48];
  int r = 0;
  if (cell && !first)
    return jk_lang_error(p->err, p->tok.line, p->tok.col,
                     "a cell magic must be on the first line of the cell");
  st->kind = cell ? JK_STMT_CELL_MAGIC : JK_STMT_LINE_MAGIC;
  if ((r = parse_magic_name(p, cell, &kind, &st->cmd, &st->name)) < 0)
    return r;
  if (kind != JK_MAGIC_ARGS_OPTIONS)
    return parse_magic_args(p, st, kind);
  snprintf(context, sizeof context, "%s%s", cell ? "%%" : "%", st->name);
  size_t start = p->lx.pos;
  if ((r = advance(p)) < 0 || (r = parse_options(p, context, context, &st->opts, &st->n_opts)) < 0)
    return r;
  size_t end = p->tok.start;
  while (end > start && strchr(" \t\r", p->lx.s[end - 1]))
    end--;
  while (start < end && strchr(" \t", p->lx.s[start]))
    start++;
  if (!(st->args = strndup(p->lx.s + start, end - start)))
    return -ENOMEM;
  if (cell) {
    const char *body = p->tok.kind == T_NEWLINE ? p->lx.s + p->tok.end : "";
    size_t n = p->tok.kind == T_NEWLINE ? p->lx.len - p->tok.end : 0;
    if (!(st->body = strndup(body, n)))
      return -ENOMEM;
    if (!st->body[strspn(st->body, " \t\r\n")]) { /* not an instance launched for nothing */
      p->no_body = true;
      return jk_lang_error(p->err, st->line, 1, "%%%%%s has no script: the lines after %%%%%s run on a worker",
                           st->name, st->name);
    }
    free(p->tok.str);
    p->tok.str = NULL;
    p->tok.kind = T_EOF;
    p->lx.pos = p->lx.len;
  }
  return 0;
}

static int parse_assign(struct parser *p, struct jk_stmt *st) {
  const char *const *ask_funcs = jk_lang_command(JK_CMD_ASSIGN)->funcs;
  int r = 0;
  st->kind = JK_STMT_ASSIGN;
  st->cmd = JK_CMD_ASSIGN;
  if (!(st->name = tok_text(p)) || (r = advance(p)) < 0 || (r = advance(p)) < 0)
    return st->name ? r : -ENOMEM;
  if ((at_word(p, "input") || at_word(p, "password")) && peek_is(p, '('))
    return parse_call(p, ask_funcs, "input(\"PROMPT\") or password(\"PROMPT\")", &st->expr);
  return parse_list_of(p, parse_expr, &st->expr);
}

static int parse_print(struct parser *p, struct jk_stmt *st) {
  int r = advance(p);
  while (r >= 0 && !at_end(p)) {
    if (st->n_items && (!at_op(p, ',') || (r = advance(p)) < 0))
      return r < 0 ? r : expected(p, "',' or the end of the line");
    if ((r = grow(&st->items, &st->n_items, sizeof *st->items)) < 0)
      return r;
    if ((r = parse_expr(p, &st->items[st->n_items - 1])) < 0)
      st->n_items--;
  }
  return r;
}

/* "data, model, ..., sleep, NAME = EXPR, or an expression": what may start a statement. */
static void statement_list(char *buf, size_t size) {
  const struct jk_command *c;
  size_t n = 0;
  buf[0] = '\0';
  for (int id = 0; (c = jk_lang_command((enum jk_cmd)id)) && n < size; id++)
    if (c->kind == JK_WORD_STATEMENT)
      n += (size_t)snprintf(buf + n, size - n, "%s, ", c->word);
  if (n < size)
    snprintf(buf + n, size - n, "%s, or %s", jk_lang_command(JK_CMD_ASSIGN)->word,
             jk_lang_command(JK_CMD_EXPR)->word);
}

static int parse_stmt(struct parser *p, struct jk_stmt *st, bool first) {
  char word[40];
  int r = 0;
  st->line = p->tok.line;
  st->col = p->tok.col;
  if (p->tok.kind == T_PCT || p->tok.kind == T_PCT2)
    return parse_magic(p, st, first);
  st->kind = JK_STMT_EXPR;
  st->cmd = JK_CMD_EXPR;
  if (p->tok.kind == T_NAME) {
    tok_word(p, word, sizeof word);
    if (jk_lang_is_reserved(word) && peek_is(p, '='))
      return jk_lang_error(p->err, p->tok.line, p->tok.col,
                       "'%s' is a keyword and cannot be used as a variable name", word);
    enum jk_cmd id;
    if (jk_lang_find_command(word, &id) == 0 && jk_lang_command(id)->kind == JK_WORD_STATEMENT) {
      st->cmd = id;
      st->kind = jk_lang_command(id)->stmt;
      switch (st->kind) {
      case JK_STMT_DATA:
      case JK_STMT_MODEL: return parse_decl(p, st);
      case JK_STMT_TRAIN:
      case JK_STMT_EVAL:
      case JK_STMT_SAMPLE: return parse_job(p, st, word);
      case JK_STMT_SHOW:
        if ((r = advance(p)) < 0)
          return r;
        return expect_name(p, "a name after 'show'", &st->name);
      case JK_STMT_PRINT: return parse_print(p, st);
      default:
        if ((r = advance(p)) < 0)
          return r;
        return parse_expr(p, &st->expr);
      }
    }
    if (peek_is(p, '='))
      return parse_assign(p, st);
    enum tok_kind next = peek(p, NULL);
    if (next == T_NAME || next == T_STR || next == T_NUM || next == T_DUR) {
      char list[200];
      statement_list(list, sizeof list);
      return jk_lang_error(p->err, p->tok.line, p->tok.col,
                           "unknown statement '%s' (expected one of: %s)", word, list);
    }
  }
  return parse_list_of(p, parse_expr, &st->expr);
}

int jk_parse(const char *code, size_t len, struct jk_cell **ret, struct jk_parse_error *err) {
  struct jk_parse_error local;
  if (!err)
    err = &local;
  memset(err, 0, sizeof *err);
  if (!code)
    len = 0;
  if (len > MAX_CELL_BYTES)
    return jk_lang_error(err, 1, 1, "cell too large (more than %u bytes)", MAX_CELL_BYTES);
  struct parser p = {.lx = {.s = code ? code : "", .len = len, .line = 1, .col = 1, .err = err},
                     .err = err};
  struct jk_cell *cell = calloc(1, sizeof *cell);
  if (!cell)
    return -ENOMEM;
  int r = advance(&p);
  while (r >= 0) {
    while (r >= 0 && p.tok.kind == T_NEWLINE)
      r = advance(&p);
    if (r < 0 || p.tok.kind == T_EOF)
      break;
    if ((r = grow(&cell->stmts, &cell->n, sizeof *cell->stmts)) < 0)
      break;
    p.nodes = p.nesting = 0;
    if ((r = parse_stmt(&p, &cell->stmts[cell->n - 1], cell->n == 1)) < 0)
      break;
    if (!at_end(&p))
      r = expected(&p, "the end of the statement");
  }
  if (r < 0) {
    err->incomplete = p.lx.open_string || p.lx.trailing_escape || p.no_body ||
                      (p.tok.kind == T_EOF && p.lx.depth > 0);
    free(p.tok.str);
    jk_cell_free(cell);
    return r == -ENOMEM ? r : SL_EPARSE;
  }
  free(p.tok.str);
  *ret = cell;
  return 0;
}
