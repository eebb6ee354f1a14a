/* Unit tests for client/display.c and display_render.c: escaping, folding of
 * events, downsampling, throttling, and each rendering (the Vega-Lite spec
 * is checked by parsing it back). */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "display.h"
#include "sl_json.h"
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
  CHECK(text && strstr(text, "preempted at step 2000 (with notice) → checkpoint durable at step 1500, 500 steps lost"
                             " → resumed on g4dn.xlarge in us-east-1b after 42 s\n"));
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
  /* the curve is an <img> of the SVG ("<svg" in base64 is "PHN2Zy"), the bar a <progress> */
  CHECK(html && !strstr(html, "<svg") && strstr(html, "src=\"data:image/svg+xml;base64,PHN2Zy"));
  CHECK(html && strstr(html, "<progress class=\"spotlab-bar\" max=\"100\" value=\"66.7\""));
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
  CHECK(svg && count(svg, "<circle class=\"eval\"") == 20); /* each evaluation a dot */
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
  json_t *layer = json_object_get(back, "layer");
  CHECK_STR(json_string_value(json_object_get(json_object_get(json_array_get(layer, 0), "mark"), "type")), "line");
  /* a dot on each evaluation, which a line through one point would not show */
  CHECK_STR(json_string_value(json_object_get(json_object_get(json_array_get(layer, 1), "mark"), "type")), "point");
  CHECK_STR(sl_json_get_str(json_array_get(json_object_get(json_array_get(layer, 1), "transform"), 0), "filter", ""),
            "datum.series == 'eval'");
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


/* What the gateway sends is text: a failure reason with terminal escapes
 * (C0 and C1) shows them as '?', never as escapes, in the text, the line
 * and the timeline; and a reason longer than its field, cut inside a
 * character, still makes a display (a JSON string holds only UTF-8: the
 * bundle was NULL, so a failed job's final state never went out). */
static void test_text_from_the_gateway(void) {
  struct jk_display *d = jk_display_new("J000003", "train");
  char reason[700] = "";
  for (int i = 0; i < 300; i++) strcat(reason, "\xC3\xA9"); /* é */
  json_t *e = ev("J000003", 1, 1000000, "state");
  json_object_set_new(e, "state", json_string("failed"));
  json_object_set_new(e, "reason", json_string(reason));
  feed(d, e);
  json_t *bundle = jk_display_bundle(d);
  CHECK(bundle != NULL);
  CHECK(json_is_string(json_object_get(bundle, "text/plain")));
  const char *text = json_string_value(json_object_get(bundle, "text/plain"));
  CHECK(text && strstr(text, "\xC3\xA9\xC3\xA9"));
  json_decref(bundle);
  jk_display_free(d);

  d = jk_display_new("J000004", "train");
  e = ev("J000004", 1, 1000000, "state");
  json_object_set_new(e, "state", json_string("failed"));
  json_object_set_new(e, "reason", json_string("boom\x1b]0;title\x07 \xC2\x9B" "31m red\r\nnext"));
  feed(d, e);
  char *out[2] = {jk_display_text(d), jk_display_line(d, 200)};
  for (int k = 0; k < 2; k++)
    CHECK(out[k] && !strchr(out[k], '\x1b') && !strchr(out[k], '\x07') && !strchr(out[k], '\r') &&
          !strstr(out[k], "\xC2\x9B"));
  /* the timeline's line: one line, the escapes shown as '?' */
  CHECK(out[0] && strstr(out[0], "failed: boom?]0;title? ?31m red? next\n"));
  free(out[0]);
  free(out[1]);
  jk_display_free(d);
}

/* ---- timelines from real gateway event sequences ------------------------
 * Each sequence below is what spotlab-gateway sent to an attached client
 * (recorded from the gateway with the scripted worker of tests/gateway/:
 * a train job preempted with a 120 s notice, one killed without notice, a
 * %%run job preempted with notice, a sample of the trained model, and a
 * job across a gateway restart). The timeline lines are checked exactly. */

