/* The AWS credential chain, region and endpoints.
 *
 * A chain decides once, when it is made, between the static sources (the
 * environment, then the shared files); those never change. Without them it
 * falls back to the instance role, fetched lazily through IMDSv2 and fetched
 * again when the held credentials come within REFRESH_S of their expiry.
 * One mutex guards the held credentials, so a refresh happens on one thread
 * while the others wait for its result.
 *
 * Secrets are copied only into struct sl_aws_creds and wiped when dropped;
 * every message built here names a file, a line, a profile or a field,
 * never a value read from a credentials source. */
#include "sl_awscreds.h"
#include "sl_awscreds_int.h"

#include "sl_err.h"
#include "sl_http.h"
#include "sl_json.h"
#include "sl_log.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define TOPIC "aws"
#define REFRESH_S 300               /* refresh this close to expiry */
#define RETRY_HOLDOFF_S 30          /* after a failed refresh of still-valid credentials */
#define FILE_MAX_BYTES (1 << 20)
#define IMDS_BODY_MAX 16384
#define IMDS_TOKEN_TTL_S 21600
#define PATH_MAX_ 4096
#define PROFILE_MAX 128

struct sl_aws_chain {
  pthread_mutex_t mu;
  enum sl_aws_creds_source source;  /* of creds; NONE until some are held */
  struct sl_aws_creds creds;
  bool imds_enabled;
  char imds[SL_AWS_ENDPOINT_MAX];
  char profile[PROFILE_MAX];
  int64_t next_try_unix;            /* no refresh before this while creds are valid */
  int64_t (*now)(void *ctx);
  void *now_ctx;
};

static const char *env(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

static int64_t real_now(void *ctx) {
  (void)ctx;
  return (int64_t)time(NULL);
}

static bool key_id_ok(const char *s) {
  if (!*s)
    return false;
  for (; *s; s++)
    if (!isalnum((unsigned char)*s))
      return false;
  return true;
}

static bool secret_ok(const char *s) {
  if (!*s)
    return false;
  for (; *s; s++)
    if ((unsigned char)*s <= 0x20 || (unsigned char)*s >= 0x7f)
      return false;
  return true;
}

static bool region_ok(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n >= SL_AWS_REGION_MAX)
    return false;
  for (; *s; s++)
    if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '-'))
      return false;
  return true;
}

/* ---- the shared files ---- */

struct profile {
  bool found;
  char key_id[SL_AWS_KEY_ID_MAX];
  char secret[SL_AWS_SECRET_MAX];
  char token[SL_AWS_TOKEN_MAX];
  char region[SL_AWS_REGION_MAX];
  const char *unsupported;          /* a key naming a source spotlab does not read */
};

static void profile_wipe(struct profile *p) { sodium_memzero(p, sizeof *p); }

/* The file's path: the variable's value (a leading "~/" is $HOME), else
 * $HOME/.aws/NAME. -ENOENT when neither can be formed. */
static int file_path(const char *var, const char *name, char ret[PATH_MAX_]) {
  const char *v = env(var), *home = getenv("HOME");
  int n;
  if (v && strncmp(v, "~/", 2) == 0 && home)
    n = snprintf(ret, PATH_MAX_, "%s/%s", home, v + 2);
  else if (v)
    n = snprintf(ret, PATH_MAX_, "%s", v);
  else if (home && *home)
    n = snprintf(ret, PATH_MAX_, "%s/.aws/%s", home, name);
  else
    return -ENOENT;
  return n < 0 || n >= PATH_MAX_ ? SL_ELIMIT : 0;
}

static int read_file(const char *path, char **ret, size_t *ret_len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return -errno;
  char *p = malloc(FILE_MAX_BYTES + 1);
  if (!p) {
    fclose(f);
    return -ENOMEM;
  }
  size_t n = fread(p, 1, FILE_MAX_BYTES + 1, f);
  int r = ferror(f) ? -EIO : 0;
  fclose(f);
  if (!r && n > FILE_MAX_BYTES)
    r = SL_ELIMIT;
  if (r) {
    sodium_memzero(p, n);
    free(p);
    return r;
  }
  p[n] = '\0';
  *ret = p;
  *ret_len = n;
  return 0;
}

