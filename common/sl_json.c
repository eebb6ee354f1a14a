/* JSON parsing with limits, and typed getters with defaults. */
#include "sl_json.h"
#include "sl_err.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Depth scan over raw text, skipping strings. Cheap and run before jansson
 * so a hostile "[[[[..." never reaches its recursive parser. */
static int check_depth(const char *buf, size_t len, int max_depth) {
  int depth = 0;
  bool in_str = false;
  for (size_t i = 0; i < len; i++) {
    char c = buf[i];
    if (in_str) {
      if (c == '\\')
        i++;
      else if (c == '"')
        in_str = false;
      continue;
    }
    if (c == '"')
      in_str = true;
    else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        return SL_EJSONDEPTH;
    } else if (c == ']' || c == '}')
      depth--;
  }
  return 0;
}

int sl_json_parse(const char *buf, size_t len, int max_depth, json_t **ret,
                  char *err_text, size_t err_size) {
  if (max_depth <= 0)
    max_depth = SL_JSON_MAX_DEPTH_DEFAULT;
  int r = check_depth(buf, len, max_depth);
  if (r < 0) {
    if (err_text)
      snprintf(err_text, err_size, "JSON nested deeper than %d levels", max_depth);
    return r;
  }
  json_error_t jerr;
  json_t *v = json_loadb(buf, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
  if (!v) {
    if (err_text)
      snprintf(err_text, err_size, "line %d column %d: %s", jerr.line, jerr.column, jerr.text);
    return SL_EJSON;
  }
  *ret = v;
  return 0;
}

/* Small values (most messages) are written into a stack buffer and copied
 * out once: json_dumps() grows its buffer by reallocation and copies the
 * result again. A value that does not fit is written a second time. */
char *sl_json_dump(const json_t *v, size_t *ret_len) {
  const size_t flags = JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17);
  char stack[1024];
  size_t len = json_dumpb(v, stack, sizeof stack, flags);
  if (len == 0)
    return NULL; /* an error: every JSON text has at least one byte */
  char *s = malloc(len + 1);
  if (!s)
    return NULL;
  if (len <= sizeof stack)
    memcpy(s, stack, len);
  else if (json_dumpb(v, s, len, flags) != len) {
    free(s);
    return NULL;
  }
  s[len] = '\0';
  if (ret_len)
    *ret_len = len;
  return s;
}

const char *sl_json_get_str(const json_t *obj, const char *key, const char *def) {
  json_t *v = json_object_get(obj, key);
  return json_is_string(v) ? json_string_value(v) : def;
}

int64_t sl_json_get_int(const json_t *obj, const char *key, int64_t def) {
  json_t *v = json_object_get(obj, key);
  if (json_is_integer(v))
    return json_integer_value(v);
  if (json_is_real(v))
    return (int64_t)json_real_value(v);
  return def;
}

double sl_json_get_num(const json_t *obj, const char *key, double def) {
  json_t *v = json_object_get(obj, key);
  return json_is_number(v) ? json_number_value(v) : def;
}

bool sl_json_get_bool(const json_t *obj, const char *key, bool def) {
  json_t *v = json_object_get(obj, key);
  return json_is_boolean(v) ? json_is_true(v) : def;
}

json_t *sl_json_real(double v) {
  return isfinite(v) ? json_real(v) : json_null();
}
