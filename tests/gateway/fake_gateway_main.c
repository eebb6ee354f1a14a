/* spotlab-gateway-fake: spotlab-gateway with the test provider "fake"
 * (fake_provider.c) registered instead of the built-in ones, the way any
 * program adds a provider class. */
#include "gateway.h"
#include "provider.h"

#include <stdio.h>

extern const struct gw_provider_class fake_provider_class;

int main(int argc, char **argv) {
  if (gw_provider_register(&fake_provider_class) < 0) {
    fprintf(stderr, "spotlab-gateway-fake: cannot register the fake provider\n");
    return 1;
  }
  return gw_main(argc, argv);
}