static char *trim(char *s, char *end) {
  while (s < end && isspace((unsigned char)*s))
    s++;
  while (end > s && isspace((unsigned char)end[-1]))
    end--;
  *end = '\0';
  return s;
}

/* Whether section header text names the profile: "NAME" in the
 * credentials file; "profile NAME" in the config file, where the default
 * profile may also be plain "default". */
static bool section_is(const char *sec, const char *profile, bool config) {
  if (!config)
    return strcmp(sec, profile) == 0;
  if (strcmp(profile, "default") == 0 && strcmp(sec, "default") == 0)
    return true;
  if (strncmp(sec, "profile", 7) != 0 || !isspace((unsigned char)sec[7]))
    return false;
  sec += 7;
  while (isspace((unsigned char)*sec))
    sec++;
  return strcmp(sec, profile) == 0;
}

static int store(const char *path, int line, const char *profile, const char *key,
                 const char *value, char *dst, size_t size, char *err, size_t err_size) {
  if (strlen(value) >= size) {
    return sl_err_say(err, err_size, SL_ELIMIT,
                      "%s line %d: profile %s's %s is longer than %zu characters", path, line,
                      profile, key, size - 1);
  }
  snprintf(dst, size, "%s", value);
  return 0;
}

/* Reads profile's section of one INI file. A key line's indented
 * continuation lines (nested settings such as "s3 =") are skipped. */
static int parse_ini(const char *path, char *text, size_t len, const char *profile, bool config,
                     struct profile *ret, char *err, size_t err_size) {
  char *p = text, *end = text + len;
  bool in_section = false, match = false, after_key = false;
  int r = 0;
  for (int line = 1; p < end && !r; line++) {
    char *nl = memchr(p, '\n', (size_t)(end - p));
    char *eol = nl ? nl : end;
    bool indented = p < eol && (*p == ' ' || *p == '\t');
    char *s = trim(p, eol);
    p = eol + 1;
    if (*s == '\0' || *s == '#' || *s == ';') {
      after_key = after_key && *s != '\0';
      continue;
    }
    if (indented && after_key)
      continue;
    if (*s == '[') {
      size_t n = strlen(s);
      if (s[n - 1] != ']') {
        return sl_err_say(err, err_size, SL_EPARSE,
                          "%s line %d: a section header without its closing ']'", path, line);
      }
      char *sec = trim(s + 1, s + n - 1);
      in_section = true;
      match = section_is(sec, profile, config);
      if (match)
        ret->found = true;
      after_key = false;
      continue;
    }
    char *eq = strchr(s, '=');
    if (!eq) {
      return sl_err_say(err, err_size, SL_EPARSE,
                        "%s line %d: neither a [section] nor a key = value line", path, line);
    }
    if (!in_section) {
      return sl_err_say(err, err_size, SL_EPARSE,
                        "%s line %d: a key = value line before any [section]", path, line);
    }
    after_key = true;
    if (!match)
      continue;
    char *key = trim(s, eq), *value = trim(eq + 1, eol);
    for (char *k = key; *k; k++)
      *k = (char)tolower((unsigned char)*k);
    if (strcmp(key, "aws_access_key_id") == 0)
      r = store(path, line, profile, key, value, ret->key_id, sizeof ret->key_id, err, err_size);
    else if (strcmp(key, "aws_secret_access_key") == 0)
      r = store(path, line, profile, key, value, ret->secret, sizeof ret->secret, err, err_size);
    else if (strcmp(key, "aws_session_token") == 0)
      r = store(path, line, profile, key, value, ret->token, sizeof ret->token, err, err_size);
    else if (strcmp(key, "region") == 0)
      r = store(path, line, profile, key, value, ret->region, sizeof ret->region, err, err_size);
    else if (strcmp(key, "role_arn") == 0)
      ret->unsupported = "role_arn";
    else if (strcmp(key, "credential_process") == 0)
      ret->unsupported = "credential_process";
    else if (strncmp(key, "sso_", 4) == 0)
      ret->unsupported = "sso";
  }
  return r;
}

