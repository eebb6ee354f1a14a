/* JSON messages on the gateway's ROUTER sockets: one routing-id frame and
 * one JSON frame. The one place the gateway writes such a message. */
#ifndef GW_ZMSG_H
#define GW_ZMSG_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* The gateway protocols' bounds, kernel and worker sockets alike: one JSON
 * frame of at most GW_FRAME_MAX bytes nested at most GW_JSON_DEPTH deep. */
#define GW_FRAME_MAX (1u << 20)
#define GW_JSON_DEPTH 32

/* Sends msg (borrowed) to the peer rid on ROUTER socket sock without
 * blocking. -EAGAIN when the peer's queue is full (ZMQ_ROUTER_MANDATORY),
 * -EHOSTUNREACH when the peer is gone, -ENOMEM. */
int gw_zmsg_send(void *sock, const uint8_t *rid, size_t rid_len, const json_t *msg);

#endif
