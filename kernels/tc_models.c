/* The registered models, and their configurations as name=value fields.
 *
 * A model joins by one line in TC_MODELS below (and its source in
 * meson.build). A config is the model's name plus its own struct, which only
 * the model's files read; everything else (checkpoints, descriptions, tests)
 * goes through the model's field table, so adding a field changes no format. */
#include "tc_model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TC_MODELS(X) \
  X(tc_gpt_ops)      \
  X(tc_mlp_ops)

#define DECLARE_(ops) extern const struct tc_model_ops ops;
TC_MODELS(DECLARE_)
#undef DECLARE_
#define ENTRY_(ops) &ops,
static const struct tc_model_ops *const MODELS[] = {TC_MODELS(ENTRY_)};
#undef ENTRY_
#define N_MODELS (int)(sizeof MODELS / sizeof MODELS[0])

const struct tc_model_ops *tc_model_at(int i) {
  return i >= 0 && i < N_MODELS ? MODELS[i] : NULL;
}

const struct tc_model_ops *tc_model_find(const char *name) {
  for (int i = 0; i < N_MODELS; i++)
    if (!strcmp(MODELS[i]->name, name)) return MODELS[i];
  return NULL;
}

const char *tc_model_names(char *buf, size_t size) {
  size_t off = 0;
  if (size) buf[0] = 0;
  for (int i = 0; i < N_MODELS && off < size; i++)
    off += (size_t)snprintf(buf + off, size - off, "%s%s", i ? ", " : "", MODELS[i]->name);
  return buf;
}

static void set_field(struct tc_config *c, const struct tc_config_field *f, uint32_t v) {
  memcpy(c->p.bytes + f->offset, &v, sizeof v);
}

static uint32_t field_value(const struct tc_config *c, const struct tc_config_field *f) {
  uint32_t v;
  memcpy(&v, c->p.bytes + f->offset, sizeof v);
  return v;
}

void tc_config_init(struct tc_config *cfg, const struct tc_model_ops *ops) {
  memset(cfg, 0, sizeof *cfg);
  snprintf(cfg->model, sizeof cfg->model, "%s", ops->name);
  for (int i = 0; i < ops->n_fields; i++)
    if (!ops->fields[i].required) set_field(cfg, &ops->fields[i], ops->fields[i].def);
}

const struct tc_model_ops *tc_config_ops(const struct tc_config *cfg) {
  if (!memchr(cfg->model, 0, sizeof cfg->model)) return NULL;
  return tc_model_find(cfg->model);
}

static const struct tc_config_field *find_field(const struct tc_model_ops *ops, const char *name,
                                                size_t len) {
  for (int i = 0; i < ops->n_fields; i++)
    if (strlen(ops->fields[i].name) == len && !strncmp(ops->fields[i].name, name, len))
      return &ops->fields[i];
  return NULL;
}

int tc_config_parse(struct tc_config *cfg, const char *model, const char *text, char *err,
                    size_t err_size) {
  const struct tc_model_ops *ops = tc_model_find(model);
  char names[128];
  if (!ops) {
    snprintf(err, err_size, "unknown model '%.32s' (known: %s)", model,
             tc_model_names(names, sizeof names));
    return -EINVAL;
  }
  struct tc_config c;
  tc_config_init(&c, ops);
  uint64_t seen = 0; /* fields named, by index (a model has at most 64) */
  for (const char *p = text; *p;) {
    if (*p == ' ' || *p == '\n') {
      p++;
      continue;
    }
    size_t len = strcspn(p, " \n"), klen = strcspn(p, "= \n");
    if (klen == len) {
      snprintf(err, err_size, "'%.*s': expected name=value", (int)(len < 64 ? len : 64), p);
      return -EINVAL;
    }
    const struct tc_config_field *f = find_field(ops, p, klen);
    if (!f) {
      snprintf(err, err_size, "%s has no setting '%.*s'", ops->name, (int)(klen < 64 ? klen : 64), p);
      return -EINVAL;
    }
    const char *v = p + klen + 1;
    size_t vlen = len - klen - 1;
    uint64_t x = 0;
    int ok = vlen > 0 && vlen <= 10;
    for (size_t i = 0; ok && i < vlen; i++) {
      ok = v[i] >= '0' && v[i] <= '9';
      x = x * 10 + (uint64_t)(v[i] - '0');
    }
    if (!ok || x > UINT32_MAX) {
      snprintf(err, err_size, "%s: '%.*s' is not a whole number", f->name,
               (int)(vlen < 32 ? vlen : 32), v);
      return -EINVAL;
    }
    int idx = (int)(f - ops->fields);
    if (seen & (1ull << idx)) {
      snprintf(err, err_size, "%s is set twice", f->name);
      return -EINVAL;
    }
    seen |= 1ull << idx;
    set_field(&c, f, (uint32_t)x);
    p += len;
  }
  for (int i = 0; i < ops->n_fields; i++)
    if (ops->fields[i].required && !(seen & (1ull << i))) {
      snprintf(err, err_size, "%s needs %s", ops->name, ops->fields[i].name);
      return -EINVAL;
    }
  *cfg = c;
  return 0;
}

