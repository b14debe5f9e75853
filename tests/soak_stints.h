// Stints of one collective at one size (the measured choice's bucket: a power of two of bytes),
// long enough for its warm-up, probes and decisions, with each rank choosing its own buffers per
// stint (heap, or ncclMemAlloc) and its own placement per call, and the rooted collectives between
// stints; every result checked against its closed form (harness run_case). Shared by
// test_soak_measured.cc (forked ranks) and soak_run.cc (a rank program for tutti-run).
#ifndef TUTTI_TESTS_SOAK_STINTS_H_
#define TUTTI_TESTS_SOAK_STINTS_H_

#include <cstdint>

#include "harness.h"

// `calls` calls on ctx's communicator, sizes from 64 KiB to 2^max_log2 bytes; the same draws on
// every rank (the same seed), each rank taking its own bits of the per-rank draws. Stops at the
// first failure (reported through ctx).
void soak_stints(th::RankCtx &ctx, uint64_t seed, long calls, int max_log2);

#endif  // TUTTI_TESTS_SOAK_STINTS_H_
