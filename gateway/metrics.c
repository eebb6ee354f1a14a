/* The Prometheus text format: every family has HELP and TYPE lines, names
 * start with spotlab_, and label values are escaped (backslash, double
 * quote, newline) since users, zones and types come from the world. The
 * whole text is built in one memory stream per scrape; nothing is cached,
 * so a scrape always reads the store's current rows. */
#include "metrics.h"

#include "config.h"
#include "job.h"
#include "sl_json.h"
#include "webhook.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const double gw_metrics_bounds_s[GW_METRICS_BUCKETS] = {
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5,
};

#define MAX_ROWS 10000          /* users in the spend families */

void gw_metrics_hist_observe(struct gw_metrics_hist *h, double seconds) {
  size_t i = 0;
  while (i < GW_METRICS_BUCKETS && seconds > gw_metrics_bounds_s[i])
    i++;
  h->counts[i]++;
  h->n++;
  h->sum_s += seconds;
}

void gw_metrics_http_count(struct gw_metrics_http *m, unsigned code) {
  for (size_t i = 0; i < GW_METRICS_CODES; i++) {
    if (m->by_code[i].code == code || !m->by_code[i].code) {
      m->by_code[i].code = code;
      m->by_code[i].n++;
      return;
    }
  }
  /* more distinct codes than slots: counted under the last one */
  m->by_code[GW_METRICS_CODES - 1].n++;
}

