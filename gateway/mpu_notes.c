/* The records of the gateway's own multipart uploads to S3 (mpu_notes.h):
 * from an upload's start until it is completed or aborted it is recorded as
 * state_dir/uploads/NAME-XXXXXX.mpu ("key\nupload_id\n", written whole and
 * fsynced), so that what a killed gateway left open can be aborted by the
 * next start. */
#include "mpu_notes.h"

#include "sl_err.h"
#include "sl_file.h"
#include "sl_log.h"
#include "sl_path.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define T "gateway.upload"
#define MPU_SUFFIX ".mpu"
#define RECORD_MAX 1260 /* "key\nupload_id\n" */

void gw_mpu_notes_dir(const char *state_dir, char *dir, size_t size) {
  snprintf(dir, size, "%.3900s/uploads", state_dir);
}

void gw_mpu_note_in(struct gw_mpu_note *n, const char *dir, const char *name) {
  snprintf(n->dir, sizeof n->dir, "%s", dir);
  snprintf(n->name, sizeof n->name, "%s", name);
  n->path[0] = 0;
}

void gw_mpu_note_init(struct gw_mpu_note *n, const char *state_dir, const char *name) {
  char dir[PATH_MAX];
  gw_mpu_notes_dir(state_dir, dir, sizeof dir);
  gw_mpu_note_in(n, dir, name);
}

int gw_mpu_note_event(void *ud, const char *key, const char *upload_id, bool open) {
  struct gw_mpu_note *n = ud;
  if (!open) {
    if (n->path[0] && unlink(n->path) == 0)
      sl_file_fsync_dir(n->dir);
    n->path[0] = 0;
    return 0;
  }
  char tmp[PATH_MAX], body[RECORD_MAX];
  int len = snprintf(body, sizeof body, "%s\n%s\n", key, upload_id);
  if (len < 0 || (size_t)len >= sizeof body || strchr(upload_id, '\n'))
    return -EINVAL;
  int r = sl_mkdir_p(n->dir, 0700); /* the bundle's may come first */
  if (r < 0)
    return r;
  snprintf(tmp, sizeof tmp, "%.3800s/%.190s-XXXXXX" MPU_SUFFIX, n->dir, n->name);
  int fd = mkstemps(tmp, (int)strlen(MPU_SUFFIX));
  if (fd < 0)
    return -errno;
  close(fd);
  /* the name is taken; the content arrives whole under it */
  r = sl_file_write_atomic(tmp, body, (size_t)len, 0600);
  if (r < 0) {
    unlink(tmp);
    return r;
  }
  snprintf(n->path, sizeof n->path, "%s", tmp);
  return 0;
}

int gw_mpu_notes_left_open(const char *state_dir,
                           int (*fn)(void *ud, const char *key, const char *upload_id), void *ud) {
  char dir[PATH_MAX];
  gw_mpu_notes_dir(state_dir, dir, sizeof dir);
  DIR *d = opendir(dir);
  if (!d)
    return errno == ENOENT ? 0 : -errno;
  struct dirent *de;
  int n = 0;
  while ((de = readdir(d))) {
    size_t len = strlen(de->d_name);
    if (len <= strlen(MPU_SUFFIX) || strcmp(de->d_name + len - strlen(MPU_SUFFIX), MPU_SUFFIX))
      continue;
    char path[PATH_MAX], body[RECORD_MAX];
    snprintf(path, sizeof path, "%.3900s/%s", dir, de->d_name);
    FILE *f = fopen(path, "re");
    size_t got = f ? fread(body, 1, sizeof body - 1, f) : 0;
    if (f)
      fclose(f);
    body[got] = 0;
    char *nl = strchr(body, '\n'), *id = nl ? nl + 1 : NULL, *end = id ? strchr(id, '\n') : NULL;
    if (!nl || nl == body || !end || end == id) {
      sl_warn(T, "%s: not a record of a multipart upload; removed (an upload it named, if any, "
              "is left to the bucket's lifecycle rule)", path);
      unlink(path);
      continue;
    }
    *nl = *end = 0;
    int r = fn(ud, body, id);
    if (r < 0) {
      sl_warn(T, "%s: the multipart upload left open by an earlier run is not taken now: %s (tried "
              "again at the next start)", body, sl_strerror(r));
      continue;
    }
    unlink(path);
    n++;
  }
  closedir(d);
  if (n)
    sl_file_fsync_dir(dir);
  return n;
}
