/* Launching an instance for a job (sched_int.h): its worker's boot
 * configuration (the gateway's address and key, a fresh key pair of its
 * own, the worker bundle where the provider needs one), the provider's
 * launch, and the instance's row in the fleet, "launching", before the loop
 * runs again; and forgetting a launch a placement pass gives up. */
#include "sched_int.h"

#include "bundle.h"

#include "sl_err.h"
#include "sl_log.h"
#include "sl_s3.h"
#include "sl_time.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#define T "gateway.sched"

/* An instance may boot a while after its launch: its bundle URL lasts. */
#define BUNDLE_URL_S (6 * 3600)

void gw_sched_set_bundle(struct gw_sched *s, struct gw_bundle *b) {
  s->bundle = b;
}

int gw_sched_launch_inst(struct gw_sched *s, struct gw_job *j, const struct gw_offer *o, bool spot,
                         char ret_id[GW_INSTANCE_ID_MAX]) {
  if (gw_fleet_n_insts(s->fleet) >= GW_MAX_INSTANCES)
    return -EAGAIN;
  const struct gw_instance_type *t = &o->type;
  struct gw_worker_boot boot = {
    .gateway = s->worker_address, .gateway_public = s->gateway_public,
    .train = s->train_program, .metrics_per_s = s->cfg->worker_metrics_per_s,
    .move_on_rebalance = s->cfg->worker_move_on_rebalance,
    .data_cache_bytes = s->cfg->worker_data_cache_mb << 20,
    .part_bytes = s->cfg->store_part_mib << 20,
  };
  char bundle_url[SL_S3_URL_MAX], bundle_sha[65];
  if (o->prov->needs_bundle) {
    char why[256] = "";
    int b = s->bundle ? gw_bundle_url(s->bundle, BUNDLE_URL_S, bundle_url, sizeof bundle_url, bundle_sha,
                                      why, sizeof why)
                      : SL_ENOTSUP;
    if (b < 0) { /* -EAGAIN: still being published; the job waits */
      if (b != -EAGAIN)
        sl_warn(T, "%s needs the worker bundle: %s", o->prov->name, why[0] ? why : "no S3 store");
      return -EAGAIN;
    }
    boot.bundle_url = bundle_url;
    boot.bundle_sha256 = bundle_sha;
  }
  int r = gw_keys_generate(&boot.keys);
  if (r < 0)
    return r;
  struct gw_wants w;
  gw_sched_wants(s, j, &w);
  struct gw_launch req = {.spot = spot, .max_price_usd_per_hour = w.max_price, .job = j->id,
                          .boot = &boot};
  snprintf(req.type, sizeof req.type, "%s", t->name);
  /* an offer of one zone launches there, an offer of a region in it */
  snprintf(req.zone, sizeof req.zone, "%s", t->zone[0] ? t->zone : t->region);
  snprintf(req.user, sizeof req.user, "%s", j->user);
  char id[GW_INSTANCE_ID_MAX] = "";
  r = o->prov->ops->launch(o->prov, &req, id);
  sodium_memzero(boot.keys.secret_z85, sizeof boot.keys.secret_z85);
  if (r < 0) {
    sl_debug(T, "launch of %s on %s refused: %s", t->name, o->prov->name, sl_strerror(r));
    gw_sched_note_refused(s, o->prov, t->name, t->zone, spot, r);
    return r;
  }
  struct gw_inst in;
  memset(&in, 0, sizeof in);
  in.prov = o->prov;
  snprintf(in.row.id, sizeof in.row.id, "%s", id);
  snprintf(in.row.provider, sizeof in.row.provider, "%s", o->prov->name);
  snprintf(in.row.type, sizeof in.row.type, "%s", t->name);
  snprintf(in.row.zone, sizeof in.row.zone, "%s", t->zone); /* LAUNCHED names the zone it got */
  in.row.spot = spot;
  in.row.price_usd_per_hour = spot ? t->spot_usd_per_hour : t->on_demand_usd_per_hour;
  in.row.on_demand_usd_per_hour = t->on_demand_usd_per_hour;
  memcpy(in.row.public_key, boot.keys.public_z85, sizeof in.row.public_key);
  snprintf(in.row.user, sizeof in.row.user, "%s", j->user);
  in.row.launched_us = sl_time_real_us();
  snprintf(in.row.state, sizeof in.row.state, "launching");
  in.row.job = j->id;
  in.gpus = t->gpus;
  in.register_by_mono_us = sl_time_mono_us() + s->cfg->register_timeout_us;
  snprintf(in.session, sizeof in.session, "%s", j->session);
  /* the key is recorded before the loop runs again, so the worker's first
   * handshake passes */
  if (!gw_fleet_inst_add(s->fleet, &in)) {
    o->prov->ops->terminate(o->prov, id);
    return -EAGAIN;
  }
  char jid[24];
  sl_info(T, "launching %s (%s%s) on %s for job %s", id, t->name, spot ? " spot" : "",
          o->prov->name, gw_job_id_str(j->id, jid, sizeof jid));
  snprintf(ret_id, GW_INSTANCE_ID_MAX, "%s", id);
  return 0;
}

void gw_sched_discard_launch(struct gw_sched *s, const char *id) {
  struct gw_inst *in = gw_fleet_inst(s->fleet, id);
  if (!in)
    return;
  if (in->prov)
    in->prov->ops->terminate(in->prov, id);
  snprintf(in->row.state, sizeof in->row.state, "terminated");
  gw_fleet_inst_save(s->fleet, in);
  gw_fleet_inst_remove(s->fleet, id);
}
