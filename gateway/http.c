/* The HTTP server: routing, bearer-token authentication and the JSON
 * views of the gateway's state.
 *
 * libmicrohttpd runs without a thread of its own (no
 * MHD_USE_INTERNAL_POLLING_THREAD) and with epoll: its one epoll descriptor
 * is watched on the gateway's loop and MHD_run() is called when it is
 * readable or when MHD's own timeout (idle connections) is due. Each request
 * is answered within the call that received it, so nothing here waits.
 *
 * Authentication is the kernel protocol's: a token whose SHA-256 names a
 * user of the configuration ([user.NAME] token_sha256). A user sees only
 * their own jobs, instances and costs; an admin ([user.NAME] admin = yes)
 * sees everyone's (access.h) and may ask for one user's with ?user=.
 * Another user's job answers 404 as one that does not exist; another
 * user's costs (?user=) answer 403. Errors are JSON,
 * {"error": {"code", "message"}}.
 * JupyterHub tokens are not taken here. Plain HTTP only: TLS is a reverse
 * proxy's job. */
#include "http.h"

#include "access.h"
#include "config.h"
#include "http_api.h"
#include "http_budget.h"
#include "job.h"
#include "metrics.h"
#include "record.h"
#include "sl_err.h"
#include "sl_file.h"
#include "sl_hmac.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define T "gateway.http"
/* What one client can hold (docs/security.md): a quarter of the
 * connections per address, so that one address idling or trickling bytes
 * leaves the rest to Prometheus, the admin page and a proxy; a new
 * connection's request head must come within REQUEST_TIMEOUT_S of
 * silence, and a connection that has been answered idles at most
 * CONNECTION_TIMEOUT_S (longer: a scrape or a poll reuses it). A proxy in
 * front of the gateway is one address for all its clients. */
#define CONNECTIONS_MAX 128
#define CONNECTIONS_PER_ADDRESS_MAX 32
#define REQUEST_TIMEOUT_S 10
#define CONNECTION_TIMEOUT_S 30
#define CONNECTION_MEMORY_BYTES (64 * 1024)
#define TOKEN_MAX 1024
#define JOBS_MAX 1000
#define EVENTS_MAX 1000
#define COST_ROWS_MAX 1000
#define BODY_MAX 4096           /* a PUT's body */

struct gw_httpd {
  struct gw_httpd_env env;
  struct MHD_Daemon *d;
  int epoll_fd;
  int64_t timer;                /* MHD's timeout on the loop; 0: none */
  int port;
  struct gw_metrics_http stats;
};

/* An answer being built: status code, owned body, content type. */
struct answer {
  unsigned code;
  char *body;
  size_t len;
  const char *type;
  const char *allow;            /* 405: the methods the resource takes */
  const char *etag;             /* an admin page file: cached, revalidated by its tag */
};

/* A request's body as it comes in (PUT), kept with the connection. */
struct upload {
  char data[BODY_MAX];
  size_t len;
  bool too_big;
};

static void answer_json(struct answer *a, unsigned code, json_t *v) {
  a->code = code;
  a->type = "application/json";
  a->body = v ? sl_json_dump(v, &a->len) : NULL;
  json_decref(v);
  if (!a->body) {
    a->code = MHD_HTTP_INTERNAL_SERVER_ERROR;
    a->body = strdup("{\"error\":{\"code\":500,\"message\":\"out of memory\"}}");
    a->len = a->body ? strlen(a->body) : 0;
  }
}

static void answer_err(struct answer *a, unsigned code, const char *msg) {
  char fixed[1024];
  answer_json(a, code, json_pack("{s:{s:i,s:s}}", "error", "code", (int)code, "message",
                                 sl_utf8_text(msg, fixed, sizeof fixed)));
}

/* The user of an "Authorization: Bearer TOKEN" header; false (and a 401
 * in a) without one, or for a token no user holds. */
