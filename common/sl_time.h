/* Time. One type everywhere: int64_t microseconds. */
#ifndef SL_TIME_H
#define SL_TIME_H

#include <stddef.h>
#include <stdint.h>

#define SL_US_PER_MS INT64_C(1000)
#define SL_US_PER_S INT64_C(1000000)

/* Microseconds since the Unix epoch (wall clock). */
int64_t sl_time_real_us(void);
/* Microseconds on the monotonic clock: for deadlines and durations. */
int64_t sl_time_mono_us(void);
/* "2026-11-22T10:00:00.123456Z" into buf; returns buf. */
char *sl_time_format_iso8601(int64_t real_us, char *buf, size_t size);
/* Parses "90s", "30m", "2h", "1d", "500ms" or a bare number of seconds.
 * Writes *ret_us only on success; -EINVAL on anything else. */
int sl_time_parse_duration(const char *text, int64_t *ret_us);
/* "1h 02m", "3m 10s", "12s": a short human form of a duration. */
char *sl_time_format_duration(int64_t us, char *buf, size_t size);

#endif
