/* The user data of an aws instance: a /bin/sh script that cloud-init runs
 * once, as root, at first boot.
 *
 * The worker config travels inside the script in a quoted here-document,
 * so the shell expands nothing in it (Z85 keys may hold '$'); its one-line
 * JSON can never equal the terminator line. Every other value the script
 * carries (the bundle URL, its SHA-256, the worker prefix) goes between
 * single quotes and is refused when it holds a quote or a control
 * character. The script stops the instance on any failure, so a broken boot
 * never leaves an instance running (and billed) with no worker on it; the
 * worker's own orphan timeout covers a worker that cannot reach the
 * gateway. Messages never print the bundle URL (a presigned URL). A
 * relative SPOTLAB_ROOT is taken from the folder the script starts in. */
#include "aws.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "sl_err.h"

#define CONFIG_EOF "SPOTLAB_WORKER_JSON"

/* True when s may stand between single quotes in the script. */
static bool quotable(const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++)
    if (*p < 0x20 || *p >= 0x7f || *p == '\'' || *p == '\\')
      return false;
  return true;
}

static bool sha256_hex(const char *s) {
  if (strlen(s) != 64)
    return false;
  return strspn(s, "0123456789abcdef") == 64;
}

static const char head[] =
    "#!/bin/sh\n"
    "# spotlab worker bootstrap, written by the gateway's aws provider: the worker\n"
    "# config, then the worker; the instance powers off when the worker exits.\n"
    "umask 077\n"
    "root=\"${SPOTLAB_ROOT:-/var/lib/spotlab}\"\n"
    "stop() {\n"
    "  echo \"spotlab: $*\" >&2\n"
    "  shutdown -h now\n"
    "  exit 1\n"
    "}\n"
    "mkdir -p \"$root\" && chmod 0700 \"$root\" && cd \"$root\" || stop \"cannot make $root\"\n"
    "root=$(pwd -P)\n"
    "mkdir -p work || stop \"cannot make $root/work\"\n"
    "cat >worker.json.tmp <<'" CONFIG_EOF "' || stop \"cannot write $root/worker.json\"\n";

static const char after_config[] =
    CONFIG_EOF "\n"
    "chmod 0600 worker.json.tmp && mv -f worker.json.tmp worker.json ||\n"
    "  stop \"cannot write $root/worker.json\"\n";

static const char bundle_fetch[] =
    "n=0\n"
    "until curl -fsS --connect-timeout 10 --max-time 900 -o bundle.tar.gz \"$url\"; do\n"
    "  n=$((n + 1))\n"
    "  [ \"$n\" -lt 10 ] || stop \"cannot fetch the worker bundle\"\n"
    "  sleep 5\n"
    "done\n"
    "echo \"$sum  bundle.tar.gz\" | sha256sum -c - >/dev/null ||\n"
    "  stop \"the worker bundle does not match its SHA-256\"\n"
    "rm -rf bundle && mkdir bundle && tar -xzf bundle.tar.gz -C bundle ||\n"
    "  stop \"cannot unpack the worker bundle\"\n"
    "rm -f bundle.tar.gz\n"
    "worker=\"$root/bundle/bin/spotlab-worker\"\n"
    "LD_LIBRARY_PATH=\"$root/bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\"\n"
    "# the image's CUDA libraries, for spotlab-train's CUDA backend: the default\n"
    "# toolkit's, then every other's, the newest first\n"
    "cuda=\"${SPOTLAB_CUDA_ROOT:-/usr/local}\"\n"
    "for d in \"$cuda/cuda/lib64\" \"$cuda/cuda/lib\" $(ls -d \"$cuda\"/cuda-*/lib64 \"$cuda\"/cuda-*/lib \\\n"
    "    2>/dev/null | sort -rV); do\n"
    "  [ -d \"$d\" ] && LD_LIBRARY_PATH=\"$LD_LIBRARY_PATH:$d\"\n"
    "done\n"
    "export LD_LIBRARY_PATH\n";

