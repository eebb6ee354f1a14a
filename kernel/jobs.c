/* Statements that run through the gateway: train, eval, sample, %%run,
 * show of a model, and the gateway magics (%status, %jobs, %attach, %cancel,
 * %logs, %show, %rerun, %instances, %cost, %idle, %gateway, %session).
 *
 * Each such statement sends one request and leaves the execution pending
 * (JK_WAIT_GATEWAY) until its reply. A job statement then follows the job
 * (JK_WAIT_JOB): it reads the job's history in pages (logs), attaches from
 * the last event read, and folds every event, in seq order and once, into
 * the job's display, which goes out as display_data and then throttled
 * update_display_data with the display id "spotlab-JOB"; a gap in seq (an
 * event lost on the way) makes it read back from the last event shown. The
 * statement ends when the job does. An
 * interrupt while following detaches (the job keeps running) and ends the
 * cell with an `Interrupted` error naming the job, which is what Jupyter
 * front ends expect from an interrupted cell. While following, a ping every
 * PING_EVERY_US keeps the notebook active and notices a restarted gateway,
 * after which the client says hello again and the job is read and attached
 * again from the last event seen. Every cell also pings a connected gateway
 * when it starts, so any cell keeps the notebook active. The display of the
 * last job shown outlives its cell: session notices that come between cells
 * (idle warning, shutdown) go into its timeline and update it in place.
 *
 * Front ends (docs/notebook.md "Front ends"): a terminal console ignores
 * update_display_data, so a cell run from one also gets the progress as
 * stdout lines (at each tenth of the steps, a change of state, or every
 * LINE_EVERY_US) and the final state as text when the job ends. A cell from
 * another front end (another client session) never waits behind a cell
 * that only follows a job: the follow ends without detaching from the job,
 * whose display then keeps updating in place between cells.
 *
 * A submit whose reply asks for the job's data file first (a gateway whose
 * workers cannot read it) uploads it (upload.c) and submits again.
 *
 * The magics' requests and the text of their replies live in jobs_magics.c
 * (jobs_int.h between the two); their replies come back through
 * jk_jobs_reply here. */
#include "jobs_int.h"
#include "upload.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#define PING_EVERY_US (5 * SL_US_PER_S)
#define LINE_EVERY_US (10 * SL_US_PER_S) /* terminals: a progress line at least this often */
#define MAX_COLLECT_BYTES (1u << 20)

/* ---- plumbing ----------------------------------------------------------- */

static const char *stmt_kind(const struct jk_stmt *s);

struct jk_follow *jk_jobs_follow_new(struct jk_interp *ip) {
  jk_jobs_free_follow(ip);
  struct jk_follow *f = calloc(1, sizeof *f);
  ip->running->follow = f;
  return f;
}

void jk_jobs_free_follow(struct jk_interp *ip) {
  if (!ip->running || !ip->running->follow)
    return;
  struct jk_follow *f = ip->running->follow;
  if (f->ping_id && ip->gw)
    jk_gw_forget(ip->gw, f->ping_id);
  if (f->display && jk_display_shown(f->display) && !ip->running->silent) {
    /* kept: notices between cells go into its timeline (jk_jobs_notice) */
    if (ip->last_attached && ip->gw && strcmp(jk_display_job(ip->last_display), jk_display_job(f->display)) != 0) {
      int64_t id = jk_gw_request(ip->gw, json_pack("{s:s, s:s}", "type", "detach", "job",
                                                   jk_display_job(ip->last_display)), 0);
      if (id > 0)
        jk_gw_forget(ip->gw, id);
    }
    ip->last_attached = false;
    jk_display_free(ip->last_display);
    ip->last_display = f->display;
  } else {
    jk_display_free(f->display);
  }
  free(f->collected);
  free(f->result_text);
  json_decref(f->first);
  json_decref(f->submit);
  jk_upload_free(f->upload);
  free(f);
  ip->running->follow = NULL;
}

/* Sends req for the running statement and waits for its reply. A job's
 * first submit is kept, to go again once its data file is uploaded. */
enum jk_step jk_jobs_await(struct jk_interp *ip, json_t *req, enum op op, unsigned flags) {
  return jk_jobs_await_data(ip, req, NULL, 0, op, flags);
}

