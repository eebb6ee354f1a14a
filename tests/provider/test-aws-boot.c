/* The aws provider's user data (aws_boot.c): both forms (a worker installed
 * under a prefix, the worker bundle fetched and checked) pass `sh -n` and
 * run: with SPOTLAB_ROOT in a scratch folder and a PATH whose `shutdown`,
 * `curl` and worker are stand-ins, the script writes the worker config
 * (0600, in a 0700 folder) exactly as rendered (keys holding '$' included),
 * runs the worker with it, and powers off when the worker exits; a bundle
 * whose SHA-256 does not match never runs. The instance's keys appear, the
 * gateway's secret never; values the script cannot carry are refused, as is
 * a script over EC2's 16 KB. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "aws.h"
#include "harness.h"
#include "keys.h"
#include "sl_err.h"
#include "sl_hmac.h"
#include "sl_json.h"

static char tmp[] = "/tmp/spotlab-aws-boot-XXXXXX";
static struct gw_keypair gateway_keys;
/* Z85 holds '$', '(' and '&': none may be expanded on the way to the file */
static const char *const secret_with_dollars = "a$HOME$(id)&b0123456789abcdefghijklmnopq";
static const char *const public_key = "Pk0123456789abcdefghijklmnopqrstuvwxyz.-";

static void path_of(const char *name, char *buf, size_t size) {
  snprintf(buf, size, "%s/%s", tmp, name);
}

static int write_file(const char *name, const char *text, mode_t mode) {
  char path[512];
  path_of(name, path, sizeof path);
  FILE *f = fopen(path, "w");
  if (!f)
    return -errno;
  fputs(text, f);
  fclose(f);
  return chmod(path, mode) < 0 ? -errno : 0;
}

/* The whole file, owned, or NULL. */
static char *read_file(const char *path, size_t *ret_len) {
  FILE *f = fopen(path, "r");
  if (!f)
    return NULL;
  char *buf = malloc(1 << 20);
  size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
  fclose(f);
  if (buf)
    buf[n] = '\0';
  if (ret_len)
    *ret_len = n;
  return buf;
}

static char *read_named(const char *name) {
  char path[512];
  path_of(name, path, sizeof path);
  return read_file(path, NULL);
}

static int mode_of(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (int)(st.st_mode & 0777) : -1;
}

/* Runs argv with env; the exit status, or -1. */
static int run(char *const argv[], char *const env[]) {
  pid_t pid = fork();
  if (pid == 0) {
    int null = open("/dev/null", O_RDWR);
    dup2(null, 0);
    execve(argv[0], argv, env);
    _exit(127);
  }
  int status;
  if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status))
    return -1;
  return WEXITSTATUS(status);
}

static int shell(const char *cmd) {
  char *argv[] = {"/bin/sh", "-c", (char *)cmd, NULL};
  char *env[] = {"PATH=/usr/bin:/bin", NULL};
  return run(argv, env);
}

static struct gw_worker_boot make_boot(void) {
  struct gw_worker_boot b;
  memset(&b, 0, sizeof b);
  b.gateway = "tcp://127.0.0.1:7401"; /* what the gateway binds: advertise replaces it */
  b.gateway_public = gateway_keys.public_z85;
  snprintf(b.keys.public_z85, sizeof b.keys.public_z85, "%s", public_key);
  snprintf(b.keys.secret_z85, sizeof b.keys.secret_z85, "%s", secret_with_dollars);
  b.train = "/gateway/only/spotlab-train";
  b.metrics_per_s = 20;
  b.data_cache_bytes = 5LL << 30;
  b.part_bytes = 16 << 20;
  return b;
}

static struct gw_aws_user_data make_ud(const struct gw_worker_boot *b, const char *prefix) {
  struct gw_aws_user_data u = {
      .boot = b, .gateway = "tcp://gw.example.org:7401", .instance = "sl-0123456789abcdef",
      .type = "g5.xlarge", .zone = "us-east-1b", .spot = true, .store = "s3://bucket/team",
      .worker_prefix = prefix, .orphan_timeout_ms = 900000,
  };
  return u;
}

