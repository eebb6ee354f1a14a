/* Rate limits for job output.
 *
 * Two token buckets refilled continuously, each holding at most one second
 * of its rate. Metrics never queue: at most one pending (the newest) exists,
 * so a slow gateway sees fewer steps but always the latest one. The step
 * metrics sent last are kept in a ring, so that those a gateway never
 * recorded (in flight when it died) can be sent again: the newest
 * WK_RELAY_RESEND_MAX, and beyond them every one the gateway has not said it
 * saved (the ring grows past its size only by what one read of the child's
 * metrics brought; the caller stops reading while wk_relay_full). */
#include "relay.h"

#include "sl_json.h"
#include "sl_time.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct bucket {
  double tokens, rate;
  int64_t last_us;
};

struct wk_relay {
  struct bucket metrics, lines;
  json_t *pending;
  uint64_t dropped;
  json_t **sent; /* ring of step metrics sent, oldest at head */
  size_t sent_head, sent_n, sent_cap;
  int64_t confirmed; /* the gateway saved the step metrics up to here; -1: none known */
};

static void refill(struct bucket *b, int64_t now) {
  if (b->last_us && now > b->last_us) {
    b->tokens += b->rate * (double)(now - b->last_us) / 1e6;
    if (b->tokens > b->rate) b->tokens = b->rate;
  }
  b->last_us = now;
}

static bool take(struct bucket *b, int64_t now) {
  refill(b, now);
  if (b->tokens < 1) return false;
  b->tokens -= 1;
  return true;
}

int wk_relay_new(int64_t metrics_per_s, int64_t lines_per_s, struct wk_relay **ret) {
  struct wk_relay *r = calloc(1, sizeof *r);
  if (!r) return -ENOMEM;
  r->metrics = (struct bucket){(double)metrics_per_s, (double)metrics_per_s, 0};
  r->lines = (struct bucket){(double)lines_per_s, (double)lines_per_s, 0};
  r->confirmed = -1;
  *ret = r;
  return 0;
}

struct wk_relay *wk_relay_free(struct wk_relay *r) {
  if (r) {
    json_decref(r->pending);
    for (size_t i = 0; i < r->sent_n; i++)
      json_decref(r->sent[(r->sent_head + i) % r->sent_cap]);
    free(r->sent);
    free(r);
  }
  return NULL;
}

json_t *wk_relay_metric(struct wk_relay *r, json_t *data, bool urgent, int64_t now_us) {
  if (urgent) {
    /* An urgent step supersedes older pending steps; an event leaves them. */
    if (r->pending && json_object_get(data, "step") && !json_object_get(data, "event")) {
      json_decref(r->pending);
      r->pending = NULL;
    }
    take(&r->metrics, now_us);
    return data;
  }
  if (!r->pending && take(&r->metrics, now_us)) return data;
  json_decref(r->pending);
  r->pending = data;
  return NULL;
}

json_t *wk_relay_pending(struct wk_relay *r, int64_t now_us, bool force) {
  if (!r->pending || (!force && !take(&r->metrics, now_us))) return NULL;
  json_t *p = r->pending;
  r->pending = NULL;
  return p;
}

static int64_t step_at(const struct wk_relay *r, size_t i) {
  return json_integer_value(json_object_get(r->sent[(r->sent_head + i) % r->sent_cap], "step"));
}

void wk_relay_sent(struct wk_relay *r, json_t *data) {
  /* only those a gateway records (a step and a loss): the ones it asks for */
  if (!json_is_integer(json_object_get(data, "step")) || json_object_get(data, "event") ||
      (!json_is_number(json_object_get(data, "loss")) && !json_is_number(json_object_get(data, "eval_loss"))))
    return;
  while (r->sent_n >= WK_RELAY_RESEND_MAX && step_at(r, 0) <= r->confirmed) {
    json_decref(r->sent[r->sent_head]);
    r->sent_head = (r->sent_head + 1) % r->sent_cap;
    r->sent_n--;
  }
  if (r->sent_n == r->sent_cap) { /* grows, oldest first again */
    size_t cap = r->sent_cap ? 2 * r->sent_cap : WK_RELAY_RESEND_MAX;
    json_t **g = malloc(cap * sizeof *g);
    if (!g) return; /* this one is not kept: a resend may miss it */
    for (size_t i = 0; i < r->sent_n; i++) g[i] = r->sent[(r->sent_head + i) % r->sent_cap];
    free(r->sent);
    r->sent = g;
    r->sent_cap = cap;
    r->sent_head = 0;
  }
  r->sent[(r->sent_head + r->sent_n++) % r->sent_cap] = json_incref(data);
}

void wk_relay_confirm(struct wk_relay *r, int64_t step) {
  if (step > r->confirmed) r->confirmed = step;
}

bool wk_relay_full(const struct wk_relay *r) {
  return r->sent_n >= WK_RELAY_RESEND_MAX && step_at(r, 0) > r->confirmed;
}

size_t wk_relay_since(struct wk_relay *r, int64_t step, json_t **ret, size_t max) {
  size_t n = 0;
  for (size_t i = 0; i < r->sent_n && n < max; i++) {
    json_t *d = r->sent[(r->sent_head + i) % r->sent_cap];
    if (json_integer_value(json_object_get(d, "step")) > step) ret[n++] = json_incref(d);
  }
  return n;
}

int64_t wk_relay_last_step(const struct wk_relay *r) {
  if (!r->sent_n) return -1;
  return step_at(r, r->sent_n - 1);
}

bool wk_relay_line(struct wk_relay *r, int64_t now_us) {
  if (take(&r->lines, now_us)) return true;
  r->dropped++;
  return false;
}

uint64_t wk_relay_take_dropped(struct wk_relay *r) {
  uint64_t d = r->dropped;
  r->dropped = 0;
  return d;
}

json_t *wk_relay_text(const char *s, size_t len, size_t max) {
  if (len > max) {
    len = max;
    while (len > 0 && ((unsigned char)s[len] & 0xC0) == 0x80) len--; /* a whole character */
  }
  char *buf = malloc(len + 1);
  if (!buf) return NULL;
  size_t o = 0;
  for (size_t i = 0; i < len;) {
    size_t n = sl_utf8_char(s + i, len - i);
    if (n == 0) {
      buf[o++] = '?';
      i++;
      continue;
    }
    memcpy(buf + o, s + i, n);
    o += n;
    i += n;
  }
  json_t *v = json_stringn(buf, o);
  if (!v) v = json_string("");
  free(buf);
  return v;
}
