/* The worker protocol (protocols.md §2) and its gatekeeper: messages from
 * workers on the CURVE socket, and the ZAP handler that admits only keys
 * of instances in the fleet. What a message changes goes through the
 * scheduler; the fleet sends the answers (this module gives it its
 * transport, gw_wproto_transport). */
#ifndef GW_WPROTO_H
#define GW_WPROTO_H

#include "conf.h"
#include "fleet.h"
#include "scheduler.h"
#include "store.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct gw_wproto;

/* An owned protocol handler over the worker ROUTER socket wsock and the
 * ZAP REP socket zap (both borrowed; NULL in tests that call
 * gw_wproto_handle), or NULL. */
/* The S3 store whose URLs workers ask for (presign); NULL (the default):
 * presign requests are refused. Borrowed. */
struct gw_objstore;
void gw_wproto_set_objstore(struct gw_wproto *w, struct gw_objstore *o);

struct gw_wproto *gw_wproto_new(const struct gw_config *cfg, struct gw_store *store,
                                struct gw_fleet *fleet, struct gw_sched *sched, void *wsock,
                                void *zap);
struct gw_wproto *gw_wproto_free(struct gw_wproto *w);
/* Reads and handles one message from the worker socket, if any. */
void gw_wproto_recv(struct gw_wproto *w);
/* Answers one ZAP request, if any. */
void gw_wproto_zap(struct gw_wproto *w);
/* The fleet's transport over the worker socket (ctx: the gw_wproto). */
int gw_wproto_transport(void *ctx, const uint8_t *rid, size_t rid_len, const json_t *msg);
/* Handles body (borrowed), a message from the worker of instance in that
 * arrived on the connection rid: what gw_wproto_recv does once a message
 * is read and its sender admitted. */
void gw_wproto_handle(struct gw_wproto *w, struct gw_inst *in, const uint8_t *rid, size_t rid_len,
                      const json_t *body);

#endif
