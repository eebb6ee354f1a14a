/* presign (protocols.md §2): URLs of the gateway's S3 store, signed for a
 * worker, for keys under its own jobs' prefixes only (and, to read, the
 * checkpoints of the run whose checkpoint an assign told it to restore:
 * that one, or an older one when it is gone or corrupt). The URLs go to
 * the connection that asked (a worker's store has a connection of its
 * own). */
#include "wproto_int.h"

#include "objstore.h"
#include "store.h"

#include "sl_err.h"
#include "sl_ident.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>

#define T "gateway.worker"

/* The prefixes a worker may reach: "J000003/" for each job attempt it runs,
 * and, read-only, "J000001/ckpt-" for the checkpoint key an assign told it
 * to restore ("J000001/ckpt-00000400.tc"): the checkpoints of that run, and
 * the key of the data file a job's notebook uploaded ("_data/alice/SHA"). */
#define PRESIGN_PREFIXES 32
#define RESTORE_MAX (6 * PRESIGN_PREFIXES) /* a checkpoint and up to four data files a job */
struct reach {
  char own[PRESIGN_PREFIXES][16];
  const char *own_p[PRESIGN_PREFIXES];
  size_t n_own;
  char restore[RESTORE_MAX][sizeof ((struct gw_job *)0)->ckpt_key];
  const char *restore_p[RESTORE_MAX];
  size_t n_restore;
};

static void reach_of(struct gw_wproto *g, struct gw_inst *in, struct reach *r) {
  memset(r, 0, sizeof *r);
  for (size_t i = 0; i < gw_fleet_n_jobs(g->fleet) && r->n_own < PRESIGN_PREFIXES; i++) {
    struct gw_job *j = gw_fleet_job_at(g->fleet, i);
    if (!j || gw_sched_rank(j, in) < 0)
      continue;
    char id[16];
    snprintf(r->own[r->n_own], sizeof r->own[0], "%s/", gw_job_id_str(j->id, id, sizeof id));
    r->own_p[r->n_own] = r->own[r->n_own];
    r->n_own++;
    const char *slash = strrchr(j->ckpt_key, '/');
    if (j->ckpt_key[0] && slash) {
      snprintf(r->restore[r->n_restore], sizeof r->restore[0], "%.*sckpt-", (int)(slash - j->ckpt_key + 1),
               j->ckpt_key);
      r->restore_p[r->n_restore] = r->restore[r->n_restore];
      r->n_restore++;
    }
    /* the data file, or each file of a data set, its notebook uploaded */
    const json_t *up = json_object_get(j->spec, "data_upload"), *files = json_object_get(up, "files");
    size_t n_keys = json_is_array(files) ? json_array_size(files) : 1;
    for (size_t k = 0; k < n_keys && r->n_restore < RESTORE_MAX; k++) {
      const char *data = json_string_value(json_object_get(files ? json_array_get(files, k) : up, "key"));
      if (data && strlen(data) < sizeof r->restore[0]) {
        snprintf(r->restore[r->n_restore], sizeof r->restore[0], "%s", data);
        r->restore_p[r->n_restore] = r->restore[r->n_restore];
        r->n_restore++;
      }
    }
  }
}

static void presigned_error(struct gw_wproto *g, const uint8_t *rid, size_t rid_len, json_t *id,
                            int code, const char *message) {
  json_t *m = json_pack("{s:s, s:O, s:{s:s, s:s}}", "type", "presigned", "id", id ? id : json_null(),
                        "error", "code", sl_errname(code), "message", message);
  if (m)
    gw_wproto_send_raw(g, rid, rid_len, m);
  json_decref(m);
}

/* Presigned URLs grant access: wiped before their memory goes. */
static void wipe_urls(char **urls, size_t n) {
  for (size_t i = 0; i < n; i++) {
    sodium_memzero(urls[i], strlen(urls[i]));
    free(urls[i]);
  }
}

/* The multipart uploads whose parts in is given URLs for, each once: the
 * gateway aborts any that in's worker leaves unfinished (purge.h). SL_ELIMIT
 * (a sentence in err) for a new one past GW_MULTIPART_PER_INSTANCE: no URL
 * then. A row the store cannot take for another reason is logged, and the
 * URLs go out even so. */
