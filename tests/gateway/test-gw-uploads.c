/* The gateway's data uploads (gateway/uploads.h) into a file store: an
 * upload checked, taken in order and published; bytes at another offset or
 * past the size not written; a hash that is not the name refused and
 * forgotten; a part left by an earlier start hashed again and gone on with;
 * a part let go for a day swept (not while its upload is under way);
 * a stored object found by a new start; a stored file deleted (not while
 * it is being uploaded) and uploaded again; the per-user limit; the store key
 * of a user name that is not a plain one; the records of multipart
 * uploads a killed run left open. gw_uploads_wait stands for the
 * loop's next turns while a check or publication runs on its thread. */
#include "harness.h"
#include "mpu_notes.h"
#include "sl_err.h"
#include "sl_file.h"
#include "sl_time.h"
#include "uploads.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char state[256], store[300];

static void sha_of(const void *data, size_t len, char hex[65]) {
  unsigned char h[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(h, data, len);
  sodium_bin2hex(hex, 65, h, sizeof h);
}

/* have, after the check its first call starts */
static int have(struct gw_uploads *u, const char *user, const char *sha, uint64_t size,
                struct gw_upload_status *st, char *err) {
  int r = gw_uploads_have(u, user, sha, size, st, err, 256);
  gw_uploads_wait(u);
  return r < 0 ? r : gw_uploads_have(u, user, sha, size, st, err, 256);
}

/* gw_mpu_notes_left_open's callback: takes alice's uploads, refuses the rest */
struct offered {
  int n;
  char keys[4][32], ids[4][32];
};
static int take(void *ud, const char *key, const char *upload_id) {
  struct offered *o = ud;
  if (o->n < 4) {
    snprintf(o->keys[o->n], sizeof o->keys[0], "%s", key);
    snprintf(o->ids[o->n], sizeof o->ids[0], "%s", upload_id);
  }
  o->n++;
  return strstr(key, "/alice/") ? 0 : -EIO;
}

int main(void) {
  snprintf(state, sizeof state, "%s/spotlab-uploads-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(state) || sodium_init() < 0)
    return 1;
  snprintf(store, sizeof store, "%s/store", state);
  struct gw_uploads *u = NULL;
  CHECK_INT(gw_uploads_new(state, store, NULL, &u), 0);
  if (!u)
    TEST_MAIN_END();

  char data[3000], sha[65], key[GW_UPLOAD_KEY_MAX], err[256], path[600];
  for (size_t i = 0; i < sizeof data; i++)
    data[i] = (char)('a' + i % 26);
  sha_of(data, sizeof data, sha);
  struct gw_upload_status st;

  /* malformed requests */
  CHECK_INT(gw_uploads_have(u, "alice", "ABC", 3, &st, err, sizeof err), SL_ETYPE);
  CHECK_INT(gw_uploads_have(u, "", sha, 3, &st, err, sizeof err), SL_ENAME);
  CHECK_INT(gw_uploads_ready(u, "alice", sha, sizeof data, key, sizeof key), SL_ESTATE);

  /* a new upload: checked, then receiving from 0 */
  CHECK_INT(gw_uploads_have(u, "alice", sha, sizeof data, &st, err, sizeof err), 0);
  CHECK_INT(st.state, GW_UPLOAD_CHECKING);
  gw_uploads_wait(u);
  CHECK_INT(gw_uploads_have(u, "alice", sha, sizeof data, &st, err, sizeof err), 0);
  CHECK_INT(st.state, GW_UPLOAD_RECEIVING);
  CHECK_INT(st.offset, 0);
  CHECK_INT(gw_uploads_have(u, "alice", sha, sizeof data + 1, &st, err, sizeof err), SL_EMISMATCH);
  /* another offset than the one wanted: not written, the reply names it */
  CHECK_INT(gw_uploads_put(u, "alice", sha, sizeof data, 100, data + 100, 100, &st, err, sizeof err), 0);
  CHECK_INT(st.offset, 0);
  CHECK_INT(gw_uploads_put(u, "alice", sha, sizeof data, 0, data, 1000, &st, err, sizeof err), 0);
  CHECK_INT(st.state, GW_UPLOAD_RECEIVING);
  CHECK_INT(st.offset, 1000);
  /* past the size */
  CHECK_INT(gw_uploads_put(u, "alice", sha, sizeof data, 1000, data, 2001, &st, err, sizeof err), SL_ELIMIT);

  /* the hourly sweep keeps a part a day old while its upload is under way,
   * and removes it with its slot once the upload was let go */
  snprintf(path, sizeof path, "%s/uploads/alice-%s.part", state, sha);
  struct timespec old[2] = {{time(NULL) - 2 * 86400, 0}, {time(NULL) - 2 * 86400, 0}};
  CHECK(utimensat(AT_FDCWD, path, old, 0) == 0);
  int64_t mono = sl_time_mono_us();
  gw_uploads_sweep(u, mono, time(NULL));
  CHECK(access(path, F_OK) == 0);
  gw_uploads_sweep(u, mono + 3600 * 1000000LL, time(NULL) + 3600);
  CHECK(access(path, F_OK) < 0);
  CHECK_INT(have(u, "alice", sha, sizeof data, &st, err), 0); /* asked again: from 0 */
  CHECK_INT(st.offset, 0);
  CHECK_INT(gw_uploads_put(u, "alice", sha, sizeof data, 0, data, 1000, &st, err, sizeof err), 0);
  CHECK_INT(st.offset, 1000);

  /* a new start (the gateway restarted) goes on from the part */
  u = gw_uploads_free(u);
  CHECK_INT(gw_uploads_new(state, store, NULL, &u), 0);
  CHECK_INT(have(u, "alice", sha, sizeof data, &st, err), 0);
  CHECK_INT(st.state, GW_UPLOAD_RECEIVING);
  CHECK_INT(st.offset, 1000);
  CHECK_INT(gw_uploads_put(u, "alice", sha, sizeof data, 1000, data + 1000, 2000, &st, err, sizeof err), 0);
  CHECK_INT(st.state, GW_UPLOAD_PUBLISHING);
  gw_uploads_wait(u);
  CHECK_INT(gw_uploads_have(u, "alice", sha, sizeof data, &st, err, sizeof err), 0);
  CHECK_INT(st.state, GW_UPLOAD_READY);
  CHECK_INT(gw_uploads_ready(u, "alice", sha, sizeof data, key, sizeof key), 0);
  snprintf(path, sizeof path, "_data/alice/%s", sha);
  CHECK_STR(key, path);
  snprintf(path, sizeof path, "%s/_data/alice/%s", store, sha);
  struct stat sb;
  CHECK(stat(path, &sb) == 0 && sb.st_size == (off_t)sizeof data);
  snprintf(path, sizeof path, "%s/uploads/alice-%s.part", state, sha);
  CHECK(access(path, F_OK) < 0); /* the part became the object */
  /* another user does not see it */
  CHECK_INT(have(u, "bob", sha, sizeof data, &st, err), 0);
  CHECK_INT(st.state, GW_UPLOAD_RECEIVING);
  CHECK_INT(gw_uploads_ready(u, "bob", sha, sizeof data, key, sizeof key), SL_ESTATE);

  /* a new start finds the stored object */
  u = gw_uploads_free(u);
  CHECK_INT(gw_uploads_new(state, store, NULL, &u), 0);
  CHECK_INT(have(u, "alice", sha, sizeof data, &st, err), 0);
  CHECK_INT(st.state, GW_UPLOAD_READY);

  /* a stored file deleted: until its object is gone it reads as checking,
   * so no job takes it; then it is looked for anew, and uploaded again */
  struct gw_upload_deleted done[4];
  CHECK_INT(gw_uploads_take_deleted(u, done, 4), 0);
  CHECK_INT(gw_uploads_delete(u, "alice", "ABC", 3, err, sizeof err), SL_ETYPE);
  CHECK_INT(gw_uploads_delete(u, "alice", sha, sizeof data, err, sizeof err), 0);
  CHECK_INT(gw_uploads_ready(u, "alice", sha, sizeof data, key, sizeof key), SL_ESTATE);
  gw_uploads_wait(u);
  CHECK_INT(gw_uploads_take_deleted(u, done, 4), 1);
  CHECK_STR(done[0].user, "alice");
  CHECK_STR(done[0].sha256, sha);
  CHECK_INT(done[0].result, 0);
  CHECK_INT(gw_uploads_take_deleted(u, done, 4), 0);
  snprintf(path, sizeof path, "%s/_data/alice/%s", store, sha);
  CHECK(access(path, F_OK) < 0);
  CHECK_INT(have(u, "alice", sha, sizeof data, &st, err), 0);
  CHECK_INT(st.state, GW_UPLOAD_RECEIVING);
  CHECK_INT(st.offset, 0);
  /* not while it is being uploaded; a part left is removed with it */
  CHECK_INT(gw_uploads_put(u, "alice", sha, sizeof data, 0, data, 1000, &st, err, sizeof err), 0);
  CHECK_INT(gw_uploads_delete(u, "alice", sha, sizeof data, err, sizeof err), SL_ESTATE);
  CHECK(strstr(err, "being uploaded") != NULL);
  u = gw_uploads_free(u); /* a new start: the part is no longer under way */
  CHECK_INT(gw_uploads_new(state, store, NULL, &u), 0);
  CHECK_INT(gw_uploads_delete(u, "alice", sha, sizeof data, err, sizeof err), 0);
  gw_uploads_wait(u);
  CHECK_INT(gw_uploads_take_deleted(u, done, 4), 1);
  CHECK_INT(done[0].result, 0);
  snprintf(path, sizeof path, "%s/uploads/alice-%s.part", state, sha);
  CHECK(access(path, F_OK) < 0);
  /* uploaded again, stored again */
  CHECK_INT(have(u, "alice", sha, sizeof data, &st, err), 0);
  CHECK_INT(st.offset, 0);
  CHECK_INT(gw_uploads_put(u, "alice", sha, sizeof data, 0, data, sizeof data, &st, err, sizeof err), 0);
  gw_uploads_wait(u);
  CHECK_INT(gw_uploads_ready(u, "alice", sha, sizeof data, key, sizeof key), 0);

  /* bytes that are not the name: refused with the last chunk, forgotten */
  char other[65];
  sha_of("something else", 14, other);
  CHECK_INT(have(u, "alice", other, 500, &st, err), 0);
  CHECK_INT(gw_uploads_put(u, "alice", other, 500, 0, data, 500, &st, err, sizeof err), SL_ECHECKSUM);
  CHECK(strstr(err, "do not hash") != NULL);
  snprintf(path, sizeof path, "%s/_data/alice/%s", store, other);
  CHECK(access(path, F_OK) < 0);
  CHECK_INT(have(u, "alice", other, 500, &st, err), 0);
  CHECK_INT(st.state, GW_UPLOAD_RECEIVING);
  CHECK_INT(st.offset, 0);

  /* at most GW_UPLOAD_PER_USER under way per user: alice has one (other) */
  char more[GW_UPLOAD_PER_USER][65];
  for (int i = 0; i < GW_UPLOAD_PER_USER; i++) {
    char seed[16];
    snprintf(seed, sizeof seed, "seed %d", i);
    sha_of(seed, strlen(seed), more[i]);
  }
  for (int i = 0; i < GW_UPLOAD_PER_USER - 1; i++)
    CHECK_INT(have(u, "alice", more[i], 10, &st, err), 0);
  CHECK_INT(gw_uploads_have(u, "alice", more[GW_UPLOAD_PER_USER - 1], 10, &st, err, sizeof err), SL_ELIMIT);
  CHECK_INT(have(u, "carol", more[0], 10, &st, err), 0); /* another user is not held up */

  /* an empty file is stored at once */
  char empty[65];
  sha_of("", 0, empty);
  CHECK_INT(have(u, "carol", empty, 0, &st, err), 0);
  CHECK_INT(st.state, GW_UPLOAD_READY);

  /* with every slot under way, a deletion waits its turn (SL_ELIMIT) */
  for (int i = 0; i < GW_UPLOAD_MAX; i++) {
    char user[16], seed[16], h[65];
    snprintf(user, sizeof user, "user%d", i / GW_UPLOAD_PER_USER);
    snprintf(seed, sizeof seed, "slot %d", i);
    sha_of(seed, strlen(seed), h);
    gw_uploads_have(u, user, h, 10, &st, err, sizeof err);
  }
  gw_uploads_wait(u);
  char spare[65];
  sha_of("spare", 5, spare);
  CHECK_INT(gw_uploads_delete(u, "alice", spare, 10, err, sizeof err), SL_ELIMIT);

  /* a user name that is not plain is hashed into the key */
  gw_upload_key("alice", sha, key, sizeof key);
  CHECK(strncmp(key, "_data/alice/", 12) == 0);
  gw_upload_key("../etc", sha, key, sizeof key);
  CHECK(strncmp(key, "_data/u-", 8) == 0 && strlen(key) == 8 + 16 + 1 + 64 && !strstr(key, ".."));
  gw_upload_key("ali ce", sha, key, sizeof key);
  CHECK(strncmp(key, "_data/u-", 8) == 0);

  /* the records of multipart uploads a killed run left open: each offered
   * once; one the caller takes is forgotten, one it refuses stays for the
   * next start, one that is not a record is removed */
  char rec[2][512];
  snprintf(rec[0], sizeof rec[0], "%s/uploads/alice-%s-aaaaaa.mpu", state, sha);
  snprintf(rec[1], sizeof rec[1], "%s/uploads/bob-%s-bbbbbb.mpu", state, sha);
  CHECK_INT(sl_file_write_atomic(rec[0], "_data/alice/x\nid-1\n", 19, 0600), 0);
  CHECK_INT(sl_file_write_atomic(rec[1], "_data/bob/y\nid-2\n", 17, 0600), 0);
  snprintf(path, sizeof path, "%s/uploads/carol-%s-cccccc.mpu", state, sha);
  CHECK_INT(sl_file_write_atomic(path, "no upload id", 12, 0600), 0);
  struct offered got = {0};
  CHECK_INT(gw_mpu_notes_left_open(state, take, &got), 1);
  CHECK_INT(got.n, 2);
  CHECK(access(rec[0], F_OK) < 0);  /* taken: forgotten */
  CHECK(access(rec[1], F_OK) == 0); /* refused: kept */
  CHECK(access(path, F_OK) < 0);    /* not a record: removed */
  got.n = 0;
  CHECK_INT(gw_mpu_notes_left_open(state, take, &got), 0);
  CHECK_INT(got.n, 1);
  CHECK_STR(got.keys[0], "_data/bob/y");
  CHECK_STR(got.ids[0], "id-2");

  gw_uploads_free(u);
  sl_file_remove_tree(state);
  TEST_MAIN_END();
}
