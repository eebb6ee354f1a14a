/* Topic logging to stderr. The debug topic list is parsed once at init; a
 * process that never calls sl_log_init() logs errors, warnings and info only. */
#include "sl_log.h"
#include "sl_time.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *prog = "spotlab";
static char topics[512];
static bool info_on = true;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

void sl_log_init(const char *progname) {
  const char *env = getenv("SPOTLAB_DEBUG");
  if (progname)
    prog = progname;
  topics[0] = '\0';
  if (env)
    snprintf(topics, sizeof topics, ",%s,", env);
  const char *quiet = getenv("SPOTLAB_QUIET");
  info_on = !(quiet && *quiet && strcmp(quiet, "0") != 0);
}

static bool topic_listed(const char *topic) {
  if (!topics[0])
    return false;
  if (strstr(topics, ",all,"))
    return true;
  /* "kernel" enables "kernel.wire": try each dotted prefix. */
  char want[128];
  size_t n = strlen(topic);
  if (n >= sizeof want - 2)
    return false;
  for (;;) {
    snprintf(want, sizeof want, ",%.*s,", (int)n, topic);
    if (strstr(topics, want))
      return true;
    while (n > 0 && topic[n - 1] != '.')
      n--;
    if (n == 0)
      return false;
    n--;
  }
}

bool sl_log_enabled(const char *topic, enum sl_log_level level) {
  if (level <= SL_LOG_WARN)
    return true;
  if (level == SL_LOG_INFO)
    return info_on || topic_listed(topic);
  return topic_listed(topic);
}

void sl_log(const char *topic, enum sl_log_level level, const char *fmt, ...) {
  static const char *const lv[] = {"error", "warning", "info", "debug"};
  if (!sl_log_enabled(topic, level))
    return;
  char ts[40];
  sl_time_format_iso8601(sl_time_real_us(), ts, sizeof ts);
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&lock);
  fprintf(stderr, "%s %s[%s] %s: %s\n", ts, prog, topic, lv[level], msg);
  pthread_mutex_unlock(&lock);
}
