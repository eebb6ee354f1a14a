/* Worker configuration: good files, missing fields, bad keys, modes. */
#include "harness.h"

#include "conf.h"
#include "sl_err.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

static char gw_pub[41], gw_sec[41], pub[41], sec[41], other_pub[41], other_sec[41];

static int parse(const char *text, struct wk_config *c, char *err) {
  return wk_config_parse(text, strlen(text), c, err, 256);
}

static void make(char *buf, size_t size, const char *gateway_pub, const char *mine_pub,
                 const char *mine_sec, const char *extra) {
  snprintf(buf, size,
           "{\"gateway\":\"ipc:///tmp/x.sock\",\"gateway_public\":\"%s\",\"public\":\"%s\","
           "\"secret\":\"%s\",\"instance\":\"i-0123456789ab\",\"type\":\"g5.xlarge\","
           "\"zone\":\"us-east-1a\",\"spot\":true,\"metadata\":\"http://127.0.0.1:1\","
           "\"work_dir\":\"/tmp/w\",\"store\":\"file:///tmp/s\",\"train\":\"/bin/true\"%s}",
           gateway_pub, mine_pub, mine_sec, extra);
}

static void test_good(void) {
  char text[2048], err[256] = "";
  struct wk_config c;
  make(text, sizeof text, gw_pub, pub, sec, "");
  CHECK_INT(parse(text, &c, err), 0);
  CHECK_STR(c.gateway, "ipc:///tmp/x.sock");
  CHECK_STR(c.instance, "i-0123456789ab");
  CHECK_STR(c.secret_key, sec);
  CHECK(c.spot);
  CHECK_INT(c.heartbeat_ms, 1000);
  CHECK_INT(c.notice_poll_ms, 1000);
  CHECK_STR(wk_config_metadata_kind(&c), "aws");
  make(text, sizeof text, gw_pub, pub, sec, ",\"heartbeat_ms\":250,\"metadata_kind\":\"gcp\"");
  CHECK_INT(parse(text, &c, err), 0);
  CHECK_INT(c.heartbeat_ms, 250);
  CHECK_STR(wk_config_metadata_kind(&c), "gcp");
}

