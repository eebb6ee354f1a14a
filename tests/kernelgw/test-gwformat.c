/* Plain-text renderings of gateway replies (client/gwformat.c): %status
 * lists every worker with its fields, and a worker whose GPUs disagree
 * with its instance type gets its warning on a line of its own, whole. */
#include <jansson.h>
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

int main(void) {
  test_status_gpus();
  TEST_MAIN_END();
}
