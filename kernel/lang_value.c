/* The cell language's values and expression evaluation. Evaluation is
 * bounded by the parser's limits on expression size and nesting. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lang.h"
#include "sl_err.h"
#include "sl_time.h"

/* ---- values ------------------------------------------------------------ */

void jk_value_done(struct jk_value *v) {
  if (!v)
    return;
  free(v->str);
  for (size_t i = 0; i < v->n_items; i++)
    jk_value_done(&v->items[i]);
  free(v->items);
  memset(v, 0, sizeof *v);
}

int jk_value_copy(const struct jk_value *v, struct jk_value *ret) {
  struct jk_value c = *v;
  c.str = NULL;
  c.items = NULL;
  c.n_items = 0;
  if (v->str && !(c.str = strdup(v->str)))
    return -ENOMEM;
  if (v->n_items) {
    if (!(c.items = calloc(v->n_items, sizeof *c.items)))
      goto nomem;
    for (size_t i = 0; i < v->n_items; i++, c.n_items++)
      if (jk_value_copy(&v->items[i], &c.items[i]) < 0)
        goto nomem;
  }
  *ret = c;
  return 0;
nomem:
  jk_value_done(&c);
  return -ENOMEM;
}

static void write_num(FILE *f, double x) {
  if (x == 0)
    x = 0; /* no "-0" */
  fprintf(f, "%.15g", x);
}

static void write_duration(FILE *f, int64_t us) {
  static const struct {
    int64_t us;
    const char *unit;
  } units[] = {{86400 * SL_US_PER_S, "d"}, {3600 * SL_US_PER_S, "h"}, {60 * SL_US_PER_S, "m"},
               {SL_US_PER_S, "s"},         {SL_US_PER_MS, "ms"}};
  if (us == 0) {
    fputs("0s", f);
    return;
  }
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (us % units[i].us == 0) {
      fprintf(f, "%lld%s", (long long)(us / units[i].us), units[i].unit);
      return;
    }
  write_num(f, (double)us / 1e6);
  fputc('s', f);
}

static void write_value(FILE *f, const struct jk_value *v, bool language) {
  switch (v->type) {
  case JK_VAL_NONE: fputs("none", f); break;
  case JK_VAL_NUM: write_num(f, v->num); break;
  case JK_VAL_BOOL: fputs(v->boolean ? "yes" : "no", f); break;
  case JK_VAL_DURATION: write_duration(f, v->duration_us); break;
  case JK_VAL_STR:
    if (!language) {
      fputs(v->str ? v->str : "", f);
      break;
    }
    fputc('"', f);
    for (const char *s = v->str ? v->str : ""; *s; s++) {
      switch (*s) {
      case '"': fputs("\\\"", f); break;
      case '\\': fputs("\\\\", f); break;
      case '\n': fputs("\\n", f); break;
      case '\t': fputs("\\t", f); break;
      default: fputc(*s, f);
      }
    }
    fputc('"', f);
    break;
  case JK_VAL_LIST:
    for (size_t i = 0; i < v->n_items; i++) {
      if (i)
        fputs(language ? "," : ", ", f);
      write_value(f, &v->items[i], language);
    }
    break;
  }
}

static char *value_string(const struct jk_value *v, bool language) {
  char *out = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&out, &size);
  if (!f)
    return NULL;
  write_value(f, v, language);
  if (fclose(f) != 0) {
    free(out);
    return NULL;
  }
  return out;
}

char *jk_value_format(const struct jk_value *v) { return value_string(v, true); }
char *jk_value_to_text(const struct jk_value *v) { return value_string(v, false); }

/* ---- evaluation -------------------------------------------------------- */

struct evaluator {
  jk_lookup_fn lookup;
  void *userdata;
  char *err;
  size_t err_size;
};

__attribute__((format(printf, 4, 5))) static int eval_fail(struct evaluator *ev,
                                                           const struct jk_expr *x, int code,
                                                           const char *fmt, ...) {
  if (ev->err && ev->err_size) {
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(ev->err, ev->err_size, "line %d, column %d: %s", x->line, x->col, msg);
  }
  return code;
}

static const char *type_name(enum jk_value_type t) {
  static const char *const names[] = {"nothing", "a number", "a string",
                                      "a boolean", "a duration", "a list"};
  return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "a value";
}

static int arith_num(struct evaluator *ev, const struct jk_expr *x, double a, double b,
                     struct jk_value *ret) {
  double v = x->op == '+' ? a + b : x->op == '-' ? a - b : x->op == '*' ? a * b : 0;
  if (x->op == '/') {
    if (b == 0)
      return eval_fail(ev, x, -EDOM, "division by zero");
    v = a / b;
  }
  if (!isfinite(v))
    return eval_fail(ev, x, -ERANGE, "number out of range");
  ret->type = JK_VAL_NUM;
  ret->num = v;
  return 0;
}

