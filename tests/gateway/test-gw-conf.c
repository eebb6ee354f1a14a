/* Configuration: defaults, layering, every kind of error with FILE:LINE,
 * provider sections (owned by the registered classes), refused options, and
 * --dump-config output that reads back to the same values.
 *
 * conf.c knows providers only through the registry, so this test registers
 * two classes of its own: "local", with options shaped like the local
 * provider's (the real class is checked in tests/provider/test-local.c), and
 * "fake". */
#include "conf.h"
#include "harness.h"
#include "provider.h"
#include "sl_err.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/test-gw-conf-XXXXXX";

static int check_local(const char *name, const char *value, char *err, size_t size) {
  double d;
  if (!strcmp(name, "slots"))
    return gw_config_parse_number(name, value, true, 0, 64, &d, err, size);
  if (!strcmp(name, "time_scale"))
    return gw_config_parse_number(name, value, false, 0.001, 1e6, &d, err, size);
  if (!strcmp(name, "market") && strncmp(value, "random:", 7) && strncmp(value, "trace:", 6)) {
    snprintf(err, size, "market: \"%s\" is not trace:PATH or random:SEED", value);
    return SL_ECONFIG;
  }
  return 0;
}

static struct gw_provider *open_none(const struct gw_provider_env *env, char *err,
                                     size_t err_size) {
  (void)env;
  snprintf(err, err_size, "not opened in this test");
  return NULL;
}

static const struct gw_provider_option local_options[] = {
  {"slots", "2", "instances at once"},
  {"market", "random:1", "trace:PATH or random:SEED"},
  {"time_scale", "60", "simulated seconds per second"},
  {"catalog", "", "CSV of types"},
  {NULL, NULL, NULL},
};
static const struct gw_provider_class local_class = {
  "local", local_options, check_local, open_none, NULL,
};
static const struct gw_provider_option fake_options[] = {
  {"slots", "2", "fake instances at once"},
  {NULL, NULL, NULL},
};
static const struct gw_provider_class fake_class = {"fake", fake_options, NULL, open_none, NULL};

/* Writes text to dir/name (NULL: only the path); the path. */
static const char *write_file(const char *name, const char *text) {
  static char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (!text)
    return path;
  FILE *f = fopen(path, "w");
  fputs(text, f);
  fclose(f);
  return path;
}

static struct gw_config loaded;

/* Loads text over the defaults into `loaded`; returns the error message ("" on success). */
static const char *load(const char *text, int *ret) {
  static char err[512];
  err[0] = 0;
  gw_config_defaults(&loaded);
  *ret = gw_config_load_file(&loaded, write_file("c.ini", text), err, sizeof err);
  return err;
}

static void expect_error(const char *text, const char *needle, int line) {
  int r;
  const char *err = load(text, &r);
  char where[300];
  snprintf(where, sizeof where, "%s/c.ini:%d: ", dir, line);
  CHECK_INT(r, SL_ECONFIG);
  CHECK(strstr(err, where) == err);
  CHECK(strstr(err, needle) != NULL);
  if (!strstr(err, needle) || strstr(err, where) != err)
    fprintf(stderr, "  message was: %s\n  expected: %s...%s\n", err, where, needle);
}

static char *dump(const struct gw_config *c) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  CHECK_INT(gw_config_dump(c, f), 0);
  fclose(f);
  return text;
}

