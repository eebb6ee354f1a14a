/* Checkpoint store: objects by key (docs/internals/protocols.md §3).
 *
 * Keys are relative paths ("J000003/ckpt-00000400.tc"): components of
 * printable bytes, no "." or "..", none starting with ".wk-tmp". A put is
 * atomic: readers see the previous object or the new one, never a part, and a
 * failed put leaves the previous object readable. Two backends sit behind
 * the same calls: a folder (file:///PATH) and an S3 bucket (s3://BUCKET/PREFIX,
 * reached through presigned URLs from a signer: common/sl_s3.h). */
#ifndef WK_STORE_H
#define WK_STORE_H

#include <stddef.h>
#include <stdint.h>

struct wk_store;
struct sl_s3_signer;

/* Opens the store at url: "file:///abs/folder" (created 0700 if missing;
 * signer NULL), or "s3://BUCKET/PREFIX" with the signer that presigns its
 * requests (borrowed for the store's life; SL_ECONFIG without one), its
 * multipart uploads in parts of part_bytes (0: the S3 client's default).
 * SL_ENOTSUP for another scheme. */
int wk_store_open(const char *url, const struct sl_s3_signer *signer, uint64_t part_bytes,
                  struct wk_store **ret);
struct wk_store *wk_store_free(struct wk_store *s);

/* Uploads the local file src as key; *ret_bytes (may be NULL) gets its size. */
int wk_store_put_file(struct wk_store *s, const char *key, const char *src, uint64_t *ret_bytes);
/* Downloads key into the local file dst (atomically: temp name, rename). -ENOENT if absent. */
int wk_store_get_file(struct wk_store *s, const char *key, const char *dst, uint64_t *ret_bytes);
/* Keys under prefix ("J000003/files/", recursive), sorted; *ret_keys is an
 * owned NULL-terminated array (wk_store_keys_free). At most 100000 keys. */
int wk_store_list(struct wk_store *s, const char *prefix, char ***ret_keys, size_t *ret_n);
char **wk_store_keys_free(char **keys);
/* Removes key; -ENOENT if absent. */
int wk_store_remove(struct wk_store *s, const char *key);

/* pump(ctx) runs on the caller's thread every 50 ms while a call is under
 * way, the call itself on a thread of its own (the worker sends its
 * heartbeats from it). NULL: calls run on the caller's thread. */
void wk_store_set_pump(struct wk_store *s, void (*pump)(void *ctx), void *ctx);

/* Runs fn(ctx) as a store call: on a thread of its own while the pump
 * runs, when one is set (a check of a downloaded file that takes a while).
 * Returns what fn returned. */
int wk_store_run(struct wk_store *s, int (*fn)(void *ctx), void *ctx);

/* The last failed call's sentence (S3: the key and the service's answer),
 * "" when it has none. Valid until the next call. */
const char *wk_store_error(const struct wk_store *s);

/* 0 when key is well-formed, SL_ENAME otherwise. */
int wk_store_check_key(const char *key);

/* Test hook: the next put fails with -EIO after writing `bytes` bytes of its
 * temporary object, as an interrupted upload would (-1 = off). */
void wk_store_fail_next_put(struct wk_store *s, int64_t bytes);

#endif
