/* The record of a run: what a job was (its spec, the model and data
 * definitions, the seed, the hashes of its data file and script), what ran
 * it (spotlab's version, the gateway's, workers' and spotlab-train's build
 * ids) and where and how it ran (each attempt's instance type, zone and
 * market, each checkpoint). A rerun starts the same run again from it.
 *
 * The store keeps a body per job (gw_store_record_put) with what the job's
 * row, attempts and checkpoints do not hold; gw_record_build joins them
 * into the record that `spotlab show --json` and the API print. */
#ifndef GW_RECORD_H
#define GW_RECORD_H

#include "job.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Gives a train or sample job without a seed option one, chosen at random
 * (1 .. 2^31-1), in its spec's options, so that the run can be repeated.
 * The options object is copied first when it is shared. Returns 1 when it
 * chose one, 0 when the job had one or takes none, negative on error. */
int gw_record_choose_seed(struct gw_job *j);

/* The body kept at submit for j (after gw_record_choose_seed): version,
 * gateway build id, script hash, seed and where it came from. seed_chosen:
 * what gw_record_choose_seed returned. Owned, or NULL on OOM. */
json_t *gw_record_body_new(const struct gw_job *j, bool seed_chosen);

/* Adds what the worker said when attempt started (its "started" message:
 * "build_id", "train_build_id", "data_path", "data_sha256", each optional
 * and checked) to body. The first data hash reported is the run's. */
void gw_record_started(json_t *body, int attempt, const json_t *started);

/* Fills ret (zeroed by the caller) as a rerun of orig, whose body is
 * orig_body (NULL when it has none): the same kind, model and data
 * definitions, options and seed, script. The worker is asked to refuse the
 * run when the data file's hash is not the one recorded, unless force.
 * Returns 0, or negative with a message in err. */
int gw_record_rerun_job(const struct gw_job *orig, const json_t *orig_body, bool force,
                        struct gw_job *ret, char *err, size_t err_size);
/* The body of a rerun's record: body_new's, plus rerun_of, the hash the
 * data file had and whether the rerun was forced. Takes body. */
json_t *gw_record_body_rerun(json_t *body, const struct gw_job *orig, const json_t *orig_body,
                             bool force);

/* The record of job row (borrowed), with its body (may be NULL), attempts
 * and checkpoints (gw_store_job_history; borrowed). Owned. */
json_t *gw_record_build(const struct gw_job *row, const json_t *body, const json_t *attempts,
                        const json_t *checkpoints);

struct gw_store;
/* The record of job row (borrowed; the live copy when the job is live)
 * read from the store, owned into *ret. */
int gw_record_load(struct gw_store *s, const struct gw_job *row, json_t **ret);

/* This program's build id, read once; "" when it has none. */
const char *gw_record_self_build_id(void);

#endif
