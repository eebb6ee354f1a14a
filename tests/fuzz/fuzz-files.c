/* Fuzz target: the plain files spotlab writes and reads back itself, as a
 * crash mid-write, a full disk or a hand edit may leave them (what the
 * gateway keeps in its SQLite store is the target store's). The first byte
 * chooses (modulo 3):
 *
 * 0  the kernel's execution history (history.h). Then a query byte (below),
 *    then the notebook's history file, optionally followed by "\n--\n" and
 *    the cell the kernel adds (used when it is UTF-8 without NUL, else
 *    "x = 1"). The file goes into a fresh folder; the history opens it,
 *    adds the cell as line 7, answers history_requests of every access
 *    type (tail, range, search with the byte's pattern, unique, output),
 *    switches to another notebook and back, and answers again. Every
 *    answer must be an array of well-formed entries that encodes as JSON
 *    (so its strings are UTF-8); the cell added is the newest entry, and
 *    after the switch back it is read from the file under its session.
 *
 * 1  the gateway's key file (keys.h): a byte (K_* below: the file 0644,
 *    none at all, or a FIFO in its place), then the file.
 *    gw_keys_load_or_create reads it: a refusal has a message, leaves the
 *    keys unwritten and the file as it was (a FIFO is refused at once); what loads is two 40-character Z85 keys of one pair (the public
 *    key is the secret's) from a file only its owner reads, not rewritten,
 *    and loads again the same. A missing file is made (0600) and loads.
 *
 * 2  the client's token file, $SPOTLAB_HOME/token (gwclient.h): a byte
 *    (T_* below: SPOTLAB_TOKEN set but empty; no file), then the file. A
 *    client with a recording transport sends its hello to an explicit
 *    address: exactly one hello goes out, with the file's first line up to
 *    the first blank, NUL or its 4095th byte as token, or "" when there is
 *    none or it is not UTF-8.
 *
 * Each input gets its own folder under $TMPDIR (/dev/shm when unset),
 * removed after it, so a failure replays from its file alone. Nothing may
 * crash, leak, hang or hit undefined behaviour, whatever the bytes. */
#include "fuzz.h"

#include "gwclient.h"
#include "history.h"
#include "keys.h"

#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"

#include <fcntl.h>
#include <jansson.h>
#include <stddef.h>
#include <sys/stat.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SEP "\n--\n"
#define CELL_LINE 7

/* ---- 0: the kernel's history ---- */

enum {
  Q_N = 0x0f,      /* n of tail and search (15: -1) */
  Q_OUTPUT = 1 << 4,
  Q_UNIQUE = 1 << 5,
  Q_PATTERN = 3 << 6, /* the search pattern: "*", "x*", the cell, "*[" */
};

/* Whether e is [session, line, input] (or [session, line, [input, null]]). */
static bool entry_ok(const json_t *e, bool output) {
  if (!json_is_array(e) || json_array_size(e) != 3)
    return false;
  const json_t *s = json_array_get(e, 0), *l = json_array_get(e, 1), *in = json_array_get(e, 2);
  if (!json_is_integer(s) || json_integer_value(s) <= 0 || !json_is_integer(l) ||
      json_integer_value(l) <= 0)
    return false;
  if (output)
    return json_is_array(in) && json_array_size(in) == 2 &&
           json_is_string(json_array_get(in, 0)) && json_is_null(json_array_get(in, 1));
  return json_is_string(in);
}

static const char *entry_input(const json_t *e) {
  const json_t *in = json_array_get(e, 2);
  return json_string_value(json_is_array(in) ? json_array_get(in, 0) : in);
}

/* The answer to request (taken): checked, returned owned. */
static json_t *query(struct jk_history *h, json_t *req) {
  json_t *out = jk_history_query(h, req);
  bool output = json_is_true(json_object_get(req, "output"));
  if (!json_is_array(out))
    abort();
  size_t i;
  json_t *e;
  json_array_foreach(out, i, e) {
    if (!entry_ok(e, output))
      abort();
  }
  char *text = json_dumps(out, 0);
  if (!text)
    abort(); /* a string that is not UTF-8 */
  free(text);
  json_decref(req);
  return out;
}

/* Whether the answer has [session, line, cell]. */
static bool has(const json_t *out, int64_t session, int64_t line, const char *cell) {
  size_t i;
  json_t *e;
  json_array_foreach(out, i, e) {
    if (json_integer_value(json_array_get(e, 0)) == session &&
        json_integer_value(json_array_get(e, 1)) == line && !strcmp(entry_input(e), cell))
      return true;
  }
  return false;
}

