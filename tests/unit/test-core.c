/* The kernel's message core driven through a mock transport, as a channel
 * loop would drive it but without sockets: requests go in as struct jk_msg,
 * and every message the core sends (replies, iopub, stdin) is kept in
 * memory and checked: kernel_info, cells (assignment, result, error, magic),
 * the busy/idle bracket, execution_count, stop_on_error, completion,
 * inspection, input, and interrupting a sleep. No gateway is given, so
 * gateway statements must answer GatewayUnavailable. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "harness.h"
#include "sl_json.h"
#include "sl_time.h"
#include "wire.h"

#define MAX_SENT 1024
#define MAX_WAITING 16

struct sent {
  enum jk_channel ch;
  char type[64];
  char parent[64];  /* the msg_id of the request it answers or was caused by */
  char topic[128];  /* iopub only */
  json_t *content;
};

/* The transport: what the core sent, and shell messages still "on the
 * socket" that drain_shell hands over. */
struct mock {
  struct sent sent[MAX_SENT];
  size_t n;
  struct jk_msg *waiting[MAX_WAITING];
  size_t n_waiting;
  struct jk_core *core;
  int shutdowns;
  bool restart;
};

static void mock_send(void *ud, enum jk_channel ch, struct jk_msg *m) {
  struct mock *mk = ud;
  if (mk->n < MAX_SENT) {
    struct sent *s = &mk->sent[mk->n++];
    memset(s, 0, sizeof *s);
    s->ch = ch;
    json_t *h = json_loadb(m->header_text, m->header_len, 0, NULL);
    json_t *p = m->parent_text ? json_loadb(m->parent_text, m->parent_len, 0, NULL)
                               : json_incref(m->parent_header);
    snprintf(s->type, sizeof s->type, "%s", sl_json_get_str(h, "msg_type", "?"));
    snprintf(s->parent, sizeof s->parent, "%s", sl_json_get_str(p, "msg_id", ""));
    if (ch == JK_CH_IOPUB && m->idents.n)
      snprintf(s->topic, sizeof s->topic, "%.*s", (int)m->idents.frames[0].len,
               (const char *)m->idents.frames[0].data);
    s->content = m->content ? json_incref(m->content) : json_object();
    json_decref(h);
    json_decref(p);
  }
  jk_msg_free(m);
}

static void mock_drain(void *ud) {
  struct mock *mk = ud;
  for (size_t i = 0; i < mk->n_waiting; i++)
    jk_core_handle(mk->core, JK_CH_SHELL, mk->waiting[i]);
  mk->n_waiting = 0;
}

static void mock_shutdown(void *ud, bool restart) {
  struct mock *mk = ud;
  mk->shutdowns++;
  mk->restart = restart;
}

static const struct jk_core_ops mock_ops = {mock_send, mock_drain, mock_shutdown};

static void mock_reset(struct mock *mk) {
  for (size_t i = 0; i < mk->n; i++)
    json_decref(mk->sent[i].content);
  mk->n = 0;
}

/* A request as the wire decoder makes it; takes content. Its msg_id is id. */
static struct jk_msg *request(const char *id, const char *type, json_t *content) {
  struct jk_msg *m = jk_msg_new();
  m->header = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "msg_id", id, "msg_type", type, "session",
                        "client-session", "username", "tester", "date", "2024-01-01T00:00:00Z",
                        "version", "5.3");
  m->parent_header = json_object();
  m->metadata = json_object();
  m->content = content ? content : json_object();
  sl_msg_add_str(&m->idents, "client");
  return m;
}

static struct jk_msg *execute_req(const char *id, const char *code) {
  return request(id, "execute_request", json_pack("{s:s, s:b}", "code", code, "silent", 0));
}

/* Sends one shell request and runs the queue, as the channel loop does. */
static void shell(struct mock *mk, struct jk_msg *m) {
  jk_core_handle(mk->core, JK_CH_SHELL, m);
  jk_core_dispatch(mk->core);
}

/* "busy execute_input execute_result execute_reply idle": the types of the
 * messages caused by request id, in the order sent, status shown as its
 * state. */
