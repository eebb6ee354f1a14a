/* Request dispatch for the Jupyter messaging protocol 5.3.
 *
 * Invariants: every request is bracketed by status busy/idle on iopub with
 * the request as parent; shell requests run strictly in arrival order, one at
 * a time; control requests never wait behind shell work. The core keeps the
 * protocol's bookkeeping (queue, execution count, history, replies) and hands
 * the language to the interpreter through its ops (interp.h); the
 * interpreter answers through the publisher below and never sees this
 * struct. An execute_request is "running" from its busy until the
 * interpreter calls finished(), which sends its reply and idle. */
#include "core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "history.h"
#include "interp.h"
#include "sl_json.h"
#include "sl_log.h"

#define MAX_QUEUE 1024
#define TERMINALS 8 /* client sessions remembered as terminal consoles */

struct jk_core {
  const struct jk_core_ops *ops;
  void *userdata;
  char *kernel_id;
  struct jk_history *history;
  int64_t execution_count;
  struct jk_msg **queue;       /* shell requests waiting */
  size_t q_head, q_len, q_cap;
  const struct jk_interp_ops *iops;
  struct jk_interp *interp;
  const struct jk_core_gw_ops *gw_ops;
  struct jk_msg *running;      /* the execute_request being run, or NULL */
  int64_t running_count;       /* its execution_count */
  bool running_silent, running_stop_on_error;
  struct jk_msg *last_request; /* the last non-silent execute_request, kept after it ended */
  char terminals[TERMINALS][64]; /* client sessions that sent is_complete_request, newest last */
};

/* The client session of a request ("" when its header has none). */
static const char *client_session(const struct jk_msg *m) {
  return m && m->header ? sl_json_get_str(m->header, "session", "") : "";
}

/* Terminal consoles (jupyter console, qtconsole) ask is_complete before
 * running what was typed; notebooks never do. Such a console prints a
 * display once and ignores update_display_data, so the interpreter also
 * writes a job's progress to it as lines. */
static void note_terminal(struct jk_core *c, const struct jk_msg *m) {
  const char *s = client_session(m);
  if (!*s || strlen(s) >= sizeof c->terminals[0])
    return;
  for (int i = 0; i < TERMINALS; i++)
    if (strcmp(c->terminals[i], s) == 0)
      return;
  memmove(c->terminals[0], c->terminals[1], (TERMINALS - 1) * sizeof c->terminals[0]);
  snprintf(c->terminals[TERMINALS - 1], sizeof c->terminals[0], "%s", s);
}

static bool is_terminal(const struct jk_core *c, const struct jk_msg *m) {
  const char *s = client_session(m);
  for (int i = 0; *s && i < TERMINALS; i++)
    if (strcmp(c->terminals[i], s) == 0)
      return true;
  return false;
}

static void publish(struct jk_core *c, const struct jk_msg *parent, const char *msg_type, json_t *content);
static void send_reply(struct jk_core *c, enum jk_channel ch, const struct jk_msg *request,
                       const char *msg_type, json_t *content);
static void set_status(struct jk_core *c, const struct jk_msg *parent, const char *state);
static void abort_queued(struct jk_core *c);

/* ---- the publisher the interpreter answers through ----------------------- */

static const struct jk_msg *target(struct jk_core *c, enum jk_pub_cell cell) {
  if (cell == JK_PUB_LAST)
    return c->last_request;
  return c->running && !c->running_silent ? c->running : NULL;
}

static int pub_stream(void *ud, enum jk_pub_cell cell, const char *name, const char *text) {
  struct jk_core *c = ud;
  const struct jk_msg *parent = target(c, cell);
  if (!parent)
    return -ENOENT;
  publish(c, parent, "stream", json_pack("{s:s, s:s}", "name", name, "text", text));
  return 0;
}

static int pub_display(void *ud, enum jk_pub_cell cell, json_t *data, const char *display_id,
                       bool update) {
  struct jk_core *c = ud;
  const struct jk_msg *parent = target(c, cell);
  if (!parent) {
    json_decref(data);
    return -ENOENT;
  }
  json_t *transient = display_id ? json_pack("{s:s}", "display_id", display_id) : json_object();
  publish(c, parent, update ? "update_display_data" : "display_data",
          json_pack("{s:o, s:{}, s:o}", "data", data, "metadata", "transient", transient));
  return 0;
}

