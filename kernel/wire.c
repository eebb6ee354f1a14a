/* Jupyter wire encoding, HMAC signing and replay rejection.
 *
 * Invariant: a message is accepted only if its signature verifies (when a key
 * is set) and that signature has not been accepted before within the replay
 * window. Signatures are checked over the raw bytes before any JSON parsing,
 * so unauthenticated input never reaches the JSON parser. */
#include "wire.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uuid/uuid.h>

#include "sl_err.h"
#include "sl_hmac.h"
#include "sl_json.h"
#include "sl_time.h"

#define DELIM "<IDS|MSG>"

struct jk_auth {
  struct sl_hmac_key *key; /* NULL: no key, messages are neither signed nor checked */
  /* Replay window: a ring of recent signatures plus an open-addressing hash
   * set over them, so lookups stay O(1) and memory stays bounded. */
  char (*ring)[SL_HMAC_HEX_LEN];
  size_t ring_cap, ring_next, ring_used;
  int32_t *slots; /* index into ring, -1 empty, -2 deleted */
  size_t n_slots;
};

struct jk_msg *jk_msg_new(void) {
  struct jk_msg *m = calloc(1, sizeof *m);
  if (!m)
    return NULL;
  sl_msg_init(&m->idents, SL_LIMITS_DEFAULT);
  sl_msg_init(&m->buffers, SL_LIMITS_DEFAULT);
  return m;
}

struct jk_msg *jk_msg_free(struct jk_msg *m) {
  if (!m)
    return NULL;
  sl_msg_done(&m->idents);
  sl_msg_done(&m->buffers);
  json_decref(m->header);
  json_decref(m->parent_header);
  json_decref(m->metadata);
  json_decref(m->content);
  free(m->header_text);
  free(m->parent_text);
  free(m);
  return NULL;
}

const char *jk_msg_type(const struct jk_msg *msg) {
  return sl_json_get_str(msg->header, "msg_type", "");
}

void jk_new_id(char buf[37]) {
  uuid_t u;
  uuid_generate_random(u);
  uuid_unparse_lower(u, buf);
}

/* The header's JSON text: msg_id, session, username, date, msg_type and
 * version, in that order; owned, NULL on OOM or a value that is not UTF-8. */
static char *header_text(const char *id, const char *session, const char *user, const char *date,
                         const char *type, size_t *ret_len) {
  json_t *h = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "msg_id", id, "session", session,
                        "username", user, "date", date, "msg_type", type, "version", "5.3");
  char *text = h ? json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(h);
  if (text)
    *ret_len = strlen(text);
  return text;
}

/* "2026-11-22T04:45:01.863255Z" for now into buf, as sl_time_format_iso8601()
 * writes it; the calendar part is worked out once per second. */
