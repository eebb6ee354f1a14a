/* Fuzz target: what the gateway keeps in its SQLite store and reads back,
 * as a crash mid-write, a full disk or a hand edit may leave the database
 * (the plain files are the target files'). The first byte chooses
 * (modulo 3):
 *
 * 0  the gateway's market history (markethist.h, store.h): a byte of
 *    options (M_* below), a byte whose low four bits count the live ticks
 *    after the restore, then records of three bytes (R_* below: the offer
 *    and how the row is written; n ticks; a chunk number), their extra
 *    bytes, and n tick bytes (bit 0: capacity; bits 1-4: a price of
 *    prices[]). Each record is a row of the store's
 *    market_history table, written through gw_store_market_put or, when
 *    the record says so, raw with sqlite3 in shapes the store's writer
 *    never makes (a chunk past 60 ticks, blobs of the wrong length, a
 *    capacity byte past 1, text or NULL columns). A history restores them
 *    (gw_mh_restore), every offer's ring must hold sane ticks, the offers
 *    of enabled providers become the market view of a deadline job
 *    (mhview.h, as sched_deadline.c builds it) and the "spotlab" policy
 *    decides on it, then for a few more live ticks; the history is freed
 *    (which writes it) and restored once more.
 *
 * 1  what the scheduler learned (sched_learned.c): a byte (bit 0: the
 *    "deadline" row, else "placement"; bit 1: written through
 *    gw_store_learned_put when the body is an object, else raw; bit 2:
 *    raw as a blob), then the row's body. A fresh in-process gateway
 *    (gw-fixture.h) forgets what it learned and reads the row back
 *    (gw_sched_learned_load); what it then holds must encode, and read
 *    back from its own JSON with nothing skipped and the same JSON.
 *
 * 2  the store's other JSON columns (store.h): session nb of alice with a
 *    variable and a definition, two jobs (1 with a preempted attempt) and
 *    a run record of each are written through the store; then up to 16
 *    rows split at "\n--\n", each a header byte (S_* below: the column;
 *    a definition's kind or an event's; a JSON column bound as a blob)
 *    and the bytes (a name's up to a NUL), go in raw with sqlite3: a
 *    variable's value or name, a definition's spec or kind, an event's
 *    body (preempted, metric or state), job 1's record or spec. Read
 *    back through the store (gw_store_session_get, _session_def, _events,
 *    _preemption_events, _attempt_metric_step, _counts, _metric_history,
 *    _record_get, _job_get, _jobs_list):
 *    nothing fails, what is read encodes, each definition listed reads
 *    the same by name, and what the store wrote itself (the variable, the
 *    definition, job 1's first event, job 2's record) stays as written.
 *
 * Each input gets its own folder under $TMPDIR (/dev/shm when unset),
 * removed after it, so a failure replays from its file alone. Nothing may
 * crash, leak, hang or hit undefined behaviour, whatever the bytes. */
#include "fuzz.h"
#include "gw-fixture.h"

#include "deadline.h"
#include "markethist.h"
#include "mhview.h"
#include "placemem.h"
#include "sched_int.h"
#include "store.h"

#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_policy.h"
#include "sl_time.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SEP "\n--\n"

/* ---- 0: the market's history ---- */

#define MINUTE_US (60 * INT64_C(1000000))
#define T0_US (INT64_C(1800000000) * 1000000)
#define RECORDS_MAX 64
#define CHUNK_NUMBER_MAX (INT64_C(1) << 40) /* as store_market.c reads them */

enum {
  M_TICK = 3,           /* a tick's wall time: 60 s, 1 µs, 0, 20 ms */
  M_NOW = 7 << 2,       /* the wall clock: after the newest row by a minute, 5, 3 hours; an
                         * hour before it; 0; a month after the first; the newest row's; 1 */
  M_JOB = 7 << 5,       /* the deadline job (jobs[] below) */
};

enum {
  R_OFFER = 7,          /* offers[] below */
  R_RAW = 1 << 3,       /* written with sqlite3, not the store's writer */
  R_CHUNK = 3 << 4,     /* its number: after the offer's last, the same, the byte C, 8 bytes */
  R_END = 1 << 6,       /* end_us: 8 bytes (else the wall clock of its last tick) */
  R_QUIRK = 1 << 7,     /* raw: a byte of quirks follows (QK_* below); through the store: a
                         * keep of one chunk, so older rows are dropped */
};

