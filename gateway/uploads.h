/* Data files that notebooks upload for workers that cannot read the
 * notebook's machine (protocols.md §1, data.have and data.put).
 *
 * An upload is content-addressed per user: its object is
 * _data/USER/SHA256 in the checkpoint store. Its bytes come in order, in
 * chunks, into state_dir/uploads/USER-SHA256.part, hashed as they come;
 * the last chunk checks the hash and publishes the file on a thread of its
 * own (a file store: moved into its folder; S3: put, then checked with a
 * HEAD). A part left by an earlier start is hashed again on a thread when
 * the same upload is asked about, and goes on from where it stopped. The
 * loop only ever asks; nothing here blocks it on a store. */
#ifndef GW_UPLOADS_H
#define GW_UPLOADS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define GW_UPLOAD_CHUNK_MAX (1024 * 1024) /* bytes per data.put: a frame's most (zmsg.h) */
#define GW_UPLOAD_MAX 64                 /* uploads known at once, every user's */
#define GW_UPLOAD_PER_USER 4             /* a user's uploads under way (sent to in the last minute) */
#define GW_UPLOAD_KEY_MAX 160

struct gw_uploads;
struct gw_objstore;

enum gw_upload_state {
  GW_UPLOAD_RECEIVING,          /* send bytes from offset */
  GW_UPLOAD_CHECKING,           /* looking for the object, or hashing a part left earlier */
  GW_UPLOAD_PUBLISHING,         /* every byte in; being stored */
  GW_UPLOAD_READY,              /* in the store: jobs may use it */
};

struct gw_upload_status {
  enum gw_upload_state state;
  uint64_t offset;              /* RECEIVING: the next byte wanted */
};

/* Uploads into the file store at store_dir (o NULL), or into the S3 store o
 * (borrowed; store_dir NULL). Parts live in state_dir/uploads (created). */
int gw_uploads_new(const char *state_dir, const char *store_dir, struct gw_objstore *o,
                   struct gw_uploads **ret);
/* Waits for the threads under way, then frees. */
struct gw_uploads *gw_uploads_free(struct gw_uploads *u);

/* Where user's upload of size bytes hashing to sha256 (64 lower-case hex)
 * stands; starts a check when it is not known. SL_ETYPE for a malformed
 * hash, SL_ELIMIT when it cannot be taken (no room on the disk, too many
 * uploads under way), SL_EMISMATCH when an upload of that hash under way
 * has another size; a publication that failed is said once, with its
 * error, and forgotten (asking again starts over). A sentence in err. */
int gw_uploads_have(struct gw_uploads *u, const char *user, const char *sha256, uint64_t size,
                    struct gw_upload_status *st, char *err, size_t err_size);

/* Takes len bytes at offset of that upload. Bytes at another offset than
 * the one wanted are not written (st says which is). With the last byte, a
 * hash that is not sha256 is SL_ECHECKSUM and the upload is forgotten;
 * otherwise its publication starts. Errors as gw_uploads_have, and
 * SL_ELIMIT for a chunk over GW_UPLOAD_CHUNK_MAX or past size. */
int gw_uploads_put(struct gw_uploads *u, const char *user, const char *sha256, uint64_t size,
                   uint64_t offset, const void *data, size_t len, struct gw_upload_status *st,
                   char *err, size_t err_size);

/* The store key of user's upload of sha256 once READY, with its size; SL_ESTATE
 * when it is not (or not known: ask gw_uploads_have). */
int gw_uploads_ready(struct gw_uploads *u, const char *user, const char *sha256, uint64_t size,
                     char *key, size_t key_size);

/* Deletes user's stored upload of sha256 (size bytes): its object, on a
 * thread, and a part of it if one was left. Until that has ended the
 * upload reads as CHECKING (so no job takes it); then it is forgotten, and
 * asking about it again looks for it anew. SL_ESTATE while that upload is
 * under way (received, checked or stored), SL_ETYPE for a malformed hash,
 * SL_ELIMIT when no slot is free. */
int gw_uploads_delete(struct gw_uploads *u, const char *user, const char *sha256, uint64_t size,
                      char *err, size_t err_size);

/* A deletion that ended: 0, or the error and a sentence. */
struct gw_upload_deleted {
  char user[64];
  char sha256[65];
  int result;
  char why[300];
};
/* Moves up to max ended deletions into out: their count. */
size_t gw_uploads_take_deleted(struct gw_uploads *u, struct gw_upload_deleted *out, size_t max);

/* Removes the parts of uploads no kernel went on with for a day (at
 * now, wall seconds), closing their slots when idle (at now_mono_us); the
 * gateway calls it every hour, and it runs at each start. */
void gw_uploads_sweep(struct gw_uploads *u, int64_t now_mono_us, time_t now);

/* Waits until no check or publication runs (tests: a settled gateway). */
void gw_uploads_wait(struct gw_uploads *u);

/* "receiving", "checking", "publishing", "ready". */
const char *gw_upload_state_name(enum gw_upload_state s);

/* The store key of user's upload of sha256 ("_data/alice/9f86…"). A user
 * name with bytes other than letters, digits, '.', '_' and '-' (or
 * starting with '.') is replaced by "u-" and 16 hex digits of its SHA-256. */
void gw_upload_key(const char *user, const char *sha256, char *key, size_t key_size);

#endif