static const char *trace(const struct mock *mk, const char *id) {
  static char out[1024];
  size_t n = 0;
  out[0] = '\0';
  for (size_t i = 0; i < mk->n && n < sizeof out - 64; i++) {
    const struct sent *s = &mk->sent[i];
    if (strcmp(s->parent, id) != 0)
      continue;
    const char *word = strcmp(s->type, "status") == 0
                           ? sl_json_get_str(s->content, "execution_state", "?")
                           : s->type;
    n += (size_t)snprintf(out + n, sizeof out - n, "%s%s", n ? " " : "", word);
  }
  return out;
}

/* The first message of type caused by request id, or NULL. */
static const struct sent *find(const struct mock *mk, const char *id, const char *type) {
  for (size_t i = 0; i < mk->n; i++)
    if (strcmp(mk->sent[i].parent, id) == 0 && strcmp(mk->sent[i].type, type) == 0)
      return &mk->sent[i];
  return NULL;
}

static const json_t *content_of(const struct mock *mk, const char *id, const char *type) {
  const struct sent *s = find(mk, id, type);
  return s ? s->content : NULL;
}

/* The stdout text a request caused, concatenated. */
static const char *stdout_of(const struct mock *mk, const char *id) {
  static char out[8192];
  size_t n = 0;
  out[0] = '\0';
  for (size_t i = 0; i < mk->n; i++) {
    const struct sent *s = &mk->sent[i];
    if (strcmp(s->parent, id) == 0 && strcmp(s->type, "stream") == 0 &&
        strcmp(sl_json_get_str(s->content, "name", ""), "stdout") == 0)
      n += (size_t)snprintf(out + n, sizeof out - n, "%s", sl_json_get_str(s->content, "text", ""));
    if (n >= sizeof out)
      break;
  }
  return out;
}

static const char *result_text(const struct mock *mk, const char *id) {
  const json_t *r = content_of(mk, id, "execute_result");
  return sl_json_get_str(json_object_get(r, "data"), "text/plain", NULL);
}

/* ---- tests -------------------------------------------------------------- */

static void test_kernel_info(struct mock *mk) {
  shell(mk, request("ki", "kernel_info_request", NULL));
  CHECK_STR(trace(mk, "ki"), "busy kernel_info_reply idle");
  const struct sent *r = find(mk, "ki", "kernel_info_reply");
  CHECK(r && r->ch == JK_CH_SHELL);
  const json_t *c = r ? r->content : NULL;
  CHECK_STR(sl_json_get_str(c, "status", ""), "ok");
  CHECK_STR(sl_json_get_str(c, "protocol_version", ""), "5.3");
  CHECK_STR(sl_json_get_str(c, "implementation", ""), "spotlab-kernel");
  CHECK_STR(sl_json_get_str(json_object_get(c, "language_info"), "name", ""), "spotlab");
  const struct sent *busy = find(mk, "ki", "status");
  CHECK(busy && busy->ch == JK_CH_IOPUB);
  CHECK_STR(busy ? busy->topic : "", "kernel.test-kernel.status");
  /* the same request on control answers there */
  mock_reset(mk);
  jk_core_handle(mk->core, JK_CH_CONTROL, request("ki2", "kernel_info_request", NULL));
  r = find(mk, "ki2", "kernel_info_reply");
  CHECK(r && r->ch == JK_CH_CONTROL);
  mock_reset(mk);
}

