/* Job displays: folding gateway events into display state, throttling, and
 * the text/plain renderings.
 *
 * Invariants: events apply at most once and in seq order (a replayed or
 * duplicate event is ignored); every buffer is bounded (series halve when
 * full, the timeline keeps its newest TIMELINE_CAP entries); numbers from
 * the wire that are not finite are ignored. A resumed job's loss curve drops
 * the points past the step it resumed from, so the curve shows one run.
 * A preemption is one timeline entry, completed in place when the job
 * resumes; the state changes in between (preempted, queued) stay out of it. */
#include "display_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sl_json.h"
#include "sl_time.h"

#define DURATION_MAX_S 1e9 /* seconds, about 30 years: an ETA beyond is none, a span is cut there */

/* Seconds from the gateway (any double) as µs within [0, DURATION_MAX_S]. */
static int64_t span_us(double s) { return (int64_t)(fmin(fmax(s, 0), DURATION_MAX_S) * 1e6); }

struct jk_display *jk_display_new(const char *job, const char *kind) {
  struct jk_display *d = calloc(1, sizeof *d);
  if (!d)
    return NULL;
  snprintf(d->job, sizeof d->job, "%s", job ? job : "");
  snprintf(d->kind, sizeof d->kind, "%s", kind ? kind : "");
  snprintf(d->id, sizeof d->id, "spotlab-%s", d->job);
  d->spot = -1;
  d->dirty = true;
  return d;
}

struct jk_display *jk_display_free(struct jk_display *d) {
  if (!d)
    return NULL;
  free(d->train.p);
  free(d->eval.p);
  free(d);
  return NULL;
}

/* ---- folding ------------------------------------------------------------ */

/* Text from the gateway into a field: one line, and whole characters
 * however the field's size cut it (jk_text_clean). */
static void put_str(char *dst, size_t size, const char *v) {
  snprintf(dst, size, "%s", v);
  jk_text_clean(dst, true);
}

static void copy_str(char *dst, size_t size, const json_t *obj, const char *key) {
  const char *v = json_string_value(json_object_get(obj, key));
  if (v)
    put_str(dst, size, v);
}

static bool get_num(const json_t *obj, const char *key, double *ret) {
  const json_t *v = json_object_get(obj, key);
  if (!json_is_number(v))
    return false;
  double x = json_number_value(v);
  if (!isfinite(x))
    return false;
  *ret = x;
  return true;
}

static void series_add(struct series *s, double step, double value) {
  /* A step at or before the last one starts again from there (a resume). */
  while (s->n && s->p[s->n - 1].step >= step)
    s->n--;
  if (s->n == s->cap) {
    if (s->cap < SERIES_CAP) {
      size_t cap = s->cap ? s->cap * 2 : 64;
      struct jk_point *p = realloc(s->p, cap * sizeof *p);
      if (!p)
        return;
      s->p = p;
      s->cap = cap;
    } else {
      for (size_t i = 0; i < s->n / 2; i++)
        s->p[i] = s->p[2 * i];
      s->n /= 2;
    }
  }
  s->p[s->n++] = (struct jk_point){step, value};
}

static void series_cut(struct series *s, double after_step) {
  while (s->n && s->p[s->n - 1].step > after_step)
    s->n--;
}

static void timeline(struct jk_display *d, int64_t t, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void timeline(struct jk_display *d, int64_t t, const char *fmt, ...) {
  struct tl_entry *e;
  if (d->tl_n < TIMELINE_CAP) {
    e = &d->tl[(d->tl_head + d->tl_n++) % TIMELINE_CAP];
  } else {
    e = &d->tl[d->tl_head];
    d->tl_head = (d->tl_head + 1) % TIMELINE_CAP;
    d->tl_dropped++;
  }
  e->time_us = t;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->text, sizeof e->text, fmt, ap);
  va_end(ap);
  jk_text_clean(e->text, true);
}

const struct tl_entry *jk_display_tl(const struct jk_display *d, size_t i) {
  return i < d->tl_n ? &d->tl[(d->tl_head + i) % TIMELINE_CAP] : NULL;
}

static void placement(struct jk_display *d, const json_t *o) {
  copy_str(d->instance, sizeof d->instance, o, "instance");
  copy_str(d->instance_type, sizeof d->instance_type, o, "instance_type");
  copy_str(d->zone, sizeof d->zone, o, "zone");
  const json_t *spot = json_object_get(o, "spot");
  if (json_is_boolean(spot))
    d->spot = json_is_true(spot);
  get_num(o, "price_usd_per_hour", &d->price_usd_per_hour);
  get_num(o, "on_demand_usd_per_hour", &d->on_demand_usd_per_hour);
  double a;
  if (get_num(o, "attempt", &a) && a >= 0 && a < 1e6)
    d->attempt = (int)a;
  if (get_num(o, "nodes", &a) && a >= 1 && a <= 1024)
    d->nodes = (int)a;
}

