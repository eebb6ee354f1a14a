/* Gateway configuration: one table declares every option.
 *
 * Each row names the section, the key, the type, where the value lives, the
 * default (as the text a file would hold), the bounds and a line of help.
 * Parsing (conf_load.c reads the file), defaults and --dump-config all walk
 * the same table with the option engine (sl_opt.h), so an option cannot
 * exist in one place and be missing in another. Sections "user.*" and
 * "group.*" are templates: their rows apply to each named entry. A value is
 * checked completely before it is stored, so a failed set leaves the old one.
 *
 * [provider.NAME] sections are the exception: their options are declared by
 * the provider class registered as NAME (provider.h), and conf_provider.c
 * keeps their values.
 *
 * Options that would configure nothing in this gateway are refused with a
 * message that says so (the refused table), never parsed and ignored. The
 * checks of the table's value types live in conf_check.c. */
#include "conf.h"
#include "conf_int.h"

#include "provider.h"
#include "sl_err.h"
#include "sl_opt.h"
#include "sl_strv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum opt_owner { O_MAIN, O_USER, O_GROUP, O_HOOK };

/* A row: the section it belongs to, the struct it writes into, and the
 * option itself (sl_opt.h: name, type, where, default, bounds, help). */
struct opt {
  const char *section;
  enum opt_owner owner;
  struct sl_opt o;
};

#define M(f) O_MAIN, offsetof(struct gw_config, f), sizeof(((struct gw_config *)0)->f)
#define U(f) O_USER, offsetof(struct gw_user_cfg, f), sizeof(((struct gw_user_cfg *)0)->f)
#define G(f) O_GROUP, offsetof(struct gw_group_cfg, f), sizeof(((struct gw_group_cfg *)0)->f)
#define W(f) O_HOOK, offsetof(struct gw_webhook_cfg, f), sizeof(((struct gw_webhook_cfg *)0)->f)
/* type: an sl_opt type and the check of its values; where: M, U or G */
#define ROW(section, name, type, where, def, min, max, help) \
  ROW_(section, name, type, where, def, min, max, help)
#define ROW_(section, name, otype, check, owner, offset, size, def, min, max, help) \
  {section, owner, {name, otype, offset, size, def, min, max, NULL, NULL, NULL, help, NULL, 0, 0, check}}
#define T_STR SL_OPT_STR, NULL
#define T_ADDR SL_OPT_STR, gw_conf_check_addr
#define T_DIR SL_OPT_STR, gw_conf_check_dir
#define T_NAME SL_OPT_STR, gw_conf_check_name
#define T_HEX64 SL_OPT_STR, gw_conf_check_hex64
#define T_STORE SL_OPT_STR, gw_conf_check_store
#define T_HUBURL SL_OPT_STR, gw_conf_check_hub_url
#define T_REGION SL_OPT_STR, gw_conf_check_region
#define T_HTTP SL_OPT_STR, gw_conf_check_http
#define T_TYPES SL_OPT_STR, gw_conf_check_types
#define T_ALERT SL_OPT_STR, gw_conf_check_alert_at
#define T_YESNO SL_OPT_STR, gw_conf_check_yes_no
#define T_AUTO SL_OPT_STR, gw_conf_check_auto_yes_no
#define T_HOOKURL SL_OPT_STR, gw_conf_check_hook_url
#define T_EVENTS SL_OPT_STR, gw_conf_check_events
#define T_DUR SL_OPT_DUR, NULL
#define T_INT SL_OPT_INT, NULL
#define T_NUM SL_OPT_NUM, NULL
#define T_BOOL SL_OPT_BOOL, NULL

