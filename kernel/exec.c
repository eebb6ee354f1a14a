/* Running cells: the executor behind execute_request.
 *
 * A cell is parsed whole first; a syntax error sends nothing anywhere. Then
 * statements run in order. A statement that must wait (sleep, input, a
 * gateway reply, a job being followed) leaves the execution pending with a
 * wait reason; the channel loop keeps serving control requests and resumes
 * it on a timer, a stdin reply or a gateway message. Variables and
 * model/data definitions belong to the notebook session: every change is
 * recorded (jk_session_touch) and sent to the gateway when the cell ends
 * (kept for later while the gateway is down, session.c).
 * A cell that arrives while the session state is still loading waits for it
 * (bounded by the gateway client's hello timeout). */
#include "core_internal.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#define MAX_VARS 4096
#define MAX_SLEEP_US (24 * 3600 * SL_US_PER_S)


/* ---- notebook state ----------------------------------------------------- */

struct jk_var *jk_exec_find_var(struct jk_core *c, const char *name) {
  for (size_t i = 0; i < c->n_vars; i++)
    if (strcmp(c->vars[i].name, name) == 0)
      return &c->vars[i];
  return NULL;
}

struct jk_def *jk_exec_find_def(struct jk_core *c, const char *name) {
  for (size_t i = 0; i < c->n_defs; i++)
    if (strcmp(c->defs[i].name, name) == 0)
      return &c->defs[i];
  return NULL;
}

static void drop_def(struct jk_core *c, const char *name) {
  struct jk_def *d = jk_exec_find_def(c, name);
  if (!d)
    return;
  jk_session_touch(c, name);
  free(d->name);
  free(d->kind);
  json_decref(d->spec);
  *d = c->defs[--c->n_defs];
}

static void drop_var(struct jk_core *c, const char *name) {
  struct jk_var *v = jk_exec_find_var(c, name);
  if (!v)
    return;
  jk_session_touch(c, name);
  free(v->name);
  jk_value_done(&v->value);
  *v = c->vars[--c->n_vars];
}

int jk_exec_set_var(struct jk_core *c, const char *name, struct jk_value *value) {
  drop_def(c, name);
  jk_session_touch(c, name);
  struct jk_var *v = jk_exec_find_var(c, name);
  if (v) {
    jk_value_done(&v->value);
    v->value = *value;
    return 0;
  }
  if (c->n_vars >= MAX_VARS) {
    jk_value_done(value);
    return SL_ELIMIT;
  }
  struct jk_var *vars = realloc(c->vars, (c->n_vars + 1) * sizeof *vars);
  char *copy = strdup(name);
  if (!vars || !copy) {
    if (vars)
      c->vars = vars;
    free(copy);
    jk_value_done(value);
    return -ENOMEM;
  }
  c->vars = vars;
  c->vars[c->n_vars++] = (struct jk_var){copy, *value};
  return 0;
}

int jk_exec_set_def(struct jk_core *c, const char *name, const char *kind, json_t *spec) {
  drop_var(c, name);
  drop_def(c, name);
  jk_session_touch(c, name);
  if (c->n_defs >= MAX_VARS) {
    json_decref(spec);
    return SL_ELIMIT;
  }
  struct jk_def *defs = realloc(c->defs, (c->n_defs + 1) * sizeof *defs);
  if (!defs) {
    json_decref(spec);
    return -ENOMEM;
  }
  c->defs = defs;
  c->defs[c->n_defs++] = (struct jk_def){strdup(name), strdup(kind), spec};
  return 0;
}

const struct jk_value *jk_exec_lookup(void *core, const char *name) {
  struct jk_var *v = jk_exec_find_var(core, name);
  return v ? &v->value : NULL;
}

const char **jk_exec_names(struct jk_core *c, size_t *ret_n) {
  const char **names = malloc((c->n_vars + c->n_defs + 1) * sizeof *names);
  size_t n = 0;
  if (names) {
    for (size_t i = 0; i < c->n_vars; i++)
      names[n++] = c->vars[i].name;
    for (size_t i = 0; i < c->n_defs; i++)
      names[n++] = c->defs[i].name;
  }
  *ret_n = n;
  return names;
}