enum {
  QK_UP_LONG = 1 << 0,  /* the capacity blob a byte longer */
  QK_PRICE_SHORT = 1 << 1, /* the price blob a byte shorter */
  QK_UP_RAW = 1 << 2,   /* capacity bytes are the tick bytes' top three bits (past 1) */
  QK_UP_TEXT = 1 << 3,  /* capacity as text */
  QK_UP_NULL = 1 << 4,  /* capacity NULL */
  QK_PRICE_NULL = 1 << 5,
  QK_NAMES_INT = 1 << 6, /* provider, type and zone as integers */
  QK_END_TEXT = 1 << 7, /* end_us as text */
};

static const struct gw_provider local = {.name = "local"};
static const struct gw_provider aws = {.name = "aws"};

static const struct {
  const char *provider, *type, *zone;
} offers[8] = {
    {"local", "g.x", "z-a"},
    {"local", "g.x", ""},
    {"local", "g.y", "z-a"},
    {"aws", "g.x", "z-b"},
    {"aws", "g.x", ""},
    {"gone", "g.x", "z-a"}, /* a provider not enabled: its rows stay */
    {"local", "a-type-name-longer-than-any-that-the-history-keeps-for-one-offer-0123456789", "z"},
    {"", "", ""},
};

static const double prices[16] = {
    0.5, 0.51, 0.9, 1.2, 0.0, -0.0, -1.0, NAN, INFINITY, -INFINITY, 1e308, 5e-324, 1e-300,
    3.0, 100.0, 0.25,
};

static const struct {
  int64_t window, work, overhead;
} jobs[8] = {
    {INT64_MAX, 30, 2}, {60, 30, 2}, {600, 400, 5}, {5000, 4000, 10},
    {10, 30, 2},        {1, 1, 0},   {20000, 1, 0}, {INT64_MAX, 1000000, 100},
};

struct rec {
  unsigned a, quirks;
  int64_t chunk, end_us;
  size_t n;
  const uint8_t *ticks;
};

static int64_t get_i64(const uint8_t *p) {
  uint64_t u = 0;
  for (int i = 0; i < 8; i++)
    u |= (uint64_t)p[i] << (8 * i);
  return (int64_t)u;
}

static void put_le64(unsigned char *p, double v) {
  uint64_t u;
  memcpy(&u, &v, sizeof u);
  for (int i = 0; i < 8; i++)
    p[i] = (unsigned char)(u >> (8 * i));
}

/* The row of r, as the store's writer cannot make it. */
static void write_raw(sqlite3 *db, const struct rec *r) {
  const char *o[3] = {offers[r->a & R_OFFER].provider, offers[r->a & R_OFFER].type,
                      offers[r->a & R_OFFER].zone};
  size_t up_n = r->n + (r->quirks & QK_UP_LONG ? 1 : 0);
  size_t price_n = 8 * r->n - (r->quirks & QK_PRICE_SHORT && r->n ? 1 : 0);
  unsigned char *up = calloc(up_n + 1, 1), *price = calloc(price_n + 8, 1);
  if (!up || !price)
    abort();
  for (size_t k = 0; k < r->n; k++) {
    up[k] = r->quirks & QK_UP_RAW ? r->ticks[k] >> 5 : r->ticks[k] & 1;
    put_le64(price + 8 * k, prices[(r->ticks[k] >> 1) & 15]);
  }
  sqlite3_stmt *st = NULL;
  const char *sql = "INSERT OR REPLACE INTO market_history(provider, type, zone, chunk, end_us,"
                    " up, price) VALUES(?,?,?,?,?,?,?)";
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
    abort();
  for (int i = 0; i < 3; i++) {
    if (r->quirks & QK_NAMES_INT)
      sqlite3_bind_int(st, i + 1, i);
    else
      sqlite3_bind_text(st, i + 1, o[i], -1, SQLITE_STATIC);
  }
  sqlite3_bind_int64(st, 4, r->chunk);
  if (r->quirks & QK_END_TEXT)
    sqlite3_bind_text(st, 5, "soon", -1, SQLITE_STATIC);
  else
    sqlite3_bind_int64(st, 5, r->end_us);
  if (r->quirks & QK_UP_NULL)
    sqlite3_bind_null(st, 6);
  else if (r->quirks & QK_UP_TEXT)
    sqlite3_bind_text(st, 6, (const char *)up, (int)up_n, SQLITE_TRANSIENT);
  else
    sqlite3_bind_blob(st, 6, up, (int)up_n, SQLITE_TRANSIENT);
  if (r->quirks & QK_PRICE_NULL)
    sqlite3_bind_null(st, 7);
  else
    sqlite3_bind_blob(st, 7, price, (int)price_n, SQLITE_TRANSIENT);
  sqlite3_step(st); /* a NULL column is refused (NOT NULL): no row */
  sqlite3_finalize(st);
  free(up);
  free(price);
}