static const struct opt opts[] = {
  ROW("gateway", "listen", T_ADDR, M(listen), "tcp://127.0.0.1:7400", 0, 0,
   "address of the kernel/CLI socket (tcp://HOST:PORT or ipc://PATH)"),
  ROW("gateway", "workers", T_ADDR, M(workers), "tcp://0.0.0.0:7401", 0, 0,
   "address of the worker socket (CURVE encrypted)"),
  ROW("gateway", "state_dir", T_DIR, M(state_dir), "/var/lib/spotlab", 0, 0,
   "folder for the database, keys, checkpoints and instance folders"),
  ROW("gateway", "heartbeat_ms", T_INT, M(heartbeat_ms), "1000", 50, 600000,
   "interval at which workers send heartbeats, in milliseconds"),
  ROW("gateway", "heartbeat_timeout", T_DUR, M(heartbeat_timeout_us), "10s", 0.1, 86400,
   "a worker silent this long is lost; its job resumes elsewhere"),
  ROW("gateway", "register_timeout", T_DUR, M(register_timeout_us), "60s", 0.1, 86400,
   "after a restart, how long a running job waits for its worker to register"),
  ROW("gateway", "max_instances", T_INT, M(max_instances), "16", 1, 10000,
   "instances the gateway runs at once (providers may allow fewer)"),
  ROW("gateway", "max_clients_per_user", T_INT, M(max_clients_per_user), "256", 1, 4096,
   "kernel and CLI connections one user holds at once; a hello beyond it forgets that user's least recently active one"),
  ROW("gateway", "process_retries", T_INT, M(process_retries), "3", 0, 1000,
   "resumes in a row of a job whose process was killed by a signal (a checkpoint resets it)"),
  ROW("gateway", "http", T_HTTP, M(http), "", 0, 0,
   "HOST:PORT of the HTTP API and /metrics, plain HTTP (empty: none; port 0: any free port)"),
  ROW("gateway", "metrics_auth", T_BOOL, M(metrics_auth), "no", 0, 0,
   "yes: /metrics needs an admin's token (Authorization: Bearer); no: anyone who reaches it"),
  ROW("idle", "notebook_timeout", T_DUR, M(notebook_timeout_us), "30m", 1, 30 * 86400,
   "stop a notebook's workers after this long with no cell run and no job"),
  ROW("idle", "worker_timeout", T_DUR, M(worker_timeout_us), "10m", 0.1, 30 * 86400,
   "terminate a worker that has had no job for this long"),
  ROW("idle", "warn_before", T_DUR, M(warn_before_us), "5m", 0, 86400,
   "warn the notebook this long before an idle shutdown"),
  ROW("idle", "gateway_timeout", T_DUR, M(gateway_timeout_us), "30m", 0, 30 * 86400,
   "a per-user (embedded) gateway with no client and no job this long stops itself and its workers (0: never)"),
  ROW("budget", "monthly_usd", T_NUM, M(monthly_usd), "2000", 0, 1e9,
   "spending budget per calendar month in US dollars (0: no budget)"),
  ROW("budget", "alert_at", T_ALERT, M(alert_at), "", 0, 0,
   "percentages of a monthly budget at which its users' notebooks get a notice, once a month each (50,80,100)"),
  ROW("budget", "hard_cap", T_BOOL, M(hard_cap), "yes", 0, 0,
   "at a spent budget, refuse new jobs and checkpoint and pause running ones"),
  ROW("store", "url", T_STORE, M(store_url), "", 0, 0,
   "checkpoint store: file:///PATH or s3://BUCKET/PREFIX (empty: each provider's own)"),
  ROW("store", "keep", T_INT, M(store_keep), "3", 1, 1000,
   "checkpoints kept per job; older ones are deleted once a newer one is stored"),
  ROW("store", "region", T_REGION, M(store_region), "", 0, 0,
   "the S3 bucket's region (empty: AWS_REGION or the AWS profile's)"),
  ROW("store", "part_mib", T_INT, M(store_part_mib), "64", 5, 5120,
   "MiB: an object up to this size goes to an S3 store in one PUT, a larger one as a multipart upload of parts this size (the gateway's and the workers')"),
  ROW("store", "upload_data", T_AUTO, M(upload_data), "auto", 0, 0,
   "notebooks upload their data files to the store for the workers (auto: when a provider's instances need the worker bundle)"),
  ROW("hub", "url", T_HUBURL, M(hub_url), "", 0, 0,
   "JupyterHub's API, http://HOST:8081/hub/api (empty: JUPYTERHUB_API_URL, which a hub-managed service has)"),
  ROW("hub", "cache", T_DUR, M(hub_cache_us), "60s", 0, 3600,
   "how long the hub's answer for a token is trusted for new connections (0: ask at every hello)"),
  ROW("hub", "timeout", T_DUR, M(hub_timeout_us), "1500ms", 0.1, 60,
   "a token check's limit; the kernel waits 2s for hello's answer"),
  ROW("worker", "metrics_per_s", T_INT, M(worker_metrics_per_s), "20", 1, 100000,
   "step metrics a worker sends per job per second (the newest step wins)"),
  ROW("worker", "move_on_rebalance", T_BOOL, M(worker_move_on_rebalance), "no", 0, 0,
   "at a spot instance's rebalance recommendation, move its jobs elsewhere (no: checkpoint them at once and go on until an interruption notice)"),
  ROW("worker", "data_cache_mb", T_INT, M(worker_data_cache_mb), "0", 0, 1 << 30,
   "MiB of uploaded data files a worker keeps between jobs, the least recently used going first (0: as many as leave its disk room)"),
  ROW("user.*", "token_sha256", T_HEX64, U(token_sha256), NULL, 0, 0,
   "SHA-256 (lowercase hex) of the user's token"),
  ROW("user.*", "group", T_NAME, U(group), NULL, 0, 0, "the user's group"),
  ROW("user.*", "admin", T_BOOL, U(admin), NULL, 0, 0,
   "yes: sees and manages every user's jobs, instances and costs"),
  ROW("user.*", "instance_types", T_TYPES, U(instance_types), NULL, 0, 0,
   "the instance types the user may run on (empty: the group's)"),
  ROW("user.*", "monthly_usd", T_NUM, U(monthly_usd), NULL, 0, 1e9,
   "the user's own monthly budget in US dollars (0: none)"),
  ROW("user.*", "alert_at", T_ALERT, U(alert_at), NULL, 0, 0,
   "alert percentages of the user's budget (empty: [budget] alert_at)"),
  ROW("user.*", "hard_cap", T_YESNO, U(hard_cap), NULL, 0, 0,
   "whether the user's budget is a hard cap (empty: [budget] hard_cap)"),
  ROW("group.*", "notebook_timeout", T_DUR, G(notebook_timeout_us), NULL, 1, 30 * 86400,
   "the group's [idle] notebook_timeout"),
  ROW("group.*", "worker_timeout", T_DUR, G(worker_timeout_us), NULL, 0.1, 30 * 86400,
   "the group's [idle] worker_timeout"),
  ROW("group.*", "instance_types", T_TYPES, G(instance_types), NULL, 0, 0,
   "the instance types the group's users may run on (empty: any)"),
  ROW("group.*", "monthly_usd", T_NUM, G(monthly_usd), NULL, 0, 1e9,
   "the group's monthly budget in US dollars (0: none)"),
  ROW("group.*", "alert_at", T_ALERT, G(alert_at), NULL, 0, 0,
   "alert percentages of the group's budget (empty: [budget] alert_at)"),
  ROW("group.*", "hard_cap", T_YESNO, G(hard_cap), NULL, 0, 0,
   "whether the group's budget is a hard cap (empty: [budget] hard_cap)"),
  ROW("webhook.*", "url", T_HOOKURL, W(url), NULL, 0, 0,
   "where events are posted as JSON: an http:// or https:// URL"),
  ROW("webhook.*", "events", T_EVENTS, W(events), NULL, 0, 0,
   "events posted, comma-separated: job.succeeded, job.failed, job.preempted, job.cancelled,"
   " budget.alert, budget.cap, idle.shutdown"),
  ROW("webhook.*", "secret", T_STR, W(secret), NULL, 0, 0,
   "the HMAC-SHA256 key of the X-Spotlab-Signature header (or secret_file)"),
  ROW("webhook.*", "secret_file", T_STR, W(secret_file), NULL, 0, 0,
   "a file whose content (less a final newline) is the key; relative to the config file's folder"),
  ROW("webhook.*", "timeout", T_DUR, W(timeout_us), "10s", 0.1, 300,
   "one delivery try's limit"),
  ROW("webhook.*", "retries", T_INT, W(retries), "6", 0, 20,
   "tries after the first when the receiver cannot be reached, times out, or answers 429 or 5xx"),
};
#define N_OPTS (sizeof opts / sizeof opts[0])

