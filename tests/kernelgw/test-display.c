/* Unit tests for kernel/display.c and display_render.c: escaping, folding of
 * events, downsampling, throttling, and each rendering (the Vega-Lite spec
 * is checked by parsing it back). */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "display.h"
#include "harness.h"

static json_t *ev(const char *job, int seq, long long t_us, const char *kind) {
  return json_pack("{s:s, s:s, s:i, s:I, s:s}", "type", "event", "job", job, "seq", seq, "time_us",
                   (json_int_t)t_us, "event", kind);
}

static void feed(struct jk_display *d, json_t *e) {
  jk_display_event(d, e);
  json_decref(e);
}

static size_t count(const char *hay, const char *needle) {
  size_t n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
    n++;
  return n;
}

static void test_escape(void) {
  char *e = jk_xml_escape("<a href=\"x\">&'</a>\x01ok\n");
  CHECK_STR(e, "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;\xEF\xBF\xBDok\n");
  free(e);
  e = jk_xml_escape(NULL);
  CHECK_STR(e, "");
  free(e);
}

static void test_downsample(void) {
  enum { N = 10007 };
  struct jk_point *in = malloc(N * sizeof *in), out[JK_DISPLAY_MAX_POINTS];
  for (size_t i = 0; i < N; i++)
    in[i] = (struct jk_point){(double)i, 10.0 / (1.0 + (double)i)};
  size_t n = jk_downsample(in, N, out, JK_DISPLAY_MAX_POINTS);
  CHECK_INT(n, JK_DISPLAY_MAX_POINTS);
  CHECK_NEAR(out[0].step, 0, 0);
  CHECK_NEAR(out[0].value, 10, 0);
  CHECK_NEAR(out[n - 1].step, N - 1, 0);
  CHECK_NEAR(out[n - 1].value, in[N - 1].value, 0);
  bool increasing = true;
  for (size_t i = 1; i < n; i++)
    increasing &= out[i].step > out[i - 1].step;
  CHECK(increasing);
  n = jk_downsample(in, 7, out, JK_DISPLAY_MAX_POINTS);
  CHECK_INT(n, 7);
  CHECK_NEAR(out[6].step, 6, 0);
  free(in);
}

/* A display of J000007 after a queued → placed → 2000 metrics → cost run. */
static struct jk_display *sample_display(void) {
  struct jk_display *d = jk_display_new("J000007", "train");
  json_t *sum = json_pack("{s:s, s:s, s:s, s:s, s:i}", "job", "J000007", "kind", "train", "model",
                          "m<script>alert(1)</script>", "data", "d&d", "steps", 3000);
  jk_display_summary(d, sum);
  json_decref(sum);
  long long t = 1000000000000;
  int seq = 1;
  json_t *e = ev("J000007", seq++, t, "state");
  json_object_set_new(e, "state", json_string("queued"));
  feed(d, e);
  e = ev("J000007", seq++, t + 1000000, "placed");
  json_object_update_new(e, json_pack("{s:s, s:s, s:s, s:b, s:f, s:f, s:i}", "instance", "i-0123456789ab",
                                  "instance_type", "g5.xlarge", "zone", "us-east-1a", "spot", 1,
                                  "price_usd_per_hour", 0.4, "on_demand_usd_per_hour", 1.006, "attempt", 1));
  feed(d, e);
  for (int s = 1; s <= 2000; s++) {
    e = ev("J000007", seq++, t + 2000000 + (long long)s * 100000, "metric"); /* 10 steps/s */
    json_object_set_new(e, "step", json_integer(s));
    json_object_set_new(e, "steps", json_integer(3000));
    json_object_set_new(e, "loss", json_real(5.0 / (1 + s * 0.01)));
    json_object_set_new(e, "tokens_per_s", json_real(12345));
    if (s % 100 == 0)
      json_object_set_new(e, "eval_loss", json_real(5.5 / (1 + s * 0.01)));
    feed(d, e);
  }
  e = ev("J000007", seq++, t + 300000000, "cost");
  json_object_set_new(e, "cost_usd", json_real(0.02));
  json_object_set_new(e, "on_demand_usd", json_real(0.05));
  feed(d, e);
  return d;
}

static void test_fold_and_text(void) {
  struct jk_display *d = sample_display();
  CHECK_STR(jk_display_id(d), "spotlab-J000007");
  CHECK_INT(jk_display_step(d), 2000);
  CHECK(!jk_display_finished(d));
  size_t n;
  jk_display_series(d, false, &n);
  CHECK_INT(n, 2000);
  jk_display_series(d, true, &n);
  CHECK_INT(n, 20);
  char *text = jk_display_text(d);
  CHECK(text && strstr(text, "step 2000/3000"));
  CHECK(text && strstr(text, "ETA 1m 40s")); /* 1000 steps left at 10 steps/s */
  CHECK(text && strstr(text, "g5.xlarge in us-east-1a, spot $0.4000/h"));
  CHECK(text && strstr(text, "saved $0.0300 (60%)"));
  CHECK(text && strstr(text, "12345 tokens/s"));
  CHECK(text && strstr(text, "[####################..........]"));
  free(text);
  char *line = jk_display_line(d, 40);
  CHECK(line && strlen(line) == 40);
  free(line);

  /* Old and repeated seqs are ignored; another job's events are refused. */
  json_t *e = ev("J000007", 3, 0, "metric");
  json_object_set_new(e, "step", json_integer(1));
  CHECK_INT(jk_display_event(d, e), 0);
  json_decref(e);
  e = ev("J000099", 99999, 0, "state");
  CHECK(jk_display_event(d, e) < 0);
  json_decref(e);
  CHECK_INT(jk_display_step(d), 2000);
  jk_display_free(d);
}

