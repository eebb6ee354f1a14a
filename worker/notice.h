/* Preemption notices from the instance metadata service.
 *
 * AWS (IMDSv2): PUT /latest/api/token, then GET spot/instance-action (404 = no
 * notice; 200 {"action","time"}) and events/recommendations/rebalance.
 * GCP: GET computeMetadata/v1/instance/preempted ("TRUE"/"FALSE").
 * Request building and reply parsing are pure functions; the watcher runs
 * them on its own thread and reports each new notice through a pipe. */
#ifndef WK_NOTICE_H
#define WK_NOTICE_H

#include <stddef.h>
#include <stdint.h>

#include "sl_http.h"

struct wk_notice {
  char action[16];     /* terminate, stop, hibernate, rebalance, preempted, sigterm */
  int64_t deadline_us; /* wall clock */
};

enum wk_notice_req_kind {
  WK_REQ_AWS_TOKEN,
  WK_REQ_AWS_ACTION,
  WK_REQ_AWS_REBALANCE,
  WK_REQ_GCP_PREEMPTED,
};

/* A metadata request: http points into url and header. */
struct wk_notice_req {
  struct sl_http_req http;
  char url[512];
  char header[320];
};

/* Replies are small; one retry, 50 ms at most after a failed try. */
#define WK_NOTICE_BODY_MAX 16384
#define WK_NOTICE_TRIES 2
#define WK_NOTICE_BACKOFF_MS 50

#define WK_NOTICE_AWS_LEAD_US (120 * INT64_C(1000000))
#define WK_NOTICE_GCP_LEAD_US (30 * INT64_C(1000000))
#define WK_NOTICE_TOKEN_TTL_S 21600

/* Builds the request of kind against base ("http://169.254.169.254"); token is
 * the IMDSv2 token for the AWS GETs. SL_ELIMIT if the URL does not fit. */
int wk_notice_build(enum wk_notice_req_kind kind, const char *base, const char *token,
                    int timeout_ms, struct wk_notice_req *ret);

/* Reply parsers: 1 and *ret filled when the reply is a notice, 0 when it says
 * there is none (GCP "FALSE"), SL_EJSON/SL_ETYPE/SL_ECONFIG when malformed.
 * now_us is the wall clock, used when the reply carries no usable time. */
int wk_notice_parse_aws_action(const char *body, size_t len, int64_t now_us, struct wk_notice *ret);
int wk_notice_parse_aws_rebalance(const char *body, size_t len, int64_t now_us,
                                  struct wk_notice *ret);
int wk_notice_parse_gcp(const char *body, size_t len, int64_t now_us, struct wk_notice *ret);

/* "2026-11-22T10:00:00Z" (optionally with a fraction) to µs since the epoch. */
int wk_notice_parse_time(const char *text, int64_t *ret_us);

struct wk_notice_watcher;

/* Starts a thread polling base every poll_ms; kind "aws" or "gcp". */
int wk_notice_watcher_new(const char *base, const char *kind, int64_t poll_ms,
                          struct wk_notice_watcher **ret);
struct wk_notice_watcher *wk_notice_watcher_free(struct wk_notice_watcher *w);
/* Readable when a notice is waiting. */
int wk_notice_watcher_fd(const struct wk_notice_watcher *w);
/* 1 and *ret when a notice was waiting, 0 when none. */
int wk_notice_watcher_take(struct wk_notice_watcher *w, struct wk_notice *ret);

#endif