static size_t count(const char *text, const char *needle) {
  size_t n = 0;
  for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
    n++;
  return n;
}

static void check_text(const char *text) {
  CHECK(!strncmp(text, "#!/bin/sh\n", 10));
  CHECK(strlen(text) <= GW_AWS_USER_DATA_MAX);
  CHECK_INT(count(text, secret_with_dollars), 1);
  CHECK_INT(count(text, public_key), 1);
  CHECK_INT(count(text, gateway_keys.public_z85), 1);
  CHECK(!strstr(text, gateway_keys.secret_z85));
  CHECK(!strstr(text, "/gateway/only/spotlab-train"));
  CHECK(strstr(text, "<<'SPOTLAB_WORKER_JSON'") != NULL);
  CHECK(strstr(text, "shutdown -h now") != NULL);
  CHECK(strstr(text, "${SPOTLAB_ROOT:-/var/lib/spotlab}") != NULL);
}

/* sh -n on text. */
static int syntax(const char *text) {
  if (write_file("syntax.sh", text, 0600) < 0)
    return -1;
  char cmd[600];
  snprintf(cmd, sizeof cmd, "sh -n %s/syntax.sh", tmp);
  return shell(cmd);
}

/* The config the stand-in worker copied, checked field by field. */
static void check_config(void) {
  char path[512];
  path_of("out/config.json", path, sizeof path);
  json_error_t je;
  json_t *o = json_load_file(path, 0, &je);
  CHECK(o != NULL);
  if (!o)
    return;
  CHECK_STR(sl_json_get_str(o, "gateway", ""), "tcp://gw.example.org:7401");
  CHECK_STR(sl_json_get_str(o, "gateway_public", ""), gateway_keys.public_z85);
  CHECK_STR(sl_json_get_str(o, "public", ""), public_key);
  CHECK_STR(sl_json_get_str(o, "secret", ""), secret_with_dollars);
  CHECK_STR(sl_json_get_str(o, "instance", ""), "sl-0123456789abcdef");
  CHECK_STR(sl_json_get_str(o, "type", ""), "g5.xlarge");
  CHECK_STR(sl_json_get_str(o, "zone", ""), "us-east-1b");
  CHECK(sl_json_get_bool(o, "spot", false));
  CHECK_STR(sl_json_get_str(o, "metadata", ""), "aws");
  CHECK_STR(sl_json_get_str(o, "work_dir", ""), "work");
  CHECK_STR(sl_json_get_str(o, "store", ""), "s3://bucket/team");
  CHECK_STR(sl_json_get_str(o, "train", "x"), "");
  CHECK_INT(sl_json_get_int(o, "metrics_per_s", 0), 20);
  CHECK(sl_json_get_int(o, "data_cache_bytes", 0) == 5LL << 30);
  CHECK(sl_json_get_int(o, "part_bytes", 0) == 16 << 20);
  CHECK_INT(sl_json_get_int(o, "orphan_timeout_ms", 0), 900000);
  json_decref(o);
  char *mode = read_named("out/config.mode");
  CHECK_STR(mode, "600\n");
  free(mode);
}

/* The stand-ins: shutdown and curl on PATH, and a worker that records what
 * it was given. */
