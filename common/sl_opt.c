/* The option-table engine (sl_opt.h): parsing text, JSON and command-line
 * flags into the owner's struct, bounds, defaults, --help lines and the JSON
 * description.
 *
 * Every value goes through one checker (check_text or the JSON one) that
 * writes it into a local holder first; only a value that passed is copied to
 * the owner's struct, so a failed set changes nothing. Reasons are written
 * without the option's name and the callers prefix it, which keeps one
 * phrasing per kind of error whatever the source. */
#include "sl_opt.h"

#include "sl_err.h"
#include "sl_json.h"
#include "sl_time.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A checked value, before it is stored. */
struct held {
  const char *str;
  int64_t i;
  uint64_t u;
  double d;
  bool b;
};

static bool same_name(const char *a, const char *b, size_t b_len) {
  size_t i = 0;
  for (; i < b_len && a[i]; i++) {
    char x = a[i] == '-' ? '_' : a[i], y = b[i] == '-' ? '_' : b[i];
    if (x != y)
      return false;
  }
  return i == b_len && !a[i];
}

static const struct sl_opt *find_n(const struct sl_opt *opts, size_t n, const char *name,
                                   size_t len, size_t *ret_index) {
  for (size_t k = 0; k < n; k++)
    if (same_name(opts[k].name, name, len)) {
      if (ret_index)
        *ret_index = k;
      return &opts[k];
    }
  return NULL;
}

const struct sl_opt *sl_opt_find(const struct sl_opt *opts, size_t n, const char *name) {
  return name ? find_n(opts, n, name, strlen(name), NULL) : NULL;
}

const char *sl_opt_type_name(enum sl_opt_type type) {
  static const char *const names[] = {"str", "int", "u64", "num", "bool", "duration", "flag"};
  return (unsigned)type < sizeof names / sizeof *names ? names[type] : "?";
}

const char *sl_opt_metavar(const struct sl_opt *o) {
  static const char *const vars[] = {"TEXT", "N", "N", "X", "yes|no", "DURATION", ""};
  if (o->metavar)
    return o->metavar;
  if (o->type == SL_OPT_STR && o->choices)
    return o->choices;
  return (unsigned)o->type < sizeof vars / sizeof *vars ? vars[o->type] : "X";
}

void sl_opt_flag_name(const struct sl_opt *o, char *buf, size_t size) {
  snprintf(buf, size, "--%s", o->name);
  for (char *p = buf; p && *p; p++)
    if (*p == '_')
      *p = '-';
}

static bool has_bounds(const struct sl_opt *o) { return o->min != 0 || o->max != 0; }

/* Whether d is outside o's bounds ([min, max], or (min, max] above min). */
static bool out_of_range(const struct sl_opt *o, double d) {
  if (!has_bounds(o))
    return false;
  return d > o->max || d < o->min || ((o->flags & SL_OPT_ABOVE_MIN) && d == o->min);
}

/* A bound as written: whole numbers in full (1073741824, not 1.07374e+09). */
static const char *bound(double x, char *buf, size_t size) {
  if (x == floor(x) && fabs(x) < 1e15)
    snprintf(buf, size, "%.0f", x);
  else
    snprintf(buf, size, "%g", x);
  return buf;
}

static int say_range(const struct sl_opt *o, const char *text, char *why, size_t why_size) {
  char lo[32], hi[32];
  return sl_err_say(why, why_size, SL_ECONFIG, "%s is out of range %c%s, %s]", text,
                    (o->flags & SL_OPT_ABOVE_MIN) ? '(' : '[', bound(o->min, lo, sizeof lo),
                    bound(o->max, hi, sizeof hi));
}

/* "a, b or c" from "a|b|c". */
static void choice_list(const char *choices, char *buf, size_t size) {
  size_t used = 0, n = strlen(choices);
  buf[0] = 0;
  for (size_t i = 0; i < n && used + 4 < size; i++) {
    if (choices[i] != '|') {
      buf[used++] = choices[i];
      continue;
    }
    const char *sep = strchr(choices + i + 1, '|') ? ", " : " or ";
    size_t k = strlen(sep);
    memcpy(buf + used, sep, k);
    used += k;
  }
  buf[used < size ? used : size - 1] = 0;
}

