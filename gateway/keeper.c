/* The checkpoint store's keeping (keeper.h). */
#include "keeper.h"

#include "bus.h"
#include "conf.h"
#include "fleet.h"
#include "mpu_notes.h"
#include "objstore.h"
#include "provider.h"
#include "purge.h"
#include "scheduler.h"
#include "store.h"
#include "uploads.h"

#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define T "gateway"
#define SWEEP_US (3600 * SL_US_PER_S) /* parts let go are swept this often */

struct gw_keeper {
  const struct gw_config *cfg;
  struct gw_store *store;
  struct gw_fleet *fleet;
  struct gw_sched *sched;
  struct gw_objstore *objstore;
  struct gw_bus *bus;
  struct gw_uploads *uploads;   /* notebooks' data files ([store] upload_data); NULL: off */
  int64_t uploads_swept_us;     /* the last sweep of parts let go (monotonic) */
  bool deletions_waiting;       /* stored files marked for deletion wait for a free slot */
  struct gw_purge *purge;       /* NULL once stopped */
};

/* The checkpoint store's folder when it is a file store ([store] url
 * file://PATH, or none: state_dir/store). */
static void file_store_dir(const struct gw_keeper *k, char *dir, size_t size) {
  if (!strncmp(k->cfg->store_url, "file://", 7))
    snprintf(dir, size, "%s", k->cfg->store_url + 7);
  else
    snprintf(dir, size, "%s/store", k->cfg->state_dir);
}

/* The purge thread, with the jobs an earlier run left to it. */
static int open_purge(struct gw_keeper *k) {
  char dir[sizeof k->cfg->state_dir + 16];
  file_store_dir(k, dir, sizeof dir);
  int r = gw_purge_new(k->objstore ? NULL : dir, k->objstore, &k->purge);
  int64_t *jobs = NULL;
  size_t n = 0;
  if (r == 0 && gw_store_purge_list(k->store, &jobs, &n) == 0 && n) {
    sl_info(T, "removing the store objects of %zu jobs of deleted sessions", n);
    gw_purge_jobs(k->purge, jobs, n);
  }
  free(jobs);
  return r;
}

/* The jobs whose objects the purge thread removed: no longer to purge; the
 * multipart uploads it aborted: no longer to abort. */
static void purge_done(struct gw_keeper *k) {
  int64_t done[256];
  size_t n = k->purge ? gw_purge_take_done(k->purge, done, 256) : 0;
  int r = n ? gw_store_purge_done(k->store, done, n) : 0;
  if (r < 0)
    sl_debug(T, "the purged jobs' rows stay until the store can be written: %s", sl_strerror(r));
  char *ids[256];
  while (k->purge && (n = gw_purge_take_aborted(k->purge, ids, 256)) > 0) {
    if ((r = gw_store_multipart_done(k->store, (const char *const *)ids, n)) < 0)
      sl_debug(T, "the aborted uploads' rows stay until the store can be written: %s", sl_strerror(r));
    for (size_t i = 0; i < n; i++)
      free(ids[i]);
  }
}

/* Queues the aborts of the multipart uploads in rows (gw_store_multipart_list)
 * whose instance is gone: any instance's when instance is NULL, else that
 * instance's. */
static void abort_uploads(struct gw_keeper *k, json_t *rows, const char *instance) {
  size_t n = 0, cap = json_array_size(rows);
  const char **keys = calloc(cap ? cap : 1, sizeof *keys), **ids = calloc(cap ? cap : 1, sizeof *ids);
  size_t i, own = 0;
  json_t *row;
  json_array_foreach(rows, i, row) {
    const char *inst = sl_json_get_str(row, "instance", "");
    if (keys && ids && (instance || !gw_fleet_inst(k->fleet, inst))) {
      keys[n] = sl_json_get_str(row, "key", "");
      ids[n++] = sl_json_get_str(row, "upload_id", "");
      own += !*inst;
    }
  }
  int r = !keys || !ids ? -ENOMEM : gw_purge_uploads(k->purge, keys, ids, n);
  if (r < 0)
    sl_warn(T, "the unfinished multipart uploads of %s are not aborted now: %s (tried again at the "
            "next start)", instance ? instance : "gone instances", sl_strerror(r));
  else if (instance && n)
    sl_info(T, "aborting %zu multipart uploads that %s left unfinished", n, instance);
  else if (n - own)
    sl_info(T, "aborting %zu multipart uploads that instances gone before this start left "
            "unfinished", n - own);
  if (r >= 0 && own)
    sl_info(T, "aborting %zu multipart uploads (data files, the worker bundle) that an earlier run of "
            "the gateway left unfinished", own);
  free(keys);
  free(ids);
}

