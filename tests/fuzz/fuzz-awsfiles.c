/* Fuzz target: the AWS shared credentials and config files, as the gateway,
 * the CLI and the tools read them (common/sl_awscreds.c: sl_aws_chain_new,
 * sl_aws_creds_get, sl_aws_region).
 *
 * The first input byte chooses the profile (bit 0: AWS_PROFILE=team, else
 * the default one) and whether the region is asked of the files (bit 1) or
 * given; the rest is the credentials file, then "\n--\n", then the config
 * file (no separator: no config file). Both are handed over as files in
 * memory (memfd, named by /proc/self/fd/N), the environment holds no
 * credentials and the instance metadata service is off, so nothing touches
 * the disk or the network. A chain that cannot be made, credentials that
 * cannot be had and a region that cannot be found each say why in err;
 * credentials that are had are terminated strings with a key id and a
 * secret; a region is a terminated name. No input may crash, leak, hang or
 * hit undefined behaviour. */
#include "sl_awscreds.h"
#include "sl_err.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int fds[2] = {-1, -1};

static void setup_once(void) {
  if (fds[0] >= 0)
    return;
  char path[64];
  static const char *const names[2] = {"AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"};
  for (int i = 0; i < 2; i++) {
    if ((fds[i] = memfd_create(names[i], 0)) < 0) {
      perror("fuzz-awsfiles: memfd_create");
      abort();
    }
    snprintf(path, sizeof path, "/proc/self/fd/%d", fds[i]);
    setenv(names[i], path, 1);
  }
  static const char *const unset[] = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                      "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION",
                                      "AWS_DEFAULT_PROFILE", NULL};
  for (int i = 0; unset[i]; i++)
    unsetenv(unset[i]);
  setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
}

static void put(int fd, const uint8_t *data, size_t size) {
  if (ftruncate(fd, 0) < 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size))
    abort();
}

static void said(const char *err, size_t size) {
  if (!memchr(err, 0, size) || !err[0])
    abort(); /* every refusal says why */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  setup_once();
  uint8_t flags = data[0];
  data++;
  size--;
  const uint8_t *sep = memmem(data, size, "\n--\n", 4);
  size_t creds_len = sep ? (size_t)(sep - data) : size;
  put(fds[0], data, creds_len);
  put(fds[1], sep ? sep + 4 : data, sep ? size - creds_len - 4 : 0);
  if (flags & 1)
    setenv("AWS_PROFILE", "team", 1);
  else
    unsetenv("AWS_PROFILE");

  char err[512];
  memset(err, 0, sizeof err);
  struct sl_aws_chain *c = NULL;
  int r = sl_aws_chain_new(&c, err, sizeof err);
  if (r < 0) {
    said(err, sizeof err);
    if (c)
      abort();
  } else {
    struct sl_aws_creds cr;
    memset(&cr, 'x', sizeof cr);
    err[0] = 0;
    r = sl_aws_creds_get(c, &cr, err, sizeof err);
    if (r < 0) {
      said(err, sizeof err);
    } else if (!memchr(cr.access_key_id, 0, sizeof cr.access_key_id) ||
               !memchr(cr.secret_access_key, 0, sizeof cr.secret_access_key) ||
               !memchr(cr.session_token, 0, sizeof cr.session_token) || !cr.access_key_id[0] ||
               !cr.secret_access_key[0] ||
               sl_aws_creds_source(c) != SL_AWS_CREDS_SHARED_FILE) {
      abort();
    }
    sl_aws_chain_free(c);
  }

  char region[SL_AWS_REGION_MAX];
  memset(region, 'x', sizeof region);
  err[0] = 0;
  r = sl_aws_region(flags & 2 ? NULL : "us-east-1", region, err, sizeof err);
  if (r < 0)
    said(err, sizeof err);
  else if (!memchr(region, 0, sizeof region) || !region[0])
    abort();
  return 0;
}
