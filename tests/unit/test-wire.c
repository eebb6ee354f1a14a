/* The Jupyter wire format: round trip, signatures, replays, limits, and the
 * connection file. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "connfile.h"
#include "harness.h"
#include "sl_err.h"
#include "sl_hmac.h"
#include "sl_json.h"
#include "sl_time.h"
#include "wire.h"

static const uint8_t key[] = "c0ffee00-1234-5678-9abc-def012345678";

static struct jk_msg *sample(const char *type) {
  struct jk_msg *m = jk_msg_reply(NULL, type, json_pack("{s:s}", "code", "x = 1"), "sess");
  sl_msg_add_str(&m->idents, "client-identity");
  return m;
}

static void round_trip(void) {
  struct jk_auth *a = jk_auth_new(key, sizeof key - 1, 64);
  struct jk_msg *m = sample("execute_request");
  sl_msg_add(&m->buffers, "\x00\x01\x02", 3);
  struct sl_msg frames;
  sl_msg_init(&frames, SL_LIMITS_DEFAULT);
  CHECK_INT(jk_wire_encode(a, m, &frames), 0);
  CHECK_INT(frames.n, 1 + 1 + 1 + 4 + 1);
  CHECK_STR((char *)frames.frames[1].data, "<IDS|MSG>");
  CHECK_INT(frames.frames[2].len, 64);

  struct jk_auth *b = jk_auth_new(key, sizeof key - 1, 64);
  struct jk_msg *got = NULL;
  char err[256];
  CHECK_INT(jk_wire_decode(b, &frames, NULL, &got, err, sizeof err), 0);
  if (got) {
    CHECK_STR(jk_msg_type(got), "execute_request");
    CHECK_STR(sl_json_get_str(got->content, "code", ""), "x = 1");
    CHECK_INT(got->idents.n, 1);
    CHECK_STR((char *)got->idents.frames[0].data, "client-identity");
    CHECK_INT(got->buffers.n, 1);
    CHECK_INT(got->buffers.frames[0].len, 3);
  }
  jk_msg_free(got);
  got = NULL;
  /* The same bytes again are a replay. */
  CHECK_INT(jk_wire_decode(b, &frames, NULL, &got, err, sizeof err), SL_EREPLAY);
  CHECK(got == NULL);

  /* A flipped byte in the content breaks the signature. */
  frames.frames[6].data[2] ^= 1;
  struct jk_auth *c = jk_auth_new(key, sizeof key - 1, 64);
  CHECK_INT(jk_wire_decode(c, &frames, NULL, &got, err, sizeof err), SL_EHMAC);
  frames.frames[6].data[2] ^= 1;
  /* A different key fails too. */
  struct jk_auth *d = jk_auth_new((const uint8_t *)"other", 5, 64);
  CHECK_INT(jk_wire_decode(d, &frames, NULL, &got, err, sizeof err), SL_EHMAC);
  /* A missing signature fails. */
  free(frames.frames[2].data);
  frames.frames[2].data = (uint8_t *)strdup("");
  frames.frames[2].len = 0;
  CHECK_INT(jk_wire_decode(c, &frames, NULL, &got, err, sizeof err), SL_EHMAC);
  sl_msg_done(&frames);
  jk_msg_free(m);
  jk_auth_free(a);
  jk_auth_free(b);
  jk_auth_free(c);
  jk_auth_free(d);
}

/* Builds signed frames whose content part is the given raw text. */
static void raw_frames(struct jk_auth *a, const char *content, struct sl_msg *out) {
  (void)a;
  const char *parts[4] = {"{\"msg_id\":\"1\",\"msg_type\":\"execute_request\",\"session\":\"s\",\"username\":\"u\",\"date\":\"\",\"version\":\"5.3\"}",
                          "{}", "{}", content};
  struct sl_span spans[4];
  for (int i = 0; i < 4; i++)
    spans[i] = (struct sl_span){parts[i], strlen(parts[i])};
  char hex[SL_HMAC_HEX_LEN + 1];
  sl_hmac_sha256_hex(key, sizeof key - 1, spans, 4, hex);
  sl_msg_init(out, SL_LIMITS_DEFAULT);
  sl_msg_add_str(out, "id");
  sl_msg_add_str(out, "<IDS|MSG>");
  sl_msg_add_str(out, hex);
  for (int i = 0; i < 4; i++)
    sl_msg_add_str(out, parts[i]);
}

