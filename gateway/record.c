/* Run records (record.h).
 *
 * The body is small and written at two moments: at submit (version, build
 * id, script hash, seed; for a rerun the job it repeats) and when a worker
 * starts an attempt (its build ids and the data file's hash, under
 * "workers" by attempt number). Everything else in a record is read from
 * the job's row, attempts and checkpoints when the record is built, so the
 * record never disagrees with them. Values that come from a worker are
 * checked (a hash is 64 hex digits, a build id at most 128) before they are
 * kept. */
#include "record.h"

#include "config.h"
#include "store.h"
#include "sl_err.h"
#include "sl_hmac.h"
#include "sl_ident.h"
#include "sl_json.h"
#include "sl_time.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEED_MAX 2147483647

static bool hex_ok(const char *s, size_t min, size_t max) {
  size_t n = s ? strlen(s) : 0;
  if (n < min || n > max)
    return false;
  for (size_t i = 0; i < n; i++)
    if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i]))
      return false;
  return true;
}

/* A session's tagged value {"t":..,"v":..} or a plain one. */
static const json_t *plain(const json_t *v) {
  const json_t *inner = json_is_object(v) ? json_object_get(v, "v") : NULL;
  return inner && json_is_string(json_object_get(v, "t")) ? inner : v;
}

const char *gw_record_self_build_id(void) {
  static char id[SL_BUILD_ID_HEX_MAX + 1];
  static bool read;
  if (!read && sl_build_id("/proc/self/exe", id, sizeof id) < 0)
    id[0] = 0;
  read = true;
  return id;
}

int gw_record_choose_seed(struct gw_job *j) {
  if (strcmp(j->kind, "train") && strcmp(j->kind, "sample") && strcmp(j->kind, "run"))
    return 0;
  json_t *opts = json_object_get(j->spec, "options");
  if (!json_is_object(opts))
    return SL_ETYPE;
  if (json_object_get(opts, "seed"))
    return 0;
  uint32_t r = 0;
  while (!r) {
    sl_random_bytes(&r, sizeof r);
    r &= SEED_MAX;
  }
  /* the options may be the request's own object: the job gets its own copy */
  json_t *own = json_deep_copy(opts);
  if (!own || json_object_set_new(own, "seed", json_integer(r)) < 0 ||
      json_object_set_new(j->spec, "options", own) < 0)
    return -ENOMEM;
  return 1;
}

json_t *gw_record_body_new(const struct gw_job *j, bool seed_chosen) {
  json_t *b = json_pack("{s:s,s:s,s:I}", "spotlab_version", SPOTLAB_VERSION, "gateway_build_id",
                        gw_record_self_build_id(), "recorded_us", (json_int_t)sl_time_real_us());
  if (!b)
    return NULL;
  const char *script = json_string_value(json_object_get(j->spec, "script"));
  if (script) {
    char hex[SL_HMAC_HEX_LEN + 1];
    sl_sha256_hex(script, strlen(script), hex);
    json_object_set_new(b, "script_sha256", json_string(hex));
  }
  const json_t *seed = plain(json_object_get(json_object_get(j->spec, "options"), "seed"));
  if (seed) {
    json_object_set_new(b, "seed", json_deep_copy(seed));
    json_object_set_new(b, "seed_from", json_string(seed_chosen ? "gateway" : "user"));
  }
  return b;
}

void gw_record_started(json_t *body, int attempt, const json_t *started) {
  static const struct {
    const char *field;
    size_t min, max;
  } ids[] = {{"build_id", 2, SL_BUILD_ID_HEX_MAX},
             {"train_build_id", 2, SL_BUILD_ID_HEX_MAX},
             {"data_sha256", SL_SHA256_HEX_LEN, SL_SHA256_HEX_LEN}};
  if (!json_is_object(body) || !json_is_object(started) || attempt < 1)
    return;
  json_t *workers = json_object_get(body, "workers");
  if (!json_is_object(workers)) {
    workers = json_object();
    json_object_set_new(body, "workers", workers);
  }
  json_t *w = json_object();
  for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
    const char *v = sl_json_get_str(started, ids[i].field, NULL);
    if (hex_ok(v, ids[i].min, ids[i].max))
      json_object_set_new(w, ids[i].field, json_string(v));
  }
  const char *path = sl_json_get_str(started, "data_path", NULL);
  if (path && strlen(path) < 4096)
    json_object_set_new(w, "data_path", json_string(path));
  const char *hash = sl_json_get_str(w, "data_sha256", NULL);
  if (hash && !json_object_get(body, "data_sha256")) {
    json_object_set_new(body, "data_sha256", json_string(hash));
    if (path)
      json_object_set_new(body, "data_path", json_string(path));
  }
  char key[16];
  snprintf(key, sizeof key, "%d", attempt);
  json_object_set_new(workers, key, w);
}

