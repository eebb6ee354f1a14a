/* The checks of option values (conf_int.h): each takes the text of a value
 * and returns 0, or SL_ECONFIG with why it is refused. */
#include "conf.h"
#include "conf_int.h"

#include "sl_err.h"
#include "sl_ident.h"
#include "sl_strv.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const hook_events[GW_HOOK_N_EVENTS] = {
  [GW_HOOK_JOB_SUCCEEDED] = "job.succeeded", [GW_HOOK_JOB_FAILED] = "job.failed",
  [GW_HOOK_JOB_PREEMPTED] = "job.preempted", [GW_HOOK_JOB_CANCELLED] = "job.cancelled",
  [GW_HOOK_BUDGET_ALERT] = "budget.alert", [GW_HOOK_BUDGET_CAP] = "budget.cap",
  [GW_HOOK_IDLE_SHUTDOWN] = "idle.shutdown",
};

bool gw_config_valid_name(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n >= GW_NAME_MAX)
    return false;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)s[i]) && !strchr("_.-", s[i]))
      return false;
  return true;
}

/* Whether v holds a control byte (below 0x20, or DEL), which no URL or
 * header value may carry: a CR or LF would split an HTTP request. */
static bool has_control(const char *v) {
  for (const unsigned char *p = (const unsigned char *)v; *p; p++)
    if (*p < 0x20 || *p == 0x7f)
      return true;
  return false;
}

/* The comma list v has no empty item (a leading, doubled or trailing
 * comma, or only blanks between two): 0, or SL_ECONFIG saying where
 * "WHAT is missing", with an example of a list. An empty value is the
 * empty list. */
static int no_empty_item(const char *v, const char *what, const char *example, char *why,
                         size_t size) {
  if (!v[strspn(v, " \t")])
    return 0;
  for (const char *p = v;;) {
    size_t len = strcspn(p, ",");
    if (strspn(p, " \t") >= len)
      return sl_err_say(why, size, SL_ECONFIG, "%s is missing %s (%s)", what,
                        p == v ? "before the first comma" : !p[len] ? "after the last comma"
                                                                    : "between two commas",
                        example);
    if (!p[len])
      return 0;
    p += len + 1;
  }
}

/* A port as written in an address: 1 to 5 decimal digits, no sign or blank (strtol would take
 * "+80" and " 80"), within [min, 65535]. */
static bool valid_port(const char *s, long min) {
  size_t n = strspn(s, "0123456789");
  if (!n || n > 5 || s[n])
    return false;
  long port = strtol(s, NULL, 10);
  return port >= min && port <= 65535;
}

/* tcp://HOST:PORT with a port of 1 to 65535 (libzmq would bind a larger one modulo 65536),
 * ipc://PATH or inproc://NAME, each with something after the scheme. */
int gw_conf_check_addr(const char *v, char *why, size_t size) {
  if (!strncmp(v, "tcp://", 6)) {
    const char *host = v + 6, *colon = strrchr(host, ':');
    if (!colon || colon == host || !valid_port(colon + 1, 1))
      return sl_err_say(why, size, SL_ECONFIG,
                        "\"%s\" is not tcp://HOST:PORT with a port from 1 to 65535", v);
    return 0;
  }
  const char *rest = !strncmp(v, "ipc://", 6) ? v + 6 : !strncmp(v, "inproc://", 9) ? v + 9 : NULL;
  if (!rest)
    return sl_err_say(why, size, SL_ECONFIG, "\"%s\" is not a tcp://, ipc:// or inproc:// address",
                      v);
  if (!*rest)
    return sl_err_say(why, size, SL_ECONFIG, "\"%s\" names no %s", v,
                      v[0] == 'i' && v[1] == 'p' ? "socket path" : "endpoint");
  return 0;
}

/* A folder: any path but the empty one (which would name the working directory's "" and fail at
 * start). */
int gw_conf_check_dir(const char *v, char *why, size_t size) {
  if (!*v)
    return sl_err_say(why, size, SL_ECONFIG, "is empty (a folder, /var/lib/spotlab say)");
  return 0;
}

/* Empty, or HOST:PORT ([V6]:PORT) with a port of 0 to 65535: HTTP is
 * plain, so no scheme. */
int gw_conf_check_http(const char *v, char *why, size_t size) {
  if (!*v)
    return 0;
  const char *colon = strrchr(v, ':');
  if (!colon || colon == v || !valid_port(colon + 1, 0) || strstr(v, "://"))
    return sl_err_say(why, size, SL_ECONFIG, "\"%s\" is not HOST:PORT (127.0.0.1:7480, say)", v);
  return 0;
}

/* instance_types: TYPE,TYPE (an instance type's characters; at most
 * GW_TYPES_MAX), or empty. */