enum jk_step jk_jobs_await_data(struct jk_interp *ip, json_t *req, const void *data, size_t len, enum op op,
                                unsigned flags) {
  struct jk_follow *f = ip->running->follow;
  if (op == OP_SUBMIT && f && !f->submit && req && !(f->submit = json_deep_copy(req))) {
    json_decref(req);
    return jk_exec_fail(ip, "MemoryError", "out of memory");
  }
  int64_t id = data ? jk_gw_request_data(ip->gw, req, data, len, flags) : jk_gw_request(ip->gw, req, flags);
  if (id < 0)
    return jk_exec_fail(ip, "GatewayError", "cannot send to the gateway: %s", sl_strerror((int)id));
  ip->running->gw_req = id;
  ip->running->gw_op = op;
  ip->running->wait = op == OP_ATTACH || op == OP_CATCHUP ? JK_WAIT_JOB : JK_WAIT_GATEWAY;
  return JK_STEP_WAIT;
}

/* "train", "%jobs", "%%run": what the running statement is, for messages. */
static void stmt_word(const struct jk_interp *ip, char *buf, size_t size) {
  const struct jk_execution *x = ip->running;
  const struct jk_stmt *s = x->pc < x->cell->n ? &x->cell->stmts[x->pc] : NULL;
  const struct jk_command *cmd = s ? jk_lang_command(s->cmd) : NULL;
  snprintf(buf, size, "%s", cmd ? cmd->word : "this statement");
}

static enum jk_step unreachable(struct jk_interp *ip, const char *why) {
  char what[80];
  stmt_word(ip, what, sizeof what);
  return jk_exec_fail(ip, "GatewayUnavailable", "%s needs the spotlab gateway at %s, which cannot be reached: %s",
                      what, jk_gw_address(ip->gw), why);
}

/* Terminals: one stdout line when the state changes, a tenth of the steps
 * is passed, or LINE_EVERY_US went by with progress. */
static void progress_line(struct jk_interp *ip, int64_t now) {
  struct jk_follow *f = ip->running->follow;
  struct jk_display *d = f->display;
  const char *state = jk_display_state(d);
  double frac = jk_display_fraction(d);
  int tenth = frac >= 0 ? (int)(frac * 10) : -1;
  bool changed = strcmp(state, f->line_state) != 0;
  if (!changed && tenth <= f->line_tenth && now - f->line_us < LINE_EVERY_US)
    return;
  if (!changed && jk_display_finished(d))
    return;
  char *line = jk_display_line(d, 0);
  if (line) {
    size_t n = strlen(line);
    char *nl = malloc(n + 2);
    if (nl) {
      memcpy(nl, line, n);
      memcpy(nl + n, "\n", 2);
      jk_exec_stream(ip, "stdout", nl);
      free(nl);
    }
  }
  free(line);
  snprintf(f->line_state, sizeof f->line_state, "%s", state);
  f->line_tenth = tenth > f->line_tenth ? tenth : f->line_tenth;
  f->line_us = now;
}

static void publish_display(struct jk_interp *ip, bool force) {
  struct jk_follow *f = ip->running->follow;
  struct jk_display *d = f ? f->display : NULL;
  int64_t now = sl_time_mono_us();
  if (d && ip->running->terminal && !ip->running->silent && jk_display_shown(d) &&
      (!jk_display_finished(d) || force) && (force || jk_display_due(d, now)))
    progress_line(ip, now);
  if (!d || !jk_display_dirty(d) || (!force && !jk_display_due(d, now)))
    return;
  json_t *bundle = jk_display_bundle(d);
  if (bundle)
    ip->pub->display(ip->pub_ud, JK_PUB_RUNNING, bundle, jk_display_id(d), jk_display_shown(d));
  jk_display_sent(d, now);
}

/* ---- job statements ----------------------------------------------------- */

static enum jk_step need_def(struct jk_interp *ip, const struct jk_stmt *s, const char *name, const char *kind) {
  struct jk_def d;
  if (jk_state_def(ip->state, name, &d) == 0 && strcmp(d.kind, kind) == 0)
    return JK_STEP_DONE;
  return jk_exec_fail(ip, "NameError", "line %d: %s '%s' is not defined (define it with `%s %s = %s`)", s->line, kind,
                      name, kind, name, strcmp(kind, "model") == 0 ? "gpt(...)" : "text(\"PATH\")");
}