static void queries(struct jk_history *h, uint8_t q, const char *cell) {
  json_t *o = json_boolean(q & Q_OUTPUT);
  int n = (q & Q_N) == Q_N ? -1 : q & Q_N;
  static const char *const patterns[] = {"*", "x*", NULL, "*["};
  const char *pattern = patterns[(q & Q_PATTERN) >> 6];
  json_decref(query(h, json_pack("{s:s,s:O,s:i}", "hist_access_type", "tail", "output", o, "n",
                                 n)));
  json_decref(query(h, json_pack("{s:s,s:O}", "hist_access_type", "tail", "output", o)));
  json_decref(query(h, json_pack("{s:s,s:O,s:i,s:i,s:i}", "hist_access_type", "range", "output",
                                 o, "session", 0, "start", 1, "stop", 0)));
  json_decref(query(h, json_pack("{s:s,s:O,s:i,s:I,s:I}", "hist_access_type", "range", "output",
                                 o, "session", -1, "start", (json_int_t)INT64_MIN, "stop",
                                 (json_int_t)INT64_MAX)));
  json_decref(query(h, json_pack("{s:s,s:O,s:I}", "hist_access_type", "range", "output", o,
                                 "session", (json_int_t)INT64_MIN)));
  json_decref(query(h, json_pack("{s:s,s:O,s:s,s:i,s:b}", "hist_access_type", "search", "output",
                                 o, "pattern", pattern ? pattern : cell, "n", n, "unique",
                                 (q & Q_UNIQUE) != 0)));
  json_decref(query(h, json_pack("{s:s,s:O,s:s,s:b}", "hist_access_type", "search", "output", o,
                                 "pattern", "*", "unique", 1)));
  json_decref(query(h, json_pack("{s:s}", "hist_access_type", "none")));
  json_decref(query(h, json_pack("{s:i,s:s}", "hist_access_type", 3, "n", "x")));
  json_decref(o);
}

static void fuzz_history(const uint8_t *data, size_t size) {
  if (size < 1)
    return;
  uint8_t q = data[0];
  data++;
  size--;
  const uint8_t *sep = memmem(data, size, SEP, 4);
  size_t file_n = sep ? (size_t)(sep - data) : size;
  char *cell = NULL;
  if (sep) {
    const uint8_t *c = sep + 4;
    size_t n = size - file_n - 4;
    json_t *s = memchr(c, 0, n) ? NULL : json_stringn((const char *)c, n); /* NULL: not UTF-8 */
    if (s)
      cell = strdup(json_string_value(s));
    json_decref(s);
  }
  if (!cell)
    cell = strdup("x = 1");
  if (!cell)
    abort();
  char dir[256], path[300];
  fuzz_make_dir(dir, sizeof dir, "files");
  snprintf(path, sizeof path, "%s/nb.jsonl", dir);
  fuzz_write_file(path, data, file_n);

  struct jk_history *h = jk_history_open(dir, "nb");
  if (!h)
    abort();
  int64_t session = jk_history_session(h);
  if (session <= 0)
    abort();
  queries(h, q, cell);
  int r = jk_history_add(h, CELL_LINE, cell);
  if (r < 0 && strlen(cell) <= 256 * 1024)
    abort(); /* a small cell always goes in (its folder is writable) */
  if (r == 0) {
    json_t *tail = query(h, json_pack("{s:s,s:i}", "hist_access_type", "tail", "n", 1));
    json_t *range = query(h, json_pack("{s:s,s:i,s:i,s:i}", "hist_access_type", "range",
                                       "session", 0, "start", CELL_LINE, "stop", CELL_LINE + 1));
    if (json_array_size(tail) != 1 || !has(tail, session, CELL_LINE, cell) ||
        !has(range, session, CELL_LINE, cell))
      abort(); /* the cell added is the newest entry */
    json_decref(tail);
    json_decref(range);
  }
  queries(h, q, cell);
  if (jk_history_switch(h, "other notebook") < 0)
    abort();
  json_t *other = query(h, json_pack("{s:s,s:i}", "hist_access_type", "tail", "n", 1000));
  if (json_array_size(other) != 0 || jk_history_session(h) != 1)
    abort(); /* another notebook's history is its own */
  json_decref(other);
  if (jk_history_switch(h, "nb") < 0)
    abort();
  if (r == 0) {
    /* read back from the file: the cell under the session it ran in, and
     * the next kernel's session after it */
    json_t *range = query(h, json_pack("{s:s,s:I,s:i,s:i}", "hist_access_type", "range",
                                       "session", (json_int_t)session, "start", CELL_LINE,
                                       "stop", CELL_LINE + 1));
    if (!has(range, session, CELL_LINE, cell) ||
        (jk_history_session(h) <= session && session < INT64_MAX))
      abort(); /* session numbers that reached the end stay there */
    json_decref(range);
  }
  queries(h, q, cell);
  jk_history_free(h);
  free(cell);
  fuzz_remove_dir(dir);
}

