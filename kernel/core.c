/* Request dispatch for the Jupyter messaging protocol 5.3.
 *
 * Invariants: every request is bracketed by status busy/idle on iopub with
 * the request as parent; shell requests run strictly in arrival order, one at
 * a time; control requests never wait behind shell work. The core owns the
 * gateway client (gwclient.c) when the loop supplies a gateway socket, and
 * starts loading the notebook session's state from it at once, in the
 * background: cells wait for that load, which is bounded by the client's
 * hello timeout, and a missing gateway only fails gateway statements. */
#include "core_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#define MAX_QUEUE 1024

/* ---- gateway client glue -------------------------------------------------- */

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

static const struct jk_gw_transport gw_transport = {gw_open, gw_close, gw_send};

static void on_gw_reply(void *ud, int64_t id, const json_t *reply, const char *error) {
  struct jk_core *c = ud;
  if (!jk_session_reply(c, id, reply, error))
    jk_jobs_reply(c, id, reply, error);
  jk_core_dispatch(c);
}

static void on_gw_event(void *ud, const json_t *event) {
  struct jk_core *c = ud;
  jk_jobs_event(c, event);
  jk_core_dispatch(c);
}

static void on_gw_state(void *ud, bool ready, const char *why) {
  struct jk_core *c = ud;
  if (ready) {
    jk_session_flush(c);
    jk_jobs_reattach(c);
  } else {
    sl_debug("kernel.gateway", "gateway not available: %s", why ? why : "?");
  }
}

static void on_gw_notice(void *ud, const json_t *notice) {
  jk_exec_notice(ud, notice);
}

static const struct jk_gw_handler gw_handler = {on_gw_reply, on_gw_event, on_gw_state,
                                                on_gw_notice};

int jk_core_set_gateway(struct jk_core *c, const struct jk_core_gw_ops *ops) {
  if (c->gw)
    return 0;
  struct jk_gw_config gcfg = {.client = "kernel", .session = c->notebook, .may_spawn = true};
  c->gw_ops = ops;
  c->gw = jk_gw_new(&gw_transport, c, &gw_handler, c, &gcfg);
  if (!c->gw)
    return -ENOMEM;
  c->sess_loading = true;
  jk_session_load(c);
  return 0;
}

void jk_core_gateway_input(struct jk_core *c, const char *data, size_t len) {
  if (c->gw)
    jk_gw_input(c->gw, data, len);
}

struct jk_core *jk_core_new(const struct jk_core_ops *ops, void *userdata,
                            const struct jk_core_config *cfg) {
  struct jk_core *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  c->ops = ops;
  c->userdata = userdata;
  c->kernel_id = strdup(cfg->kernel_id ? cfg->kernel_id : "kernel");
  c->notebook = strdup(cfg->notebook ? cfg->notebook : c->kernel_id ? c->kernel_id : "kernel");
  const char *gw = getenv("SPOTLAB_GATEWAY");
  c->gateway = gw && *gw ? strdup(gw) : NULL;
  if (!c->kernel_id || !c->notebook)
    return jk_core_free(c);
  c->history = jk_history_open(cfg->history_dir, c->notebook);
  if (!c->history)
    return jk_core_free(c);
  return c;
}

struct jk_core *jk_core_free(struct jk_core *c) {
  if (!c)
    return NULL;
  for (size_t i = 0; i < c->q_len; i++)
    jk_msg_free(c->queue[(c->q_head + i) % c->q_cap]);
  free(c->queue);
  jk_exec_free_state(c);
  jk_session_free(c);
  c->gw = jk_gw_free(c->gw);
  jk_history_free(c->history);
  free(c->kernel_id);
  free(c->notebook);
  free(c->gateway);
  free(c);
  return NULL;
}

/* ---- sending ------------------------------------------------------------ */