static void test_errors(void) {
  char text[2048], err[256];
  struct wk_config c;
  const char *missing = "{\"gateway_public\":\"x\"}";
  CHECK_INT(parse(missing, &c, err), SL_ECONFIG);
  CHECK(strstr(err, "\"gateway\"") != NULL);
  CHECK_INT(parse("{\"gateway\":", &c, err), SL_EJSON);
  CHECK_INT(parse("[1,2]", &c, err), SL_ECONFIG);
  /* a key of the wrong length, one with a character outside Z85, one that is not ours */
  make(text, sizeof text, "short", pub, sec, "");
  CHECK_INT(parse(text, &c, err), SL_ECONFIG);
  CHECK(strstr(err, "gateway_public") != NULL);
  char bad[41];
  memcpy(bad, sec, 41);
  bad[5] = '"' == bad[5] ? '~' : '\'';
  make(text, sizeof text, gw_pub, pub, bad, "");
  CHECK_INT(parse(text, &c, err), SL_ECONFIG);
  CHECK(strstr(err, "secret") != NULL);
  CHECK(strstr(err, sec) == NULL && strstr(err, bad) == NULL);
  make(text, sizeof text, gw_pub, other_pub, sec, "");
  CHECK_INT(parse(text, &c, err), SL_ECONFIG);
  CHECK(strstr(err, "does not belong") != NULL);
  CHECK(strstr(err, sec) == NULL);
  make(text, sizeof text, gw_pub, pub, sec, ",\"heartbeat_ms\":\"fast\"");
  CHECK_INT(parse(text, &c, err), SL_ECONFIG);
  make(text, sizeof text, gw_pub, pub, sec, ",\"heartbeat_ms\":0");
  CHECK_INT(parse(text, &c, err), SL_ECONFIG);
  CHECK(strstr(err, "heartbeat_ms") != NULL);
  make(text, sizeof text, gw_pub, pub, sec, ",\"spot\":\"yes\",\"x\":1");
  CHECK_INT(parse(text, &c, err), SL_ECONFIG);
  char longname[600];
  memset(longname, 'a', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;
  char extra[700];
  snprintf(extra, sizeof extra, ",\"zone\":\"%s\"", longname);
  make(text, sizeof text, gw_pub, pub, sec, extra);
  CHECK_INT(parse(text, &c, err), SL_ECONFIG);
  CHECK(strstr(err, "longer") != NULL);
  /* the address other instances reach this one at: an IP address, or empty */
  make(text, sizeof text, gw_pub, pub, sec, ",\"address\":\"10.0.0.5 \"");
  CHECK_INT(parse(text, &c, err), SL_ECONFIG);
  CHECK(strstr(err, "address") != NULL && strstr(err, "not an IPv4 or IPv6 address") != NULL);
  make(text, sizeof text, gw_pub, pub, sec, ",\"address\":\"fd00::5\"");
  CHECK_INT(parse(text, &c, err), 0);
  make(text, sizeof text, gw_pub, pub, sec, ",\"address\":\"\"");
  CHECK_INT(parse(text, &c, err), 0);
  /* the store is file:/// or s3:// */
  snprintf(text, sizeof text,
           "{\"gateway\":\"tcp://a:1\",\"gateway_public\":\"%s\",\"public\":\"%s\",\"secret\":\"%s\","
           "\"instance\":\"i-1\",\"work_dir\":\"/w\",\"store\":\"s3://b/p\"}", gw_pub, pub, sec);
  CHECK_INT(parse(text, &c, err), 0);
  snprintf(text, sizeof text,
           "{\"gateway\":\"tcp://a:1\",\"gateway_public\":\"%s\",\"public\":\"%s\",\"secret\":\"%s\","
           "\"instance\":\"i-1\",\"work_dir\":\"/w\",\"store\":\"gs://b/p\"}", gw_pub, pub, sec);
  CHECK_INT(parse(text, &c, err), SL_ECONFIG);
  CHECK(strstr(err, "store") != NULL);
  /* "metadata":"aws" is the metadata service the environment names */
  setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:9/", 1);
  snprintf(text, sizeof text,
           "{\"gateway\":\"tcp://a:1\",\"gateway_public\":\"%s\",\"public\":\"%s\",\"secret\":\"%s\","
           "\"instance\":\"i-1\",\"work_dir\":\"/w\",\"store\":\"s3://b/p\",\"metadata\":\"aws\","
           "\"orphan_timeout_ms\":900000,\"part_bytes\":8388608}", gw_pub, pub, sec);
  CHECK_INT(parse(text, &c, err), 0);
  CHECK(!strcmp(c.metadata, "http://127.0.0.1:9"));
  CHECK(!strcmp(wk_config_metadata_kind(&c), "aws"));
  CHECK_INT(c.orphan_timeout_ms, 900000);
  CHECK(c.part_bytes == 8 << 20);
  snprintf(text, sizeof text,
           "{\"gateway\":\"tcp://a:1\",\"gateway_public\":\"%s\",\"public\":\"%s\",\"secret\":\"%s\","
           "\"instance\":\"i-1\",\"work_dir\":\"/w\",\"store\":\"s3://b/p\",\"part_bytes\":1048576}",
           gw_pub, pub, sec);
  CHECK_INT(parse(text, &c, err), SL_ECONFIG);
  CHECK(strstr(err, "part_bytes") != NULL);
  unsetenv("AWS_EC2_METADATA_SERVICE_ENDPOINT");
  /* wk_config_parse writes nothing on failure */
  memset(&c, 0x5a, sizeof c);
  CHECK_INT(parse(missing, &c, err), SL_ECONFIG);
  CHECK_INT((unsigned char)c.gateway[0], 0x5a);
}

static void test_files(void) {
  char dir[] = "/tmp/wk-conf-XXXXXX", path[64], text[2048], err[256];
  CHECK(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/w.json", dir);
  make(text, sizeof text, gw_pub, pub, sec, "");
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
  close(fd);
  chmod(path, 0600);
  struct wk_config c;
  CHECK_INT(wk_config_load(path, &c, err, sizeof err), 0);
  CHECK(!c.insecure_mode);
  chmod(path, 0644);
  CHECK_INT(wk_config_load(path, &c, err, sizeof err), 0);
  CHECK(c.insecure_mode);
  setenv("SPOTLAB_NOTICE_POLL_MS", "25", 1);
  CHECK_INT(wk_config_load(path, &c, err, sizeof err), 0);
  CHECK_INT(c.notice_poll_ms, 25);
  setenv("SPOTLAB_NOTICE_POLL_MS", "soon", 1);
  CHECK_INT(wk_config_load(path, &c, err, sizeof err), SL_ECONFIG);
  unsetenv("SPOTLAB_NOTICE_POLL_MS");
  fd = open(path, O_WRONLY | O_TRUNC);
  CHECK(write(fd, "{\"gateway\":\"tcp://x:1\",", 23) == 23);
  close(fd);
  CHECK_INT(wk_config_load(path, &c, err, sizeof err), SL_EJSON);
  unlink(path);
  CHECK_INT(wk_config_load(path, &c, err, sizeof err), -ENOENT);
  CHECK(strstr(err, path) != NULL);
  rmdir(dir);
}

int main(void) {
  zmq_curve_keypair(gw_pub, gw_sec);
  zmq_curve_keypair(pub, sec);
  zmq_curve_keypair(other_pub, other_sec);
  test_good();
  test_errors();
  test_files();
  TEST_MAIN_END();
}
