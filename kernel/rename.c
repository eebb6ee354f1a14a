/* Following a notebook that is renamed or moved (rename.h).
 *
 * The session is named after the notebook's path, which Jupyter changes
 * when the notebook is renamed, without telling its kernel. Two things
 * notice it:
 *
 * - While the kernel runs, at the end of a cell (user activity: asking the
 *   server while the notebook is idle would count as activity and keep a
 *   hub's server from being culled), at most once a JK_RENAME_EVERY_US, the
 *   server that started the kernel is asked again for the notebook's path
 *   (spotlab-kernel-session, jpserver.c), on a thread of its own so that
 *   the kernel never waits for it. The loop picks the answer up at its next
 *   turn (jk_rename_poll).
 * - A kernel restarted keeps its id, and a rename before the restart shows
 *   as another path for the same id: each kernel records, in
 *   $SPOTLAB_HOME/kernels/ID, the session it followed last (written when
 *   it changes, not at every start). Records older than RECORD_KEEP_S are
 *   removed when another is written. */
#include "rename.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "jpserver.h"
#include "sl_file.h"
#include "sl_log.h"
#include "sl_path.h"
#include "sl_time.h"

#define POLL_US (50 * SL_US_PER_MS)             /* the loop looks for the answer this often */
#define RECORD_KEEP_S (30 * 24 * 3600)          /* a record written a month ago: its kernel is gone */
#define RECORD_MAX_BYTES 4096

struct jk_rename {
  char *file;                  /* the server's runtime file */
  char *kernel_id;
  pthread_t thread;
  bool running;                /* a thread was started and not joined */
  atomic_bool done;            /* it has finished: join it */
  int result;                  /* its lookup's: 0 with path, or negative */
  char path[4096];
  char why[512];
  int64_t last_us;             /* when the last lookup started; 0: never */
};

struct jk_rename *jk_rename_new(const char *server_file, const char *kernel_id) {
  if (!server_file || !*server_file || !kernel_id || !*kernel_id)
    return NULL;
  struct jk_rename *r = calloc(1, sizeof *r);
  if (!r || !(r->file = strdup(server_file)) || !(r->kernel_id = strdup(kernel_id)))
    return jk_rename_free(r);
  return r;
}

struct jk_rename *jk_rename_free(struct jk_rename *r) {
  if (!r)
    return NULL;
  if (r->running)
    pthread_join(r->thread, NULL); /* bounded: the program has a deadline */
  free(r->file);
  free(r->kernel_id);
  free(r);
  return NULL;
}

static void *lookup(void *arg) {
  struct jk_rename *r = arg;
  r->result = jk_jpserver_ask(r->file, r->kernel_id, 0, r->path, sizeof r->path, r->why, sizeof r->why);
  atomic_store(&r->done, true);
  return NULL;
}

void jk_rename_check(struct jk_rename *r, bool now) {
  int64_t t = sl_time_mono_us();
  if (!r || r->running || (!now && r->last_us && t - r->last_us < JK_RENAME_EVERY_US))
    return;
  r->last_us = t;
  atomic_store(&r->done, false);
  int e = pthread_create(&r->thread, NULL, lookup, r);
  if (e) {
    sl_warn("kernel", "cannot ask the Jupyter server for the notebook's path: %s", strerror(e));
    return;
  }
  r->running = true;
}

int64_t jk_rename_wake_at_us(const struct jk_rename *r) {
  return r && r->running ? sl_time_mono_us() + POLL_US : INT64_MAX;
}

int jk_rename_poll(struct jk_rename *r, char *ret, size_t size) {
  if (!r || !r->running || !atomic_load(&r->done))
    return 0;
  pthread_join(r->thread, NULL);
  r->running = false;
  if (r->result < 0) {
    if (r->result != -ENOENT || r->why[0])
      sl_debug("kernel", "asking the Jupyter server for the notebook's path: %s",
               r->why[0] ? r->why : strerror(-r->result));
    return 0;
  }
  if (strlen(r->path) >= size)
    return 0;
  memcpy(ret, r->path, strlen(r->path) + 1);
  return 1;
}

/* ---- the session each kernel followed last -------------------------------- */

/* $SPOTLAB_HOME/kernels, and the record of kernel_id in it (a kernel id is
 * a file name: jupyter_client's are UUIDs; one with a '/' has none). */
static int record_path(const char *kernel_id, char *dir, size_t dir_size, char *path, size_t size) {
  char home[4000];
  if (!*kernel_id || strchr(kernel_id, '/') || kernel_id[0] == '.' || sl_spotlab_home(home, sizeof home) < 0)
    return -EINVAL;
  if ((size_t)snprintf(dir, dir_size, "%s/kernels", home) >= dir_size ||
      (size_t)snprintf(path, size, "%s/%s", dir, kernel_id) >= size)
    return -ENAMETOOLONG;
  return 0;
}

int jk_rename_recorded(const char *kernel_id, char *ret, size_t size) {
  char dir[4100], path[4400], buf[RECORD_MAX_BYTES];
  int r = record_path(kernel_id, dir, sizeof dir, path, sizeof path);
  if (r < 0)
    return r;
  FILE *f = fopen(path, "re");
  if (!f)
    return -errno;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  if (n == 0 || buf[n - 1] != '\n' || memchr(buf, '\0', n) || n > size)
    return -EINVAL; /* cut short, or not one; a new one replaces it */
  buf[n - 1] = '\0';
  memcpy(ret, buf, n);
  return 0;
}

/* Removes the records of kernels not seen for RECORD_KEEP_S. */
static void sweep(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  time_t old = time(NULL) - RECORD_KEEP_S;
  struct dirent *e;
  while ((e = readdir(d))) {
    struct stat st;
    if (e->d_name[0] != '.' && fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISREG(st.st_mode) && st.st_mtime < old)
      unlinkat(dirfd(d), e->d_name, 0);
  }
  closedir(d);
}

int jk_rename_record(const char *kernel_id, const char *notebook) {
  char dir[4100], path[4400], line[RECORD_MAX_BYTES];
  int r = record_path(kernel_id, dir, sizeof dir, path, sizeof path);
  if (r < 0)
    return r;
  int n = snprintf(line, sizeof line, "%s\n", notebook);
  if (n < 0 || (size_t)n >= sizeof line || strchr(notebook, '\n'))
    return -EINVAL;
  if ((r = sl_mkdir_p(dir, 0700)) < 0)
    return r;
  sweep(dir);
  return sl_file_write_atomic(path, line, (size_t)n, 0600);
}