static void test_providers(void) {
  static struct gw_config c;
  char msg[512];
  int r;

  /* no provider section: local, implicit, with the class's defaults */
  gw_config_defaults(&c);
  CHECK_INT(c.n_providers, 1);
  CHECK_STR(c.providers[0].name, "local");
  CHECK(c.providers[0].implicit);
  CHECK_STR(gw_config_provider_option(&c, "local", "time_scale"), "60");
  CHECK_STR(gw_config_provider_option(&c, "local", "catalog"), "");
  CHECK(gw_config_provider_option(&c, "local", "bogus") == NULL);
  CHECK(gw_config_provider_option(&c, "nobody", "slots") == NULL);
  CHECK_STR(gw_config_provider_option(&c, "fake", "slots"), "2"); /* not enabled: the default */
  load("[gateway]\nlisten = ipc:///tmp/x.sock\n", &r);
  CHECK_INT(r, 0);
  CHECK_INT(loaded.n_providers, 1);
  CHECK(loaded.providers[0].implicit);

  /* a named section drops the implicit local; an empty one enables with defaults */
  CHECK_STR(load("[provider.fake]\n", &r), "");
  CHECK_INT(r, 0);
  CHECK_INT(loaded.n_providers, 1);
  CHECK_STR(loaded.providers[0].name, "fake");
  CHECK(!loaded.providers[0].implicit);
  CHECK_INT(loaded.providers[0].n, 0);
  CHECK_STR(gw_config_provider_option(&loaded, "fake", "slots"), "2");

  /* file order; values as written; a section named twice is an error */
  CHECK_STR(load("[provider.fake]\nslots = 6\n[provider.local]\ntime_scale = 0.5\n"
                 "market = trace:/x.json\n", &r), "");
  CHECK_INT(r, 0);
  CHECK_INT(loaded.n_providers, 2);
  CHECK_STR(loaded.providers[0].name, "fake");
  CHECK_STR(loaded.providers[1].name, "local");
  CHECK(!loaded.providers[1].implicit);
  CHECK_STR(gw_config_provider_option(&loaded, "fake", "slots"), "6");
  CHECK_STR(gw_config_provider_option(&loaded, "local", "time_scale"), "0.5");
  CHECK_STR(gw_config_provider_option(&loaded, "local", "market"), "trace:/x.json");
  CHECK_STR(gw_config_provider_option(&loaded, "local", "slots"), "2");
  expect_error("[provider.fake]\nslots = 5\n[provider.local]\n[provider.fake]\nslots = 6\n",
               "duplicate section [provider.fake] (first on line 1)", 4);

  /* [provider.local] named by the file keeps local, now explicit */
  CHECK_STR(load("[provider.local]\nslots = 1\n", &r), "");
  CHECK_INT(loaded.n_providers, 1);
  CHECK(!loaded.providers[0].implicit);
  CHECK_STR(gw_config_provider_option(&loaded, "local", "slots"), "1");

  /* errors: unknown provider (naming the ones there are), unknown key
   * (naming the ones the class accepts), a value the class refuses */
  expect_error("[gateway]\n\n[provider.aws]\nregion = us-east-1\n",
               "unknown provider \"aws\" (this gateway has: local, fake)", 3);
  expect_error("[provider.local]\nslots = 1\nbogus = 2\n",
               "unknown key \"bogus\" in [provider.local] (it accepts: slots, market, "
               "time_scale, catalog)", 3);
  expect_error("[provider.local]\nslots = 1000\n", "slots: 1000 is out of range [0, 64]", 2);
  /* a bound as written, not rounded (0 to 2^30) */
  expect_error("[worker]\ndata_cache_mb = 1073741825\n",
               "data_cache_mb: 1073741825 is out of range [0, 1073741824]", 2);
  expect_error("[provider.local]\nslots = 1.5\n", "not an integer", 2);
  expect_error("[provider.local]\nmarket = sometimes\n", "market: \"sometimes\" is not", 2);
  expect_error("[provider.]\n", "unknown section [provider.]", 1);
  expect_error("[provider]\n", "unknown section [provider]", 1);
  expect_error("[provider.lo cal]\n", "unknown section", 1);
  /* the main sections name what they accept, and an unknown one the sections there are */
  expect_error("[gateway]\nidle_timeout = 30m\n",
               "unknown key \"idle_timeout\" in [gateway] (it accepts: listen, workers, state_dir, ", 2);
  expect_error("[group.ml]\nbudget = 5\n", "unknown key \"budget\" in [group.ml] (it accepts: notebook_timeout, ",
               2);
  expect_error("[users]\nalice = 1\n",
               "unknown section [users] (sections: [gateway], [idle], [budget], [store], [hub], [worker], "
               "[user.NAME], [group.NAME], [webhook.NAME], [provider.NAME])", 1);

  /* gw_config_set: enables explicitly, checks first, changes nothing on error */
  gw_config_defaults(&c);
  CHECK_INT(gw_config_set(&c, "provider.local", "time_scale", "0.1", msg, sizeof msg), 0);
  CHECK_INT(c.n_providers, 1);
  CHECK(!c.providers[0].implicit);
  CHECK_STR(gw_config_provider_option(&c, "local", "time_scale"), "0.1");
  CHECK_INT(gw_config_set(&c, "provider.local", "time_scale", "0", msg, sizeof msg), SL_ECONFIG);
  CHECK(strstr(msg, "time_scale: 0 is out of range") != NULL);
  CHECK_STR(gw_config_provider_option(&c, "local", "time_scale"), "0.1");
  gw_config_defaults(&c);
  CHECK_INT(gw_config_set(&c, "provider.local", "slots", "x", msg, sizeof msg), SL_ECONFIG);
  CHECK_INT(gw_config_set(&c, "provider.fake", "bogus", "1", msg, sizeof msg), SL_ECONFIG);
  CHECK(strstr(msg, "unknown key \"bogus\" in [provider.fake] (it accepts: slots)") != NULL);
  CHECK_INT(c.n_providers, 1);
  CHECK(c.providers[0].implicit); /* a refused value enables nothing */
  CHECK_INT(gw_config_set(&c, "provider.aws", "region", "x", msg, sizeof msg), SL_ECONFIG);
  CHECK(strstr(msg, "unknown provider \"aws\"") != NULL);
  CHECK_INT(gw_config_set(&c, "provider.fake", "slots", "3", msg, sizeof msg), 0);
  CHECK_INT(c.n_providers, 1);
  CHECK_STR(c.providers[0].name, "fake");

  /* embedded defaults keep a provider the file named */
  gw_config_embedded(&c, "/tmp/home");
  CHECK_INT(c.n_providers, 1);
  CHECK_STR(c.providers[0].name, "fake");
  gw_config_defaults(&c);
  gw_config_embedded(&c, "/tmp/home");
  CHECK_INT(c.n_providers, 1);
  CHECK_STR(c.providers[0].name, "local");
  CHECK(c.providers[0].implicit);

  /* the dump shows each enabled provider with every option of its class */
  gw_config_defaults(&c);
  gw_config_set(&c, "provider.fake", "slots", "4", msg, sizeof msg);
  gw_config_set(&c, "provider.local", "catalog", "/x.csv", msg, sizeof msg);
  char *text = dump(&c);
  CHECK(strstr(text, "[provider.fake]\n; fake instances at once\nslots = 4\n\n"
                     "[provider.local]\n; instances at once\nslots = 2\n"
                     "; trace:PATH or random:SEED\nmarket = random:1\n"
                     "; simulated seconds per second\ntime_scale = 60\n"
                     "; CSV of types\ncatalog = /x.csv\n") != NULL);
  if (!strstr(text, "[provider.fake]"))
    fprintf(stderr, "dump:\n%s\n", text);
  free(text);
  gw_config_defaults(&c);
  text = dump(&c);
  CHECK(strstr(text, "[provider.local]\n; instances at once\nslots = 2\n") != NULL);
  free(text);
}

