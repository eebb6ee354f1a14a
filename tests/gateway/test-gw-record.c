/* Run records: the seed the gateway chooses, the body kept at submit and
 * at each attempt's start (values from a worker checked), a rerun's job and
 * body, the record built from the store, and the file hash and ELF build id
 * readers behind them. */
#include "harness.h"
#include "record.h"
#include "sl_err.h"
#include "sl_digest.h"
#include "sl_ident.h"
#include "store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/test-gw-record-XXXXXX";
#define ABC_SHA256 "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define HASH_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

static void test_seed(void) {
  json_t *shared = json_pack("{s:i}", "steps", 5);
  struct gw_job j = {.kind = "train"};
  j.spec = json_pack("{s:O}", "options", shared);
  CHECK_INT(gw_record_choose_seed(&j), 1);
  json_t *seed = json_object_get(json_object_get(j.spec, "options"), "seed");
  CHECK(json_is_integer(seed) && json_integer_value(seed) >= 1 &&
        json_integer_value(seed) <= 2147483647);
  CHECK(!json_object_get(shared, "seed")); /* the request's own options untouched */
  CHECK_INT(gw_record_choose_seed(&j), 0);  /* it has one now */
  json_t *b = gw_record_body_new(&j, true);
  CHECK(json_equal(json_object_get(b, "seed"), seed));
  CHECK_STR(json_string_value(json_object_get(b, "seed_from")), "gateway");
  CHECK(!json_object_get(b, "script_sha256"));
  json_decref(b);
  gw_job_done(&j);

  struct gw_job e = {.kind = "eval"};
  e.spec = json_pack("{s:{}}", "options");
  CHECK_INT(gw_record_choose_seed(&e), 0); /* eval takes no seed */
  CHECK(!json_object_get(json_object_get(e.spec, "options"), "seed"));
  gw_job_done(&e);

  struct gw_job u = {.kind = "sample"};
  u.spec = json_pack("{s:{s:{s:s,s:i}}}", "options", "seed", "t", "num", "v", 9);
  CHECK_INT(gw_record_choose_seed(&u), 0); /* the user's, a session value */
  b = gw_record_body_new(&u, false);
  CHECK_INT(json_integer_value(json_object_get(b, "seed")), 9);
  CHECK_STR(json_string_value(json_object_get(b, "seed_from")), "user");
  json_decref(b);
  gw_job_done(&u);

  struct gw_job bad = {.kind = "train"};
  bad.spec = json_pack("{s:i}", "options", 3);
  CHECK_INT(gw_record_choose_seed(&bad), SL_ETYPE);
  gw_job_done(&bad);
  json_decref(shared);
}

static void test_started(void) {
  struct gw_job j = {.kind = "run"};
  j.spec = json_pack("{s:{},s:s}", "options", "script", "abc");
  json_t *b = gw_record_body_new(&j, false);
  CHECK_STR(json_string_value(json_object_get(b, "script_sha256")), ABC_SHA256);
  CHECK(!json_object_get(b, "seed"));
  /* what a worker says is checked: hashes are 64 lowercase hex digits */
  json_t *m = json_pack("{s:s,s:s,s:s,s:s}", "build_id", "abc123", "train_build_id", "NOTHEX!",
                        "data_sha256", "abc", "data_path", "/d.txt");
  gw_record_started(b, 1, m);
  json_t *w = json_object_get(json_object_get(b, "workers"), "1");
  CHECK_STR(json_string_value(json_object_get(w, "build_id")), "abc123");
  CHECK(!json_object_get(w, "train_build_id") && !json_object_get(w, "data_sha256"));
  CHECK(!json_object_get(b, "data_sha256"));
  json_decref(m);
  m = json_pack("{s:s,s:s}", "data_sha256", ABC_SHA256, "data_path", "/d.txt");
  gw_record_started(b, 2, m);
  json_decref(m);
  m = json_pack("{s:s,s:i}", "data_sha256", HASH_B, "build_id", 5);
  gw_record_started(b, 3, m);
  gw_record_started(b, 0, m); /* no attempt 0: ignored */
  json_decref(m);
  CHECK_STR(json_string_value(json_object_get(b, "data_sha256")), ABC_SHA256); /* the first */
  CHECK_STR(json_string_value(json_object_get(b, "data_path")), "/d.txt");
  CHECK(!json_object_get(json_object_get(json_object_get(b, "workers"), "3"), "build_id"));
  CHECK(!json_object_get(json_object_get(b, "workers"), "0"));
  gw_record_started(NULL, 1, NULL); /* nothing to add to */
  json_decref(b);
  gw_job_done(&j);
}

