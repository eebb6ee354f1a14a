/* Uploading a job statement's data file to the gateway before it takes the
 * job (upload.c): for jobs.c, which submits the job and routes the replies.
 *
 * The upload belongs to the running statement's follow (jobs_int.h) and
 * ends with it; every function here works on ip->running. */
#ifndef JK_UPLOAD_H
#define JK_UPLOAD_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "interp_int.h"

struct jk_upload;

/* The submit reply asked for the data file first (ask, borrowed: its
 * "upload" object, {"path","chunk_bytes"}): hashes the file and sends
 * data.have. An ask for a file the statement uploaded already fails it;
 * another file of its data set is uploaded next. */
enum jk_step jk_upload_start(struct jk_interp *ip, const json_t *ask);
/* The reply (borrowed, or NULL) to request id, a data.have or data.put
 * (OP_DATA); error as jk_gw_handler's. Sends the next requests, waits to
 * poll, or submits again with data_files once the gateway has the file. */
enum jk_step jk_upload_reply(struct jk_interp *ip, int64_t id, const json_t *reply, const char *error);
/* Whether id is one of the running upload's data.put requests in flight
 * (the statement's gw_req is the oldest of them). */
bool jk_upload_owns(const struct jk_interp *ip, int64_t id);
/* Monotonic µs of the running upload's next poll, or INT64_MAX. */
int64_t jk_upload_wake_at_us(const struct jk_interp *ip);
/* Polls (data.have) when that time came; may end the statement. */
void jk_upload_tick(struct jk_interp *ip);
/* Records the Interrupted error of a statement stopped while uploading. */
void jk_upload_interrupted(struct jk_interp *ip);
/* Closes the file; NULL. NULL is a no-op. */
struct jk_upload *jk_upload_free(struct jk_upload *u);

#endif
