/* The market's history as the deadline jobs read it (sched_deadline.c): for
 * each offer in use, one flat copy of its ticks from the oldest any job
 * needs to the newest, shared by every job that uses the offer.
 *
 * markethist.h keeps a ring of each offer's last week; a policy reads its
 * market view as plain arrays that only grow (sl_policy.h). A week of one
 * offer is about 120 KB; the jobs that use the same offer point into one
 * copy, each from its own first tick, and the copy keeps only the ticks
 * some job still reads.
 * Invariant: a view holds the offer's ticks [base, base + n), and base + n
 * is the offer's n after every gw_mhv_sync. */
#ifndef GW_MHVIEW_H
#define GW_MHVIEW_H

#include "markethist.h"

#include <stddef.h>
#include <stdint.h>

struct gw_mhv {
  const struct gw_mh_offer *offer; /* NULL: a free slot */
  int32_t *avail;
  double *price;
  size_t base, n, cap;             /* ticks [base, base + n) of offer, in arrays of cap */
  size_t refs;                     /* the jobs that read it */
  size_t keep_from;                /* the oldest tick a job reads (gw_mhv_trim's pass) */
};

struct gw_mhv_set {
  struct gw_mhv v[GW_MH_OFFERS_MAX];
};

/* The view of offer that holds its ticks from `from` (at least
 * max(offer->first, offer->n - GW_MH_TICKS)) to its newest, with one more
 * reader; NULL when out of memory (nothing changed then). */
struct gw_mhv *gw_mhv_use(struct gw_mhv_set *set, const struct gw_mh_offer *offer, size_t from);
/* One reader fewer; the last one frees the view. */
void gw_mhv_release(struct gw_mhv *v);
/* Appends the ticks each view's offer recorded since (after gw_mh_end_tick).
 * -ENOMEM: a view could not grow (it is left as it was, and catches up on
 * a later call while its offer's ring still holds the ticks). */
int gw_mhv_sync(struct gw_mhv_set *set);
/* The pointer into v's arrays for tick k of its offer (k in [base, base + n)). */
static inline const int32_t *gw_mhv_avail(const struct gw_mhv *v, size_t k) {
  return v->avail + (k - v->base);
}
static inline const double *gw_mhv_price(const struct gw_mhv *v, size_t k) {
  return v->price + (k - v->base);
}
/* Trimming: every view's keep_from is set to SIZE_MAX by gw_mhv_trim_begin,
 * lowered by each reader's first tick (gw_mhv_keep), and gw_mhv_trim_end
 * drops the ticks before it once they are a quarter of the view or more. */
void gw_mhv_trim_begin(struct gw_mhv_set *set);
static inline void gw_mhv_keep(struct gw_mhv *v, size_t from) {
  if (from < v->keep_from)
    v->keep_from = from;
}
void gw_mhv_trim_end(struct gw_mhv_set *set);
/* Frees every view. */
void gw_mhv_clear(struct gw_mhv_set *set);
/* Bytes held by the views' arrays. */
size_t gw_mhv_bytes(const struct gw_mhv_set *set);

#endif