static bool authenticate(struct gw_httpd *h, struct MHD_Connection *c, struct gw_viewer *ret,
                         struct answer *a) {
  const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  if (!v || strncasecmp(v, "Bearer ", 7)) {
    answer_err(a, MHD_HTTP_UNAUTHORIZED, "an Authorization: Bearer TOKEN header is required");
    return false;
  }
  const char *token = v + 7 + strspn(v + 7, " ");
  char hash[SL_HMAC_HEX_LEN + 1], user[sizeof ret->user];
  size_t n = strlen(token);
  if (n == 0 || n > TOKEN_MAX) {
    answer_err(a, MHD_HTTP_UNAUTHORIZED, "unknown token");
    return false;
  }
  sl_sha256_hex(token, n, hash);
  int r = gw_store_user_by_token(h->env.store, hash, user, sizeof user);
  if (r < 0) {
    answer_err(a, r == SL_EAUTH ? MHD_HTTP_UNAUTHORIZED : MHD_HTTP_INTERNAL_SERVER_ERROR,
               r == SL_EAUTH ? "unknown token" : sl_strerror(r));
    return false;
  }
  gw_access_viewer(ret, h->env.cfg, user);
  return true;
}

/* The user whose data a request reads: ?user= (an admin may name anyone;
 * a user only themselves), else the caller, or NULL (everyone) for an admin
 * who names nobody. False with a 403 in a when a user names another, a 400
 * when the name is not UTF-8. */
static bool scope(struct MHD_Connection *c, const struct gw_viewer *w, const char **ret,
                  struct answer *a) {
  const char *u = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "user");
  if (u && !*u)
    u = NULL;
  if (u && !sl_json_utf8_ok(u, strlen(u))) { /* no answer could name it */
    answer_err(a, MHD_HTTP_BAD_REQUEST, "?user= must be UTF-8");
    return false;
  }
  if (u && !gw_access_sees(w, u)) {
    answer_err(a, MHD_HTTP_FORBIDDEN, "only an admin sees another user's data");
    return false;
  }
  *ret = u ? u : gw_access_whose(w);
  return true;
}

static int64_t arg_int(struct MHD_Connection *c, const char *name, int64_t def, int64_t lo,
                       int64_t hi) {
  const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
  char *end = NULL;
  long long x = v && *v ? strtoll(v, &end, 10) : def;
  if (v && *v && *end)
    x = def;
  return x < lo ? lo : x > hi ? hi : x;
}

static json_t *instance_json(const struct gw_inst *in) {
  char job[16] = "";
  if (in->row.job)
    gw_job_id_str(in->row.job, job, sizeof job);
  json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:s,s:o,s:o,s:s,s:s,s:s,s:b,s:I}", "instance", in->row.id,
                   "provider", in->row.provider, "type", in->row.type, "zone", in->row.zone,
                   "market", in->row.spot ? "spot" : "on-demand", "price_usd_per_hour",
                   sl_json_real(in->row.price_usd_per_hour), "on_demand_usd_per_hour",
                   sl_json_real(in->row.on_demand_usd_per_hour), "state", in->row.state, "job", job,
                   "user", in->row.user, "registered", in->registered, "launched_us",
                   (json_int_t)in->row.launched_us);
  if (o && !strcmp(in->row.state, "idle") && in->idle_since_mono_us > 0)
    json_object_set_new(o, "idle_s", sl_json_real((double)(sl_time_mono_us() - in->idle_since_mono_us) / 1e6));
  return o;
}

static void get_status(struct gw_httpd *h, const struct gw_viewer *w, struct answer *a) {
  json_t *jobs = json_object();
  size_t live = 0, insts = 0;
  for (size_t i = 0; i < gw_fleet_n_jobs(h->env.fleet); i++) {
    const struct gw_job *j = gw_fleet_job_at(h->env.fleet, i);
    if (!gw_access_sees(w, j->user))
      continue;
    const char *st = gw_job_state_name(j->state);
    json_object_set_new(jobs, st, json_integer(json_integer_value(json_object_get(jobs, st)) + 1));
    live++;
  }
  for (size_t i = 0; i < gw_fleet_n_insts(h->env.fleet); i++)
    insts += gw_access_sees(w, gw_fleet_inst_at(h->env.fleet, i)->row.user);
  double month = 0, od = 0;
  gw_ledger_totals(h->env.ledger, NULL, gw_ledger_month_start_us(), &month, &od);
  const struct gw_config *cfg = h->env.cfg;
  json_t *r = json_pack("{s:{s:s,s:i,s:I,s:b},s:s,s:b,s:I,s:o,s:I,s:{s:o,s:o,s:b}}", "gateway",
                        "version", SPOTLAB_VERSION, "pid", (int)getpid(), "started_us",
                        (json_int_t)h->env.started_us, "embedded", cfg->embedded, "user", w->user,
                        "admin", w->admin, "live_jobs", (json_int_t)live, "jobs_by_state", jobs,
                        "instances", (json_int_t)insts, "budget", "monthly_usd",
                        sl_json_real(gw_budget_gateway_usd(h->env.budget, cfg)), "spent_usd",
                        sl_json_real(month),
                        "hard_cap", cfg->hard_cap);
  if (r && w->admin && h->env.kproto)
    json_object_set_new(json_object_get(r, "gateway"), "clients",
                        json_integer((json_int_t)gw_kproto_n_clients(h->env.kproto)));
  answer_json(a, MHD_HTTP_OK, r);
}

