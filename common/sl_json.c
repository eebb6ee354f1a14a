/* JSON parsing with limits, dumping, and typed getters with defaults.
 *
 * The parser builds jansson values straight from the buffer. jansson's own
 * reads its input a byte at a time through a stream callback and copies
 * every token into a growing buffer before making a value of it, which made
 * parsing a Jupyter message's header and content the largest cost of a
 * request in the kernel. It accepts exactly what json_loadb() accepts with
 * JSON_DECODE_ANY | JSON_ALLOW_NUL: RFC 8259 JSON of any type at the top;
 * strings of well-formed UTF-8 that may hold \u0000, but object keys may
 * not; an integer outside int64_t and a real that overflows are errors; a
 * repeated key keeps its last value. One quirk of jansson's is not copied:
 * it skips a NUL byte right after a number or a literal ("1\0" reads as 1),
 * where this parser refuses a NUL byte outside a string, as RFC 8259 does.
 * test-json compares the two on a corpus of good and broken texts and their
 * mutations. */
#include "sl_json.h"
#include "sl_err.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PARSE_MAX_DEPTH 2048 /* as jansson's, whatever the caller allows */

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

struct parser {
  const char *start, *p, *end;
  int depth, max_depth;
  const char *err_at; /* where the first error was found */
  const char *err;    /* what it was */
};

static json_t *fail(struct parser *ps, const char *at, const char *why) {
  if (!ps->err) {
    ps->err_at = at;
    ps->err = why;
  }
  return NULL;
}

static void skip_ws(struct parser *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\r' || *ps->p == '\t'))
    ps->p++;
}

/* Length of the well-formed UTF-8 sequence at p (at most n bytes), or 0:
 * no overlong forms, no surrogates, nothing past U+10FFFF. */
static size_t utf8_seq(const unsigned char *p, size_t n) {
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

bool sl_json_utf8_ok(const char *s, size_t len) {
  const unsigned char *p = (const unsigned char *)s, *end = p + len;
  while (p < end) {
    size_t n = *p < 0x80 ? 1 : utf8_seq(p, (size_t)(end - p));
    if (!n)
      return false;
    p += n;
  }
  return true;
}

static int hex4(const char *p) {
  int v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0)
      return -1;
    v = v * 16 + d;
  }
  return v;
}

