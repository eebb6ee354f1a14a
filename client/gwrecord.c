/* A run record as text: what ran (spec, definitions, seed, hashes), with
 * what (version, build ids), where (one line per attempt) and what it kept
 * (one line per checkpoint). The JSON form is the record itself. */
#include "gwrecord.h"

#include "sl_json.h"
#include "sl_time.h"
#include "textbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *str(const json_t *o, const char *key) {
  const char *s = sl_json_get_str(o, key, NULL);
  return s && *s ? s : "-";
}

/* A JSON value on one line (a definition, the options), or "-". */
static void value(struct jk_dbuf *b, const json_t *v) {
  char *s = v && !json_is_null(v) ? json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY) : NULL;
  jk_dbuf_printf(b, "%s", s ? s : "-");
  free(s);
}

static void when(char *buf, size_t size, const json_t *o, const char *key) {
  int64_t us = sl_json_get_int(o, key, 0);
  if (!us || !sl_time_format_iso8601(us, buf, size))
    snprintf(buf, size, "-");
}

static void list(struct jk_dbuf *b, const json_t *arr) {
  size_t i;
  json_t *v;
  if (!json_array_size(arr))
    jk_dbuf_printf(b, "-");
  json_array_foreach(arr, i, v) jk_dbuf_printf(b, "%s%s", i ? ", " : "", json_string_value(v) ? json_string_value(v) : "?");
}

char *jk_format_record(const json_t *r) {
  struct jk_dbuf b = {0};
  char t[40];
  const json_t *spec = json_object_get(r, "spec"), *model = json_object_get(r, "model");
  const json_t *data = json_object_get(r, "data"), *ids = json_object_get(r, "build_ids");
  when(t, sizeof t, r, "created_us");
  jk_dbuf_printf(&b, "%-11s %s (%s, %s), %s by %s", "job", str(r, "job"), str(r, "kind"), str(r, "state"), t,
                 str(r, "user"));
  if (json_object_get(r, "rerun_of"))
    jk_dbuf_printf(&b, ", a rerun of %s%s", str(r, "rerun_of"),
                   json_is_true(json_object_get(r, "forced")) ? " (forced)" : "");
  jk_dbuf_printf(&b, "\n%-11s ", "options");
  value(&b, json_object_get(spec, "options"));
  if (json_is_object(model)) {
    jk_dbuf_printf(&b, "\n%-11s %s = ", "model", str(model, "name"));
    value(&b, json_object_get(model, "definition"));
  }
  if (json_is_object(data)) {
    jk_dbuf_printf(&b, "\n%-11s %s = ", "data", str(data, "name"));
    value(&b, json_object_get(data, "definition"));
    jk_dbuf_printf(&b, "\n%-11s %s  %s", "data file", str(data, "path"), str(data, "sha256"));
  }
  if (json_is_string(json_object_get(r, "script_sha256")))
    jk_dbuf_printf(&b, "\n%-11s sha256 %s", "script", str(r, "script_sha256"));
  const json_t *ch = json_object_get(r, "data_changed");
  if (ch)
    jk_dbuf_printf(&b, "\n%-11s the data file changed: sha256 %s then, %s now", "warning", str(ch, "was"),
                   str(ch, "now"));
  jk_dbuf_printf(&b, "\n%-11s ", "seed");
  value(&b, json_object_get(r, "seed"));
  if (json_is_string(json_object_get(r, "seed_from")))
    jk_dbuf_printf(&b, " (chosen by the %s)", str(r, "seed_from"));
  jk_dbuf_printf(&b, "\n%-11s spotlab %s; build ids: gateway %s, worker ", "programs", str(r, "spotlab_version"),
                 str(ids, "gateway"));
  list(&b, json_object_get(ids, "worker"));
  jk_dbuf_printf(&b, ", spotlab-train ");
  list(&b, json_object_get(ids, "train"));
  jk_dbuf_printf(&b, "\nattempts\n");
  size_t i;
  json_t *a;
  json_array_foreach(json_object_get(r, "attempts"), i, a) {
    when(t, sizeof t, a, "started_us");
    jk_dbuf_printf(&b, "  %-3lld %-16s %-12s %-9s %s from step %lld, %s\n", (long long)sl_json_get_int(a, "attempt", 0),
                   str(a, "instance_type"), str(a, "zone"), str(a, "market"), t,
                   (long long)sl_json_get_int(a, "from_step", 0), str(a, "outcome"));
  }
  if (!json_array_size(json_object_get(r, "attempts")))
    jk_dbuf_printf(&b, "  none yet\n");
  jk_dbuf_printf(&b, "checkpoints\n");
  json_array_foreach(json_object_get(r, "checkpoints"), i, a) {
    when(t, sizeof t, a, "time_us");
    jk_dbuf_printf(&b, "  step %-8lld %10lld bytes  %s  %s\n", (long long)sl_json_get_int(a, "step", 0),
                   (long long)sl_json_get_int(a, "bytes", 0), t, str(a, "key"));
  }
  if (!json_array_size(json_object_get(r, "checkpoints")))
    jk_dbuf_printf(&b, "  none\n");
  return jk_text_clean(jk_dbuf_done(&b), false);
}