static void test_cells(struct mock *mk) {
  shell(mk, execute_req("e1", "x = 6 * 7"));
  CHECK_STR(trace(mk, "e1"), "busy execute_input execute_reply idle");
  const json_t *in = content_of(mk, "e1", "execute_input");
  CHECK_STR(sl_json_get_str(in, "code", ""), "x = 6 * 7");
  CHECK_INT(sl_json_get_int(in, "execution_count", 0), 1);
  const json_t *rep = content_of(mk, "e1", "execute_reply");
  CHECK_STR(sl_json_get_str(rep, "status", ""), "ok");
  CHECK_INT(sl_json_get_int(rep, "execution_count", 0), 1);

  shell(mk, execute_req("e2", "print \"x is\", x\nx + 1"));
  CHECK_STR(trace(mk, "e2"), "busy execute_input stream execute_result execute_reply idle");
  CHECK_STR(stdout_of(mk, "e2"), "x is 42\n");
  CHECK_STR(result_text(mk, "e2"), "43");
  CHECK_INT(sl_json_get_int(content_of(mk, "e2", "execute_result"), "execution_count", 0), 2);
  CHECK_INT(sl_json_get_int(content_of(mk, "e2", "execute_reply"), "execution_count", 0), 2);

  /* an error: published on iopub and in the reply */
  shell(mk, execute_req("e3", "x = 1\nundefined_name + 1\nx = 2"));
  CHECK_STR(trace(mk, "e3"), "busy execute_input error execute_reply idle");
  const json_t *err = content_of(mk, "e3", "error");
  CHECK_STR(sl_json_get_str(err, "ename", ""), "NameError");
  CHECK(strstr(sl_json_get_str(err, "evalue", ""), "undefined_name") != NULL);
  rep = content_of(mk, "e3", "execute_reply");
  CHECK_STR(sl_json_get_str(rep, "status", ""), "error");
  CHECK_STR(sl_json_get_str(rep, "ename", ""), "NameError");
  CHECK_INT(sl_json_get_int(rep, "execution_count", 0), 3);
  /* the statement before the error ran, the one after did not */
  shell(mk, execute_req("e4", "x"));
  CHECK_STR(result_text(mk, "e4"), "1");

  /* a syntax error runs nothing and shows the line with a caret */
  shell(mk, execute_req("e5", "x = 5\ntrain m"));
  err = content_of(mk, "e5", "error");
  CHECK_STR(sl_json_get_str(err, "ename", ""), "SyntaxError");
  const char *tb0 = json_string_value(json_array_get(json_object_get(err, "traceback"), 0));
  CHECK(tb0 && strstr(tb0, "train m") && strchr(tb0, '^'));
  shell(mk, execute_req("e6", "x"));
  CHECK_STR(result_text(mk, "e6"), "1");

  /* magics: %help lists the language, %help TOPIC one word, %who the names */
  shell(mk, execute_req("m1", "%help"));
  CHECK_STR(trace(mk, "m1"), "busy execute_input stream execute_reply idle");
  const char *help = stdout_of(mk, "m1");
  CHECK(strstr(help, "Statements:") && strstr(help, "train MODEL on DATA") &&
        strstr(help, "%%run") && strstr(help, "steps=N"));
  shell(mk, execute_req("m2", "%help sleep"));
  CHECK(strncmp(stdout_of(mk, "m2"), "sleep DURATION: wait", 20) == 0);
  shell(mk, execute_req("m3", "%help nosuchword"));
  CHECK_STR(sl_json_get_str(content_of(mk, "m3", "error"), "ename", ""), "NameError");
  shell(mk, execute_req("m4", "model m = gpt(layers=2, heads=2, dim=8)\n%who"));
  const char *who = stdout_of(mk, "m4");
  CHECK(strstr(who, "variable  x") && strstr(who, "model     m") && strstr(who, "gpt(layers=2"));

  /* option values are checked against their declarations: spotlab-train's bounds */
  shell(mk, execute_req("v1", "n = 100\nmodel big = gpt(layers=n, heads=2, dim=8)"));
  err = content_of(mk, "v1", "error");
  CHECK_STR(sl_json_get_str(err, "ename", ""), "ValueError");
  CHECK_STR(sl_json_get_str(err, "evalue", ""), "line 2: layers: 100 is out of range [1, 64]");
  /* ... and its own checks: the models have no dropout */
  shell(mk, execute_req("v1b", "model dr = gpt(layers=1, dropout=0.1)"));
  CHECK_STR(sl_json_get_str(content_of(mk, "v1b", "error"), "evalue", ""),
            "line 1: dropout: 0.1: only 0 is supported (the training core has no dropout)");
  shell(mk, execute_req("v2", "model half = mlp(hidden=2.5)"));
  CHECK(strstr(sl_json_get_str(content_of(mk, "v2", "error"), "evalue", ""),
               "hidden: \"2.5\" is not an integer") != NULL);
  /* a string where a number is declared is refused, not sent as text */
  shell(mk, execute_req("v4", "model s = gpt(heads=\"4\", dim=8)"));
  err = content_of(mk, "v4", "error");
  CHECK_STR(sl_json_get_str(err, "ename", ""), "TypeError");
  CHECK_STR(sl_json_get_str(err, "evalue", ""), "line 1: heads takes a number, not \"4\"");
  shell(mk, execute_req("v3", "model ok = mlp(hidden=64, layers=1)\n%who"));
  CHECK(strstr(stdout_of(mk, "v3"), "model     ok") != NULL);

  /* a definition's text of any length (a long file name) */
  {
    char code[2200], want[2100];
    memset(want, 'x', 2000);
    want[2000] = '\0';
    snprintf(code, sizeof code, "data long = text(\"%s\")\n%%who", want);
    shell(mk, execute_req("w1", code));
    const char *listed = stdout_of(mk, "w1");
    CHECK(strstr(listed, want) != NULL && strstr(listed, "\")") != NULL);
  }

  /* a relative data path is the notebook's: taken from the kernel's working
   * directory, and kept absolute; shipped data sets and absolute paths as written */
  {
    char cwd[4096], want[4300];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    shell(mk, execute_req("w2", "data rel = text(\"./notes/corpus.txt\")\n"
                                "data imgs = fashion_mnist(\"images\")\ndata moby = text(\"moby-dick\")\n"
                                "data fm = fashion_mnist(\"fashion-mnist\")\ndata abs = text(\"/srv/c.txt\")\n%who"));
    const char *listed = stdout_of(mk, "w2");
    snprintf(want, sizeof want, "text(\"%s/notes/corpus.txt\")", cwd);
    CHECK(strstr(listed, want) != NULL);
    snprintf(want, sizeof want, "fashion_mnist(\"%s/images\")", cwd);
    CHECK(strstr(listed, want) != NULL);
    CHECK(strstr(listed, "text(\"moby-dick\")") && strstr(listed, "fashion_mnist(\"fashion-mnist\")") &&
          strstr(listed, "text(\"/srv/c.txt\")"));
    setenv("HOME", "/home/ada", 1);
    shell(mk, execute_req("w3", "data home = text(\"~/corpus.txt\")\n%who"));
    CHECK(strstr(stdout_of(mk, "w3"), "text(\"/home/ada/corpus.txt\")") != NULL);
  }

  /* a name is one thing: a variable replaces a model of the same name */
  shell(mk, execute_req("m5", "model k = mlp(hidden=4)\nk = 3\n%who"));
  who = stdout_of(mk, "m5");
  CHECK(strstr(who, "variable  k") && !strstr(who, "model     k"));

  /* statements that need the gateway fail cleanly without one */
  shell(mk, execute_req("g1", "data d = text(\"moby-dick\")\ntrain m on d steps=10"));
  err = content_of(mk, "g1", "error");
  CHECK_STR(sl_json_get_str(err, "ename", ""), "GatewayUnavailable");
  CHECK(strncmp(sl_json_get_str(err, "evalue", ""), "train needs the spotlab gateway", 31) == 0);
  shell(mk, execute_req("g2", "%jobs"));
  CHECK(strncmp(sl_json_get_str(content_of(mk, "g2", "error"), "evalue", ""), "%jobs needs", 11) == 0);
  shell(mk, execute_req("g3", "%%run gpus=1\necho hi"));
  CHECK(strncmp(sl_json_get_str(content_of(mk, "g3", "error"), "evalue", ""), "%%run needs", 11) == 0);
  /* an empty %%run does not parse: no instance is launched for nothing */
  shell(mk, execute_req("g4", "%%run gpus=1\n  \n"));
  CHECK_STR(sl_json_get_str(content_of(mk, "g4", "error"), "evalue", ""),
            "line 1, column 1: %%run has no script: the lines after %%run run on a worker");
  shell(mk, execute_req("g5", "%%run"));
  CHECK_STR(sl_json_get_str(content_of(mk, "g5", "error"), "ename", ""), "SyntaxError");
  mock_reset(mk);
}

