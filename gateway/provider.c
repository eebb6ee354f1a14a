/* The registry of provider classes, and helpers every caller of a provider
 * shares.
 *
 * The registry is a fixed table filled before the gateway starts (by
 * spotlab-gateway's main() with the built-in classes, by a test program
 * with its own) and read afterwards; it is not locked. Classes are borrowed:
 * each lives in static storage for the life of the process. */
#include "provider.h"

#include "sl_err.h"

#include <errno.h>
#include <string.h>

static const struct gw_provider_class *registry[GW_PROVIDERS_MAX];
static size_t n_registered;

int gw_provider_register(const struct gw_provider_class *cls) {
  if (!cls || !cls->name || !*cls->name || strlen(cls->name) >= GW_PROVIDER_NAME_MAX ||
      !cls->open)
    return -EINVAL;
  if (gw_provider_find(cls->name))
    return -EEXIST;
  if (n_registered == GW_PROVIDERS_MAX)
    return SL_ELIMIT;
  registry[n_registered++] = cls;
  return 0;
}

const struct gw_provider_class *gw_provider_find(const char *name) {
  if (!name)
    return NULL;
  for (size_t i = 0; i < n_registered; i++)
    if (!strcmp(registry[i]->name, name))
      return registry[i];
  return NULL;
}

const struct gw_provider_class *gw_provider_class_at(size_t i) {
  return i < n_registered ? registry[i] : NULL;
}

void gw_provider_registry_clear(void) {
  memset(registry, 0, sizeof registry);
  n_registered = 0;
}

int gw_provider_type(struct gw_provider *p, const char *name, struct gw_instance_type *ret) {
  const struct gw_instance_type *types = NULL;
  size_t n = 0;
  if (!p || !name || !p->ops->market || p->ops->market(p, &types, &n) < 0)
    return SL_ENAME;
  for (size_t i = 0; i < n; i++) {
    if (!strcmp(types[i].name, name)) {
      *ret = types[i];
      return 0;
    }
  }
  return SL_ENAME;
}

double gw_provider_time_scale(struct gw_provider *p) {
  if (!p || !p->ops->time_scale)
    return 1;
  double s = p->ops->time_scale(p);
  return s > 0 ? s : 1;
}