static const char *const notice_events[] = {
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"queued\",\"reason\":\"submitted\",\"time_us\":1795322893569372,\"job\":\"J000001\",\"seq\":1}",
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"provisioning\",\"reason\":\"launching an instance\",\"job\":\"J000001\",\"seq\":2,\"time_us\":1795322893571698}",
  "{\"type\":\"event\",\"event\":\"placed\",\"instance\":\"i-3154ffa6047f\",\"instance_type\":\"fake.small\",\"zone\":\"fake-1a\",\"spot\":true,\"price_usd_per_hour\":0.3,\"on_demand_usd_per_hour\":1.0,\"attempt\":1,\"job\":\"J000001\",\"seq\":3,\"time_us\":1795322893575751}",
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"starting\",\"reason\":\"assigned to a worker\",\"job\":\"J000001\",\"seq\":4,\"time_us\":1795322893621701}",
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"running\",\"reason\":\"first metric\",\"job\":\"J000001\",\"seq\":5,\"time_us\":1795322893622318}",
  "{\"type\":\"event\",\"step\":1,\"loss\":3.0,\"lr\":0.001,\"event\":\"metric\",\"steps\":6,\"job\":\"J000001\",\"seq\":6,\"time_us\":1795322893622469}",
  "{\"type\":\"event\",\"event\":\"checkpoint\",\"step\":1,\"path\":\"J000001/ckpt-00000001.tc\",\"bytes\":10,\"write_ms\":1,\"upload_ms\":1,\"durable\":true,\"job\":\"J000001\",\"seq\":7,\"time_us\":1795322893622737}",
  "{\"type\":\"event\",\"event\":\"notice\",\"action\":\"terminate\",\"deadline_us\":1795323013623083,\"instance\":\"i-3154ffa6047f\",\"job\":\"J000001\",\"seq\":8,\"time_us\":1795322893623170}",
  "{\"type\":\"event\",\"event\":\"checkpoint\",\"step\":1,\"path\":\"J000001/ckpt-00000001.tc\",\"bytes\":10,\"write_ms\":1,\"upload_ms\":1,\"durable\":true,\"job\":\"J000001\",\"seq\":9,\"time_us\":1795322893643110}",
  "{\"type\":\"event\",\"event\":\"preempted\",\"step\":1,\"notice\":true,\"instance\":\"i-3154ffa6047f\",\"job\":\"J000001\",\"seq\":10,\"time_us\":1795322893647858}",
  "{\"type\":\"event\",\"event\":\"cost\",\"cost_usd\":0.00038172999999999994,\"on_demand_usd\":0.0012724333333333333,\"job\":\"J000001\",\"seq\":11,\"time_us\":1795322893648067}",
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"preempted\",\"reason\":\"preempted with notice\",\"job\":\"J000001\",\"seq\":12,\"time_us\":1795322893648298}",
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"queued\",\"reason\":\"resuming from the latest checkpoint\",\"job\":\"J000001\",\"seq\":13,\"time_us\":1795322893648422}",
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"provisioning\",\"reason\":\"launching an instance\",\"job\":\"J000001\",\"seq\":14,\"time_us\":1795322893650119}",
  "{\"type\":\"event\",\"event\":\"placed\",\"instance\":\"i-e503d6bf6774\",\"instance_type\":\"fake.small\",\"zone\":\"fake-1a\",\"spot\":true,\"price_usd_per_hour\":0.3,\"on_demand_usd_per_hour\":1.0,\"attempt\":2,\"job\":\"J000001\",\"seq\":15,\"time_us\":1795322893650376}",
  "{\"type\":\"event\",\"event\":\"resumed\",\"from_step\":1,\"instance_type\":\"fake.small\",\"zone\":\"fake-1a\",\"after_s\":0.058693,\"job\":\"J000001\",\"seq\":16,\"time_us\":1795322893707207}",
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"starting\",\"reason\":\"assigned to a worker\",\"job\":\"J000001\",\"seq\":17,\"time_us\":1795322893707361}",
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"running\",\"reason\":\"first metric\",\"job\":\"J000001\",\"seq\":18,\"time_us\":1795322893708027}",
  "{\"type\":\"event\",\"step\":2,\"loss\":1.5,\"lr\":0.001,\"event\":\"metric\",\"steps\":6,\"job\":\"J000001\",\"seq\":19,\"time_us\":1795322893708283}",
  "{\"type\":\"event\",\"event\":\"checkpoint\",\"step\":2,\"path\":\"J000001/ckpt-00000002.tc\",\"bytes\":10,\"write_ms\":1,\"upload_ms\":1,\"durable\":true,\"job\":\"J000001\",\"seq\":20,\"time_us\":1795322893708710}",
  "{\"type\":\"event\",\"step\":3,\"loss\":1.0,\"lr\":0.001,\"event\":\"metric\",\"steps\":6,\"job\":\"J000001\",\"seq\":21,\"time_us\":1795322893729120}",
  "{\"type\":\"event\",\"step\":4,\"loss\":0.75,\"lr\":0.001,\"event\":\"metric\",\"steps\":6,\"job\":\"J000001\",\"seq\":22,\"time_us\":1795322893749940}",
  "{\"type\":\"event\",\"event\":\"checkpoint\",\"step\":4,\"path\":\"J000001/ckpt-00000004.tc\",\"bytes\":10,\"write_ms\":1,\"upload_ms\":1,\"durable\":true,\"job\":\"J000001\",\"seq\":23,\"time_us\":1795322893750476}",
  "{\"type\":\"event\",\"step\":5,\"loss\":0.6,\"lr\":0.001,\"event\":\"metric\",\"steps\":6,\"job\":\"J000001\",\"seq\":24,\"time_us\":1795322893770325}",
  "{\"type\":\"event\",\"step\":6,\"loss\":0.5,\"lr\":0.001,\"event\":\"metric\",\"steps\":6,\"job\":\"J000001\",\"seq\":25,\"time_us\":1795322893790569}",
  "{\"type\":\"event\",\"event\":\"checkpoint\",\"step\":6,\"path\":\"J000001/ckpt-00000006.tc\",\"bytes\":10,\"write_ms\":1,\"upload_ms\":1,\"durable\":true,\"job\":\"J000001\",\"seq\":26,\"time_us\":1795322893791276}",
  "{\"type\":\"event\",\"event\":\"cost\",\"cost_usd\":0.0010888449999999997,\"on_demand_usd\":0.0036294833333333333,\"job\":\"J000001\",\"seq\":27,\"time_us\":1795322893791658}",
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"succeeded\",\"reason\":\"done\",\"job\":\"J000001\",\"seq\":28,\"time_us\":1795322893792005}",
};

