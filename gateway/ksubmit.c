/* The kernel protocol's submit (protocols.md §1): the job a request
 * describes, checked before it is queued (options the training core cannot
 * take, a region or instance type no market or no rule allows, a gang that
 * cannot share the batch, a deadline that cannot be met), its run record,
 * and reruns of a recorded job. A refusal is answered at once, naming the
 * problem; a job that passes goes to the scheduler. */
#include "kproto_int.h"

#include "budget.h"
#include "record.h"
#include "sl_err.h"
#include "sl_ident.h"
#include "sl_json.h"
#include "sl_log.h"
#include "uploads.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T GW_KPROTO_TOPIC

/* Copies the session's definition of name (kind model or data) into spec[field]. */
static int copy_def(struct gw_kreq *q, json_t *spec, const char *field, const char *kind,
                    const char *name, char *ret_name, size_t size) {
  json_t *def = NULL;
  char msg[160];
  if (!name || !*name || strlen(name) >= size) {
    snprintf(msg, sizeof msg, "%s name missing", kind);
    gw_kproto_fail(q, SL_ENAME, msg);
    return SL_ENAME;
  }
  int r = gw_store_session_def(q->g->env.store, q->c->who.user, q->c->session, name, kind, &def);
  if (r == SL_ENAME) {
    snprintf(msg, sizeof msg, "no %s named \"%.64s\" in this session", kind, name);
    gw_kproto_fail(q, SL_ENAME, msg);
    return SL_ENAME;
  }
  if (r < 0) {
    snprintf(msg, sizeof msg, "cannot read the %s \"%.64s\" from the gateway's store", kind, name);
    gw_kproto_fail(q, r, msg);
    return r;
  }
  json_object_set_new(spec, field, def);
  snprintf(ret_name, size, "%s", name);
  return 0;
}

/* The type of a session definition ("gpt", "text", ...), or "". */
static const char *def_type(const json_t *def) {
  const json_t *inner = json_object_get(def, "spec");
  return sl_json_get_str(json_is_object(inner) ? inner : def, "type", "");
}

/* A model trains and is evaluated on the data it is built for: gpt on
 * text, mlp on fashion_mnist. Refused at submit, since the worker would
 * otherwise take the one's data for the other's file and fail on it.
 * Sends the error reply itself. */
static int check_model_data(struct gw_kreq *q, const json_t *spec, const char *model, const char *data) {
  const char *mt = def_type(json_object_get(spec, "model"));
  const char *dt = def_type(json_object_get(spec, "data"));
  const char *wants = !strcmp(mt, "gpt") ? "text" : !strcmp(mt, "mlp") ? "fashion_mnist" : NULL;
  if (!wants || !*dt || !strcmp(dt, wants) || (!strcmp(wants, "fashion_mnist") && !strcmp(dt, "fashion-mnist")))
    return 0;
  char msg[400];
  snprintf(msg, sizeof msg, "model %.64s = %s(...) learns from %s data, and %.64s is %s data: a gpt model "
           "takes text(\"PATH\"), an mlp model fashion_mnist()", model, mt, wants, data, dt);
  return gw_kproto_fail(q, SL_ETYPE, msg), SL_ETYPE;
}

/* gpus and precision (DESIGN.md §8), checked at submit: a value the
 * training core cannot take, or more GPUs than any instance type of the
 * market offers, is refused at once rather than left to fail at placement
 * (or on a worker, which checks its own GPUs again). Sends the error reply
 * itself on failure. */
