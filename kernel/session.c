/* Notebook session state in the gateway (protocols.md §1 "session state").
 *
 * Variables and model/data definitions live in the gateway so they survive a
 * kernel restart. The kernel records the names a cell changed (dirty) and,
 * when the cell ends, sends one session.set holding only those: their
 * current values, or a delete for names that no longer exist. Names in a
 * session.set that fails go back to dirty, so the next flush resends them
 * with whatever value they hold then. The load at start (session.get) never
 * overwrites a name this kernel changed meanwhile. Neither flushing nor the
 * load at start may start a gateway: a notebook of plain variables works
 * without one. While the gateway is known to be down, a cell's changes are
 * only kept: the end of a cell tries to reach it again at most once per
 * RETRY_US, so cells cost nothing extra without a gateway, and a gateway that
 * comes up later still gets every change (also at once when anything else
 * connects, see on_gw_state in core.c). */
#include "core_internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#define MAX_DIRTY 8192
#define RETRY_US (5 * SL_US_PER_S) /* between attempts to reach a gateway that was down */
#define MAX_LIST_DEPTH 8

/* ---- values ------------------------------------------------------------- */

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

/* ---- dirty names -------------------------------------------------------- */

static bool listed(char **names, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(names[i], name) == 0)
      return true;
  return false;
}

void jk_session_touch(struct jk_core *c, const char *name) {
  if (c->sess_applying || !c->gw || listed(c->dirty, c->n_dirty, name) || c->n_dirty >= MAX_DIRTY)
    return;
  char **grown = realloc(c->dirty, (c->n_dirty + 1) * sizeof *grown);
  if (!grown)
    return;
  c->dirty = grown;
  if ((c->dirty[c->n_dirty] = strdup(name)))
    c->n_dirty++;
}

static void free_names(char **names, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(names[i]);
  free(names);
}

void jk_session_free(struct jk_core *c) {
  free_names(c->dirty, c->n_dirty);
  free_names(c->inflight, c->n_inflight);
  c->dirty = c->inflight = NULL;
  c->n_dirty = c->n_inflight = 0;
  json_decref(c->models);
  c->models = NULL;
}

void jk_session_flush(struct jk_core *c) {
  if (!c->gw || !c->n_dirty)
    return;
  json_t *vars = json_object(), *defs = json_array(), *del = json_array();
  for (size_t i = 0; i < c->n_dirty; i++) {
    const char *name = c->dirty[i];
    struct jk_var *v = jk_exec_find_var(c, name);
    struct jk_def *d = v ? NULL : jk_exec_find_def(c, name);
    json_t *enc = v ? jk_value_to_json(&v->value) : NULL;
    if (enc)
      json_object_set_new(vars, name, enc);
    else if (d)
      json_array_append_new(defs, json_pack("{s:s, s:s, s:O}", "name", d->name, "kind", d->kind, "spec", d->spec));
    else
      json_array_append_new(del, json_string(name));
  }
  json_t *req = json_pack("{s:s, s:o, s:o, s:o}", "type", "session.set", "vars", vars, "defs", defs, "delete", del);
  int64_t id = jk_gw_request(c->gw, req, 0);
  if (id < 0)
    return;
  /* A set already in flight is superseded: this one carries its names too,
   * and only the newest reply counts. */
  c->sess_set_id = id;
  char **all = realloc(c->inflight, (c->n_inflight + c->n_dirty) * sizeof *all);
  if (!all)
    return;
  memcpy(all + c->n_inflight, c->dirty, c->n_dirty * sizeof *all);
  c->inflight = all;
  c->n_inflight += c->n_dirty;
  free(c->dirty);
  c->dirty = NULL;
  c->n_dirty = 0;
}

void jk_session_cell_done(struct jk_core *c) {
  if (!c->gw || !c->n_dirty)
    return;
  if (jk_gw_state(c->gw) == JK_GW_FAILED && sl_time_mono_us() < c->sess_retry_at_us)
    return; /* kept; sent with the next flush */
  jk_session_flush(c);
}