static const char *const kill_events[] = {
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"queued\",\"reason\":\"submitted\",\"time_us\":1795322893792515,\"job\":\"J000002\",\"seq\":1}",
  "{\"type\":\"event\",\"event\":\"placed\",\"instance\":\"i-e503d6bf6774\",\"instance_type\":\"fake.small\",\"zone\":\"fake-1a\",\"spot\":true,\"price_usd_per_hour\":0.3,\"on_demand_usd_per_hour\":1.0,\"attempt\":1,\"job\":\"J000002\",\"seq\":2,\"time_us\":1795322893793251}",
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"starting\",\"reason\":\"assigned to a worker\",\"job\":\"J000002\",\"seq\":3,\"time_us\":1795322893793724}",
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"running\",\"reason\":\"first metric\",\"job\":\"J000002\",\"seq\":4,\"time_us\":1795322893794042}",
  "{\"type\":\"event\",\"step\":1,\"loss\":3.0,\"lr\":0.001,\"event\":\"metric\",\"steps\":6,\"job\":\"J000002\",\"seq\":5,\"time_us\":1795322893794284}",
  "{\"type\":\"event\",\"event\":\"checkpoint\",\"step\":1,\"path\":\"J000002/ckpt-00000001.tc\",\"bytes\":10,\"write_ms\":1,\"upload_ms\":1,\"durable\":true,\"job\":\"J000002\",\"seq\":6,\"time_us\":1795322893794575}",
  "{\"type\":\"event\",\"event\":\"preempted\",\"step\":1,\"notice\":false,\"instance\":\"i-e503d6bf6774\",\"job\":\"J000002\",\"seq\":7,\"time_us\":1795322893846080}",
  "{\"type\":\"event\",\"event\":\"cost\",\"cost_usd\":0.000265155,\"on_demand_usd\":0.0008838499999999999,\"job\":\"J000002\",\"seq\":8,\"time_us\":1795322893846625}",
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"preempted\",\"reason\":\"instance terminated\",\"job\":\"J000002\",\"seq\":9,\"time_us\":1795322893846842}",
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"queued\",\"reason\":\"resuming from the latest checkpoint\",\"job\":\"J000002\",\"seq\":10,\"time_us\":1795322893846969}",
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"provisioning\",\"reason\":\"launching an instance\",\"job\":\"J000002\",\"seq\":11,\"time_us\":1795322893848315}",
  "{\"type\":\"event\",\"event\":\"placed\",\"instance\":\"i-e6fad6046d7b\",\"instance_type\":\"fake.small\",\"zone\":\"fake-1a\",\"spot\":true,\"price_usd_per_hour\":0.3,\"on_demand_usd_per_hour\":1.0,\"attempt\":2,\"job\":\"J000002\",\"seq\":12,\"time_us\":1795322893850010}",
  "{\"type\":\"event\",\"event\":\"resumed\",\"from_step\":1,\"instance_type\":\"fake.small\",\"zone\":\"fake-1a\",\"after_s\":0.050696,\"job\":\"J000002\",\"seq\":13,\"time_us\":1795322893897696}",
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"starting\",\"reason\":\"assigned to a worker\",\"job\":\"J000002\",\"seq\":14,\"time_us\":1795322893897837}",
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"running\",\"reason\":\"first metric\",\"job\":\"J000002\",\"seq\":15,\"time_us\":1795322893898468}",
  "{\"type\":\"event\",\"step\":2,\"loss\":1.5,\"lr\":0.001,\"event\":\"metric\",\"steps\":6,\"job\":\"J000002\",\"seq\":16,\"time_us\":1795322893898596}",
  "{\"type\":\"event\",\"event\":\"checkpoint\",\"step\":2,\"path\":\"J000002/ckpt-00000002.tc\",\"bytes\":10,\"write_ms\":1,\"upload_ms\":1,\"durable\":true,\"job\":\"J000002\",\"seq\":17,\"time_us\":1795322893898801}",
  "{\"type\":\"event\",\"step\":3,\"loss\":1.0,\"lr\":0.001,\"event\":\"metric\",\"steps\":6,\"job\":\"J000002\",\"seq\":18,\"time_us\":1795322893918644}",
  "{\"type\":\"event\",\"step\":4,\"loss\":0.75,\"lr\":0.001,\"event\":\"metric\",\"steps\":6,\"job\":\"J000002\",\"seq\":19,\"time_us\":1795322893939046}",
  "{\"type\":\"event\",\"event\":\"checkpoint\",\"step\":4,\"path\":\"J000002/ckpt-00000004.tc\",\"bytes\":10,\"write_ms\":1,\"upload_ms\":1,\"durable\":true,\"job\":\"J000002\",\"seq\":20,\"time_us\":1795322893939368}",
  "{\"type\":\"event\",\"step\":5,\"loss\":0.6,\"lr\":0.001,\"event\":\"metric\",\"steps\":6,\"job\":\"J000002\",\"seq\":21,\"time_us\":1795322893959199}",
  "{\"type\":\"event\",\"step\":6,\"loss\":0.5,\"lr\":0.001,\"event\":\"metric\",\"steps\":6,\"job\":\"J000002\",\"seq\":22,\"time_us\":1795322893979395}",
  "{\"type\":\"event\",\"event\":\"checkpoint\",\"step\":6,\"path\":\"J000002/ckpt-00000006.tc\",\"bytes\":10,\"write_ms\":1,\"upload_ms\":1,\"durable\":true,\"job\":\"J000002\",\"seq\":23,\"time_us\":1795322893979691}",
  "{\"type\":\"event\",\"event\":\"cost\",\"cost_usd\":0.0009229999999999999,\"on_demand_usd\":0.0030766666666666664,\"job\":\"J000002\",\"seq\":24,\"time_us\":1795322893979961}",
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"succeeded\",\"reason\":\"done\",\"job\":\"J000002\",\"seq\":25,\"time_us\":1795322893980234}",
};

static const char *const run_events[] = {
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"queued\",\"reason\":\"submitted\",\"time_us\":1795322893980581,\"job\":\"J000003\",\"seq\":1}",
  "{\"type\":\"event\",\"event\":\"placed\",\"instance\":\"i-e6fad6046d7b\",\"instance_type\":\"fake.small\",\"zone\":\"fake-1a\",\"spot\":true,\"price_usd_per_hour\":0.3,\"on_demand_usd_per_hour\":1.0,\"attempt\":1,\"job\":\"J000003\",\"seq\":2,\"time_us\":1795322893980823}",
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"starting\",\"reason\":\"assigned to a worker\",\"job\":\"J000003\",\"seq\":3,\"time_us\":1795322893981078}",
  "{\"type\":\"event\",\"event\":\"output\",\"stream\":\"stdout\",\"text\":\"script: echo hi\",\"job\":\"J000003\",\"seq\":4,\"time_us\":1795322893981479}",
  "{\"type\":\"event\",\"event\":\"output\",\"stream\":\"stdout\",\"text\":\"line 1 of attempt 1\",\"job\":\"J000003\",\"seq\":5,\"time_us\":1795322893981631}",
  "{\"type\":\"event\",\"event\":\"notice\",\"action\":\"terminate\",\"deadline_us\":1795323013981794,\"instance\":\"i-e6fad6046d7b\",\"job\":\"J000003\",\"seq\":6,\"time_us\":1795322893981839}",
  "{\"type\":\"event\",\"event\":\"preempted\",\"step\":null,\"notice\":true,\"instance\":\"i-e6fad6046d7b\",\"job\":\"J000003\",\"seq\":7,\"time_us\":1795322894002639}",
  "{\"type\":\"event\",\"event\":\"cost\",\"cost_usd\":0.00010996500000000001,\"on_demand_usd\":0.00036655,\"job\":\"J000003\",\"seq\":8,\"time_us\":1795322894002879}",
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"preempted\",\"reason\":\"preempted with notice\",\"job\":\"J000003\",\"seq\":9,\"time_us\":1795322894003075}",
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"queued\",\"reason\":\"resuming from the latest checkpoint\",\"job\":\"J000003\",\"seq\":10,\"time_us\":1795322894003233}",
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"provisioning\",\"reason\":\"launching an instance\",\"job\":\"J000003\",\"seq\":11,\"time_us\":1795322894007894}",
  "{\"type\":\"event\",\"event\":\"placed\",\"instance\":\"i-e0bf178ca18e\",\"instance_type\":\"fake.small\",\"zone\":\"fake-1a\",\"spot\":true,\"price_usd_per_hour\":0.3,\"on_demand_usd_per_hour\":1.0,\"attempt\":2,\"job\":\"J000003\",\"seq\":12,\"time_us\":1795322894008030}",
  "{\"type\":\"event\",\"event\":\"resumed\",\"from_step\":null,\"instance_type\":\"fake.small\",\"zone\":\"fake-1a\",\"after_s\":0.045988,\"job\":\"J000003\",\"seq\":13,\"time_us\":1795322894049247}",
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"starting\",\"reason\":\"assigned to a worker\",\"job\":\"J000003\",\"seq\":14,\"time_us\":1795322894049391}",
  "{\"type\":\"event\",\"event\":\"output\",\"stream\":\"stdout\",\"text\":\"script: echo hi\",\"job\":\"J000003\",\"seq\":15,\"time_us\":1795322894049773}",
  "{\"type\":\"event\",\"event\":\"output\",\"stream\":\"stdout\",\"text\":\"line 1 of attempt 2\",\"job\":\"J000003\",\"seq\":16,\"time_us\":1795322894049935}",
  "{\"type\":\"event\",\"event\":\"output\",\"stream\":\"stdout\",\"text\":\"line 2 of attempt 2\",\"job\":\"J000003\",\"seq\":17,\"time_us\":1795322894069892}",
  "{\"type\":\"event\",\"event\":\"cost\",\"cost_usd\":0.00042071000000000003,\"on_demand_usd\":0.0014023666666666667,\"job\":\"J000003\",\"seq\":18,\"time_us\":1795322894070101}",
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"succeeded\",\"reason\":\"done\",\"job\":\"J000003\",\"seq\":19,\"time_us\":1795322894070336}",
};

