/* spotlab-sim --policy: evaluates a placement policy on spot traces in the
 * tick model (sl_policy.h), without a gateway. Several --trace files are
 * several zones aligned by tick. Exit status: 0 after the report (a missed
 * deadline included), 1 when the job cannot be evaluated (a deadline that
 * not even on-demand from the first tick keeps, for --policy optimal), 2 on
 * a usage error. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "sim.h"
#include "sl_err.h"
#include "sl_policy.h"

/* p3.2xlarge (1 V100, the traces' usual type) in us-west-2: on-demand, and
 * the spot price the traces' own price columns hold. */
#define DEFAULT_SPOT_USD 0.918
#define DEFAULT_ONDEMAND_USD 3.06

struct zone_trace {
  const char *path;
  double gap_s;
  int32_t *avail;
  double *price;
  size_t n;
};

struct eval_args {
  const char *policy;
  struct zone_trace zones[SL_POLICY_ZONES_MAX];
  size_t n_zones;
  double start_tick, work_h, deadline_h, overhead_h, spot_usd, od_usd, nodes;
  bool json;
};

static void eval_usage(FILE *f) {
  fputs("usage: spotlab-sim --policy NAME --trace FILE [--trace FILE ...] --start-tick N --work HOURS\n"
        "                   --deadline HOURS --restart-overhead HOURS [--spot-price USD --ondemand-price USD]\n"
        "                   [--nodes N] [--json]\n"
        "  --policy NAME             spotlab (the gateway's), uniform-progress, greedy, optimal, ondemand\n"
        "  --trace FILE              a zone's spot trace; several are several zones aligned by tick\n"
        "  --start-tick N            the job starts at this tick (earlier ticks are history)\n"
        "  --work HOURS              hours of progress the job needs\n"
        "  --deadline HOURS          hours from the start by which it must finish\n"
        "  --restart-overhead HOURS  hours billed without progress at each (re)start or switch\n"
        "  --spot-price USD          spot price per hour where a trace has no prices (default 0.918)\n"
        "  --ondemand-price USD      on-demand price per hour (default 3.06)\n"
        "  --nodes N                 instances the job needs at once (spot needs N in a zone; default 1)\n"
        "  --json                    one JSON object\n",
        f);
}

int sim_num_arg(const char *name, const char *v, double lo, double hi, double *ret) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || *end || !isfinite(x) || x < lo || x > hi) {
    fprintf(stderr, "spotlab-sim: %s must be a number in %g..%g, not '%s'\n", name, lo, hi, v);
    return -EINVAL;
  }
  *ret = x;
  return 0;
}

static int load_zone(struct zone_trace *z) {
  json_error_t jerr;
  json_t *root = json_load_file(z->path, 0, &jerr);
  if (!root) {
    fprintf(stderr, "spotlab-sim: %s: %s (line %d)\n", z->path, jerr.text, jerr.line);
    return -EINVAL;
  }
  int r = -EINVAL;
  json_t *gap = json_object_get(json_object_get(root, "metadata"), "gap_seconds");
  json_t *data = json_object_get(root, "data"), *prices = json_object_get(root, "prices");
  if (!json_is_number(gap) || json_number_value(gap) <= 0 || json_number_value(gap) > 86400) {
    fprintf(stderr, "spotlab-sim: %s: metadata.gap_seconds must be a number in (0, 86400]\n", z->path);
    goto out;
  }
  if (!json_is_array(data) || !json_array_size(data)) {
    fprintf(stderr, "spotlab-sim: %s: data must be a non-empty array of counts\n", z->path);
    goto out;
  }
  if (prices && (!json_is_array(prices) || json_array_size(prices) != json_array_size(data))) {
    fprintf(stderr, "spotlab-sim: %s: prices must be an array as long as data\n", z->path);
    goto out;
  }
  z->gap_s = json_number_value(gap);
  z->n = json_array_size(data);
  z->avail = calloc(z->n, sizeof *z->avail);
  z->price = prices ? calloc(z->n, sizeof *z->price) : NULL;
  if (!z->avail || (prices && !z->price)) {
    r = -ENOMEM;
    fprintf(stderr, "spotlab-sim: out of memory\n");
    goto out;
  }
  for (size_t i = 0; i < z->n; i++) {
    json_t *v = json_array_get(data, i);
    double x = json_is_number(v) ? json_number_value(v) : -1;
    if (x < 0 || x > 1e6 || x != floor(x)) {
      fprintf(stderr, "spotlab-sim: %s: data[%zu] must be a whole number of instances\n", z->path, i);
      goto out;
    }
    z->avail[i] = (int32_t)x;
    if (z->price) {
      json_t *p = json_array_get(prices, i);
      double y = json_is_number(p) ? json_number_value(p) : -1;
      if (!(y >= 0 && y < 1e6)) {
        fprintf(stderr, "spotlab-sim: %s: prices[%zu] must be a price in USD per hour\n", z->path, i);
        goto out;
      }
      z->price[i] = y;
    }
  }
  r = 0;
out:
  json_decref(root);
  return r;
}