static void get_jobs(struct gw_httpd *h, struct MHD_Connection *c, const struct gw_viewer *w,
                     struct answer *a) {
  const char *user;
  if (!scope(c, w, &user, a))
    return;
  struct gw_job *jobs = NULL;
  size_t n = 0;
  int r = gw_store_jobs_list(h->env.store, user, false,
                             (size_t)arg_int(c, "limit", 100, 1, JOBS_MAX), &jobs, &n);
  if (r < 0)
    return answer_err(a, MHD_HTTP_INTERNAL_SERVER_ERROR, sl_strerror(r));
  json_t *arr = json_array();
  for (size_t i = 0; i < n; i++) {
    const struct gw_job *live = gw_fleet_job(h->env.fleet, jobs[i].id);
    json_array_append_new(arr, gw_job_summary(live ? live : &jobs[i]));
  }
  gw_store_jobs_free(jobs, n);
  answer_json(a, MHD_HTTP_OK, json_pack("{s:o}", "jobs", arr));
}

/* The job id names that w may read (gw_access_job), or false with a 404
 * in a: another user's job answers exactly as one that does not exist, as
 * it does over the kernel protocol, so an id tells nobody it exists. */
static bool find_job(struct gw_httpd *h, int64_t id, const struct gw_viewer *w,
                     struct gw_job *tmp, struct gw_job **ret_job, bool *ret_live,
                     struct answer *a) {
  if (gw_access_job(w, h->env.fleet, h->env.store, id, tmp, ret_job, ret_live) < 0) {
    answer_err(a, MHD_HTTP_NOT_FOUND, "no such job");
    return false;
  }
  return true;
}

/* /api/jobs/JOB: its summary and its events (?after=SEQ). */
static void get_job(struct gw_httpd *h, struct MHD_Connection *c, const char *name,
                    const struct gw_viewer *w, struct answer *a) {
  int64_t id = gw_job_id_parse(name);
  struct gw_job tmp, *j;
  bool live;
  if (!find_job(h, id, w, &tmp, &j, &live, a))
    return;
  json_t *o = gw_job_summary(j);
  if (!live)
    gw_job_done(&tmp);
  json_t *evs = NULL;
  bool more = false;
  int r = gw_store_events(h->env.store, id, arg_int(c, "after", 0, 0, INT64_MAX), EVENTS_MAX, &evs,
                      &more);
  if (r < 0) {
    json_decref(o);
    return answer_err(a, MHD_HTTP_INTERNAL_SERVER_ERROR, sl_strerror(r));
  }
  json_object_set_new(o, "events", evs);
  json_object_set_new(o, "more_events", json_boolean(more));
  answer_json(a, MHD_HTTP_OK, o);
}

/* /api/jobs/JOB/record: the job's run record (record.h). */
static void get_record(struct gw_httpd *h, const char *name, const struct gw_viewer *w,
                       struct answer *a) {
  struct gw_job tmp, *j;
  bool live;
  if (!find_job(h, gw_job_id_parse(name), w, &tmp, &j, &live, a))
    return;
  json_t *rec = NULL;
  int r = gw_record_load(h->env.store, j, &rec);
  if (!live)
    gw_job_done(&tmp);
  if (r < 0)
    return answer_err(a, MHD_HTTP_INTERNAL_SERVER_ERROR, sl_strerror(r));
  answer_json(a, MHD_HTTP_OK, rec);
}

static void get_instances(struct gw_httpd *h, const struct gw_viewer *w, struct answer *a) {
  json_t *arr = json_array();
  for (size_t i = 0; i < gw_fleet_n_insts(h->env.fleet); i++) {
    const struct gw_inst *in = gw_fleet_inst_at(h->env.fleet, i);
    if (gw_access_sees(w, in->row.user))
      json_array_append_new(arr, instance_json(in));
  }
  answer_json(a, MHD_HTTP_OK, json_pack("{s:o}", "instances", arr));
}

