/* Energy and emissions (carbon.h). The table is the parsed carbon.json,
 * validated once at load so that a lookup never meets a bad number. The
 * estimate is a linear power model between idle and maximum draw, as the
 * Cloud Carbon Footprint methodology uses; memory, storage, network and
 * embodied emissions are left out (docs/admin.md, Carbon). */
#include "carbon.h"

#include "gang.h"
#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#include <ctype.h>
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define T "gateway.carbon"

struct gw_carbon {
  json_t *root;
};

static bool num_in(const json_t *o, const char *key, double lo, double hi) {
  const json_t *v = json_object_get(o, key);
  return json_is_number(v) && json_number_value(v) >= lo && json_number_value(v) <= hi;
}

static int bad(char *err, size_t size, const char *path, const char *what, const char *name) {
  snprintf(err, size, "%s: %s%s%s", path, what, name ? " " : "", name ? name : "");
  return SL_EPARSE;
}

static int validate(const json_t *root, const char *path, char *err, size_t size) {
  const json_t *cpu = json_object_get(root, "cpu"), *gpus = json_object_get(root, "gpus");
  if (!num_in(cpu, "idle_w_per_vcpu", 0, 1e3) || !num_in(cpu, "max_w_per_vcpu", 0, 1e3) ||
      json_number_value(json_object_get(cpu, "max_w_per_vcpu")) <
          json_number_value(json_object_get(cpu, "idle_w_per_vcpu")))
    return bad(err, size, path, "cpu needs idle_w_per_vcpu <= max_w_per_vcpu (0..1000)", NULL);
  const json_t *u = json_object_get(root, "default_util");
  if (!num_in(u, "cpu", 0, 1) || !num_in(u, "gpu", 0, 1))
    return bad(err, size, path, "default_util needs cpu and gpu in 0..1", NULL);
  const char *k;
  const json_t *v;
  if (!json_is_object(gpus))
    return bad(err, size, path, "gpus must be an object", NULL);
  json_object_foreach((json_t *)gpus, k, v) {
    if (!num_in(v, "idle_w", 0, 1e4) || !num_in(v, "max_w", 0, 1e4) ||
        json_number_value(json_object_get(v, "max_w")) < json_number_value(json_object_get(v, "idle_w")))
      return bad(err, size, path, "needs idle_w <= max_w (0..10000): gpu", k);
  }
  const json_t *types = json_object_get(root, "types");
  if (!json_is_object(types))
    return bad(err, size, path, "types must be an object", NULL);
  json_object_foreach((json_t *)types, k, v) {
    const char *gpu = sl_json_get_str(v, "gpu", NULL);
    if (!num_in(v, "vcpus", 0, 1e4) || !num_in(v, "gpus", 0, 1e3) ||
        (json_number_value(json_object_get(v, "gpus")) > 0 && (!gpu || !json_object_get(gpus, gpu))))
      return bad(err, size, path, "needs vcpus, gpus and a gpu listed under gpus: type", k);
  }
  const json_t *provs = json_object_get(root, "providers");
  if (!json_is_object(provs) || !json_object_get(provs, "aws"))
    return bad(err, size, path, "providers must list aws", NULL);
  json_object_foreach((json_t *)provs, k, v) {
    if (!num_in(v, "pue", 1, 3))
      return bad(err, size, path, "needs pue in 1..3: provider", k);
  }
  const json_t *regions = json_object_get(root, "regions");
  if (!json_is_object(regions) || !num_in(json_object_get(root, "default_region"), "g_per_kwh", 0, 1e4))
    return bad(err, size, path, "needs regions and default_region.g_per_kwh", NULL);
  json_object_foreach((json_t *)regions, k, v) {
    if (!num_in(v, "g_per_kwh", 0, 1e4))
      return bad(err, size, path, "needs g_per_kwh in 0..10000: region", k);
  }
  json_object_foreach(json_object_get(root, "region_aliases"), k, v) {
    if (!json_is_string(v) || !json_object_get(regions, json_string_value(v)))
      return bad(err, size, path, "alias names no region:", k);
  }
  return 0;
}

int gw_carbon_load(const char *path, struct gw_carbon **ret, char *err, size_t err_size) {
  json_error_t je;
  json_t *root = json_load_file(path, 0, &je);
  if (!root) {
    snprintf(err, err_size, "%s:%d: %s", path, je.line, je.text);
    return SL_EPARSE;
  }
  int r = validate(root, path, err, err_size);
  struct gw_carbon *c = r == 0 ? calloc(1, sizeof *c) : NULL;
  if (!c) {
    json_decref(root);
    return r < 0 ? r : -ENOMEM;
  }
  c->root = root;
  *ret = c;
  return 0;
}

struct gw_carbon *gw_carbon_free(struct gw_carbon *c) {
  if (c) {
    json_decref(c->root);
    free(c);
  }
  return NULL;
}

int gw_carbon_default_path(char *ret, size_t size) {
  char self[4096], path[4200];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    snprintf(path, sizeof path, "%s/../share/spotlab/carbon.json", dirname(self));
    if (access(path, R_OK) == 0 && strlen(path) < size) {
      strcpy(ret, path);
      return 0;
    }
  }