void jk_display_set_model(struct jk_display *d, const char *model) {
  put_str(d->model, sizeof d->model, model ? model : "");
}

void jk_display_set_kind(struct jk_display *d, const char *kind) {
  put_str(d->kind, sizeof d->kind, kind ? kind : "");
}

void jk_display_summary(struct jk_display *d, const json_t *job) {
  if (!json_is_object(job))
    return;
  copy_str(d->kind, sizeof d->kind, job, "kind");
  copy_str(d->model, sizeof d->model, job, "model");
  copy_str(d->data, sizeof d->data, job, "data");
  if (!d->state[0])
    copy_str(d->state, sizeof d->state, job, "state");
  double v;
  if (get_num(job, "steps", &v) && v > 0 && v < 9e15)
    d->steps = (int64_t)v;
  if (!d->last_seq) {
    placement(d, job);
    get_num(job, "cost_usd", &d->cost_usd);
    get_num(job, "energy_kwh", &d->energy_kwh);
    get_num(job, "co2e_g", &d->co2e_g);
    if (get_num(job, "step", &v) && v >= 0 && v < 9e15)
      d->step = (int64_t)v;
  }
  d->dirty = true;
}

static void rate_add(struct jk_display *d, int64_t t, int64_t step) {
  size_t i = (d->rate_head + d->rate_n) % RATE_WINDOW;
  if (d->rate_n == RATE_WINDOW) {
    i = d->rate_head;
    d->rate_head = (d->rate_head + 1) % RATE_WINDOW;
  } else {
    d->rate_n++;
  }
  d->rate_t[i] = t;
  d->rate_s[i] = step;
}

static void on_metric(struct jk_display *d, const json_t *ev, int64_t t) {
  double step, v;
  if (!get_num(ev, "step", &step) || step < 0 || step > 9e15)
    return;
  if ((int64_t)step < d->step)
    d->rate_n = d->rate_head = 0;
  d->step = (int64_t)step;
  if (get_num(ev, "steps", &v) && v > 0 && v < 9e15)
    d->steps = (int64_t)v;
  if (get_num(ev, "loss", &v)) {
    d->loss = v;
    d->has_loss = true;
    series_add(&d->train, step, v);
  }
  if (get_num(ev, "eval_loss", &v)) {
    d->eval_loss = v;
    d->has_eval_loss = true;
    series_add(&d->eval, step, v);
  }
  if (get_num(ev, "gpu_util_pct", &v) && v >= 0 && v <= 100) {
    d->has_gpu_usage = true;
    d->gpu_util_pct = v;
    get_num(ev, "gpu_mem_used_mib", &d->gpu_mem_used_mib);
    get_num(ev, "gpu_mem_total_mib", &d->gpu_mem_total_mib);
  }
  if (get_num(ev, "tokens_per_s", &v)) {
    d->throughput = v;
    snprintf(d->throughput_unit, sizeof d->throughput_unit, "tokens/s");
  } else if (get_num(ev, "samples_per_s", &v)) {
    d->throughput = v;
    snprintf(d->throughput_unit, sizeof d->throughput_unit, "samples/s");
  }
  rate_add(d, t, d->step);
}

static bool terminal(const char *state) {
  return strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0 ||
         strcmp(state, "cancelled") == 0;
}

/* A step field: a number in [0, 9e15), absent or null otherwise. */
static bool get_step(const json_t *obj, const char *key, int64_t *ret) {
  double v;
  if (!get_num(obj, key, &v) || v < 0 || v >= 9e15)
    return false;
  *ret = (int64_t)v;
  return true;
}

/* The timeline entry of the preemption that waits for its resume, or NULL. */
static struct tl_entry *open_preemption(struct jk_display *d) {
  if (!d->preempt_open || d->preempt_entry < d->tl_dropped || d->preempt_entry - d->tl_dropped >= d->tl_n)
    return NULL;
  return &d->tl[(d->tl_head + d->preempt_entry - d->tl_dropped) % TIMELINE_CAP];
}

static void append(struct tl_entry *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void append(struct tl_entry *e, const char *fmt, ...) {
  size_t n = strlen(e->text);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->text + n, sizeof e->text - n, fmt, ap);
  va_end(ap);
  jk_text_clean(e->text, true);
}

