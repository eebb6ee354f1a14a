/* CURVE keys and the files that carry them.
 *
 * The gateway's key pair lives in state_dir/gateway.key (0600): the Z85
 * public key on the first line, the secret on the second. Each instance
 * gets a fresh pair at launch, written with the gateway's public key into
 * the worker config file (0600, protocols.md §2). Keys never reach a log. */
#ifndef GW_KEYS_H
#define GW_KEYS_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

#define GW_Z85_KEY_LEN 40

struct gw_keypair {
  char public_z85[GW_Z85_KEY_LEN + 1];
  char secret_z85[GW_Z85_KEY_LEN + 1];
};

/* Loads path, or creates it (0600) with a new pair when missing. A file
 * that exists but is malformed or readable by others is an error (message
 * in err): the gateway never silently replaces its identity. */
int gw_keys_load_or_create(const char *path, struct gw_keypair *ret, char *err, size_t err_size);
/* A fresh pair. */
int gw_keys_generate(struct gw_keypair *ret);

/* What a worker needs to reach the gateway; the provider adds what belongs
 * to the instance (its id, zone, metadata endpoint, work folder, store) and
 * delivers the whole as it sees fit. Secrets: keys.secret_z85. */
struct gw_worker_boot {
  const char *gateway;          /* the worker address, as instances reach it */
  const char *gateway_public;   /* Z85 */
  struct gw_keypair keys;       /* the instance's own CURVE pair */
  const char *train;            /* spotlab-train program ("" : the worker's own lookup) */
  int64_t metrics_per_s;        /* 0: the worker's default */
  bool move_on_rebalance;       /* a rebalance recommendation stops the jobs (the worker's
                                 * default: they checkpoint and go on) */
  int64_t data_cache_bytes;     /* uploaded data files kept between jobs (0: the worker's default) */
  int64_t part_bytes;           /* the part size of its multipart uploads to S3 (0: the worker's default) */
  /* The worker bundle (docs/aws.md, Bootstrap), for providers that set
   * needs_bundle: a presigned GET of the tar.gz and its SHA-256. NULL
   * otherwise. */
  const char *bundle_url;
  const char *bundle_sha256;
};

/* A worker config file (protocols.md §2): the boot the gateway gives and
 * what the provider adds for the instance. */
struct gw_worker_file {
  const struct gw_worker_boot *boot;
  const char *instance, *type, *zone;
  bool spot;
  const char *metadata, *work_dir, *store;
  int64_t orphan_timeout_ms;    /* the worker stops itself after this long without the
                                 * gateway; 0: left out (the worker's default) */
};

/* The worker config (protocols.md §2) as JSON text, indented when indent,
 * one line otherwise: owned in *ret (free()). It holds the instance's
 * secret key. -ENOMEM, or -EINVAL when a required field is NULL. */
int gw_keys_render_worker_file(const struct gw_worker_file *w, bool indent, char **ret);
/* Writes the worker config file (0600) atomically: temporary name, rename. */
int gw_keys_write_worker_file(const char *path, const struct gw_worker_file *w);

#endif
