/* Spec → argv.
 *
 * A spec is {"model":DEF,"data":DEF,"options":{...}} for train/eval/sample and
 * {"script":TEXT} for run. A DEF is {"type":..,"args":[..],"options":{..}},
 * or a session definition {"name":..,"kind":..,"spec":{...}} wrapping one.
 * Values are JSON numbers, strings, booleans or the session's tagged values
 * ({"t":"num","v":..}). Which options become which flags, for which kind
 * of job and which model, is spotlab-train's own table (kernels/train_opts.h),
 * the one the cell language is built from. Placement options (spot,
 * max_price, ...) are the gateway's business and are skipped here; gpus,
 * precision and device choose the device (wk_spec_device) against this
 * instance's GPUs; any other unknown option is an error, so a typo never
 * trains silently with a default. */
#include "spec.h"

#include "sl_err.h"
#include "sl_opt.h"
#include "train_opts.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum vtype { V_INT, V_NUM, V_STR };

/* Options of a spec that are not spotlab-train's: placement and limits are
 * the gateway's (the kernel declares them, kernel/lang_help.c), the
 * checkpoint interval, the prompt and the device have their own code below. */
static const char *const skipped_options[] = {
  "gpus", "nodes", "spot", "max_price", "instance", "region", "deadline", "detach",
  "checkpoint_every", "prompt", "precision", "device", NULL,
};

struct av {
  char **v;
  size_t n;
  char *err;
  size_t err_size;
};

