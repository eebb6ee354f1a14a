/* Flow control for what a job sends: metric messages coalesced to a rate
 * (the latest step always wins; urgent ones — evaluations, events — pass at
 * once), output lines limited to a rate with the rest counted, and text made
 * safe for JSON. Pure logic over a clock the caller passes in. */
#ifndef WK_RELAY_H
#define WK_RELAY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WK_OUTPUT_LINE_MAX 4096
#define WK_RELAY_RESEND_MAX 2048 /* step metrics kept to send again */

struct wk_relay;

int wk_relay_new(int64_t metrics_per_s, int64_t lines_per_s, struct wk_relay **ret);
struct wk_relay *wk_relay_free(struct wk_relay *r);

/* Offers a metric object (taken). Returns what to send now, owned by the
 * caller: data itself, or NULL when it was kept as the pending latest. An
 * urgent metric is always returned and drops an older pending one. */
json_t *wk_relay_metric(struct wk_relay *r, json_t *data, bool urgent, int64_t now_us);
/* The pending metric when the rate allows (or force), else NULL. Owned. */
json_t *wk_relay_pending(struct wk_relay *r, int64_t now_us, bool force);
/* Keeps a reference to data (borrowed) when it is a step metric a gateway
 * records (an integer "step", a number "loss" or "eval_loss", no "event"):
 * the newest WK_RELAY_RESEND_MAX sent are kept, and every one after the
 * step last confirmed (wk_relay_confirm). */
void wk_relay_sent(struct wk_relay *r, json_t *data);
/* The gateway has saved the step metrics up to step (its "recorded" or
 * "registered" says so): kept ones up to there may be pushed out. */
void wk_relay_confirm(struct wk_relay *r, int64_t step);
/* Whether keeping another step metric would push out one the gateway has
 * not said it saved: the caller waits instead. */
bool wk_relay_full(const struct wk_relay *r);
/* The step of the newest kept step metric, -1 when none. */
int64_t wk_relay_last_step(const struct wk_relay *r);
/* The kept step metrics after step, oldest first, into ret (new references,
 * at most max); returns how many. */
size_t wk_relay_since(struct wk_relay *r, int64_t step, json_t **ret, size_t max);
/* Whether an output line may go out now; if not it is counted as dropped. */
bool wk_relay_line(struct wk_relay *r, int64_t now_us);
/* Lines dropped since the last call. */
uint64_t wk_relay_take_dropped(struct wk_relay *r);

/* A JSON string of at most max bytes of s (cut on a character boundary);
 * bytes that are not UTF-8 become '?'. NULL only on OOM. */
json_t *wk_relay_text(const char *s, size_t len, size_t max);

#endif
