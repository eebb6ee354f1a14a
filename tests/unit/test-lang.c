/* Unit tests of the cell language: parsing every statement kind, syntax
 * errors with positions, evaluation, value formatting, is_complete,
 * completion (with code-point cursors) and help. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "lang.h"
#include "sl_err.h"

static struct jk_cell *parse_ok(const char *code) {
  struct jk_cell *cell = NULL;
  struct jk_parse_error err;
  int r = jk_parse(code, strlen(code), &cell, &err);
  if (r != 0)
    fprintf(stderr, "unexpected parse error %d:%d: %s\n  in: %s\n", err.line, err.col,
            err.message, code);
  CHECK_INT(r, 0);
  return cell;
}

/* Expects a syntax error at line:col whose message contains want. */
static void parse_err(const char *code, int line, int col, const char *want) {
  struct jk_cell *cell = NULL;
  struct jk_parse_error err;
  int r = jk_parse(code, strlen(code), &cell, &err);
  CHECK_INT(r, SL_EPARSE);
  CHECK(cell == NULL);
  if (r != SL_EPARSE) {
    jk_cell_free(cell);
    return;
  }
  if (err.line != line || err.col != col || !strstr(err.message, want))
    fprintf(stderr, "for %s\n  got %d:%d %s\n  want %d:%d ...%s...\n", code, err.line, err.col,
            err.message, line, col, want);
  CHECK_INT(err.line, line);
  CHECK_INT(err.col, col);
  CHECK(strstr(err.message, want) != NULL);
}

static const struct jk_expr *opt(const struct jk_stmt *st, const char *name) {
  for (size_t i = 0; i < st->n_opts; i++)
    if (strcmp(st->opts[i].name, name) == 0)
      return st->opts[i].value;
  return NULL;
}

/* ---- variables for evaluation ------------------------------------------ */

static struct jk_value var_lr = {.type = JK_VAL_NUM, .num = 3e-4};
static struct jk_value var_epochs = {.type = JK_VAL_NUM, .num = 4};
static struct jk_value var_batch = {.type = JK_VAL_NUM, .num = 32};
static struct jk_value var_wait = {.type = JK_VAL_DURATION, .duration_us = 90000000};
static struct jk_value var_name = {.type = JK_VAL_STR, .str = "run"};

static const struct jk_value *lookup(void *userdata, const char *name) {
  (void)userdata;
  return strcmp(name, "lr") == 0       ? &var_lr
         : strcmp(name, "epochs") == 0 ? &var_epochs
         : strcmp(name, "batch") == 0  ? &var_batch
         : strcmp(name, "wait") == 0   ? &var_wait
         : strcmp(name, "name") == 0   ? &var_name
                                       : NULL;
}

/* Parses "x = EXPR" (or an option value when code is a statement), evaluates
 * the first statement's expression and returns its formatted value. */
static char *eval_fmt(const char *expr_code, int *ret_rc, char *err, size_t err_size) {
  struct jk_cell *cell = parse_ok(expr_code);
  char *out = NULL;
  if (!cell)
    return NULL;
  struct jk_value v;
  const struct jk_stmt *st = &cell->stmts[0];
  *ret_rc = jk_eval(st->expr ? st->expr : st->opts[0].value, lookup, NULL, &v, err, err_size);
  if (*ret_rc == 0) {
    out = jk_value_format(&v);
    jk_value_done(&v);
  }
  jk_cell_free(cell);
  return out;
}

static void check_eval(const char *code, const char *want) {
  int rc = -1;
  char err[256] = "";
  char *got = eval_fmt(code, &rc, err, sizeof err);
  if (rc != 0)
    fprintf(stderr, "eval of %s failed: %s\n", code, err);
  CHECK_INT(rc, 0);
  CHECK_STR(got, want);
  free(got);
}

static void check_eval_err(const char *code, int want_rc, const char *want) {
  int rc = 0;
  char err[256] = "";
  char *got = eval_fmt(code, &rc, err, sizeof err);
  CHECK_INT(rc, want_rc);
  CHECK(strstr(err, want) != NULL);
  if (!strstr(err, want))
    fprintf(stderr, "  error was: %s\n", err);
  free(got);
}

/* ---- tests ------------------------------------------------------------- */

