/* JSON helpers over jansson's values.
 *
 * Parsing from the world goes through sl_json_parse(), which bounds the
 * nesting depth before jansson builds anything; jansson refuses NaN and
 * Infinity (JSON forbids them). Getters borrow from the object and fall back
 * to a default when the key is missing or of another type. */
#ifndef SL_JSON_H
#define SL_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_JSON_MAX_DEPTH_DEFAULT 64

/* Parses buf[0..len) into an owned value in *ret. Fails with SL_EJSONDEPTH
 * if the nesting is deeper than max_depth, SL_EJSON if it does not parse.
 * err_text, when non-NULL, receives a short reason (size err_size). */
int sl_json_parse(const char *buf, size_t len, int max_depth, json_t **ret,
                  char *err_text, size_t err_size);
/* Reads the file at path (at most max_bytes) and parses it as one JSON
 * object into *ret. The buffer is wiped before it is freed (such files may
 * hold keys). -errno, SL_ELIMIT, SL_EJSON with a reason in why. */
int sl_json_read_object(const char *path, size_t max_bytes, int max_depth, json_t **ret, char *why,
                        size_t why_size);

/* Compact serialisation, as json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY |
 * JSON_REAL_PRECISION(17)) writes it; owned by the caller (free()). NULL on
 * OOM, and where json_dumps() fails: a string that is not UTF-8, nesting
 * deeper than 2048 (a value that contains itself). */
char *sl_json_dump(const json_t *v, size_t *ret_len);

/* Whether s[0..len) is well-formed UTF-8, what a JSON string may hold: no
 * overlong forms, no surrogates, nothing past U+10FFFF. */
bool sl_json_utf8_ok(const char *s, size_t len);
/* The length of the well-formed UTF-8 character at s (n bytes there): 1 to
 * 4, or 0 when those bytes are not one (a character cut short included). */
size_t sl_utf8_char(const char *s, size_t n);
/* Copies src into dst (size bytes) as snprintf(dst, size, "%s", src) does,
 * but never cuts a character: a src that does not fit ends at the last
 * whole character that does, so text that was UTF-8 stays UTF-8 (what a
 * JSON string may hold). Returns dst. */
char *sl_utf8_copy(char *dst, size_t size, const char *src);
/* Makes s UTF-8 in place: each byte that is not part of a well-formed
 * character (a character cut inside a message, say) becomes '?'. Returns s. */
char *sl_utf8_fix(char *s);
/* s when it is UTF-8, else a copy of it in buf (size bytes) made so by
 * sl_utf8_copy and sl_utf8_fix: a message for a JSON string, whatever cut
 * the text in it. */
const char *sl_utf8_text(const char *s, char *buf, size_t size);

/* The string member key of obj (borrowed), def when it is missing or not a
 * string. */
const char *sl_json_get_str(const json_t *obj, const char *key, const char *def);
/* The same, NULL when the string holds a NUL ("\u0000", which sl_json_parse
 * lets through): as a C string it would end there, and a name, a key or a
 * credential cut short is another one. */
const char *sl_json_get_whole_str(const json_t *obj, const char *key, const char *def);
/* An integer, or a real truncated toward zero; def when absent, of another
 * type, or a real out of int64_t's range. */
int64_t sl_json_get_int(const json_t *obj, const char *key, int64_t def);
double sl_json_get_num(const json_t *obj, const char *key, double def);
bool sl_json_get_bool(const json_t *obj, const char *key, bool def);
/* The first object of the array arr whose string member key is value
 * (borrowed), or NULL (none, or arr not an array). */
const json_t *sl_json_find(const json_t *arr, const char *key, const char *value);
/* A finite double as JSON (NaN/Inf become null, as JSON has no such numbers). */
json_t *sl_json_real(double v);

#endif
