/* The carbon estimate: the shipped table loads and covers the catalog's
 * types, a rate is looked up by type, provider and zone (a zone's region,
 * aliases, the default region), the estimate is the linear power model
 * times hours and PUE, and a bad table is refused with a reason. */
#include "harness.h"
#include "carbon.h"
#include "sl_err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/test-gw-carbon-XXXXXX";

static void test_shipped(void) {
  char path[4096], err[512] = "";
  CHECK_INT(gw_carbon_default_path(path, sizeof path), 0);
  struct gw_carbon *c = NULL;
  CHECK_INT(gw_carbon_load(path, &c, err, sizeof err), 0);
  if (!c) {
    fprintf(stderr, "%s\n", err);
    return;
  }
  const char *types[] = {"g4dn.xlarge", "g5.xlarge", "g5.12xlarge", "p3.2xlarge", "p3.16xlarge",
                         "p4d.24xlarge", "p5.48xlarge"};
  struct gw_carbon_rate r;
  for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
    CHECK_INT(gw_carbon_rate(c, "aws", types[i], "us-east-1a", &r), 0);
    CHECK(r.gpus >= 1 && r.gpu_max_w > r.gpu_idle_w && r.vcpus >= 4);
  }
  /* g5.xlarge: one A10G (20..150 W), 4 vCPUs (0.74..3.5 W), PUE 1.135 */
  CHECK_INT(gw_carbon_rate(c, "local", "g5.xlarge", "local-1b", &r), 0);
  CHECK_NEAR(r.gpu_max_w, 150, 1e-9);
  CHECK_NEAR(r.pue, 1.135, 1e-9);
  CHECK_NEAR(r.g_per_kwh, 379.1, 1e-9); /* local-1 is us-east-1's grid */
  double kwh, g;
  gw_carbon_estimate(&r, 1, 2, 0.5, 0.9, &kwh, &g);
  double watts = (20 + 0.9 * 130) + 4 * (0.74 + 0.5 * (3.5 - 0.74));
  CHECK_NEAR(kwh, 2 * watts * 1.135 / 1000, 1e-12);
  CHECK_NEAR(g, kwh * 379.1, 1e-9);
  /* two instances, utilisation clamped to 0..1 */
  double kwh2, g2;
  gw_carbon_estimate(&r, 2, 2, 1.7, -3, &kwh2, &g2);
  CHECK_NEAR(kwh2, 2 * 2 * ((20 + 0) + 4 * 3.5) * 1.135 / 1000, 1e-12);
  gw_carbon_estimate(&r, 1, 0, 1, 1, &kwh2, &g2);
  CHECK(kwh2 == 0 && g2 == 0);
  /* regions: a zone's letter dropped, a region by name, an unknown one */
  CHECK_INT(gw_carbon_rate(c, "aws", "p3.2xlarge", "eu-west-1c", &r), 0);
  CHECK_NEAR(r.g_per_kwh, 278.6, 1e-9);
  CHECK_INT(gw_carbon_rate(c, "aws", "p3.2xlarge", "us-west-2", &r), 0);
  CHECK_NEAR(r.g_per_kwh, 322.2, 1e-9);
  CHECK_INT(gw_carbon_rate(c, "mars", "p3.2xlarge", "olympus-9z", &r), 0);
  CHECK_NEAR(r.g_per_kwh, 475, 1e-9);
  CHECK_NEAR(r.pue, 1.135, 1e-9); /* an unknown provider takes aws's */
  CHECK_INT(gw_carbon_rate(c, "aws", "x9.huge", "us-east-1a", &r), SL_ENAME);
  CHECK_INT(gw_carbon_rate(c, "aws", NULL, NULL, &r), SL_ENAME);
  CHECK_NEAR(gw_carbon_default_util(c, false), 0.5, 1e-12);
  CHECK_NEAR(gw_carbon_default_util(c, true), 0.9, 1e-12);
  gw_carbon_free(c);
}

static int load_text(const char *text, char *err, size_t size) {
  char path[256];
  snprintf(path, sizeof path, "%s/t.json", dir);
  FILE *f = fopen(path, "w");
  if (!f)
    return -errno;
  fputs(text, f);
  fclose(f);
  struct gw_carbon *c = NULL;
  int r = gw_carbon_load(path, &c, err, size);
  gw_carbon_free(c);
  return r;
}

#define GOOD_HEAD                                                                    \
  "{\"cpu\":{\"idle_w_per_vcpu\":1,\"max_w_per_vcpu\":3},"                          \
  "\"default_util\":{\"cpu\":0.5,\"gpu\":0.5},"

static void test_bad(void) {
  char err[512];
  CHECK_INT(load_text(GOOD_HEAD "\"gpus\":{\"T4\":{\"idle_w\":10,\"max_w\":70}},"
                      "\"types\":{\"t\":{\"vcpus\":4,\"gpus\":1,\"gpu\":\"T4\"}},"
                      "\"providers\":{\"aws\":{\"pue\":1.2}},\"regions\":{\"r-1\":{\"g_per_kwh\":100}},"
                      "\"default_region\":{\"g_per_kwh\":400}}", err, sizeof err), 0);
  CHECK_INT(load_text("{not json", err, sizeof err), SL_EPARSE);
  CHECK_INT(load_text(GOOD_HEAD "\"gpus\":{\"T4\":{\"idle_w\":80,\"max_w\":70}},"
                      "\"types\":{},\"providers\":{\"aws\":{\"pue\":1.2}},\"regions\":{},"
                      "\"default_region\":{\"g_per_kwh\":400}}", err, sizeof err), SL_EPARSE);
  CHECK(strstr(err, "T4") != NULL);
  CHECK_INT(load_text(GOOD_HEAD "\"gpus\":{},\"types\":{\"t\":{\"vcpus\":4,\"gpus\":1,\"gpu\":\"Z\"}},"
                      "\"providers\":{\"aws\":{\"pue\":1.2}},\"regions\":{},"
                      "\"default_region\":{\"g_per_kwh\":400}}", err, sizeof err), SL_EPARSE);
  CHECK(strstr(err, "type t") != NULL);
  CHECK_INT(load_text(GOOD_HEAD "\"gpus\":{},\"types\":{},\"providers\":{\"aws\":{\"pue\":0.5}},"
                      "\"regions\":{},\"default_region\":{\"g_per_kwh\":400}}", err, sizeof err), SL_EPARSE);
  CHECK_INT(load_text(GOOD_HEAD "\"gpus\":{},\"types\":{},\"providers\":{\"aws\":{\"pue\":1.1}},"
                      "\"regions\":{\"r\":{\"g_per_kwh\":-1}},\"default_region\":{\"g_per_kwh\":400}}",
                      err, sizeof err), SL_EPARSE);
  CHECK_INT(load_text(GOOD_HEAD "\"gpus\":{},\"types\":{},\"providers\":{\"aws\":{\"pue\":1.1}},"
                      "\"regions\":{},\"default_region\":{\"g_per_kwh\":400},"
                      "\"region_aliases\":{\"x\":\"nowhere\"}}", err, sizeof err), SL_EPARSE);
}

int main(void) {
  if (!mkdtemp(dir))
    return 1;
  test_shipped();
  test_bad();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", dir);
  TEST_MAIN_END();
}