static void test_counts(struct mock *mk) {
  /* silent: no output, no count; store_history=false: no count either */
  shell(mk, request("s1", "execute_request", json_pack("{s:s, s:b}", "code", "x", "silent", 1)));
  CHECK_STR(trace(mk, "s1"), "busy execute_reply idle");
  int64_t before = sl_json_get_int(content_of(mk, "s1", "execute_reply"), "execution_count", -1);
  shell(mk, request("s2", "execute_request",
                    json_pack("{s:s, s:b}", "code", "x", "store_history", 0)));
  CHECK_STR(result_text(mk, "s2"), "1");
  CHECK_INT(sl_json_get_int(content_of(mk, "s2", "execute_reply"), "execution_count", -1), before);
  shell(mk, execute_req("s3", "x"));
  CHECK_INT(sl_json_get_int(content_of(mk, "s3", "execute_reply"), "execution_count", -1), before + 1);

  /* user_expressions are evaluated after the cell */
  shell(mk, request("u1", "execute_request",
                    json_pack("{s:s, s:{s:s, s:s}}", "code", "x = 21", "user_expressions", "double",
                              "x * 2", "bad", "nope")));
  const json_t *ue = json_object_get(content_of(mk, "u1", "execute_reply"), "user_expressions");
  CHECK_STR(sl_json_get_str(json_object_get(json_object_get(ue, "double"), "data"), "text/plain", ""), "42");
  CHECK_STR(sl_json_get_str(json_object_get(ue, "bad"), "status", ""), "error");

  /* history_request sees the stored cells */
  shell(mk, request("h1", "history_request",
                    json_pack("{s:s, s:b, s:b, s:i}", "hist_access_type", "tail", "output", 0, "raw", 1,
                              "n", 1)));
  const json_t *hist = json_object_get(content_of(mk, "h1", "history_reply"), "history");
  CHECK_INT(json_array_size(hist), 1);
  CHECK_STR(json_string_value(json_array_get(json_array_get(hist, 0), 2)), "x = 21");
  mock_reset(mk);
}

