/* Logging with topics.
 *
 * Errors and warnings always print; debug lines print only for the topics named
 * in SPOTLAB_DEBUG (comma-separated, "all" for everything, "kernel" matches
 * "kernel.wire"). Lines go to stderr with a timestamp and the program name.
 * Secrets (keys, tokens) must never be passed here. */
#ifndef SL_LOG_H
#define SL_LOG_H

#include <stdbool.h>

enum sl_log_level { SL_LOG_ERR, SL_LOG_WARN, SL_LOG_INFO, SL_LOG_DEBUG };

/* Reads SPOTLAB_DEBUG; progname is borrowed for the life of the process. */
void sl_log_init(const char *progname);
bool sl_log_enabled(const char *topic, enum sl_log_level level);
void sl_log(const char *topic, enum sl_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define sl_err(topic, ...)   sl_log(topic, SL_LOG_ERR, __VA_ARGS__)
#define sl_warn(topic, ...)  sl_log(topic, SL_LOG_WARN, __VA_ARGS__)
#define sl_info(topic, ...)  sl_log(topic, SL_LOG_INFO, __VA_ARGS__)
#define sl_debug(topic, ...)                                \
  do {                                                      \
    if (sl_log_enabled(topic, SL_LOG_DEBUG))                \
      sl_log(topic, SL_LOG_DEBUG, __VA_ARGS__);             \
  } while (0)

#endif