static void date_now(char buf[40]) {
  static __thread int64_t cached_s = INT64_MIN;
  static __thread char cached[32];
  static __thread size_t cached_len;
  int64_t us = sl_time_real_us(), s = us / SL_US_PER_S, frac = us % SL_US_PER_S;
  if (frac < 0) { /* before 1970: floor, as gmtime_r counts */
    s--;
    frac += SL_US_PER_S;
  }
  if (s != cached_s) {
    time_t t = (time_t)s;
    struct tm tm;
    gmtime_r(&t, &tm);
    int n = snprintf(cached, sizeof cached, "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    cached_len = n > 0 && (size_t)n < sizeof cached ? (size_t)n : 0;
    cached_s = s;
  }
  memcpy(buf, cached, cached_len);
  char *p = buf + cached_len;
  *p++ = '.';
  for (int i = 5; i >= 0; i--, frac /= 10)
    p[i] = (char)('0' + frac % 10);
  memcpy(p + 6, "Z", 2);
}

/* "PREFIX_N": one random prefix per process (per thread) and a counter, so
 * message ids are unique without a random draw per message. */
static void next_id(char buf[64]) {
  static __thread char prefix[37];
  static __thread uint64_t counter;
  if (!prefix[0])
    jk_new_id(prefix);
  char digits[24];
  size_t n = 0;
  for (uint64_t v = ++counter; v; v /= 10)
    digits[n++] = (char)('0' + v % 10);
  memcpy(buf, prefix, 23);
  buf[23] = '_';
  for (size_t i = 0; i < n; i++)
    buf[24 + i] = digits[n - 1 - i];
  buf[24 + n] = '\0';
}

static struct jk_msg *new_child(const struct jk_msg *parent, const char *msg_type, json_t *content,
                                const char *session_id, bool route) {
  struct jk_msg *m = jk_msg_new();
  if (!m) {
    json_decref(content);
    return NULL;
  }
  m->content = content ? content : json_object();
  char id[64], date[40];
  next_id(id);
  date_now(date);
  const char *user = parent && route ? sl_json_get_str(parent->header, "username", "kernel") : "kernel";
  /* NULL also when a value is not UTF-8 (jansson's strings check it) */
  m->header_text = header_text(id, session_id, user, date, msg_type, &m->header_len);
  /* The parent's header is never changed once received, so it is shared. */
  m->parent_header = parent && parent->header ? json_incref(parent->header) : json_object();
  m->metadata = json_object();
  if (!m->header_text || !m->parent_header || !m->metadata)
    return jk_msg_free(m);
  if (parent && parent->header && parent->header_text) {
    m->parent_text = malloc(parent->header_len + 1);
    if (!m->parent_text)
      return jk_msg_free(m);
    memcpy(m->parent_text, parent->header_text, parent->header_len + 1);
    m->parent_len = parent->header_len;
  }
  for (size_t i = 0; route && parent && i < parent->idents.n; i++) {
    if (sl_msg_add(&m->idents, parent->idents.frames[i].data, parent->idents.frames[i].len) < 0)
      return jk_msg_free(m);
  }
  return m;
}

struct jk_msg *jk_msg_reply(const struct jk_msg *parent, const char *msg_type, json_t *content,
                            const char *session_id) {
  return new_child(parent, msg_type, content, session_id, true);
}

struct jk_msg *jk_msg_child(const struct jk_msg *parent, const char *msg_type, json_t *content,
                            const char *session_id) {
  return new_child(parent, msg_type, content, session_id, false);
}

/* ---- authentication -------------------------------------------------- */

static uint64_t hash_sig(const char *sig) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < SL_HMAC_HEX_LEN; i++)
    h = (h ^ (unsigned char)sig[i]) * 1099511628211ull;
  return h;
}

struct jk_auth *jk_auth_new(const uint8_t *key, size_t key_len, size_t replay_window) {
  struct jk_auth *a = calloc(1, sizeof *a);
  if (!a)
    return NULL;
  if (replay_window < 16)
    replay_window = 16;
  a->key = key_len ? sl_hmac_key_new(key, key_len) : NULL;
  a->ring = calloc(replay_window, sizeof *a->ring);
  a->n_slots = 1;
  while (a->n_slots < replay_window * 2)
    a->n_slots <<= 1;
  a->slots = malloc(a->n_slots * sizeof *a->slots);
  if ((key_len && !a->key) || !a->ring || !a->slots)
    return jk_auth_free(a);
  a->ring_cap = replay_window;
  for (size_t i = 0; i < a->n_slots; i++)
    a->slots[i] = -1;
  return a;
}

struct jk_auth *jk_auth_free(struct jk_auth *a) {
  if (!a)
    return NULL;
  sl_hmac_key_free(a->key);
  free(a->ring);
  free(a->slots);
  free(a);
  return NULL;
}

/* Returns the slot holding sig, or -1. */
static long find_slot(const struct jk_auth *a, const char *sig) {
  size_t mask = a->n_slots - 1;
  for (size_t i = hash_sig(sig) & mask, probes = 0; probes < a->n_slots; i = (i + 1) & mask, probes++) {
    int32_t s = a->slots[i];
    if (s == -1)
      return -1;
    if (s >= 0 && memcmp(a->ring[s], sig, SL_HMAC_HEX_LEN) == 0)
      return (long)i;
  }
  return -1;
}

