/* Counter-based randomness for the trainer.
 *
 * Every random decision is a pure function of (seed, purpose, a few counters): the weight init
 * of tensor t, the permutation of epoch e, the augmentation and the dropout masks of sample i
 * in epoch e. Nothing
 * random depends on how many numbers were drawn before, so
 *   - N ranks x batch b and 1 rank x batch N*b see the same samples, augmented and dropped out
 *     the same way;
 *   - a resumed run needs no generator state beyond (epoch, step) to continue bit for bit.
 * The mixer is splitmix64 (Steele, Lea, Flood 2014); a stream is a splitmix64 counter.
 */
#ifndef TRAINER_RNG_H_
#define TRAINER_RNG_H_

#include <math.h>
#include <stdint.h>

/* Purposes: one per kind of random decision, so streams never collide. */
enum { RNG_INIT = 1, RNG_SHUFFLE = 2, RNG_AUGMENT = 3, RNG_DROPOUT = 4 };

static inline uint64_t rng_mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Key of a stream: hash of the seed, the purpose and two counters. */
static inline uint64_t rng_key(uint64_t seed, int purpose, uint64_t a, uint64_t b) {
  return rng_mix(rng_mix(rng_mix(seed ^ ((uint64_t)purpose << 56)) ^ a) ^ b);
}

typedef struct {
  uint64_t state;
} rng_t;

static inline uint64_t rng_next(rng_t *r) {
  r->state += 0x9e3779b97f4a7c15ull;
  return rng_mix(r->state);
}

/* Uniform in [0, 1) with 24 random bits (exact in float). */
static inline float rng_uniform(rng_t *r) {
  return (float)(rng_next(r) >> 40) * 0x1.0p-24f;
}

/* Uniform integer in [0, n), n > 0 (Lemire's multiply-shift; bias < n / 2^32, negligible). */
static inline uint32_t rng_below(rng_t *r, uint32_t n) {
  return (uint32_t)(((rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

#endif /* TRAINER_RNG_H_ */
