/* Logging with topics.
 *
 * Errors and warnings always print; debug lines print only for the topics named
 * in SPOTLAB_DEBUG (comma-separated, "all" for everything, "kernel" matches
 * "kernel.wire"). Lines go to stderr with a timestamp and the program name.
 * Secrets (keys, tokens) must never be passed here. */
#ifndef SL_LOG_H
#define SL_LOG_H

#include <stdbool.h>
#include <stdint.h>

enum sl_log_level { SL_LOG_ERR, SL_LOG_WARN, SL_LOG_INFO, SL_LOG_DEBUG };

/* Reads SPOTLAB_DEBUG; progname is borrowed for the life of the process. */
void sl_log_init(const char *progname);
bool sl_log_enabled(const char *topic, enum sl_log_level level);
void sl_log(const char *topic, enum sl_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A log site with a budget, for lines that input from the world can cause
 * (a peer sending garbage must not fill the disk): a token bucket of burst
 * lines refilled at per_s lines a second. A line over the budget is counted,
 * not written; the count is reported in one line ("N similar messages
 * dropped") before the site's next line that passes, or by
 * sl_log_limit_flush() from a timer, so a flood that stopped is reported
 * too. A site belongs to one thread; set it up with SL_LOG_LIMIT. */
struct sl_log_limit {
  double per_s, burst;
  double tokens;
  int64_t last_us;              /* 0: never used (the bucket starts full) */
  enum sl_log_level level;      /* of the last line, for the report */
  uint64_t pending;             /* dropped since the last report */
  uint64_t dropped;             /* dropped in all */
};
#define SL_LOG_LIMIT(per_s_, burst_) ((struct sl_log_limit){.per_s = (per_s_), .burst = (burst_)})

/* Logs like sl_log() while site's budget lasts, else counts the line as
 * dropped. site is borrowed. True when the line was written. */
bool sl_log_limited(struct sl_log_limit *site, const char *topic, enum sl_log_level level,
                    const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Writes the report of site's pending drops, if any. */
void sl_log_limit_flush(struct sl_log_limit *site, const char *topic);

#define sl_err(topic, ...)   sl_log(topic, SL_LOG_ERR, __VA_ARGS__)
#define sl_warn(topic, ...)  sl_log(topic, SL_LOG_WARN, __VA_ARGS__)
#define sl_info(topic, ...)  sl_log(topic, SL_LOG_INFO, __VA_ARGS__)
#define sl_debug(topic, ...)                                \
  do {                                                      \
    if (sl_log_enabled(topic, SL_LOG_DEBUG))                \
      sl_log(topic, SL_LOG_DEBUG, __VA_ARGS__);             \
  } while (0)

#endif
