/* The kernel protocol's data uploads (protocols.md §1, data.have and
 * data.put): a notebook's data file, in chunks, for workers that cannot
 * read the notebook's machine (uploads.h). A submit whose text("PATH") such
 * workers could not read is answered with "upload" instead of a job
 * (ksubmit.c); the kernel uploads, then submits again naming the hash. */
#include "kproto_int.h"

#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"
#include "fleet.h"
#include "uploads.h"

#include <stdio.h>
#include <string.h>

#define T GW_KPROTO_TOPIC

/* The request's sha256 and size; SL_ETYPE (answered) when malformed. */
static int upload_args(struct gw_kreq *q, const char **sha, uint64_t *size) {
  const json_t *s = json_object_get(q->body, "size");
  *sha = sl_json_get_str(q->body, "sha256", "");
  if (!q->g->env.uploads)
    return gw_kproto_fail(q, SL_ENOTSUP, "this gateway's workers read the notebook's files: "
                          "it takes no uploads ([store] upload_data)"), SL_ENOTSUP;
  if (!json_is_integer(s) || json_integer_value(s) < 0)
    return gw_kproto_fail(q, SL_ETYPE, "size must be a whole number of bytes"), SL_ETYPE;
  *size = (uint64_t)json_integer_value(s);
  return 0;
}

/* The reply; a file found stored gets its row (listed by data.list before
 * any submit names it). */
static void answer(struct gw_kreq *q, int r, const struct gw_upload_status *st, const char *err, const char *sha,
                   uint64_t size) {
  if (r < 0)
    return gw_kproto_fail(q, r, err);
  if (st->state == GW_UPLOAD_READY &&
      gw_store_upload_stored(q->g->env.store, q->c->who.user, sha, (int64_t)size, sl_time_real_us()) < 0)
    sl_debug(T, "%s: the stored file %s is not listed yet", q->c->who.user, sha);
  gw_kproto_reply(q, json_pack("{s:s, s:I}", "state", gw_upload_state_name(st->state), "offset",
                               (json_int_t)st->offset));
}

void gw_kproto_on_data_have(struct gw_kreq *q) {
  const char *sha;
  uint64_t size;
  if (upload_args(q, &sha, &size) < 0)
    return;
  struct gw_upload_status st;
  char err[400] = "";
  int r = gw_uploads_have(q->g->env.uploads, q->c->who.user, sha, size, &st, err, sizeof err);
  answer(q, r, &st, err, sha, size);
}

/* The chunk's bytes come as the message's second frame: binary, so that
 * nothing encodes or scans them on the way. */
void gw_kproto_on_data_put(struct gw_kreq *q) {
  const char *sha;
  uint64_t size;
  if (upload_args(q, &sha, &size) < 0)
    return;
  const json_t *off = json_object_get(q->body, "offset");
  if (!json_is_integer(off) || json_integer_value(off) < 0 || (uint64_t)json_integer_value(off) > size)
    return gw_kproto_fail(q, SL_ETYPE, "offset must be a whole number of bytes, at most size");
  if (!q->data)
    return gw_kproto_fail(q, SL_EWIRE, "data.put carries the chunk's bytes as the message's second frame");
  struct gw_upload_status st;
  char err[400] = "";
  int r = gw_uploads_put(q->g->env.uploads, q->c->who.user, sha, size, (uint64_t)json_integer_value(off),
                         q->data, q->data_len, &st, err, sizeof err);
  answer(q, r, &st, err, sha, size);
}

/* user's stored data files, with the jobs that named each (an admin: any
 * user's, "user"). */
void gw_kproto_on_data_list(struct gw_kreq *q) {
  const char *user = gw_kproto_whose(q, "list another user's stored data files");
  if (!user)
    return;
  json_t *list = NULL;
  int r = gw_store_uploads_list(q->g->env.store, user, &list);
  if (r < 0)
    return gw_kproto_fail(q, r, "cannot read the stored data files");
  gw_kproto_reply(q, json_pack("{s:o, s:b}", "uploads", list, "uploads_on", q->g->env.uploads != NULL));
}

