/* Line magics that read or change this kernel: %who, %help, %version,
 * %history, %stderr, %clear, and the local part of %status, %session and
 * %gateway (their gateway part is in jobs_magics.c). The command table
 * (commands.def) routes each magic to its handler; those that need the
 * gateway are refused before they get here when there is none. */
#include "interp_int.h"

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

enum jk_step jk_magic_who(struct jk_interp *ip, const struct jk_stmt *s) {
  (void)s;
  const struct jk_state *st = ip->state;
  char *out = NULL;
  size_t len = 0, cap = 0;
  append(&out, &len, &cap, "%s", "");
  if (!jk_state_n_vars(st) && !jk_state_n_defs(st))
    append(&out, &len, &cap, "No variables, models or data defined yet.\n");
  const char *name;
  const struct jk_value *value;
  for (size_t i = 0; (name = jk_state_var_at(st, i, &value)); i++) {
    char *val = jk_value_format(value);
    append(&out, &len, &cap, "variable  %-16s %s\n", name, val ? val : "?");
    free(val);
  }
  struct jk_def d;
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; jk_state_def_at(st, i, &d) == 0; i++) {
      if (strcmp(d.kind, pass ? "model" : "data") != 0)
        continue;
      char *spec = jk_state_format_spec(d.spec);
      append(&out, &len, &cap, "%-9s %-16s %s\n", d.kind, d.name, spec ? spec : "?");
      free(spec);
    }
  if (out)
    jk_exec_stream(ip, "stdout", out);
  free(out);
  return JK_STEP_DONE;
}

enum jk_step jk_magic_history(struct jk_interp *ip, const struct jk_stmt *s) {
  (void)s;
  json_t *req = json_pack("{s:s, s:i, s:i}", "hist_access_type", "range", "session", 0, "start", 1);
  json_t *items = jk_history_query(ip->history, req);
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
    jk_exec_stream(ip, "stdout", out);
  free(out);
  return JK_STEP_DONE;
}

enum jk_step jk_magic_status(struct jk_interp *ip, const struct jk_stmt *s) {
  if (ip->gw && jk_gw_state(ip->gw) == JK_GW_READY)
    return jk_magic_query(ip, s);
  char *out = NULL;
  char gw[1024];
  if (ip->gw)
    snprintf(gw, sizeof gw, "%s (%s)", jk_gw_address(ip->gw),
             jk_gw_state(ip->gw) == JK_GW_READY ? "connected"
             : *jk_gw_last_error(ip->gw)        ? jk_gw_last_error(ip->gw)
                                                : "not connected");
  else
    snprintf(gw, sizeof gw, "%s", ip->gateway ? ip->gateway : "none configured (SPOTLAB_GATEWAY or %gateway ADDR)");
  if (asprintf(&out,
               "%-10s %s\n%-10s spotlab-kernel %s, id %s\n%-10s %zu variables, %zu models and data\n"
               "%-10s %s\n",
               "session", ip->notebook, "kernel", SPOTLAB_VERSION, ip->kernel_id, "names",
               jk_state_n_vars(ip->state), jk_state_n_defs(ip->state), "gateway", gw) < 0)
    return jk_exec_fail(ip, "MemoryError", "out of memory");
  jk_exec_stream(ip, "stdout", out);
  free(out);
  return JK_STEP_DONE;
}

enum jk_step jk_magic_help(struct jk_interp *ip, const struct jk_stmt *s) {
  const char *topic = s->args ? s->args : "";
  char *text = *topic ? jk_help_topic(topic) : jk_help_all();
  if (!text && *topic)
    return jk_exec_fail(ip, "NameError", "%%help: no help for '%s' (%%help lists every word)", topic);
  if (!text)
    return jk_exec_fail(ip, "MemoryError", "out of memory");
  jk_exec_stream(ip, "stdout", text);
  free(text);
  return JK_STEP_DONE;
}

enum jk_step jk_magic_version(struct jk_interp *ip, const struct jk_stmt *s) {
  (void)s;
  jk_exec_stream(ip, "stdout", "spotlab-kernel " SPOTLAB_VERSION " (Jupyter protocol 5.3)\n");
  return JK_STEP_DONE;
}

enum jk_step jk_magic_stderr(struct jk_interp *ip, const struct jk_stmt *s) {
  char *t = NULL;
  if (asprintf(&t, "%s\n", s->args ? s->args : "") < 0)
    return jk_exec_fail(ip, "MemoryError", "out of memory");
  jk_exec_stream(ip, "stderr", t);
  free(t);
  return JK_STEP_DONE;
}

enum jk_step jk_magic_clear(struct jk_interp *ip, const struct jk_stmt *s) {
  (void)s;
  ip->pub->clear_output(ip->pub_ud, false);
  return JK_STEP_DONE;
}

enum jk_step jk_magic_session(struct jk_interp *ip, const struct jk_stmt *s) {
  const char *args = s->args ? s->args : "";
  if (!*args) {
    char *t = NULL;
    if (asprintf(&t, "notebook session: %s\n", ip->notebook) >= 0) {
      jk_exec_stream(ip, "stdout", t);
      free(t);
    }
    return JK_STEP_DONE;
  }
  char *nb = strdup(args);
  if (!nb || (ip->session && jk_session_rename(ip->session, nb) < 0)) {
    free(nb);
    return jk_exec_fail(ip, "MemoryError", "out of memory");
  }
  free(ip->notebook);
  ip->notebook = nb;
  ip->follows = false; /* a session named here no longer follows the notebook's path */
  jk_history_switch(ip->history, nb);
  if (ip->gw)
    return jk_jobs_session(ip);
  char *t = NULL;
  if (asprintf(&t, "notebook session: %s\n", nb) >= 0) {
    jk_exec_stream(ip, "stdout", t);
    free(t);
  }
  return JK_STEP_DONE;
}

enum jk_step jk_magic_gateway(struct jk_interp *ip, const struct jk_stmt *s) {
  const char *args = s->args ? s->args : "";
  if (!*args) {
    char *t = NULL;
    const char *addr = ip->gw ? jk_gw_address(ip->gw) : ip->gateway;
    const char *whose = ip->gw && jk_gw_is_embedded(ip->gw) ? " (this user's embedded gateway)" : "";
    if (asprintf(&t, "gateway: %s%s\n", addr ? addr : "none", whose) >= 0) {
      jk_exec_stream(ip, "stdout", t);
      free(t);
    }
    return JK_STEP_DONE;
  }
  if (strncmp(args, "tcp://", 6) != 0 && strncmp(args, "ipc://", 6) != 0)
    return jk_exec_fail(ip, "ValueError", "%%gateway takes tcp://HOST:PORT or ipc://PATH, not '%s'", args);
  char *addr = strdup(args);
  if (!addr)
    return jk_exec_fail(ip, "MemoryError", "out of memory");
  if (ip->gw) {
    free(ip->gateway_before);
    ip->gateway_before = ip->gateway;
    ip->gateway_switching = true;
    ip->gateway = addr;
    return jk_jobs_gateway(ip, addr);
  }
  free(ip->gateway);
  ip->gateway = addr;
  jk_exec_stream(ip, "stdout", "gateway address set\n");
  return JK_STEP_DONE;
}