static char *put_utf8(char *out, uint32_t cp) {
  if (cp < 0x80) {
    *out++ = (char)cp;
  } else if (cp < 0x800) {
    *out++ = (char)(0xC0 | (cp >> 6));
    *out++ = (char)(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out++ = (char)(0xE0 | (cp >> 12));
    *out++ = (char)(0x80 | ((cp >> 6) & 0x3F));
    *out++ = (char)(0x80 | (cp & 0x3F));
  } else {
    *out++ = (char)(0xF0 | (cp >> 18));
    *out++ = (char)(0x80 | ((cp >> 12) & 0x3F));
    *out++ = (char)(0x80 | ((cp >> 6) & 0x3F));
    *out++ = (char)(0x80 | (cp & 0x3F));
  }
  return out;
}

/* The string at ps->p (its opening quote): *ret_s and *ret_len give its
 * text, in the input when it has no escapes, else in *ret_owned (malloc'd,
 * the caller frees it). false on error. */
static bool parse_string(struct parser *ps, const char **ret_s, size_t *ret_len, char **ret_owned) {
  const char *q = ++ps->p; /* past the quote */
  const char *end = ps->end;
  bool escapes = false;
  while (q < end && *q != '"') {
    unsigned char c = (unsigned char)*q;
    if (c == '\\') {
      escapes = true;
      q += 2;
    } else if (c < 0x20) {
      fail(ps, q, "control character in a string");
      return false;
    } else if (c < 0x80) {
      q++;
    } else {
      size_t n = utf8_seq((const unsigned char *)q, (size_t)(end - q));
      if (!n) {
        fail(ps, q, "invalid UTF-8 in a string");
        return false;
      }
      q += n;
    }
  }
  if (q >= end) {
    fail(ps, end, "premature end of input in a string");
    return false;
  }
  if (!escapes) {
    *ret_s = ps->p;
    *ret_len = (size_t)(q - ps->p);
    *ret_owned = NULL;
    ps->p = q + 1;
    return true;
  }
  /* Escapes only ever shorten the text: \uXXXX is 6 bytes for at most 3. */
  char *out = malloc((size_t)(q - ps->p) + 1), *o = out;
  if (!out) {
    fail(ps, ps->p, "out of memory");
    return false;
  }
  for (const char *r = ps->p; r < q;) {
    if (*r != '\\') {
      *o++ = *r++;
      continue;
    }
    const char *esc = r++;
    char e = *r++;
    switch (e) {
    case '"': case '\\': case '/': *o++ = e; break;
    case 'b': *o++ = '\b'; break;
    case 'f': *o++ = '\f'; break;
    case 'n': *o++ = '\n'; break;
    case 'r': *o++ = '\r'; break;
    case 't': *o++ = '\t'; break;
    case 'u': {
      int v = q - r >= 4 ? hex4(r) : -1;
      if (v < 0)
        goto bad_escape;
      r += 4;
      uint32_t cp = (uint32_t)v;
      if (cp >= 0xDC00 && cp <= 0xDFFF)
        goto bad_unicode;
      if (cp >= 0xD800 && cp <= 0xDBFF) { /* a high surrogate needs its low half */
        int lo = q - r >= 6 && r[0] == '\\' && r[1] == 'u' ? hex4(r + 2) : -1;
        if (lo < 0xDC00 || lo > 0xDFFF)
          goto bad_unicode;
        cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
        r += 6;
      }
      o = put_utf8(o, cp);
      break;
    }
    default:
      goto bad_escape;
    }
    continue;
  bad_escape:
    free(out);
    fail(ps, esc, "invalid escape");
    return false;
  bad_unicode:
    free(out);
    fail(ps, esc, "invalid Unicode escape (a lone surrogate)");
    return false;
  }
  *o = '\0';
  *ret_s = out;
  *ret_len = (size_t)(o - out);
  *ret_owned = out;
  ps->p = q + 1;
  return true;
}

static json_t *parse_number(struct parser *ps) {
  const char *s = ps->p, *q = s, *end = ps->end;
  if (q < end && *q == '-')
    q++;
  if (q < end && *q == '0') {
    q++;
    if (q < end && *q >= '0' && *q <= '9')
      return fail(ps, s, "invalid number (a leading zero)");
  } else if (q < end && *q >= '1' && *q <= '9') {
    while (q < end && *q >= '0' && *q <= '9')
      q++;
  } else {
    return fail(ps, s, "invalid token");
  }
  bool real = false;
  if (q < end && *q == '.') {
    q++;
    if (q >= end || *q < '0' || *q > '9')
      return fail(ps, s, "invalid number");
    while (q < end && *q >= '0' && *q <= '9')
      q++;
    real = true;
  }
  if (q < end && (*q == 'e' || *q == 'E')) {
    q++;
    if (q < end && (*q == '+' || *q == '-'))
      q++;
    if (q >= end || *q < '0' || *q > '9')
      return fail(ps, s, "invalid number");
    while (q < end && *q >= '0' && *q <= '9')
      q++;
    real = true;
  }
  ps->p = q;
  size_t n = (size_t)(q - s);
  if (!real) {
    /* int64_t, as jansson's strtoll: one more magnitude for negatives */
    bool neg = *s == '-';
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (const char *d = s + neg; d < q; d++) {
      uint64_t digit = (uint64_t)(*d - '0');
      if (v > (limit - digit) / 10)
        return fail(ps, s, neg ? "too big negative integer" : "too big integer");
      v = v * 10 + digit;
    }
    if (!neg)
      return json_integer((json_int_t)v);
    return json_integer(v > (uint64_t)INT64_MAX ? INT64_MIN : -(json_int_t)v);
  }
  char small[64], *text = n < sizeof small ? small : malloc(n + 1);
  if (!text)
    return fail(ps, s, "out of memory");
  memcpy(text, s, n);
  text[n] = '\0';
  const char *point = localeconv()->decimal_point; /* strtod reads the locale's */
  if (point && point[0] && point[0] != '.') {
    char *dot = strchr(text, '.');
    if (dot)
      *dot = point[0];
  }
  errno = 0;
  double d = strtod(text, NULL);
  if (text != small)
    free(text);
  if (errno == ERANGE && (d == HUGE_VAL || d == -HUGE_VAL))
    return fail(ps, s, "real number overflow");
  return json_real(d);
}

/* After a member: 1 on ',' (more follow), 0 on the closing character, -1 on
 * anything else (the error is recorded). */
static int next_member(struct parser *ps, char close, const char *expected) {
  skip_ws(ps);
  if (ps->p < ps->end && *ps->p == ',') {
    ps->p++;
    skip_ws(ps);
    return 1;
  }
  if (ps->p < ps->end && *ps->p == close) {
    ps->p++;
    return 0;
  }
  fail(ps, ps->p, expected);
  return -1;
}

static json_t *parse_value(struct parser *ps);

static json_t *parse_array(struct parser *ps) {
  json_t *a = json_array();
  if (!a)
    return fail(ps, ps->p, "out of memory");
  ps->p++;
  skip_ws(ps);
  if (ps->p < ps->end && *ps->p == ']') {
    ps->p++;
    return a;
  }
  for (;;) {
    json_t *v = parse_value(ps);
    if (!v || json_array_append_new(a, v) < 0)
      goto bad;
    int more = next_member(ps, ']', "',' or ']' expected");
    if (more == 0)
      return a;
    if (more < 0)
      goto bad;
  }
bad:
  json_decref(a);
  return fail(ps, ps->p, "out of memory");
}

static json_t *parse_object(struct parser *ps) {
  json_t *o = json_object();
  if (!o)
    return fail(ps, ps->p, "out of memory");
  ps->p++;
  skip_ws(ps);
  if (ps->p < ps->end && *ps->p == '}') {
    ps->p++;
    return o;
  }
  for (;;) {
    if (ps->p >= ps->end || *ps->p != '"') {
      fail(ps, ps->p, "string or '}' expected");
      goto bad;
    }
    const char *key_at = ps->p, *key;
    size_t key_len;
    char *owned;
    if (!parse_string(ps, &key, &key_len, &owned))
      goto bad;
    if (memchr(key, '\0', key_len)) {
      free(owned);
      fail(ps, key_at, "NUL byte in object key not supported");
      goto bad;
    }
    skip_ws(ps);
    if (ps->p >= ps->end || *ps->p != ':') {
      free(owned);
      fail(ps, ps->p, "':' expected");
      goto bad;
    }
    ps->p++;
    skip_ws(ps);
    json_t *v = parse_value(ps);
    int r = v ? json_object_setn_new_nocheck(o, key, key_len, v) : -1; /* takes v */
    free(owned);
    if (r < 0)
      goto bad;
    int more = next_member(ps, '}', "',' or '}' expected");
    if (more == 0)
      return o;
    if (more < 0)
      goto bad;
  }
bad:
  json_decref(o);
  return fail(ps, ps->p, "out of memory");
}

static bool word(struct parser *ps, const char *w, size_t n) {
  if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, w, n) != 0)
    return false;
  ps->p += n;
  return true;
}