int gw_record_rerun_job(const struct gw_job *orig, const json_t *orig_body, bool force,
                        struct gw_job *ret, char *err, size_t err_size) {
  if (!json_is_object(orig->spec)) {
    snprintf(err, err_size, "the job's spec is not recorded");
    return SL_ENAME;
  }
  json_t *spec = json_deep_copy(orig->spec);
  if (!spec) {
    snprintf(err, err_size, "out of memory");
    return -ENOMEM;
  }
  json_object_del(spec, "expect_data_sha256"); /* the original's own check, if a rerun */
  const char *hash = sl_json_get_str(orig_body, "data_sha256", NULL);
  if (hash && !force)
    json_object_set_new(spec, "expect_data_sha256", json_string(hash));
  snprintf(ret->kind, sizeof ret->kind, "%s", orig->kind);
  snprintf(ret->user, sizeof ret->user, "%s", orig->user);
  snprintf(ret->session, sizeof ret->session, "%s", orig->session);
  snprintf(ret->model, sizeof ret->model, "%s", orig->model);
  snprintf(ret->data, sizeof ret->data, "%s", orig->data);
  ret->spec = spec;
  const json_t *steps = plain(json_object_get(json_object_get(spec, "options"), "steps"));
  ret->steps = json_is_number(steps) ? (int64_t)json_number_value(steps) : 0;
  const char *ck = sl_json_get_str(spec, "checkpoint", NULL);
  if (ck && *ck) { /* eval and sample read the checkpoint the original read */
    snprintf(ret->ckpt_key, sizeof ret->ckpt_key, "%s", ck);
    ret->ckpt_step = orig->ckpt_step;
  }
  return 0;
}

json_t *gw_record_body_rerun(json_t *body, const struct gw_job *orig, const json_t *orig_body,
                             bool force) {
  char id[16];
  if (!body)
    return NULL;
  json_object_set_new(body, "rerun_of", json_string(gw_job_id_str(orig->id, id, sizeof id)));
  const char *hash = sl_json_get_str(orig_body, "data_sha256", NULL);
  if (hash)
    json_object_set_new(body, "rerun_data_sha256", json_string(hash));
  if (force)
    json_object_set_new(body, "forced", json_true());
  return body;
}

/* The distinct values of field among the workers' reports, in attempt order. */
static json_t *distinct(const json_t *workers, const json_t *attempts, const char *field) {
  json_t *out = json_array();
  size_t i, k;
  json_t *a, *have;
  json_array_foreach(attempts, i, a) {
    char key[16];
    snprintf(key, sizeof key, "%lld", (long long)sl_json_get_int(a, "attempt", 0));
    const char *v = sl_json_get_str(json_object_get(workers, key), field, NULL);
    bool seen = !v;
    json_array_foreach(out, k, have) seen = seen || !strcmp(json_string_value(have), v);
    if (!seen)
      json_array_append_new(out, json_string(v));
  }
  return out;
}

/* body's key, or null (a new reference either way). */
static json_t *or_null(const json_t *body, const char *key) {
  json_t *v = json_object_get(body, key);
  return v ? json_incref(v) : json_null();
}

/* The spec as the job runs it: options (with the seed), script, checkpoint. */
static json_t *spec_json(const struct gw_job *row) {
  static const char *const copied[] = {"script", "checkpoint", "expect_data_sha256"};
  const json_t *opts = json_object_get(row->spec, "options");
  json_t *s = json_pack("{s:s,s:o}", "kind", row->kind, "options",
                        opts ? json_deep_copy(opts) : json_object());
  if (s && row->model[0])
    json_object_set_new(s, "model", json_string(row->model));
  if (s && row->data[0])
    json_object_set_new(s, "data", json_string(row->data));
  for (size_t i = 0; s && i < sizeof copied / sizeof *copied; i++)
    if (json_object_get(row->spec, copied[i]))
      json_object_set_new(s, copied[i], json_deep_copy(json_object_get(row->spec, copied[i])));
  return s;
}