static void test_statements(void) {
  struct jk_cell *c = parse_ok(
      "lr = 3e-4                                   # a notebook variable\n"
      "data shakespeare = text(\"moby-dick\")\n"
      "data fashion = fashion_mnist()\n"
      "model m = gpt(layers=4, heads=4, dim=128, ctx=128)\n"
      "model c = mlp(hidden=256, layers=2)\n"
      "train m on shakespeare steps=3000 batch=32 lr=lr gpus=1 spot=yes max_price=0.60 \\\n"
      "      checkpoint_every=auto deadline=3h instance=g5.xlarge,g4dn.xlarge region=us-east-1\n"
      "eval m on shakespeare\n"
      "sample m \"Call me\" tokens=200 temperature=0.8\n"
      "show m\n"
      "print \"steps:\", epochs * 60000 / batch\n"
      "sleep 2s\n"
      "\n"
      "%attach 12\n"
      "who = input(\"Your name\")\n"
      "lr * 2\n");
  if (!c)
    return;
  CHECK_INT(c->n, 14);
  const struct jk_stmt *s = c->stmts;
  CHECK_INT(s[0].kind, JK_STMT_ASSIGN);
  CHECK_STR(s[0].name, "lr");
  CHECK_INT(s[0].expr->kind, JK_EXPR_LITERAL);
  CHECK_NEAR(s[0].expr->lit.num, 3e-4, 1e-18);
  CHECK_INT(s[1].kind, JK_STMT_DATA);
  CHECK_STR(s[1].name, "shakespeare");
  CHECK_INT(s[1].expr->kind, JK_EXPR_CALL);
  CHECK_STR(s[1].expr->name, "text");
  CHECK_INT(s[1].expr->n_items, 1);
  CHECK_STR(s[1].expr->items[0]->lit.str, "moby-dick");
  CHECK_INT(s[1].line, 2);
  CHECK_INT(s[1].col, 1);
  CHECK_STR(s[2].expr->name, "fashion_mnist");
  CHECK_INT(s[2].expr->n_items, 0);
  CHECK_INT(s[3].kind, JK_STMT_MODEL);
  CHECK_STR(s[3].expr->name, "gpt");
  CHECK_INT(s[3].expr->n_opts, 4);
  CHECK_STR(s[3].expr->opts[2].name, "dim");
  CHECK_NEAR(s[3].expr->opts[2].value->lit.num, 128, 0);
  CHECK_INT(s[3].expr->opts[2].col, 34);
  CHECK_STR(s[4].expr->name, "mlp");
  CHECK_STR(s[4].expr->opts[0].name, "hidden");

  const struct jk_stmt *t = &s[5];
  CHECK_INT(t->kind, JK_STMT_TRAIN);
  CHECK_STR(t->model, "m");
  CHECK_STR(t->data, "shakespeare");
  CHECK_INT(t->n_opts, 10);
  CHECK_NEAR(opt(t, "steps")->lit.num, 3000, 0);
  CHECK_INT(opt(t, "lr")->kind, JK_EXPR_NAME);
  CHECK(opt(t, "lr")->bare);
  CHECK_INT(opt(t, "spot")->lit.type, JK_VAL_BOOL);
  CHECK(opt(t, "spot")->lit.boolean);
  CHECK_NEAR(opt(t, "max_price")->lit.num, 0.6, 1e-12);
  CHECK_INT(opt(t, "checkpoint_every")->kind, JK_EXPR_NAME);
  CHECK_STR(opt(t, "checkpoint_every")->name, "auto");
  CHECK_INT(opt(t, "deadline")->lit.type, JK_VAL_DURATION);
  CHECK_INT(opt(t, "deadline")->lit.duration_us, 3LL * 3600 * 1000000);
  const struct jk_expr *inst = opt(t, "instance");
  CHECK_INT(inst->kind, JK_EXPR_LIST);
  CHECK_INT(inst->n_items, 2);
  CHECK_STR(inst->items[0]->lit.str, "g5.xlarge");
  CHECK_STR(inst->items[1]->lit.str, "g4dn.xlarge");
  CHECK_STR(opt(t, "region")->lit.str, "us-east-1");
  CHECK_INT(t->opts[6].line, 7); /* checkpoint_every on the continuation line */
  CHECK_INT(t->opts[6].col, 7);
  struct jk_cell *g = parse_ok("train m on d gpus=2 precision=bf16\nsample m precision=fp32\n");
  if (g) { /* bf16 is a bare word: the string "bf16" unless a variable is named so */
    CHECK_NEAR(opt(&g->stmts[0], "gpus")->lit.num, 2, 0);
    CHECK_INT(opt(&g->stmts[0], "precision")->kind, JK_EXPR_NAME);
    CHECK(opt(&g->stmts[0], "precision")->bare);
    CHECK_STR(opt(&g->stmts[0], "precision")->name, "bf16");
    CHECK_STR(opt(&g->stmts[1], "precision")->name, "fp32");
    jk_cell_free(g);
  }

  CHECK_INT(s[6].kind, JK_STMT_EVAL);
  CHECK_STR(s[6].data, "shakespeare");
  CHECK_INT(s[6].n_opts, 0);
  CHECK_INT(s[6].line, 8);
  CHECK_INT(s[7].kind, JK_STMT_SAMPLE);
  CHECK_STR(s[7].model, "m");
  CHECK_STR(s[7].expr->lit.str, "Call me");
  CHECK_NEAR(opt(&s[7], "temperature")->lit.num, 0.8, 1e-12);
  CHECK_INT(s[8].kind, JK_STMT_SHOW);
  CHECK_STR(s[8].name, "m");
  CHECK_INT(s[9].kind, JK_STMT_PRINT);
  CHECK_INT(s[9].n_items, 2);
  CHECK_INT(s[9].items[1]->kind, JK_EXPR_BINOP);
  CHECK_INT(s[9].items[1]->op, '/');
  CHECK_INT(s[10].kind, JK_STMT_SLEEP);
  CHECK_INT(s[10].expr->lit.duration_us, 2000000);
  CHECK_INT(s[11].kind, JK_STMT_LINE_MAGIC);
  CHECK_STR(s[11].name, "attach");
  CHECK_STR(s[11].args, "12");
  CHECK_INT(s[11].line, 14);
  CHECK_INT(s[12].kind, JK_STMT_ASSIGN);
  CHECK_INT(s[12].expr->kind, JK_EXPR_CALL);
  CHECK_STR(s[12].expr->name, "input");
  CHECK_INT(s[13].kind, JK_STMT_EXPR);
  CHECK_INT(s[13].expr->op, '*');
  jk_cell_free(c);
}