/* Profile from one shared file. A missing file is no error (ret->found
 * stays false); one that cannot be read or parsed is. */
static int read_profile(const char *var, const char *name, const char *profile, bool config,
                        struct profile *ret, char *ret_path, char *err, size_t err_size) {
  memset(ret, 0, sizeof *ret);
  int r = file_path(var, name, ret_path);
  if (r == -ENOENT)
    return 0;
  if (r) {
    return sl_err_say(err, err_size, r, "the path in %s is too long", var);
  }
  char *text = NULL;
  size_t len = 0;
  r = read_file(ret_path, &text, &len);
  if (r == -ENOENT)
    return 0;
  if (r) {
    return sl_err_say(err, err_size, r, "cannot read %s: %s", ret_path, sl_strerror(r));
  }
  r = parse_ini(ret_path, text, len, profile, config, ret, err, err_size);
  sodium_memzero(text, len);
  free(text);
  if (r)
    profile_wipe(ret);
  return r;
}

static const char *profile_name(void) {
  const char *p = env("AWS_PROFILE");
  return p ? p : env("AWS_DEFAULT_PROFILE") ? env("AWS_DEFAULT_PROFILE") : "default";
}

/* The profile's credentials from the credentials file, else the config
 * file, into c. 0 with c->source unchanged when neither has them. */
static int files_creds(struct sl_aws_chain *c, char *err, size_t err_size) {
  static const struct { const char *var, *name; bool config; } files[] = {
    {"AWS_SHARED_CREDENTIALS_FILE", "credentials", false},
    {"AWS_CONFIG_FILE", "config", true},
  };
  char paths[2][PATH_MAX_] = {"", ""};
  bool found = false;
  int r = 0;
  struct profile *p = malloc(sizeof *p);
  if (!p)
    return -ENOMEM;
  for (size_t i = 0; i < 2 && !r; i++) {
    r = read_profile(files[i].var, files[i].name, c->profile, files[i].config, p, paths[i], err,
                     err_size);
    if (r || !p->found)
      continue;
    found = true;
    const char *path = paths[i];
    if (!p->key_id[0] && !p->secret[0]) {
      if (p->unsupported) {
        sl_err_say(err, err_size, 0,
                   "%s: profile %s gets its credentials through %s, which is not supported;"
                   " give it aws_access_key_id and aws_secret_access_key",
                   path, c->profile, p->unsupported);
        r = SL_ENOTSUP;
      }
      continue;
    }
    if (!p->key_id[0] || !p->secret[0]) {
      sl_err_say(err, err_size, 0, "%s: profile %s has %s but no %s", path, c->profile,
                 p->key_id[0] ? "aws_access_key_id" : "aws_secret_access_key",
                 p->key_id[0] ? "aws_secret_access_key" : "aws_access_key_id");
      r = SL_ECONFIG;
    } else if (!key_id_ok(p->key_id)) {
      sl_err_say(err, err_size, 0,
                 "%s: profile %s's aws_access_key_id is not a key id (letters and digits)", path,
                 c->profile);
      r = SL_ECONFIG;
    } else if (!secret_ok(p->secret) || (p->token[0] && !secret_ok(p->token))) {
      sl_err_say(err, err_size, 0, "%s: profile %s's %s holds characters a credential cannot", path,
                 c->profile, secret_ok(p->secret) ? "aws_session_token" : "aws_secret_access_key");
      r = SL_ECONFIG;
    } else {
      memcpy(c->creds.access_key_id, p->key_id, sizeof p->key_id);
      memcpy(c->creds.secret_access_key, p->secret, sizeof p->secret);
      memcpy(c->creds.session_token, p->token, sizeof p->token);
      c->creds.expires_unix = 0;
      c->source = SL_AWS_CREDS_SHARED_FILE;
      break;
    }
  }
  profile_wipe(p);
  free(p);
  if (!r && !found && env("AWS_PROFILE") && c->source == SL_AWS_CREDS_NONE) {
    sl_err_say(err, err_size, 0, "profile %s (AWS_PROFILE) is in neither %s nor %s", c->profile,
               paths[0][0] ? paths[0] : "the credentials file",
               paths[1][0] ? paths[1] : "the config file");
    r = SL_ECONFIG;
  }
  return r;
}

