/* JSON parsing with limits, dumping, and typed getters with defaults, over
 * jansson.
 *
 * Parsing accepts what json_loadb() accepts with JSON_DECODE_ANY |
 * JSON_ALLOW_NUL (RFC 8259 JSON of any type at the top; strings may hold
 * \u0000, object keys may not; a repeated key keeps its last value), after
 * two checks over the raw text: the nesting depth, so a hostile "[[[[..."
 * never reaches jansson's recursive parser, and no NUL byte, which JSON
 * text never holds but jansson skips after a number ("1\0" would read as 1). */
#include "sl_json.h"
#include "sl_err.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DUMP_FLAGS (JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17))

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

size_t sl_utf8_char(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  if (!n)
    return 0;
  if (p[0] < 0x80)
    return 1;
  size_t len = p[0] >= 0xC2 && p[0] <= 0xDF   ? 2
               : p[0] >= 0xE0 && p[0] <= 0xEF ? 3
               : p[0] >= 0xF0 && p[0] <= 0xF4 ? 4
                                              : 0;
  if (!len || len > n)
    return 0;
  uint32_t cp = p[0] & (0x7F >> len);
  for (size_t i = 1; i < len; i++) {
    if ((p[i] & 0xC0) != 0x80)
      return 0;
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
      (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return len;
}

char *sl_utf8_fix(char *s) {
  for (size_t i = 0, n = strlen(s); i < n;) {
    size_t len = sl_utf8_char(s + i, n - i);
    if (!len)
      s[i] = '?';
    i += len ? len : 1;
  }
  return s;
}

const char *sl_utf8_text(const char *s, char *buf, size_t size) {
  return sl_json_utf8_ok(s, strlen(s)) ? s : sl_utf8_fix(sl_utf8_copy(buf, size, s));
}

char *sl_utf8_copy(char *dst, size_t size, const char *src) {
  if (!size)
    return dst;
  size_t n = strlen(src);
  if (n >= size) {
    n = size - 1;
    while (n > 0 && ((unsigned char)src[n] & 0xC0) == 0x80)
      n--; /* src[n], the first byte left out, continues a character: leave it all out */
  }
  memmove(dst, src, n);
  dst[n] = 0;
  return dst;
}

bool sl_json_utf8_ok(const char *s, size_t len) {
  for (size_t i = 0; i < len;) {
    size_t n = sl_utf8_char(s + i, len - i);
    if (!n)
      return false;
    i += n;
  }
  return true;
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
  const char *nul = memchr(buf, '\0', len);
  if (nul) {
    if (err_text)
      snprintf(err_text, err_size, "NUL byte at offset %zu", (size_t)(nul - buf));
    return SL_EJSON;
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

char *sl_json_dump(const json_t *v, size_t *ret_len) {
  char *s = json_dumps(v, DUMP_FLAGS);
  if (s && ret_len)
    *ret_len = strlen(s);
  return s;
}

const char *sl_json_get_str(const json_t *obj, const char *key, const char *def) {
  json_t *v = json_object_get(obj, key);
  return json_is_string(v) ? json_string_value(v) : def;
}

const char *sl_json_get_whole_str(const json_t *obj, const char *key, const char *def) {
  json_t *v = json_object_get(obj, key);
  if (!json_is_string(v))
    return def;
  return strlen(json_string_value(v)) == json_string_length(v) ? json_string_value(v) : NULL;
}

int64_t sl_json_get_int(const json_t *obj, const char *key, int64_t def) {
  json_t *v = json_object_get(obj, key);
  if (json_is_integer(v))
    return json_integer_value(v);
  if (json_is_real(v)) {
    /* a real past int64_t's range has no integer value (the cast would be undefined) */
    double d = json_real_value(v);
    return d > -9.2e18 && d < 9.2e18 ? (int64_t)d : def;
  }
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

const json_t *sl_json_find(const json_t *arr, const char *key, const char *value) {
  size_t i;
  const json_t *e;
  json_array_foreach(arr, i, e) {
    const char *s = json_string_value(json_object_get(e, key));
    if (s && !strcmp(s, value))
      return e;
  }
  return NULL;
}

json_t *sl_json_real(double v) {
  return isfinite(v) ? json_real(v) : json_null();
}

int sl_json_read_object(const char *path, size_t max_bytes, int max_depth, json_t **ret, char *why,
                        size_t why_size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    snprintf(why, why_size, "%s", strerror(e));
    return -e;
  }
  char *buf = malloc(max_bytes + 1);
  size_t got = 0;
  ssize_t k = 0;
  while (buf && got <= max_bytes && (k = read(fd, buf + got, max_bytes + 1 - got)) != 0) {
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0)
      break;
    got += (size_t)k;
  }
  close(fd);
  int r;
  if (!buf || k < 0 || got > max_bytes) {
    snprintf(why, why_size, "unreadable or larger than %zu bytes", max_bytes);
    r = !buf ? -ENOMEM : k < 0 ? -EIO : SL_ELIMIT;
  } else {
    r = sl_json_parse(buf, got, max_depth, ret, why, why_size);
    if (r == 0 && !json_is_object(*ret)) {
      json_decref(*ret);
      *ret = NULL;
      snprintf(why, why_size, "not a JSON object");
      r = SL_EJSON;
    }
  }
  if (buf) {
    explicit_bzero(buf, max_bytes + 1);
    free(buf);
  }
  return r;
}