static bool is_choice(const char *choices, const char *text) {
  size_t n = strlen(text);
  for (const char *p = choices; p && *p;) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == n && !strncmp(p, text, n))
      return true;
    p = bar ? bar + 1 : NULL;
  }
  return false;
}

static bool parse_bool(const char *v, bool *ret) {
  static const char *yes[] = {"yes", "true", "on", "1"}, *no[] = {"no", "false", "off", "0"};
  for (int i = 0; i < 4; i++) {
    if (!strcasecmp(v, yes[i])) {
      *ret = true;
      return true;
    }
    if (!strcasecmp(v, no[i])) {
      *ret = false;
      return true;
    }
  }
  return false;
}

/* What a number of an option may hold besides decimal digits. */
enum { NUM_SIGN = 1, NUM_FRACTION = 2, NUM_EXPONENT = 4, NUM_REAL = 7 };

/* The length of the decimal number text starts with: digits and what parts allows (a sign,
 * a fraction, an exponent: "-2", "0.5", "1e9"); 0 when it starts with none. strtod and
 * strtoll alone would also take hex ("0x10"), "inf" and leading blanks, which no option means. */
static size_t decimal_len(const char *text, int parts) {
  const char *p = text + ((parts & NUM_SIGN) && (*text == '-' || *text == '+'));
  size_t digits = strspn(p, "0123456789");
  p += digits;
  if ((parts & NUM_FRACTION) && *p == '.') {
    size_t frac = strspn(p + 1, "0123456789");
    digits += frac;
    p += 1 + frac;
  }
  if (!digits)
    return 0;
  if ((parts & NUM_EXPONENT) && (*p == 'e' || *p == 'E')) {
    const char *x = p + 1 + (p[1] == '-' || p[1] == '+');
    size_t n = strspn(x, "0123456789");
    if (n)
      p = x + n;
  }
  return (size_t)(p - text);
}

/* Whether text is all one decimal number (decimal_len). */
static bool is_decimal(const char *text, int parts) {
  size_t n = decimal_len(text, parts);
  return n && !text[n];
}

/* Whether text is a duration as the tables write it: decimal digits (a fraction allowed,
 * with digits on both sides of its point), then a unit or none (seconds): "1.5h", "90"; no
 * sign, exponent or hex. */
static bool is_duration(const char *text) {
  static const char *const units[] = {"", "ms", "s", "m", "h", "d"};
  size_t n = decimal_len(text, NUM_FRACTION);
  const char *dot = memchr(text, '.', n);
  if (dot && (dot == text || dot + 1 == text + n)) /* "1.5h", never ".5h" or "5.h" */
    return false;
  for (size_t i = 0; n && i < sizeof units / sizeof *units; i++)
    if (!strcmp(text + n, units[i]))
      return true;
  return false;
}

int sl_opt_parse_duration(const char *text, int64_t *ret_us) {
  return is_duration(text) && sl_time_parse_duration(text, ret_us) == 0 ? 0 : -EINVAL;
}

/* Whole seconds s in the largest unit that divides them: "90s", "30d". */
static const char *duration_text(double s, char *buf, size_t size) {
  static const struct {
    double s;
    const char *unit;
  } units[] = {{86400, "d"}, {3600, "h"}, {60, "m"}, {1, "s"}};
  for (size_t i = 0; i < sizeof units / sizeof *units; i++)
    if (s >= units[i].s && s == (double)(long long)(s / units[i].s) * units[i].s) {
      snprintf(buf, size, "%lld%s", (long long)(s / units[i].s), units[i].unit);
      return buf;
    }
  snprintf(buf, size, "%gs", s);
  return buf;
}

int sl_opt_parse_number(const char *name, const char *text, bool integer, double min, double max,
                        double *ret, char *err, size_t err_size) {
  char *end;
  errno = 0;
  double d = strtod(text, &end);
  if (!is_decimal(text, integer ? NUM_SIGN : NUM_REAL) || end == text || *end || errno ||
      !isfinite(d)) {
    return sl_err_say(err, err_size, SL_ECONFIG, "%s: \"%s\" is not %s", name, text,
                      integer ? "an integer" : "a number");
  }
  if (d < min || d > max) {
    return sl_err_say(err, err_size, SL_ECONFIG, "%s: %s is out of range [%g, %g]", name, text, min,
                      max);
  }
  *ret = d;
  return 0;
}

