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

static void write_line(const char *topic, enum sl_log_level level, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
static void write_line(const char *topic, enum sl_log_level level, const char *fmt, va_list ap) {
  static const char *const lv[] = {"error", "warning", "info", "debug"};
  char ts[40];
  sl_time_format_iso8601(sl_time_real_us(), ts, sizeof ts);
  char msg[2048];
  vsnprintf(msg, sizeof msg, fmt, ap);
  pthread_mutex_lock(&lock);
  fprintf(stderr, "%s %s[%s] %s: %s\n", ts, prog, topic, lv[level], msg);
  pthread_mutex_unlock(&lock);
}

void sl_log(const char *topic, enum sl_log_level level, const char *fmt, ...) {
  if (!sl_log_enabled(topic, level))
    return;
  va_list ap;
  va_start(ap, fmt);
  write_line(topic, level, fmt, ap);
  va_end(ap);
}

void sl_log_limit_flush(struct sl_log_limit *site, const char *topic) {
  if (!site->pending)
    return;
  uint64_t n = site->pending;
  site->pending = 0;
  sl_log(topic, site->level, "%llu similar message%s dropped (at most %g a second are logged)",
         (unsigned long long)n, n == 1 ? "" : "s", site->per_s);
}

bool sl_log_limited(struct sl_log_limit *site, const char *topic, enum sl_log_level level,
                    const char *fmt, ...) {
  if (!sl_log_enabled(topic, level))
    return false;
  int64_t now = sl_time_mono_us();
  if (!site->last_us)
    site->tokens = site->burst;
  else if (now > site->last_us)
    site->tokens += (double)(now - site->last_us) / 1e6 * site->per_s;
  if (site->tokens > site->burst)
    site->tokens = site->burst;
  site->last_us = now;
  site->level = level;
  if (site->tokens < 1) {
    site->pending++;
    site->dropped++;
    return false;
  }
  site->tokens -= 1;
  sl_log_limit_flush(site, topic);
  va_list ap;
  va_start(ap, fmt);
  write_line(topic, level, fmt, ap);
  va_end(ap);
  return true;
}