/* Splits "user.alice" into the template ("user.*") and the entry name. */
const char *gw_conf_section_template(const char *section, const char **ret_entry) {
  static const char *templates[] = {"user.*", "group.*", "provider.*", "webhook.*"};
  *ret_entry = NULL;
  for (size_t i = 0; i < sizeof templates / sizeof *templates; i++) {
    size_t n = strlen(templates[i]) - 1; /* "user." */
    if (!strncmp(section, templates[i], n)) {
      *ret_entry = section + n;
      return templates[i];
    }
  }
  return section;
}

/* Names the registered provider classes into buf: "local, fake" or "none". */
static void class_names(char *buf, size_t size) {
  size_t used = 0;
  buf[0] = 0;
  const struct gw_provider_class *cls;
  for (size_t i = 0; (cls = gw_provider_class_at(i)) && used < size; i++) {
    int n = snprintf(buf + used, size - used, "%s%s", i ? ", " : "", cls->name);
    used += n > 0 ? (size_t)n : 0;
  }
  if (!buf[0])
    snprintf(buf, size, "none");
}

/* 0 when section can hold options, or SL_ECONFIG with the reason: unknown,
 * or a provider this gateway does not have. */
int gw_conf_check_section(const char *section, char *err, size_t size) {
  const char *entry;
  const char *tmpl = gw_conf_section_template(section, &entry);
  if (entry && !gw_config_valid_name(entry))
    return sl_err_say(err, size, SL_ECONFIG,
                      "unknown section [%s]: \"%s\" is not a valid name (1 to %d letters,"
                      " digits, '_', '.' and '-')", section, entry, GW_NAME_MAX - 1);
  if (!strcmp(tmpl, "provider.*")) {
    if (gw_provider_find(entry))
      return 0;
    char names[GW_PROVIDERS_MAX * (GW_PROVIDER_NAME_MAX + 2)];
    class_names(names, sizeof names);
    return sl_err_say(err, size, SL_ECONFIG, "unknown provider \"%s\" (this gateway has: %s)",
                      entry, names);
  }
  for (size_t i = 0; i < N_OPTS; i++)
    if (!strcmp(opts[i].section, tmpl))
      return 0;
  /* the sections there are, each once, in the order of the table */
  char names[1024] = "", one[64];
  for (size_t i = 0; i < N_OPTS; i++) {
    bool seen = false;
    for (size_t k = 0; k < i && !seen; k++)
      seen = !strcmp(opts[k].section, opts[i].section);
    if (seen)
      continue;
    const char *star = strchr(opts[i].section, '*');
    snprintf(one, sizeof one, "[%.*s%s]", star ? (int)(star - opts[i].section) : (int)strlen(opts[i].section),
             opts[i].section, star ? "NAME" : "");
    sl_strv_join(names, sizeof names, one);
  }
  return sl_err_say(err, size, SL_ECONFIG, "unknown section [%s] (sections: %s, [provider.NAME])", section,
                    names);
}