static void test_store_and_rerun(void) {
  char path[128], err[256] = "";
  snprintf(path, sizeof path, "%s/gateway.db", dir);
  struct gw_store *s = NULL;
  CHECK_INT(gw_store_open(path, &s, err, sizeof err), 0);
  struct gw_job j = {.kind = "train", .user = "alice", .session = "nb", .model = "m", .data = "d"};
  j.spec = json_pack("{s:{s:i,s:i},s:{s:s},s:{s:s}}", "options", "steps", 20, "seed", 7, "model",
                     "type", "gpt", "data", "type", "text");
  CHECK_INT(gw_store_job_create(s, &j), 0);
  json_t *rec = NULL;
  CHECK_INT(gw_record_load(s, &j, &rec), 0); /* no body yet: a record all the same */
  CHECK(json_is_null(json_object_get(rec, "seed")) && json_array_size(json_object_get(rec, "attempts")) == 0);
  json_decref(rec);
  json_t *b = gw_record_body_new(&j, false);
  CHECK_INT(gw_store_record_put(s, j.id, b), 0);
  snprintf(j.instance, sizeof j.instance, "i-1");
  snprintf(j.instance_type, sizeof j.instance_type, "g5.xlarge");
  snprintf(j.zone, sizeof j.zone, "us-east-1a");
  j.spot = true;
  for (j.attempt = 1; j.attempt <= 2; j.attempt++) {
    CHECK_INT(gw_store_attempt_begin(s, &j, j.attempt == 1 ? 0 : 10, 1000 * j.attempt), 0);
    json_t *m = json_pack("{s:s,s:s,s:s}", "build_id", j.attempt == 1 ? "aa" : "bb", "train_build_id",
                          "cc", "data_sha256", ABC_SHA256);
    gw_record_started(b, j.attempt, m);
    json_decref(m);
  }
  CHECK_INT(gw_store_record_put(s, j.id, b), 0);
  CHECK_INT(gw_store_attempt_end(s, j.id, 1, "preempted", 1500), 0);
  CHECK_INT(gw_store_checkpoint_add(s, j.id, 1, 10, "J/ckpt/10", 100, 1, 2, 1400), 0);
  CHECK_INT(gw_store_checkpoint_add(s, j.id, 2, 20, "J/ckpt/20", 200, 1, 2, 2400), 0);
  json_t *three = json_integer(3);
  CHECK_INT(gw_store_record_put(s, j.id, three), SL_ETYPE);
  json_decref(three);
  CHECK_INT(gw_record_load(s, &j, &rec), 0);
  CHECK_INT(json_integer_value(json_object_get(rec, "seed")), 7);
  CHECK_STR(json_string_value(json_object_get(rec, "data_sha256")), ABC_SHA256);
  CHECK_STR(json_string_value(json_object_get(json_object_get(rec, "model"), "name")), "m");
  json_t *ids = json_object_get(rec, "build_ids");
  CHECK_INT(json_array_size(json_object_get(ids, "worker")), 2);
  CHECK_INT(json_array_size(json_object_get(ids, "train")), 1); /* distinct */
  json_t *atts = json_object_get(rec, "attempts");
  CHECK_INT(json_array_size(atts), 2);
  CHECK_STR(json_string_value(json_object_get(json_array_get(atts, 0), "instance_type")), "g5.xlarge");
  CHECK_STR(json_string_value(json_object_get(json_array_get(atts, 0), "market")), "spot");
  CHECK_STR(json_string_value(json_object_get(json_array_get(atts, 0), "outcome")), "preempted");
  CHECK_STR(json_string_value(json_object_get(json_array_get(atts, 1), "worker_build_id")), "bb");
  CHECK_INT(json_integer_value(json_object_get(json_array_get(atts, 1), "from_step")), 10);
  json_t *cks = json_object_get(rec, "checkpoints");
  CHECK_INT(json_array_size(cks), 2);
  CHECK_INT(json_integer_value(json_object_get(json_array_get(cks, 1), "bytes")), 200);
  json_decref(rec);

  /* a rerun: the same spec and seed; the data's hash checked unless forced */
  struct gw_job again = {0};
  CHECK_INT(gw_record_rerun_job(&j, b, false, &again, err, sizeof err), 0);
  CHECK_STR(again.kind, "train");
  CHECK_STR(again.model, "m");
  CHECK_INT(again.steps, 20);
  CHECK_STR(json_string_value(json_object_get(again.spec, "expect_data_sha256")), ABC_SHA256);
  CHECK(json_equal(json_object_get(again.spec, "options"), json_object_get(j.spec, "options")));
  struct gw_job forced = {0};
  CHECK_INT(gw_record_rerun_job(&again, b, true, &forced, err, sizeof err), 0);
  CHECK(!json_object_get(forced.spec, "expect_data_sha256")); /* the original's check is not copied */
  json_t *fb = gw_record_body_rerun(gw_record_body_new(&forced, false), &j, b, true);
  forced.id = 99;
  json_t *m = json_pack("{s:s}", "data_sha256", HASH_B);
  gw_record_started(fb, 1, m);
  json_decref(m);
  json_t *none = json_array();
  rec = gw_record_build(&forced, fb, none, NULL);
  json_decref(none);
  CHECK_STR(json_string_value(json_object_get(rec, "rerun_of")), "J000001");
  CHECK(json_is_true(json_object_get(rec, "forced")));
  CHECK_STR(json_string_value(json_object_get(json_object_get(rec, "data_changed"), "was")), ABC_SHA256);
  CHECK_STR(json_string_value(json_object_get(json_object_get(rec, "data_changed"), "now")), HASH_B);
  json_decref(rec);
  json_decref(fb);
  struct gw_job nospec = {0}, out = {0};
  CHECK_INT(gw_record_rerun_job(&nospec, NULL, false, &out, err, sizeof err), SL_ENAME);
  gw_job_done(&forced);
  gw_job_done(&again);
  json_decref(b);
  gw_job_done(&j);
  gw_store_free(s);
}

