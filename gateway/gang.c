/* Gang members and the outcome of a gang's attempt (gang.h). */
#include "gang.h"

#include <string.h>

int gw_gang_rank(const struct gw_gang *g, const char *instance) {
  for (int r = 0; g && instance && r < g->n; r++)
    if (!strcmp(g->m[r].instance, instance))
      return r;
  return -1;
}

enum gw_gang_end gw_gang_end_from_status(const char *status) {
  if (!strcmp(status, "succeeded"))
    return GW_GANG_SUCCEEDED;
  if (!strcmp(status, "preempted"))
    return GW_GANG_PREEMPTED;
  if (!strcmp(status, "cancelled"))
    return GW_GANG_CANCELLED;
  return GW_GANG_FAILED;
}

int gw_gang_live(const struct gw_gang *g) {
  int n = 0;
  for (int r = 0; r < g->n; r++)
    n += g->m[r].end == GW_GANG_LIVE;
  return n;
}

bool gw_gang_broken(const struct gw_gang *g) {
  for (int r = 0; r < g->n; r++)
    if (g->m[r].end != GW_GANG_LIVE && g->m[r].end != GW_GANG_SUCCEEDED)
      return true;
  return false;
}

/* A process killed by a signal the worker did not send (128 + N). */
static bool killed(int64_t exit_code) {
  return exit_code > 128 && exit_code <= 128 + 64;
}

enum gw_gang_outcome gw_gang_outcome(const struct gw_gang *g, bool cancel_requested, bool finished,
                                     int *ret_rank, bool *ret_notice, int64_t *ret_exit_code) {
  int lost = -1, failed = -1;
  bool notice = false, all_ok = true;
  for (int r = 0; r < g->n; r++) {
    const struct gw_gang_member *m = &g->m[r];
    notice |= m->noticed;
    if ((m->end == GW_GANG_LOST || m->noticed) && lost < 0)
      lost = r;
    if (m->end == GW_GANG_FAILED && failed < 0)
      failed = r;
    all_ok &= m->end == GW_GANG_SUCCEEDED;
  }
  *ret_notice = notice;
  *ret_rank = lost >= 0 ? lost : failed >= 0 ? failed : 0;
  *ret_exit_code = g->n ? g->m[*ret_rank].exit_code : -1;
  if (gw_gang_live(g))
    return GW_GANG_WAIT;
  if (cancel_requested)
    return GW_GANG_DONE_CANCELLED;
  /* a member taken away makes the others fail or stop: theirs is no fault */
  if (lost >= 0)
    return GW_GANG_REQUEUE;
  if (g->gave_up)
    return GW_GANG_DONE_FAILED;
  if (failed >= 0)
    return killed(g->m[failed].exit_code) || g->m[failed].transient ? GW_GANG_RETRY
                                                                    : GW_GANG_DONE_FAILED;
  return all_ok && finished ? GW_GANG_DONE_OK : GW_GANG_RETRY;
}
