/* The checkpoint store's keeping, beyond what jobs write to it: the purge
 * thread (purge.h), which removes deleted sessions' objects and aborts the
 * multipart uploads nobody can finish any more, and the notebooks' data
 * files (uploads.h) with their deletions. The loop's side of both: what
 * their threads ended is written to the store each housekeeping turn, and
 * what an earlier run left unfinished is taken up again at the start.
 *
 * Loop thread only; the threads are the purge's and the uploads' own. */
#ifndef GW_KEEPER_H
#define GW_KEEPER_H

#include <stdint.h>

struct gw_bus;
struct gw_config;
struct gw_fleet;
struct gw_objstore;
struct gw_purge;
struct gw_sched;
struct gw_store;
struct gw_uploads;

struct gw_keeper_env {
  const struct gw_config *cfg;
  struct gw_store *store;
  struct gw_fleet *fleet;       /* instances in the fleet; workers told to forget data files */
  struct gw_sched *sched;       /* its providers: whether their instances need the bundle */
  struct gw_objstore *objstore; /* the S3 store; NULL: the file store */
  struct gw_bus *bus;           /* instances that go (GW_BUS_INSTANCE_GONE) */
};

struct gw_keeper;

/* Opens the data uploads ([store] upload_data; a failure only turns them
 * off) and the purge thread, with the work an earlier run left: jobs to
 * purge, data files to delete, records of its own uploads left open. Call
 * once the providers are open, and before the worker bundle's upload starts
 * (its record would be taken for one a killed run left). */
int gw_keeper_new(const struct gw_keeper_env *env, struct gw_keeper **ret);
/* NULL when data uploads are off. */
struct gw_uploads *gw_keeper_uploads(struct gw_keeper *k);
struct gw_purge *gw_keeper_purge(struct gw_keeper *k);

/* Once the fleet is loaded: aborts the multipart uploads of instances it
 * found gone, then those of every instance that goes from now on. */
int gw_keeper_start(struct gw_keeper *k);

/* A housekeeping turn (now_mono_us, monotonic): what the threads ended is
 * written to the store, and once an hour the parts let go are swept. */
void gw_keeper_turn(struct gw_keeper *k, int64_t now_mono_us);

/* Waits for the threads and takes what they ended (the rest is done again
 * at the next start), then stops them; the S3 store should be stopped
 * first (gw_objstore_stop), so that they do not wait on it. The keeper
 * itself stays, inert, for the bus's last events. */
void gw_keeper_stop(struct gw_keeper *k);
struct gw_keeper *gw_keeper_free(struct gw_keeper *k);

#endif
