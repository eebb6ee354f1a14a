/* sl_json_parse() against jansson's json_loadb(), which it replaces: on a
 * corpus of good and broken texts, every single-byte change and cut of each,
 * and random values written by jansson, both must refuse the same texts and
 * build the same values (types included) from the others; the one allowed
 * difference is sl_json_parse refusing a raw NUL byte that jansson skips. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "sl_err.h"
#include "sl_json.h"

static int disagreements, dump_disagreements;

static void compare(const char *text, size_t len) {
  json_error_t jerr;
  json_t *want = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
  json_t *got = NULL;
  char err[160];
  int r = sl_json_parse(text, len, 100, &got, err, sizeof err);
  bool same;
  if (!want || r < 0) {
    /* jansson skips a NUL byte right after a number or a literal ("1\0"
     * reads as 1); sl_json_parse refuses a NUL byte outside a string, as
     * RFC 8259 does. With a NUL byte in the text, refusing is never wrong. */
    same = (!want && r < 0) || (r < 0 && memchr(text, '\0', len));
  } else {
    char *a = json_dumps(want, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(17));
    char *b = json_dumps(got, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(17));
    same = json_equal(want, got) && a && b && strcmp(a, b) == 0;
    free(a);
    free(b);
  }
  if (!same && disagreements++ < 10) {
    fprintf(stderr, "disagree on %zu bytes \"", len);
    for (size_t i = 0; i < len && i < 80; i++)
      fprintf(stderr, (unsigned char)text[i] >= 0x20 && text[i] != 0x7f ? "%c" : "\\x%02x",
              (unsigned char)text[i]);
    fprintf(stderr, "\": jansson %s, sl_json_parse %s (%s)\n", want ? "accepts" : jerr.text,
            r < 0 ? "refuses" : "accepts", r < 0 ? err : "");
  }
  /* The writer against jansson's on whatever jansson built. */
  if (want) {
    char *a = json_dumps(want, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(17));
    size_t n = 0;
    char *b = sl_json_dump(want, &n);
    if ((!a != !b || (a && (strcmp(a, b) != 0 || n != strlen(a)))) && dump_disagreements++ < 10)
      fprintf(stderr, "dumps differ: jansson %s, sl_json_dump %s\n", a ? a : "(fails)", b ? b : "(fails)");
    free(a);
    free(b);
  }
  json_decref(want);
  json_decref(got);
}

static const char *const corpus[] = {
  "{}", "[]", "\"\"", "0", "-0", "-0.0", "1", "-1", "123456789", "1.5", "1e5", "1E+5", "1e-5",
  "0.000001", "1.7976931348623157e308", "1e309", "-1e309", "1e-400", "4.9e-324",
  "9223372036854775807", "9223372036854775808", "-9223372036854775808",
  "-9223372036854775809", "99999999999999999999", "01", "-", "-01", "1.", ".5", "+1", "1e",
  "1e+", "0x10", "1.5e3.2", "true", "false", "null", "tru", "nul", "True", "truex", "nullnull",
  " \t\r\n{ \"a\" : 1 , \"b\" : [ true , false , null ] } \n", "{\"a\":1,}", "[1,]", "[,1]",
  "{\"a\"}", "{\"a\":}", "{a:1}", "{\"a\":1 \"b\":2}", "[1 2]", "{\"a\":1,\"a\":2}",
  "{\"a\":{\"a\":{\"a\":[[[]]]}}}", "[[[[[[[[[[]]]]]]]]]]", "[[[[[[[[[[]]]]]]]]]",
  "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\u0041\\u00e9\\u20ac\"", "\"\\ud83d\\ude00\"",
  "\"\\ud83d\"", "\"\\ude00\"", "\"\\ud83d\\u0041\"", "\"\\ud83dx\"", "\"\\u004\"", "\"\\u00zz\"",
  "\"\\x\"", "\"\\\"", "\"abc", "\"a\\u0000b\"", "{\"a\\u0000b\":1}", "{\"\\u0000\":1}",
  "\"\xc3\xa9\"", "\"\xe2\x82\xac\"", "\"\xf0\x9f\x98\x80\"", "\"\xc3\"", "\"\xc0\x80\"",
  "\"\xe0\x80\x80\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"", "\"\xf5\x80\x80\x80\"",
  "\"\xff\"", "\"\x80\"", "\"a\tb\"", "\"a\nb\"", "\"\x7f\"", "", " ", "{} {}", "{}x", "[1]]",
  "{\"msg_id\":\"b6b1d4a2_7\",\"msg_type\":\"execute_request\",\"username\":\"u\",\"session\":\"s\","
  "\"date\":\"2026-11-22T04:45:01.863255Z\",\"version\":\"5.3\"}",
  "{\"code\":\"x = 1\",\"silent\":false,\"store_history\":true,\"user_expressions\":{},"
  "\"allow_stdin\":true,\"stop_on_error\":true}",
  "[1.0, 2.50, -3.25e-2, 0e0, 0E-0, 10e+10]", "{\"\":\"\"}", "[\"\",[],{}]",
};

/* Bytes worth putting anywhere: structure, quotes, escapes, digits, signs,
 * letters of the literals, whitespace, controls, UTF-8 lead and tail bytes. */
static const unsigned char interesting[] = {'{', '}', '[', ']', ',', ':', '"', '\\', '0', '1', '9',
                                            '-', '+', '.', 'e', 'E', 'u', 't', 'n', 'f', ' ', '\n',
                                            0x00, 0x01, 0x1f, 0x7f, 0x80, 0xbf, 0xc2, 0xe0, 0xed,
                                            0xf0, 0xf4, 0xff};