static int pub_clear_output(void *ud, bool wait) {
  struct jk_core *c = ud;
  const struct jk_msg *parent = target(c, JK_PUB_RUNNING);
  if (!parent)
    return -ENOENT;
  publish(c, parent, "clear_output", json_pack("{s:b}", "wait", wait));
  return 0;
}

static int pub_input_request(void *ud, const char *prompt, bool password) {
  struct jk_core *c = ud;
  if (!c->running)
    return -ENOENT;
  send_reply(c, JK_CH_STDIN, c->running, "input_request",
        json_pack("{s:s, s:b}", "prompt", prompt, "password", password));
  return 0;
}

static void pub_finished(void *ud, json_t *result, json_t *error) {
  struct jk_core *c = ud;
  struct jk_msg *req = c->running;
  if (!req) { /* an interpreter bug: nothing to answer */
    sl_warn("kernel", "execution finished twice; ignored");
    json_decref(result);
    json_decref(error);
    return;
  }
  json_t *content;
  if (!error) {
    if (result && !c->running_silent)
      publish(c, req, "execute_result",
              json_pack("{s:I, s:o, s:{}}", "execution_count", (json_int_t)c->running_count, "data",
                        result, "metadata"));
    else
      json_decref(result);
    json_t *ue = c->iops->user_expressions(c->interp, json_object_get(req->content, "user_expressions"));
    content = json_pack("{s:s, s:I, s:o, s:[]}", "status", "ok", "execution_count",
                        (json_int_t)c->running_count, "user_expressions", ue, "payload");
  } else {
    json_decref(result);
    if (!c->running_silent)
      publish(c, req, "error", json_deep_copy(error));
    content = error;
    json_object_set_new(content, "status", json_string("error"));
    json_object_set_new(content, "execution_count", json_integer(c->running_count));
    if (c->running_stop_on_error)
      abort_queued(c);
  }
  send_reply(c, JK_CH_SHELL, req, "execute_reply", content);
  set_status(c, req, "idle");
  c->running = NULL;
  if (c->running_silent) {
    jk_msg_free(req);
  } else { /* output that comes between cells goes under this one */
    jk_msg_free(c->last_request);
    c->last_request = req;
  }
}

static const struct jk_publisher publisher = {pub_stream, pub_display, pub_clear_output,
                                              pub_input_request, pub_finished};

/* ---- gateway transport glue --------------------------------------------- */

static int gw_open(void *ud, const char *address) {
  struct jk_core *c = ud;
  return c->gw_ops->gw_open(c->userdata, address);
}

static void gw_close(void *ud) {
  struct jk_core *c = ud;
  c->gw_ops->gw_close(c->userdata);
}

static int gw_send(void *ud, const char *data, size_t len) {
  struct jk_core *c = ud;
  return c->gw_ops->gw_send(c->userdata, data, len);
}

static int gw_send_more(void *ud, const char *data, size_t len) {
  struct jk_core *c = ud;
  return c->gw_ops->gw_send_more ? c->gw_ops->gw_send_more(c->userdata, data, len) : -ENOTSUP;
}

static const struct jk_gw_transport gw_transport = {gw_open, gw_close, gw_send, gw_send_more};

int jk_core_set_gateway(struct jk_core *c, const struct jk_core_gw_ops *ops) {
  if (c->gw_ops)
    return 0;
  c->gw_ops = ops;
  int r = c->iops->set_gateway(c->interp, &gw_transport, c);
  if (r < 0)
    c->gw_ops = NULL;
  return r;
}

void jk_core_gateway_input(struct jk_core *c, const char *data, size_t len) {
  c->iops->gateway_input(c->interp, data, len);
  jk_core_dispatch(c);
}

struct jk_core *jk_core_new(const struct jk_core_ops *ops, void *userdata,
                            const struct jk_core_config *cfg) {
  struct jk_core *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  c->ops = ops;
  c->userdata = userdata;
  c->iops = &jk_spotlab_interp;
  c->kernel_id = strdup(cfg->kernel_id ? cfg->kernel_id : "kernel");
  const char *notebook = cfg->notebook ? cfg->notebook : c->kernel_id;
  if (!c->kernel_id)
    return jk_core_free(c);
  c->history = jk_history_open(cfg->history_dir, notebook);
  if (!c->history)
    return jk_core_free(c);
  struct jk_interp_config icfg = {c->kernel_id, notebook, c->history, cfg->notebook && cfg->follows,
                                  cfg->server_file, cfg->server_named};
  c->interp = jk_interp_new(&publisher, c, &icfg);
  if (!c->interp)
    return jk_core_free(c);
  return c;
}