static const char *const sample_events[] = {
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"queued\",\"reason\":\"submitted\",\"time_us\":1795322894070921,\"job\":\"J000004\",\"seq\":1}",
  "{\"type\":\"event\",\"event\":\"placed\",\"instance\":\"i-e0bf178ca18e\",\"instance_type\":\"fake.small\",\"zone\":\"fake-1a\",\"spot\":true,\"price_usd_per_hour\":0.3,\"on_demand_usd_per_hour\":1.0,\"attempt\":1,\"job\":\"J000004\",\"seq\":2,\"time_us\":1795322894071233}",
  "{\"type\":\"event\",\"event\":\"resumed\",\"from_step\":6,\"instance_type\":\"fake.small\",\"zone\":\"fake-1a\",\"after_s\":null,\"job\":\"J000004\",\"seq\":3,\"time_us\":1795322894071497}",
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"starting\",\"reason\":\"assigned to a worker\",\"job\":\"J000004\",\"seq\":4,\"time_us\":1795322894071615}",
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"running\",\"reason\":\"first metric\",\"job\":\"J000004\",\"seq\":5,\"time_us\":1795322894072267}",
  "{\"type\":\"event\",\"step\":7,\"loss\":0.42857142857142855,\"lr\":0.001,\"event\":\"metric\",\"steps\":0,\"job\":\"J000004\",\"seq\":6,\"time_us\":1795322894072411}",
  "{\"type\":\"event\",\"event\":\"cost\",\"cost_usd\":6.879999999999999e-06,\"on_demand_usd\":2.2933333333333333e-05,\"job\":\"J000004\",\"seq\":7,\"time_us\":1795322894072613}",
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"succeeded\",\"reason\":\"done\",\"job\":\"J000004\",\"seq\":8,\"time_us\":1795322894072816}",
};

static const char *const restart_events[] = {
  "{\"type\":\"event\",\"event\":\"cost\",\"cost_usd\":7.169999999999999e-06,\"on_demand_usd\":2.3899999999999998e-05,\"job\":\"J000005\",\"seq\":7,\"time_us\":1795322894075056}",
  "{\"type\":\"event\",\"event\":\"gateway\",\"action\":\"restarted\",\"job\":\"J000005\",\"seq\":8,\"time_us\":1795322894096233}",
  "{\"type\":\"event\",\"event\":\"cost\",\"cost_usd\":8.435e-06,\"on_demand_usd\":2.8116666666666665e-05,\"job\":\"J000005\",\"seq\":9,\"time_us\":1795322894096545}",
  "{\"type\":\"event\",\"event\":\"cost\",\"cost_usd\":0.0006221399999999999,\"on_demand_usd\":0.0020737999999999998,\"job\":\"J000005\",\"seq\":10,\"time_us\":1795322894219351}",
  "{\"type\":\"event\",\"event\":\"state\",\"state\":\"cancelled\",\"reason\":\"cancelled by user\",\"job\":\"J000005\",\"seq\":11,\"time_us\":1795322894219785}",
};

static void feed_all(struct jk_display *d, const char *const *events, size_t n) {
  for (size_t i = 0; i < n; i++) {
    json_error_t err;
    json_t *e = json_loads(events[i], 0, &err);
    CHECK(e != NULL);
    if (e)
      CHECK_INT(jk_display_event(d, e), 1);
    json_decref(e);
  }
}

/* The timeline block of the text rendering (owned), "" when none. */
static char *timeline_text(const struct jk_display *d) {
  char *text = jk_display_text(d);
  const char *tl = text ? strstr(text, "timeline:\n") : NULL;
  char *r = strdup(tl ? tl + strlen("timeline:\n") : "");
  free(text);
  return r;
}

#define N(a) (sizeof(a) / sizeof *(a))

