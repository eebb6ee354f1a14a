/* The local provider's instance catalog: types, GPUs, prices, interruption
 * buckets and zones, read from a small CSV file (catalog.csv). */
#ifndef GW_CATALOG_H
#define GW_CATALOG_H

#include <stddef.h>

#define GW_CATALOG_MAX_TYPES 256
#define GW_CATALOG_MAX_ZONES 8

struct gw_catalog_entry {
  char name[64];                  /* "g5.xlarge" */
  int gpus;
  char gpu_model[32];             /* "A10G" */
  double on_demand_usd_per_hour;
  double spot_usd_per_hour;       /* typical spot price (the market moves around it) */
  int bucket;                     /* interruption bucket index, 0 "<5%" .. 4 ">20%" */
  char zones[GW_CATALOG_MAX_ZONES]; /* zone letters, NUL-terminated: "abc" */
};

struct gw_catalog;

/* The advisor's interruption buckets: label ("<5%", "5-10%", "10-15%",
 * "15-20%", ">20%") and the modelled mean time to preemption in simulated
 * seconds (docs/internals/local-provider.md). Labels are static strings. */
#define GW_CATALOG_BUCKETS 5
const char *gw_catalog_bucket_label(int bucket);
double gw_catalog_bucket_mean_s(int bucket);

/* Parses the CSV file at path into an owned catalog in *ret. A malformed line
 * fails with SL_EPARSE and "PATH:LINE: reason" in err (err_size bytes). */
int gw_catalog_load(const char *path, struct gw_catalog **ret, char *err, size_t err_size);
/* Frees the catalog; NULL is a no-op. Returns NULL. */
struct gw_catalog *gw_catalog_free(struct gw_catalog *c);

size_t gw_catalog_count(const struct gw_catalog *c);
/* Borrowed entry i (< count). */
const struct gw_catalog_entry *gw_catalog_get(const struct gw_catalog *c, size_t i);
/* Index of the named type, or SL_ENAME. */
int gw_catalog_find(const struct gw_catalog *c, const char *name);

/* Path of the built-in catalog: EXE_DIR/../share/spotlab/catalog.csv when
 * installed, else the source tree's gateway/providers/catalog.csv. Writes ret
 * only on success; -ENOENT when neither exists. */
int gw_catalog_default_path(char *ret, size_t size);

#endif