static void remember(struct jk_auth *a, const char *sig) {
  size_t idx = a->ring_next;
  if (a->ring_used == a->ring_cap) {
    long old = find_slot(a, a->ring[idx]);
    if (old >= 0)
      a->slots[old] = -2;
  } else {
    a->ring_used++;
  }
  memcpy(a->ring[idx], sig, SL_HMAC_HEX_LEN);
  a->ring_next = (idx + 1) % a->ring_cap;
  size_t mask = a->n_slots - 1;
  size_t i = hash_sig(sig) & mask;
  while (a->slots[i] >= 0)
    i = (i + 1) & mask;
  a->slots[i] = (int32_t)idx;
  /* Tombstones accumulate; rebuild when the table has no empty slot left
   * near capacity. With n_slots >= 2 * ring_cap this is rare. */
  size_t empty = 0;
  for (size_t k = 0; k < a->n_slots && empty == 0; k++)
    empty += a->slots[k] == -1;
  if (!empty) {
    for (size_t k = 0; k < a->n_slots; k++)
      a->slots[k] = -1;
    for (size_t r = 0; r < a->ring_used; r++) {
      size_t j = hash_sig(a->ring[r]) & mask;
      while (a->slots[j] >= 0)
        j = (j + 1) & mask;
      a->slots[j] = (int32_t)r;
    }
  }
}

static void sign(const struct jk_auth *a, const struct sl_frame parts[4], char hex[SL_HMAC_HEX_LEN + 1]) {
  struct sl_span spans[4];
  for (int i = 0; i < 4; i++)
    spans[i] = (struct sl_span){parts[i].data, parts[i].len};
  sl_hmac_key_sign_hex(a->key, spans, 4, hex);
}

/* ---- decode / encode --------------------------------------------------- */

static int parse_part(const struct sl_frame *f, int depth, json_t **ret, char *err, size_t err_size) {
  json_t *v = NULL;
  int r = sl_json_parse((const char *)f->data, f->len, depth, &v, err, err_size);
  if (r < 0)
    return r;
  if (!json_is_object(v)) {
    json_decref(v);
    snprintf(err, err_size, "message part is not a JSON object");
    return SL_EJSON;
  }
  *ret = v;
  return 0;
}

int jk_wire_decode(struct jk_auth *auth, const struct sl_msg *frames,
                   const struct jk_wire_limits *limits, struct jk_msg **ret_msg,
                   char *err, size_t err_size) {
  size_t d = 0;
  while (d < frames->n && !(frames->frames[d].len == strlen(DELIM) &&
                            memcmp(frames->frames[d].data, DELIM, strlen(DELIM)) == 0))
    d++;
  if (d == frames->n || frames->n - d - 1 < 5) {
    snprintf(err, err_size, "no <IDS|MSG> delimiter followed by signature and four parts");
    return SL_EWIRE;
  }
  const struct sl_frame *sig = &frames->frames[d + 1];
  const struct sl_frame *parts = &frames->frames[d + 2];
  char expected[SL_HMAC_HEX_LEN + 1];
  bool signing = auth->key != NULL;
  if (signing) {
    sign(auth, parts, expected);
    if (!sl_hmac_hex_equal(expected, sig->data, sig->len)) {
      snprintf(err, err_size, "signature missing or wrong");
      return SL_EHMAC;
    }
    if (find_slot(auth, expected) >= 0) {
      snprintf(err, err_size, "replayed message (signature already seen)");
      return SL_EREPLAY;
    }
    remember(auth, expected);
  }

  size_t frame_cap = frames->limits.max_frame_bytes, total_cap = frames->limits.max_total_bytes;
  size_t total = 0, largest = 0;
  for (size_t i = 0; i < frames->n; i++) {
    total += frames->frames[i].len;
    if (frames->frames[i].len > largest)
      largest = frames->frames[i].len;
  }
  /* Over a limit, only the header is parsed (if it fits): enough to answer. */
  bool over = largest > frame_cap || total > total_cap;
  if (over && largest > frame_cap)
    snprintf(err, err_size, "a frame of %zu bytes is over the limit of %zu", largest, frame_cap);
  else if (over)
    snprintf(err, err_size, "message of %zu bytes is over the limit of %zu", total, total_cap);

  struct jk_msg *m = jk_msg_new();
  if (!m)
    return -ENOMEM;
  /* The frames were bounded as they arrived: the message holds what they held. */
  m->idents.limits = m->buffers.limits = frames->limits;
  int r = 0;
  for (size_t i = 0; i < d && r == 0; i++)
    r = sl_msg_add(&m->idents, frames->frames[i].data, frames->frames[i].len);
  for (size_t i = d + 6; i < frames->n && r == 0 && !over; i++)
    r = sl_msg_add(&m->buffers, frames->frames[i].data, frames->frames[i].len);
  if (r < 0) {
    jk_msg_free(m);
    return r;
  }
  json_t **dst[4] = {&m->header, &m->parent_header, &m->metadata, &m->content};
  int depth = limits && limits->max_json_depth > 0 ? limits->max_json_depth : SL_JSON_MAX_DEPTH_DEFAULT;
  for (int i = 0; i < (over ? 1 : 4); i++) {
    if (parts[i].len > frame_cap) {
      r = SL_ELIMIT;
    } else if (parts[i].len == 2 && memcmp(parts[i].data, "{}", 2) == 0) {
      *dst[i] = json_object(); /* the usual parent_header and metadata */
      r = *dst[i] ? 0 : -ENOMEM;
    } else {
      r = parse_part(&parts[i], depth, dst[i], err, err_size);
    }
    if (r < 0)
      break;
  }
  if (r == 0 && !json_is_string(json_object_get(m->header, "msg_type"))) {
    snprintf(err, err_size, "header has no msg_type");
    r = SL_EWIRE;
  } else if (r == 0 && over) {
    r = SL_ELIMIT;
  }
  if (r < 0 && !m->header) {
    jk_msg_free(m);
    return r;
  }
  if (m->header) {
    /* Kept as sent, to go back as the parent_header of the answers. */
    m->header_text = malloc(parts[0].len + 1);
    if (!m->header_text) {
      jk_msg_free(m);
      return -ENOMEM;
    }
    memcpy(m->header_text, parts[0].data, parts[0].len);
    m->header_text[parts[0].len] = '\0';
    m->header_len = parts[0].len;
  }
  for (int i = 1; i < 4; i++)
    if (!*dst[i])
      *dst[i] = json_object();
  *ret_msg = m;
  return r;
}

