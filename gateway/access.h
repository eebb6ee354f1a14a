/* Who sees what, for both protocols (kproto.c and http.c): a user sees
 * their own jobs, instances and costs; an admin ([user.NAME] admin = yes)
 * sees every user's. Each protocol says "no" in its own words. */
#ifndef GW_ACCESS_H
#define GW_ACCESS_H

#include "conf.h"
#include "fleet.h"
#include "job.h"
#include "store.h"

#include <stdbool.h>
#include <stdint.h>

/* Who asks: a user of the configuration, and whether they are an admin. */
struct gw_viewer {
  char user[64];
  bool admin;
};

/* Fills ret for user (borrowed): its name, and admin as cfg says. */
void gw_access_viewer(struct gw_viewer *ret, const struct gw_config *cfg, const char *user);
/* Whether v sees what belongs to owner (a job's or an instance's user). */
bool gw_access_sees(const struct gw_viewer *v, const char *owner);
/* The user whose jobs, instances and costs v sees: v's own, or NULL
 * (everyone's) for an admin. Borrowed from v. */
const char *gw_access_whose(const struct gw_viewer *v);
/* Loads job id for v: the live copy (*ret_live true) or a store copy in
 * *tmp, which the caller then frees with gw_job_done. 0; SL_ENAME when no
 * such job exists; -EPERM when it is another user's and v is no admin
 * (tmp then needs nothing). ret_job and ret_live are written only on
 * success. */
int gw_access_job(const struct gw_viewer *v, struct gw_fleet *fleet, struct gw_store *store,
                  int64_t id, struct gw_job *tmp, struct gw_job **ret_job, bool *ret_live);

#endif
