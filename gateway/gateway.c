/* The gateway object: start-up, wiring and the loop.
 *
 * One thread. Everything that wakes the gateway is registered on one event
 * loop (loop.h): the ZAP handler, the kernel ROUTER and the worker ROUTER
 * (CURVE), each provider's descriptors and timers, and the housekeeping
 * timer. The ZAP socket is bound before the worker socket so that no CURVE
 * handshake is ever judged without it. Handlers never block: provider
 * calls return once a request is made.
 *
 * Wiring: the scheduler reports on the bus; the kernel protocol (fan-out
 * and notices), the cost ledger and the webhooks subscribe to it. The calls between the
 * modules go one way: kproto and wproto call the scheduler, idle and the
 * ledger; idle calls the scheduler; the scheduler calls the fleet and the
 * providers; nothing calls back up. */
#include "gateway.h"

#include "bundle.h"
#include "bus.h"
#include "carbon.h"
#include "conf.h"
#include "fleet.h"
#include "http.h"
#include "httpc.h"
#include "hub.h"
#include "idle.h"
#include "keeper.h"
#include "keys.h"
#include "kproto.h"
#include "budget.h"
#include "ledger.h"
#include "loop.h"
#include "metrics.h"
#include "objstore.h"
#include "provider.h"
#include "queue.h"
#include "scheduler.h"
#include "store.h"
#include "webhook.h"
#include "wproto.h"
#include "zmsg.h"

#include "sl_err.h"
#include "sl_frame.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_path.h"
#include "sl_sigpipe.h"
#include "sl_time.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#define T "gateway"
#define HOUSEKEEPING_US (200 * SL_US_PER_MS)
#define BATCH 64                /* messages read per socket per turn */
/* How long a stopping gateway waits for the workers it stopped to exit: the
 * local provider's grace before SIGKILL, and a margin. */
#define STOP_DRAIN_US (8 * SL_US_PER_S)
#define REPLY_LINGER_MS 1000    /* a stopping gateway's last replies still go out */

struct gw {
  const struct gw_config *cfg;
  bool signalled;               /* gw_run ended by SIGTERM or SIGINT */
  struct gw_config *cfg_own;    /* the same, for the hub's group lookup (set and cleared) */
  struct gw_loop *loop;
  struct gw_httpc *http;
  struct gw_hub *hub;           /* [hub]: hello takes JupyterHub tokens; NULL without */
  struct gw_store *store;
  struct gw_queue *queue;
  struct gw_fleet *fleet;
  struct gw_bus bus;
  struct gw_sched *sched;
  struct gw_ledger *ledger;
  struct gw_metrics_tally *tally;     /* /metrics' counters from the bus */
  struct gw_carbon *carbon;           /* NULL: no table, no estimates */
  struct gw_carbon_sink carbon_sink;
  struct gw_budget *budget;
  struct gw_idle *idle;
  struct gw_kproto *kproto;
  struct gw_wproto *wproto;
  struct gw_httpd *httpd;       /* [gateway] http; NULL without */
  struct gw_webhooks *webhooks; /* [webhook.NAME] posts */
  void *zctx, *ksock, *wsock, *zap;
  void *kmon;                   /* the kernel socket's closed connections (kproto) */
  bool bound_k, bound_w;        /* listen and workers bound: their ipc files are ours */
  struct gw_keypair keys;
  char train_program[1024];
  char worker_address[512];     /* what workers connect to */
  char gateway_id[20];          /* stable: from the gateway's public key (tags) */
  struct gw_objstore *objstore; /* [store] url when it is s3:// */
  struct gw_bundle *bundle;     /* published when a provider's instances need it */
  struct gw_keeper *keeper;     /* the purge thread, notebooks' data files */
  int64_t started_us;
};

