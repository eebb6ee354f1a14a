/* The EC2 client (see aws_ec2.h): one signed POST per call, built by
 * aws_query, sent by sl_http_do, read by aws_xml.
 *
 * Credentials are asked of the chain on every try, so a role's refreshed
 * keys are used as soon as the chain has them; they live on the stack for
 * the try and are wiped after signing. Retries are decided here, not in
 * sl_http, because only EC2's error code tells a throttled request (retry)
 * from a capacity refusal (an answer: try elsewhere), both of which come as
 * 5xx. A launch is retried after a server error or a lost connection only
 * when it carries a ClientToken, so a retry cannot start a second instance.
 * Describe calls follow nextToken up to MAX_PAGES pages. */
#include "aws_ec2.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aws_query.h"
#include "aws_xml.h"
#include "sl_err.h"
#include "sl_http.h"
#include "sl_sigv4.h"

#define MAX_PAGES 100
#define MAX_TRIES 3
#define BACKOFF_BASE_MS 250
#define BACKOFF_MAX_MS 2000
#define CALL_TIMEOUT_MS 20000
#define CONTENT_TYPE "application/x-www-form-urlencoded; charset=utf-8"

struct aws_ec2 {
  struct sl_aws_chain *chain;   /* borrowed */
  char region[SL_AWS_REGION_MAX];
  char url[SL_AWS_ENDPOINT_MAX + 1]; /* endpoint + "/" */
};

int aws_ec2_new(struct sl_aws_chain *chain, const char *region, const char *endpoint,
                struct aws_ec2 **ret) {
  if (!chain || !region || !*region || !endpoint ||
      (strncmp(endpoint, "http://", 7) != 0 && strncmp(endpoint, "https://", 8) != 0))
    return -EINVAL;
  struct aws_ec2 *c = calloc(1, sizeof *c);
  if (!c)
    return -ENOMEM;
  c->chain = chain;
  size_t n = strlen(endpoint);
  while (n && endpoint[n - 1] == '/')
    n--;
  if (strlen(region) >= sizeof c->region || n + 2 > sizeof c->url) {
    free(c);
    return -EINVAL;
  }
  strcpy(c->region, region);
  memcpy(c->url, endpoint, n);
  strcpy(c->url + n, "/");
  *ret = c;
  return 0;
}

struct aws_ec2 *aws_ec2_free(struct aws_ec2 *c) {
  free(c);
  return NULL;
}

/* ---- errors ---- */

static bool prefix(const char *s, const char *p) {
  return strncmp(s, p, strlen(p)) == 0;
}

static bool suffix(const char *s, const char *x) {
  size_t n = strlen(s), k = strlen(x);
  return n >= k && strcmp(s + n - k, x) == 0;
}

static bool one_of(const char *s, const char *const *list) {
  for (; *list; list++)
    if (strcmp(s, *list) == 0)
      return true;
  return false;
}

int aws_ec2_error_to_sl(const char *code) {
  static const char *const capacity[] = {
    "InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity", "SpotMaxPriceTooLow", "MaxSpotInstanceCountExceeded",
    "InstanceLimitExceeded", "VcpuLimitExceeded", "Unsupported", NULL};
  static const char *const busy[] = {
    "RequestLimitExceeded", "Throttling", "InternalError", "ServiceUnavailable", NULL};
  static const char *const auth[] = {
    "AuthFailure", "ExpiredToken", "RequestExpired", "SignatureDoesNotMatch",
    "UnauthorizedOperation", "OptInRequired", "InvalidClientTokenId", NULL};
  if (!code)
    return SL_ENOTSUP;
  if (strcmp(code, "DryRunOperation") == 0)
    return 0;
  if (one_of(code, capacity))
    return -EAGAIN;
  if (one_of(code, busy))
    return -EBUSY;
  if (one_of(code, auth))
    return SL_EAUTH;
  if (strcmp(code, "InvalidParameterValue") == 0 || prefix(code, "InvalidParameter") ||
      strcmp(code, "MissingParameter") == 0 || prefix(code, "InvalidAMIID.") ||
      (prefix(code, "Invalid") && suffix(code, ".Malformed")))
    return -EINVAL;
  if (prefix(code, "Invalid") && suffix(code, ".NotFound"))
    return -ENOENT;
  return SL_ENOTSUP;
}

