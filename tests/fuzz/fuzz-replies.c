/* Fuzz target: what HTTP services and the gateway answer, as the readers
 * of those answers take them: JupyterHub's answer to the gateway's token
 * check (gateway/hub.c, through hub_int.h: the cache and the users' groups
 * included), the instance metadata service's replies to the credential
 * chain (common/sl_awscreds.c, through sl_awscreds_int.h: the token, the
 * role listing, the credentials document), the gateway's presign answers
 * to a worker (worker/presign.c, through presign_int.h), and the one JSON
 * body of the gateway's HTTP API, a budget's (gateway/http_budget.c),
 * against a real budget keeper over the in-process gateway of gw-fixture.h.
 *
 * The first input byte chooses the reader (its value modulo 4); the rest
 * is, for each:
 *  0 hub: a flags byte (bit 0: answers are cached; bit 1: the file has
 *    the groups ml, ops and gpu-team), then answers split at "\n--\n", the
 *    i-th to a check of token i modulo 3. An answer is a reply (below).
 *  1 metadata service: the token reply, the role listing and the
 *    credentials document, split at "\n--\n", read in turn until one is
 *    refused.
 *  2 presign: a byte (modulo 4, plus 1: the URLs asked for), then the
 *    answer frame.
 *  3 budget: a flags byte (bit 0: the caller is an admin; bit 1: the
 *    caller is alice, else root; bit 2: user budgets are set live first
 *    until the table of live budgets is full), then requests split at "\n--\n", each
 *    "METHOD URL" on its first line and the body after it (no line break:
 *    no body).
 * A reply is its status code on its first line ("ERR": the transfer
 * failed), then its body, NUL-terminated in a block of its length plus
 * one, as sl_http hands it over.
 *
 * Checks: an accepted hub answer was HTTP 200 and gives the user the body
 * names, whole, that usable_name allows, and the first group of the file
 * the body's groups name, whole, or none; a refused one is SL_EAUTH or
 * SL_ECURL with a message; and the answers accepted earlier stay as they
 * were in the cache and the users' groups. Metadata replies accepted give
 * a header line without control characters, a role name of its
 * characters, credentials with a key id and a secret that are the
 * document's, whole, and an expiry that is the document's Expiration read
 * strictly; refused ones are SL_EAUTH with a message and leave the
 * credentials unwritten. Presign URLs accepted are http:// or https://,
 * the answer's strings whole, without control characters (a CR or LF
 * would end a request line). The budget API answers a JSON object with an
 * HTTP status; a refusal is {"error": {"code": the status, "message"}} and
 * leaves every budget as it was; an accepted PUT sets the budget it named
 * to the body's amount; every amount answered is finite and non-negative.
 * No input may crash, leak, hang or hit undefined behaviour. */
#include "gw-fixture.h"

#include "budget.h"
#include "http_budget.h"
#include "hub.h"
#include "hub_int.h"
#include "presign_int.h"
#include "store.h"

#include "fuzz.h"
#include "sl_awscreds.h"
#include "sl_awscreds_int.h"
#include "sl_err.h"
#include "sl_http.h"
#include "sl_json.h"
#include "sl_log.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PARTS_MAX 64

/* A reply from a part: *ret_err < 0 for "ERR"; else resp with the status
 * and an owned body (free with sl_http_resp_done). */
static void reply(struct fuzz_part pt, struct sl_http_resp *resp, int *ret_err) {
  const uint8_t *nl = memchr(pt.p, '\n', pt.len);
  size_t line = nl ? (size_t)(nl - pt.p) : pt.len;
  memset(resp, 0, sizeof *resp);
  *ret_err = 0;
  if (line == 3 && !memcmp(pt.p, "ERR", 3)) {
    *ret_err = -ETIMEDOUT;
    return;
  }
  long status = 0;
  for (size_t i = 0; i < line && i < 9 && pt.p[i] >= '0' && pt.p[i] <= '9'; i++)
    status = status * 10 + (pt.p[i] - '0');
  resp->status = status;
  resp->tries = 1;
  size_t off = nl ? line + 1 : pt.len;
  resp->body = fuzz_string_copy(pt.p + off, pt.len - off);
  resp->body_len = pt.len - off;
}