static void mutations(const char *text) {
  size_t len = strlen(text);
  char *buf = malloc(len + 2);
  for (size_t i = 0; i <= len; i++) {
    compare(text, i); /* every cut */
    if (i == len)
      break;
    memcpy(buf, text, i); /* every deletion */
    memcpy(buf + i, text + i + 1, len - i - 1);
    compare(buf, len - 1);
    for (size_t k = 0; k < sizeof interesting; k++) { /* every substitution, every insertion */
      memcpy(buf, text, len);
      buf[i] = (char)interesting[k];
      compare(buf, len);
      memcpy(buf, text, i);
      buf[i] = (char)interesting[k];
      memcpy(buf + i + 1, text + i, len - i);
      compare(buf, len + 1);
    }
  }
  free(buf);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)rng;
}

static json_t *random_value(int depth) {
  switch (next() % (depth > 3 ? 6 : 8)) {
  case 0: return json_integer((json_int_t)((int64_t)((uint64_t)next() << 32 | next()) >> (next() % 64)));
  case 1: return json_real((double)(int32_t)next() / (double)(1 + next() % 100000) * (next() % 2 ? 1e-20 : 1e20));
  case 2: return json_boolean(next() % 2);
  case 3: return json_null();
  case 4:
  case 5: {
    static const char *const words[] = {"", "a", "x = 1", "\xc3\xa9t\xc3\xa9", "tab\there", "q\"uote",
                                        "back\\slash", "\xf0\x9f\x98\x80", "nl\n", "\x01\x1f"};
    return json_string(words[next() % 10]);
  }
  case 6: {
    json_t *a = json_array();
    for (uint32_t n = next() % 5; n; n--)
      json_array_append_new(a, random_value(depth + 1));
    return a;
  }
  default: {
    json_t *o = json_object();
    for (uint32_t n = next() % 5; n; n--) {
      char key[8];
      snprintf(key, sizeof key, "k%u", next() % 7);
      json_object_set_new(o, key, random_value(depth + 1));
    }
    return o;
  }
  }
}

static void depth_limit(void) {
  json_t *v = NULL;
  char err[128];
  CHECK_INT(sl_json_parse("[[[]]]", 6, 3, &v, err, sizeof err), 0);
  json_decref(v);
  v = NULL;
  CHECK_INT(sl_json_parse("[[[[]]]]", 8, 3, &v, err, sizeof err), SL_EJSONDEPTH);
  CHECK(v == NULL);
  CHECK_INT(sl_json_parse("{\n  \"a\": x}", 11, 8, &v, err, sizeof err), SL_EJSON);
  CHECK(strncmp(err, "line 2 column 8:", 16) == 0);
}

/* Values no parser makes: reals of every size, every control character,
 * keys with NUL bytes, strings that are not UTF-8, a value inside itself. */
static void dump_edges(void) {
  static const double reals[] = {0.0, -0.0, 1.0, -1.5, 1e20, 1e21, 1e-5, 1e-7, 123456789012345678.0,
                                 1.7976931348623157e308, 4.9e-324, 0.1, 2.5e-300, -3e100};
  json_t *a = json_array();
  for (size_t i = 0; i < sizeof reals / sizeof *reals; i++)
    json_array_append_new(a, json_real(reals[i]));
  json_array_append_new(a, json_integer(INT64_MIN));
  json_array_append_new(a, json_integer(INT64_MAX));
  char ctl[40];
  for (int i = 0; i < 32; i++)
    ctl[i] = (char)(i + 1 < 32 ? i + 1 : 0x7f);
  json_array_append_new(a, json_stringn(ctl, 32));
  json_array_append_new(a, json_stringn("a\0b\"\\/\xc3\xa9", 9));
  json_t *o = json_object();
  json_object_setn(o, "k\0ey", 4, json_true());
  json_object_set_new(o, "\t", json_null());
  json_array_append_new(a, o);
  char *want = json_dumps(a, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(17));
  char *got = sl_json_dump(a, NULL);
  CHECK(want && got && strcmp(want, got) == 0);
  if (want && got && strcmp(want, got) != 0)
    fprintf(stderr, "jansson %s\nsl_json %s\n", want, got);
  free(want);
  free(got);
  json_t *bad = json_string_nocheck("\xff");
  CHECK(sl_json_dump(bad, NULL) == NULL);
  CHECK(json_dumps(bad, JSON_ENCODE_ANY) == NULL);
  json_decref(bad);
  json_t *outer = json_array(), *inner = json_array();
  json_array_append(outer, inner);
  json_array_append(inner, outer); /* outer holds inner holds outer */
  CHECK(sl_json_dump(outer, NULL) == NULL);
  json_array_clear(inner);
  json_decref(inner);
  json_decref(outer);
  json_decref(a);
}

int main(void) {
  size_t n = sizeof corpus / sizeof *corpus;
  for (size_t i = 0; i < n; i++)
    compare(corpus[i], strlen(corpus[i]));
  /* with NUL bytes inside: the length, not strlen, bounds the text */
  compare("\"a\0b\"", 5);
  compare("[1]\0", 4);
  compare("{\"a\":\0}", 7);
  for (size_t i = 0; i < n; i++)
    mutations(corpus[i]);
  for (int i = 0; i < 3000; i++) {
    json_t *v = random_value(0);
    char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(17));
    char *pretty = json_dumps(v, JSON_ENCODE_ANY | JSON_INDENT(1));
    if (text) {
      compare(text, strlen(text));
      if (i % 30 == 0)
        mutations(text);
    }
    if (pretty)
      compare(pretty, strlen(pretty));
    free(text);
    free(pretty);
    json_decref(v);
  }
  CHECK_INT(disagreements, 0);
  CHECK_INT(dump_disagreements, 0);
  depth_limit();
  dump_edges();
  TEST_MAIN_END();
}
