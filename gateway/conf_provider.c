/* [provider.NAME] sections (conf_int.h): their options are declared by the
 * provider class registered as NAME (provider.h); the values are kept as
 * checked text, in file order of the sections, and the class reads them
 * with gw_config_provider_option() when it opens. With no section the
 * implicit default provider is enabled. */
#include "conf.h"
#include "conf_int.h"

#include "provider.h"
#include "sl_err.h"
#include "sl_strv.h"

#include <stdio.h>
#include <string.h>

/* The implicit provider: enabled when the configuration names none. */
#define DEFAULT_PROVIDER "local"

static struct gw_provider_cfg *provider_entry(const struct gw_config *c, const char *name) {
  for (size_t i = 0; i < c->n_providers; i++)
    if (!strcmp(c->providers[i].name, name))
      return (struct gw_provider_cfg *)&c->providers[i];
  return NULL;
}

static const struct gw_provider_option *class_option(const struct gw_provider_class *cls,
                                                     const char *key) {
  for (const struct gw_provider_option *o = cls->options; o && o->name; o++)
    if (!strcmp(o->name, key))
      return o;
  return NULL;
}

/* Enables provider name (a registered class) as named by the file: an
 * implicit entry of that name becomes explicit, every other implicit entry
 * is dropped. Fails, changing nothing, when GW_MAX_PROVIDERS_CFG are
 * enabled already. */
struct gw_provider_cfg *gw_conf_enable_provider(struct gw_config *c, const char *name, char *err,
                                               size_t size) {
  size_t explicit_n = 0;
  for (size_t i = 0; i < c->n_providers; i++)
    explicit_n += !c->providers[i].implicit;
  struct gw_provider_cfg *p = provider_entry(c, name);
  if (p && !p->implicit)
    return p;
  if (explicit_n == GW_MAX_PROVIDERS_CFG)
    return sl_err_say(err, size, 0, "more than %d provider sections", GW_MAX_PROVIDERS_CFG), NULL;
  size_t kept = 0;
  for (size_t i = 0; i < c->n_providers; i++)
    if (!c->providers[i].implicit || !strcmp(c->providers[i].name, name))
      c->providers[kept++] = c->providers[i];
  c->n_providers = kept;
  p = provider_entry(c, name);
  if (!p) {
    p = &c->providers[c->n_providers++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
  }
  p->implicit = false;
  return p;
}

/* Resets the providers to the implicit default unless the file named one. */
void gw_conf_implicit_default(struct gw_config *c) {
  for (size_t i = 0; i < c->n_providers; i++)
    if (!c->providers[i].implicit)
      return;
  c->n_providers = 1;
  memset(&c->providers[0], 0, sizeof c->providers[0]);
  snprintf(c->providers[0].name, sizeof c->providers[0].name, "%s", DEFAULT_PROVIDER);
  c->providers[0].implicit = true;
}

int gw_conf_set_provider_option(struct gw_config *c, const char *section, const char *provider,
                               const char *key, const char *value, char *err, size_t size) {
  const struct gw_provider_class *cls = gw_provider_find(provider);
  if (!cls) /* checked by the caller */
    return sl_err_say(err, size, SL_ECONFIG, "unknown section [%s]", section);
  if (!class_option(cls, key)) {
    char names[1024] = "";
    for (const struct gw_provider_option *o = cls->options; o && o->name; o++)
      sl_strv_join(names, sizeof names, o->name);
    if (!names[0])
      return sl_err_say(err, size, SL_ECONFIG, "unknown key \"%s\" in [%s] (it takes no options)",
                        key, section);
    return sl_err_say(err, size, SL_ECONFIG, "unknown key \"%s\" in [%s] (it accepts: %s)", key,
                      section, names);
  }
  if (strlen(value) >= sizeof c->providers[0].opts[0].value)
    return sl_err_say(err, size, SL_ECONFIG, "%s: value longer than %zu bytes", key,
                      sizeof c->providers[0].opts[0].value - 1);
  if (cls->check_option) {
    if (err && size)
      err[0] = 0;
    if (cls->check_option(key, value, err, size) < 0) {
      if (err && size && !err[0])
        sl_err_say(err, size, 0, "%s: \"%s\" is not a valid value", key, value);
      return SL_ECONFIG;
    }
  }
  const struct gw_provider_cfg *old = provider_entry(c, provider);
  bool has_key = false;
  for (size_t i = 0; old && i < old->n; i++)
    has_key |= !strcmp(old->opts[i].key, key);
  if (old && !has_key && old->n == GW_PROVIDER_OPTS_MAX)
    return sl_err_say(err, size, SL_ECONFIG, "more than %d options in [%s]", GW_PROVIDER_OPTS_MAX,
                      section);
  struct gw_provider_cfg *p = gw_conf_enable_provider(c, provider, err, size);
  if (!p)
    return SL_ECONFIG;
  size_t i = 0;
  while (i < p->n && strcmp(p->opts[i].key, key))
    i++;
  if (i == p->n) {
    p->n++;
    snprintf(p->opts[i].key, sizeof p->opts[i].key, "%s", key);
  }
  snprintf(p->opts[i].value, sizeof p->opts[i].value, "%s", value);
  return 0;
}

const char *gw_config_provider_option(const struct gw_config *c, const char *provider,
                                      const char *key) {
  const struct gw_provider_cfg *p = provider_entry(c, provider);
  for (size_t i = 0; p && i < p->n; i++)
    if (!strcmp(p->opts[i].key, key))
      return p->opts[i].value;
  const struct gw_provider_class *cls = gw_provider_find(provider);
  const struct gw_provider_option *o = cls ? class_option(cls, key) : NULL;
  return o ? o->def : NULL;
}

/* An enabled provider's section: every option of its class, effective value. */
void gw_conf_dump_provider(FILE *out, const struct gw_config *c, const struct gw_provider_cfg *p) {
  const struct gw_provider_class *cls = gw_provider_find(p->name);
  if (!cls) {
    fprintf(out, "; [provider.%s] is enabled%s but not built into this gateway\n\n", p->name,
            p->implicit ? " by default" : "");
    return;
  }
  fprintf(out, "[provider.%s]\n", p->name);
  for (const struct gw_provider_option *o = cls->options; o && o->name; o++) {
    const char *v = gw_config_provider_option(c, p->name, o->name);
    fprintf(out, "; %s\n%s = %s\n", o->help ? o->help : "", o->name, v ? v : "");
  }
  fputc('\n', out);
}