static void on_state(struct jk_display *d, const json_t *ev, int64_t t) {
  const char *state = sl_json_get_str(ev, "state", "");
  const char *reason = sl_json_get_str(ev, "reason", "");
  put_str(d->state, sizeof d->state, state);
  if (*reason || terminal(state))
    put_str(d->reason, sizeof d->reason, reason);
  if (terminal(state))
    d->preempt_open = false;
  /* running ⇄ checkpointing is frequent and says little: not in the timeline;
   * nor are preempted and queued while a preemption's entry tells the story. */
  if (strcmp(state, "checkpointing") == 0 ||
      (strcmp(state, "running") == 0 && d->tl_n && strstr(jk_display_tl(d, d->tl_n - 1)->text, "checkpoint")) ||
      (d->preempt_open && (strcmp(state, "preempted") == 0 || strcmp(state, "queued") == 0)))
    return;
  if (strcmp(state, "succeeded") == 0 && d->steps > 0)
    timeline(d, t, "succeeded at step %lld", (long long)d->step);
  else if (strcmp(state, "succeeded") == 0)
    timeline(d, t, "succeeded");
  else if (*reason)
    timeline(d, t, "%s: %s", state, reason);
  else
    timeline(d, t, "%s", state);
}

static void on_notice(struct jk_display *d, const json_t *ev, int64_t t) {
  const char *action = sl_json_get_str(ev, "action", "terminate");
  const char *inst = sl_json_get_str(ev, "instance", d->instance[0] ? d->instance : "the instance");
  int64_t deadline = sl_json_get_int(ev, "deadline_us", 0);
  long long in_s = -1;
  if (!sl_json_get_bool(ev, "leaving", true)) { /* a preemption, if one comes, has its own */
    timeline(d, t, "rebalance recommendation for %s: it may be reclaimed soon; checkpointing now, "
             "training goes on", inst);
    return;
  }
  if (deadline > 0 && t > 0 && deadline >= t) {
    d->notice_us = t;
    d->notice_deadline_us = deadline;
    in_s = llround((double)(deadline - t) / SL_US_PER_S);
  }
  if (strcmp(action, "rebalance") == 0)
    timeline(d, t, "rebalance recommendation for %s: it may be reclaimed soon; checkpointing now, "
             "the job moves", inst);
  else if (strcmp(action, "sigterm") == 0)
    timeline(d, t, "%s is shutting down (SIGTERM); checkpointing now", inst);
  else if (in_s >= 0)
    timeline(d, t, "preemption notice for %s: %s in %lld s; checkpointing now", inst, action, in_s);
  else
    timeline(d, t, "preemption notice for %s: %s; checkpointing now", inst, action);
}

/* One timeline entry tells a preemption: "preempted at step N (notice 120 s)
 * → checkpoint durable at step N", to which the resume adds "→ resumed on
 * TYPE in ZONE after S s". Run jobs have no steps (step is null). */
static void on_preempted(struct jk_display *d, const json_t *ev, int64_t t) {
  bool notice = sl_json_get_bool(ev, "notice", false);
  char how[48];
  if (!notice)
    snprintf(how, sizeof how, "no notice");
  else if (d->notice_deadline_us > d->notice_us)
    snprintf(how, sizeof how, "notice %lld s",
             llround((double)(d->notice_deadline_us - d->notice_us) / SL_US_PER_S));
  else
    snprintf(how, sizeof how, "with notice");
  d->notice_us = d->notice_deadline_us = 0;
  int64_t durable = 0;
  bool has_step = get_step(ev, "step", &durable);
  if (strcmp(d->kind, "run") == 0 || !has_step) {
    timeline(d, t, "preempted (%s) → %s", how,
             strcmp(d->kind, "run") != 0 ? "starts again"
             : notice                    ? "checkpoint folder saved"
                                         : "checkpoint folder as last synced");
  } else if (strcmp(d->kind, "train") != 0) {
    timeline(d, t, "preempted (%s) → starts again", how);
  } else {
    int64_t at = d->step > durable ? d->step : durable, lost = at - durable;
    char lost_text[48] = "";
    if (lost > 0)
      snprintf(lost_text, sizeof lost_text, ", %lld step%s lost", (long long)lost, lost == 1 ? "" : "s");
    if (durable > 0 || d->checkpoints > 0)
      timeline(d, t, "preempted at step %lld (%s) → checkpoint durable at step %lld%s", (long long)at, how,
               (long long)durable, lost_text);
    else
      timeline(d, t, "preempted at step %lld (%s) → no checkpoint yet, starts again from step 0%s", (long long)at,
               how, lost_text);
  }
  d->preempt_open = true;
  d->preempt_entry = d->tl_dropped + d->tl_n - 1;
}