static void test_stop_on_error(struct mock *mk) {
  /* Requests still on the socket when a cell fails are drained and aborted;
   * a non-execute request among them still runs. */
  jk_core_handle(mk->core, JK_CH_SHELL, execute_req("a1", "boom + 1"));
  mk->waiting[mk->n_waiting++] = execute_req("a2", "z = 1");
  mk->waiting[mk->n_waiting++] = request("a3", "kernel_info_request", NULL);
  mk->waiting[mk->n_waiting++] = execute_req("a4", "z");
  jk_core_dispatch(mk->core);
  CHECK_INT(mk->n_waiting, 0);
  CHECK_STR(trace(mk, "a1"), "busy execute_input error execute_reply idle");
  CHECK_STR(trace(mk, "a2"), "busy execute_reply idle");
  CHECK_STR(sl_json_get_str(content_of(mk, "a2", "execute_reply"), "status", ""), "aborted");
  CHECK_STR(sl_json_get_str(content_of(mk, "a4", "execute_reply"), "status", ""), "aborted");
  CHECK_STR(trace(mk, "a3"), "busy kernel_info_reply idle");
  /* z was never set */
  shell(mk, execute_req("a5", "z"));
  CHECK_STR(sl_json_get_str(content_of(mk, "a5", "error"), "ename", ""), "NameError");

  /* stop_on_error=false: the next request runs */
  mock_reset(mk);
  jk_core_handle(mk->core, JK_CH_SHELL,
                 request("b1", "execute_request", json_pack("{s:s, s:b}", "code", "boom", "stop_on_error", 0)));
  mk->waiting[mk->n_waiting++] = execute_req("b2", "z = 2\nz");
  jk_core_dispatch(mk->core);
  CHECK_INT(mk->n_waiting, 1);
  mock_drain(mk);
  jk_core_dispatch(mk->core);
  CHECK_STR(result_text(mk, "b2"), "2");
  mock_reset(mk);

  /* a cell holding a NUL fails as a whole: nothing of it runs, not even
   * what comes before the NUL */
  shell(mk, request("c1", "execute_request",
                    json_loads("{\"code\": \"x = 1\\n\\u00e9 = 7\\u0000\\nz = 8\"}", JSON_ALLOW_NUL, NULL)));
  CHECK_STR(trace(mk, "c1"), "busy execute_input error execute_reply idle");
  CHECK_STR(sl_json_get_str(content_of(mk, "c1", "error"), "ename", ""), "SyntaxError");
  /* where, as any SyntaxError says it: line 2, after "é = 7" (5 code points) */
  CHECK_STR(sl_json_get_str(content_of(mk, "c1", "error"), "evalue", ""),
            "line 2, column 6: the cell holds a NUL character (\\u0000)");
  shell(mk, execute_req("c2", "z"));
  CHECK_STR(result_text(mk, "c2"), "2");
  mock_reset(mk);
}

