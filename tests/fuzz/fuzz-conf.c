/* Fuzz target: the gateway's configuration reader, the function --config
 * uses (gw_config_load_file), with the provider classes spotlab-gateway
 * registers (local, aws), so their sections and option checks are reached.
 *
 * The input is the whole INI file. It is handed over as a file in memory
 * (memfd, named by /proc/self/fd/N) so nothing touches the disk. A file
 * that loads is then dumped as --dump-config dumps it and its users' and
 * providers' values are read back. A failed load must leave a message; no
 * input may crash, leak, hang or hit undefined behaviour. */
#include "conf.h"
#include "provider.h"
#include "providers/aws.h"
#include "providers/local.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int fd = -1;
static char path[64];
static FILE *sink;

static void setup_once(void) {
  if (fd >= 0)
    return;
  if (gw_provider_register(&gw_local_provider_class) < 0 ||
      gw_provider_register(&gw_aws_provider_class) < 0 ||
      (fd = memfd_create("fuzz-conf.ini", 0)) < 0 || !(sink = fopen("/dev/null", "w"))) {
    perror("fuzz-conf: setup");
    abort();
  }
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static struct gw_config c;
  setup_once();
  if (ftruncate(fd, 0) < 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
    abort();
  gw_config_defaults(&c);
  char err[512] = "";
  int r = gw_config_load_file(&c, path, err, sizeof err);
  if (r < 0) {
    if (!err[0] || strlen(err) >= sizeof err)
      abort(); /* every refusal says why */
    return 0;
  }
  gw_config_dump(&c, sink);
  for (size_t i = 0; i < c.n_users; i++) {
    gw_config_notebook_timeout_us(&c, c.users[i].name);
    gw_config_worker_timeout_us(&c, c.users[i].name);
  }
  for (size_t i = 0; i < c.n_providers; i++) {
    const struct gw_provider_class *cls = gw_provider_find(c.providers[i].name);
    for (const struct gw_provider_option *o = cls ? cls->options : NULL; o && o->name; o++)
      gw_config_provider_option(&c, c.providers[i].name, o->name);
  }
  return 0;
}