static void on_resumed(struct jk_display *d, const json_t *ev, int64_t t) {
  int64_t from = 0;
  bool has_from = get_step(ev, "from_step", &from);
  double after = -1;
  get_num(ev, "after_s", &after);
  if (has_from) {
    series_cut(&d->train, (double)from);
    series_cut(&d->eval, (double)from);
    if (strcmp(d->kind, "train") == 0)
      d->step = from;
  }
  d->rate_n = d->rate_head = 0;
  const char *type = sl_json_get_str(ev, "instance_type", "?"), *zone = sl_json_get_str(ev, "zone", "?");
  char when[48] = "";
  if (after >= 0)
    snprintf(when, sizeof when, " after %.0f s", after);
  struct tl_entry *e = open_preemption(d);
  if (e) {
    append(e, " → resumed on %s in %s%s", type, zone, when);
  } else if (d->attempt > 1) { /* the preemption's entry is gone from the timeline */
    if (has_from)
      timeline(d, t, "resumed on %s in %s%s from step %lld", type, zone, when, (long long)from);
    else
      timeline(d, t, "resumed on %s in %s%s", type, zone, when);
  } else { /* a first attempt that starts from a checkpoint: eval or sample of a trained model */
    if (has_from)
      timeline(d, t, "restored %s from its checkpoint at step %lld on %s in %s", d->model[0] ? d->model : "the model",
               (long long)from, type, zone);
    else
      timeline(d, t, "restored its checkpoint on %s in %s", type, zone);
  }
  d->preempt_open = false;
}

/* The worker restored an older checkpoint than the one resumed from (that
 * one was gone or corrupt): the curve goes back to its step, and the
 * timeline says why. */
static void on_restored(struct jk_display *d, const json_t *ev, int64_t t) {
  int64_t from = 0;
  if (!get_step(ev, "from_step", &from))
    return;
  series_cut(&d->train, (double)from);
  series_cut(&d->eval, (double)from);
  if (strcmp(d->kind, "train") == 0)
    d->step = from;
  char why[300];
  put_str(why, sizeof why, sl_json_get_str(ev, "passed_over", ""));
  timeline(d, t, "restored the checkpoint of step %lld instead (%s)", (long long)from,
           why[0] ? why : "the newer one was not usable");
}

/* An idle warning or shutdown, from a job event or a session notice. */
static void on_idle(struct jk_display *d, const json_t *o, int64_t t) {
  const char *what = sl_json_get_str(o, "what", "notebook"), *action = sl_json_get_str(o, "action", "");
  bool notebook = strcmp(what, "notebook") == 0;
  double in_s = -1;
  get_num(o, "in_s", &in_s);
  if (strcmp(action, "warning") == 0 && in_s >= 0)
    timeline(d, t, "idle warning: %s stops in %.0f s%s", what, in_s, notebook ? " unless a cell runs" : "");
  else if (strcmp(action, "warning") == 0)
    timeline(d, t, "idle warning: %s stops soon%s", what, notebook ? " unless a cell runs" : "");
  else if (strcmp(action, "shutdown") == 0 && notebook)
    timeline(d, t, "idle shutdown: notebook stopped, its workers shut down (the next job starts new ones)");
  else if (strcmp(action, "shutdown") == 0)
    timeline(d, t, "idle shutdown: %s stopped", what);
  else
    timeline(d, t, "idle %s: %s", what, action);
}

/* The device of this attempt (protocols.md §2 "device"): "cpu" with its
 * threads, or spotlab-train's description of its GPU ("cuda:0 (...)") with
 * the worker's gpus, gpu_model and memory_mib. A new attempt may run
 * elsewhere: its GPU usage starts afresh. */
static void on_device(struct jk_display *d, const json_t *ev) {
  const char *dev = sl_json_get_str(ev, "device", "");
  double v;
  d->has_device = true;
  d->cuda = strncmp(dev, "cuda", 4) == 0;
  d->has_gpu_usage = false;
  d->gpus = d->cuda ? 1 : 0;
  d->world_size = 1;
  d->threads = 0;
  d->gpu_memory_mib = 0;
  d->gpu_model[0] = 0;
  if (get_num(ev, "gpus", &v) && v >= 1 && v <= 1024)
    d->gpus = (int)v;
  if (get_num(ev, "world_size", &v) && v >= 1 && v <= 65536)
    d->world_size = (int)v;
  if (get_num(ev, "threads", &v) && v >= 1 && v <= 65536)
    d->threads = (long long)v;
  get_num(ev, "memory_mib", &d->gpu_memory_mib);
  copy_str(d->gpu_model, sizeof d->gpu_model, ev, "gpu_model");
  d->gpus_unused = !d->cuda && get_num(ev, "gpus_unused", &v) && v >= 1 && v <= 1024 ? (int)v : 0;
  d->gpus_unusable[0] = 0;
  copy_str(d->gpus_unusable, sizeof d->gpus_unusable, ev, "gpus_unusable");
  put_str(d->precision, sizeof d->precision, sl_json_get_str(ev, "precision", ""));
}

