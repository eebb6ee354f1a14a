/* The AWS credential chain: each source alone (environment, shared
 * credentials and config files, the instance role), their precedence, the
 * profile choice, broken files (a clear error that never holds the secret),
 * the instance role's refresh before expiry (a failed refresh keeps
 * credentials still valid, and waits before trying again), and the region
 * and endpoint rules.
 *
 * The instance metadata service is a libmicrohttpd server on 127.0.0.1
 * that speaks IMDSv2: a token from PUT /latest/api/token, required on every
 * GET. The chain's clock is the test's, so expiry is reached by moving it. */
#include "harness.h"

#include "sl_awscreds.h"
#include "sl_awscreds_int.h"
#include "sl_err.h"
#include "sl_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define IMDS_TOKEN "imds-session-token-v2"
#define ROLE "spotlab-role"
#define ERR_SIZE 512

/* ---- the metadata service ---- */

static struct {
  struct MHD_Daemon *d;
  int port;
  pthread_mutex_t mu;
  int token_puts;           /* PUT /latest/api/token with a TTL header */
  int doc_gets;             /* GETs of the role's credentials */
  int unauthorized;         /* GETs without the token */
  int generation;           /* numbers the credentials handed out */
  int64_t expires_unix;     /* Expiration of the next document */
  int fail_status;          /* non-zero: the role document answers this */
  bool no_role;             /* the role list answers 404 */
  bool bad_doc;             /* the document lacks its Expiration */
} imds = {.mu = PTHREAD_MUTEX_INITIALIZER};

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code, const char *body) {
  struct MHD_Response *r =
      MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
  if (!r) return MHD_NO;
  enum MHD_Result ok = MHD_queue_response(c, code, r);
  MHD_destroy_response(r);
  return ok;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls) {
  if (!*con_cls) {
    *con_cls = c;                           /* first call: headers only */
    return MHD_YES;
  }
  *upload_size = 0;
  if (!strcmp(url, "/latest/api/token")) {
    const char *ttl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                  "X-aws-ec2-metadata-token-ttl-seconds");
    if (strcmp(method, "PUT") != 0 || !ttl || atoi(ttl) <= 0)
      return reply(c, 400, "token needs PUT and a TTL");
    pthread_mutex_lock(&imds.mu);
    imds.token_puts++;
    pthread_mutex_unlock(&imds.mu);
    return reply(c, 200, IMDS_TOKEN);
  }
  const char *tok = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-aws-ec2-metadata-token");
  if (!tok || strcmp(tok, IMDS_TOKEN) != 0) {
    pthread_mutex_lock(&imds.mu);
    imds.unauthorized++;
    pthread_mutex_unlock(&imds.mu);
    return reply(c, 401, "");
  }
  char body[1024];
  pthread_mutex_lock(&imds.mu);
  bool no_role = imds.no_role, bad = imds.bad_doc;
  int fail = imds.fail_status;
  pthread_mutex_unlock(&imds.mu);
  if (!strcmp(url, "/latest/meta-data/iam/security-credentials/"))
    return no_role ? reply(c, 404, "") : reply(c, 200, ROLE "\n");
  if (!strcmp(url, "/latest/meta-data/iam/security-credentials/" ROLE)) {
    pthread_mutex_lock(&imds.mu);
    imds.doc_gets++;
    int gen = ++imds.generation;
    time_t exp = (time_t)imds.expires_unix;
    pthread_mutex_unlock(&imds.mu);
    if (fail)
      return reply(c, (unsigned)fail, "unavailable");
    char when[32];
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&exp, &tm));
    snprintf(body, sizeof body,
             "{\"Code\": \"Success\", \"Type\": \"AWS-HMAC\", \"AccessKeyId\": \"ASIAROLE%04d\", "
             "\"SecretAccessKey\": \"role-secret-%d\", \"Token\": \"role-token-%d\"%s%s%s}",
             gen, gen, gen, bad ? "" : ", \"Expiration\": \"", bad ? "" : when, bad ? "" : "\"");
    return reply(c, 200, body);
  }
  return reply(c, 404, "");
}