static const char *stmt_kind(const struct jk_stmt *s) {
  switch (s->kind) {
  case JK_STMT_TRAIN: return "train";
  case JK_STMT_EVAL: return "eval";
  case JK_STMT_SAMPLE: return "sample";
  default: return "run";
  }
}

enum jk_step jk_stmt_job(struct jk_interp *ip, const struct jk_stmt *s) {
  const char *kind = stmt_kind(s);
  bool is_run = s->kind == JK_STMT_CELL_MAGIC;
  if (!is_run && need_def(ip, s, s->model, "model") != JK_STEP_DONE)
    return JK_STEP_ERROR;
  if ((s->kind == JK_STMT_TRAIN || s->kind == JK_STMT_EVAL) && need_def(ip, s, s->data, "data") != JK_STEP_DONE)
    return JK_STEP_ERROR;
  json_t *opts = json_object();
  if (jk_exec_eval_options(ip, s->opts, s->n_opts, opts) != JK_STEP_DONE) {
    json_decref(opts);
    return JK_STEP_ERROR;
  }
  if (s->kind == JK_STMT_SAMPLE && !s->expr) /* no prompt: from the text's start */
    json_object_set_new(opts, "prompt", json_string(""));
  if (s->kind == JK_STMT_SAMPLE && s->expr) {
    struct jk_value v = {0};
    char err[512];
    if (jk_eval(s->expr, jk_state_lookup, ip->state, &v, err, sizeof err) < 0) {
      json_decref(opts);
      return jk_exec_fail(ip, "NameError", "%s", err);
    }
    char *prompt = jk_value_to_text(&v);
    jk_value_done(&v);
    json_object_set_new(opts, "prompt", json_string(prompt ? prompt : ""));
    free(prompt);
  }
  struct jk_follow *f = jk_jobs_follow_new(ip);
  if (!f) {
    json_decref(opts);
    return jk_exec_fail(ip, "MemoryError", "out of memory");
  }
  snprintf(f->kind, sizeof f->kind, "%s", kind);
  snprintf(f->model, sizeof f->model, "%s", s->model ? s->model : "");
  f->detach = json_is_true(json_object_get(opts, "detach")); /* yes or no: checked when evaluated */
  json_object_del(opts, "detach");
  /* Definitions reach the gateway before the job that uses them. */
  jk_session_flush(ip->session);
  json_t *req = json_pack("{s:s, s:s, s:o}", "type", "submit", "kind", kind, "options", opts);
  if (s->model)
    json_object_set_new(req, "model", json_string(s->model));
  if (s->data)
    json_object_set_new(req, "data", json_string(s->data));
  if (is_run)
    json_object_set_new(req, "script", json_string(s->body ? s->body : ""));
  return jk_jobs_await(ip, req, OP_SUBMIT, JK_GW_SPAWN);
}

#define CATCHUP_PAGE 500 /* events per logs page */

/* Following a job starts (and restarts, after a reconnect or a gap in seq)
 * by reading its history with logs requests, one bounded page per reply,
 * and only then attaching from the last event read, so a long job's history
 * arrives in bounded pages, each taken in before the next is asked for.
 * Live events that come meanwhile are left to the attach, which replays
 * them in order. */
static int64_t request_page(struct jk_interp *ip) {
  struct jk_follow *f = ip->running->follow;
  return jk_gw_request(ip->gw, json_pack("{s:s, s:s, s:I, s:i}", "type", "logs", "job", jk_display_job(f->display),
                                        "after", (json_int_t)jk_display_last_seq(f->display), "limit",
                                        CATCHUP_PAGE),
                       f->resyncing ? 0 : JK_GW_SPAWN);
}

/* Starts catching up again from the last event shown (no statement step). */
static void resync(struct jk_interp *ip) {
  struct jk_execution *x = ip->running;
  struct jk_follow *f = x->follow;
  if (x->gw_req)
    jk_gw_forget(ip->gw, x->gw_req);
  x->gw_req = 0;
  f->catching_up = f->resyncing = true;
  f->resync_due = false;
  int64_t id = request_page(ip);
  if (id > 0) {
    x->gw_req = id;
    x->gw_op = OP_CATCHUP;
  } else {
    f->catching_up = false;
  }
}

