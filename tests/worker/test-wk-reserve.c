/* The orphan checkpoint (reserve.c): URLs signed ahead, kept when a refresh
 * fails, asked for without waiting; the PUTs of an orphaned worker (to a loopback server that writes
 * each body into a folder store, so what was put is read back through the
 * store as a restore reads it); the step read back, refused when it is not
 * a step; the objects deleted. */
#include "harness.h"

#include "reserve.h"
#include "sl_err.h"
#include "sl_http.h"
#include "sl_path.h"
#include "sl_s3.h"
#include "store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char root[] = "/tmp/wk-reserve-XXXXXX";
static char store_dir[PATH_MAX];
static int port;

/* ---- a server that stores each PUT /KEY body as store_dir/KEY ---- */

struct upload {
  FILE *f;
  char path[PATH_MAX + 600];
};

static enum MHD_Result answer(struct MHD_Connection *c, unsigned code) {
  struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
  if (!r) return MHD_NO;
  enum MHD_Result ok = MHD_queue_response(c, code, r);
  MHD_destroy_response(r);
  return ok;
}

/* /denied/...: 403, as an expired URL gets. */
static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *data, size_t *data_size, void **con_cls) {
  struct upload *u = *con_cls;
  if (!u) {
    if (strcmp(method, "PUT") || !strncmp(url, "/denied/", 8)) return answer(c, 403);
    if (!(u = calloc(1, sizeof *u))) return MHD_NO;
    *con_cls = u;
    snprintf(u->path, sizeof u->path, "%s%s", store_dir, url);
    char dir[sizeof u->path];
    snprintf(dir, sizeof dir, "%s", u->path);
    *strrchr(dir, '/') = 0;
    if (sl_mkdir_p(dir, 0700) < 0 || !(u->f = fopen(u->path, "wb"))) return MHD_NO;
    return MHD_YES;
  }
  if (*data_size) {
    if (!u->f || fwrite(data, 1, *data_size, u->f) != *data_size) return MHD_NO;
    *data_size = 0;
    return MHD_YES;
  }
  if (u->f) fclose(u->f);
  u->f = NULL;
  return answer(c, 200);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode why) {
  struct upload *u = *con_cls;
  if (u && u->f) fclose(u->f);
  free(u);
  *con_cls = NULL;
}

/* ---- a signer that answers from a URL prefix, or fails ---- */

struct fake_signer {
  const char *base; /* NULL: no answer in time */
  bool held;        /* the answer has not come yet */
  int64_t last_id, forgotten;
  int calls;
  struct sl_s3_presign_req seen[4];
  char keys[4][128];
  size_t n;
};

static int fake_ask(void *ctx, const struct sl_s3_presign_req *reqs, size_t n, int64_t *ret_id) {
  struct fake_signer *f = ctx;
  f->calls++;
  f->n = n;
  for (size_t i = 0; i < n && i < 4; i++) {
    f->seen[i] = reqs[i];
    snprintf(f->keys[i], sizeof f->keys[i], "%s", reqs[i].key);
  }
  *ret_id = ++f->last_id;
  return 0;
}

static int fake_take(void *ctx, int64_t id, char **ret_urls, size_t n, char *err, size_t err_size) {
  struct fake_signer *f = ctx;
  CHECK_INT(id, f->last_id);
  CHECK_INT(n, f->n);
  if (f->held) return 0;
  if (!f->base) {
    snprintf(err, err_size, "the gateway did not answer");
    return -ETIMEDOUT;
  }
  for (size_t i = 0; i < n; i++) {
    char u[512];
    snprintf(u, sizeof u, "%s/%s?X-Amz-Signature=x", f->base, f->keys[i]);
    ret_urls[i] = strdup(u);
  }
  return 1;
}

static void fake_forget(void *ctx, int64_t id) { ((struct fake_signer *)ctx)->forgotten = id; }

#define FAKE_SIGNER(f) {.ask = fake_ask, .take = fake_take, .forget = fake_forget, .ctx = &(f)}

