/* Mirrors a local folder (a %%run job's $SPOTLAB_CHECKPOINT_DIR) to the store
 * under a key prefix ("J000003/files/"): restore copies every object down,
 * sync uploads files whose size or modification time changed and removes the
 * objects of deleted files. */
#ifndef WK_FILESYNC_H
#define WK_FILESYNC_H

#include <stddef.h>
#include <stdint.h>

struct wk_store;
struct wk_filesync;

/* Borrows store for the life of the object. */
int wk_filesync_new(struct wk_store *store, const char *dir, const char *prefix,
                    struct wk_filesync **ret);
struct wk_filesync *wk_filesync_free(struct wk_filesync *f);
/* Downloads every object under the prefix; returns how many. */
int wk_filesync_restore(struct wk_filesync *f);
/* Uploads changes; returns the number of objects written or removed. */
int wk_filesync_sync(struct wk_filesync *f, uint64_t *ret_bytes);

#endif
