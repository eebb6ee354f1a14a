/* A team gateway as a JupyterHub service (docs/jupyterhub.md): hello's
 * token may be a hub token, such as the JUPYTERHUB_API_TOKEN a single-user
 * server hands its kernels. The hub says whose token it is and the user's
 * hub groups (GET {api}/user, which any token may ask of its own user since
 * JupyterHub 2.0); the first [group.NAME] section of the file that names one
 * of those groups becomes the user's group. Checks run on the gateway's
 * loop (httpc.h) and never block it; an answer is kept for [hub] cache so
 * the reconnects of a kernel do not ask again. */
#ifndef GW_HUB_H
#define GW_HUB_H

#include "conf.h"

#include <stdint.h>

struct gw_httpc;
struct gw_hub;

#define GW_HUB_USER_MAX 64      /* bytes of a user name, NUL included */

struct gw_hub_who {
  char user[GW_HUB_USER_MAX];
  char group[GW_NAME_MAX];      /* the [group.NAME] the hub groups select; "" none */
};

/* A check's outcome, once, from the loop: err 0 and who (borrowed for the
 * call), or err < 0 and msg (why, fit for the client; never the token). */
typedef void (*gw_hub_done_fn)(void *data, int err, const struct gw_hub_who *who,
                               const char *msg);

/* The hub of cfg's [hub] section: *ret owned, or NULL when cfg has none.
 * cfg and http are borrowed for the hub's life. SL_ECONFIG with a message
 * when [hub] names no usable URL (nor does JUPYTERHUB_API_URL). */
int gw_hub_new(const struct gw_config *cfg, struct gw_httpc *http, struct gw_hub **ret,
               char *err, size_t err_size);
/* Cancels the checks in flight (no done runs). Returns NULL. */
struct gw_hub *gw_hub_free(struct gw_hub *h);
/* The API URL in use (from the file or JUPYTERHUB_API_URL). */
const char *gw_hub_url(const struct gw_hub *h);
/* Checks token (borrowed for the call). 1: a recent answer, in *ret_who,
 * and done never runs. 0: asked the hub; done(data) runs later and
 * *ret_check names the check for gw_hub_cancel. Negative: SL_EAUTH for a
 * token no hub could issue, SL_ELIMIT when too many checks are in flight,
 * or the HTTP client's errors. */
int gw_hub_check(struct gw_hub *h, const char *token, gw_hub_done_fn done, void *data,
                 struct gw_hub_who *ret_who, uint64_t *ret_check);
/* Forgets a check in flight: its done never runs. -ENOENT if unknown. */
int gw_hub_cancel(struct gw_hub *h, uint64_t check);
/* The group the hub's groups of user selected at their last check, or NULL
 * (gw_config's runtime_group; ctx is the hub). */
const char *gw_hub_user_group(const void *ctx, const char *user);

#endif
