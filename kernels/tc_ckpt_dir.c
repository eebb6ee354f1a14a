/* A folder of checkpoint files (tc_ckpt.h): its checkpoints newest first,
 * the runs they belong to, pruning a run's own (only those: another run's,
 * one without identity and anything that is no checkpoint stay), setting
 * them aside, and the newest one that reads. */
#include "tc_ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sl_err.h"
#include "sl_file.h"

static int is_ckpt_name(const char *s) {
  size_t n = strlen(s);
  return n == 20 && strncmp(s, "ckpt-", 5) == 0 && strcmp(s + 15, ".slck") == 0 &&
         strspn(s + 5, "0123456789") == 10;
}

static int cmp_desc(const void *a, const void *b) {
  return strcmp(*(char *const *)b, *(char *const *)a);
}

int tc_ckpt_list(const char *dir, char ***ret_names, int *ret_count) {
  DIR *d = opendir(dir);
  if (!d) return -errno;
  char **names = NULL;
  int n = 0, cap = 0, r = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!is_ckpt_name(e->d_name)) continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 16;
      char **p = realloc(names, sizeof *names * cap);
      if (!p) { r = -ENOMEM; break; }
      names = p;
    }
    if (!(names[n] = strdup(e->d_name))) { r = -ENOMEM; break; }
    n++;
  }
  closedir(d);
  if (r < 0) {
    tc_ckpt_list_free(names, n);
    return r;
  }
  if (n) qsort(names, n, sizeof *names, cmp_desc);
  *ret_names = names;
  *ret_count = n;
  return 0;
}

void tc_ckpt_list_free(char **names, int count) {
  for (int i = 0; i < count; i++) free(names[i]);
  free(names);
}

/* Whether the checkpoint dir/name is one of run_id's, by its header. */
static int is_own(const char *dir, const char *name, const char *run_id) {
  char path[4096], why[512];
  struct tc_ckpt_meta meta;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return tc_ckpt_read_meta(path, &meta, why, sizeof why) == 0 && meta.run_id[0] &&
         !strcmp(meta.run_id, run_id);
}

int tc_ckpt_prune(const char *dir, int keep, const char *run_id) {
  char **names = NULL;
  int n = 0;
  if (!tc_run_id_valid(run_id)) return -EINVAL;
  int r = tc_ckpt_list(dir, &names, &n);
  if (r < 0) return r;
  char path[4096];
  int own = 0;
  for (int i = 0; i < n; i++) {
    if (!is_own(dir, names[i], run_id) || ++own <= (keep < 1 ? 1 : keep)) continue;
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    if (unlink(path) < 0 && errno != ENOENT) r = -errno;
  }
  tc_ckpt_list_free(names, n);
  /* temporaries left by a process killed mid-write */
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (strncmp(e->d_name, ".ckpt-", 6) == 0 && len > 9 && !strcmp(e->d_name + len - 9, ".slck.tmp")) {
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      unlink(path);
    }
  }
  if (d) closedir(d);
  return r;
}

int tc_ckpt_runs(const char *dir, struct tc_ckpt_run **ret, int *ret_count) {
  char **names = NULL;
  int n = 0;
  int r = tc_ckpt_list(dir, &names, &n);
  if (r == -ENOENT) {
    *ret = NULL;
    *ret_count = 0;
    return 0;
  }
  if (r < 0) return r;
  struct tc_ckpt_run *runs = calloc(n ? (size_t)n : 1, sizeof *runs);
  int k = 0;
  if (!runs) r = -ENOMEM;
  for (int i = 0; i < n && r == 0; i++) { /* names are newest first */
    char path[4096], why[512];
    struct tc_ckpt_meta meta;
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    if (tc_ckpt_read_meta(path, &meta, why, sizeof why) < 0) continue;
    int j = 0;
    while (j < k && strcmp(runs[j].run_id, meta.run_id) != 0) j++;
    if (j == k) {
      snprintf(runs[k].run_id, sizeof runs[k].run_id, "%s", meta.run_id);
      runs[k].seed = meta.seed;
      runs[k].data_hash = meta.data_hash;
      runs[k].newest_step = meta.step;
      k++;
    }
    runs[j].count++;
  }
  tc_ckpt_list_free(names, n);
  if (r < 0) {
    free(runs);
    return r;
  }
  *ret = runs;
  *ret_count = k;
  return 0;
}

