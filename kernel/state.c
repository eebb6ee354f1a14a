/* The notebook session's variables and model/data definitions (state.h).
 *
 * Two small arrays searched by name: a notebook holds tens of names, and a
 * name is in at most one of them. The observer hears of every set and drop,
 * also of names dropped because the other kind took them. */
#include "state.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sl_err.h"
#include "sl_json.h"
#include "textbuf.h"

#define MAX_NAMES 4096
#define MAX_LIST_DEPTH 8

struct var {
  char *name;
  struct jk_value value;
};

struct def {
  char *name;
  char *kind;
  json_t *spec;
};

struct jk_state {
  struct var *vars;
  size_t n_vars;
  struct def *defs;
  size_t n_defs;
  jk_state_changed_fn changed;
  void *changed_ud;
};

struct jk_state *jk_state_new(void) { return calloc(1, sizeof(struct jk_state)); }

struct jk_state *jk_state_free(struct jk_state *st) {
  if (!st)
    return NULL;
  st->changed = NULL;
  jk_state_clear(st);
  free(st->vars);
  free(st->defs);
  free(st);
  return NULL;
}

void jk_state_observe(struct jk_state *st, jk_state_changed_fn fn, void *userdata) {
  st->changed = fn;
  st->changed_ud = userdata;
}

static void changed(struct jk_state *st, const char *name) {
  if (st->changed)
    st->changed(st->changed_ud, name);
}

static struct var *find_var(const struct jk_state *st, const char *name) {
  for (size_t i = 0; i < st->n_vars; i++)
    if (strcmp(st->vars[i].name, name) == 0)
      return &st->vars[i];
  return NULL;
}

static struct def *find_def(const struct jk_state *st, const char *name) {
  for (size_t i = 0; i < st->n_defs; i++)
    if (strcmp(st->defs[i].name, name) == 0)
      return &st->defs[i];
  return NULL;
}

static void drop_def(struct jk_state *st, const char *name) {
  struct def *d = find_def(st, name);
  if (!d)
    return;
  changed(st, name);
  free(d->name);
  free(d->kind);
  json_decref(d->spec);
  *d = st->defs[--st->n_defs];
}

static void drop_var(struct jk_state *st, const char *name) {
  struct var *v = find_var(st, name);
  if (!v)
    return;
  changed(st, name);
  free(v->name);
  jk_value_done(&v->value);
  *v = st->vars[--st->n_vars];
}

int jk_state_set_var(struct jk_state *st, const char *name, struct jk_value *value) {
  struct var *v = find_var(st, name);
  if (v) {
    changed(st, name);
    jk_value_done(&v->value);
    v->value = *value;
    return 0;
  }
  if (st->n_vars >= MAX_NAMES) {
    jk_value_done(value);
    return SL_ELIMIT;
  }
  struct var *vars = realloc(st->vars, (st->n_vars + 1) * sizeof *vars);
  if (vars)
    st->vars = vars;
  char *copy = strdup(name);
  if (!vars || !copy) {
    free(copy);
    jk_value_done(value);
    return -ENOMEM;
  }
  drop_def(st, name);
  changed(st, name);
  st->vars[st->n_vars++] = (struct var){copy, *value};
  return 0;
}

int jk_state_set_def(struct jk_state *st, const char *name, const char *kind, json_t *spec) {
  if (!find_def(st, name) && st->n_defs >= MAX_NAMES) {
    json_decref(spec);
    return SL_ELIMIT;
  }
  struct def *defs = realloc(st->defs, (st->n_defs + 1) * sizeof *defs);
  if (defs)
    st->defs = defs;
  char *n = defs ? strdup(name) : NULL, *k = n ? strdup(kind) : NULL;
  if (!k) {
    free(n);
    json_decref(spec);
    return -ENOMEM;
  }
  drop_var(st, name);
  drop_def(st, name);
  changed(st, name);
  st->defs[st->n_defs++] = (struct def){n, k, spec};
  return 0;
}

void jk_state_clear(struct jk_state *st) {
  while (st->n_vars)
    drop_var(st, st->vars[0].name);
  while (st->n_defs)
    drop_def(st, st->defs[0].name);
}

const struct jk_value *jk_state_var(const struct jk_state *st, const char *name) {
  struct var *v = find_var(st, name);
  return v ? &v->value : NULL;
}

static void view(const struct def *d, struct jk_def *ret) {
  *ret = (struct jk_def){d->name, d->kind, d->spec};
}

int jk_state_def(const struct jk_state *st, const char *name, struct jk_def *ret) {
  struct def *d = find_def(st, name);
  if (!d)
    return -ENOENT;
  view(d, ret);
  return 0;
}

const struct jk_value *jk_state_lookup(void *st, const char *name) { return jk_state_var(st, name); }

size_t jk_state_n_vars(const struct jk_state *st) { return st->n_vars; }
size_t jk_state_n_defs(const struct jk_state *st) { return st->n_defs; }

const char *jk_state_var_at(const struct jk_state *st, size_t i, const struct jk_value **ret_value) {
  if (i >= st->n_vars)
    return NULL;
  if (ret_value)
    *ret_value = &st->vars[i].value;
  return st->vars[i].name;
}

int jk_state_def_at(const struct jk_state *st, size_t i, struct jk_def *ret) {
  if (i >= st->n_defs)
    return -ENOENT;
  view(&st->defs[i], ret);
  return 0;
}

