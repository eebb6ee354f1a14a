/* A job's data file that the notebook uploaded (job_int.h): the gateway
 * names it in the spec ("data_upload": the store key, its SHA-256 and
 * size) when this worker cannot read the notebook's machine. It is read
 * from the store into the worker's data folder once per content, its hash
 * checked, and the job reads that copy. A data set folder
 * (fashion_mnist("FOLDER")) comes as its files ("files": name, key,
 * SHA-256 and size of each, and the set's id, sl_ident.h): each fetched
 * the same way, then linked under its name into data/set-ID, the folder
 * the job reads. Once the gateway has deleted such a file from the store,
 * data_forget removes the copy and the set folders linking it. */
#include "job_int.h"

#include "sl_err.h"
#include "sl_digest.h"
#include "sl_ident.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_path.h"
#include "conf.h"
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

struct hash_call {
  const char *path;
  char hex[SL_SHA256_HEX_LEN + 1];
};

static int hash_file(void *ctx) {
  struct hash_call *h = ctx;
  return sl_sha256_file(h->path, 0, h->hex);
}

/* The uploaded file key (hashing to sha) as dir/SHA: fetched and checked
 * unless a copy is there already (checked when it came). */
static int fetch_one(struct wk_job *j, const char *dir, const char *key, const char *sha, char *err,
                     size_t err_size) {
  char path[PATH_MAX + 80], tmp[PATH_MAX + 96];
  snprintf(path, sizeof path, "%s/%s", dir, sha);
  snprintf(tmp, sizeof tmp, "%s/.fetch-%s", dir, sha);
  if (access(path, R_OK) == 0) {
    utimensat(AT_FDCWD, path, NULL, 0); /* its last use: the newest copies stay longest */
    return 0;
  }
  uint64_t bytes = 0;
  int r = wk_store_get_file(j->env->store, key, tmp, &bytes);
  if (r < 0) {
    const char *e = wk_store_error(j->env->store);
    snprintf(err, err_size, "the data file the notebook uploaded (%s) cannot be read from the store: %s", key,
             e[0] ? e : sl_strerror(r));
    return r;
  }
  struct hash_call h = {.path = tmp};
  if ((r = wk_store_run(j->env->store, hash_file, &h)) < 0 || strcmp(h.hex, sha)) {
    unlink(tmp);
    if (r < 0) return snprintf(err, err_size, "cannot read %s: %s", tmp, sl_strerror(r)), r;
    snprintf(err, err_size, "the data file %s read from the store hashes to %.12s…, not %.12s…", key, h.hex, sha);
    return SL_ECHECKSUM;
  }
  if (rename(tmp, path) < 0) {
    r = -errno;
    unlink(tmp);
    return snprintf(err, err_size, "cannot keep %s: %s", path, sl_strerror(r)), r;
  }
  sl_info("worker.store", "%s: fetched the notebook's data file %s (%llu bytes)", j->id, key,
          (unsigned long long)bytes);
  return 0;
}

/* The copies a start may remove to make room: none that it reads (keep)
 * or that a job here reads, the least recently used first. */
#define DATA_RESERVE_MAX (1LL << 30) /* the file system keeps a 20th of itself free, at most this */

struct copy {
  char sha[SL_SHA256_HEX_LEN + 1];
  int64_t bytes;
  struct timespec used;
};

static int older_first(const void *a, const void *b) {
  const struct copy *x = a, *y = b;
  if (x->used.tv_sec != y->used.tv_sec)
    return x->used.tv_sec < y->used.tv_sec ? -1 : 1;
  return x->used.tv_nsec < y->used.tv_nsec ? -1 : x->used.tv_nsec > y->used.tv_nsec;
}

/* Before need bytes are fetched into dir: removes copies that no job here
 * reads, the least recently used first, until they fit within
 * data_cache_bytes and leave the file system its reserve free. A fetch
 * that still does not fit fails as it would have (no space left). */