static int arith_duration(struct evaluator *ev, const struct jk_expr *x, const struct jk_value *a,
                          const struct jk_value *b, struct jk_value *ret) {
  bool da = a->type == JK_VAL_DURATION, db = b->type == JK_VAL_DURATION;
  double v;
  if (da && db && x->op == '/') {
    if (b->duration_us == 0)
      return eval_fail(ev, x, -EDOM, "division by zero");
    return arith_num(ev, x, (double)a->duration_us, (double)b->duration_us, ret);
  }
  if (da && db && (x->op == '+' || x->op == '-'))
    v = x->op == '+' ? (double)a->duration_us + (double)b->duration_us
                     : (double)a->duration_us - (double)b->duration_us;
  else if (x->op == '*' && da != db)
    v = da ? (double)a->duration_us * b->num : a->num * (double)b->duration_us;
  else if (x->op == '/' && da && !db) {
    if (b->num == 0)
      return eval_fail(ev, x, -EDOM, "division by zero");
    v = (double)a->duration_us / b->num;
  } else {
    return eval_fail(ev, x, SL_ETYPE, "cannot apply '%c' to %s and %s", x->op,
                     type_name(a->type), type_name(b->type));
  }
  if (!(fabs(v) < 9.0e18))
    return eval_fail(ev, x, -ERANGE, "duration out of range");
  ret->type = JK_VAL_DURATION;
  ret->duration_us = (int64_t)llround(v);
  return 0;
}

static int eval_binop(struct evaluator *ev, const struct jk_expr *x, const struct jk_value *a,
                      const struct jk_value *b, struct jk_value *ret) {
  if (a->type == JK_VAL_NUM && b->type == JK_VAL_NUM)
    return arith_num(ev, x, a->num, b->num, ret);
  if (x->op == '+' && a->type == JK_VAL_STR && b->type == JK_VAL_STR) {
    size_t na = strlen(a->str), nb = strlen(b->str);
    char *s = malloc(na + nb + 1);
    if (!s)
      return -ENOMEM;
    memcpy(s, a->str, na);
    memcpy(s + na, b->str, nb + 1);
    ret->type = JK_VAL_STR;
    ret->str = s;
    return 0;
  }
  bool nd = (a->type == JK_VAL_NUM || a->type == JK_VAL_DURATION) &&
            (b->type == JK_VAL_NUM || b->type == JK_VAL_DURATION);
  if (nd)
    return arith_duration(ev, x, a, b, ret);
  return eval_fail(ev, x, SL_ETYPE, "cannot apply '%c' to %s and %s", x->op, type_name(a->type),
                   type_name(b->type));
}

static int eval(struct evaluator *ev, const struct jk_expr *x, struct jk_value *ret) {
  struct jk_value a = {0}, b = {0}, out = {0};
  const struct jk_value *v;
  int r = 0;
  switch (x->kind) {
  case JK_EXPR_LITERAL: return jk_value_copy(&x->lit, ret);
  case JK_EXPR_NAME:
    v = ev->lookup && x->name ? ev->lookup(ev->userdata, x->name) : NULL;
    if (v)
      return jk_value_copy(v, ret);
    if (!x->bare)
      return eval_fail(ev, x, SL_ENAME, "unknown name '%s'", x->name ? x->name : "");
    out.type = JK_VAL_STR;
    if (!(out.str = strdup(x->name)))
      return -ENOMEM;
    break;
  case JK_EXPR_LIST:
    out.type = JK_VAL_LIST;
    if (x->n_items && !(out.items = calloc(x->n_items, sizeof *out.items)))
      return -ENOMEM;
    for (; r >= 0 && out.n_items < x->n_items; out.n_items++)
      r = eval(ev, x->items[out.n_items], &out.items[out.n_items]);
    break;
  case JK_EXPR_NEG:
    if ((r = eval(ev, x->lhs, &a)) < 0)
      break;
    if (a.type == JK_VAL_NUM) {
      out.type = JK_VAL_NUM;
      out.num = a.num == 0 ? 0 : -a.num;
    } else if (a.type == JK_VAL_DURATION) {
      out.type = JK_VAL_DURATION;
      out.duration_us = -a.duration_us;
    } else {
      r = eval_fail(ev, x, SL_ETYPE, "cannot negate %s", type_name(a.type));
    }
    break;
  case JK_EXPR_BINOP:
    if ((r = eval(ev, x->lhs, &a)) >= 0 && (r = eval(ev, x->rhs, &b)) >= 0)
      r = eval_binop(ev, x, &a, &b, &out);
    break;
  case JK_EXPR_CALL:
    return eval_fail(ev, x, SL_ETYPE, "%s() is not a value here", x->name ? x->name : "");
  }
  jk_value_done(&a);
  jk_value_done(&b);
  if (r < 0) {
    jk_value_done(&out);
    return r;
  }
  *ret = out;
  return 0;
}

int jk_eval(const struct jk_expr *expr, jk_lookup_fn lookup, void *userdata,
            struct jk_value *ret, char *err, size_t err_size) {
  struct evaluator ev = {lookup, userdata, err, err_size};
  if (err && err_size)
    err[0] = '\0';
  if (!expr)
    return -EINVAL;
  return eval(&ev, expr, ret);
}
