/* Atomic file replacement: temporary name, fsync, rename, folder fsync. */
#include "sl_file.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <dirent.h>
#include <ftw.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TMP_INFIX ".tmp." /* PATH.tmp.PID: the temporary name of a write */

static int write_all(int fd, const char *p, size_t len) {
  while (len > 0) {
    ssize_t w = write(fd, p, len);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      return -errno;
    if (w == 0)
      return -EIO;
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

int sl_file_fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  int r = fsync(fd) < 0 ? -errno : 0;
  close(fd);
  return r;
}

static int sync_folder(const char *path) {
  char copy[PATH_MAX];
  if (strlen(path) >= sizeof copy)
    return -ENAMETOOLONG;
  strcpy(copy, path);
  return sl_file_fsync_dir(dirname(copy));
}

static int write_replace(const char *path, const void *data, size_t len, unsigned mode, bool durable) {
  char tmp[PATH_MAX];
  int n = snprintf(tmp, sizeof tmp, "%s" TMP_INFIX "%ld", path, (long)getpid());
  if (n < 0 || (size_t)n >= sizeof tmp)
    return -ENAMETOOLONG;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0)
    return -errno;
  int r = write_all(fd, data, len);
  if (r == 0 && durable && fsync(fd) < 0)
    r = -errno;
  if (close(fd) < 0 && r == 0)
    r = -errno;
  if (r == 0 && rename(tmp, path) < 0)
    r = -errno;
  if (r < 0) {
    unlink(tmp);
    return r;
  }
  return durable ? sync_folder(path) : 0;
}

int sl_file_write_atomic(const char *path, const void *data, size_t len, unsigned mode) {
  return write_replace(path, data, len, mode, true);
}

int sl_file_replace(const char *path, const void *data, size_t len, unsigned mode) {
  return write_replace(path, data, len, mode, false);
}

/* The pid of a temporary name "NAME" TMP_INFIX "PID" as write_replace makes
 * them, or 0. */
static pid_t temporary_pid(const char *name) {
  const char *end = name + strlen(name), *p = end;
  while (p > name && p[-1] >= '0' && p[-1] <= '9')
    p--;
  size_t digits = (size_t)(end - p);
  size_t infix = strlen(TMP_INFIX);
  if (digits == 0 || digits > 9 || (size_t)(p - name) <= infix ||
      strncmp(p - infix, TMP_INFIX, infix) != 0)
    return 0;
  return (pid_t)atol(p);
}

int sl_file_sweep_temporaries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return errno == ENOENT ? 0 : -errno;
  int removed = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    pid_t pid = temporary_pid(e->d_name);
    struct stat st;
    if (pid <= 0 || pid == getpid() || (kill(pid, 0) == 0 || errno != ESRCH) ||
        fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
      continue;
    if (unlinkat(dirfd(d), e->d_name, 0) == 0)
      removed++;
  }
  closedir(d);
  return removed;
}

char *sl_file_size_text(long long bytes, char *buf, size_t size) {
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) {
    snprintf(buf, size, "%lld B", bytes < 0 ? 0 : bytes);
    return buf;
  }
  double v = (double)bytes / 1024;
  size_t i = 0;
  while (v >= 1023.95 && i + 1 < sizeof units / sizeof *units) {
    v /= 1024;
    i++;
  }
  snprintf(buf, size, "%.1f %s", v, units[i]);
  return buf;
}

/* The first failure of the removal under way on this thread (nftw's
 * callback has no argument of its own). */
static _Thread_local int remove_failed;

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)ftw;
  if ((flag == FTW_DP || flag == FTW_DNR ? rmdir(path) : unlink(path)) < 0 && errno != ENOENT && !remove_failed)
    remove_failed = -errno;
  return 0;
}

int sl_file_remove_tree(const char *path) {
  remove_failed = 0;
  if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) < 0 && errno != ENOENT && !remove_failed)
    remove_failed = -errno;
  return remove_failed;
}