static void test_more_statements(void) {
  struct jk_cell *c = parse_ok("sample m\nsample m p tokens=5\nsample m tokens=5 top_k=3 seed=1\n"
                               "key = password(\"API key\")\nsleep 0.5\nprint\nx = 1, 2\n"
                               "%instances gpus=4\n%status   # comment\n%help train\n"
                               "s = \"a\\\"b\\\\c\\nd\\te\"\nd = 90s\n");
  if (!c)
    return;
  CHECK_INT(c->n, 12);
  CHECK(c->stmts[0].expr == NULL);
  CHECK_INT(c->stmts[1].expr->kind, JK_EXPR_NAME);
  CHECK_STR(c->stmts[1].expr->name, "p");
  CHECK_INT(c->stmts[2].n_opts, 3);
  CHECK(c->stmts[2].expr == NULL);
  CHECK_STR(c->stmts[3].expr->name, "password");
  CHECK_NEAR(c->stmts[4].expr->lit.num, 0.5, 0);
  CHECK_INT(c->stmts[5].n_items, 0);
  CHECK_INT(c->stmts[6].expr->kind, JK_EXPR_LIST);
  CHECK_STR(c->stmts[7].name, "instances");
  CHECK_INT(c->stmts[7].n_opts, 1);
  CHECK_STR(c->stmts[7].opts[0].name, "gpus");
  CHECK_STR(c->stmts[7].args, "gpus=4");
  CHECK_STR(c->stmts[8].args, "");
  CHECK_STR(c->stmts[9].args, "train");
  CHECK_STR(c->stmts[10].expr->lit.str, "a\"b\\c\nd\te");
  CHECK_INT(c->stmts[11].expr->lit.duration_us, 90000000);
  jk_cell_free(c);

  /* cell magic: options and body */
  c = parse_ok("\n  %%run gpus=1 spot=yes\npython train.py \"x\" # not a comment\necho done\n");
  if (c) {
    CHECK_INT(c->n, 1);
    CHECK_INT(c->stmts[0].kind, JK_STMT_CELL_MAGIC);
    CHECK_STR(c->stmts[0].name, "run");
    CHECK_INT(c->stmts[0].line, 2);
    CHECK_INT(c->stmts[0].col, 3);
    CHECK_INT(c->stmts[0].n_opts, 2);
    CHECK_STR(c->stmts[0].opts[1].name, "spot");
    CHECK_STR(c->stmts[0].body, "python train.py \"x\" # not a comment\necho done\n");
    jk_cell_free(c);
  }
  /* a %%run without its script: no instance is launched for nothing */
  parse_err("%%run", 1, 1, "%%run has no script: the lines after %%run run on a worker");
  parse_err("%%run gpus=1\n  \n\t\n", 1, 1, "%%run has no script");
  /* comments, blank lines, continuation, an empty cell */
  c = parse_ok("# only a comment\n\n   \n");
  if (c) {
    CHECK_INT(c->n, 0);
    jk_cell_free(c);
  }
  c = parse_ok("");
  if (c) {
    CHECK_INT(c->n, 0);
    jk_cell_free(c);
  }
  c = parse_ok("x = 1 + \\\n    2 # two\ny = \"# not a comment\"\nz = gpt_ish\n");
  if (c) {
    CHECK_INT(c->n, 3);
    CHECK_INT(c->stmts[0].expr->rhs->line, 2);
    CHECK_INT(c->stmts[0].expr->rhs->col, 5);
    CHECK_STR(c->stmts[1].expr->lit.str, "# not a comment");
    jk_cell_free(c);
  }
  c = parse_ok("model m = gpt(layers=4,\n              heads=4)\n");
  if (c) {
    CHECK_INT(c->stmts[0].expr->n_opts, 2);
    CHECK_INT(c->stmts[0].expr->opts[1].line, 2);
    jk_cell_free(c);
  }
  /* columns count code points */
  c = parse_ok("s = \"héé\" + t\n");
  if (c) {
    CHECK_INT(c->stmts[0].expr->rhs->col, 13);
    jk_cell_free(c);
  }
}

