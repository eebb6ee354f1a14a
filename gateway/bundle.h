/* The worker bundle: spotlab-worker, spotlab-train and the shared libraries
 * they need that a stock image lacks, as one tar.gz (bin/, lib/) published
 * to the S3 store with its SHA-256, so that a cloud instance without
 * spotlab installed can fetch it through a presigned URL and check it
 * before it runs anything (docs/aws.md, Bootstrap).
 *
 * Left out: the C library family (the image has its own), the NVIDIA driver
 * and the CUDA toolkit's libraries (GPU images carry them). Building and
 * uploading take a while, so they run on a thread of their own; launches
 * wait for it (gw_bundle_url says -EAGAIN until then). */
#ifndef GW_BUNDLE_H
#define GW_BUNDLE_H

#include <stdbool.h>
#include <stddef.h>

struct gw_objstore;
struct gw_bundle;

/* Starts building the bundle in state_dir/bundle and publishing it to o
 * (borrowed; both for the bundle's life). */
int gw_bundle_start(struct gw_objstore *o, const char *state_dir, struct gw_bundle **ret);
/* Waits for the thread, frees. */
struct gw_bundle *gw_bundle_free(struct gw_bundle *b);

/* A presigned GET of the published bundle (valid for expires_s) and its
 * SHA-256: 0; -EAGAIN while it is being built or uploaded; the build's
 * error once it failed (with a sentence in err). */
int gw_bundle_url(struct gw_bundle *b, long expires_s, char *url, size_t url_size,
                  char sha256[65], char *err, size_t err_size);

/* The archive, without uploading: DIR/spotlab-worker.tar.gz and its
 * SHA-256. DIR/inputs names each file in it with its SHA-256, and the
 * archive's own: when the files to bundle are those again and the archive
 * is unchanged, it is kept as it is (*reused, when given, says so) instead
 * of being built again, which takes seconds. What a build killed midway
 * left in DIR is removed first. */
int gw_bundle_build(const char *dir, char *path, size_t path_size, char sha256[65], bool *reused,
                    char *err, size_t err_size);

#endif
