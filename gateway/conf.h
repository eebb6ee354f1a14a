/* The gateway's configuration (DESIGN.md §6).
 *
 * Every option is declared once in conf.c's table (section, name, type,
 * default, bound, help), except the options of [provider.NAME] sections:
 * those belong to the provider class registered as NAME (provider.h), which
 * declares them, checks their values and reads them when it opens. Values
 * are layered: defaults, then the INI file, then the environment, then the
 * command line; main() owns the struct and hands it on as const.
 *
 * Provider classes must be registered before a file is loaded: a section
 * that names no registered class is an error. */
#ifndef GW_CONF_H
#define GW_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define GW_MAX_USERS 256
#define GW_MAX_GROUPS 64
#define GW_NAME_MAX 64
/* instance_types = TYPE,TYPE: at most GW_TYPES_MAX names */
#define GW_TYPES_MAX 16
#define GW_TYPES_LIST_MAX 1040
#define GW_MAX_PROVIDERS_CFG 8
#define GW_PROVIDER_OPTS_MAX 32
#define GW_MAX_WEBHOOKS 8

struct gw_user_cfg {
  char name[GW_NAME_MAX];
  char token_sha256[65];
  char group[GW_NAME_MAX];
  bool admin;                   /* sees and manages every user's jobs, instances and costs */
  char instance_types[GW_TYPES_LIST_MAX]; /* "": the group's */
  int instance_types_line;      /* its line in the file (messages); 0: not from a file */
  double monthly_usd;           /* the user's own monthly budget; 0: none */
  char alert_at[128];           /* "": the [budget] alert_at */
  char hard_cap[8];             /* "yes"/"no"; "": the [budget] hard_cap */
};

struct gw_group_cfg {
  char name[GW_NAME_MAX];
  int64_t notebook_timeout_us;  /* -1: not set (the [idle] value applies) */
  int64_t worker_timeout_us;    /* -1: not set */
  char instance_types[GW_TYPES_LIST_MAX]; /* the types its users may run on; "": any */
  int instance_types_line;      /* its line in the file (messages); 0: not from a file */
  double monthly_usd;           /* the group's monthly budget; 0: none */
  char alert_at[128];           /* "": the [budget] alert_at */
  char hard_cap[8];             /* "yes"/"no"; "": the [budget] hard_cap */
};

/* What a webhook posts ([webhook.NAME] events): bit 1 << e of event_mask. */
enum gw_hook_event {
  GW_HOOK_JOB_SUCCEEDED,
  GW_HOOK_JOB_FAILED,
  GW_HOOK_JOB_PREEMPTED,
  GW_HOOK_JOB_CANCELLED,
  GW_HOOK_BUDGET_ALERT,
  GW_HOOK_BUDGET_CAP,
  GW_HOOK_IDLE_SHUTDOWN,
  GW_HOOK_N_EVENTS
};

/* A [webhook.NAME] section. A loaded file has url, events and a secret in
 * every one (secret_file's content is read into secret at load). */
struct gw_webhook_cfg {
  char name[GW_NAME_MAX];
  char url[1024];
  char events[512];             /* as written: "job.succeeded,job.failed" */
  unsigned event_mask;          /* from events */
  char secret[1024];            /* the HMAC key; never logged or dumped */
  char secret_file[1024];
  int64_t timeout_us;           /* one try's limit */
  int64_t retries;              /* tries after the first */
};

/* An enabled provider: a [provider.NAME] section and the values it sets
 * (text, checked by the class; unset options take the class's default). */
struct gw_provider_cfg {
  char name[32];                /* "local": the section [provider.local] */
  bool implicit;                /* enabled by default, not named by the file */
  size_t n;
  struct {
    char key[64];
    char value[1024];
  } opts[GW_PROVIDER_OPTS_MAX];
};

struct gw_config {
  /* [gateway] */
  char listen[512];
  char workers[512];
  char http[256];               /* HOST:PORT of the HTTP API; "": none */
  bool metrics_auth;            /* /metrics needs an admin's bearer token */
  char state_dir[1024];
  int64_t heartbeat_ms;
  int64_t heartbeat_timeout_us;
  int64_t register_timeout_us;
  int64_t max_instances;
  int64_t max_clients_per_user;
  int64_t process_retries;
  /* [idle] */
  int64_t notebook_timeout_us;
  int64_t worker_timeout_us;
  int64_t warn_before_us;
  int64_t gateway_timeout_us;   /* the embedded gateway's own; 0: never */
  /* [budget] */
  double monthly_usd;
  char alert_at[128];           /* percentages, "50,80,100"; "": no alerts */
  bool hard_cap;
  /* [store] */
  char store_url[512];          /* "": each provider's own store */
  int64_t store_keep;           /* checkpoints kept per job */
  char store_region[64];        /* "": [provider.aws] region, AWS_REGION, the profile's */
  char upload_data[8];          /* "auto", "yes", "no": kernels upload text("PATH") files (uploads.h) */
  int64_t store_part_mib;       /* the part size of multipart uploads to an S3 store, the workers' too */
  /* [hub] (hub.h) */
  char hub_url[512];            /* "": JUPYTERHUB_API_URL */
  int64_t hub_cache_us;         /* how long a token's answer is trusted; 0: never kept */
  int64_t hub_timeout_us;       /* a check's limit */
  /* [worker] (passed into each worker's config file) */
  int64_t worker_metrics_per_s;
  bool worker_move_on_rebalance; /* a rebalance recommendation moves the job (else: a checkpoint) */
  int64_t worker_data_cache_mb;  /* uploaded data files a worker keeps between jobs (0: while its disk has room) */
  /* [provider.NAME]: the enabled providers in file order. With no such
   * section, "local" alone, implicit. */
  struct gw_provider_cfg providers[GW_MAX_PROVIDERS_CFG];
  size_t n_providers;
  /* [user.NAME], [group.NAME] */
  struct gw_user_cfg users[GW_MAX_USERS];
  size_t n_users;
  struct gw_group_cfg groups[GW_MAX_GROUPS];
  size_t n_groups;
  /* [webhook.NAME] (webhook.h) */
  struct gw_webhook_cfg webhooks[GW_MAX_WEBHOOKS];
  size_t n_webhooks;
  /* not options: how the gateway was started */
  char file[1024];              /* the file loaded, for messages that name its lines; "": none */
  bool embedded;
  bool hub;                     /* the file has a [hub] section: hello takes hub tokens */
  /* The group of a user the file gives none, or NULL: on a hub, the one
   * their hub groups select (the gateway sets it to gw_hub_user_group while
   * it serves). */
  const char *(*runtime_group)(const void *ctx, const char *user);
  const void *runtime_group_ctx;
};

