/* Folder mirroring for %%run jobs.
 *
 * The last uploaded state is a table of (relative path, size, mtime) held in
 * memory; a file is uploaded when its entry differs, so a quiet folder costs
 * one directory walk per sync. At most MAX_FILES files and MAX_DEPTH levels
 * are mirrored; anything beyond is reported as SL_ELIMIT after the rest is
 * synced. Symbolic links and special files are skipped. */
#include "filesync.h"

#include "sl_err.h"
#include "sl_log.h"
#include "sl_path.h"
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_FILES 10000
#define MAX_DEPTH 8
#define TOPIC "worker.store"

struct entry {
  char *rel;
  int64_t size, mtime_ns;
  bool seen;
};

struct wk_filesync {
  struct wk_store *store;
  char dir[PATH_MAX];
  char prefix[256];
  struct entry *e;
  size_t n, cap;
};

int wk_filesync_new(struct wk_store *store, const char *dir, const char *prefix,
                    struct wk_filesync **ret) {
  struct wk_filesync *f = calloc(1, sizeof *f);
  if (!f) return -ENOMEM;
  if (strlen(dir) >= sizeof f->dir - 256 || strlen(prefix) >= sizeof f->prefix) {
    free(f);
    return SL_ELIMIT;
  }
  f->store = store;
  snprintf(f->dir, sizeof f->dir, "%s", dir);
  snprintf(f->prefix, sizeof f->prefix, "%s", prefix);
  *ret = f;
  return 0;
}

struct wk_filesync *wk_filesync_free(struct wk_filesync *f) {
  if (!f) return NULL;
  for (size_t i = 0; i < f->n; i++) free(f->e[i].rel);
  free(f->e);
  free(f);
  return NULL;
}

static struct entry *find(struct wk_filesync *f, const char *rel) {
  for (size_t i = 0; i < f->n; i++)
    if (!strcmp(f->e[i].rel, rel)) return &f->e[i];
  return NULL;
}

static struct entry *add(struct wk_filesync *f, const char *rel) {
  if (f->n >= MAX_FILES) return NULL;
  if (f->n == f->cap) {
    size_t cap = f->cap ? f->cap * 2 : 32;
    struct entry *e = realloc(f->e, cap * sizeof *e);
    if (!e) return NULL;
    f->e = e;
    f->cap = cap;
  }
  struct entry *e = &f->e[f->n];
  if (!(e->rel = strdup(rel))) return NULL;
  e->size = e->mtime_ns = -1;
  f->n++;
  return e;
}

static void remember(struct wk_filesync *f, const char *rel, const struct stat *st) {
  struct entry *e = find(f, rel);
  if (!e) e = add(f, rel);
  if (!e) return;
  e->size = st->st_size;
  e->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
  e->seen = true;
}

int wk_filesync_restore(struct wk_filesync *f) {
  char **keys = NULL;
  size_t n = 0;
  int r = wk_store_list(f->store, f->prefix, &keys, &n);
  if (r < 0) return r;
  size_t pl = strlen(f->prefix);
  for (size_t i = 0; i < n && r >= 0; i++) {
    const char *rel = keys[i] + pl;
    char path[2 * PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", f->dir, rel);
    if ((r = wk_store_get_file(f->store, keys[i], path, NULL)) < 0) break;
    struct stat st;
    if (stat(path, &st) == 0) remember(f, rel, &st);
  }
  wk_store_keys_free(keys);
  return r < 0 ? r : (int)n;
}

struct walk {
  struct wk_filesync *f;
  int changed;
  uint64_t bytes;
  int err;
};

static void upload(struct walk *w, const char *rel, const char *path, const struct stat *st) {
  struct entry *e = find(w->f, rel);
  int64_t mt = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
  if (e && e->size == st->st_size && e->mtime_ns == mt) {
    e->seen = true;
    return;
  }
  char key[512];
  uint64_t bytes = 0;
  if ((size_t)snprintf(key, sizeof key, "%s%s", w->f->prefix, rel) >= sizeof key) return;
  int r = wk_store_put_file(w->f->store, key, path, &bytes);
  if (r < 0) {
    sl_warn(TOPIC, "upload %s: %s", key, sl_strerror(r));
    w->err = r;
    if (e) e->seen = true; /* keep the object; the next sync tries again */
    return;
  }
  remember(w->f, rel, st);
  w->changed++;
  w->bytes += bytes;
}

static void walk_dir(struct walk *w, const char *rel, int depth) {
  char path[2 * PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", w->f->dir, rel);
  DIR *d = opendir(path);
  if (!d) return;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    char sub[PATH_MAX], full[2 * PATH_MAX];
    if ((size_t)snprintf(sub, sizeof sub, "%s%s", rel, de->d_name) >= 400) continue;
    snprintf(full, sizeof full, "%s/%s", w->f->dir, sub);
    struct stat st;
    if (lstat(full, &st) < 0) continue;
    if (S_ISDIR(st.st_mode) && depth < MAX_DEPTH) {
      strcat(sub, "/");
      walk_dir(w, sub, depth + 1);
    } else if (S_ISREG(st.st_mode) && wk_store_check_key(sub) == 0) {
      if (w->f->n >= MAX_FILES && !find(w->f, sub)) w->err = SL_ELIMIT;
      else upload(w, sub, full, &st);
    }
  }
  closedir(d);
}

int wk_filesync_sync(struct wk_filesync *f, uint64_t *ret_bytes) {
  struct walk w = {f, 0, 0, 0};
  for (size_t i = 0; i < f->n; i++) f->e[i].seen = false;
  walk_dir(&w, "", 0);
  for (size_t i = 0; i < f->n;) {
    if (f->e[i].seen) { i++; continue; }
    char key[512];
    snprintf(key, sizeof key, "%s%s", f->prefix, f->e[i].rel);
    int r = wk_store_remove(f->store, key);
    if (r < 0 && r != -ENOENT) sl_warn(TOPIC, "remove %s: %s", key, sl_strerror(r));
    free(f->e[i].rel);
    f->e[i] = f->e[--f->n];
    w.changed++;
  }
  if (ret_bytes) *ret_bytes = w.bytes;
  return w.err < 0 ? w.err : w.changed;
}
