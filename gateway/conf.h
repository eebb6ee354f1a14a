/* The gateway's configuration (DESIGN.md §6).
 *
 * Every option is declared once in config.c's table (section, name, type,
 * default, bound, help). Values are layered: defaults, then the INI file,
 * then the environment, then the command line; main() owns the struct and
 * hands it on as const. */
#ifndef GW_CONF_H
#define GW_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define GW_MAX_USERS 256
#define GW_MAX_GROUPS 64
#define GW_NAME_MAX 64

struct gw_user_cfg {
  char name[GW_NAME_MAX];
  char token_sha256[65];
  char group[GW_NAME_MAX];
};

struct gw_group_cfg {
  char name[GW_NAME_MAX];
  int64_t notebook_timeout_us;  /* -1: not set (the [idle] value applies) */
  int64_t worker_timeout_us;    /* -1: not set */
};

struct gw_config {
  /* [gateway] */
  char listen[512];
  char workers[512];
  char http[256];
  char state_dir[1024];
  int64_t heartbeat_ms;
  int64_t heartbeat_timeout_us;
  int64_t register_timeout_us;
  int64_t max_instances;
  int64_t process_retries;
  /* [idle] */
  int64_t notebook_timeout_us;
  int64_t worker_timeout_us;
  int64_t warn_before_us;
  /* [budget] */
  double monthly_usd;
  char alert_at[128];
  bool hard_cap;
  /* [worker] (passed into each worker's config file) */
  int64_t worker_metrics_per_s;
  /* [provider.local] */
  int64_t local_slots;
  char local_market[1024];
  double local_time_scale;
  char local_catalog[1024];
  /* [provider.aws] (parsed and kept; no EC2 provider yet) */
  char aws_region[64];
  char aws_instance_types[1024];
  /* [user.NAME], [group.NAME] */
  struct gw_user_cfg users[GW_MAX_USERS];
  size_t n_users;
  struct gw_group_cfg groups[GW_MAX_GROUPS];
  size_t n_groups;
  /* not options: how the gateway was started */
  bool embedded;
};

/* Fills c with every option's default. */
void gw_config_defaults(struct gw_config *c);
/* The defaults of the embedded gateway under home ($SPOTLAB_HOME). */
void gw_config_embedded(struct gw_config *c, const char *home);
/* Reads an INI file over c. On error returns SL_ECONFIG (or -errno when the
 * file cannot be opened) and writes "FILE:LINE: message" into err. */
int gw_config_load_file(struct gw_config *c, const char *path, char *err, size_t err_size);
/* Sets one option from text ("gateway", "listen", "tcp://..."). SL_ECONFIG
 * with a message in err for an unknown option or a bad value. */
int gw_config_set(struct gw_config *c, const char *section, const char *name,
                  const char *value, char *err, size_t err_size);
/* Writes the effective values as an INI file with help comments. */
int gw_config_dump(const struct gw_config *c, FILE *out);
/* The user entry for name, or NULL. */
const struct gw_user_cfg *gw_config_user(const struct gw_config *c, const char *name);
/* Effective idle timeouts for a user (group values override [idle]). */
int64_t gw_config_notebook_timeout_us(const struct gw_config *c, const char *user);
int64_t gw_config_worker_timeout_us(const struct gw_config *c, const char *user);

#endif
