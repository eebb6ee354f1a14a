/* The kernel protocol's data uploads (protocols.md §1, data.have and
 * data.put): a notebook's data file, in chunks, for workers that cannot
 * read the notebook's machine (uploads.h). A submit whose text("PATH") such
 * workers could not read is answered with "upload" instead of a job
 * (ksubmit.c); the kernel uploads, then submits again naming the hash. */
#include "kproto_int.h"

#include "sl_err.h"
#include "sl_json.h"
#include "uploads.h"

#include <stdio.h>
#include <string.h>

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

static void answer(struct gw_kreq *q, int r, const struct gw_upload_status *st, const char *err) {
  if (r < 0)
    return gw_kproto_fail(q, r, err);
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
  answer(q, r, &st, err);
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
  answer(q, r, &st, err);
}