static void malformed(void) {
  struct jk_auth *a = jk_auth_new(key, sizeof key - 1, 64);
  char err[256];
  struct jk_msg *got = NULL;
  struct sl_msg f;

  /* Too deep: signature fine, JSON refused, but the header survives for an error reply. */
  size_t depth = 10000;
  char *deep = malloc(2 * depth + 1);
  memset(deep, '[', depth);
  memset(deep + depth, ']', depth);
  deep[2 * depth] = '\0';
  raw_frames(a, deep, &f);
  struct jk_wire_limits lim = {64};
  CHECK_INT(jk_wire_decode(a, &f, &lim, &got, err, sizeof err), SL_EJSONDEPTH);
  CHECK(got != NULL);
  if (got)
    CHECK_STR(jk_msg_type(got), "execute_request");
  got = jk_msg_free(got);
  sl_msg_done(&f);
  free(deep);

  /* Not JSON at all. */
  raw_frames(a, "{not json", &f);
  CHECK_INT(jk_wire_decode(a, &f, &lim, &got, err, sizeof err), SL_EJSON);
  got = jk_msg_free(got);
  sl_msg_done(&f);

  /* Content that is JSON but not an object. */
  raw_frames(a, "[1,2]", &f);
  CHECK_INT(jk_wire_decode(a, &f, &lim, &got, err, sizeof err), SL_EJSON);
  got = jk_msg_free(got);
  sl_msg_done(&f);

  /* No delimiter, or too few parts. */
  sl_msg_init(&f, SL_LIMITS_DEFAULT);
  sl_msg_add_str(&f, "only");
  CHECK_INT(jk_wire_decode(a, &f, &lim, &got, err, sizeof err), SL_EWIRE);
  sl_msg_add_str(&f, "<IDS|MSG>");
  sl_msg_add_str(&f, "sig");
  CHECK_INT(jk_wire_decode(a, &f, &lim, &got, err, sizeof err), SL_EWIRE);
  CHECK(got == NULL);
  sl_msg_done(&f);
  jk_auth_free(a);
}

/* Answers carry the request's header back byte for byte as their
 * parent_header, and a header written without jansson that reads back as the
 * JSON it was built from, escapes included. */