static json_t *parse_value(struct parser *ps) {
  if (ps->p >= ps->end)
    return fail(ps, ps->p, "premature end of input");
  switch (*ps->p) {
  case '{':
  case '[': {
    if (++ps->depth > ps->max_depth)
      return fail(ps, ps->p, "maximum parsing depth reached");
    json_t *v = *ps->p == '{' ? parse_object(ps) : parse_array(ps);
    ps->depth--;
    return v;
  }
  case '"': {
    const char *s;
    size_t n;
    char *owned;
    if (!parse_string(ps, &s, &n, &owned))
      return NULL;
    json_t *v = json_stringn_nocheck(s, n); /* UTF-8 checked above */
    free(owned);
    return v ? v : fail(ps, ps->p, "out of memory");
  }
  case 't':
    return word(ps, "true", 4) ? json_true() : fail(ps, ps->p, "invalid token");
  case 'f':
    return word(ps, "false", 5) ? json_false() : fail(ps, ps->p, "invalid token");
  case 'n':
    return word(ps, "null", 4) ? json_null() : fail(ps, ps->p, "invalid token");
  default:
    return parse_number(ps);
  }
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
  struct parser ps = {buf, buf, buf + len, 0, max_depth < PARSE_MAX_DEPTH ? max_depth : PARSE_MAX_DEPTH, NULL, NULL};
  skip_ws(&ps);
  json_t *v = parse_value(&ps);
  if (v) {
    skip_ws(&ps);
    if (ps.p != ps.end) {
      json_decref(v);
      v = fail(&ps, ps.p, "end of file expected");
    }
  }
  if (!v) {
    if (err_text) {
      int line = 1, column = 1;
      for (const char *q = buf; q < ps.err_at; q++, column++)
        if (*q == '\n')
          line++, column = 0;
      snprintf(err_text, err_size, "line %d column %d: %s", line, column, ps.err ? ps.err : "invalid JSON");
    }
    return SL_EJSON;
  }
  *ret = v;
  return 0;
}