static bool said(const char *msg, size_t size) {
  return memchr(msg, 0, size) && msg[0];
}

/* The string member key of v as the whole of its bytes, or NULL. */
static const json_t *str_member(const json_t *v, const char *key) {
  const json_t *s = json_object_get(v, key);
  return json_is_string(s) ? s : NULL;
}

static bool same_string(const json_t *s, const char *c) {
  return s && json_string_length(s) == strlen(c) && !memcmp(json_string_value(s), c, strlen(c));
}

/* ---- the hub ---- */

#define TOKENS 3

static const char *const hub_groups[] = {"ml", "ops", "gpu-team"};

struct outcome {
  int calls;
  int err;
  struct gw_hub_who who;
  char msg[400];
};

static void hub_done(void *data, int err, const struct gw_hub_who *who, const char *msg) {
  struct outcome *o = data;
  if (!o || (err == 0) != (who != NULL))
    abort(); /* a check answered from the cache never calls done */
  o->calls++;
  o->err = err;
  if (who)
    o->who = *who;
  snprintf(o->msg, sizeof o->msg, "%s", msg ? msg : "");
}

/* The group the file's order and the body's groups select, as the
 * contract says: the first [group.NAME] that one of the groups names
 * whole. */
static const char *expected_group(const struct gw_config *cfg, const json_t *body) {
  const json_t *groups = json_object_get(body, "groups");
  for (size_t i = 0; i < cfg->n_groups; i++) {
    size_t k;
    const json_t *g;
    json_array_foreach(groups, k, g)
      if (json_is_string(g) && same_string(g, cfg->groups[i].name))
        return cfg->groups[i].name;
  }
  return "";
}

static void hub_accepted(const struct gw_config *cfg, const struct sl_http_resp *resp,
                         const struct gw_hub_who *who) {
  if (resp->status != 200)
    abort();
  size_t n = strnlen(who->user, sizeof who->user);
  if (n == 0 || n >= sizeof who->user)
    abort();
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)who->user[i] < 0x20 || who->user[i] == 0x7f)
      abort();
  json_t *body = NULL;
  if (sl_json_parse(resp->body, resp->body_len, 16, &body, NULL, 0) < 0)
    abort();
  const json_t *kind = str_member(body, "kind");
  if ((kind && !same_string(kind, "user")) || !same_string(str_member(body, "name"), who->user))
    abort(); /* a user's token, and the user the hub named, whole */
  if (!memchr(who->group, 0, sizeof who->group) || strcmp(who->group, expected_group(cfg, body)))
    abort();
  json_decref(body);
}