static int run_check(const struct sl_opt *o, const char *text, char *why, size_t why_size) {
  if (why && why_size)
    why[0] = 0;
  if (o->check(text, why, why_size) >= 0)
    return 0;
  if (why && why_size && !why[0])
    sl_err_say(why, why_size, 0, "\"%s\" is not a valid value", text);
  return SL_ECONFIG;
}

/* Checks text for o into *h; the reason (without the name) into why. */
static int check_text(const struct sl_opt *o, const char *text, struct held *h, char *why,
                      size_t why_size) {
  char *end;
  errno = 0;
  switch (o->type) {
  case SL_OPT_STR:
    /* the owner's check first: it knows the value's form ("64 hex digits")
     * better than a length limit does */
    if (o->check && run_check(o, text, why, why_size) < 0)
      return SL_ECONFIG;
    if (o->size && strlen(text) >= o->size) {
      return sl_err_say(why, why_size, SL_ECONFIG, "value longer than %zu bytes", o->size - 1);
    }
    if (o->choices && !is_choice(o->choices, text)) {
      char list[256];
      choice_list(o->choices, list, sizeof list);
      return sl_err_say(why, why_size, SL_ECONFIG, "\"%s\" is not %s", text, list);
    }
    h->str = text;
    break;
  case SL_OPT_INT: {
    long long x = strtoll(text, &end, 10);
    double d = (double)x;
    if (!is_decimal(text, NUM_SIGN) || end == text || *end || errno) {
      return sl_err_say(why, why_size, SL_ECONFIG, "\"%s\" is not an integer", text);
    }
    if (out_of_range(o, d))
      return say_range(o, text, why, why_size);
    h->i = x;
    break;
  }
  case SL_OPT_U64: {
    unsigned long long x = strtoull(text, &end, 10);
    if (!is_decimal(text, 0) || end == text || *end || errno) {
      return sl_err_say(why, why_size, SL_ECONFIG, "\"%s\" is not a whole number >= 0", text);
    }
    h->u = x;
    break;
  }
  case SL_OPT_NUM: {
    double d = strtod(text, &end);
    if (!is_decimal(text, NUM_REAL) || end == text || *end || errno || !isfinite(d)) {
      return sl_err_say(why, why_size, SL_ECONFIG, "\"%s\" is not a number", text);
    }
    if (out_of_range(o, d))
      return say_range(o, text, why, why_size);
    h->d = d;
    break;
  }
  case SL_OPT_BOOL:
    if (!parse_bool(text, &h->b)) {
      return sl_err_say(why, why_size, SL_ECONFIG, "\"%s\" is not yes or no", text);
    }
    break;
  case SL_OPT_DUR:
    if (sl_opt_parse_duration(text, &h->i) < 0) {
      return sl_err_say(why, why_size, SL_ECONFIG, "\"%s\" is not a duration (90s, 30m, 2h)", text);
    }
    if (has_bounds(o) && ((double)h->i < o->min * 1e6 || (double)h->i > o->max * 1e6)) {
      char lo[32], hi[32];
      return sl_err_say(why, why_size, SL_ECONFIG, "%s is out of range [%s, %s]", text,
                        duration_text(o->min, lo, sizeof lo), duration_text(o->max, hi, sizeof hi));
    }
    break;
  case SL_OPT_FLAG: return sl_err_say(why, why_size, SL_ECONFIG, "takes no value");
  default: return sl_err_say(why, why_size, SL_ECONFIG, "has an unknown type");
  }
  if (o->check && o->type != SL_OPT_STR && run_check(o, text, why, why_size) < 0)
    return SL_ECONFIG;
  return 0;
}