/* [group.NAME] and [user.NAME] instance_types: the user's own list wins. */
static void test_instance_types(void) {
  int r;
  expect_error("[group.g]\ninstance_types = g5.xlarge,g4dn/x\n",
               "\"g4dn/x\" is not an instance type", 2);
  expect_error("[group.g]\ninstance_types = a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q\n",
               "more than 16 instance types", 2);
  /* an empty item is an error, never a list that allows everything */
  expect_error("[group.g]\ninstance_types = ,,\n",
               "instance_types: an instance type is missing before the first comma"
               " (g5.xlarge,g4dn.xlarge)", 2);
  expect_error("[user.u]\ninstance_types = g5.xlarge, ,g4dn.xlarge\n",
               "instance_types: an instance type is missing between two commas", 2);
  expect_error("[group.g]\ninstance_types = g5.xlarge,\n",
               "instance_types: an instance type is missing after the last comma", 2);
  /* a type named twice is allowed once */
  CHECK_STR(load("[group.g]\ninstance_types = g5.xlarge,g5.xlarge\n", &r), "");
  CHECK_INT(r, 0);
  CHECK_STR(load("[group.g]\ninstance_types = g5.xlarge, g4dn.xlarge\n[group.h]\n"
                 "[user.a]\ngroup = g\n[user.b]\ngroup = g\ninstance_types = p3.2xlarge\n"
                 "[user.c]\ngroup = h\n", &r), "");
  CHECK_INT(r, 0);
  CHECK_STR(gw_config_user_instance_types(&loaded, "a"), "g5.xlarge, g4dn.xlarge");
  CHECK_STR(gw_config_user_instance_types(&loaded, "b"), "p3.2xlarge");
  CHECK(gw_config_user_instance_types(&loaded, "c") == NULL);
  CHECK(gw_config_user_instance_types(&loaded, "nobody") == NULL);
}

/* Each user's and group's instance_types against the types the providers
 * offer (gw_config_check_offered, run at start): the first name none offers
 * is an error at its line that names the offered ones. */
static void test_offered(void) {
  int r;
  char msg[600];
  const char *offered[] = {"g5.xlarge", "g4dn.xlarge", "g5.xlarge"};
  CHECK_STR(load("[group.g]\ninstance_types = g5.xlarge, g4dn.xlarge\n[user.a]\ngroup = g\n"
                 "[user.b]\n\ninstance_types = g4dn.xlarge,g4dn.xlarg\n", &r), "");
  CHECK_INT(r, 0);
  CHECK_INT(gw_config_check_offered(&loaded, offered, 3, msg, sizeof msg), SL_ECONFIG);
  char want[400];
  snprintf(want, sizeof want, "%s/c.ini:7: [user.b] instance_types: g4dn.xlarg is not an instance"
           " type the providers offer (they offer: g5.xlarge, g4dn.xlarge)", dir);
  CHECK_STR(msg, want);
  CHECK_STR(load("[user.b]\ninstance_types = g4dn.xlarge\n[group.g]\ninstance_types = p9.huge\n",
                 &r), "");
  CHECK_INT(gw_config_check_offered(&loaded, offered, 3, msg, sizeof msg), SL_ECONFIG);
  CHECK(strstr(msg, "c.ini:4: [group.g] instance_types: p9.huge is not") != NULL);
  CHECK_INT(gw_config_check_offered(&loaded, offered, 0, msg, sizeof msg), SL_ECONFIG);
  CHECK(strstr(msg, "(they offer: none)") != NULL);
  CHECK_STR(load("[group.g]\ninstance_types = g5.xlarge\n[user.b]\ninstance_types = g4dn.xlarge\n"
                 "[user.c]\n", &r), "");
  CHECK_INT(gw_config_check_offered(&loaded, offered, 3, msg, sizeof msg), 0);
  /* a value set without a file names no line */
  static struct gw_config c;
  gw_config_defaults(&c);
  CHECK_INT(gw_config_set(&c, "group.x", "instance_types", "p9.huge", msg, sizeof msg), 0);
  CHECK_INT(gw_config_check_offered(&c, offered, 3, msg, sizeof msg), SL_ECONFIG);
  CHECK(strncmp(msg, "[group.x] instance_types: p9.huge is not", 40) == 0);
}

/* Addresses: a tcp:// port from 1 to 65535 written in digits (libzmq binds
 * 70000 as 4464), something after ipc://; a state_dir that is not empty. */
static void test_addresses(void) {
  static const char *bad[] = {
    "tcp://127.0.0.1:70000", "tcp://127.0.0.1:65536", "tcp://127.0.0.1:0", "tcp://127.0.0.1",
    "tcp://127.0.0.1:", "tcp://:7400", "tcp://127.0.0.1:+80", "tcp://127.0.0.1:0x50",
    "tcp://127.0.0.1:7400x", "ipc://", "inproc://",
  };
  static const char *good[] = {
    "tcp://127.0.0.1:65535", "tcp://0.0.0.0:1", "tcp://*:7400", "tcp://[::1]:7401",
    "ipc:///tmp/g.sock", "inproc://gw",
  };
  static struct gw_config c;
  char msg[512], text[200];
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    snprintf(text, sizeof text, "[gateway]\nworkers = ipc:///tmp/w.sock\nlisten = %s\n", bad[i]);
    expect_error(text, "listen: \"", 3);
    gw_config_defaults(&c);
    CHECK_INT(gw_config_set(&c, "gateway", "workers", bad[i], msg, sizeof msg), SL_ECONFIG);
    CHECK_STR(c.workers, "tcp://0.0.0.0:7401");
  }
  expect_error("[gateway]\nlisten = tcp://127.0.0.1:70000\n",
               "listen: \"tcp://127.0.0.1:70000\" is not tcp://HOST:PORT with a port from 1 to"
               " 65535", 2);
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    gw_config_defaults(&c);
    CHECK_INT(gw_config_set(&c, "gateway", "listen", good[i], msg, sizeof msg), 0);
    CHECK_STR(c.listen, good[i]);
  }
  expect_error("[gateway]\nhttp = 127.0.0.1:+80\n", "is not HOST:PORT", 2);
  expect_error("[gateway]\nstate_dir =\n", "state_dir: is empty", 2);
  expect_error("[gateway]\nstate_dir = ; nothing\n", "state_dir: is empty", 2);
  gw_config_defaults(&c);
  CHECK_INT(gw_config_set(&c, "gateway", "state_dir", "", msg, sizeof msg), SL_ECONFIG);
  CHECK_STR(c.state_dir, "/var/lib/spotlab");
}

/* Numbers are decimal: no hex or exponent in an integer or a duration (strtod
 * and strtol would read "0x100" as 256); a real number takes an exponent; a
 * duration without a unit is seconds. */
