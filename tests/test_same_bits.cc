// Every rank of an all-reduce gets bitwise the same result, whatever the algorithm, also where
// the operand order could show: max and min with NaNs and zeros of both signs (order-free by
// their definition in reduce_ops.h, so also the same for every algorithm), and a PreMulSum on
// fp16, where an input scaled and rounded to fp16 (as it is sent) differs from one scaled in
// fp32 and added before rounding (the algorithms fix the order). Each rank
// all-gathers its result and compares it with every other rank's, byte for byte.
#include <gtest/gtest.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>

#include "forked_ranks.h"
#include "nccl.h"
#include "reduce.h"

namespace {

const size_t kCount = 96;

// Whether every rank's `bytes` at res equal rank 0's (an all-gather, then a comparison).
int same_on_every_rank(int rank, int n, ncclComm_t comm, const void *res, size_t bytes,
                       const char *what) {
  std::vector<uint8_t> all(bytes * n);
  CHILD_CHECK(ncclAllGather(res, all.data(), bytes, ncclUint8, comm, nullptr) == ncclSuccess, 50,
              "all-gather: %s", ncclGetLastError(comm));
  for (int q = 1; q < n; q++)
    for (size_t i = 0; i < bytes; i++)
      CHILD_CHECK(all[i] == all[q * bytes + i], 51, "%s: byte %zu of rank %d differs from rank 0's",
                  what, i, q);
  return 0;
}

// Float max and min, element i a NaN on the ranks whose bit (i >> rank) is set, a zero of the
// rank's parity's sign where i % 5 == 4, else +-(rank + 1). Every element is checked exactly: a
// NaN loses to a number, -0 < +0, and all NaNs give a NaN (reduce_ops.h).
int nan_max_min(int rank, int n, ncclComm_t comm) {
  auto value = [](int q, size_t i) {
    if ((i >> q) & 1) return NAN;
    if (i % 5 == 4) return q % 2 ? -0.0f : 0.0f;
    return (float)(q + 1) * (i % 3 ? 1.0f : -1.0f);
  };
  for (ncclRedOp_t op : {ncclMax, ncclMin})
    for (bool in_place : {false, true}) {
      std::vector<float> s(kCount), r(kCount);
      for (size_t i = 0; i < kCount; i++) s[i] = value(rank, i);
      float *dst = in_place ? s.data() : r.data();
      CHILD_CHECK(
          ncclAllReduce(s.data(), dst, kCount, ncclFloat32, op, comm, nullptr) == ncclSuccess, 52,
          "all-reduce: %s", ncclGetLastError(comm));
      for (size_t i = 0; i < kCount; i++) {
        float want = NAN;
        for (int q = 0; q < n; q++) {
          float v = value(q, i);
          if (isnan(v)) continue;
          if (isnan(want) || (op == ncclMax ? v > want : v < want) ||
              (v == want && signbit(v) != (op == ncclMax)))
            want = v;
        }
        bool ok = isnan(want) ? isnan(dst[i]) : dst[i] == want && signbit(dst[i]) == signbit(want);
        CHILD_CHECK(ok, 53, "%s element %zu: %g, want %g", op == ncclMax ? "max" : "min", i, dst[i],
                    want);
      }
      int rc = same_on_every_rank(rank, n, comm, dst, kCount * sizeof(float),
                                  op == ncclMax ? "max with NaNs" : "min with NaNs");
      if (rc) return rc;
    }
  return 0;
}

// fp16 PreMulSum with the scalar 1/3 (rounded to fp16): within the bound of 2n roundings of
// the sum of the magnitudes (each operation rounds to fp16: a relative 2^-11 at most).
int half_premul(int rank, int n, ncclComm_t comm) {
  uint16_t scalar = tutti_float_to_half(1.0f / 3.0f);
  float sv = tutti_half_to_float(scalar);
  for (bool in_place : {false, true}) {
    std::vector<uint16_t> s(kCount), r(kCount);
    auto x = [](int q, size_t i) { return 1.0f + (float)((i * 37 + (size_t)q * 11) % 997) / 64; };
    for (size_t i = 0; i < kCount; i++) s[i] = tutti_float_to_half(x(rank, i));
    ncclRedOp_t op;
    CHILD_CHECK(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat16, ncclScalarHostImmediate,
                                         comm) == ncclSuccess,
                54, "PreMulSum: %s", ncclGetLastError(comm));
    uint16_t *dst = in_place ? s.data() : r.data();
    CHILD_CHECK(ncclAllReduce(s.data(), dst, kCount, ncclFloat16, op, comm, nullptr) == ncclSuccess,
                55, "all-reduce: %s", ncclGetLastError(comm));
    ncclRedOpDestroy(op, comm);
    for (size_t i = 0; i < kCount; i++) {
      double exact = 0, mag = 0;
      for (int q = 0; q < n; q++) {
        double t = (double)sv * tutti_half_to_float(tutti_float_to_half(x(q, i)));
        exact += t, mag += fabs(t);
      }
      double got = tutti_half_to_float(dst[i]), bound = 2.0 * n * ldexp(mag, -11);
      CHILD_CHECK(fabs(got - exact) <= bound, 56, "element %zu: %g, exact %g, bound %g", i, got,
                  exact, bound);
    }
    int rc = same_on_every_rank(rank, n, comm, dst, kCount * 2, "fp16 PreMulSum");
    if (rc) return rc;
  }
  return 0;
}

class SameBits : public ::testing::TestWithParam<const char *> {};

// 2, 3 and 4 ranks (4: the tuner's recursive doubling), each algorithm forced by TUTTI_ALGO
// ("" : the tuner's choice).
TEST_P(SameBits, EveryRankGetsTheSameResult) {
  std::string algo = GetParam();
  for (int n : {2, 3, 4}) {
    auto codes = forked(
        n,
        [algo](int) {
          if (!algo.empty()) setenv("TUTTI_ALGO", algo.c_str(), 1);
        },
        [n](int rank, ncclComm_t comm) {
          int rc = nan_max_min(rank, n, comm);
          return rc ? rc : half_premul(rank, n, comm);
        });
    for (int r = 0; r < n; r++)
      EXPECT_EQ(codes[r], 0) << (algo.empty() ? "default" : algo) << ", " << n << " ranks, rank "
                             << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Algos, SameBits,
                         ::testing::Values("", "oneshot", "rd", "rhd", "ring", "tree", "mring"),
                         [](const ::testing::TestParamInfo<const char *> &p) {
                           return std::string(*p.param ? p.param : "tuner");
                         });

}  // namespace
