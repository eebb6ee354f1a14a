/* The records of the gateway's own multipart uploads to S3 (the data files
 * notebooks upload, the worker bundle), so that an upload a killed gateway
 * left open is aborted at its next start rather than billed until the
 * bucket's lifecycle rule acts. */
#ifndef GW_MPU_NOTES_H
#define GW_MPU_NOTES_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

/* state_dir/uploads: the records, and the parts of the data uploads under
 * way (uploads.h). */
void gw_mpu_notes_dir(const char *state_dir, char *dir, size_t size);

/* The record of one of the gateway's own multipart uploads to S3 while it
 * is under way: state_dir/uploads/NAME-XXXXXX.mpu (NAME: the data file's
 * USER-SHA256, or "bundle"), from its start (before any part)
 * until it is completed or aborted, for gw_mpu_notes_left_open at the next
 * start. Pass gw_mpu_note_event as sl_s3_opts.mpu_event with the note as
 * its ud, one note per upload at a time. */
struct gw_mpu_note {
  char dir[PATH_MAX];           /* state_dir/uploads, made at the first record */
  char name[192];
  char path[PATH_MAX];          /* the record of the upload under way; "" none */
};
/* A note whose records go into state_dir's folder (gw_mpu_notes_dir), or into dir. */
void gw_mpu_note_init(struct gw_mpu_note *n, const char *state_dir, const char *name);
void gw_mpu_note_in(struct gw_mpu_note *n, const char *dir, const char *name);
int gw_mpu_note_event(void *ud, const char *key, const char *upload_id, bool open);

/* The multipart uploads (data files, the worker bundle) that an earlier run
 * with state_dir began in S3 and did not end (it was killed): fn gets each one's key and
 * upload id, and a record fn takes (returns 0 or more for) is forgotten;
 * one it refuses is offered again at the next start. Call before any
 * publication starts. The count taken (0 with no parts folder), or an
 * error. */
int gw_mpu_notes_left_open(const char *state_dir,
                           int (*fn)(void *ud, const char *key, const char *upload_id), void *ud);

#endif