void jk_display_device_text(const struct jk_display *d, char *buf, size_t size) {
  buf[0] = 0;
  if (!d->has_device)
    return;
  size_t n = 0;
#define ADD(...) (n += (size_t)snprintf(buf + (n < size ? n : size), n < size ? size - n : 0, __VA_ARGS__))
  if (!d->cuda) {
    ADD("CPU");
    if (d->threads > 0)
      ADD(", %lld thread%s", d->threads, d->threads == 1 ? "" : "s");
  } else {
    ADD("%d x %s", d->gpus, d->gpu_model[0] ? d->gpu_model : "GPU");
    if (d->gpu_memory_mib > 0)
      ADD(" (%.1f GiB each)", d->gpu_memory_mib / 1024);
    if (d->world_size > d->gpus)
      ADD(", %d ranks in all", d->world_size);
  }
  if (d->precision[0])
    ADD(", %s", d->precision);
  if (!d->cuda && d->gpus_unused)
    ADD("; the instance's %d x %s cannot be used: %s", d->gpus_unused,
        d->gpu_model[0] ? d->gpu_model : "GPU", d->gpus_unusable[0] ? d->gpus_unusable : "?");
  if (d->cuda && d->has_gpu_usage) {
    ADD("; %.0f%% busy", d->gpu_util_pct);
    if (d->gpu_mem_total_mib > 0)
      ADD(", %.1f of %.1f GiB", d->gpu_mem_used_mib / 1024, d->gpu_mem_total_mib / 1024);
  }
#undef ADD
}

/* deadline=: the plan in force; a change of market, or a move, goes in
 * the timeline with the policy's reason. */
static void on_plan(struct jk_display *d, const json_t *ev, int64_t t) {
  double v;
  const char *mode = sl_json_get_str(ev, "mode", ""), *move = sl_json_get_str(ev, "move", NULL);
  bool changed = !d->has_plan || strcmp(mode, d->plan_mode) != 0;
  d->has_plan = true;
  d->plan_us = t;
  d->plan_deadline_us = sl_json_get_int(ev, "deadline_us", 0);
  d->plan_left_s = get_num(ev, "left_s", &v) && v >= 0 ? v : 0;
  d->plan_slack_s = get_num(ev, "slack_s", &v) ? v : 0;
  d->plan_scale = get_num(ev, "time_scale", &v) && v > 0 ? v : 1;
  put_str(d->plan_mode, sizeof d->plan_mode, mode);
  copy_str(d->plan_text, sizeof d->plan_text, ev, "text");
  const char *why = sl_json_get_str(ev, "why", "");
  if (move)
    timeline(d, t, "moving %s: %s", move, why);
  else if (changed)
    timeline(d, t, "plan: %s (%s)", d->plan_text, why);
}

void jk_display_deadline_text(const struct jk_display *d, char *buf, size_t size) {
  buf[0] = 0;
  if (!d->has_plan)
    return;
  char when[32] = "?", left[32], slack[32];
  time_t secs = (time_t)(d->plan_deadline_us / SL_US_PER_S);
  struct tm tm;
  if (d->plan_deadline_us > 0 && localtime_r(&secs, &tm))
    strftime(when, sizeof when,
             (double)d->plan_deadline_us - (double)d->plan_us > 86400.0 * SL_US_PER_S ? "%b %d %H:%M" : "%H:%M",
             &tm);
  if (terminal(d->state)) {
    bool met = strcmp(d->state, "succeeded") == 0 && d->last_us <= d->plan_deadline_us;
    snprintf(buf, size, "deadline %s: %s", when,
             met ? "met" : strcmp(d->state, "succeeded") == 0 ? "missed" : d->state);
    return;
  }
  /* the time left at the plan event, less what the provider's clock ran since */
  double left_s = d->plan_left_s - ((double)d->last_us - (double)d->plan_us) / 1e6 * d->plan_scale;
  sl_time_format_duration(span_us(left_s), left, sizeof left);
  sl_time_format_duration(span_us(d->plan_slack_s), slack, sizeof slack);
  char clock[48] = "";
  if (d->plan_scale != 1)
    snprintf(clock, sizeof clock, " on the provider's clock, x%g", d->plan_scale);
  snprintf(buf, size, "deadline %s (%s left%s), slack %s: %s", when, left, clock, slack, d->plan_text);
}