static void free_zones(struct eval_args *a) {
  for (size_t i = 0; i < a->n_zones; i++) {
    free(a->zones[i].avail);
    free(a->zones[i].price);
  }
}

/* 0, 1 after --help, 2 after a usage message. */
static int eval_parse(int argc, char **argv, struct eval_args *a) {
  *a = (struct eval_args){.start_tick = -1, .work_h = -1, .deadline_h = -1, .overhead_h = -1,
                          .spot_usd = DEFAULT_SPOT_USD, .od_usd = DEFAULT_ONDEMAND_USD, .nodes = 1};
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i];
    if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
      eval_usage(stdout);
      return 1;
    }
    if (!strcmp(o, "--json")) {
      a->json = true;
      continue;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "spotlab-sim: unknown option or missing value: '%s'\n", o);
      eval_usage(stderr);
      return 2;
    }
    const char *v = argv[++i];
    int r = 0;
    if (!strcmp(o, "--policy"))
      a->policy = v;
    else if (!strcmp(o, "--trace")) {
      if (a->n_zones == SL_POLICY_ZONES_MAX) {
        fprintf(stderr, "spotlab-sim: at most %d --trace files\n", SL_POLICY_ZONES_MAX);
        return 2;
      }
      a->zones[a->n_zones++].path = v;
    } else if (!strcmp(o, "--start-tick"))
      r = sim_num_arg(o, v, 0, 1e9, &a->start_tick);
    else if (!strcmp(o, "--work"))
      r = sim_num_arg(o, v, 1e-6, 1e5, &a->work_h);
    else if (!strcmp(o, "--deadline"))
      r = sim_num_arg(o, v, 1e-6, 1e6, &a->deadline_h);
    else if (!strcmp(o, "--restart-overhead"))
      r = sim_num_arg(o, v, 0, 1e4, &a->overhead_h);
    else if (!strcmp(o, "--spot-price"))
      r = sim_num_arg(o, v, 0, 1e6, &a->spot_usd);
    else if (!strcmp(o, "--ondemand-price"))
      r = sim_num_arg(o, v, 0, 1e6, &a->od_usd);
    else if (!strcmp(o, "--nodes"))
      r = sim_num_arg(o, v, 1, 1e6, &a->nodes);
    else {
      fprintf(stderr, "spotlab-sim: unknown option '%s'\n", o);
      eval_usage(stderr);
      return 2;
    }
    if (r < 0)
      return 2;
  }
  if (!a->policy || !a->n_zones || a->start_tick < 0 || a->work_h < 0 || a->deadline_h < 0 ||
      a->overhead_h < 0) {
    fprintf(stderr, "spotlab-sim: --policy, --trace, --start-tick, --work, --deadline and"
                    " --restart-overhead are required\n");
    eval_usage(stderr);
    return 2;
  }
  if (a->start_tick != floor(a->start_tick) || a->nodes != floor(a->nodes)) {
    fprintf(stderr, "spotlab-sim: --start-tick and --nodes are whole numbers\n");
    return 2;
  }
  return 0;
}

static json_t *hours_or_null(bool finished, double h) {
  return finished ? json_real(h) : json_null();
}

