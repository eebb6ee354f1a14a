/* Who sees what (access.h). The one place the rule lives: the kernel
 * protocol and the HTTP API both ask here, and differ only in how they
 * answer a refusal (kproto: a job that does not exist; http: 403). */
#include "access.h"

#include "sl_err.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

void gw_access_viewer(struct gw_viewer *ret, const struct gw_config *cfg, const char *user) {
  snprintf(ret->user, sizeof ret->user, "%s", user);
  ret->admin = gw_config_user_admin(cfg, user);
}

bool gw_access_sees(const struct gw_viewer *v, const char *owner) {
  return v->admin || !strcmp(v->user, owner);
}

const char *gw_access_whose(const struct gw_viewer *v) {
  return v->admin ? NULL : v->user;
}

int gw_access_job(const struct gw_viewer *v, struct gw_fleet *fleet, struct gw_store *store,
                  int64_t id, struct gw_job *tmp, struct gw_job **ret_job, bool *ret_live) {
  struct gw_job *j = id > 0 ? gw_fleet_job(fleet, id) : NULL;
  bool live = j != NULL;
  if (!j && id > 0 && gw_store_job_get(store, id, tmp) == 0)
    j = tmp;
  if (!j)
    return SL_ENAME;
  if (!gw_access_sees(v, j->user)) {
    if (j == tmp)
      gw_job_done(tmp);
    return -EPERM;
  }
  *ret_job = j;
  *ret_live = live;
  return 0;
}
