/* Fuzz target: connection file parsing. */
#include <stddef.h>
#include <stdint.h>

#include "connfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct jk_connection c;
  char err[256], ep[300];
  if (jk_connection_parse((const char *)data, size, &c, err, sizeof err) == 0)
    for (int ch = 0; ch < JK_CH_COUNT; ch++)
      jk_connection_endpoint(&c, (enum jk_channel)ch, ep, sizeof ep);
  return 0;
}