/* Spend of user (NULL: everyone) per user, job, instance type and day. */
static void get_cost(struct gw_httpd *h, struct MHD_Connection *c, const struct gw_viewer *w,
                     struct answer *a) {
  const char *user;
  if (!scope(c, w, &user, a))
    return;
  static const char *const names[] = {"by_user", "by_job", "by_type", "by_day"};
  double usd = 0, od = 0, month = 0, mod = 0;
  int r = gw_ledger_spend(h->env.ledger, user, &usd, &od, &month, &mod);
  json_t *o = json_pack("{s:s?,s:o,s:o,s:o,s:o,s:o}", "user", user, "spent_usd", sl_json_real(usd),
                        "on_demand_usd", sl_json_real(od), "saved_usd", sl_json_real(od - usd),
                        "month_spent_usd", sl_json_real(month), "budget_usd",
                        sl_json_real(gw_budget_gateway_usd(h->env.budget, h->env.cfg)));
  for (int by = GW_COST_BY_USER; r == 0 && o && by <= GW_COST_BY_DAY; by++) {
    json_t *rows = NULL;
    if ((r = gw_store_cost_by(h->env.store, by, user, 0, COST_ROWS_MAX, &rows)) < 0)
      break;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
      json_t *k = json_object_get(row, "key");
      char id[16];
      if (by == GW_COST_BY_JOB && json_is_integer(k))
        json_object_set_new(row, "key", json_string(gw_job_id_str(json_integer_value(k), id, sizeof id)));
    }
    json_object_set_new(o, names[by], rows);
  }
  if (r == 0 && o)
    r = gw_http_cost_more(&h->env, user, (int)arg_int(c, "days", 0, 0, 366), o);
  if (r < 0) {
    json_decref(o);
    return answer_err(a, MHD_HTTP_INTERNAL_SERVER_ERROR, sl_strerror(r));
  }
  answer_json(a, MHD_HTTP_OK, o);
}

/* /api/users, /api/groups, /api/preemptions, /api/data: http_api.c's views of the
 * caller's scope (an admin: everyone unless ?user= names one). */
static void get_view(struct gw_httpd *h, struct MHD_Connection *c, const struct gw_viewer *w,
                     int what, struct answer *a) {
  const char *user;
  if (!scope(c, w, &user, a))
    return;
  json_t *o = NULL;
  int r = what == 0   ? gw_http_users(&h->env, user, &o)
          : what == 1 ? gw_http_groups(&h->env, user, &o)
          : what == 2 ? gw_http_preemptions(&h->env, user, (size_t)arg_int(c, "limit", 20, 1, 1000), &o)
                      : gw_http_data(&h->env, user, &o);
  if (r < 0)
    return answer_err(a, MHD_HTTP_INTERNAL_SERVER_ERROR, sl_strerror(r));
  answer_json(a, MHD_HTTP_OK, o);
}

/* The admin page's files: they hold no data, so they need no token. */
static void get_asset(const struct gw_admin_asset *f, struct MHD_Connection *c, struct answer *a) {
  a->type = f->type;
  a->etag = f->etag;
  const char *inm = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH);
  if (inm && (strstr(inm, f->etag) || !strcmp(inm, "*"))) {
    a->code = MHD_HTTP_NOT_MODIFIED;
    return;
  }
  a->body = malloc(f->len ? f->len : 1);
  if (!a->body)
    return answer_err(a, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
  memcpy(a->body, f->data, f->len);
  a->len = f->len;
  a->code = MHD_HTTP_OK;
}

static void get_metrics(struct gw_httpd *h, struct MHD_Connection *c, struct answer *a) {
  if (h->env.cfg->metrics_auth) {
    struct gw_viewer w;
    if (!authenticate(h, c, &w, a))
      return;
    if (!w.admin)
      return answer_err(a, MHD_HTTP_FORBIDDEN, "/metrics needs an admin's token ([gateway] metrics_auth)");
  }
  struct gw_metrics_src src = {.cfg = h->env.cfg, .store = h->env.store, .fleet = h->env.fleet,
                               .ledger = h->env.ledger, .kproto = h->env.kproto, .http = &h->stats};
  src.webhooks = h->env.webhooks;
  src.tally = h->env.tally;
  src.budget = h->env.budget;
  a->body = gw_metrics_render(&src, &a->len);
  if (!a->body)
    return answer_err(a, MHD_HTTP_INTERNAL_SERVER_ERROR, "the store did not answer");
  a->code = MHD_HTTP_OK;
  a->type = "text/plain; version=0.0.4; charset=utf-8";
}