static void test_complete_inspect(struct mock *mk) {
  shell(mk, request("c1", "complete_request", json_pack("{s:s, s:i}", "code", "pri", "cursor_pos", 3)));
  CHECK_STR(trace(mk, "c1"), "busy complete_reply idle");
  const json_t *c = content_of(mk, "c1", "complete_reply");
  CHECK_INT(json_array_size(json_object_get(c, "matches")), 1);
  CHECK_STR(json_string_value(json_array_get(json_object_get(c, "matches"), 0)), "print");
  CHECK_INT(sl_json_get_int(c, "cursor_start", -1), 0);
  CHECK_INT(sl_json_get_int(c, "cursor_end", -1), 3);
  /* notebook names complete after show; magics after % */
  shell(mk, request("c2", "complete_request", json_pack("{s:s, s:i}", "code", "show ", "cursor_pos", 5)));
  const json_t *m = json_object_get(content_of(mk, "c2", "complete_reply"), "matches");
  bool has_x = false, has_m = false;
  for (size_t i = 0; i < json_array_size(m); i++) {
    has_x |= strcmp(json_string_value(json_array_get(m, i)), "x") == 0;
    has_m |= strcmp(json_string_value(json_array_get(m, i)), "m") == 0;
  }
  CHECK(has_x && has_m);
  shell(mk, request("c3", "complete_request", json_pack("{s:s, s:i}", "code", "%hi", "cursor_pos", 3)));
  m = json_object_get(content_of(mk, "c3", "complete_reply"), "matches");
  CHECK_INT(json_array_size(m), 1);
  CHECK_STR(json_string_value(json_array_get(m, 0)), "%history");
  shell(mk, request("c4", "complete_request", json_pack("{s:s, s:i}", "code", "model q = ", "cursor_pos", 10)));
  m = json_object_get(content_of(mk, "c4", "complete_reply"), "matches");
  CHECK_INT(json_array_size(m), 2);
  CHECK_STR(json_string_value(json_array_get(m, 0)), "gpt");
  CHECK_STR(json_string_value(json_array_get(m, 1)), "mlp");

  /* inspect: a notebook name wins; keywords and magics have help */
  shell(mk, request("i1", "inspect_request", json_pack("{s:s, s:i}", "code", "print x", "cursor_pos", 7)));
  CHECK_STR(trace(mk, "i1"), "busy inspect_reply idle");
  c = content_of(mk, "i1", "inspect_reply");
  CHECK(json_is_true(json_object_get(c, "found")));
  CHECK_STR(sl_json_get_str(json_object_get(c, "data"), "text/plain", ""), "x = 21\n\nA notebook variable.");
  shell(mk, request("i2", "inspect_request", json_pack("{s:s, s:i}", "code", "show m", "cursor_pos", 6)));
  c = content_of(mk, "i2", "inspect_reply");
  CHECK(strstr(sl_json_get_str(json_object_get(c, "data"), "text/plain", ""), "A model of this notebook session."));
  shell(mk, request("i3", "inspect_request", json_pack("{s:s, s:i}", "code", "%attach J1", "cursor_pos", 2)));
  c = content_of(mk, "i3", "inspect_reply");
  CHECK(strncmp(sl_json_get_str(json_object_get(c, "data"), "text/plain", ""), "%attach JOB: follow a job", 25) == 0);
  shell(mk, request("i4", "inspect_request", json_pack("{s:s, s:i}", "code", "qqq", "cursor_pos", 1)));
  CHECK(json_is_false(json_object_get(content_of(mk, "i4", "inspect_reply"), "found")));

  static const char *const codes[] = {"print (", "x = 1", "x = = 1"};
  static const char *const want[] = {"incomplete", "complete", "invalid"};
  for (int i = 0; i < 3; i++) {
    char id[16];
    snprintf(id, sizeof id, "ic%d", i);
    shell(mk, request(id, "is_complete_request", json_pack("{s:s}", "code", codes[i])));
    CHECK_STR(sl_json_get_str(content_of(mk, id, "is_complete_reply"), "status", ""), want[i]);
  }
  mock_reset(mk);
}

