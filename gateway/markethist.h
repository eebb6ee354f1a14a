/* The market's history: for each spot offer (a provider's type, and zone
 * when the offer names one), whether it showed capacity and at what price,
 * one entry per tick of the deadline scheduler (sched_deadline.c), the last
 * GW_MH_TICKS of them in a ring.
 *
 * The history outlives the gateway: every tick's entries go to the store in
 * chunks of GW_MH_CHUNK ticks (the chunk under way written again as it
 * fills, at most every GW_MH_SAVE_US; every chunk at gw_mh_free), and the
 * next gateway on the same state folder reads them back before its first
 * tick. The ticks it was down for are taken as the last state seen when
 * they are at most GW_MH_GAP_FILL_TICKS; after a longer stop the market may
 * have changed past what the old history says, and it starts again.
 * Invariant: an offer's ticks are numbered from its first one, ever (the
 * numbers go on across restarts, so tick k is in chunk k / GW_MH_CHUNK). */
#ifndef GW_MARKETHIST_H
#define GW_MARKETHIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GW_MH_TICKS (7 * 1440)  /* a week of 60 s ticks per offer: time of day shows over days */
#define GW_MH_OFFERS_MAX 64
#define GW_MH_CHUNK 60
#define GW_MH_GAP_FILL_TICKS 60 /* an hour: a restart's gap taken as the last state seen */
#define GW_MH_SAVE_US (10 * INT64_C(1000000))
#define GW_MH_UP 1000           /* capacity shown, count unknown: enough for any one job */

struct gw_provider;
struct gw_store;

struct gw_mh_offer {
  const struct gw_provider *prov;
  char type[64], zone[32];
  int32_t avail[GW_MH_TICKS];  /* ring: tick k at k % GW_MH_TICKS */
  double price[GW_MH_TICKS];
  size_t n;                    /* ticks recorded, ever */
  size_t first;                /* the oldest tick the ring holds (n - first <= GW_MH_TICKS) */
  size_t saved;                /* ticks before this one are in the store */
  bool lost;                   /* a capacity failure or preemption in the tick under way */
  bool pushed;                 /* recorded in the tick under way */
};

struct gw_mh;

/* A history kept in store (borrowed; NULL: in memory only). */
struct gw_mh *gw_mh_new(struct gw_store *store);
/* Writes what is not saved yet, then frees h. */
struct gw_mh *gw_mh_free(struct gw_mh *h);

/* Reads the stored history of the offers of provs (the others' rows stay
 * for a gateway that enables their provider again) once, before the first
 * tick: tick_wall_us is the wall time a tick lasts, now_us the wall clock.
 * A row that cannot be read (a malformed chunk) breaks an offer's history:
 * only the ticks after it are used. Returns the offers restored. */
size_t gw_mh_restore(struct gw_mh *h, struct gw_provider *const *provs, size_t n_provs,
                     int64_t tick_wall_us, int64_t now_us);

size_t gw_mh_count(const struct gw_mh *h);
struct gw_mh_offer *gw_mh_at(struct gw_mh *h, size_t i);
/* The offer, or NULL; with create, a new one (NULL when GW_MH_OFFERS_MAX are
 * kept). An offer stays at its address for the history's life. */
struct gw_mh_offer *gw_mh_find(struct gw_mh *h, const struct gw_provider *prov, const char *type,
                               const char *zone, bool create);
/* Records one tick of o: capacity shown (up) at price. */
void gw_mh_push(struct gw_mh_offer *o, bool up, double price);
/* Ends a tick: every offer not pushed in it (gone from the market) records
 * none at its last price, the lost marks are cleared, and the store is
 * written when GW_MH_SAVE_US passed since it last was. */
void gw_mh_end_tick(struct gw_mh *h, int64_t now_us);
/* The entry of tick k of o (k in [o->first, o->n)). */
static inline int32_t gw_mh_avail(const struct gw_mh_offer *o, size_t k) {
  return o->avail[k % GW_MH_TICKS];
}
static inline double gw_mh_price(const struct gw_mh_offer *o, size_t k) {
  return o->price[k % GW_MH_TICKS];
}

#endif
