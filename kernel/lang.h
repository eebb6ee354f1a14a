/* The cell language (DESIGN.md §3): parser, values, expression evaluation,
 * completeness, completion and help.
 *
 * A cell is parsed whole into a struct jk_cell before anything runs, so a cell
 * with a syntax error sends nothing anywhere. Every node records its 1-based
 * line and column for error messages. The parser knows every statement,
 * option and magic and rejects unknown options with the list of valid ones.
 * Nothing here performs I/O or knows about Jupyter messages. */
#ifndef JK_LANG_H
#define JK_LANG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- values ------------------------------------------------------------ */

enum jk_value_type {
  JK_VAL_NONE,
  JK_VAL_NUM,      /* 3e-4, 2000, 0.60 (money is a number) */
  JK_VAL_STR,      /* "..." */
  JK_VAL_BOOL,     /* yes / no */
  JK_VAL_DURATION, /* 90s, 30m, 2h: in microseconds */
  JK_VAL_LIST,     /* a,b,c */
};

struct jk_value {
  enum jk_value_type type;
  double num;
  bool boolean;
  int64_t duration_us;
  char *str;               /* JK_VAL_STR: owned, NUL-terminated, escapes decoded */
  struct jk_value *items;  /* JK_VAL_LIST: owned array */
  size_t n_items;
};

void jk_value_done(struct jk_value *v);
/* Deep copy into *ret. 0 or -ENOMEM. */
int jk_value_copy(const struct jk_value *v, struct jk_value *ret);
/* The value as the language writes it: 0.0006, "text", yes, 90s, a,b.
 * Returns an owned string (free()). */
char *jk_value_format(const struct jk_value *v);
/* The value as print writes it: like jk_value_format but strings without
 * quotes or escapes and list items joined by ", ". Owned string (free()). */
char *jk_value_to_text(const struct jk_value *v);

/* ---- syntax tree ------------------------------------------------------- */

enum jk_expr_kind {
  JK_EXPR_LITERAL, /* lit */
  JK_EXPR_NAME,    /* name */
  JK_EXPR_LIST,    /* items (n_items) */
  JK_EXPR_BINOP,   /* op in "+-*∕" (one char), lhs, rhs */
  JK_EXPR_NEG,     /* lhs */
  JK_EXPR_CALL,    /* name(args..., key=value...): text, fashion_mnist, gpt, mlp, input */
};

struct jk_option;

struct jk_expr {
  enum jk_expr_kind kind;
  int line, col;
  struct jk_value lit;
  char *name;
  char op;
  struct jk_expr *lhs, *rhs;
  struct jk_expr **items;  /* LIST items or CALL positional args */
  size_t n_items;
  struct jk_option *opts;  /* CALL keyword args */
  size_t n_opts;
  bool bare;               /* NAME written as a bare word in an option value
                              (spot=auto, lr=lr): jk_eval resolves it to the
                              variable when one exists, else to the word as a string */
};

struct jk_option {
  char *name;
  struct jk_expr *value;
  int line, col;
};

enum jk_stmt_kind {
  JK_STMT_ASSIGN,     /* name = expr */
  JK_STMT_DATA,       /* data name = expr (a CALL: text(...) / fashion_mnist()) */
  JK_STMT_MODEL,      /* model name = expr (a CALL: gpt(...) / mlp(...)) */
  JK_STMT_TRAIN,      /* train model on data opts... */
  JK_STMT_EVAL,       /* eval model on data opts... */
  JK_STMT_SAMPLE,     /* sample model [prompt expr] opts... */
  JK_STMT_SHOW,       /* show name */
  JK_STMT_PRINT,      /* print expr, expr... (args in items) */
  JK_STMT_SLEEP,      /* sleep expr (a duration or seconds) */
  JK_STMT_EXPR,       /* a bare expression */
  JK_STMT_LINE_MAGIC, /* %name rest-of-line */
  JK_STMT_CELL_MAGIC, /* %%name args, then body */
};

/* Every statement form, keyword, function and magic (commands.def). */
enum jk_cmd {
#define JK_COMMAND(id, ...) JK_CMD_##id,
#include "commands.def"
#undef JK_COMMAND
  JK_CMD_COUNT
};

