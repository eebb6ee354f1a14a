/* Configuration: defaults, layering, every kind of error with FILE:LINE,
 * and --dump-config output that reads back to the same values. */
#include "conf.h"
#include "harness.h"
#include "sl_err.h"

#include <stdlib.h>
#include <unistd.h>

static char dir[] = "/tmp/test-gw-conf-XXXXXX";

static const char *write_file(const char *name, const char *text) {
  static char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  fputs(text, f);
  fclose(f);
  return path;
}

/* Loads text; returns the error message ("" on success). */
static const char *load(const char *text, int *ret) {
  static char err[512];
  static struct gw_config c;
  err[0] = 0;
  gw_config_defaults(&c);
  *ret = gw_config_load_file(&c, write_file("c.ini", text), err, sizeof err);
  return err;
}

static void expect_error(const char *text, const char *needle, int line) {
  int r;
  const char *err = load(text, &r);
  char where[300];
  snprintf(where, sizeof where, "%s/c.ini:%d: ", dir, line);
  CHECK_INT(r, SL_ECONFIG);
  CHECK(strstr(err, where) == err);
  CHECK(strstr(err, needle) != NULL);
  if (!strstr(err, needle) || strstr(err, where) != err)
    fprintf(stderr, "  message was: %s\n", err);
}

int main(void) {
  if (!mkdtemp(dir))
    return 1;
  static struct gw_config c;
  gw_config_defaults(&c);
  CHECK_STR(c.listen, "tcp://127.0.0.1:7400");
  CHECK_INT(c.worker_timeout_us, 600 * 1000000LL);
  CHECK(c.hard_cap);
  CHECK_NEAR(c.local_time_scale, 60, 0);

  int r;
  const char *err = load("[gateway]\nlisten = ipc:///tmp/x.sock ; comment\n[idle]\n"
                         "worker_timeout = 90s\n[user.alice]\ntoken_sha256 = "
                         "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n"
                         "group = research\n[group.research]\nnotebook_timeout = 2h\n", &r);
  CHECK_INT(r, 0);
  CHECK_STR(err, "");

  expect_error("[gateway]\nlisten = tcp://127.0.0.1:1\nbogus = 1\n", "unknown key \"bogus\"", 3);
  expect_error("[idle]\n\nworker_timeout = soon\n", "not a duration", 3);
  expect_error("[provider.local]\nslots = 1000\n", "out of range", 2);
  expect_error("[provider.local]\nslots = 1.5\n", "not an integer", 2);
  expect_error("[gateway]\n[nonsense]\n", "unknown section [nonsense]", 2);
  expect_error("[budget]\nhard_cap = maybe\n", "not yes or no", 2);
  expect_error("[budget]\nalert_at = 25,x\n", "not a percentage", 2);
  expect_error("[gateway]\nlisten = http://x\n", "not a tcp://", 2);
  expect_error("[user.al ice]\n", "unknown section", 1);
  expect_error("[user.bob]\ntoken_sha256 = abc\n", "64 lowercase hex", 2);
  expect_error("listen = x\n", "outside any section", 1);
  expect_error("[idle]\nworker_timeout = 0s\n", "out of range", 2);

  /* a missing file is an error naming it */
  gw_config_defaults(&c);
  char msg[512];
  CHECK(gw_config_load_file(&c, "/nonexistent/spotlab.ini", msg, sizeof msg) < 0);
  CHECK(strstr(msg, "/nonexistent/spotlab.ini") != NULL);

  /* a failed set keeps the old value */
  gw_config_defaults(&c);
  CHECK(gw_config_set(&c, "idle", "worker_timeout", "-3s", msg, sizeof msg) < 0);
  CHECK_INT(c.worker_timeout_us, 600 * 1000000LL);

  /* dump -> load -> dump is a fixed point, with users, groups and odd numbers */
  gw_config_defaults(&c);
  gw_config_set(&c, "provider.local", "time_scale", "0.1", msg, sizeof msg);
  gw_config_set(&c, "idle", "warn_before", "1500ms", msg, sizeof msg);
  gw_config_set(&c, "user.bob", "token_sha256",
                "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210", msg, sizeof msg);
  gw_config_set(&c, "group.ops", "worker_timeout", "45m", msg, sizeof msg);
  char *a = NULL, *b = NULL;
  size_t al = 0, bl = 0;
  FILE *f = open_memstream(&a, &al);
  CHECK_INT(gw_config_dump(&c, f), 0);
  fclose(f);
  static struct gw_config d;
  gw_config_defaults(&d);
  CHECK_INT(gw_config_load_file(&d, write_file("dump.ini", a), msg, sizeof msg), 0);
  f = open_memstream(&b, &bl);
  gw_config_dump(&d, f);
  fclose(f);
  CHECK_STR(a, b);
  CHECK_NEAR(d.local_time_scale, 0.1, 0);
  CHECK_INT(d.warn_before_us, 1500000);
  CHECK_INT(gw_config_worker_timeout_us(&d, "bob"), d.worker_timeout_us);
  free(a);
  free(b);
  unlink(write_file("c.ini", ""));
  unlink(write_file("dump.ini", ""));
  rmdir(dir);
  TEST_MAIN_END();
}