static void parent_bytes(void) {
  struct jk_auth *a = jk_auth_new(key, sizeof key - 1, 64);
  const char *hdr = "{ \"msg_id\": \"7\", \"msg_type\": \"execute_request\", \"session\": \"s\","
                    " \"username\": \"q\\\"\\\\\\u00e9\\n\\u0001\", \"date\": \"\", \"version\": \"5.3\" }";
  const char *parts[4] = {hdr, "{}", "{}", "{\"code\":\"x = 1\"}"};
  struct sl_span spans[4];
  for (int i = 0; i < 4; i++)
    spans[i] = (struct sl_span){parts[i], strlen(parts[i])};
  char hex[SL_HMAC_HEX_LEN + 1];
  sl_hmac_sha256_hex(key, sizeof key - 1, spans, 4, hex);
  struct sl_msg f;
  sl_msg_init(&f, SL_LIMITS_DEFAULT);
  sl_msg_add_str(&f, "id");
  sl_msg_add_str(&f, "<IDS|MSG>");
  sl_msg_add_str(&f, hex);
  for (int i = 0; i < 4; i++)
    sl_msg_add_str(&f, parts[i]);
  struct jk_msg *req = NULL;
  char err[256];
  CHECK_INT(jk_wire_decode(a, &f, NULL, &req, err, sizeof err), 0);
  sl_msg_done(&f);
  if (!req)
    return;
  struct jk_msg *out[2] = {jk_msg_reply(req, "execute_reply", json_pack("{s:s}", "status", "ok"), "k\"id"),
                           jk_msg_child(req, "status", NULL, "k\"id")};
  char first_id[64] = "";
  for (int k = 0; k < 2; k++) {
    CHECK(out[k] != NULL);
    if (!out[k])
      continue;
    CHECK_INT(out[k]->idents.n, k == 0 ? 1 : 0);
    struct sl_msg enc;
    sl_msg_init(&enc, SL_LIMITS_DEFAULT);
    CHECK_INT(jk_wire_encode(a, out[k], &enc), 0);
    size_t d = out[k]->idents.n;
    CHECK_INT(enc.n, d + 6);
    CHECK_STR((char *)enc.frames[d + 3].data, hdr);
    json_t *h = NULL;
    CHECK_INT(sl_json_parse((char *)enc.frames[d + 2].data, enc.frames[d + 2].len, 8, &h, err, sizeof err), 0);
    CHECK(out[k]->header == NULL);
    CHECK_STR(sl_json_get_str(h, "msg_type", ""), k == 0 ? "execute_reply" : "status");
    CHECK_STR(sl_json_get_str(h, "version", ""), "5.3");
    CHECK_INT(json_object_size(h), 6);
    CHECK_STR(sl_json_get_str(h, "session", ""), "k\"id");
    /* The date as sl_time_format_iso8601() writes it; ids unique. */
    const char *date = sl_json_get_str(h, "date", "");
    char want[40];
    sl_time_format_iso8601(sl_time_real_us(), want, sizeof want);
    CHECK_INT(strlen(date), strlen(want));
    CHECK(strncmp(date, want, 11) == 0 && date[19] == '.' && date[26] == 'Z');
    CHECK(strcmp(sl_json_get_str(h, "msg_id", ""), sl_json_get_str(req->header, "msg_id", "")) != 0);
    if (k == 0)
      snprintf(first_id, sizeof first_id, "%s", sl_json_get_str(h, "msg_id", ""));
    else
      CHECK(strcmp(sl_json_get_str(h, "msg_id", ""), first_id) != 0);
    CHECK_STR(sl_json_get_str(h, "username", ""), k == 0 ? "q\"\\\xc3\xa9\n\x01" : "kernel");
    json_decref(h);
    /* Signed over the bytes sent: a peer accepts it. */
    struct jk_auth *peer = jk_auth_new(key, sizeof key - 1, 64);
    struct jk_msg *got = NULL;
    if (k == 1) { /* iopub: the caller adds the topic */
      sl_msg_done(&enc);
      sl_msg_add_str(&out[k]->idents, "kernel.k.status");
      sl_msg_init(&enc, SL_LIMITS_DEFAULT);
      CHECK_INT(jk_wire_encode(a, out[k], &enc), 0);
    }
    CHECK_INT(jk_wire_decode(peer, &enc, NULL, &got, err, sizeof err), 0);
    if (got)
      CHECK_STR(sl_json_get_str(got->parent_header, "msg_id", ""), "7");
    jk_msg_free(got);
    jk_auth_free(peer);
    sl_msg_done(&enc);
    jk_msg_free(out[k]);
  }
  jk_msg_free(req);
  jk_auth_free(a);
  /* Only UTF-8 goes into a header: a session id or type that is not is refused. */
  static const char *const good[] = {"k", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80"};
  static const char *const bad[] = {"\xff", "\xc0\x80", "\xc3", "\xed\xa0\x80", "\xf4\x90\x80\x80", "a\x80"};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    struct jk_msg *m = jk_msg_child(NULL, good[i], NULL, good[i]);
    CHECK(m != NULL);
    jk_msg_free(m);
  }
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    CHECK(jk_msg_child(NULL, "status", NULL, bad[i]) == NULL);
    CHECK(jk_msg_child(NULL, bad[i], NULL, "k") == NULL);
  }
}