static void test_errors(void) {
  parse_err("train m on d stpes=10", 1, 14, "unknown option 'stpes' for train (expected one of: steps, batch");
  parse_err("train m d", 1, 9, "expected 'on' after the model name, found 'd'");
  parse_err("train m on", 1, 11, "expected a data set name");
  parse_err("x = 1\ntrian m on d", 2, 1, "unknown statement 'trian'");
  parse_err("%foo", 1, 1, "unknown magic '%foo'");
  parse_err("%%foo\nbody", 1, 1, "unknown magic '%%foo' (expected one of: %%run)");
  parse_err("x = 1\n%%run", 2, 1, "cell magic must be on the first line");
  parse_err("%run", 1, 1, "'%run' is a cell magic");
  parse_err("%attach", 1, 8, "%attach takes one argument");
  parse_err("%gateway a b", 1, 10, "%gateway takes one argument or none");
  parse_err("%status now", 1, 9, "%status takes no arguments");
  parse_err("train = 3", 1, 1, "'train' is a keyword and cannot be used as a variable name");
  parse_err("yes = 3", 1, 1, "'yes' is a keyword");
  parse_err("data on = text(\"a\")", 1, 6, "'on' is a keyword and cannot be used as a name");
  parse_err("model m = gpt(layers=4, hedas=4)", 1, 25, "unknown option 'hedas' for gpt (expected one of: layers, heads, dim, ctx, dropout)");
  parse_err("model m = mlp(hidden=4, hidden=5)", 1, 25, "given twice");
  /* precision is spotlab-train's, so not an option of a shell script */
  parse_err("%%run precision=bf16\ntrue", 1, 7, "unknown option 'precision' for %%run");
  parse_err("model m = gpt(4)", 1, 15, "takes options by name");
  parse_err("model m = resnet()", 1, 11, "unknown function 'resnet'");
  parse_err("data d = text()", 1, 10, "text() takes one argument");
  parse_err("data d = fashion_mnist(\"a\", \"b\")", 1, 10, "fashion_mnist() takes at most one argument");
  parse_err("data d = gpt()", 1, 10, "unknown function 'gpt' (expected text(\"PATH\") or fashion_mnist())");
  parse_err("x = gpt(layers=1)", 1, 5, "gpt() can only be used as model NAME = gpt(...)");
  parse_err("x = (1 + 2", 1, 11, "expected ')', found end of cell");
  parse_err("x = 1 +", 1, 8, "expected a value");
  parse_err("x = \"abc", 1, 5, "unterminated string");
  parse_err("x = \"a\\qb\"", 1, 7, "unknown escape");
  parse_err("x = 12abc", 1, 5, "invalid number or duration '12abc'");
  parse_err("x = 1 $", 1, 7, "unexpected character '$'");
  parse_err("x = é", 1, 5, "unexpected non-ASCII character");
  parse_err("x = 1 \\", 1, 8, "expected a line after the continuation");
  parse_err("print 1 2", 1, 9, "expected ',' or the end of the line, found '2'");
  parse_err("train m on d steps", 1, 19, "expected '=' after option 'steps'");
  parse_err("train m on d steps=1 steps=2", 1, 22, "option 'steps' given twice");
  parse_err("sample m \"hi\" steps=3", 1, 15, "unknown option 'steps' for sample");
  parse_err("%%run steps=3\necho", 1, 7, "unknown option 'steps' for %%run");
  parse_err("show", 1, 5, "expected a name after 'show', found end of cell");
  parse_err("x = on", 1, 5, "'on' is a keyword, not a value");
  parse_err("x = 1 2", 1, 7, "expected the end of the statement");

  /* nesting and size limits give errors, not crashes */
  char deep[400];
  memset(deep, '(', sizeof deep);
  memcpy(deep, "x = ", 4);
  deep[sizeof deep - 1] = '\0';
  struct jk_cell *c = NULL;
  struct jk_parse_error err;
  CHECK_INT(jk_parse(deep, strlen(deep), &c, &err), SL_EPARSE);
  CHECK(strstr(err.message, "nested too deeply") != NULL);
  size_t n = 20000;
  char *long_expr = malloc(n * 2 + 8);
  strcpy(long_expr, "x = 1");
  for (size_t i = 0; i < n; i++)
    strcat(long_expr + 4 + i * 2, "+1");
  CHECK_INT(jk_parse(long_expr, strlen(long_expr), &c, &err), SL_EPARSE);
  CHECK(strstr(err.message, "expression too long") != NULL);
  free(long_expr);
  CHECK_INT(jk_parse("x = 1\0 + 2", 10, &c, &err), SL_EPARSE);
  CHECK(strstr(err.message, "unexpected control character") != NULL);
  CHECK_INT(err.col, 6);
}