static void make_fakes(void) {
  char dir[512];
  path_of("fake", dir, sizeof dir);
  mkdir(dir, 0700);
  path_of("out", dir, sizeof dir);
  mkdir(dir, 0700);
  CHECK(write_file("fake/shutdown", "#!/bin/sh\necho \"$*\" >>\"$TEST_OUT/shutdown\"\n", 0700) == 0);
  CHECK(write_file("fake/curl", "#!/bin/sh\n"
                                "out=\nwhile [ $# -gt 0 ]; do [ \"$1\" = -o ] && out=$2; shift; done\n"
                                "echo fetched >>\"$TEST_OUT/curl\"\n"
                                "cp \"$TEST_BUNDLE\" \"$out\"\n", 0700) == 0);
  const char *worker = "#!/bin/sh\n"
                       "echo \"$*\" >\"$TEST_OUT/args\"\n"
                       "echo \"${LD_LIBRARY_PATH:-}\" >\"$TEST_OUT/ldpath\"\n"
                       "cp \"$2\" \"$TEST_OUT/config.json\"\n"
                       "stat -c %a \"$2\" >\"$TEST_OUT/config.mode\"\n"
                       "echo \"$0\" >\"$TEST_OUT/program\"\n";
  char d[512];
  path_of("prefix", d, sizeof d);
  mkdir(d, 0700);
  path_of("prefix/bin", d, sizeof d);
  mkdir(d, 0700);
  CHECK(write_file("prefix/bin/spotlab-worker", worker, 0700) == 0);
  path_of("bundle-src", d, sizeof d);
  mkdir(d, 0700);
  path_of("bundle-src/bin", d, sizeof d);
  mkdir(d, 0700);
  path_of("bundle-src/lib", d, sizeof d);
  mkdir(d, 0700);
  CHECK(write_file("bundle-src/bin/spotlab-worker", worker, 0700) == 0);
  CHECK(write_file("bundle-src/lib/libspotlab-stand-in.so", "not a library\n", 0600) == 0);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "tar -czf %s/bundle.tar.gz -C %s/bundle-src bin lib", tmp, tmp);
  CHECK(shell(cmd) == 0);
}

/* Runs the user data text with root as SPOTLAB_ROOT and cuda (under tmp)
 * as the folder of CUDA toolkits; its exit status. */
static int boot_script_cuda(const char *text, const char *root, const char *cuda) {
  char script[512], out[600], bundle[600], path_env[700], root_env[600], out_env[700];
  path_of("user-data", script, sizeof script);
  if (write_file("user-data", text, 0700) < 0)
    return -1;
  path_of("out", out, sizeof out);
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "rm -rf %s/out/* %s/root", tmp, tmp);
  shell(cmd);
  path_of("bundle.tar.gz", bundle, sizeof bundle);
  snprintf(path_env, sizeof path_env, "PATH=%s/fake:/usr/bin:/bin", tmp); /* no sbin: never the real shutdown */
  snprintf(root_env, sizeof root_env, "SPOTLAB_ROOT=%s", root);
  snprintf(out_env, sizeof out_env, "TEST_OUT=%s", out);
  char bundle_env[700], cuda_env[700];
  snprintf(bundle_env, sizeof bundle_env, "TEST_BUNDLE=%s", bundle);
  snprintf(cuda_env, sizeof cuda_env, "SPOTLAB_CUDA_ROOT=%s/%s", tmp, cuda);
  char *argv[] = {script, NULL};
  char *env[] = {path_env, root_env, out_env, bundle_env, cuda_env, NULL};
  return run(argv, env);
}

/* ... with no CUDA toolkit at all (this machine's own are not the test's). */
static int boot_script(const char *text, const char *root) {
  return boot_script_cuda(text, root, "no-cuda");
}