struct frame_log {
  size_t n, last_more_at; /* frames seen; index + 1 of the last one with more */
  bool ended;             /* a frame without more was seen */
  bool after_end;         /* a frame came after that */
};

static int log_frame(void *ud, const void *data, size_t len, bool more) {
  struct frame_log *f = ud;
  (void)data;
  (void)len;
  f->after_end |= f->ended;
  f->n++;
  if (more)
    f->last_more_at = f->n;
  else
    f->ended = true;
  return 0;
}

/* Frame by frame: every frame but the last says more, with or without buffers. */
static void encode_each(void) {
  struct jk_auth *a = jk_auth_new(key, sizeof key - 1, 16);
  for (int with_buffers = 0; with_buffers < 2; with_buffers++) {
    struct jk_msg *m = sample("execute_request");
    if (with_buffers) {
      sl_msg_add(&m->buffers, "x", 1);
      sl_msg_add(&m->buffers, "yz", 2);
    }
    struct frame_log f = {0};
    CHECK_INT(jk_wire_encode_each(a, m, log_frame, &f), 0);
    CHECK_INT(f.n, 1 + 1 + 1 + 4 + (with_buffers ? 2 : 0));
    CHECK(f.ended && !f.after_end);
    CHECK_INT(f.last_more_at, f.n - 1);
    jk_msg_free(m);
  }
  jk_auth_free(a);
}

static void replay_window(void) {
  /* The window forgets the oldest signatures first, and never grows. */
  struct jk_auth *a = jk_auth_new(key, sizeof key - 1, 16);
  struct jk_auth *w = jk_auth_new(key, sizeof key - 1, 16);
  struct sl_msg all[40];
  char err[256];
  for (int i = 0; i < 40; i++) {
    struct jk_msg *m = sample("kernel_info_request");
    sl_msg_init(&all[i], SL_LIMITS_DEFAULT);
    jk_wire_encode(w, m, &all[i]);
    jk_msg_free(m);
    struct jk_msg *got = NULL;
    CHECK_INT(jk_wire_decode(a, &all[i], NULL, &got, err, sizeof err), 0);
    jk_msg_free(got);
  }
  struct jk_msg *got = NULL;
  for (int i = 24; i < 40; i++)
    CHECK_INT(jk_wire_decode(a, &all[i], NULL, &got, err, sizeof err), SL_EREPLAY);
  for (int i = 0; i < 40; i++)
    sl_msg_done(&all[i]);
  jk_auth_free(a);
  jk_auth_free(w);
}

static void unsigned_mode(void) {
  struct jk_auth *a = jk_auth_new((const uint8_t *)"", 0, 16);
  struct jk_msg *m = sample("kernel_info_request");
  struct sl_msg f;
  sl_msg_init(&f, SL_LIMITS_DEFAULT);
  CHECK_INT(jk_wire_encode(a, m, &f), 0);
  CHECK_INT(f.frames[2].len, 0);
  struct jk_msg *got = NULL;
  char err[128];
  CHECK_INT(jk_wire_decode(a, &f, NULL, &got, err, sizeof err), 0);
  jk_msg_free(got);
  jk_msg_free(m);
  sl_msg_done(&f);
  jk_auth_free(a);
}

static void frame_limits(void) {
  struct sl_msg m;
  sl_msg_init(&m, (struct sl_limits){3, 10, 25});
  CHECK_INT(sl_msg_add(&m, "0123456789", 10), 0);
  CHECK_INT(sl_msg_add(&m, "0123456789a", 11), SL_ELIMIT);
  CHECK_INT(sl_msg_add(&m, "0123456789", 10), 0);
  CHECK_INT(sl_msg_add(&m, "0123456789", 10), SL_ELIMIT); /* total */
  CHECK_INT(sl_msg_add(&m, "01234", 5), 0);
  CHECK_INT(sl_msg_add(&m, "", 0), SL_ELIMIT); /* frame count */
  CHECK_INT(m.n, 3);
  sl_msg_done(&m);
}