static void set_error(struct aws_ec2_error *err, long status, const char *code, const char *msg) {
  if (!err)
    return;
  memset(err, 0, sizeof *err);
  err->http_status = status;
  snprintf(err->code, sizeof err->code, "%s", code);
  snprintf(err->message, sizeof err->message, "%s", msg);
}

/* An answer other than 200: EC2's error form, else what the status says. */
static int answer_error(const struct sl_http_resp *resp, struct aws_ec2_error *err) {
  struct aws_ec2_error e = {0};
  if (aws_xml_error(resp->body, resp->body_len, &e) == 0) {
    e.http_status = resp->status;
    if (err)
      *err = e;
    return aws_ec2_error_to_sl(e.code);
  }
  char msg[64];
  snprintf(msg, sizeof msg, "HTTP %ld without an EC2 error", resp->status);
  set_error(err, resp->status, "", msg);
  if (resp->status >= 500 || resp->status == 429)
    return -EBUSY;
  if (resp->status == 401 || resp->status == 403)
    return SL_EAUTH;
  return SL_EPARSE;
}

/* ---- one call ---- */

/* One try: signs body now, with the chain's current credentials, and
 * sends it once. On 200, *ret holds the reply (owned by the caller:
 * sl_http_resp_done). Otherwise the mapped error, err filled. */
static int try_once(struct aws_ec2 *c, const char *body, size_t body_len,
                    struct sl_http_resp *ret, struct aws_ec2_error *err) {
  struct sl_aws_creds creds;
  char msg[256] = "";
  int r = sl_aws_creds_get(c->chain, &creds, msg, sizeof msg);
  if (r < 0) {
    set_error(err, 0, "", msg[0] ? msg : sl_strerror(r));
    return r;
  }
  struct sl_sigv4_header signed_headers[] = {{"Content-Type", CONTENT_TYPE}};
  struct sl_sigv4_req sreq = {
    .method = "POST",
    .url = c->url,
    .headers = signed_headers,
    .n_headers = 1,
    .body = body,
    .body_len = body_len,
    .region = c->region,
    .service = "ec2",
    .time_unix = (int64_t)time(NULL),
  };
  struct sl_sigv4_signed sig;
  char date[32], auth[SL_SIGV4_AUTH_MAX + 32], token[SL_AWS_TOKEN_MAX + 32] = "";
  r = sl_sigv4_sign(&sreq, &creds, &sig);
  if (r == 0 && creds.session_token[0])
    snprintf(token, sizeof token, "X-Amz-Security-Token: %s", creds.session_token);
  sodium_memzero(&creds, sizeof creds);
  if (r < 0) {
    set_error(err, 0, "", "the request could not be signed");
    return r;
  }
  snprintf(date, sizeof date, "X-Amz-Date: %s", sig.amz_date);
  snprintf(auth, sizeof auth, "Authorization: %s", sig.authorization);

  struct sl_http_req hreq = {
    .method = "POST",
    .url = c->url,
    .headers = {"Content-Type: " CONTENT_TYPE, date, auth, token[0] ? token : NULL},
    .body = body,
    .body_len = body_len,
    .body_max_bytes = AWS_XML_MAX_BYTES,
    .timeout_ms = CALL_TIMEOUT_MS,
    .retry = {.max_tries = 1},   /* call() decides what is worth another try */
    .use_env_proxy = true,
  };
  struct sl_http_resp resp = {0};
  r = sl_http_do(&hreq, &resp);
  sodium_memzero(token, sizeof token);
  if (r < 0) {
    set_error(err, 0, "", sl_strerror(r));
    return r;
  }
  if (resp.status != 200) {
    r = answer_error(&resp, err);
    sl_http_resp_done(&resp);
    return r;
  }
  *ret = resp;
  return 0;
}

