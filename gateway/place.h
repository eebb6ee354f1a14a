/* Placement policy: what a job asks for, which instance fits it, and which
 * offer of the market to launch, for one instance or for a gang of N
 * (nodes=N) placed all or none, by expected cost per unit of work
 * (sl_policy_rank). Pure functions of the job, the instances, the offers
 * and what the gateway remembers (struct gw_place_ctx): no I/O, no clock,
 * no state, so the scheduler and a simulator can call them alike. */
#ifndef GW_PLACE_H
#define GW_PLACE_H

#include "fleet.h"
#include "job.h"
#include "provider.h"

#include "sl_time.h"

#include <stdbool.h>
#include <stddef.h>

#define GW_WANTS_TYPES_MAX 16
#define GW_PLACE_RATES_MAX 16
/* Every failure makes its placement dearer for GW_PLACE_MEMORY_US, less
 * and less; a capacity failure in the current placement pass holds it
 * back for the rest of the pass (the next best is tried at once). */
#define GW_PLACE_MEMORY_US (15 * 60 * SL_US_PER_S)
/* Assumed until measured, in the provider's seconds. */
#define GW_PLACE_RESTART_S 180.0        /* from an interruption to work going on */
#define GW_PLACE_CHECKPOINT_S 600.0     /* between checkpoints */
#define GW_PLACE_MTTP_S 7200.0          /* a spot offer's mean time to preemption */
#define GW_PLACE_NOTICE_SHARE 0.5       /* interruptions whose notice saves the work since
                                         * the last checkpoint */
#define GW_PLACE_REMAINING_H 1.0        /* work left, in hours of the offer, to spread a
                                         * checkpoint's move over when no step rate is known */

/* An offer of the market across providers (%instances, placement). */
struct gw_offer {
  struct gw_provider *prov;
  struct gw_instance_type type;
  char region[32];              /* type.region, else the provider's region; "" unknown */
  double time_scale;            /* provider seconds per wall second; 0 read as 1 */
};

/* A job's resource options (DESIGN.md §3). */
struct gw_wants {
  int gpus;                     /* 0: any */
  int spot;                     /* 1 yes, 0 no, -1 auto */
  double max_price;             /* 0: no cap */
  char types[GW_WANTS_TYPES_MAX][64]; /* instance=...; none: any */
  char allowed[GW_WANTS_TYPES_MAX][64]; /* the types its user may have; none: any */
  size_t n_allowed;
  size_t n_types;
  int nodes;                    /* instances used together (nodes=N); 1 unless asked */
  char region[32];              /* region=; "": any */
};

/* A recent failure of one placement: (provider, type, zone, market). */
struct gw_place_failure {
  const struct gw_provider *prov;
  char type[64];
  char zone[32];                /* "": the provider chose the zone (matches every zone) */
  bool spot;
  bool capacity;                /* a launch refused for capacity; else a preemption */
  int count;                    /* failures in a row, each within the memory of the last */
  int64_t at_us;                /* monotonic: the last one */
};

/* A measured step rate of the job's kind of work on one instance type. */
struct gw_place_rate {
  char type[64];
  char gpu_model[32];           /* the type's, to scale the rate to other types */
  int gpus;
  double steps_per_s;           /* wall-clock */
};

/* What placement knows beyond the offers, for one job (or none: %instances).
 * Everything is borrowed; zero fields are unknown. */
struct gw_place_ctx {
  int64_t now_us;               /* monotonic, for failures */
  int64_t pass_us;              /* monotonic: the placement pass began (capacity failures
                                 * since hold their placement back); 0: now_us */
  int64_t now_real_us;          /* wall clock, for gw_instance_type.unavailable_until_us */
  const struct gw_place_failure *failures;
  size_t n_failures;
  const struct gw_place_rate *rates; /* the job's own and earlier same-shaped jobs' */
  size_t n_rates;
  double restart_s;             /* wall: preempted to resumed, as measured */
  double checkpoint_s;          /* wall: between the job's checkpoints */
  double checkpoint_gb;         /* what a restart elsewhere brings along */
  double remaining_steps;
};