static void on_other(struct jk_display *d, const char *kind, const json_t *ev, int64_t t, int64_t seq) {
  double v = 0;
  if (strcmp(kind, "plan") == 0) {
    on_plan(d, ev, t);
  } else if (strcmp(kind, "device") == 0) {
    on_device(d, ev);
  } else if (strcmp(kind, "warning") == 0) {
    timeline(d, t, "warning: %s", sl_json_get_str(ev, "text", "?"));
  } else if (strcmp(kind, "placed") == 0) {
    placement(d, ev);
    if (d->nodes > 1) /* a gang: the price is each instance's */
      timeline(d, t, "placed on %d × %s in %s, %s at $%.4f/h each (rank 0: %s)", d->nodes,
               d->instance_type, d->zone, d->spot == 0 ? "on-demand" : "spot",
               d->price_usd_per_hour, d->instance);
    else
      timeline(d, t, "placed on %s in %s, %s at $%.4f/h (%s)", d->instance_type, d->zone,
               d->spot == 0 ? "on-demand" : "spot", d->price_usd_per_hour, d->instance);
  } else if (strcmp(kind, "checkpoint") == 0) {
    d->checkpoints++;
    if (get_num(ev, "step", &v) && v >= 0 && v < 9e15)
      d->checkpoint_step = (int64_t)v;
    if (d->checkpoints <= 3 || d->checkpoints % 10 == 0)
      timeline(d, t, "checkpoint at step %lld (%lld so far)", (long long)d->checkpoint_step,
               (long long)d->checkpoints);
  } else if (strcmp(kind, "checkpoint_interval") == 0) {
    if (get_num(ev, "steps", &v) && v >= 1 && v < 9e15) {
      d->ckpt_every = (int64_t)v;
      d->ckpt_write_s = d->ckpt_mtbp_s = 0;
      get_num(ev, "write_s", &d->ckpt_write_s);
      get_num(ev, "mtbp_s", &d->ckpt_mtbp_s);
    }
  } else if (strcmp(kind, "notice") == 0) {
    on_notice(d, ev, t);
  } else if (strcmp(kind, "preempted") == 0) {
    on_preempted(d, ev, t);
  } else if (strcmp(kind, "resumed") == 0) {
    on_resumed(d, ev, t);
  } else if (strcmp(kind, "restored") == 0) {
    on_restored(d, ev, t);
  } else if (strcmp(kind, "cost") == 0) {
    get_num(ev, "cost_usd", &d->cost_usd);
    get_num(ev, "on_demand_usd", &d->on_demand_usd);
    get_num(ev, "energy_kwh", &d->energy_kwh);
    get_num(ev, "co2e_g", &d->co2e_g);
  } else if (strcmp(kind, "result") == 0) {
    if (get_num(ev, "eval_loss", &d->result_eval_loss))
      d->has_result = true;
  } else if (strcmp(kind, "idle") == 0) {
    on_idle(d, ev, t);
  } else if (strcmp(kind, "gateway") == 0) {
    const char *action = sl_json_get_str(ev, "action", "?");
    if (strcmp(action, "restarted") == 0)
      timeline(d, t, "gateway restarted; following again from event %lld", (long long)seq);
    else
      timeline(d, t, "gateway %s", action);
  }
}

int jk_display_notice(struct jk_display *d, const json_t *notice) {
  const char *event = sl_json_get_str(notice, "event", "");
  if (strcmp(event, "budget") == 0) { /* the gateway's sentence: an alert, or a cap */
    timeline(d, sl_json_get_int(notice, "time_us", 0), "%.300s", sl_json_get_str(notice, "text", "budget notice"));
    d->dirty = true;
    return 1;
  }
  if (strcmp(event, "idle") != 0)
    return 0;
  on_idle(d, notice, sl_json_get_int(notice, "time_us", 0));
  d->dirty = true;
  return 1;
}

int jk_display_event(struct jk_display *d, const json_t *ev) {
  if (strcmp(sl_json_get_str(ev, "job", ""), d->job) != 0)
    return -1;
  int64_t seq = sl_json_get_int(ev, "seq", 0);
  if (seq <= d->last_seq)
    return 0;
  d->last_seq = seq;
  int64_t t = sl_json_get_int(ev, "time_us", 0);
  if (t > 0) {
    if (!d->first_us)
      d->first_us = t;
    d->last_us = t;
  }
  const char *kind = sl_json_get_str(ev, "event", "");
  if (strcmp(kind, "metric") == 0)
    on_metric(d, ev, t);
  else if (strcmp(kind, "state") == 0)
    on_state(d, ev, t);
  else if (strcmp(kind, "output") != 0)
    on_other(d, kind, ev, t, seq);
  if (strcmp(kind, "output") != 0)
    d->dirty = true;
  return 1;
}