int jk_wire_encode_each(struct jk_auth *auth, const struct jk_msg *msg,
                        int (*frame)(void *ud, const void *data, size_t len, bool more), void *ud) {
  int r = 0;
  const json_t *parts_json[4] = {msg->header, msg->parent_header, msg->metadata, msg->content};
  const char *given[4] = {msg->header_text, msg->parent_text, NULL, NULL};
  size_t given_len[4] = {msg->header_len, msg->parent_len, 0, 0};
  struct sl_frame parts[4] = {{0}};
  bool owned[4] = {false};
  for (int i = 0; i < 4; i++) {
    if (given[i]) {
      parts[i] = (struct sl_frame){(uint8_t *)given[i], given_len[i]};
    } else if (!parts_json[i] || (json_is_object(parts_json[i]) && json_object_size(parts_json[i]) == 0)) {
      parts[i] = (struct sl_frame){(uint8_t *)"{}", 2};
    } else {
      char *s = sl_json_dump(parts_json[i], &parts[i].len);
      if (!s) {
        r = -ENOMEM;
        goto out;
      }
      parts[i].data = (uint8_t *)s;
      owned[i] = true;
    }
  }
  char hex[SL_HMAC_HEX_LEN + 1] = "";
  if (auth->key)
    sign(auth, parts, hex);
  bool buffers = msg->buffers.n > 0;
  for (size_t i = 0; i < msg->idents.n && r == 0; i++)
    r = frame(ud, msg->idents.frames[i].data, msg->idents.frames[i].len, true);
  if (r == 0)
    r = frame(ud, DELIM, sizeof DELIM - 1, true);
  if (r == 0)
    r = frame(ud, hex, strlen(hex), true);
  for (int i = 0; i < 4 && r == 0; i++)
    r = frame(ud, parts[i].data, parts[i].len, i < 3 || buffers);
  for (size_t i = 0; i < msg->buffers.n && r == 0; i++)
    r = frame(ud, msg->buffers.frames[i].data, msg->buffers.frames[i].len, i + 1 < msg->buffers.n);
out:
  for (int i = 0; i < 4; i++)
    if (owned[i])
      free(parts[i].data);
  return r;
}

static int add_frame(void *ud, const void *data, size_t len, bool more) {
  (void)more;
  return sl_msg_add(ud, data, len);
}

int jk_wire_encode(struct jk_auth *auth, const struct jk_msg *msg, struct sl_msg *out) {
  int r = jk_wire_encode_each(auth, msg, add_frame, out);
  if (r < 0)
    sl_msg_done(out);
  return r;
}
