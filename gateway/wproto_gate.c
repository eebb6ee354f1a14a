/* The worker protocol's gatekeeper (protocols.md §2): the ZAP handler
 * admits a CURVE client only if its public key belongs to a live instance,
 * and names that instance as the connection's User-Id; messages are read
 * off the worker socket (bounded frames, a JSON object) and handed to
 * gw_wproto_handle as that instance's. A malformed message is logged and,
 * from an admitted worker, answered with an `error` message; one from an
 * instance the fleet no longer holds is dropped and counted. */
#include "wproto.h"
#include "wproto_int.h"

#include "zmsg.h"

#include "sl_err.h"
#include "sl_frame.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define T "gateway.worker"
#define DROP_LOG_EVERY_US SL_US_PER_S

int gw_wproto_transport(void *ctx, const uint8_t *rid, size_t rid_len, const json_t *msg) {
  struct gw_wproto *w = ctx;
  if (!w->wsock)
    return -ENOTCONN;
  return gw_zmsg_send(w->wsock, rid, rid_len, msg);
}

/* Sends to a connection that may not be an instance's yet (errors,
 * reregister). Through the fleet's transport, as every other send to a
 * worker: a transport set with gw_fleet_set_transport sees these too. */
void gw_wproto_send_raw(struct gw_wproto *w, const uint8_t *rid, size_t rid_len, const json_t *msg) {
  int r = gw_fleet_send_rid(w->fleet, rid, rid_len, msg);
  if (r < 0)
    sl_debug("gateway.zmq", "send dropped: %s", sl_strerror(r));
}

/* Answers a refused message: {"type":"error","error":{"code","message"}}. */
void gw_wproto_refuse(struct gw_wproto *g, const uint8_t *rid, size_t rid_len, int code, const char *message) {
  if (!rid_len)
    return;
  char fixed[1024];
  json_t *m = json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "code", sl_errname(code),
                        "message", sl_utf8_text(message, fixed, sizeof fixed));
  if (m)
    gw_wproto_send_raw(g, rid, rid_len, m);
  json_decref(m);
}

static void zap_reply(struct gw_wproto *g, zmq_msg_t *reqid, const char *code, const char *text,
                      const char *user) {
  zmq_send(g->zap, "1.0", 3, ZMQ_SNDMORE);
  zmq_send(g->zap, zmq_msg_data(reqid), zmq_msg_size(reqid), ZMQ_SNDMORE);
  zmq_send(g->zap, code, strlen(code), ZMQ_SNDMORE);
  zmq_send(g->zap, text, strlen(text), ZMQ_SNDMORE);
  zmq_send(g->zap, user, strlen(user), ZMQ_SNDMORE);
  zmq_send(g->zap, "", 0, 0);
}

/* One ZAP request: version, request id, domain, address, routing id,
 * mechanism, credentials... */
void gw_wproto_zap(struct gw_wproto *g) {
  zmq_msg_t f[8];
  int n = 0;
  int more = 1;
  while (more) {
    zmq_msg_t tmp;
    zmq_msg_init(&tmp);
    if (zmq_msg_recv(&tmp, g->zap, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&tmp);
      break;
    }
    more = zmq_msg_more(&tmp);
    if (n < 8)
      f[n++] = tmp;
    else
      zmq_msg_close(&tmp);
  }
  if (n < 6) {
    for (int i = 0; i < n; i++)
      zmq_msg_close(&f[i]);
    return;
  }
  char address[64] = "";
  snprintf(address, sizeof address, "%.*s", (int)zmq_msg_size(&f[3]), (char *)zmq_msg_data(&f[3]));
  const char *id = NULL;
  if (zmq_msg_size(&f[5]) == 5 && !memcmp(zmq_msg_data(&f[5]), "CURVE", 5) && n >= 7 &&
      zmq_msg_size(&f[6]) == 32) {
    char z85[GW_Z85_KEY_LEN + 1];
    if (zmq_z85_encode(z85, zmq_msg_data(&f[6]), 32)) {
      struct gw_inst *in = gw_fleet_inst_by_key(g->fleet, z85);
      id = in ? in->row.id : NULL;
    }
  }
  if (id) {
    sl_debug(T, "worker %s admitted from %s", id, address);
    zap_reply(g, &f[1], "200", "OK", id);
  } else {
    sl_warn(T, "refused a worker connection from %s: its key is not registered",
            address[0] ? address : "(unknown address)");
    zap_reply(g, &f[1], "400", "unknown key", "");
  }
  for (int i = 0; i < n; i++)
    zmq_msg_close(&f[i]);
}