static void test_input(struct mock *mk) {
  shell(mk, execute_req("n1", "who = input(\"name? \")\nprint \"hi\", who"));
  CHECK_STR(trace(mk, "n1"), "busy execute_input input_request");
  const struct sent *ir = find(mk, "n1", "input_request");
  CHECK(ir && ir->ch == JK_CH_STDIN);
  CHECK_STR(sl_json_get_str(ir ? ir->content : NULL, "prompt", ""), "name? ");
  CHECK(json_is_false(json_object_get(ir ? ir->content : NULL, "password")));
  /* control requests are answered while the cell waits */
  jk_core_handle(mk->core, JK_CH_CONTROL, request("n2", "kernel_info_request", NULL));
  CHECK_STR(trace(mk, "n2"), "busy kernel_info_reply idle");
  /* so is is_complete on shell (out of turn, so without a status of its
   * own), and the waiting cell goes on */
  shell(mk, request("n2c", "is_complete_request", json_pack("{s:s}", "code", "x = 1")));
  CHECK_STR(trace(mk, "n2c"), "is_complete_reply");
  CHECK_STR(sl_json_get_str(content_of(mk, "n2c", "is_complete_reply"), "status", ""), "complete");
  CHECK_STR(trace(mk, "n1"), "busy execute_input input_request");
  jk_core_handle(mk->core, JK_CH_STDIN, request("n3", "input_reply", json_pack("{s:s}", "value", "ada")));
  CHECK_STR(trace(mk, "n1"), "busy execute_input input_request stream execute_reply idle");
  CHECK_STR(stdout_of(mk, "n1"), "hi ada\n");
  /* a front end without stdin gets an error, not a hang */
  shell(mk, request("n4", "execute_request",
                    json_pack("{s:s, s:b}", "code", "p = password(\"key\")", "allow_stdin", 0)));
  CHECK_STR(sl_json_get_str(content_of(mk, "n4", "error"), "ename", ""), "StdinNotImplemented");
  mock_reset(mk);
}

static void test_sleep_interrupt(struct mock *mk) {
  /* A sleep leaves the cell pending; interrupt ends it with an error, the
   * statement after it never runs, and the queue moves on. */
  int64_t t0 = sl_time_mono_us();
  jk_core_handle(mk->core, JK_CH_SHELL,
                 request("z1", "execute_request", json_pack("{s:s, s:b}", "code", "sleep 30s\nw = 1",
                                                            "stop_on_error", 0)));
  jk_core_handle(mk->core, JK_CH_SHELL, execute_req("z2", "w = 2\nw"));
  jk_core_dispatch(mk->core);
  CHECK_STR(trace(mk, "z1"), "busy execute_input");
  /* while it sleeps the queue fills; a request past its room is answered at once */
  for (int i = 1; i < 1024; i++) {
    char id[16];
    snprintf(id, sizeof id, "q%d", i);
    jk_core_handle(mk->core, JK_CH_SHELL, request(id, "kernel_info_request", NULL));
  }
  jk_core_handle(mk->core, JK_CH_SHELL, request("full", "kernel_info_request", NULL));
  CHECK_STR(trace(mk, "full"), "busy kernel_info_reply idle");
  CHECK_STR(sl_json_get_str(content_of(mk, "full", "kernel_info_reply"), "ename", ""), "BadMessage");
  CHECK_STR(trace(mk, "q1"), "");
  CHECK_STR(trace(mk, "z2"), "");
  int64_t wake = jk_core_wake_at_us(mk->core);
  CHECK(wake >= t0 + 29 * 1000000LL && wake <= sl_time_mono_us() + 30 * 1000000LL);
  jk_core_tick(mk->core); /* too early: still sleeping */
  CHECK_STR(trace(mk, "z1"), "busy execute_input");

  jk_core_handle(mk->core, JK_CH_CONTROL, request("int", "interrupt_request", NULL));
  CHECK_STR(trace(mk, "z1"), "busy execute_input error execute_reply idle");
  CHECK_STR(trace(mk, "int"), "busy interrupt_reply idle");
  const struct sent *ir = find(mk, "int", "interrupt_reply");
  CHECK(ir && ir->ch == JK_CH_CONTROL);
  const json_t *err = content_of(mk, "z1", "execute_reply");
  CHECK_STR(sl_json_get_str(err, "ename", ""), "Interrupted");
  CHECK(strstr(sl_json_get_str(err, "evalue", ""), "while sleeping at line 1") != NULL);
  CHECK(jk_core_wake_at_us(mk->core) == INT64_MAX);
  jk_core_dispatch(mk->core);
  CHECK_STR(result_text(mk, "z2"), "2");
  /* the interrupted reply went out before the next cell started */
  const struct sent *r1 = find(mk, "z1", "execute_reply"), *b2 = find(mk, "z2", "status");
  CHECK(r1 && b2 && r1 < b2);

  /* a short sleep ends by itself: wait for its reply, with a deadline */
  mock_reset(mk);
  shell(mk, execute_req("z3", "sleep 20ms\nv = 3\nv"));
  int64_t deadline = sl_time_mono_us() + 5 * 1000000LL;
  while (!find(mk, "z3", "execute_reply") && sl_time_mono_us() < deadline) {
    int64_t at = jk_core_wake_at_us(mk->core), now = sl_time_mono_us();
    if (at > now)
      usleep((useconds_t)(at - now < 100000 ? at - now : 100000));
    jk_core_tick(mk->core);
  }
  CHECK_STR(trace(mk, "z3"), "busy execute_input execute_result execute_reply idle");
  CHECK_STR(result_text(mk, "z3"), "3");
  mock_reset(mk);
}

