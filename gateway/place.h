/* Placement policy: what a job asks for, which instance fits it, and which
 * offer of the market to launch. Pure functions of the job, the instance
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
};

/* Reads j's options into *ret. */
void gw_place_wants(const struct gw_job *j, struct gw_wants *ret);
/* Whether the running instance in can take a job that wants w. */
bool gw_place_fits(const struct gw_wants *w, const struct gw_inst *in);
/* The cheapest of offers[0..n) that fits w, spot or on-demand as w allows:
 * its index in *ret_i and the market in *ret_spot. SL_ENAME when none does. */
int gw_place_pick(const struct gw_wants *w, const struct gw_offer *offers, size_t n,
                  size_t *ret_i, bool *ret_spot);

#endif