struct jk_core *jk_core_free(struct jk_core *c) {
  if (!c)
    return NULL;
  for (size_t i = 0; i < c->q_len; i++)
    jk_msg_free(c->queue[(c->q_head + i) % c->q_cap]);
  free(c->queue);
  if (c->interp)
    c->interp = c->iops->free(c->interp); /* closes the gateway socket through gw_close */
  jk_msg_free(c->running);
  jk_msg_free(c->last_request);
  jk_history_free(c->history);
  free(c->kernel_id);
  free(c);
  return NULL;
}

/* ---- sending ------------------------------------------------------------ */

static void publish(struct jk_core *c, const struct jk_msg *parent, const char *msg_type,
                    json_t *content) {
  struct jk_msg *m = jk_msg_child(parent, msg_type, content, c->kernel_id);
  if (!m)
    return;
  /* "kernel.<id>.<type>", as ipykernel names its iopub topics */
  char topic[128] = "kernel.";
  size_t n = 7, id_len = strnlen(c->kernel_id, 64), type_len = strnlen(msg_type, 40);
  memcpy(topic + n, c->kernel_id, id_len);
  n += id_len;
  topic[n++] = '.';
  memcpy(topic + n, msg_type, type_len);
  n += type_len;
  sl_msg_add(&m->idents, topic, n);
  c->ops->send(c->userdata, JK_CH_IOPUB, m);
}

static void send_reply(struct jk_core *c, enum jk_channel ch, const struct jk_msg *request,
                       const char *msg_type, json_t *content) {
  struct jk_msg *m = jk_msg_reply(request, msg_type, content, c->kernel_id);
  if (m)
    c->ops->send(c->userdata, ch, m);
}

static void set_status(struct jk_core *c, const struct jk_msg *parent, const char *state) {
  json_t *content = json_object();
  if (content) /* state is one of ours: ASCII, no need to check it */
    json_object_set_new_nocheck(content, "execution_state", json_string_nocheck(state));
  publish(c, parent, "status", content);
}

/* ---- simple requests ---------------------------------------------------- */

static json_t *kernel_info(void) {
  return json_pack(
      "{s:s, s:s, s:s, s:s, s:{s:s, s:s, s:s, s:s, s:s, s:s}, s:s, s:b, s:[{s:s, s:s}]}",
      "status", "ok", "protocol_version", "5.3", "implementation", "spotlab-kernel",
      "implementation_version", SPOTLAB_VERSION, "language_info", "name", "spotlab", "version",
      SPOTLAB_VERSION, "mimetype", "text/x-spotlab", "file_extension", ".spotlab",
      "pygments_lexer", "text", "codemirror_mode", "shell", "banner",
      "spotlab " SPOTLAB_VERSION ": train models on spot GPUs from this notebook. "
      "Type %help for the language.",
      "debugger", 0, "help_links", "text", "spotlab language", "url",
      "https://github.com/spotlab/spotlab/blob/main/docs/language.md");
}

static json_t *inspect(struct jk_core *c, const json_t *req) {
  const char *code = sl_json_get_str(req, "code", "");
  size_t len = strlen(code);
  size_t cursor = (size_t)sl_json_get_int(req, "cursor_pos", (json_int_t)len);
  int detail = (int)sl_json_get_int(req, "detail_level", 0);
  char *text = c->iops->inspect(c->interp, code, len, cursor, detail);
  json_t *data = json_object();
  if (text)
    json_object_set_new(data, "text/plain", json_string(text));
  json_t *r = json_pack("{s:s, s:b, s:o, s:{}}", "status", "ok", "found", text != NULL, "data",
                        data, "metadata");
  free(text);
  return r;
}

