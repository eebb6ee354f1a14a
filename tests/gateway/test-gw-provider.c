/* The provider registry (register, duplicate, find, full, order, clear) and
 * the helpers every caller of a provider shares (gw_provider_type,
 * gw_provider_time_scale). */
#include "harness.h"
#include "provider.h"
#include "sl_err.h"

#include <errno.h>
#include <stdio.h>

static struct gw_provider *open_none(const struct gw_provider_env *env, char *err,
                                     size_t err_size) {
  (void)env;
  snprintf(err, err_size, "not openable");
  return NULL;
}

static const struct gw_provider_option no_options[] = {{NULL, NULL, NULL}};

/* GW_PROVIDERS_MAX + 1 classes named c0, c1, ... */
static char names[GW_PROVIDERS_MAX + 1][8];
static struct gw_provider_class classes[GW_PROVIDERS_MAX + 1];

static const struct gw_instance_type types[] = {
  {.name = "t.small", .gpus = 1, .gpu_model = "T4", .on_demand_usd_per_hour = 1.0, .spot_usd_per_hour = 0.3, .interruption = ">20%", .mean_time_to_preempt_s = 3600},
  {.name = "t.big", .gpus = 8, .gpu_model = "H100", .on_demand_usd_per_hour = 30.0, .spot_usd_per_hour = 9.0, .interruption = "<5%", .mean_time_to_preempt_s = 72000},
};

static int market(struct gw_provider *p, const struct gw_instance_type **ret, size_t *ret_n) {
  (void)p;
  *ret = types;
  *ret_n = 2;
  return 0;
}

static double scale_60(struct gw_provider *p) {
  (void)p;
  return 60;
}

int main(void) {
  for (size_t i = 0; i <= GW_PROVIDERS_MAX; i++) {
    snprintf(names[i], sizeof names[i], "c%zu", i);
    classes[i] = (struct gw_provider_class){
        .name = names[i], .options = no_options, .open = open_none};
  }

  /* empty registry */
  CHECK(gw_provider_find("c0") == NULL);
  CHECK(gw_provider_class_at(0) == NULL);

  /* register, find, duplicate */
  CHECK_INT(gw_provider_register(&classes[0]), 0);
  CHECK(gw_provider_find("c0") == &classes[0]);
  CHECK(gw_provider_find("c1") == NULL);
  CHECK(gw_provider_find(NULL) == NULL);
  struct gw_provider_class same_name = classes[0];
  CHECK_INT(gw_provider_register(&same_name), -EEXIST);
  CHECK_INT(gw_provider_register(&classes[0]), -EEXIST);
  struct gw_provider_class nameless = {.name = "", .open = open_none};
  CHECK_INT(gw_provider_register(&nameless), -EINVAL);
  CHECK_INT(gw_provider_register(NULL), -EINVAL);

  /* up to GW_PROVIDERS_MAX, then full; class_at keeps registration order */
  for (size_t i = 1; i < GW_PROVIDERS_MAX; i++)
    CHECK_INT(gw_provider_register(&classes[i]), 0);
  CHECK_INT(gw_provider_register(&classes[GW_PROVIDERS_MAX]), SL_ELIMIT);
  CHECK(gw_provider_find(names[GW_PROVIDERS_MAX]) == NULL);
  for (size_t i = 0; i < GW_PROVIDERS_MAX; i++)
    CHECK(gw_provider_class_at(i) == &classes[i]);
  CHECK(gw_provider_class_at(GW_PROVIDERS_MAX) == NULL);
  CHECK(gw_provider_find(names[GW_PROVIDERS_MAX - 1]) == &classes[GW_PROVIDERS_MAX - 1]);

  /* clear forgets everything; registering again starts over */
  gw_provider_registry_clear();
  CHECK(gw_provider_find("c0") == NULL);
  CHECK(gw_provider_class_at(0) == NULL);
  CHECK_INT(gw_provider_register(&classes[3]), 0);
  CHECK_INT(gw_provider_register(&classes[0]), 0);
  CHECK(gw_provider_class_at(0) == &classes[3]);
  CHECK(gw_provider_class_at(1) == &classes[0]);
  gw_provider_registry_clear();

  /* type lookup through market(); time_scale 1 when the provider has none */
  struct gw_provider_ops ops = {.market = market};
  struct gw_provider p = {.ops = &ops, .name = "t"};
  struct gw_instance_type t;
  CHECK_INT(gw_provider_type(&p, "t.big", &t), 0);
  CHECK_STR(t.name, "t.big");
  CHECK_INT(t.gpus, 8);
  CHECK_NEAR(t.spot_usd_per_hour, 9.0, 0);
  t.gpus = -1;
  CHECK_INT(gw_provider_type(&p, "t.huge", &t), SL_ENAME);
  CHECK_INT(t.gpus, -1); /* written only on success */
  CHECK_NEAR(gw_provider_time_scale(&p), 1, 0);
  ops.time_scale = scale_60;
  CHECK_NEAR(gw_provider_time_scale(&p), 60, 0);
  struct gw_provider_ops no_market = {0};
  struct gw_provider q = {.ops = &no_market, .name = "q"};
  CHECK_INT(gw_provider_type(&q, "t.big", &t), SL_ENAME);
  TEST_MAIN_END();
}