static void test_other_requests(struct mock *mk) {
  shell(mk, request("o1", "frobnicate_request", NULL));
  CHECK_STR(trace(mk, "o1"), "busy frobnicate_reply idle");
  CHECK_STR(sl_json_get_str(content_of(mk, "o1", "frobnicate_reply"), "ename", ""), "UnsupportedRequest");
  shell(mk, request("o2", "comm_info_request", NULL));
  CHECK(json_is_object(json_object_get(content_of(mk, "o2", "comm_info_reply"), "comms")));
  jk_core_reject(mk->core, JK_CH_SHELL, request("o3", "execute_request", NULL), "content is not JSON");
  CHECK_STR(sl_json_get_str(content_of(mk, "o3", "execute_reply"), "ename", ""), "BadMessage");
  shell(mk, execute_req("o5", "%session other\n%status"));
  const char *status = stdout_of(mk, "o5");
  CHECK(strncmp(status, "notebook session: other\n", 24) == 0);
  CHECK(strstr(status, "\nsession    other\n") && strstr(status, ", id test-kernel\n"));
  CHECK(strstr(status, "\ngateway    none configured"));
  /* without an argument, %session and %gateway show what is in use */
  shell(mk, execute_req("o6", "%session\n%gateway"));
  CHECK_STR(stdout_of(mk, "o6"), "notebook session: other\ngateway: none\n");
  jk_core_handle(mk->core, JK_CH_CONTROL,
                 request("o4", "shutdown_request", json_pack("{s:b}", "restart", 1)));
  CHECK_STR(trace(mk, "o4"), "busy shutdown_reply idle");
  CHECK_INT(mk->shutdowns, 1);
  CHECK(mk->restart);
  mock_reset(mk);
}

int main(void) {
  unsetenv("SPOTLAB_GATEWAY");
  static struct mock mk;
  struct jk_core_config cfg = {"test-kernel", "test-notebook", NULL, false, NULL, false};
  mk.core = jk_core_new(&mock_ops, &mk, &cfg);
  CHECK(mk.core != NULL);
  if (!mk.core)
    TEST_MAIN_END();
  test_kernel_info(&mk);
  test_cells(&mk);
  test_counts(&mk);
  test_stop_on_error(&mk);
  test_complete_inspect(&mk);
  test_input(&mk);
  test_sleep_interrupt(&mk);
  test_other_requests(&mk);
  mk.core = jk_core_free(mk.core);
  mock_reset(&mk);
  TEST_MAIN_END();
}