const char **jk_state_names(const struct jk_state *st, size_t *ret_n, char **ret_kinds) {
  const char **names = malloc((st->n_vars + st->n_defs + 1) * sizeof *names);
  char *kinds = malloc(st->n_vars + st->n_defs + 1);
  size_t n = 0;
  if (names && kinds) {
    for (size_t i = 0; i < st->n_vars; i++) {
      kinds[n] = 'v';
      names[n++] = st->vars[i].name;
    }
    for (size_t i = 0; i < st->n_defs; i++) {
      kinds[n] = strcmp(st->defs[i].kind, "model") == 0 ? 'm' : 'd';
      names[n++] = st->defs[i].name;
    }
    kinds[n] = '\0';
  } else {
    free(kinds);
    kinds = NULL;
  }
  *ret_n = n;
  *ret_kinds = kinds;
  return names;
}

/* ---- text --------------------------------------------------------------- */

char *jk_state_format_spec(const json_t *spec) {
  struct jk_dbuf out = {0};
  jk_dbuf_printf(&out, "%s(", sl_json_get_str(spec, "type", "?"));
  const char *sep = "";
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(spec, "args"), i, v) {
    char *val = json_is_string(v) ? NULL : sl_json_dump(v, NULL);
    if (val)
      jk_dbuf_printf(&out, "%s%s", sep, val);
    else
      jk_dbuf_printf(&out, "%s\"%s\"", sep, json_is_string(v) ? json_string_value(v) : "?");
    free(val);
    sep = ", ";
  }
  const char *key;
  json_object_foreach(json_object_get(spec, "options"), key, v) {
    char *val = json_is_string(v) ? NULL : sl_json_dump(v, NULL);
    jk_dbuf_printf(&out, "%s%s=%s", sep, key, val ? val : json_string_value(v) ? json_string_value(v) : "?");
    free(val);
    sep = ", ";
  }
  jk_dbuf_printf(&out, ")");
  return jk_dbuf_done(&out);
}

/* "NAME = VALUE" or "KIND NAME = SPEC"; with about, the sentence saying what
 * the name is after a blank line. */
static char *describe(const struct jk_state *st, const char *name, bool about) {
  char *text = NULL;
  struct var *v = find_var(st, name);
  struct def *d = v ? NULL : find_def(st, name);
  if (v) {
    char *val = jk_value_format(&v->value);
    if (asprintf(&text, "%s = %s%s", name, val ? val : "?", about ? "\n\nA notebook variable." : "") < 0)
      text = NULL;
    free(val);
  } else if (d) {
    char *spec = jk_state_format_spec(d->spec);
    if (asprintf(&text, "%s %s = %s%s%s%s", d->kind, name, spec ? spec : "?", about ? "\n\nA " : "",
                 about ? d->kind : "", about ? " of this notebook session." : "") < 0)
      text = NULL;
    free(spec);
  }
  return text;
}

char *jk_state_show(const struct jk_state *st, const char *name) { return describe(st, name, false); }

char *jk_state_describe(const struct jk_state *st, const char *name) { return describe(st, name, true); }

/* ---- the stored form of values ------------------------------------------ */

json_t *jk_value_to_json(const struct jk_value *v) {
  switch (v->type) {
  case JK_VAL_NUM:
    return json_pack("{s:s, s:o}", "t", "num", "v", sl_json_real(v->num));
  case JK_VAL_STR:
    return json_pack("{s:s, s:s}", "t", "str", "v", v->str ? v->str : "");
  case JK_VAL_BOOL:
    return json_pack("{s:s, s:b}", "t", "bool", "v", v->boolean);
  case JK_VAL_DURATION:
    return json_pack("{s:s, s:I}", "t", "dur", "v", (json_int_t)v->duration_us);
  case JK_VAL_LIST: {
    json_t *items = json_array();
    for (size_t i = 0; i < v->n_items; i++)
      json_array_append_new(items, jk_value_to_json(&v->items[i]));
    return json_pack("{s:s, s:o}", "t", "list", "v", items);
  }
  default:
    return NULL;
  }
}

static int from_json(const json_t *j, struct jk_value *ret, int depth) {
  const char *t = sl_json_get_str(j, "t", "");
  const json_t *v = json_object_get(j, "v");
  struct jk_value out = {0};
  if (strcmp(t, "num") == 0 && json_is_number(v) && isfinite(json_number_value(v))) {
    out.type = JK_VAL_NUM;
    out.num = json_number_value(v);
  } else if (strcmp(t, "str") == 0 && json_is_string(v)) {
    out.type = JK_VAL_STR;
    if (!(out.str = strdup(json_string_value(v))))
      return -ENOMEM;
  } else if (strcmp(t, "bool") == 0 && json_is_boolean(v)) {
    out.type = JK_VAL_BOOL;
    out.boolean = json_is_true(v);
  } else if (strcmp(t, "dur") == 0 && json_is_integer(v) && json_integer_value(v) >= 0) {
    out.type = JK_VAL_DURATION;
    out.duration_us = json_integer_value(v);
  } else if (strcmp(t, "list") == 0 && json_is_array(v) && depth < MAX_LIST_DEPTH) {
    out.type = JK_VAL_LIST;
    size_t n = json_array_size(v);
    out.items = n ? calloc(n, sizeof *out.items) : NULL;
    if (n && !out.items)
      return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
      int r = from_json(json_array_get(v, i), &out.items[i], depth + 1);
      out.n_items = i + (r == 0);
      if (r < 0) {
        jk_value_done(&out);
        return r;
      }
    }
  } else {
    return SL_ETYPE;
  }
  *ret = out;
  return 0;
}

int jk_value_from_json(const json_t *j, struct jk_value *ret) { return from_json(j, ret, 0); }