static void test_timeline_preempted_with_notice(void) {
  struct jk_display *d = jk_display_new("J000001", "train");
  feed_all(d, notice_events, N(notice_events));
  char *tl = timeline_text(d);
  CHECK_STR(tl, "  +0s       queued: submitted\n"
                "  +0s       provisioning: launching an instance\n"
                "  +0s       placed on fake.small in fake-1a, spot at $0.3000/h (i-3154ffa6047f)\n"
                "  +0s       starting: assigned to a worker\n"
                "  +0s       running: first metric\n"
                "  +0s       checkpoint at step 1 (1 so far)\n"
                "  +0s       preemption notice for i-3154ffa6047f: terminate in 120 s; checkpointing now\n"
                "  +0s       checkpoint at step 1 (2 so far)\n"
                "  +0s       preempted at step 1 (notice 120 s) → checkpoint durable at step 1"
                " → resumed on fake.small in fake-1a after 0 s\n"
                "  +0s       provisioning: launching an instance\n"
                "  +0s       placed on fake.small in fake-1a, spot at $0.3000/h (i-e503d6bf6774)\n"
                "  +0s       starting: assigned to a worker\n"
                "  +0s       running: first metric\n"
                "  +0s       checkpoint at step 2 (3 so far)\n"
                "  +0s       succeeded at step 6\n");
  free(tl);
  char *text = jk_display_text(d);
  CHECK(text && strstr(text, "step 6/6") && strstr(text, "attempt 2"));
  free(text);
  char *html = jk_display_html(d);
  CHECK(html && strstr(html, "preempted at step 1 (notice 120 s) → checkpoint durable at step 1 → resumed on"));
  free(html);
  jk_display_free(d);
}

/* The timeline of a rebalance recommendation (leaving: one the job left
 * for), then a preemption (notice: with one). Owned. */
static char *rebalance_timeline(bool leaving, bool notice) {
  struct jk_display *d = jk_display_new("J000007", "train");
  long long t0 = 1795322894000000LL;
  json_t *e = ev("J000007", 1, t0, "notice");
  json_object_update_new(e, json_pack("{s:s, s:s, s:I, s:b}", "action", "rebalance", "instance", "i-1",
                                      "deadline_us", (json_int_t)(t0 + 120000000LL), "leaving", leaving));
  feed(d, e);
  e = ev("J000007", 2, t0 + 5000000LL, "preempted");
  json_object_update_new(e, json_pack("{s:i, s:b}", "step", 10, "notice", notice));
  feed(d, e);
  char *tl = timeline_text(d);
  jk_display_free(d);
  return tl;
}

/* A rebalance recommendation the job went on through, then a preemption
 * without notice: the recommendation's deadline is no notice's. And one
 * its worker left for. */
static void test_timeline_rebalance(void) {
  char *tl = rebalance_timeline(false, false);
  CHECK(strstr(tl, "rebalance recommendation for i-1: it may be reclaimed soon; checkpointing now, "
                   "training goes on\n") != NULL);
  CHECK(strstr(tl, "preempted at step 10 (no notice)") != NULL);
  free(tl);
  tl = rebalance_timeline(true, true);
  CHECK(strstr(tl, "checkpointing now, the job moves\n") != NULL);
  CHECK(strstr(tl, "preempted at step 10 (notice 120 s)") != NULL);
  free(tl);
}

static void test_timeline_killed(void) {
  /* The recorded hard loss, with two more steps run after the last
   * checkpoint (seq 6.1, 6.2 renumbered), so steps are lost. */
  struct jk_display *d = jk_display_new("J000002", "train");
  size_t n = N(kill_events);
  for (size_t i = 0; i < n; i++) {
    json_t *e = json_loads(kill_events[i], 0, NULL);
    long long seq = json_integer_value(json_object_get(e, "seq"));
    if (seq > 6)
      json_object_set_new(e, "seq", json_integer(seq + 2));
    feed(d, e);
    if (seq == 6)
      for (int s = 2; s <= 3; s++) {
        e = ev("J000002", 5 + s, 1795322893794575LL + s * 1000, "metric");
        json_object_set_new(e, "step", json_integer(s));
        json_object_set_new(e, "steps", json_integer(6));
        json_object_set_new(e, "loss", json_real(3.0 / s));
        feed(d, e);
      }
  }
  char *tl = timeline_text(d);
  CHECK_STR(tl, "  +0s       queued: submitted\n"
                "  +0s       placed on fake.small in fake-1a, spot at $0.3000/h (i-e503d6bf6774)\n"
                "  +0s       starting: assigned to a worker\n"
                "  +0s       running: first metric\n"
                "  +0s       checkpoint at step 1 (1 so far)\n"
                "  +0s       preempted at step 3 (no notice) → checkpoint durable at step 1, 2 steps lost"
                " → resumed on fake.small in fake-1a after 0 s\n"
                "  +0s       provisioning: launching an instance\n"
                "  +0s       placed on fake.small in fake-1a, spot at $0.3000/h (i-e6fad6046d7b)\n"
                "  +0s       starting: assigned to a worker\n"
                "  +0s       running: first metric\n"
                "  +0s       checkpoint at step 2 (2 so far)\n"
                "  +0s       checkpoint at step 4 (3 so far)\n"
                "  +0s       succeeded at step 6\n");
  free(tl);
  /* the loss curve holds one run: steps 2 and 3 of the lost attempt are gone */
  size_t np;
  const struct jk_point *p = jk_display_series(d, false, &np);
  CHECK_INT(np, 6);
  CHECK_NEAR(p[1].value, 1.5, 0);
  jk_display_free(d);
}

static void test_timeline_run(void) {
  struct jk_display *d = jk_display_new("J000003", "run");
  feed_all(d, run_events, N(run_events));
  char *tl = timeline_text(d);
  CHECK_STR(tl, "  +0s       queued: submitted\n"
                "  +0s       placed on fake.small in fake-1a, spot at $0.3000/h (i-e6fad6046d7b)\n"
                "  +0s       starting: assigned to a worker\n"
                "  +0s       preemption notice for i-e6fad6046d7b: terminate in 120 s; checkpointing now\n"
                "  +0s       preempted (notice 120 s) → checkpoint folder saved"
                " → resumed on fake.small in fake-1a after 0 s\n"
                "  +0s       provisioning: launching an instance\n"
                "  +0s       placed on fake.small in fake-1a, spot at $0.3000/h (i-e0bf178ca18e)\n"
                "  +0s       starting: assigned to a worker\n"
                "  +0s       succeeded\n");
  free(tl);
  char *text = jk_display_text(d), *html = jk_display_html(d);
  CHECK(text && !strstr(text, "step"));
  CHECK(html && !strstr(html, "<div>step") && strstr(html, "checkpoint folder saved"));
  free(text);
  free(html);
  jk_display_free(d);
}