static void hub(const uint8_t *data, size_t size) {
  if (size < 1)
    return;
  uint8_t flags = data[0];
  struct gw_config *cfg = malloc(sizeof *cfg);
  if (!cfg)
    abort();
  gw_config_defaults(cfg);
  char err[256];
  if (gw_config_set(cfg, "hub", "url", "http://hub.test:8081/hub/api/", err, sizeof err) < 0 ||
      gw_config_set(cfg, "hub", "cache", flags & 1 ? "1h" : "0", err, sizeof err) < 0) {
    fprintf(stderr, "fuzz-replies: %s\n", err);
    abort();
  }
  if (flags & 2) {
    for (size_t i = 0; i < sizeof hub_groups / sizeof *hub_groups; i++) {
      char sec[32];
      snprintf(sec, sizeof sec, "group.%s", hub_groups[i]);
      if (gw_config_set(cfg, sec, "worker_timeout", "1h", err, sizeof err) < 0) {
        fprintf(stderr, "fuzz-replies: %s\n", err);
        abort();
      }
    }
  }
  struct gw_hub *h = NULL;
  if (gw_hub_new(cfg, NULL, &h, err, sizeof err) < 0 || !h) {
    fprintf(stderr, "fuzz-replies: %s\n", err);
    abort();
  }
  /* what the answers accepted so far established */
  struct gw_hub_who cached[TOKENS];
  bool have[TOKENS] = {false};
  struct gw_hub_who users[PARTS_MAX];
  size_t n_users = 0;

  struct fuzz_part parts[PARTS_MAX];
  size_t n = fuzz_split(data + 1, size - 1, parts, PARTS_MAX);
  for (size_t i = 0; i < n; i++) {
    char token[16];
    snprintf(token, sizeof token, "tok%zu", i % TOKENS);
    struct sl_http_resp resp;
    int terr;
    reply(parts[i], &resp, &terr);
    struct outcome o = {0};
    memset(&o.who, 'x', sizeof o.who);
    if (gw_hub_answer(h, token, terr, terr < 0 ? NULL : &resp, hub_done, &o) < 0 || o.calls != 1)
      abort();
    if (o.err == 0) {
      hub_accepted(cfg, &resp, &o.who);
      cached[i % TOKENS] = o.who;
      have[i % TOKENS] = flags & 1;
      size_t u = 0;
      while (u < n_users && strcmp(users[u].user, o.who.user))
        u++;
      if (u == n_users)
        n_users++;
      users[u] = o.who;
    } else if ((o.err != SL_EAUTH && o.err != SL_ECURL) || !said(o.msg, sizeof o.msg)) {
      abort();
    }
    sl_http_resp_done(&resp);
    /* every answer accepted still holds, whatever came after */
    for (size_t t = 0; t < TOKENS; t++) {
      if (!have[t])
        continue;
      char tok[16];
      struct gw_hub_who who;
      uint64_t check = 0;
      snprintf(tok, sizeof tok, "tok%zu", t);
      if (gw_hub_check(h, tok, hub_done, NULL, &who, &check) != 1 ||
          strcmp(who.user, cached[t].user) || strcmp(who.group, cached[t].group))
        abort();
    }
    for (size_t u = 0; u < n_users; u++) {
      const char *g = gw_hub_user_group(h, users[u].user);
      if (users[u].group[0] ? !g || strcmp(g, users[u].group) : g != NULL)
        abort();
    }
  }
  gw_hub_free(h);
  free(cfg);
}

/* ---- the instance metadata service ---- */

#define IMDS "http://169.254.169.254"
#define TOKEN_HDR "X-aws-ec2-metadata-token: "

static bool credential_chars(const char *s) {
  if (!*s)
    return false;
  for (; *s; s++)
    if ((unsigned char)*s <= 0x20 || (unsigned char)*s >= 0x7f)
      return false;
  return true;
}

static bool digits(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] < '0' || s[i] > '9')
      return false;
  return true;
}

static int num(const char *s, size_t n) {
  int v = 0;
  for (size_t i = 0; i < n; i++)
    v = v * 10 + (s[i] - '0');
  return v;
}

/* Expiration read strictly: "YYYY-MM-DDTHH:MM:SS", then an optional
 * fraction of digits, then "Z" or "+00:00"; false for anything else. */
static bool strict_expiration(const json_t *e, int64_t *ret) {
  if (!e)
    return false;
  const char *s = json_string_value(e);
  size_t len = json_string_length(e);
  if (len < 20 || strlen(s) != len || !digits(s, 4) || s[4] != '-' || !digits(s + 5, 2) ||
      s[7] != '-' || !digits(s + 8, 2) || s[10] != 'T' || !digits(s + 11, 2) || s[13] != ':' ||
      !digits(s + 14, 2) || s[16] != ':' || !digits(s + 17, 2))
    return false;
  const char *z = s + 19;
  if (*z == '.')
    for (z++; *z >= '0' && *z <= '9'; z++) {}
  if (strcmp(z, "Z") && strcmp(z, "+00:00"))
    return false;
  struct tm tm = {.tm_year = num(s, 4) - 1900, .tm_mon = num(s + 5, 2) - 1,
                  .tm_mday = num(s + 8, 2), .tm_hour = num(s + 11, 2),
                  .tm_min = num(s + 14, 2), .tm_sec = num(s + 17, 2)};
  if (tm.tm_mon < 0 || tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 ||
      tm.tm_min > 59 || tm.tm_sec > 60)
    return false;
  *ret = (int64_t)timegm(&tm);
  return true;
}

