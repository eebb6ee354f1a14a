/* Option tables: each option is one row (name, type, where its value lives,
 * default, bounds, help, where it applies), and every program that has
 * options (the gateway's INI file, the worker's JSON file, spotlab-train's
 * flags, the cell language's options) parses, checks, prints and describes
 * them with the functions below, so an option cannot be declared twice.
 *
 * Names are written with '_' ("weight_decay"); as a command-line flag the
 * same option is spelled with '-' ("--weight-decay"), and flag lookup treats
 * the two as one. A value is checked completely before it is stored, so a
 * failed set leaves the old value. Messages name the option and the value,
 * never a secret: a row whose check callback guards a secret should not echo
 * it (the callback writes its own reason). */
#ifndef SL_OPT_H
#define SL_OPT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum sl_opt_type {
  SL_OPT_STR,  /* size > 0: a char[size] buffer; size 0: a const char * borrowing the text */
  SL_OPT_INT,  /* a signed integer of size bytes (1, 2, 4, 8); bounds min..max */
  SL_OPT_U64,  /* a uint64_t, any whole number >= 0 */
  SL_OPT_NUM,  /* a double; bounds min..max */
  SL_OPT_BOOL, /* a bool: yes/no, true/false, on/off, 1/0 */
  SL_OPT_DUR,  /* an int64_t in µs from "90s", "30m", "2h"; bounds in seconds */
  SL_OPT_FLAG, /* an int set to 1 by a bare --flag; takes no value */
};

enum {
  SL_OPT_REQUIRED = 1 << 0, /* the owner refuses a file or command line without it */
  SL_OPT_ABOVE_MIN = 1 << 1, /* INT, NUM: min itself is out of range, (min, max] (a rate) */
};

struct sl_opt {
  const char *name;
  enum sl_opt_type type;
  size_t offset, size;    /* where the value lives in the caller's struct, and its bytes */
  const char *def;        /* the default as text; NULL: none, or computed (help says how) */
  double min, max;        /* INT, NUM, DUR (seconds); min == max == 0: no bounds */
  const char *choices;    /* "gpt|mlp": a STR takes only these; on other types, words the
                           * owner takes besides a number ("auto"), for help and completion */
  const char *metavar;    /* the value's placeholder in help ("N", "PATH"); NULL: from type */
  const char *example;    /* a value for examples in help; NULL: the default */
  const char *help;       /* one line */
  const char *doc;        /* a paragraph more, for help pages; NULL: none */
  unsigned contexts;      /* where the option applies: bits the table's owner defines */
  unsigned flags;         /* SL_OPT_REQUIRED */
  /* More checks of a text value after the type's own (an address, a key); 0 or
   * negative with the reason in why ("\"x\" is not a valid name"). */
  int (*check)(const char *text, char *why, size_t why_size);
};

#define SL_OPT_FIELD(type, field) offsetof(type, field), sizeof(((type *)0)->field)

/* The row named name ('-' and '_' alike), or NULL. */
const struct sl_opt *sl_opt_find(const struct sl_opt *opts, size_t n, const char *name);

/* "int", "num", ...: the type as describe and help name it. */
const char *sl_opt_type_name(enum sl_opt_type type);
/* The value's placeholder: metavar, else one from the type ("N", "X", ...). */
const char *sl_opt_metavar(const struct sl_opt *o);
/* Writes "--weight-decay" for "weight_decay" into buf. */
void sl_opt_flag_name(const struct sl_opt *o, char *buf, size_t size);

/* Checks text as a value of o and stores it into base (o->offset). 0, or
 * SL_ECONFIG with "NAME: reason" in err (label instead of the name when
 * non-NULL, as in "--layers"); nothing is stored on failure. A STR row of
 * size 0 keeps a pointer to text, which must outlive base. */
int sl_opt_set(const struct sl_opt *o, void *base, const char *label, const char *text, char *err,
               size_t err_size);
/* Checks text as a value of o without storing it: the type, bounds and
 * choices (on types other than STR, a choice word such as "auto" passes).
 * 0, or SL_ECONFIG with "NAME: reason" in err. */
int sl_opt_check(const struct sl_opt *o, const char *text, char *err, size_t err_size);
/* Checks a JSON value (the worker's file): strings for STR, true/false for
 * BOOL, integers for INT; messages as "\"NAME\" must be an integer". */
int sl_opt_set_json(const struct sl_opt *o, void *base, const json_t *v, char *err, size_t err_size);
/* text as a number (an integer when integer) in [min, max]; messages as
 * sl_opt_set's ("slots: 1000 is out of range [0, 64]"). */
/* A duration as the options write one (decimal digits, a fraction allowed,
 * then ms, s, m, h, d or no unit for seconds: "120s", "1.5h"; no sign,
 * blank, exponent or hex) into *ret_us: 0, or -EINVAL. */
int sl_opt_parse_duration(const char *text, int64_t *ret_us);
int sl_opt_parse_number(const char *name, const char *text, bool integer, double min, double max,
                        double *ret, char *err, size_t err_size);

/* Stores every row's default into base (rows without one are left alone). */
void sl_opt_defaults(const struct sl_opt *opts, size_t n, void *base);

/* One command-line option at argv[*i] ("--name", "--name=V" or "--name V"):
 * stores it, moves *i past what it used and returns the row's index. Usage
 * errors return SL_ECONFIG with "unknown option '--x'", "option --x needs a
 * value", "option --x takes no value" or "--x: reason" in err. */
int sl_opt_parse_arg(const struct sl_opt *opts, size_t n, void *base, int argc, char **argv, int *i,
                     char *err, size_t err_size);

/* The value at base as text that sl_opt_set reads back ("yes", "30m", "0.1"). */
void sl_opt_format(const struct sl_opt *o, const void *base, char *buf, size_t size);

/* "  --layers N             help (default 4)" for each row, as --help lists them. */
void sl_opt_usage(const struct sl_opt *opts, size_t n, FILE *out);

/* A JSON array with one object per row: name, flag, type, default, min, max,
 * choices, metavar, example, help, doc, contexts, required (the names context_names gives the bits, bit i →
 * context_names[i]). Returns a new reference, or NULL when out of memory. */
json_t *sl_opt_describe(const struct sl_opt *opts, size_t n, const char *const *context_names,
                        size_t n_contexts);

#endif
