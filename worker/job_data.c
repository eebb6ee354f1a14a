/* A job's data file that the notebook uploaded (job_int.h): the gateway
 * names it in the spec ("data_upload": the store key, its SHA-256 and
 * size) when this worker cannot read the notebook's machine. It is read
 * from the store into the worker's data folder once per content, its hash
 * checked, and the job reads that copy. */
#include "job_int.h"

#include "sl_err.h"
#include "sl_ident.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_path.h"
#include "conf.h"
#include "store.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct hash_call {
  const char *path;
  char hex[SL_SHA256_HEX_LEN + 1];
};

static int hash_file(void *ctx) {
  struct hash_call *h = ctx;
  return sl_sha256_file(h->path, 0, h->hex);
}

int wk_job_fetch_data(struct wk_job *j, const json_t *assign, json_t **ret_assign, char *err, size_t err_size) {
  const json_t *spec = json_object_get(assign, "spec");
  const json_t *up = json_object_get(spec, "data_upload");
  *ret_assign = NULL;
  if (!up || (j->kind != WK_KIND_TRAIN && j->kind != WK_KIND_EVAL)) return 0;
  const char *key = json_string_value(json_object_get(up, "key"));
  const char *sha = json_string_value(json_object_get(up, "sha256"));
  if (!key || wk_store_check_key(key) < 0 || !sl_sha256_hex_ok(sha))
    return snprintf(err, err_size, "spec \"data_upload\" needs a store key and a sha256"), SL_ETYPE;
  char dir[PATH_MAX], path[PATH_MAX + 80], tmp[PATH_MAX + 96];
  snprintf(dir, sizeof dir, "%s/data", j->env->cfg->work_dir);
  snprintf(path, sizeof path, "%s/%s", dir, sha);
  snprintf(tmp, sizeof tmp, "%s/.fetch-%s", dir, sha);
  int r = sl_mkdir_p(dir, 0700);
  if (r < 0) return snprintf(err, err_size, "cannot make %s: %s", dir, sl_strerror(r)), r;
  if (access(path, R_OK) != 0) { /* a copy there was checked when it came */
    uint64_t bytes = 0;
    if ((r = wk_store_get_file(j->env->store, key, tmp, &bytes)) < 0) {
      const char *e = wk_store_error(j->env->store);
      snprintf(err, err_size, "the data file the notebook uploaded (%s) cannot be read from the store: %s",
               key, e[0] ? e : sl_strerror(r));
      return r;
    }
    struct hash_call h = {.path = tmp};
    if ((r = wk_store_run(j->env->store, hash_file, &h)) < 0 || strcmp(h.hex, sha)) {
      unlink(tmp);
      if (r < 0) return snprintf(err, err_size, "cannot read %s: %s", tmp, sl_strerror(r)), r;
      snprintf(err, err_size, "the data file %s read from the store hashes to %.12s…, not %.12s…", key, h.hex,
               sha);
      return SL_ECHECKSUM;
    }
    if (rename(tmp, path) < 0) {
      r = -errno;
      unlink(tmp);
      return snprintf(err, err_size, "cannot keep %s: %s", path, sl_strerror(r)), r;
    }
    sl_info("worker.store", "%s: fetched the notebook's data file %s (%llu bytes)", j->id, key,
            (unsigned long long)bytes);
  }
  json_t *a = json_deep_copy(assign);
  json_t *s = json_object_get(a, "spec");
  if (!a || !s || json_object_set_new(s, "data", json_string(path)) < 0) {
    json_decref(a);
    return -ENOMEM;
  }
  *ret_assign = a;
  return 0;
}
