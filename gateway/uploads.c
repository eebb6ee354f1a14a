/* Data uploads (uploads.h). */
#include "uploads.h"

#include "mpu_notes.h"
#include "objstore.h"

#include "sl_digest.h"
#include "sl_err.h"
#include "sl_file.h"
#include "sl_ident.h"
#include "sl_log.h"
#include "sl_path.h"
#include "sl_s3.h"
#include "sl_time.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define T "gateway.upload"
#define ROOM_MARGIN (256ull << 20)       /* left free on the disk of the parts */
#define IDLE_US (60 * 1000000LL)         /* a receiving upload untouched this long may be let go */
#define PART_MAX_AGE_S (24 * 3600)       /* parts older than this are removed at start */

struct upload {
  bool used;
  struct gw_uploads *u;
  char user[64];
  char sha[65];
  uint64_t size;
  char key[GW_UPLOAD_KEY_MAX];
  char part[PATH_MAX];
  /* While CHECKING or PUBLISHING a thread owns what follows but state,
   * error and why, which it sets under the lock as it ends. */
  int fd;                       /* RECEIVING: the part, open; else -1 */
  struct sl_sha256 *hash;       /* the bytes so far (the slot's for its life) */
  uint64_t offset;
  enum gw_upload_state state;
  bool running;                 /* a thread works on it */
  int error;                    /* a failed check or publication, said once */
  char why[300];
  int64_t used_us;              /* last asked about (monotonic), for eviction */
};

struct gw_uploads {
  struct gw_upload_deleted deleted[2 * GW_UPLOAD_MAX]; /* deletions ended, for the loop to take */
  size_t n_deleted;
  char parts_dir[PATH_MAX];     /* gw_mpu_notes_dir: the parts, and the .mpu records */
  char store_dir[PATH_MAX];     /* "" for S3 */
  struct gw_objstore *o;
  pthread_mutex_t mu;
  pthread_cond_t idle;
  int threads;                  /* running; free waits for none */
  struct upload e[GW_UPLOAD_MAX];
};

const char *gw_upload_state_name(enum gw_upload_state s) {
  switch (s) {
  case GW_UPLOAD_RECEIVING: return "receiving";
  case GW_UPLOAD_CHECKING: return "checking";
  case GW_UPLOAD_PUBLISHING: return "publishing";
  case GW_UPLOAD_READY: return "ready";
  }
  return "?";
}

static bool plain_name(const char *s) {
  if (!*s || *s == '.' || strlen(s) > 48)
    return false;
  for (; *s; s++)
    if (!(*s >= 'a' && *s <= 'z') && !(*s >= 'A' && *s <= 'Z') && !(*s >= '0' && *s <= '9') &&
        *s != '.' && *s != '_' && *s != '-')
      return false;
  return true;
}

void gw_upload_key(const char *user, const char *sha256, char *key, size_t key_size) {
  if (plain_name(user)) {
    snprintf(key, key_size, "_data/%s/%s", user, sha256);
    return;
  }
  unsigned char h[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(h, (const unsigned char *)user, strlen(user));
  char hex[17];
  sodium_bin2hex(hex, sizeof hex, h, 8);
  snprintf(key, key_size, "_data/u-%s/%s", hex, sha256);
}

/* Removes the parts no upload went on with for a day, but for keep's
 * (NULL, or a function saying whether a part's path is in use). */
static void sweep_parts(const char *dir, time_t now, bool (*keep)(void *, const char *), void *ud) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  struct dirent *de;
  while ((de = readdir(d))) {
    size_t n = strlen(de->d_name);
    struct stat st;
    if (n < 6 || strcmp(de->d_name + n - 5, ".part") || fstatat(dirfd(d), de->d_name, &st, 0) < 0)
      continue;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%.3900s/%s", dir, de->d_name);
    if (now - st.st_mtime > PART_MAX_AGE_S && !(keep && keep(ud, path)) &&
        unlinkat(dirfd(d), de->d_name, 0) == 0)
      sl_info(T, "removed %s/%s, an upload not gone on with for a day", dir, de->d_name);
  }
  closedir(d);
}

