/* The reader of spot-traces files (sl_trace.h), shared by the local
 * provider's market and spotlab-sim.
 *
 * The file is read once, into a buffer that grows up to SL_TRACE_MAX_BYTES
 * (a larger file is refused before it is parsed), parsed through
 * sl_json_parse with a depth bound, and checked whole before a trace is
 * returned: a trace that is returned holds only values in the documented
 * ranges, so nothing that uses it later fails on its content. */
#include "sl_trace.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sl_err.h"
#include "sl_json.h"

/* path's bytes, at most SL_TRACE_MAX_BYTES, into an owned *ret. */
static int read_bounded(const char *path, char **ret, size_t *ret_len, char *err,
                        size_t err_size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    return sl_err_say(err, err_size, -e, "%s: %s", path, strerror(e));
  }
  char *buf = NULL;
  size_t len = 0, cap = 0;
  int r = 0;
  for (;;) {
    if (len > SL_TRACE_MAX_BYTES) {
      r = sl_err_say(err, err_size, SL_ELIMIT, "%s: larger than %u bytes", path,
                     SL_TRACE_MAX_BYTES);
      break;
    }
    if (len == cap) { /* doubling from 64 KiB, one byte past the bound at most */
      size_t ncap = cap ? cap * 2 : (size_t)1 << 16;
      if (ncap > (size_t)SL_TRACE_MAX_BYTES + 1)
        ncap = (size_t)SL_TRACE_MAX_BYTES + 1;
      char *nb = realloc(buf, ncap);
      if (!nb) {
        r = sl_err_say(err, err_size, -ENOMEM, "%s: out of memory", path);
        break;
      }
      buf = nb;
      cap = ncap;
    }
    ssize_t k = read(fd, buf + len, cap - len);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0) {
      int e = errno;
      r = sl_err_say(err, err_size, -e, "%s: %s", path, strerror(e));
      break;
    }
    if (k == 0)
      break;
    len += (size_t)k;
  }
  close(fd);
  if (r < 0) {
    free(buf);
    return r;
  }
  *ret = buf;
  *ret_len = len;
  return 0;
}

/* The entries of data and prices (n of each; prices NULL when absent) into
 * t's arrays, in file order, so the first bad entry is the one named. */
static int take_entries(struct sl_trace *t, const json_t *data, const json_t *prices,
                        const char *path, char *err, size_t err_size) {
  for (size_t i = 0; i < t->n; i++) {
    json_t *v = json_array_get(data, i);
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > SL_TRACE_MAX_CAPACITY)
      return sl_err_say(err, err_size, SL_EFORMAT, "%s: data[%zu] is not a whole number 0..%d",
                        path, i, SL_TRACE_MAX_CAPACITY);
    t->capacity[i] = (int32_t)json_integer_value(v);
    if (prices) {
      json_t *p = json_array_get(prices, i);
      double pv = json_is_number(p) ? json_number_value(p) : -1;
      if (!(pv > 0 && pv < SL_TRACE_MAX_PRICE))
        return sl_err_say(err, err_size, SL_EFORMAT, "%s: prices[%zu] is not a positive price",
                          path, i);
      t->price[i] = pv;
    }
  }
  return 0;
}

int sl_trace_read(const char *path, struct sl_trace **ret, char *err, size_t err_size) {
  char *buf = NULL, why[200];
  size_t len = 0;
  json_t *root = NULL;
  struct sl_trace *t = NULL;
  int r = read_bounded(path, &buf, &len, err, err_size);
  if (r < 0)
    return r;
  r = sl_json_parse(buf, len, SL_TRACE_MAX_DEPTH, &root, why, sizeof why);
  free(buf);
  if (r < 0)
    return sl_err_say(err, err_size, r, "%s: %s", path, why);
  json_t *gap = json_object_get(json_object_get(root, "metadata"), "gap_seconds");
  json_t *data = json_object_get(root, "data");
  json_t *prices = json_object_get(root, "prices");
  size_t n = json_array_size(data);
  if (!json_is_object(root)) {
    r = sl_err_say(err, err_size, SL_EFORMAT, "%s: not a JSON object", path);
  } else if (!json_is_number(gap) || json_number_value(gap) < 1 ||
             json_number_value(gap) > SL_TRACE_MAX_GAP_S) {
    r = sl_err_say(err, err_size, SL_EFORMAT,
                   "%s: metadata.gap_seconds missing or not in 1..%d", path, SL_TRACE_MAX_GAP_S);
  } else if (!json_is_array(data) || n == 0 || n > SL_TRACE_MAX_TICKS) {
    r = sl_err_say(err, err_size, SL_EFORMAT,
                   "%s: \"data\" missing, empty, or longer than %d ticks", path,
                   SL_TRACE_MAX_TICKS);
  } else if (prices && (!json_is_array(prices) || json_array_size(prices) != n)) {
    r = sl_err_say(err, err_size, SL_EFORMAT,
                   "%s: \"prices\" is not an array as long as \"data\"", path);
  }
  if (r < 0)
    goto out;
  t = calloc(1, sizeof *t);
  if (t) {
    t->gap_s = json_number_value(gap);
    t->n = n;
    t->capacity = calloc(n, sizeof *t->capacity);
    t->price = prices ? calloc(n, sizeof *t->price) : NULL;
  }
  if (!t || !t->capacity || (prices && !t->price)) {
    r = sl_err_say(err, err_size, -ENOMEM, "%s: out of memory", path);
    goto out;
  }
  r = take_entries(t, data, prices, path, err, err_size);
  if (r < 0)
    goto out;
  *ret = t;
  t = NULL;
out:
  sl_trace_free(t);
  json_decref(root);
  return r;
}

struct sl_trace *sl_trace_free(struct sl_trace *t) {
  if (t) {
    free(t->capacity);
    free(t->price);
    free(t);
  }
  return NULL;
}
