/* Downloads (sl_s3_get_file): HEAD for the size, ETag and
 * x-amz-meta-sha256, then the object in ranges on several threads (each
 * held to the ETag HEAD saw) into a temporary file beside the destination,
 * its SHA-256 checked, fsynced and renamed into place. */
#include "sl_s3.h"
#include "sl_s3_int.h"

#include "sl_err.h"
#include "sl_file.h"
#include "sl_log.h"
#include "sl_path.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOPIC "s3"

struct ranged_get {
  struct sl_s3_client *c;
  const char *key, *url, *etag;
  int fd;
  uint64_t size, range_bytes;
  int n_ranges;
  pthread_mutex_t lock;
  int next, failed;
  char err[512];
};

/* Bytes [off, off+len) of the object into fd at off. A whole-object GET
 * when len is the size, else a Range request. If-Match holds every range
 * to the version HEAD saw. */
static int get_range(struct sl_s3_client *c, const char *url, const char *key, const char *etag,
                     int fd, uint64_t off, uint64_t len, bool whole, char *err, size_t err_size) {
  char h_range[80], h_match[112];
  struct sl_http_fd_range sink = {fd, off, len};
  struct sl_http_req req;
  sl_s3_req_init(c, &req, "GET", url, len);
  int h = 0;
  if (!whole) {
    snprintf(h_range, sizeof h_range, "Range: bytes=%llu-%llu", (unsigned long long)off,
             (unsigned long long)(off + len - 1));
    req.headers[h++] = h_range;
  }
  if (etag && *etag) {
    snprintf(h_match, sizeof h_match, "If-Match: %s", etag);
    req.headers[h++] = h_match;
  }
  req.sink_fd = &sink;
  struct sl_http_resp resp = {0};
  int r = sl_http_do(&req, &resp);
  if (r == SL_ELIMIT)
    return sl_err_say(err, err_size, -ESTALE, "S3 object %s grew while it was read", key);
  if (r < 0) return sl_s3_transport_error(r, "download", key, err, err_size);
  if (resp.status != (whole ? 200 : 206))
    r = sl_s3_answer_error(&resp, "download", key, err, err_size);
  else if (resp.sink_bytes != len)
    r = sl_err_say(err, err_size, -ESTALE, "S3 object %s changed size while it was read", key);
  sl_http_resp_done(&resp);
  return r;
}

static void *range_thread(void *arg) {
  struct ranged_get *g = arg;
  char err[512];
  for (;;) {
    pthread_mutex_lock(&g->lock);
    if (g->failed || g->next >= g->n_ranges) {
      pthread_mutex_unlock(&g->lock);
      return NULL;
    }
    int i = g->next++;
    pthread_mutex_unlock(&g->lock);
    uint64_t off = (uint64_t)i * g->range_bytes;
    uint64_t len = g->size - off < g->range_bytes ? g->size - off : g->range_bytes;
    int r = get_range(g->c, g->url, g->key, g->etag, g->fd, off, len, false, err, sizeof err);
    if (r < 0) {
      pthread_mutex_lock(&g->lock);
      if (!g->failed) {
        g->failed = r;
        snprintf(g->err, sizeof g->err, "%s", err);
      }
      pthread_mutex_unlock(&g->lock);
      return NULL;
    }
  }
}

static int get_ranges(struct sl_s3_client *c, const char *url, const char *key,
                      const struct sl_s3_object *o, int fd, char *err, size_t err_size) {
  struct ranged_get g = {.c = c, .key = key, .url = url, .etag = o->etag, .fd = fd,
                         .size = o->bytes, .range_bytes = c->o.part_bytes};
  g.n_ranges = (int)((o->bytes + g.range_bytes - 1) / g.range_bytes);
  pthread_mutex_init(&g.lock, NULL);
  int n_threads = c->o.threads < g.n_ranges ? c->o.threads : g.n_ranges, started = 0;
  pthread_t th[SL_S3_THREADS_MAX];
  for (; started < n_threads; started++) {
    int e = pthread_create(&th[started], NULL, range_thread, &g);
    if (e) {
      pthread_mutex_lock(&g.lock);
      if (!g.failed) {
        g.failed = -e;
        snprintf(g.err, sizeof g.err, "cannot start a thread to download %s", key);
      }
      pthread_mutex_unlock(&g.lock);
      break;
    }
  }
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  pthread_mutex_destroy(&g.lock);
  if (g.failed) return sl_err_say(err, err_size, g.failed, "%s", g.err);
  return 0;
}