static int imds_start(void) {
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  imds.d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0,
                            NULL, NULL, handle, NULL, MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_END);
  if (!imds.d) return -1;
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(imds.d, MHD_DAEMON_INFO_BIND_PORT);
  if (!info || !info->port) return -1;
  imds.port = info->port;
  return 0;
}

static void imds_set(int64_t expires_unix, int fail_status, bool no_role, bool bad_doc) {
  pthread_mutex_lock(&imds.mu);
  imds.expires_unix = expires_unix;
  imds.fail_status = fail_status;
  imds.no_role = no_role;
  imds.bad_doc = bad_doc;
  pthread_mutex_unlock(&imds.mu);
}

static int counter(const int *n) {
  pthread_mutex_lock(&imds.mu);
  int v = *n;
  pthread_mutex_unlock(&imds.mu);
  return v;
}

static int doc_gets(void) { return counter(&imds.doc_gets); }

/* ---- the environment and files ---- */

static char dir[256];

static const char *const aws_vars[] = {
  "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
  "AWS_DEFAULT_PROFILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_REGION",
  "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_EC2", "AWS_ENDPOINT_URL_S3",
  "AWS_EC2_METADATA_SERVICE_ENDPOINT", "AWS_EC2_METADATA_DISABLED",
};

/* No AWS variable set, HOME an empty folder (no ~/.aws), the metadata
 * service off: each test switches on what it needs. */
static void env_reset(void) {
  for (size_t i = 0; i < sizeof aws_vars / sizeof aws_vars[0]; i++)
    unsetenv(aws_vars[i]);
  char home[300];
  snprintf(home, sizeof home, "%s/home", dir);
  setenv("HOME", home, 1);
  setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
}

static void imds_on(void) {
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/", imds.port);   /* trailing '/' dropped */
  setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", url, 1);
  unsetenv("AWS_EC2_METADATA_DISABLED");
}

static const char *write_file(const char *name, const char *text) {
  static char paths[8][300];
  static int next;
  char *p = paths[next++ % 8];
  snprintf(p, sizeof paths[0], "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  CHECK(f != NULL);
  if (f) {
    fputs(text, f);
    fclose(f);
  }
  return p;
}

static int64_t fake_now;
static int64_t fake_clock(void *ctx) { return fake_now; }

/* A chain made now; its result code in *ret_r and its sentence in err. */
static struct sl_aws_chain *chain(int *ret_r, char *err) {
  struct sl_aws_chain *c = NULL;
  err[0] = '\0';
  *ret_r = sl_aws_chain_new(&c, err, ERR_SIZE);
  return c;
}

/* ---- credentials ---- */

static const char creds_file[] =
    "# shared credentials\n"
    "[default]\n"
    "aws_access_key_id = AKIDDEFAULT\n"
    "aws_secret_access_key = default/secret+key\n"
    "\n"
    "[dev]\n"
    "AWS_ACCESS_KEY_ID=AKIDDEV\n"
    "aws_secret_access_key=dev-secret\n"
    "aws_session_token = dev-token\n"
    "s3 =\n"
    "    max_concurrent_requests = 20\n"
    "; a comment\n";

static const char config_file[] =
    "[default]\n"
    "region = eu-west-1\n"
    "[profile cfg]\n"
    "aws_access_key_id = AKIDCFG\n"
    "aws_secret_access_key = cfg-secret\n"
    "region = ap-south-1\n"
    "[cfgbare]\n"
    "aws_access_key_id = AKIDBARE\n"
    "aws_secret_access_key = bare-secret\n"
    "[profile dev]\n"
    "region = us-west-2\n"
    "[profile assumed]\n"
    "role_arn = arn:aws:iam::123456789012:role/x\n"
    "source_profile = default\n";

static void test_env(void) {
  env_reset();
  imds_on();
  setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "env-secret", 1);
  setenv("AWS_SESSION_TOKEN", "env-token", 1);
  setenv("AWS_SHARED_CREDENTIALS_FILE", write_file("credentials", creds_file), 1);
  int r;
  char err[ERR_SIZE];
  struct sl_aws_chain *c = chain(&r, err);
  CHECK_INT(r, 0);
  struct sl_aws_creds cr;
  int before = doc_gets();
  CHECK_INT(sl_aws_creds_get(c, &cr, err, sizeof err), 0);
  CHECK_STR(cr.access_key_id, "AKIDENV");           /* env over files and the role */
  CHECK_STR(cr.secret_access_key, "env-secret");
  CHECK_STR(cr.session_token, "env-token");
  CHECK_INT(cr.expires_unix, 0);
  CHECK_INT(sl_aws_creds_source(c), SL_AWS_CREDS_ENV);
  CHECK_STR(sl_aws_creds_source_name(sl_aws_creds_source(c)), "environment");
  CHECK_INT(doc_gets(), before);
  c = sl_aws_chain_free(c);

  /* No token: the field is empty. */
  unsetenv("AWS_SESSION_TOKEN");
  c = chain(&r, err);
  CHECK_INT(sl_aws_creds_get(c, &cr, err, sizeof err), 0);
  CHECK_STR(cr.session_token, "");
  c = sl_aws_chain_free(c);

  /* One of the pair alone is an error that names the missing one. */
  unsetenv("AWS_ACCESS_KEY_ID");
  c = chain(&r, err);
  CHECK(c == NULL);
  CHECK_INT(r, SL_ECONFIG);
  CHECK(strstr(err, "AWS_ACCESS_KEY_ID") != NULL);
  CHECK(strstr(err, "env-secret") == NULL);
  setenv("AWS_ACCESS_KEY_ID", "AKID/ENV", 1);        /* not a key id */
  c = chain(&r, err);
  CHECK_INT(r, SL_ECONFIG);
  CHECK(strstr(err, "AWS_ACCESS_KEY_ID") != NULL);
  sl_aws_chain_free(c);
}

