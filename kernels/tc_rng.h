/* Explicit-state random numbers for the training core.
 *
 * xoshiro256** seeded through splitmix64. The whole state is four 64-bit words
 * so it can be copied into a checkpoint and restored bit-exactly; nothing here
 * touches global state. Every consumer (weight init, data sampling, token
 * sampling) owns its own generator so one never perturbs another's stream. */
#ifndef TC_RNG_H
#define TC_RNG_H

#include <stdint.h>

struct tc_rng {
  uint64_t s[4];
};

/* Seeds from one 64-bit value; distinct streams use distinct (seed, stream). */
void tc_rng_seed(struct tc_rng *r, uint64_t seed, uint64_t stream);
uint64_t tc_rng_next(struct tc_rng *r);
/* Uniform in [0, n) without modulo bias; n > 0. */
uint64_t tc_rng_below(struct tc_rng *r, uint64_t n);
/* Uniform float in [0, 1) with 24 random bits. */
float tc_rng_uniform(struct tc_rng *r);
/* Standard normal (Box-Muller on two uniforms, computed in double). */
float tc_rng_normal(struct tc_rng *r);

#endif