static void test_numbers(void) {
  int r;
  expect_error("[gateway]\nheartbeat_ms = 0x100\n", "heartbeat_ms: \"0x100\" is not an integer", 2);
  expect_error("[gateway]\nheartbeat_ms = 1e3\n", "heartbeat_ms: \"1e3\" is not an integer", 2);
  expect_error("[gateway]\nheartbeat_ms = 1000.0\n", "is not an integer", 2);
  expect_error("[idle]\nworker_timeout = 0x100\n", "worker_timeout: \"0x100\" is not a duration", 2);
  expect_error("[idle]\nworker_timeout = 1e3s\n", "is not a duration", 2);
  expect_error("[idle]\nworker_timeout = 1e3\n", "is not a duration", 2);
  /* a fraction has digits on both sides of its point, as docs/admin.md writes one */
  expect_error("[idle]\nworker_timeout = .5m\n", "worker_timeout: \".5m\" is not a duration", 2);
  expect_error("[idle]\nworker_timeout = 5.m\n", "worker_timeout: \"5.m\" is not a duration", 2);
  expect_error("[idle]\nworker_timeout = +5m\n", "is not a duration", 2);
  expect_error("[budget]\nmonthly_usd = 0x10\n", "monthly_usd: \"0x10\" is not a number", 2);
  expect_error("[budget]\nmonthly_usd = inf\n", "is not a number", 2);
  expect_error("[budget]\nalert_at = 0x32\n", "\"0x32\" is not a percentage", 2);
  expect_error("[provider.local]\nslots = 0x2\n", "slots: \"0x2\" is not an integer", 2);
  CHECK_STR(load("[gateway]\nheartbeat_ms = 250\n[idle]\nworker_timeout = 90\n"
                 "notebook_timeout = 1.5h\n[budget]\nmonthly_usd = 1.5e3\n", &r), "");
  CHECK_INT(loaded.heartbeat_ms, 250);
  CHECK_INT(loaded.worker_timeout_us, 90 * 1000000LL);
  CHECK_INT(loaded.notebook_timeout_us, 5400 * 1000000LL);
  CHECK(loaded.monthly_usd == 1500);
}

/* The file's syntax, read line by line: a value of any length an option
 * takes, a line too long named at its own line, comments and separators as
 * inih reads them, and messages that show the file's control bytes
 * escaped. */
static void test_syntax(void) {
  int r;
  static char text[9000], secret[1100];
  /* a line is at most inih's buffer; a longer one is refused on its own line */
  memset(secret, 's', 150);
  secret[150] = 0;
  snprintf(text, sizeof text, "; a hook\n[webhook.h]\nurl = http://127.0.0.1:9/\n"
           "events = job.failed\nsecret = %s\n", secret);
  CHECK_STR(load(text, &r), "");
  CHECK_INT(r, 0);
  CHECK_STR(loaded.webhooks[0].secret, secret);
  memset(secret, 's', 1000);
  secret[1000] = 0;
  snprintf(text, sizeof text, "[webhook.h]\n\nsecret = %s\n", secret);
  expect_error(text, "line longer than 199 bytes (the INI reader's limit; a webhook's long secret goes"
               " in its secret_file)", 3);
  snprintf(text, sizeof text, "[gateway]\nlisten = tcp://127.0.0.1:1\n; %05000d\n[idle]\n", 0);
  expect_error(text, "line longer than 199 bytes", 3);
  snprintf(text, sizeof text, "[gateway]\n;%0198d\n;%0198d", 0, 0); /* the most, \n or not */
  CHECK_STR(load(text, &r), "");
  snprintf(text, sizeof text, "[gateway]\n;%0199d\n", 0);
  expect_error(text, "line longer than 199 bytes", 2);
  expect_error("[gateway]\nlisten: tcp://127.0.0.1:1\nlisten = tcp://127.0.0.1:2\n",
               "duplicate key \"listen\"", 3);
  CHECK_STR(load("# hash\n[gateway] ; note\nlisten=ipc:///tmp/a;b ; note\r\n"
                 "workers :tcp://127.0.0.1:8\n\n   ; indented comment\n", &r), "");
  CHECK_STR(loaded.listen, "ipc:///tmp/a;b");
  CHECK_STR(loaded.workers, "tcp://127.0.0.1:8");
  expect_error("[gateway\n", "malformed section header", 1);
  /* text after a header is no part of it: an error, not dropped; a comment
   * there is a blank and ';', as after a value */
  expect_error("[gateway]\n[idle] junk\nworker_timeout = 1m\n",
               "malformed section header: \"junk\" after [idle] (a comment there starts with a"
               " blank and ';')", 2);
  expect_error("[idle]]\n", "malformed section header: \"]\" after [idle]", 1);
  expect_error("[idle] # note\n", "malformed section header: \"# note\" after [idle]", 1);
  expect_error("[idle];note\n", "malformed section header: \";note\" after [idle]", 1);
  expect_error("[idle] x ; note\n", "malformed section header: \"x ; note\" after [idle]", 1);
  CHECK_STR(load("[gateway]\t; note\r\nlisten = ipc:///tmp/a\n[idle]  \r\n"
                 "worker_timeout = 2m\n", &r), "");
  CHECK_INT(loaded.worker_timeout_us, 120 * 1000000LL);
  expect_error("[gateway]\nlisten\n", "syntax error (expected [section] or key = value)", 2);

  /* F12's messages: the key once, what is wrong after the last comma, why a
   * name is no name, control bytes and bytes that are no UTF-8 escaped */
  const char *err = load("[budget]\nalert_at = 50,abc\n", &r);
  CHECK(strstr(err, "alert_at: \"abc\" is not a percentage") != NULL);
  CHECK(strstr(err, "alert_at: alert_at") == NULL);
  expect_error("[budget]\nalert_at = 50,80,\n",
               "alert_at: a percentage is missing after the last comma", 2);
  expect_error("[user.bo b]\n", "unknown section [user.bo b]: \"bo b\" is not a valid name (1 to"
               " 63 letters, digits, '_', '.' and '-')", 1);
  err = load("[gateway]\n\x1b[31mkey\xff = 1\n", &r);
  CHECK_INT(r, SL_ECONFIG);
  CHECK(strstr(err, "unknown key \"\\x1b[31mkey\\xff\"") != NULL);
  CHECK(strchr(err, 0x1b) == NULL && strchr(err, '\xff') == NULL);
  err = load("[gateway]\n\xc2\x9b" "31m = 1\n", &r); /* a C1 control character */
  CHECK(strstr(err, "unknown key \"\\xc2\\x9b31m\"") != NULL);
  err = load("[user.caf\xc3\xa9]\n", &r);
  CHECK(strstr(err, "[user.caf\xc3\xa9]") != NULL); /* UTF-8 is shown as it is */
  static const char nul[] = "[gateway]\nlisten = x\0y\n";
  FILE *f = fopen(write_file("nul.ini", ""), "w");
  fwrite(nul, 1, sizeof nul - 1, f);
  fclose(f);
  static struct gw_config c;
  char msg[512];
  gw_config_defaults(&c);
  CHECK_INT(gw_config_load_file(&c, write_file("nul.ini", NULL), msg, sizeof msg), SL_ECONFIG);
  CHECK(strstr(msg, "nul.ini:2: a NUL byte") != NULL);
  unlink(write_file("nul.ini", NULL));
}