/* Asks and takes at once: the answer of a signer that is not held. */
static int refresh(struct wk_reserve *r, const struct sl_s3_signer *s, char *err, size_t size) {
  int rc = wk_reserve_ask(r, s, "J000007", err, size);
  return rc < 0 ? rc : wk_reserve_take(r, s, err, size);
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

static long read_file(const char *path, char *buf, size_t size) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  size_t n = fread(buf, 1, size - 1, f);
  buf[n] = 0;
  fclose(f);
  return (long)n;
}

static void test_refresh(void) {
  char base[64];
  snprintf(base, sizeof base, "http://127.0.0.1:%d", port);
  struct fake_signer f = {.base = base, .held = true};
  struct sl_s3_signer s = FAKE_SIGNER(f);
  struct wk_reserve r = {0};
  char err[256] = "";
  CHECK(!wk_reserve_ready(&r));
  CHECK_INT(wk_reserve_take(&r, &s, err, sizeof err), -ENOENT); /* nothing asked */
  CHECK_INT(wk_reserve_ask(&r, &s, "J000007", err, sizeof err), 0);
  CHECK_INT(wk_reserve_ask(&r, &s, "J000007", err, sizeof err), SL_ESTATE); /* one at a time */
  CHECK_INT(f.calls, 1);
  CHECK_INT(wk_reserve_take(&r, &s, err, sizeof err), 0); /* not answered yet */
  CHECK(!wk_reserve_ready(&r));
  f.held = false;
  CHECK_INT(wk_reserve_take(&r, &s, err, sizeof err), 1);
  CHECK(wk_reserve_ready(&r));
  CHECK_INT(wk_reserve_take(&r, &s, err, sizeof err), -ENOENT); /* taken once */
  CHECK_INT(f.n, 2);
  CHECK_STR(f.keys[0], "J000007/orphan/ckpt.tc");
  CHECK_STR(f.keys[1], "J000007/orphan/step");
  CHECK(f.seen[0].op == SL_S3_PUT && f.seen[1].op == SL_S3_PUT);
  CHECK(f.seen[0].sha256 == NULL && f.seen[1].sha256 == NULL); /* only the body must match */
  char *old = strdup(r.ckpt_url);
  f.base = NULL; /* the gateway away: the URLs signed before stay */
  CHECK_INT(refresh(&r, &s, err, sizeof err), -ETIMEDOUT);
  CHECK(strstr(err, "did not answer") != NULL);
  CHECK(wk_reserve_ready(&r));
  CHECK_STR(r.ckpt_url, old);
  free(old);
  /* a request not taken when the job ends is forgotten */
  f.held = true;
  CHECK_INT(wk_reserve_ask(&r, &s, "J000007", err, sizeof err), 0);
  wk_reserve_done(&r, &s);
  CHECK_INT(f.forgotten, f.last_id);
  CHECK(!wk_reserve_ready(&r));
  wk_reserve_done(&r, &s); /* twice is harmless */
  CHECK_INT(f.forgotten, f.last_id);
  /* a signer that can only wait cannot be asked without waiting */
  struct sl_s3_signer waits = {.ctx = &f};
  CHECK_INT(wk_reserve_ask(&r, &waits, "J000007", err, sizeof err), -EINVAL);
}