static void write_put(struct gw_store *s, const struct rec *r) {
  struct gw_market_chunk *c = calloc(1, sizeof *c);
  if (!c)
    abort();
  snprintf(c->provider, sizeof c->provider, "%s", offers[r->a & R_OFFER].provider);
  snprintf(c->type, sizeof c->type, "%s", offers[r->a & R_OFFER].type);
  snprintf(c->zone, sizeof c->zone, "%s", offers[r->a & R_OFFER].zone);
  c->chunk = r->chunk;
  c->end_us = r->end_us;
  c->n = r->n % (GW_STORE_MARKET_CHUNK_MAX + 1);
  for (size_t k = 0; k < c->n; k++) {
    c->up[k] = r->ticks[k] & 1;
    c->price[k] = prices[(r->ticks[k] >> 1) & 15];
  }
  /* keep: the history keeps a week of chunks; a small keep drops more */
  gw_store_market_put(s, c, 1, r->a & R_QUIRK ? 1 : GW_MH_TICKS / GW_MH_CHUNK + 1);
  free(c);
}

/* Every offer's ring holds ticks that a policy can read. */
static void check_offers(struct gw_mh *h) {
  for (size_t i = 0; i < gw_mh_count(h); i++) {
    const struct gw_mh_offer *o = gw_mh_at(h, i);
    if (o->first > o->n || o->n - o->first > GW_MH_TICKS || o->saved > o->n)
      abort();
    for (size_t k = o->first; k < o->n; k++) {
      int32_t a = gw_mh_avail(o, k);
      double p = gw_mh_price(o, k);
      if ((a != 0 && a != GW_MH_UP) || !isfinite(p) || p < 0)
        abort();
    }
  }
}

struct job {
  const struct gw_mh_offer *offer[SL_POLICY_ZONES_MAX];
  struct gw_mhv *view[SL_POLICY_ZONES_MAX];
  size_t from[SL_POLICY_ZONES_MAX];
  size_t n_zones, n, origin;
};

/* The policy's decision on the job's view now, checked. */
static void decide(struct sl_policy *pol, const struct job *dj, unsigned which, int mode) {
  struct sl_zone_view zv[SL_POLICY_ZONES_MAX];
  for (size_t z = 0; z < dj->n_zones; z++)
    zv[z] = (struct sl_zone_view){.avail = gw_mhv_avail(dj->view[z], dj->from[z]),
                                  .price = gw_mhv_price(dj->view[z], dj->from[z]), .n = dj->n};
  struct sl_market_view mv = {.zones = zv, .n_zones = dj->n_zones, .origin = dj->origin,
                              .ondemand_price = 1.5, .gap_s = GW_DEADLINE_TICK_S,
                              .clock0_s = 1800000000.0 - (double)dj->origin * GW_DEADLINE_TICK_S,
                              .nodes = 1};
  int64_t t = (int64_t)(dj->n - 1 - dj->origin);
  int64_t done = t / 2 < jobs[which].work ? t / 2 : jobs[which].work - 1;
  struct sl_job_view jv = {.window = jobs[which].window, .work = jobs[which].work,
                           .overhead = jobs[which].overhead, .t = t, .done = done, .mode = mode,
                           .warm_left = mode == SL_MODE_IDLE ? 0 : 1};
  struct sl_decision dec;
  sl_policy_decide(pol, &jv, &mv, &dec);
  if (dec.mode != SL_MODE_IDLE && dec.mode != SL_MODE_OD &&
      (dec.mode < 0 || (size_t)dec.mode >= dj->n_zones || zv[dec.mode].avail[dj->n - 1] < 1))
    abort(); /* spot only in a zone of the view with capacity now */
  if (isnan(dec.slack_ticks) || !memchr(dec.why, 0, sizeof dec.why))
    abort();
}