static int env_creds(struct sl_aws_chain *c, char *err, size_t err_size) {
  const char *id = env("AWS_ACCESS_KEY_ID"), *secret = env("AWS_SECRET_ACCESS_KEY");
  const char *token = env("AWS_SESSION_TOKEN");
  if (!id && !secret)
    return 0;
  if (!id || !secret) {
    return sl_err_say(err, err_size, SL_ECONFIG, "%s is set but %s is not",
                      id ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY",
                      id ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
  }
  const char *bad = strlen(id) >= SL_AWS_KEY_ID_MAX || !key_id_ok(id) ? "AWS_ACCESS_KEY_ID"
                    : strlen(secret) >= SL_AWS_SECRET_MAX || !secret_ok(secret)
                        ? "AWS_SECRET_ACCESS_KEY"
                    : token && (strlen(token) >= SL_AWS_TOKEN_MAX || !secret_ok(token))
                        ? "AWS_SESSION_TOKEN"
                        : NULL;
  if (bad) {
    return sl_err_say(err, err_size, SL_ECONFIG,
                      "%s is too long or holds characters a credential cannot", bad);
  }
  snprintf(c->creds.access_key_id, sizeof c->creds.access_key_id, "%s", id);
  snprintf(c->creds.secret_access_key, sizeof c->creds.secret_access_key, "%s", secret);
  snprintf(c->creds.session_token, sizeof c->creds.session_token, "%s", token ? token : "");
  c->creds.expires_unix = 0;
  c->source = SL_AWS_CREDS_ENV;
  return 0;
}

/* ---- the chain ---- */

int sl_aws_chain_new(struct sl_aws_chain **ret, char *err, size_t err_size) {
  if (!ret)
    return -EINVAL;
  struct sl_aws_chain *c = calloc(1, sizeof *c);
  if (!c)
    return -ENOMEM;
  pthread_mutex_init(&c->mu, NULL);
  c->now = real_now;
  snprintf(c->profile, sizeof c->profile, "%s", profile_name());
  sl_aws_imds_endpoint(c->imds);
  const char *off = getenv("AWS_EC2_METADATA_DISABLED");
  c->imds_enabled = !(off && strcasecmp(off, "true") == 0);
  int r = env_creds(c, err, err_size);
  if (!r && c->source == SL_AWS_CREDS_NONE)
    r = files_creds(c, err, err_size);
  if (r) {
    sl_aws_chain_free(c);
    return r;
  }
  *ret = c;
  return 0;
}

struct sl_aws_chain *sl_aws_chain_free(struct sl_aws_chain *c) {
  if (c) {
    pthread_mutex_destroy(&c->mu);
    sodium_memzero(c, sizeof *c);
    free(c);
  }
  return NULL;
}

void sl_aws_chain_set_clock(struct sl_aws_chain *c, int64_t (*now_unix)(void *ctx), void *ctx) {
  pthread_mutex_lock(&c->mu);
  c->now = now_unix ? now_unix : real_now;
  c->now_ctx = ctx;
  pthread_mutex_unlock(&c->mu);
}

/* ---- the instance role ---- */

int sl_aws_parse_expiration(const char *s, int64_t *ret) {
  /* digits where the form has them: sscanf's %d alone takes " 5" or "+5" */
  static const char form[] = "dddd-dd-ddTdd:dd:dd";
  for (size_t i = 0; i < sizeof form - 1; i++)
    if (form[i] == 'd' ? !isdigit((unsigned char)s[i]) : s[i] != form[i])
      return -EINVAL;
  struct tm tm = {0};
  int n = 0;
  if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
             &tm.tm_min, &tm.tm_sec, &n) != 6 || n != 19)
    return -EINVAL;
  s += n;
  if (*s == '.')
    for (s++; isdigit((unsigned char)*s); s++) {}
  if (strcmp(s, "Z") != 0 && strcmp(s, "+00:00") != 0)
    return -EINVAL;
  if (tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 ||
      tm.tm_min > 59 || tm.tm_sec > 60)
    return -EINVAL;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  *ret = (int64_t)timegm(&tm);
  return 0;
}

