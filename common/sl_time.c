/* Clock reads and the duration grammar shared by the cell language and config. */
#include "sl_time.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t read_clock(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (int64_t)ts.tv_sec * SL_US_PER_S + ts.tv_nsec / 1000;
}

int64_t sl_time_real_us(void) { return read_clock(CLOCK_REALTIME); }
int64_t sl_time_mono_us(void) { return read_clock(CLOCK_MONOTONIC); }

char *sl_time_format_iso8601(int64_t real_us, char *buf, size_t size) {
  time_t s = (time_t)(real_us / SL_US_PER_S);
  struct tm tm;
  gmtime_r(&s, &tm);
  snprintf(buf, size, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year + 1900,
           tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
           (int)(real_us % SL_US_PER_S));
  return buf;
}

int sl_time_parse_duration(const char *text, int64_t *ret_us) {
  if (!text || !*text)
    return -EINVAL;
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (errno || end == text || !isfinite(v) || v < 0)
    return -EINVAL;
  double mult;
  if (*end == '\0' || strcmp(end, "s") == 0)
    mult = 1e6;
  else if (strcmp(end, "ms") == 0)
    mult = 1e3;
  else if (strcmp(end, "m") == 0)
    mult = 60e6;
  else if (strcmp(end, "h") == 0)
    mult = 3600e6;
  else if (strcmp(end, "d") == 0)
    mult = 86400e6;
  else
    return -EINVAL;
  double us = v * mult;
  if (us > 9.0e18)
    return -ERANGE;
  *ret_us = (int64_t)llround(us);
  return 0;
}

char *sl_time_format_duration(int64_t us, char *buf, size_t size) {
  if (us < 0)
    us = 0;
  int64_t s = us / SL_US_PER_S;
  if (s >= 3600)
    snprintf(buf, size, "%lldh %02lldm", (long long)(s / 3600), (long long)(s % 3600 / 60));
  else if (s >= 60)
    snprintf(buf, size, "%lldm %02llds", (long long)(s / 60), (long long)(s % 60));
  else
    snprintf(buf, size, "%llds", (long long)s);
  return buf;
}