/* "gpt(layers=4, heads=4)" or "text(\"moby-dick\")": the definition as the language writes it. */
char *jk_exec_format_spec(const json_t *spec) {
  const char *type = sl_json_get_str(spec, "type", "?");
  json_t *args = json_object_get(spec, "args");
  json_t *opts = json_object_get(spec, "options");
  size_t cap = 1024;
  char *out = malloc(cap);
  if (!out)
    return NULL;
  int n = snprintf(out, cap, "%s(", type);
  size_t i;
  json_t *v;
  bool first = true;
  json_array_foreach(args, i, v) {
    n += snprintf(out + n, cap - (size_t)n, "%s\"%s\"", first ? "" : ", ", json_string_value(v));
    first = false;
    if ((size_t)n >= cap - 64)
      break;
  }
  const char *key;
  json_object_foreach(opts, key, v) {
    if ((size_t)n >= cap - 64)
      break;
    char *val = json_is_string(v) ? strdup(json_string_value(v)) : sl_json_dump(v, NULL);
    n += snprintf(out + n, cap - (size_t)n, "%s%s=%s", first ? "" : ", ", key, val ? val : "?");
    free(val);
    first = false;
  }
  snprintf(out + n, cap - (size_t)n, ")");
  return out;
}

char *jk_exec_describe(struct jk_core *c, const char *name) {
  char *text = NULL;
  struct jk_var *v = jk_exec_find_var(c, name);
  if (v) {
    char *val = jk_value_format(&v->value);
    if (asprintf(&text, "%s = %s\n\nA notebook variable.", name, val ? val : "?") < 0)
      text = NULL;
    free(val);
    return text;
  }
  struct jk_def *d = jk_exec_find_def(c, name);
  if (d) {
    char *spec = jk_exec_format_spec(d->spec);
    if (asprintf(&text, "%s %s = %s\n\nA %s of this notebook session.", d->kind, name,
                 spec ? spec : "?", d->kind) < 0)
      text = NULL;
    free(spec);
  }
  return text;
}

void jk_exec_clear_state(struct jk_core *c) {
  while (c->n_vars)
    drop_var(c, c->vars[0].name);
  while (c->n_defs)
    drop_def(c, c->defs[0].name);
}

void jk_exec_free_state(struct jk_core *c) {
  jk_exec_clear_state(c);
  c->last_request = jk_msg_free(c->last_request);
  c->last_display = jk_display_free(c->last_display);
  free(c->vars);
  free(c->defs);
  c->vars = NULL;
  c->defs = NULL;
  if (c->running) {
    jk_jobs_free_follow(c);
    struct jk_execution *x = c->running;
    jk_msg_free(x->request);
    jk_cell_free(x->cell);
    jk_value_done(&x->result);
    json_decref(x->error);
    free(x->input_target);
    free(x);
    c->running = NULL;
  }
}

/* ---- output ------------------------------------------------------------- */

void jk_exec_stream(struct jk_core *c, const char *name, const char *text) {
  if (c->running->silent)
    return;
  jk_core_publish(c, c->running->request, "stream", json_pack("{s:s, s:s}", "name", name, "text", text));
}

void jk_exec_notice(struct jk_core *c, const json_t *notice) {
  if (strcmp(sl_json_get_str(notice, "event", ""), "idle"))
    return;
  const char *action = sl_json_get_str(notice, "action", "");
  char line[256];
  if (!strcmp(action, "warning"))
    snprintf(line, sizeof line,
             "spotlab: this notebook is idle; its workers stop in %lld s unless a cell runs\n",
             (long long)sl_json_get_int(notice, "in_s", 0));
  else if (!strcmp(action, "shutdown"))
    snprintf(line, sizeof line, "spotlab: this notebook was idle; its workers were stopped"
                                " (the next job starts new ones)\n");
  else
    return;
  if (c->running && !c->running->silent) {
    jk_exec_stream(c, "stderr", line);
    return;
  }
  if (c->last_request) {
    /* Between cells: under the cell that ran last (front ends keep showing
     * a finished cell's output), and in the last job display's timeline. */
    jk_core_publish(c, c->last_request, "stream", json_pack("{s:s, s:s}", "name", "stderr", "text", line));
    jk_jobs_notice(c, notice);
    return;
  }
  size_t have = strlen(c->pending_notice);
  if (have + strlen(line) >= sizeof c->pending_notice)
    have = 0; /* only the newest notices are kept */
  snprintf(c->pending_notice + have, sizeof c->pending_notice - have, "%s", line);
}

