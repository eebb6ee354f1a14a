/* What the scheduler learned, kept across gateway restarts (sched_int.h):
 * placement's memory (placemem.h: failures, step rates, restart times,
 * checkpoint sizes) and deadline planning's measurements (sched_deadline.c:
 * seconds per step, start-up). Each is one row of the store's learned
 * table, written when it changed, at most every SAVE_US and at a clean
 * stop, and read back when the gateway loads its jobs. A write the store
 * refuses is logged once and tried again later; a row that cannot be read
 * is logged, and the gateway learns anew (its next write replaces it). */
#include "sched_int.h"

#include "placemem.h"

#include "sl_err.h"
#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <stdio.h>

#define T "gateway.sched"
#define SAVE_US (10 * SL_US_PER_S)

enum { PLACEMENT, DEADLINE, N_MEMORIES };
static const char *const names[N_MEMORIES] = {"placement", "deadline"};

_Static_assert(N_MEMORIES == sizeof ((struct gw_sched *)0)->learned_saved / sizeof(uint64_t),
               "one saved count a memory");

static uint64_t changes_of(const struct gw_sched *s, int k) {
  return k == PLACEMENT ? gw_place_memory_changes(s->mem) : gw_sched_deadline_changes(s->dl);
}

void gw_sched_learned_load(struct gw_sched *s) {
  if (!s->store)
    return;
  int64_t now = sl_time_mono_us(), now_real = sl_time_real_us();
  for (int k = 0; k < N_MEMORIES; k++) {
    json_t *body = NULL;
    int r = gw_store_learned_get(s->store, names[k], &body);
    if (r < 0) {
      sl_warn(T, "what the gateway learned for %s cannot be read (%s); it learns anew", names[k],
              r == SL_EPARSE ? "its row is not a JSON object" : sl_strerror(r));
      continue;
    }
    if (!body)
      continue;
    size_t skipped = 0;
    size_t n = k == PLACEMENT ? gw_place_memory_load(s->mem, body, s->provs, s->n_provs, now,
                                                     now_real, &skipped)
                              : gw_sched_deadline_load(s->dl, body, &skipped);
    json_decref(body);
    sl_info(T, "restored what the gateway learned for %s: %zu entries", names[k], n);
    if (skipped)
      sl_warn(T, "%zu entries of what the gateway learned for %s were malformed and skipped",
              skipped, names[k]);
    s->learned_saved[k] = changes_of(s, k);
  }
}

void gw_sched_learned_save(struct gw_sched *s, bool now) {
  int64_t mono = sl_time_mono_us();
  if (!s->store || (!now && mono - s->learned_saved_us < SAVE_US))
    return;
  s->learned_saved_us = mono;
  for (int k = 0; k < N_MEMORIES; k++) {
    uint64_t changes = changes_of(s, k);
    if (changes == s->learned_saved[k])
      continue;
    json_t *body = k == PLACEMENT ? gw_place_memory_json(s->mem, mono, sl_time_real_us())
                                  : gw_sched_deadline_json(s->dl);
    int r = body ? gw_store_learned_put(s->store, names[k], body, sl_time_real_us()) : -ENOMEM;
    json_decref(body);
    if (r < 0) {
      if (!s->learned_failing)
        sl_warn(T, "what the gateway learned for %s cannot be written (%s); tried again later",
                names[k], sl_strerror(r));
      s->learned_failing = true;
      continue;
    }
    if (s->learned_failing)
      sl_info(T, "what the gateway learned is written again");
    s->learned_failing = false;
    s->learned_saved[k] = changes;
  }
}
