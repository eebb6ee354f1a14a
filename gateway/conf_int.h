/* Shared by the configuration's files: conf.c (the option table, parsing,
 * defaults, --dump-config) and conf_check.c (the checks of values). Nothing
 * else includes this header. */
#ifndef GW_CONF_INT_H
#define GW_CONF_INT_H

#include <stdbool.h>
#include <stddef.h>

/* Writes the message into err (size bytes; nothing when err is NULL). */
void gw_conf_fail(char *err, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* "job.succeeded, job.failed" as bits of enum gw_hook_event in *ret_mask. */
int gw_conf_parse_events(const char *v, unsigned *ret_mask, char *why, size_t size);

/* The checks of the option table's value types: 0, or SL_ECONFIG with why. */
int gw_conf_check_addr(const char *v, char *why, size_t size);    /* tcp://, ipc:// or inproc:// */
int gw_conf_check_http(const char *v, char *why, size_t size);    /* "" or HOST:PORT */
int gw_conf_check_types(const char *v, char *why, size_t size);   /* instance type names */
int gw_conf_check_alert_at(const char *v, char *why, size_t size);/* budget alert percentages */
int gw_conf_check_yes_no(const char *v, char *why, size_t size);
int gw_conf_check_hook_url(const char *v, char *why, size_t size);
int gw_conf_check_events(const char *v, char *why, size_t size);
int gw_conf_check_name(const char *v, char *why, size_t size);
int gw_conf_check_hex64(const char *v, char *why, size_t size);   /* 64 hex digits */
int gw_conf_check_store(const char *v, char *why, size_t size);   /* file:/// or s3:// */
int gw_conf_check_hub_url(const char *v, char *why, size_t size); /* "" or http(s):// */

#endif
