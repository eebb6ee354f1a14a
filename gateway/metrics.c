/* The Prometheus text format: every family has HELP and TYPE lines, names
 * start with spotlab_, and label values are escaped (backslash, double
 * quote, newline) since users, zones and types come from the world. The
 * whole text is built in one memory stream per scrape; nothing is cached,
 * so a scrape always reads the store's current rows. */
#include "metrics.h"

#include "budget.h"
#include "config.h"
#include "job.h"
#include "sl_err.h"
#include "sl_json.h"
#include "webhook.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const double gw_metrics_bounds_s[GW_METRICS_BUCKETS] = {
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5,
};

const double gw_metrics_long_bounds_s[GW_METRICS_BUCKETS] = {
  0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800,
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

void gw_metrics_hist_observe_in(struct gw_metrics_hist *h, const double *bounds, double seconds) {
  size_t i = 0;
  while (i < GW_METRICS_BUCKETS && seconds > bounds[i])
    i++;
  h->counts[i]++;
  h->n++;
  h->sum_s += seconds;
}

void gw_metrics_kreq_observe(struct gw_metrics_kreq *m, const char *type, double seconds) {
  size_t i = 0;
  while (i < GW_METRICS_KTYPES - 1 && m->by_type[i].type[0] && strcmp(m->by_type[i].type, type))
    i++;
  if (!m->by_type[i].type[0]) /* the last slot takes what does not fit */
    snprintf(m->by_type[i].type, sizeof m->by_type[i].type, "%s", i == GW_METRICS_KTYPES - 1 ? "other" : type);
  gw_metrics_hist_observe(&m->by_type[i].h, seconds);
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

/* counts: {"jobs": {STATE: N}, "preemptions": {"notice": N, "no_notice": N}}. */
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

struct gw_metrics_tally;
static int tally_counts(struct gw_store *store, const struct gw_metrics_tally *t, json_t **ret);

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
  if (n) /* qsort takes no NULL array, even of none */
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

/* One family of the per-user rows, labelled with the user and their group;
 * savings is on-demand less actual spend. */
static void per_user(FILE *f, const struct gw_config *cfg, const json_t *rows, const char *name,
                     const char *type, const char *help, const char *field, bool savings) {
  head(f, name, type, help);
  size_t i;
  const json_t *r;
  json_array_foreach(rows, i, r) {
    double usd = sl_json_get_num(r, "usd", 0);
    double od = sl_json_get_num(r, "on_demand_usd", 0);
    fprintf(f, "%s{user=", name);
    label(f, sl_json_get_str(r, "user", ""));
    /* the group as the API's by_group has it: the configuration's (or the
     * hub's) now, else the one stored with the user */
    const char *group = cfg ? gw_config_user_group(cfg, sl_json_get_str(r, "user", "")) : NULL;
    fputs(",group=", f);
    label(f, group ? group : sl_json_get_str(r, "group", ""));
    fprintf(f, "} %.17g\n", savings ? od - usd : sl_json_get_num(r, field, 0));
  }
}

/* Every budget (the gateway's, each group's and user's, as set live or in
 * the file) with this month's spend; names are the file's, valid label
 * values as they are. */
static int budgets(FILE *f, struct gw_budget *b) {
  json_t *all = gw_budget_json(b, NULL);
  if (!all)
    return -1;
  static const struct {
    const char *name, *help, *field;
  } fam[] = {
    {"spotlab_budget_scope_usd", "Each monthly budget (scope gateway, group or user), in USD.",
     "budget_usd"},
    {"spotlab_budget_scope_spent_usd", "Each budget's spend this calendar month (UTC), in USD.",
     "spent_usd"},
    {"spotlab_budget_scope_used_ratio", "Each budget's spend this month over the budget.", "ratio"},
    {"spotlab_budget_scope_capped", "1 while a budget's hard cap holds (new jobs refused, running"
     " ones paused).", "capped"},
  };
  json_t *arr = json_object_get(all, "budgets");
  for (size_t k = 0; k < sizeof fam / sizeof fam[0]; k++) {
    head(f, fam[k].name, "gauge", fam[k].help);
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e) {
      json_t *v = json_object_get(e, fam[k].field);
      fprintf(f, "%s{scope=\"%s\",name=\"%s\"} %.17g\n", fam[k].name,
              sl_json_get_str(e, "scope", ""), sl_json_get_str(e, "name", ""),
              json_is_boolean(v) ? (json_is_true(v) ? 1.0 : 0.0) : json_number_value(v));
    }
  }
  json_decref(all);
  return 0;
}

static int spend(FILE *f, const struct gw_metrics_src *src) {
  json_t *rows = NULL;
  if (gw_store_cost_by_user_group(src->store, MAX_ROWS, &rows) < 0)
    return -1;
  per_user(f, src->cfg, rows, "spotlab_spend_usd_total", "counter", "What each user's jobs cost, in USD.",
           "usd", false);
  per_user(f, src->cfg, rows, "spotlab_on_demand_usd_total", "counter",
           "What each user's jobs would have cost on on-demand instances, in USD.", "on_demand_usd",
           false);
  per_user(f, src->cfg, rows, "spotlab_savings_usd", "gauge",
           "On-demand cost less actual cost of each user's jobs, in USD.", NULL, true);
  per_user(f, src->cfg, rows, "spotlab_energy_kwh_total", "counter",
           "Estimated energy of each user's jobs at the wall (PUE included), in kWh.", "energy_kwh",
           false);
  per_user(f, src->cfg, rows, "spotlab_co2e_grams_total", "counter",
           "Estimated emissions of each user's jobs, in grams of CO2 equivalent.", "co2e_g", false);
  json_decref(rows);
  double month = 0, od = 0;
  if (gw_ledger_totals(src->ledger, NULL, gw_ledger_month_start_us(), &month, &od) < 0)
    return -1;
  double budget_usd = gw_budget_gateway_usd(src->budget, src->cfg);
  head(f, "spotlab_budget_monthly_usd", "gauge",
       "The gateway's monthly budget in force (set live, else [budget] monthly_usd), in USD.");
  fprintf(f, "spotlab_budget_monthly_usd %.17g\n", budget_usd);
  head(f, "spotlab_budget_spent_usd", "gauge", "Spend of every user this calendar month (UTC), in USD.");
  fprintf(f, "spotlab_budget_spent_usd %.17g\n", month);
  head(f, "spotlab_budget_used_ratio", "gauge", "This month's spend over the monthly budget.");
  fprintf(f, "spotlab_budget_used_ratio %.17g\n",
          budget_usd > 0 ? month / budget_usd : 0);
  return src->budget ? budgets(f, src->budget) : 0;
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

/* ---- the tally: counters from the bus, started from the store ---- */

#define PENDING_MAX 4096        /* preempted jobs not yet running again */

struct gw_metrics_tally {
  struct gw_metrics_hist recovery, ckpt_write, ckpt_upload;
  uint64_t steps_lost, idle_shutdowns;
  uint64_t preemptions[2];            /* without, with a notice */
  uint64_t budget_alerts[3], budget_caps[3]; /* gateway, group, user */
  struct { int64_t job, preempted_us; } pending[PENDING_MAX];
  size_t n_pending;
};

static const char *const scopes[3] = {"gateway", "group", "user"};

static void on_checkpoint(void *ctx, int64_t write_ms, int64_t upload_ms) {
  struct gw_metrics_tally *t = ctx;
  if (write_ms >= 0)
    gw_metrics_hist_observe_in(&t->ckpt_write, gw_metrics_long_bounds_s, (double)write_ms / 1e3);
  if (upload_ms >= 0)
    gw_metrics_hist_observe_in(&t->ckpt_upload, gw_metrics_long_bounds_s, (double)upload_ms / 1e3);
}

static size_t pending_find(const struct gw_metrics_tally *t, int64_t job) {
  size_t i = 0;
  while (i < t->n_pending && t->pending[i].job != job)
    i++;
  return i;
}

/* A preemption starts a recovery; the job's next running state ends it. A
 * job preempted again before it ran counts from the newer preemption. */
static void on_job_event(void *ctx, int64_t job, int64_t time_us, const char *kind,
                         const char *state, int64_t steps_lost, bool notice) {
  struct gw_metrics_tally *t = ctx;
  size_t i = pending_find(t, job);
  if (!strcmp(kind, "preempted")) {
    t->preemptions[notice]++;
    t->steps_lost += steps_lost > 0 ? (uint64_t)steps_lost : 0;
    if (i == t->n_pending && t->n_pending < PENDING_MAX)
      t->pending[t->n_pending++].job = job;
    if (i < t->n_pending)
      t->pending[i].preempted_us = time_us;
    return;
  }
  if (strcmp(kind, "state") || i == t->n_pending)
    return;
  int st = gw_job_state_from_name(state);
  if (st == GW_JOB_RUNNING)
    gw_metrics_hist_observe_in(&t->recovery, gw_metrics_long_bounds_s,
                               (double)(time_us - t->pending[i].preempted_us) / 1e6);
  if (st == GW_JOB_RUNNING || (st >= 0 && gw_job_state_final(st)))
    t->pending[i] = t->pending[--t->n_pending];
}

struct gw_metrics_tally *gw_metrics_tally_new(struct gw_store *store, char *err, size_t err_size) {
  struct gw_metrics_tally *t = calloc(1, sizeof *t);
  if (!t) {
    snprintf(err, err_size, "out of memory");
    return NULL;
  }
  struct gw_store_history_fns fns = {.checkpoint = on_checkpoint, .event = on_job_event};
  int r = gw_store_metric_history(store, &fns, t);
  if (r < 0) {
    snprintf(err, err_size, "cannot read the metrics' history: %s", sl_strerror(r));
    free(t);
    return NULL;
  }
  return t;
}

struct gw_metrics_tally *gw_metrics_tally_free(struct gw_metrics_tally *t) {
  free(t);
  return NULL;
}

void gw_metrics_sink(void *data, const struct gw_bus_event *ev) {
  struct gw_metrics_tally *t = data;
  if (ev->kind == GW_BUS_IDLE_SHUTDOWN) {
    t->idle_shutdowns++;
  } else if (ev->kind == GW_BUS_BUDGET && ev->budget && ev->budget->scope) {
    for (size_t i = 0; i < 3; i++)
      if (!strcmp(ev->budget->scope, scopes[i]))
        ev->budget->cap ? t->budget_caps[i]++ : t->budget_alerts[i]++;
  } else if (ev->kind == GW_BUS_JOB_EVENT && ev->job && ev->event) {
    const char *kind = sl_json_get_str(ev->event, "event", "");
    if (!strcmp(kind, "checkpoint"))
      on_checkpoint(t, sl_json_get_int(ev->event, "write_ms", -1), sl_json_get_int(ev->event, "upload_ms", -1));
    else if (!strcmp(kind, "preempted") || !strcmp(kind, "state"))
      on_job_event(t, ev->job->id, sl_json_get_int(ev->event, "time_us", 0), kind,
                   sl_json_get_str(ev->event, "state", ""), sl_json_get_int(ev->event, "steps_lost", 0),
                   json_is_true(json_object_get(ev->event, "notice")));
  }
}

static int tally_counts(struct gw_store *store, const struct gw_metrics_tally *t, json_t **ret) {
  json_t *jobs = NULL;
  int r = gw_store_job_counts(store, &jobs);
  if (r < 0)
    return r;
  *ret = json_pack("{s:o,s:{s:I,s:I}}", "jobs", jobs, "preemptions", "notice",
                   (json_int_t)t->preemptions[1], "no_notice", (json_int_t)t->preemptions[0]);
  return *ret ? 0 : -ENOMEM;
}

static void hist(FILE *f, const char *name, const char *help, const double *bounds,
                 const char *lname, const char *lvalue, const struct gw_metrics_hist *h) {
  if (help)
    head(f, name, "histogram", help);
  uint64_t cum = 0;
  for (size_t i = 0; i <= GW_METRICS_BUCKETS; i++) {
    cum += h->counts[i];
    fprintf(f, "%s_bucket{", name);
    if (lname) {
      fprintf(f, "%s=", lname);
      label(f, lvalue);
      fputc(',', f);
    }
    if (i < GW_METRICS_BUCKETS)
      fprintf(f, "le=\"%g\"} %llu\n", bounds[i], (unsigned long long)cum);
    else
      fprintf(f, "le=\"+Inf\"} %llu\n", (unsigned long long)h->n);
  }
  const char *part[2] = {"sum", "count"};
  for (int k = 0; k < 2; k++) {
    fprintf(f, "%s_%s", name, part[k]);
    if (lname) {
      fprintf(f, "{%s=", lname);
      label(f, lvalue);
      fputc('}', f);
    }
    if (k == 0)
      fprintf(f, " %.17g\n", h->sum_s);
    else
      fprintf(f, " %llu\n", (unsigned long long)h->n);
  }
}

static void tally_render(FILE *f, const struct gw_metrics_tally *t) {
  head(f, "spotlab_recoveries_total", "counter", "Preempted jobs that ran again.");
  fprintf(f, "spotlab_recoveries_total %llu\n", (unsigned long long)t->recovery.n);
  hist(f, "spotlab_recovery_duration_seconds",
       "From a job's preemption to its running again, in seconds.", gw_metrics_long_bounds_s,
       NULL, NULL, &t->recovery);
  hist(f, "spotlab_checkpoint_write_seconds", "Time to write a checkpoint on the worker, in seconds.",
       gw_metrics_long_bounds_s, NULL, NULL, &t->ckpt_write);
  hist(f, "spotlab_checkpoint_upload_seconds", "Time to upload a checkpoint to the store, in seconds.",
       gw_metrics_long_bounds_s, NULL, NULL, &t->ckpt_upload);
  head(f, "spotlab_steps_lost_total", "counter",
       "Training steps run past the newest checkpoint by attempts that were preempted or lost.");
  fprintf(f, "spotlab_steps_lost_total %llu\n", (unsigned long long)t->steps_lost);
  head(f, "spotlab_idle_shutdowns_total", "counter",
       "Idle instances shut down, since the gateway started.");
  fprintf(f, "spotlab_idle_shutdowns_total %llu\n", (unsigned long long)t->idle_shutdowns);
  head(f, "spotlab_budget_alerts_total", "counter",
       "Budget alert thresholds crossed, by budget scope, since the gateway started.");
  for (size_t i = 0; i < 3; i++)
    fprintf(f, "spotlab_budget_alerts_total{scope=\"%s\"} %llu\n", scopes[i],
            (unsigned long long)t->budget_alerts[i]);
  head(f, "spotlab_budget_caps_total", "counter",
       "Budgets that reached their hard cap, by scope, since the gateway started.");
  for (size_t i = 0; i < 3; i++)
    fprintf(f, "spotlab_budget_caps_total{scope=\"%s\"} %llu\n", scopes[i],
            (unsigned long long)t->budget_caps[i]);
}

static void kreq_render(FILE *f, const struct gw_metrics_kreq *m) {
  const char *name = "spotlab_kernel_request_duration_seconds";
  head(f, name, "histogram",
       "Time the gateway's loop spent handling a kernel protocol request, by type, in seconds.");
  for (size_t i = 0; i < GW_METRICS_KTYPES && m->by_type[i].type[0]; i++)
    hist(f, name, NULL, gw_metrics_bounds_s, "type", m->by_type[i].type, &m->by_type[i].h);
}

/* The data files notebooks uploaded that the store keeps, per user. */
static int stored_data(FILE *f, struct gw_store *store) {
  json_t *rows = NULL;
  if (gw_store_uploads_by_user(store, NULL, &rows) < 0)
    return -1;
  static const struct {
    const char *name, *help, *field;
  } fam[] = {
    {"spotlab_stored_data_bytes", "Bytes of the data files each user's notebooks uploaded, kept in the store.",
     "bytes"},
    {"spotlab_stored_data_files", "Data files each user's notebooks uploaded, kept in the store.", "files"},
  };
  for (size_t k = 0; k < sizeof fam / sizeof *fam; k++) {
    head(f, fam[k].name, "gauge", fam[k].help);
    size_t i;
    const json_t *e;
    json_array_foreach(rows, i, e) {
      fprintf(f, "%s{user=", fam[k].name);
      label(f, sl_json_get_str(e, "user", ""));
      fprintf(f, "} %lld\n", (long long)sl_json_get_int(e, fam[k].field, 0));
    }
  }
  json_decref(rows);
  return 0;
}

char *gw_metrics_render(const struct gw_metrics_src *src, size_t *ret_len) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f)
    return NULL;
  json_t *counts = NULL;
  /* with a tally, preemptions come from it: the store's count reads every
   * event of the preempted jobs, too slow for each scrape of a large store */
  int r = src->tally ? tally_counts(src->store, src->tally, &counts) : gw_store_counts(src->store, &counts);
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
  if (r == 0)
    r = stored_data(f, src->store);
  head(f, "spotlab_kernel_clients", "gauge", "Kernels and CLI clients connected to the kernel protocol.");
  fprintf(f, "spotlab_kernel_clients %zu\n", src->kproto ? gw_kproto_n_clients(src->kproto) : 0);
  if (src->http)
    http_self(f, src->http);
  gw_webhooks_metrics(src->webhooks, f);
  if (src->tally)
    tally_render(f, src->tally);
  if (src->kproto)
    kreq_render(f, gw_kproto_request_times(src->kproto));
  if (fclose(f) != 0 || r < 0) {
    free(buf);
    return NULL;
  }
  *ret_len = len;
  return buf;
}