static void expect_file_creds(const char *id, const char *secret, const char *token) {
  int r;
  char err[ERR_SIZE];
  struct sl_aws_chain *c = chain(&r, err);
  CHECK_INT(r, 0);
  if (r)
    fprintf(stderr, "chain: %s\n", err);
  struct sl_aws_creds cr;
  memset(&cr, 0, sizeof cr);
  CHECK_INT(sl_aws_creds_get(c, &cr, err, sizeof err), 0);
  CHECK_STR(cr.access_key_id, id);
  CHECK_STR(cr.secret_access_key, secret);
  CHECK_STR(cr.session_token, token);
  CHECK_INT(sl_aws_creds_source(c), SL_AWS_CREDS_SHARED_FILE);
  sl_aws_chain_free(c);
}

/* A chain that must fail: code, a sentence holding want, never secret. */
static void expect_chain_error(int code, const char *want, const char *secret) {
  int r;
  char err[ERR_SIZE];
  struct sl_aws_chain *c = chain(&r, err);
  CHECK(c == NULL);
  CHECK_INT(r, code);
  if (!strstr(err, want))
    fprintf(stderr, "error \"%s\" lacks \"%s\"\n", err, want);
  CHECK(strstr(err, want) != NULL);
  if (strstr(err, secret))
    fprintf(stderr, "error \"%s\" holds the secret\n", err);
  CHECK(strstr(err, secret) == NULL);
  sl_aws_chain_free(c);
}