int tc_ckpt_set_aside(const char *dir, char *ret_sub, size_t sub_size, char *err, size_t err_size) {
  char sub[4096], from[4096], to[4096 + 32];
  char **names = NULL;
  int n = 0;
  int r = tc_ckpt_list(dir, &names, &n);
  if (r < 0) {
    snprintf(err, err_size, "%s: %s", dir, strerror(-r));
    return r;
  }
  snprintf(sub, sizeof sub, "%s/set-aside-XXXXXX", dir);
  if (n && !mkdtemp(sub)) {
    r = -errno;
    snprintf(err, err_size, "%s: cannot make a folder to set checkpoints aside: %s", dir,
             strerror(-r));
  }
  for (int i = 0; i < n && r == 0; i++) {
    snprintf(from, sizeof from, "%s/%s", dir, names[i]);
    snprintf(to, sizeof to, "%s/%s", sub, names[i]);
    if (rename(from, to) < 0) {
      r = -errno;
      snprintf(err, err_size, "%s: cannot move it into %s: %s", from, sub, strerror(-r));
    }
  }
  tc_ckpt_list_free(names, n);
  if (r == 0 && n) r = sl_file_fsync_dir(dir);
  if (r < 0) return r;
  snprintf(ret_sub, sub_size, "%s", n ? sub : "");
  return n;
}

int tc_ckpt_set_aside_corrupt(const char *path, char *ret_to, size_t to_size) {
  char to[4096 + 32];
  struct stat st;
  if (to_size) ret_to[0] = 0;
  if (lstat(path, &st) < 0) return errno == ENOENT ? 0 : -errno;
  if (!S_ISREG(st.st_mode)) return 0; /* a folder is never replaced; a link, FIFO or device holds no data */
  for (int i = 0; i < 1000; i++) {
    if (i == 0)
      snprintf(to, sizeof to, "%s.corrupt", path);
    else
      snprintf(to, sizeof to, "%s.corrupt-%d", path, i);
    if (renameat2(AT_FDCWD, path, AT_FDCWD, to, RENAME_NOREPLACE) == 0) {
      char dir[4096];
      snprintf(dir, sizeof dir, "%s", path);
      char *slash = strrchr(dir, '/');
      if (slash) *slash = 0;
      sl_file_fsync_dir(slash ? (dir[0] ? dir : "/") : ".");
      snprintf(ret_to, to_size, "%s", to);
      return 0;
    }
    if (errno != EEXIST) return -errno;
  }
  return -EEXIST;
}

int tc_ckpt_load_newest(const char *dir, const struct tc_config *expect, const char *run_id,
                        tc_ckpt_warn_fn warn, void *warn_ctx, struct tc_ckpt **ret,
                        char *ret_path, size_t path_size, char *err, size_t err_size) {
  char **names = NULL;
  int n = 0;
  int r = tc_ckpt_list(dir, &names, &n);
  if (r == -ENOENT || (r == 0 && n == 0)) {
    tc_ckpt_list_free(names, n);
    snprintf(err, err_size, "%s: no checkpoint", dir);
    return -ENOENT;
  }
  if (r < 0) {
    snprintf(err, err_size, "%s: %s", dir, strerror(-r));
    return r;
  }
  char path[4096];
  r = -ENOENT;
  snprintf(err, err_size, "%s: no valid checkpoint", dir);
  for (int i = 0; i < n; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    char why[512] = "";
    struct tc_ckpt_meta meta;
    /* another run's checkpoint is no candidate, and not reported as corrupt */
    if (run_id && tc_ckpt_read_meta(path, &meta, why, sizeof why) == 0 && meta.run_id[0] &&
        strcmp(meta.run_id, run_id) != 0)
      continue;
    r = tc_ckpt_read(path, expect, ret, why, sizeof why);
    if (r == 0) {
      if (ret_path) snprintf(ret_path, path_size, "%s", path);
      break;
    }
    if (r == SL_EMISMATCH || r == -ENOMEM) {
      snprintf(err, err_size, "%s", why);
      break;
    }
    if (warn) warn(warn_ctx, path, r, why);
    snprintf(err, err_size, "%s: no valid checkpoint (last error: %s)", dir, why);
    r = -ENOENT;
  }
  tc_ckpt_list_free(names, n);
  return r;
}