void jk_core_publish(struct jk_core *c, const struct jk_msg *parent, const char *msg_type,
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

void jk_core_reply(struct jk_core *c, enum jk_channel ch, const struct jk_msg *request,
                   const char *msg_type, json_t *content) {
  struct jk_msg *m = jk_msg_reply(request, msg_type, content, c->kernel_id);
  if (m)
    c->ops->send(c->userdata, ch, m);
}

void jk_core_set_status(struct jk_core *c, const struct jk_msg *parent, const char *state) {
  json_t *content = json_object();
  if (content) /* state is one of ours: ASCII, no need to check it */
    json_object_set_new_nocheck(content, "execution_state", json_string_nocheck(state));
  jk_core_publish(c, parent, "status", content);
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

/* Code-point index -> byte offset in UTF-8 text (clamped to len). */
static size_t cp_to_byte(const char *s, size_t len, size_t cp) {
  size_t i = 0;
  while (i < len && cp > 0) {
    i++;
    while (i < len && ((unsigned char)s[i] & 0xC0) == 0x80)
      i++;
    cp--;
  }
  return i;
}

static bool ident_char(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         ch == '_';
}

static json_t *inspect(struct jk_core *c, const json_t *req) {
  const char *code = sl_json_get_str(req, "code", "");
  size_t len = strlen(code);
  size_t cursor = (size_t)sl_json_get_int(req, "cursor_pos", (json_int_t)len);
  int detail = (int)sl_json_get_int(req, "detail_level", 0);
  char *text = NULL;
  /* A notebook name under the cursor wins over a keyword of the same spelling. */
  size_t b = cp_to_byte(code, len, cursor), s = b, e = b;
  while (s > 0 && ident_char(code[s - 1]))
    s--;
  while (e < len && ident_char(code[e]))
    e++;
  if (e > s && e - s < 128) {
    char word[128];
    memcpy(word, code + s, e - s);
    word[e - s] = '\0';
    text = jk_exec_describe(c, word);
  }
  if (!text)
    text = jk_inspect(code, len, cursor, detail);
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
  size_t n_names = 0;
  const char **names = jk_exec_names(c, &n_names);
  struct jk_completions comp = {0};
  int r = jk_complete(code, len, cursor, names, n_names, &comp);
  free(names);
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

static json_t *is_complete(const json_t *req) {
  const char *code = sl_json_get_str(req, "code", "");
  switch (jk_is_complete(code, strlen(code))) {
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
 * false for types this function does not know. */
static bool answer_simple(struct jk_core *c, enum jk_channel ch, const struct jk_msg *req) {
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
    content = is_complete(req->content);
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
  jk_core_set_status(c, req, "busy");
  jk_core_reply(c, ch, req, reply, content);
  jk_core_set_status(c, req, "idle");
  return true;
}

static void shutdown_req(struct jk_core *c, enum jk_channel ch, const struct jk_msg *req) {
  bool restart = sl_json_get_bool(req->content, "restart", false);
  jk_core_set_status(c, req, "busy");
  if (c->running)
    jk_exec_interrupt(c);
  jk_core_reply(c, ch, req, "shutdown_reply",
                json_pack("{s:s, s:b}", "status", "ok", "restart", restart));
  jk_core_set_status(c, req, "idle");
  c->ops->shutdown(c->userdata, restart);
}

static void unknown_req(struct jk_core *c, enum jk_channel ch, const struct jk_msg *req) {
  const char *type = jk_msg_type(req);
  size_t n = strlen(type);
  /* comm_open/comm_msg/comm_close: no comm targets exist, so nothing answers. */
  if (strncmp(type, "comm_", 5) == 0) {
    jk_core_set_status(c, req, "busy");
    jk_core_set_status(c, req, "idle");
    return;
  }
  sl_warn("kernel", "unsupported message type \"%.64s\"", type);
  if (n > 8 && strcmp(type + n - 8, "_request") == 0 && n < 100) {
    char reply[128];
    snprintf(reply, sizeof reply, "%.*s_reply", (int)(n - 8), type);
    jk_core_set_status(c, req, "busy");
    jk_core_reply(c, ch, req, reply,
                  json_pack("{s:s, s:s, s:s, s:[]}", "status", "error", "ename",
                            "UnsupportedRequest", "evalue", "this kernel does not support this request",
                            "traceback"));
    jk_core_set_status(c, req, "idle");
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

void jk_core_abort_queued(struct jk_core *c) {
  c->ops->drain_shell(c->userdata);
  struct jk_msg *m;
  size_t keep = c->q_len;
  /* Aborts the execute requests waiting now; other requests still run. */
  for (size_t i = 0; i < keep; i++) {
    m = dequeue(c);
    const char *type = jk_msg_type(m);
    if (strcmp(type, "execute_request") == 0) {
      jk_core_set_status(c, m, "busy");
      jk_core_reply(c, JK_CH_SHELL, m, "execute_reply",
                    json_pack("{s:s, s:n}", "status", "aborted", "execution_count"));
      jk_core_set_status(c, m, "idle");
      jk_msg_free(m);
    } else {
      enqueue(c, m);
    }
  }
}

static void run_shell(struct jk_core *c, struct jk_msg *m) {
  const char *type = jk_msg_type(m);
  if (strcmp(type, "execute_request") == 0) {
    jk_exec_start(c, m); /* takes m */
    return;
  }
  if (strcmp(type, "shutdown_request") == 0)
    shutdown_req(c, JK_CH_SHELL, m);
  else if (!answer_simple(c, JK_CH_SHELL, m))
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
    if (enqueue(c, m) < 0) {
      sl_warn("kernel", "shell queue full; dropping %s", type);
      jk_msg_free(m);
    }
    return;
  }
  if (ch == JK_CH_STDIN) {
    if (strcmp(type, "input_reply") == 0)
      jk_exec_input_reply(c, m);
    jk_msg_free(m);
    return;
  }
  /* control */
  if (strcmp(type, "shutdown_request") == 0) {
    shutdown_req(c, ch, m);
  } else if (strcmp(type, "interrupt_request") == 0) {
    jk_core_set_status(c, m, "busy");
    jk_core_interrupt(c);
    jk_core_reply(c, ch, m, "interrupt_reply", json_pack("{s:s}", "status", "ok"));
    jk_core_set_status(c, m, "idle");
  } else if (strcmp(type, "debug_request") == 0) {
    unknown_req(c, ch, m);
  } else if (!answer_simple(c, ch, m)) {
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
    jk_core_set_status(c, partial, "busy");
    jk_core_reply(c, ch, partial, reply,
                  json_pack("{s:s, s:s, s:s, s:[s]}", "status", "error", "ename", "BadMessage",
                            "evalue", reason, "traceback", reason));
    jk_core_set_status(c, partial, "idle");
  }
  jk_msg_free(partial);
}

int64_t jk_core_wake_at_us(const struct jk_core *c) {
  int64_t at = INT64_MAX;
  if (c->running && c->running->wait == JK_WAIT_SLEEP)
    at = c->running->wake_at_us;
  if (c->gw) {
    int64_t g = jk_gw_wake_at_us(c->gw), j = jk_jobs_wake_at_us(c);
    at = g < at ? g : at;
    at = j < at ? j : at;
  }
  return at;
}

void jk_core_tick(struct jk_core *c) {
  if (c->gw) {
    jk_gw_tick(c->gw);
    jk_jobs_tick(c);
  }
  if (c->running && c->running->wait == JK_WAIT_SLEEP &&
      sl_time_mono_us() >= c->running->wake_at_us) {
    c->running->wait = JK_WAIT_NONE;
    jk_exec_resume(c);
  }
  jk_core_dispatch(c);
}

void jk_core_interrupt(struct jk_core *c) {
  if (c->running)
    jk_exec_interrupt(c);
}
