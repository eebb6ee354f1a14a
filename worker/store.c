/* Checkpoint store: a local folder or an S3 bucket behind the same calls.
 *
 * Folder: an object KEY lives at ROOT/KEY. A put copies into
 * ROOT/DIR/.wk-tmp.NAME.SPACE.PID.N, fsyncs it, renames it over ROOT/KEY and
 * fsyncs DIR, so the name always points at a complete object and an
 * interrupted put leaves at most a stray temporary file, which list and get
 * never show. SPACE names the PID space of the process that writes it (the
 * kernel's boot and its PID namespace); each put first removes from DIR the
 * temporaries of a process of its own PID space that is gone, and any that
 * no one has written to for STALE_TMP_S. A folder is swept again only after
 * SWEEP_EVERY_US or once puts went to another folder meanwhile, so a run of
 * puts into one folder (a job's files, one by one) reads it once; the puts
 * in between look again only at the temporaries whose writers were alive
 * at the sweep (a hung worker's, until its instance is killed).
 *
 * S3: the client in common/sl_s3.h does the work; its puts are atomic in the
 * service (one PUT, or a multipart upload completed only when whole), its
 * gets are checked against the object's SHA-256 before they reach their
 * name. The store adds the key rules and the folder's answers (-ENOENT for a
 * missing key on remove).
 *
 * With a pump set, each call runs on a thread of its own while the caller's
 * thread runs the pump every PUMP_MS until it ends: a slow upload, or S3's
 * tries and backoffs, never silence the worker's heartbeats. The store is
 * used by one thread at a time (thread start and join order the handover,
 * the presigner's socket included). */
#include "store.h"

#include "sl_err.h"
#include "sl_file.h"
#include "sl_path.h"
#include "sl_strv.h"
#include "sl_s3.h"
#include "sl_time.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define KEY_MAX 512
#define LIST_MAX 100000
#define TMP_PREFIX ".wk-tmp"
#define PUMP_MS 50
#define STALE_TMP_S 3600 /* a temporary untouched this long belongs to a put that stopped */
#define SWEEP_EVERY_US (60 * SL_US_PER_S)
#define WAITING_MAX 8

struct wk_store {
  char root[PATH_MAX];      /* folder backend */
  struct sl_s3_client *s3;  /* S3 backend; NULL for a folder */
  unsigned tmp_counter;
  char space[9];            /* this process's PID space, 8 hex digits */
  char swept[PATH_MAX];     /* the folder swept last, and when (sl_time_mono_us) */
  int64_t swept_us;
  /* its temporaries whose writer, of this PID space, was alive then: looked at again at
   * each put into it (no reading of the folder), and removed once the writer is gone */
  char waiting[WAITING_MAX][NAME_MAX + 1];
  size_t n_waiting;
  int64_t fail_after; /* test hook; -1 = off */
  void (*pump)(void *ctx);  /* run while a call is under way; NULL: calls run inline */
  void *pump_ctx;
  char err[512];
};

void wk_store_set_pump(struct wk_store *s, void (*pump)(void *ctx), void *ctx) {
  s->pump = pump;
  s->pump_ctx = ctx;
}

const char *wk_store_error(const struct wk_store *s) { return s->err; }

int wk_store_check_key(const char *key) {
  size_t n = key ? strlen(key) : 0;
  if (n == 0 || n > KEY_MAX || key[0] == '/' || key[n - 1] == '/') return SL_ENAME;
  const char *c = key;
  while (*c) {
    const char *e = strchr(c, '/');
    size_t len = e ? (size_t)(e - c) : strlen(c);
    if (len == 0 || (len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.') ||
        strncmp(c, TMP_PREFIX, strlen(TMP_PREFIX)) == 0)
      return SL_ENAME;
    for (size_t i = 0; i < len; i++)
      if ((unsigned char)c[i] < 0x20 || c[i] == 0x7f || c[i] == '\\') return SL_ENAME;
    c += len + (e ? 1 : 0);
  }
  return 0;
}

/* Reads up to size - 1 bytes of a small file into buf (NUL-terminated); its length, or 0. */
static size_t read_small(const char *path, char *buf, size_t size) {
  buf[0] = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, size - 1);
  close(fd);
  buf[n > 0 ? n : 0] = 0;
  return n > 0 ? (size_t)n : 0;
}