int gw_uploads_new(const char *state_dir, const char *store_dir, struct gw_objstore *o,
                   struct gw_uploads **ret) {
  struct gw_uploads *u = calloc(1, sizeof *u);
  if (!u)
    return -ENOMEM;
  gw_mpu_notes_dir(state_dir, u->parts_dir, sizeof u->parts_dir);
  snprintf(u->store_dir, sizeof u->store_dir, "%s", store_dir ? store_dir : "");
  u->o = o;
  int r = sl_mkdir_p(u->parts_dir, 0700);
  if (r < 0) {
    free(u);
    return r;
  }
  sweep_parts(u->parts_dir, time(NULL), NULL, NULL);
  pthread_mutex_init(&u->mu, NULL);
  pthread_cond_init(&u->idle, NULL);
  for (size_t i = 0; i < GW_UPLOAD_MAX; i++)
    u->e[i].fd = -1;
  for (size_t i = 0; i < GW_UPLOAD_MAX; i++)
    if (!(u->e[i].hash = sl_sha256_new())) {
      gw_uploads_free(u);
      return -ENOMEM;
    }
  *ret = u;
  return 0;
}

static void clear(struct upload *e) {
  if (e->fd >= 0)
    close(e->fd);
  struct sl_sha256 *hash = e->hash;
  memset(e, 0, sizeof *e);
  e->fd = -1;
  e->hash = hash;
  if (hash)
    sl_sha256_reset(hash);
}

void gw_uploads_wait(struct gw_uploads *u) {
  pthread_mutex_lock(&u->mu);
  while (u->threads)
    pthread_cond_wait(&u->idle, &u->mu);
  pthread_mutex_unlock(&u->mu);
}

struct gw_uploads *gw_uploads_free(struct gw_uploads *u) {
  if (!u)
    return NULL;
  gw_uploads_wait(u);
  for (size_t i = 0; i < GW_UPLOAD_MAX; i++) {
    clear(&u->e[i]);
    u->e[i].hash = sl_sha256_free(u->e[i].hash);
  }
  pthread_cond_destroy(&u->idle);
  pthread_mutex_destroy(&u->mu);
  free(u);
  return NULL;
}

/* ---- the threads -------------------------------------------------------- */

/* Ends a thread's work on e: its state, or its error with a sentence. */
static void finish(struct upload *e, enum gw_upload_state state, int error, const char *why) {
  struct gw_uploads *u = e->u;
  pthread_mutex_lock(&u->mu);
  e->state = state;
  e->error = error;
  e->running = false;
  snprintf(e->why, sizeof e->why, "%s", why ? why : "");
  u->threads--;
  pthread_cond_broadcast(&u->idle);
  pthread_mutex_unlock(&u->mu);
}