/* Whether j's data is the stored file sha256 (or one file of its data set). */
static bool job_uses(const struct gw_job *j, const char *sha256) {
  const json_t *up = json_object_get(j->spec, "data_upload");
  if (!strcmp(sl_json_get_str(up, "sha256", ""), sha256))
    return true;
  size_t i;
  const json_t *f;
  json_array_foreach(json_object_get(up, "files"), i, f) {
    if (!strcmp(sl_json_get_str(f, "sha256", ""), sha256))
      return true;
  }
  return false;
}

/* A stored data file deleted ("sha256": its hash, or enough of its start
 * to name one): its object goes on a thread, and its row once that is
 * done; meanwhile no job may take it, and asking for it again uploads it
 * anew. Refused while a job that has not ended uses it. */
void gw_kproto_on_data_delete(struct gw_kreq *q) {
  const char *user = gw_kproto_whose(q, "delete another user's stored data files");
  if (!user)
    return;
  char who[sizeof q->c->who.user];
  snprintf(who, sizeof who, "%s", user);
  if (!q->g->env.uploads)
    return gw_kproto_fail(q, SL_ENOTSUP, "this gateway takes no uploads ([store] upload_data): it cannot "
                          "delete stored data files");
  const char *prefix = sl_json_get_whole_str(q->body, "sha256", NULL);
  if (!prefix)
    return gw_kproto_fail(q, SL_ETYPE, "data.delete needs \"sha256\"");
  struct gw_store_upload up;
  char msg[600];
  int r = gw_store_upload_find(q->g->env.store, who, prefix, &up);
  if (r == SL_ETYPE)
    return gw_kproto_fail(q, r, "sha256 must be 6 to 64 lower-case hex digits of a stored file's hash");
  if (r == SL_ENAME || r == SL_EMISMATCH) {
    snprintf(msg, sizeof msg, r == SL_ENAME ? "%.64s has no stored data file %.64s" :
             "%.64s has several stored data files whose hash starts %.64s: give more of it", who, prefix);
    return gw_kproto_fail(q, r, msg);
  }
  if (r < 0)
    return gw_kproto_fail(q, r, "cannot read the stored data files");
  for (size_t i = 0; i < gw_fleet_n_jobs(q->g->env.fleet); i++) {
    struct gw_job *j = gw_fleet_job_at(q->g->env.fleet, i);
    if (!j || strcmp(j->user, who) || gw_job_state_final(j->state) || !job_uses(j, up.sha256))
      continue;
    char id[16];
    snprintf(msg, sizeof msg, "%.300s (%.12s…) is the data of %s, which is %s: delete it once that job has "
             "ended", up.path, up.sha256, gw_job_id_str(j->id, id, sizeof id), gw_job_state_name(j->state));
    return gw_kproto_fail(q, SL_ESTATE, msg);
  }
  if (!up.deleting) {
    if ((r = gw_store_upload_deleting(q->g->env.store, who, up.sha256, true)) < 0)
      return gw_kproto_fail(q, r, "cannot record the deletion");
    char err[400] = "";
    if ((r = gw_uploads_delete(q->g->env.uploads, who, up.sha256, (uint64_t)up.bytes, err, sizeof err)) < 0) {
      gw_store_upload_deleting(q->g->env.store, who, up.sha256, false);
      return gw_kproto_fail(q, r, err);
    }
    sl_info(T, "%s: deleting the stored data file %s (%.300s, %lld bytes)%s%s", who, up.sha256,
            up.path, (long long)up.bytes, strcmp(who, q->c->who.user) ? ", asked by the admin " : "",
            strcmp(who, q->c->who.user) ? q->c->who.user : "");
  }
  gw_kproto_reply(q, json_pack("{s:s, s:s, s:I}", "deleted", up.sha256, "path", up.path, "bytes",
                               (json_int_t)up.bytes));
}
