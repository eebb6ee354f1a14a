/* sl_json: the limits it adds to jansson's parser (nesting depth counted
 * outside strings, no NUL byte, NaN and Infinity refused), its error text,
 * the writer's round trip, the UTF-8 check and the getters' defaults. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "sl_err.h"
#include "sl_json.h"

static int parse(const char *text, size_t len, int max_depth) {
  json_t *v = NULL;
  char err[128];
  int r = sl_json_parse(text, len, max_depth, &v, err, sizeof err);
  CHECK((r == 0) == (v != NULL));
  json_decref(v);
  return r;
}

static void depth_limit(void) {
  CHECK_INT(parse("[[[]]]", 6, 3), 0);
  CHECK_INT(parse("[[[[]]]]", 8, 3), SL_EJSONDEPTH);
  CHECK_INT(parse("{\"a\":{\"b\":{\"c\":[]}}}", 20, 3), SL_EJSONDEPTH);
  /* brackets inside strings, escaped quotes included, do not count */
  const char *s = "[\"[[[[\\\"[[[[\", \"{{{{\"]";
  CHECK_INT(parse(s, strlen(s), 2), 0);
  /* a deep text is refused before any value is built, whatever its size */
  size_t n = 1000000;
  char *deep = malloc(2 * n);
  memset(deep, '[', n);
  memset(deep + n, ']', n);
  CHECK_INT(parse(deep, 2 * n, 0), SL_EJSONDEPTH);
  free(deep);
  json_t *v = NULL;
  char err[128];
  CHECK_INT(sl_json_parse("[[[[]]]]", 8, 3, &v, err, sizeof err), SL_EJSONDEPTH);
  CHECK(strstr(err, "deeper than 3") != NULL);
}

static void refusals(void) {
  static const char *const bad[] = {"", " ", "{", "[1,]", "{\"a\" 1}", "NaN", "Infinity",
                                    "-Infinity", "[nan]", "01", "1.", "\"\\x\"", "'a'",
                                    "\"\x01\"", "\"\xff\"", "\"\xc0\xaf\"", "{\"a\":1}x",
                                    "99999999999999999999", "1e999", "{\"\\u0000\":1}"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    int r = parse(bad[i], strlen(bad[i]), 0);
    if (r != SL_EJSON)
      fprintf(stderr, "accepted: %s\n", bad[i]);
    CHECK_INT(r, SL_EJSON);
  }
  /* a raw NUL byte is never JSON, even right after a number */
  CHECK_INT(parse("1\0", 2, 0), SL_EJSON);
  CHECK_INT(parse("[1]\0", 4, 0), SL_EJSON);
  CHECK_INT(parse("\"a\0b\"", 5, 0), SL_EJSON);
  json_t *v = NULL;
  char err[128];
  CHECK_INT(sl_json_parse("{\n  \"a\": x}", 11, 8, &v, err, sizeof err), SL_EJSON);
  CHECK(strncmp(err, "line 2 column 8:", 16) == 0);
}

static void accepts(void) {
  json_t *v = NULL;
  CHECK_INT(sl_json_parse("\"a\\u0000b\"", 10, 0, &v, NULL, 0), 0);
  CHECK(json_is_string(v) && json_string_length(v) == 3 && memcmp(json_string_value(v), "a\0b", 3) == 0);
  json_decref(v);
  v = NULL;
  CHECK_INT(sl_json_parse("{\"a\":1,\"a\":2}", 13, 0, &v, NULL, 0), 0);
  CHECK_INT(sl_json_get_int(v, "a", 0), 2); /* a repeated key keeps its last value */
  json_decref(v);
  v = NULL;
  CHECK_INT(sl_json_parse(" 42 ", 4, 0, &v, NULL, 0), 0); /* any type at the top */
  CHECK(json_is_integer(v) && json_integer_value(v) == 42);
  json_decref(v);
}