/* The API's resources; each takes GET (and HEAD, which MHD answers
 * without the body). */
static void route_budget(struct gw_httpd *h, struct MHD_Connection *c, const char *url,
                         const char *method, const struct upload *u, struct answer *a) {
  struct gw_viewer w;
  if (!authenticate(h, c, &w, a))
    return;
  if (u && u->too_big)
    return answer_err(a, 413, "the body is too large");
  json_t *v = NULL;
  unsigned code = gw_http_budget(h->env.budget, url, method, w.user, w.admin, u ? u->data : NULL,
                                 u ? u->len : 0, &v);
  if (code == MHD_HTTP_METHOD_NOT_ALLOWED)
    a->allow = gw_http_budget_url(url) && strcmp(url, "/api/budgets") ? "PUT" : "GET, HEAD";
  answer_json(a, code, v);
}

static void route(struct gw_httpd *h, struct MHD_Connection *c, const char *url, const char *method,
                  const struct upload *u, struct answer *a) {
  enum { NONE, METRICS, STATUS, JOBS, JOB, RECORD, INSTANCES, COST, USERS, GROUPS, PREEMPTIONS,
         DATA, PAGE } what = NONE;
  if (gw_http_budget_url(url))
    return route_budget(h, c, url, method, u, a);
  const char *job = NULL;
  char record_of[24];
  const struct gw_admin_asset *page = gw_http_admin_asset(url);
  if (page)
    what = PAGE;
  else if (!strcmp(url, "/metrics"))
    what = METRICS;
  else if (!strcmp(url, "/api/status"))
    what = STATUS;
  else if (!strcmp(url, "/api/jobs"))
    what = JOBS;
  else if (!strncmp(url, "/api/jobs/", 10)) {
    size_t n = strlen(url); /* one job id after the prefix, nothing below it */
    const char *below = n > 10 ? memchr(url + 10, '/', n - 10) : NULL;
    size_t id_len = below ? (size_t)(below - (url + 10)) : 0;
    if (n > 10 && !below)
      what = JOB, job = url + 10;
    else if (id_len && id_len < sizeof record_of && !strcmp(below, "/record")) {
      memcpy(record_of, url + 10, id_len); /* /api/jobs/JOB/record */
      record_of[id_len] = 0;
      what = RECORD, job = record_of;
    }
  } else if (!strcmp(url, "/api/instances"))
    what = INSTANCES;
  else if (!strcmp(url, "/api/cost"))
    what = COST;
  else if (!strcmp(url, "/api/users"))
    what = USERS;
  else if (!strcmp(url, "/api/groups"))
    what = GROUPS;
  else if (!strcmp(url, "/api/preemptions"))
    what = PREEMPTIONS;
  else if (!strcmp(url, "/api/data"))
    what = DATA;
  if (what == NONE)
    return answer_err(a, MHD_HTTP_NOT_FOUND, "no such resource");
  if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD)) {
    a->allow = "GET, HEAD";
    return answer_err(a, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD");
  }
  if (what == METRICS)
    return get_metrics(h, c, a);
  if (what == PAGE)
    return get_asset(page, c, a);
  struct gw_viewer w;
  if (!authenticate(h, c, &w, a))
    return;
  switch (what) {
  case STATUS: return get_status(h, &w, a);
  case JOBS: return get_jobs(h, c, &w, a);
  case JOB: return get_job(h, c, job, &w, a);
  case RECORD: return get_record(h, job, &w, a);
  case INSTANCES: return get_instances(h, &w, a);
  case COST: return get_cost(h, c, &w, a);
  case USERS: return get_view(h, c, &w, 0, a);
  case GROUPS: return get_view(h, c, &w, 1, a);
  case PREEMPTIONS: return get_view(h, c, &w, 2, a);
  case DATA: return get_view(h, c, &w, 3, a);
  default: return;
  }
}