static int imds_call(const struct sl_aws_chain *c, const char *method, const char *path,
                     const char *header, struct sl_http_resp *resp, char *err, size_t err_size) {
  char url[SL_AWS_ENDPOINT_MAX + 256];
  if ((size_t)snprintf(url, sizeof url, "%s%s", c->imds, path) >= sizeof url) {
    return sl_err_say(err, err_size, SL_ELIMIT, "instance metadata path too long");
  }
  struct sl_http_req req = {
    .method = method,
    .url = url,
    .headers = {header},
    .body_max_bytes = IMDS_BODY_MAX,
    .connect_timeout_ms = 1000,
    .timeout_ms = 2000,
    .retry = {.max_tries = 2, .base_backoff_ms = 100, .max_backoff_ms = 500},
    .use_env_proxy = false,
  };
  int r = sl_http_global_init();
  if (!r)
    r = sl_http_do(&req, resp);
  if (r)
    sl_err_say(err, err_size, 0, "instance metadata service at %s: %s", c->imds, sl_strerror(r));
  return r;
}

static void resp_wipe(struct sl_http_resp *resp) {
  if (resp->body)
    sodium_memzero(resp->body, resp->body_len);
  sl_http_resp_done(resp);
}

/* IMDSv2's session token into hdr, as the header later calls send. */
static int imds_token(const struct sl_aws_chain *c, char *hdr, size_t hdr_size, char *err,
                      size_t err_size) {
  struct sl_http_resp resp = {0};
  char ttl[64];
  snprintf(ttl, sizeof ttl, "X-aws-ec2-metadata-token-ttl-seconds: %d", IMDS_TOKEN_TTL_S);
  int r = imds_call(c, "PUT", "/latest/api/token", ttl, &resp, err, err_size);
  if (r)
    return r;
  r = sl_aws_imds_token_reply(c->imds, &resp, hdr, hdr_size, err, err_size);
  resp_wipe(&resp);
  return r;
}

int sl_aws_imds_token_reply(const char *imds, struct sl_http_resp *resp, char *hdr,
                            size_t hdr_size, char *err, size_t err_size) {
  int r = 0;
  const char *token = resp->status == 200 ? trim(resp->body, resp->body + resp->body_len) : "";
  if (resp->status != 200) {
    sl_err_say(err, err_size, 0,
               "instance metadata service at %s answered HTTP %ld to the token request", imds,
               resp->status);
    r = SL_EAUTH;
  } else if (!secret_ok(token) ||
             (size_t)snprintf(hdr, hdr_size, "X-aws-ec2-metadata-token: %s", token) >= hdr_size) {
    sl_err_say(err, err_size, 0, "instance metadata service at %s sent a malformed token", imds);
    r = SL_EAUTH;
  }
  return r;
}

/* The instance role's name (the first line of the list). */
static int imds_role(const struct sl_aws_chain *c, const char *hdr, char ret[SL_AWS_ROLE_MAX],
                     char *err, size_t err_size) {
  struct sl_http_resp resp = {0};
  int r = imds_call(c, "GET", "/latest/meta-data/iam/security-credentials/", hdr, &resp, err,
                    err_size);
  if (r)
    return r;
  r = sl_aws_imds_role_reply(c->imds, &resp, ret, err, err_size);
  sl_http_resp_done(&resp);
  return r;
}

