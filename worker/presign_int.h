/* The reading of the gateway's presign answers (presign.c), reachable by
 * the tests that feed answers without a gateway (the fuzz target replies).
 * An answer is the JSON of one frame, parsed as presign.c parses it
 * (sl_json_parse, depth 8). */
#ifndef WK_PRESIGN_INT_H
#define WK_PRESIGN_INT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* The id of a presigned answer v (borrowed, may be NULL); 0 for anything
 * else. */
int64_t wk_presign_answer_id(const json_t *v);
/* Takes ans (owned): its n URLs into ret_urls (each owned), or the
 * gateway's refusal in err: SL_EAUTH when the gateway said so, SL_EWIRE for
 * any other refusal and for an answer that is not n URLs. */
int wk_presign_answer_urls(json_t *ans, size_t n, char **ret_urls, char *err, size_t err_size);

#endif