static void test_ident(void) {
  char path[128], hex[SL_BUILD_ID_HEX_MAX + 1];
  snprintf(path, sizeof path, "%s/abc", dir);
  FILE *f = fopen(path, "w");
  fputs("abc", f);
  fclose(f);
  CHECK_INT(sl_sha256_file(path, 0, hex), 0);
  CHECK_STR(hex, ABC_SHA256);
  CHECK_INT(sl_sha256_file(path, 2, hex), SL_ELIMIT);
  CHECK_INT(sl_sha256_file(dir, 0, hex), -EISDIR);
  CHECK_INT(sl_sha256_file("/nonexistent/x", 0, hex), -ENOENT);
  char fifo[160];
  snprintf(fifo, sizeof fifo, "%s/fifo", dir);
  CHECK_INT(mkfifo(fifo, 0600), 0);
  CHECK_INT(sl_sha256_file(fifo, 0, hex), -EINVAL); /* no writer: refused, not waited for */
  CHECK(sl_build_id(fifo, hex, sizeof hex) < 0);
  CHECK_INT(sl_build_id(path, hex, sizeof hex), SL_EFORMAT); /* not ELF */
  CHECK_INT(sl_build_id("/proc/self/exe", hex, sizeof hex), 0);
  CHECK(strlen(hex) >= 16 && strspn(hex, "0123456789abcdef") == strlen(hex));
  CHECK_STR(gw_record_self_build_id(), hex);
  CHECK_INT(sl_build_id("/proc/self/exe", hex, 8), SL_EFORMAT); /* no room */
  /* a cut copy of this program: headers point past its end */
  FILE *in = fopen("/proc/self/exe", "rb");
  char buf[4096];
  size_t n = in ? fread(buf, 1, sizeof buf, in) : 0;
  if (in)
    fclose(in);
  f = fopen(path, "wb");
  fwrite(buf, 1, n, f);
  fclose(f);
  int r = sl_build_id(path, hex, sizeof hex);
  CHECK(r == SL_EFORMAT || r == SL_ENAME || r == 0);
}

int main(void) {
  if (!mkdtemp(dir))
    return 1;
  test_seed();
  test_started();
  test_store_and_rerun();
  test_ident();
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", dir);
  TEST_MAIN_END();
}