int sl_aws_imds_role_reply(const char *imds, struct sl_http_resp *resp,
                           char ret[SL_AWS_ROLE_MAX], char *err, size_t err_size) {
  if (resp->status != 200) {
    if (resp->status == 404)
      sl_err_say(err, err_size, 0, "the instance has no IAM role (%s answered HTTP 404)", imds);
    else
      sl_err_say(err, err_size, 0,
                 "instance metadata service at %s answered HTTP %ld for the role name", imds,
                 resp->status);
    return SL_EAUTH;
  }
  char *nl = memchr(resp->body, '\n', resp->body_len);
  char *name = trim(resp->body, nl ? nl : resp->body + resp->body_len);
  size_t name_len = strlen(name);
  bool ok = name_len > 0 && name_len < 129;
  for (const char *s = name; ok && *s; s++)
    ok = isalnum((unsigned char)*s) || strchr("+=,.@_-", *s);
  if (!ok) {
    return sl_err_say(err, err_size, SL_EAUTH,
                      "instance metadata service at %s sent a malformed role name", imds);
  }
  snprintf(ret, SL_AWS_ROLE_MAX, "%s", name);
  return 0;
}

/* The string member key of doc, def when it is missing or not a string, ""
 * (no field's valid value) when it holds a NUL. */
static const char *doc_str(const json_t *doc, const char *key, const char *def) {
  const char *s = sl_json_get_whole_str(doc, key, def);
  return s ? s : "";
}

/* Overwrites a string member of a parsed document (a secret) in place. */
static void json_wipe(json_t *doc, const char *key) {
  json_t *v = json_object_get(doc, key);
  if (json_is_string(v))
    sodium_memzero((char *)json_string_value(v), json_string_length(v));
}

/* The role's credentials document into *ret. */
static int imds_document(const struct sl_aws_chain *c, const char *hdr, const char *role,
                         struct sl_aws_creds *ret, char *err, size_t err_size) {
  struct sl_http_resp resp = {0};
  char path[256];
  snprintf(path, sizeof path, "/latest/meta-data/iam/security-credentials/%s", role);
  int r = imds_call(c, "GET", path, hdr, &resp, err, err_size);
  if (r)
    return r;
  r = sl_aws_imds_creds_reply(c->imds, role, &resp, ret, err, err_size);
  resp_wipe(&resp);
  return r;
}

int sl_aws_imds_creds_reply(const char *imds, const char *role, const struct sl_http_resp *resp,
                            struct sl_aws_creds *ret, char *err, size_t err_size) {
  json_t *doc = NULL;
  int r = 0;
  if (resp->status != 200) {
    sl_err_say(err, err_size, 0, "instance metadata service at %s answered HTTP %ld for role %s",
               imds, resp->status, role);
    r = SL_EAUTH;
  } else if (sl_json_parse(resp->body, resp->body_len, 4, &doc, NULL, 0) < 0 ||
             !json_is_object(doc)) {
    sl_err_say(err, err_size, 0, "the credentials of role %s are not a JSON object", role);
    r = SL_EAUTH;
  }
  if (r) {
    json_decref(doc);
    return r;
  }
  const char *code = doc_str(doc, "Code", "Success");
  const char *id = doc_str(doc, "AccessKeyId", "");
  const char *secret = doc_str(doc, "SecretAccessKey", "");
  const char *tok = doc_str(doc, "Token", "");
  int64_t expires = 0;
  const char *bad = strcmp(code, "Success") != 0 ? "Code"
                    : !key_id_ok(id) || strlen(id) >= SL_AWS_KEY_ID_MAX ? "AccessKeyId"
                    : !secret_ok(secret) || strlen(secret) >= SL_AWS_SECRET_MAX ? "SecretAccessKey"
                    : !secret_ok(tok) || strlen(tok) >= SL_AWS_TOKEN_MAX ? "Token"
                    : sl_aws_parse_expiration(doc_str(doc, "Expiration", ""), &expires) < 0
                        ? "Expiration"
                        : NULL;
  if (bad) {
    sl_err_say(err, err_size, 0, "the credentials of role %s have a missing or malformed %s", role,
               bad);
    r = SL_EAUTH;
  } else {
    snprintf(ret->access_key_id, sizeof ret->access_key_id, "%s", id);
    snprintf(ret->secret_access_key, sizeof ret->secret_access_key, "%s", secret);
    snprintf(ret->session_token, sizeof ret->session_token, "%s", tok);
    ret->expires_unix = expires;
  }
  json_wipe(doc, "SecretAccessKey");
  json_wipe(doc, "Token");
  json_decref(doc);
  return r;
}

