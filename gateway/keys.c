/* Key files: creation with 0600 from the start (O_EXCL on a temporary
 * name, then rename), so a secret is never on disk with wider permissions. */
#include "keys.h"

#include "sl_err.h"
#include "sl_file.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

int gw_keys_generate(struct gw_keypair *ret) {
  struct gw_keypair k;
  if (zmq_curve_keypair(k.public_z85, k.secret_z85) != 0)
    return SL_ENOTSUP;
  *ret = k;
  return 0;
}

/* Writes text to path, readable by the owner only, atomically. */
static int write_private(const char *path, const char *text) {
  return sl_file_write_atomic(path, text, strlen(text), 0600);
}

static bool z85_key(const char *s) {
  if (strlen(s) != GW_Z85_KEY_LEN)
    return false;
  uint8_t bin[32];
  return zmq_z85_decode(bin, s) != NULL;
}

int gw_keys_load_or_create(const char *path, struct gw_keypair *ret, char *err, size_t err_size) {
  /* not blocking: a FIFO in its place would hold the gateway's start for ever */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
  if (fd >= 0 && !f)
    close(fd);
  if (!f && errno != ENOENT) {
    snprintf(err, err_size, "%s: %s", path, strerror(errno));
    return -errno;
  }
  if (!f) {
    struct gw_keypair k;
    int r = gw_keys_generate(&k);
    char text[128];
    snprintf(text, sizeof text, "%s\n%s\n", k.public_z85, k.secret_z85);
    if (r == 0)
      r = write_private(path, text);
    if (r < 0) {
      snprintf(err, err_size, "%s: cannot create key file: %s", path, sl_strerror(r));
      return r;
    }
    *ret = k;
    return 0;
  }
  struct stat st;
  char pub[64] = "", sec[64] = "";
  int r = 0;
  if (fstat(fileno(f), &st) < 0 || !S_ISREG(st.st_mode)) {
    snprintf(err, err_size, "%s: not a regular file", path);
    r = SL_ECONFIG;
  } else if (st.st_mode & 077) {
    snprintf(err, err_size, "%s: key file is readable by others (mode %03o); chmod 600 it", path,
             (unsigned)(st.st_mode & 0777));
    r = SL_ECONFIG;
  } else if (!fgets(pub, sizeof pub, f) || !fgets(sec, sizeof sec, f)) {
    snprintf(err, err_size, "%s: expected two lines (public and secret key)", path);
    r = SL_ECONFIG;
  }
  fclose(f);
  if (r < 0)
    return r;
  pub[strcspn(pub, "\r\n")] = 0;
  sec[strcspn(sec, "\r\n")] = 0;
  if (!z85_key(pub) || !z85_key(sec)) {
    snprintf(err, err_size, "%s: malformed key (expected 40-character Z85 keys)", path);
    return SL_ECONFIG;
  }
  /* a public key that is not the secret's would be given to workers, whose
   * handshakes would then fail with no word of why */
  char derived[GW_Z85_KEY_LEN + 1];
  if (zmq_curve_public(derived, sec) != 0 || strcmp(derived, pub) != 0) {
    snprintf(err, err_size, "%s: the public key (line 1) is not the secret key's (line 2)", path);
    return SL_ECONFIG;
  }
  memcpy(ret->public_z85, pub, sizeof ret->public_z85);
  memcpy(ret->secret_z85, sec, sizeof ret->secret_z85);
  return 0;
}

int gw_keys_render_worker_file(const struct gw_worker_file *w, bool indent, char **ret) {
  if (!w->boot || !w->boot->gateway || !w->boot->gateway_public || !w->instance || !w->type ||
      !w->work_dir || !w->store)
    return -EINVAL;
  json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:b,s:s,s:s,s:s,s:s}",
                        "gateway", w->boot->gateway, "gateway_public", w->boot->gateway_public,
                        "public", w->boot->keys.public_z85, "secret", w->boot->keys.secret_z85,
                        "instance", w->instance, "type", w->type, "zone", w->zone ? w->zone : "",
                        "spot", w->spot, "metadata", w->metadata ? w->metadata : "",
                        "work_dir", w->work_dir, "store", w->store, "train", w->boot->train ? w->boot->train : "");
  if (o && w->boot->metrics_per_s > 0)
    json_object_set_new(o, "metrics_per_s", json_integer((json_int_t)w->boot->metrics_per_s));
  if (o && w->boot->move_on_rebalance)
    json_object_set_new(o, "move_on_rebalance", json_true());
  if (o && w->boot->data_cache_bytes > 0)
    json_object_set_new(o, "data_cache_bytes", json_integer((json_int_t)w->boot->data_cache_bytes));
  if (o && w->boot->part_bytes > 0)
    json_object_set_new(o, "part_bytes", json_integer((json_int_t)w->boot->part_bytes));
  if (o && w->orphan_timeout_ms > 0)
    json_object_set_new(o, "orphan_timeout_ms", json_integer((json_int_t)w->orphan_timeout_ms));
  if (!o)
    return -ENOMEM;
  char *text = json_dumps(o, indent ? JSON_INDENT(1) : JSON_COMPACT);
  json_decref(o);
  if (!text)
    return -ENOMEM;
  *ret = text;
  return 0;
}

int gw_keys_write_worker_file(const char *path, const struct gw_worker_file *w) {
  char *text;
  int r = gw_keys_render_worker_file(w, true, &text);
  if (r < 0)
    return r;
  /* no fsync: a worker file is rewritten at every launch and never needed after a crash */
  r = write_private(path, text);
  free(text);
  return r;
}
