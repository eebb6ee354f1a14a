/* xoshiro256** with splitmix64 seeding; see tc_rng.h for the contract. */
#include "tc_rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void tc_rng_seed(struct tc_rng *r, uint64_t seed, uint64_t stream) {
  uint64_t x = seed ^ (stream * UINT64_C(0xd1342543de82ef95));
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
  if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3])) r->s[0] = 1; /* never all zero */
}

uint64_t tc_rng_next(struct tc_rng *r) {
  uint64_t *s = r->s;
  uint64_t out = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return out;
}

uint64_t tc_rng_below(struct tc_rng *r, uint64_t n) {
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do x = tc_rng_next(r);
  while (x >= limit);
  return x % n;
}

float tc_rng_uniform(struct tc_rng *r) {
  return (float)(tc_rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

float tc_rng_normal(struct tc_rng *r) {
  double u1 = ((double)(tc_rng_next(r) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  double u2 = (double)(tc_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