int tc_config_encode(const struct tc_config *cfg, char *buf, size_t size) {
  const struct tc_model_ops *ops = tc_config_ops(cfg);
  if (!ops) return -EINVAL;
  size_t off = 0;
  for (int i = 0; i < ops->n_fields; i++) {
    int k = snprintf(buf + off, size > off ? size - off : 0, "%s=%u\n", ops->fields[i].name,
                     field_value(cfg, &ops->fields[i]));
    if (k < 0 || (size_t)k >= (size > off ? size - off : 0)) return -ENOSPC;
    off += (size_t)k;
  }
  return (int)off;
}

int tc_config_equal(const struct tc_config *a, const struct tc_config *b) {
  const struct tc_model_ops *ops = tc_config_ops(a);
  if (!ops || ops != tc_config_ops(b)) return 0;
  for (int i = 0; i < ops->n_fields; i++)
    if (field_value(a, &ops->fields[i]) != field_value(b, &ops->fields[i])) return 0;
  return 1;
}

int tc_config_get(const struct tc_config *cfg, const char *field, uint32_t *ret) {
  const struct tc_model_ops *ops = tc_config_ops(cfg);
  const struct tc_config_field *f = ops ? find_field(ops, field, strlen(field)) : NULL;
  if (!f) return -ENOENT;
  *ret = field_value(cfg, f);
  return 0;
}

int tc_config_validate(const struct tc_config *cfg, char *err, size_t err_size) {
  const struct tc_model_ops *ops = tc_config_ops(cfg);
  if (!ops) {
    snprintf(err, err_size, "unknown model '%.*s'", (int)sizeof cfg->model, cfg->model);
    return -EINVAL;
  }
  for (size_t i = ops->config_bytes; i < sizeof cfg->p.bytes; i++)
    if (cfg->p.bytes[i]) {
      snprintf(err, err_size, "%s config has bytes past its struct", ops->name);
      return -EINVAL;
    }
  for (int i = 0; i < ops->n_fields; i++) {
    const struct tc_config_field *f = &ops->fields[i];
    uint32_t v = field_value(cfg, f);
    if (v < f->min || v > f->max) {
      snprintf(err, err_size, "%s must be %u..%u", f->name, f->min, f->max);
      return -EINVAL;
    }
  }
  return ops->validate ? ops->validate(tc_config_model_c(cfg), err, err_size) : 0;
}

const char *tc_config_describe(const struct tc_config *cfg, char *buf, size_t size) {
  const struct tc_model_ops *ops = tc_config_ops(cfg);
  if (!ops) {
    snprintf(buf, size, "unknown model '%.*s'", (int)sizeof cfg->model, cfg->model);
    return buf;
  }
  size_t off = (size_t)snprintf(buf, size, "%s", ops->name);
  for (int i = 0; i < ops->n_fields && off < size; i++)
    off += (size_t)snprintf(buf + off, size - off, " %s=%u", ops->fields[i].name,
                            field_value(cfg, &ops->fields[i]));
  return buf;
}

void tc_config_shape(const struct tc_config *cfg, struct tc_row_shape *ret) {
  const struct tc_model_ops *ops = tc_config_ops(cfg);
  memset(ret, 0, sizeof *ret);
  if (ops) ops->shape(tc_config_model_c(cfg), ret);
}