static void market_job(struct gw_mh *h, unsigned flags, size_t live, const uint8_t *ticks,
                       int64_t *now_us, int64_t tick_us) {
  struct gw_mhv_set *views = calloc(1, sizeof *views);
  struct job dj = {0};
  struct sl_policy *pol = NULL;
  if (!views || sl_policy_new("spotlab", &pol) < 0)
    abort();
  /* as sched_deadline.c's track(): the last hist ticks of each offer in use */
  size_t hist = GW_MH_TICKS;
  for (size_t i = 0; i < gw_mh_count(h) && dj.n_zones < SL_POLICY_ZONES_MAX; i++) {
    const struct gw_mh_offer *o = gw_mh_at(h, i);
    if (o->n == o->first)
      continue;
    dj.offer[dj.n_zones++] = o;
    hist = o->n - o->first < hist ? o->n - o->first : hist;
  }
  for (size_t z = 0; z < dj.n_zones; z++) {
    dj.from[z] = dj.offer[z]->n - hist;
    if (!(dj.view[z] = gw_mhv_use(views, dj.offer[z], dj.from[z])))
      abort();
  }
  dj.n = hist;
  dj.origin = dj.n - 1;
  unsigned which = (flags & M_JOB) >> 5;
  if (dj.n_zones)
    decide(pol, &dj, which, SL_MODE_IDLE);
  for (size_t k = 0; k < live; k++) {
    for (size_t i = 0; i < gw_mh_count(h); i++) {
      uint8_t b = ticks[(k + i) % live];
      gw_mh_push(gw_mh_at(h, i), b & 1, prices[(b >> 1) & 15] >= 0 &&
                 isfinite(prices[(b >> 1) & 15]) ? prices[(b >> 1) & 15] : 0.5);
    }
    if (!__builtin_add_overflow(*now_us, tick_us, now_us))
      gw_mh_end_tick(h, *now_us);
    if (gw_mhv_sync(views) < 0)
      abort();
    bool grown = true;
    for (size_t z = 0; z < dj.n_zones; z++)
      grown = grown && dj.view[z]->base + dj.view[z]->n > dj.from[z] + dj.n;
    if (dj.n_zones && grown) {
      dj.n++;
      decide(pol, &dj, which, ticks[k] & 1 ? 0 : SL_MODE_OD);
    }
    check_offers(h);
  }
  for (size_t z = 0; z < dj.n_zones; z++)
    gw_mhv_release(dj.view[z]);
  gw_mhv_clear(views);
  free(views);
  sl_policy_free(pol);
}