int sim_eval_main(int argc, char **argv) {
  struct eval_args a;
  int r = eval_parse(argc, argv, &a);
  if (r)
    return r == 1 ? 0 : 2;
  int status = 2;
  struct sl_policy *pol = NULL;
  bool optimal = !strcmp(a.policy, "optimal");
  if (!optimal && sl_policy_new(a.policy, &pol) < 0) {
    fprintf(stderr, "spotlab-sim: unknown policy '%s' (spotlab, uniform-progress, greedy, optimal,"
                    " ondemand)\n", a.policy);
    return 2;
  }
  struct sl_zone_view views[SL_POLICY_ZONES_MAX];
  for (size_t i = 0; i < a.n_zones; i++) {
    if (load_zone(&a.zones[i]) < 0)
      goto out;
    if (a.zones[i].gap_s != a.zones[0].gap_s) {
      fprintf(stderr, "spotlab-sim: %s has ticks of %g s, %s of %g s: zones must share their ticks\n",
              a.zones[i].path, a.zones[i].gap_s, a.zones[0].path, a.zones[0].gap_s);
      goto out;
    }
    views[i] = (struct sl_zone_view){.avail = a.zones[i].avail, .price = a.zones[i].price,
                                     .n = a.zones[i].n, .spot_price = a.spot_usd};
  }
  double gap = a.zones[0].gap_s;
  struct sl_sim_job job = {.window = sl_ticks_floor(a.deadline_h, gap),
                           .work = sl_ticks_ceil(a.work_h, gap),
                           .overhead = sl_ticks_ceil(a.overhead_h, gap)};
  size_t origin = (size_t)a.start_tick;
  for (size_t i = 0; i < a.n_zones; i++) {
    if (origin + (size_t)job.window > a.zones[i].n) {
      fprintf(stderr, "spotlab-sim: the window (ticks %zu..%zu) ends past %s (%zu ticks)\n", origin,
              origin + (size_t)job.window, a.zones[i].path, a.zones[i].n);
      goto out;
    }
  }
  if (job.window < 1) {
    fprintf(stderr, "spotlab-sim: a deadline of %g h is shorter than one tick (%g s)\n", a.deadline_h,
            gap);
    goto out;
  }
  struct sl_market_view m = {.zones = views, .n_zones = a.n_zones, .origin = origin,
                             .ondemand_price = a.od_usd, .gap_s = gap, .nodes = (int)a.nodes};
  struct sl_sim_result res;
  status = 1;
  r = optimal ? sl_policy_optimal(&m, &job, &res) : sl_policy_simulate(pol, &m, &job, &res);
  if (r == -ERANGE) {
    fprintf(stderr, "spotlab-sim: %g h of work and %g h of overhead do not fit in a deadline of"
                    " %g h, even on on-demand\n", a.work_h, a.overhead_h, a.deadline_h);
    goto out;
  }
  if (r == SL_ELIMIT) {
    fprintf(stderr, "spotlab-sim: the optimum of %lld ticks of work with an overhead of %lld ticks"
                    " would need more than 2 GiB: use a trace with longer ticks\n",
            (long long)job.work, (long long)job.overhead);
    goto out;
  }
  if (r < 0) {
    fprintf(stderr, "spotlab-sim: %s\n", sl_strerror(r));
    goto out;
  }
  double h = gap / 3600.0;
  if (a.json) {
    json_t *o = json_pack("{s:s,s:f,s:o,s:b,s:f,s:f,s:I,s:I,s:{s:I,s:I,s:I,s:I,s:f}}", "policy",
                          a.policy, "cost_usd", res.cost_usd, "finish_hours",
                          hours_or_null(res.finished, (double)res.finish_tick * h), "deadline_met",
                          res.deadline_met, "spot_hours", (double)res.spot_ticks * h,
                          "ondemand_hours", (double)res.ondemand_ticks * h, "preemptions",
                          (json_int_t)res.preemptions, "segments", (json_int_t)res.segments,
                          "ticks", "window", (json_int_t)job.window, "work", (json_int_t)job.work,
                          "overhead", (json_int_t)job.overhead, "start", (json_int_t)origin,
                          "gap_seconds", gap);
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(10)) : NULL;
    json_decref(o);
    if (!s) {
      fprintf(stderr, "spotlab-sim: out of memory\n");
      goto out;
    }
    puts(s);
    free(s);
  } else {
    printf("policy        %s\n", a.policy);
    printf("cost          %.2f USD\n", res.cost_usd);
    if (res.finished)
      printf("finished      after %.2f h (deadline %.2f h: %s)\n", (double)res.finish_tick * h,
             (double)job.window * h, res.deadline_met ? "met" : "missed");
    else
      printf("finished      no\n");
    printf("spot          %.2f h\non-demand     %.2f h\npreemptions   %lld\nsegments      %lld\n",
           (double)res.spot_ticks * h, (double)res.ondemand_ticks * h, (long long)res.preemptions,
           (long long)res.segments);
  }
  status = 0;
out:
  sl_policy_free(pol);
  free_zones(&a);
  return status;
}