static json_t *complete(struct jk_core *c, const json_t *req) {
  const char *code = sl_json_get_str(req, "code", "");
  size_t len = strlen(code);
  size_t cursor = (size_t)sl_json_get_int(req, "cursor_pos", (json_int_t)len);
  struct jk_completions comp = {0};
  int r = c->iops->complete(c->interp, code, len, cursor, &comp);
  json_t *matches = json_array();
  if (r < 0) {
    comp.cursor_start = comp.cursor_end = cursor;
  } else {
    for (size_t i = 0; i < comp.n; i++)
      json_array_append_new(matches, json_string(comp.matches[i]));
  }
  json_t *out = json_pack("{s:s, s:o, s:I, s:I, s:{}}", "status", "ok", "matches", matches,
                          "cursor_start", (json_int_t)comp.cursor_start, "cursor_end",
                          (json_int_t)comp.cursor_end, "metadata");
  jk_completions_done(&comp);
  return out;
}

static json_t *is_complete(struct jk_core *c, const json_t *req) {
  const char *code = sl_json_get_str(req, "code", "");
  switch (c->iops->is_complete(c->interp, code, strlen(code))) {
  case JK_COMPLETE:
    return json_pack("{s:s}", "status", "complete");
  case JK_INCOMPLETE:
    return json_pack("{s:s, s:s}", "status", "incomplete", "indent", "");
  default:
    return json_pack("{s:s}", "status", "invalid");
  }
}

static json_t *history(struct jk_core *c, const json_t *req) {
  return json_pack("{s:s, s:o}", "status", "ok", "history", jk_history_query(c->history, req));
}

/* Requests that answer at once, on whichever channel they came. Returns
 * false for types this function does not know. status: publish busy and
 * idle around the reply (not for a request answered out of turn while a
 * cell runs: the kernel stays busy until that cell's own idle). */
static bool answer_simple(struct jk_core *c, enum jk_channel ch, const struct jk_msg *req,
                          bool status) {
  const char *type = jk_msg_type(req);
  json_t *content = NULL;
  const char *reply = NULL;
  if (strcmp(type, "kernel_info_request") == 0) {
    content = kernel_info();
    reply = "kernel_info_reply";
  } else if (strcmp(type, "complete_request") == 0) {
    content = complete(c, req->content);
    reply = "complete_reply";
  } else if (strcmp(type, "inspect_request") == 0) {
    content = inspect(c, req->content);
    reply = "inspect_reply";
  } else if (strcmp(type, "is_complete_request") == 0) {
    content = is_complete(c, req->content);
    reply = "is_complete_reply";
  } else if (strcmp(type, "history_request") == 0) {
    content = history(c, req->content);
    reply = "history_reply";
  } else if (strcmp(type, "comm_info_request") == 0) {
    content = json_pack("{s:s, s:{}}", "status", "ok", "comms");
    reply = "comm_info_reply";
  } else {
    return false;
  }
  if (status)
    set_status(c, req, "busy");
  send_reply(c, ch, req, reply, content);
  if (status)
    set_status(c, req, "idle");
  return true;
}

static void shutdown_req(struct jk_core *c, enum jk_channel ch, const struct jk_msg *req) {
  bool restart = sl_json_get_bool(req->content, "restart", false);
  set_status(c, req, "busy");
  jk_core_interrupt(c);
  send_reply(c, ch, req, "shutdown_reply",
                json_pack("{s:s, s:b}", "status", "ok", "restart", restart));
  set_status(c, req, "idle");
  c->ops->shutdown(c->userdata, restart);
}

static void unknown_req(struct jk_core *c, enum jk_channel ch, const struct jk_msg *req) {
  const char *type = jk_msg_type(req);
  size_t n = strlen(type);
  /* comm_open/comm_msg/comm_close: no comm targets exist, so nothing answers. */
  if (strncmp(type, "comm_", 5) == 0) {
    set_status(c, req, "busy");
    set_status(c, req, "idle");
    return;
  }
  sl_warn("kernel", "unsupported message type \"%.64s\"", type);
  if (n > 8 && strcmp(type + n - 8, "_request") == 0 && n < 100) {
    char reply[128];
    snprintf(reply, sizeof reply, "%.*s_reply", (int)(n - 8), type);
    set_status(c, req, "busy");
    send_reply(c, ch, req, reply,
                  json_pack("{s:s, s:s, s:s, s:[]}", "status", "error", "ename",
                            "UnsupportedRequest", "evalue", "this kernel does not support this request",
                            "traceback"));
    set_status(c, req, "idle");
  }
}

/* ---- queue -------------------------------------------------------------- */

