/* The local provider's instance catalog.
 *
 * A catalog is a CSV file: '#' lines and blank lines are comments, the first
 * other line is the header and must name the seven columns in order
 * (instance_type,gpus,gpu_model,on_demand_usd_per_hour,spot_usd_per_hour,
 * interruption,zones). Every later line is one instance type. Parsing is
 * strict: a wrong field count, a number that does not parse or is out of
 * bounds, an unknown interruption bucket, a bad zone list or a duplicate
 * name fails the whole load with the file and line named, so a catalog in
 * use is always complete. Lines are bounded (1 KiB), as is the number of
 * types (GW_CATALOG_MAX_TYPES). Fields hold no quoting: names never contain
 * commas.
 * The built-in catalog's source-tree path comes from GW_CATALOG_SOURCE_PATH,
 * set by gateway/providers/meson.build (not config.h: gateway/ has a
 * config.h of its own that would shadow the build's). */
#include "catalog.h"

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sl_err.h"

#define LINE_MAX_BYTES 1024
#define N_COLUMNS 7

struct gw_catalog {
  size_t n;
  struct gw_catalog_entry e[GW_CATALOG_MAX_TYPES];
};

static const char *const bucket_labels[GW_CATALOG_BUCKETS] = {"<5%", "5-10%", "10-15%",
                                                               "15-20%", ">20%"};
/* Mean time to preemption per bucket, simulated seconds. The >20% bucket is
 * anchored on the measured p3.2xlarge lifetimes of the NSDI'24 spot traces
 * (mean available run 1.4-2.9 h over four zones): 2 h. The other buckets
 * scale inversely with the midpoint of their monthly rate (25% for >20%):
 * 17.5% -> 2.86 h, 12.5% -> 4 h, 7.5% -> 6.67 h, 2.5% -> 20 h. */
static const double bucket_mean_s[GW_CATALOG_BUCKETS] = {
    7200.0 * 25.0 / 2.5, 7200.0 * 25.0 / 7.5, 7200.0 * 25.0 / 12.5, 7200.0 * 25.0 / 17.5, 7200.0};

const char *gw_catalog_bucket_label(int bucket) {
  return bucket >= 0 && bucket < GW_CATALOG_BUCKETS ? bucket_labels[bucket] : "unknown";
}

double gw_catalog_bucket_mean_s(int bucket) {
  return bucket >= 0 && bucket < GW_CATALOG_BUCKETS ? bucket_mean_s[bucket] : bucket_mean_s[4];
}

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t')
    s++;
  size_t n = strlen(s);
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
    s[--n] = '\0';
  return s;
}

/* Splits line in place at commas into at most max fields; returns the count
 * (max + 1 when there are more). */
static int split(char *line, char **f, int max) {
  int n = 0;
  char *p = line;
  for (;;) {
    char *c = strchr(p, ',');
    if (n == max)
      return max + 1;
    if (c)
      *c = '\0';
    f[n++] = trim(p);
    if (!c)
      return n;
    p = c + 1;
  }
}

static int parse_money(const char *s, double *ret) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (!*s || *end || errno || !isfinite(v) || v <= 0 || v > 10000)
    return -EINVAL;
  *ret = v;
  return 0;
}

static int parse_entry(char **f, struct gw_catalog_entry *e, const char **why) {
  memset(e, 0, sizeof *e);
  if (!*f[0] || strlen(f[0]) >= sizeof e->name)
    return *why = "instance_type empty or longer than 63 bytes", -EINVAL;
  strcpy(e->name, f[0]);
  char *end;
  long g = strtol(f[1], &end, 10);
  if (!*f[1] || *end || g < 0 || g > 64)
    return *why = "gpus is not a whole number 0..64", -EINVAL;
  e->gpus = (int)g;
  if (strlen(f[2]) >= sizeof e->gpu_model)
    return *why = "gpu_model longer than 31 bytes", -EINVAL;
  strcpy(e->gpu_model, f[2]);
  if (parse_money(f[3], &e->on_demand_usd_per_hour) < 0)
    return *why = "on_demand_usd_per_hour is not a price in (0, 10000]", -EINVAL;
  if (parse_money(f[4], &e->spot_usd_per_hour) < 0)
    return *why = "spot_usd_per_hour is not a price in (0, 10000]", -EINVAL;
  e->bucket = -1;
  for (int b = 0; b < GW_CATALOG_BUCKETS; b++)
    if (strcmp(f[5], bucket_labels[b]) == 0)
      e->bucket = b;
  if (e->bucket < 0)
    return *why = "interruption is not one of <5% 5-10% 10-15% 15-20% >20%", -EINVAL;
  size_t nz = 0;
  for (const char *z = f[6]; *z; z++) {
    if (*z == ' ')
      continue;
    if (*z < 'a' || *z > 'z' || nz + 1 >= sizeof e->zones || strchr(e->zones, *z))
      return *why = "zones must be up to 7 distinct letters a-z separated by spaces", -EINVAL;
    e->zones[nz++] = *z;
  }
  if (nz == 0)
    return *why = "zones is empty", -EINVAL;
  return 0;
}

