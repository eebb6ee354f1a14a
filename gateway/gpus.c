/* A worker's GPU report against the catalog (gpus.h).
 *
 * The report comes from the worker (NVML on the instance) and is input
 * from the world: every field is checked and bounded before it is kept. A
 * model matches when the catalog's short name is a word of the driver's
 * longer one, which is how NVIDIA names them ("A10G" in "NVIDIA A10G",
 * "V100" in "Tesla V100-SXM2-16GB", "H100" in "NVIDIA H100 80GB HBM3"). */
#include "gpus.h"

#include "sl_err.h"
#include "sl_json.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static bool copy_str(const json_t *o, const char *key, char *dst, size_t size) {
  const json_t *v = json_object_get(o, key);
  if (!v) {
    dst[0] = 0;
    return true;
  }
  if (!json_is_string(v)) return false;
  sl_utf8_copy(dst, size, json_string_value(v));
  return true;
}

int gw_gpus_parse(const json_t *o, struct gw_gpus *ret) {
  struct gw_gpus g = {.known = true};
  const json_t *count = json_object_get(o, "count"), *mem = json_object_get(o, "memory_mib");
  if (!json_is_object(o) || !json_is_integer(count) || json_integer_value(count) < 0 ||
      json_integer_value(count) > 1024)
    return SL_ETYPE;
  if (mem && (!json_is_number(mem) || !isfinite(json_number_value(mem)) || json_number_value(mem) < 0 ||
              json_number_value(mem) > 1e12))
    return SL_ETYPE;
  if (!copy_str(o, "model", g.model, sizeof g.model) || !copy_str(o, "driver", g.driver, sizeof g.driver) ||
      !copy_str(o, "reason", g.reason, sizeof g.reason) ||
      !copy_str(o, "unusable", g.unusable, sizeof g.unusable))
    return SL_ETYPE;
  g.count = (int)json_integer_value(count);
  g.memory_mib = mem ? (int64_t)json_number_value(mem) : 0;
  *ret = g;
  return 0;
}

void gw_gpus_add_json(const struct gw_gpus *g, json_t *obj) {
  if (!g->known) return;
  json_object_set_new(obj, "gpus", json_integer(g->count));
  if (!g->count) return;
  json_object_set_new(obj, "gpu_model", json_string(g->model));
  json_object_set_new(obj, "gpu_memory_mib", json_integer(g->memory_mib));
  json_object_set_new(obj, "gpu_driver", json_string(g->driver));
}

static bool word_char(char c) { return isalnum((unsigned char)c); }

bool gw_gpus_model_matches(const char *found, const char *catalog_model) {
  size_t n = strlen(catalog_model);
  if (!n) return true; /* the catalog names no model: any will do */
  for (const char *p = found; *p; p++) {
    if (strncasecmp(p, catalog_model, n)) continue;
    if ((p == found || !word_char(p[-1])) && !word_char(p[n])) return true;
  }
  return false;
}

int gw_gpus_check(const struct gw_gpus *found, const char *type, int catalog_gpus, const char *catalog_model,
                  char *why, size_t why_size) {
  if (!found->known) return 0;
  bool model_ok = !found->count || !catalog_gpus || gw_gpus_model_matches(found->model, catalog_model);
  if (found->count == catalog_gpus && model_ok && !(found->count && found->unusable[0])) return 0;
  char want[160], got[400];
  if (found->count == catalog_gpus && model_ok) {
    snprintf(why, why_size, "%s's worker found %d x %s, but spotlab-train cannot use them (%s): "
             "jobs that name no GPU train on the CPU", type, found->count, found->model[0] ? found->model : "GPU",
             found->unusable);
    sl_utf8_fix(why);
    return 1;
  }
  if (catalog_gpus)
    snprintf(want, sizeof want, "%d x %s", catalog_gpus, catalog_model[0] ? catalog_model : "GPU");
  else
    snprintf(want, sizeof want, "no GPU");
  if (!found->count)
    snprintf(got, sizeof got, "no GPU%s%s%s", found->reason[0] ? " (" : "", found->reason,
             found->reason[0] ? ")" : "");
  else
    snprintf(got, sizeof got, "%d x %s", found->count, found->model[0] ? found->model : "GPU of unknown model");
  snprintf(why, why_size, "%s has %s in the catalog, but its worker found %s", type, want, got);
  sl_utf8_fix(why); /* cut to fit, it goes into a JSON event all the same */
  return 1;
}