static int check_device_options(struct gw_kreq *q, const json_t *opts) {
  const json_t *gpus = json_object_get(opts, "gpus"), *prec = json_object_get(opts, "precision");
  double want = gpus ? json_number_value(gpus) : 0;
  char msg[200];
  if (gpus && (!json_is_number(gpus) || want < 0 || want > 64 || want != (double)(int)want))
    return gw_kproto_fail(q, SL_ECONFIG, "gpus must be a whole number from 0 to 64"), SL_ECONFIG;
  if (prec && (!json_is_string(prec) ||
               (strcmp(json_string_value(prec), "bf16") && strcmp(json_string_value(prec), "fp32"))))
    return gw_kproto_fail(q, SL_ECONFIG, "precision must be bf16 or fp32"), SL_ECONFIG;
  if (want < 1)
    return 0;
  static struct gw_offer offers[MARKET_MAX];
  size_t n = gw_sched_market(q->g->env.sched, offers, MARKET_MAX);
  size_t most = 0;
  for (size_t i = 1; i < n; i++)
    if (offers[i].type.gpus > offers[most].type.gpus)
      most = i;
  if (!n || offers[most].type.gpus >= (int)want)
    return 0; /* no market to judge by yet: placement decides */
  snprintf(msg, sizeof msg, "no instance type offers %d GPUs (the most: %d, on %.64s)", (int)want,
           offers[most].type.gpus, offers[most].type.name);
  return gw_kproto_fail(q, SL_ENAME, msg), SL_ENAME;
}

/* region=NAME: a region some offer of the market is in, checked at submit
 * so that a misspelt one is refused at once. Sends the error reply itself. */
static int check_region(struct gw_kreq *q, const json_t *opts) {
  const json_t *v = json_object_get(opts, "region");
  char msg[256];
  if (!v)
    return 0;
  if (!json_is_string(v) || !json_string_length(v) || json_string_length(v) >= 32)
    return gw_kproto_fail(q, SL_ETYPE, "region must be a region name (\"us-east-1\")"), SL_ETYPE;
  int r = gw_sched_check_region(q->g->env.sched, json_string_value(v), msg, sizeof msg);
  return r < 0 ? (gw_kproto_fail(q, r, msg), r) : 0;
}

/* nodes=N (a gang of N instances): a whole number in 1..GW_GANG_MAX, for a
 * train job whose global batch the N ranks can share equally. Sends the
 * error reply itself. */
static int check_nodes(struct gw_kreq *q, const char *kind, const json_t *opts) {
  char msg[192];
  int nodes = gw_place_nodes(opts);
  if (nodes < 0) {
    snprintf(msg, sizeof msg, "nodes must be a whole number from 1 to %d", GW_GANG_MAX);
    return gw_kproto_fail(q, SL_ETYPE, msg), SL_ETYPE;
  }
  if (nodes > 1 && strcmp(kind, "train"))
    return gw_kproto_fail(q, SL_ENOTSUP, "nodes=N applies to train jobs only"), SL_ENOTSUP;
  json_t *b = json_object_get(opts, "batch");
  if (json_is_object(b))
    b = json_object_get(b, "v"); /* a session value */
  /* a batch out of range is the worker's to refuse; only a sane whole number is divided */
  double bv = json_is_number(b) ? json_number_value(b) : 0;
  if (nodes > 1 && bv >= 1 && bv <= 1e9 && (int64_t)bv % nodes) {
    snprintf(msg, sizeof msg, "batch (%lld) must be a multiple of nodes (%d): each of the %d "
             "ranks trains on an equal share of the batch", (long long)json_number_value(b),
             nodes, nodes);
    return gw_kproto_fail(q, SL_ECONFIG, msg), SL_ECONFIG;
  }
  return 0;
}

/* instance=TYPE names only types the user may run on ([group.NAME] or
 * [user.NAME] instance_types), checked at submit so that the refusal says
 * which are allowed. Sends the error reply itself. */
static int check_instance_types(struct gw_kreq *q, const json_t *opts) {
  const char *allowed = gw_config_user_instance_types(q->g->env.cfg, q->c->who.user);
  if (!allowed || !opts)
    return 0;
  struct gw_job tmp = {.spec = json_pack("{s:O}", "options", opts)};
  struct gw_wants w;
  gw_place_wants(&tmp, &w);
  json_decref(tmp.spec);
  gw_place_allow(&w, allowed);
  char msg[1200];
  for (size_t i = 0; i < w.n_types; i++) {
    struct gw_wants only = w;
    only.n_types = 0;
    if (!gw_place_type_allowed(&only, w.types[i])) {
      snprintf(msg, sizeof msg, "instance type %s is not allowed for %s (allowed: %s)", w.types[i],
               q->c->who.user, allowed);
      return gw_kproto_fail(q, SL_ECONFIG, msg), SL_ECONFIG;
    }
  }
  return 0;
}

