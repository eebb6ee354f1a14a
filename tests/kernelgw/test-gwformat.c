/* Plain-text renderings of gateway replies (client/gwformat.c): %status
 * lists every worker with its fields, and a worker whose GPUs disagree
 * with its instance type gets its warning on a line of its own, whole;
 * %instances shows the placement ranking best first with its reasons, as
 * text and as an HTML table (escaped), and a reply without a ranking as
 * one row per type. */
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "gwformat.h"
#include "harness.h"

static void test_status_gpus(void) {
  const char *warning = "g5.12xlarge has 4 x A10G in the catalog, but its worker found no GPU (no NVIDIA driver "
                        "library (libnvidia-ml.so.1: cannot open shared object file: No such file or directory))";
  json_t *reply = json_pack(
      "{s:{s:s}, s:[{s:s, s:s, s:i, s:s, s:i}, {s:s, s:s, s:i, s:s}], s:{}, s:{}}", "gateway", "version", "0.1.0",
      "workers", "instance", "i-aaa", "type", "g5.xlarge", "gpus", 1, "gpu_model", "NVIDIA A10G", "gpu_memory_mib",
      22731, "instance", "i-bbb", "type", "g5.12xlarge", "gpus", 0, "gpu_warning", warning, "idle", "budget");
  char *text = jk_format_status(reply);
  CHECK(text && strstr(text, "workers: 2\n"));
  CHECK(text && strstr(text, "  i-aaa type=g5.xlarge gpus=1 gpu_model=NVIDIA A10G gpu_memory_mib=22731\n"));
  CHECK(text && strstr(text, "  i-bbb type=g5.12xlarge gpus=0\n"));
  char line[600];
  snprintf(line, sizeof line, "    warning: %s\n", warning);
  CHECK(text && strstr(text, line));
  CHECK(text && !strstr(text, "gpu_warning="));
  free(text);
  json_decref(reply);
}

static json_t *market_reply(bool ranked) {
  json_t *r = json_pack(
      "{s:[{s:s, s:i, s:s, s:f, s:f, s:s, s:s, s:s, s:i}, {s:s, s:i, s:s, s:f, s:f, s:s, s:s, s:s, s:I}],"
      " s:s}",
      "types", "type", "g5.xlarge", "gpus", 1, "gpu_model", "A10G", "spot_usd_per_hour", 0.40,
      "on_demand_usd_per_hour", 1.00, "interruption", ">20%", "provider", "aws", "zone", "us-east-1a",
      "placement_score", 7, "type", "p5.48xlarge", "gpus", 8, "gpu_model", "H100", "spot_usd_per_hour",
      30.0, "on_demand_usd_per_hour", 98.0, "interruption", "<5%", "provider", "aws", "zone",
      "us-east-1b", "unavailable_until_us", (json_int_t)1, "unit", "the work of one A10G GPU-hour");
  if (ranked)
    json_object_set_new(r, "ranking", json_pack(
        "[{s:i, s:s, s:s, s:s, s:s, s:f, s:f, s:f, s:s}, {s:i, s:s, s:s, s:s, s:s, s:f, s:f, s:f, s:s},"
        " {s:i, s:s, s:s, s:s, s:s, s:f, s:f, s:f, s:s, s:b}]",
        "rank", 1, "type", "g5.xlarge", "provider", "aws", "zone", "us-east-1a", "market", "spot",
        "usd_per_hour", 0.40, "usd_per_unit", 0.4321, "efficiency", 0.93,
        "why", "0.4/h for 1 units/h, 7% lost to 0.5 interruptions/h",
        "rank", 2, "type", "g5.xlarge", "provider", "aws", "zone", "us-east-1a", "market", "on-demand",
        "usd_per_hour", 1.00, "usd_per_unit", 1.0, "efficiency", 1.0, "why", "1/h for 1 units/h",
        "rank", 3, "type", "p5.48xlarge", "provider", "aws", "zone", "us-east-1b", "market", "spot",
        "usd_per_hour", 30.0, "usd_per_unit", 10.68, "efficiency", 0.99,
        "why", "30/h for 2.81 units/h; capacity refused <here> 3 s ago", "held", 1));
  return r;
}

static void test_market(void) {
  json_t *reply = market_reply(true);
  char *text = jk_format_market(reply);
  CHECK(text && strstr(text, "RANK TYPE"));
  /* best first, each row with its market, cost per unit and reason */
  const char *first = text ? strstr(text, "   1 g5.xlarge        us-east-1a   spot") : NULL;
  const char *second = text ? strstr(text, "   2 g5.xlarge        us-east-1a   on-demand") : NULL;
  const char *third = text ? strstr(text, "   3 p5.48xlarge") : NULL;
  CHECK(first && second && third && first < second && second < third);
  CHECK(first && strstr(first, "0.4321") && strstr(first, "93%") && strstr(first, "7/10") &&
        strstr(first, "7% lost to 0.5 interruptions/h"));
  CHECK(third && strstr(third, "held") && strstr(third, "capacity refused <here>"));
  CHECK(text && strstr(text, "a unit is the work of one A10G GPU-hour."));
  free(text);
  char *html = jk_format_market_html(reply);
  CHECK(html && strstr(html, "<table class=\"spotlab-instances\">"));
  CHECK(html && strstr(html, "<td>1</td><td>g5.xlarge</td><td>us-east-1a</td><td>spot</td>"));
  CHECK(html && strstr(html, "capacity refused &lt;here&gt;") && !strstr(html, "<here>"));
  free(html);
  json_decref(reply);
  /* a gateway without a ranking: one row per type, no HTML */
  reply = market_reply(false);
  text = jk_format_market(reply);
  CHECK(text && strstr(text, "CAPACITY") && strstr(text, "7/10") && strstr(text, "none"));
  CHECK(text && !strstr(text, "RANK"));
  CHECK(jk_format_market_html(reply) == NULL);
  free(text);
  json_decref(reply);
}

int main(void) {
  test_status_gpus();
  test_market();
  TEST_MAIN_END();
}