static void head(FILE *f, const char *name, const char *type, const char *help) {
  fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value, escaped as the format requires. */
static void label(FILE *f, const char *v) {
  fputc('"', f);
  for (; *v; v++) {
    if (*v == '\\' || *v == '"')
      fprintf(f, "\\%c", *v);
    else if (*v == '\n')
      fputs("\\n", f);
    else
      fputc(*v, f);
  }
  fputc('"', f);
}

static void jobs_by_state(FILE *f, const json_t *counts) {
  head(f, "spotlab_jobs", "gauge", "Jobs in the store by state.");
  for (int s = GW_JOB_QUEUED; s <= GW_JOB_CANCELLED; s++) {
    const char *name = gw_job_state_name(s);
    fputs("spotlab_jobs{state=", f);
    label(f, name);
    fprintf(f, "} %lld\n", (long long)json_integer_value(json_object_get(json_object_get(counts, "jobs"), name)));
  }
  const json_t *p = json_object_get(counts, "preemptions");
  head(f, "spotlab_preemptions_total", "counter",
       "Preemptions of a job's instance, by whether a notice came first.");
  fprintf(f, "spotlab_preemptions_total{notice=\"yes\"} %lld\n",
          (long long)json_integer_value(json_object_get(p, "notice")));
  fprintf(f, "spotlab_preemptions_total{notice=\"no\"} %lld\n",
          (long long)json_integer_value(json_object_get(p, "no_notice")));
}

struct inst_key {
  const char *type, *zone, *market, *state;
};

static int inst_cmp(const void *a, const void *b) {
  const struct inst_key *x = a, *y = b;
  int r = strcmp(x->type, y->type);
  r = r ? r : strcmp(x->zone, y->zone);
  r = r ? r : strcmp(x->market, y->market);
  return r ? r : strcmp(x->state, y->state);
}

/* Instances the fleet holds, counted per (type, zone, market, state). */
static int instances(FILE *f, struct gw_fleet *fleet) {
  size_t n = gw_fleet_n_insts(fleet);
  struct inst_key *keys = n ? calloc(n, sizeof *keys) : NULL;
  if (n && !keys)
    return -1;
  for (size_t i = 0; i < n; i++) {
    const struct gw_inst *in = gw_fleet_inst_at(fleet, i);
    keys[i] = (struct inst_key){in->row.type, in->row.zone, in->row.spot ? "spot" : "on-demand",
                                in->row.state};
  }
  qsort(keys, n, sizeof *keys, inst_cmp);
  head(f, "spotlab_instances", "gauge", "Instances the gateway runs, by type, zone, market and state.");
  for (size_t i = 0; i < n;) {
    size_t k = i;
    while (k < n && !inst_cmp(&keys[i], &keys[k]))
      k++;
    fputs("spotlab_instances{type=", f);
    label(f, keys[i].type);
    fputs(",zone=", f);
    label(f, keys[i].zone);
    fputs(",market=", f);
    label(f, keys[i].market);
    fputs(",state=", f);
    label(f, keys[i].state);
    fprintf(f, "} %zu\n", k - i);
    i = k;
  }
  free(keys);
  return 0;
}

static void per_user(FILE *f, const json_t *rows, const char *name, const char *type,
                     const char *help, const char *field, bool savings) {
  head(f, name, type, help);
  size_t i;
  const json_t *r;
  json_array_foreach(rows, i, r) {
    double usd = json_real_value(json_object_get(r, "usd"));
    double od = json_real_value(json_object_get(r, "on_demand_usd"));
    fprintf(f, "%s{user=", name);
    label(f, json_string_value(json_object_get(r, "key")) ? json_string_value(json_object_get(r, "key")) : "");
    fprintf(f, "} %.17g\n", savings ? od - usd : json_real_value(json_object_get(r, field)));
  }
}

static int spend(FILE *f, const struct gw_metrics_src *src) {
  json_t *rows = NULL;
  if (gw_store_cost_by(src->store, GW_COST_BY_USER, NULL, 0, MAX_ROWS, &rows) < 0)
    return -1;
  per_user(f, rows, "spotlab_spend_usd_total", "counter", "What each user's jobs cost, in USD.",
           "usd", false);
  per_user(f, rows, "spotlab_on_demand_usd_total", "counter",
           "What each user's jobs would have cost on on-demand instances, in USD.", "on_demand_usd",
           false);
  per_user(f, rows, "spotlab_savings_usd", "gauge",
           "On-demand cost less actual cost of each user's jobs, in USD.", NULL, true);
  json_decref(rows);
  double month = 0, od = 0;
  if (gw_ledger_totals(src->ledger, NULL, gw_ledger_month_start_us(), &month, &od) < 0)
    return -1;
  head(f, "spotlab_budget_monthly_usd", "gauge", "The gateway's monthly budget ([budget] monthly_usd).");
  fprintf(f, "spotlab_budget_monthly_usd %.17g\n", src->cfg->monthly_usd);
  head(f, "spotlab_budget_spent_usd", "gauge", "Spend of every user this calendar month (UTC), in USD.");
  fprintf(f, "spotlab_budget_spent_usd %.17g\n", month);
  head(f, "spotlab_budget_used_ratio", "gauge", "This month's spend over the monthly budget.");
  fprintf(f, "spotlab_budget_used_ratio %.17g\n",
          src->cfg->monthly_usd > 0 ? month / src->cfg->monthly_usd : 0);
  return 0;
}

static void http_self(FILE *f, const struct gw_metrics_http *m) {
  head(f, "spotlab_http_requests_total", "counter", "HTTP requests answered, by status code.");
  for (size_t i = 0; i < GW_METRICS_CODES && m->by_code[i].code; i++)
    fprintf(f, "spotlab_http_requests_total{code=\"%u\"} %llu\n", m->by_code[i].code,
            (unsigned long long)m->by_code[i].n);
  const char *name = "spotlab_http_request_duration_seconds";
  head(f, name, "histogram", "Time to answer an HTTP request, in seconds.");
  uint64_t cum = 0;
  for (size_t i = 0; i < GW_METRICS_BUCKETS; i++) {
    cum += m->latency.counts[i];
    fprintf(f, "%s_bucket{le=\"%g\"} %llu\n", name, gw_metrics_bounds_s[i], (unsigned long long)cum);
  }
  fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)m->latency.n);
  fprintf(f, "%s_sum %.17g\n%s_count %llu\n", name, m->latency.sum_s, name,
          (unsigned long long)m->latency.n);
}

char *gw_metrics_render(const struct gw_metrics_src *src, size_t *ret_len) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f)
    return NULL;
  json_t *counts = NULL;
  int r = gw_store_counts(src->store, &counts);
  head(f, "spotlab_gateway_build_info", "gauge", "The gateway's version; the value is always 1.");
  fputs("spotlab_gateway_build_info{version=", f);
  label(f, SPOTLAB_VERSION);
  fputs("} 1\n", f);
  if (r == 0)
    jobs_by_state(f, counts);
  json_decref(counts);
  if (r == 0)
    r = instances(f, src->fleet);
  if (r == 0)
    r = spend(f, src);
  head(f, "spotlab_kernel_clients", "gauge", "Kernels and CLI clients connected to the kernel protocol.");
  fprintf(f, "spotlab_kernel_clients %zu\n", src->kproto ? gw_kproto_n_clients(src->kproto) : 0);
  if (src->http)
    http_self(f, src->http);
  gw_webhooks_metrics(src->webhooks, f);
  if (fclose(f) != 0 || r < 0) {
    free(buf);
    return NULL;
  }
  *ret_len = len;
  return buf;
}