static void test_eval(void) {
  check_eval("x = lr * 2", "0.0006");
  check_eval("x = 2000", "2000");
  check_eval("x = 1 + 2 * 3", "7");
  check_eval("x = (1 + 2) * 3", "9");
  check_eval("x = 10 - 4 - 3", "3");
  check_eval("x = 12 / 3 / 2", "2");
  check_eval("x = -2 * -3", "6");
  check_eval("x = -(1 - 3)", "2");
  check_eval("x = epochs * 60000 / batch", "7500");
  check_eval("x = 0.60", "0.6");
  check_eval("x = 1e20", "1e+20");
  check_eval("x = 0 * -1", "0");
  check_eval("x = yes", "yes");
  check_eval("x = no", "no");
  check_eval("x = 90s", "90s");
  check_eval("x = 30m", "30m");
  check_eval("x = 2h", "2h");
  check_eval("x = 1d", "1d");
  check_eval("x = 500ms", "500ms");
  check_eval("x = 1.5s", "1500ms");
  check_eval("x = 30m + 90s", "1890s");
  check_eval("x = wait * 2", "3m");
  check_eval("x = 2 * wait", "3m");
  check_eval("x = 1h / 2", "30m");
  check_eval("x = 1h / 30m", "2");
  check_eval("x = -90s", "-90s");
  check_eval("x = \"a\" + \"b\"", "\"ab\"");
  check_eval("x = \"q\\\"\\n\"", "\"q\\\"\\n\"");
  check_eval("x = name", "\"run\"");
  check_eval("x = 1, lr, \"s\"", "1,0.0003,\"s\"");
  check_eval("train m on d lr=lr", "0.0003");
  check_eval("train m on d spot=auto", "\"auto\"");
  check_eval("train m on d instance=g5.xlarge,g4dn.xlarge", "\"g5.xlarge\",\"g4dn.xlarge\"");
  check_eval("train m on d lr=lr*2", "0.0006");

  check_eval_err("x = 1 / 0", -EDOM, "line 1, column 7: division by zero");
  check_eval_err("x = 1 / (2 - 2)", -EDOM, "division by zero");
  check_eval_err("x = 1h / 0", -EDOM, "division by zero");
  check_eval_err("x = 2 +\\\n steps_per", SL_ENAME, "line 2, column 2: unknown name 'steps_per'");
  check_eval_err("x = \"a\" - 1", SL_ETYPE, "cannot apply '-' to a string and a number");
  check_eval_err("x = -\"a\"", SL_ETYPE, "cannot negate a string");
  check_eval_err("x = 1h + 1", SL_ETYPE, "cannot apply '+' to a duration and a number");
  check_eval_err("x = 1e300 * 1e300", -ERANGE, "out of range");
  check_eval_err("x = input(\"q\")", SL_ETYPE, "input() is not a value");

  /* print form: strings without quotes */
  struct jk_value s = {.type = JK_VAL_STR, .str = "hi \"x\""};
  char *text = jk_value_to_text(&s);
  CHECK_STR(text, "hi \"x\"");
  free(text);
  struct jk_value items[2] = {{.type = JK_VAL_STR, .str = "a"}, {.type = JK_VAL_NUM, .num = 2}};
  struct jk_value list = {.type = JK_VAL_LIST, .items = items, .n_items = 2};
  text = jk_value_to_text(&list);
  CHECK_STR(text, "a, 2");
  free(text);
  struct jk_value copy;
  CHECK_INT(jk_value_copy(&list, &copy), 0);
  text = jk_value_format(&copy);
  CHECK_STR(text, "\"a\",2");
  free(text);
  jk_value_done(&copy);
  CHECK_INT(copy.type, JK_VAL_NONE);
  jk_value_done(NULL);
}