int gw_config_parse_number(const char *name, const char *value, bool integer, double min,
                           double max, double *ret, char *err, size_t err_size) {
  return sl_opt_parse_number(name, value, integer, min, max, ret, err, err_size);
}

/* The struct an option of section writes into, creating user/group entries. */
static void *target(struct gw_config *c, enum opt_owner owner, const char *entry, char *err,
                    size_t size) {
  if (owner == O_MAIN)
    return c;
  if (owner == O_USER) {
    for (size_t i = 0; i < c->n_users; i++)
      if (!strcmp(c->users[i].name, entry))
        return &c->users[i];
    if (c->n_users == GW_MAX_USERS)
      return sl_err_say(err, size, 0, "more than %d users", GW_MAX_USERS), NULL;
    struct gw_user_cfg *u = &c->users[c->n_users++];
    memset(u, 0, sizeof *u);
    snprintf(u->name, sizeof u->name, "%s", entry);
    return u;
  }
  if (owner == O_HOOK) {
    for (size_t i = 0; i < c->n_webhooks; i++)
      if (!strcmp(c->webhooks[i].name, entry))
        return &c->webhooks[i];
    if (c->n_webhooks == GW_MAX_WEBHOOKS)
      return sl_err_say(err, size, 0, "more than %d webhooks", GW_MAX_WEBHOOKS), NULL;
    struct gw_webhook_cfg *w = &c->webhooks[c->n_webhooks++];
    memset(w, 0, sizeof *w);
    snprintf(w->name, sizeof w->name, "%s", entry);
    for (size_t i = 0; i < N_OPTS; i++)
      if (opts[i].owner == O_HOOK)
        sl_opt_defaults(&opts[i].o, 1, w);
    return w;
  }
  for (size_t i = 0; i < c->n_groups; i++)
    if (!strcmp(c->groups[i].name, entry))
      return &c->groups[i];
  if (c->n_groups == GW_MAX_GROUPS)
    return sl_err_say(err, size, 0, "more than %d groups", GW_MAX_GROUPS), NULL;
  struct gw_group_cfg *g = &c->groups[c->n_groups++];
  memset(g, 0, sizeof *g);
  snprintf(g->name, sizeof g->name, "%s", entry);
  g->notebook_timeout_us = g->worker_timeout_us = -1;
  return g;
}