static void fuzz_market(const uint8_t *data, size_t size) {
  if (size < 2)
    return;
  unsigned flags = data[0], live_b = data[1];
  const uint8_t *p = data + 2, *end = data + size;
  char dir[256], path[300];
  fuzz_make_dir(dir, sizeof dir, "store");
  snprintf(path, sizeof path, "%s/gateway.db", dir);
  struct gw_store *s = NULL;
  char err[256];
  if (gw_store_open(path, &s, err, sizeof err) < 0) {
    fprintf(stderr, "fuzz-store: %s\n", err);
    abort();
  }
  sqlite3 *db = NULL;
  if (sqlite3_open(path, &db) != SQLITE_OK)
    abort();
  sqlite3_busy_timeout(db, 5000);
  int64_t last_chunk[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
  int64_t newest_us = T0_US;
  for (int i = 0; i < RECORDS_MAX && end - p >= 3; i++) {
    struct rec r = {.a = p[0], .n = p[1]};
    uint8_t c = p[2];
    p += 3;
    bool quirky = (r.a & (R_RAW | R_QUIRK)) == (R_RAW | R_QUIRK);
    size_t need = ((r.a & R_CHUNK) == 3 << 4 ? 8 : 0) + (r.a & R_END ? 8 : 0) + quirky;
    if ((size_t)(end - p) < need)
      break;
    int64_t *last = &last_chunk[r.a & R_OFFER];
    switch ((r.a & R_CHUNK) >> 4) {
    case 0:
      r.chunk = *last + 1;
      break;
    case 1:
      r.chunk = *last < 0 ? 0 : *last;
      break;
    case 2:
      r.chunk = c;
      break;
    default:
      r.chunk = get_i64(p);
      p += 8;
    }
    *last = r.chunk;
    if (r.a & R_END) {
      r.end_us = get_i64(p);
      p += 8;
    } else {
      r.end_us = T0_US + (int64_t)((uint64_t)r.chunk * GW_MH_CHUNK % 100000000 + 60) * MINUTE_US;
      if (r.end_us > newest_us)
        newest_us = r.end_us;
    }
    if (quirky)
      r.quirks = *p++;
    if ((size_t)(end - p) < r.n)
      r.n = (size_t)(end - p);
    r.ticks = p;
    p += r.n;
    /* the store's writer is given only the chunk numbers a history makes */
    if (r.a & R_RAW || r.chunk < 0 || r.chunk > CHUNK_NUMBER_MAX)
      write_raw(db, &r);
    else
      write_put(s, &r);
  }
  sqlite3_close(db);

  static const int64_t tick_choice[4] = {MINUTE_US, 1, 0, 20000};
  int64_t tick_us = tick_choice[flags & M_TICK];
  int64_t now_us;
  switch ((flags & M_NOW) >> 2) {
  case 0: now_us = newest_us + MINUTE_US; break;
  case 1: now_us = newest_us + 5 * MINUTE_US; break;
  case 2: now_us = newest_us + 180 * MINUTE_US; break;
  case 3: now_us = newest_us - 60 * MINUTE_US; break;
  case 4: now_us = 0; break;
  case 5: now_us = T0_US + 30 * 1440 * MINUTE_US; break;
  case 6: now_us = newest_us; break;
  default: now_us = 1;
  }
  struct gw_provider *provs[] = {(struct gw_provider *)&local, (struct gw_provider *)&aws};
  struct gw_mh *h = gw_mh_new(s);
  if (!h)
    abort();
  gw_mh_restore(h, provs, 2, tick_us, now_us);
  check_offers(h);
  size_t live = live_b & 15;
  if (live > (size_t)(end - data))
    live = 0; /* the live ticks' bytes: the input's first ones */
  market_job(h, flags, live, data, &now_us, tick_us ? tick_us : 1);
  gw_mh_free(h); /* writes what it holds */
  h = gw_mh_new(s);
  if (!h)
    abort();
  gw_mh_restore(h, provs, 2, tick_us, now_us);
  check_offers(h);
  gw_mh_free(h);
  gw_store_free(s);
  fuzz_remove_dir(dir);
}

/* ---- 1: what the scheduler learned ---- */

enum {
  L_DEADLINE = 1 << 0,
  L_PUT = 1 << 1,
  L_BLOB = 1 << 2,
};

static void must_encode(const json_t *j) {
  char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
  if (!text)
    abort();
  free(text);
}

static void fuzz_learned(const uint8_t *data, size_t size) {
  if (size < 1)
    return;
  unsigned flags = data[0];
  data++;
  size--;
  const char *name = flags & L_DEADLINE ? "deadline" : "placement";
  struct fx *f = fx_new(NULL);
  if (!f)
    abort();
  json_t *body = NULL;
  char why[128];
  bool put = false;
  if (flags & L_PUT && sl_json_parse((const char *)data, size, 64, &body, why, sizeof why) == 0 &&
      json_is_object(body))
    put = gw_store_learned_put(f->store, name, body, 1) == 0;
  json_decref(body);
  if (!put) {
    char path[512];
    snprintf(path, sizeof path, "%s/gateway.db", f->dir);
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    if (sqlite3_open(path, &db) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO learned(name, body, time_us) VALUES(?,?,1)",
                           -1, &st, NULL) != SQLITE_OK)
      abort();
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    if (flags & L_BLOB)
      sqlite3_bind_blob(st, 2, data, (int)size, SQLITE_STATIC);
    else
      sqlite3_bind_text(st, 2, (const char *)data, (int)size, SQLITE_STATIC);
    sqlite3_step(st);
    sqlite3_finalize(st);
    sqlite3_close(db);
  }
  /* the scheduler as the next gateway finds it: nothing learned yet */
  struct gw_sched *s = f->sched;
  gw_place_memory_free(s->mem);
  s->mem = gw_place_memory_new();
  gw_sched_deadline_free(s->dl);
  s->dl = gw_sched_deadline_new(s);
  if (!s->mem || !s->dl)
    abort();
  gw_sched_learned_load(s);

  /* what it holds encodes, and reads back from its own JSON as it is */
  int64_t now = sl_time_mono_us(), now_real = sl_time_real_us();
  json_t *mine = gw_place_memory_json(s->mem, now, now_real);
  must_encode(mine);
  struct gw_place_memory *again = gw_place_memory_new();
  size_t skipped = 0;
  if (!again)
    abort();
  gw_place_memory_load(again, mine, s->provs, s->n_provs, now, now_real, &skipped);
  json_t *twice = gw_place_memory_json(again, now, now_real);
  if (skipped || !json_equal(mine, twice))
    abort();
  json_decref(twice);
  json_decref(mine);
  struct gw_place_rate rates[GW_PLACE_RATES_MAX];
  struct gw_place_ctx c;
  gw_place_memory_view(s->mem, 42, rates, GW_PLACE_RATES_MAX, &c);
  gw_place_memory_free(again);

  mine = gw_sched_deadline_json(s->dl);
  must_encode(mine);
  struct gw_dl *dl = gw_sched_deadline_new(s);
  if (!dl)
    abort();
  gw_sched_deadline_load(dl, mine, &skipped);
  twice = gw_sched_deadline_json(dl);
  if (skipped || !json_equal(mine, twice))
    abort();
  json_decref(twice);
  json_decref(mine);
  gw_sched_deadline_free(dl);

  gw_sched_learned_save(s, true);
  fx_free(f);
}

