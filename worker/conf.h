/* spotlab-worker configuration: the 0600 JSON file the gateway writes for each
 * instance (docs/internals/protocols.md §2), plus tuning options with defaults.
 * The struct is filled once by wk_config_load() and then passed around const. */
#ifndef WK_CONF_H
#define WK_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WK_KEY_Z85_LEN 40

struct wk_config {
  char gateway[256];
  char gateway_public[WK_KEY_Z85_LEN + 1];
  char public_key[WK_KEY_Z85_LEN + 1];
  char secret_key[WK_KEY_Z85_LEN + 1]; /* never logged */
  char instance[64];
  char type[64];
  char zone[64];
  bool spot;
  char metadata[256];      /* metadata service base URL; "" = no watcher; "aws" in the file:
                            * AWS_EC2_METADATA_SERVICE_ENDPOINT or http://169.254.169.254 */
  char metadata_kind[8];   /* "aws" or "gcp"; "" = from the URL's host */
  char work_dir[512];      /* absolute; a relative one in the file is under the file's folder */
  char store[512];         /* file:///... or s3://BUCKET/PREFIX (URLs presigned by the gateway) */
  char train[512];         /* spotlab-train; "" = found with sl_find_program */
  char address[128];       /* IP address other instances reach this one at (nodes=N); "" = derived */
  int64_t heartbeat_ms;        /* until the gateway says otherwise */
  int64_t register_timeout_ms; /* resend register when unanswered */
  int64_t metrics_per_s;       /* per job; steps beyond are coalesced */
  int64_t output_lines_per_s;  /* per job; lines beyond are dropped and counted */
  int64_t notice_poll_ms;
  int64_t notice_margin_ms;    /* stop this long before a notice's deadline */
  int64_t sigterm_notice_ms;   /* deadline given to a SIGTERM notice */
  int64_t kill_grace_ms;       /* SIGTERM → SIGKILL on cancel */
  int64_t run_sync_ms;         /* %%run checkpoint folder upload period */
  bool move_on_rebalance;      /* a rebalance recommendation stops the jobs as a notice does */
  int64_t orphan_timeout_ms;   /* no word from the gateway this long: checkpoint and exit (0: never) */
  int64_t data_cache_bytes;    /* uploaded data files kept between jobs, at most (0: while the disk has room) */
  int64_t part_bytes;          /* the part size of multipart uploads to S3 (0: the S3 client's default) */
  bool insecure_mode;          /* the file was readable by group or others */
};

/* Reads and validates the file at path into *ret (written only on success).
 * Applies SPOTLAB_NOTICE_POLL_MS from the environment. On failure returns
 * SL_ECONFIG, SL_EJSON or -errno and writes a reason into err (err_size bytes)
 * that never contains a key. A file readable by others is accepted with a
 * warning and insecure_mode set. */
int wk_config_load(const char *path, struct wk_config *ret, char *err, size_t err_size);

/* Same, from JSON text already in memory (mode checks skipped). */
int wk_config_parse(const char *text, size_t len, struct wk_config *ret, char *err,
                    size_t err_size);

/* "aws" or "gcp": metadata_kind, else "gcp" when the metadata host is
 * metadata.google.internal, else "aws". */
const char *wk_config_metadata_kind(const struct wk_config *cfg);

#endif