static void creds_accepted(const struct sl_http_resp *resp, const struct sl_aws_creds *cr) {
  if (!memchr(cr->access_key_id, 0, sizeof cr->access_key_id) ||
      !memchr(cr->secret_access_key, 0, sizeof cr->secret_access_key) ||
      !memchr(cr->session_token, 0, sizeof cr->session_token) || !cr->access_key_id[0] ||
      !credential_chars(cr->secret_access_key) || !credential_chars(cr->session_token))
    abort();
  for (const char *s = cr->access_key_id; *s; s++)
    if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z')))
      abort();
  json_t *doc = NULL;
  if (sl_json_parse(resp->body, resp->body_len, 4, &doc, NULL, 0) < 0)
    abort();
  const json_t *code = str_member(doc, "Code");
  int64_t expires;
  if ((code && !same_string(code, "Success")) ||
      !same_string(str_member(doc, "AccessKeyId"), cr->access_key_id) ||
      !same_string(str_member(doc, "SecretAccessKey"), cr->secret_access_key) ||
      !same_string(str_member(doc, "Token"), cr->session_token) ||
      !strict_expiration(str_member(doc, "Expiration"), &expires) || expires != cr->expires_unix)
    abort();
  json_decref(doc);
}

static void imds(const uint8_t *data, size_t size) {
  struct fuzz_part parts[PARTS_MAX];
  size_t n = fuzz_split(data, size, parts, PARTS_MAX);
  char hdr[1200], role[SL_AWS_ROLE_MAX], err[512];
  for (size_t i = 0; i < n && i < 3; i++) {
    struct sl_http_resp resp;
    int terr;
    reply(parts[i], &resp, &terr);
    if (terr < 0)
      break; /* a transfer that failed never reaches the readers */
    memset(err, 0, sizeof err);
    int r;
    if (i == 0) {
      memset(hdr, 'x', sizeof hdr);
      r = sl_aws_imds_token_reply(IMDS, &resp, hdr, sizeof hdr, err, sizeof err);
      if (r == 0 && (!memchr(hdr, 0, sizeof hdr) || strncmp(hdr, TOKEN_HDR, strlen(TOKEN_HDR)) ||
                     !credential_chars(hdr + strlen(TOKEN_HDR))))
        abort();
    } else if (i == 1) {
      memset(role, 'x', sizeof role);
      r = sl_aws_imds_role_reply(IMDS, &resp, role, err, sizeof err);
      if (r == 0) {
        size_t len = strnlen(role, sizeof role);
        if (len == 0 || len > 128)
          abort();
        for (size_t k = 0; k < len; k++)
          if (!((role[k] >= '0' && role[k] <= '9') || (role[k] >= 'a' && role[k] <= 'z') ||
                (role[k] >= 'A' && role[k] <= 'Z') || strchr("+=,.@_-", role[k])))
            abort();
      }
    } else {
      struct sl_aws_creds cr, untouched;
      memset(&cr, 'x', sizeof cr);
      untouched = cr;
      r = sl_aws_imds_creds_reply(IMDS, role, &resp, &cr, err, sizeof err);
      if (r == 0)
        creds_accepted(&resp, &cr);
      else if (memcmp(&cr, &untouched, sizeof cr))
        abort(); /* written only on success */
    }
    sl_http_resp_done(&resp);
    if (r < 0 && (r != SL_EAUTH || !said(err, sizeof err)))
      abort();
    if (r < 0)
      break;
  }
}

/* ---- presign answers ---- */

#define URLS_MAX 4