static int note_multipart(struct gw_wproto *g, const struct gw_inst *in,
                          const struct sl_s3_presign_req *q, size_t n, char *err, size_t err_size) {
  for (size_t i = 0; i < n; i++) {
    if (q[i].op != SL_S3_MPU_PART)
      continue;
    bool again = false;
    for (size_t k = 0; k < i && !again; k++)
      again = q[k].op == SL_S3_MPU_PART && !strcmp(q[k].upload_id, q[i].upload_id);
    int r = again ? 0 : gw_store_multipart_seen(g->store, in->row.id, q[i].key, q[i].upload_id,
                                                  sl_time_real_us(), GW_MULTIPART_PER_INSTANCE);
    if (r == SL_ELIMIT) {
      snprintf(err, err_size, "%d multipart uploads of this instance are under way or unfinished; "
               "no more until its checkpoints are stored", GW_MULTIPART_PER_INSTANCE);
      return r;
    }
    if (r < 0)
      sl_warn(T, "%s: the multipart upload of %s is not recorded (%s): the gateway cannot abort it "
              "if the worker does not finish it", in->row.id, q[i].key, sl_strerror(r));
  }
  return 0;
}

/* presign: {"id":N,"requests":[{"op","key","upload_id","part","sha256","continuation"}]}
 * answered with {"type":"presigned","id":N,"urls":[...]} or an error, to the
 * connection that asked (a worker's store has a connection of its own). */
void gw_wproto_on_presign(struct gw_wproto *g, struct gw_inst *in, const uint8_t *rid, size_t rid_len,
                       const json_t *body) {
  json_t *id = json_object_get(body, "id");
  json_t *reqs = json_object_get(body, "requests");
  if (!g->objstore) {
    presigned_error(g, rid, rid_len, id, SL_ENOTSUP, "this gateway's store is not S3");
    return;
  }
  size_t n = json_array_size(reqs);
  if (!json_is_array(reqs) || n == 0 || n > GW_PRESIGN_MAX) {
    presigned_error(g, rid, rid_len, id, SL_EWIRE, "\"requests\" must be an array of 1 to 64 requests");
    return;
  }
  struct sl_s3_presign_req q[GW_PRESIGN_MAX];
  struct reach reach;
  reach_of(g, in, &reach);
  bool read_only_ok = true;
  for (size_t i = 0; i < n; i++) {
    json_t *e = json_array_get(reqs, i);
    int op = sl_s3_op_from_name(sl_json_get_str(e, "op", ""));
    json_t *part = json_object_get(e, "part");
    q[i] = (struct sl_s3_presign_req){
      .op = op < 0 ? SL_S3_OPS_ : (enum sl_s3_op)op, .key = sl_json_get_str(e, "key", NULL),
      .upload_id = sl_json_get_str(e, "upload_id", NULL),
      .part = json_is_integer(part) && json_integer_value(part) > 0 && json_integer_value(part) <= 10000
                  ? (int)json_integer_value(part) : 0,
      .sha256 = sl_json_get_str(e, "sha256", NULL),
      .continuation = sl_json_get_str(e, "continuation", NULL)};
    if (!json_is_object(e) || op < 0 || !q[i].key) {
      presigned_error(g, rid, rid_len, id, SL_EWIRE, "each request needs a known \"op\" and a \"key\"");
      return;
    }
    if (q[i].sha256 && !sl_sha256_hex_ok(q[i].sha256)) {
      presigned_error(g, rid, rid_len, id, SL_EWIRE, "\"sha256\" must be 64 lowercase hex digits");
      return;
    }
    bool restore = false;
    for (size_t k = 0; k < reach.n_restore; k++)
      restore |= !strncmp(q[i].key, reach.restore[k], strlen(reach.restore[k]));
    read_only_ok &= restore && (q[i].op == SL_S3_GET || q[i].op == SL_S3_HEAD || q[i].op == SL_S3_LIST);
  }
  char *urls[GW_PRESIGN_MAX];
  char err[256] = "";
  /* a checkpoint to restore from may belong to another job (sample m): the
   * checkpoints of its run, to read; otherwise the prefixes of the
   * instance's jobs */
  int r = read_only_ok
              ? gw_objstore_presign_for(g->objstore, q, n, reach.restore_p, reach.n_restore, urls, err,
                                        sizeof err)
              : gw_objstore_presign_for(g->objstore, q, n, reach.own_p, reach.n_own, urls, err,
                                        sizeof err);
  if (r < 0) {
    sl_warn(T, "%s: presign refused: %s", in->row.id, err);
    presigned_error(g, rid, rid_len, id, r, err);
    return;
  }
  if ((r = note_multipart(g, in, q, n, err, sizeof err)) < 0) {
    wipe_urls(urls, n);
    sl_warn(T, "%s: presign refused: %s", in->row.id, err);
    presigned_error(g, rid, rid_len, id, r, err);
    return;
  }
  json_t *list = json_array();
  for (size_t i = 0; i < n; i++)
    json_array_append_new(list, json_string(urls[i]));
  wipe_urls(urls, n);
  json_t *m = json_pack("{s:s, s:O, s:o}", "type", "presigned", "id", id ? id : json_null(), "urls", list);
  if (m)
    gw_wproto_send_raw(g, rid, rid_len, m);
  json_decref(m);
}