static void test_refused(void) {
  /* options and sections that would configure nothing are errors that say so */
  expect_error("[gateway]\nlisten = tcp://127.0.0.1:1\nhttp = http://127.0.0.1:7480\n",
               "is not HOST:PORT", 3);
  expect_error("[gateway]\nhttp = 127.0.0.1:70000\n", "is not HOST:PORT", 2);
  expect_error("[gateway]\nhttp = 127.0.0.1\n", "is not HOST:PORT", 2);
  expect_error("[budget]\nmonthly_usd = 10\nalert_at = 25,x\n", "\"x\" is not a percentage", 3);
  expect_error("[budget]\nalert_at = 0\n", "is not a percentage above 0", 2);
  expect_error("[budget]\nalert_at = 50,\n", "a percentage is missing after the last comma", 2);
  expect_error("[budget]\nalert_at = 50,,80\n", "alert_at: a percentage is missing between two"
               " commas (50,80,100)", 2);
  expect_error("[budget]\nalert_at = ,50\n", "a percentage is missing before the first comma", 2);
  expect_error("[group.ml]\nhard_cap = maybe\n", "is not yes or no", 2);
  expect_error("[gateway]\n[store]\nurl = s3://Bucket_1/x\n", "the bucket name must be", 3);
  /* values that go into HTTP requests hold no control byte */
  expect_error("[store]\nurl = s3://bucket/a\x01" "b\n",
               "url: \"s3://bucket/a\\x01b\" holds a control character", 2);
  expect_error("[store]\nurl = file:///srv/a\x1b[31m\n", "holds a control character", 2);
  expect_error("[store]\nregion = us-east-1\x01\n",
               "region: \"us-east-1\\x01\" is not a region name (lowercase letters, digits and"
               " '-')", 2);
  expect_error("[store]\nregion = US East\n", "is not a region name", 2);
  expect_error("[hub]\nurl = http://hub:8081/hub/api\x7f\n", "holds a control character", 2);
  expect_error("[hub]\nurl = http://hub:8081/\rhub/api\n", "holds a control character", 2);
  expect_error("[store]\nurl = http://x/\n", "is not a file:/// or s3:// URL", 2);
  expect_error("[store]\nkeep = 0\n", "out of range", 2);
  static struct gw_config c;
  char msg[512];
  gw_config_defaults(&c);
  CHECK_INT(gw_config_set(&c, "gateway", "http", "127.0.0.1:0", msg, sizeof msg), 0);
  CHECK(!strcmp(c.http, "127.0.0.1:0"));
  CHECK_INT(gw_config_set(&c, "gateway", "http", "", msg, sizeof msg), 0);
  CHECK_INT(gw_config_set(&c, "webhook.x", "url", "y", msg, sizeof msg), SL_ECONFIG);
  CHECK(strstr(msg, "not an http:// or https:// URL") != NULL);
  CHECK_INT(gw_config_set(&c, "store", "region", "eu-west-3", msg, sizeof msg), 0);
  CHECK_INT(gw_config_set(&c, "store", "region", "", msg, sizeof msg), 0);
  CHECK_INT(gw_config_set(&c, "store", "url", "s3://bucket/a\rb", msg, sizeof msg), SL_ECONFIG);
  CHECK_INT(gw_config_set(&c, "hub", "url", "http://hub/\n", msg, sizeof msg), SL_ECONFIG);
  CHECK_STR(c.store_url, "");
  CHECK_INT(gw_config_set(&c, "budget", "alert_at", "80, 50 ,100%", msg, sizeof msg), 0);
  double pct[GW_ALERT_MAX];
  CHECK_INT(gw_config_parse_alert_at(c.alert_at, pct, msg, sizeof msg), 3);
  CHECK(pct[0] == 50 && pct[1] == 80 && pct[2] == 100);
  CHECK_INT(gw_config_parse_alert_at("", pct, msg, sizeof msg), 0);
  CHECK_INT(gw_config_set(&c, "group.ml", "monthly_usd", "10", msg, sizeof msg), 0);
  CHECK_INT(gw_config_set(&c, "group.ml", "hard_cap", "no", msg, sizeof msg), 0);
  CHECK(c.groups[0].monthly_usd == 10 && !strcmp(c.groups[0].hard_cap, "no"));
  char *text = dump(&c);
  CHECK(strstr(text, "alert_at = 80, 50 ,100%") != NULL);
  free(text);
}

/* [webhook.NAME]: events as bits, the defaults, a secret_file read relative
 * to the file's folder, every missing or bad value at its line, and a dump
 * that never shows the secret. */
