/* spotlab-gateway's main(): the built-in provider classes, then the
 * command line. A test gateway has a main() of its own that registers its
 * test provider the same way. */
#include "gateway.h"
#include "provider.h"

#include <stdio.h>

#if GW_HAVE_LOCAL
#include "providers/local.h"
#endif
#if GW_HAVE_AWS
#include "providers/aws.h"
#endif

int main(int argc, char **argv) {
#if GW_HAVE_LOCAL
  if (gw_provider_register(&gw_local_provider_class) < 0) {
    fprintf(stderr, "spotlab-gateway: cannot register the local provider\n");
    return 1;
  }
#endif
#if GW_HAVE_AWS
  if (gw_provider_register(&gw_aws_provider_class) < 0) {
    fprintf(stderr, "spotlab-gateway: cannot register the aws provider\n");
    return 1;
  }
#endif
  return gw_main(argc, argv);
}