static void test_files(void) {
  env_reset();
  imds_on();
  const char *cred = write_file("credentials", creds_file);
  const char *conf = write_file("config", config_file);
  setenv("AWS_SHARED_CREDENTIALS_FILE", cred, 1);
  setenv("AWS_CONFIG_FILE", conf, 1);
  int before = doc_gets();
  expect_file_creds("AKIDDEFAULT", "default/secret+key", "");   /* files over the role */
  CHECK_INT(doc_gets(), before);
  setenv("AWS_PROFILE", "dev", 1);
  expect_file_creds("AKIDDEV", "dev-secret", "dev-token");
  setenv("AWS_PROFILE", "cfg", 1);                              /* [profile cfg] in config */
  expect_file_creds("AKIDCFG", "cfg-secret", "");
  setenv("AWS_PROFILE", "cfgbare", 1);                          /* config needs "profile " */
  expect_chain_error(SL_ECONFIG, "cfgbare", "bare-secret");
  setenv("AWS_PROFILE", "nosuch", 1);
  expect_chain_error(SL_ECONFIG, "profile nosuch", "default/secret+key");
  setenv("AWS_PROFILE", "assumed", 1);
  expect_chain_error(SL_ENOTSUP, "role_arn", "default/secret+key");
  unsetenv("AWS_PROFILE");
  setenv("AWS_DEFAULT_PROFILE", "dev", 1);
  expect_file_creds("AKIDDEV", "dev-secret", "dev-token");
  unsetenv("AWS_DEFAULT_PROFILE");

  /* The default paths under HOME, and "~/" in the variable. */
  unsetenv("AWS_SHARED_CREDENTIALS_FILE");
  unsetenv("AWS_CONFIG_FILE");
  write_file("home/.aws/credentials", "[default]\naws_access_key_id=AKIDHOME\n"
                                      "aws_secret_access_key=home-secret\n");
  expect_file_creds("AKIDHOME", "home-secret", "");
  write_file("home/other", "[default]\naws_access_key_id=AKIDTILDE\naws_secret_access_key=t\n");
  setenv("AWS_SHARED_CREDENTIALS_FILE", "~/other", 1);
  expect_file_creds("AKIDTILDE", "t", "");
  /* A missing file is no error: the next source answers. */
  setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
  setenv("AWS_CONFIG_FILE", conf, 1);
  setenv("AWS_PROFILE", "cfg", 1);
  expect_file_creds("AKIDCFG", "cfg-secret", "");
  unsetenv("AWS_PROFILE");

  /* Broken files: the file and line are named, the secret never. */
  setenv("AWS_SHARED_CREDENTIALS_FILE",
         write_file("broken1", "[default]\naws_access_key_id = AKIDB\n"
                               "aws_secret_access_key SECRET-SHOULD-NOT-LEAK\n"), 1);
  expect_chain_error(SL_EPARSE, "broken1 line 3", "SECRET-SHOULD-NOT-LEAK");
  setenv("AWS_SHARED_CREDENTIALS_FILE",
         write_file("broken2", "[default\naws_secret_access_key = SECRET-TWO\n"), 1);
  expect_chain_error(SL_EPARSE, "line 1", "SECRET-TWO");
  setenv("AWS_SHARED_CREDENTIALS_FILE",
         write_file("broken3", "aws_secret_access_key = SECRET-THREE\n[default]\n"), 1);
  expect_chain_error(SL_EPARSE, "before any [section]", "SECRET-THREE");
  setenv("AWS_SHARED_CREDENTIALS_FILE",
         write_file("broken4", "[default]\naws_secret_access_key = SECRET-FOUR\n"), 1);
  expect_chain_error(SL_ECONFIG, "no aws_access_key_id", "SECRET-FOUR");
  setenv("AWS_SHARED_CREDENTIALS_FILE",
         write_file("broken5", "[default]\naws_access_key_id = AKIDX\n"
                               "aws_secret_access_key = SECRET FIVE\n"), 1);
  expect_chain_error(SL_ECONFIG, "aws_secret_access_key", "SECRET FIVE");
  char longline[400] = "[default]\naws_access_key_id = AKIDX\naws_secret_access_key = ";
  size_t n = strlen(longline);
  memset(longline + n, 'S', 200);
  longline[n + 200] = '\0';
  setenv("AWS_SHARED_CREDENTIALS_FILE", write_file("broken6", longline), 1);
  expect_chain_error(SL_ELIMIT, "longer than", "SSSSSSSS");
  /* The broken file of a later source does not matter once one has answered. */
  setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "env-secret", 1);
  int r;
  char err[ERR_SIZE];
  struct sl_aws_chain *c = chain(&r, err);
  CHECK_INT(r, 0);
  sl_aws_chain_free(c);
}