static void test_webhooks(void) {
  int r;
  const char *err = load("[webhook.slack]\nurl = https://hooks.example.org/T1/B2\n"
                         "events = job.succeeded, job.failed,budget.cap\nsecret = s3cret-key\n"
                         "[webhook.ops]\nurl = http://127.0.0.1:9/x\nevents = idle.shutdown\n"
                         "secret_file = hook.key\ntimeout = 2s\nretries = 0\n", &r);
  CHECK_INT(r, SL_ECONFIG); /* hook.key does not exist yet */
  CHECK(strstr(err, "c.ini:8: [webhook.ops] secret_file ") != NULL);
  write_file("hook.key", "from-a-file\n");
  err = load("[webhook.slack]\nurl = https://hooks.example.org/T1/B2\n"
             "events = job.succeeded, job.failed,budget.cap\nsecret = s3cret-key\n"
             "[webhook.ops]\nurl = http://127.0.0.1:9/x\nevents = idle.shutdown\n"
             "secret_file = hook.key\ntimeout = 2s\nretries = 0\n", &r);
  CHECK_INT(r, 0);
  CHECK_STR(err, "");
  CHECK_INT(loaded.n_webhooks, 2);
  const struct gw_webhook_cfg *w = &loaded.webhooks[0];
  CHECK_STR(w->name, "slack");
  CHECK_STR(w->secret, "s3cret-key");
  CHECK_INT(w->event_mask, (1u << GW_HOOK_JOB_SUCCEEDED) | (1u << GW_HOOK_JOB_FAILED) |
                           (1u << GW_HOOK_BUDGET_CAP));
  CHECK_INT(w->timeout_us, 10 * 1000000LL);
  CHECK_INT(w->retries, 6);
  w = &loaded.webhooks[1];
  CHECK_STR(w->secret, "from-a-file");
  CHECK_INT(w->event_mask, 1u << GW_HOOK_IDLE_SHUTDOWN);
  CHECK_INT(w->timeout_us, 2 * 1000000LL);
  CHECK_INT(w->retries, 0);
  char *text = dump(&loaded);
  CHECK(strstr(text, "[webhook.slack]\n") != NULL);
  CHECK(strstr(text, "\nurl = https://hooks.example.org/T1/B2\n") != NULL);
  CHECK(strstr(text, "\nretries = 0\n") != NULL);
  CHECK(strstr(text, "s3cret-key") == NULL && strstr(text, "from-a-file") == NULL);
  free(text);
  CHECK_STR(gw_config_hook_event_name(GW_HOOK_BUDGET_ALERT), "budget.alert");
  CHECK(gw_config_hook_event_name(GW_HOOK_N_EVENTS) == NULL);

  const char *ok = "url = https://x.example/h\nsecret = k\n";
  char text2[512];
  snprintf(text2, sizeof text2, "[webhook.a]\n%sevents = job.succeeded,job.done\n", ok);
  expect_error(text2, "events: \"job.done\" is not an event (job.succeeded,", 4);
  snprintf(text2, sizeof text2, "[webhook.a]\n%sevents = , ,\n", ok);
  expect_error(text2, "events: names no event", 4);
  /* an empty item is an error; an event named twice is posted once */
  snprintf(text2, sizeof text2, "[webhook.a]\n%sevents = job.failed,job.failed,,\n", ok);
  expect_error(text2, "events: an event is missing between two commas (job.succeeded,job.failed)",
               4);
  snprintf(text2, sizeof text2, "[webhook.a]\n%sevents = ,job.failed\n", ok);
  expect_error(text2, "events: an event is missing before the first comma", 4);
  snprintf(text2, sizeof text2, "[webhook.a]\n%sevents = job.failed, \n", ok);
  expect_error(text2, "events: an event is missing after the last comma", 4);
  snprintf(text2, sizeof text2, "[webhook.a]\n%sevents = job.failed, job.failed\n", ok);
  CHECK_STR(load(text2, &r), "");
  CHECK_INT(loaded.webhooks[0].event_mask, 1u << GW_HOOK_JOB_FAILED);
  /* no control byte in a URL: it goes into the request line */
  expect_error("[webhook.a]\nurl = https://x/\x01y\n",
               "url: \"https://x/\\x01y\" holds a control character", 2);
  expect_error("[webhook.a]\nurl = https://x/a\rb\n", "holds a control character", 2);
  expect_error("[webhook.a]\nurl = https://x/\x7f\n", "holds a control character", 2);
  expect_error("[webhook.a]\nurl = https://x/a\tb\n", "holds a control character", 2);
  expect_error("[webhook.a]\nurl = https://x/a b\n", "is not an http:// or https:// URL", 2);
  expect_error("[webhook.a]\nurl = ftp://x/\n", "url: \"ftp://x/\" is not an http:// or https:// URL", 2);
  expect_error("[webhook.a]\nurl = https://\n", "is not an http:// or https:// URL", 2);
  expect_error("\n[webhook.a]\nevents = job.failed\nsecret = k\n", "[webhook.a] has no url", 2);
  expect_error("[webhook.a]\nurl = https://x/\nsecret = k\n", "[webhook.a] has no events", 1);
  expect_error("[gateway]\n[webhook.a]\nurl = https://x/\nevents = job.failed\n",
               "[webhook.a] has no secret", 2);
  expect_error("[webhook.a]\nurl = https://x/\nevents = job.failed\nsecret = k\n"
               "secret_file = hook.key\n", "has both secret and secret_file", 5);
  write_file("empty.key", "\n");
  expect_error("[webhook.a]\nurl = https://x/\nevents = job.failed\nsecret_file = empty.key\n",
               "empty.key is empty", 4);
  expect_error("[webhook.a]\ntimeout = 0s\n", "out of range", 2);
  expect_error("[webhook.a]\nretries = 21\n", "out of range", 2);
  expect_error("[webhook.a]\ncolour = red\n", "unknown key \"colour\"", 2);
  expect_error("[webhook.a b]\n", "unknown section", 1);
}