/* Names the space this process's PID lives in, for the temporaries it writes: a hash of the
 * kernel's boot id and the PID namespace (the host's name where /proc says neither). Another
 * process of the same space can tell from the PID in a temporary's name whether its writer
 * is gone; a PID of another space says nothing here. */
static void pid_space(char out[9]) {
  char id[256];
  size_t n = read_small("/proc/sys/kernel/random/boot_id", id, 128);
  ssize_t k = readlink("/proc/self/ns/pid", id + n, sizeof id - n - 1);
  n += k > 0 ? (size_t)k : 0;
  id[n] = 0;
  if (n == 0 && gethostname(id, sizeof id - 1) == 0) id[sizeof id - 1] = 0;
  uint32_t h = 2166136261u; /* FNV-1a */
  for (const char *c = id; *c; c++) h = (h ^ (unsigned char)*c) * 16777619u;
  snprintf(out, 9, "%08x", (unsigned)h);
}

static int open_s3(const char *url, const struct sl_s3_signer *signer, uint64_t part_bytes,
                   struct wk_store **ret) {
  if (!signer) return SL_ECONFIG; /* a worker reaches S3 only through its gateway's URLs */
  const char *b = url + 5;
  if (!*b || *b == '/') return SL_ECONFIG;
  struct wk_store *s = calloc(1, sizeof *s);
  if (!s) return -ENOMEM;
  struct sl_s3_opts opts = {.part_bytes = part_bytes};
  int r = sl_s3_client_new(signer, &opts, &s->s3);
  if (r < 0) {
    free(s);
    return r;
  }
  s->fail_after = -1;
  *ret = s;
  return 0;
}

int wk_store_open(const char *url, const struct sl_s3_signer *signer, uint64_t part_bytes,
                  struct wk_store **ret) {
  if (url && strncmp(url, "s3://", 5) == 0) return open_s3(url, signer, part_bytes, ret);
  if (!url || strncmp(url, "file:///", 8) != 0) return SL_ENOTSUP;
  const char *path = url + 7;
  if (strlen(path) >= PATH_MAX - KEY_MAX - 64) return SL_ELIMIT;
  struct wk_store *s = calloc(1, sizeof *s);
  if (!s) return -ENOMEM;
  snprintf(s->root, sizeof s->root, "%s", path);
  pid_space(s->space);
  size_t n = strlen(s->root);
  while (n > 1 && s->root[n - 1] == '/') s->root[--n] = 0;
  s->fail_after = -1;
  int r = sl_mkdir_p(s->root, 0700);
  if (r < 0) {
    free(s);
    return r;
  }
  *ret = s;
  return 0;
}

struct wk_store *wk_store_free(struct wk_store *s) {
  if (s) sl_s3_client_free(s->s3);
  free(s);
  return NULL;
}

void wk_store_fail_next_put(struct wk_store *s, int64_t bytes) {
  if (s->s3) sl_s3_fail_next_put(s->s3, bytes);
  else s->fail_after = bytes;
}

static int dir_of(const char *path, char *out, size_t size) {
  const char *slash = strrchr(path, '/');
  if (!slash || (size_t)(slash - path) >= size) return -EINVAL;
  size_t n = slash == path ? 1 : (size_t)(slash - path);
  memcpy(out, path, n);
  out[n] = 0;
  return 0;
}

/* Copies src into dst_final through a temporary name in the same folder.
 * fail_after >= 0 stops after that many bytes and leaves the temporary file,
 * as a process killed mid-write would. */