static void test_imds(void) {
  env_reset();
  imds_on();
  setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
  setenv("AWS_CONFIG_FILE", "/nonexistent/config", 1);
  int r;
  char err[ERR_SIZE];
  struct sl_aws_creds cr, prev;

  /* Real clock: credentials 4 minutes from expiry are fetched again on the
   * next call. */
  imds_set((int64_t)time(NULL) + 240, 0, false, false);
  struct sl_aws_chain *c = chain(&r, err);
  CHECK_INT(r, 0);
  CHECK_INT(sl_aws_creds_source(c), SL_AWS_CREDS_NONE);
  int puts0 = counter(&imds.token_puts), gets0 = doc_gets();
  CHECK_INT(sl_aws_creds_get(c, &cr, err, sizeof err), 0);
  CHECK(strncmp(cr.access_key_id, "ASIAROLE", 8) == 0);
  CHECK(strncmp(cr.secret_access_key, "role-secret-", 12) == 0);
  CHECK(strncmp(cr.session_token, "role-token-", 11) == 0);
  CHECK(cr.expires_unix > (int64_t)time(NULL) + 200 && cr.expires_unix <= (int64_t)time(NULL) + 240);
  CHECK_INT(sl_aws_creds_source(c), SL_AWS_CREDS_IMDS);
  CHECK_STR(sl_aws_creds_source_name(SL_AWS_CREDS_IMDS), "instance role");
  CHECK_INT(counter(&imds.token_puts), puts0 + 1);
  CHECK_INT(doc_gets(), gets0 + 1);
  CHECK_INT(counter(&imds.unauthorized), 0);
  prev = cr;
  CHECK_INT(sl_aws_creds_get(c, &cr, err, sizeof err), 0);
  CHECK_INT(doc_gets(), gets0 + 2);
  CHECK(strcmp(cr.access_key_id, prev.access_key_id) != 0);
  c = sl_aws_chain_free(c);

  /* The test's clock from here on. */
  fake_now = 2000000000;
  imds_set(fake_now + 3600, 0, false, false);
  c = chain(&r, err);
  sl_aws_chain_set_clock(c, fake_clock, NULL);
  CHECK_INT(sl_aws_creds_get(c, &cr, err, sizeof err), 0);
  CHECK_INT(cr.expires_unix, fake_now + 3600);
  prev = cr;
  gets0 = doc_gets();
  fake_now += 3600 - 301;                         /* not yet within 5 minutes */
  CHECK_INT(sl_aws_creds_get(c, &cr, err, sizeof err), 0);
  CHECK_INT(doc_gets(), gets0);
  CHECK_STR(cr.access_key_id, prev.access_key_id);
  fake_now += 2;                                  /* now within: refreshed */
  imds_set(fake_now + 7200, 0, false, false);
  CHECK_INT(sl_aws_creds_get(c, &cr, err, sizeof err), 0);
  CHECK_INT(doc_gets(), gets0 + 1);
  CHECK(strcmp(cr.access_key_id, prev.access_key_id) != 0);
  CHECK_INT(cr.expires_unix, fake_now + 7200);
  prev = cr;

  /* A failing refresh keeps credentials that are still valid, and the next
   * call within the hold-off does not ask again. */
  imds_set(0, 500, false, false);
  fake_now = prev.expires_unix - 100;
  CHECK_INT(sl_aws_creds_get(c, &cr, err, sizeof err), 0);
  CHECK_STR(cr.access_key_id, prev.access_key_id);
  CHECK_STR(cr.secret_access_key, prev.secret_access_key);
  int after_fail = doc_gets();
  CHECK(after_fail > gets0 + 1);
  fake_now += 5;
  CHECK_INT(sl_aws_creds_get(c, &cr, err, sizeof err), 0);
  CHECK_INT(doc_gets(), after_fail);
  fake_now += 40;                                 /* past the hold-off: asks again */
  CHECK_INT(sl_aws_creds_get(c, &cr, err, sizeof err), 0);
  CHECK(doc_gets() > after_fail);
  CHECK_STR(cr.access_key_id, prev.access_key_id);
  /* Expired and still failing: an error, with no secret in it. */
  fake_now = prev.expires_unix;
  memset(&cr, 'z', sizeof cr);
  err[0] = '\0';
  CHECK_INT(sl_aws_creds_get(c, &cr, err, sizeof err), SL_EAUTH);
  CHECK(strstr(err, "expired") != NULL);
  CHECK(strstr(err, "HTTP 500") != NULL);
  CHECK(strstr(err, "role-secret") == NULL && strstr(err, "role-token") == NULL);
  CHECK(cr.access_key_id[0] == 'z');              /* untouched on error */
  /* The service comes back. */
  imds_set(fake_now + 3600, 0, false, false);
  CHECK_INT(sl_aws_creds_get(c, &cr, err, sizeof err), 0);
  CHECK_INT(cr.expires_unix, fake_now + 3600);
  c = sl_aws_chain_free(c);

  /* No role on the instance; a document without Expiration. */
  imds_set(fake_now + 3600, 0, true, false);
  c = chain(&r, err);
  sl_aws_chain_set_clock(c, fake_clock, NULL);
  CHECK_INT(sl_aws_creds_get(c, &cr, err, sizeof err), SL_EAUTH);
  CHECK(strstr(err, "no IAM role") != NULL);
  imds_set(fake_now + 3600, 0, false, true);
  CHECK_INT(sl_aws_creds_get(c, &cr, err, sizeof err), SL_EAUTH);
  CHECK(strstr(err, "Expiration") != NULL);
  CHECK(strstr(err, "role-secret") == NULL);
  /* Credentials that arrive already expired are refused. */
  imds_set(fake_now - 10, 0, false, false);
  CHECK_INT(sl_aws_creds_get(c, &cr, err, sizeof err), SL_EAUTH);
  c = sl_aws_chain_free(c);

  /* Switched off: the service is never asked. */
  imds_set(fake_now + 3600, 0, false, false);
  setenv("AWS_EC2_METADATA_DISABLED", "TRUE", 1);
  gets0 = doc_gets();
  c = chain(&r, err);
  CHECK_INT(sl_aws_creds_get(c, &cr, err, sizeof err), SL_EAUTH);
  CHECK(strstr(err, "AWS_EC2_METADATA_DISABLED") != NULL);
  CHECK_INT(doc_gets(), gets0);
  CHECK_INT(sl_aws_creds_source(c), SL_AWS_CREDS_NONE);
  c = sl_aws_chain_free(c);

  /* Nothing listening: an error that names the endpoint. */
  unsetenv("AWS_EC2_METADATA_DISABLED");
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  CHECK(bind(s, (struct sockaddr *)&sa, sizeof sa) == 0);
  CHECK(getsockname(s, (struct sockaddr *)&sa, &len) == 0);
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d", ntohs(sa.sin_port));
  close(s);                                       /* bound, never listening: refused */
  setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", url, 1);
  c = chain(&r, err);
  CHECK_INT(sl_aws_creds_get(c, &cr, err, sizeof err), SL_EAUTH);
  CHECK(strstr(err, url) != NULL);
  c = sl_aws_chain_free(c);
}