static void make_room(struct wk_job *j, const char *dir, int64_t need, const char *const *keep, size_t n_keep) {
  const struct wk_job_env *env = j->env;
  DIR *d = opendir(dir);
  if (!d || need <= 0) {
    if (d) closedir(d);
    return;
  }
  struct copy *copies = NULL;
  size_t n = 0, cap = 0;
  int64_t total = 0;
  const struct dirent *e;
  char path[PATH_MAX + 80];
  while ((e = readdir(d))) {
    struct stat st;
    snprintf(path, sizeof path, "%s/%.64s", dir, e->d_name);
    if (!sl_sha256_hex_ok(e->d_name) || lstat(path, &st) < 0 || !S_ISREG(st.st_mode))
      continue;
    total += st.st_size;
    if (n == cap) {
      struct copy *more = realloc(copies, (cap = cap ? 2 * cap : 16) * sizeof *copies);
      if (!more)
        break;
      copies = more;
    }
    copies[n] = (struct copy){.bytes = st.st_size, .used = st.st_mtim};
    snprintf(copies[n++].sha, sizeof copies[0].sha, "%.64s", e->d_name);
  }
  closedir(d);
  int64_t excess = env->cfg->data_cache_bytes > 0 ? total + need - env->cfg->data_cache_bytes : 0;
  struct statvfs fs;
  if (statvfs(dir, &fs) == 0) {
    int64_t size = (int64_t)fs.f_blocks * (int64_t)fs.f_frsize, avail = (int64_t)fs.f_bavail * (int64_t)fs.f_frsize;
    int64_t reserve = size / 20 < DATA_RESERVE_MAX ? size / 20 : DATA_RESERVE_MAX;
    if (need + reserve - avail > excess)
      excess = need + reserve - avail;
  }
  if (n > 1)
    qsort(copies, n, sizeof *copies, older_first);
  for (size_t i = 0; i < n && excess > 0; i++) {
    bool kept = env->data_in_use && env->data_in_use(env->ctx, copies[i].sha);
    for (size_t k = 0; k < n_keep && !kept; k++)
      kept = !strcmp(keep[k], copies[i].sha);
    if (kept || wk_data_forget(env->cfg->work_dir, copies[i].sha) <= 0)
      continue;
    excess -= copies[i].bytes;
    sl_info("worker.store", "%s: removed the copy of the data file %.12s… (%lld bytes, no job here reads it) to "
            "make room for this job's", j->id, copies[i].sha, (long long)copies[i].bytes);
  }
  free(copies);
}

/* Removes a data set folder being made (its links, then itself). */
static void remove_set(const char *tmp) {
  char path[PATH_MAX + 160];
  for (size_t i = 0; i < SL_IMAGE_SET_FILES; i++) {
    snprintf(path, sizeof path, "%s/%s", tmp, sl_image_set_files[i]);
    unlink(path);
  }
  rmdir(tmp);
}

/* A data set's files, fetched, as the folder dir/set-ID that spotlab-train
 * reads: each name a link to its fetched copy. The folder is made under
 * another name and renamed into place, so it is whole or absent. */
