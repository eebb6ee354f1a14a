/* The market's history (markethist.h): each spot offer's ticks in a ring,
 * and in the store. */
#include "markethist.h"

#include "provider.h"
#include "store.h"

#include "sl_err.h"
#include "sl_log.h"

#include <stdlib.h>
#include <string.h>

#define T "gateway.market"
#define KEEP_CHUNKS (GW_MH_TICKS / GW_MH_CHUNK + 1)

_Static_assert(GW_MH_CHUNK == GW_STORE_MARKET_CHUNK_MAX, "a chunk is a store row");

struct gw_mh {
  struct gw_store *store;
  struct gw_mh_offer *offers;  /* GW_MH_OFFERS_MAX */
  size_t n_offers;
  int64_t saved_us;            /* wall clock of the last write; 0: none yet */
  int64_t last_tick_us;        /* wall clock of the newest tick */
  bool failing;                /* the last write was refused (told once) */
};

struct gw_mh *gw_mh_new(struct gw_store *store) {
  struct gw_mh *h = calloc(1, sizeof *h);
  if (!h || !(h->offers = calloc(GW_MH_OFFERS_MAX, sizeof *h->offers))) {
    free(h);
    return NULL;
  }
  h->store = store;
  return h;
}

static void save(struct gw_mh *h, int64_t now_us);

struct gw_mh *gw_mh_free(struct gw_mh *h) {
  if (!h)
    return NULL;
  save(h, h->last_tick_us);
  free(h->offers);
  free(h);
  return NULL;
}

size_t gw_mh_count(const struct gw_mh *h) {
  return h->n_offers;
}

struct gw_mh_offer *gw_mh_at(struct gw_mh *h, size_t i) {
  return i < h->n_offers ? &h->offers[i] : NULL;
}

struct gw_mh_offer *gw_mh_find(struct gw_mh *h, const struct gw_provider *prov, const char *type,
                               const char *zone, bool create) {
  for (size_t i = 0; i < h->n_offers; i++)
    if (h->offers[i].prov == prov && !strcmp(h->offers[i].type, type) &&
        !strcmp(h->offers[i].zone, zone))
      return &h->offers[i];
  if (!create || h->n_offers == GW_MH_OFFERS_MAX)
    return NULL;
  struct gw_mh_offer *o = &h->offers[h->n_offers++];
  memset(o, 0, sizeof *o);
  o->prov = prov;
  snprintf(o->type, sizeof o->type, "%s", type);
  snprintf(o->zone, sizeof o->zone, "%s", zone);
  return o;
}

void gw_mh_push(struct gw_mh_offer *o, bool up, double price) {
  o->avail[o->n % GW_MH_TICKS] = up ? GW_MH_UP : 0;
  o->price[o->n % GW_MH_TICKS] = price;
  o->n++;
  o->pushed = true;
  if (o->n - o->first > GW_MH_TICKS)
    o->first = o->n - GW_MH_TICKS;
}

/* ---- the store ---- */

/* Chunks of o from tick `from` on, into c (room for max); their count. */
static size_t chunks_of(const struct gw_mh_offer *o, size_t from, int64_t end_us,
                        struct gw_market_chunk *c, size_t max) {
  size_t n = 0;
  for (size_t k0 = from / GW_MH_CHUNK * GW_MH_CHUNK; k0 < o->n && n < max; k0 += GW_MH_CHUNK) {
    if (k0 < o->first)
      continue; /* its head left the ring (it was written before) */
    struct gw_market_chunk *ch = &c[n++];
    memset(ch, 0, sizeof *ch);
    snprintf(ch->provider, sizeof ch->provider, "%s", o->prov->name);
    snprintf(ch->type, sizeof ch->type, "%s", o->type);
    snprintf(ch->zone, sizeof ch->zone, "%s", o->zone);
    ch->chunk = (int64_t)(k0 / GW_MH_CHUNK);
    ch->end_us = end_us;
    for (size_t k = k0; k < o->n && k < k0 + GW_MH_CHUNK; k++) {
      ch->up[ch->n] = gw_mh_avail(o, k) > 0;
      ch->price[ch->n++] = gw_mh_price(o, k);
    }
  }
  return n;
}

static void save(struct gw_mh *h, int64_t now_us) {
  if (!h->store)
    return;
  size_t max = 0;
  for (size_t i = 0; i < h->n_offers; i++)
    if (h->offers[i].n > h->offers[i].saved)
      max += (h->offers[i].n - h->offers[i].saved) / GW_MH_CHUNK + 2;
  if (!max)
    return;
  struct gw_market_chunk *c = malloc(max * sizeof *c);
  if (!c)
    return;
  size_t n = 0;
  for (size_t i = 0; i < h->n_offers; i++) {
    const struct gw_mh_offer *o = &h->offers[i];
    if (o->n > o->saved)
      n += chunks_of(o, o->saved, h->last_tick_us, c + n, max - n);
  }
  int r = gw_store_market_put(h->store, c, n, KEEP_CHUNKS);
  free(c);
  h->saved_us = now_us;
  if (r < 0) {
    if (!h->failing)
      sl_warn(T, "the market's history could not be written (%s); kept in memory, written again "
              "later", sl_strerror(r));
    h->failing = true;
    return;
  }
  if (h->failing)
    sl_info(T, "the market's history is written again");
  h->failing = false;
  for (size_t i = 0; i < h->n_offers; i++)
    h->offers[i].saved = h->offers[i].n;
}

