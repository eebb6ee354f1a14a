/* Placement policy: what a job asks for, which instance fits it, and which
 * offer of the market to launch, for one instance or for a gang of N
 * (nodes=N) placed all or none. Pure functions of the job, the instances
 * and the offers: no I/O, no state, so the scheduler and a simulator can
 * call them alike. */
#ifndef GW_PLACE_H
#define GW_PLACE_H

#include "fleet.h"
#include "job.h"
#include "provider.h"

#include <stdbool.h>
#include <stddef.h>

#define GW_WANTS_TYPES_MAX 16

/* An offer of the market across providers (%instances, placement). */
struct gw_offer {
  struct gw_provider *prov;
  struct gw_instance_type type;
};

/* A job's resource options (DESIGN.md §3). */
struct gw_wants {
  int gpus;                     /* 0: any */
  int spot;                     /* 1 yes, 0 no, -1 auto */
  double max_price;             /* 0: no cap */
  char types[GW_WANTS_TYPES_MAX][64]; /* instance=...; none: any */
  size_t n_types;
  int nodes;                    /* instances used together (nodes=N); 1 unless asked */
};

/* Reads j's options into *ret. */
void gw_place_wants(const struct gw_job *j, struct gw_wants *ret);
/* Whether the running instance in can take a job that wants w. */
bool gw_place_fits(const struct gw_wants *w, const struct gw_inst *in);
/* The cheapest of offers[0..n) that fits w, spot or on-demand as w allows:
 * its index in *ret_i and the market in *ret_spot. SL_ENAME when none does. */
int gw_place_pick(const struct gw_wants *w, const struct gw_offer *offers, size_t n,
                  size_t *ret_i, bool *ret_spot);

/* The nodes option of a job's options object: a whole number (plain or a
 * session value {"t":"num","v":N}); 1 when absent; -1 when it is not a
 * whole number in 1..GW_GANG_MAX. */
int gw_place_nodes(const json_t *options);

/* A gang: w->nodes instances of one provider, one instance type and one
 * market (spot or on-demand), so that every rank runs on the same hardware
 * at the same price. As many as fit are idle workers, the rest are
 * launched from one offer. */
struct gw_gang_pick {
  size_t idle[GW_GANG_MAX];     /* indices into the idle array, in its order */
  size_t n_idle;
  size_t offer;                 /* the offer to launch n_launch of (n_launch > 0) */
  bool spot;
  size_t n_launch;              /* w->nodes - n_idle */
  double usd_per_hour;          /* the whole gang's price */
};

/* Picks a gang for w among the idle workers idle[0..n_idle) (registered,
 * jobless; those that do not fit w are passed over) and the offers: one of
 * idle workers alone when there is one (it starts now), the cheapest such;
 * else the cheapest per hour, then the one that launches fewest. At most max_launch
 * new instances (0: none may be launched now). All or none: 0 with *ret
 * filled; -EAGAIN when a gang could be formed but not now (too few idle
 * workers and max_launch too small); SL_ENAME when no offer fits w and the
 * idle workers do not make a gang either. */
int gw_place_pick_gang(const struct gw_wants *w, const struct gw_inst *const *idle, size_t n_idle,
                       const struct gw_offer *offers, size_t n_offers, size_t max_launch,
                       struct gw_gang_pick *ret);

#endif