/* What the writer makes reads back as the same value. */
static void round_trip(void) {
  json_t *a = json_array();
  static const double reals[] = {0.0, -0.0, 1.0, -1.5, 1e21, 1e-7, 0.1, 4.9e-324, 1.7976931348623157e308};
  for (size_t i = 0; i < sizeof reals / sizeof *reals; i++)
    json_array_append_new(a, json_real(reals[i]));
  json_array_append_new(a, json_integer(INT64_MIN));
  json_array_append_new(a, json_integer(INT64_MAX));
  json_array_append_new(a, json_stringn("a\0b\"\\/\t\x01\xc3\xa9", 10));
  json_t *o = json_object();
  json_object_set_new(o, "k", json_true());
  json_object_set_new(o, "n", json_null());
  json_array_append_new(a, o);
  size_t n = 0;
  char *text = sl_json_dump(a, &n);
  CHECK(text && n == strlen(text) && strchr(text, ' ') == NULL);
  json_t *back = NULL;
  CHECK_INT(text ? sl_json_parse(text, n, 0, &back, NULL, 0) : -1, 0);
  CHECK(back && json_equal(a, back));
  /* 17 significant digits: every double reads back exactly */
  CHECK(back && json_real_value(json_array_get(back, 6)) == 0.1);
  free(text);
  json_decref(back);
  json_decref(a);
  json_t *bad = json_string_nocheck("\xff");
  CHECK(sl_json_dump(bad, NULL) == NULL);
  json_decref(bad);
  json_t *r = sl_json_real(NAN);
  CHECK(json_is_null(r));
  json_decref(r);
  r = sl_json_real(2.5);
  CHECK(json_is_real(r) && json_real_value(r) == 2.5);
  json_decref(r);
}

static void utf8(void) {
  CHECK(sl_json_utf8_ok("", 0));
  CHECK(sl_json_utf8_ok("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 10));
  CHECK(!sl_json_utf8_ok("\xc0\xaf", 2));         /* overlong */
  CHECK(!sl_json_utf8_ok("\xed\xa0\x80", 3));     /* surrogate */
  CHECK(!sl_json_utf8_ok("\xf4\x90\x80\x80", 4)); /* past U+10FFFF */
  CHECK(!sl_json_utf8_ok("\xe2\x82", 2));         /* cut */
  CHECK_INT(sl_utf8_char("a", 1), 1);
  CHECK_INT(sl_utf8_char("\xe2\x82\xac", 3), 3);
  CHECK_INT(sl_utf8_char("\xe2\x82\xac", 2), 0); /* cut short */
  CHECK_INT(sl_utf8_char("\x80", 1), 0);
  CHECK_INT(sl_utf8_char("", 0), 0);
  /* a copy that does not fit ends on a whole character */
  char out[6];
  CHECK(strcmp(sl_utf8_copy(out, sizeof out, "ab\xe2\x82\xac"), "ab\xe2\x82\xac") == 0);
  CHECK(strcmp(sl_utf8_copy(out, sizeof out, "abc\xe2\x82\xac"), "abc") == 0);
  CHECK(strcmp(sl_utf8_copy(out, sizeof out, "\xc3\xa9\xc3\xa9\xc3\xa9"), "\xc3\xa9\xc3\xa9") == 0);
  CHECK(strcmp(sl_utf8_copy(out, sizeof out, "abcdefgh"), "abcde") == 0);
  CHECK(strcmp(sl_utf8_copy(out, 1, "abc"), "") == 0);
  /* a message whose text was cut inside a character, then went on */
  char msg[] = "kind \xe2\x82 is not a user \xff";
  CHECK(strcmp(sl_utf8_fix(msg), "kind ?? is not a user ?") == 0);
  char buf[16];
  const char *ok = "caf\xc3\xa9";
  CHECK(sl_utf8_text(ok, buf, sizeof buf) == ok);
  CHECK(strcmp(sl_utf8_text("a\xc3 b", buf, sizeof buf), "a? b") == 0);
}

static void getters(void) {
  json_t *v = NULL;
  const char *t = "{\"s\":\"x\",\"i\":7,\"r\":1.5,\"b\":true,\"n\":null}";
  CHECK_INT(sl_json_parse(t, strlen(t), 0, &v, NULL, 0), 0);
  CHECK(strcmp(sl_json_get_str(v, "s", "d"), "x") == 0);
  CHECK(strcmp(sl_json_get_str(v, "i", "d"), "d") == 0);
  CHECK_INT(sl_json_get_int(v, "i", 0), 7);
  CHECK_INT(sl_json_get_int(v, "s", -1), -1);
  CHECK(sl_json_get_num(v, "r", 0) == 1.5 && sl_json_get_num(v, "i", 0) == 7.0);
  CHECK(sl_json_get_bool(v, "b", false) && !sl_json_get_bool(v, "n", false));
  CHECK(sl_json_get_num(v, "missing", 3.25) == 3.25);
  json_decref(v);
}

int main(void) {
  depth_limit();
  refusals();
  accepts();
  round_trip();
  utf8();
  getters();
  TEST_MAIN_END();
}