/* The files of the notebook's machine that a job's data definition names:
 * a text("PATH") file, or the IDX files of a fashion_mnist("FOLDER") that
 * the job reads (sl_ident.h); none for a data set spotlab ships. The paths
 * into paths[SL_IMAGE_SET_FILES][GW_DATA_PATH_MAX]; their number, or
 * SL_ELIMIT for a path too long. */
#define GW_DATA_PATH_MAX 1024
static int data_files(const json_t *def, const char *kind, char paths[][GW_DATA_PATH_MAX], bool *set) {
  const json_t *inner = json_object_get(def, "spec");
  if (json_is_object(inner))
    def = inner;
  const char *type = sl_json_get_str(def, "type", "");
  const json_t *p = json_array_get(json_object_get(def, "args"), 0);
  if (json_is_object(p))
    p = json_object_get(p, "v"); /* a session value */
  const char *path = json_string_value(p);
  *set = !strcmp(type, "fashion_mnist") || !strcmp(type, "fashion-mnist");
  if (!path || path[0] != '/' || (strcmp(type, "text") && !*set))
    return 0;
  if (!*set)
    return snprintf(paths[0], GW_DATA_PATH_MAX, "%s", path) >= GW_DATA_PATH_MAX ? SL_ELIMIT : 1;
  int n = strcmp(kind, "train") ? SL_IMAGE_SET_EVAL_FILES : SL_IMAGE_SET_FILES;
  size_t len = strlen(path);
  while (len > 1 && path[len - 1] == '/')
    len--;
  for (int i = 0; i < n; i++)
    if (snprintf(paths[i], GW_DATA_PATH_MAX, "%.*s/%s", (int)len, path, sl_image_set_files[i]) >=
        GW_DATA_PATH_MAX)
      return SL_ELIMIT;
  return n;
}

/* With uploads on, a train or eval job reads the notebook's data files from
 * the store, where its kernel put them: the request names each upload
 * ("data_files": [{"path","sha256","size"}]), which must be ready, and the
 * job's spec gets their keys ("data_upload"). A request that lacks one is
 * answered with the first file to upload, and no job: 1. 0 when the job
 * goes on, negative when refused (answered). */