static int fetch_set(struct wk_job *j, const char *dir, const json_t *up, char *set, size_t set_size, char *err,
                     size_t err_size) {
  const char *id = json_string_value(json_object_get(up, "sha256"));
  const json_t *files = json_object_get(up, "files");
  size_t n = json_array_size(files);
  if (!sl_sha256_hex_ok(id) || n == 0 || n > SL_IMAGE_SET_FILES)
    return snprintf(err, err_size, "spec \"data_upload\" names a data set without its id or files"), SL_ETYPE;
  const char *hexes[SL_IMAGE_SET_FILES];
  for (size_t i = 0; i < n; i++) {
    const json_t *f = json_array_get(files, i);
    const char *name = json_string_value(json_object_get(f, "name"));
    hexes[i] = json_string_value(json_object_get(f, "sha256"));
    const char *key = json_string_value(json_object_get(f, "key"));
    if (!name || strcmp(name, sl_image_set_files[i]) || !key || wk_store_check_key(key) < 0 ||
        !sl_sha256_hex_ok(hexes[i]))
      return snprintf(err, err_size, "spec \"data_upload\" file %zu needs the name %s, a store key and a sha256",
                      i, sl_image_set_files[i]), SL_ETYPE;
  }
  char check[SL_SHA256_HEX_LEN + 1];
  sl_image_set_sha256(hexes, n, check);
  if (strcmp(check, id))
    return snprintf(err, err_size, "spec \"data_upload\": its files' hashes make %.12s…, not %.12s…", check, id),
           SL_ECHECKSUM;
  snprintf(set, set_size, "%s/set-%s", dir, id);
  if (access(set, R_OK | X_OK) == 0) {
    for (size_t i = 0; i < n; i++) { /* in use now: the newest copies stay longest */
      char copy[PATH_MAX + 80];
      snprintf(copy, sizeof copy, "%s/%s", dir, hexes[i]);
      utimensat(AT_FDCWD, copy, NULL, 0);
    }
    return 0;
  }
  int r;
  int64_t need = 0;
  for (size_t i = 0; i < n; i++) {
    char copy[PATH_MAX + 80];
    snprintf(copy, sizeof copy, "%s/%s", dir, hexes[i]);
    if (access(copy, R_OK) != 0)
      need += sl_json_get_int(json_array_get(files, i), "bytes", 0);
  }
  make_room(j, dir, need, hexes, n);
  for (size_t i = 0; i < n; i++) {
    const json_t *f = json_array_get(files, i);
    if ((r = fetch_one(j, dir, json_string_value(json_object_get(f, "key")), hexes[i], err, err_size)) < 0)
      return r;
  }
  char tmp[PATH_MAX + 96], from[PATH_MAX + 80], to[PATH_MAX + 160];
  snprintf(tmp, sizeof tmp, "%s/.set-%s-%ld", dir, id, (long)getpid());
  remove_set(tmp);
  if (mkdir(tmp, 0700) < 0) {
    r = -errno;
    return snprintf(err, err_size, "cannot make %s: %s", tmp, sl_strerror(r)), r;
  }
  for (size_t i = 0; i < n; i++) {
    snprintf(from, sizeof from, "%s/%s", dir, hexes[i]);
    snprintf(to, sizeof to, "%s/%s", tmp, sl_image_set_files[i]);
    if (link(from, to) < 0) { /* a file system without hard links: a symbolic one */
      snprintf(from, sizeof from, "../%s", hexes[i]);
      if (symlink(from, to) < 0) {
        r = -errno;
        remove_set(tmp);
        return snprintf(err, err_size, "cannot place %s in %s: %s", sl_image_set_files[i], tmp, sl_strerror(r)), r;
      }
    }
  }
  if (rename(tmp, set) < 0) {
    r = -errno;
    remove_set(tmp);
    if (r == -EEXIST || r == -ENOTEMPTY) /* another job of this worker made it meanwhile */
      return 0;
    return snprintf(err, err_size, "cannot keep %s: %s", set, sl_strerror(r)), r;
  }
  return 0;
}

/* The job reads the file (or set) whose SHA-256 is sha (checked). */
static void note_data(struct wk_job *j, const char *sha) {
  if (j->n_data < sizeof j->data_sha / sizeof j->data_sha[0])
    snprintf(j->data_sha[j->n_data++], sizeof j->data_sha[0], "%s", sha);
}

bool wk_job_uses_data(const struct wk_job *j, const char *sha) {
  for (size_t i = 0; i < j->n_data; i++)
    if (!strcmp(j->data_sha[i], sha))
      return true;
  return false;
}

/* Whether the data set folder set holds the file whose device and inode
 * are dev and ino (a hard link), or a symbolic link to ../sha. */
static bool set_holds(const char *set, const char *sha, dev_t dev, ino_t ino) {
  char path[PATH_MAX + 160], to[SL_SHA256_HEX_LEN + 8];
  for (size_t i = 0; i < SL_IMAGE_SET_FILES; i++) {
    snprintf(path, sizeof path, "%s/%s", set, sl_image_set_files[i]);
    struct stat st;
    if (ino && lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_dev == dev && st.st_ino == ino)
      return true;
    ssize_t n = readlink(path, to, sizeof to - 1);
    if (n > 3) {
      to[n] = 0;
      if (!strncmp(to, "../", 3) && !strcmp(to + 3, sha))
        return true;
    }
  }
  return false;
}