static void test_is_complete(void) {
#define IC(code, want) CHECK_INT(jk_is_complete(code, strlen(code)), want)
  IC("", JK_COMPLETE);
  IC("\n\n", JK_COMPLETE);
  IC("x = 1", JK_COMPLETE);
  IC("train m on d steps=3", JK_COMPLETE);
  IC("x = \"open", JK_INCOMPLETE);
  IC("x = \"open\nstill", JK_INCOMPLETE);
  IC("train m on d \\", JK_INCOMPLETE);
  IC("train m on d \\\n", JK_INCOMPLETE);
  IC("x = 1 \\\n\n", JK_COMPLETE); /* a blank line after it ends the statement */
  IC("x = 1 \\\n  \n\n", JK_COMPLETE);
  IC("model m = gpt(layers=4,", JK_INCOMPLETE);
  IC("x = (1 +\n 2", JK_INCOMPLETE);
  IC("x = (1 + 2))", JK_INVALID);
  IC("trian m on d", JK_INVALID);
  IC("x = 1 +", JK_INVALID);
  IC("%%run\nanything \"goes (", JK_COMPLETE);
  IC("%%run", JK_INCOMPLETE); /* a console waits for the script's lines */
  IC("%%run gpus=1\n", JK_INCOMPLETE);
  IC("%%run steps=3\n", JK_INVALID);
  IC("%bogus", JK_INVALID);
#undef IC
}

/* Completion at cursor (code points; -1 for the end), expecting exactly the
 * matches in want (space separated) and the given cursor_start. */
static void check_complete(const char *code, long cursor, const char *want, long want_start) {
  static const char *const names[] = {"shakespeare", "m", "lr", "steps_total", "m"};
  struct jk_completions c;
  size_t len = strlen(code);
  size_t cp = 0;
  for (size_t i = 0; i < len; i++)
    cp += ((unsigned char)code[i] & 0xC0) != 0x80;
  size_t pos = cursor < 0 ? cp : (size_t)cursor;
  CHECK_INT(jk_complete(code, len, pos, names, "dmvvm", 5, &c), 0);
  char got[1024] = "";
  for (size_t i = 0; i < c.n; i++)
    snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s", i ? " " : "", c.matches[i]);
  if (strcmp(got, want) != 0)
    fprintf(stderr, "completing '%s' at %zu\n", code, pos);
  CHECK_STR(got, want);
  CHECK_INT(c.cursor_start, want_start);
  CHECK_INT(c.cursor_end, pos);
  jk_completions_done(&c);
}

