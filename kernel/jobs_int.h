/* Shared by the files of the statements through the gateway: jobs.c (job
 * statements, following a job, the replies, interrupt and time),
 * jobs_magics.c (the gateway magics, show of a model, and their replies)
 * and upload.c (a job's data file sent before the gateway takes the job).
 * Nothing else includes this header. */
#ifndef JK_JOBS_INT_H
#define JK_JOBS_INT_H

#include "interp_int.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* OP_DATA: data.have and data.put (upload.c). */
enum op { OP_NONE, OP_SUBMIT, OP_CATCHUP, OP_ATTACH, OP_QUERY, OP_SHOW, OP_SESSION, OP_GATEWAY, OP_DATA };

struct jk_follow {
  char kind[16];           /* train, eval, sample, run; "" for %attach until known */
  char model[64];
  char query[16];          /* OP_QUERY: the magic */
  bool all;                /* %jobs --all, %cost --all: every job of the user */
  json_t *first;           /* %cost: the cost reply, while the jobs list is asked for */
  bool detach;
  struct jk_display *display;
  json_t *submit;          /* the submit (or rerun) request as sent, for one after an upload */
  struct jk_upload *upload; /* the data file being uploaded for the submit, or NULL */
  int64_t ping_id, ping_sent_us;
  bool told_lost;          /* the cell said the gateway is gone; said again only after it came back */
  bool catching_up;        /* reading history (logs pages, then attach); live events wait */
  bool resyncing;          /* the catch-up follows a reconnect or a gap: failures are retried */
  bool resync_due;         /* retry the catch-up at the next ping */
  char *collected;         /* sample: stdout output, in case no result text comes */
  size_t collected_len;
  char *result_text;       /* sample: the result event's text */
  char last_stderr[256];
  /* terminals: the last progress line written */
  int line_tenth;
  int64_t line_us;
  char line_state[24];
};

/* ---- jobs.c, for jobs_magics.c ---- */
/* A new follow for the running statement (the one it had is let go); NULL
 * when out of memory. */
struct jk_follow *jk_jobs_follow_new(struct jk_interp *ip);
/* Sends req (taken) for the running statement and waits for its reply. The
 * first OP_SUBMIT request of a follow is kept (submit) for after an upload. */
enum jk_step jk_jobs_await(struct jk_interp *ip, json_t *req, enum op op, unsigned flags);
/* As jk_jobs_await, with len bytes of data (copied) as the request's second frame. */
enum jk_step jk_jobs_await_data(struct jk_interp *ip, json_t *req, const void *data, size_t len, enum op op,
                                unsigned flags);
/* Follows job: its history in pages, then the attach. */
enum jk_step jk_jobs_start_follow(struct jk_interp *ip, const char *job);

/* ---- jobs_magics.c, for jobs.c's replies ---- */
enum jk_step jk_jobs_on_query(struct jk_interp *ip, const json_t *reply);
/* reply NULL: the gateway could not say. */
enum jk_step jk_jobs_on_show(struct jk_interp *ip, const json_t *reply);
enum jk_step jk_jobs_on_session(struct jk_interp *ip, const json_t *reply, const char *error);

#endif