/* Whether the failure r of a try may go better on the next one. Throttling
 * never did anything. Server errors and lost connections may have: only
 * an idempotent request (every one but a launch without a client token)
 * is sent again after them. A capacity error is an answer, never retried
 * here: the caller tries another type or zone. */
static bool worth_retry(int r, const struct aws_ec2_error *e, bool idempotent) {
  if (!strcmp(e->code, "RequestLimitExceeded") || !strcmp(e->code, "Throttling"))
    return true;
  if (!idempotent)
    return false;
  if (r == -EBUSY)
    return true;
  return e->http_status == 0 && sl_err_unanswered(r);
}

/* Sends q, retrying transient failures up to MAX_TRIES with a full-jitter
 * backoff; each try is signed afresh. As try_once. */
static int call(struct aws_ec2 *c, const struct aws_query *q, bool idempotent,
                struct sl_http_resp *ret, struct aws_ec2_error *err) {
  const char *body;
  size_t body_len;
  int r = aws_query_body(q, &body, &body_len);
  if (r < 0) {
    set_error(err, 0, "", sl_strerror(r));
    return r;
  }
  struct aws_ec2_error e;
  for (int attempt = 1;; attempt++) {
    memset(&e, 0, sizeof e);
    r = try_once(c, body, body_len, ret, &e);
    if (r == 0 || attempt == MAX_TRIES || !worth_retry(r, &e, idempotent))
      break;
    uint32_t cap_ms = BACKOFF_BASE_MS << (attempt - 1);
    if (cap_ms > BACKOFF_MAX_MS)
      cap_ms = BACKOFF_MAX_MS;
    uint32_t wait_ms = randombytes_uniform(cap_ms + 1);
    struct timespec ts = {wait_ms / 1000, (long)(wait_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
  if (err)
    *err = e;
  return r;
}

static int unreadable(struct aws_ec2_error *err, const struct sl_http_resp *resp, int r) {
  set_error(err, resp->status, "", r == SL_ELIMIT ? "the reply is too large"
                                                  : "the reply is not one EC2 sends");
  return r;
}

/* ---- the calls ---- */

int aws_ec2_run_instances(struct aws_ec2 *c, const struct aws_run_req *req,
                          struct aws_instance *ret, struct aws_ec2_error *err) {
  struct aws_query *q = NULL;
  int r = aws_query_run(req, &q);
  if (r < 0) {
    set_error(err, 0, "", "the launch request is not valid");
    return r;
  }
  struct sl_http_resp resp = {0};
  struct aws_instance *arr = NULL;
  size_t n = 0;
  bool idempotent = req->dry_run || (req->client_token && *req->client_token);
  r = call(c, q, idempotent, &resp, err);
  aws_query_free(q);
  if (r < 0)
    return r;
  if (req->dry_run) {
    /* Allowed is DryRunOperation (resp left empty); a 200 means the
     * endpoint ignored DryRun and launched. */
    if (resp.status == 200) {
      set_error(err, 200, "", "the endpoint ignored DryRun");
      r = SL_ENOTSUP;
    }
  } else {
    r = aws_xml_instances(resp.body, resp.body_len, &arr, &n, NULL);
    if (r == 0 && n == 0)
      r = SL_EPARSE;
    if (r < 0)
      unreadable(err, &resp, r);
    else if (ret)
      *ret = arr[0];
  }
  free(arr);
  sl_http_resp_done(&resp);
  return r;
}

int aws_ec2_terminate_instances(struct aws_ec2 *c, const char *const *ids, size_t n,
                                struct aws_ec2_error *err) {
  struct aws_query *q = NULL;
  int r = aws_query_terminate(ids, n, false, &q);
  if (r < 0) {
    set_error(err, 0, "", "no instance to terminate");
    return r;
  }
  struct sl_http_resp resp = {0};
  r = call(c, q, true, &resp, err);
  aws_query_free(q);
  if (r < 0)
    return r;
  struct aws_state_change *changes = NULL;
  size_t k = 0;
  r = aws_xml_state_changes(resp.body, resp.body_len, &changes, &k);
  if (r < 0)
    unreadable(err, &resp, r);
  free(changes);
  sl_http_resp_done(&resp);
  return r;
}

/* Appends src[0..n) to the owned array *arr of *len elements. */
static int append(void **arr, size_t *len, const void *src, size_t n, size_t size) {
  if (n == 0)
    return 0;
  if (*len + n > AWS_XML_MAX_ITEMS)
    return SL_ELIMIT;
  char *grown = realloc(*arr, (*len + n) * size);
  if (!grown)
    return -ENOMEM;
  memcpy(grown + *len * size, src, n * size);
  *arr = grown;
  *len += n;
  return 0;
}

/* One page's reader: the items of a reply and its nextToken. */
typedef int (*page_reader)(const char *xml, size_t len, void **ret, size_t *ret_n,
                           char next[AWS_NEXT_TOKEN_MAX]);
/* One page's query, given the token of the page to ask for. */
typedef int (*page_query)(const void *args, const char *next, struct aws_query **ret);

/* Every page of a describe call, items appended in order. */
static int all_pages(struct aws_ec2 *c, page_query query, const void *args, page_reader read,
                     size_t size, void **ret, size_t *ret_n, struct aws_ec2_error *err) {
  void *all = NULL;
  size_t n_all = 0;
  char next[AWS_NEXT_TOKEN_MAX] = "", prev[AWS_NEXT_TOKEN_MAX] = "";
  int r = 0;
  for (int page = 0;; page++) {
    if (page == MAX_PAGES) {
      r = SL_ELIMIT;
      set_error(err, 0, "", "too many pages");
      break;
    }
    struct aws_query *q = NULL;
    if ((r = query(args, next, &q)) < 0) {
      set_error(err, 0, "", "the request is not valid");
      break;
    }
    struct sl_http_resp resp = {0};
    r = call(c, q, true, &resp, err);
    aws_query_free(q);
    if (r < 0)
      break;
    void *items = NULL;
    size_t n = 0;
    strcpy(prev, next);
    r = read(resp.body, resp.body_len, &items, &n, next);
    if (r == 0)
      r = append(&all, &n_all, items, n, size);
    if (r == 0 && next[0] && strcmp(next, prev) == 0)
      r = SL_EPARSE;   /* the same page again would never end */
    if (r < 0)
      unreadable(err, &resp, r);
    free(items);
    sl_http_resp_done(&resp);
    if (r < 0 || !next[0])
      break;
  }
  if (r < 0) {
    free(all);
    return r;
  }
  *ret = all;
  *ret_n = n_all;
  return 0;
}

struct describe_args {
  const char *tag_key, *tag_value;
  const char *const *ids;
  size_t n_ids;
};

static int describe_query(const void *args, const char *next, struct aws_query **ret) {
  const struct describe_args *a = args;
  return aws_query_describe(a->tag_key, a->tag_value, a->ids, a->n_ids, next, false, ret);
}

static int read_instances(const char *xml, size_t len, void **ret, size_t *ret_n,
                          char next[AWS_NEXT_TOKEN_MAX]) {
  struct aws_instance *arr = NULL;
  int r = aws_xml_instances(xml, len, &arr, ret_n, next);
  if (r == 0)
    *ret = arr;
  return r;
}

int aws_ec2_describe_instances(struct aws_ec2 *c, const char *tag_key, const char *tag_value,
                               const char *const *ids, size_t n_ids,
                               struct aws_instance **ret, size_t *ret_n,
                               struct aws_ec2_error *err) {
  struct describe_args a = {tag_key, tag_value, ids, n_ids};
  void *arr = NULL;
  int r = all_pages(c, describe_query, &a, read_instances, sizeof(struct aws_instance), &arr,
                    ret_n, err);
  if (r == 0)
    *ret = arr;
  return r;
}

struct prices_args {
  const char *const *types;
  size_t n_types;
  int64_t now_unix;
};

static int prices_query(const void *args, const char *next, struct aws_query **ret) {
  const struct prices_args *a = args;
  return aws_query_spot_prices(a->types, a->n_types, a->now_unix, next, false, ret);
}

static int read_prices(const char *xml, size_t len, void **ret, size_t *ret_n,
                       char next[AWS_NEXT_TOKEN_MAX]) {
  struct aws_spot_price *arr = NULL;
  int r = aws_xml_spot_prices(xml, len, &arr, ret_n, next);
  if (r == 0)
    *ret = arr;
  return r;
}

int aws_ec2_spot_prices(struct aws_ec2 *c, const char *const *types, size_t n_types,
                        struct aws_spot_price **ret, size_t *ret_n, struct aws_ec2_error *err) {
  struct prices_args a = {types, n_types, (int64_t)time(NULL)};
  void *all = NULL;
  size_t n = 0;
  int r = all_pages(c, prices_query, &a, read_prices, sizeof(struct aws_spot_price), &all, &n,
                    err);
  if (r < 0)
    return r;
  /* Keep the newest price of each (type, zone), in the order first seen. */
  struct aws_spot_price *p = all;
  size_t kept = 0;
  for (size_t i = 0; i < n; i++) {
    size_t j = 0;
    while (j < kept && !(strcmp(p[j].type, p[i].type) == 0 && strcmp(p[j].zone, p[i].zone) == 0))
      j++;
    if (j == kept)
      p[kept++] = p[i];
    else if (p[i].time_unix > p[j].time_unix)
      p[j] = p[i];
  }
  *ret = p;
  *ret_n = kept;
  return 0;
}

struct scores_args {
  const char *const *types;
  size_t n_types;
  int capacity;
  const char *region;
};

static int scores_query(const void *args, const char *next, struct aws_query **ret) {
  const struct scores_args *a = args;
  return aws_query_placement_scores(a->types, a->n_types, a->capacity, a->region, next, false,
                                    ret);
}

static int read_scores(const char *xml, size_t len, void **ret, size_t *ret_n,
                       char next[AWS_NEXT_TOKEN_MAX]) {
  struct aws_placement_score *arr = NULL;
  int r = aws_xml_placement_scores(xml, len, &arr, ret_n, next);
  if (r == 0)
    *ret = arr;
  return r;
}

int aws_ec2_placement_scores(struct aws_ec2 *c, const char *const *types, size_t n_types,
                             int capacity, struct aws_placement_score **ret, size_t *ret_n,
                             struct aws_ec2_error *err) {
  struct scores_args a = {types, n_types, capacity, c->region};
  void *arr = NULL;
  int r = all_pages(c, scores_query, &a, read_scores, sizeof(struct aws_placement_score), &arr,
                    ret_n, err);
  if (r == 0)
    *ret = arr;
  return r;
}

/* Sends a query that carries DryRun=true: 0 when EC2 answers
 * DryRunOperation. */
static int dry_run(struct aws_ec2 *c, struct aws_query *q, struct aws_ec2_error *err) {
  struct sl_http_resp resp = {0};
  int r = call(c, q, true, &resp, err);
  aws_query_free(q);
  if (r == 0 && resp.status == 200) {
    /* EC2 answers a dry run with DryRunOperation, never with a result: a
     * 200 means the flag was ignored and the action happened. */
    set_error(err, 200, "", "the endpoint ignored DryRun");
    r = SL_ENOTSUP;
  }
  sl_http_resp_done(&resp);
  return r;
}

int aws_ec2_dry_run(struct aws_ec2 *c, const char *action, struct aws_ec2_error *err) {
  struct aws_query *q = NULL;
  int r = aws_query_dry_run(action, c->region, (int64_t)time(NULL), &q);
  if (r < 0) {
    set_error(err, 0, "", "no dry run for that action");
    return r;
  }
  return dry_run(c, q, err);
}

int aws_ec2_terminate_dry_run(struct aws_ec2 *c, const char *const *ids, size_t n,
                              struct aws_ec2_error *err) {
  struct aws_query *q = NULL;
  int r = aws_query_terminate(ids, n, true, &q);
  if (r < 0) {
    set_error(err, 0, "", "no instance to terminate");
    return r;
  }
  return dry_run(c, q, err);
}