/* ---- 1: the gateway's key file ---- */

enum {
  K_OPEN = 1 << 0,    /* the file readable by others (0644) */
  K_MISSING = 1 << 1, /* no file: one is made, then read again */
  K_FIFO = 1 << 2,    /* a FIFO in the file's place, which no writer opens */
};

/* A well-formed Z85 CURVE key: 40 characters that decode. */
static bool z85_key_ok(const char *k) {
  uint8_t bin[32];
  return strnlen(k, GW_Z85_KEY_LEN + 1) == GW_Z85_KEY_LEN && zmq_z85_decode(bin, k);
}

/* The file's bytes, owned, in *ret (length *ret_n). */
static void read_back(const char *path, uint8_t **ret, size_t *ret_n) {
  FILE *f = fopen(path, "rb");
  uint8_t *p = NULL;
  size_t n = 0;
  if (!f || fseek(f, 0, SEEK_END) < 0 || (n = (size_t)ftell(f), fseek(f, 0, SEEK_SET) < 0) ||
      !(p = malloc(n + 1)) || fread(p, 1, n, f) != n)
    abort();
  fclose(f);
  *ret = p;
  *ret_n = n;
}

static void fuzz_keys(const uint8_t *data, size_t size) {
  if (size < 1)
    return;
  unsigned flags = data[0];
  data++;
  size--;
  char dir[256], path[300];
  fuzz_make_dir(dir, sizeof dir, "files");
  snprintf(path, sizeof path, "%s/gateway.key", dir);
  struct gw_keypair k, unset;
  memset(&unset, 'U', sizeof unset);
  k = unset;
  char err[512];
  memset(err, 0, sizeof err);
  if (flags & K_FIFO) { /* refused at once, not waited on */
    if (mkfifo(path, 0600) < 0)
      abort();
    if (gw_keys_load_or_create(path, &k, err, sizeof err) >= 0 || !err[0] ||
        memcmp(&k, &unset, sizeof k))
      abort();
    fuzz_remove_dir(dir);
    return;
  }
  if (!(flags & K_MISSING)) {
    fuzz_write_file(path, data, size);
    if (chmod(path, flags & K_OPEN ? 0644 : 0600) < 0)
      abort();
  }
  int r = gw_keys_load_or_create(path, &k, err, sizeof err);
  struct stat st;
  if (stat(path, &st) < 0)
    abort(); /* a file that was there stays, a missing one is made */
  uint8_t *after;
  size_t after_n;
  read_back(path, &after, &after_n);
  if (r < 0) {
    /* refused with a message, the keys not written, the file left as it was */
    if (!err[0] || !memchr(err, 0, sizeof err) || memcmp(&k, &unset, sizeof k) ||
        flags & K_MISSING || after_n != size || (size && memcmp(after, data, size)))
      abort();
  } else {
    char pub[GW_Z85_KEY_LEN + 1];
    /* well-formed keys of one pair, from a private file that was not rewritten */
    if (!z85_key_ok(k.public_z85) || !z85_key_ok(k.secret_z85) ||
        zmq_curve_public(pub, k.secret_z85) != 0 || strcmp(pub, k.public_z85) ||
        (st.st_mode & 077) || (flags & K_OPEN && !(flags & K_MISSING)) ||
        (!(flags & K_MISSING) && (after_n != size || memcmp(after, data, size))))
      abort();
    struct gw_keypair again;
    if (gw_keys_load_or_create(path, &again, err, sizeof err) < 0 || memcmp(&again, &k, sizeof k))
      abort(); /* what loaded (or was made) loads again the same */
  }
  free(after);
  fuzz_remove_dir(dir);
}

/* ---- 2: the client's token file ---- */