static void test_timeline_restored(void) {
  struct jk_display *d = jk_display_new("J000004", "sample");
  json_t *sum = json_pack("{s:s, s:s, s:s}", "job", "J000004", "kind", "sample", "model", "m");
  jk_display_summary(d, sum);
  json_decref(sum);
  feed_all(d, sample_events, N(sample_events));
  char *tl = timeline_text(d);
  CHECK_STR(tl, "  +0s       queued: submitted\n"
                "  +0s       placed on fake.small in fake-1a, spot at $0.3000/h (i-e0bf178ca18e)\n"
                "  +0s       restored m from its checkpoint at step 6 on fake.small in fake-1a\n"
                "  +0s       starting: assigned to a worker\n"
                "  +0s       running: first metric\n"
                "  +0s       succeeded\n");
  free(tl);
  jk_display_free(d);
}

/* As the kernel follows a job: the events logged so far first, the attach
 * reply's summary after them; the cell's statement named the model. */
static void test_timeline_restored_before_summary(void) {
  for (int named = 0; named < 2; named++) {
    struct jk_display *d = jk_display_new("J000004", "sample");
    if (named)
      jk_display_set_model(d, "m");
    feed_all(d, sample_events, N(sample_events));
    json_t *sum = json_pack("{s:s, s:s, s:s}", "job", "J000004", "kind", "sample", "model", "m");
    jk_display_summary(d, sum);
    json_decref(sum);
    char *tl = timeline_text(d);
    CHECK(strstr(tl, named ? "restored m from its checkpoint at step 6"
                           : "restored the model from its checkpoint at step 6") != NULL);
    free(tl);
    jk_display_free(d);
  }
}

static void test_timeline_gateway_restart(void) {
  struct jk_display *d = jk_display_new("J000005", "train");
  json_t *e = ev("J000005", 6, 1795322894000000LL, "state");
  json_object_set_new(e, "state", json_string("running"));
  feed(d, e);
  feed_all(d, restart_events, N(restart_events));
  char *tl = timeline_text(d);
  CHECK_STR(tl, "  +0s       running\n"
                "  +0s       gateway restarted; following again from event 8\n"
                "  +0s       cancelled: cancelled by user\n");
  free(tl);
  jk_display_free(d);
}

static void test_timeline_idle(void) {
  /* The session notices of gateway/idle.c, folded into the display of the
   * job the notebook ran last; then the same as job events. */
  struct jk_display *d = jk_display_new("J000001", "train");
  feed_all(d, notice_events, N(notice_events));
  const char *notices[] = {
    "{\"type\":\"notice\",\"session\":\"nb\",\"time_us\":1795322953569372,\"event\":\"idle\","
    "\"what\":\"notebook\",\"action\":\"warning\",\"in_s\":60}",
    "{\"type\":\"notice\",\"session\":\"nb\",\"time_us\":1795323013569372,\"event\":\"idle\","
    "\"what\":\"notebook\",\"action\":\"shutdown\"}",
    "{\"type\":\"notice\",\"session\":\"nb\",\"time_us\":1795323073569372,\"event\":\"budget\","
    "\"text\":\"Budget alert: group ml has spent $8.12 of its $10.00 monthly budget (80%)\"}",
    "{\"type\":\"notice\",\"session\":\"nb\",\"time_us\":1795323013569372,\"event\":\"teleport\"}",
  };
  for (size_t i = 0; i < N(notices); i++) {
    json_t *n = json_loads(notices[i], 0, NULL);
    jk_display_sent(d, 0);
    CHECK_INT(jk_display_notice(d, n), i < 3);
    CHECK(jk_display_dirty(d) == (i < 3));
    json_decref(n);
  }
  char *tl = timeline_text(d);
  const char *tail = tl ? strstr(tl, "  +0s       succeeded at step 6\n") : NULL;
  CHECK_STR(tail, "  +0s       succeeded at step 6\n"
                  "  +1m 00s   idle warning: notebook stops in 60 s unless a cell runs\n"
                  "  +2m 00s   idle shutdown: notebook stopped, its workers shut down (the next job starts new ones)\n"
                  "  +3m 00s   Budget alert: group ml has spent $8.12 of its $10.00 monthly budget (80%)\n");
  free(tl);
  jk_display_free(d);
  d = jk_display_new("J000009", "train");
  json_t *e = ev("J000009", 1, 1000000, "idle");
  json_object_update_new(e, json_pack("{s:s, s:s, s:i}", "what", "worker", "action", "warning", "in_s", 30));
  feed(d, e);
  e = ev("J000009", 2, 31000000, "idle");
  json_object_update_new(e, json_pack("{s:s, s:s}", "what", "worker", "action", "shutdown"));
  feed(d, e);
  tl = timeline_text(d);
  CHECK_STR(tl, "  +0s       idle warning: worker stops in 30 s\n"
                "  +30s      idle shutdown: worker stopped\n");
  free(tl);
  jk_display_free(d);
}

/* The device the job trains on: the CPU and its threads, or the GPUs with
 * their model, memory, precision, and how busy they are; a worker whose
 * GPUs disagree with its type is a warning in the timeline. */
/* A restore that fell back to an older checkpoint: the curve goes back to
 * its step, the step shown too, and the timeline says why. */
static void test_restored(void) {
  struct jk_display *d = jk_display_new("J000041", "train");
  for (int s = 1; s <= 30; s++) {
    json_t *e = ev("J000041", s, 1000000 + s, "metric");
    json_object_set_new(e, "step", json_integer(s));
    json_object_set_new(e, "loss", json_real(3.0));
    feed(d, e);
  }
  json_t *e = ev("J000041", 31, 2000000, "restored");
  json_object_set_new(e, "from_step", json_integer(20));
  json_object_set_new(e, "checkpoint", json_string("J000041/ckpt-00000020.tc"));
  json_object_set_new(e, "passed_over", json_string("J000041/ckpt-00000030.tc: header checksum mismatch"));
  feed(d, e);
  size_t n = 0;
  const struct jk_point *p = jk_display_series(d, false, &n);
  CHECK(n == 20 && p[n - 1].step == 20);
  CHECK_INT(jk_display_step(d), 20);
  char *text = jk_display_text(d);
  CHECK(text && strstr(text, "restored the checkpoint of step 20 instead (J000041/ckpt-00000030.tc: header "
                             "checksum mismatch)"));
  free(text);
  jk_display_free(d);
}