static int enqueue(struct jk_core *c, struct jk_msg *m) {
  if (c->q_len == MAX_QUEUE)
    return -1;
  if (c->q_len == c->q_cap) {
    size_t cap = c->q_cap ? c->q_cap * 2 : 16;
    struct jk_msg **q = malloc(cap * sizeof *q);
    if (!q)
      return -1;
    for (size_t i = 0; i < c->q_len; i++)
      q[i] = c->queue[(c->q_head + i) % c->q_cap];
    free(c->queue);
    c->queue = q;
    c->q_cap = cap;
    c->q_head = 0;
  }
  c->queue[(c->q_head + c->q_len++) % c->q_cap] = m;
  return 0;
}

static struct jk_msg *dequeue(struct jk_core *c) {
  if (!c->q_len)
    return NULL;
  struct jk_msg *m = c->queue[c->q_head];
  c->q_head = (c->q_head + 1) % c->q_cap;
  c->q_len--;
  return m;
}

/* Aborts queued execute requests (stop_on_error), after draining the socket. */
static void abort_queued(struct jk_core *c) {
  c->ops->drain_shell(c->userdata);
  struct jk_msg *m;
  size_t keep = c->q_len;
  /* Aborts the execute requests waiting now; other requests still run. */
  for (size_t i = 0; i < keep; i++) {
    m = dequeue(c);
    const char *type = jk_msg_type(m);
    if (strcmp(type, "execute_request") == 0) {
      set_status(c, m, "busy");
      send_reply(c, JK_CH_SHELL, m, "execute_reply",
                    json_pack("{s:s, s:n}", "status", "aborted", "execution_count"));
      set_status(c, m, "idle");
      jk_msg_free(m);
    } else {
      enqueue(c, m);
    }
  }
}

/* Starts running an execute_request (takes req). */
static void execute(struct jk_core *c, struct jk_msg *req) {
  const json_t *ct = req->content;
  const char *code = sl_json_get_str(ct, "code", "");
  bool silent = sl_json_get_bool(ct, "silent", false);
  c->running = req;
  c->running_silent = silent;
  c->running_stop_on_error = sl_json_get_bool(ct, "stop_on_error", true);
  set_status(c, req, "busy");
  if (!silent && sl_json_get_bool(ct, "store_history", true)) {
    c->execution_count++;
    jk_history_add(c->history, c->execution_count, code);
  }
  c->running_count = c->execution_count;
  if (!silent)
    publish(c, req, "execute_input",
            json_pack("{s:s, s:I}", "code", code, "execution_count", (json_int_t)c->running_count));
  /* a "\u0000" (sl_json_parse lets it through) would end the cell's C
   * string there: what ran would be less than the cell */
  const json_t *whole = json_object_get(ct, "code");
  if (json_is_string(whole) && strlen(code) != json_string_length(whole)) {
    /* where it is, as the parser says where: line and column (code points), 1-based */
    int ln = 1, col = 1;
    for (const unsigned char *p = (const unsigned char *)code; *p; p++) {
      if (*p == '\n')
        ln++, col = 1;
      else if ((*p & 0xC0) != 0x80)
        col++;
    }
    char evalue[128], line[200];
    snprintf(evalue, sizeof evalue, "line %d, column %d: the cell holds a NUL character (\\u0000)", ln, col);
    snprintf(line, sizeof line, "\033[0;31mSyntaxError\033[0m: %s", evalue);
    pub_finished(c, NULL,
                 json_pack("{s:s, s:s, s:[s]}", "ename", "SyntaxError", "evalue", evalue, "traceback", line));
    return;
  }
  struct jk_exec_args args = {code, silent, sl_json_get_bool(ct, "allow_stdin", true), is_terminal(c, req)};
  c->iops->execute(c->interp, &args);
}

static void run_shell(struct jk_core *c, struct jk_msg *m) {
  const char *type = jk_msg_type(m);
  if (strcmp(type, "execute_request") == 0) {
    execute(c, m); /* takes m */
    return;
  }
  if (strcmp(type, "shutdown_request") == 0)
    shutdown_req(c, JK_CH_SHELL, m);
  else if (!answer_simple(c, JK_CH_SHELL, m, true))
    unknown_req(c, JK_CH_SHELL, m);
  jk_msg_free(m);
}