/* ---- writing ------------------------------------------------------------- */

/* The writer makes exactly the text json_dumps() makes with JSON_COMPACT |
 * JSON_ENCODE_ANY | JSON_REAL_PRECISION(17) (test-json compares them), and
 * fails where it fails (a string that is not UTF-8, a real that is not
 * finite, nesting too deep, which is also how a value that contains itself
 * ends), at a fraction of the cost: jansson calls back for every token and
 * formats every integer through snprintf(). */
struct out {
  char *buf;
  size_t len, cap;
  char *stack; /* buf while it is the caller's stack buffer */
};

static bool grow(struct out *o, size_t more) {
  if (o->len + more <= o->cap)
    return true;
  size_t cap = o->cap * 2 > o->len + more ? o->cap * 2 : o->len + more;
  char *b = o->buf == o->stack ? malloc(cap) : realloc(o->buf, cap);
  if (!b)
    return false;
  if (o->buf == o->stack)
    memcpy(b, o->buf, o->len);
  o->buf = b;
  o->cap = cap;
  return true;
}

static bool put(struct out *o, const char *s, size_t n) {
  if (!grow(o, n))
    return false;
  memcpy(o->buf + o->len, s, n);
  o->len += n;
  return true;
}

static bool put_str(struct out *o, const char *s, size_t n) {
  static const char hex[] = "0123456789ABCDEF";
  if (!grow(o, n + 2))
    return false;
  o->buf[o->len++] = '"';
  const unsigned char *p = (const unsigned char *)s, *end = p + n;
  while (p < end) {
    const unsigned char *run = p; /* bytes that need no escape */
    while (p < end && *p >= 0x20 && *p != '"' && *p != '\\' && *p < 0x80)
      p++;
    if (p < end && *p >= 0x80) {
      size_t k = utf8_seq(p, (size_t)(end - p));
      if (!k)
        return false;
      p += k;
      if (!put(o, (const char *)run, (size_t)(p - run)))
        return false;
      continue;
    }
    if (!put(o, (const char *)run, (size_t)(p - run)))
      return false;
    if (p == end)
      break;
    char esc[6] = {'\\', 0};
    size_t k = 2;
    switch (*p) {
    case '"': esc[1] = '"'; break;
    case '\\': esc[1] = '\\'; break;
    case '\b': esc[1] = 'b'; break;
    case '\f': esc[1] = 'f'; break;
    case '\n': esc[1] = 'n'; break;
    case '\r': esc[1] = 'r'; break;
    case '\t': esc[1] = 't'; break;
    default:
      memcpy(esc + 1, "u00", 3);
      esc[4] = hex[*p >> 4];
      esc[5] = hex[*p & 15];
      k = 6;
    }
    if (!put(o, esc, k))
      return false;
    p++;
  }
  return put(o, "\"", 1);
}