/* *con_cls of a request other than a PUT once its first call has run */
static char taken_in;

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  (void)version;
  struct gw_httpd *h = cls;
  struct upload *u = *con_cls;
  /* The first call only takes the request in: an answer queued there has
   * libmicrohttpd close the connection after it, and every poll of the
   * admin page or Prometheus scrape would open a new one. */
  if (!u) /* a whole request head came: the connection may idle longer now */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)CONNECTION_TIMEOUT_S);
  if (!u && strcmp(method, MHD_HTTP_METHOD_PUT) != 0) {
    *con_cls = &taken_in;
    return MHD_YES;
  }
  if (u == (void *)&taken_in) {
    if (*upload_size) { /* a body only a PUT reads: passed over */
      *upload_size = 0;
      return MHD_YES;
    }
    u = NULL;
  }
  if (!strcmp(method, MHD_HTTP_METHOD_PUT)) { /* the body first, then the answer */
    if (!u) {
      if (!(u = calloc(1, sizeof *u)))
        return MHD_NO;
      *con_cls = u;
      return MHD_YES;
    }
    if (*upload_size) {
      if (u->len + *upload_size >= sizeof u->data)
        u->too_big = true;
      else
        memcpy(u->data + u->len, upload, *upload_size), u->len += *upload_size;
      *upload_size = 0;
      return MHD_YES;
    }
  }
  int64_t t0 = sl_time_mono_us();
  struct answer a = {0};
  route(h, c, url, method, u, &a);
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(a.len, a.body ? a.body : (char *)"", MHD_RESPMEM_MUST_COPY);
  free(a.body);
  if (!resp)
    return MHD_NO;
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, a.type ? a.type : "application/json");
  if (a.etag) {
    /* the page's own files: kept by the browser, asked again each load */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, a.etag);
    MHD_add_response_header(resp, "Content-Security-Policy",
                            "default-src 'self'; img-src 'self' data:; object-src 'none'; "
                            "base-uri 'none'; form-action 'self'; frame-ancestors 'none'");
    MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
  } else
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
  if (a.code == MHD_HTTP_UNAUTHORIZED)
    MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"spotlab\"");
  if (a.allow)
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, a.allow);
  enum MHD_Result r = MHD_queue_response(c, a.code, resp);
  MHD_destroy_response(resp);
  gw_metrics_http_count(&h->stats, a.code);
  gw_metrics_hist_observe(&h->stats.latency, (double)(sl_time_mono_us() - t0) / 1e6);
  return r;
}

static int64_t on_timer(struct gw_loop *l, int64_t id, int64_t now_us, void *data);

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode why) {
  (void)cls; (void)c; (void)why;
  if (*con_cls != (void *)&taken_in)
    free(*con_cls);
  *con_cls = NULL;
}

/* A path or argument holding "%00" is left as sent: decoded, its NUL would
 * end the string the routes read, and the gateway would serve another path
 * than the one a proxy in front of it saw ("/admin/app.js%00.html"). */
static size_t unescape(void *cls, struct MHD_Connection *c, char *s) {
  (void)cls;
  (void)c;
  return strstr(s, "%00") ? strlen(s) : MHD_http_unescape(s);
}

/* When MHD next needs a turn without input (its connections' timeouts), or
 * GW_LOOP_NOMORE. */
static int64_t next_due(struct gw_httpd *h) {
  MHD_UNSIGNED_LONG_LONG ms = 0;
  if (MHD_get_timeout(h->d, &ms) != MHD_YES)
    return GW_LOOP_NOMORE;
  return sl_time_mono_us() + (int64_t)(ms > 86400000ULL ? 86400000ULL : ms) * 1000;
}

static void arm(struct gw_httpd *h) {
  int64_t due = next_due(h);
  if (due == GW_LOOP_NOMORE) {
    if (h->timer > 0)
      gw_loop_del_timer(h->env.loop, h->timer);
    h->timer = 0;
  } else if (h->timer <= 0 || gw_loop_set_timer(h->env.loop, h->timer, due) < 0) {
    int64_t t = gw_loop_add_timer(h->env.loop, due, on_timer, h);
    h->timer = t > 0 ? t : 0;
  }
}

static int64_t on_timer(struct gw_loop *l, int64_t id, int64_t now_us, void *data) {
  (void)l; (void)id; (void)now_us;
  struct gw_httpd *h = data;
  MHD_run(h->d);
  int64_t due = next_due(h);
  if (due == GW_LOOP_NOMORE)
    h->timer = 0;
  return due;
}

static void on_ready(struct gw_loop *l, int fd, void *sock, int events, void *data) {
  (void)l; (void)fd; (void)sock; (void)events;
  struct gw_httpd *h = data;
  MHD_run(h->d);
  arm(h);
}

