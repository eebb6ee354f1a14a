/* Running cells: the interpreter's executor and its local statements.
 *
 * A cell is parsed whole first; a syntax error sends nothing anywhere. Then
 * statements run in order, each through its row of the command table
 * (commands.def). A statement that must wait (sleep, input, a gateway reply,
 * a job being followed) leaves the execution pending with a wait reason;
 * the core keeps serving control requests and the interpreter resumes it on
 * a timer, a stdin reply or a gateway message. Variables and model/data
 * definitions live in the state (state.c); the session sync sends the
 * changes to the gateway when the cell ends (kept for later while the
 * gateway is down, session.c). A cell that arrives while the session state
 * is still loading waits for it (bounded by the gateway client's hello
 * timeout). The execution ends with exactly one publisher->finished(). */
#include "interp_int.h"
#include "rename.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "sl_err.h"
#include "sl_json.h"
#include "sl_opt.h"
#include "sl_log.h"
#include "sl_time.h"

#define MAX_SLEEP_US (24 * 3600 * SL_US_PER_S)

/* ---- output ------------------------------------------------------------- */

void jk_exec_stream(struct jk_interp *ip, const char *name, const char *text) {
  ip->pub->stream(ip->pub_ud, JK_PUB_RUNNING, name, text);
}

static void display(struct jk_interp *ip, json_t *data) {
  ip->pub->display(ip->pub_ud, JK_PUB_RUNNING, data, NULL, false);
}

/* Records the error of the running execution; finish() publishes it as
 * `error` and puts it in the execute_reply. */