static void store_int(void *dst, size_t size, int64_t v) {
  switch (size) {
  case 1: { int8_t x = (int8_t)v; memcpy(dst, &x, 1); break; }
  case 2: { int16_t x = (int16_t)v; memcpy(dst, &x, 2); break; }
  case 4: { int32_t x = (int32_t)v; memcpy(dst, &x, 4); break; }
  default: memcpy(dst, &v, sizeof v);
  }
}

static int64_t load_int(const void *src, size_t size) {
  switch (size) {
  case 1: { int8_t x; memcpy(&x, src, 1); return x; }
  case 2: { int16_t x; memcpy(&x, src, 2); return x; }
  case 4: { int32_t x; memcpy(&x, src, 4); return x; }
  default: { int64_t x; memcpy(&x, src, sizeof x); return x; }
  }
}

static void store(const struct sl_opt *o, void *base, const struct held *h) {
  char *dst = (char *)base + o->offset;
  switch (o->type) {
  case SL_OPT_STR:
    if (o->size)
      memcpy(dst, h->str, strlen(h->str) + 1);
    else
      memcpy(dst, &h->str, sizeof h->str);
    break;
  case SL_OPT_INT:
  case SL_OPT_DUR: store_int(dst, o->size, h->i); break;
  case SL_OPT_U64: memcpy(dst, &h->u, sizeof h->u); break;
  case SL_OPT_NUM: memcpy(dst, &h->d, sizeof h->d); break;
  case SL_OPT_BOOL: *(bool *)dst = h->b; break;
  case SL_OPT_FLAG: store_int(dst, o->size, 1); break;
  }
}

int sl_opt_check(const struct sl_opt *o, const char *text, char *err, size_t err_size) {
  struct held h = {0};
  char why[512];
  if (!text)
    text = "";
  if (o->choices && o->type != SL_OPT_STR && is_choice(o->choices, text))
    return 0;
  if (check_text(o, text, &h, why, sizeof why) < 0) {
    return sl_err_say(err, err_size, SL_ECONFIG, "%s: %s", o->name, why);
  }
  return 0;
}

int sl_opt_set(const struct sl_opt *o, void *base, const char *label, const char *text, char *err,
               size_t err_size) {
  struct held h = {0};
  char why[512];
  if (!text)
    text = "";
  if (check_text(o, text, &h, why, sizeof why) < 0) {
    return sl_err_say(err, err_size, SL_ECONFIG, "%s: %s", label ? label : o->name, why);
  }
  store(o, base, &h);
  return 0;
}

int sl_opt_set_json(const struct sl_opt *o, void *base, const json_t *v, char *err, size_t err_size) {
  struct held h = {0};
  char why[512];
  switch (o->type) {
  case SL_OPT_STR:
  case SL_OPT_DUR:
    if (!json_is_string(v)) {
      return sl_err_say(err, err_size, SL_ECONFIG, "\"%s\" must be a string", o->name);
    }
    h.str = json_string_value(v);
    if (o->size && strlen(h.str) >= o->size) {
      return sl_err_say(err, err_size, SL_ECONFIG, "\"%s\" is longer than %zu bytes", o->name,
                        o->size - 1);
    }
    if (check_text(o, h.str, &h, why, sizeof why) < 0) {
      return sl_err_say(err, err_size, SL_ECONFIG, "\"%s\": %s", o->name, why);
    }
    break;
  case SL_OPT_BOOL:
  case SL_OPT_FLAG:
    if (!json_is_boolean(v)) {
      return sl_err_say(err, err_size, SL_ECONFIG, "\"%s\" must be true or false", o->name);
    }
    if (o->type == SL_OPT_FLAG && json_is_false(v))
      return 0; /* a flag is only ever set */
    h.b = json_is_true(v);
    break;
  case SL_OPT_INT:
  case SL_OPT_U64:
    if (!json_is_integer(v) || (o->type == SL_OPT_U64 && json_integer_value(v) < 0)) {
      return sl_err_say(err, err_size, SL_ECONFIG, "\"%s\" must be %s", o->name,
                        o->type == SL_OPT_U64 ? "a whole number >= 0" : "an integer");
    }
    h.i = json_integer_value(v);
    h.u = (uint64_t)h.i;
    if (o->type == SL_OPT_INT && has_bounds(o) && ((double)h.i < o->min || (double)h.i > o->max)) {
      return sl_err_say(err, err_size, SL_ECONFIG, "\"%s\" must be within %lld..%lld", o->name,
                        (long long)o->min, (long long)o->max);
    }
    break;
  case SL_OPT_NUM:
    if (!json_is_number(v)) {
      return sl_err_say(err, err_size, SL_ECONFIG, "\"%s\" must be a number", o->name);
    }
    h.d = json_number_value(v);
    if (has_bounds(o) && (h.d < o->min || h.d > o->max)) {
      return sl_err_say(err, err_size, SL_ECONFIG, "\"%s\" must be within %g..%g", o->name, o->min,
                        o->max);
    }
    break;
  }
  store(o, base, &h);
  return 0;
}