static int check_upload(struct gw_kreq *q, struct gw_job *j) {
  char paths[SL_IMAGE_SET_FILES][GW_DATA_PATH_MAX], msg[GW_DATA_PATH_MAX + 200];
  bool set = false;
  int n = q->g->env.uploads ? data_files(json_object_get(j->spec, "data"), j->kind, paths, &set) : 0;
  if (n < 0)
    return gw_kproto_fail(q, SL_ELIMIT, "the data path is too long to upload"), SL_ELIMIT;
  const json_t *files = json_object_get(q->body, "data_files");
  if (files && (!json_is_array(files) || json_array_size(files) > SL_IMAGE_SET_FILES))
    return gw_kproto_fail(q, SL_ETYPE, "data_files must be an array of at most 4 uploads"), SL_ETYPE;
  for (int i = 0; i < n; i++)
    if (!sl_json_find(files, "path", paths[i])) {
      gw_kproto_reply(q, json_pack("{s:{s:s, s:i}}", "upload", "path", paths[i], "chunk_bytes",
                                   GW_UPLOAD_CHUNK_MAX));
      return 1;
    }
  json_t *list = json_array();
  const char *hexes[SL_IMAGE_SET_FILES];
  json_int_t total = 0;
  for (int i = 0; i < n; i++) {
    const json_t *f = sl_json_find(files, "path", paths[i]);
    const char *sha = sl_json_get_str(f, "sha256", "");
    const json_t *size = json_object_get(f, "size");
    char key[GW_UPLOAD_KEY_MAX];
    if (!json_is_integer(size) || json_integer_value(size) < 0 ||
        gw_uploads_ready(q->g->env.uploads, q->c->who.user, sha, (uint64_t)json_integer_value(size), key,
                         sizeof key) < 0) {
      json_decref(list);
      snprintf(msg, sizeof msg, "the data file %s is not uploaded (data.have says when it is)", paths[i]);
      return gw_kproto_fail(q, SL_ESTATE, msg), SL_ESTATE;
    }
    hexes[i] = sha;
    total += json_integer_value(size);
    json_array_append_new(list, json_pack("{s:s, s:s, s:s, s:I}", "name", strrchr(paths[i], '/') + 1, "key", key,
                                          "sha256", sha, "bytes", json_integer_value(size)));
  }
  for (int i = 0; i < n; i++) { /* the user's stored files, as spotlab data lists them */
    const json_t *f = sl_json_find(files, "path", paths[i]);
    int r = gw_store_upload_seen(q->g->env.store, q->c->who.user, hexes[i],
                                 json_integer_value(json_object_get(f, "size")), paths[i], sl_time_real_us());
    if (r < 0)
      sl_debug(T, "%s: the stored file %s is not listed: %s", q->c->who.user, hexes[i], sl_strerror(r));
  }
  if (!set) { /* one file: its own key (the shape of specs stored before data sets) */
    json_t *one = json_array_get(list, 0);
    if (one) {
      json_object_del(one, "name");
      json_object_set(j->spec, "data_upload", one);
    }
  } else if (n > 0) {
    char id[SL_SHA256_HEX_LEN + 1];
    sl_image_set_sha256(hexes, (size_t)n, id);
    json_object_set_new(j->spec, "data_upload",
                        json_pack("{s:s, s:I, s:O}", "sha256", id, "bytes", total, "files", list));
  }
  json_decref(list);
  return 0;
}

/* Fills j from the request; sends the reply itself when it returns other
 * than 0: the error, or (1) what to upload first. */
static int build_job(struct gw_kreq *q, struct gw_job *j) {
  const char *kind = sl_json_get_str(q->body, "kind", "");
  json_t *opts = json_object_get(q->body, "options");
  if (opts && !json_is_object(opts))
    return gw_kproto_fail(q, SL_ETYPE, "options must be an object"), SL_ETYPE;
  if (strcmp(kind, "train") && strcmp(kind, "eval") && strcmp(kind, "sample") && strcmp(kind, "run"))
    return gw_kproto_fail(q, SL_ENAME, "kind must be train, eval, sample or run"), SL_ENAME;
  int bad = check_device_options(q, opts);
  if (bad < 0 || (bad = check_region(q, opts)) < 0 || (bad = check_instance_types(q, opts)) < 0)
    return bad;
  snprintf(j->kind, sizeof j->kind, "%s", kind);
  snprintf(j->user, sizeof j->user, "%s", q->c->who.user);
  snprintf(j->session, sizeof j->session, "%s", q->c->session);
  j->spec = json_pack("{s:o}", "options", opts ? json_incref(opts) : json_object());
  const char *model = sl_json_get_str(q->body, "model", NULL);
  const char *data = sl_json_get_str(q->body, "data", NULL);
  if (!strcmp(kind, "run")) {
    const char *script = sl_json_get_str(q->body, "script", NULL);
    if (!script)
      return gw_kproto_fail(q, SL_ENAME, "run needs a script"), SL_ENAME;
    json_object_set_new(j->spec, "script", json_string(script));
  } else {
    int r = copy_def(q, j->spec, "model", "model", model, j->model, sizeof j->model);
    if (!r && strcmp(kind, "sample"))
      r = copy_def(q, j->spec, "data", "data", data, j->data, sizeof j->data);
    if (!r)
      r = check_model_data(q, j->spec, j->model, j->data);
    if (r < 0)
      return r;
  }
  bool untrained = false;
  if (!strcmp(kind, "eval") || !strcmp(kind, "sample")) {
    json_t *sess = NULL;
    int r = gw_store_session_get(q->g->env.store, q->c->who.user, q->c->session, &sess);
    if (r < 0)
      return gw_kproto_fail(q, r, "cannot read the session's models"), r;
    json_t *m = json_object_get(json_object_get(sess, "models"), j->model);
    const char *ck = sl_json_get_str(m, "checkpoint", "");
    untrained = !*ck;
    snprintf(j->ckpt_key, sizeof j->ckpt_key, "%s", ck);
    j->ckpt_step = sl_json_get_int(m, "step", 0);
    json_object_set_new(j->spec, "checkpoint", json_string(ck));
    json_decref(sess);
  }
  j->steps = sl_json_get_int(opts, "steps", 0);
  char why_offers[900];
  int r = check_nodes(q, kind, opts);
  if (r == 0 && untrained) { /* refused here, before an instance is paid for to find that out */
    char msg[2 * sizeof j->model + 200];
    snprintf(msg, sizeof msg, "model %s has no checkpoint yet: %s needs a trained model (train %s on DATA, "
             "or wait for its training job's first checkpoint)", j->model, kind, j->model);
    return gw_kproto_fail(q, SL_ESTATE, msg), SL_ESTATE;
  }
  /* options no offer fits (instance=, gpus=, max_price=...): refused now, naming the one */
  if (r == 0 && (r = gw_sched_check_offers(q->g->env.sched, j, why_offers, sizeof why_offers)) < 0)
    return gw_kproto_fail(q, r, why_offers), r;
  int seeded = r == 0 ? gw_record_choose_seed(j) : 0;
  if (seeded < 0)
    gw_kproto_fail(q, r = seeded, "options must be an object");
  char why[400];
  if (r == 0 && (r = gw_sched_deadline_check(q->g->env.sched, j, why, sizeof why)) < 0)
    gw_kproto_fail(q, r, why);
  return r == 0 ? check_upload(q, j) : r;
}