void gw_mh_end_tick(struct gw_mh *h, int64_t now_us) {
  for (size_t i = 0; i < h->n_offers; i++) {
    struct gw_mh_offer *o = &h->offers[i];
    if (!o->pushed) /* gone from the market: no capacity */
      gw_mh_push(o, false, o->n > o->first ? gw_mh_price(o, o->n - 1) : 0);
    o->lost = o->pushed = false;
  }
  h->last_tick_us = now_us;
  if (!h->saved_us || now_us - h->saved_us >= GW_MH_SAVE_US || now_us < h->saved_us)
    save(h, now_us);
}

/* ---- restore ---- */

struct restore {
  struct gw_mh *h;
  struct gw_provider *const *provs;
  size_t n_provs;
  struct gw_mh_offer *o;       /* the offer being read; NULL: rows skipped */
  char key[32 + 64 + 32 + 3];  /* its provider, type and zone */
  int64_t end_us;
  int64_t tick_wall_us, now_us;
  size_t restored, malformed;
};

/* The offer's rows are read: the ticks it was down for, or a fresh start. */
static void finish_offer(struct restore *rs) {
  struct gw_mh_offer *o = rs->o;
  rs->o = NULL;
  if (!o)
    return;
  o->saved = o->n; /* what it holds is in the store */
  if (o->n == o->first)
    return;
  /* the ticks between the last one kept and the one about to be recorded */
  int64_t tw = rs->tick_wall_us, since = rs->now_us - rs->end_us;
  int64_t gap = since > tw ? (since + tw / 2) / tw - 1 : 0;
  if (gap > GW_MH_GAP_FILL_TICKS) {
    /* down too long: the market now may be past what it said then */
    o->n = o->first = o->saved = (o->n + GW_MH_CHUNK - 1) / GW_MH_CHUNK * GW_MH_CHUNK;
    return;
  }
  bool up = gw_mh_avail(o, o->n - 1) > 0;
  double price = gw_mh_price(o, o->n - 1);
  for (int64_t k = 0; k < gap; k++)
    gw_mh_push(o, up, price);
  if (rs->end_us + gap * tw > rs->h->last_tick_us)
    rs->h->last_tick_us = rs->end_us + gap * tw; /* the clock of its newest tick, for its chunk */
  rs->restored++;
}

static int restore_chunk(const struct gw_market_chunk *c, void *data) {
  struct restore *rs = data;
  char key[sizeof rs->key];
  snprintf(key, sizeof key, "%s\n%s\n%s", c->provider, c->type, c->zone);
  if (strcmp(key, rs->key)) {
    finish_offer(rs);
    snprintf(rs->key, sizeof rs->key, "%s", key);
    for (size_t i = 0; i < rs->n_provs; i++)
      if (!strcmp(rs->provs[i]->name, c->provider))
        rs->o = gw_mh_find(rs->h, rs->provs[i], c->type, c->zone, true);
  }
  struct gw_mh_offer *o = rs->o;
  if (!o)
    return 0;
  if (!c->n) { /* unreadable: the history goes on after it */
    rs->malformed++;
    if (c->chunk >= 0)
      o->n = o->first = ((size_t)c->chunk + 1) * GW_MH_CHUNK;
    return 0;
  }
  size_t k0 = (size_t)c->chunk * GW_MH_CHUNK;
  if (k0 != o->n || o->n == o->first)
    o->n = o->first = k0; /* not where the ticks before it end: it starts again here */
  for (size_t k = 0; k < c->n; k++)
    gw_mh_push(o, c->up[k], c->price[k]);
  rs->end_us = c->end_us;
  return 0;
}

size_t gw_mh_restore(struct gw_mh *h, struct gw_provider *const *provs, size_t n_provs,
                     int64_t tick_wall_us, int64_t now_us) {
  if (!h->store || h->n_offers)
    return 0;
  struct restore rs = {.h = h, .provs = provs, .n_provs = n_provs,
                       .tick_wall_us = tick_wall_us > 0 ? tick_wall_us : 1, .now_us = now_us};
  int r = gw_store_market_each(h->store, restore_chunk, &rs);
  finish_offer(&rs);
  if (r < 0)
    sl_warn(T, "the market's history could not be read (%s); it starts again", sl_strerror(r));
  if (rs.malformed)
    sl_warn(T, "%zu chunk(s) of the market's history could not be read; the ticks before them "
            "are not used", rs.malformed);
  if (rs.restored)
    sl_info(T, "market history of %zu offer(s) restored", rs.restored);
  return rs.restored;
}