static void test_put_and_restore(void) {
  char base[64], err[256] = "", ck[PATH_MAX + 32], url[PATH_MAX + 16];
  snprintf(base, sizeof base, "http://127.0.0.1:%d", port);
  struct fake_signer f = {.base = base};
  struct sl_s3_signer s = FAKE_SIGNER(f);
  struct wk_reserve r = {0};
  struct wk_store *st = NULL;
  snprintf(url, sizeof url, "file://%s", store_dir);
  CHECK_INT(wk_store_open(url, NULL, 0, &st), 0);
  if (!st) return;
  char tmp[PATH_MAX + 16], dst[PATH_MAX + 16];
  snprintf(tmp, sizeof tmp, "%s/step.tmp", root);
  snprintf(dst, sizeof dst, "%s/restored.slck", root);
  int64_t step = -1;

  CHECK_INT(wk_orphan_step(st, "J000007", tmp, &step), -ENOENT); /* none yet: the usual case */
  CHECK_INT(wk_reserve_put(&r, "/nonexistent", 5, NULL, err, sizeof err), SL_ESTATE);

  CHECK_INT(refresh(&r, &s, err, sizeof err), 1);
  snprintf(ck, sizeof ck, "%s/ckpt-0000000437.slck", root);
  write_file(ck, "checkpoint bytes of step 437");
  uint64_t bytes = 0;
  CHECK_INT(wk_reserve_put(&r, ck, 437, &bytes, err, sizeof err), 0);
  CHECK_INT(bytes, strlen("checkpoint bytes of step 437"));
  char buf[128];
  char p[PATH_MAX + 64];
  snprintf(p, sizeof p, "%s/J000007/orphan/step", store_dir);
  CHECK_INT(read_file(p, buf, sizeof buf), 3);
  CHECK_STR(buf, "437"); /* decimal text */
  CHECK_INT(wk_orphan_step(st, "J000007", tmp, &step), 0);
  CHECK_INT(step, 437);
  CHECK(access(tmp, F_OK) != 0); /* the scratch file is gone */
  CHECK_INT(wk_orphan_fetch(st, "J000007", dst, &bytes), 0);
  CHECK(read_file(dst, buf, sizeof buf) > 0);
  CHECK_STR(buf, "checkpoint bytes of step 437");

  /* a checkpoint pruned before its upload: -ENOENT, nothing put */
  CHECK_INT(wk_reserve_put(&r, "/nonexistent/ckpt", 438, NULL, err, sizeof err), -ENOENT);
  CHECK_INT(wk_orphan_step(st, "J000007", tmp, &step), 0);
  CHECK_INT(step, 437);

  /* a refused PUT (an expired URL): an error naming the object, never the URL */
  char denied[96];
  snprintf(denied, sizeof denied, "%s/denied", base);
  f.base = denied;
  CHECK_INT(refresh(&r, &s, err, sizeof err), 1);
  CHECK_INT(wk_reserve_put(&r, ck, 500, NULL, err, sizeof err), SL_EAUTH);
  CHECK(strstr(err, "orphan checkpoint") != NULL && strstr(err, "403") != NULL);
  CHECK(strstr(err, "Signature") == NULL && strstr(err, "http") == NULL);
  CHECK_INT(wk_orphan_step(st, "J000007", tmp, &step), 0);
  CHECK_INT(step, 437); /* the step never names a checkpoint that is not there */

  /* an object that is not a step */
  static const char *const bad[] = {"", "12a", "-5", "1 2", "99999999999999999999", "\n"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    write_file(p, bad[i]);
    CHECK_INT(wk_orphan_step(st, "J000007", tmp, &step), SL_EPARSE);
  }
  write_file(p, "512\n");
  CHECK_INT(wk_orphan_step(st, "J000007", tmp, &step), 0);
  CHECK_INT(step, 512);

  /* deleted: both objects; again (already gone) is no error */
  CHECK_INT(wk_orphan_clear(st, "J000007"), 0);
  CHECK_INT(wk_orphan_step(st, "J000007", tmp, &step), -ENOENT);
  CHECK_INT(wk_orphan_fetch(st, "J000007", dst, NULL), -ENOENT);
  CHECK_INT(wk_orphan_clear(st, "J000007"), 0);
  wk_reserve_done(&r, &s);
  wk_store_free(st);
}

int main(void) {
  if (!mkdtemp(root)) return 1;
  snprintf(store_dir, sizeof store_dir, "%s/store", root);
  CHECK_INT(sl_http_global_init(), 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, handle, NULL,
                                          MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_NOTIFY_COMPLETED,
                                          completed, NULL, MHD_OPTION_END);
  const union MHD_DaemonInfo *info = d ? MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT) : NULL;
  CHECK(info && info->port);
  if (!info || !info->port) TEST_MAIN_END();
  port = info->port;
  test_refresh();
  test_put_and_restore();
  MHD_stop_daemon(d);
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf %s", root);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", root);
  TEST_MAIN_END();
}
