// The chaos test's random draws (splitmix64): the test picks each trial's fault with it, and
// every rank of a trial draws the same sequence of calls from the trial's seed.
#ifndef TUTTI_TESTS_CHAOS_RNG_H_
#define TUTTI_TESTS_CHAOS_RNG_H_

#include <cstdint>

struct ChaosRng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  int below(int n) { return (int)(next() % (uint64_t)n); }
};

#endif  // TUTTI_TESTS_CHAOS_RNG_H_