/* Decoding against the frames' own limits: many buffers within them are
 * kept; a frame or a whole over them is refused (SL_ELIMIT) with the header
 * still there to answer, and nothing else parsed or kept. */
static void decode_limits(void) {
  struct jk_auth *a = jk_auth_new(key, sizeof key - 1, 4096);
  char err[256];
  struct jk_msg *got = NULL;
  struct sl_msg f;

  raw_frames(a, "{\"code\":\"x = 1\"}", &f);
  f.limits = (struct sl_limits){1024, 1 << 20, 2 << 20};
  for (int i = 0; i < 250; i++)
    CHECK_INT(sl_msg_add(&f, "buf", 3), 0);
  CHECK_INT(jk_wire_decode(a, &f, NULL, &got, err, sizeof err), 0);
  CHECK(got && got->buffers.n == 250 && got->idents.n == 1);
  got = jk_msg_free(got);
  sl_msg_done(&f);

  /* A view whose buffer is over the frame limit (a socket's buffers are not
   * bounded by sl_msg_add). */
  raw_frames(a, "{\"code\":\"y = 1\"}", &f);
  char big[300];
  memset(big, 'b', sizeof big);
  CHECK_INT(sl_msg_add(&f, big, sizeof big), 0);
  for (size_t i = 0; i + 1 < f.n; i++)
    CHECK(f.frames[i].len < sizeof big); /* only the buffer is that long */
  f.limits.max_frame_bytes = sizeof big - 1;
  CHECK_INT(jk_wire_decode(a, &f, NULL, &got, err, sizeof err), SL_ELIMIT);
  CHECK(got != NULL);
  if (got) {
    CHECK_STR(jk_msg_type(got), "execute_request");
    CHECK(got->header_text != NULL);
    CHECK_INT(got->buffers.n, 0);
    CHECK_INT(json_object_size(got->content), 0);
  }
  got = jk_msg_free(got);
  sl_msg_done(&f);

  /* Over the total, each frame within its limit. */
  raw_frames(a, "{\"code\":\"z = 1\"}", &f);
  CHECK_INT(sl_msg_add(&f, "0123456789", 10), 0);
  f.limits.max_total_bytes = f.total_bytes - 1;
  CHECK_INT(jk_wire_decode(a, &f, NULL, &got, err, sizeof err), SL_ELIMIT);
  CHECK(got != NULL && got->buffers.n == 0);
  got = jk_msg_free(got);
  /* The header itself over the limit: nothing to answer with. */
  sl_msg_done(&f);
  raw_frames(a, "{\"code\":\"w = 1\"}", &f);
  f.limits.max_frame_bytes = f.frames[3].len - 1;
  CHECK_INT(jk_wire_decode(a, &f, NULL, &got, err, sizeof err), SL_ELIMIT);
  CHECK(got == NULL);
  sl_msg_done(&f);

  /* Frames are read within their lengths only: the header is not followed
   * by a NUL here, and comes back without what follows it. */
  raw_frames(a, "{\"code\":\"v = 1\"}", &f);
  size_t hlen = f.frames[3].len;
  uint8_t *h = malloc(hlen + 1);
  memcpy(h, f.frames[3].data, hlen);
  h[hlen] = '!';
  free(f.frames[3].data);
  f.frames[3].data = h;
  CHECK_INT(jk_wire_decode(a, &f, NULL, &got, err, sizeof err), 0);
  CHECK(got && got->header_len == hlen && strlen(got->header_text) == hlen);
  got = jk_msg_free(got);
  sl_msg_done(&f);
  jk_auth_free(a);
}