enum jk_step jk_jobs_start_follow(struct jk_interp *ip, const char *job) {
  struct jk_follow *f = ip->running->follow;
  f->display = jk_display_new(job, f->kind);
  if (!f->display)
    return jk_exec_fail(ip, "MemoryError", "out of memory");
  if (f->model[0]) /* the logged events come before the summary that names it */
    jk_display_set_model(f->display, f->model);
  ip->ping_at_us = sl_time_mono_us() + PING_EVERY_US;
  f->catching_up = true;
  f->resyncing = false;
  f->line_tenth = -1;
  if (ip->running->terminal && !ip->running->silent) {
    char *t = NULL;
    if (asprintf(&t, "following %s; Ctrl-C detaches (the job keeps running; %%attach %s follows it again)\n",
                 job, job) >= 0)
      jk_exec_stream(ip, "stdout", t);
    free(t);
  }
  int64_t id = request_page(ip);
  if (id < 0)
    return jk_exec_fail(ip, "GatewayError", "cannot send to the gateway: %s", sl_strerror((int)id));
  ip->running->gw_req = id;
  ip->running->gw_op = OP_CATCHUP;
  ip->running->wait = JK_WAIT_JOB;
  return JK_STEP_WAIT;
}

/* The followed job ended: the final display, the result, the cell's outcome. */
static enum jk_step job_ended(struct jk_interp *ip) {
  struct jk_follow *f = ip->running->follow;
  struct jk_display *d = f->display;
  publish_display(ip, true);
  if (ip->running->terminal && !ip->running->silent) {
    /* the display's updates never reached this front end: its final state as text */
    char *t = jk_display_text(d);
    if (t)
      jk_exec_stream(ip, "stdout", t);
    free(t);
  }
  const char *state = jk_display_state(d), *job = jk_display_job(d), *reason = jk_display_reason(d);
  if (strcmp(state, "succeeded") != 0) {
    const char *why = *reason ? reason : f->last_stderr[0] ? f->last_stderr : "no reason given";
    if (strcmp(state, "cancelled") == 0)
      return jk_exec_fail(ip, "JobCancelled", "job %s was cancelled: %s", job, why);
    return jk_exec_fail(ip, "JobFailed", "job %s failed: %s", job, why);
  }
  if (strcmp(f->kind, "train") == 0 && f->model[0])
    jk_session_trained(ip->session, f->model, jk_display_job(d), jk_display_step(d));
  char *text = NULL;
  double loss;
  if (strcmp(f->kind, "eval") == 0 && jk_display_eval_result(d, &loss)) {
    if (asprintf(&text, "eval loss %.4f (%s)\n", loss, job) < 0)
      text = NULL;
  } else if (strcmp(f->kind, "sample") == 0) {
    const char *t = f->result_text ? f->result_text : f->collected ? f->collected : "";
    size_t n = strlen(t);
    if (asprintf(&text, "%s%s", t, n && t[n - 1] == '\n' ? "" : "\n") < 0)
      text = NULL;
  }
  if (text)
    jk_exec_stream(ip, "stdout", text);
  free(text);
  return JK_STEP_DONE;
}

static void collect(struct jk_follow *f, const char *text) {
  size_t n = strlen(text);
  if (f->collected_len + n + 1 > MAX_COLLECT_BYTES)
    return;
  char *grown = realloc(f->collected, f->collected_len + n + 2);
  if (!grown)
    return;
  memcpy(grown + f->collected_len, text, n);
  grown[f->collected_len + n] = '\n'; /* events carry lines without their ends */
  grown[f->collected_len + n + 1] = '\0';
  f->collected = grown;
  f->collected_len += n + 1;
}

/* Folds one event of the followed job into its display and the cell's
 * output; false when it was not new. */
