/* A worker's S3 signer: it holds no cloud credentials, so it asks its
 * gateway for each presigned URL (protocols.md §2, presign) over a CURVE
 * connection of its own, request and answer, blocking with a timeout (the
 * store's calls, on their thread) or without waiting (the agent's loop: the
 * signer's ask and take). The store's transfers then go straight to S3. */
#ifndef WK_PRESIGN_H
#define WK_PRESIGN_H

#include "sl_s3.h"

#include <stdbool.h>
#include <stdint.h>

#define WK_PRESIGN_ASKED_MAX 32 /* requests asked without waiting and not yet taken */

struct wk_config;
struct wk_presigner;

/* Connects with cfg's keys to cfg's gateway in zctx (borrowed). */
int wk_presigner_new(const struct wk_config *cfg, void *zctx, struct wk_presigner **ret);
struct wk_presigner *wk_presigner_free(struct wk_presigner *p);
/* Between requests, from the thread that owns p then: the PAIR its
 * connection's monitor feeds (to poll), and the tending of that connection:
 * what the monitor reported read (events: it was readable) and a new
 * connection made when its backoff is over, so that an idle presigner
 * neither keeps a dead connection nor lets libzmq retry a failing handshake
 * ten times a second (link.h). */
void *wk_presigner_monitor(struct wk_presigner *p);
void wk_presigner_tend(struct wk_presigner *p, int64_t now, bool events);
/* The socket answers come in on (to poll between requests; it changes when
 * the connection is replaced), and the reading of what it holds without
 * waiting: answers to requests asked without waiting are kept for their
 * take, copies of requests sent again when due from wk_presigner_tend. */
void *wk_presigner_socket(struct wk_presigner *p);
void wk_presigner_read(struct wk_presigner *p);
/* The signer for wk_store_open (borrowing p). */
struct sl_s3_signer wk_presigner_signer(struct wk_presigner *p);

#endif
