/* Line magics. Those that only read or change this kernel (%who, %help,
 * %version, %history, %stderr, %clear) run here; those about jobs, cost and
 * the gateway go to jobs.c when the kernel has a gateway transport, and give
 * a GatewayUnavailable error otherwise. %status, %session and %gateway do
 * their local part here in both cases. */
#include "core_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "sl_json.h"

static void append(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void append(char **buf, size_t *len, size_t *cap, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int n = vsnprintf(*buf ? *buf + *len : NULL, *buf ? *cap - *len : 0, fmt, ap);
    va_end(ap);
    if (n < 0)
      return;
    if (*buf && *len + (size_t)n < *cap) {
      *len += (size_t)n;
      return;
    }
    size_t ncap = (*cap + (size_t)n + 1) * 2;
    char *grown = realloc(*buf, ncap);
    if (!grown)
      return;
    *buf = grown;
    *cap = ncap;
  }
}

static enum jk_step magic_who(struct jk_core *c) {
  char *out = NULL;
  size_t len = 0, cap = 0;
  append(&out, &len, &cap, "%s", "");
  if (!c->n_vars && !c->n_defs)
    append(&out, &len, &cap, "No variables, models or data defined yet.\n");
  for (size_t i = 0; i < c->n_vars; i++) {
    char *val = jk_value_format(&c->vars[i].value);
    append(&out, &len, &cap, "variable  %-16s %s\n", c->vars[i].name, val ? val : "?");
    free(val);
  }
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < c->n_defs; i++) {
      if (strcmp(c->defs[i].kind, pass ? "model" : "data") != 0)
        continue;
      char *spec = jk_exec_format_spec(c->defs[i].spec);
      append(&out, &len, &cap, "%-9s %-16s %s\n", c->defs[i].kind, c->defs[i].name, spec ? spec : "?");
      free(spec);
    }
  if (out)
    jk_exec_stream(c, "stdout", out);
  free(out);
  return JK_STEP_DONE;
}

static enum jk_step magic_history(struct jk_core *c) {
  json_t *req = json_pack("{s:s, s:i, s:i}", "hist_access_type", "range", "session", 0, "start", 1);
  json_t *items = jk_history_query(c->history, req);
  json_decref(req);
  char *out = NULL;
  size_t len = 0, cap = 0;
  append(&out, &len, &cap, "%s", "");
  size_t i;
  json_t *it;
  json_array_foreach(items, i, it) {
    append(&out, &len, &cap, "%4lld: %s\n", (long long)json_integer_value(json_array_get(it, 1)),
           json_string_value(json_array_get(it, 2)));
  }
  json_decref(items);
  if (out)
    jk_exec_stream(c, "stdout", out);
  free(out);
  return JK_STEP_DONE;
}

static enum jk_step magic_status(struct jk_core *c) {
  char *out = NULL;
  char gw[1024];
  if (c->gw)
    snprintf(gw, sizeof gw, "%s (%s)", jk_gw_address(c->gw),
             jk_gw_state(c->gw) == JK_GW_READY ? "connected"
             : *jk_gw_last_error(c->gw)        ? jk_gw_last_error(c->gw)
                                               : "not connected");
  else
    snprintf(gw, sizeof gw, "%s", c->gateway ? c->gateway : "none configured (SPOTLAB_GATEWAY or %gateway ADDR)");
  if (asprintf(&out,
               "spotlab-kernel %s\nnotebook session: %s\nkernel id: %s\n"
               "variables: %zu, models and data: %zu\ngateway: %s\n",
               SPOTLAB_VERSION, c->notebook, c->kernel_id, c->n_vars, c->n_defs, gw) < 0)
    return jk_exec_fail(c, "MemoryError", "out of memory");
  jk_exec_stream(c, "stdout", out);
  free(out);
  return JK_STEP_DONE;
}

enum jk_step jk_exec_line_magic(struct jk_core *c, const struct jk_stmt *s) {
  const char *m = s->name, *args = s->args ? s->args : "";
  if (strcmp(m, "who") == 0)
    return magic_who(c);
  if (strcmp(m, "help") == 0) {
    char *text = jk_help_all();
    if (!text)
      return jk_exec_fail(c, "MemoryError", "out of memory");
    jk_exec_stream(c, "stdout", text);
    free(text);
    return JK_STEP_DONE;
  }
  if (strcmp(m, "version") == 0) {
    jk_exec_stream(c, "stdout", "spotlab-kernel " SPOTLAB_VERSION " (Jupyter protocol 5.3)\n");
    return JK_STEP_DONE;
  }
  if (strcmp(m, "history") == 0)
    return magic_history(c);
  if (strcmp(m, "stderr") == 0) {
    char *t = NULL;
    if (asprintf(&t, "%s\n", args) < 0)
      return jk_exec_fail(c, "MemoryError", "out of memory");
    jk_exec_stream(c, "stderr", t);
    free(t);
    return JK_STEP_DONE;
  }
  if (strcmp(m, "clear") == 0) {
    if (!c->running->silent)
      jk_core_publish(c, c->running->request, "clear_output", json_pack("{s:b}", "wait", 0));
    return JK_STEP_DONE;
  }
  if (strcmp(m, "status") == 0 && (!c->gw || jk_gw_state(c->gw) != JK_GW_READY))
    return magic_status(c);
  if (strcmp(m, "session") == 0) {
    if (!*args)
      return jk_exec_fail(c, "ValueError", "%%session needs a name: %%session NAME");
    char *nb = strdup(args);
    if (!nb)
      return jk_exec_fail(c, "MemoryError", "out of memory");
    free(c->notebook);
    c->notebook = nb;
    jk_history_switch(c->history, nb);
    if (c->gw) {
      bool handled;
      return jk_jobs_magic(c, s, &handled);
    }
    char *t = NULL;
    if (asprintf(&t, "notebook session: %s\n", nb) >= 0) {
      jk_exec_stream(c, "stdout", t);
      free(t);
    }
    return JK_STEP_DONE;
  }
  if (strcmp(m, "gateway") == 0) {
    if (!*args) {
      char *t = NULL;
      if (asprintf(&t, "gateway: %s\n", c->gateway ? c->gateway : "none") >= 0) {
        jk_exec_stream(c, "stdout", t);
        free(t);
      }
      return JK_STEP_DONE;
    }
    if (strncmp(args, "tcp://", 6) != 0 && strncmp(args, "ipc://", 6) != 0)
      return jk_exec_fail(c, "ValueError", "%%gateway takes tcp://HOST:PORT or ipc://PATH, not '%s'", args);
    free(c->gateway);
    c->gateway = strdup(args);
    if (c->gw) {
      bool handled;
      return jk_jobs_magic(c, s, &handled);
    }
    jk_exec_stream(c, "stdout", "gateway address set\n");
    return JK_STEP_DONE;
  }
  if (c->gw) {
    bool handled;
    enum jk_step st = jk_jobs_magic(c, s, &handled);
    if (handled)
      return st;
  }
  char what[80];
  snprintf(what, sizeof what, "%%%s", m);
  return jk_exec_needs_gateway(c, what);
}