static bool fold_event(struct jk_interp *ip, const json_t *ev) {
  struct jk_follow *f = ip->running->follow;
  if (jk_display_event(f->display, ev) <= 0)
    return false;
  const char *kind = sl_json_get_str(ev, "event", "");
  if (strcmp(kind, "output") == 0) {
    const char *stream = strcmp(sl_json_get_str(ev, "stream", ""), "stderr") == 0 ? "stderr" : "stdout";
    const char *text = sl_json_get_str(ev, "text", "");
    /* a script's output, all of it; of spotlab-train (train, eval, sample),
     * whose results come as events, its stderr: warnings, and the worker's
     * notices ("[spotlab-worker: checkpoint ... not usable ...]") */
    if (strcmp(f->kind, "run") == 0 || strcmp(stream, "stderr") == 0) {
      /* Output events carry one line without its line end. */
      char *line = NULL;
      if (asprintf(&line, "%s\n", text) >= 0) {
        jk_exec_stream(ip, stream, line);
        free(line);
      }
    }
    else if (strcmp(f->kind, "sample") == 0 && strcmp(stream, "stdout") == 0)
      collect(f, text);
    /* the gateway's line in place of output it left out is not the script's */
    if (strcmp(stream, "stderr") == 0 && *text && !json_object_get(ev, "elided_lines")) {
      size_t n = strcspn(text, "\n");
      snprintf(f->last_stderr, sizeof f->last_stderr, "%.*s", (int)(n < 255 ? n : 255), text);
    }
  } else if (strcmp(kind, "result") == 0 && json_is_string(json_object_get(ev, "text"))) {
    free(f->result_text);
    f->result_text = strdup(sl_json_get_str(ev, "text", ""));
  }
  return true;
}

/* Publishes the display kept between cells when it is due (or force). */
static void publish_last(struct jk_interp *ip, bool force) {
  struct jk_display *d = ip->last_display;
  int64_t now = sl_time_mono_us();
  if (!d || !jk_display_dirty(d) || (!force && !jk_display_due(d, now)))
    return;
  json_t *bundle = jk_display_bundle(d);
  if (bundle)
    ip->pub->display(ip->pub_ud, JK_PUB_LAST, bundle, jk_display_id(d), true);
  jk_display_sent(d, now);
}

/* An event of the job whose follow ended for another front end's cell. */
static void last_event(struct jk_interp *ip, const json_t *ev) {
  struct jk_display *d = ip->last_display;
  if (!ip->last_attached || !d || strcmp(sl_json_get_str(ev, "job", ""), jk_display_job(d)) != 0)
    return;
  if (jk_display_event(d, ev) <= 0)
    return;
  bool done = jk_display_finished(d);
  if (done)
    ip->last_attached = false;
  publish_last(ip, done);
}

void jk_jobs_event(struct jk_interp *ip, const json_t *ev) {
  struct jk_execution *x = ip->running;
  struct jk_follow *f = x ? x->follow : NULL;
  if (!f || !f->display || strcmp(sl_json_get_str(ev, "job", ""), jk_display_job(f->display)) != 0) {
    last_event(ip, ev);
    return;
  }
  if (x->wait != JK_WAIT_JOB || f->catching_up)
    return;
  if (strcmp(sl_json_get_str(ev, "job", ""), jk_display_job(f->display)) != 0)
    return;
  if (sl_json_get_int(ev, "seq", 0) > jk_display_last_seq(f->display) + 1) {
    /* events were lost on the way (a full socket queue): read them back */
    sl_debug("kernel.gateway", "%s: events after %lld missing; catching up", jk_display_job(f->display),
             (long long)jk_display_last_seq(f->display));
    resync(ip);
    return;
  }
  if (!fold_event(ip, ev))
    return;
  if (jk_display_finished(f->display)) {
    jk_exec_step_ended(ip, job_ended(ip));
    return;
  }
  publish_display(ip, false);
}

/* ---- replies ------------------------------------------------------------ */

static enum jk_step on_submitted(struct jk_interp *ip, const json_t *reply) {
  struct jk_follow *f = ip->running->follow;
  const char *job = sl_json_get_str(reply, "job", "");
  const json_t *upload = json_object_get(reply, "upload");
  if (!*job && json_is_object(upload) && f)
    return jk_upload_start(ip, upload); /* the data file first; then the submit again */
  if (!*job || strlen(job) > 24)
    return jk_exec_fail(ip, "GatewayError", "the gateway accepted the job but sent no usable job id");
  if (f->detach) {
    char *t = NULL;
    if (asprintf(&t, "submitted %s; it runs detached (%%attach %s to follow it, %%jobs to list jobs)\n", job,
                 job) >= 0)
      jk_exec_stream(ip, "stdout", t);
    free(t);
    return JK_STEP_DONE;
  }
  return jk_jobs_start_follow(ip, job);
}