static void display(struct jk_core *c, json_t *data) {
  if (c->running->silent) {
    json_decref(data);
    return;
  }
  jk_core_publish(c, c->running->request, "display_data",
                  json_pack("{s:o, s:{}, s:{}}", "data", data, "metadata", "transient"));
}

/* Records the error of the running execution; finish() publishes it as
 * `error` and puts it in the execute_reply. */
enum jk_step jk_exec_fail(struct jk_core *c, const char *ename, const char *fmt, ...) {
  char evalue[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(evalue, sizeof evalue, fmt, ap);
  va_end(ap);
  char line[1200];
  snprintf(line, sizeof line, "\033[0;31m%s\033[0m: %s", ename, evalue);
  json_t *content =
      json_pack("{s:s, s:s, s:[s]}", "ename", ename, "evalue", evalue, "traceback", line);
  json_decref(c->running->error);
  c->running->error = content;
  return JK_STEP_ERROR;
}

/* ---- statements --------------------------------------------------------- */

enum jk_step jk_exec_needs_gateway(struct jk_core *c, const char *what) {
  return jk_exec_fail(c, "GatewayUnavailable",
              "%s needs the spotlab gateway, which this kernel cannot reach: "
              "training, evaluation, sampling, jobs and cost run through spotlab-gateway",
              what);
}

static enum jk_step eval_into(struct jk_core *c, const struct jk_expr *e, struct jk_value *ret) {
  char err[512];
  int r = jk_eval(e, jk_exec_lookup, c, ret, err, sizeof err);
  if (r < 0)
    return jk_exec_fail(c, r == SL_ENAME ? "NameError" : "ValueError", "%s", err);
  return JK_STEP_DONE;
}

/* Evaluates a CALL's options into a JSON object; bare words that are not
 * variables stay strings (instance=g5.xlarge). */
enum jk_step jk_exec_eval_options(struct jk_core *c, const struct jk_option *opts, size_t n,
                                  json_t *ret_obj) {
  for (size_t i = 0; i < n; i++) {
    struct jk_value v = {0};
    if (eval_into(c, opts[i].value, &v) != JK_STEP_DONE)
      return JK_STEP_ERROR;
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

static enum jk_step check_positive_int(struct jk_core *c, const struct jk_stmt *s, json_t *opts,
                                    const char *key) {
  json_t *v = json_object_get(opts, key);
  if (v && (!json_is_integer(v) || json_integer_value(v) <= 0))
    return jk_exec_fail(c, "ValueError", "line %d: %s must be a positive whole number", s->line, key);
  return JK_STEP_DONE;
}

static enum jk_step run_definition(struct jk_core *c, const struct jk_stmt *s) {
  const struct jk_expr *e = s->expr;
  bool model = s->kind == JK_STMT_MODEL;
  if (!e || e->kind != JK_EXPR_CALL)
    return jk_exec_fail(c, "TypeError", "line %d: %s %s needs a call such as %s", s->line,
                model ? "model" : "data", s->name, model ? "gpt(layers=4)" : "text(\"moby-dick\")");
  json_t *spec = json_pack("{s:s, s:[], s:{}}", "type", e->name, "args", "options");
  for (size_t i = 0; i < e->n_items; i++) {
    struct jk_value v = {0};
    if (eval_into(c, e->items[i], &v) != JK_STEP_DONE) {
      json_decref(spec);
      return JK_STEP_ERROR;
    }
    if (v.type != JK_VAL_STR) {
      jk_value_done(&v);
      json_decref(spec);
      return jk_exec_fail(c, "TypeError", "line %d: %s() takes a string", s->line, e->name);
    }
    json_array_append_new(json_object_get(spec, "args"), json_string(v.str));
    jk_value_done(&v);
  }
  json_t *opts = json_object_get(spec, "options");
  if (jk_exec_eval_options(c, e->opts, e->n_opts, opts) != JK_STEP_DONE) {
    json_decref(spec);
    return JK_STEP_ERROR;
  }
  static const char *const ints[] = {"layers", "heads", "dim", "ctx", "hidden"};
  for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
    if (check_positive_int(c, s, opts, ints[i]) != JK_STEP_DONE) {
      json_decref(spec);
      return JK_STEP_ERROR;
    }
  json_t *dim = json_object_get(opts, "dim"), *heads = json_object_get(opts, "heads");
  if (dim && heads && json_integer_value(dim) % json_integer_value(heads) != 0) {
    json_decref(spec);
    return jk_exec_fail(c, "ValueError", "line %d: dim must be a multiple of heads", s->line);
  }
  if (strcmp(e->name, "text") == 0 && json_array_size(json_object_get(spec, "args")) != 1) {
    json_decref(spec);
    return jk_exec_fail(c, "TypeError", "line %d: text() takes one path or dataset name", s->line);
  }
  int r = jk_exec_set_def(c, s->name, model ? "model" : "data", spec);
  if (r < 0)
    return jk_exec_fail(c, "MemoryError", "cannot define %s: %s", s->name, sl_strerror(r));
  return JK_STEP_DONE;
}

enum jk_step jk_exec_show(struct jk_core *c, const struct jk_stmt *s, const char *extra) {
  char *desc = NULL;
  struct jk_var *v = jk_exec_find_var(c, s->name);
  struct jk_def *d = v ? NULL : jk_exec_find_def(c, s->name);
  if (v) {
    char *val = jk_value_format(&v->value);
    if (asprintf(&desc, "%s = %s", s->name, val ? val : "?") < 0)
      desc = NULL;
    free(val);
  } else if (d) {
    char *spec = jk_exec_format_spec(d->spec);
    if (asprintf(&desc, "%s %s = %s", d->kind, s->name, spec ? spec : "?") < 0)
      desc = NULL;
    free(spec);
  } else {
    return jk_exec_fail(c, "NameError", "line %d, column %d: '%s' is not defined", s->line, s->col, s->name);
  }
  if (desc && extra && *extra) {
    char *more = NULL;
    if (asprintf(&more, "%s\n%s", desc, extra) < 0)
      more = NULL;
    free(desc);
    desc = more;
  }
  if (!desc)
    return jk_exec_fail(c, "MemoryError", "out of memory");
  char *esc = jk_xml_escape(desc);
  char *html = NULL;
  if (esc && asprintf(&html, "<div class=\"spotlab-show\"><pre>%s</pre></div>", esc) < 0)
    html = NULL;
  display(c, json_pack("{s:s, s:s}", "text/plain", desc, "text/html", html ? html : desc));
  free(esc);
  free(html);
  free(desc);
  return JK_STEP_DONE;
}

static enum jk_step run_print(struct jk_core *c, const struct jk_stmt *s) {
  size_t cap = 256, len = 0;
  char *out = malloc(cap);
  if (!out)
    return jk_exec_fail(c, "MemoryError", "out of memory");
  out[0] = '\0';
  for (size_t i = 0; i < s->n_items; i++) {
    struct jk_value v = {0};
    if (eval_into(c, s->items[i], &v) != JK_STEP_DONE) {
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
        return jk_exec_fail(c, "MemoryError", "out of memory");
      }
      out = grown;
      cap = need * 2;
    }
    len += (size_t)sprintf(out + len, "%s%s", i ? " " : "", t ? t : "");
    free(t);
  }
  strcpy(out + len, "\n");
  jk_exec_stream(c, "stdout", out);
  free(out);
  return JK_STEP_DONE;
}

static enum jk_step run_sleep(struct jk_core *c, const struct jk_stmt *s) {
  struct jk_value v = {0};
  if (eval_into(c, s->expr, &v) != JK_STEP_DONE)
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
    return jk_exec_fail(c, "ValueError", "line %d: sleep takes a duration between 0s and 24h", s->line);
  c->running->wait = JK_WAIT_SLEEP;
  c->running->wake_at_us = sl_time_mono_us() + us;
  return JK_STEP_WAIT;
}

static enum jk_step run_input(struct jk_core *c, const struct jk_stmt *s) {
  const struct jk_expr *e = s->expr;
  struct jk_value prompt = {0};
  if (e->n_items > 1 || e->n_opts)
    return jk_exec_fail(c, "TypeError", "line %d: %s() takes one prompt string", s->line, e->name);
  if (e->n_items == 1 && eval_into(c, e->items[0], &prompt) != JK_STEP_DONE)
    return JK_STEP_ERROR;
  if (!c->running->allow_stdin) {
    jk_value_done(&prompt);
    return jk_exec_fail(c, "StdinNotImplemented",
                "line %d: %s() asks the front end for input, and this front end does not accept input",
                s->line, e->name);
  }
  char *text = prompt.type == JK_VAL_NONE ? strdup("") : jk_value_to_text(&prompt);
  jk_value_done(&prompt);
  free(c->running->input_target);
  c->running->input_target = strdup(s->name);
  jk_core_reply(c, JK_CH_STDIN, c->running->request, "input_request",
                json_pack("{s:s, s:b}", "prompt", text ? text : "", "password",
                          strcmp(e->name, "password") == 0));
  free(text);
  c->running->wait = JK_WAIT_INPUT;
  return JK_STEP_WAIT;
}

static enum jk_step run_assign(struct jk_core *c, const struct jk_stmt *s) {
  const struct jk_expr *e = s->expr;
  if (e && e->kind == JK_EXPR_CALL && (strcmp(e->name, "input") == 0 || strcmp(e->name, "password") == 0))
    return run_input(c, s);
  struct jk_value v = {0};
  if (eval_into(c, e, &v) != JK_STEP_DONE)
    return JK_STEP_ERROR;
  int r = jk_exec_set_var(c, s->name, &v);
  if (r < 0)
    return jk_exec_fail(c, "MemoryError", "cannot set %s: %s", s->name, sl_strerror(r));
  return JK_STEP_DONE;
}

static enum jk_step run_expr(struct jk_core *c, const struct jk_stmt *s, bool last) {
  struct jk_value v = {0};
  if (eval_into(c, s->expr, &v) != JK_STEP_DONE)
    return JK_STEP_ERROR;
  if (last) {
    jk_value_done(&c->running->result);
    c->running->result = v;
    c->running->has_result = true;
  } else {
    jk_value_done(&v);
  }
  return JK_STEP_DONE;
}

static enum jk_step run_stmt(struct jk_core *c, const struct jk_stmt *s, bool last) {
  switch (s->kind) {
  case JK_STMT_ASSIGN:
    return run_assign(c, s);
  case JK_STMT_DATA:
  case JK_STMT_MODEL:
    return run_definition(c, s);
  case JK_STMT_TRAIN:
  case JK_STMT_EVAL:
  case JK_STMT_SAMPLE:
    if (!c->gw)
      return jk_exec_needs_gateway(c, s->kind == JK_STMT_TRAIN ? "train" : s->kind == JK_STMT_EVAL ? "eval" : "sample");
    return jk_jobs_stmt(c, s);
  case JK_STMT_SHOW: {
    struct jk_def *d = jk_exec_find_def(c, s->name);
    if (c->gw && d && strcmp(d->kind, "model") == 0)
      return jk_jobs_show(c, s);
    return jk_exec_show(c, s, NULL);
  }
  case JK_STMT_PRINT:
    return run_print(c, s);
  case JK_STMT_SLEEP:
    return run_sleep(c, s);
  case JK_STMT_EXPR:
    return run_expr(c, s, last);
  case JK_STMT_LINE_MAGIC:
    return jk_exec_line_magic(c, s);
  case JK_STMT_CELL_MAGIC: {
    if (c->gw && strcmp(s->name, "run") == 0)
      return jk_jobs_stmt(c, s);
    char what[80];
    snprintf(what, sizeof what, "%%%%%s", s->name);
    return jk_exec_needs_gateway(c, what);
  }
  }
  return jk_exec_fail(c, "InternalError", "unknown statement");
}

/* ---- execution lifecycle ------------------------------------------------ */

static void finish(struct jk_core *c, bool ok) {
  struct jk_execution *x = c->running;
  json_t *reply;
  if (ok) {
    if (x->has_result && !x->silent) {
      char *text = jk_value_format(&x->result);
      jk_core_publish(c, x->request, "execute_result",
                      json_pack("{s:I, s:{s:s}, s:{}}", "execution_count", (json_int_t)x->count,
                                "data", "text/plain", text ? text : "", "metadata"));
      free(text);
    }
    json_t *ue = jk_exec_user_expressions(c, json_object_get(x->request->content, "user_expressions"));
    reply = json_pack("{s:s, s:I, s:o, s:[]}", "status", "ok", "execution_count",
                      (json_int_t)x->count, "user_expressions", ue, "payload");
  } else {
    json_t *err = x->error ? x->error : json_pack("{s:s, s:s, s:[]}", "ename", "Error", "evalue", "", "traceback");
    x->error = NULL;
    if (!x->silent)
      jk_core_publish(c, x->request, "error", json_deep_copy(err));
    reply = err;
    json_object_set_new(reply, "status", json_string("error"));
    json_object_set_new(reply, "execution_count", json_integer(x->count));
    if (x->stop_on_error)
      jk_core_abort_queued(c);
  }
  jk_jobs_free_follow(c);
  jk_core_reply(c, JK_CH_SHELL, x->request, "execute_reply", reply);
  jk_session_cell_done(c);
  jk_core_set_status(c, x->request, "idle");
  c->running = NULL;
  if (x->silent) {
    jk_msg_free(x->request);
  } else { /* notices that come between cells go to this cell (jk_exec_notice) */
    jk_msg_free(c->last_request);
    c->last_request = x->request;
  }
  jk_cell_free(x->cell);
  jk_value_done(&x->result);
  json_decref(x->error);
  free(x->input_target);
  free(x);
}

static void run_until_wait(struct jk_core *c) {
  struct jk_execution *x = c->running;
  while (x->pc < x->cell->n) {
    const struct jk_stmt *s = &x->cell->stmts[x->pc];
    enum jk_step st = run_stmt(c, s, x->pc + 1 == x->cell->n);
    if (st == JK_STEP_WAIT)
      return;
    x->pc++;
    if (st == JK_STEP_ERROR) {
      finish(c, false);
      return;
    }
  }
  finish(c, true);
}

void jk_exec_start(struct jk_core *c, struct jk_msg *req) {
  struct jk_execution *x = calloc(1, sizeof *x);
  if (!x) {
    jk_msg_free(req);
    return;
  }
  x->request = req;
  const json_t *ct = req->content;
  const char *code = sl_json_get_str(ct, "code", "");
  x->silent = sl_json_get_bool(ct, "silent", false);
  x->store_history = x->silent ? false : sl_json_get_bool(ct, "store_history", true);
  x->stop_on_error = sl_json_get_bool(ct, "stop_on_error", true);
  x->allow_stdin = sl_json_get_bool(ct, "allow_stdin", true);
  c->running = x;
  jk_core_set_status(c, req, "busy");
  if (x->store_history) {
    c->execution_count++;
    jk_history_add(c->history, c->execution_count, code);
  }
  x->count = c->execution_count;
  jk_jobs_cell_started(c); /* a cell run keeps the notebook active in the gateway */
  if (!x->silent)
    jk_core_publish(c, req, "execute_input",
                    json_pack("{s:s, s:I}", "code", code, "execution_count", (json_int_t)x->count));
  if (!x->silent && c->pending_notice[0]) { /* notices that came between cells */
    jk_exec_stream(c, "stderr", c->pending_notice);
    c->pending_notice[0] = 0;
  }
  struct jk_parse_error perr = {0};
  int r = jk_parse(code, strlen(code), &x->cell, &perr);
  if (r < 0) {
    jk_exec_fail(c, "SyntaxError", "line %d, column %d: %s", perr.line, perr.col, perr.message);
    /* The traceback shows the offending line with a caret under the column. */
    const char *p = code;
    for (int l = 1; l < perr.line && p; l++) {
      p = strchr(p, '\n');
      if (p)
        p++;
    }
    if (p && x->error) {
      size_t n = strcspn(p, "\n");
      char buf[600];
      int col = perr.col > 0 && perr.col < 500 ? perr.col : 1;
      snprintf(buf, sizeof buf, "  %.*s\n  %*s^", (int)(n < 500 ? n : 500), p, col - 1, "");
      json_array_insert_new(json_object_get(x->error, "traceback"), 0, json_string(buf));
    }
    finish(c, false);
    return;
  }
  if (c->sess_loading) {
    x->wait = JK_WAIT_SESSION;
    return;
  }
  run_until_wait(c);
}

void jk_exec_session_ready(struct jk_core *c) {
  if (!c->running || c->running->wait != JK_WAIT_SESSION)
    return;
  c->running->wait = JK_WAIT_NONE;
  run_until_wait(c);
}

void jk_exec_step_ended(struct jk_core *c, enum jk_step st) {
  struct jk_execution *x = c->running;
  if (!x || st == JK_STEP_WAIT)
    return;
  x->wait = JK_WAIT_NONE;
  x->gw_req = 0;
  x->pc++;
  if (st == JK_STEP_ERROR)
    finish(c, false);
  else
    run_until_wait(c);
}

void jk_exec_resume(struct jk_core *c) {
  if (!c->running)
    return;
  c->running->pc++;
  run_until_wait(c);
}

void jk_exec_input_reply(struct jk_core *c, const struct jk_msg *reply) {
  struct jk_execution *x = c->running;
  if (!x || x->wait != JK_WAIT_INPUT) {
    sl_warn("kernel", "input_reply without a pending input request; ignored");
    return;
  }
  x->wait = JK_WAIT_NONE;
  struct jk_value v = {.type = JK_VAL_STR, .str = strdup(sl_json_get_str(reply->content, "value", ""))};
  if (!v.str || jk_exec_set_var(c, x->input_target, &v) < 0) {
    jk_exec_fail(c, "MemoryError", "out of memory");
    finish(c, false);
    return;
  }
  jk_exec_resume(c);
  jk_core_dispatch(c);
}

void jk_exec_interrupt(struct jk_core *c) {
  struct jk_execution *x = c->running;
  if (!x)
    return;
  if (x->wait == JK_WAIT_GATEWAY || x->wait == JK_WAIT_JOB) {
    jk_jobs_interrupt(c); /* records the error (a detach for a followed job) */
    x->wait = JK_WAIT_NONE;
    finish(c, false);
    return;
  }
  const char *what = x->wait == JK_WAIT_INPUT ? "while waiting for input"
                     : x->wait == JK_WAIT_SESSION ? "while loading the notebook session"
                                                  : "while sleeping";
  jk_exec_fail(c, "Interrupted", "execution interrupted %s at line %d", what,
       x->pc < x->cell->n ? x->cell->stmts[x->pc].line : 0);
  x->wait = JK_WAIT_NONE;
  finish(c, false);
}

json_t *jk_exec_user_expressions(struct jk_core *c, const json_t *exprs) {
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
      if (jk_eval(cell->stmts[0].expr, jk_exec_lookup, c, &val, err, sizeof err) == 0) {
        char *text = jk_value_format(&val);
        res = json_pack("{s:s, s:{s:s}, s:{}}", "status", "ok", "data", "text/plain",
                        text ? text : "", "metadata");
        free(text);
        jk_value_done(&val);
      } else {
        res = json_pack("{s:s, s:s, s:s, s:[]}", "status", "error", "ename", "NameError",
                        "evalue", err, "traceback");
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