/* Many threads on one chain whose credentials are always due for refresh. */
struct worker {
  struct sl_aws_chain *c;
  int failures;
};

static void *hammer(void *arg) {
  struct worker *w = arg;
  for (int i = 0; i < 25; i++) {
    struct sl_aws_creds cr;
    char err[ERR_SIZE];
    if (sl_aws_creds_get(w->c, &cr, err, sizeof err) != 0 || strncmp(cr.access_key_id, "ASIAROLE", 8))
      w->failures++;
  }
  return NULL;
}

static void test_threads(void) {
  env_reset();
  imds_on();
  setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
  setenv("AWS_CONFIG_FILE", "/nonexistent/config", 1);
  imds_set((int64_t)time(NULL) + 120, 0, false, false);
  int r;
  char err[ERR_SIZE];
  struct sl_aws_chain *c = chain(&r, err);
  CHECK_INT(r, 0);
  pthread_t t[4];
  struct worker w[4];
  for (int i = 0; i < 4; i++) {
    w[i] = (struct worker){.c = c};
    CHECK(pthread_create(&t[i], NULL, hammer, &w[i]) == 0);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    CHECK_INT(w[i].failures, 0);
  }
  sl_aws_chain_free(c);
}

/* ---- region and endpoints ---- */

static void test_region(void) {
  env_reset();
  char region[SL_AWS_REGION_MAX], err[ERR_SIZE];
  CHECK_INT(sl_aws_region(NULL, region, err, sizeof err), SL_ECONFIG);
  CHECK(strstr(err, "AWS_REGION") != NULL);
  setenv("AWS_CONFIG_FILE", write_file("config", config_file), 1);
  CHECK_INT(sl_aws_region(NULL, region, err, sizeof err), 0);
  CHECK_STR(region, "eu-west-1");                 /* [default] region */
  setenv("AWS_PROFILE", "dev", 1);
  CHECK_INT(sl_aws_region("", region, err, sizeof err), 0);
  CHECK_STR(region, "us-west-2");                 /* [profile dev] region */
  setenv("AWS_DEFAULT_REGION", "ca-central-1", 1);
  CHECK_INT(sl_aws_region(NULL, region, err, sizeof err), 0);
  CHECK_STR(region, "ca-central-1");
  setenv("AWS_REGION", "sa-east-1", 1);
  CHECK_INT(sl_aws_region(NULL, region, err, sizeof err), 0);
  CHECK_STR(region, "sa-east-1");
  CHECK_INT(sl_aws_region("eu-north-1", region, err, sizeof err), 0);
  CHECK_STR(region, "eu-north-1");
  strcpy(region, "kept");
  CHECK_INT(sl_aws_region("EU North 1", region, err, sizeof err), SL_ECONFIG);
  CHECK_STR(region, "kept");
  setenv("AWS_REGION", "us-east-1/../x", 1);
  CHECK_INT(sl_aws_region(NULL, region, err, sizeof err), SL_ECONFIG);
  CHECK(strstr(err, "AWS_REGION") != NULL);
  /* A broken config file is reported when the region must come from it. */
  unsetenv("AWS_REGION");
  unsetenv("AWS_DEFAULT_REGION");
  setenv("AWS_CONFIG_FILE", write_file("config-broken", "[default\nregion=x\n"), 1);
  CHECK_INT(sl_aws_region(NULL, region, err, sizeof err), SL_EPARSE);
}

