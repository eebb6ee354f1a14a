/* The spotlab CLI's gateway connection: a blocking wrapper around the
 * kernel's protocol client (gwclient.h) with its own DEALER socket. */
#ifndef CLI_CONN_H
#define CLI_CONN_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

struct cli_conn;

/* Called for each event while following; return false to stop following. */
typedef bool (*cli_event_fn)(void *ud, const json_t *event);

/* Called while following when the gateway stops answering (up false) and
 * when it answers again (up true): once per change, not per retry. */
typedef void (*cli_link_fn)(void *ud, bool up);

/* Connects lazily to SPOTLAB_GATEWAY or the embedded default; never starts
 * a gateway. NULL on OOM. */
struct cli_conn *cli_conn_new(void);
struct cli_conn *cli_conn_free(struct cli_conn *c);

/* Sends req (taken) and waits up to timeout_ms for its reply. On success
 * *ret_reply holds the owned reply. On failure returns negative and writes a
 * message for people into err: SL_ENOGATEWAY when no gateway answered,
 * SL_EAUTH when one answered but refused hello (the token), SL_ESTATE when
 * it refused the request. */
int cli_request(struct cli_conn *c, json_t *req, int timeout_ms, json_t **ret_reply, char *err, size_t err_size);
/* fn (may be NULL) hears the link's changes while following; ud borrowed. */
void cli_set_link_fn(struct cli_conn *c, cli_link_fn fn, void *ud);
/* From now on signal signo (SIGINT, SIGALRM...; up to 4 of them) ends the
 * wait of cli_follow or cli_request, which return SL_EINTERRUPTED, also when it arrives between two waits or while an event is written; the
 * calls it interrupts are restarted. Each signal ends one wait. Returns 0 or
 * -errno. cli_woken_by names the first that ended a wait since the first of
 * these calls (0: none); cli_unwake_signal restores their former actions. */
int cli_wake_on_signal(struct cli_conn *c, int signo);
int cli_woken_by(const struct cli_conn *c);
void cli_unwake_signal(struct cli_conn *c);
/* Attaches to job after seq `after` and calls fn for each event until fn
 * returns false. The events are those of the job the gateway's attach reply
 * names, whatever alias of its id job is. *ret_reply receives the attach reply (owned) when non-NULL.
 * Returns 0 when fn stopped, negative on a failure (message in err). */
int cli_follow(struct cli_conn *c, const char *job, int64_t after, cli_event_fn fn, void *ud,
               json_t **ret_reply, char *err, size_t err_size);
/* The gateway address in use (borrowed). */
const char *cli_address(struct cli_conn *c);

#endif
