/* Fuzz target: the kernel's side of the gateway protocol: the message core
 * and interpreter (kernel/core.c, interp.c, jobs.c, session.c) running a
 * cell while the gateway's answers and events arrive (client/gwclient.c),
 * rendered into the notebook's output.
 *
 * The first input byte chooses the cell (its value modulo the cells below:
 * a train job with its definitions, a %%run job, the magics that ask the
 * gateway, and a train job on a data file of 2500 bytes that the gateway
 * may ask the kernel to upload); the rest is gateway frames split at
 * "\n--\n", in which "@DATA@" stands for that file's path. The target
 * answers the kernel's hello itself; a frame that is a JSON reply without
 * "re" (or with "re": 0) answers the oldest of the kernel's requests not yet
 * answered (a data.put among them, whose bytes come as a second frame), so
 * replies reach the code that reads them. After each frame the kernel's timers run.
 * Everything the kernel publishes must encode as a Jupyter message (its
 * JSON holds only UTF-8), and an error it shows must say why. No input may crash, leak or hit undefined
 * behaviour. */
#include "core.h"
#include "sl_hmac.h"
#include "sl_json.h"
#include "wire.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint8_t key[] = "fuzz-key";

#define DATA_BYTES 2500
static char home[] = "/tmp/fuzz-kgw-XXXXXX";
static char data_path[64];
static char upload_cell[256];

static const char *const cells[] = {
    ("data t = text(\"moby-dick\")\nmodel m = gpt(layers=1, heads=1, dim=8, ctx=8)\n"
     "train m on t steps=10 batch=2"), /* one cell of two lines (parentheses: on purpose) */
    "%%run\necho hello",
    "%jobs",
    "%status",
    "%cost",
    "%instances",
    "%logs J000001",
    "%budget",
    "%show J000001",
    upload_cell,
};
#define N_CELLS (sizeof cells / sizeof *cells)

struct fake {
  struct jk_auth *auth;
  int64_t hello_id, hello_answered;
  int64_t asked[256];            /* requests not yet answered, oldest first */
  size_t n_asked;
  bool bytes_next;               /* the next frame is a data.put's bytes */
};

/* What the kernel sends its front ends: each message must encode, and an
 * error must say what went wrong (an "Error" without a value is the
 * fallback for an error that could not be made, its text not UTF-8). */
static void sent(void *ud, enum jk_channel ch, struct jk_msg *m) {
  struct fake *f = ud;
  (void)ch;
  if (!strcmp(sl_json_get_str(m->content, "ename", ""), "Error") &&
      !*sl_json_get_str(m->content, "evalue", "x"))
    abort();
  struct sl_msg out;
  sl_msg_init(&out, (struct sl_limits){64, 64u << 20, 256u << 20});
  if (jk_wire_encode(f->auth, m, &out) < 0)
    abort();
  sl_msg_done(&out);
  jk_msg_free(m);
}
static void nothing(void *ud) { (void)ud; }
static void no_stop(void *ud, bool restart) { /* a shutdown_request: nothing here to stop */
  (void)ud;
  (void)restart;
}
static const struct jk_core_ops core_ops = {sent, nothing, no_stop};

/* The gateway socket: requests are read for their ids. */
static struct fake *the_fake;
static int gw_open(void *ud, const char *address) {
  (void)ud;
  (void)address;
  return 0;
}
static void gw_close(void *ud) { (void)ud; }
static int gw_send(void *ud, const char *data, size_t len) {
  (void)ud;
  if (the_fake->bytes_next) {
    the_fake->bytes_next = false;
    return 0;
  }
  json_t *req = NULL;
  if (sl_json_parse(data, len, 64, &req, NULL, 0) < 0 || !json_is_object(req))
    abort(); /* the kernel sends JSON objects only */
  int64_t id = sl_json_get_int(req, "id", 0);
  if (!strcmp(sl_json_get_str(req, "type", ""), "hello"))
    the_fake->hello_id = id;
  else if (the_fake->n_asked < sizeof the_fake->asked / sizeof *the_fake->asked)
    the_fake->asked[the_fake->n_asked++] = id;
  json_decref(req);
  return 0;
}
/* A data.put's JSON frame: its bytes follow. */
static int gw_send_more(void *ud, const char *data, size_t len) {
  int r = gw_send(ud, data, len);
  the_fake->bytes_next = true;
  return r;
}
static const struct jk_core_gw_ops gw_ops = {gw_open, gw_close, gw_send, gw_send_more};