static const char tail[] =
    "[ -x \"$worker\" ] || stop \"$worker is not there\"\n"
    "\"$worker\" --config \"$root/worker.json\" >>\"$root/worker.log\" 2>&1\n"
    "echo \"spotlab: the worker exited with status $?\" >>\"$root/worker.log\"\n"
    "shutdown -h now\n";

static int check(const struct gw_aws_user_data *u, bool bundle, char *err, size_t err_size) {
  const struct gw_worker_boot *b = u->boot;
  if (!b || !u->gateway || !*u->gateway || !b->gateway_public || !u->instance || !u->type ||
      !u->store) {
    snprintf(err, err_size, "user data: the gateway address, its public key, the instance, "
                            "its type and the store are required");
    return -EINVAL;
  }
  if (!bundle) {
    if (u->worker_prefix[0] != '/' || !quotable(u->worker_prefix)) {
      snprintf(err, err_size, "worker_prefix must be an absolute path without quotes, "
                              "backslashes or control characters");
      return -EINVAL;
    }
    return 0;
  }
  if (!b->bundle_url || !b->bundle_sha256) {
    snprintf(err, err_size, "no worker_prefix and no worker bundle to fetch");
    return -EINVAL;
  }
  if ((strncmp(b->bundle_url, "https://", 8) && strncmp(b->bundle_url, "http://", 7)) ||
      !quotable(b->bundle_url)) {
    snprintf(err, err_size, "the worker bundle URL is not an http(s) URL free of quotes, "
                            "backslashes and control characters");
    return -EINVAL;
  }
  if (!sha256_hex(b->bundle_sha256)) {
    snprintf(err, err_size, "the worker bundle's SHA-256 is not 64 lowercase hex digits");
    return -EINVAL;
  }
  return 0;
}

int gw_aws_user_data(const struct gw_aws_user_data *u, char **ret, char *err, size_t err_size) {
  bool bundle = !u->worker_prefix || !*u->worker_prefix;
  int r = check(u, bundle, err, err_size);
  if (r < 0)
    return r;
  /* the instance's config: train "" (the worker finds spotlab-train beside
   * itself), metadata "aws" (the instance metadata service), work_dir
   * relative to the config's folder */
  struct gw_worker_boot boot = *u->boot;
  boot.gateway = u->gateway;
  boot.train = "";
  struct gw_worker_file wf = {
      .boot = &boot, .instance = u->instance, .type = u->type, .zone = u->zone ? u->zone : "",
      .spot = u->spot, .metadata = "aws", .work_dir = "work", .store = u->store,
      .orphan_timeout_ms = u->orphan_timeout_ms,
  };
  char *config = NULL;
  if ((r = gw_keys_render_worker_file(&wf, false, &config)) < 0) {
    snprintf(err, err_size, "user data: cannot render the worker config: %s", sl_strerror(r));
    return r;
  }
  char *text = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&text, &size);
  if (!f) {
    free(config);
    snprintf(err, err_size, "out of memory");
    return -ENOMEM;
  }
  fputs(head, f);
  fprintf(f, "%s\n", config);
  fputs(after_config, f);
  if (bundle) {
    fprintf(f, "url='%s'\nsum='%s'\n", u->boot->bundle_url, u->boot->bundle_sha256);
    fputs(bundle_fetch, f);
  } else {
    fprintf(f, "worker='%s/bin/spotlab-worker'\n", u->worker_prefix);
  }
  fputs(tail, f);
  int bad = ferror(f);
  fclose(f);
  explicit_bzero(config, strlen(config)); /* it holds the instance's secret key */
  free(config);
  if (bad || !text) {
    free(text);
    snprintf(err, err_size, "out of memory");
    return -ENOMEM;
  }
  if (size > GW_AWS_USER_DATA_MAX) {
    explicit_bzero(text, size);
    free(text);
    snprintf(err, err_size, "the user data would be %zu bytes; EC2 takes at most %d", size,
             GW_AWS_USER_DATA_MAX);
    return SL_ELIMIT;
  }
  *ret = text;
  return 0;
}
