/* The test provider class "fake" (fake_provider.c): [provider.fake] with
 * options slots and time_scale. */
#ifndef TESTS_FAKE_PROVIDER_H
#define TESTS_FAKE_PROVIDER_H

#include "provider.h"

extern const struct gw_provider_class fake_provider_class;

#endif