/* Errors only the whole file shows: a path that is no file, a key or a
 * section given twice, an indented line (inih would read it as the previous
 * value's continuation), a group that does not exist, a shared token, and a
 * warning that would come after the timeout it warns of. */
static void test_whole_file(void) {
  static struct gw_config c;
  char msg[512];
  static const char *not_files[][2] = {
    {"", "a folder, not a config file"},
    {"/fifo", "a FIFO, not a config file"},
  };
  char path[300];
  snprintf(path, sizeof path, "%s/fifo", dir);
  CHECK_INT(mkfifo(path, 0600), 0);
  for (size_t i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "%s%s", dir, not_files[i][0]);
    gw_config_defaults(&c);
    msg[0] = 0;
    CHECK_INT(gw_config_load_file(&c, path, msg, sizeof msg), SL_ECONFIG);
    CHECK(strstr(msg, path) == msg && strstr(msg, not_files[i][1]) != NULL);
  }
  unlink(path);
  gw_config_defaults(&c);
  CHECK_INT(gw_config_load_file(&c, "/dev/null", msg, sizeof msg), SL_ECONFIG);
  CHECK(strstr(msg, "/dev/null: a device, not a config file") != NULL);

  const char *tok_a = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  char text[600];
  expect_error("[gateway]\nlisten = tcp://127.0.0.1:1\n\nlisten = tcp://127.0.0.1:2\n",
               "duplicate key \"listen\" in [gateway] (first set on line 2)", 4);
  expect_error("[gateway]\nmax_instances = 2\n[idle]\n[gateway]\n",
               "duplicate section [gateway] (first on line 1); merge the two", 4);
  expect_error("[user.bob]\ngroup = ops\n[group.ops]\n[user.bob]\n", "duplicate section", 4);
  expect_error("[provider.local]\nslots = 1\nslots = 2\n", "duplicate key \"slots\"", 3);
  expect_error("\xEF\xBB\xBF[gateway]\nmax_instances = 2\n[gateway]\n",
               "duplicate section [gateway] (first on line 1)", 3);
  expect_error("[gateway]\nlisten = tcp://127.0.0.1:1\n  state_dir = /tmp/x\n",
               "an indented line continues the value of \"listen\"", 3);
  expect_error("[user.bob]\ngroup = ops\n", "[user.bob] group = ops: there is no [group.ops]", 2);
  expect_error("[group.ops]\nworker_timeout = 1m\n[user.bob]\n\ngroup = opz\n",
               "there is no [group.opz] section", 5);
  snprintf(text, sizeof text, "[user.a]\ntoken_sha256 = %s\n[user.b]\ntoken_sha256 = %s\n",
           tok_a, tok_a);
  expect_error(text, "[user.b] has the same token_sha256 as [user.a]", 4);
  expect_error("[idle]\nnotebook_timeout = 10m\nwarn_before = 11m\n",
               "[idle] warn_before (11m) is longer than notebook_timeout (10m)", 3);
  expect_error("[idle]\nnotebook_timeout = 2m\n",
               "[idle] warn_before (5m, the default) is longer than notebook_timeout (2m)", 2);
  expect_error("[idle]\nwarn_before = 10m\n[group.fast]\nnotebook_timeout = 5m\n",
               "[group.fast] notebook_timeout (5m) is shorter than [idle] warn_before (10m)", 4);
  expect_error("[group.fast]\n\nnotebook_timeout = 1m\n",
               "[group.fast] notebook_timeout (1m) is shorter than [idle] warn_before (5m, the"
               " default)", 3);

  /* what stays valid: indented keys right under a header, comments, an
   * empty group section that a user names, the same key in two sections,
   * a warning as long as the timeout */
  int r;
  CHECK_STR(load("[gateway]\n  listen = tcp://127.0.0.1:1\n  ; note\n[idle]\n"
                 "  notebook_timeout = 5m\nwarn_before = 5m\n[group.ops]\n[user.bob]\n"
                 "group = ops\n[group.x]\nnotebook_timeout = 1h\n[group.y]\n"
                 "notebook_timeout = 2h\n", &r), "");
  CHECK_INT(r, 0);
  CHECK_STR(loaded.listen, "tcp://127.0.0.1:1");
  CHECK_INT(loaded.n_groups, 3);
  CHECK_INT(gw_config_notebook_timeout_us(&loaded, "bob"), 300 * 1000000LL);
}

/* The group a test hub says each user's hub groups select. */
static const char *hub_group(const void *ctx, const char *user) {
  (void)ctx;
  return !strcmp(user, "hubby") ? "teach" : !strcmp(user, "bob") ? "teach" : NULL;
}

/* [hub]: an empty section switches it on; no section, no hub. A hub user's
 * group comes from runtime_group unless the file gives one. */
static void test_hub(void) {
  int r;
  CHECK_STR(load("[gateway]\nlisten = tcp://127.0.0.1:1\n", &r), "");
  CHECK(!loaded.hub);
  CHECK_STR(load("[hub]\n", &r), "");
  CHECK_INT(r, 0);
  CHECK(loaded.hub);
  CHECK_STR(loaded.hub_url, "");
  CHECK_INT(loaded.hub_cache_us, 60 * 1000000LL);
  CHECK_INT(loaded.hub_timeout_us, 1500 * 1000LL);
  CHECK_STR(load("[hub]\nurl = http://127.0.0.1:8081/hub/api\ncache = 0\ntimeout = 3s\n", &r), "");
  CHECK_STR(loaded.hub_url, "http://127.0.0.1:8081/hub/api");
  CHECK_INT(loaded.hub_cache_us, 0);
  expect_error("[hub]\nurl = ftp://hub/api\n", "not an http:// or https:// URL", 2);
  expect_error("[hub]\ncache = 2h\n", "out of range", 2);
  expect_error("[hub]\napi_token = x\n", "unknown key \"api_token\"", 2);

  CHECK_STR(load("[hub]\n[group.research]\nnotebook_timeout = 2h\n[group.teach]\n"
                 "notebook_timeout = 45m\n[user.bob]\ngroup = research\n", &r), "");
  CHECK(gw_config_user_group(&loaded, "hubby") == NULL);
  CHECK_INT(gw_config_notebook_timeout_us(&loaded, "hubby"), loaded.notebook_timeout_us);
  loaded.runtime_group = hub_group;
  CHECK_STR(gw_config_user_group(&loaded, "hubby"), "teach");
  CHECK_INT(gw_config_notebook_timeout_us(&loaded, "hubby"), 45 * 60 * 1000000LL);
  CHECK_STR(gw_config_user_group(&loaded, "bob"), "research"); /* the file's wins */
  CHECK_INT(gw_config_notebook_timeout_us(&loaded, "bob"), 2 * 3600 * 1000000LL);
  CHECK(gw_config_user_group(&loaded, "nobody") == NULL);
  loaded.runtime_group = NULL;

  FILE *f = tmpfile();
  CHECK_INT(gw_config_dump(&loaded, f), 0);
  rewind(f);
  char text[8192] = "";
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = 0;
  fclose(f);
  CHECK(strstr(text, "[hub]\n") != NULL && strstr(text, "cache = 1m\n") != NULL);
}