bool gw_conf_add_entry(struct gw_config *c, const char *tmpl, const char *entry, char *err, size_t size) {
  enum opt_owner owner = !strcmp(tmpl, "group.*") ? O_GROUP : !strcmp(tmpl, "webhook.*") ? O_HOOK : O_USER;
  return target(c, owner, entry, err, size) != NULL;
}

/* ---- setting, defaults ------------------------------------------------- */

int gw_config_set(struct gw_config *c, const char *section, const char *name, const char *value,
                  char *err, size_t err_size) {
  if (gw_conf_check_section(section, err, err_size) < 0)
    return SL_ECONFIG;
  const char *entry;
  const char *tmpl = gw_conf_section_template(section, &entry);
  if (!strcmp(tmpl, "provider.*"))
    return gw_conf_set_provider_option(c, section, entry, name, value, err, err_size);
  for (size_t i = 0; i < N_OPTS; i++) {
    const struct opt *o = &opts[i];
    if (strcmp(o->section, tmpl) || strcmp(o->o.name, name))
      continue;
    void *base = target(c, o->owner, entry, err, err_size);
    if (!base)
      return SL_ECONFIG;
    int r = sl_opt_set(&o->o, base, NULL, value, err, err_size);
    if (r >= 0 && !strcmp(tmpl, "hub"))
      c->hub = true;
    if (r >= 0 && o->owner == O_HOOK && !strcmp(name, "events"))
      gw_conf_parse_events(value, &((struct gw_webhook_cfg *)base)->event_mask, NULL, 0);
    return r;
  }
  char names[2048] = "";
  for (size_t i = 0; i < N_OPTS; i++)
    if (!strcmp(opts[i].section, tmpl))
      sl_strv_join(names, sizeof names, opts[i].o.name);
  return sl_err_say(err, err_size, SL_ECONFIG, "unknown key \"%s\" in [%s] (it accepts: %s)", name, section,
                    names);
}

void gw_config_defaults(struct gw_config *c) {
  memset(c, 0, sizeof *c);
  for (size_t i = 0; i < N_OPTS; i++)
    if (opts[i].owner == O_MAIN)
      sl_opt_defaults(&opts[i].o, 1, c); /* valid by construction (checked by the unit test) */
  gw_conf_implicit_default(c);
}

void gw_config_embedded(struct gw_config *c, const char *home) {
  snprintf(c->state_dir, sizeof c->state_dir, "%s", home);
  snprintf(c->listen, sizeof c->listen, "ipc://%s/gateway.sock", home);
  snprintf(c->workers, sizeof c->workers, "ipc://%s/workers.sock", home);
  gw_conf_implicit_default(c);
  c->embedded = true;
}

