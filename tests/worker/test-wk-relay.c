/* Metric coalescing, output line limits and text sanitising. */
#include "harness.h"

#include "relay.h"

static json_t *step(int n) { return json_pack("{s:i, s:f}", "step", n, "loss", 1.0); }

static int step_of(json_t *m) { return m ? (int)json_integer_value(json_object_get(m, "step")) : -1; }

static void test_metrics(void) {
  struct wk_relay *r;
  CHECK_INT(wk_relay_new(2, 3, &r), 0);
  int64_t t = 1000000;
  json_t *m;
  CHECK_INT(step_of(m = wk_relay_metric(r, step(1), false, t)), 1);
  json_decref(m);
  CHECK_INT(step_of(m = wk_relay_metric(r, step(2), false, t)), 2);
  json_decref(m);
  CHECK(wk_relay_metric(r, step(3), false, t) == NULL); /* over the rate: kept */
  CHECK(wk_relay_metric(r, step(4), false, t) == NULL); /* replaces 3 */
  CHECK(wk_relay_pending(r, t, false) == NULL);         /* no token yet */
  CHECK_INT(step_of(m = wk_relay_pending(r, t + 500000, false)), 4);
  json_decref(m);
  CHECK(wk_relay_pending(r, t + 500000, false) == NULL);
  /* an evaluation passes at once and supersedes the pending step */
  CHECK(wk_relay_metric(r, step(5), false, t + 500000) == NULL);
  json_t *ev = json_pack("{s:i, s:f}", "step", 6, "eval_loss", 2.0);
  CHECK(wk_relay_metric(r, ev, true, t + 500000) == ev);
  json_decref(ev);
  CHECK(wk_relay_pending(r, t + 5000000, true) == NULL);
  /* an event leaves the pending step in place */
  CHECK(wk_relay_metric(r, step(7), false, t + 500001) == NULL);
  json_t *e = json_pack("{s:s}", "event", "resume");
  CHECK(wk_relay_metric(r, e, true, t + 500001) == e);
  json_decref(e);
  CHECK_INT(step_of(m = wk_relay_pending(r, t + 500001, true)), 7);
  json_decref(m);
  wk_relay_free(r);
}

static void test_lines(void) {
  struct wk_relay *r;
  CHECK_INT(wk_relay_new(2, 3, &r), 0);
  int ok = 0;
  for (int i = 0; i < 10; i++) ok += wk_relay_line(r, 1000000);
  CHECK_INT(ok, 3);
  CHECK_INT(wk_relay_take_dropped(r), 7);
  CHECK_INT(wk_relay_take_dropped(r), 0);
  CHECK(wk_relay_line(r, 2000000));
  wk_relay_free(r);
}

static void test_text(void) {
  json_t *v = wk_relay_text("ab\xff\xc3" "-cd", 7, 100);
  CHECK_STR(json_string_value(v), "ab?" "?-cd");
  json_decref(v);
  v = wk_relay_text("h\xc3\xa9llo", 6, 2); /* a cut never splits é */
  CHECK_STR(json_string_value(v), "h");
  json_decref(v);
  v = wk_relay_text("h\xc3\xa9llo", 6, 3);
  CHECK_STR(json_string_value(v), "h\xc3\xa9");
  json_decref(v);
}

/* The step metrics sent last are kept to be sent again, newest
 * WK_RELAY_RESEND_MAX, and every one after the step last confirmed. */
static void test_resend(void) {
  struct wk_relay *r;
  CHECK_INT(wk_relay_new(2, 3, &r), 0);
  json_t *got[WK_RELAY_RESEND_MAX];
  CHECK_INT((int)wk_relay_since(r, -1, got, WK_RELAY_RESEND_MAX), 0);
  json_t *ev = json_pack("{s:s, s:i, s:f}", "event", "done", "step", 3, "loss", 1.0);
  wk_relay_sent(r, ev); /* an event is not kept */
  json_decref(ev);
  CHECK_INT(wk_relay_last_step(r), -1);
  wk_relay_confirm(r, 10); /* the gateway saved up to step 10 */
  for (int i = 1; i <= WK_RELAY_RESEND_MAX + 10; i++) {
    json_t *m = step(i);
    wk_relay_sent(r, m);
    json_decref(m);
  }
  size_t n = wk_relay_since(r, -1, got, WK_RELAY_RESEND_MAX);
  CHECK_INT((int)n, WK_RELAY_RESEND_MAX);
  CHECK_INT(step_of(got[0]), 11);
  CHECK_INT(step_of(got[n - 1]), WK_RELAY_RESEND_MAX + 10);
  for (size_t i = 0; i < n; i++)
    json_decref(got[i]);
  /* full of steps not confirmed: the caller stops reading; kept past the size */
  CHECK(wk_relay_full(r));
  json_t *more = step(WK_RELAY_RESEND_MAX + 11);
  wk_relay_sent(r, more);
  json_decref(more);
  json_t *first;
  CHECK_INT((int)wk_relay_since(r, -1, &first, 1), 1);
  CHECK_INT(step_of(first), 11);
  json_decref(first);
  CHECK_INT(wk_relay_last_step(r), WK_RELAY_RESEND_MAX + 11);
  wk_relay_confirm(r, 100);
  CHECK(!wk_relay_full(r));
  n = wk_relay_since(r, WK_RELAY_RESEND_MAX + 7, got, 2);
  CHECK_INT((int)n, 2);
  CHECK_INT(step_of(got[0]), WK_RELAY_RESEND_MAX + 8);
  CHECK_INT(step_of(got[1]), WK_RELAY_RESEND_MAX + 9);
  for (size_t i = 0; i < n; i++)
    json_decref(got[i]);
  CHECK_INT((int)wk_relay_since(r, WK_RELAY_RESEND_MAX + 11, got, 2), 0);
  wk_relay_free(r);
}

int main(void) {
  test_metrics();
  test_resend();
  test_lines();
  test_text();
  TEST_MAIN_END();
}