static void test_resume_cuts_curve(void) {
  struct jk_display *d = sample_display();
  json_t *e = ev("J000007", 5000, 0, "preempted");
  json_object_set_new(e, "step", json_integer(1500));
  json_object_set_new(e, "notice", json_true());
  feed(d, e);
  e = ev("J000007", 5001, 0, "resumed");
  json_object_update_new(e, json_pack("{s:i, s:s, s:s, s:i}", "from_step", 1500, "instance_type", "g4dn.xlarge", "zone",
                                  "us-east-1b", "after_s", 42));
  feed(d, e);
  size_t n;
  const struct jk_point *p = jk_display_series(d, false, &n);
  CHECK_INT(n, 1500);
  CHECK_NEAR(p[n - 1].step, 1500, 0);
  e = ev("J000007", 5002, 0, "metric");
  json_object_set_new(e, "step", json_integer(1501));
  json_object_set_new(e, "loss", json_real(1.0));
  feed(d, e);
  p = jk_display_series(d, false, &n);
  CHECK_INT(n, 1501);
  char *text = jk_display_text(d);
  CHECK(text && strstr(text, "preempted at step 1500 (with notice)"));
  CHECK(text && strstr(text, "resumed on g4dn.xlarge in us-east-1b after 42s from step 1500"));
  CHECK(text && !strstr(text, "checkpoint every"));
  free(text);
  /* checkpoint_every=auto: the chosen interval and what it came from */
  e = ev("J000007", 5003, 0, "checkpoint_interval");
  json_object_set_new(e, "steps", json_integer(250));
  json_object_set_new(e, "seconds", json_real(600));
  json_object_set_new(e, "write_s", json_real(10));
  json_object_set_new(e, "mtbp_s", json_real(18000));
  feed(d, e);
  text = jk_display_text(d);
  CHECK(text && strstr(text, "checkpoint every 250 steps (auto: write 10 s, mean time to preemption 5 h)"));
  free(text);
  e = ev("J000007", 5004, 0, "state");
  json_object_set_new(e, "state", json_string("failed"));
  json_object_set_new(e, "reason", json_string("out of <memory>"));
  feed(d, e);
  CHECK(jk_display_finished(d));
  CHECK_STR(jk_display_reason(d), "out of <memory>");
  char *html = jk_display_html(d);
  CHECK(html && strstr(html, "out of &lt;memory&gt;"));
  free(html);
  jk_display_free(d);
}

static void test_html_svg(void) {
  struct jk_display *d = sample_display();
  char *html = jk_display_html(d), *svg = jk_display_svg(d);
  CHECK(html && !strstr(html, "<script>"));
  CHECK(html && strstr(html, "m&lt;script&gt;alert(1)&lt;/script&gt;"));
  CHECK(html && strstr(html, "d&amp;d"));
  CHECK(html && strstr(html, "<svg"));
  CHECK(html && strstr(html, "width:66.7%"));
  CHECK(svg && strncmp(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\"", 39) == 0);
  CHECK(svg && !strstr(svg, "<script>"));
  CHECK(svg && strstr(svg, ">step</text>") && strstr(svg, ">loss</text>"));
  CHECK(svg && strstr(svg, "train loss") && strstr(svg, "eval loss"));
  /* Each polyline holds at most JK_DISPLAY_MAX_POINTS points. */
  const char *pl = svg ? strstr(svg, "class=\"train\"") : NULL;
  CHECK(pl != NULL);
  if (pl) {
    const char *pts = strstr(pl, "points=\"") + 8, *end = strchr(pts, '"');
    size_t commas = 0;
    for (const char *q = pts; q < end; q++)
      commas += *q == ',';
    CHECK_INT(commas, JK_DISPLAY_MAX_POINTS);
  }
  CHECK(svg && count(svg, "<polyline") == 2);
  free(html);
  free(svg);
  jk_display_free(d);
}

