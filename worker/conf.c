/* Worker configuration file.
 *
 * Every option is declared once in `fields` (name, type, default, bounds,
 * help) and read by the common option engine (sl_opt.h). Loading is
 * all-or-nothing: the caller's struct is written only when the whole file
 * validated. Keys are checked by decoding their Z85 text and by
 * recomputing the public key from the secret one; error texts name the field,
 * never its value, so a key cannot leak into a log line. */
#include "conf.h"

#include "sl_awscreds.h"
#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_opt.h"
#include "sl_s3.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#define MAX_FILE_BYTES (64 * 1024)

static int check_key(const char *z85, char *why, size_t why_size);
static int check_address(const char *text, char *why, size_t why_size);

/* name, type, field, required, default, min, max, help */
#define F_STR SL_OPT_STR, NULL
#define F_KEY SL_OPT_STR, check_key
#define F_ADDR SL_OPT_STR, check_address
#define F_BOOL SL_OPT_BOOL, NULL
#define F_INT SL_OPT_INT, NULL
#define S_(f) offsetof(struct wk_config, f), sizeof(((struct wk_config *)0)->f)
#define ROW(name, type, where, required, def, min, max, help) \
  ROW_(name, type, where, required, def, min, max, help)
#define ROW_(name, otype, check, offset, size, required, def, min, max, help) \
  {name, otype, offset, size, def, min, max, NULL, NULL, NULL, help, NULL, 0, \
   (required) ? SL_OPT_REQUIRED : 0, check}
static const struct sl_opt fields[] = {
  ROW("gateway", F_STR, S_(gateway), true, NULL, 0, 0, "gateway worker socket address"),
  ROW("gateway_public", F_KEY, S_(gateway_public), true, NULL, 0, 0, "gateway CURVE public key (Z85)"),
  ROW("public", F_KEY, S_(public_key), true, NULL, 0, 0, "this worker's CURVE public key (Z85)"),
  ROW("secret", F_KEY, S_(secret_key), true, NULL, 0, 0, "this worker's CURVE secret key (Z85)"),
  ROW("instance", F_STR, S_(instance), true, NULL, 0, 0, "instance id"),
  ROW("type", F_STR, S_(type), false, NULL, 0, 0, "instance type"),
  ROW("zone", F_STR, S_(zone), false, NULL, 0, 0, "availability zone"),
  ROW("spot", F_BOOL, S_(spot), false, NULL, 0, 0, "spot (preemptible) capacity"),
  ROW("metadata", F_STR, S_(metadata), false, NULL, 0, 0, "instance metadata URL; empty = no notices"),
  ROW("metadata_kind", F_STR, S_(metadata_kind), false, NULL, 0, 0, "aws or gcp"),
  ROW("work_dir", F_STR, S_(work_dir), true, NULL, 0, 0, "folder for job files"),
  ROW("store", F_STR, S_(store), true, NULL, 0, 0, "checkpoint store URL (file:///... or s3://...)"),
  ROW("train", F_STR, S_(train), false, NULL, 0, 0, "spotlab-train path"),
  ROW("address", F_ADDR, S_(address), false, NULL, 0, 0,
   "IP address other instances reach this one at (nodes=N); empty = the route to the gateway"),
  ROW("heartbeat_ms", F_INT, S_(heartbeat_ms), false, "1000", 10, 600000, "heartbeat period"),
  ROW("register_timeout_ms", F_INT, S_(register_timeout_ms), false, "3000", 10, 600000,
   "resend register after this long without an answer"),
  ROW("metrics_per_s", F_INT, S_(metrics_per_s), false, "20", 1, 100000, "metric messages per job per second"),
  ROW("output_lines_per_s", F_INT, S_(output_lines_per_s), false, "100", 1, 100000,
   "output lines per job per second"),
  ROW("notice_poll_ms", F_INT, S_(notice_poll_ms), false, "1000", 10, 60000, "metadata poll period"),
  ROW("notice_margin_ms", F_INT, S_(notice_margin_ms), false, "5000", 0, 600000,
   "stop this long before a notice deadline"),
  ROW("sigterm_notice_ms", F_INT, S_(sigterm_notice_ms), false, "30000", 100, 600000,
   "deadline given to a SIGTERM notice"),
  ROW("kill_grace_ms", F_INT, S_(kill_grace_ms), false, "10000", 10, 600000, "SIGTERM to SIGKILL on cancel"),
  ROW("run_sync_ms", F_INT, S_(run_sync_ms), false, "10000", 10, 3600000, "%%run folder upload period"),
  ROW("move_on_rebalance", F_BOOL, S_(move_on_rebalance), false, NULL, 0, 0,
   "a rebalance recommendation stops the jobs as a notice does (false: they checkpoint and go on)"),
  ROW("orphan_timeout_ms", F_INT, S_(orphan_timeout_ms), false, "0", 0, 7 * 86400000LL,
   "no word from the gateway this long: checkpoint every job and exit (0: never)"),
  ROW("data_cache_bytes", F_INT, S_(data_cache_bytes), false, "0", 0, 1LL << 50,
   "uploaded data files kept between jobs, in bytes at most (0: as many as leave the disk room)"),
  ROW("part_bytes", F_INT, S_(part_bytes), false, "0", 0, 5LL << 30,
   "an object up to this size goes to S3 in one PUT, a larger one as a multipart upload of parts this size "
   "(0: 64 MiB; else 5 MiB at the least)"),
};
#undef S_
#define N_FIELDS (sizeof fields / sizeof fields[0])