/* Whether the store holds e's object, whole: 1, 0, or an error (why set). */
static int in_store(struct upload *e, char *why, size_t why_size) {
  struct gw_uploads *u = e->u;
  if (!u->o) {
    char path[PATH_MAX + GW_UPLOAD_KEY_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", u->store_dir, e->key);
    return stat(path, &st) == 0 && (uint64_t)st.st_size == e->size;
  }
  struct sl_s3_signer signer = gw_objstore_signer(u->o);
  struct sl_s3_opts opts = gw_objstore_opts(u->o);
  struct sl_s3_client *c = NULL;
  int r = sl_s3_client_new(&signer, &opts, &c);
  struct sl_s3_object head = {0};
  if (r == 0)
    r = sl_s3_head(c, e->key, &head, why, why_size);
  sl_s3_client_free(c);
  if (r == -ENOENT)
    return 0;
  if (r < 0)
    return r;
  return !strcmp(head.sha256, e->sha) && head.bytes == e->size;
}

/* Copies src to dst through dst.tmp (another file system than the parts'). */
static int copy_file(const char *src, const char *dst) {
  char tmp[PATH_MAX + GW_UPLOAD_KEY_MAX + 8];
  snprintf(tmp, sizeof tmp, "%s.tmp", dst);
  int in = open(src, O_RDONLY | O_CLOEXEC), out = -1, r = 0;
  if (in < 0)
    return -errno;
  if ((out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0) {
    r = -errno;
    close(in);
    return r;
  }
  static __thread char buf[1 << 16];
  ssize_t n;
  while (r == 0 && (n = read(in, buf, sizeof buf)) != 0) {
    if (n < 0) {
      r = errno == EINTR ? 0 : -errno;
      continue;
    }
    for (ssize_t w = 0; w < n && r == 0;) {
      ssize_t k = write(out, buf + w, (size_t)(n - w));
      if (k < 0 && errno != EINTR)
        r = -errno;
      else if (k > 0)
        w += k;
    }
  }
  if (r == 0 && fsync(out) < 0)
    r = -errno;
  close(in);
  if (close(out) < 0 && r == 0)
    r = -errno;
  if (r == 0 && rename(tmp, dst) < 0)
    r = -errno;
  if (r < 0)
    unlink(tmp);
  return r;
}

/* Stores the complete part as e's object and removes the part. */
static int publish(struct upload *e, char *why, size_t why_size) {
  struct gw_uploads *u = e->u;
  int r;
  if (!u->o) {
    char path[PATH_MAX + GW_UPLOAD_KEY_MAX], dir[sizeof path];
    snprintf(path, sizeof path, "%s/%s", u->store_dir, e->key);
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = 0;
    if ((r = sl_mkdir_p(dir, 0700)) < 0)
      return snprintf(why, why_size, "cannot make %.200s: %s", dir, sl_strerror(r)), r;
    r = rename(e->part, path) < 0 ? -errno : 0;
    if (r == -EXDEV && (r = copy_file(e->part, path)) == 0)
      unlink(e->part);
    if (r < 0)
      return snprintf(why, why_size, "cannot store %.200s: %s", path, sl_strerror(r)), r;
    return 0;
  }
  struct sl_s3_signer signer = gw_objstore_signer(u->o);
  struct sl_s3_opts opts = gw_objstore_opts(u->o);
  struct gw_mpu_note note;
  char name[GW_UPLOAD_KEY_MAX];
  snprintf(name, sizeof name, "%s-%s", e->user, e->sha);
  gw_mpu_note_in(&note, u->parts_dir, name);
  opts.mpu_event = gw_mpu_note_event;
  opts.mpu_event_ud = &note;
  struct sl_s3_client *c = NULL;
  struct sl_s3_object head = {0};
  if ((r = sl_s3_client_new(&signer, &opts, &c)) < 0)
    snprintf(why, why_size, "S3 client: %s", sl_strerror(r));
  else if ((r = sl_s3_put_file(c, e->key, e->part, NULL, why, why_size)) == 0 &&
           (r = sl_s3_head(c, e->key, &head, why, why_size)) == 0 && strcmp(head.sha256, e->sha)) {
    snprintf(why, why_size, "the stored %s reads back with another SHA-256", e->key);
    r = SL_ECHECKSUM;
  }
  sl_s3_client_free(c);
  if (r == 0)
    unlink(e->part);
  return r;
}

static void *publish_main(void *arg) {
  struct upload *e = arg;
  char why[300] = "";
  int64_t t0 = sl_time_mono_us();
  int r = publish(e, why, sizeof why);
  if (r == -ECANCELED) {
    /* the gateway stops: the part stays, and is published when asked about again */
    sl_info(T, "%s: the storing of %s stopped with the gateway; it goes on when the upload is "
            "asked about again", e->user, e->key);
    snprintf(why, sizeof why, "the gateway stopped while storing the file");
  } else if (r < 0) {
    sl_err(T, "%s: the upload of %s is lost: %s", e->user, e->key, why);
    unlink(e->part);
  } else {
    sl_info(T, "%s: stored %s (%llu bytes) in %lld ms", e->user, e->key, (unsigned long long)e->size,
            (long long)(sl_time_mono_us() - t0) / 1000);
  }
  finish(e, GW_UPLOAD_READY, r < 0 ? r : 0, why);
  return NULL;
}

/* Hashes the part's first n bytes into e->hash. */
static int hash_part(struct upload *e, uint64_t n) {
  static __thread unsigned char buf[1 << 16];
  sl_sha256_reset(e->hash);
  for (uint64_t done = 0; done < n;) {
    size_t want = n - done < sizeof buf ? (size_t)(n - done) : sizeof buf;
    ssize_t k = pread(e->fd, buf, want, (off_t)done);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return k < 0 ? -errno : -EIO;
    sl_sha256_update(e->hash, buf, (size_t)k);
    done += (uint64_t)k;
  }
  return 0;
}

/* Whether the hash of the bytes received is e's: 0, or SL_ECHECKSUM. */
static int check_hash(struct upload *e) {
  char hex[SL_SHA256_HEX_LEN + 1];
  sl_sha256_final_hex(e->hash, hex);
  return strcmp(hex, e->sha) ? SL_ECHECKSUM : 0;
}

static void *check_main(void *arg) {
  struct upload *e = arg;
  char why[300] = "";
  int r = in_store(e, why, sizeof why);
  if (r < 0) {
    sl_warn(T, "%s: cannot tell whether %s is stored: %s", e->user, e->key, why);
    return finish(e, GW_UPLOAD_CHECKING, r, why), NULL;
  }
  if (r == 1)
    return finish(e, GW_UPLOAD_READY, 0, NULL), NULL;
  /* not stored: go on from the part an earlier start left, if any */
  struct stat st;
  struct statvfs vfs;
  if ((e->fd = open(e->part, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0 || fstat(e->fd, &st) < 0) {
    r = -errno;
    snprintf(why, sizeof why, "cannot open %.200s: %s", e->part, sl_strerror(r));
    return finish(e, GW_UPLOAD_CHECKING, r, why), NULL;
  }
  uint64_t have = (uint64_t)st.st_size;
  if (have > e->size && ftruncate(e->fd, 0) == 0)
    have = 0;
  if ((r = hash_part(e, have)) < 0) {
    snprintf(why, sizeof why, "cannot read %.200s: %s", e->part, sl_strerror(r));
    return finish(e, GW_UPLOAD_CHECKING, r, why), NULL;
  }
  e->offset = have;
  uint64_t free_bytes = fstatvfs(e->fd, &vfs) == 0 ? (uint64_t)vfs.f_bavail * vfs.f_frsize : UINT64_MAX;
  if (e->size - have + ROOM_MARGIN > free_bytes) {
    snprintf(why, sizeof why, "the gateway has no room for %llu bytes (%llu free in %.150s)",
             (unsigned long long)e->size, (unsigned long long)free_bytes, e->u->parts_dir);
    unlink(e->part);
    return finish(e, GW_UPLOAD_CHECKING, SL_ELIMIT, why), NULL;
  }
  if (have == e->size) { /* every byte came before a restart */
    close(e->fd);
    e->fd = -1;
    if (check_hash(e) < 0) {
      unlink(e->part);
      snprintf(why, sizeof why, "the bytes received do not hash to %s", e->sha);
      return finish(e, GW_UPLOAD_CHECKING, SL_ECHECKSUM, why), NULL;
    }
    return publish_main(e);
  }
  return finish(e, GW_UPLOAD_RECEIVING, 0, NULL), NULL;
}

/* Removes e's object from the store, and a part of it if one was left. */
static int unstore(struct upload *e, char *why, size_t why_size) {
  struct gw_uploads *u = e->u;
  if (unlink(e->part) < 0 && errno != ENOENT)
    sl_warn(T, "cannot remove %s: %s", e->part, strerror(errno));
  if (!u->o) {
    char path[PATH_MAX + GW_UPLOAD_KEY_MAX];
    snprintf(path, sizeof path, "%s/%s", u->store_dir, e->key);
    if (unlink(path) < 0 && errno != ENOENT) {
      int r = -errno;
      snprintf(why, why_size, "cannot remove %.200s: %s", path, sl_strerror(r));
      return r;
    }
    return 0;
  }
  struct sl_s3_signer signer = gw_objstore_signer(u->o);
  struct sl_s3_opts opts = gw_objstore_opts(u->o);
  struct sl_s3_client *c = NULL;
  int r = sl_s3_client_new(&signer, &opts, &c);
  if (r < 0)
    snprintf(why, why_size, "S3 client: %s", sl_strerror(r));
  else
    r = sl_s3_delete(c, e->key, why, why_size);
  sl_s3_client_free(c);
  return r;
}

static void *delete_main(void *arg) {
  struct upload *e = arg;
  struct gw_uploads *u = e->u;
  char why[300] = "";
  int r = unstore(e, why, sizeof why);
  if (r == 0)
    sl_info(T, "%s: deleted %s", e->user, e->key);
  else
    sl_warn(T, "%s: %s was not deleted: %s", e->user, e->key, why[0] ? why : sl_strerror(r));
  pthread_mutex_lock(&u->mu);
  if (u->n_deleted < sizeof u->deleted / sizeof *u->deleted) { /* else found again at the next start */
    struct gw_upload_deleted *d = &u->deleted[u->n_deleted++];
    snprintf(d->user, sizeof d->user, "%s", e->user);
    snprintf(d->sha256, sizeof d->sha256, "%s", e->sha);
    d->result = r;
    snprintf(d->why, sizeof d->why, "%s", why[0] ? why : sl_strerror(r));
  }
  clear(e); /* asked about again, it is looked for anew */
  u->threads--;
  pthread_cond_broadcast(&u->idle);
  pthread_mutex_unlock(&u->mu);
  return NULL;
}

/* Runs fn(e) on a detached thread; e's state is then the thread's. */
static int start(struct upload *e, enum gw_upload_state state, void *(*fn)(void *)) {
  pthread_attr_t a;
  pthread_t t;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  e->state = state;
  e->running = true;
  e->u->threads++;
  int r = -pthread_create(&t, &a, fn, e);
  pthread_attr_destroy(&a);
  if (r < 0) {
    e->u->threads--;
    e->running = false;
  }
  return r;
}

/* ---- the loop's side ------------------------------------------------------ */

static struct upload *find(struct gw_uploads *u, const char *user, const char *sha) {
  for (size_t i = 0; i < GW_UPLOAD_MAX; i++)
    if (u->e[i].used && !strcmp(u->e[i].sha, sha) && !strcmp(u->e[i].user, user))
      return &u->e[i];
  return NULL;
}

static bool busy(const struct upload *e) {
  return e->running;
}

/* Whether e is under way: a thread works on it, or its kernel sent or
 * asked within IDLE_US. One that is not may be let go: its part stays, and
 * asking about it again hashes the part and goes on from there. */
static bool active(const struct upload *e, int64_t now) {
  return busy(e) || (!e->error && e->state == GW_UPLOAD_RECEIVING && now - e->used_us <= IDLE_US);
}

/* Whether a slot holds path: its part is not swept. */
static bool part_in_use(void *ud, const char *path) {
  struct gw_uploads *u = ud;
  for (size_t i = 0; i < GW_UPLOAD_MAX; i++)
    if (u->e[i].used && !strcmp(u->e[i].part, path))
      return true;
  return false;
}

void gw_uploads_sweep(struct gw_uploads *u, int64_t now_mono_us, time_t now) {
  pthread_mutex_lock(&u->mu);
  /* an upload let go for a day: its slot (and the part's open file) first */
  for (size_t i = 0; i < GW_UPLOAD_MAX; i++) {
    struct upload *e = &u->e[i];
    struct stat st;
    if (e->used && !active(e, now_mono_us) && e->state == GW_UPLOAD_RECEIVING &&
        (stat(e->part, &st) < 0 || now - st.st_mtime > PART_MAX_AGE_S))
      clear(e);
  }
  sweep_parts(u->parts_dir, now, part_in_use, u);
  pthread_mutex_unlock(&u->mu);
}

/* A free slot: an unused one, else the longest unused of those not active
 * (ready, failed, or receiving but idle). */
static struct upload *take_slot(struct gw_uploads *u, int64_t now) {
  struct upload *best = NULL;
  for (size_t i = 0; i < GW_UPLOAD_MAX; i++) {
    struct upload *e = &u->e[i];
    if (!e->used)
      return e;
    if (active(e, now))
      continue;
    if (!best || e->used_us < best->used_us)
      best = e;
  }
  if (best)
    clear(best);
  return best;
}

static int say(char *err, size_t err_size, int code, const char *msg) {
  snprintf(err, err_size, "%s", msg);
  return code;
}

/* A slot taken for user's upload of sha256: its names, key and part. */
static void fill(struct gw_uploads *u, struct upload *e, const char *user, const char *sha, uint64_t size) {
  e->used = true;
  e->u = u;
  snprintf(e->user, sizeof e->user, "%s", user);
  snprintf(e->sha, sizeof e->sha, "%s", sha);
  e->size = size;
  gw_upload_key(user, sha, e->key, sizeof e->key);
  const char *dir = e->key + strlen("_data/"); /* USER/SHA: the part is USER-SHA.part */
  snprintf(e->part, sizeof e->part, "%.3900s/%.*s-%s.part", u->parts_dir, (int)(strchr(dir, '/') - dir),
           dir, sha);
}

/* The upload asked about, known or new (a check started); under the lock. */
static int lookup(struct gw_uploads *u, const char *user, const char *sha, uint64_t size,
                  struct upload **ret, char *err, size_t err_size) {
  if (!sl_sha256_hex_ok(sha))
    return say(err, err_size, SL_ETYPE, "sha256 must be 64 lower-case hex digits");
  if (!*user || strlen(user) >= sizeof u->e[0].user)
    return say(err, err_size, SL_ENAME, "no user");
  int64_t now = sl_time_mono_us();
  struct upload *e = find(u, user, sha);
  if (e && e->error && !busy(e)) {
    int r = e->error;
    snprintf(err, err_size, "%s", e->why[0] ? e->why : sl_strerror(r));
    clear(e);
    return r;
  }
  if (e && e->size != size) {
    snprintf(err, err_size, "an upload of %.12s… of %llu bytes is under way, not %llu", sha,
             (unsigned long long)e->size, (unsigned long long)size);
    return SL_EMISMATCH;
  }
  if (!e) {
    size_t under_way = 0;
    for (size_t i = 0; i < GW_UPLOAD_MAX; i++)
      under_way += u->e[i].used && !strcmp(u->e[i].user, user) && active(&u->e[i], now);
    if (under_way >= GW_UPLOAD_PER_USER) {
      snprintf(err, err_size, "%.64s has %d uploads under way: no more until one ends", user,
               GW_UPLOAD_PER_USER);
      return SL_ELIMIT;
    }
    if (!(e = take_slot(u, now)))
      return say(err, err_size, SL_ELIMIT, "the gateway has too many uploads under way");
    fill(u, e, user, sha, size);
    int r = start(e, GW_UPLOAD_CHECKING, check_main);
    if (r < 0) {
      clear(e);
      return say(err, err_size, r, "cannot start a thread");
    }
  }
  e->used_us = now;
  *ret = e;
  return 0;
}

static void status(const struct upload *e, struct gw_upload_status *st) {
  st->state = e->state;
  st->offset = e->state == GW_UPLOAD_RECEIVING ? e->offset : e->state == GW_UPLOAD_CHECKING ? 0 : e->size;
}

int gw_uploads_have(struct gw_uploads *u, const char *user, const char *sha256, uint64_t size,
                    struct gw_upload_status *st, char *err, size_t err_size) {
  struct upload *e;
  pthread_mutex_lock(&u->mu);
  int r = lookup(u, user, sha256, size, &e, err, err_size);
  if (r == 0)
    status(e, st);
  pthread_mutex_unlock(&u->mu);
  return r;
}

/* Writes len bytes at e->offset and hashes them; the last byte checks the
 * hash and starts publishing. Under the lock, e receiving. */
static int take(struct upload *e, const unsigned char *data, size_t len, char *err, size_t err_size) {
  for (size_t w = 0; w < len;) {
    ssize_t k = pwrite(e->fd, data + w, len - w, (off_t)(e->offset + w));
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0) {
      int r = -errno;
      snprintf(err, err_size, "cannot write %.200s: %s", e->part, sl_strerror(r));
      return r;
    }
    w += (size_t)k;
  }
  sl_sha256_update(e->hash, data, len);
  e->offset += len;
  if (e->offset < e->size)
    return 0;
  int r = fsync(e->fd) < 0 ? -errno : 0;
  close(e->fd);
  e->fd = -1;
  if (r == 0 && (r = check_hash(e)) < 0)
    snprintf(err, err_size, "the bytes received do not hash to %s: the file changed while it was "
             "uploaded", e->sha);
  else if (r < 0)
    snprintf(err, err_size, "cannot write %.200s: %s", e->part, sl_strerror(r));
  if (r == 0 && (r = start(e, GW_UPLOAD_PUBLISHING, publish_main)) < 0)
    snprintf(err, err_size, "cannot start a thread");
  if (r < 0) {
    unlink(e->part);
    clear(e);
  }
  return r;
}

int gw_uploads_put(struct gw_uploads *u, const char *user, const char *sha256, uint64_t size,
                   uint64_t offset, const void *data, size_t len, struct gw_upload_status *st,
                   char *err, size_t err_size) {
  struct upload *e;
  pthread_mutex_lock(&u->mu);
  int r = lookup(u, user, sha256, size, &e, err, err_size);
  if (r == 0 && e->state == GW_UPLOAD_RECEIVING && offset == e->offset) {
    if (len > GW_UPLOAD_CHUNK_MAX || len > size - offset) {
      snprintf(err, err_size, "a chunk of %zu bytes at %llu: at most %d bytes, and none past %llu", len,
               (unsigned long long)offset, GW_UPLOAD_CHUNK_MAX, (unsigned long long)size);
      r = SL_ELIMIT;
    } else if (len || offset == size) {
      r = take(e, data, len, err, err_size);
    }
  }
  if (r == 0)
    status(e, st);
  pthread_mutex_unlock(&u->mu);
  return r;
}

int gw_uploads_ready(struct gw_uploads *u, const char *user, const char *sha256, uint64_t size,
                     char *key, size_t key_size) {
  pthread_mutex_lock(&u->mu);
  struct upload *e = sl_sha256_hex_ok(sha256) ? find(u, user, sha256) : NULL;
  bool ready = e && !e->error && e->state == GW_UPLOAD_READY && e->size == size;
  if (ready) {
    snprintf(key, key_size, "%s", e->key);
    e->used_us = sl_time_mono_us();
  }
  pthread_mutex_unlock(&u->mu);
  return ready ? 0 : SL_ESTATE;
}

int gw_uploads_delete(struct gw_uploads *u, const char *user, const char *sha256, uint64_t size,
                      char *err, size_t err_size) {
  if (!sl_sha256_hex_ok(sha256))
    return say(err, err_size, SL_ETYPE, "sha256 must be 64 lower-case hex digits");
  if (!*user || strlen(user) >= sizeof u->e[0].user)
    return say(err, err_size, SL_ENAME, "no user");
  pthread_mutex_lock(&u->mu);
  int64_t now = sl_time_mono_us();
  struct upload *e = find(u, user, sha256);
  int r = 0;
  if (e && active(e, now)) {
    snprintf(err, err_size, "%.12s… is being %s; delete it once that has ended", sha256,
             e->state == GW_UPLOAD_RECEIVING ? "uploaded" : e->state == GW_UPLOAD_PUBLISHING ? "stored"
                                                                                                 : "checked");
    r = SL_ESTATE;
  } else if (!e && !(e = take_slot(u, now))) {
    r = say(err, err_size, SL_ELIMIT, "the gateway has too many uploads under way; try again shortly");
  }
  if (r == 0) {
    clear(e);
    fill(u, e, user, sha256, size);
    e->used_us = now;
    if ((r = start(e, GW_UPLOAD_CHECKING, delete_main)) < 0) {
      clear(e);
      say(err, err_size, r, "cannot start a thread");
    }
  }
  pthread_mutex_unlock(&u->mu);
  return r;
}

size_t gw_uploads_take_deleted(struct gw_uploads *u, struct gw_upload_deleted *out, size_t max) {
  pthread_mutex_lock(&u->mu);
  size_t n = u->n_deleted < max ? u->n_deleted : max;
  memcpy(out, u->deleted, n * sizeof *out);
  memmove(u->deleted, u->deleted + n, (u->n_deleted - n) * sizeof *out);
  u->n_deleted -= n;
  pthread_mutex_unlock(&u->mu);
  return n;
}