/* An execute_request of code, as a front end sends it. */
static struct jk_msg *execute_request(struct jk_auth *auth, const char *code) {
  json_t *header = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "msg_id", "m1", "session", "s1",
                             "username", "u", "date", "2026-11-29T00:00:00Z", "msg_type",
                             "execute_request", "version", "5.3");
  json_t *content = json_pack("{s:s, s:b, s:b, s:{}, s:b, s:b}", "code", code, "silent", 0,
                              "store_history", 1, "user_expressions", "allow_stdin", 0,
                              "stop_on_error", 1);
  char *parts[4] = {sl_json_dump(header, NULL), strdup("{}"), strdup("{}"),
                    sl_json_dump(content, NULL)};
  json_decref(header);
  json_decref(content);
  struct sl_msg frames;
  sl_msg_init(&frames, (struct sl_limits){64, 1 << 20, 4 << 20});
  struct sl_span s[4];
  for (int k = 0; k < 4; k++) {
    if (!parts[k])
      abort();
    s[k] = (struct sl_span){(const uint8_t *)parts[k], strlen(parts[k])};
  }
  char hex[SL_HMAC_HEX_LEN + 1];
  sl_hmac_sha256_hex(key, sizeof key - 1, s, 4, hex);
  sl_msg_add(&frames, "front-end", 9);
  sl_msg_add(&frames, "<IDS|MSG>", 9);
  sl_msg_add(&frames, hex, SL_HMAC_HEX_LEN);
  for (int k = 0; k < 4; k++) {
    sl_msg_add(&frames, parts[k], strlen(parts[k]));
    free(parts[k]);
  }
  struct jk_msg *msg = NULL;
  char err[256];
  struct jk_wire_limits lim = {32};
  if (jk_wire_decode(auth, &frames, &lim, &msg, err, sizeof err) < 0)
    abort();
  sl_msg_done(&frames);
  return msg;
}

/* The kernel's timers run (its connection attempts among them), and a
 * hello it sent is answered. */
static void run_timers(struct jk_core *core) {
  for (int i = 0; i < 4; i++) {
    jk_core_tick(core);
    jk_core_dispatch(core);
    if (the_fake->hello_id == the_fake->hello_answered)
      return;
    char hello[160];
    the_fake->hello_answered = the_fake->hello_id;
    snprintf(hello, sizeof hello,
             "{\"type\":\"reply\",\"re\":%lld,\"ok\":true,\"user\":\"u\",\"auth\":\"a\"}",
             (long long)the_fake->hello_id);
    jk_core_gateway_input(core, hello, strlen(hello));
  }
}

/* A reply without "re" answers the oldest request not yet answered. */
static void gateway_frame(struct jk_core *core, const char *frame, size_t len) {
  /* "@DATA@" stands for the data file's path */
  static char buf[1 << 16];
  const char *p = frame;
  const char *at = len < sizeof buf / 2 ? memmem(frame, len, "@DATA@", 6) : NULL;
  if (at) {
    int n = snprintf(buf, sizeof buf, "%.*s%s%.*s", (int)(at - frame), frame, data_path,
                     (int)(len - (size_t)(at - frame) - 6), at + 6);
    p = buf;
    len = (size_t)n;
  }
  json_t *v = NULL;
  if (sl_json_parse(p, len, 32, &v, NULL, 0) == 0 && json_is_object(v) &&
      !strcmp(sl_json_get_str(v, "type", ""), "reply") && sl_json_get_int(v, "re", 0) == 0) {
    int64_t re = 0;
    if (the_fake->n_asked) {
      re = the_fake->asked[0];
      memmove(the_fake->asked, the_fake->asked + 1, --the_fake->n_asked * sizeof *the_fake->asked);
    }
    json_object_set_new(v, "re", json_integer(re));
    char *text = sl_json_dump(v, NULL);
    if (text)
      jk_core_gateway_input(core, text, strlen(text));
    free(text);
  } else {
    jk_core_gateway_input(core, p, len);
  }
  json_decref(v);
  run_timers(core);
}

static void remove_home(void) {
  unlink(data_path);
  rmdir(home);
}

static void setup_once(void) {
  static bool done;
  if (done)
    return;
  done = true;
  if (!mkdtemp(home) || atexit(remove_home) != 0)
    abort();
  snprintf(data_path, sizeof data_path, "%s/data.txt", home);
  snprintf(upload_cell, sizeof upload_cell,
           "data u = text(\"%s\")\nmodel m = gpt(layers=1, heads=1, dim=8, ctx=8)\n"
           "train m on u steps=10 batch=2", data_path);
  FILE *df = fopen(data_path, "w");
  for (int i = 0; df && i < DATA_BYTES; i++)
    fputc("call me Ishmael. "[i % 17], df);
  if (!df || fclose(df) != 0)
    abort();
  setenv("SPOTLAB_HOME", home, 1);
  setenv("SPOTLAB_GATEWAY", "tcp://127.0.0.1:9", 1); /* an explicit one: never started */
  setenv("SPOTLAB_TOKEN", "fuzz", 1);
  unsetenv("JUPYTERHUB_API_TOKEN");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  setup_once();
  struct fake f = {.auth = jk_auth_new(key, sizeof key - 1, 16)};
  the_fake = &f;
  struct jk_core_config cfg = {"fuzz", "nb", NULL, false, NULL, false};
  struct jk_core *core = jk_core_new(&core_ops, &f, &cfg);
  if (!core || jk_core_set_gateway(core, &gw_ops) < 0)
    abort();
  jk_core_handle(core, JK_CH_SHELL, execute_request(f.auth, cells[data[0] % N_CELLS]));
  jk_core_dispatch(core);
  run_timers(core);
  const char *p = (const char *)data + 1, *end = (const char *)data + size;
  while (p < end) {
    const char *sep = memmem(p, (size_t)(end - p), "\n--\n", 4);
    size_t len = sep ? (size_t)(sep - p) : (size_t)(end - p);
    gateway_frame(core, p, len);
    p = sep ? sep + 4 : end;
  }
  jk_core_interrupt(core);
  jk_core_dispatch(core);
  jk_core_free(core);
  jk_auth_free(f.auth);
  return 0;
}
