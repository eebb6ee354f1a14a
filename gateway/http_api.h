/* The HTTP API's views of users, groups, preemptions and stored data, the cost's
 * groups and days, and the admin page's embedded files. http.c routes
 * and authorises; these functions only read the gateway's state for the
 * user the caller chose (NULL: everyone, for an admin) and return owned
 * JSON, so they run on the loop like the rest of the server. */
#ifndef GW_HTTP_API_H
#define GW_HTTP_API_H

#include "admin/assets.h"
#include "http.h"

#include <jansson.h>
#include <stddef.h>

/* {"users": [{"user", "group", "admin", "jobs": {STATE: N}, "live_jobs",
 * "instances", "spent_usd", "month_spent_usd"}]}: every user the
 * configuration or the store knows when user is NULL, else that user. */
int gw_http_users(const struct gw_httpd_env *env, const char *user, json_t **ret);
/* {"groups": [{"group", "configured", "notebook_timeout_s",
 * "worker_timeout_s", "month_spent_usd", "members"}]}: every group when
 * user is NULL; else user's group (none without one), without "members". */
int gw_http_groups(const struct gw_httpd_env *env, const char *user, json_t **ret);
/* {"count", "notice", "no_notice", "recent": [...]}: the preemptions of
 * user's jobs (NULL: everyone), the newest limit of them first, each with
 * the recovery that followed it (null until the job resumed). */
int gw_http_preemptions(const struct gw_httpd_env *env, const char *user, size_t limit,
                        json_t **ret);
/* {"uploads": [...as spotlab data --json, each with its "user" when user is
 * NULL], "files", "bytes", "by_user": [{"user", "files", "bytes"}] (the
 * most first)}: the stored data files of user (NULL: everyone). */
int gw_http_data(const struct gw_httpd_env *env, const char *user, json_t **ret);
/* Adds "by_group" to cost (from its "by_user" rows, borrowed) and, when
 * days > 0, makes its "by_day" the last days UTC days of user's spend
 * (NULL: everyone), oldest first, days without spend included as 0. */
int gw_http_cost_more(const struct gw_httpd_env *env, const char *user, int days, json_t *cost);
/* The embedded file a GET of url answers with ("/" and "/admin/" are the
 * page), or NULL. */
const struct gw_admin_asset *gw_http_admin_asset(const char *url);

#endif
