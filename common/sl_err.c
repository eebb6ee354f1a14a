/* The error table's generated lookups, and the one way to say why. */
#include "sl_err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const texts[] = {
#define T(name, text) [name##_POS_ - SL_ERR_BASE_ - 1] = text,
  SL_ERRORS(T)
#undef T
};

static const char *const names[] = {
#define N(name, text) [name##_POS_ - SL_ERR_BASE_ - 1] = #name,
  SL_ERRORS(N)
#undef N
};

static int table_index(int err) {
  int pos = -err;
  if (pos > SL_ERR_BASE_ && pos < SL_ERR_END_)
    return pos - SL_ERR_BASE_ - 1;
  return -1;
}

const char *sl_strerror(int err) {
  int i = table_index(err);
  if (i >= 0)
    return texts[i];
  if (err < 0 && err > -SL_ERR_BASE_)
    return strerror(-err);
  return "unknown error";
}

const char *sl_errname(int err) {
  int i = table_index(err);
  if (i >= 0)
    return names[i];
  if (err < 0 && err > -SL_ERR_BASE_) {
    const char *n = strerrorname_np(-err);
    return n ? n : "E?";
  }
  return "E?";
}

int sl_err_say(char *err, size_t size, int code, const char *fmt, ...) {
  if (err && size) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
  }
  return code;
}

bool sl_err_unanswered(int err) {
  return err == -ETIMEDOUT || err == -ECONNREFUSED || err == -ECONNRESET || err == -EHOSTUNREACH ||
         err == SL_ECURL;
}