enum jk_step jk_exec_fail(struct jk_interp *ip, const char *ename, const char *fmt, ...) {
  char evalue[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(evalue, sizeof evalue, fmt, ap);
  va_end(ap);
  sl_utf8_fix(evalue); /* a long message may be cut inside a character: still JSON */
  char line[1200];
  snprintf(line, sizeof line, "\033[0;31m%s\033[0m: %s", ename, evalue);
  sl_utf8_fix(line);
  json_t *content =
      json_pack("{s:s, s:s, s:[s]}", "ename", ename, "evalue", evalue, "traceback", line);
  json_decref(ip->running->error);
  ip->running->error = content;
  return JK_STEP_ERROR;
}

/* ---- statements --------------------------------------------------------- */

enum jk_step jk_exec_needs_gateway(struct jk_interp *ip, const char *what) {
  return jk_exec_fail(ip, "GatewayUnavailable",
              "%s needs the spotlab gateway, which this kernel cannot reach: "
              "training, evaluation, sampling, jobs and cost run through spotlab-gateway",
              what);
}

static enum jk_step eval_into(struct jk_interp *ip, const struct jk_expr *e, struct jk_value *ret) {
  char err[512];
  int r = jk_eval(e, jk_state_lookup, ip->state, ret, err, sizeof err);
  if (r < 0)
    return jk_exec_fail(ip, r == SL_ENAME ? "NameError" : "ValueError", "%s", err);
  return JK_STEP_DONE;
}

/* Whether a value of the language's type t can stand for an option of type
 * want: numbers for numbers, yes/no for yes/no, a duration or a number of
 * seconds for a duration; anything that writes as text for a string. */
static bool kind_fits(enum sl_opt_type want, enum jk_value_type t) {
  switch (want) {
  case SL_OPT_INT:
  case SL_OPT_U64:
  case SL_OPT_NUM: return t == JK_VAL_NUM;
  case SL_OPT_BOOL: return t == JK_VAL_BOOL;
  case SL_OPT_DUR: return t == JK_VAL_DURATION || t == JK_VAL_NUM;
  default: return true;
  }
}

/* A value against its option's declaration (its kind, then bounds and
 * choices), as spotlab-train or the gateway would check it, so a cell fails
 * at once and says which line, and what is sent has the declared JSON type;
 * a duration against its bounds too (deadline=1000d). */
static enum jk_step check_option(struct jk_interp *ip, const struct jk_option *o,
                                 const struct jk_value *v) {
  const struct sl_opt *d = jk_lang_option_decl(o->name);
  if (!d)
    return JK_STEP_DONE;
  /* a word the row takes besides its type ("checkpoint_every=auto") */
  bool choice = d->choices && v->type == JK_VAL_STR && sl_opt_check(d, v->str, NULL, 0) == 0;
  if (!choice && !kind_fits(d->type, v->type)) {
    char *shown = jk_value_format(v);
    enum jk_step st = jk_exec_fail(ip, "TypeError", "line %d: %s takes %s, not %s", o->line, o->name,
                                   d->type == SL_OPT_BOOL  ? "yes or no"
                                   : d->type == SL_OPT_DUR ? "a duration (90s, 30m, 2h)"
                                                           : "a number",
                                   shown ? shown : "this value");
    free(shown);
    return st;
  }
  if (d->type == SL_OPT_FLAG || (d->type == SL_OPT_DUR && v->type != JK_VAL_DURATION))
    return JK_STEP_DONE;
  char *text = jk_value_to_text(v), err[600];
  if (!text)
    return jk_exec_fail(ip, "MemoryError", "out of memory");
  int r = sl_opt_check(d, text, err, sizeof err);
  free(text);
  if (r < 0)
    return jk_exec_fail(ip, "ValueError", "line %d: %s", o->line, err);
  return JK_STEP_DONE;
}

/* Evaluates a CALL's options into a JSON object; bare words that are not
 * variables stay strings (instance=g5.xlarge). */
enum jk_step jk_exec_eval_options(struct jk_interp *ip, const struct jk_option *opts, size_t n,
                                  json_t *ret_obj) {
  for (size_t i = 0; i < n; i++) {
    struct jk_value v = {0};
    if (eval_into(ip, opts[i].value, &v) != JK_STEP_DONE)
      return JK_STEP_ERROR;
    if (check_option(ip, &opts[i], &v) != JK_STEP_DONE) {
      jk_value_done(&v);
      return JK_STEP_ERROR;
    }
    json_t *j;
    switch (v.type) {
    case JK_VAL_NUM:
      j = (v.num == floor(v.num) && fabs(v.num) < 9e15) ? json_integer((json_int_t)v.num)
                                                         : sl_json_real(v.num);
      break;
    case JK_VAL_BOOL:
      j = json_boolean(v.boolean);
      break;
    case JK_VAL_STR:
      j = json_string(v.str);
      break;
    default: {
      char *s = jk_value_to_text(&v);
      j = json_string(s ? s : "");
      free(s);
    }
    }
    json_object_set_new(ret_obj, opts[i].name, j);
    jk_value_done(&v);
  }
  return JK_STEP_DONE;
}

/* A data path as a notebook means it: a relative one is taken from the
 * kernel's working directory (Jupyter starts a kernel in its notebook's
 * folder), as open() in a Python kernel takes it, ~/ from the user's home,
 * and kept absolute, since
 * the job reads it elsewhere (its worker's own folder). The data sets
 * spotlab ships keep their names. NULL on OOM. */
static char *data_path(const char *func, const char *arg) {
  bool shipped = (!strcmp(func, "text") && !strcmp(arg, "moby-dick")) ||
                 (!strcmp(func, "fashion_mnist") && !strcmp(arg, "fashion-mnist"));
  char cwd[4096];
  char *abs = NULL;
  const char *home = getenv("HOME");
  if (!shipped && arg[0] == '~' && arg[1] == '/' && home && home[0] == '/') { /* ~/x: the user's */
    if (asprintf(&abs, "%s%s", home, arg + 1) < 0)
      return NULL;
    return abs;
  }
  if (shipped || !*arg || arg[0] == '/' || !getcwd(cwd, sizeof cwd))
    return strdup(arg);
  while (arg[0] == '.' && arg[1] == '/') /* ./x */
    arg += 2;
  if (asprintf(&abs, "%s%s%s", cwd, strcmp(cwd, "/") ? "/" : "", arg) < 0)
    return NULL;
  return abs;
}

enum jk_step jk_stmt_define(struct jk_interp *ip, const struct jk_stmt *s) {
  const struct jk_expr *e = s->expr;
  bool model = s->kind == JK_STMT_MODEL;
  if (!e || e->kind != JK_EXPR_CALL)
    return jk_exec_fail(ip, "TypeError", "line %d: %s %s needs a call such as %s", s->line,
                model ? "model" : "data", s->name, model ? "gpt(layers=4)" : "text(\"moby-dick\")");
  json_t *spec = json_pack("{s:s, s:[], s:{}}", "type", e->name, "args", "options");
  for (size_t i = 0; i < e->n_items; i++) {
    struct jk_value v = {0};
    if (eval_into(ip, e->items[i], &v) != JK_STEP_DONE) {
      json_decref(spec);
      return JK_STEP_ERROR;
    }
    if (v.type != JK_VAL_STR) {
      jk_value_done(&v);
      json_decref(spec);
      return jk_exec_fail(ip, "TypeError", "line %d: %s() takes a string", s->line, e->name);
    }
    char *arg = model ? strdup(v.str) : data_path(e->name, v.str);
    jk_value_done(&v);
    if (!arg) {
      json_decref(spec);
      return jk_exec_fail(ip, "MemoryError", "out of memory");
    }
    json_array_append_new(json_object_get(spec, "args"), json_string(arg));
    free(arg);
  }
  json_t *opts = json_object_get(spec, "options");
  if (jk_exec_eval_options(ip, e->opts, e->n_opts, opts) != JK_STEP_DONE) {
    json_decref(spec);
    return JK_STEP_ERROR;
  }
  json_t *dim = json_object_get(opts, "dim"), *heads = json_object_get(opts, "heads");
  if (dim && heads && json_integer_value(dim) % json_integer_value(heads) != 0) {
    json_decref(spec);
    return jk_exec_fail(ip, "ValueError", "line %d: dim must be a multiple of heads", s->line);
  }
  if (strcmp(e->name, "text") == 0 && json_array_size(json_object_get(spec, "args")) != 1) {
    json_decref(spec);
    return jk_exec_fail(ip, "TypeError", "line %d: text() takes one path or dataset name", s->line);
  }
  int r = jk_state_set_def(ip->state, s->name, model ? "model" : "data", spec);
  if (r < 0)
    return jk_exec_fail(ip, "MemoryError", "cannot define %s: %s", s->name, sl_strerror(r));
  return JK_STEP_DONE;
}

enum jk_step jk_exec_show(struct jk_interp *ip, const struct jk_stmt *s, const char *extra) {
  struct jk_def d;
  if (!jk_state_var(ip->state, s->name) && jk_state_def(ip->state, s->name, &d) < 0)
    return jk_exec_fail(ip, "NameError", "line %d, column %d: '%s' is not defined", s->line, s->col, s->name);
  char *desc = jk_state_show(ip->state, s->name);
  if (desc && extra && *extra) {
    char *more = NULL;
    if (asprintf(&more, "%s\n%s", desc, extra) < 0)
      more = NULL;
    free(desc);
    desc = more;
  }
  if (!desc)
    return jk_exec_fail(ip, "MemoryError", "out of memory");
  char *esc = jk_xml_escape(desc);
  char *html = NULL;
  if (esc && asprintf(&html, "<div class=\"spotlab-show\"><pre>%s</pre></div>", esc) < 0)
    html = NULL;
  display(ip, json_pack("{s:s, s:s}", "text/plain", desc, "text/html", html ? html : desc));
  free(esc);
  free(html);
  free(desc);
  return JK_STEP_DONE;
}

enum jk_step jk_stmt_print(struct jk_interp *ip, const struct jk_stmt *s) {
  size_t cap = 256, len = 0;
  char *out = malloc(cap);
  if (!out)
    return jk_exec_fail(ip, "MemoryError", "out of memory");
  out[0] = '\0';
  for (size_t i = 0; i < s->n_items; i++) {
    struct jk_value v = {0};
    if (eval_into(ip, s->items[i], &v) != JK_STEP_DONE) {
      free(out);
      return JK_STEP_ERROR;
    }
    char *t = jk_value_to_text(&v);
    jk_value_done(&v);
    size_t need = len + (t ? strlen(t) : 0) + 3;
    if (need > cap) {
      char *grown = realloc(out, need * 2);
      if (!grown) {
        free(t);
        free(out);
        return jk_exec_fail(ip, "MemoryError", "out of memory");
      }
      out = grown;
      cap = need * 2;
    }
    len += (size_t)sprintf(out + len, "%s%s", i ? " " : "", t ? t : "");
    free(t);
  }
  strcpy(out + len, "\n");
  jk_exec_stream(ip, "stdout", out);
  free(out);
  return JK_STEP_DONE;
}

enum jk_step jk_stmt_sleep(struct jk_interp *ip, const struct jk_stmt *s) {
  struct jk_value v = {0};
  if (eval_into(ip, s->expr, &v) != JK_STEP_DONE)
    return JK_STEP_ERROR;
  int64_t us;
  if (v.type == JK_VAL_DURATION)
    us = v.duration_us;
  else if (v.type == JK_VAL_NUM && v.num >= 0 && v.num * 1e6 < (double)MAX_SLEEP_US)
    us = (int64_t)(v.num * 1e6);
  else
    us = -1;
  jk_value_done(&v);
  if (us < 0 || us > MAX_SLEEP_US)
    return jk_exec_fail(ip, "ValueError", "line %d: sleep takes a duration between 0s and 24h", s->line);
  ip->running->wait = JK_WAIT_SLEEP;
  ip->running->wake_at_us = sl_time_mono_us() + us;
  return JK_STEP_WAIT;
}

static enum jk_step run_input(struct jk_interp *ip, const struct jk_stmt *s) {
  const struct jk_expr *e = s->expr;
  struct jk_value prompt = {0};
  if (e->n_items > 1 || e->n_opts)
    return jk_exec_fail(ip, "TypeError", "line %d: %s() takes one prompt string", s->line, e->name);
  if (e->n_items == 1 && eval_into(ip, e->items[0], &prompt) != JK_STEP_DONE)
    return JK_STEP_ERROR;
  if (!ip->running->allow_stdin) {
    jk_value_done(&prompt);
    return jk_exec_fail(ip, "StdinNotImplemented",
                "line %d: %s() asks the front end for input, and this front end does not accept input",
                s->line, e->name);
  }
  char *text = prompt.type == JK_VAL_NONE ? strdup("") : jk_value_to_text(&prompt);
  jk_value_done(&prompt);
  free(ip->running->input_target);
  ip->running->input_target = strdup(s->name);
  int r = ip->pub->input_request(ip->pub_ud, text ? text : "", strcmp(e->name, "password") == 0);
  free(text);
  if (r < 0)
    return jk_exec_fail(ip, "StdinNotImplemented", "line %d: %s() cannot ask the front end", s->line, e->name);
  ip->running->wait = JK_WAIT_INPUT;
  return JK_STEP_WAIT;
}

enum jk_step jk_stmt_assign(struct jk_interp *ip, const struct jk_stmt *s) {
  const struct jk_expr *e = s->expr;
  if (e && e->kind == JK_EXPR_CALL && (strcmp(e->name, "input") == 0 || strcmp(e->name, "password") == 0))
    return run_input(ip, s);
  struct jk_value v = {0};
  if (eval_into(ip, e, &v) != JK_STEP_DONE)
    return JK_STEP_ERROR;
  int r = jk_state_set_var(ip->state, s->name, &v);
  if (r < 0)
    return jk_exec_fail(ip, "MemoryError", "cannot set %s: %s", s->name, sl_strerror(r));
  return JK_STEP_DONE;
}

enum jk_step jk_stmt_expr(struct jk_interp *ip, const struct jk_stmt *s) {
  bool last = ip->running->pc + 1 == ip->running->cell->n;
  struct jk_value v = {0};
  if (eval_into(ip, s->expr, &v) != JK_STEP_DONE)
    return JK_STEP_ERROR;
  if (last) {
    jk_value_done(&ip->running->result);
    ip->running->result = v;
    ip->running->has_result = true;
  } else {
    jk_value_done(&v);
  }
  return JK_STEP_DONE;
}

/* ---- dispatch ----------------------------------------------------------- */

/* The interpreter's columns of the command table. */
static const struct {
  jk_stmt_fn run;
  bool gateway;
  const char *word;
} commands[] = {
#define JK_COMMAND(id, word, kind, stmt, args, gateway, run, complete, funcs, summary, text,     \
                   example)                                                                    \
  [JK_CMD_##id] = {run, gateway, word},
#include "commands.def"
#undef JK_COMMAND
};

static enum jk_step run_stmt(struct jk_interp *ip, const struct jk_stmt *s) {
  if ((size_t)s->cmd >= sizeof commands / sizeof *commands || !commands[s->cmd].run)
    return jk_exec_fail(ip, "InternalError", "line %d: nothing runs this statement", s->line);
  if (commands[s->cmd].gateway && !ip->gw)
    return jk_exec_needs_gateway(ip, commands[s->cmd].word);
  return commands[s->cmd].run(ip, s);
}

/* ---- execution lifecycle ------------------------------------------------ */

static void free_execution(struct jk_execution *x) {
  jk_cell_free(x->cell);
  jk_value_done(&x->result);
  json_decref(x->error);
  free(x->input_target);
  free(x);
}

void jk_exec_free_running(struct jk_interp *ip) {
  if (ip->running)
    free_execution(ip->running);
  ip->running = NULL;
}

/* Ends the running execution: tells the core, after which the interpreter
 * is idle again (the core may start the next cell from inside finished()). */
static void finish(struct jk_interp *ip, bool ok) {
  struct jk_execution *x = ip->running;
  json_t *result = NULL, *error = NULL;
  if (ok && x->has_result) {
    char *text = jk_value_format(&x->result);
    result = json_pack("{s:s}", "text/plain", text ? text : "");
    free(text);
  } else if (!ok) {
    error = x->error ? x->error : json_pack("{s:s, s:s, s:[]}", "ename", "Error", "evalue", "", "traceback");
    x->error = NULL;
  }
  ip->exec_hooks->cell_finished(ip);
  if (ip->session)
    jk_session_cell_done(ip->session);
  if (ip->follows)
    jk_rename_check(ip->rename, false); /* renamed meanwhile? (rename.h) */
  if (!x->silent)
    ip->cell_ran = true;
  ip->running = NULL;
  free_execution(x);
  ip->pub->finished(ip->pub_ud, result, error);
}

static void run_until_wait(struct jk_interp *ip) {
  struct jk_execution *x = ip->running;
  while (x->pc < x->cell->n) {
    enum jk_step st = run_stmt(ip, &x->cell->stmts[x->pc]);
    if (st == JK_STEP_WAIT)
      return;
    x->pc++;
    if (st == JK_STEP_ERROR) {
      finish(ip, false);
      return;
    }
  }
  finish(ip, true);
}

/* A syntax error's traceback shows the offending line with a caret under the column. */
static void syntax_error(struct jk_interp *ip, const char *code, const struct jk_parse_error *perr) {
  struct jk_execution *x = ip->running;
  jk_exec_fail(ip, "SyntaxError", "line %d, column %d: %s", perr->line, perr->col, perr->message);
  const char *p = code;
  for (int l = 1; l < perr->line && p; l++) {
    p = strchr(p, '\n');
    if (p)
      p++;
  }
  if (p && x->error) {
    size_t n = strcspn(p, "\n");
    char buf[600];
    int col = perr->col > 0 && perr->col < 500 ? perr->col : 1;
    snprintf(buf, sizeof buf, "  %.*s\n  %*s^", (int)(n < 500 ? n : 500), p, col - 1, "");
    json_array_insert_new(json_object_get(x->error, "traceback"), 0, json_string(buf));
  }
}

void jk_exec_execute(struct jk_interp *ip, const struct jk_exec_args *args) {
  struct jk_execution *x = ip->running ? NULL : calloc(1, sizeof *x);
  if (!x) {
    ip->pub->finished(ip->pub_ud, NULL,
                      json_pack("{s:s, s:s, s:[]}", "ename", ip->running ? "InternalError" : "MemoryError",
                                "evalue", ip->running ? "a cell is already running" : "out of memory",
                                "traceback"));
    return;
  }
  x->silent = args->silent;
  x->allow_stdin = args->allow_stdin;
  x->terminal = args->terminal;
  ip->running = x;
  ip->exec_hooks->cell_started(ip); /* a cell run keeps the notebook active in the gateway */
  if (!x->silent && ip->pending_notice[0]) { /* notices that came between cells */
    jk_exec_stream(ip, "stderr", ip->pending_notice);
    ip->pending_notice[0] = 0;
  }
  const char *code = args->code ? args->code : "";
  struct jk_parse_error perr = {0};
  if (jk_parse(code, strlen(code), &x->cell, &perr) < 0) {
    syntax_error(ip, code, &perr);
    finish(ip, false);
    return;
  }
  if (ip->session && jk_session_loading(ip->session)) {
    x->wait = JK_WAIT_SESSION;
    return;
  }
  run_until_wait(ip);
}

void jk_exec_session_ready(struct jk_interp *ip) {
  if (!ip->running || ip->running->wait != JK_WAIT_SESSION)
    return;
  ip->running->wait = JK_WAIT_NONE;
  run_until_wait(ip);
}

void jk_exec_step_ended(struct jk_interp *ip, enum jk_step st) {
  struct jk_execution *x = ip->running;
  if (!x || st == JK_STEP_WAIT)
    return;
  x->wait = JK_WAIT_NONE;
  x->gw_req = 0;
  x->pc++;
  if (st == JK_STEP_ERROR)
    finish(ip, false);
  else
    run_until_wait(ip);
}

void jk_exec_wake(struct jk_interp *ip) {
  struct jk_execution *x = ip->running;
  if (!x || x->wait != JK_WAIT_SLEEP || sl_time_mono_us() < x->wake_at_us)
    return;
  x->wait = JK_WAIT_NONE;
  x->pc++;
  run_until_wait(ip);
}

bool jk_exec_awaits_input(const struct jk_interp *ip) {
  return ip->running && ip->running->wait == JK_WAIT_INPUT;
}

void jk_exec_input_reply(struct jk_interp *ip, const char *value) {
  struct jk_execution *x = ip->running;
  if (!x || x->wait != JK_WAIT_INPUT) {
    sl_warn("kernel", "input_reply without a pending input request; ignored");
    return;
  }
  x->wait = JK_WAIT_NONE;
  struct jk_value v = {.type = JK_VAL_STR, .str = strdup(value ? value : "")};
  if (!v.str || jk_state_set_var(ip->state, x->input_target, &v) < 0) {
    jk_exec_fail(ip, "MemoryError", "out of memory");
    finish(ip, false);
    return;
  }
  x->pc++;
  run_until_wait(ip);
}

void jk_exec_interrupt(struct jk_interp *ip) {
  struct jk_execution *x = ip->running;
  if (!x)
    return;
  if (x->wait == JK_WAIT_GATEWAY || x->wait == JK_WAIT_JOB) {
    ip->exec_hooks->interrupted(ip); /* records the error (a detach for a followed job) */
    x->wait = JK_WAIT_NONE;
    finish(ip, false);
    return;
  }
  const char *what = x->wait == JK_WAIT_INPUT ? "while waiting for input"
                     : x->wait == JK_WAIT_SESSION ? "while loading the notebook session"
                                                  : "while sleeping";
  jk_exec_fail(ip, "Interrupted", "execution interrupted %s at line %d", what,
       x->cell && x->pc < x->cell->n ? x->cell->stmts[x->pc].line : 0);
  x->wait = JK_WAIT_NONE;
  finish(ip, false);
}

json_t *jk_exec_user_expressions(struct jk_interp *ip, const json_t *exprs) {
  json_t *out = json_object();
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)exprs, key, v) {
    const char *code = json_string_value(v);
    struct jk_cell *cell = NULL;
    struct jk_parse_error perr = {0};
    json_t *res = NULL;
    if (code && jk_parse(code, strlen(code), &cell, &perr) == 0 && cell->n == 1 &&
        cell->stmts[0].kind == JK_STMT_EXPR) {
      struct jk_value val = {0};
      char err[256];
      int r = jk_eval(cell->stmts[0].expr, jk_state_lookup, ip->state, &val, err, sizeof err);
      if (r == 0) {
        char *text = jk_value_format(&val);
        res = json_pack("{s:s, s:{s:s}, s:{}}", "status", "ok", "data", "text/plain",
                        text ? text : "", "metadata");
        free(text);
        jk_value_done(&val);
      } else {
        res = json_pack("{s:s, s:s, s:s, s:[]}", "status", "error", "ename",
                        r == SL_ENAME ? "NameError" : "ValueError", "evalue", err, "traceback");
      }
    }
    if (!res)
      res = json_pack("{s:s, s:s, s:s, s:[]}", "status", "error", "ename", "SyntaxError",
                      "evalue", "not a single expression", "traceback");
    jk_cell_free(cell);
    json_object_set_new(out, key, res);
  }
  return out;
}