/* Decodes the key to check it; the reason never quotes it (it may be the secret). */
static int check_key(const char *z85, char *why, size_t why_size) {
  uint8_t raw[32];
  if (strlen(z85) != WK_KEY_Z85_LEN || !zmq_z85_decode(raw, z85))
    return sl_err_say(why, why_size, SL_ECONFIG, "not a 40-character Z85 CURVE key");
  return 0;
}

/* Empty, or an IPv4 or IPv6 address: refused at start, not when a gang's
 * rank 0 first needs it. */
static int check_address(const char *text, char *why, size_t why_size) {
  unsigned char buf[sizeof(struct in6_addr)];
  if (!*text || inet_pton(AF_INET, text, buf) == 1 || inet_pton(AF_INET6, text, buf) == 1)
    return 0;
  return sl_err_say(why, why_size, SL_ECONFIG, "\"%s\" is not an IPv4 or IPv6 address", text);
}

static void set_defaults(struct wk_config *c) {
  memset(c, 0, sizeof *c);
  sl_opt_defaults(fields, N_FIELDS, c);
}

static int check_whole(struct wk_config *c, char *err, size_t err_size) {
  char pub[WK_KEY_Z85_LEN + 1];
  if (zmq_curve_public(pub, c->secret_key) != 0 || strcmp(pub, c->public_key) != 0)
    return sl_err_say(err, err_size, SL_ECONFIG, "\"public\" does not belong to \"secret\"");
  if (strncmp(c->store, "file:///", 8) != 0 && strncmp(c->store, "s3://", 5) != 0)
    return sl_err_say(err, err_size, SL_ECONFIG,
                      "\"store\": only file:/// and s3:// URLs are supported");
  if (!strcmp(c->metadata, "aws")) {
    char url[SL_AWS_ENDPOINT_MAX];
    sl_aws_imds_endpoint(url);
    if (snprintf(c->metadata, sizeof c->metadata, "%s", url) >= (int)sizeof c->metadata)
      return sl_err_say(err, err_size, SL_ECONFIG, "AWS_EC2_METADATA_SERVICE_ENDPOINT is too long");
    snprintf(c->metadata_kind, sizeof c->metadata_kind, "aws");
  }
  if (c->metadata_kind[0] && strcmp(c->metadata_kind, "aws") && strcmp(c->metadata_kind, "gcp"))
    return sl_err_say(err, err_size, SL_ECONFIG, "\"metadata_kind\" must be aws or gcp");
  if (c->part_bytes > 0 && c->part_bytes < (int64_t)SL_S3_PART_MIN_BYTES)
    return sl_err_say(err, err_size, SL_ECONFIG, "\"part_bytes\" must be 0 or at least %llu (5 MiB, S3's least)",
                      (unsigned long long)SL_S3_PART_MIN_BYTES);
  const char *env = getenv("SPOTLAB_NOTICE_POLL_MS");
  if (env && *env) {
    char *end;
    long long v = strtoll(env, &end, 10);
    if (*end || v < 1 || v > 60000)
      return sl_err_say(err, err_size, SL_ECONFIG, "SPOTLAB_NOTICE_POLL_MS must be 1..60000");
    c->notice_poll_ms = v;
  }
  return 0;
}

