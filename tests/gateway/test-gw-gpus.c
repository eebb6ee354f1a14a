/* A worker's GPU report against the catalog (gateway/gpus.h): parsing the
 * register's "gpus", matching the driver's model names to the catalog's,
 * and the sentence a mismatch gets. */
#include "harness.h"

#include "gpus.h"
#include "sl_err.h"

#include <stdlib.h>

static int parse(const char *text, struct gw_gpus *ret) {
  json_t *o = json_loads(text, JSON_DECODE_ANY, NULL);
  int r = gw_gpus_parse(o, ret);
  json_decref(o);
  return r;
}

static void test_parse(void) {
  struct gw_gpus g = {0};
  CHECK_INT(parse("{\"count\":2,\"model\":\"NVIDIA A10G\",\"memory_mib\":22731,\"driver\":\"550.54.15\"}", &g), 0);
  CHECK(g.known);
  CHECK_INT(g.count, 2);
  CHECK_STR(g.model, "NVIDIA A10G");
  CHECK_INT(g.memory_mib, 22731);
  CHECK_STR(g.driver, "550.54.15");
  CHECK_STR(g.reason, "");
  CHECK_INT(parse("{\"count\":0,\"reason\":\"no NVIDIA driver library\"}", &g), 0);
  CHECK_INT(g.count, 0);
  CHECK_STR(g.model, "");
  CHECK_STR(g.reason, "no NVIDIA driver library");
  /* input from the world: wrong shapes are refused and change nothing */
  static const char *const bad[] = {
      "[]", "{}", "{\"count\":\"2\"}", "{\"count\":-1}", "{\"count\":1.5}", "{\"count\":5000}",
      "{\"count\":1,\"model\":7}", "{\"count\":1,\"memory_mib\":\"big\"}", "{\"count\":1,\"memory_mib\":-3}",
      "{\"count\":1,\"driver\":null}", "{\"count\":1,\"reason\":[]}",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct gw_gpus before = g;
    CHECK_INT(parse(bad[i], &g), SL_ETYPE);
    CHECK(!memcmp(&before, &g, sizeof g));
  }
  CHECK_INT(gw_gpus_parse(NULL, &g), SL_ETYPE);
  /* long strings are cut, never overrun */
  char long_model[600];
  memset(long_model, 'x', sizeof long_model);
  long_model[sizeof long_model - 1] = 0;
  json_t *o = json_pack("{s:i,s:s}", "count", 1, "model", long_model);
  CHECK_INT(gw_gpus_parse(o, &g), 0);
  CHECK_INT(strlen(g.model), sizeof g.model - 1);
  json_decref(o);
  /* listings */
  json_t *obj = json_object();
  struct gw_gpus unknown = {0};
  gw_gpus_add_json(&unknown, obj);
  CHECK_INT(json_object_size(obj), 0);
  CHECK_INT(parse("{\"count\":1,\"model\":\"NVIDIA H100 80GB HBM3\",\"memory_mib\":81559,\"driver\":\"550\"}", &g), 0);
  gw_gpus_add_json(&g, obj);
  char *text = json_dumps(obj, JSON_COMPACT | JSON_SORT_KEYS);
  CHECK_STR(text, "{\"gpu_driver\":\"550\",\"gpu_memory_mib\":81559,\"gpu_model\":\"NVIDIA H100 80GB HBM3\",\"gpus\":1}");
  free(text);
  json_decref(obj);
}

static void test_models(void) {
  CHECK(gw_gpus_model_matches("NVIDIA A10G", "A10G"));
  CHECK(gw_gpus_model_matches("Tesla V100-SXM2-16GB", "V100"));
  CHECK(gw_gpus_model_matches("NVIDIA H100 80GB HBM3", "H100"));
  CHECK(gw_gpus_model_matches("Tesla T4", "t4"));
  CHECK(gw_gpus_model_matches("NVIDIA A100-SXM4-40GB", "A100"));
  CHECK(gw_gpus_model_matches("anything", ""));
  CHECK(!gw_gpus_model_matches("NVIDIA A100-SXM4-40GB", "A10G"));
  CHECK(!gw_gpus_model_matches("NVIDIA A10G", "A10"));
  CHECK(!gw_gpus_model_matches("NVIDIA L40S", "L4"));
  CHECK(!gw_gpus_model_matches("NVIDIA GH100", "H100"));
  CHECK(!gw_gpus_model_matches("", "T4"));
}

