/* Catalog parsing: the built-in catalog, and malformed files named by line. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "catalog.h"
#include "harness.h"
#include "sl_err.h"

static char tmpdir[] = "/tmp/spotlab-catalog-XXXXXX";

static int load_text(const char *name, const char *text, struct gw_catalog **ret, char *err,
                     size_t err_size) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", tmpdir, name);
  FILE *f = fopen(path, "w");
  fputs(text, f);
  fclose(f);
  return gw_catalog_load(path, ret, err, err_size);
}

#define HEADER "instance_type,gpus,gpu_model,on_demand_usd_per_hour,spot_usd_per_hour,interruption,zones\n"

int main(void) {
  char path[4096], err[512];
  struct gw_catalog *c = NULL;
  CHECK(mkdtemp(tmpdir) != NULL);

  /* The built-in catalog loads and carries the figures of its source. */
  CHECK_INT(gw_catalog_default_path(path, sizeof path), 0);
  CHECK_INT(gw_catalog_load(path, &c, err, sizeof err), 0);
  if (c) {
    CHECK(gw_catalog_count(c) >= 5);
    int g5 = gw_catalog_find(c, "g5.xlarge");
    CHECK(g5 >= 0);
    const struct gw_catalog_entry *e = gw_catalog_get(c, (size_t)g5);
    CHECK_INT(e->gpus, 1);
    CHECK_STR(e->gpu_model, "A10G");
    CHECK_NEAR(e->on_demand_usd_per_hour, 1.006, 1e-9);
    CHECK(e->spot_usd_per_hour > 0.11 * 1.006 && e->spot_usd_per_hour < 0.40 * 1.006 + 0.01);
    CHECK_STR(gw_catalog_bucket_label(e->bucket), ">20%");
    CHECK_STR(e->zones, "abc");
    CHECK_INT(gw_catalog_find(c, "no.such"), SL_ENAME);
    c = gw_catalog_free(c);
  }

  /* A good small file with comments and blank lines. */
  CHECK_INT(load_text("good.csv", "# comment\n\n" HEADER "x.large,2,T4,1.5,0.5,<5%,a b\n", &c,
                      err, sizeof err), 0);
  if (c) {
    CHECK_INT(gw_catalog_count(c), 1);
    CHECK_NEAR(gw_catalog_bucket_mean_s(gw_catalog_get(c, 0)->bucket), 72000, 1e-6);
    c = gw_catalog_free(c);
  }
  CHECK_NEAR(gw_catalog_bucket_mean_s(4), 7200, 1e-6);

  /* Malformed lines: the error names the file and the line. */
  struct {
    const char *text, *expect;
  } bad[] = {
      {HEADER "a,1,T4,1,0.5,>20%,a\nb,1,T4,1,0.5,>20%\n", "bad1.csv:3: expected 7"},
      {HEADER "a,one,T4,1,0.5,>20%,a\n", "bad2.csv:2: gpus"},
      {"# c\n" HEADER "a,1,T4,-1,0.5,>20%,a\n", "bad3.csv:3: on_demand"},
      {HEADER "a,1,T4,1,0.5,sometimes,a\n", "bad4.csv:2: interruption"},
      {HEADER "a,1,T4,1,0.5,>20%,a\na,1,T4,1,0.5,>20%,b\n", "bad5.csv:3: instance type a listed twice"},
      {"type,gpus\n", "bad6.csv:1: header"},
      {HEADER "a,1,T4,1,0.5,>20%,A1\n", "bad7.csv:2: zones"},
      {HEADER, "bad8.csv:1: no instance types"},
      {HEADER "a,1,T4,1,nan,>20%,a\n", "bad9.csv:2: spot"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char name[32];
    snprintf(name, sizeof name, "bad%zu.csv", i + 1);
    err[0] = '\0';
    c = NULL;
    int r = load_text(name, bad[i].text, &c, err, sizeof err);
    CHECK(r < 0);
    CHECK(c == NULL);
    if (!strstr(err, bad[i].expect))
      fprintf(stderr, "  got \"%s\", expected \"%s\"\n", err, bad[i].expect);
    CHECK(strstr(err, bad[i].expect) != NULL);
  }
  /* A line longer than the bound. */
  char *big = malloc(4000);
  strcpy(big, HEADER);
  memset(big + strlen(big), 'x', 2000);
  strcpy(big + strlen(HEADER) + 2000, "\n");
  CHECK(load_text("long.csv", big, &c, err, sizeof err) == SL_EPARSE);
  CHECK(strstr(err, "long.csv:2: line longer") != NULL);
  free(big);
  CHECK(gw_catalog_load("/nonexistent/catalog.csv", &c, err, sizeof err) == -ENOENT);
  CHECK(strstr(err, "/nonexistent/catalog.csv") != NULL);

  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  CHECK_INT(system(cmd), 0);
  TEST_MAIN_END();
}