static int copy_atomic(struct wk_store *s, const char *src, const char *dst_final,
                       int64_t fail_after, uint64_t *ret_bytes) {
  char dir[PATH_MAX], tmp[PATH_MAX + 64];
  int r = dir_of(dst_final, dir, sizeof dir);
  if (r < 0 || (r = sl_mkdir_p(dir, 0700)) < 0) return r;
  snprintf(tmp, sizeof tmp, "%s/" TMP_PREFIX ".%s.%s.%d.%u", dir, strrchr(dst_final, '/') + 1,
           s->space, (int)getpid(), s->tmp_counter++);
  int in = open(src, O_RDONLY | O_CLOEXEC);
  if (in < 0) return -errno;
  int out = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (out < 0) {
    r = -errno;
    close(in);
    return r;
  }
  uint64_t total = 0;
  char buf[65536];
  bool keep_tmp = false;
  for (;;) {
    ssize_t k = read(in, buf, sizeof buf);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) { r = -errno; goto fail; }
    if (k == 0) break;
    if (fail_after >= 0 && total + (uint64_t)k > (uint64_t)fail_after) {
      k = (ssize_t)((uint64_t)fail_after - total);
      if (k > 0 && write(out, buf, (size_t)k) != k) {}
      r = -EIO;
      keep_tmp = true;
      goto fail;
    }
    for (ssize_t off = 0; off < k;) {
      ssize_t w = write(out, buf + off, (size_t)(k - off));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) { r = -errno; goto fail; }
      off += w;
    }
    total += (uint64_t)k;
  }
  if (fsync(out) < 0) { r = -errno; goto fail; }
  if (close(out) < 0) { out = -1; r = -errno; goto fail; }
  out = -1;
  close(in);
  if (rename(tmp, dst_final) < 0) {
    r = -errno;
    unlink(tmp);
    return r;
  }
  if ((r = sl_file_fsync_dir(dir)) < 0) return r;
  if (ret_bytes) *ret_bytes = total;
  return 0;
fail:
  if (out >= 0) close(out);
  close(in);
  if (!keep_tmp) unlink(tmp);
  return r;
}

/* Whether the process pid of this PID space is gone: no such process, or one that has
 * exited and waits for its parent to reap it. */
static bool pid_gone(long pid) {
  if (pid <= 1 || pid > INT_MAX) return false;
  if (kill((pid_t)pid, 0) < 0) return errno == ESRCH;
  char path[48], buf[512];
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  if (!read_small(path, buf, sizeof buf)) return false;
  const char *p = strrchr(buf, ')'); /* the command name may hold spaces and ')' */
  return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

/* Reads the trailing ".DIGITS" of name[0, *len): its value, with *len cut before the dot;
 * -1 if there is none. */
static long last_number(const char *name, size_t *len) {
  size_t e = *len, b = e;
  while (b > 0 && name[b - 1] >= '0' && name[b - 1] <= '9') b--;
  if (b == e || e - b > 10 || b == 0 || name[b - 1] != '.') return -1;
  *len = b - 1;
  return strtol(name + b, NULL, 10);
}

/* The PID of the temporary name's writer (NAME.SPACE.PID.N) when it is of this process's
 * PID space, else -1. */
static long space_writer(const struct wk_store *s, const char *name) {
  size_t len = strlen(name);
  if (last_number(name, &len) < 0) return -1;
  long pid = last_number(name, &len);
  if (pid < 0 || len < 9 || name[len - 9] != '.' || strncmp(name + len - 8, s->space, 8) != 0) return -1;
  return pid;
}

/* Whether the temporary name is this process's own (a put under way here). */
static bool own_tmp(const struct wk_store *s, const char *name) { return space_writer(s, name) == (long)getpid(); }

/* Whether the temporary name was left by a writer of this PID space that is gone. */
static bool writer_gone(const struct wk_store *s, const char *name) {
  long pid = space_writer(s, name);
  return pid >= 0 && pid != (long)getpid() && pid_gone(pid);
}

/* Removes from dir the temporaries of puts that will never finish: those whose writer, of
 * this PID space, is gone, and any not written to for STALE_TMP_S (a put of another machine
 * sharing the folder, or of a process whose PID was taken again). A put still under way
 * elsewhere whose temporary goes fails at its rename and leaves the object as it was. */
static void sweep_tmp(struct wk_store *s, const char *dir) {
  int64_t now_us = sl_time_mono_us();
  if (!strcmp(dir, s->swept) && now_us - s->swept_us < SWEEP_EVERY_US) {
    /* swept a moment ago: only the writers that were still alive then (a hung worker's
     * put, whose instance is killed later) */
    for (size_t i = 0; i < s->n_waiting;) {
      if (!writer_gone(s, s->waiting[i])) {
        i++;
        continue;
      }
      char path[PATH_MAX + NAME_MAX + 2];
      snprintf(path, sizeof path, "%s/%s", dir, s->waiting[i]);
      unlink(path);
      memmove(s->waiting[i], s->waiting[i + 1], (s->n_waiting - i - 1) * sizeof s->waiting[0]);
      s->n_waiting--;
    }
    return;
  }
  snprintf(s->swept, sizeof s->swept, "%s", dir);
  s->swept_us = now_us;
  s->n_waiting = 0;
  DIR *d = opendir(dir);
  if (!d) return;
  time_t now = time(NULL);
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, TMP_PREFIX ".", strlen(TMP_PREFIX) + 1) != 0) continue;
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
      continue;
    if (writer_gone(s, e->d_name) || now - st.st_mtime > STALE_TMP_S)
      unlinkat(dirfd(d), e->d_name, 0);
    else if (s->n_waiting < WAITING_MAX && strlen(e->d_name) <= NAME_MAX && !own_tmp(s, e->d_name))
      snprintf(s->waiting[s->n_waiting++], sizeof s->waiting[0], "%s", e->d_name);
  }
  closedir(d);
}