/* An instance left the fleet: the uploads its worker had under way cannot
 * end any more. */
static void multipart_sink(void *data, const struct gw_bus_event *ev) {
  struct gw_keeper *k = data;
  json_t *rows = NULL;
  if (!k->purge || !ev->instance)
    return;
  int r = gw_store_multipart_list(k->store, ev->instance, &rows);
  if (r < 0)
    sl_warn(T, "%s: its unfinished multipart uploads cannot be read: %s (tried again at the next "
            "start)", ev->instance, sl_strerror(r));
  else
    abort_uploads(k, rows, ev->instance);
  json_decref(rows);
}

/* At the start, once the fleet is loaded: the uploads of instances that
 * went while no gateway ran (the load found them gone), or whose aborts a
 * stop cut short. */
static void abort_gone_uploads(struct gw_keeper *k) {
  json_t *rows = NULL;
  if (!k->purge)
    return;
  int r = gw_store_multipart_list(k->store, NULL, &rows);
  if (r < 0)
    sl_warn(T, "the unfinished multipart uploads cannot be read: %s", sl_strerror(r));
  else
    abort_uploads(k, rows, NULL);
  json_decref(rows);
}

/* Starts the deletions of stored data files marked in the store and not
 * under way (an earlier run's, or ones no slot was free for): how many
 * started. One that cannot be had at all is unmarked, and stays listed;
 * with no slot free the rest wait for the next deletion to end. */
static size_t resume_deletions(struct gw_keeper *k) {
  json_t *marked = NULL;
  k->deletions_waiting = false;
  if (gw_store_uploads_deleting(k->store, &marked) < 0)
    return 0;
  size_t i, started = 0;
  json_t *row;
  json_array_foreach(marked, i, row) {
    char err[400] = "";
    const char *user = sl_json_get_str(row, "user", ""), *sha = sl_json_get_str(row, "sha256", "");
    int r = gw_uploads_delete(k->uploads, user, sha, (uint64_t)sl_json_get_int(row, "bytes", 0), err, sizeof err);
    if (r == SL_ELIMIT) {
      k->deletions_waiting = true;
      break;
    }
    if (r == SL_ESTATE) /* under way already */
      continue;
    if (r < 0) {
      sl_warn(T, "%s: the stored data file %s was not deleted: %s", user, sha, err);
      gw_store_upload_deleting(k->store, user, sha, false);
    } else {
      started++;
    }
  }
  json_decref(marked);
  return started;
}

/* A data file's multipart upload that an earlier run left open: a row of
 * the gateway's own (instance ""), which no fleet holds. */
static int note_left_open(void *data, const char *key, const char *upload_id) {
  struct gw_keeper *k = data;
  return gw_store_multipart_seen(k->store, "", key, upload_id, sl_time_real_us(),
                                 GW_MULTIPART_PER_INSTANCE);
}

/* Notebooks upload their data files ([store] upload_data) when asked to, or
 * (auto) when a provider's instances need the worker bundle: those run off
 * the gateway's machine and read nothing of the notebook's. Into the S3
 * store when there is one, else the file store ([store] url, or the local
 * provider's state_dir/store). */
static void open_uploads(struct gw_keeper *k) {
  /* the uploads of data files a killed run left open (data uploads on
   * then, whether or not they are now): aborted with the workers'
   * (abort_gone_uploads) */
  int r = k->objstore ? gw_mpu_notes_left_open(k->cfg->state_dir, note_left_open, k) : 0;
  if (r < 0)
    sl_warn(T, "the records of the uploads an earlier run left open cannot be read: %s",
            sl_strerror(r));
  const char *how = k->cfg->upload_data;
  bool needs_bundle = false;
  for (size_t i = 0; i < gw_sched_n_providers(k->sched); i++)
    needs_bundle |= gw_sched_provider_at(k->sched, i)->needs_bundle;
  if (!strcmp(how, "no") || (strcmp(how, "yes") && !needs_bundle))
    return;
  char dir[sizeof k->cfg->state_dir + 16];
  file_store_dir(k, dir, sizeof dir);
  r = gw_uploads_new(k->cfg->state_dir, k->objstore ? NULL : dir, k->objstore, &k->uploads);
  if (r < 0)
    sl_warn(T, "notebooks' data files cannot be taken: %s; their jobs name the notebook's paths",
            sl_strerror(r));
  else
    sl_info(T, "notebooks upload their data files to the %s store", k->objstore ? "S3" : "file");
  if (k->uploads && resume_deletions(k) > 0)
    sl_info(T, "deleting the stored data files an earlier run did not finish with");
}