static int fail(struct av *a, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(struct av *a, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (a->err && a->err_size) vsnprintf(a->err, a->err_size, fmt, ap);
  va_end(ap);
  return code;
}

static int push(struct av *a, const char *s) {
  if (a->n + 1 >= WK_ARGV_MAX) return fail(a, SL_ELIMIT, "too many arguments");
  if (!(a->v[a->n] = strdup(s))) return -ENOMEM;
  a->n++;
  return 0;
}

static int push2(struct av *a, const char *flag, const char *value) {
  int r = push(a, flag);
  return r < 0 ? r : push(a, value);
}

/* Unwraps a session tagged value {"t":..,"v":..}. */
static const json_t *plain(const json_t *v) {
  if (json_is_object(v) && json_is_string(json_object_get(v, "t")) && json_object_get(v, "v"))
    return json_object_get(v, "v");
  return v;
}

static int format_value(struct av *a, const char *name, const json_t *v, enum vtype t,
                        char *out, size_t size) {
  v = plain(v);
  if (t == V_STR) {
    if (!json_is_string(v)) return fail(a, SL_ETYPE, "option %s must be a string", name);
    if (strlen(json_string_value(v)) >= size) return fail(a, SL_ELIMIT, "option %s is too long", name);
    snprintf(out, size, "%s", json_string_value(v));
    return 0;
  }
  double d;
  if (json_is_number(v)) {
    d = json_number_value(v);
  } else if (json_is_string(v) && *json_string_value(v)) {
    char *end;
    d = strtod(json_string_value(v), &end);
    if (*end) return fail(a, SL_ETYPE, "option %s must be a number", name);
  } else {
    return fail(a, SL_ETYPE, "option %s must be a number", name);
  }
  if (!isfinite(d) || d < 0) return fail(a, SL_ECONFIG, "option %s must be a finite number >= 0", name);
  if (t == V_INT) {
    if (d != floor(d) || d > 1e15) return fail(a, SL_ETYPE, "option %s must be a whole number", name);
    snprintf(out, size, "%lld", (long long)d);
  } else {
    snprintf(out, size, "%.9g", d);
  }
  return 0;
}

/* The row of spotlab-train's table for the spec option name (spelled as in
 * the cell language, '_' not '-'), or NULL. */
static const struct sl_opt *train_opt(const char *name) {
  const struct sl_opt *o = sl_opt_find(tc_train_opts, tc_train_opts_n, name);
  return o && !strcmp(o->name, name) ? o : NULL;
}

static enum vtype vtype_of(const struct sl_opt *o) {
  return o->type == SL_OPT_STR ? V_STR : o->type == SL_OPT_NUM ? V_NUM : V_INT;
}

/* The value of option o as spotlab-train's flag takes it, bounds checked
 * against the table so the worker refuses what spotlab-train would. */
static int flag_value(struct av *a, const struct sl_opt *o, const json_t *v, char *out, size_t size) {
  char label[96], why[256];
  int r = format_value(a, o->name, v, vtype_of(o), out, size);
  if (r < 0) return r;
  snprintf(label, sizeof label, "option %s", o->name);
  if (tc_train_opt_check(o, label, out, why, sizeof why) < 0) return fail(a, SL_ECONFIG, "%s", why);
  return 0;
}

static bool is_skipped(const char *name) {
  for (size_t i = 0; skipped_options[i]; i++)
    if (!strcmp(skipped_options[i], name)) return true;
  return false;
}

/* Adds a flag for every option of obj that spotlab-train's table gives the
 * context want: a kind of job's, or with model (its type) a model's. A job
 * option of another kind (steps on eval) is left out; one the table does
 * not have fails unless another part handles it, and so does a model option
 * of the other model, so a typo never trains silently with a default. */
static int add_options(struct av *a, unsigned want, const char *model, const json_t *obj) {
  const char *what = model ? "model" : "job";
  unsigned scope = model ? TC_OPT_GPT | TC_OPT_MLP : TC_OPT_TRAIN | TC_OPT_EVAL | TC_OPT_SAMPLE;
  if (!obj) return 0;
  if (!json_is_object(obj)) return fail(a, SL_ETYPE, "%s options must be an object", what);
  const char *name;
  json_t *v;
  json_object_foreach((json_t *)obj, name, v) {
    const struct sl_opt *o = train_opt(name);
    if (o && (o->contexts & want)) {
      char buf[256], flag[96];
      int r = flag_value(a, o, v, buf, sizeof buf);
      sl_opt_flag_name(o, flag, sizeof flag);
      if (r < 0 || (r = push2(a, flag, buf)) < 0) return r;
    } else if (o && (o->contexts & scope)) {
      if (model) return fail(a, SL_ENAME, "model option \"%s\" does not apply to %s", name, model);
    } else if (model || !is_skipped(name)) {
      return fail(a, SL_ENAME, "unknown %s option \"%s\"", what, name);
    }
  }
  return 0;
}

/* The context bit of a job kind in spotlab-train's table. */
static unsigned kind_context(enum wk_kind kind) {
  return kind == WK_KIND_TRAIN ? TC_OPT_TRAIN : kind == WK_KIND_EVAL ? TC_OPT_EVAL
                                             : kind == WK_KIND_SAMPLE ? TC_OPT_SAMPLE : 0;
}

static const json_t *unwrap_def(const json_t *def) {
  const json_t *inner = json_object_get(def, "spec");
  return json_is_object(inner) ? inner : def;
}

static int add_model(struct av *a, const json_t *spec) {
  const json_t *m = json_object_get(spec, "model");
  if (!json_is_object(m)) return fail(a, SL_ECONFIG, "spec has no model definition");
  m = unwrap_def(m);
  const char *type = json_string_value(json_object_get(m, "type"));
  if (!type || (strcmp(type, "gpt") && strcmp(type, "mlp")))
    return fail(a, SL_ECONFIG, "model type must be gpt or mlp");
  int r = push2(a, "--model", type);
  if (r < 0) return r;
  return add_options(a, tc_train_context(type), type, json_object_get(m, "options"));
}

/* The data argument: text("PATH"|"moby-dick") or fashion_mnist(["FOLDER"]). */
static int add_data(struct av *a, const json_t *spec, bool required) {
  const json_t *d = json_object_get(spec, "data");
  if (!d || json_is_null(d)) return required ? fail(a, SL_ECONFIG, "spec has no data definition") : 0;
  if (json_is_string(d)) return push2(a, "--data", json_string_value(d));
  if (!json_is_object(d)) return fail(a, SL_ETYPE, "data must be an object");
  d = unwrap_def(d);
  const char *type = json_string_value(json_object_get(d, "type"));
  const json_t *args = json_object_get(d, "args");
  const json_t *arg0 = plain(json_array_get(args, 0));
  const char *path = json_string_value(arg0);
  if (!path) path = json_string_value(plain(json_object_get(json_object_get(d, "options"), "path")));
  if (type && !strcmp(type, "text")) {
    if (!path || !*path) return fail(a, SL_ECONFIG, "text data needs a path or \"moby-dick\"");
    return push2(a, "--data", path);
  }
  if (type && (!strcmp(type, "fashion_mnist") || !strcmp(type, "fashion-mnist")))
    return push2(a, "--data", path && *path ? path : "fashion-mnist");
  return fail(a, SL_ECONFIG, "data type must be text or fashion_mnist");
}

static int add_common(struct av *a, enum wk_kind kind, const json_t *spec,
                      const struct wk_spec_paths *p) {
  char buf[64];
  int r = push2(a, "--ckpt-dir", p->ckpt_dir);
  if (r < 0) return r;
  snprintf(buf, sizeof buf, "fd:%d", p->metrics_fd);
  if ((r = push2(a, "--metrics", buf)) < 0) return r;
  if (kind == WK_KIND_TRAIN && p->control_fd >= 0) {
    snprintf(buf, sizeof buf, "fd:%d", p->control_fd);
    if ((r = push2(a, "--control", buf)) < 0) return r;
  }
  return add_options(a, kind_context(kind), NULL, json_object_get(spec, "options"));
}

static int add_checkpoint_every(struct av *a, const json_t *spec, const struct wk_spec_paths *p) {
  char buf[64];
  if (p->checkpoint_every > 0) {
    snprintf(buf, sizeof buf, "%lld", p->checkpoint_every);
    return push2(a, "--checkpoint-every", buf);
  }
  const json_t *v = plain(json_object_get(json_object_get(spec, "options"), "checkpoint_every"));
  if (!v || (json_is_string(v) && !strcmp(json_string_value(v), "auto"))) return 0;
  int r = flag_value(a, train_opt("checkpoint_every"), v, buf, sizeof buf);
  return r < 0 ? r : push2(a, "--checkpoint-every", buf);
}

/* ---- the device ---- */


/* A whole-number option of opts in [0, max] into *ret; absent leaves *ret. */
static int whole_option(struct av *a, const json_t *opts, const char *name, long long max, long long *ret) {
  const json_t *v = plain(json_object_get(opts, name));
  if (!v) return 0;
  double d = json_is_number(v) ? json_number_value(v) : -1;
  if (!json_is_number(v) || d != floor(d) || d < 0 || d > (double)max)
    return fail(a, SL_ETYPE, "option %s must be a whole number from 0 to %lld", name, max);
  *ret = (long long)d;
  return 0;
}

/* A string option of opts that must be one of two words; absent: NULL. */
static int word_option(struct av *a, const json_t *opts, const char *name, const char *w1, const char *w2,
                       const char **ret) {
  const json_t *v = plain(json_object_get(opts, name));
  if (!v) return 0;
  if (!json_is_string(v)) return fail(a, SL_ETYPE, "option %s must be a string: %s or %s", name, w1, w2);
  const char *s = json_string_value(v);
  if (strcmp(s, w1) && strcmp(s, w2)) return fail(a, SL_ECONFIG, "option %s must be %s or %s", name, w1, w2);
  *ret = s;
  return 0;
}

/* -ENODEV: the job asked for GPUs this instance does not have. */
static int too_few_gpus(struct av *a, const char *asked, const struct wk_spec_paths *p) {
  int have = p->gpus ? p->gpus->count : 0;
  const char *reason = p->gpus ? p->gpus->reason : "no GPU inventory";
  return fail(a, -ENODEV, "%s asked, but this instance (%s) has %d GPU%s%s%s%s", asked,
              p->instance_type && *p->instance_type ? p->instance_type : "of unknown type", have,
              have == 1 ? "" : "s", have == 0 && reason && *reason ? " (" : "",
              have == 0 && reason && *reason ? reason : "", have == 0 && reason && *reason ? ")" : "");
}

/* Why spotlab-train cannot use the GPUs there are. */
static const char *unusable(const struct wk_spec_paths *p) {
  return p->gpus && p->gpus->unusable[0] ? p->gpus->unusable : "it cannot load its CUDA backend";
}

static int resolve_device(struct av *a, enum wk_kind kind, const json_t *spec, const struct wk_spec_paths *p,
                          struct wk_device *ret) {
  const json_t *opts = json_object_get(spec, "options");
  if (opts && !json_is_object(opts)) return fail(a, SL_ETYPE, "job options must be an object");
  long long gpus = -1, threads = 0;
  const char *device = NULL, *precision = NULL;
  int have = p->gpus ? p->gpus->count : 0, r;
  char asked[48];
  if ((r = whole_option(a, opts, "gpus", (long long)train_opt("gpus")->max, &gpus)) < 0) return r;
  snprintf(asked, sizeof asked, "gpus=%lld", gpus);
  if (kind == WK_KIND_RUN) { /* the script chooses its device; the GPUs it asked for must be here */
    if (gpus > have) return too_few_gpus(a, asked, p);
    *ret = (struct wk_device){.cuda = gpus > 0, .gpus = gpus > 0 ? (int)gpus : 0};
    return 0;
  }
  if ((r = word_option(a, opts, "device", "cpu", "cuda", &device)) < 0 ||
      (r = word_option(a, opts, "precision", "bf16", "fp32", &precision)) < 0)
    return r;
  const json_t *t = plain(json_object_get(opts, "threads"));
  if (json_is_integer(t) && json_integer_value(t) > 0) threads = json_integer_value(t);
  bool cuda;
  char cpu_why[160];
  if (device && !strcmp(device, "cpu")) {
    if (gpus > 0) return fail(a, SL_ECONFIG, "device=cpu contradicts gpus=%lld", gpus);
    cuda = false;
    snprintf(cpu_why, sizeof cpu_why, "device=cpu");
  } else if (device) {
    if (gpus == 0) return fail(a, SL_ECONFIG, "device=cuda contradicts gpus=0");
    if (gpus < 0) snprintf(asked, sizeof asked, "device=cuda");
    cuda = true;
  } else if (gpus >= 0) {
    cuda = gpus > 0;
    snprintf(cpu_why, sizeof cpu_why, "gpus=0");
  } else {
    cuda = have > 0 && p->train_cuda;
    if (have > 0)
      snprintf(cpu_why, sizeof cpu_why, "spotlab-train cannot use this instance's GPUs: %.100s",
               unusable(p));
    else
      snprintf(cpu_why, sizeof cpu_why, "this instance (%.64s) has no GPU",
               p->instance_type && *p->instance_type ? p->instance_type : "of unknown type");
  }
  if (cuda && gpus < 1) gpus = 1;
  if (cuda && gpus > have) return too_few_gpus(a, asked, p);
  if (cuda && !p->train_cuda)
    return fail(a, SL_ECUDA, "%s asked, but spotlab-train cannot use this instance's GPUs: %s", asked,
                unusable(p));
  bool bf16 = precision ? !strcmp(precision, "bf16") : cuda;
  if (bf16 && !cuda)
    return fail(a, SL_ECONFIG, "precision=bf16 needs a GPU, but this job runs on the CPU (%s); "
                               "use precision=fp32, or gpus=1 on an instance with a GPU", cpu_why);
  *ret = (struct wk_device){.cuda = cuda, .gpus = !cuda ? 0 : kind == WK_KIND_TRAIN ? (int)gpus : 1,
                            .bf16 = bf16, .threads = cuda ? 0 : threads};
  return 0;
}

int wk_spec_device(enum wk_kind kind, const json_t *spec, const struct wk_spec_paths *p, struct wk_device *ret,
                   char *err, size_t err_size) {
  struct av a = {NULL, 0, err, err_size};
  if (!json_is_object(spec)) return fail(&a, SL_ECONFIG, "spec must be an object");
  return resolve_device(&a, kind, spec, p, ret);
}

/* --device cuda [--gpus N] [--bf16]; on the CPU only an explicit device=cpu
 * is passed on (spotlab-train's default). */
static int add_device(struct av *a, enum wk_kind kind, const json_t *spec, const struct wk_spec_paths *p) {
  struct wk_device d;
  char buf[32];
  int r = resolve_device(a, kind, spec, p, &d);
  if (r < 0) return r;
  if (!d.cuda)
    return json_object_get(json_object_get(spec, "options"), "device") ? push2(a, "--device", "cpu") : 0;
  if ((r = push2(a, "--device", "cuda")) < 0) return r;
  snprintf(buf, sizeof buf, "%d", d.gpus);
  if (kind == WK_KIND_TRAIN && d.gpus > 1 && (r = push2(a, "--gpus", buf)) < 0) return r;
  return d.bf16 ? push(a, "--bf16") : 0;
}

/* A rank of a data-parallel run across instances (nodes=N). */
static int add_gang(struct av *a, const struct wk_spec_paths *p) {
  char world[16], rank[16];
  if (p->rank < 0 || p->rank >= p->world_size || !p->rendezvous || !*p->rendezvous)
    return fail(a, SL_ECONFIG, "rank %d of world size %d needs a rendezvous", p->rank, p->world_size);
  snprintf(world, sizeof world, "%d", p->world_size);
  snprintf(rank, sizeof rank, "%d", p->rank);
  int r = push2(a, "--world-size", world);
  if (r >= 0) r = push2(a, "--rank", rank);
  return r < 0 ? r : push2(a, "--rendezvous", p->rendezvous);
}

static int build(struct av *a, enum wk_kind kind, const json_t *spec, const struct wk_spec_paths *p) {
  int r;
  if (kind == WK_KIND_RUN) {
    const char *script = json_string_value(json_object_get(spec, "script"));
    if (!script) return fail(a, SL_ECONFIG, "run spec has no script");
    struct wk_device d;
    if ((r = resolve_device(a, kind, spec, p, &d)) < 0) return r;
    if ((r = push(a, "/bin/sh")) < 0 || (r = push(a, "-e")) < 0 || (r = push(a, "-c")) < 0)
      return r;
    return push(a, script);
  }
  if (!p->train || !*p->train) return fail(a, SL_ECONFIG, "no spotlab-train program");
  if ((r = push(a, p->train)) < 0) return r;
  if (kind == WK_KIND_TRAIN) {
    if ((r = add_model(a, spec)) < 0 || (r = add_data(a, spec, true)) < 0) return r;
    if ((r = add_checkpoint_every(a, spec, p)) < 0) return r;
    if (p->resume && (r = push(a, "--resume")) < 0) return r;
    if (p->run_id && (r = push2(a, "--run-id", p->run_id)) < 0) return r;
    if (p->world_size > 1 && (r = add_gang(a, p)) < 0) return r;
  } else if (kind == WK_KIND_EVAL) {
    if ((r = push(a, "--eval")) < 0 || (r = add_data(a, spec, false)) < 0) return r;
  } else {
    const json_t *opts = json_object_get(spec, "options");
    const json_t *pr = plain(json_object_get(opts, "prompt"));
    if (!pr) pr = json_object_get(spec, "prompt");
    /* none: the model's text from its start (a line's end) */
    if (pr && !json_is_string(pr)) return fail(a, SL_ECONFIG, "sample's prompt must be a string");
    if ((r = push2(a, "--sample", pr ? json_string_value(pr) : "")) < 0) return r;
  }
  if ((r = add_common(a, kind, spec, p)) < 0) return r;
  return add_device(a, kind, spec, p);
}

int wk_spec_build_argv(enum wk_kind kind, const json_t *spec, const struct wk_spec_paths *p,
                       char ***ret_argv, char *err, size_t err_size) {
  struct av a = {calloc(WK_ARGV_MAX, sizeof(char *)), 0, err, err_size};
  if (!a.v) return -ENOMEM;
  int r = json_is_object(spec) ? build(&a, kind, spec, p) : fail(&a, SL_ECONFIG, "spec must be an object");
  if (r < 0) {
    wk_argv_free(a.v);
    return r;
  }
  *ret_argv = a.v;
  return 0;
}

char **wk_argv_free(char **argv) {
  if (argv) {
    for (size_t i = 0; argv[i]; i++) free(argv[i]);
    free(argv);
  }
  return NULL;
}

static const char *const kind_names[] = {"train", "eval", "sample", "run"};

int wk_spec_kind(const char *name, enum wk_kind *ret) {
  for (int i = 0; name && i < 4; i++)
    if (!strcmp(name, kind_names[i])) {
      *ret = (enum wk_kind)i;
      return 0;
    }
  return SL_ENAME;
}

const char *wk_spec_kind_name(enum wk_kind kind) {
  return (unsigned)kind < 4 ? kind_names[kind] : "?";
}

const char *wk_spec_data_path(const json_t *spec) {
  const json_t *d = json_object_get(spec, "data");
  if (json_is_string(d)) return json_string_value(d);
  if (!json_is_object(d)) return NULL;
  d = unwrap_def(d);
  const char *path = json_string_value(plain(json_array_get(json_object_get(d, "args"), 0)));
  if (!path) path = json_string_value(plain(json_object_get(json_object_get(d, "options"), "path")));
  if (!path || !*path || !strcmp(path, "moby-dick") || !strcmp(path, "fashion-mnist")) return NULL;
  return path;
}