static void test_complete(void) {
  check_complete("tr", -1, "train", 0);
  check_complete("", -1, "data eval lr model print sample show sleep steps_total train", 0);
  check_complete("s", -1, "sample show sleep steps_total", 0);
  check_complete("# é\ntr", -1, "train", 4);
  check_complete("x = \"héé\"\ntr", -1, "train", 10);
  check_complete("%at", -1, "%attach", 0);
  check_complete("%%r", -1, "%%run", 0);
  check_complete("%s", -1, "%session %sessions %show %status %stderr", 0);
  check_complete("train m ", -1, "on", 8);
  check_complete("train ", -1, "m", 6); /* models after train, data sets after on, variables in values */
  check_complete("train m on s", -1, "shakespeare", 11);
  check_complete("train m on shakespeare st", -1, "steps=", 23);
  check_complete("train m on shakespeare steps=3 s", -1, "seed= spot=", 31);
  check_complete("train m on d spot=", -1, "auto no yes", 18);
  check_complete("train m on d checkpoint_every=a", -1, "auto", 30);
  check_complete("eval m on d b", -1, "batch=", 12);
  check_complete("sample m t", -1, "temperature= threads= tokens= top_k=", 9);
  check_complete("train m on d precision=", -1, "bf16 fp32", 23);
  check_complete("train m on d detach=", -1, "no yes", 20);
  check_complete("train m on d steps=", -1, "lr steps_total", 19);
  check_complete("show ", -1, "lr m shakespeare steps_total", 5);
  check_complete("data d = ", -1, "fashion_mnist text", 9);
  check_complete("model q = ", -1, "gpt mlp", 10);
  check_complete("model q = gpt(l", -1, "layers=", 14);
  check_complete("model q = gpt(layers=4, d", -1, "dim= dropout=", 24);
  check_complete("model q = mlp(", -1, "dropout= hidden= layers=", 14);
  check_complete("x = l", -1, "lr", 4);
  check_complete("x = ", -1, "input lr password steps_total", 4);
  check_complete("print steps_total * l", -1, "lr", 20);
  check_complete("%%run g", -1, "gpus=", 6);
  check_complete("train m on d p", -1, "precision=", 13);
  check_complete("sample m p", -1, "precision=", 9);
  check_complete("%instances ", -1, "gpus=", 11);
  check_complete("%%run\nech", -1, "", 6);
  check_complete("x = \"tr", -1, "", 5);
  check_complete("# tr", -1, "", 2);
  check_complete("train m on d \\\n   st", -1, "steps=", 18);
  check_complete("tr\nx = 1", 2, "train", 0);
  check_complete("show ", -1, "lr m shakespeare steps_total", 5);
  /* cursor past the end is clamped */
  struct jk_completions c;
  CHECK_INT(jk_complete("tr", 2, 99, NULL, NULL, 0, &c), 0);
  CHECK_INT(c.n, 1);
  CHECK_INT(c.cursor_end, 2);
  jk_completions_done(&c);
}