/* ---- 2: the store's other JSON columns ---- */

enum {
  S_WHAT = 7,       /* the column (below) */
  S_DATA = 1 << 3,  /* a definition of kind "data", an event of kind "metric", else "model" and
                       "preempted" */
  S_BLOB = 1 << 4,  /* a JSON column bound as a blob */
};

enum { C_VAR, C_VAR_NAME, C_DEF, C_DEF_KIND, C_EVENT, C_RECORD, C_SPEC, C_EVENT_STATE };

#define STORE_ROWS_MAX 16

static const char good_var[] = "{\"t\":\"int\",\"v\":7}";
static const char good_spec[] = "{\"layers\":2}";
static const char good_record[] = "{\"spec\":{},\"code\":\"abc\"}";

/* Whether v encodes as JSON, whatever it is (a column may hold a scalar). */
static void must_encode_any(const json_t *v) {
  char *text = v ? sl_json_dump(v, NULL) : NULL;
  if (!text)
    abort();
  free(text);
}

static json_t *must_load(const char *text) {
  json_t *j = json_loads(text, 0, NULL);
  if (!j)
    abort();
  return j;
}

/* The rows of section i (header byte h, then body[0..n)), raw with sqlite3. */
static void write_row(sqlite3 *db, size_t i, uint8_t h, const uint8_t *body, int n) {
  static const char *const sql[] = {
    [C_VAR] = "INSERT OR REPLACE INTO session_vars VALUES('alice','nb',?2,?1)",
    [C_VAR_NAME] = "INSERT OR REPLACE INTO session_vars VALUES('alice','nb',?1,?3)",
    [C_DEF] = "INSERT OR REPLACE INTO session_defs VALUES('alice','nb',?2,?4,?1)",
    [C_DEF_KIND] = "INSERT OR REPLACE INTO session_defs VALUES('alice','nb',?2,?1,?3)",
    [C_EVENT] = "INSERT INTO events VALUES(1,(SELECT MAX(seq)+1 FROM events WHERE job=1),"
                "?5,?6,?1)",
    [C_RECORD] = "INSERT OR REPLACE INTO records VALUES(1,?1)",
    [C_SPEC] = "UPDATE jobs SET spec=?1 WHERE id=1",
    [C_EVENT_STATE] = "INSERT INTO events VALUES(1,(SELECT MAX(seq)+1 FROM events WHERE job=1),"
                      "?5,'state',?1)",
  };
  char row_name[16];
  snprintf(row_name, sizeof row_name, "n%zu", i);
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, sql[h & S_WHAT], -1, &st, NULL) != SQLITE_OK)
    abort();
  /* a name is looked up as text, up to a NUL: one stored otherwise is never found */
  bool name = (h & S_WHAT) == C_VAR_NAME || (h & S_WHAT) == C_DEF_KIND;
  const uint8_t *nul = memchr(body, 0, (size_t)n);
  if (name && nul)
    n = (int)(nul - body);
  if (h & S_BLOB && !name)
    sqlite3_bind_blob(st, 1, body, n, SQLITE_STATIC);
  else
    sqlite3_bind_text(st, 1, (const char *)body, n, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, row_name, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 3, good_var, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 4, h & S_DATA ? "data" : "model", -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 5, T0_US + (int64_t)i);
  sqlite3_bind_text(st, 6, h & S_DATA ? "metric" : "preempted", -1, SQLITE_STATIC);
  sqlite3_step(st); /* a NULL or a repeated key is refused: no row */
  sqlite3_finalize(st);
}