static void presign(const uint8_t *data, size_t size) {
  if (size < 1)
    return;
  size_t n = data[0] % URLS_MAX + 1;
  char *frame = fuzz_exact_copy(data + 1, size - 1);
  json_t *v = NULL;
  /* as the worker reads a frame from its gateway: depth 8 */
  if (sl_json_parse(frame, size - 1, 8, &v, NULL, 0) < 0)
    v = NULL;
  free(frame);
  int64_t id = wk_presign_answer_id(v);
  const json_t *jid = json_object_get(v, "id");
  if (id < 0 || (id > 0 && (strcmp(sl_json_get_str(v, "type", ""), "presigned") ||
                            !json_is_integer(jid) || json_integer_value(jid) != id)))
    abort();
  json_t *keep = json_incref(v); /* the answer, to compare with what was taken from it */
  char *urls[URLS_MAX], err[256];
  memset(urls, 0, sizeof urls);
  memset(err, 0, sizeof err);
  int r = wk_presign_answer_urls(v, n, urls, err, sizeof err);
  if (r < 0) {
    if ((r != SL_EAUTH && r != SL_EWIRE && r != -ENOMEM) || !said(err, sizeof err))
      abort();
  } else {
    const json_t *list = json_object_get(keep, "urls");
    for (size_t i = 0; i < n; i++) {
      const char *u = urls[i];
      if (!u || (strncmp(u, "http://", 7) && strncmp(u, "https://", 8)) ||
          !same_string(json_array_get(list, i), u))
        abort();
      for (const char *c = u; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
          abort(); /* a CR or LF would end the request line */
      free(urls[i]);
    }
  }
  json_decref(keep);
}

/* ---- the budget API ---- */

/* Every amount of a budget answer finite and non-negative (no -0 either). */
static void amounts_ok(const json_t *ans) {
  const json_t *list = json_object_get(ans, "budgets");
  if (!json_is_string(json_object_get(ans, "month")) || !json_is_array(list))
    abort();
  size_t i;
  const json_t *b;
  json_array_foreach(list, i, b) {
    static const char *const keys[] = {"budget_usd", "spent_usd", "ratio"};
    for (size_t k = 0; k < 3; k++) {
      const json_t *v = json_object_get(b, keys[k]);
      if (!json_is_number(v) || !isfinite(json_number_value(v)) || signbit(json_number_value(v)))
        abort();
    }
  }
}

/* The budget answer's entry for scope and name, or NULL. */
static const json_t *find_budget(const json_t *ans, const char *scope, const char *name) {
  size_t i;
  const json_t *b;
  json_array_foreach(json_object_get(ans, "budgets"), i, b)
    if (same_string(str_member(b, "scope"), scope) && same_string(str_member(b, "name"), name))
      return b;
  return NULL;
}

static bool quiet_once(void) {
  static bool done;
  if (done)
    return true;
  done = true;
  setenv("SPOTLAB_QUIET", "1", 0);
  sl_log_init(NULL);
  /* a fresh store per input: in memory, SQLite's syncs stay off the disk */
  if (!getenv("TMPDIR") && access("/dev/shm", W_OK) == 0)
    setenv("TMPDIR", "/dev/shm", 1);
  return true;
}

static void budget_request(struct gw_budget *b, struct fuzz_part pt, bool admin, const char *user) {
  const uint8_t *nl = memchr(pt.p, '\n', pt.len);
  size_t line = nl ? (size_t)(nl - pt.p) : pt.len;
  char *first = fuzz_string_copy(pt.p, line);
  char *sp = strchr(first, ' ');
  const char *method = first, *url = "/api/budgets";
  if (sp) {
    *sp = 0;
    url = sp + 1;
  }
  if (!gw_http_budget_url(url)) { /* http.c routes only these here */
    free(first);
    return;
  }
  char *body = nl ? fuzz_exact_copy(nl + 1, pt.len - line - 1) : NULL;
  size_t len = nl ? pt.len - line - 1 : 0;
  json_t *before = gw_budget_json(b, NULL), *ans = NULL;
  unsigned code = gw_http_budget(b, url, method, user, admin, body, len, &ans);
  json_t *after = gw_budget_json(b, NULL);
  /* the gateway's own failure (500) only from its store, which is sound here */
  if (!before || !after || code < 100 || code > 499 || !json_is_object(ans))
    abort();
  bool put = !strcmp(method, "PUT");
  if (code != 200) {
    const json_t *e = json_object_get(ans, "error");
    const json_t *c = json_object_get(e, "code");
    const json_t *m = str_member(e, "message");
    if (!json_is_integer(c) || json_integer_value(c) != (json_int_t)code || !m ||
        !json_string_length(m))
      abort();
  } else {
    amounts_ok(ans);
  }
  if (code != 200 || !put) {
    if (!json_equal(before, after))
      abort(); /* a refusal, or a reading, changes no budget */
  } else {
    /* the budget named is the body's amount */
    json_t *v = NULL;
    if (sl_json_parse(body, len, 4, &v, NULL, 0) < 0)
      abort();
    double usd = json_number_value(json_object_get(v, "monthly_usd"));
    const char *rest = url + strlen("/api/budgets/");
    const char *slash = strchr(rest, '/');
    char scope[16] = "gateway";
    const char *name = "";
    if (slash) {
      snprintf(scope, sizeof scope, "%.*s", (int)(slash - rest), rest);
      name = slash + 1;
    }
    const json_t *e = find_budget(after, scope, name);
    if (!isfinite(usd) || usd < 0 || !e ||
        json_number_value(json_object_get(e, "budget_usd")) != usd)
      abort();
    json_decref(v);
  }
  amounts_ok(after);
  json_decref(before);
  json_decref(after);
  json_decref(ans);
  free(body);
  free(first);
}

static void budget(const uint8_t *data, size_t size) {
  if (size < 1)
    return;
  quiet_once();
  uint8_t flags = data[0];
  struct gw_config *cfg = malloc(sizeof *cfg);
  if (!cfg)
    abort();
  fx_config(cfg);
  static const char *const sets[][3] = {
      {"budget", "monthly_usd", "100"}, {"group.ml", "monthly_usd", "10"},
      {"user.alice", "group", "ml"},    {"user.alice", "monthly_usd", "5"},
  };
  char err[256];
  for (size_t i = 0; i < sizeof sets / sizeof *sets; i++)
    if (gw_config_set(cfg, sets[i][0], sets[i][1], sets[i][2], err, sizeof err) < 0) {
      fprintf(stderr, "fuzz-replies: %s\n", err);
      abort();
    }
  struct fx *f = fx_new(cfg);
  free(cfg);
  if (!f)
    abort();
  struct gw_budget_env env = {.cfg = &f->cfg, .store = f->store, .ledger = f->ledger,
                              .fleet = f->fleet, .sched = f->sched, .bus = &f->bus};
  /* a full table of live budgets, as the store holds it when the keeper
   * starts (each set through the keeper would check every budget again) */
  for (int i = 0; flags & 4 && i < 512; i++) {
    char name[16];
    snprintf(name, sizeof name, "u%d", i);
    if (gw_store_budget_override_set(f->store, "user", name, 1, "root", 1) < 0)
      abort();
  }
  struct gw_budget *b = gw_budget_new(&env);
  if (!b)
    abort();
  if (flags & 4 && gw_budget_set(b, "user", "one-more", 1, "root", err, sizeof err) != SL_ELIMIT)
    abort(); /* the table is full */
  struct fuzz_part parts[PARTS_MAX];
  size_t n = fuzz_split(data + 1, size - 1, parts, PARTS_MAX);
  for (size_t i = 0; i < n; i++)
    budget_request(b, parts[i], flags & 1, flags & 2 ? "alice" : "root");
  gw_budget_free(b);
  fx_free(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  switch (data[0] % 4) {
  case 0:
    hub(data + 1, size - 1);
    break;
  case 1:
    imds(data + 1, size - 1);
    break;
  case 2:
    presign(data + 1, size - 1);
    break;
  default:
    budget(data + 1, size - 1);
    break;
  }
  return 0;
}