/* ---- queries ------------------------------------------------------------ */

const char *jk_display_id(const struct jk_display *d) { return d->id; }
const char *jk_display_job(const struct jk_display *d) { return d->job; }
const char *jk_display_state(const struct jk_display *d) { return d->state; }
const char *jk_display_reason(const struct jk_display *d) { return d->reason; }
bool jk_display_finished(const struct jk_display *d) { return terminal(d->state); }
int64_t jk_display_last_seq(const struct jk_display *d) { return d->last_seq; }
int64_t jk_display_step(const struct jk_display *d) { return d->step; }

bool jk_display_eval_result(const struct jk_display *d, double *ret_loss) {
  if (!d->has_result)
    return false;
  *ret_loss = d->result_eval_loss;
  return true;
}

const struct jk_point *jk_display_series(const struct jk_display *d, bool eval, size_t *ret_n) {
  *ret_n = eval ? d->eval.n : d->train.n;
  return eval ? d->eval.p : d->train.p;
}

double jk_display_fraction(const struct jk_display *d) {
  if (d->steps <= 0)
    return -1;
  if (strcmp(d->state, "succeeded") == 0)
    return 1;
  double f = (double)d->step / (double)d->steps;
  return f < 0 ? 0 : f > 1 ? 1 : f;
}

double jk_display_eta_s(const struct jk_display *d) {
  if (d->rate_n < 2 || d->steps <= 0 || jk_display_finished(d))
    return -1;
  size_t first = d->rate_head, last = (d->rate_head + d->rate_n - 1) % RATE_WINDOW;
  /* in doubles: times and steps come from the gateway, whatever their range */
  double dt = ((double)d->rate_t[last] - (double)d->rate_t[first]) / 1e6;
  double ds = (double)d->rate_s[last] - (double)d->rate_s[first];
  if (dt <= 0 || ds <= 0)
    return -1;
  double left = (double)d->steps - (double)d->step;
  double eta = left <= 0 ? 0 : left / (ds / dt);
  return eta < DURATION_MAX_S ? eta : -1;
}

/* ---- throttling --------------------------------------------------------- */

bool jk_display_dirty(const struct jk_display *d) { return d->dirty; }
bool jk_display_shown(const struct jk_display *d) { return d->shown; }

bool jk_display_due(const struct jk_display *d, int64_t now_us) {
  return d->dirty && (!d->shown || now_us - d->sent_us >= JK_DISPLAY_MIN_INTERVAL_US);
}

int64_t jk_display_next_us(const struct jk_display *d) {
  if (!d->dirty)
    return INT64_MAX;
  return d->shown ? d->sent_us + JK_DISPLAY_MIN_INTERVAL_US : 0;
}

void jk_display_sent(struct jk_display *d, int64_t now_us) {
  d->dirty = false;
  d->shown = true;
  d->sent_us = now_us;
}

/* ---- text --------------------------------------------------------------- */

static void bar(struct jk_dbuf *b, double frac, int width) {
  int fill = frac < 0 ? 0 : (int)(frac * width + 0.5);
  jk_dbuf_printf(b, "[");
  for (int i = 0; i < width; i++)
    jk_dbuf_printf(b, "%c", i < fill ? '#' : '.');
  jk_dbuf_printf(b, "]");
}

static void eta_text(const struct jk_display *d, char *buf, size_t size) {
  double eta = jk_display_eta_s(d);
  if (eta < 0)
    snprintf(buf, size, "ETA --");
  else {
    char dur[32];
    snprintf(buf, size, "ETA %s", sl_time_format_duration((int64_t)(eta * 1e6), dur, sizeof dur));
  }
}

static void what_line(const struct jk_display *d, struct jk_dbuf *b) {
  jk_dbuf_printf(b, "spotlab job %s", d->job);
  if (d->kind[0])
    jk_dbuf_printf(b, ": %s", d->kind);
  if (d->model[0])
    jk_dbuf_printf(b, " %s", d->model);
  if (d->data[0])
    jk_dbuf_printf(b, " on %s", d->data);
  jk_dbuf_printf(b, " (%s)\n", d->state[0] ? d->state : "submitted");
}

