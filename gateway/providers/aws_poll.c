/* The aws provider's polls, on its thread (aws_thread.c): in each region,
 * DescribeInstances by the tag spotlab:gateway=ID against the instances of
 * that region, then spot prices and placement scores of the offered
 * regions. A region that does not answer leaves its instances as they were;
 * the other regions go on.
 *
 * A record whose launch was in flight is adopted when EC2 lists an instance
 * with its spotlab:instance tag; an instance EC2 shows shutting down, stopped
 * or terminated ends (by the market when its state reason is a spot
 * interruption); one EC2 stops listing is looked up by id for its reason
 * (but only once it was listed, or well after its launch: a listing may lag
 * RunInstances); a tagged instance no record knows is a launch whose outcome
 * was lost, and is terminated. mu is held only while the table is read or
 * changed, never around a call. */
#include "aws_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sl_err.h"
#include "sl_log.h"
#include "sl_time.h"

#define T GW_AWS_TOPIC
#define VANISH_GRACE_US (300 * SL_US_PER_S) /* DescribeInstances may lag RunInstances */

static void lock(struct gw_aws *a) { pthread_mutex_lock(&a->mu); }
static void unlock(struct gw_aws *a) { pthread_mutex_unlock(&a->mu); }

static bool gone_state(const char *state) {
  return !strcmp(state, "shutting-down") || !strcmp(state, "terminated") ||
         !strcmp(state, "stopping") || !strcmp(state, "stopped");
}

static bool spot_reason(const char *reason) { return strstr(reason, "Spot") != NULL; }

static const struct aws_instance *match(const struct gw_aws_inst *in,
                                        const struct aws_instance *list, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (in->ec2_id[0] ? !strcmp(list[i].id, in->ec2_id)
                      : !strcmp(list[i].tag_spotlab_instance, in->id))
      return &list[i];
  return NULL;
}

/* True when an instance of the table (live or ended) is EC2's got. */
static bool known(const struct gw_aws *a, const struct aws_instance *got) {
  for (size_t i = 0; i < a->n; i++) {
    const struct gw_aws_inst *in = a->inst[i];
    if ((in->ec2_id[0] && !strcmp(in->ec2_id, got->id)) ||
        (in->state != GW_AWS_ENDED && !strcmp(in->id, got->tag_spotlab_instance)))
      return true;
  }
  return false;
}

/* The states EC2 lists in region against the table (mu held): adoptions,
 * ends; vanished instances and strays (owned arrays of ids) for the caller.
 * A launch in flight is matched in the region of its attempt, or in any
 * before its first attempt. */
static void compare(struct gw_aws *a, const char *region, const struct aws_instance *list,
                    size_t n, char (*vanished)[AWS_ID_MAX], size_t *n_vanished,
                    char (*strays)[AWS_ID_MAX], size_t *n_strays) {
  for (size_t i = 0; i < a->n; i++) {
    struct gw_aws_inst *in = a->inst[i];
    if (in->state == GW_AWS_ENDED || (in->region[0] && strcmp(in->region, region)))
      continue;
    const struct aws_instance *got = match(in, list, n);
    if (in->state == GW_AWS_LAUNCHING) {
      if (got) {
        sl_info(T, "instance %s: its launch from before the restart started EC2 %s", in->id,
                got->id);
        gw_aws_adopt(a, in, got);
      }
      if (!got || !gone_state(got->state))
        continue;
    }
    if (got) {
      if (!in->seen) {
        in->seen = true;
        gw_aws_save_record(a, in);
      }
      if (gone_state(got->state)) {
        sl_info(T, "instance %s (EC2 %s) is %s%s%s", in->id, in->ec2_id, got->state,
                got->state_reason[0] ? ": " : "", got->state_reason);
        gw_aws_end(a, in, in->spot && spot_reason(got->state_reason));
      }
    } else if (in->ec2_id[0] && *n_vanished < GW_AWS_MAX_INSTANCES) {
      /* not listed: gone, or (never seen yet) not listed so soon after its
       * launch, or ended before any poll saw it; asked for by id below */
      snprintf(vanished[(*n_vanished)++], AWS_ID_MAX, "%s", in->ec2_id);
    }
  }
  for (size_t i = 0; i < n && *n_strays < GW_AWS_MAX_INSTANCES; i++)
    if (strcmp(list[i].state, "shutting-down") && strcmp(list[i].state, "terminated") &&
        !known(a, &list[i]))
      snprintf(strays[(*n_strays)++], AWS_ID_MAX, "%s", list[i].id);
}

/* Ends the instances EC2 stopped listing in region g, with the reason it
 * gives by id (mu not held). */
static void end_vanished(struct gw_aws *a, const struct gw_aws_region *g, char (*ids)[AWS_ID_MAX],
                         size_t n) {
  const char *p[GW_AWS_MAX_INSTANCES];
  for (size_t i = 0; i < n; i++)
    p[i] = ids[i];
  struct aws_instance *list = NULL;
  size_t nl = 0;
  struct aws_ec2_error e = {0};
  if (aws_ec2_describe_instances(g->ec2, NULL, NULL, p, n, &list, &nl, &e) < 0)
    nl = 0; /* not found at all: gone without a reason */
  lock(a);
  for (size_t i = 0; i < n; i++)
    for (size_t k = 0; k < a->n; k++) {
      struct gw_aws_inst *in = a->inst[k];
      if (in->state != GW_AWS_RUNNING || strcmp(in->ec2_id, ids[i]))
        continue;
      const struct aws_instance *got = match(in, list, nl);
      if (got && !gone_state(got->state))
        continue; /* listed by id after all */
      /* one no poll has seen yet may be unknown by id for a while after its
       * launch (EC2 is eventually consistent): ended only when EC2 says so,
       * or when it stays unknown past the grace */
      if (!in->seen && !got && sl_time_real_us() - in->launched_us <= VANISH_GRACE_US)
        continue;
      sl_info(T, "instance %s (EC2 %s) is gone%s%s", in->id, in->ec2_id, got ? ": " : "",
              got ? got->state_reason : "");
      gw_aws_end(a, in, in->spot && got && spot_reason(got->state_reason));
    }
  unlock(a);
  free(list);
}