struct wmsg {
  uint8_t rid[GW_RID_MAX];
  size_t rid_len;
  char user_id[64];             /* the instance the ZAP handler admitted */
  json_t *body;
};

/* Reads one message; returns 0 with m->body set, or a negative error after
 * consuming the whole message. */
static int recv_msg(struct gw_wproto *g, struct wmsg *m) {
  int nframes = 0, more = 1, r = 0;
  size_t body_len = 0;
  char *body = NULL;
  while (more) {
    zmq_msg_t f;
    zmq_msg_init(&f);
    if (zmq_msg_recv(&f, g->wsock, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&f);
      r = r ? r : sl_err_from_zmq(zmq_errno());
      break;
    }
    more = zmq_msg_more(&f);
    const char *uid = zmq_msg_gets(&f, "User-Id");
    if (uid && !m->user_id[0])
      snprintf(m->user_id, sizeof m->user_id, "%s", uid);
    size_t sz = zmq_msg_size(&f);
    if (nframes == 0) {
      if (sz > GW_RID_MAX)
        r = SL_EWIRE;
      else {
        memcpy(m->rid, zmq_msg_data(&f), sz);
        m->rid_len = sz;
      }
    } else if (nframes == 1 && sz <= GW_FRAME_MAX) {
      body = malloc(sz + 1);
      if (body) {
        memcpy(body, zmq_msg_data(&f), sz);
        body_len = sz;
      }
    } else {
      r = SL_ELIMIT;
    }
    if (nframes == 1 && sz > GW_FRAME_MAX)
      r = SL_ELIMIT;
    nframes++;
    zmq_msg_close(&f);
  }
  if (!r && !body)
    r = nframes < 2 ? SL_EWIRE : -ENOMEM;
  if (!r) {
    char why[128];
    r = sl_json_parse(body, body_len, GW_JSON_DEPTH, &m->body, why, sizeof why);
    if (!r && !json_is_object(m->body)) {
      json_decref(m->body);
      m->body = NULL;
      r = SL_EJSON;
    }
  }
  free(body);
  return r;
}

/* A message from a worker whose instance the fleet no longer holds (gone
 * while the worker still flushed what it had): one log line per
 * DROP_LOG_EVERY_US for them all, with their count, not one per message. */
static void dropped_unknown(struct gw_wproto *g, const char *user_id) {
  int64_t now = sl_time_mono_us();
  g->dropped_unknown++;
  if (g->dropped_logged_us && now - g->dropped_logged_us < DROP_LOG_EVERY_US)
    return;
  sl_warn(T, "%llu message(s) from instances the gateway does not know dropped (the latest from "
          "%.31s)", (unsigned long long)g->dropped_unknown,
          user_id[0] ? user_id : "an unnamed worker");
  g->dropped_unknown = 0;
  g->dropped_logged_us = now;
}

void gw_wproto_recv(struct gw_wproto *g) {
  struct wmsg m;
  memset(&m, 0, sizeof m);
  int r = recv_msg(g, &m);
  struct gw_inst *in = m.user_id[0] ? gw_fleet_inst(g->fleet, m.user_id) : NULL;
  if (r < 0) {
    if (r != -EAGAIN) {
      sl_warn(T, "dropped a malformed message from %s: %s", in ? in->row.id : "a worker",
              sl_strerror(r));
      /* Only an admitted worker is answered; its routing id came with the message. */
      if (in)
        gw_wproto_refuse(g, m.rid, m.rid_len, r, sl_strerror(r));
    }
    return;
  }
  if (!in) {
    dropped_unknown(g, m.user_id);
    json_decref(m.body);
    return;
  }
  gw_wproto_handle(g, in, m.rid, m.rid_len, m.body);
  json_decref(m.body);
}