/* Submits j (taken) and keeps its run record (body taken); answers the request. */
static void submit_job(struct gw_kreq *q, struct gw_job *j, json_t *body) {
  int r = gw_sched_submit(q->g->env.sched, j);
  if (r < 0) {
    gw_kproto_fail(q, r, r == SL_ELIMIT ? "too many jobs queued" : gw_sched_refusal(q->g->env.sched));
    gw_job_done(j);
    free(j);
    json_decref(body);
    return;
  }
  char id[16];
  gw_job_id_str(j->id, id, sizeof id);
  if (!body || gw_store_record_put(q->g->env.store, j->id, body) < 0)
    sl_warn(T, "%s: its run record could not be written", id); /* the job runs all the same */
  json_decref(body);
  gw_kproto_reply(q, json_pack("{s:s}", "job", id));
}

/* Whether the budgets in force leave the client's user no room for new work
 * (then the error reply is sent). */
static bool refused_by_budget(struct gw_kreq *q) {
  char why[200];
  if (q->g->env.budget && gw_budget_refuses(q->g->env.budget, q->c->who.user, why, sizeof why))
    return gw_kproto_fail(q, SL_ESTATE, why), true;
  if (!q->g->env.budget && gw_ledger_budget_spent(q->g->env.ledger)) /* no keeper: [budget] alone */
    return gw_kproto_fail(q, SL_ESTATE, "the monthly budget is spent ([budget] hard_cap)"), true;
  return false;
}

void gw_kproto_on_submit(struct gw_kreq *q) {
  if (refused_by_budget(q))
    return;
  struct gw_job *j = calloc(1, sizeof *j);
  if (!j)
    return gw_kproto_fail(q, -ENOMEM, NULL);
  if (build_job(q, j) != 0) {
    gw_job_done(j);
    free(j);
    return;
  }
  /* the seed build_job chose, if any, is in the options: said by the body */
  const json_t *given = json_object_get(json_object_get(q->body, "options"), "seed");
  submit_job(q, j, gw_record_body_new(j, !given && json_object_get(
                                              json_object_get(j->spec, "options"), "seed")));
}