struct jk_stmt {
  enum jk_stmt_kind kind;
  enum jk_cmd cmd;         /* the table row it runs (a statement, form or magic) */
  int line, col;
  char *name;              /* ASSIGN/DATA/MODEL target, SHOW name, magic name (no %) */
  char *model;             /* TRAIN/EVAL/SAMPLE */
  char *data;              /* TRAIN/EVAL */
  struct jk_expr *expr;    /* ASSIGN/DATA/MODEL/EXPR/SLEEP value, SAMPLE prompt (may be NULL) */
  struct jk_expr **items;  /* PRINT arguments */
  size_t n_items;
  struct jk_option *opts;  /* TRAIN/EVAL/SAMPLE options; CELL_MAGIC options;
                              LINE_MAGIC options of %instances */
  size_t n_opts;
  char *args;              /* LINE_MAGIC: text after the name, trimmed */
  char *body;              /* CELL_MAGIC: the lines after the first */
};

struct jk_cell {
  struct jk_stmt *stmts;
  size_t n;
};

struct jk_parse_error {
  int line, col;
  char message[256]; /* "expected 'on' after the model name", "unknown option 'foo' for train (expected one of: ...)" */
  bool incomplete;   /* the cell ended inside a string or parentheses, after a
                        trailing '\' or before a cell magic's lines: more lines
                        could complete it */
};

/* Parses code (UTF-8, len bytes) into an owned cell in *ret. On a syntax
 * error returns SL_EPARSE and fills *err; nothing is allocated then. */
int jk_parse(const char *code, size_t len, struct jk_cell **ret, struct jk_parse_error *err);
struct jk_cell *jk_cell_free(struct jk_cell *cell);

/* ---- evaluation -------------------------------------------------------- */

/* Looks up a notebook variable; returns a borrowed value or NULL if unknown. */
typedef const struct jk_value *(*jk_lookup_fn)(void *userdata, const char *name);

/* Evaluates expr. Arithmetic works on numbers (and durations ± durations,
 * durations * / numbers); a name resolves through lookup. CALL expressions
 * are not evaluated here (SL_ETYPE): the executor handles them. On error
 * returns negative and writes a message naming line and column into err. */
int jk_eval(const struct jk_expr *expr, jk_lookup_fn lookup, void *userdata,
            struct jk_value *ret, char *err, size_t err_size);

/* ---- front-end services ------------------------------------------------ */

enum jk_completeness { JK_COMPLETE, JK_INCOMPLETE, JK_INVALID };
/* Open string, trailing backslash, unclosed bracket or a cell magic without
 * its lines: incomplete. A cell that
 * parses: complete. Anything else: invalid. ret_indent receives "" or "    ". */
enum jk_completeness jk_is_complete(const char *code, size_t len);

struct jk_completions {
  char **matches; /* owned strings */
  size_t n;
  size_t cursor_start, cursor_end; /* in Unicode code points, as Jupyter counts */
};
/* Completion at cursor_pos (code points): keywords, statement options valid at
 * that place, magics after '%', and the given names (variables, models, data)
 * that fit there: kinds[i] says what names[i] is ('v' a variable, 'm' a model,
 * 'd' a data set), so that `train` offers models and `on` data sets; NULL
 * kinds: any name anywhere. names may be NULL with n_names 0. */
int jk_complete(const char *code, size_t len, size_t cursor_pos, const char *const *names,
                const char *kinds, size_t n_names, struct jk_completions *ret);
void jk_completions_done(struct jk_completions *c);

/* Help text (Markdown-free plain text) for the word at cursor_pos: any
 * statement keyword, option, magic or function. NULL if the word is unknown.
 * Owned string. detail_level 1 adds examples. */
char *jk_inspect(const char *code, size_t len, size_t cursor_pos, int detail_level);
/* The text of %help: every statement, magic and option with one line each. Owned. */
char *jk_help_all(void);
/* The help of one word (as jk_inspect words it, with example), for %help
 * TOPIC; NULL for an unknown word. Owned. */
char *jk_help_topic(const char *word);

/* ---- the vocabulary (lang_help.c) ------------------------------------- */

