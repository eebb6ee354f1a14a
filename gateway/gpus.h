/* What a worker found of its instance's GPUs (the "gpus" object of its
 * register: count, model, memory per GPU, driver, and why there are none)
 * and the check of that against the instance type's catalog entry. Pure:
 * wproto.c keeps the result on the instance, logs a mismatch and shows it
 * in %status; tests call these directly. */
#ifndef GW_GPUS_H
#define GW_GPUS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GW_GPUS_WARNING_MAX 512

struct gw_gpus {
  bool known;          /* the worker reported; false before it did (or when it is too old to) */
  int count;
  char model[96];      /* GPU 0's name as the driver gives it: "NVIDIA A10G" */
  int64_t memory_mib;  /* per GPU */
  char driver[80];
  char reason[256];    /* why count is 0 (or why a GPU was left out) */
  char unusable[256];  /* why spotlab-train cannot train on them; "" when it can */
};

/* Reads a register's "gpus" object o (borrowed) into *ret. SL_ETYPE when
 * it is not an object with a whole count in 0..1024 and strings and
 * numbers where they belong (*ret untouched); longer strings are cut. */
int gw_gpus_parse(const json_t *o, struct gw_gpus *ret);
/* The report for listings: {"gpus":N} and, when N > 0, "gpu_model",
 * "gpu_memory_mib" and "gpu_driver" are added to obj (borrowed). Nothing
 * when g is not known. */
void gw_gpus_add_json(const struct gw_gpus *g, json_t *obj);
/* Whether the driver's name for a GPU ("NVIDIA A10G", "Tesla V100-SXM2-16GB")
 * is the catalog's model ("A10G", "V100"): the catalog's word appears in
 * it, case aside, not as part of a longer word ("A10G" is not "A100"). */
bool gw_gpus_model_matches(const char *found, const char *catalog_model);
/* Compares found with the catalog's catalog_gpus x catalog_model for type.
 * 0 when they agree (or found is not known); 1 when they do not, with a
 * sentence for logs and %status in why: "g5.xlarge has 1 x A10G in the
 * catalog, but its worker found no GPU (REASON)". GPUs that spotlab-train
 * cannot train on are a mismatch too: "g5.xlarge's worker found 1 x NVIDIA
 * A10G, but spotlab-train cannot use them (REASON): jobs that name no GPU train on the CPU". */
int gw_gpus_check(const struct gw_gpus *found, const char *type, int catalog_gpus, const char *catalog_model,
                  char *why, size_t why_size);

#endif