void jk_core_dispatch(struct jk_core *c) {
  while (!c->running && c->q_len)
    run_shell(c, dequeue(c));
}

void jk_core_handle(struct jk_core *c, enum jk_channel ch, struct jk_msg *m) {
  const char *type = jk_msg_type(m);
  sl_debug("kernel.core", "%s on channel %d", type, (int)ch);
  if (ch == JK_CH_SHELL) {
    if (strcmp(type, "is_complete_request") == 0) {
      note_terminal(c, m);
      /* Answered at once, also while a cell runs: the answer depends on the
       * code alone, and jupyter console stops asking for good when a reply
       * takes over a second. A terminal asks only at its prompt, so a cell
       * of its own still running is one it no longer waits for: Ctrl-C there
       * (jupyter console 6.4 on Python 3.11 loses its SIGINT handler after
       * the first prompt and never sends interrupt_request). That cell then
       * ends as on an interrupt if it only follows a job, after this reply,
       * which the console reads as the next message on the shell channel. */
      bool back = c->running && c->iops->terminal_back &&
                  strcmp(client_session(m), client_session(c->running)) == 0;
      answer_simple(c, JK_CH_SHELL, m, !c->running);
      jk_msg_free(m);
      if (back)
        c->iops->terminal_back(c->interp);
      return;
    }
    /* A cell from another front end (a reopened tab, a console on this
     * kernel) would wait behind one that only watches a job nobody may be
     * looking at: the interpreter may end that watch first. So does a new
     * cell from a terminal console: it runs one cell at a time, so it sends
     * another only after giving up on the running one (Ctrl-C there stops
     * waiting without telling the kernel, in some versions). */
    bool other = c->running && strcmp(type, "execute_request") == 0 && c->iops->other_front_end &&
                 (strcmp(client_session(m), client_session(c->running)) != 0 || is_terminal(c, m));
    if (enqueue(c, m) < 0) { /* answered, so no front end waits for a reply that never comes */
      sl_warn("kernel", "shell queue full; refusing %s", type);
      jk_core_reject(c, ch, m, "the kernel's request queue is full; try again");
      return;
    }
    if (other)
      c->iops->other_front_end(c->interp);
    return;
  }
  if (ch == JK_CH_STDIN) {
    if (strcmp(type, "input_reply") == 0)
      c->iops->input_reply(c->interp, sl_json_get_str(m->content, "value", ""));
    jk_msg_free(m);
    jk_core_dispatch(c);
    return;
  }
  /* control */
  if (strcmp(type, "shutdown_request") == 0) {
    shutdown_req(c, ch, m);
  } else if (strcmp(type, "interrupt_request") == 0) {
    set_status(c, m, "busy");
    jk_core_interrupt(c);
    send_reply(c, ch, m, "interrupt_reply", json_pack("{s:s}", "status", "ok"));
    set_status(c, m, "idle");
  } else if (strcmp(type, "debug_request") == 0) {
    unknown_req(c, ch, m);
  } else if (!answer_simple(c, ch, m, true)) {
    unknown_req(c, ch, m);
  }
  jk_msg_free(m);
}

void jk_core_reject(struct jk_core *c, enum jk_channel ch, struct jk_msg *partial,
                    const char *reason) {
  const char *type = partial->header ? jk_msg_type(partial) : "";
  size_t n = strlen(type);
  if (ch != JK_CH_STDIN && n > 8 && n < 100 && strcmp(type + n - 8, "_request") == 0) {
    char reply[128];
    snprintf(reply, sizeof reply, "%.*s_reply", (int)(n - 8), type);
    set_status(c, partial, "busy");
    send_reply(c, ch, partial, reply,
                  json_pack("{s:s, s:s, s:s, s:[s]}", "status", "error", "ename", "BadMessage",
                            "evalue", reason, "traceback", reason));
    set_status(c, partial, "idle");
  }
  jk_msg_free(partial);
}

int64_t jk_core_wake_at_us(const struct jk_core *c) { return c->iops->wake_at_us(c->interp); }

void jk_core_tick(struct jk_core *c) {
  c->iops->tick(c->interp);
  jk_core_dispatch(c);
}

void jk_core_interrupt(struct jk_core *c) {
  if (c->running)
    c->iops->interrupt(c->interp);
}

bool jk_core_awaits_input(const struct jk_core *c) { return c->running && c->iops->awaits_input(c->interp); }