static void test_endpoint(void) {
  env_reset();
  char ep[SL_AWS_ENDPOINT_MAX];
  CHECK_INT(sl_aws_endpoint("ec2", "us-east-1", ep), 0);
  CHECK_STR(ep, "https://ec2.us-east-1.amazonaws.com");
  CHECK_INT(sl_aws_endpoint("s3", "eu-west-1", ep), 0);
  CHECK_STR(ep, "https://s3.eu-west-1.amazonaws.com");
  CHECK_INT(sl_aws_endpoint("ec2", "cn-north-1", ep), 0);
  CHECK_STR(ep, "https://ec2.cn-north-1.amazonaws.com.cn");
  setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:4566/", 1);
  CHECK_INT(sl_aws_endpoint("ec2", "us-east-1", ep), 0);
  CHECK_STR(ep, "http://127.0.0.1:4566");
  setenv("AWS_ENDPOINT_URL_EC2", "http://localhost:9001", 1);
  CHECK_INT(sl_aws_endpoint("ec2", "us-east-1", ep), 0);
  CHECK_STR(ep, "http://localhost:9001");         /* the service's own over the general one */
  CHECK_INT(sl_aws_endpoint("s3", "us-east-1", ep), 0);
  CHECK_STR(ep, "http://127.0.0.1:4566");
  setenv("AWS_ENDPOINT_URL_S3", "https://s3.example.org//", 1);
  CHECK_INT(sl_aws_endpoint("s3", "us-east-1", ep), 0);
  CHECK_STR(ep, "https://s3.example.org");
  setenv("AWS_ENDPOINT_URL_S3", "s3.example.org", 1);
  CHECK_INT(sl_aws_endpoint("s3", "us-east-1", ep), -EINVAL);
  setenv("AWS_ENDPOINT_URL_S3", "https://", 1);
  CHECK_INT(sl_aws_endpoint("s3", "us-east-1", ep), -EINVAL);
  unsetenv("AWS_ENDPOINT_URL_S3");
  unsetenv("AWS_ENDPOINT_URL");
  CHECK_INT(sl_aws_endpoint("s3", "not a region", ep), -EINVAL);
  CHECK_INT(sl_aws_endpoint("s3/x", "us-east-1", ep), -EINVAL);
  CHECK_INT(sl_aws_endpoint("", "us-east-1", ep), -EINVAL);

  sl_aws_imds_endpoint(ep);
  CHECK_STR(ep, "http://169.254.169.254");
  setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://[fd00:ec2::254]/", 1);
  sl_aws_imds_endpoint(ep);
  CHECK_STR(ep, "http://[fd00:ec2::254]");
}