/* Spot prices of region g, and its placement score when scores. */
static void refresh_market(struct gw_aws *a, struct gw_aws_region *g, bool scores) {
  const char *types[256];
  size_t n = a->cfg.n_types < 256 ? a->cfg.n_types : 256;
  for (size_t i = 0; i < n; i++)
    types[i] = a->cfg.types[i];
  struct aws_spot_price *prices = NULL;
  size_t np = 0;
  struct aws_ec2_error e;
  int r;
  for (int try = 0;; try++) {
    memset(&e, 0, sizeof e);
    r = aws_ec2_spot_prices(g->ec2, types, n, &prices, &np, &e);
    if (!gw_aws_again(a, r, &e, try))
      break;
  }
  if (r < 0)
    sl_debug(T, "DescribeSpotPriceHistory in %s: %s", g->name, e.code[0] ? e.code : e.message);
  lock(a);
  if (r == 0 && gw_aws_market_prices(a, prices, np))
    gw_aws_queue_event(a, GW_PROVIDER_CAPACITY, "");
  unlock(a);
  free(prices);
  if (!scores || n < 3)
    return;
  struct aws_placement_score *sc = NULL;
  size_t ns = 0;
  memset(&e, 0, sizeof e);
  if (aws_ec2_placement_scores(g->ec2, types, n, 1, &sc, &ns, &e) < 0) {
    sl_debug(T, "GetSpotPlacementScores in %s: %s", g->name, e.code[0] ? e.code : e.message);
    return;
  }
  int best = 0;
  for (size_t i = 0; i < ns; i++)
    if (sc[i].score > best && sc[i].score <= 10 && (!sc[i].region[0] || !strcmp(sc[i].region, g->name)))
      best = sc[i].score;
  free(sc);
  lock(a);
  g->placement_score = best;
  unlock(a);
}

/* Terminates the strays of region g: tagged for this gateway, known to no record. */
static void end_strays(struct gw_aws *a, const struct gw_aws_region *g, char (*ids)[AWS_ID_MAX],
                       size_t n) {
  for (size_t i = 0; i < n; i++) {
    const char *one[1] = {ids[i]};
    char why[400];
    sl_warn(T, "terminating EC2 %s in %s: tagged spotlab:gateway=%s but no instance record "
               "knows it", ids[i], g->name, a->cfg.gateway_id);
    int t = gw_aws_terminate_ids(a, g->name, one, 1, why, sizeof why);
    if (t < 0 && t != -ENOENT)
      sl_warn(T, "cannot terminate EC2 %s in %s: %s", ids[i], g->name, why);
  }
}

/* The instances of region g (mu not held). 0, or the listing's error
 * (logged when it changes). */
static int poll_region(struct gw_aws *a, struct gw_aws_region *g) {
  struct aws_instance *list = NULL;
  size_t n = 0;
  struct aws_ec2_error e;
  int r;
  for (int try = 0;; try++) {
    memset(&e, 0, sizeof e);
    r = aws_ec2_describe_instances(g->ec2, "spotlab:gateway", a->cfg.gateway_id, NULL, 0, &list,
                                   &n, &e);
    if (!gw_aws_again(a, r, &e, try))
      break;
  }
  if (r < 0) {
    char why[400], what[64], msg[512];
    gw_aws_describe_error(r, &e, why, sizeof why);
    snprintf(what, sizeof what, "DescribeInstances in %s", g->name);
    if (r == SL_EAUTH)
      gw_aws_auth_message(a, what, why, msg, sizeof msg);
    else
      snprintf(msg, sizeof msg, "%s: %s", what, why);
    if (strcmp(msg, g->last_error))
      sl_warn(T, "%s", msg);
    snprintf(g->last_error, sizeof g->last_error, "%s", msg);
    return r;
  }
  g->last_error[0] = '\0';
  char(*vanished)[AWS_ID_MAX] = calloc(GW_AWS_MAX_INSTANCES, AWS_ID_MAX);
  char(*strays)[AWS_ID_MAX] = calloc(GW_AWS_MAX_INSTANCES, AWS_ID_MAX);
  size_t n_vanished = 0, n_strays = 0;
  if (!vanished || !strays) {
    free(vanished);
    free(strays);
    free(list);
    return -ENOMEM;
  }
  lock(a);
  compare(a, g->name, list, n, vanished, &n_vanished, strays, &n_strays);
  unlock(a);
  free(list);
  if (n_vanished)
    end_vanished(a, g, vanished, n_vanished);
  end_strays(a, g, strays, n_strays);
  free(vanished);
  free(strays);
  return 0;
}

static bool stopping(struct gw_aws *a) {
  lock(a);
  bool stop = a->stop;
  unlock(a);
  return stop;
}

void gw_aws_poll(struct gw_aws *a, bool scores) {
  for (size_t i = 0; i < a->n_regions && !stopping(a); i++)
    poll_region(a, &a->regions[i]);
  for (size_t i = 0; i < a->n_regions && !stopping(a); i++)
    if (a->regions[i].offered)
      refresh_market(a, &a->regions[i], scores);
}