/* A listening TCP socket on HOST:PORT ([V6]:PORT), or a negative error. */
static int listen_on(const char *addr, char *err, size_t err_size) {
  char host[256];
  const char *colon = strrchr(addr, ':');
  if (!colon) {
    snprintf(err, err_size, "[gateway] http %s: not HOST:PORT", addr);
    return SL_ECONFIG;
  }
  snprintf(host, sizeof host, "%.*s", (int)(colon - addr), addr);
  if (host[0] == '[' && host[strlen(host) - 1] == ']') {
    memmove(host, host + 1, strlen(host));
    host[strlen(host) - 1] = 0;
  }
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *res = NULL;
  int rc = getaddrinfo(host, colon + 1, &hints, &res);
  if (rc) {
    snprintf(err, err_size, "[gateway] http %s: %s", addr, gai_strerror(rc));
    return SL_ECONFIG;
  }
  int fd = -1, e = 0;
  for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      e = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 64) < 0) {
      e = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) {
    snprintf(err, err_size, "cannot listen for HTTP on %s: %s", addr, strerror(e));
    return -e;
  }
  return fd;
}

static int bound_port(int fd) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
    return -1;
  return ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                        : ((struct sockaddr_in *)&ss)->sin_port);
}

int gw_httpd_new(const struct gw_httpd_env *env, struct gw_httpd **ret, char *err, size_t err_size) {
  struct gw_httpd *h = calloc(1, sizeof *h);
  if (!h)
    return -ENOMEM;
  h->env = *env;
  h->epoll_fd = -1;
  int fd = listen_on(env->cfg->http, err, err_size);
  if (fd < 0) {
    free(h);
    return fd;
  }
  h->port = bound_port(fd);
  /* no MHD_USE_INTERNAL_POLLING_THREAD: MHD runs only inside MHD_run() */
  h->d = MHD_start_daemon(MHD_USE_EPOLL, 0, NULL, NULL, on_request, h,
                          MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
                          MHD_OPTION_CONNECTION_LIMIT, (unsigned)CONNECTIONS_MAX,
                          MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)CONNECTIONS_PER_ADDRESS_MAX,
                          MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)REQUEST_TIMEOUT_S,
                          MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONNECTION_MEMORY_BYTES,
                          MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
                          MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL,
                          MHD_OPTION_END);
  const union MHD_DaemonInfo *info = h->d ? MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_EPOLL_FD) : NULL;
  int r = -ENOMEM;
  if (!h->d) {
    close(fd);
    snprintf(err, err_size, "cannot start the HTTP server on %s", env->cfg->http);
    goto fail;
  }
  h->epoll_fd = info ? info->epoll_fd : -1;
  if (h->epoll_fd < 0 || (r = gw_loop_add_fd(env->loop, h->epoll_fd, GW_LOOP_READ, on_ready, h)) < 0) {
    snprintf(err, err_size, "cannot watch the HTTP server: %s", sl_strerror(h->epoll_fd < 0 ? -EINVAL : r));
    r = r < 0 ? r : -EINVAL;
    h->epoll_fd = -1;
    goto fail;
  }
  arm(h);
  /* where a client finds it when the port was 0 */
  char path[1200], text[300];
  snprintf(path, sizeof path, "%s/http.address", env->cfg->state_dir);
  int n = snprintf(text, sizeof text, "%.*s:%d\n", (int)(strrchr(env->cfg->http, ':') - env->cfg->http),
                   env->cfg->http, h->port);
  if (sl_file_write_atomic(path, text, (size_t)n, 0644) < 0)
    sl_warn(T, "cannot write %s", path);
  sl_info(T, "HTTP API and /metrics on http://%.*s:%d", (int)(strrchr(env->cfg->http, ':') - env->cfg->http),
          env->cfg->http, h->port);
  *ret = h;
  return 0;
fail:
  gw_httpd_free(h);
  return r;
}

int gw_httpd_port(const struct gw_httpd *h) {
  return h->port;
}

struct gw_httpd *gw_httpd_free(struct gw_httpd *h) {
  if (!h)
    return NULL;
  if (h->timer > 0)
    gw_loop_del_timer(h->env.loop, h->timer);
  if (h->epoll_fd >= 0)
    gw_loop_del_fd(h->env.loop, h->epoll_fd);
  if (h->d)
    MHD_stop_daemon(h->d); /* closes the listening socket and the connections */
  free(h);
  return NULL;
}