/* Tells every worker in touch to drop its copies of the data files whose
 * SHA-256s are in shas (deleted from the store). A worker out of touch
 * now keeps its copy until its instance ends. */
static void workers_forget(struct gw_keeper *k, json_t *shas) {
  if (!json_array_size(shas))
    return;
  json_t *m = json_pack("{s:s,s:O}", "type", "data_forget", "sha256", shas);
  for (size_t i = 0; m && i < gw_fleet_n_insts(k->fleet); i++) {
    struct gw_inst *in = gw_fleet_inst_at(k->fleet, i);
    if (in->registered)
      gw_fleet_send(k->fleet, in, m);
  }
  json_decref(m);
}

/* Stored data files whose deletion ended: their rows gone, or (it failed)
 * listed again as stored; one that the gateway's stop cut short stays
 * marked, for the next start. */
static void uploads_deleted(struct gw_keeper *k) {
  struct gw_upload_deleted done[16];
  size_t n = k->uploads ? gw_uploads_take_deleted(k->uploads, done, 16) : 0;
  json_t *gone = json_array();
  for (size_t i = 0; i < n; i++) {
    if (done[i].result == -ECANCELED)
      continue; /* the gateway stops: deleted at the next start */
    int r = done[i].result == 0 ? gw_store_upload_forget(k->store, done[i].user, done[i].sha256)
                                : gw_store_upload_deleting(k->store, done[i].user, done[i].sha256, false);
    if (r < 0)
      sl_warn(T, "%s: the row of the stored data file %s stays as it was: %s", done[i].user, done[i].sha256,
              sl_strerror(r));
    if (done[i].result == 0 && gone)
      json_array_append_new(gone, json_string(done[i].sha256));
  }
  workers_forget(k, gone);
  json_decref(gone);
  if (n && k->deletions_waiting) /* slots are free again */
    resume_deletions(k);
}

int gw_keeper_new(const struct gw_keeper_env *env, struct gw_keeper **ret) {
  struct gw_keeper *k = calloc(1, sizeof *k);
  if (!k)
    return -ENOMEM;
  *k = (struct gw_keeper){.cfg = env->cfg, .store = env->store, .fleet = env->fleet,
                          .sched = env->sched, .objstore = env->objstore, .bus = env->bus};
  open_uploads(k);
  k->uploads_swept_us = sl_time_mono_us(); /* the start swept */
  int r = open_purge(k);
  if (r < 0) {
    gw_keeper_free(k);
    return r;
  }
  *ret = k;
  return 0;
}

struct gw_uploads *gw_keeper_uploads(struct gw_keeper *k) { return k->uploads; }

struct gw_purge *gw_keeper_purge(struct gw_keeper *k) { return k->purge; }

int gw_keeper_start(struct gw_keeper *k) {
  /* the instances the load found gone are among those the start sweeps; the
   * sink takes the ones that go from now on */
  abort_gone_uploads(k);
  return gw_bus_subscribe(k->bus, GW_BUS_INSTANCE_GONE, multipart_sink, k);
}

void gw_keeper_turn(struct gw_keeper *k, int64_t now_mono_us) {
  purge_done(k);
  uploads_deleted(k);
  if (k->uploads && now_mono_us - k->uploads_swept_us >= SWEEP_US) {
    k->uploads_swept_us = now_mono_us;
    gw_uploads_sweep(k->uploads, now_mono_us, time(NULL));
  }
}

void gw_keeper_stop(struct gw_keeper *k) {
  if (!k)
    return;
  if (k->uploads) {
    gw_uploads_wait(k->uploads);
    k->deletions_waiting = false; /* none started now */
    uploads_deleted(k); /* the rest are deleted (again) at the next start */
  }
  k->uploads = gw_uploads_free(k->uploads); /* its threads may use the S3 store */
  if (k->purge)
    purge_done(k); /* the rest are removed (again) at the next start */
  k->purge = gw_purge_free(k->purge);
}

struct gw_keeper *gw_keeper_free(struct gw_keeper *k) {
  gw_keeper_stop(k);
  free(k);
  return NULL;
}