enum {
  T_ENV_EMPTY = 1 << 0, /* SPOTLAB_TOKEN set but empty: the file is read all the same */
  T_MISSING = 1 << 1,   /* no token file */
};

#define TOKEN_LINE_MAX 4095 /* gwclient.c reads the first line into 4096 bytes */

struct token_rec {
  json_t *sent[4];
  int n_sent, n_replies;
  char error[600];
};

static int tk_open(void *ud, const char *address) {
  (void)ud;
  (void)address;
  return 0;
}
static void tk_close(void *ud) { (void)ud; }
static int tk_send(void *ud, const char *data, size_t len) {
  struct token_rec *r = ud;
  json_t *m = json_loadb(data, len, 0, NULL);
  if (!m || r->n_sent == 4)
    abort(); /* the client sends JSON, and only its hello here */
  r->sent[r->n_sent++] = m;
  return 0;
}
static const struct jk_gw_transport tk_transport = {tk_open, tk_close, tk_send, NULL};

static void tk_reply(void *ud, int64_t id, const json_t *reply, const char *error) {
  struct token_rec *r = ud;
  (void)id;
  (void)reply;
  r->n_replies++;
  snprintf(r->error, sizeof r->error, "%s", error ? error : "");
}
static void tk_event(void *ud, const json_t *event) {
  (void)ud;
  (void)event;
}
static void tk_state(void *ud, bool ready, const char *why) {
  (void)ud;
  (void)ready;
  (void)why;
}
static const struct jk_gw_handler tk_handler = {tk_reply, tk_event, tk_state, NULL};

static void fuzz_token(const uint8_t *data, size_t size) {
  if (size < 1)
    return;
  unsigned flags = data[0];
  data++;
  size--;
  char dir[256], path[300];
  fuzz_make_dir(dir, sizeof dir, "files");
  snprintf(path, sizeof path, "%s/token", dir);
  if (!(flags & T_MISSING))
    fuzz_write_file(path, data, size);
  /* the token as documented: the file's first line up to the first blank,
   * "" when there is none or it is not UTF-8 (JSON cannot carry it) */
  size_t n = flags & T_MISSING ? 0 : size;
  if (n > TOKEN_LINE_MAX)
    n = TOKEN_LINE_MAX;
  for (size_t i = 0; i < n; i++)
    if (!data[i] || strchr("\r\n \t", data[i])) {
      n = i;
      break;
    }
  char *want = fuzz_string_copy(data, n);
  if (!sl_json_utf8_ok(want, n))
    want[0] = 0;

  setenv("SPOTLAB_HOME", dir, 1);
  if (flags & T_ENV_EMPTY)
    setenv("SPOTLAB_TOKEN", "", 1);
  else
    unsetenv("SPOTLAB_TOKEN");
  unsetenv("JUPYTERHUB_API_TOKEN");
  unsetenv("SPOTLAB_GATEWAY");
  struct token_rec r = {0};
  struct jk_gw_config cfg = {.client = "cli", .session = "s", .address = "tcp://127.0.0.1:9"};
  struct jk_gw *gw = jk_gw_new(&tk_transport, &r, &tk_handler, &r, &cfg);
  if (!gw || jk_gw_request(gw, json_pack("{s:s}", "type", "jobs"), 0) <= 0)
    abort();
  jk_gw_tick(gw);
  jk_gw_tick(gw);
  /* a transport that takes it: the hello goes out, once, with the token */
  if (r.n_sent != 1) {
    fprintf(stderr, "fuzz-files: %d frames sent; %s\n", r.n_sent, r.error);
    abort();
  }
  const json_t *tok = json_object_get(r.sent[0], "token");
  if (strcmp(sl_json_get_str(r.sent[0], "type", ""), "hello") || !json_is_string(tok) ||
      strcmp(json_string_value(tok), want))
    abort();
  jk_gw_free(gw);
  for (int i = 0; i < r.n_sent; i++)
    json_decref(r.sent[i]);
  free(want);
  unsetenv("SPOTLAB_HOME");
  unsetenv("SPOTLAB_TOKEN");
  fuzz_remove_dir(dir);
}


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  fuzz_quiet_once();
  switch (data[0] % 3) {
  case 0:
    fuzz_history(data + 1, size - 1);
    break;
  case 1:
    fuzz_keys(data + 1, size - 1);
    break;
  default:
    fuzz_token(data + 1, size - 1);
  }
  return 0;
}