static void dump_section(FILE *out, const char *tmpl, const char *section, const void *base) {
  fprintf(out, "[%s]\n", section);
  for (size_t i = 0; i < N_OPTS; i++) {
    const struct opt *o = &opts[i];
    if (strcmp(o->section, tmpl))
      continue;
    const void *src = (const char *)base + o->o.offset;
    if (o->o.type == SL_OPT_DUR && *(const int64_t *)src < 0)
      continue; /* group value not set */
    if (o->o.type == SL_OPT_STR && !o->o.def && !*(const char *)src)
      continue; /* user or group value not set */
    if (o->owner == O_HOOK && !strcmp(o->o.name, "secret")) {
      fprintf(out, "; %s\n; secret = (set, not shown)\n", o->o.help);
      continue;
    }
    char val[1100];
    sl_opt_format(&o->o, base, val, sizeof val);
    fprintf(out, "; %s\n%s = %s\n", o->o.help, o->o.name, val);
  }
  fputc('\n', out);
}

int gw_config_dump(const struct gw_config *c, FILE *out) {
  static const char *main_sections[] = {"gateway", "idle", "budget", "store", "worker"};
  fprintf(out, "; spotlab-gateway effective configuration\n\n");
  for (size_t i = 0; i < sizeof main_sections / sizeof *main_sections; i++)
    dump_section(out, main_sections[i], main_sections[i], c);
  if (c->hub)
    dump_section(out, "hub", "hub", c);
  for (size_t i = 0; i < c->n_providers; i++)
    gw_conf_dump_provider(out, c, &c->providers[i]);
  char sec[96];
  for (size_t i = 0; i < c->n_users; i++) {
    snprintf(sec, sizeof sec, "user.%s", c->users[i].name);
    dump_section(out, "user.*", sec, &c->users[i]);
  }
  for (size_t i = 0; i < c->n_groups; i++) {
    snprintf(sec, sizeof sec, "group.%s", c->groups[i].name);
    dump_section(out, "group.*", sec, &c->groups[i]);
  }
  for (size_t i = 0; i < c->n_webhooks; i++) {
    snprintf(sec, sizeof sec, "webhook.%s", c->webhooks[i].name);
    dump_section(out, "webhook.*", sec, &c->webhooks[i]);
  }
  return ferror(out) ? -EIO : 0;
}

const struct gw_user_cfg *gw_config_user(const struct gw_config *c, const char *name) {
  for (size_t i = 0; i < c->n_users; i++)
    if (!strcmp(c->users[i].name, name))
      return &c->users[i];
  return NULL;
}

bool gw_config_user_admin(const struct gw_config *c, const char *user) {
  const struct gw_user_cfg *u = gw_config_user(c, user);
  return c->embedded || (u && u->admin);
}

const char *gw_config_user_group(const struct gw_config *c, const char *user) {
  const struct gw_user_cfg *u = gw_config_user(c, user);
  if (u && u->group[0])
    return u->group;
  return c->runtime_group ? c->runtime_group(c->runtime_group_ctx, user) : NULL;
}

static const struct gw_group_cfg *user_group(const struct gw_config *c, const char *user) {
  const char *name = gw_config_user_group(c, user);
  for (size_t i = 0; name && i < c->n_groups; i++)
    if (!strcmp(c->groups[i].name, name))
      return &c->groups[i];
  return NULL;
}

const char *gw_config_user_instance_types(const struct gw_config *c, const char *user) {
  const struct gw_user_cfg *u = gw_config_user(c, user);
  if (u && u->instance_types[0])
    return u->instance_types;
  const struct gw_group_cfg *g = user_group(c, user);
  return g && g->instance_types[0] ? g->instance_types : NULL;
}

int64_t gw_config_notebook_timeout_us(const struct gw_config *c, const char *user) {
  const struct gw_group_cfg *g = user_group(c, user);
  return g && g->notebook_timeout_us >= 0 ? g->notebook_timeout_us : c->notebook_timeout_us;
}

int64_t gw_config_worker_timeout_us(const struct gw_config *c, const char *user) {
  const struct gw_group_cfg *g = user_group(c, user);
  return g && g->worker_timeout_us >= 0 ? g->worker_timeout_us : c->worker_timeout_us;
}