int wk_config_parse(const char *text, size_t len, struct wk_config *ret, char *err,
                    size_t err_size) {
  json_t *root = NULL;
  char why[160];
  int r = sl_json_parse(text, len, 8, &root, why, sizeof why);
  if (r < 0) return sl_err_say(err, err_size, SL_EJSON, "not JSON: %s", why);
  struct wk_config c;
  set_defaults(&c);
  if (!json_is_object(root)) {
    r = sl_err_say(err, err_size, SL_ECONFIG, "the file must hold a JSON object");
    goto out;
  }
  for (size_t i = 0; i < N_FIELDS; i++) {
    json_t *v = json_object_get(root, fields[i].name);
    if (!v || json_is_null(v)) {
      if (fields[i].flags & SL_OPT_REQUIRED) {
        r = sl_err_say(err, err_size, SL_ECONFIG, "missing \"%s\" (%s)", fields[i].name,
                       fields[i].help);
        goto out;
      }
      continue;
    }
    if ((r = sl_opt_set_json(&fields[i], &c, v, err, err_size)) < 0) goto out;
  }
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    const struct sl_opt *o = sl_opt_find(fields, N_FIELDS, key);
    if (!o || strcmp(o->name, key)) sl_warn("worker", "config: unknown option \"%s\" ignored", key);
  }
  if ((r = check_whole(&c, err, err_size)) < 0) goto out;
  *ret = c;
  r = 0;
out:
  json_decref(root);
  return r;
}

int wk_config_load(const char *path, struct wk_config *ret, char *err, size_t err_size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return sl_err_say(err, err_size, -errno, "%s: %s", path, strerror(errno));
  struct stat st;
  char *buf = NULL;
  int r;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
    r = sl_err_say(err, err_size, SL_ECONFIG, "%s: not a regular file", path);
    goto out;
  }
  if (st.st_size > MAX_FILE_BYTES) {
    r = sl_err_say(err, err_size, SL_ECONFIG, "%s: larger than %d bytes", path, MAX_FILE_BYTES);
    goto out;
  }
  buf = malloc((size_t)st.st_size + 1);
  if (!buf) { r = -ENOMEM; goto out; }
  size_t got = 0;
  while (got < (size_t)st.st_size) {
    ssize_t k = read(fd, buf + got, (size_t)st.st_size - got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      r = sl_err_say(err, err_size, k < 0 ? -errno : SL_ECONFIG, "%s: short read", path);
      goto out;
    }
    got += (size_t)k;
  }
  struct wk_config c;
  if ((r = wk_config_parse(buf, got, &c, err, err_size)) < 0) goto out;
  if (c.work_dir[0] != '/') { /* relative to the file's folder (a cloud instance's user data) */
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    char abs[PATH_MAX];
    if (!realpath(dir, abs) || strlen(abs) + 1 + strlen(c.work_dir) >= sizeof c.work_dir) {
      r = sl_err_say(err, err_size, SL_ECONFIG, "\"work_dir\": cannot resolve it under %s", dir);
      goto out;
    }
    char rel[sizeof c.work_dir];
    memcpy(rel, c.work_dir, sizeof rel);
    size_t al = strlen(abs);
    memcpy(c.work_dir, abs, al); /* fits: checked above */
    c.work_dir[al] = '/';
    memcpy(c.work_dir + al + 1, rel, strlen(rel) + 1);
  }
  if (st.st_mode & 077) {
    c.insecure_mode = true;
    sl_warn("worker", "%s is readable by others (mode %03o); it holds a secret key, use 0600",
            path, (unsigned)(st.st_mode & 0777));
  }
  *ret = c;
  r = 0;
out:
  free(buf);
  close(fd);
  return r;
}

const char *wk_config_metadata_kind(const struct wk_config *cfg) {
  if (cfg->metadata_kind[0]) return cfg->metadata_kind;
  if (strstr(cfg->metadata, "://metadata.google.internal")) return "gcp";
  return "aws";
}