void sl_opt_defaults(const struct sl_opt *opts, size_t n, void *base) {
  for (size_t i = 0; i < n; i++) {
    struct held h = {0};
    if (opts[i].def && check_text(&opts[i], opts[i].def, &h, NULL, 0) == 0)
      store(&opts[i], base, &h); /* tables' defaults are valid: each owner's test checks them */
  }
}

int sl_opt_parse_arg(const struct sl_opt *opts, size_t n, void *base, int argc, char **argv, int *i,
                     char *err, size_t err_size) {
  const char *a = argv[*i];
  if (strncmp(a, "--", 2) != 0) {
    return sl_err_say(err, err_size, SL_ECONFIG, "unexpected argument '%s'", a);
  }
  const char *name = a + 2, *eq = strchr(name, '=');
  size_t index, len = eq ? (size_t)(eq - name) : strlen(name);
  const struct sl_opt *o = find_n(opts, n, name, len, &index);
  if (!o) {
    return sl_err_say(err, err_size, SL_ECONFIG, "unknown option '%s'", a);
  }
  char label[96];
  sl_opt_flag_name(o, label, sizeof label);
  if (o->type == SL_OPT_FLAG) {
    if (eq) {
      return sl_err_say(err, err_size, SL_ECONFIG, "option %s takes no value", label);
    }
    store_int((char *)base + o->offset, o->size, 1);
    (*i)++;
    return (int)index;
  }
  const char *v = eq ? eq + 1 : *i + 1 < argc ? argv[*i + 1] : NULL;
  if (!v) {
    return sl_err_say(err, err_size, SL_ECONFIG, "option %s needs a value", label);
  }
  int r = sl_opt_set(o, base, label, v, err, err_size);
  if (r < 0)
    return r;
  *i += eq ? 1 : 2;
  return (int)index;
}

/* Shortest text that reads back to the same double. */
static void format_num(double d, char *buf, size_t size) {
  for (int prec = 6; prec <= 17; prec++) {
    snprintf(buf, size, "%.*g", prec, d);
    if (strtod(buf, NULL) == d)
      return;
  }
}

void sl_opt_format(const struct sl_opt *o, const void *base, char *buf, size_t size) {
  const char *src = (const char *)base + o->offset;
  switch (o->type) {
  case SL_OPT_STR: {
    const char *s = src;
    if (!o->size)
      memcpy(&s, src, sizeof s);
    snprintf(buf, size, "%s", s ? s : "");
    break;
  }
  case SL_OPT_INT: snprintf(buf, size, "%lld", (long long)load_int(src, o->size)); break;
  case SL_OPT_U64: {
    uint64_t u;
    memcpy(&u, src, sizeof u);
    snprintf(buf, size, "%llu", (unsigned long long)u);
    break;
  }
  case SL_OPT_NUM: {
    double d;
    memcpy(&d, src, sizeof d);
    format_num(d, buf, size);
    break;
  }
  case SL_OPT_BOOL: snprintf(buf, size, "%s", *(const bool *)src ? "yes" : "no"); break;
  case SL_OPT_FLAG: snprintf(buf, size, "%s", load_int(src, o->size) ? "yes" : "no"); break;
  case SL_OPT_DUR: {
    int64_t us = load_int(src, o->size);
    if (us % SL_US_PER_S)
      snprintf(buf, size, "%lldms", (long long)(us / SL_US_PER_MS));
    else if (us && us % (3600 * SL_US_PER_S) == 0)
      snprintf(buf, size, "%lldh", (long long)(us / (3600 * SL_US_PER_S)));
    else if (us && us % (60 * SL_US_PER_S) == 0)
      snprintf(buf, size, "%lldm", (long long)(us / (60 * SL_US_PER_S)));
    else
      snprintf(buf, size, "%llds", (long long)(us / SL_US_PER_S));
    break;
  }
  }
}

