/* Run identities of spotlab-train's starts (train_ident.h). Reads headers
 * only (tc_ckpt_runs); the loading itself stays with the training loop. */
#include "train_ident.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sl_err.h"

uint64_t tc_ident_data_hash(const struct tc_text *text, const struct tc_images *train) {
  uint64_t h = 0;
  if (text) {
    h = tc_hash64(h, text->symbols, text->vocab);
    h = tc_hash64(h, text->ids, text->n);
  }
  if (train) {
    h = tc_hash64(h, train->x, sizeof(float) * TC_IMAGE_PIXELS * train->n);
    h = tc_hash64(h, train->y, sizeof(int32_t) * train->n);
  }
  return h;
}

/* "run ID (seed S, data H, up to step N)" for messages; "" ids are the
 * checkpoints written before runs had an identity. */
static const char *describe_run(const struct tc_ckpt_run *c, char *buf, size_t size) {
  if (!c->run_id[0])
    snprintf(buf, size, "checkpoints without a run identity, up to step %llu",
             (unsigned long long)c->newest_step);
  else
    snprintf(buf, size, "run %s (seed %llu, data %016llx, up to step %llu)", c->run_id,
             (unsigned long long)c->seed, (unsigned long long)c->data_hash,
             (unsigned long long)c->newest_step);
  return buf;
}

/* Another run's checkpoints (or this run's own from an earlier start) would
 * mix with the new ones under the same step names, and --resume would then
 * continue whichever is newest. */
int tc_ident_claim(const char *dir, const char *run_id, int force_new, char *ret_sub,
                   size_t sub_size, char *err, size_t es) {
  struct tc_ckpt_run *runs = NULL;
  int n = 0;
  int r = tc_ckpt_runs(dir, &runs, &n);
  if (r < 0) {
    snprintf(err, es, "--ckpt-dir %s: %s", dir, strerror(-r));
    return r;
  }
  if (n > 0 && !force_new) {
    char what[256];
    if (!strcmp(runs[0].run_id, run_id))
      snprintf(err, es, "--ckpt-dir %s already holds checkpoints of this run: %s. Continue it "
               "with --resume, or pass --force-new to move them into a subfolder and start it over",
               dir, describe_run(&runs[0], what, sizeof what));
    else
      snprintf(err, es, "--ckpt-dir %s holds another run's checkpoints: %s%s. A new run there "
               "would mix its checkpoints with them. Continue that run with --resume (and its "
               "--seed and --data), use another --ckpt-dir, or pass --force-new to move them "
               "into a subfolder and start a new run", dir,
               describe_run(&runs[0], what, sizeof what), n > 1 ? ", and more" : "");
    free(runs);
    return -EEXIST;
  }
  free(runs);
  ret_sub[0] = 0;
  return n == 0 ? 0 : tc_ckpt_set_aside(dir, ret_sub, sub_size, err, es);
}

int tc_ident_pick(const struct tc_opts *o, char ret_id[TC_RUN_ID_MAX + 1], char *err, size_t es) {
  struct tc_ckpt_run *runs = NULL;
  int n = 0;
  ret_id[0] = 0;
  if (o->resume_other) return 0;
  int r = tc_ckpt_runs(o->ckpt_dir, &runs, &n);
  if (r < 0) {
    snprintf(err, es, "--ckpt-dir %s: %s", o->ckpt_dir, strerror(-r));
    return r;
  }
  int named = 0, mine = 0, other = -1;
  for (int i = 0; i < n; i++) {
    if (!runs[i].run_id[0]) continue;
    named++;
    if (o->run_id && !strcmp(runs[i].run_id, o->run_id)) mine = 1;
    else if (other < 0) other = i;
  }
  char what[256];
  r = 0;
  if (o->run_id && !mine && other >= 0) {
    snprintf(err, es, "--ckpt-dir %s holds checkpoints of another %s, none of run %s: pass "
             "--resume-other to continue it anyway, or use another --ckpt-dir", o->ckpt_dir,
             describe_run(&runs[other], what, sizeof what), o->run_id);
    r = SL_EMISMATCH;
  } else if (!o->run_id && named > 1) {
    size_t off = (size_t)snprintf(err, es, "--ckpt-dir %s holds checkpoints of %d runs:",
                                  o->ckpt_dir, named);
    for (int i = 0; i < n && off < es; i++)
      if (runs[i].run_id[0])
        off += (size_t)snprintf(err + off, es - off, " %s;",
                                describe_run(&runs[i], what, sizeof what));
    if (off < es) snprintf(err + off, es - off, " name the one to continue with --run-id");
    r = SL_EMISMATCH;
  } else if (o->run_id) {
    snprintf(ret_id, TC_RUN_ID_MAX + 1, "%s", o->run_id);
  } else if (named == 1) {
    for (int i = 0; i < n; i++)
      if (runs[i].run_id[0]) snprintf(ret_id, TC_RUN_ID_MAX + 1, "%s", runs[i].run_id);
  }
  free(runs);
  return r;
}

int tc_ident_check(const struct tc_opts *o, const struct tc_ckpt_meta *ck, uint64_t data_hash,
                   const char *path, char *err, size_t es) {
  if (!ck->run_id[0]) return 0;
  const char *what = ck->seed != o->seed ? "seed" : ck->data_hash != data_hash ? "data" : NULL;
  if (!what) return 0;
  snprintf(err, es, "%s is of run %s, started with seed %llu on data %016llx; this run has seed "
           "%llu and data %016llx (--data %s). Resume with that run's --seed and --data, or pass "
           "--resume-other to continue it with this run's", path, ck->run_id,
           (unsigned long long)ck->seed, (unsigned long long)ck->data_hash,
           (unsigned long long)o->seed, (unsigned long long)data_hash, o->data);
  return SL_EMISMATCH;
}