/* One offer in one market, scored for a job. */
struct gw_place_score {
  double usd_per_unit;          /* expected USD per unit of work, penalty included */
  double efficiency;            /* share of paid time that makes progress */
  double penalty;               /* factor >= 1 from recent failures */
  bool measured;                /* units are steps (a step rate is known); else prior units */
  bool held;                    /* refused capacity in this pass: not tried again in it */
  char why[256];
};

/* Reads j's options into *ret. */
void gw_place_wants(const struct gw_job *j, struct gw_wants *ret);
/* Limits w to the types of list (TYPE,TYPE, as [group.NAME]
 * instance_types), or lifts no limit when list is NULL or empty. */
void gw_place_allow(struct gw_wants *w, const char *list);
/* Whether w may run on instance type type: one its user is allowed and,
 * when it names types, one of them. */
bool gw_place_type_allowed(const struct gw_wants *w, const char *type);
/* Whether the running instance in can take a job that wants w. */
bool gw_place_fits(const struct gw_wants *w, const struct gw_inst *in);
/* Scores offer o in market spot for w's nodes instances, with what c
 * knows. -1 when it does not fit w (type, gpus, market, price, region);
 * then *ret is untouched. */
int gw_place_score(const struct gw_wants *w, const struct gw_place_ctx *c,
                   const struct gw_offer *o, bool spot, struct gw_place_score *ret);
/* The offer and market of offers[0..n) with the least expected cost per
 * unit of work that fits w and is not held: its index in *ret_i and the
 * market in *ret_spot (spot first on a tie). SL_ENAME when none fits w,
 * -EAGAIN when every one that fits is held (capacity refused lately). */
int gw_place_pick(const struct gw_wants *w, const struct gw_place_ctx *c,
                  const struct gw_offer *offers, size_t n, size_t *ret_i, bool *ret_spot);

/* Why no offer of offers[0..n) fits w, in why: the first of its options,
 * taken in turn (instance, region, gpus, spot, max_price), that leaves none
 * ("instance type p9.huge is not offered here (offered: ...)"). 0 when one
 * fits (why untouched), SL_ENAME when none does. */
int gw_place_explain(const struct gw_wants *w, const struct gw_offer *offers, size_t n, char *why,
                     size_t why_size);

/* One row of the ranking (%instances). */
struct gw_place_ranked {
  size_t offer;
  bool spot;
  struct gw_place_score score;
};
/* Every (offer, market) of offers[0..n) that fits w, best first (held
 * ones last), at most max into ret. Returns how many. */
size_t gw_place_rank(const struct gw_wants *w, const struct gw_place_ctx *c,
                     const struct gw_offer *offers, size_t n, struct gw_place_ranked *ret,
                     size_t max);

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
  double usd_per_unit;          /* its expected cost per unit of work */
};

/* Picks a gang for w among the idle workers idle[0..n_idle) (registered,
 * jobless; those that do not fit w are passed over) and the offers: one of
 * idle workers alone when there is one (it starts now), the best such;
 * else the least expected cost per unit of work (the gang's price, work
 * and interruptions: any member lost stops all), then the one that
 * launches fewest. At most max_launch new instances (0: none may be
 * launched now); held offers are not launched from. All or none: 0 with
 * *ret filled; -EAGAIN when a gang could be formed but not now; SL_ENAME
 * when no offer fits w and the idle workers do not make a gang either. */
int gw_place_pick_gang(const struct gw_wants *w, const struct gw_place_ctx *c,
                       const struct gw_inst *const *idle, size_t n_idle,
                       const struct gw_offer *offers, size_t n_offers, size_t max_launch,
                       struct gw_gang_pick *ret);

#endif