static void test_vegalite(void) {
  struct jk_display *d = sample_display();
  json_t *vl = jk_display_vegalite(d);
  char *text = json_dumps(vl, JSON_COMPACT);
  json_error_t jerr;
  json_t *back = text ? json_loads(text, JSON_REJECT_DUPLICATES, &jerr) : NULL;
  CHECK(back != NULL);
  CHECK_STR(json_string_value(json_object_get(back, "$schema")), "https://vega.github.io/schema/vega-lite/v5.json");
  CHECK_STR(json_string_value(json_object_get(json_object_get(back, "mark"), "type")), "line");
  json_t *values = json_object_get(json_object_get(back, "data"), "values");
  CHECK_INT(json_array_size(values), JK_DISPLAY_MAX_POINTS + 20);
  size_t i;
  json_t *v;
  bool ok = true;
  json_array_foreach(values, i, v) {
    ok &= json_is_number(json_object_get(v, "step")) && json_is_number(json_object_get(v, "loss"));
    const char *s = json_string_value(json_object_get(v, "series"));
    ok &= s && (strcmp(s, "train") == 0 || strcmp(s, "eval") == 0);
  }
  CHECK(ok);
  json_t *enc = json_object_get(back, "encoding");
  CHECK_STR(json_string_value(json_object_get(json_object_get(enc, "x"), "field")), "step");
  CHECK_STR(json_string_value(json_object_get(json_object_get(enc, "y"), "field")), "loss");
  json_t *bundle = jk_display_bundle(d);
  CHECK(json_object_get(bundle, "text/plain") && json_object_get(bundle, "text/html") &&
        json_object_get(bundle, "image/svg+xml") && json_object_get(bundle, "application/vnd.vegalite.v5+json"));
  json_decref(bundle);
  json_decref(back);
  free(text);
  json_decref(vl);
  jk_display_free(d);
}

static void test_throttle(void) {
  struct jk_display *d = jk_display_new("J000001", "eval");
  int64_t t0 = 5000000;
  CHECK(jk_display_due(d, t0));       /* the first display goes out at once */
  CHECK_INT(jk_display_next_us(d), 0);
  jk_display_sent(d, t0);
  CHECK(!jk_display_dirty(d));
  CHECK(jk_display_shown(d));
  CHECK_INT(jk_display_next_us(d), INT64_MAX);
  json_t *e = ev("J000001", 1, 1, "state");
  json_object_set_new(e, "state", json_string("running"));
  feed(d, e);
  CHECK(jk_display_dirty(d));
  CHECK(!jk_display_due(d, t0 + 100000));
  CHECK(!jk_display_due(d, t0 + JK_DISPLAY_MIN_INTERVAL_US - 1));
  CHECK(jk_display_due(d, t0 + JK_DISPLAY_MIN_INTERVAL_US));
  CHECK_INT(jk_display_next_us(d), t0 + JK_DISPLAY_MIN_INTERVAL_US);
  /* Output events change nothing shown. */
  jk_display_sent(d, t0 + JK_DISPLAY_MIN_INTERVAL_US);
  e = ev("J000001", 2, 2, "output");
  json_object_set_new(e, "text", json_string("hello"));
  feed(d, e);
  CHECK(!jk_display_dirty(d));
  /* No bundle without a loss has a chart. */
  json_t *bundle = jk_display_bundle(d);
  CHECK(bundle && !json_object_get(bundle, "image/svg+xml"));
  json_decref(bundle);
  e = ev("J000001", 3, 3, "result");
  json_object_set_new(e, "eval_loss", json_real(1.25));
  feed(d, e);
  double loss = 0;
  CHECK(jk_display_eval_result(d, &loss));
  CHECK_NEAR(loss, 1.25, 0);
  jk_display_free(d);
}

static void test_hostile(void) {
  struct jk_display *d = jk_display_new("J000002", "train");
  const char *bad[] = {
    "{\"type\":\"event\",\"job\":\"J000002\",\"seq\":1,\"event\":\"metric\",\"step\":-5,\"loss\":\"x\"}",
    "{\"type\":\"event\",\"job\":\"J000002\",\"seq\":2,\"event\":\"metric\",\"step\":1e300,\"loss\":1}",
    "{\"type\":\"event\",\"job\":\"J000002\",\"seq\":3,\"event\":\"placed\",\"attempt\":1e300,\"spot\":\"x\"}",
    "{\"type\":\"event\",\"job\":\"J000002\",\"seq\":4,\"event\":\"state\",\"state\":[1,2]}",
    "{\"type\":\"event\",\"job\":\"J000002\",\"seq\":5,\"event\":\"nonsense\"}",
    "{\"type\":\"event\",\"job\":\"J000002\",\"seq\":6,\"event\":\"metric\",\"step\":3,\"steps\":-1,\"loss\":2}",
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    json_t *e = json_loads(bad[i], 0, NULL);
    CHECK(e != NULL);
    jk_display_event(d, e);
    json_decref(e);
  }
  json_t *bundle = jk_display_bundle(d);
  CHECK(bundle != NULL);
  json_decref(bundle);
  CHECK_INT(jk_display_step(d), 3);
  jk_display_free(d);
}

int main(void) {
  test_escape();
  test_downsample();
  test_fold_and_text();
  test_resume_cuts_curve();
  test_html_svg();
  test_vegalite();
  test_throttle();
  test_hostile();
  TEST_MAIN_END();
}