/* The instance role's credentials: token, role name, document. */
static int imds_fetch(const struct sl_aws_chain *c, struct sl_aws_creds *ret, char *err,
                      size_t err_size) {
  char hdr[1200], role[SL_AWS_ROLE_MAX];
  int r = imds_token(c, hdr, sizeof hdr, err, err_size);
  if (!r)
    r = imds_role(c, hdr, role, err, err_size);
  if (!r)
    r = imds_document(c, hdr, role, ret, err, err_size);
  sodium_memzero(hdr, sizeof hdr);
  return r;
}

int sl_aws_creds_get(struct sl_aws_chain *c, struct sl_aws_creds *ret, char *err, size_t err_size) {
  if (!c || !ret)
    return -EINVAL;
  pthread_mutex_lock(&c->mu);
  int64_t now = c->now(c->now_ctx);
  bool held = c->source != SL_AWS_CREDS_NONE;
  bool valid = held && (c->creds.expires_unix == 0 || now < c->creds.expires_unix);
  int r = 0;
  if (held && (c->creds.expires_unix == 0 || now < c->creds.expires_unix - REFRESH_S))
    goto give;                      /* static, or far from expiry */
  if (valid && now < c->next_try_unix)
    goto give;                      /* a refresh failed moments ago */
  if (!c->imds_enabled) {
    sl_err_say(err, err_size, 0,
               "no AWS credentials: none in the environment, none for profile %s in the "
               "shared files, and the instance metadata service is off (AWS_EC2_METADATA_DISABLED)",
               c->profile);
    r = SL_EAUTH;
    goto done;
  }
  struct sl_aws_creds *fresh = malloc(sizeof *fresh);
  char why[768] = "";
  if (!fresh) {
    r = -ENOMEM;
  } else {
    memset(fresh, 0, sizeof *fresh);
    r = imds_fetch(c, fresh, why, sizeof why);
  }
  if (!r && fresh->expires_unix <= now) {
    snprintf(why, sizeof why, "the instance role's credentials from %s have already expired", c->imds);
    r = SL_EAUTH;
  }
  if (!r) {
    c->creds = *fresh;
    c->source = SL_AWS_CREDS_IMDS;
    c->next_try_unix = 0;
  }
  if (fresh) {
    sodium_memzero(fresh, sizeof *fresh);
    free(fresh);
  }
  if (r && valid) {
    c->next_try_unix = now + RETRY_HOLDOFF_S;
    sl_warn(TOPIC, "renewing the instance role's credentials failed (%s); the current ones stay "
            "in use for %lld s more", why, (long long)(c->creds.expires_unix - now));
    r = 0;                          /* keep what still works */
  } else if (r) {
    if (held)
      sl_err_say(err, err_size, 0,
                 "the instance role's credentials expired and could not be renewed: %s", why);
    else
      sl_err_say(err, err_size, 0,
                 "no AWS credentials: none in the environment, none for profile %s in the "
                 "shared files, and no instance role: %s",
                 c->profile, why);
    r = r == -ENOMEM ? r : SL_EAUTH;
    goto done;
  }
give:
  *ret = c->creds;
done:
  pthread_mutex_unlock(&c->mu);
  return r;
}

enum sl_aws_creds_source sl_aws_creds_source(struct sl_aws_chain *c) {
  pthread_mutex_lock(&c->mu);
  enum sl_aws_creds_source s = c->source;
  pthread_mutex_unlock(&c->mu);
  return s;
}

