/* Shared by the worker protocol's files: wproto_gate.c (the gatekeeper:
 * ZAP and the socket), wproto.c (the messages of a job's life) and
 * wproto_presign.c (presigned store URLs for a worker's own jobs). Nothing
 * else includes this header. */
#ifndef GW_WPROTO_INT_H
#define GW_WPROTO_INT_H

#include "wproto.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct gw_wproto {
  const struct gw_config *cfg;
  struct gw_store *store;
  struct gw_fleet *fleet;
  struct gw_sched *sched;
  void *wsock, *zap;
  struct gw_objstore *objstore;
  uint64_t dropped_unknown;     /* messages from unknown instances since the last line about them */
  int64_t dropped_logged_us;    /* monotonic; 0: none logged yet */
};

/* Sends msg (borrowed) to the connection rid, an instance's or not yet. */
void gw_wproto_send_raw(struct gw_wproto *w, const uint8_t *rid, size_t rid_len, const json_t *msg);
/* Answers a refused message on the connection rid:
 * {"type":"error","error":{"code","message"}}; nothing without a rid. */
void gw_wproto_refuse(struct gw_wproto *g, const uint8_t *rid, size_t rid_len, int code, const char *message);
/* presign (protocols.md §2) from in, answered on the connection rid. */
void gw_wproto_on_presign(struct gw_wproto *g, struct gw_inst *in, const uint8_t *rid, size_t rid_len,
                          const json_t *body);

#endif
