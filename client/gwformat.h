/* Plain-text renderings of gateway replies, shared by the kernel's magics
 * and the spotlab CLI: one table or summary per reply kind, and one line per
 * job event. Each returns an owned string ending in a newline (NULL on OOM);
 * fields a reply lacks are shown as "-", never guessed. */
#ifndef JK_GWFORMAT_H
#define JK_GWFORMAT_H

#include <jansson.h>

/* {"jobs":[summary...]} */
char *jk_format_jobs(const json_t *reply);
/* The same, only the jobs of notebook session (borrowed; NULL: all). */
char *jk_format_jobs_of(const json_t *reply, const char *session);
/* {"gateway":{...},"workers":[...],"idle":{...},"budget":{...}} */
char *jk_format_status(const json_t *reply);
/* {"sessions":[{"name","last_active_us","vars","defs","models","jobs"}]}:
 * one line each, current (may be NULL) marked. */
char *jk_format_sessions(const json_t *reply, const char *current);
/* A session.delete's reply {"deleted","jobs_kept_as","jobs_purged"}. */
char *jk_format_session_deleted(const json_t *reply);
/* {"uploads":[{"sha256","bytes","path","last_us","jobs","live_jobs","deleting"}]}:
 * the stored data files, one line each, and their total; rm is how to
 * delete one ("spotlab data rm", "%data rm"). */
char *jk_format_uploads(const json_t *reply, const char *rm);
/* A data.delete's reply {"deleted","path","bytes"}. */
char *jk_format_upload_deleted(const json_t *reply);
/* The "idle" part of a status reply. */
char *jk_format_idle(const json_t *reply);
/* {"spent_usd","on_demand_usd","saved_usd","jobs":[...]} */
char *jk_format_cost(const json_t *reply);
/* The same with only session's jobs listed (the totals stay the user's):
 * jobs_reply (a {"jobs":[summary...]} reply, borrowed) says which jobs are
 * the session's. session NULL: every job, as jk_format_cost(). */
char *jk_format_cost_of(const json_t *reply, const json_t *jobs_reply, const char *session);
/* {"types":[{"type","gpus","spot_usd_per_hour","on_demand_usd_per_hour","interruption",...}],
 *  "ranking":[{"rank","type","zone","market","usd_per_hour","usd_per_unit","efficiency","why"}],
 *  "unit"}: the ranking best first with its reasons (without a ranking, one row per type). */
char *jk_format_market(const json_t *reply);
/* The same ranking as an HTML table; NULL without a ranking (or on OOM). */
char *jk_format_market_html(const json_t *reply);
/* {"instances":[...]} */
char *jk_format_instances(const json_t *reply);
/* One event as a line: "#12 +3m 10s metric step 400/3000 loss 2.1134". */
char *jk_format_event(const json_t *event, long long first_time_us);
/* {"events":[...],"more":bool} */
char *jk_format_events(const json_t *reply);

/* The gateway request of "%budget ARGS" and "spotlab budget ARGS", owned:
 * "" lists the budgets; "set gateway USD", "set group NAME USD" or "set
 * user NAME USD" sets one (an admin's). NULL with a message in err. */
json_t *jk_budget_request(const char *args, char *err, size_t size);
/* The budget reply: each budget with its spend, alerts and cap. */
char *jk_format_budgets(const json_t *reply);

#endif