static void test_device(void) {
  struct jk_display *d = jk_display_new("J000031", "train");
  json_t *e = ev("J000031", 1, 1000000, "device");
  json_object_set_new(e, "device", json_string("cpu"));
  json_object_set_new(e, "threads", json_integer(4));
  json_object_set_new(e, "precision", json_string("fp32"));
  feed(d, e);
  char *text = jk_display_text(d), *html = jk_display_html(d);
  CHECK(text && strstr(text, "device: CPU, 4 threads, fp32\n"));
  CHECK(html && strstr(html, "<div class=\"spotlab-device\">device: CPU, 4 threads, fp32</div>"));
  free(text);
  free(html);

  /* on the CPU of an instance whose GPUs spotlab-train cannot use: said, with why */
  e = ev("J000031", 2, 1500000, "device");
  json_object_set_new(e, "device", json_string("cpu"));
  json_object_set_new(e, "threads", json_integer(4));
  json_object_set_new(e, "precision", json_string("fp32"));
  json_object_set_new(e, "gpus_unused", json_integer(1));
  json_object_set_new(e, "gpu_model", json_string("NVIDIA A10G"));
  json_object_set_new(e, "gpus_unusable", json_string("CUDA sees no GPU (driver too old)"));
  feed(d, e);
  text = jk_display_text(d);
  CHECK(text && strstr(text, "device: CPU, 4 threads, fp32; the instance's 1 x NVIDIA A10G cannot be used: "
                             "CUDA sees no GPU (driver too old)\n"));
  free(text);

  /* the next attempt on two GPUs: spotlab-train's device event as the worker completed it */
  e = ev("J000031", 3, 2000000, "device");
  json_object_set_new(e, "device", json_string("cuda:0 (NVIDIA A10G) bf16, rank 0 of 2 nccl"));
  json_object_set_new(e, "world_size", json_integer(2));
  json_object_set_new(e, "gpus", json_integer(2));
  json_object_set_new(e, "gpu_model", json_string("NVIDIA <A10G>"));
  json_object_set_new(e, "memory_mib", json_integer(22731));
  json_object_set_new(e, "precision", json_string("bf16"));
  feed(d, e);
  text = jk_display_text(d);
  CHECK(text && strstr(text, "device: 2 x NVIDIA <A10G> (22.2 GiB each), bf16\n"));
  free(text);
  html = jk_display_html(d);
  CHECK(html && strstr(html, "2 x NVIDIA &lt;A10G&gt; (22.2 GiB each)")); /* escaped */
  free(html);
  /* a GPU sample rides on a step metric */
  e = ev("J000031", 4, 3000000, "metric");
  json_object_set_new(e, "step", json_integer(10));
  json_object_set_new(e, "loss", json_real(2.5));
  json_object_set_new(e, "gpu_util_pct", json_real(87.4));
  json_object_set_new(e, "gpu_mem_used_mib", json_integer(30822));
  json_object_set_new(e, "gpu_mem_total_mib", json_integer(45462));
  feed(d, e);
  text = jk_display_text(d);
  CHECK(text && strstr(text, "device: 2 x NVIDIA <A10G> (22.2 GiB each), bf16; 87% busy, 30.1 of 44.4 GiB\n"));
  free(text);
  /* nonsense from the wire changes nothing */
  e = ev("J000031", 5, 4000000, "metric");
  json_object_set_new(e, "step", json_integer(11));
  json_object_set_new(e, "gpu_util_pct", json_real(250));
  feed(d, e);
  text = jk_display_text(d);
  CHECK(text && strstr(text, "87% busy"));
  free(text);
  /* more ranks than GPUs here (other nodes) */
  e = ev("J000031", 6, 5000000, "device");
  json_object_set_new(e, "device", json_string("cuda:0 (NVIDIA H100) fp32, rank 0 of 16"));
  json_object_set_new(e, "world_size", json_integer(16));
  json_object_set_new(e, "gpus", json_integer(8));
  json_object_set_new(e, "gpu_model", json_string("NVIDIA H100"));
  json_object_set_new(e, "precision", json_string("fp32"));
  feed(d, e);
  text = jk_display_text(d);
  CHECK(text && strstr(text, "device: 8 x NVIDIA H100, 16 ranks in all, fp32\n"));
  CHECK(text && !strstr(text, "busy")); /* the new attempt's GPUs have not been sampled yet */
  free(text);

  e = ev("J000031", 7, 6000000, "warning");
  json_object_set_new(e, "text", json_string("g5.xlarge has 1 x A10G in the catalog, but its worker found no GPU"));
  feed(d, e);
  text = jk_display_text(d);
  CHECK(text && strstr(text, "warning: g5.xlarge has 1 x A10G in the catalog, but its worker found no GPU"));
  free(text);
  jk_display_free(d);

  /* no device event yet: no device line */
  d = jk_display_new("J000032", "train");
  text = jk_display_text(d);
  CHECK(text && !strstr(text, "device:"));
  free(text);
  jk_display_free(d);
}

/* nodes=N: the placed event names the instance count; the price shown is each one's. */
static void test_gang(void) {
  struct jk_display *d = jk_display_new("J000008", "train");
  json_t *e = ev("J000008", 1, 1000, "placed");
  json_object_update_new(e, json_pack("{s:s, s:[s,s], s:i, s:s, s:s, s:b, s:f, s:f, s:i}", "instance",
                                      "i-0123456789ab", "instances", "i-0123456789ab", "i-0123456789ac",
                                      "nodes", 2, "instance_type", "g5.xlarge", "zone", "us-east-1a",
                                      "spot", 1, "price_usd_per_hour", 0.4, "on_demand_usd_per_hour",
                                      1.006, "attempt", 1));
  feed(d, e);
  char *text = jk_display_text(d), *html = jk_display_html(d);
  CHECK(text && strstr(text, "2 × g5.xlarge in us-east-1a, spot $0.4000/h each"));
  CHECK(text && strstr(text, "placed on 2 × g5.xlarge in us-east-1a, spot at $0.4000/h each (rank 0: i-0123456789ab)"));
  CHECK(html && strstr(html, "2 &times; g5.xlarge"));
  free(text);
  free(html);
  jk_display_free(d);
}