static void connection_file(void) {
  struct jk_connection c;
  char err[256];
  const char *good = "{\"shell_port\":1,\"iopub_port\":2,\"stdin_port\":3,\"control_port\":4,"
                     "\"hb_port\":5,\"ip\":\"127.0.0.1\",\"key\":\"abc\",\"transport\":\"tcp\","
                     "\"signature_scheme\":\"hmac-sha256\",\"kernel_name\":\"spotlab\"}";
  CHECK_INT(jk_connection_parse(good, strlen(good), &c, err, sizeof err), 0);
  CHECK_INT(c.ports[JK_CH_HB], 5);
  CHECK_INT(c.key_len, 3);
  char ep[64];
  jk_connection_endpoint(&c, JK_CH_CONTROL, ep, sizeof ep);
  CHECK_STR(ep, "tcp://127.0.0.1:4");

  const char *md5 = "{\"shell_port\":1,\"iopub_port\":2,\"stdin_port\":3,\"control_port\":4,"
                    "\"hb_port\":5,\"key\":\"abc\",\"signature_scheme\":\"hmac-md5\"}";
  CHECK_INT(jk_connection_parse(md5, strlen(md5), &c, err, sizeof err), SL_ESCHEME);
  CHECK(strstr(err, "hmac-md5") != NULL);

  const char *ipc = "{\"shell_port\":1,\"iopub_port\":2,\"stdin_port\":3,\"control_port\":4,"
                    "\"hb_port\":5,\"ip\":\"/tmp/k\",\"transport\":\"ipc\"}";
  CHECK_INT(jk_connection_parse(ipc, strlen(ipc), &c, err, sizeof err), 0);
  jk_connection_endpoint(&c, JK_CH_SHELL, ep, sizeof ep);
  CHECK_STR(ep, "ipc:///tmp/k-1");

  const char *bad_port = "{\"shell_port\":70000,\"iopub_port\":2,\"stdin_port\":3,"
                         "\"control_port\":4,\"hb_port\":5}";
  CHECK_INT(jk_connection_parse(bad_port, strlen(bad_port), &c, err, sizeof err), SL_ECONFIG);
  CHECK(strstr(err, "shell_port") != NULL);
  const char *missing = "{\"shell_port\":1}";
  CHECK_INT(jk_connection_parse(missing, strlen(missing), &c, err, sizeof err), SL_ECONFIG);
  const char *udp = "{\"shell_port\":1,\"iopub_port\":2,\"stdin_port\":3,\"control_port\":4,"
                    "\"hb_port\":5,\"transport\":\"udp\"}";
  CHECK_INT(jk_connection_parse(udp, strlen(udp), &c, err, sizeof err), SL_ECONFIG);
  CHECK(jk_connection_parse("[", 1, &c, err, sizeof err) < 0);
  CHECK(jk_connection_parse("", 0, &c, err, sizeof err) < 0);
  CHECK(jk_connection_load("/nonexistent/kernel.json", &c, err, sizeof err) == -ENOENT);
}

static void errors(void) {
  CHECK_STR(sl_errname(SL_EHMAC), "SL_EHMAC");
  CHECK_STR(sl_strerror(SL_EREPLAY), "message replayed (signature seen before)");
  CHECK_STR(sl_errname(-ENOENT), "ENOENT");
  CHECK(strlen(sl_strerror(-ENOENT)) > 0);
  /* no answer (worth another try) against an answer or a local fault */
  CHECK(sl_err_unanswered(-ETIMEDOUT) && sl_err_unanswered(-ECONNREFUSED) &&
        sl_err_unanswered(-ECONNRESET) && sl_err_unanswered(-EHOSTUNREACH) &&
        sl_err_unanswered(SL_ECURL));
  CHECK(!sl_err_unanswered(0) && !sl_err_unanswered(-ENOENT) && !sl_err_unanswered(SL_EAUTH) &&
        !sl_err_unanswered(-EIO) && !sl_err_unanswered(-ENOMEM) && !sl_err_unanswered(SL_ECHECKSUM));
}

int main(void) {
  sl_crypto_init();
  round_trip();
  malformed();
  parent_bytes();
  encode_each();
  replay_window();
  unsigned_mode();
  frame_limits();
  decode_limits();
  connection_file();
  errors();
  TEST_MAIN_END();
}