static enum jk_step on_attached(struct jk_interp *ip, const json_t *reply) {
  struct jk_follow *f = ip->running->follow;
  f->catching_up = f->resyncing = false;
  const json_t *job = json_object_get(reply, "job");
  jk_display_summary(f->display, job);
  if (!f->kind[0])
    snprintf(f->kind, sizeof f->kind, "%s", sl_json_get_str(job, "kind", ""));
  if (!f->model[0])
    snprintf(f->model, sizeof f->model, "%s", sl_json_get_str(job, "model", ""));
  ip->running->gw_req = 0;
  ip->running->wait = JK_WAIT_JOB;
  if (jk_display_finished(f->display) && jk_display_last_seq(f->display) >= sl_json_get_int(job, "last_seq", 0))
    return job_ended(ip);
  publish_display(ip, false);
  return JK_STEP_WAIT;
}

/* One page of history: folded in order; then the next page, or the attach. */
static enum jk_step on_catchup(struct jk_interp *ip, const json_t *reply) {
  struct jk_execution *x = ip->running;
  struct jk_follow *f = x->follow;
  const json_t *events = json_object_get(reply, "events");
  if (!f->kind[0]) { /* %attach: the job's kind comes with its events */
    snprintf(f->kind, sizeof f->kind, "%s", sl_json_get_str(reply, "kind", ""));
    jk_display_set_kind(f->display, f->kind);
  }
  size_t i;
  json_t *e;
  json_array_foreach(events, i, e)
    fold_event(ip, e);
  bool more = sl_json_get_bool(reply, "more", false) && json_array_size(events) > 0;
  /* a job's summary (its state) comes with the attach reply: the first
   * display waits for it unless the history is long */
  if (more || f->resyncing)
    publish_display(ip, false);
  int64_t id = more ? request_page(ip)
                    : jk_gw_request(ip->gw, json_pack("{s:s, s:s, s:I}", "type", "attach", "job",
                                                     jk_display_job(f->display), "after",
                                                     (json_int_t)jk_display_last_seq(f->display)),
                                    f->resyncing ? 0 : JK_GW_SPAWN);
  if (id < 0)
    return jk_exec_fail(ip, "GatewayError", "cannot send to the gateway: %s", sl_strerror((int)id));
  x->gw_req = id;
  x->gw_op = more ? OP_CATCHUP : OP_ATTACH;
  return JK_STEP_WAIT;
}

/* %gateway ADDR ended: ADDR is kept when it answered, else the address it
 * replaced is put back and ADDR returned (the caller frees it). NULL when
 * no %gateway was waiting, or ADDR was kept. */
static char *gateway_switch_end(struct jk_interp *ip, bool keep) {
  if (!ip->gateway_switching)
    return NULL;
  ip->gateway_switching = false;
  char *tried = NULL;
  if (!keep) {
    tried = ip->gateway;
    ip->gateway = ip->gateway_before;
    ip->gateway_before = NULL;
    if (jk_gw_set_address(ip->gw, ip->gateway) < 0) /* only on OOM: stays at the new one */
      sl_warn("kernel.gateway", "cannot go back to %s: out of memory", ip->gateway ? ip->gateway : "the default gateway");
  }
  free(ip->gateway_before);
  ip->gateway_before = NULL;
  return tried;
}

/* The answer to %gateway ADDR's ping. A gateway that cannot be reached, or
 * refuses, leaves the kernel on the one it used before. */
static enum jk_step on_gateway(struct jk_interp *ip, const json_t *reply, const char *error) {
  if (error) {
    char *tried = gateway_switch_end(ip, false);
    enum jk_step st = jk_exec_fail(ip, "GatewayUnavailable", "the gateway at %s %s: %s; the kernel keeps using %s",
                                   tried, reply ? "refused" : "cannot be reached", error,
                                   jk_gw_address(ip->gw));
    free(tried);
    return st;
  }
  gateway_switch_end(ip, true);
  char *t = NULL;
  if (asprintf(&t, "connected to %s as %s\n", jk_gw_address(ip->gw), jk_gw_user(ip->gw) ? jk_gw_user(ip->gw) : "?") >= 0)
    jk_exec_stream(ip, "stdout", t);
  free(t);
  return JK_STEP_DONE;
}