static json_t *plan(int seq, long long t_us, const char *mode, const char *text, const char *move) {
  json_t *e = ev("J000009", seq, t_us, "plan");
  json_object_set_new(e, "deadline_us", json_integer(1700000000000000LL + 3600 * 1000000LL));
  json_object_set_new(e, "left_s", json_real(7200));
  json_object_set_new(e, "slack_s", json_real(2400));
  json_object_set_new(e, "time_scale", json_real(2));
  json_object_set_new(e, "mode", json_string(mode));
  json_object_set_new(e, "text", json_string(text));
  json_object_set_new(e, "why", json_string("the policy's reason"));
  if (move)
    json_object_set_new(e, "move", json_string(move));
  return e;
}

/* deadline=: the plan events give one text line, updated with the
 * provider's clock; changes of plan and moves go in the timeline. */
static void test_deadline_plan(void) {
  setenv("TZ", "UTC", 1);
  tzset();
  long long t0 = 1700000000000000LL; /* 22:13:20 UTC */
  struct jk_display *d = jk_display_new("J000009", "train");
  char *text = jk_display_text(d);
  CHECK(strstr(text, "deadline") == NULL); /* none without a plan event */
  free(text);
  json_t *s = ev("J000009", 1, t0, "state");
  json_object_set_new(s, "state", json_string("running"));
  feed(d, s);
  feed(d, plan(2, t0, "spot", "spot on g5.xlarge while slack > 2m, then on-demand", NULL));
  json_t *m = ev("J000009", 3, t0 + 100 * 1000000LL, "metric");
  json_object_set_new(m, "step", json_integer(10));
  feed(d, m);
  text = jk_display_text(d);
  CHECK(strstr(text, "\ndeadline 23:13 (1h 56m left on the provider's clock, x2), slack 40m 00s: spot on "
                     "g5.xlarge while slack > 2m, then on-demand\n") != NULL);
  CHECK(strstr(text, "plan: spot on g5.xlarge while slack > 2m, then on-demand (the policy's reason)") != NULL);
  free(text);
  /* the same plan again adds nothing to the timeline; a move does */
  feed(d, plan(4, t0 + 200 * 1000000LL, "spot", "spot on g5.xlarge while slack > 2m, then on-demand", NULL));
  feed(d, plan(5, t0 + 300 * 1000000LL, "on-demand", "on-demand (back to spot when it is safe)", "to on-demand"));
  text = jk_display_text(d);
  CHECK_INT(count(text, "plan: spot on"), 1);
  CHECK(strstr(text, "moving to on-demand: the policy's reason") != NULL);
  CHECK(strstr(text, "slack 40m 00s: on-demand (back to spot when it is safe)") != NULL);
  free(text);
  char *html = jk_display_html(d);
  CHECK(strstr(html, "<div class=\"spotlab-deadline\">deadline 23:13 (") != NULL);
  free(html);
  s = ev("J000009", 6, t0 + 1000 * 1000000LL, "state");
  json_object_set_new(s, "state", json_string("succeeded"));
  feed(d, s);
  text = jk_display_text(d);
  CHECK(strstr(text, "\ndeadline 23:13: met\n") != NULL);
  free(text);
  jk_display_free(d);
  /* finished after the deadline */
  d = jk_display_new("J000009", "train");
  feed(d, plan(1, t0, "spot", "x", NULL));
  s = ev("J000009", 2, t0 + 4000 * 1000000LL, "state");
  json_object_set_new(s, "state", json_string("succeeded"));
  feed(d, s);
  text = jk_display_text(d);
  CHECK(strstr(text, "\ndeadline 23:13: missed\n") != NULL);
  free(text);
  jk_display_free(d);
}

/* What a front end may do to the HTML: MathJax and Markdown must find no
 * '$', and Notebook's sanitizer for untrusted notebooks drops style
 * attributes, so the bar and the curve must not depend on them. */
static void test_html_front_ends(void) {
  struct jk_display *d = sample_display();
  char *html = jk_display_html(d);
  CHECK(html && !strchr(html, '$'));
  CHECK(html && strstr(html, "spot &#36;0.4000/h (on-demand &#36;1.0060/h)"));
  CHECK(html && strstr(html, "cost &#36;0.0200"));
  CHECK(html && strstr(html, "class=\"spotlab-job tex2jax_ignore mathjax_ignore\""));
  CHECK(html && strstr(html, "<code>%attach J000007</code>"));
  /* without its style attributes the bar and the curve are still there */
  char *bare = html ? strdup(html) : NULL;
  for (char *p; bare && (p = strstr(bare, " style=\""));) {
    char *end = strchr(p + 8, '"');
    memmove(p, end + 1, strlen(end + 1) + 1);
  }
  CHECK(bare && strstr(bare, "<progress class=\"spotlab-bar\" max=\"100\" value=\"66.7\">67%</progress>"));
  CHECK(bare && strstr(bare, "<img class=\"spotlab-curve\" width=\"480\" height=\"240\""));
  free(bare);
  free(html);
  json_t *e = ev("J000007", 9000, 1000400000000, "state");
  json_object_set_new(e, "state", json_string("succeeded"));
  feed(d, e);
  html = jk_display_html(d);
  CHECK(html && !strstr(html, "%attach")); /* nothing left to follow */
  free(html);
  CHECK(jk_html_no_math(NULL) == NULL);
  char *t = jk_html_no_math(strdup("$1 and $2$"));
  CHECK_STR(t, "&#36;1 and &#36;2&#36;");
  free(t);
  jk_display_free(d);
}

int main(void) {
  test_html_front_ends();
  test_escape();
  test_deadline_plan();
  test_gang();
  test_downsample();
  test_fold_and_text();
  test_resume_cuts_curve();
  test_html_svg();
  test_vegalite();
  test_throttle();
  test_hostile();
  test_text_from_the_gateway();
  test_timeline_preempted_with_notice();
  test_timeline_rebalance();
  test_timeline_killed();
  test_timeline_run();
  test_timeline_restored();
  test_timeline_restored_before_summary();
  test_timeline_gateway_restart();
  test_timeline_idle();
  test_device();
  test_restored();
  TEST_MAIN_END();
}
