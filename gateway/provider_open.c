/* spotlab-gateway's provider: the local provider when it is built in and
 * [provider.local] slots > 0. */
#include "provider_open.h"

#include "sl_path.h"

#include <stdio.h>

#if GW_HAVE_LOCAL
#include "providers/local.h"
#endif

struct gw_provider *gw_provider_open(const struct gw_config *cfg, gw_provider_event_fn on_event,
                                     void *userdata, char *err, size_t err_size) {
#if GW_HAVE_LOCAL
  if (cfg->local_slots <= 0) {
    snprintf(err, err_size, "no provider configured ([provider.local] slots = 0)");
    return NULL;
  }
  char worker[1024];
  if (sl_find_program("spotlab-worker", worker, sizeof worker) < 0) {
    snprintf(err, err_size, "spotlab-worker not found (set SPOTLAB_WORKER_BIN)");
    return NULL;
  }
  struct gw_local_config lc = {
    .slots = (int)cfg->local_slots,
    .market = cfg->local_market,
    .time_scale = cfg->local_time_scale,
    .catalog = cfg->local_catalog[0] ? cfg->local_catalog : NULL,
    .state_dir = cfg->state_dir,
    .worker_program = worker,
    .zone_prefix = NULL,
  };
  return gw_local_provider_new(&lc, on_event, userdata, err, err_size);
#else
  (void)cfg; (void)on_event; (void)userdata;
  snprintf(err, err_size, "this spotlab-gateway was built without the local provider");
  return NULL;
#endif
}