void jk_jobs_reply(struct jk_interp *ip, int64_t id, const json_t *reply, const char *error) {
  struct jk_execution *x = ip->running;
  if (!x)
    return;
  if (x->follow && id == x->follow->ping_id) {
    x->follow->ping_id = 0;
    return;
  }
  if (id != x->gw_req && !(x->gw_op == OP_DATA && jk_upload_owns(ip, id)))
    return;
  enum op op = (enum op)x->gw_op;
  x->gw_req = 0;
  if ((op == OP_ATTACH || op == OP_CATCHUP) && x->follow && x->follow->resyncing && error && !reply) {
    /* The gateway went away again before it answered: keep following, and
     * ask again at the next ping (or at once when a hello succeeds). */
    x->follow->catching_up = false;
    x->follow->resync_due = true;
    return;
  }
  enum jk_step st;
  if (op == OP_GATEWAY)
    st = on_gateway(ip, reply, error);
  else if (op == OP_SHOW)
    st = jk_jobs_on_show(ip, error ? NULL : reply);
  else if (op == OP_SESSION)
    st = jk_jobs_on_session(ip, reply, error);
  else if (error && !reply)
    st = unreachable(ip, error);
  else if (op == OP_DATA)
    st = jk_upload_reply(ip, id, reply, error);
  else if (error)
    st = jk_exec_fail(ip, op == OP_SUBMIT ? "SubmitError" : "GatewayError", "%s", error);
  else if (op == OP_SUBMIT)
    st = on_submitted(ip, reply);
  else if (op == OP_CATCHUP)
    st = on_catchup(ip, reply);
  else if (op == OP_ATTACH)
    st = on_attached(ip, reply);
  else
    st = jk_jobs_on_query(ip, reply);
  jk_exec_step_ended(ip, st);
}

void jk_jobs_reattach(struct jk_interp *ip) {
  struct jk_execution *x = ip->running;
  struct jk_follow *f = x ? x->follow : NULL;
  if (f)
    f->told_lost = false;
  /* a request in flight was resent after the hello and carries on */
  if (!f || !f->display || x->wait != JK_WAIT_JOB || x->gw_req)
    return;
  resync(ip);
}

void jk_jobs_gateway_lost(struct jk_interp *ip, const char *why) {
  struct jk_execution *x = ip->running;
  struct jk_follow *f = x ? x->follow : NULL;
  if (!f || !f->display || x->wait != JK_WAIT_JOB || f->told_lost)
    return;
  f->told_lost = true;
  const char *job = jk_display_job(f->display);
  char *line = NULL;
  if (asprintf(&line, "spotlab: the gateway is not available (%s); %s goes on on its worker, and this cell "
                      "follows it again once a gateway runs (interrupt it to detach)\n",
               why && *why ? why : "no answer", job) >= 0)
    jk_exec_stream(ip, "stderr", line);
  free(line);
}

void jk_jobs_notice_running(struct jk_interp *ip, const json_t *notice) {
  struct jk_follow *f = ip->running ? ip->running->follow : NULL;
  if (f && f->display && jk_display_notice(f->display, notice) > 0)
    publish_display(ip, true);
}

void jk_jobs_notice(struct jk_interp *ip, const json_t *notice) {
  struct jk_display *d = ip->last_display;
  if (!d || jk_display_notice(d, notice) <= 0)
    return;
  json_t *bundle = jk_display_bundle(d);
  if (bundle)
    ip->pub->display(ip->pub_ud, JK_PUB_LAST, bundle, jk_display_id(d), true);
  jk_display_sent(d, sl_time_mono_us());
}

void jk_jobs_cell_started(struct jk_interp *ip) {
  if (!ip->gw || jk_gw_state(ip->gw) != JK_GW_READY)
    return; /* a cell that needs no gateway never connects to one */
  int64_t id = jk_gw_request(ip->gw, json_pack("{s:s}", "type", "ping"), JK_GW_NO_CONNECT);
  if (id > 0)
    jk_gw_forget(ip->gw, id);
}

/* ---- interrupt and time ------------------------------------------------- */