static void test_prefix(void) {
  struct gw_worker_boot b = make_boot();
  char prefix[512], *text = NULL, *again = NULL, err[256] = "";
  path_of("prefix", prefix, sizeof prefix);
  struct gw_aws_user_data u = make_ud(&b, prefix);
  CHECK_INT(gw_aws_user_data(&u, &text, err, sizeof err), 0);
  if (!text) {
    fprintf(stderr, "user data: %s\n", err);
    return;
  }
  check_text(text);
  CHECK(!strstr(text, "curl"));
  CHECK(!strstr(text, "sha256sum"));
  CHECK_INT(syntax(text), 0);
  CHECK_INT(gw_aws_user_data(&u, &again, err, sizeof err), 0);
  CHECK_STR(again, text); /* a re-issued launch sends the same user data */
  free(again);

  char root[512], expect[1200];
  path_of("root", root, sizeof root);
  CHECK_INT(boot_script(text, root), 0);
  check_config();
  char *args = read_named("out/args"), *program = read_named("out/program");
  char *shutdown = read_named("out/shutdown"), *ld = read_named("out/ldpath");
  snprintf(expect, sizeof expect, "--config %s/worker.json\n", root);
  CHECK_STR(args, expect);
  snprintf(expect, sizeof expect, "%s/bin/spotlab-worker\n", prefix);
  CHECK_STR(program, expect);
  CHECK_STR(shutdown, "-h now\n");
  CHECK_STR(ld, "\n");
  CHECK_INT(mode_of(root), 0700);
  snprintf(expect, sizeof expect, "%s/worker.json", root);
  CHECK_INT(mode_of(expect), 0600);
  snprintf(expect, sizeof expect, "%s/work", root);
  CHECK_INT(mode_of(expect), 0700);
  snprintf(expect, sizeof expect, "%s/worker.log", root);
  char *log = read_file(expect, NULL);
  CHECK(log && strstr(log, "exited with status 0"));
  free(log);
  free(args);
  free(program);
  free(shutdown);
  free(ld);

  /* a relative SPOTLAB_ROOT is taken from where the script starts */
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "cd %s && SPOTLAB_ROOT=rel PATH=%s/fake:/usr/bin:/bin "
                            "TEST_OUT=%s/out ./user-data", tmp, tmp, tmp);
  CHECK_INT(shell(cmd), 0);
  args = read_named("out/args");
  snprintf(expect, sizeof expect, "--config %s/rel/worker.json\n", tmp);
  CHECK_STR(args, expect);
  free(args);
  free(text);
}

static void test_bundle(void) {
  struct gw_worker_boot b = make_boot();
  char bundle[512], sha[SL_HMAC_HEX_LEN + 1], *text = NULL, err[256] = "";
  path_of("bundle.tar.gz", bundle, sizeof bundle);
  size_t len = 0;
  char *data = read_file(bundle, &len);
  CHECK(data != NULL);
  sl_sha256_hex(data ? data : "", len, sha);
  free(data);
  /* a presigned URL: & and % must survive the quoting */
  b.bundle_url = "https://bucket.s3.amazonaws.com/team/bundle.tar.gz?X-Amz-Date=1&X-Amz-Signature=ab%2Fcd";
  b.bundle_sha256 = sha;
  struct gw_aws_user_data u = make_ud(&b, "");
  CHECK_INT(gw_aws_user_data(&u, &text, err, sizeof err), 0);
  if (!text) {
    fprintf(stderr, "user data: %s\n", err);
    return;
  }
  check_text(text);
  CHECK(strstr(text, "url='https://bucket.s3.amazonaws.com/team/bundle.tar.gz?X-Amz-Date=1&"
                     "X-Amz-Signature=ab%2Fcd'") != NULL);
  CHECK(strstr(text, sha) != NULL);
  CHECK(strstr(text, "sha256sum -c") != NULL);
  CHECK_INT(syntax(text), 0);

  char root[512], expect[1200];
  path_of("root", root, sizeof root);
  CHECK_INT(boot_script(text, root), 0);
  check_config();
  char *program = read_named("out/program"), *ld = read_named("out/ldpath");
  char *shutdown = read_named("out/shutdown"), *fetched = read_named("out/curl");
  snprintf(expect, sizeof expect, "%s/bundle/bin/spotlab-worker\n", root);
  CHECK_STR(program, expect);
  snprintf(expect, sizeof expect, "%s/bundle/lib\n", root);
  CHECK_STR(ld, expect);
  CHECK_STR(shutdown, "-h now\n");
  CHECK_STR(fetched, "fetched\n");
  free(program);
  free(ld);

  /* the image's CUDA toolkits after the bundle's libraries: the default
   * one (cuda/, a link), then the others by version, the newest first */
  static const char *const dirs[] = {"cuda-12.9/lib64", "cuda-13.0/lib64", "cuda-13.2/lib64",
                                     "cuda-13.10/lib64", "cuda-13.10/lib", "cuda-11.8/bin"};
  char cuda[1300];
  for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
    snprintf(cuda, sizeof cuda, "mkdir -p %s/cuda-root/%s", tmp, dirs[i]);
    CHECK(shell(cuda) == 0);
  }
  snprintf(cuda, sizeof cuda, "ln -s cuda-12.9 %s/cuda-root/cuda", tmp);
  CHECK(shell(cuda) == 0);
  CHECK_INT(boot_script_cuda(text, root, "cuda-root"), 0);
  ld = read_named("out/ldpath");
  snprintf(expect, sizeof expect,
           "%s/bundle/lib:%s/cuda-root/cuda/lib64:%s/cuda-root/cuda-13.10/lib64:"
           "%s/cuda-root/cuda-13.10/lib:%s/cuda-root/cuda-13.2/lib64:"
           "%s/cuda-root/cuda-13.0/lib64:%s/cuda-root/cuda-12.9/lib64\n",
           root, tmp, tmp, tmp, tmp, tmp, tmp);
  CHECK_STR(ld, expect);
  free(ld);
  free(shutdown);
  free(fetched);
  free(text);

  /* a bundle that does not match its SHA-256 never runs */
  char wrong[SL_HMAC_HEX_LEN + 1];
  snprintf(wrong, sizeof wrong, "%s", sha);
  wrong[0] = wrong[0] == '0' ? '1' : '0';
  b.bundle_sha256 = wrong;
  CHECK_INT(gw_aws_user_data(&u, &text, err, sizeof err), 0);
  CHECK(boot_script(text, root) != 0);
  char *args = read_named("out/args");
  shutdown = read_named("out/shutdown");
  CHECK(args == NULL);
  CHECK_STR(shutdown, "-h now\n");
  free(args);
  free(shutdown);
  free(text);
}