/* The credentials document's Expiration: the forms the service writes,
 * and none of the ones sscanf's %d alone would take (a sign or a space in a
 * field). A document with such an Expiration is refused, as is one with a
 * field that holds a NUL. */
static void test_expiration(void) {
  int64_t t = -1;
  CHECK_INT(sl_aws_parse_expiration("2026-05-01T16:00:00Z", &t), 0);
  CHECK_INT(t, 1777651200);
  CHECK_INT(sl_aws_parse_expiration("2026-05-01T16:00:00.250Z", &t), 0);
  CHECK_INT(t, 1777651200);
  CHECK_INT(sl_aws_parse_expiration("2026-05-01T16:00:00+00:00", &t), 0);
  static const char *const bad[] = {
      "2026-+5-01T16:00:00Z", "2026-05- 1T16:00:00Z", "+026-05-01T16:00:00Z",
      "2026-05-01T-1:00:00Z", "2026-05-01 16:00:00Z", "2026-05-01T16:00:00",
      "2026-05-01T16:00:00+02:00", "2026-13-01T16:00:00Z", "2026-05", "",
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    t = -1;
    CHECK_INT(sl_aws_parse_expiration(bad[i], &t), -EINVAL);
    CHECK_INT(t, -1);
  }
  char body[] = "{\"Code\": \"Success\", \"AccessKeyId\": \"ASIAROLE0001\", "
                "\"SecretAccessKey\": \"role-secret-1\", \"Token\": \"role-token-1\", "
                "\"Expiration\": \"2026-+5-01T16:00:00Z\"}";
  struct sl_http_resp resp = {.status = 200, .body = body, .body_len = strlen(body), .tries = 1};
  struct sl_aws_creds cr;
  char err[ERR_SIZE] = "";
  memset(&cr, 'z', sizeof cr);
  CHECK_INT(sl_aws_imds_creds_reply("http://169.254.169.254", ROLE, &resp, &cr, err, sizeof err),
            SL_EAUTH);
  CHECK(strstr(err, "malformed Expiration") != NULL);
  CHECK(cr.access_key_id[0] == 'z');              /* untouched on error */
  /* a "\u0000" in a field: cut there, the secret would be another */
  char cut[] = "{\"AccessKeyId\": \"ASIAROLE0001\", \"SecretAccessKey\": \"role\\u0000secret\", "
               "\"Token\": \"role-token-1\", \"Expiration\": \"2026-05-01T16:00:00Z\"}";
  resp.body = cut;
  resp.body_len = strlen(cut);
  err[0] = 0;
  CHECK_INT(sl_aws_imds_creds_reply("http://169.254.169.254", ROLE, &resp, &cr, err, sizeof err),
            SL_EAUTH);
  CHECK(strstr(err, "malformed SecretAccessKey") != NULL);
  CHECK(cr.access_key_id[0] == 'z');
}

int main(void) {
  if (sl_http_global_init() != 0) {
    fprintf(stderr, "libcurl did not start\n");
    return 1;
  }
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/test-awscreds-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir) || imds_start() != 0) {
    fprintf(stderr, "cannot set up: %s\n", strerror(errno));
    return 1;
  }
  char sub[300];
  snprintf(sub, sizeof sub, "%s/home", dir);
  mkdir(sub, 0700);
  snprintf(sub, sizeof sub, "%s/home/.aws", dir);
  mkdir(sub, 0700);

  test_env();
  test_files();
  test_imds();
  test_expiration();
  test_threads();
  test_region();
  test_endpoint();

  MHD_stop_daemon(imds.d);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", dir);
  TEST_MAIN_END();
}