#ifdef GW_CARBON_SOURCE_PATH
  if (access(GW_CARBON_SOURCE_PATH, R_OK) == 0 && strlen(GW_CARBON_SOURCE_PATH) < size) {
    strcpy(ret, GW_CARBON_SOURCE_PATH);
    return 0;
  }
#endif
  return -ENOENT;
}

static double num(const json_t *o, const char *key) {
  return json_number_value(json_object_get(o, key));
}

/* The table's row for zone: the zone itself when it is a region, else the
 * zone less its letter ("us-east-1a"), each looked up through the aliases. */
static const json_t *region_of(const json_t *root, const char *zone) {
  const json_t *regions = json_object_get(root, "regions");
  const json_t *aliases = json_object_get(root, "region_aliases");
  char name[64];
  snprintf(name, sizeof name, "%s", zone ? zone : "");
  for (int pass = 0; pass < 2; pass++) {
    const json_t *r = json_object_get(regions, name);
    const char *alias = json_string_value(json_object_get(aliases, name));
    if (!r && alias)
      r = json_object_get(regions, alias);
    if (r)
      return r;
    size_t n = strlen(name);
    if (n < 2 || !islower((unsigned char)name[n - 1]) || !isdigit((unsigned char)name[n - 2]))
      break;
    name[n - 1] = '\0';
  }
  return json_object_get(root, "default_region");
}

int gw_carbon_rate(const struct gw_carbon *c, const char *provider, const char *type,
                   const char *zone, struct gw_carbon_rate *ret) {
  const json_t *t = json_object_get(json_object_get(c->root, "types"), type ? type : "");
  if (!t)
    return SL_ENAME;
  const json_t *cpu = json_object_get(c->root, "cpu");
  const json_t *gpu = json_object_get(json_object_get(c->root, "gpus"), sl_json_get_str(t, "gpu", ""));
  const json_t *provs = json_object_get(c->root, "providers");
  const json_t *p = json_object_get(provs, provider ? provider : "");
  *ret = (struct gw_carbon_rate){
    .gpus = gpu ? num(t, "gpus") : 0, .gpu_idle_w = num(gpu, "idle_w"), .gpu_max_w = num(gpu, "max_w"),
    .vcpus = num(t, "vcpus"), .cpu_idle_w = num(cpu, "idle_w_per_vcpu"),
    .cpu_max_w = num(cpu, "max_w_per_vcpu"), .pue = num(p ? p : json_object_get(provs, "aws"), "pue"),
    .g_per_kwh = num(region_of(c->root, zone), "g_per_kwh")};
  return 0;
}

double gw_carbon_default_util(const struct gw_carbon *c, bool gpu) {
  return num(json_object_get(c->root, "default_util"), gpu ? "gpu" : "cpu");
}

static double clamp01(double x) { return x < 0 ? 0 : x > 1 ? 1 : x; }

void gw_carbon_estimate(const struct gw_carbon_rate *r, double instances, double hours,
                        double cpu_util, double gpu_util, double *ret_kwh, double *ret_g) {
  double cu = clamp01(cpu_util), gu = clamp01(gpu_util);
  double watts = r->gpus * (r->gpu_idle_w + gu * (r->gpu_max_w - r->gpu_idle_w)) +
                 r->vcpus * (r->cpu_idle_w + cu * (r->cpu_max_w - r->cpu_idle_w));
  double kwh = hours > 0 && instances > 0 ? instances * hours * watts * r->pue / 1000 : 0;
  *ret_kwh = kwh;
  *ret_g = kwh * r->g_per_kwh;
}

void gw_carbon_sink(void *data, const struct gw_bus_event *ev) {
  struct gw_carbon_sink *k = data;
  if (ev->kind != GW_BUS_COST || !ev->job || !k->table || ev->seconds <= 0)
    return;
  struct gw_job *j = gw_fleet_job(k->fleet, ev->job->id);
  if (!j)
    return;
  const struct gw_inst *in = gw_fleet_inst(k->fleet, j->instance);
  struct gw_carbon_rate rate;
  if (gw_carbon_rate(k->table, in ? in->row.provider : "aws", j->instance_type, j->zone, &rate) < 0) {
    if (!k->warned)
      sl_warn(T, "no power figures for instance type %s: its jobs get no energy estimate",
              j->instance_type);
    k->warned = true;
    return;
  }
  double cpu = j->cpu_util_seen ? j->cpu_util : gw_carbon_default_util(k->table, false);
  double gpu = j->gpu_util_seen ? j->gpu_util : gw_carbon_default_util(k->table, true);
  double kwh, g;
  gw_carbon_estimate(&rate, j->gang ? j->gang->n : 1, ev->seconds / 3600, cpu, gpu, &kwh, &g);
  j->energy_kwh += kwh;
  j->co2e_g += g;
  char id[24];
  if (gw_store_energy_add(k->store, j, kwh, g, sl_time_real_us()) < 0)
    sl_warn(T, "cannot record the energy of job %s's attempt %d", gw_job_id_str(j->id, id, sizeof id), j->attempt);
}