void jk_jobs_interrupt(struct jk_interp *ip) {
  struct jk_execution *x = ip->running;
  struct jk_follow *f = x->follow;
  if (x->gw_req)
    jk_gw_forget(ip->gw, x->gw_req);
  if (x->wait == JK_WAIT_JOB && f && f->display) {
    const char *job = jk_display_job(f->display);
    int64_t id = jk_gw_request(ip->gw, json_pack("{s:s, s:s}", "type", "detach", "job", job), 0);
    if (id > 0)
      jk_gw_forget(ip->gw, id);
    publish_display(ip, true);
    jk_exec_fail(ip, "Interrupted", "detached from %s; it keeps running (use %%attach %s)", job, job);
    return;
  }
  char *tried = x->gw_op == OP_GATEWAY ? gateway_switch_end(ip, false) : NULL;
  if (tried)
    jk_exec_fail(ip, "Interrupted", "interrupted while waiting for the gateway at %s; the kernel keeps using %s",
                 tried, jk_gw_address(ip->gw));
  else if (x->gw_op == OP_DATA)
    jk_upload_interrupted(ip);
  else if (x->gw_op == OP_SUBMIT)
    jk_exec_fail(ip, "Interrupted", "interrupted while submitting; the job may have been submitted (see %%jobs)");
  else
    jk_exec_fail(ip, "Interrupted", "interrupted while waiting for the gateway at %s", jk_gw_address(ip->gw));
  free(tried);
}

void jk_jobs_other_front_end(struct jk_interp *ip) {
  struct jk_execution *x = ip->running;
  struct jk_follow *f = x ? x->follow : NULL;
  /* only a live follow that shows something; not while catching up (the
   * display would miss events) nor for a job that is ending */
  if (!f || !f->display || x->wait != JK_WAIT_JOB || x->silent || f->catching_up || x->gw_req ||
      !jk_display_shown(f->display) || jk_display_finished(f->display))
    return;
  const char *job = jk_display_job(f->display);
  char *t = NULL;
  if (asprintf(&t, "another front end runs a cell: %s keeps running and this display keeps updating "
                   "(%%attach %s follows it in a cell)\n", job, job) >= 0)
    jk_exec_stream(ip, "stdout", t);
  free(t);
  publish_display(ip, true);
  jk_jobs_free_follow(ip); /* the display becomes the one kept between cells */
  ip->last_attached = ip->last_display != NULL;
  x->pc = x->cell->n - 1; /* the rest of the cell is not run: it ends here, without error */
  x->wait = JK_WAIT_NONE;
  jk_exec_step_ended(ip, JK_STEP_DONE);
}

int64_t jk_jobs_wake_at_us(const struct jk_interp *ip) {
  const struct jk_execution *x = ip->running;
  int64_t at = jk_upload_wake_at_us(ip);
  if (ip->last_attached && ip->last_display && jk_display_dirty(ip->last_display)) {
    int64_t last = jk_display_next_us(ip->last_display);
    at = last < at ? last : at;
  }
  if (!x || !x->follow || !x->follow->display || x->wait != JK_WAIT_JOB)
    return at;
  int64_t mine = jk_display_next_us(x->follow->display);
  at = mine < at ? mine : at;
  return at < ip->ping_at_us ? at : ip->ping_at_us;
}

void jk_jobs_tick(struct jk_interp *ip) {
  if (ip->last_attached)
    publish_last(ip, false);
  jk_upload_tick(ip); /* may end the cell */
  struct jk_execution *x = ip->running;
  if (!x || !x->follow || !x->follow->display || x->wait != JK_WAIT_JOB)
    return;
  if (!x->follow->catching_up || x->follow->resyncing) /* the first display waits for the job's state */
    publish_display(ip, false);
  int64_t now = sl_time_mono_us();
  if (now >= ip->ping_at_us) {
    struct jk_follow *f = x->follow;
    ip->ping_at_us = now + PING_EVERY_US;
    /* A ping sent into a gateway that died is never answered: after two
     * intervals it is dropped and a new one goes out, which the restarted
     * gateway answers (SL_EAUTH, and the client says hello again). */
    if (f->ping_id && now - f->ping_sent_us >= 2 * PING_EVERY_US) {
      jk_gw_forget(ip->gw, f->ping_id);
      f->ping_id = 0;
    }
    if (!f->ping_id) {
      int64_t id = jk_gw_request(ip->gw, json_pack("{s:s}", "type", "ping"), 0);
      f->ping_id = id > 0 ? id : 0;
      f->ping_sent_us = now;
    }
    if (f->resync_due && !x->gw_req)
      resync(ip);
  }
}