void sl_opt_usage(const struct sl_opt *opts, size_t n, FILE *out) {
  for (size_t i = 0; i < n; i++) {
    const struct sl_opt *o = &opts[i];
    char flag[96], left[160];
    sl_opt_flag_name(o, flag, sizeof flag);
    snprintf(left, sizeof left, "%s%s%s", flag, o->type == SL_OPT_FLAG ? "" : " ", sl_opt_metavar(o));
    if (strlen(left) > 22) /* the help on a line of its own, aligned with the others */
      fprintf(out, "  %s\n  %-22s %s", left, "", o->help);
    else
      fprintf(out, "  %-22s %s", left, o->help);
    if (o->def)
      fprintf(out, " (default %s)", o->def);
    fputc('\n', out);
  }
}

/* The default as the JSON value of its type; null when there is none. */
static json_t *default_json(const struct sl_opt *o) {
  struct held h = {0};
  if (o->type == SL_OPT_FLAG)
    return json_false();
  if (!o->def || check_text(o, o->def, &h, NULL, 0) < 0)
    return json_null();
  switch (o->type) {
  case SL_OPT_INT: return json_integer(h.i);
  case SL_OPT_U64: return json_integer((json_int_t)h.u);
  case SL_OPT_NUM: return sl_json_real(h.d);
  case SL_OPT_BOOL: return json_boolean(h.b);
  default: return json_string(o->def);
  }
}

static json_t *bound_json(const struct sl_opt *o, double v) {
  if (!has_bounds(o) || (o->type != SL_OPT_INT && o->type != SL_OPT_NUM && o->type != SL_OPT_DUR))
    return json_null();
  return o->type == SL_OPT_INT ? json_integer((json_int_t)v) : sl_json_real(v);
}

static json_t *describe_one(const struct sl_opt *o, const char *const *context_names,
                            size_t n_contexts) {
  char flag[96];
  sl_opt_flag_name(o, flag, sizeof flag);
  json_t *contexts = json_array(), *choices = json_array();
  for (size_t b = 0; contexts && b < n_contexts && b < 32; b++)
    if (o->contexts & (1u << b))
      json_array_append_new(contexts, json_string(context_names[b]));
  for (const char *p = o->choices; choices && p && *p;) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    json_array_append_new(choices, json_stringn(p, len));
    p = bar ? bar + 1 : NULL;
  }
  const char *example = o->example ? o->example : o->def;
  return json_pack("{s:s, s:s, s:s, s:o, s:o, s:b, s:o, s:o, s:s, s:o, s:s, s:o, s:o, s:b}", "name",
                   o->name, "flag", flag, "type", sl_opt_type_name(o->type), "default",
                   default_json(o), "min", bound_json(o, o->min), "above_min",
                   (o->flags & SL_OPT_ABOVE_MIN) != 0, "max", bound_json(o, o->max),
                   "choices", choices ? choices : json_null(), "metavar", sl_opt_metavar(o),
                   "example", example ? json_string(example) : json_null(), "help", o->help, "doc",
                   o->doc ? json_string(o->doc) : json_null(), "contexts",
                   contexts ? contexts : json_null(), "required", (o->flags & SL_OPT_REQUIRED) != 0);
}

json_t *sl_opt_describe(const struct sl_opt *opts, size_t n, const char *const *context_names,
                        size_t n_contexts) {
  json_t *all = json_array();
  for (size_t i = 0; all && i < n; i++) {
    json_t *one = describe_one(&opts[i], context_names, n_contexts);
    if (!one || json_array_append_new(all, one) < 0) {
      json_decref(all);
      return NULL;
    }
  }
  return all;
}