int gw_conf_check_types(const char *v, char *why, size_t size) {
  size_t n = 0;
  if (no_empty_item(v, "an instance type", "g5.xlarge,g4dn.xlarge", why, size) < 0)
    return SL_ECONFIG;
  for (const char *p = v; *p;) {
    size_t len = strcspn(p, ", ");
    if (len) {
      if (len > 63 || strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") < len)
        return sl_err_say(why, size, SL_ECONFIG, "\"%.*s\" is not an instance type",
                          (int)(len > 64 ? 64 : len), p);
      if (++n > GW_TYPES_MAX)
        return sl_err_say(why, size, SL_ECONFIG, "more than %d instance types", GW_TYPES_MAX);
    }
    p += len;
    p += strspn(p, ", ");
  }
  return 0;
}

int gw_config_parse_alert_at(const char *s, double ret[GW_ALERT_MAX], char *err, size_t err_size) {
  size_t n = 0;
  const char *p = s;
  if (no_empty_item(s, "a percentage", "50,80,100", err, err_size) < 0)
    return SL_ECONFIG;
  while (*p) {
    size_t len = strcspn(p, ",");
    char item[32];
    if (len >= sizeof item)
      return sl_err_say(err, err_size, SL_ECONFIG, "\"%.*s\" is not a percentage",
                        (int)(len > 40 ? 40 : len), p);
    memcpy(item, p, len);
    item[len] = 0;
    char *a = item, *end = NULL;
    while (isspace((unsigned char)*a))
      a++;
    double v = strtod(a, &end);
    if (end != a + strspn(a, "0123456789."))
      end = a; /* hex and exponents are no percentages */
    while (end && end > a && isspace((unsigned char)*end))
      end++; /* "50 , 80" */
    if (end && *end == '%')
      end++;
    if (!*a || !end || *end || !isfinite(v) || v <= 0 || v > 1000)
      return sl_err_say(err, err_size, SL_ECONFIG,
                        "\"%s\" is not a percentage above 0 and at most 1000", item);
    bool dup = false;
    for (size_t i = 0; i < n; i++)
      dup |= ret[i] == v;
    if (!dup) {
      if (n == GW_ALERT_MAX)
        return sl_err_say(err, err_size, SL_ECONFIG, "more than %d percentages",
                          GW_ALERT_MAX);
      size_t i = n++;
      for (; i > 0 && ret[i - 1] > v; i--) /* ascending */
        ret[i] = ret[i - 1];
      ret[i] = v;
    }
    p += len;
    p += *p == ',';
  }
  return (int)n;
}

int gw_conf_check_alert_at(const char *v, char *why, size_t size) {
  double pct[GW_ALERT_MAX];
  return gw_config_parse_alert_at(v, pct, why, size) < 0 ? SL_ECONFIG : 0;
}

int gw_conf_check_yes_no(const char *v, char *why, size_t size) {
  if (!strcmp(v, "yes") || !strcmp(v, "no"))
    return 0;
  return sl_err_say(why, size, SL_ECONFIG, "\"%s\" is not yes or no", v);
}

/* auto, yes or no ([store] upload_data). */
int gw_conf_check_auto_yes_no(const char *v, char *why, size_t size) {
  if (!strcmp(v, "auto") || !strcmp(v, "yes") || !strcmp(v, "no"))
    return 0;
  return sl_err_say(why, size, SL_ECONFIG, "\"%s\" is not auto, yes or no", v);
}

/* An http:// or https:// URL with a host, no blanks or control bytes (the
 * URL goes into the request line). */
int gw_conf_check_hook_url(const char *v, char *why, size_t size) {
  const char *host = !strncmp(v, "http://", 7) ? v + 7 : !strncmp(v, "https://", 8) ? v + 8 : NULL;
  if (has_control(v))
    return sl_err_say(why, size, SL_ECONFIG, "\"%s\" holds a control character", v);
  if (!host || !*host || *host == '/' || strchr(v, ' '))
    return sl_err_say(why, size, SL_ECONFIG, "\"%s\" is not an http:// or https:// URL", v);
  return 0;
}

/* "job.succeeded, job.failed" as bits of hook_events; SL_ECONFIG naming the
 * first word that is no event, for a list that names none, or for an empty
 * item. An event named twice counts once, as a percentage of alert_at and
 * an instance type do. */
int gw_conf_parse_events(const char *v, unsigned *ret_mask, char *why, size_t size) {
  unsigned mask = 0;
  for (const char *p = v; *p;) {
    p += strspn(p, " \t,");
    size_t n = strcspn(p, " \t,");
    if (!n)
      break;
    size_t e = 0;
    while (e < GW_HOOK_N_EVENTS && (strlen(hook_events[e]) != n || strncmp(hook_events[e], p, n)))
      e++;
    if (e == GW_HOOK_N_EVENTS)
      return sl_err_say(why, size, SL_ECONFIG,
                        "\"%.*s\" is not an event (job.succeeded, job.failed, job.preempted,"
                        " job.cancelled, budget.alert, budget.cap, idle.shutdown)",
                        (int)n, p);
    mask |= 1u << e;
    p += n;
  }
  if (!mask)
    return sl_err_say(why, size, SL_ECONFIG, "names no event");
  if (no_empty_item(v, "an event", "job.succeeded,job.failed", why, size) < 0)
    return SL_ECONFIG;
  *ret_mask = mask;
  return 0;
}

int gw_conf_check_events(const char *v, char *why, size_t size) {
  unsigned mask;
  return gw_conf_parse_events(v, &mask, why, size);
}

const char *gw_config_hook_event_name(enum gw_hook_event e) {
  return (unsigned)e < GW_HOOK_N_EVENTS ? hook_events[e] : NULL;
}

int gw_conf_check_name(const char *v, char *why, size_t size) {
  if (gw_config_valid_name(v))
    return 0;
  return sl_err_say(why, size, SL_ECONFIG, "\"%s\" is not a valid name", v);
}

int gw_conf_check_hex64(const char *v, char *why, size_t size) {
  if (!sl_sha256_hex_ok(v))
    return sl_err_say(why, size, SL_ECONFIG, "expected 64 lowercase hex digits");
  return 0;
}

/* Empty, file:///ABSOLUTE or s3://BUCKET[/PREFIX]: the bucket name as S3
 * allows it (3-63 of a-z 0-9 . -), so a typo fails at start; no control
 * bytes (the prefix goes into S3 requests). */
int gw_conf_check_store(const char *v, char *why, size_t size) {
  if (has_control(v))
    return sl_err_say(why, size, SL_ECONFIG, "\"%s\" holds a control character", v);
  if (!*v || (!strncmp(v, "file:///", 8) && v[8]))
    return 0;
  if (strncmp(v, "s3://", 5))
    return sl_err_say(why, size, SL_ECONFIG, "\"%s\" is not a file:/// or s3:// URL", v);
  size_t n = strcspn(v + 5, "/");
  if (n < 3 || n > 63 || strspn(v + 5, "abcdefghijklmnopqrstuvwxyz0123456789.-") < n)
    return sl_err_say(why, size, SL_ECONFIG,
                      "\"%s\": the bucket name must be 3 to 63 of a-z, 0-9, '.' and '-'", v);
  return 0;
}

/* Empty (JUPYTERHUB_API_URL at start) or an http(s):// URL without blanks
 * or control bytes. */
int gw_conf_check_hub_url(const char *v, char *why, size_t size) {
  if (has_control(v))
    return sl_err_say(why, size, SL_ECONFIG, "\"%s\" holds a control character", v);
  if (*v && ((strncmp(v, "http://", 7) && strncmp(v, "https://", 8)) || strchr(v, ' ')))
    return sl_err_say(why, size, SL_ECONFIG, "\"%s\" is not an http:// or https:// URL", v);
  return 0;
}

/* Empty, or an AWS region's name as the S3 client takes it (lowercase
 * letters, digits and '-'): it goes into the endpoint's host name and the
 * signature's scope. */
int gw_conf_check_region(const char *v, char *why, size_t size) {
  if (strspn(v, "abcdefghijklmnopqrstuvwxyz0123456789-") < strlen(v))
    return sl_err_say(why, size, SL_ECONFIG,
                      "\"%s\" is not a region name (lowercase letters, digits and '-')", v);
  return 0;
}

static bool offered_has(const char *const *types, size_t n, const char *name, size_t len) {
  for (size_t i = 0; i < n; i++)
    if (strlen(types[i]) == len && !strncmp(types[i], name, len))
      return true;
  return false;
}

/* The first name of list (instance_types) that types lacks, into *ret_name and *ret_len. */
static bool first_unoffered(const char *list, const char *const *types, size_t n,
                            const char **ret_name, size_t *ret_len) {
  for (const char *p = list + strspn(list, ", "); *p; p += strspn(p, ", ")) {
    size_t len = strcspn(p, ", ");
    if (!offered_has(types, n, p, len)) {
      *ret_name = p;
      *ret_len = len;
      return true;
    }
    p += len;
  }
  return false;
}

int gw_config_check_offered(const struct gw_config *c, const char *const *types, size_t n,
                            char *err, size_t err_size) {
  const char *name = NULL, *kind = NULL, *entry = NULL;
  size_t len = 0;
  int line = 0;
  for (size_t i = 0; i < c->n_groups && !name; i++)
    if (first_unoffered(c->groups[i].instance_types, types, n, &name, &len))
      kind = "group", entry = c->groups[i].name, line = c->groups[i].instance_types_line;
  for (size_t i = 0; i < c->n_users && !name; i++)
    if (first_unoffered(c->users[i].instance_types, types, n, &name, &len))
      kind = "user", entry = c->users[i].name, line = c->users[i].instance_types_line;
  if (!name)
    return 0;
  char offered[1024] = "";
  for (size_t i = 0; i < n; i++)
    if (!offered_has(types, i, types[i], strlen(types[i]))) /* each once */
      sl_strv_join(offered, sizeof offered, types[i]);
  char where[1100] = "";
  if (c->file[0] && line > 0)
    snprintf(where, sizeof where, "%s:%d: ", c->file, line);
  return sl_err_say(err, err_size, SL_ECONFIG,
                    "%s[%s.%s] instance_types: %.*s is not an instance type the providers offer"
                    " (they offer: %s)", where, kind, entry, (int)len, name,
                    offered[0] ? offered : "none");
}