static const char header[] =
    "instance_type,gpus,gpu_model,on_demand_usd_per_hour,spot_usd_per_hour,interruption,zones";

int gw_catalog_load(const char *path, struct gw_catalog **ret, char *err, size_t err_size) {
  int r = 0, lineno = 0;
  bool seen_header = false;
  char line[LINE_MAX_BYTES + 2];
  struct gw_catalog *c = NULL;
  FILE *fp = fopen(path, "re");
  if (!fp) {
    r = -errno;
    snprintf(err, err_size, "%s: %s", path, strerror(errno));
    return r;
  }
  c = calloc(1, sizeof *c);
  if (!c) {
    r = -ENOMEM;
    snprintf(err, err_size, "%s: out of memory", path);
    goto out;
  }
  while (fgets(line, sizeof line, fp)) {
    lineno++;
    size_t len = strlen(line);
    if (len > LINE_MAX_BYTES || (len == sizeof line - 1 && line[len - 1] != '\n')) {
      snprintf(err, err_size, "%s:%d: line longer than %d bytes", path, lineno, LINE_MAX_BYTES);
      r = SL_EPARSE;
      goto out;
    }
    char *t = trim(line);
    if (!*t || *t == '#')
      continue;
    if (!seen_header) {
      if (strcmp(t, header) != 0) {
        snprintf(err, err_size, "%s:%d: header must be \"%s\"", path, lineno, header);
        r = SL_EPARSE;
        goto out;
      }
      seen_header = true;
      continue;
    }
    char *f[N_COLUMNS + 1];
    int nf = split(t, f, N_COLUMNS);
    if (nf != N_COLUMNS) {
      snprintf(err, err_size, "%s:%d: expected %d comma-separated fields, found %s%d", path,
               lineno, N_COLUMNS, nf > N_COLUMNS ? "more than " : "",
               nf > N_COLUMNS ? N_COLUMNS : nf);
      r = SL_EPARSE;
      goto out;
    }
    if (c->n == GW_CATALOG_MAX_TYPES) {
      snprintf(err, err_size, "%s:%d: more than %d instance types", path, lineno,
               GW_CATALOG_MAX_TYPES);
      r = SL_ELIMIT;
      goto out;
    }
    const char *why = NULL;
    if (parse_entry(f, &c->e[c->n], &why) < 0) {
      snprintf(err, err_size, "%s:%d: %s", path, lineno, why);
      r = SL_EPARSE;
      goto out;
    }
    if (gw_catalog_find(c, c->e[c->n].name) >= 0) {
      snprintf(err, err_size, "%s:%d: instance type %s listed twice", path, lineno,
               c->e[c->n].name);
      r = SL_EPARSE;
      goto out;
    }
    c->n++;
  }
  if (ferror(fp)) {
    r = -EIO;
    snprintf(err, err_size, "%s: read error", path);
  } else if (c->n == 0) {
    r = SL_EPARSE;
    snprintf(err, err_size, "%s:%d: no instance types (header %s)", path, lineno,
             seen_header ? "present" : "missing");
  }
out:
  fclose(fp);
  if (r < 0) {
    free(c);
    return r;
  }
  *ret = c;
  return 0;
}

struct gw_catalog *gw_catalog_free(struct gw_catalog *c) {
  free(c);
  return NULL;
}

size_t gw_catalog_count(const struct gw_catalog *c) { return c->n; }

const struct gw_catalog_entry *gw_catalog_get(const struct gw_catalog *c, size_t i) {
  return i < c->n ? &c->e[i] : NULL;
}

int gw_catalog_find(const struct gw_catalog *c, const char *name) {
  for (size_t i = 0; i < c->n; i++)
    if (strcmp(c->e[i].name, name) == 0)
      return (int)i;
  return SL_ENAME;
}

int gw_catalog_default_path(char *ret, size_t size) {
  char self[4096], path[4200];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    snprintf(path, sizeof path, "%s/../share/spotlab/catalog.csv", dirname(self));
    if (access(path, R_OK) == 0 && strlen(path) < size) {
      strcpy(ret, path);
      return 0;
    }
  }
#ifdef GW_CATALOG_SOURCE_PATH
  if (access(GW_CATALOG_SOURCE_PATH, R_OK) == 0) {
    if (strlen(GW_CATALOG_SOURCE_PATH) >= size)
      return -ENAMETOOLONG;
    strcpy(ret, GW_CATALOG_SOURCE_PATH);
    return 0;
  }
#endif
  return -ENOENT;
}