char *jk_display_text(const struct jk_display *d) {
  struct jk_dbuf b = {0};
  what_line(d, &b);
  double frac = jk_display_fraction(d);
  if (frac >= 0) {
    char eta[48];
    eta_text(d, eta, sizeof eta);
    bar(&b, frac, 30);
    jk_dbuf_printf(&b, " %3.0f%%  step %lld/%lld  %s\n", frac * 100, (long long)d->step, (long long)d->steps, eta);
  }
  if (d->has_loss) {
    jk_dbuf_printf(&b, "loss %.4f", d->loss);
    if (d->has_eval_loss)
      jk_dbuf_printf(&b, "  eval loss %.4f", d->eval_loss);
    if (d->throughput > 0)
      jk_dbuf_printf(&b, "  %.0f %s", d->throughput, d->throughput_unit);
    jk_dbuf_printf(&b, "\n");
  }
  if (d->instance_type[0]) {
    if (d->nodes > 1)
      jk_dbuf_printf(&b, "%d × ", d->nodes);
    jk_dbuf_printf(&b, "%s in %s, %s $%.4f/h", d->instance_type, d->zone[0] ? d->zone : "?",
            d->spot == 0 ? "on-demand" : "spot", d->price_usd_per_hour);
    if (d->nodes > 1)
      jk_dbuf_printf(&b, " each");
    if (d->on_demand_usd_per_hour > 0 && d->spot != 0)
      jk_dbuf_printf(&b, " (on-demand $%.4f/h)", d->on_demand_usd_per_hour);
    if (d->attempt > 1)
      jk_dbuf_printf(&b, ", attempt %d", d->attempt);
    jk_dbuf_printf(&b, "\n");
  }
  char device[512];
  jk_display_device_text(d, device, sizeof device);
  if (device[0])
    jk_dbuf_printf(&b, "device: %s\n", device);
  if (d->cost_usd > 0 || d->on_demand_usd > 0) {
    jk_dbuf_printf(&b, "cost $%.4f", d->cost_usd);
    if (d->on_demand_usd > 0) {
      double saved = d->on_demand_usd - d->cost_usd;
      jk_dbuf_printf(&b, ", saved $%.4f (%.0f%%) against on-demand", saved, 100 * saved / d->on_demand_usd);
    }
    jk_dbuf_printf(&b, "\n");
  }
  if (d->energy_kwh > 0)
    jk_dbuf_printf(&b, "energy %.3g kWh, %.3g g CO2e (estimate)\n", d->energy_kwh, d->co2e_g);
  char deadline[400];
  jk_display_deadline_text(d, deadline, sizeof deadline);
  if (deadline[0])
    jk_dbuf_printf(&b, "%s\n", deadline);
  if (d->checkpoints > 0)
    jk_dbuf_printf(&b, "checkpoints: %lld, the last at step %lld\n", (long long)d->checkpoints,
                   (long long)d->checkpoint_step);
  if (d->ckpt_every > 0)
    jk_dbuf_printf(&b, "checkpoint every %lld steps (auto: write %.3g s, mean time to preemption %.3g h)\n",
                   (long long)d->ckpt_every, d->ckpt_write_s, d->ckpt_mtbp_s / 3600);
  if (d->tl_n) {
    jk_dbuf_printf(&b, "timeline:\n");
    if (d->tl_dropped)
      jk_dbuf_printf(&b, "  ... %zu earlier events\n", d->tl_dropped);
    for (size_t i = 0; i < d->tl_n; i++) {
      const struct tl_entry *e = jk_display_tl(d, i);
      char dur[32] = "";
      sl_time_format_duration(e->time_us > d->first_us ? e->time_us - d->first_us : 0, dur, sizeof dur);
      jk_dbuf_printf(&b, "  +%-8s %s\n", dur, e->text);
    }
  }
  return jk_dbuf_done(&b);
}

char *jk_display_line(const struct jk_display *d, int width) {
  struct jk_dbuf b = {0};
  jk_dbuf_printf(&b, "%s %-12s ", d->job, d->state[0] ? d->state : "submitted");
  double frac = jk_display_fraction(d);
  if (frac >= 0) {
    char eta[48];
    eta_text(d, eta, sizeof eta);
    bar(&b, frac, 20);
    jk_dbuf_printf(&b, " %3.0f%% %lld/%lld %s", frac * 100, (long long)d->step, (long long)d->steps, eta);
  }
  if (d->has_loss)
    jk_dbuf_printf(&b, " loss %.4f", d->loss);
  if (d->cost_usd > 0)
    jk_dbuf_printf(&b, " $%.4f", d->cost_usd);
  char *s = jk_dbuf_done(&b);
  if (s && width > 0 && (int)strlen(s) > width)
    s[width] = '\0';
  return s;
}