/* The data definition with the file the worker read and its hash; null
 * for a job without data. */
static json_t *data_json(const struct gw_job *row, const json_t *body) {
  const json_t *d = json_object_get(row->spec, "data");
  json_t *o = d ? json_pack("{s:s,s:O,s:o}", "name", row->data, "definition", d, "sha256",
                            or_null(body, "data_sha256"))
                : NULL;
  if (o && json_object_get(body, "data_path"))
    json_object_set(o, "path", json_object_get(body, "data_path"));
  return o ? o : json_null();
}

/* Each attempt with what its worker reported. */
static json_t *attempts_json(const json_t *attempts, const json_t *workers) {
  static const char *const fields[] = {"build_id", "train_build_id", "data_sha256"};
  static const char *const names[] = {"worker_build_id", "train_build_id", "data_sha256"};
  json_t *out = json_array();
  size_t i;
  json_t *a;
  json_array_foreach(attempts, i, a) {
    json_t *c = json_deep_copy(a);
    char key[16];
    snprintf(key, sizeof key, "%lld", (long long)sl_json_get_int(a, "attempt", 0));
    json_t *w = json_object_get(workers, key);
    for (size_t k = 0; c && k < sizeof fields / sizeof *fields; k++)
      if (json_object_get(w, fields[k]))
        json_object_set(c, names[k], json_object_get(w, fields[k]));
    json_array_append_new(out, c);
  }
  return out;
}

json_t *gw_record_build(const struct gw_job *row, const json_t *body, const json_t *attempts,
                        const json_t *checkpoints) {
  char id[16];
  const json_t *m = json_object_get(row->spec, "model"), *workers = json_object_get(body, "workers");
  json_t *r = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:o,s:o,s:o,s:o,s:o}", "job",
                        gw_job_id_str(row->id, id, sizeof id), "user", row->user, "session",
                        row->session, "kind", row->kind, "state", gw_job_state_name(row->state),
                        "reason", row->reason, "created_us", (json_int_t)row->created_us, "step",
                        (json_int_t)row->step, "steps", (json_int_t)row->steps, "cost_usd",
                        sl_json_real(row->cost_usd), "on_demand_usd",
                        sl_json_real(row->on_demand_usd), "spec", spec_json(row), "model",
                        m ? json_pack("{s:s,s:O}", "name", row->model, "definition", m)
                          : json_null(),
                        "data", data_json(row, body));
  if (!r)
    return NULL;
  static const char *const copied[] = {"data_sha256", "script_sha256", "seed", "spotlab_version"};
  for (size_t i = 0; i < sizeof copied / sizeof *copied; i++)
    json_object_set_new(r, copied[i], or_null(body, copied[i]));
  static const char *const optional[] = {"seed_from", "rerun_of", "forced"};
  for (size_t i = 0; i < sizeof optional / sizeof *optional; i++)
    if (json_object_get(body, optional[i]))
      json_object_set(r, optional[i], json_object_get(body, optional[i]));
  json_object_set_new(r, "build_ids",
                      json_pack("{s:o,s:o,s:o}", "gateway", or_null(body, "gateway_build_id"),
                                "worker", distinct(workers, attempts, "build_id"), "train",
                                distinct(workers, attempts, "train_build_id")));
  json_object_set_new(r, "attempts", attempts_json(attempts, workers));
  json_object_set_new(r, "checkpoints", checkpoints ? json_deep_copy(checkpoints) : json_array());
  /* a forced rerun on a data file that changed says so */
  const char *was = sl_json_get_str(body, "rerun_data_sha256", NULL);
  const char *now = sl_json_get_str(body, "data_sha256", NULL);
  if (was && now && strcmp(was, now))
    json_object_set_new(r, "data_changed", json_pack("{s:s,s:s}", "was", was, "now", now));
  return r;
}

int gw_record_load(struct gw_store *s, const struct gw_job *row, json_t **ret) {
  json_t *body = NULL, *atts = NULL, *cks = NULL;
  int r = gw_store_record_get(s, row->id, &body);
  if (r < 0 && r != SL_ENAME)
    return r;
  if ((r = gw_store_job_history(s, row->id, &atts, &cks)) < 0) {
    json_decref(body);
    return r;
  }
  json_t *rec = gw_record_build(row, body, atts, cks);
  json_decref(body);
  json_decref(atts);
  json_decref(cks);
  if (!rec)
    return -ENOMEM;
  *ret = rec;
  return 0;
}
