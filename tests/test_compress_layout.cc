// PowerSGD with a tensor layout (tuttiCompressorSetLayout), ranks as forked processes: each
// matrix is compressed on its own, so rank-1 matrices are recovered up to fp32 rounding by
// rank-1 PowerSGD at every step; 1-D tensors and matrices too small to gain are sent exactly
// (bit for bit the exact average); the bytes sent are those of the per-tensor factors (so the
// test knows which path ran); tensors under minCompressCount go exactly (PowerSGD and topk); the
// layout's arguments are checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "harness.h"

namespace {

using th::Mode;
using th::RankCtx;

// The buffer: T0 a 40 x 50 matrix, T1 a 1-D tensor of 37, T2 a 3 x 4 matrix (rank-1 factors,
// 7 floats, are not under half of its 12: sent exactly), T3 a 30 x 64 matrix.
const size_t kCounts[] = {40 * 50, 37, 3 * 4, 30 * 64};
const size_t kRows[] = {50, 37, 4, 64};  // row lengths
const size_t kCount = 40 * 50 + 37 + 12 + 30 * 64;
const int kSteps = 3;

// Rank r's gradient at step t. In T0 and T3, u_r(i) v(j) with v the same on every rank, so the
// average (u_0 + u_1)(i) v(j) / 2 has rank 1. u = k / 16 in [1, 1.7], v = integer / 8 in
// [-0.75, 0.75]: products, halves and the sum of two halves are exact in fp32.
float grad(size_t i, int r, int t) {
  size_t seg = 0, off = i;
  while (off >= kCounts[seg]) off -= kCounts[seg++];
  size_t row = off / kRows[seg], col = off % kRows[seg];
  float u = (float)(16 + (row * 7 + (size_t)r * 3 + (size_t)t + seg) % 11) / 16.0f;
  float v = (float)((int)((col * 5 + seg) % 13) - 6) / 8.0f;
  if (seg == 1 || seg == 2) return (float)((int)((off * 3 + (size_t)r * 5 + (size_t)t) % 17) - 8);
  return u * v;
}

// Rank-1 M = a b^T through one power iteration: P = M Q sums cols products in fp32, an error of
// at most cols 2^-24 sum_j |a_i b_j q_j| = cols 2^-24 kappa |a_i (b . q)|, kappa = sum |b_j q_j| /
// |b . q| the cancellation of the (pseudo-random, warm-started) Q, taken below 100; that
// turns P's direction by at most cols 2^-24 kappa. Q = M^T P and y = P Q^T add rows + r + 4
// roundings of 2^-24 relative to |M|_F (Gram-Schmidt normalizes in double). So |y - M| <=
// (100 cols + rows + 8) 2^-24 |M|_F per element. The exact average of the previous steps also
// feeds back through the residuals, whose sum is that same rounding: twice the bound covers it.
double rank1_bound(size_t rows, size_t cols, double frob) {
  return 2.0 * (100.0 * (double)cols + (double)rows + 8.0) * std::ldexp(1.0, -24) * frob;
}

// Runs kSteps compressed all-reduces (ncclAvg) of grad() on R = 2 forked ranks with the layout
// above, compressor `spec` without warm-up and with min_count: out gets each rank's results
// (rank, step, element), sent each rank's bytes sent; the two ranks' results must agree.
const int kRanks = 2;
void run_layout_steps(const char *spec, int min_count, float *out, uint64_t *sent) {
  th::run_ranks_ok(Mode::kProcs, kRanks, [&](RankCtx &ctx) {
    tuttiCompressorConfig_t cfg;
    tuttiCompressor_t c = nullptr;
    NCCL_OK(ctx, tuttiCompressorParse(spec, &cfg));
    cfg.warmupSteps = 0, cfg.minCompressCount = min_count;
    NCCL_OK(ctx, tuttiCompressorCreate(&c, &cfg, kCount, ncclFloat));
    NCCL_OK(ctx, tuttiCompressorSetLayout(c, 4, kCounts, kRows));
    std::vector<float> g(kCount);
    for (int t = 0; t < kSteps; t++) {
      for (size_t i = 0; i < kCount; i++) g[i] = grad(i, ctx.rank, t);
      float *y = out + ((size_t)ctx.rank * kSteps + (size_t)t) * kCount;
      NCCL_OK(ctx, tuttiAllReduceCompressed(g.data(), y, kCount, ncclFloat, ncclAvg, c, ctx.comm,
                                            nullptr));
    }
    NCCL_OK(ctx, tuttiCompressorBytesSent(c, &sent[ctx.rank]));
    NCCL_OK(ctx, tuttiCompressorDestroy(c));
  });
  ASSERT_EQ(memcmp(out, out + kSteps * kCount, kSteps * kCount * sizeof(float)), 0)
      << spec << ": rank 1's results differ from rank 0's";
}

TEST(CompressLayout, PowerSgdPerTensorRecoversRankOneAndSendsVectorsExactly) {
  const int R = kRanks;
  float *out = static_cast<float *>(th::shared_alloc(R * kCount * kSteps * sizeof(float)));
  uint64_t *sent = static_cast<uint64_t *>(th::shared_alloc(R * sizeof(uint64_t)));
  run_layout_steps("powersgd:1", 0, out, sent);
  for (int t = 0; t < kSteps; t++) {
    const float *y = out + (size_t)t * kCount;
    size_t off = 0;
    for (int seg = 0; seg < 4; off += kCounts[seg], seg++) {
      double frob = 0, worst = 0;
      for (size_t i = off; i < off + kCounts[seg]; i++) {
        double exact = ((double)grad(i, 0, t) + grad(i, 1, t)) / 2;
        frob += exact * exact;
        if (seg == 1 || seg == 2) {  // sent exactly: the average is exact in fp32
          ASSERT_EQ(y[i], (float)exact) << "step " << t << " tensor " << seg << " element " << i;
        }
        worst = std::max(worst, std::fabs(y[i] - exact));
      }
      if (seg == 0 || seg == 3) {
        EXPECT_LE(worst, rank1_bound(kCounts[seg] / kRows[seg], kRows[seg], std::sqrt(frob)))
            << "step " << t << " tensor " << seg;
      }
    }
  }
  // What went on the wire says which path ran: a ring all-reduce of T0's and T3's P (40 + 30
  // floats) with T1 and T2 (37 + 12), one of their Q (50 + 64): 2 (R - 1) ceil(n / R) floats.
  auto ring = [](size_t n) { return (uint64_t)(2 * ((n + 1) / 2) * sizeof(float)); };
  uint64_t want = kSteps * (ring(40 + 30 + 37 + 12) + ring(50 + 64));
  EXPECT_EQ(sent[0], want);
  EXPECT_EQ(sent[1], want);
  th::shared_free(out, R * kCount * kSteps * sizeof(float));
  th::shared_free(sent, R * sizeof(uint64_t));
}

// minCompressCount = 1921: T3 (1920 elements) joins T1 and T2 as exact, T0 (2000) stays
// compressed. For both kinds that use a layout, the three small tensors come out bit for bit the
// exact average at every step, and the bytes sent say which path ran.
void run_min_count(const char *spec, uint64_t want_per_step) {
  const int R = kRanks;
  float *out = static_cast<float *>(th::shared_alloc(R * kCount * kSteps * sizeof(float)));
  uint64_t *sent = static_cast<uint64_t *>(th::shared_alloc(R * sizeof(uint64_t)));
  run_layout_steps(spec, 1921, out, sent);
  for (int t = 0; t < kSteps; t++)
    for (size_t i = kCounts[0]; i < kCount; i++) {  // T1, T2, T3: exact averages in fp32
      float exact = (float)(((double)grad(i, 0, t) + grad(i, 1, t)) / 2);
      ASSERT_EQ(out[(size_t)t * kCount + i], exact) << spec << " step " << t << " element " << i;
    }
  EXPECT_EQ(sent[0], kSteps * want_per_step) << spec;
  EXPECT_EQ(sent[1], kSteps * want_per_step) << spec;
  th::shared_free(out, R * kCount * kSteps * sizeof(float));
  th::shared_free(sent, R * sizeof(uint64_t));
}

TEST(CompressLayout, TensorsUnderMinCompressCountGoExactly) {
  auto ring = [](size_t n) { return (uint64_t)(2 * ((n + 1) / 2) * sizeof(float)); };
  // PowerSGD rank 1: T0's P (40 floats) with the exact 37 + 12 + 1920, then T0's Q (50).
  run_min_count("powersgd:1", ring(40 + 37 + 12 + 1920) + ring(50));
  // topk 1 %: one message (R - 1 = 1 out) of the header and ceil(0.01 x 2000) = 20 pairs of T0
  // plus every element of T1, T2, T3.
  run_min_count("topk:0.01", 24 + 8 * (20 + 37 + 12 + 1920));
}

TEST(CompressLayout, BadLayoutsAreNamed) {
  th::run_ranks_ok(Mode::kProcs, 2, [](RankCtx &ctx) {
    tuttiCompressorConfig_t cfg;
    tuttiCompressor_t c = nullptr;
    NCCL_OK(ctx, tuttiCompressorParse("powersgd:2", &cfg));
    NCCL_OK(ctx, tuttiCompressorCreate(&c, &cfg, 100, ncclFloat));
    const size_t counts[] = {60, 40}, rows[] = {7, 40}, good_rows[] = {6, 40};
    RCHECK(ctx, tuttiCompressorSetLayout(c, 2, counts, rows) == ncclInvalidArgument, "7 | 60");
    RCHECK(ctx, th::contains(ncclGetLastError(ctx.comm), "rowLengths[0]"), "row not named");
    RCHECK(ctx, tuttiCompressorSetLayout(c, 1, counts, good_rows) == ncclInvalidArgument, "sum");
    RCHECK(ctx, th::contains(ncclGetLastError(ctx.comm), "add up to 60"), "sum not named");
    RCHECK(ctx, tuttiCompressorSetLayout(c, 2, nullptr, rows) == ncclInvalidArgument, "NULL");
    RCHECK(ctx, th::contains(ncclGetLastError(ctx.comm), "counts"), "counts not named");
    RCHECK(ctx, tuttiCompressorSetLayout(c, 0, counts, rows) == ncclInvalidArgument, "0");
    RCHECK(ctx, th::contains(ncclGetLastError(ctx.comm), "ntensors"), "ntensors not named");
    RCHECK(ctx, tuttiCompressorSetLayout(nullptr, 2, counts, rows) == ncclInvalidArgument, "c");
    NCCL_OK(ctx, tuttiCompressorSetLayout(c, 2, counts, good_rows));
    std::vector<float> x(100, 1.0f);
    NCCL_OK(ctx, tuttiAllReduceCompressed(x.data(), x.data(), 100, ncclFloat, ncclSum, c, ctx.comm,
                                          nullptr));
    RCHECK(ctx, x[0] == 2.0f && x[99] == 2.0f, "warm-up: exact sum, got %g %g", x[0], x[99]);
    RCHECK(ctx, tuttiCompressorSetLayout(c, 2, counts, good_rows) == ncclInvalidUsage, "late");
    RCHECK(ctx, th::contains(ncclGetLastError(ctx.comm), "before its first call"), "late msg");
    NCCL_OK(ctx, tuttiCompressorDestroy(c));
  });
}

}  // namespace