static bool put_int(struct out *o, json_int_t v) {
  char digits[24], *d = digits + sizeof digits;
  uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
  do
    *--d = (char)('0' + u % 10);
  while (u /= 10);
  if (v < 0)
    *--d = '-';
  return put(o, d, (size_t)(digits + sizeof digits - d));
}

/* As jansson's jsonp_dtostr(): %.17g, with ".0" when that reads as an
 * integer, and no '+' or leading zeros in the exponent. */
static bool put_real(struct out *o, double v) {
  if (!isfinite(v))
    return false;
  char b[40];
  int n = snprintf(b, sizeof b - 3, "%.17g", v);
  if (n < 0 || (size_t)n >= sizeof b - 3)
    return false;
  size_t len = (size_t)n;
  const char *point = localeconv()->decimal_point; /* snprintf writes the locale's */
  if (point && point[0] && point[0] != '.') {
    char *p = strchr(b, point[0]);
    if (p)
      *p = '.';
  }
  if (!strchr(b, '.') && !strchr(b, 'e')) {
    memcpy(b + len, ".0", 3);
    len += 2;
  }
  char *e = strchr(b, 'e');
  if (e) {
    char *from = e + 1, *to = e + 1;
    if (*from == '-')
      from++, to++;
    else if (*from == '+')
      from++;
    while (*from == '0' && from[1])
      from++;
    memmove(to, from, len - (size_t)(from - b) + 1);
    len -= (size_t)(from - to);
  }
  return put(o, b, len);
}

static bool put_value(struct out *o, const json_t *v, int depth) {
  if (depth > PARSE_MAX_DEPTH)
    return false;
  switch (json_typeof(v)) {
  case JSON_OBJECT: {
    if (!put(o, "{", 1))
      return false;
    bool first = true;
    for (void *it = json_object_iter((json_t *)v); it; it = json_object_iter_next((json_t *)v, it)) {
      if ((!first && !put(o, ",", 1)) ||
          !put_str(o, json_object_iter_key(it), json_object_iter_key_len(it)) || !put(o, ":", 1) ||
          !put_value(o, json_object_iter_value(it), depth + 1))
        return false;
      first = false;
    }
    return put(o, "}", 1);
  }
  case JSON_ARRAY: {
    if (!put(o, "[", 1))
      return false;
    for (size_t i = 0; i < json_array_size(v); i++)
      if ((i && !put(o, ",", 1)) || !put_value(o, json_array_get(v, i), depth + 1))
        return false;
    return put(o, "]", 1);
  }
  case JSON_STRING:
    return put_str(o, json_string_value(v), json_string_length(v));
  case JSON_INTEGER:
    return put_int(o, json_integer_value(v));
  case JSON_REAL:
    return put_real(o, json_real_value(v));
  case JSON_TRUE:
    return put(o, "true", 4);
  case JSON_FALSE:
    return put(o, "false", 5);
  case JSON_NULL:
    return put(o, "null", 4);
  }
  return false;
}

char *sl_json_dump(const json_t *v, size_t *ret_len) {
  char stack[1024];
  struct out o = {stack, 0, sizeof stack, stack};
  char *s = NULL;
  if (v && put_value(&o, v, 0) && put(&o, "", 1)) { /* the NUL */
    s = o.buf == stack ? malloc(o.len) : o.buf;
    if (s && o.buf == stack)
      memcpy(s, stack, o.len);
    if (s && ret_len)
      *ret_len = o.len - 1;
    o.buf = stack; /* taken */
  }
  if (o.buf != stack)
    free(o.buf);
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