/* A workers address a local worker can connect to (a wildcard bind becomes loopback). */
static void worker_address(const char *bind, char *ret, size_t size) {
  if (!strncmp(bind, "tcp://0.0.0.0:", 14))
    snprintf(ret, size, "tcp://127.0.0.1:%s", bind + 14);
  else if (!strncmp(bind, "tcp://*:", 8))
    snprintf(ret, size, "tcp://127.0.0.1:%s", bind + 8);
  else
    snprintf(ret, size, "%s", bind);
}

static int bind_sockets(struct gw *g, char *err, size_t err_size) {
  int zero = 0, one = 1;
  g->zap = zmq_socket(g->zctx, ZMQ_REP);
  if (!g->zap || zmq_bind(g->zap, "inproc://zeromq.zap.01") < 0) {
    snprintf(err, err_size, "ZAP handler: %s", zmq_strerror(zmq_errno()));
    return SL_EZMQ;
  }
  g->ksock = zmq_socket(g->zctx, ZMQ_ROUTER);
  g->wsock = zmq_socket(g->zctx, ZMQ_ROUTER);
  if (!g->ksock || !g->wsock)
    return SL_EZMQ;
  zmq_setsockopt(g->ksock, ZMQ_LINGER, &zero, sizeof zero);
  zmq_setsockopt(g->wsock, ZMQ_LINGER, &zero, sizeof zero);
  /* a full client queue says EAGAIN instead of dropping silently: event
   * replays wait for the client to read (kproto.c) */
  zmq_setsockopt(g->ksock, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
  int64_t maxmsg = (int64_t)GW_FRAME_MAX * 16; /* larger ones get an error reply */
  zmq_setsockopt(g->ksock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
  zmq_setsockopt(g->wsock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
  zmq_setsockopt(g->wsock, ZMQ_CURVE_SERVER, &one, sizeof one);
  zmq_setsockopt(g->wsock, ZMQ_CURVE_SECRETKEY, g->keys.secret_z85, GW_Z85_KEY_LEN);
  zmq_setsockopt(g->wsock, ZMQ_ZAP_DOMAIN, "spotlab", 7);
  if (zmq_bind(g->ksock, g->cfg->listen) < 0) {
    snprintf(err, err_size, "cannot listen on %s: %s", g->cfg->listen, zmq_strerror(zmq_errno()));
    return SL_EZMQ;
  }
  g->bound_k = true;
  /* kproto forgets a client whose connection closed: its routing id may be
   * another peer's next */
  if (zmq_socket_monitor(g->ksock, "inproc://spotlab.kernel-monitor", ZMQ_EVENT_DISCONNECTED) < 0 ||
      !(g->kmon = zmq_socket(g->zctx, ZMQ_PAIR)) ||
      zmq_connect(g->kmon, "inproc://spotlab.kernel-monitor") < 0) {
    snprintf(err, err_size, "kernel socket monitor: %s", zmq_strerror(zmq_errno()));
    return SL_EZMQ;
  }
  zmq_setsockopt(g->kmon, ZMQ_LINGER, &zero, sizeof zero);
  if (zmq_bind(g->wsock, g->cfg->workers) < 0) {
    snprintf(err, err_size, "cannot listen for workers on %s: %s", g->cfg->workers,
             zmq_strerror(zmq_errno()));
    return SL_EZMQ;
  }
  g->bound_w = true;
  return 0;
}

/* ZeroMQ leaves an ipc:// socket's file behind when the socket closes: a
 * gateway that stops removes the files it bound, so that a client finds no
 * socket file rather than one nobody listens on (what a killed gateway
 * leaves). Not an abstract address (ipc://@NAME), which has no file. */
static void remove_ipc_file(const char *addr) {
  if (!strncmp(addr, "ipc://", 6) && addr[6] && addr[6] != '@' && unlink(addr + 6) < 0 &&
      errno != ENOENT)
    sl_warn(T, "cannot remove %s: %s", addr + 6, strerror(errno));
}

static void user_removed(const char *name, void *data) {
  (void)data;
  sl_warn(T, "user %s is not in the configuration (or has no token_sha256): their token is"
          " refused from now on; their jobs and data are kept", name);
}

/* The users who may log in are exactly the configuration's users with a
 * token (the embedded gateway's own user among them): a user removed from
 * the file loses access at the next start. */
static int sync_users(struct gw *g, char *err, size_t err_size) {
  struct gw_store_user users[GW_MAX_USERS];
  size_t n = 0;
  for (size_t i = 0; i < g->cfg->n_users; i++) {
    const struct gw_user_cfg *u = &g->cfg->users[i];
    if (u->token_sha256[0])
      users[n++] = (struct gw_store_user){u->name, u->token_sha256, u->group};
  }
  int r = gw_store_users_sync(g->store, users, n, user_removed, NULL);
  if (r < 0) {
    snprintf(err, err_size, "cannot record the configuration's users: %s", sl_strerror(r));
    return r;
  }
  if (r > GW_STORE_USERS_REPORTED)
    sl_warn(T, "%d more users lost access", r - GW_STORE_USERS_REPORTED);
  return 0;
}

static int open_state(struct gw *g, char *err, size_t err_size) {
  const char *dir = g->cfg->state_dir;
  char path[1200];
  int r = sl_mkdir_p(dir, 0700);
  if (r < 0) {
    snprintf(err, err_size, "%s: %s", dir, sl_strerror(r));
    return r;
  }
  snprintf(path, sizeof path, "%s/instances", dir);
  sl_mkdir_p(path, 0700);
  snprintf(path, sizeof path, "%s/gateway.key", dir);
  bool had_key = access(path, F_OK) == 0;
  if ((r = gw_keys_load_or_create(path, &g->keys, err, err_size)) < 0)
    return r;
  snprintf(path, sizeof path, "%s/gateway.db", dir);
  struct stat st;
  /* the key is made before the database, which holds its schema from the
   * first start on: an empty one beside an earlier key lost what it held */
  if (had_key && stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0) {
    snprintf(err, err_size,
             "%s is empty, while gateway.key is from an earlier start: the gateway's records (jobs, "
             "sessions, costs) are gone from it. Restore it from a backup, or remove it to start "
             "with none",
             path);
    return SL_ESQLITE;
  }
  if ((r = gw_store_open(path, &g->store, err, err_size)) < 0)
    return r;
  return sync_users(g, err, err_size);
}

/* Opens every provider the config enables. One that cannot open (a file it
 * reads is missing or malformed, spotlab-worker is not found) stops the
 * start with its reason: it would not open later either, and jobs would
 * wait for it without end. One that is off (local with slots = 0) says so
 * with an empty reason; a gateway with no provider still serves clients. */
static int open_providers(struct gw *g, char *err, size_t err_size) {
  for (size_t i = 0; i < g->cfg->n_providers; i++) {
    const char *name = g->cfg->providers[i].name;
    const struct gw_provider_class *cls = gw_provider_find(name);
    if (!cls) {
      sl_warn(T, "no provider named \"%s\" in this gateway", name);
      continue;
    }
    struct gw_provider_env env = {.cfg = g->cfg, .state_dir = g->cfg->state_dir,
                                  .gateway_id = g->gateway_id,
                                  .store_url = g->cfg->store_url[0] ? g->cfg->store_url : NULL,
                                  .loop = g->loop, .http = g->http,
                                  .on_event = gw_sched_provider_event,
                                  .userdata = g->sched};
    char perr[512] = "";
    struct gw_provider *p = cls->open(&env, perr, sizeof perr);
    if (!p && perr[0]) {
      snprintf(err, err_size, "provider %s: %s", name, perr);
      return SL_ECONFIG;
    }
    if (!p) {
      sl_info(T, "provider %s is off", name);
      continue;
    }
    p->name = cls->name;
    if (gw_sched_add_provider(g->sched, p) < 0) {
      p->ops->destroy(p);
      sl_warn(T, "provider %s left out: too many providers", name);
    }
  }
  if (!gw_sched_n_providers(g->sched))
    sl_warn(T, "no provider; jobs will wait in the queue");
  for (size_t i = 0; i < gw_sched_n_providers(g->sched); i++)
    if (gw_sched_provider_at(g->sched, i)->simulated && g->cfg->n_users > 1)
      sl_warn(T, "provider %s runs every user's jobs on this machine as this gateway's own OS user: a "
                 "job's script can read the gateway's state and the other users' data; for users who "
                 "trust each other only (docs/security.md)", gw_sched_provider_at(g->sched, i)->name);
  return 0;
}

/* The worker bundle, published on a thread when a provider's instances need
 * it: after the keeper took what a killed run left open (the bundle's
 * upload among it), so that its own upload's record is not taken for one. */
static void start_bundle(struct gw *g) {
  bool needs_bundle = false;
  for (size_t i = 0; i < gw_sched_n_providers(g->sched); i++)
    needs_bundle |= gw_sched_provider_at(g->sched, i)->needs_bundle;
  if (needs_bundle && !g->objstore)
    sl_warn(T, "a provider needs the worker bundle but [store] url is not s3://; its launches wait");
  else if (needs_bundle && gw_bundle_start(g->objstore, g->cfg->state_dir, &g->bundle) < 0)
    sl_warn(T, "cannot start publishing the worker bundle; launches that need it wait");
  gw_sched_set_bundle(g->sched, g->bundle);
}

/* The types [user.NAME] and [group.NAME] instance_types name are ones the
 * providers offer: checked once every enabled provider is open and shows
 * its types (one that is not might offer a name the others lack). */
static int check_allowed_types(struct gw *g, char *err, size_t err_size) {
  size_t n_provs = gw_sched_n_providers(g->sched), n = 0;
  if (n_provs < g->cfg->n_providers)
    return 0;
  const char **names = NULL;
  for (size_t i = 0; i < n_provs; i++) {
    struct gw_provider *p = gw_sched_provider_at(g->sched, i);
    const struct gw_instance_type *t = NULL;
    size_t nt = 0;
    const char **more = p->ops->market(p, &t, &nt) < 0 || !nt
                            ? NULL : realloc(names, (n + nt) * sizeof *names);
    if (!more) {
      free(names);
      return 0;
    }
    names = more;
    for (size_t k = 0; k < nt; k++)
      names[n++] = t[k].name;
  }
  int r = gw_config_check_offered(g->cfg, names, n, err, err_size);
  free(names);
  return r;
}

/* "gw-" and the first 16 hex digits of the SHA-256 of the public key: the
 * same across restarts, different for every gateway. */
static void make_gateway_id(struct gw *g) {
  unsigned char h[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(h, (const unsigned char *)g->keys.public_z85, strlen(g->keys.public_z85));
  char *p = g->gateway_id + snprintf(g->gateway_id, sizeof g->gateway_id, "gw-");
  for (int i = 0; i < 8; i++)
    p += sprintf(p, "%02x", h[i]);
}

/* The S3 store, when [store] url names one; its region from [store] region,
 * else [provider.aws] region, else the first of [provider.aws] regions, else
 * the environment. */
static int open_objstore(struct gw *g, char *err, size_t err_size) {
  const char *region = g->cfg->store_region;
  char first[64] = "";
  if (!*region) {
    const char *aws = gw_provider_find("aws") ? gw_config_provider_option(g->cfg, "aws", "region") : NULL;
    if (aws && !*aws) /* set to nothing, or not set */
      aws = NULL;
    const char *list = !aws && gw_provider_find("aws")
                           ? gw_config_provider_option(g->cfg, "aws", "regions") : NULL;
    if (list && *list) { /* "us-east-1, us-west-2": the first */
      snprintf(first, sizeof first, "%.*s", (int)strcspn(list + strspn(list, " \t,"), " \t,"),
               list + strspn(list, " \t,"));
      aws = first;
    }
    region = aws ? aws : "";
  }
  int r = gw_objstore_open(g->cfg->store_url, region, &g->objstore, err, err_size);
  gw_objstore_set_part_bytes(g->objstore, (uint64_t)g->cfg->store_part_mib << 20);
  return r;
}

static bool more_in(void *sock) {
  int ev = 0;
  size_t sz = sizeof ev;
  return zmq_getsockopt(sock, ZMQ_EVENTS, &ev, &sz) == 0 && (ev & ZMQ_POLLIN);
}

/* One of the gateway's three sockets is readable: reads up to BATCH
 * messages, so one busy socket cannot starve the others. */
static void on_socket(struct gw_loop *l, int fd, void *sock, int events, void *data) {
  (void)l; (void)fd; (void)events;
  struct gw *g = data;
  for (int i = 0; i < BATCH; i++) {
    if (sock == g->zap)
      gw_wproto_zap(g->wproto);
    else if (sock == g->ksock)
      gw_kproto_recv(g->kproto, sock);
    else if (sock == g->kmon)
      gw_kproto_drain(g->kproto);
    else
      gw_wproto_recv(g->wproto);
    if (!more_in(sock))
      break;
  }
}

static int64_t housekeeping(struct gw_loop *l, int64_t id, int64_t now_us, void *data) {
  (void)id;
  struct gw *g = data;
  gw_sched_housekeeping(g->sched);
  gw_idle_check(g->idle, sl_time_mono_us());
  gw_budget_check(g->budget, false);
  gw_keeper_turn(g->keeper, sl_time_mono_us());
  if (gw_idle_gateway_due(g->idle, gw_kproto_n_clients(g->kproto), sl_time_mono_us())) {
    size_t n = gw_idle_stop_workers(g->idle, "the idle gateway stopped");
    sl_info(T, "no client and no job for %lld s ([idle] gateway_timeout): stopping %zu workers"
            " and the gateway; its state is kept, and the next kernel starts it again",
            (long long)(g->cfg->gateway_timeout_us / SL_US_PER_S), n);
    gw_loop_stop(l);
    return GW_LOOP_NOMORE;
  }
  return now_us + HOUSEKEEPING_US;
}

/* Instances the providers still run that the fleet has let go of: the
 * ones a stop just terminated, on their way out. */
static size_t exiting_instances(struct gw *g) {
  size_t running = 0;
  for (size_t i = 0; i < gw_sched_n_providers(g->sched); i++) {
    struct gw_provider *p = gw_sched_provider_at(g->sched, i);
    struct gw_instance_info *list = NULL;
    size_t n = 0;
    if (!p->ops->list || p->ops->list(p, &list, &n) < 0)
      continue;
    for (size_t k = 0; k < n; k++)
      running += list[k].running && !gw_fleet_inst(g->fleet, list[k].instance_id);
    free(list);
  }
  return running;
}

/* After a stop from inside ended the loop: no new requests; the workers a stop terminated get
 * the turns their provider needs to see them exit (and to kill one that
 * does not), up to STOP_DRAIN_US. Workers that run a job are not waited
 * for: they keep running. */
static void drain(struct gw *g) {
  gw_loop_del_zsock(g->loop, g->ksock);
  int linger = REPLY_LINGER_MS;
  zmq_setsockopt(g->ksock, ZMQ_LINGER, &linger, sizeof linger);
  int64_t until = sl_time_mono_us() + STOP_DRAIN_US;
  size_t n;
  while ((n = exiting_instances(g)) && sl_time_mono_us() < until)
    if (gw_loop_run_once(g->loop, 100 * SL_US_PER_MS) < 0)
      break;
  gw_loop_run_once(g->loop, 0); /* the providers' due turns: what they saw exit is cleaned up */
  if (n)
    sl_warn(T, "%zu stopped workers had not exited after %lld s", n,
            (long long)(STOP_DRAIN_US / SL_US_PER_S));
}

static int client_send(void *ctx, const uint8_t *rid, size_t rid_len, const json_t *msg) {
  struct gw *g = ctx;
  return gw_zmsg_send(g->ksock, rid, rid_len, msg);
}

/* The metrics' tally and the carbon estimate listen on the bus. The tally
 * starts from the store's history (so it comes before the jobs load); a
 * missing or bad carbon table only turns the estimate off. */
static int open_observers(struct gw *g, char *err, size_t err_size) {
  if (!(g->tally = gw_metrics_tally_new(g->store, err, err_size)))
    return SL_ESQLITE;
  char path[4096], why[512];
  int r = gw_carbon_default_path(path, sizeof path);
  if (r == 0 && (r = gw_carbon_load(path, &g->carbon, why, sizeof why)) < 0)
    sl_warn(T, "no energy estimates: %s", why);
  else if (r < 0)
    sl_warn(T, "no energy estimates: carbon.json not found (share/spotlab or source tree)");
  g->carbon_sink = (struct gw_carbon_sink){.table = g->carbon, .store = g->store, .fleet = g->fleet};
  if ((r = gw_bus_subscribe(&g->bus, GW_METRICS_SINK_KINDS, gw_metrics_sink, g->tally)) < 0 ||
      (r = gw_bus_subscribe(&g->bus, GW_BUS_COST, gw_carbon_sink, &g->carbon_sink)) < 0)
    return r;
  return 0;
}

int gw_new(struct gw_config *cfg, struct gw **ret, char *err, size_t err_size) {
  struct gw *g = calloc(1, sizeof *g);
  if (!g)
    return -ENOMEM;
  g->cfg = g->cfg_own = cfg;
  g->started_us = sl_time_real_us();
  gw_bus_init(&g->bus);
  int r = -ENOMEM;
  g->loop = gw_loop_new();
  g->queue = gw_queue_new();
  if (!g->loop || !g->queue || !(g->http = gw_httpc_new(g->loop)))
    goto fail;
  if ((r = gw_hub_new(cfg, g->http, &g->hub, err, err_size)) < 0)
    goto fail;
  if (g->hub) { /* hub users' groups, for idle timeouts and the rest */
    cfg->runtime_group = gw_hub_user_group;
    cfg->runtime_group_ctx = g->hub;
    sl_info(T, "hello takes JupyterHub tokens, checked at %s", gw_hub_url(g->hub));
  }
  if ((r = open_state(g, err, err_size)) < 0)
    goto fail;
  worker_address(cfg->workers, g->worker_address, sizeof g->worker_address);
  if (sl_find_program("spotlab-train", g->train_program, sizeof g->train_program) < 0)
    g->train_program[0] = 0;
  r = -ENOMEM;
  g->fleet = gw_fleet_new(g->store, GW_QUEUE_MAX);
  g->ledger = gw_ledger_new(cfg, g->store);
  struct gw_sched_env se = {.cfg = cfg, .store = g->store, .fleet = g->fleet, .queue = g->queue,
                            .loop = g->loop, .bus = &g->bus, .worker_address = g->worker_address,
                            .gateway_public = g->keys.public_z85,
                            .train_program = g->train_program};
  if (!g->fleet || !g->ledger || !(g->sched = gw_sched_new(&se)))
    goto fail;
  if (!(g->idle = gw_idle_new(cfg, g->fleet, g->sched, &g->bus)))
    goto fail;
  struct gw_budget_env be = {.cfg = cfg, .store = g->store, .ledger = g->ledger, .fleet = g->fleet,
                             .sched = g->sched, .bus = &g->bus};
  gw_ledger_set_pending(g->ledger, gw_sched_cost_pending, g->sched);
  if (!(g->budget = gw_budget_new(&be)))
    goto fail;
  make_gateway_id(g);
  if ((r = open_objstore(g, err, err_size)) < 0)
    goto fail;
  if ((r = open_providers(g, err, err_size)) < 0 || (r = check_allowed_types(g, err, err_size)) < 0)
    goto fail;
  struct gw_keeper_env pe = {.cfg = cfg, .store = g->store, .fleet = g->fleet, .sched = g->sched,
                             .objstore = g->objstore, .bus = &g->bus};
  if ((r = gw_keeper_new(&pe, &g->keeper)) < 0)
    goto fail;
  start_bundle(g);
  r = -ENOMEM;
  g->zctx = zmq_ctx_new();
  if (!g->zctx)
    goto fail;
  if ((r = bind_sockets(g, err, err_size)) < 0)
    goto fail;
  struct gw_kproto_env ke = {.cfg = cfg, .store = g->store, .fleet = g->fleet, .queue = g->queue,
                             .sched = g->sched, .idle = g->idle, .ledger = g->ledger,
                             .loop = g->loop, .send = client_send, .send_ctx = g, .monitor = g->kmon,
                             .hub = g->hub, .started_us = g->started_us, .budget = g->budget,
                             .uploads = gw_keeper_uploads(g->keeper),
                             .purge = gw_keeper_purge(g->keeper)};
  r = -ENOMEM;
  if (!(g->kproto = gw_kproto_new(&ke)) ||
      !(g->wproto = gw_wproto_new(cfg, g->store, g->fleet, g->sched, g->wsock, g->zap)))
    goto fail;
  gw_fleet_set_transport(g->fleet, gw_wproto_transport, g->wproto);
  gw_wproto_set_objstore(g->wproto, g->objstore);
  if ((r = gw_bus_subscribe(&g->bus, GW_BUS_JOB_EVENT | GW_BUS_NOTICE, gw_kproto_sink,
                            g->kproto)) < 0 ||
      (r = gw_bus_subscribe(&g->bus, GW_BUS_COST, gw_ledger_sink, g->ledger)) < 0 ||
      (r = gw_bus_subscribe(&g->bus, GW_BUS_COST, gw_budget_sink, g->budget)) < 0)
    goto fail;
  struct gw_webhooks_env we = {.cfg = cfg, .loop = g->loop, .http = g->http};
  r = -ENOMEM;
  if (!(g->webhooks = gw_webhooks_new(&we)) ||
      (r = gw_bus_subscribe(&g->bus, GW_WEBHOOK_BUS_KINDS, gw_webhooks_sink, g->webhooks)) < 0)
    goto fail;
  if ((r = open_observers(g, err, err_size)) < 0)
    goto fail;
  if ((r = gw_loop_add_zsock(g->loop, g->zap, GW_LOOP_READ, on_socket, g)) < 0 ||
      (r = gw_loop_add_zsock(g->loop, g->ksock, GW_LOOP_READ, on_socket, g)) < 0 ||
      (r = gw_loop_add_zsock(g->loop, g->kmon, GW_LOOP_READ, on_socket, g)) < 0 ||
      (r = gw_loop_add_zsock(g->loop, g->wsock, GW_LOOP_READ, on_socket, g)) < 0)
    goto fail;
  struct gw_httpd_env he = {.cfg = cfg, .store = g->store, .fleet = g->fleet, .ledger = g->ledger,
                            .kproto = g->kproto, .loop = g->loop, .started_us = g->started_us,
                            .budget = g->budget, .webhooks = g->webhooks,
                            .tally = g->tally};
  if (cfg->http[0] && (r = gw_httpd_new(&he, &g->httpd, err, err_size)) < 0)
    goto fail;
  int64_t t = gw_loop_add_timer(g->loop, sl_time_mono_us(), housekeeping, g);
  if (t < 0) {
    r = (int)t;
    goto fail;
  }
  if ((r = gw_sched_load(g->sched)) < 0) {
    snprintf(err, err_size, "cannot load the jobs and instances from the store: %s (%s)",
             sl_strerror(r), gw_store_last_error(g->store));
    goto fail;
  }
  if ((r = gw_keeper_start(g->keeper)) < 0)
    goto fail;
  sl_info(T, "listening on %s (kernels) and %s (workers)", cfg->listen, cfg->workers);
  *ret = g;
  return 0;
fail:
  if (!err[0])
    snprintf(err, err_size, "%s", sl_strerror(r));
  gw_free(g);
  return r;
}

/* SIGTERM or SIGINT: the loop ends after this turn, without the drain. */
static void on_signal(struct gw_loop *loop, int fd, void *sock, int events, void *data) {
  struct gw *g = data;
  (void)fd;
  (void)sock;
  (void)events;
  int sig = sl_sigpipe_drain();
  if (sig) {
    sl_info(T, "signal %d: stopping", sig);
    g->signalled = true;
    gw_loop_stop(loop);
  }
}

int gw_run(struct gw *g, int signal_fd) {
  int r;
  if (signal_fd >= 0 && (r = gw_loop_add_fd(g->loop, signal_fd, GW_LOOP_READ, on_signal, g)) < 0) {
    sl_err(T, "cannot watch for signals: %s", sl_strerror(r));
    return r;
  }
  gw_sched_kick(g->sched);
  r = gw_loop_run(g->loop, NULL);
  if (signal_fd >= 0)
    gw_loop_del_fd(g->loop, signal_fd);
  if (r < 0)
    sl_err(T, "poll: %s", sl_strerror(r));
  if (r >= 0 && !g->signalled) /* stopped from inside, not by a signal */
    drain(g);
  if (gw_fleet_n_insts(g->fleet))
    sl_info(T, "shutting down; %zu workers keep running and re-register on the next start",
            gw_fleet_n_insts(g->fleet));
  else
    sl_info(T, "shutting down");
  for (size_t i = 0; i < gw_fleet_n_jobs(g->fleet); i++)
    gw_sched_flush_cost(g->sched, gw_fleet_job_at(g->fleet, i), true);
  return r < 0 ? r : 0;
}

struct gw *gw_free(struct gw *g) {
  if (!g)
    return NULL;
  gw_httpd_free(g->httpd);      /* reads kproto and webhooks */
  gw_kproto_free(g->kproto);
  gw_wproto_free(g->wproto);
  gw_objstore_stop(g->objstore); /* what its threads send to S3 stops; done again at the next start */
  g->bundle = gw_bundle_free(g->bundle);
  gw_keeper_stop(g->keeper);     /* its threads may use the S3 store */
  gw_objstore_free(g->objstore);
  if (g->ksock && g->kmon)
    zmq_socket_monitor(g->ksock, NULL, 0);
  if (g->kmon)
    zmq_close(g->kmon);
  if (g->ksock)
    zmq_close(g->ksock);
  if (g->wsock)
    zmq_close(g->wsock);
  if (g->zap)
    zmq_close(g->zap);
  if (g->zctx)
    sl_zmq_ctx_term(g->zctx);
  if (g->bound_k)
    remove_ipc_file(g->cfg->listen);
  if (g->bound_w)
    remove_ipc_file(g->cfg->workers);
  gw_idle_free(g->idle);
  gw_budget_free(g->budget);    /* the scheduler's hold */
  gw_sched_free(g->sched);      /* destroys the providers */
  if (g->hub && g->cfg->runtime_group_ctx == g->hub) {
    g->cfg_own->runtime_group = NULL;
    g->cfg_own->runtime_group_ctx = NULL;
  }
  gw_hub_free(g->hub);          /* after kproto, which cancels its checks */
  gw_webhooks_free(g->webhooks); /* after the bus's last sources; cancels on http */
  gw_httpc_free(g->http);
  gw_ledger_free(g->ledger);
  gw_metrics_tally_free(g->tally);
  gw_carbon_free(g->carbon);
  gw_fleet_free(g->fleet);
  gw_queue_free(g->queue);
  gw_keeper_free(g->keeper);     /* after the bus's last sources */
  gw_store_free(g->store);
  gw_loop_free(g->loop);
  free(g);
  return NULL;
}