/* Fills c with every option's default; the local provider is enabled
 * implicitly. */
void gw_config_defaults(struct gw_config *c);
/* The defaults of the embedded gateway under home ($SPOTLAB_HOME), over c
 * (the local provider enabled implicitly unless a provider is named). */
void gw_config_embedded(struct gw_config *c, const char *home);
/* Reads an INI file over c. On error returns SL_ECONFIG (or -errno when the
 * file cannot be opened) and writes "FILE:LINE: message" into err. */
int gw_config_load_file(struct gw_config *c, const char *path, char *err, size_t err_size);
/* Sets one option from text ("gateway", "listen", "tcp://..."). SL_ECONFIG
 * with a message in err for an unknown option, a bad value, or an option
 * this gateway refuses because it would configure nothing. A provider
 * section ("provider.local") is enabled by its first option, which drops the
 * implicit local provider unless it is the one named. */
int gw_config_set(struct gw_config *c, const char *section, const char *name,
                  const char *value, char *err, size_t err_size);
/* Writes the effective values as an INI file with help comments: every
 * enabled provider section with every option of its class. */
int gw_config_dump(const struct gw_config *c, FILE *out);
/* The value of key in [provider.NAME]: the file's (or gw_config_set's),
 * else the class's default, else NULL. Borrowed from c or the class. */
const char *gw_config_provider_option(const struct gw_config *c, const char *provider,
                                      const char *key);
/* For provider classes' check_option and open: value as a number (an
 * integer when integer) in [min, max], with the messages the table's own
 * options give ("slots: 1000 is out of range [0, 64]"). 0 and *ret, or
 * SL_ECONFIG with a message in err. */
int gw_config_parse_number(const char *name, const char *value, bool integer, double min,
                           double max, double *ret, char *err, size_t err_size);
/* The user entry for name, or NULL. */
const struct gw_user_cfg *gw_config_user(const struct gw_config *c, const char *name);
/* Whether user sees and manages every user's jobs, instances and costs:
 * [user.NAME] admin = yes, or the one user of a per-user (embedded) gateway. */
bool gw_config_user_admin(const struct gw_config *c, const char *user);
/* The name of user's group: the file's [user.NAME] group, else
 * runtime_group's answer (hub groups), else NULL. */
const char *gw_config_user_group(const struct gw_config *c, const char *user);
/* The instance types user may run on (the comma list of their
 * [user.NAME] instance_types, else their group's), or NULL: any. */
const char *gw_config_user_instance_types(const struct gw_config *c, const char *user);
/* Every [user.NAME] and [group.NAME] instance_types against types, the n names the open
 * providers offer (borrowed; duplicates allowed): 0, or SL_ECONFIG with "FILE:LINE: [group.g]
 * instance_types: p9.huge is not an instance type the providers offer (they offer: ...)" in err
 * for the first name none offers. */
int gw_config_check_offered(const struct gw_config *c, const char *const *types, size_t n,
                            char *err, size_t err_size);
#define GW_ALERT_MAX 16
/* The percentages of an alert_at list ("50,80,100": each above 0 and at
 * most 1000, at most GW_ALERT_MAX) into ret, ascending, duplicates dropped:
 * their number, or SL_ECONFIG with a message in err. "" is an empty list. */
int gw_config_parse_alert_at(const char *s, double ret[GW_ALERT_MAX], char *err, size_t err_size);
/* "job.succeeded" for GW_HOOK_JOB_SUCCEEDED, ...; NULL past the last. */
const char *gw_config_hook_event_name(enum gw_hook_event e);
/* Whether s can name a user, group, webhook or provider section: 1 to
 * GW_NAME_MAX - 1 of A-Z, a-z, 0-9, '_', '.' and '-'. */
bool gw_config_valid_name(const char *s);
/* Whether v is an http:// or https:// URL with a host and no blank or
 * control byte (it goes into a request line), as the file's URLs must be:
 * 0, or SL_ECONFIG with why. For one from elsewhere (JUPYTERHUB_API_URL). */
int gw_conf_check_hook_url(const char *v, char *why, size_t size);
/* Effective idle timeouts for a user (group values override [idle]). */
int64_t gw_config_notebook_timeout_us(const struct gw_config *c, const char *user);
int64_t gw_config_worker_timeout_us(const struct gw_config *c, const char *user);

#endif