int main(void) {
  if (!mkdtemp(dir))
    return 1;
  CHECK_INT(gw_provider_register(&local_class), 0);
  CHECK_INT(gw_provider_register(&fake_class), 0);
  test_webhooks();
  static struct gw_config c;
  gw_config_defaults(&c);
  CHECK_STR(c.listen, "tcp://127.0.0.1:7400");
  CHECK_INT(c.worker_timeout_us, 600 * 1000000LL);
  CHECK(c.hard_cap);

  int r;
  const char *err = load("[gateway]\nlisten = ipc:///tmp/x.sock ; comment\n[idle]\n"
                         "worker_timeout = 90s\n[user.alice]\ntoken_sha256 = "
                         "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n"
                         "group = research\n[group.research]\nnotebook_timeout = 2h\n", &r);
  CHECK_INT(r, 0);
  CHECK_STR(err, "");

  expect_error("[gateway]\nlisten = tcp://127.0.0.1:1\nbogus = 1\n", "unknown key \"bogus\"", 3);
  expect_error("[idle]\n\nworker_timeout = soon\n", "not a duration", 3);
  expect_error("[gateway]\nmax_instances = 0\n", "out of range", 2);
  expect_error("[gateway]\nheartbeat_ms = 1.5\n", "not an integer", 2);
  expect_error("[gateway]\n[nonsense]\n", "unknown section [nonsense]", 2);
  expect_error("[budget]\nhard_cap = maybe\n", "not yes or no", 2);
  expect_error("[gateway]\nlisten = http://x\n", "not a tcp://", 2);
  expect_error("[user.al ice]\n", "unknown section", 1);
  expect_error("[user.bob]\ntoken_sha256 = abc\n", "64 lowercase hex", 2);
  expect_error("listen = x\n", "outside any section", 1);
  expect_error("[idle]\nworker_timeout = 0s\n", "out of range", 2);
  expect_error("\n\n[providers.local]\n", "unknown section [providers.local]", 3);

  test_whole_file();
  test_hub();

  /* a missing file is an error naming it */
  gw_config_defaults(&c);
  char msg[512];
  CHECK(gw_config_load_file(&c, "/nonexistent/spotlab.ini", msg, sizeof msg) < 0);
  CHECK(strstr(msg, "/nonexistent/spotlab.ini") != NULL);

  /* a failed set keeps the old value */
  gw_config_defaults(&c);
  CHECK(gw_config_set(&c, "idle", "worker_timeout", "-3s", msg, sizeof msg) < 0);
  CHECK_INT(c.worker_timeout_us, 600 * 1000000LL);

  test_providers();
  test_refused();
  test_instance_types();
  test_offered();
  test_addresses();
  test_numbers();
  test_syntax();

  /* dump -> load -> dump is a fixed point, with users, groups, providers
   * and odd numbers */
  gw_config_defaults(&c);
  CHECK_INT(gw_config_set(&c, "provider.local", "time_scale", "0.1", msg, sizeof msg), 0);
  CHECK_INT(gw_config_set(&c, "provider.fake", "slots", "3", msg, sizeof msg), 0);
  gw_config_set(&c, "idle", "warn_before", "1500ms", msg, sizeof msg);
  gw_config_set(&c, "user.bob", "token_sha256",
                "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210", msg, sizeof msg);
  gw_config_set(&c, "group.ops", "worker_timeout", "45m", msg, sizeof msg);
  char *a = dump(&c);
  static struct gw_config d;
  gw_config_defaults(&d);
  CHECK_INT(gw_config_load_file(&d, write_file("dump.ini", a), msg, sizeof msg), 0);
  char *b = dump(&d);
  CHECK_STR(a, b);
  CHECK_STR(gw_config_provider_option(&d, "local", "time_scale"), "0.1");
  CHECK_STR(gw_config_provider_option(&d, "fake", "slots"), "3");
  CHECK_INT(d.n_providers, 2);
  CHECK_STR(d.providers[0].name, "local");
  CHECK_INT(d.warn_before_us, 1500000);
  CHECK_INT(gw_config_worker_timeout_us(&d, "bob"), d.worker_timeout_us);
  free(a);
  free(b);

  /* a provider enabled by default whose class this gateway lacks: a
   * comment in the dump, which still reads back */
  gw_provider_registry_clear();
  gw_config_defaults(&c);
  a = dump(&c);
  CHECK(strstr(a, "; [provider.local] is enabled by default but not built into this gateway") !=
        NULL);
  gw_config_defaults(&d);
  CHECK_INT(gw_config_load_file(&d, write_file("dump.ini", a), msg, sizeof msg), 0);
  free(a);

  unlink(write_file("c.ini", ""));
  unlink(write_file("dump.ini", ""));
  rmdir(dir);
  TEST_MAIN_END();
}