/* What the store answers about session nb, checked: the good variable and
 * definition stay, everything encodes. */
static void check_session(struct gw_store *s) {
  json_t *o = NULL;
  if (gw_store_session_get(s, "alice", "nb", &o) < 0)
    abort();
  json_t *vars = json_object_get(o, "vars"), *defs = json_object_get(o, "defs");
  json_t *want = must_load(good_var), *spec = must_load(good_spec);
  if (!json_is_object(vars) || !json_is_array(defs) || !json_is_object(json_object_get(o, "models")) ||
      !json_equal(json_object_get(vars, "good"), want))
    abort();
  must_encode_any(o);
  bool found = false;
  size_t i;
  json_t *d;
  json_array_foreach(defs, i, d) {
    const char *name = sl_json_get_str(d, "name", NULL), *kind = sl_json_get_str(d, "kind", NULL);
    if (!name || !kind || !json_object_get(d, "spec"))
      abort();
    json_t *one = NULL;
    if (gw_store_session_def(s, "alice", "nb", name, kind, &one) < 0 || !json_equal(one, d))
      abort(); /* one definition reads as the list has it */
    json_decref(one);
    found = found || (!strcmp(name, "good") && json_equal(json_object_get(d, "spec"), spec));
  }
  json_t *one = NULL;
  if (!found || gw_store_session_def(s, "alice", "nb", "good", "model", &one) < 0)
    abort();
  json_decref(one);
  json_decref(want);
  json_decref(spec);
  json_decref(o);
}

static void ignore_checkpoint(void *ctx, int64_t write_ms, int64_t upload_ms) {
  (void)ctx;
  (void)write_ms;
  (void)upload_ms;
}
static void ignore_event(void *ctx, int64_t job, int64_t time_us, const char *kind,
                         const char *state, int64_t steps_lost, bool notice) {
  (void)ctx;
  (void)job;
  (void)time_us;
  (void)steps_lost;
  (void)notice;
  if (!kind || !state)
    abort();
}

/* What the store answers about job 1's events, checked: the first (written
 * by the store) stays readable, everything encodes, and the readers that
 * look inside bodies with SQL still answer. */
static void check_events(struct gw_store *s) {
  json_t *evs = NULL;
  bool more = false;
  if (gw_store_events(s, 1, 0, 1000, &evs, &more) < 0 || !json_is_array(evs) || more ||
      json_integer_value(json_object_get(json_array_get(evs, 0), "seq")) != 1)
    abort();
  must_encode_any(evs);
  json_decref(evs);
  json_t *pre = NULL;
  if (gw_store_preemption_events(s, NULL, 100, &pre) < 0)
    abort();
  size_t i;
  json_t *e;
  json_array_foreach(pre, i, e) {
    if (!json_is_object(e) || !json_is_string(json_object_get(e, "user")))
      abort();
  }
  must_encode_any(pre);
  json_decref(pre);
  int64_t step;
  json_t *counts = NULL;
  struct gw_store_history_fns fns = {ignore_checkpoint, ignore_event};
  if (gw_store_attempt_metric_step(s, 1, &step) < 0 || gw_store_counts(s, &counts) < 0 ||
      gw_store_metric_history(s, &fns, NULL) < 0)
    abort(); /* a damaged body is one event, not every reader's failure */
  must_encode_any(counts);
  json_decref(counts);
}

