/* The orphan checkpoint (reserve.h).
 *
 * The reserve's URLs are signed without a SHA-256, so a PUT to them needs
 * no header but the body: an orphaned worker uploads with one plain HTTP
 * PUT per object, never asking the gateway. The checkpoint goes before its
 * step, so a step object never names a checkpoint newer than the one
 * stored; a checkpoint that is not whole is left to spotlab-train's own
 * validation at resume, which skips it for the regular one. Reading the
 * orphan objects back and deleting them goes through the store like any
 * other key. */
#include "reserve.h"

#include "sl_err.h"
#include "sl_http.h"
#include "sl_s3.h"
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STEP_TEXT_MAX 32
#define PUT_TIMEOUT_MS 30000 /* plus 1 s per MiB of body */

void wk_reserve_key(const char *job, const char *name, char *buf, size_t size) {
  snprintf(buf, size, "%s/orphan/%s", job, name);
}

int wk_reserve_ask(struct wk_reserve *r, const struct sl_s3_signer *signer, const char *job,
                   char *err, size_t err_size) {
  if (!signer->ask || !signer->take) {
    snprintf(err, err_size, "the signer cannot be asked without waiting");
    return -EINVAL;
  }
  if (r->asked) {
    snprintf(err, err_size, "the URLs asked for earlier have not been taken");
    return SL_ESTATE;
  }
  char ckpt[96], step[96];
  wk_reserve_key(job, "ckpt.tc", ckpt, sizeof ckpt);
  wk_reserve_key(job, "step", step, sizeof step);
  struct sl_s3_presign_req q[2] = {{.op = SL_S3_PUT, .key = ckpt}, {.op = SL_S3_PUT, .key = step}};
  int rc = signer->ask(signer->ctx, q, 2, &r->asked);
  if (rc < 0) {
    r->asked = 0;
    snprintf(err, err_size, "the URLs could not be asked for: %s", sl_strerror(rc));
  }
  return rc;
}

int wk_reserve_take(struct wk_reserve *r, const struct sl_s3_signer *signer, char *err,
                    size_t err_size) {
  if (!r->asked) {
    snprintf(err, err_size, "no URLs were asked for");
    return -ENOENT;
  }
  char *urls[2] = {NULL, NULL};
  int rc = signer->take(signer->ctx, r->asked, urls, 2, err, err_size);
  if (rc == 0) return 0;
  r->asked = 0;
  if (rc < 0) return rc;
  free(r->ckpt_url);
  free(r->step_url);
  r->ckpt_url = urls[0];
  r->step_url = urls[1];
  return 1;
}

bool wk_reserve_ready(const struct wk_reserve *r) { return r->ckpt_url && r->step_url; }

void wk_reserve_done(struct wk_reserve *r, const struct sl_s3_signer *signer) {
  free(r->ckpt_url);
  free(r->step_url);
  r->ckpt_url = r->step_url = NULL;
  if (r->asked && signer && signer->forget) signer->forget(signer->ctx, r->asked);
  r->asked = 0;
}

/* One PUT of body (or of the file range body_fd) to url; what names the
 * object in err, never the URL. */
static int put(const char *url, const struct sl_http_fd_range *body_fd, const char *body,
               size_t body_len, const char *what, char *err, size_t err_size) {
  uint64_t bytes = body_fd ? body_fd->len : body_len;
  uint64_t ms = PUT_TIMEOUT_MS + (bytes >> 20) * 1000;
  struct sl_http_req req = {
      .method = "PUT", .url = url, .body = body, .body_len = body_len, .body_fd = body_fd,
      .timeout_ms = ms > INT_MAX ? INT_MAX : (int)ms, .connect_timeout_ms = PUT_TIMEOUT_MS,
      .retry = {3, 200, 2000}, .use_env_proxy = true};
  struct sl_http_resp resp = {0};
  int r = sl_http_do(&req, &resp);
  if (r < 0) {
    snprintf(err, err_size, "PUT of the orphan %s: %s", what, sl_strerror(r));
    return r;
  }
  if (resp.status != 200) {
    r = resp.status == 403 || resp.status == 401 ? SL_EAUTH : resp.status >= 500 ? -EAGAIN : -EIO;
    snprintf(err, err_size, "PUT of the orphan %s: HTTP %ld", what, resp.status);
  }
  sl_http_resp_done(&resp);
  return r;
}

int wk_reserve_put(const struct wk_reserve *r, const char *path, int64_t step, uint64_t *ret_bytes,
                   char *err, size_t err_size) {
  if (!wk_reserve_ready(r)) {
    snprintf(err, err_size, "no orphan URLs were signed for this job");
    return SL_ESTATE;
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = -errno;
    snprintf(err, err_size, "cannot open %s: %s", path, strerror(errno));
    return e;
  }
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    snprintf(err, err_size, "%s is not a readable file", path);
    return -EINVAL;
  }
  struct sl_http_fd_range body = {fd, 0, (uint64_t)st.st_size};
  int rc = put(r->ckpt_url, &body, NULL, 0, "checkpoint", err, err_size);
  close(fd);
  if (rc < 0) return rc;
  char text[STEP_TEXT_MAX];
  int n = snprintf(text, sizeof text, "%" PRId64, step);
  if ((rc = put(r->step_url, NULL, text, (size_t)n, "step", err, err_size)) < 0) return rc;
  if (ret_bytes) *ret_bytes = (uint64_t)st.st_size;
  return 0;
}

/* "123", with a trailing newline allowed. */
static int parse_step(const char *text, size_t n, int64_t *ret) {
  if (n && text[n - 1] == '\n') n--;
  if (n == 0 || n > 18) return SL_EPARSE;
  int64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (text[i] < '0' || text[i] > '9') return SL_EPARSE;
    v = v * 10 + (text[i] - '0');
  }
  *ret = v;
  return 0;
}

int wk_orphan_step(struct wk_store *s, const char *job, const char *tmp, int64_t *ret_step) {
  char key[96];
  wk_reserve_key(job, "step", key, sizeof key);
  uint64_t bytes = 0;
  int r = wk_store_get_file(s, key, tmp, &bytes);
  if (r < 0) return r;
  char text[STEP_TEXT_MAX];
  ssize_t n = -1;
  int fd = open(tmp, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    n = read(fd, text, sizeof text);
    close(fd);
  }
  unlink(tmp);
  if (n < 0) return -EIO;
  if ((size_t)n == sizeof text) return SL_EPARSE; /* longer than any step */
  return parse_step(text, (size_t)n, ret_step);
}

int wk_orphan_fetch(struct wk_store *s, const char *job, const char *dst, uint64_t *ret_bytes) {
  char key[96];
  wk_reserve_key(job, "ckpt.tc", key, sizeof key);
  return wk_store_get_file(s, key, dst, ret_bytes);
}

int wk_orphan_clear(struct wk_store *s, const char *job) {
  /* the step first: a checkpoint without its step is never used */
  static const char *const names[] = {"step", "ckpt.tc"};
  int first = 0;
  for (size_t i = 0; i < 2; i++) {
    char key[96];
    wk_reserve_key(job, names[i], key, sizeof key);
    int r = wk_store_remove(s, key);
    if (r < 0 && r != -ENOENT && !first) first = r;
  }
  return first;
}