enum jk_word_kind {
  JK_WORD_STATEMENT,  /* data, model, train, eval, sample, show, print, sleep */
  JK_WORD_KEYWORD,    /* on, yes, no: reserved, never a variable name */
  JK_WORD_OPTION,     /* steps, gpus, layers, ... */
  JK_WORD_FUNCTION,   /* text, fashion_mnist, gpt, mlp, input, password */
  JK_WORD_MAGIC,      /* "%status", ... (with the % prefix) */
  JK_WORD_CELL_MAGIC, /* "%%run" */
  JK_WORD_FORM,       /* a statement without a keyword (NAME = EXPR); never a word */
};

/* The i-th word the parser knows (i from 0), its kind in *ret_kind (may be
 * NULL); NULL past the last. Borrowed static strings. Every word has help:
 * jk_inspect on it returns non-NULL. */
const char *jk_lang_word(size_t i, enum jk_word_kind *ret_kind);
/* Whether name is a statement keyword or a keyword (cannot be a variable). */
bool jk_lang_is_reserved(const char *name);

/* Option contexts: "train", "eval", "sample", "%%run", "%instances", "gpt",
 * "mlp". The i-th option name valid in context, NULL past the last or for an
 * unknown context. Borrowed static string. */
const char *jk_lang_option(const char *context, size_t i);
bool jk_lang_has_option(const char *context, const char *name);
/* The declaration of the option named name (type, bounds, choices, help), or
 * NULL. Borrowed static row: spotlab-train's options come from its table
 * (kernels/train_opts.h), the others are the kernel's own. */
struct sl_opt;
const struct sl_opt *jk_lang_option_decl(const char *name);

enum jk_magic_args {
  JK_MAGIC_ARGS_NONE,     /* %status */
  JK_MAGIC_ARGS_ONE,      /* %attach JOB: one word, required */
  JK_MAGIC_ARGS_MAYBE_ONE, /* %gateway [ADDR]: one word or none */
  JK_MAGIC_ARGS_OPTIONAL, /* %budget [set user NAME USD]: any words */
  JK_MAGIC_ARGS_OPTIONS,  /* %instances [gpus=N]: name=value options */
  JK_MAGIC_ARGS_TEXT,     /* %stderr TEXT: the rest of the line, as written */
};
/* Looks up a magic by name without the % ("attach"); cell selects %% magics.
 * 0 and *ret_args (may be NULL), or -ENOENT. */
int jk_lang_magic(const char *name, bool cell, enum jk_magic_args *ret_args);

/* What completion offers after a statement's keyword or a magic's name. */
enum jk_complete_kind {
  JK_COMPLETE_NOTHING,
  JK_COMPLETE_NAME,    /* one notebook name (show NAME) */
  JK_COMPLETE_EXPR,    /* notebook names anywhere (print, sleep, NAME = ...) */
  JK_COMPLETE_DECL,    /* NAME = one of funcs (data, model) */
  JK_COMPLETE_JOB_ON,  /* MODEL on DATA, then the word's options (train, eval) */
  JK_COMPLETE_JOB,     /* MODEL [PROMPT], then the word's options (sample) */
  JK_COMPLETE_OPTIONS, /* the word's options (%instances, %%run) */
};

/* A row of the command table (commands.def): all the language knows about a
 * statement, keyword, function or magic. The interpreter keeps its handlers
 * in the same table. */
struct jk_command {
  const char *word;             /* magics with their % or %% */
  enum jk_word_kind kind;
  enum jk_stmt_kind stmt;
  enum jk_magic_args args;
  bool gateway;                 /* runs only with a gateway transport */
  enum jk_complete_kind complete;
  const char *const *funcs;     /* functions after '=', NULL-terminated, or NULL */
  const char *summary, *text, *example;
};

/* The row of id, or NULL when id is out of range. Borrowed static data. */
const struct jk_command *jk_lang_command(enum jk_cmd id);
/* The command written as word ("train", "%jobs", "%%run"): 0 and *ret_id
 * (may be NULL), or -ENOENT. Statement forms without a keyword never match. */
int jk_lang_find_command(const char *word, enum jk_cmd *ret_id);

#endif