void jk_session_load(struct jk_core *c) {
  if (!c->gw)
    return;
  int64_t id = jk_gw_request(c->gw, json_pack("{s:s}", "type", "session.get"), 0);
  if (id < 0)
    return;
  if (c->sess_load_id)
    jk_gw_forget(c->gw, c->sess_load_id);
  c->sess_load_id = id;
}

/* ---- replies ------------------------------------------------------------ */

static bool in_reply(const json_t *reply, const char *name) {
  if (json_object_get(json_object_get(reply, "vars"), name))
    return true;
  size_t i;
  json_t *j;
  json_array_foreach(json_object_get(reply, "defs"), i, j) {
    if (strcmp(sl_json_get_str(j, "name", ""), name) == 0)
      return true;
  }
  return false;
}

void jk_session_apply(struct jk_core *c, const json_t *reply, bool switched) {
  if (switched) {
    /* Names only this kernel holds join the new session; stored ones win. */
    free_names(c->dirty, c->n_dirty);
    c->dirty = NULL;
    c->n_dirty = 0;
    for (size_t k = 0; k < c->n_vars; k++)
      if (!in_reply(reply, c->vars[k].name))
        jk_session_touch(c, c->vars[k].name);
    for (size_t k = 0; k < c->n_defs; k++)
      if (!in_reply(reply, c->defs[k].name))
        jk_session_touch(c, c->defs[k].name);
  }
  c->sess_applying = true;
  const char *name;
  json_t *j;
  size_t n = 0, bad = 0;
  json_object_foreach(json_object_get(reply, "vars"), name, j) {
    struct jk_value v;
    if ((!switched && listed(c->dirty, c->n_dirty, name)) || jk_lang_is_reserved(name))
      continue;
    if (jk_value_from_json(j, &v) < 0 || jk_exec_set_var(c, name, &v) < 0)
      bad++;
    else
      n++;
  }
  size_t i;
  json_array_foreach(json_object_get(reply, "defs"), i, j) {
    const char *dname = sl_json_get_str(j, "name", ""), *kind = sl_json_get_str(j, "kind", "");
    json_t *spec = json_object_get(j, "spec");
    if (!*dname || (!switched && listed(c->dirty, c->n_dirty, dname)))
      continue;
    if ((strcmp(kind, "model") != 0 && strcmp(kind, "data") != 0) || !json_is_object(spec) ||
        jk_exec_set_def(c, dname, kind, json_incref(spec)) < 0)
      bad++;
    else
      n++;
  }
  c->sess_applying = false;
  json_t *models = json_object_get(reply, "models");
  if (json_is_object(models)) {
    json_decref(c->models);
    c->models = json_deep_copy(models);
  }
  if (bad)
    sl_warn("kernel.gateway", "session %s: %zu stored names could not be read back", c->notebook, bad);
  sl_debug("kernel.gateway", "session %s: loaded %zu names", c->notebook, n);
}

bool jk_session_reply(struct jk_core *c, int64_t id, const json_t *reply, const char *error) {
  if (id && id == c->sess_load_id) {
    c->sess_load_id = 0;
    if (!error) {
      jk_session_apply(c, reply, false);
    } else {
      sl_debug("kernel.gateway", "session state not loaded: %s", error);
      c->sess_retry_at_us = sl_time_mono_us() + RETRY_US;
    }
    bool was_loading = c->sess_loading;
    c->sess_loading = false;
    if (was_loading)
      jk_exec_session_ready(c);
    return true;
  }
  if (id && id == c->sess_set_id) {
    c->sess_set_id = 0;
    if (error) {
      sl_debug("kernel.gateway", "session.set failed: %s (kept for the next cell)", error);
      c->sess_retry_at_us = sl_time_mono_us() + RETRY_US;
      for (size_t i = 0; i < c->n_inflight; i++)
        jk_session_touch(c, c->inflight[i]);
    }
    free_names(c->inflight, c->n_inflight);
    c->inflight = NULL;
    c->n_inflight = 0;
    if (!error)
      jk_session_flush(c);
    return true;
  }
  return false;
}
