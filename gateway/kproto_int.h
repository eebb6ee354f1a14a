/* The kernel protocol's inside, shared by its files: kproto.c (the
 * handler's life, replies, dispatch and most requests), kclients.c (the
 * client table: hello, the per-connection secret, the per-user limit,
 * closed connections), khub.c (hellos waiting for JupyterHub), kevents.c
 * (event delivery: paced replays, live fan-out, notices), ksubmit.c
 * (submit, run records, reruns) and kupload.c (data.have, data.put). Not
 * for callers: they use kproto.h.
 *
 * A client's slot pointer lives only until the table grows (a hello):
 * nothing keeps one across a call that may add a client. */
#ifndef GW_KPROTO_INT_H
#define GW_KPROTO_INT_H

#include "kproto.h"

#include "access.h"
#include "metrics.h"
#include "sl_log.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GW_KPROTO_TOPIC "gateway.kernel"

#define GW_MAX_CLIENTS 16384    /* every user's connections together */
#define CLIENTS_FIRST 64
#define AUTH_BYTES 32
#define AUTH_HEX (2 * AUTH_BYTES)
#define GW_MAX_ATTACH 64
#define GW_TOKEN_MAX 4095       /* bytes of a hello's token (a token file's first line, as clients read it) */
#define MARKET_MAX 256
#define PENDING_MAX 64          /* hellos waiting for the hub (its checks in flight) */

/* A client's interest in one job's events. While replaying, events after
 * replay_after come from the store at the pace the client reads them (the
 * kernel socket's send queue is bounded); live events of the job are not sent
 * meanwhile, since the store has them too and the replay reaches them in
 * order. A live event the client's queue cannot take starts a replay from it,
 * so no event is ever dropped for a slow client. */
struct gw_attach {
  int64_t job;
  int64_t replay_after;         /* last seq sent, while replaying */
  bool replaying;
  bool follow;                  /* a live job: live events follow the replay */
};

/* A client that said hello. rid_len 0: a free slot. */
struct gw_client {
  uint8_t rid[GW_RID_MAX];
  size_t rid_len;
  char auth[AUTH_HEX + 1];      /* the secret its requests carry */
  int fd;                       /* its connection (monitor events name it); -1 unknown */
  struct gw_viewer who;         /* its user, and whether an admin */
  char session[256];
  struct gw_attach attached[GW_MAX_ATTACH];
  size_t n_attached;
  int64_t last_mono_us;
  int64_t replay_at_mono_us;    /* when to go on replaying; 0: nothing to replay */
  int64_t replay_backoff_us;    /* grows while the client reads nothing */
};

/* A hello whose token the hub is checking. used false: a free slot. */
struct gw_kpending {
  bool used;
  struct gw_kproto *g;
  uint64_t check;               /* gw_hub_check's id */
  uint8_t rid[GW_RID_MAX];
  size_t rid_len;
  int fd;
  json_t *id;                   /* the hello's id (owned), or NULL */
  char session[256];
  char client[32];
};

struct gw_kproto {
  struct gw_kproto_env env;
  struct gw_kpending pending[PENDING_MAX];
  struct gw_client *clients;
  size_t n_clients;             /* slots in use or freed; free ones have rid_len 0 */
  size_t cap_clients;
  int64_t replay_timer;
  int64_t next_replay_mono_us;  /* earliest replay_at_mono_us of any client; INT64_MAX none */
  /* lines that a peer's input causes, each site with its own budget */
  struct sl_log_limit log_wire, log_auth, log_hello;
  int64_t flush_timer;          /* reports what the sites dropped */
  bool flush_armed;
  struct gw_metrics_kreq times; /* request handling times, for /metrics */
};