/* The run record of a job the client may see (its own; an admin any). */
void gw_kproto_on_record(struct gw_kreq *q) {
  struct gw_job tmp, *j;
  bool live;
  if (!(j = gw_kproto_user_job(q, &tmp, &live)))
    return;
  json_t *rec = NULL;
  int r = gw_record_load(q->g->env.store, j, &rec);
  if (!live)
    gw_job_done(&tmp);
  if (r < 0)
    return gw_kproto_fail(q, r, "cannot read the job's record");
  gw_kproto_reply(q, json_pack("{s:o}", "record", rec));
}

/* A rerun's data files, uploaded for its original, are still stored: 0, or
 * SL_ESTATE with a sentence when one was deleted (spotlab data rm). */
static int still_stored(struct gw_kreq *q, const struct gw_job *j, const char *orig_id, char *msg,
                        size_t msg_size) {
  const json_t *up = json_object_get(j->spec, "data_upload"), *files = json_object_get(up, "files");
  size_t n = json_is_array(files) ? json_array_size(files) : up ? 1 : 0;
  for (size_t i = 0; i < n; i++) {
    const json_t *f = json_is_array(files) ? json_array_get(files, i) : up;
    const char *sha = sl_json_get_str(f, "sha256", "");
    struct gw_store_upload row;
    int r = sl_sha256_hex_ok(sha) ? gw_store_upload_find(q->g->env.store, j->user, sha, &row) : SL_ENAME;
    if (r == 0 && !row.deleting)
      continue;
    if (r < 0 && r != SL_ENAME) {
      snprintf(msg, msg_size, "cannot read the stored data files");
      return r;
    }
    snprintf(msg, msg_size, "the data file %.12s… that %s trained on was deleted (spotlab data rm): run the "
             "cell that defines its data again, which uploads it anew", sha, orig_id);
    return SL_ESTATE;
  }
  return 0;
}

/* The same run again: the job's spec, definitions and seed, as a new job
 * that names the original (rerun_of). Only the job's own user may rerun it
 * (an admin too runs only their own: the run would spend its owner's
 * budget). The worker refuses the run when the data file's hash differs
 * from the one recorded, unless "force". */
void gw_kproto_on_rerun(struct gw_kreq *q) {
  struct gw_job tmp, *orig;
  bool live;
  if (refused_by_budget(q)) /* as a submit */
    return;
  if (!(orig = gw_kproto_user_job(q, &tmp, &live)))
    return;
  char id[16], msg[256];
  gw_job_id_str(orig->id, id, sizeof id);
  bool force = sl_json_get_bool(q->body, "force", false);
  json_t *body = NULL;
  struct gw_job *j = NULL;
  int r = 0;
  if (strcmp(orig->user, q->c->who.user)) {
    snprintf(msg, sizeof msg, "%s is %.64s's job: a user may rerun only their own jobs", id,
             orig->user);
    r = -EPERM;
  } else if ((r = gw_store_record_get(q->g->env.store, orig->id, &body)) < 0 && r != SL_ENAME) {
    snprintf(msg, sizeof msg, "cannot read the record of %s", id);
  } else if (!(j = calloc(1, sizeof *j))) {
    snprintf(msg, sizeof msg, "out of memory");
    r = -ENOMEM;
  } else if ((r = gw_record_rerun_job(orig, body, force, j, msg, sizeof msg)) >= 0 &&
             (r = still_stored(q, j, id, msg, sizeof msg)) >= 0 &&
             (r = gw_sched_deadline_check(q->g->env.sched, j, msg, sizeof msg)) >= 0) {
    json_t *nb = gw_record_body_rerun(gw_record_body_new(j, false), orig, body, force);
    if (json_object_get(body, "seed_from")) /* who chose the seed the rerun repeats */
      json_object_set(nb, "seed_from", json_object_get(body, "seed_from"));
    if (!live)
      gw_job_done(&tmp);
    json_decref(body);
    return submit_job(q, j, nb);
  }
  if (j)
    gw_job_done(j);
  free(j);
  json_decref(body);
  if (!live)
    gw_job_done(&tmp);
  gw_kproto_fail(q, r, msg);
}