static void check_jobs(struct gw_store *s) {
  json_t *rec = NULL, *want = must_load(good_record);
  int r = gw_store_record_get(s, 1, &rec);
  if ((r < 0 && r != SL_ENAME) || (r == 0 && !json_is_object(rec)))
    abort();
  if (r == 0)
    must_encode_any(rec);
  json_decref(rec);
  rec = NULL;
  if (gw_store_record_get(s, 2, &rec) < 0 || !json_equal(rec, want))
    abort(); /* another job's record is untouched */
  json_decref(rec);
  json_decref(want);
  struct gw_job j;
  if (gw_store_job_get(s, 1, &j) < 0 || !j.spec)
    abort();
  must_encode_any(j.spec);
  gw_job_done(&j);
  struct gw_job *all = NULL;
  size_t n = 0;
  if (gw_store_jobs_list(s, NULL, false, 10, &all, &n) < 0 || n != 2)
    abort();
  for (size_t i = 0; i < n; i++)
    must_encode_any(all[i].spec);
  gw_store_jobs_free(all, n);
}

static void fuzz_store(const uint8_t *data, size_t size) {
  char dir[256], path[300], err[256];
  fuzz_make_dir(dir, sizeof dir, "store");
  snprintf(path, sizeof path, "%s/gateway.db", dir);
  struct gw_store *s = NULL;
  if (gw_store_open(path, &s, err, sizeof err) < 0) {
    fprintf(stderr, "fuzz-store: %s\n", err);
    abort();
  }
  /* what the gateway wrote itself: a variable and a definition of session
   * nb, two jobs of alice's (1 preempted once), a record of job 2 */
  json_t *vars = json_pack("{s:o}", "good", must_load(good_var));
  json_t *defs = json_pack("[{s:s,s:s,s:o}]", "name", "good", "kind", "model", "spec",
                           must_load(good_spec));
  json_t *rec = must_load(good_record);
  struct gw_job j1 = {.user = "alice", .session = "nb", .kind = "train", .created_us = T0_US};
  struct gw_job j2 = j1;
  j1.spec = j2.spec = defs;
  if (gw_store_session_set(s, "alice", "nb", vars, defs, NULL) < 0 ||
      gw_store_job_create(s, &j1) < 0 || gw_store_job_create(s, &j2) < 0 || j1.id != 1 ||
      gw_store_record_put(s, j2.id, rec) < 0 ||
      gw_store_record_put(s, j1.id, rec) < 0)
    abort();
  json_decref(vars);
  json_decref(defs);
  json_decref(rec);
  sqlite3 *db = NULL;
  if (sqlite3_open(path, &db) != SQLITE_OK ||
      sqlite3_exec(db, "INSERT INTO attempts(job, attempt, outcome) VALUES(1,1,'preempted')",
                   NULL, NULL, NULL) != SQLITE_OK)
    abort();
  sqlite3_busy_timeout(db, 5000);
  /* then the rows as a damaged file has them: sections split at SEP, each a
   * header byte (S_* above) and the column's bytes */
  const uint8_t *p = data, *end = data + size;
  for (size_t i = 0; i < STORE_ROWS_MAX && p < end; i++) {
    const uint8_t *sep = memmem(p, (size_t)(end - p), SEP, 4);
    const uint8_t *stop = sep ? sep : end;
    if (stop > p) /* an empty section has no header byte: no row */
      write_row(db, i, p[0], p + 1, (int)(stop - p - 1));
    p = sep ? sep + 4 : end;
  }
  sqlite3_close(db);
  check_session(s);
  check_events(s);
  check_jobs(s);
  gw_store_free(s);
  fuzz_remove_dir(dir);
}


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  fuzz_quiet_once();
  switch (data[0] % 3) {
  case 0:
    fuzz_market(data + 1, size - 1);
    break;
  case 1:
    fuzz_learned(data + 1, size - 1);
    break;
  default:
    fuzz_store(data + 1, size - 1);
  }
  return 0;
}