/* A request being handled. */
struct gw_kreq {
  struct gw_kproto *g;
  struct gw_client *c;          /* NULL before hello */
  const uint8_t *rid;
  size_t rid_len;
  int fd;                       /* the connection it came in on; -1 unknown */
  const json_t *body;
  json_t *id;                   /* echoed as "re" (borrowed; null if absent) */
  const uint8_t *data;          /* data.put: the message's second frame, its bytes; else NULL */
  size_t data_len;
};

/* A line at a rate-limited site; a drop arms the timer that reports it. */
#define LOG_LIMITED(g, site, level, ...)                                      \
  do {                                                                        \
    if (!sl_log_limited(&(g)->site, GW_KPROTO_TOPIC, level, __VA_ARGS__) &&   \
        (g)->site.pending)                                                    \
      gw_kproto_arm_flush(g);                                                 \
  } while (0)

/* kproto.c */
/* Arms the timer that reports what the rate-limited sites dropped. */
void gw_kproto_arm_flush(struct gw_kproto *g);
/* Answers q with fields (taken; NULL: none) and "ok": true. */
void gw_kproto_reply(struct gw_kreq *q, json_t *fields);
/* Answers q with error code and msg (borrowed; NULL: code's own text). */
void gw_kproto_fail(struct gw_kreq *q, int code, const char *msg);
/* Loads the request's "job" if the client may see it (access.h): the live
 * copy, or a store copy in *tmp (the caller frees it when !*ret_live).
 * NULL, and the SL_ENAME reply sent, otherwise. */
struct gw_job *gw_kproto_user_job(struct gw_kreq *q, struct gw_job *tmp, bool *ret_live);
/* Whose rows a request is about: the client's own, or for an admin the
 * "user" it names. NULL, and the failure answered, when a client who is no
 * admin names another user (what: "list another user's sessions"). */
const char *gw_kproto_whose(struct gw_kreq *q, const char *what);

/* kclients.c */
/* Frees c's slot: nothing more goes to its routing id. */
void gw_kproto_client_forget(struct gw_client *c);
/* The client whose request came from rid and carries auth (borrowed, may
 * be NULL), or NULL. A known rid without its secret is forgotten. */
struct gw_client *gw_kproto_client_of(struct gw_kproto *g, const uint8_t *rid, size_t rid_len,
                                      const char *auth);
/* Welcomes user on q's routing id and answers the hello (how: a note for
 * the log line, "" or ", JupyterHub token"). */
void gw_kproto_hello_accept(struct gw_kreq *q, const char *user, const char *session,
                            const char *client, const char *how);
void gw_kproto_on_hello(struct gw_kreq *q);

/* khub.c */
/* Asks the hub about token (a hello's, the store not knowing it) and
 * answers the hello now or when the hub answers. */
void gw_kproto_hub_hello(struct gw_kreq *q, const char *token, const char *session,
                         const char *client);
/* Drops the pending hellos of routing id rid, or of connection fd (>= 0):
 * nothing will answer them. */
void gw_kproto_pending_forget(struct gw_kproto *g, const uint8_t *rid, size_t rid_len, int fd);
/* Drops every pending hello, its check cancelled (the handler's end). */
void gw_kproto_pending_clear(struct gw_kproto *g);

/* kevents.c */
/* The replay timer's callback (data: the kproto). */
int64_t gw_kproto_replay_timer(struct gw_loop *l, int64_t id, int64_t now_us, void *data);
void gw_kproto_on_attach(struct gw_kreq *q);
void gw_kproto_on_detach(struct gw_kreq *q);

/* kupload.c */
void gw_kproto_on_data_have(struct gw_kreq *q);
void gw_kproto_on_data_put(struct gw_kreq *q);
void gw_kproto_on_data_list(struct gw_kreq *q);
void gw_kproto_on_data_delete(struct gw_kreq *q);

/* ksubmit.c */
void gw_kproto_on_submit(struct gw_kreq *q);
void gw_kproto_on_record(struct gw_kreq *q);
void gw_kproto_on_rerun(struct gw_kreq *q);

#endif