static void test_inspect(void) {
  char *h = jk_inspect("train m on d", 12, 2, 0);
  CHECK(h && strstr(h, "train MODEL on DATA"));
  free(h);
  h = jk_inspect("train m on d steps=3", 20, 18, 1);
  CHECK(h && strstr(h, "steps=N") && strstr(h, "Example:"));
  free(h);
  /* option help is written from the declaration: help line, contexts, bounds, example */
  h = jk_inspect("model m = gpt(heads", 19, 19, 1);
  CHECK(h && strstr(h, "heads=N: attention heads; must divide dim") &&
        strstr(h, "Option of gpt().") && strstr(h, "Default: 4. From 1 to 256.") &&
        strstr(h, "model m = gpt(heads=4)"));
  free(h);
  h = jk_inspect("train m on d spot", 17, 17, 1);
  CHECK(h && strstr(h, "spot=yes|no|auto: use spot instances") &&
        strstr(h, "Option of train, eval, sample and %%run.") && strstr(h, "train m on d spot=auto"));
  free(h);
  h = jk_inspect("%attach 12", 10, 3, 0);
  CHECK(h && strstr(h, "%attach JOB"));
  free(h);
  h = jk_inspect("%%run gpus=1", 12, 1, 0);
  CHECK(h && strstr(h, "%%run") && strstr(h, "\nOptions: gpus nodes spot "));
  free(h);
  /* a statement's options come from their declarations: eval takes no steps */
  h = jk_help_topic("eval");
  CHECK(h && strstr(h, "\nOptions: batch threads eval_batches gpus precision ") && !strstr(h, "steps"));
  free(h);
  h = jk_help_topic("train");
  CHECK(h && strstr(h, "\nOptions: steps batch lr ") && strstr(h, " keep detach ") &&
        strstr(h, " deadline checkpoint_every\n"));
  free(h);
  h = jk_help_topic("gpt"); /* a function's text names its options */
  CHECK(h && !strstr(h, "\nOptions:"));
  free(h);
  h = jk_inspect("é gpt", strlen("é gpt"), 5, 0); /* just after the word */
  CHECK(h && strstr(h, "gpt("));
  free(h);
  h = jk_inspect("model m = gpt(", 14, 14, 0); /* just after the bracket */
  CHECK(h && strstr(h, "gpt("));
  free(h);
  h = jk_inspect("x = frobnicate", 14, 7, 0);
  CHECK(h == NULL);
  h = jk_inspect("", 0, 0, 0);
  CHECK(h == NULL);

  /* every word the parser knows has help */
  enum jk_word_kind kind;
  const char *w;
  size_t n = 0, kinds[6] = {0};
  for (size_t i = 0; (w = jk_lang_word(i, &kind)); i++, n++) {
    h = jk_inspect(w, strlen(w), strlen(w), 1);
    if (!h)
      fprintf(stderr, "no help for '%s'\n", w);
    CHECK(h != NULL);
    free(h);
    kinds[kind]++;
  }
  CHECK(n > 50);
  CHECK_INT(kinds[JK_WORD_STATEMENT], 8);
  CHECK_INT(kinds[JK_WORD_CELL_MAGIC], 1);
  CHECK_INT(kinds[JK_WORD_MAGIC], 21);
  /* every option of every context is a word with help */
  static const char *const contexts[] = {"train", "eval", "sample", "%%run", "%instances",
                                         "gpt", "mlp"};
  for (size_t k = 0; k < 7; k++) {
    CHECK(jk_lang_option(contexts[k], 0) != NULL);
    for (size_t i = 0; (w = jk_lang_option(contexts[k], i)); i++) {
      h = jk_inspect(w, strlen(w), 0, 0);
      CHECK(h != NULL);
      free(h);
    }
  }
  CHECK(jk_lang_option("nope", 0) == NULL);
  CHECK(jk_lang_has_option("train", "checkpoint_every"));
  CHECK(!jk_lang_has_option("gpt", "hidden"));
  CHECK(jk_lang_has_option("eval", "batch") && jk_lang_has_option("eval", "eval_batches"));
  CHECK(!jk_lang_has_option("eval", "steps")); /* spotlab-train --eval takes no --steps */
  CHECK(!jk_lang_has_option("train", "ckpt_dir")); /* a flag the worker sets, not an option */
  CHECK(jk_lang_is_reserved("on"));
  CHECK(!jk_lang_is_reserved("gpt"));
  enum jk_magic_args args;
  CHECK_INT(jk_lang_magic("attach", false, &args), 0);
  CHECK_INT(args, JK_MAGIC_ARGS_ONE);
  CHECK_INT(jk_lang_magic("run", false, NULL), -ENOENT);

  char *all = jk_help_all();
  CHECK(all && strstr(all, "%%run") && strstr(all, "checkpoint_every") && strstr(all, "sleep"));
  free(all);
}

int main(void) {
  test_statements();
  test_more_statements();
  test_errors();
  test_eval();
  test_is_complete();
  test_complete();
  test_inspect();
  TEST_MAIN_END();
}