static int key_path(const struct wk_store *s, const char *key, char *out, size_t size) {
  int r = wk_store_check_key(key);
  if (r < 0) return r;
  if ((size_t)snprintf(out, size, "%s/%s", s->root, key) >= size) return SL_ELIMIT;
  return 0;
}

static int put_file(struct wk_store *s, const char *key, const char *src, uint64_t *ret_bytes) {
  char path[PATH_MAX];
  s->err[0] = 0;
  if (s->s3) {
    int r = wk_store_check_key(key);
    return r < 0 ? r : sl_s3_put_file(s->s3, key, src, ret_bytes, s->err, sizeof s->err);
  }
  int r = key_path(s, key, path, sizeof path);
  if (r < 0) return r;
  int64_t fail_after = s->fail_after;
  s->fail_after = -1;
  char dir[PATH_MAX];
  if (dir_of(path, dir, sizeof dir) == 0) sweep_tmp(s, dir);
  return copy_atomic(s, src, path, fail_after, ret_bytes);
}

static int get_file(struct wk_store *s, const char *key, const char *dst, uint64_t *ret_bytes) {
  char path[PATH_MAX];
  s->err[0] = 0;
  if (s->s3) {
    int r = wk_store_check_key(key);
    return r < 0 ? r : sl_s3_get_file(s->s3, key, dst, ret_bytes, s->err, sizeof s->err);
  }
  int r = key_path(s, key, path, sizeof path);
  if (r < 0) return r;
  struct stat st;
  if (stat(path, &st) < 0) return -errno;
  if (!S_ISREG(st.st_mode)) return -ENOENT;
  return copy_atomic(s, path, dst, -1, ret_bytes);
}

/* S3 deletes a missing key without a word: HEAD first, for the folder's -ENOENT. */
static int remove_s3(struct wk_store *s, const char *key) {
  struct sl_s3_object o;
  int r = wk_store_check_key(key);
  if (r == 0) r = sl_s3_head(s->s3, key, &o, s->err, sizeof s->err);
  if (r == 0) r = sl_s3_delete(s->s3, key, s->err, sizeof s->err);
  return r;
}

static int remove_key(struct wk_store *s, const char *key) {
  char path[PATH_MAX], dir[PATH_MAX];
  s->err[0] = 0;
  if (s->s3) return remove_s3(s, key);
  int r = key_path(s, key, path, sizeof path);
  if (r < 0) return r;
  if (unlink(path) < 0) return -errno;
  if (dir_of(path, dir, sizeof dir) == 0) sl_file_fsync_dir(dir);
  return 0;
}

