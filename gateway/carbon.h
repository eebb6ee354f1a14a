/* Energy and emissions of jobs: a shipped table (carbon.json) of watts per
 * instance type, the providers' PUE and the regions' grid intensity, the
 * pure estimate over it, and the bus sink that adds each cost accrual's
 * estimate to the job and its attempt's cost row. */
#ifndef GW_CARBON_H
#define GW_CARBON_H

#include "bus.h"
#include "fleet.h"
#include "store.h"

#include <stdbool.h>
#include <stddef.h>

struct gw_carbon;

/* What one instance of a type draws and where: per-GPU and per-vCPU idle
 * and maximum watts, the provider's PUE and the region's grid intensity. */
struct gw_carbon_rate {
  double gpus, gpu_idle_w, gpu_max_w;
  double vcpus, cpu_idle_w, cpu_max_w;
  double pue, g_per_kwh;
};

/* Parses the table at path into an owned *ret; SL_EPARSE (or the file's
 * error) with a reason in err. Every number is checked: watts >= 0 with
 * max >= idle, counts >= 0, 1 <= PUE <= 3, intensities >= 0. */
int gw_carbon_load(const char *path, struct gw_carbon **ret, char *err, size_t err_size);
struct gw_carbon *gw_carbon_free(struct gw_carbon *c);
/* The built-in table: EXE_DIR/../share/spotlab/carbon.json when installed,
 * else the source tree's gateway/carbon.json; -ENOENT when neither exists. */
int gw_carbon_default_path(char *ret, size_t size);

/* The rate of type on provider in zone (a zone or a region). SL_ENAME when
 * the table lacks the type; an unknown provider takes aws's PUE and an
 * unknown region the table's default intensity. */
int gw_carbon_rate(const struct gw_carbon *c, const char *provider, const char *type,
                   const char *zone, struct gw_carbon_rate *ret);
/* The utilisation assumed when the worker measured none (0..1). */
double gw_carbon_default_util(const struct gw_carbon *c, bool gpu);

/* Energy (kWh, at the wall: PUE included) and emissions (g CO2e) of
 * instances instances of rate over hours at the given utilisations (0..1;
 * clamped): hours x (idle + util x (max - idle)) x PUE / 1000. */
void gw_carbon_estimate(const struct gw_carbon_rate *r, double instances, double hours,
                        double cpu_util, double gpu_util, double *ret_kwh, double *ret_g);

/* The bus sink (GW_BUS_COST). The caller fills table (NULL: no estimates),
 * store and fleet (all borrowed); the sink adds each accrual's estimate to
 * the live job (energy_kwh, co2e_g; written with its row) and to the
 * attempt's cost row. */
struct gw_carbon_sink {
  const struct gw_carbon *table;
  struct gw_store *store;
  struct gw_fleet *fleet;
  bool warned;
};
void gw_carbon_sink(void *data, const struct gw_bus_event *ev);

#endif