int sl_s3_get_file(struct sl_s3_client *c, const char *key, const char *dst, uint64_t *ret_bytes,
                   char *err, size_t err_size) {
  struct sl_s3_object o;
  int r = sl_s3_head(c, key, &o, err, err_size);
  if (r < 0) return r;
  size_t dl = strlen(dst);
  const char *slash = strrchr(dst, '/');
  if (!dl || dst[dl - 1] == '/' || dl >= PATH_MAX - 64)
    return sl_err_say(err, err_size, -EINVAL, "cannot download %s to %s: not a file name", key,
                      dst);
  char dir[PATH_MAX], tmp[PATH_MAX];
  if (!slash) snprintf(dir, sizeof dir, ".");
  else snprintf(dir, sizeof dir, "%.*s", slash == dst ? 1 : (int)(slash - dst), dst);
  if ((r = sl_mkdir_p(dir, 0700)) < 0)
    return sl_err_say(err, err_size, r, "cannot download %s: cannot create %s: %s", key, dir,
                      sl_strerror(r));
  if ((size_t)snprintf(tmp, sizeof tmp, "%s/.%s.s3-tmp.%d.%u", dir, slash ? slash + 1 : dst,
                       (int)getpid(), __atomic_fetch_add(&c->tmp_counter, 1, __ATOMIC_RELAXED)) >=
      sizeof tmp)
    return sl_err_say(err, err_size, SL_ELIMIT, "cannot download %s to %s: the name is too long",
                      key, dst);
  int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return sl_err_say(err, err_size, -errno, "cannot download %s: cannot create %s: %s", key, tmp,
                      strerror(errno));
  char *url = NULL;
  struct sl_s3_presign_req pr = {.op = SL_S3_GET, .key = key};
  if ((r = sl_s3_sign1(c, &pr, &url, err, err_size)) < 0) goto fail;
  if (o.bytes && ftruncate(fd, (off_t)o.bytes) < 0) {
    r = sl_err_say(err, err_size, -errno, "cannot download %s: %s", key, strerror(errno));
    goto fail;
  }
  if (o.bytes <= c->o.part_bytes)
    r = get_range(c, url, key, o.etag, fd, 0, o.bytes, true, err, err_size);
  else
    r = get_ranges(c, url, key, &o, fd, err, err_size);
  if (r < 0) goto fail;
  if (*o.sha256) {
    char got[65];
    if ((r = sl_s3_sha256_range(fd, 0, o.bytes, got)) < 0) {
      sl_err_say(err, err_size, r, "cannot read back the download of %s: %s", key, sl_strerror(r));
      goto fail;
    }
    if (strcmp(got, o.sha256)) {
      r = sl_err_say(err, err_size, SL_ECHECKSUM,
                     "S3 object %s does not match its x-amz-meta-sha256 (%.12s..., read %.12s...)",
                     key, o.sha256, got);
      goto fail;
    }
  }
  if (fsync(fd) < 0 || close(fd) < 0) {
    fd = -1;
    r = sl_err_say(err, err_size, -errno, "cannot download %s: %s", key, strerror(errno));
    goto fail;
  }
  fd = -1;
  if (rename(tmp, dst) < 0) {
    r = sl_err_say(err, err_size, -errno, "cannot download %s to %s: %s", key, dst,
                   strerror(errno));
    goto fail;
  }
  free(url);
  sl_file_fsync_dir(dir);
  if (ret_bytes) *ret_bytes = o.bytes;
  sl_debug(TOPIC, "get %s: %llu bytes", key, (unsigned long long)o.bytes);
  return 0;
fail:
  free(url);
  if (fd >= 0) close(fd);
  unlink(tmp);
  return r;
}
