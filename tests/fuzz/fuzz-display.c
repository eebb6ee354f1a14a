/* Fuzz target: a job's live display (client/display.c), which folds what
 * the gateway sends about a job (its summary, its events, the session's
 * notices) into the text, HTML, SVG and Vega-Lite a notebook or a terminal
 * shows, and the text the kernel's magics and the CLI make of the
 * gateway's replies (client/gwformat.c, client/gwrecord.c).
 *
 * The first input byte chooses the job's kind (bits 0-1: train, eval,
 * sample, run), whether the first object is the job's summary (bit 2) and
 * the width of the terminal line (the byte itself, 0 to 255 columns); the
 * rest is JSON objects split at "\n--\n", each folded in as an event, or as
 * a session notice where its "type" is "notice". After each, every
 * rendering is made, and each object is also rendered as every kind of
 * reply and as one event's line. What the gateway sent is text to the person, never
 * markup: the HTML and the SVG hold no element the display does not write
 * itself (no script, iframe, object, embed, a, style, link, meta or
 * foreignObject, and no image but its own loss curve); the text, the line
 * and every reply's text no control character but newline and tab (no
 * terminal escape) and nothing but well-formed UTF-8, whatever a width
 * limit cut; the MIME bundle is made (a JSON string holds only UTF-8). No
 * input may crash, leak or hit undefined behaviour. */
#include "display.h"
#include "gwformat.h"
#include "gwrecord.h"
#include "sl_json.h"

#include <ctype.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Whether s holds "<NAME" (any case) followed by a character that ends a
 * tag name. */
static bool has_tag(const char *s, const char *name) {
  size_t n = strlen(name);
  for (const char *p = strchr(s, '<'); p; p = strchr(p + 1, '<'))
    if (!strncasecmp(p + 1, name, n) && (p[1 + n] == ' ' || p[1 + n] == '>' || p[1 + n] == '/' ||
                                         p[1 + n] == '\t' || p[1 + n] == '\n' || !p[1 + n]))
      return true;
  return false;
}

static void markup(char *s) {
  static const char *const foreign[] = {"script", "iframe", "object", "embed", "a", "style",
                                        "link", "foreignObject", "meta", NULL};
  if (!s)
    abort();
  for (int i = 0; foreign[i]; i++)
    if (has_tag(s, foreign[i]))
      abort();
  /* the one image is the display's own loss curve, an SVG data URI */
  static const char curve[] = "<img class=\"spotlab-curve\"";
  for (const char *p = strstr(s, "<img"); p; p = strstr(p + 1, "<img"))
    if (strncmp(p, curve, sizeof curve - 1))
      abort();
  free(s);
}

static void plain(char *s) {
  if (!s)
    abort();
  for (const unsigned char *p = (const unsigned char *)s; *p; p++)
    if ((*p < 0x20 && *p != '\n' && *p != '\t') || *p == 0x7f || (p[0] == 0xC2 && p[1] >= 0x80 && p[1] < 0xA0))
      abort();
  if (!sl_json_utf8_ok(s, strlen(s)))
    abort();
  free(s);
}

/* obj as every reply the kernel and the CLI turn into text. */
static void replies(const json_t *obj) {
  plain(jk_format_jobs(obj));
  plain(jk_format_jobs_of(obj, "nb"));
  plain(jk_format_status(obj));
  plain(jk_format_idle(obj));
  plain(jk_format_sessions(obj, "nb"));
  plain(jk_format_sessions(obj, NULL));
  plain(jk_format_cost(obj));
  plain(jk_format_cost_of(obj, obj, "nb"));
  plain(jk_format_market(obj));
  char *html = jk_format_market_html(obj);
  if (html) {
    if (!sl_json_utf8_ok(html, strlen(html)))
      abort();
    markup(html);
  }
  plain(jk_format_instances(obj));
  plain(jk_format_event(obj, 0));
  plain(jk_format_events(obj));
  plain(jk_format_budgets(obj));
  plain(jk_format_record(obj));
}

static void render(const struct jk_display *d, int width) {
  markup(jk_display_html(d));
  markup(jk_display_svg(d));
  plain(jk_display_text(d));
  plain(jk_display_line(d, width));
  json_t *v = jk_display_vegalite(d);
  if (!v)
    abort();
  json_decref(v);
  json_t *b = jk_display_bundle(d);
  if (!json_is_string(json_object_get(b, "text/plain")) ||
      !json_is_string(json_object_get(b, "text/html")))
    abort();
  json_decref(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *const kinds[] = {"train", "eval", "sample", "run"};
  if (size < 1)
    return 0;
  uint8_t flags = data[0];
  struct jk_display *d = jk_display_new("J000001", kinds[flags & 3]);
  if (!d)
    abort();
  jk_display_set_model(d, "m");
  const char *p = (const char *)data + 1, *end = (const char *)data + size;
  for (int i = 0; p < end; i++) {
    const char *sep = memmem(p, (size_t)(end - p), "\n--\n", 4);
    size_t len = sep ? (size_t)(sep - p) : (size_t)(end - p);
    json_t *v = NULL;
    /* as the kernel reads a gateway message: depth 32 at most */
    if (sl_json_parse(p, len, 32, &v, NULL, 0) == 0 && json_is_object(v)) {
      if (i == 0 && (flags & 4))
        jk_display_summary(d, json_object_get(v, "job") ? json_object_get(v, "job") : v);
      else if (!strcmp(json_string_value(json_object_get(v, "type")) ?: "", "notice"))
        jk_display_notice(d, v);
      else
        jk_display_event(d, v);
      render(d, flags);
      replies(v);
    }
    json_decref(v);
    p = sep ? sep + 4 : end;
  }
  render(d, flags);
  jk_display_free(d);
  return 0;
}