int wk_data_forget(const char *work_dir, const char *sha) {
  if (!sl_sha256_hex_ok(sha))
    return SL_ETYPE;
  char dir[PATH_MAX - 160], path[PATH_MAX], set[PATH_MAX];
  snprintf(dir, sizeof dir, "%s/data", work_dir);
  DIR *d = opendir(dir);
  if (!d)
    return errno == ENOENT ? 0 : -errno;
  struct stat st = {0};
  snprintf(path, sizeof path, "%s/%s", dir, sha);
  if (stat(path, &st) < 0)
    st.st_ino = 0;
  int n = 0;
  /* the set folders first: a hard link is known by the file's inode */
  const struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, "set-", 4) || !sl_sha256_hex_ok(e->d_name + 4))
      continue;
    snprintf(set, sizeof set, "%s/set-%.64s", dir, e->d_name + 4);
    if (!strcmp(e->d_name + 4, sha) || set_holds(set, sha, st.st_dev, st.st_ino)) {
      remove_set(set);
      n++;
    }
  }
  closedir(d);
  snprintf(path, sizeof path, "%s/%s", dir, sha);
  if (unlink(path) == 0)
    n++;
  else if (errno != ENOENT)
    return -errno;
  return n;
}

json_t *wk_data_copies(const char *work_dir, size_t max) {
  json_t *out = json_array();
  char dir[PATH_MAX - 80], path[PATH_MAX];
  snprintf(dir, sizeof dir, "%s/data", work_dir);
  DIR *d = out ? opendir(dir) : NULL;
  if (!d)
    return out;
  const struct dirent *e;
  struct stat st;
  while ((e = readdir(d)) && json_array_size(out) < max) {
    snprintf(path, sizeof path, "%s/%.64s", dir, e->d_name);
    if (sl_sha256_hex_ok(e->d_name) && lstat(path, &st) == 0 && S_ISREG(st.st_mode))
      json_array_append_new(out, json_string(e->d_name));
  }
  closedir(d);
  return out;
}

int wk_job_fetch_data(struct wk_job *j, const json_t *assign, json_t **ret_assign, char *err, size_t err_size) {
  const json_t *spec = json_object_get(assign, "spec");
  const json_t *up = json_object_get(spec, "data_upload");
  *ret_assign = NULL;
  if (!up || (j->kind != WK_KIND_TRAIN && j->kind != WK_KIND_EVAL)) return 0;
  char dir[PATH_MAX], path[PATH_MAX + 160];
  snprintf(dir, sizeof dir, "%s/data", j->env->cfg->work_dir);
  int r = sl_mkdir_p(dir, 0700);
  if (r < 0) return snprintf(err, err_size, "cannot make %s: %s", dir, sl_strerror(r)), r;
  if (json_object_get(up, "files")) {
    if ((r = fetch_set(j, dir, up, path, sizeof path, err, err_size)) < 0) return r;
    note_data(j, json_string_value(json_object_get(up, "sha256")));
    size_t i;
    const json_t *f;
    json_array_foreach(json_object_get(up, "files"), i, f) note_data(j, json_string_value(json_object_get(f, "sha256")));
  } else {
    const char *key = json_string_value(json_object_get(up, "key"));
    const char *sha = json_string_value(json_object_get(up, "sha256"));
    if (!key || wk_store_check_key(key) < 0 || !sl_sha256_hex_ok(sha))
      return snprintf(err, err_size, "spec \"data_upload\" needs a store key and a sha256"), SL_ETYPE;
    snprintf(path, sizeof path, "%s/%s", dir, sha);
    if (access(path, R_OK) != 0)
      make_room(j, dir, sl_json_get_int(up, "bytes", 0), &sha, 1);
    if ((r = fetch_one(j, dir, key, sha, err, err_size)) < 0) return r;
    note_data(j, sha);
    snprintf(path, sizeof path, "%s/%s", dir, sha);
  }
  json_t *a = json_deep_copy(assign);
  json_t *s = json_object_get(a, "spec");
  if (!a || !s || json_object_set_new(s, "data", json_string(path)) < 0) {
    json_decref(a);
    return -ENOMEM;
  }
  *ret_assign = a;
  return 0;
}
