/* One shared flat copy of an offer's history per offer in use (mhview.h). */
#include "mhview.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MIN_CAP 256

static size_t oldest(const struct gw_mh_offer *o) {
  size_t ring = o->n > GW_MH_TICKS ? o->n - GW_MH_TICKS : 0;
  return o->first > ring ? o->first : ring;
}

/* Caps are even: the prices after cap int32s stay aligned. */
static size_t even(size_t n) {
  return n + (n & 1);
}

/* At least need, a quarter more than cap at a time (amortised appends
 * without doubling a week's copy). */
static size_t grown(size_t cap, size_t need) {
  size_t c = cap < MIN_CAP ? MIN_CAP : cap;
  while (c < need)
    c += c / 4;
  return even(c);
}

/* Moves v into one new block of cap ticks (avail, then price): its ticks
 * from index drop on, at index shift. -ENOMEM leaves v as it was. */
static int resize(struct gw_mhv *v, size_t cap, size_t drop, size_t shift) {
  char *mem = malloc(cap * (sizeof *v->avail + sizeof *v->price));
  if (!mem)
    return -ENOMEM;
  int32_t *avail = (int32_t *)mem;
  double *price = (double *)(mem + cap * sizeof *avail);
  if (v->n > drop) {
    memcpy(avail + shift, v->avail + drop, (v->n - drop) * sizeof *avail);
    memcpy(price + shift, v->price + drop, (v->n - drop) * sizeof *price);
  }
  free(v->avail); /* the block's start */
  v->avail = avail;
  v->price = price;
  v->cap = cap;
  return 0;
}

static void copy_ticks(struct gw_mhv *v, size_t at, size_t from, size_t to) {
  for (size_t k = from; k < to; k++, at++) {
    v->avail[at] = gw_mh_avail(v->offer, k);
    v->price[at] = gw_mh_price(v->offer, k);
  }
}

/* Appends v's offer's ticks since v's newest. */
static int catch_up(struct gw_mhv *v) {
  const struct gw_mh_offer *o = v->offer;
  size_t end = v->base + v->n;
  if (end == o->n)
    return 0;
  size_t need = v->n + (o->n - end);
  if (need > v->cap && resize(v, grown(v->cap, need), 0, 0) < 0)
    return -ENOMEM;
  /* ticks the ring no longer holds (the view could not grow for a week)
   * read as none at the last price, as markethist records a tick it missed */
  size_t at = v->n;
  double last = at ? v->price[at - 1] : gw_mh_price(o, oldest(o));
  for (; end < oldest(o); end++, at++) {
    v->avail[at] = 0;
    v->price[at] = last;
  }
  copy_ticks(v, at, end, o->n);
  v->n = need;
  return 0;
}

/* Prepends v's offer's ticks [from, base). */
static int extend_back(struct gw_mhv *v, size_t from) {
  size_t more = v->base - from;
  size_t need = v->n + more + MIN_CAP; /* a week at first: no doubling past it */
  if (resize(v, v->cap > need ? v->cap : even(need), 0, more) < 0)
    return -ENOMEM;
  v->base = from;
  v->n += more;
  copy_ticks(v, 0, from, from + more);
  return 0;
}

struct gw_mhv *gw_mhv_use(struct gw_mhv_set *set, const struct gw_mh_offer *offer, size_t from) {
  if (from < oldest(offer))
    from = oldest(offer);
  struct gw_mhv *v = NULL, *free_slot = NULL;
  for (size_t i = 0; i < GW_MH_OFFERS_MAX && !v; i++) {
    if (set->v[i].offer == offer)
      v = &set->v[i];
    else if (!set->v[i].offer && !free_slot)
      free_slot = &set->v[i];
  }
  if (!v) {
    if (!free_slot)
      return NULL; /* one slot per offer, as many as the history keeps */
    v = free_slot;
    *v = (struct gw_mhv){.offer = offer, .base = offer->n};
  }
  if (catch_up(v) < 0 || (from < v->base && extend_back(v, from) < 0)) {
    if (!v->refs)
      gw_mhv_release(v);
    return NULL;
  }
  v->refs++;
  return v;
}

void gw_mhv_release(struct gw_mhv *v) {
  if (v->refs > 0)
    v->refs--;
  if (v->refs)
    return;
  free(v->avail); /* the block of both arrays */
  memset(v, 0, sizeof *v);
}

int gw_mhv_sync(struct gw_mhv_set *set) {
  int r = 0;
  for (size_t i = 0; i < GW_MH_OFFERS_MAX; i++)
    if (set->v[i].offer && catch_up(&set->v[i]) < 0)
      r = -ENOMEM;
  return r;
}

void gw_mhv_trim_begin(struct gw_mhv_set *set) {
  for (size_t i = 0; i < GW_MH_OFFERS_MAX; i++)
    set->v[i].keep_from = SIZE_MAX;
}

void gw_mhv_trim_end(struct gw_mhv_set *set) {
  for (size_t i = 0; i < GW_MH_OFFERS_MAX; i++) {
    struct gw_mhv *v = &set->v[i];
    if (!v->offer || v->keep_from <= v->base || v->keep_from == SIZE_MAX)
      continue;
    size_t drop = v->keep_from - v->base;
    if (drop > v->n || 4 * drop < v->n)
      continue; /* a reader past the newest tick (none is), or too little to move */
    size_t cap = even(v->n - drop + MIN_CAP);
    if (resize(v, cap < v->cap ? cap : v->cap, drop, 0) < 0)
      continue; /* kept as it is: it is still whole */
    v->base += drop;
    v->n -= drop;
  }
}

void gw_mhv_clear(struct gw_mhv_set *set) {
  for (size_t i = 0; i < GW_MH_OFFERS_MAX; i++)
    free(set->v[i].avail);
  memset(set, 0, sizeof *set);
}

size_t gw_mhv_bytes(const struct gw_mhv_set *set) {
  size_t b = 0;
  for (size_t i = 0; i < GW_MH_OFFERS_MAX; i++)
    b += set->v[i].cap * (sizeof *set->v[i].avail + sizeof *set->v[i].price);
  return b;
}