static void test_refusals(void) {
  struct gw_worker_boot b = make_boot();
  char *text = NULL, err[256];
  char sha[65];
  memset(sha, 'a', 64);
  sha[64] = '\0';
  struct gw_aws_user_data u = make_ud(&b, "");
  /* no prefix and no bundle */
  err[0] = '\0';
  CHECK_INT(gw_aws_user_data(&u, &text, err, sizeof err), -EINVAL);
  CHECK(err[0] != '\0');
  b.bundle_sha256 = sha;
  b.bundle_url = "https://x/y'; rm -rf /; '";
  CHECK_INT(gw_aws_user_data(&u, &text, err, sizeof err), -EINVAL);
  b.bundle_url = "https://x/y\nz";
  CHECK_INT(gw_aws_user_data(&u, &text, err, sizeof err), -EINVAL);
  b.bundle_url = "file:///etc/passwd";
  CHECK_INT(gw_aws_user_data(&u, &text, err, sizeof err), -EINVAL);
  b.bundle_url = "https://x/y";
  b.bundle_sha256 = "ABC";
  CHECK_INT(gw_aws_user_data(&u, &text, err, sizeof err), -EINVAL);
  b.bundle_sha256 = sha;
  u.worker_prefix = "relative/path";
  CHECK_INT(gw_aws_user_data(&u, &text, err, sizeof err), -EINVAL);
  u.worker_prefix = "/opt/it's";
  CHECK_INT(gw_aws_user_data(&u, &text, err, sizeof err), -EINVAL);
  u.worker_prefix = "";
  u.gateway = NULL;
  CHECK_INT(gw_aws_user_data(&u, &text, err, sizeof err), -EINVAL);
  u.gateway = "tcp://gw:1";
  /* past EC2's 16 KB */
  char *long_url = malloc(17000);
  strcpy(long_url, "https://bucket/");
  memset(long_url + 15, 'a', 16900);
  long_url[16915] = '\0';
  b.bundle_url = long_url;
  err[0] = '\0';
  CHECK_INT(gw_aws_user_data(&u, &text, err, sizeof err), SL_ELIMIT);
  CHECK(strstr(err, "16384") != NULL);
  free(long_url);
  CHECK(text == NULL);
}

int main(void) {
  if (!mkdtemp(tmp)) {
    perror("mkdtemp");
    return 1;
  }
  CHECK_INT(gw_keys_generate(&gateway_keys), 0);
  make_fakes();
  test_prefix();
  test_bundle();
  test_refusals();
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
  if (!th_failures)
    shell(cmd);
  else
    fprintf(stderr, "left %s for a look\n", tmp);
  TEST_MAIN_END();
}