static void test_check(void) {
  struct gw_gpus g = {0};
  char why[GW_GPUS_WARNING_MAX];
  why[0] = 0;
  /* not reported (an older worker): nothing to say */
  CHECK_INT(gw_gpus_check(&g, "g5.xlarge", 1, "A10G", why, sizeof why), 0);
  /* what the catalog says */
  CHECK_INT(parse("{\"count\":1,\"model\":\"NVIDIA A10G\",\"memory_mib\":22731}", &g), 0);
  CHECK_INT(gw_gpus_check(&g, "g5.xlarge", 1, "A10G", why, sizeof why), 0);
  CHECK_INT(parse("{\"count\":0,\"reason\":\"r\"}", &g), 0);
  CHECK_INT(gw_gpus_check(&g, "local.cpu", 0, "", why, sizeof why), 0);
  /* no driver on a GPU type */
  CHECK_INT(parse("{\"count\":0,\"reason\":\"no NVIDIA driver library (libnvidia-ml.so.1: not found)\"}", &g), 0);
  CHECK_INT(gw_gpus_check(&g, "g5.xlarge", 1, "A10G", why, sizeof why), 1);
  CHECK_STR(why, "g5.xlarge has 1 x A10G in the catalog, but its worker found no GPU "
                 "(no NVIDIA driver library (libnvidia-ml.so.1: not found))");
  /* a GPU short */
  CHECK_INT(parse("{\"count\":3,\"model\":\"NVIDIA A10G\",\"reason\":\"GPU 3: no name: NVML: GPU is lost\"}", &g), 0);
  CHECK_INT(gw_gpus_check(&g, "g5.12xlarge", 4, "A10G", why, sizeof why), 1);
  CHECK_STR(why, "g5.12xlarge has 4 x A10G in the catalog, but its worker found 3 x NVIDIA A10G");
  /* the GPUs of the catalog, which spotlab-train cannot use: said, with why */
  CHECK_INT(parse("{\"count\":1,\"model\":\"NVIDIA A10G\",\"unusable\":\"cannot load the CUDA "
                  "backend (libcudart.so.13: cannot open shared object file)\"}", &g), 0);
  CHECK_STR(g.unusable, "cannot load the CUDA backend (libcudart.so.13: cannot open shared object file)");
  CHECK_INT(gw_gpus_check(&g, "g5.xlarge", 1, "A10G", why, sizeof why), 1);
  CHECK_STR(why, "g5.xlarge's worker found 1 x NVIDIA A10G, but spotlab-train cannot use them "
                 "(cannot load the CUDA backend (libcudart.so.13: cannot open shared object file)): "
                 "jobs that name no GPU train on the CPU");
  CHECK_INT(parse("{\"count\":1,\"unusable\":7}", &g), SL_ETYPE);
  /* another model */
  CHECK_INT(parse("{\"count\":1,\"model\":\"Tesla T4\"}", &g), 0);
  CHECK_INT(gw_gpus_check(&g, "g5.xlarge", 1, "A10G", why, sizeof why), 1);
  CHECK_STR(why, "g5.xlarge has 1 x A10G in the catalog, but its worker found 1 x Tesla T4");
  /* GPUs where the catalog has none */
  CHECK_INT(gw_gpus_check(&g, "c5.large", 0, "", why, sizeof why), 1);
  CHECK_STR(why, "c5.large has no GPU in the catalog, but its worker found 1 x Tesla T4");
  /* a small buffer is cut, not overrun */
  char tiny[16];
  CHECK_INT(gw_gpus_check(&g, "g5.xlarge", 1, "A10G", tiny, sizeof tiny), 1);
  CHECK_INT(strlen(tiny), sizeof tiny - 1);
}

int main(void) {
  test_parse();
  test_models();
  test_check();
  TEST_MAIN_END();
}