const char *sl_aws_creds_source_name(enum sl_aws_creds_source s) {
  switch (s) {
  case SL_AWS_CREDS_ENV: return "environment";
  case SL_AWS_CREDS_SHARED_FILE: return "shared file";
  case SL_AWS_CREDS_IMDS: return "instance role";
  case SL_AWS_CREDS_NONE: break;
  }
  return "none";
}

/* ---- region and endpoints ---- */

int sl_aws_region(const char *configured, char ret[SL_AWS_REGION_MAX], char *err, size_t err_size) {
  const char *from = "the configuration", *v = configured && *configured ? configured : NULL;
  struct profile *p = NULL;
  int r = 0;
  if (!v && (v = env("AWS_REGION")))
    from = "AWS_REGION";
  if (!v && (v = env("AWS_DEFAULT_REGION")))
    from = "AWS_DEFAULT_REGION";
  if (!v) {
    char path[PATH_MAX_];
    if (!(p = malloc(sizeof *p)))
      return -ENOMEM;
    r = read_profile("AWS_CONFIG_FILE", "config", profile_name(), true, p, path, err, err_size);
    if (!r && p->region[0]) {
      v = p->region;
      from = "the profile's region";
    }
  }
  if (!r && !v) {
    sl_err_say(err, err_size, 0,
               "no AWS region: set it in the configuration, AWS_REGION, or the profile's "
               "region in the config file");
    r = SL_ECONFIG;
  } else if (!r && !region_ok(v)) {
    sl_err_say(err, err_size, 0,
               "the AWS region from %s is not a region name (lowercase letters, digits "
               "and '-')",
               from);
    r = SL_ECONFIG;
  } else if (!r) {
    snprintf(ret, SL_AWS_REGION_MAX, "%s", v);
  }
  if (p) {
    profile_wipe(p);
    free(p);
  }
  return r;
}

/* An endpoint from the environment: http(s)://..., trailing "/" dropped. */
static int endpoint_from(const char *v, char ret[SL_AWS_ENDPOINT_MAX]) {
  size_t n = strlen(v);
  while (n && v[n - 1] == '/')
    n--;
  if (strncasecmp(v, "http://", 7) != 0 && strncasecmp(v, "https://", 8) != 0)
    return -EINVAL;
  if (n <= 8 && strncasecmp(v, "https://", 8) == 0)
    return -EINVAL;
  if (n <= 7)
    return -EINVAL;
  if (n >= SL_AWS_ENDPOINT_MAX)
    return SL_ELIMIT;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)v[i] <= 0x20 || (unsigned char)v[i] == 0x7f)
      return -EINVAL;
  memcpy(ret, v, n);
  ret[n] = '\0';
  return 0;
}

int sl_aws_endpoint(const char *service, const char *region, char ret[SL_AWS_ENDPOINT_MAX]) {
  char var[96] = "AWS_ENDPOINT_URL_";
  size_t n = strlen(var);
  if (!service || !*service || strlen(service) > 48)
    return -EINVAL;
  for (const char *s = service; *s; s++) {
    if (!isalnum((unsigned char)*s) && *s != '-')
      return -EINVAL;
    var[n++] = *s == '-' ? '_' : (char)toupper((unsigned char)*s);
  }
  var[n] = '\0';
  const char *v = env(var);
  if (!v)
    v = env("AWS_ENDPOINT_URL");
  if (v)
    return endpoint_from(v, ret);
  if (!region || !region_ok(region))
    return -EINVAL;
  for (const char *s = service; *s; s++)
    if (isupper((unsigned char)*s))
      return -EINVAL;
  int w = snprintf(ret, SL_AWS_ENDPOINT_MAX, "https://%s.%s.amazonaws.com%s", service, region,
                   strncmp(region, "cn-", 3) == 0 ? ".cn" : "");
  return w < 0 || w >= SL_AWS_ENDPOINT_MAX ? SL_ELIMIT : 0;
}

void sl_aws_imds_endpoint(char ret[SL_AWS_ENDPOINT_MAX]) {
  const char *v = env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
  if (!v || endpoint_from(v, ret) < 0)
    snprintf(ret, SL_AWS_ENDPOINT_MAX, "http://169.254.169.254");
}
