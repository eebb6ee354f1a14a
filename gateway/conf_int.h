/* Shared by the configuration's files: conf.c (the option table, setting
 * a value, defaults, --dump-config), conf_load.c (reading a file),
 * conf_check.c (the checks of values) and conf_provider.c ([provider.NAME]
 * sections). Nothing else includes this header. */
#ifndef GW_CONF_INT_H
#define GW_CONF_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct gw_config;
struct gw_provider_cfg;

/* conf.c, for conf_load.c */
/* The template a section's rows come from ("user.*" for [user.alice], the
 * section itself otherwise) and, for a template, the entry's name in
 * *ret_entry. */
const char *gw_conf_section_template(const char *section, const char **ret_entry);
/* 0 for a section the table, a template or a provider class knows;
 * SL_ECONFIG with why (err may be NULL) otherwise. */
int gw_conf_check_section(const char *section, char *err, size_t size);
/* Makes the entry of [group.NAME] or [webhook.NAME] (tmpl "group.*" or
 * "webhook.*") at its header; false, with why, when there is no room. */
bool gw_conf_add_entry(struct gw_config *c, const char *tmpl, const char *entry, char *err, size_t size);

/* "job.succeeded, job.failed" as bits of enum gw_hook_event in *ret_mask. */
int gw_conf_parse_events(const char *v, unsigned *ret_mask, char *why, size_t size);

/* The checks of the option table's value types: 0, or SL_ECONFIG with why. */
int gw_conf_check_addr(const char *v, char *why, size_t size);    /* tcp://HOST:PORT, ipc://, inproc:// */
int gw_conf_check_dir(const char *v, char *why, size_t size);     /* a folder: not empty */
int gw_conf_check_http(const char *v, char *why, size_t size);    /* "" or HOST:PORT */
int gw_conf_check_types(const char *v, char *why, size_t size);   /* instance type names */
int gw_conf_check_alert_at(const char *v, char *why, size_t size);/* budget alert percentages */
int gw_conf_check_yes_no(const char *v, char *why, size_t size);
int gw_conf_check_auto_yes_no(const char *v, char *why, size_t size);
int gw_conf_check_events(const char *v, char *why, size_t size);
int gw_conf_check_name(const char *v, char *why, size_t size);
int gw_conf_check_hex64(const char *v, char *why, size_t size);   /* 64 hex digits */
int gw_conf_check_store(const char *v, char *why, size_t size);   /* file:/// or s3:// */
int gw_conf_check_hub_url(const char *v, char *why, size_t size); /* "" or http(s):// */
int gw_conf_check_region(const char *v, char *why, size_t size);  /* "" or an AWS region */

/* conf_provider.c */
/* Enables provider name (a registered class) as named by the file: an
 * implicit entry of that name becomes explicit, every other implicit entry
 * is dropped. NULL, changing nothing, when GW_MAX_PROVIDERS_CFG are enabled. */
struct gw_provider_cfg *gw_conf_enable_provider(struct gw_config *c, const char *name, char *err,
                                                size_t size);
/* Resets the providers to the implicit default unless the file named one. */
void gw_conf_implicit_default(struct gw_config *c);
/* key = value in [section] (provider's), checked against its class. */
int gw_conf_set_provider_option(struct gw_config *c, const char *section, const char *provider,
                                const char *key, const char *value, char *err, size_t size);
/* An enabled provider's section for --dump-config: every option of its class, effective value. */
void gw_conf_dump_provider(FILE *out, const struct gw_config *c, const struct gw_provider_cfg *p);

#endif