/* Walks ROOT/rel (rel "" or "a/b/") adding keys that start with prefix. */
static int walk(const struct wk_store *s, const char *rel, const char *prefix, int depth,
                struct sl_strv *l) {
  if (depth > 16) return 0;
  char path[PATH_MAX + KEY_MAX + 8];
  snprintf(path, sizeof path, "%s/%s", s->root, rel);
  DIR *d = opendir(path);
  if (!d) return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
  int r = 0;
  struct dirent *e;
  while (r >= 0 && (e = readdir(d))) {
    if (e->d_name[0] == '.' && (!e->d_name[1] || !strcmp(e->d_name, "..") ||
                                !strncmp(e->d_name, TMP_PREFIX, strlen(TMP_PREFIX))))
      continue;
    char key[KEY_MAX + 2];
    if ((size_t)snprintf(key, sizeof key, "%s%s", rel, e->d_name) > KEY_MAX) continue;
    size_t kl = strlen(key), pl = strlen(prefix);
    struct stat st;
    char full[PATH_MAX + KEY_MAX + 8];
    snprintf(full, sizeof full, "%s/%s", s->root, key);
    if (lstat(full, &st) < 0) continue;
    if (S_ISDIR(st.st_mode)) {
      strcat(key, "/");
      if (strncmp(key, prefix, kl + 1 < pl ? kl + 1 : pl) == 0) r = walk(s, key, prefix, depth + 1, l);
    } else if (S_ISREG(st.st_mode) && strncmp(key, prefix, pl) == 0) {
      r = sl_strv_add(l, key, LIST_MAX);
    }
  }
  closedir(d);
  return r;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int list_keys(struct wk_store *s, const char *prefix, char ***ret_keys, size_t *ret_n) {
  if (!prefix || strlen(prefix) > KEY_MAX || prefix[0] == '/' || strstr(prefix, "..")) return SL_ENAME;
  s->err[0] = 0;
  if (s->s3) return sl_s3_list(s->s3, prefix, ret_keys, ret_n, s->err, sizeof s->err);
  struct sl_strv l = {0};
  int r;
  if ((r = walk(s, "", prefix, 0, &l)) < 0) goto fail;
  size_t n = l.n;
  if (n) qsort(l.v, n, sizeof *l.v, cmp_str);
  if (!(*ret_keys = sl_strv_take(&l))) return -ENOMEM;
  if (ret_n) *ret_n = n;
  return 0;
fail:
  sl_strv_free(l.v);
  return r;
}

/* ---- calls, inline or on a thread of their own while the pump runs ---- */

enum call_op { PUT, GET, REMOVE, LIST, RUN };

struct call {
  enum call_op op;
  struct wk_store *s;
  const char *key, *path;
  uint64_t *bytes;
  char ***keys;
  size_t *n;
  int (*fn)(void *ctx);
  void *ctx;
  int r;
};

static void *call_run(void *arg) {
  struct call *c = arg;
  switch (c->op) {
  case PUT: c->r = put_file(c->s, c->key, c->path, c->bytes); break;
  case GET: c->r = get_file(c->s, c->key, c->path, c->bytes); break;
  case REMOVE: c->r = remove_key(c->s, c->key); break;
  case LIST: c->r = list_keys(c->s, c->key, c->keys, c->n); break;
  case RUN: c->r = c->fn(c->ctx); break;
  }
  return NULL;
}

static int call(struct call *c) {
  pthread_t t;
  if (!c->s->pump || pthread_create(&t, NULL, call_run, c) != 0) {
    call_run(c); /* no pump, or no thread to be had: inline */
    return c->r;
  }
  for (;;) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += PUMP_MS * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    int e = pthread_timedjoin_np(t, NULL, &until);
    if (e == 0) break;
    if (e != ETIMEDOUT) {
      pthread_join(t, NULL);
      break;
    }
    c->s->pump(c->s->pump_ctx);
  }
  return c->r;
}

int wk_store_put_file(struct wk_store *s, const char *key, const char *src, uint64_t *ret_bytes) {
  struct call c = {.op = PUT, .s = s, .key = key, .path = src, .bytes = ret_bytes};
  return call(&c);
}

int wk_store_get_file(struct wk_store *s, const char *key, const char *dst, uint64_t *ret_bytes) {
  struct call c = {.op = GET, .s = s, .key = key, .path = dst, .bytes = ret_bytes};
  return call(&c);
}

int wk_store_remove(struct wk_store *s, const char *key) {
  struct call c = {.op = REMOVE, .s = s, .key = key};
  return call(&c);
}

int wk_store_run(struct wk_store *s, int (*fn)(void *ctx), void *ctx) {
  struct call c = {.op = RUN, .s = s, .fn = fn, .ctx = ctx};
  return call(&c);
}

int wk_store_list(struct wk_store *s, const char *prefix, char ***ret_keys, size_t *ret_n) {
  struct call c = {.op = LIST, .s = s, .key = prefix, .keys = ret_keys, .n = ret_n};
  return call(&c);
}

char **wk_store_keys_free(char **keys) {
  sl_strv_free(keys);
  return NULL;
}
