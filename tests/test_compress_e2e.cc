// Compressed all-reduces end to end (tuttiAllReduceCompressed), ranks as forked processes:
// results the same bits on every rank and within each compressor's bound of the exact sum (or
// exact where the arithmetic allows), the bytes counted, error feedback over many steps, topk's
// exact first step, PowerSGD exact on low-rank gradients, argument checks, and a rank that
// sends another kind's message is named in every rank's error, with no rank left waiting.
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

// Rank r's input: varied magnitudes (up to 2^4) and signs, different on every rank.
float input(size_t i, int r) {
  float m = std::ldexp(1.0f + (float)((i * 37 + (size_t)r * 11) % 101) / 101.0f,
                       (int)((i * 7 + (size_t)r) % 9) - 4);
  return (i + (size_t)r) % 3 == 0 ? -m : m;
}

// Every rank writes its result to shared memory; the parent compares them bit for bit.
struct Shared {
  float *y = nullptr;
  size_t count = 0;
  int nranks = 0;
  uint64_t *sent = nullptr;
  float *aux = nullptr;  // one value per rank
  Shared(size_t n, int R) : count(n), nranks(R) {
    y = static_cast<float *>(th::shared_alloc(std::max<size_t>(1, n * R) * sizeof(float)));
    sent = static_cast<uint64_t *>(th::shared_alloc(R * sizeof(uint64_t)));
    aux = static_cast<float *>(th::shared_alloc(R * sizeof(float)));
  }
  ~Shared() {
    th::shared_free(y, std::max<size_t>(1, count * nranks) * sizeof(float));
    th::shared_free(sent, nranks * sizeof(uint64_t));
    th::shared_free(aux, nranks * sizeof(float));
  }
  float *of(int r) { return y + (size_t)r * count; }
};

// One compressed all-reduce of `count` elements on R processes, results into sh.
void run_once(const char *spec, int R, size_t count, ncclRedOp_t op, bool in_place, Shared &sh,
              const th::Options &opt = th::Options()) {
  th::run_ranks_ok(
      Mode::kProcs, R,
      [&](RankCtx &ctx) {
        tuttiCompressorConfig_t cfg;
        tuttiCompressor_t c = nullptr;
        NCCL_OK(ctx, tuttiCompressorParse(spec, &cfg));
        NCCL_OK(ctx, tuttiCompressorCreate(&c, &cfg, count, ncclFloat));
        std::vector<float> x(count), y(count, -7.0f);
        for (size_t i = 0; i < count; i++) x[i] = input(i, ctx.rank);
        float *out = in_place ? x.data() : y.data();
        NCCL_OK(ctx, tuttiAllReduceCompressed(x.data(), out, count, ncclFloat, op, c, ctx.comm,
                                              nullptr));
        memcpy(sh.of(ctx.rank), out, count * sizeof(float));
        NCCL_OK(ctx, tuttiCompressorBytesSent(c, &sh.sent[ctx.rank]));
        NCCL_OK(ctx, tuttiCompressorDestroy(c));
      },
      opt, std::string(spec) + " R=" + std::to_string(R));
}

void expect_same_on_every_rank(const Shared &sh, const char *what) {
  for (int r = 1; r < sh.nranks; r++)
    ASSERT_EQ(memcmp(sh.y, sh.y + (size_t)r * sh.count, sh.count * sizeof(float)), 0)
        << what << ": rank " << r << " differs from rank 0";
}

void expect_bytes(const Shared &sh, const char *spec, size_t count) {
  tuttiCompressorConfig_t cfg;
  size_t want = 0;
  ASSERT_EQ(tuttiCompressorParse(spec, &cfg), ncclSuccess);
  ASSERT_EQ(tuttiCompressedWireBytes(&cfg, count, sh.nranks, &want), ncclSuccess);
  for (int r = 0; r < sh.nranks; r++) EXPECT_EQ(sh.sent[r], want) << spec << " rank " << r;
}

// bf16 / fp16: each contribution x_r / R (Avg) is cast once (error <= u |x_r| / R, u = 2^-8
// for bf16, 2^-11 for fp16: these inputs are normal in both), summed in fp32 (R roundings of
// at most 2^-24 of the partial sums, each <= sum|x_r|), and the sum cast once more (<= u times
// the sum). With S = sum_r |x_r| / R: |y - exact| <= u S + R 2^-24 S + u S (1 + u) < 2.1 u S.
// int8: each contribution within s_r / 2 (1 + 2^-13), s_r = max of its block of x_r / R over
// 127; the sum within its block's max / 254 (1 + 2^-13). With B = max over the block and
// ranks of |x_r| / R: |y - exact| <= (R B + R B (1 + 1/254)) / 254 (1 + 2^-13) + R 2^-24 R B
// < 2.01 R B / 254.
void check_block_kind(const char *spec, double u, int R, size_t count, ncclRedOp_t op,
                      bool in_place) {
  SCOPED_TRACE(std::string(spec) + " R=" + std::to_string(R) + " count=" + std::to_string(count));
  Shared sh(count, R);
  run_once(spec, R, count, op, in_place, sh);
  expect_same_on_every_rank(sh, spec);
  expect_bytes(sh, spec, count);
  double scale = op == ncclAvg ? 1.0 / R : 1.0;
  bool is_int8 = strcmp(spec, "int8") == 0;
  for (size_t lo = 0; lo < count; lo += 256) {
    size_t hi = std::min(count, lo + 256);
    double B = 0;
    for (size_t i = lo; i < hi; i++)
      for (int r = 0; r < R; r++) B = std::max(B, std::fabs((double)input(i, r)) * scale);
    for (size_t i = lo; i < hi; i++) {
      double exact = 0, S = 0;
      for (int r = 0; r < R; r++) exact += input(i, r) * scale, S += std::fabs(input(i, r)) * scale;
      double bound = is_int8 ? 2.01 * R * B / 254 : 2.1 * u * S;
      ASSERT_LE(std::fabs(sh.y[i] - exact), bound) << "element " << i;
    }
  }
}

TEST(CompressE2E, Bf16Fp16Int8WithinBoundAndSameOnEveryRank) {
  for (int R : {2, 3})
    for (size_t count : {1u, 1000u, 4099u}) {
      check_block_kind("bf16", std::ldexp(1.0, -8), R, count, ncclAvg, false);
      check_block_kind("fp16", std::ldexp(1.0, -11), R, count, ncclSum, true);
      check_block_kind("int8", 0, R, count, ncclAvg, count == 1000);
    }
  // more than one pipeline piece (1 Mi elements each): 3 pieces, the last one short
  check_block_kind("bf16", std::ldexp(1.0, -8), 3, 2500001, ncclAvg, true);
  check_block_kind("int8", 0, 2, 2500001, ncclSum, false);
}

// topk, first step (empty residual), Sum: every rank's k largest inputs are one big element
// every 50, whose magnitudes lie in distinct 2^-7 buckets above the rest; the result is the sum
// of the selected elements over ranks, exact (integers in fp32).
TEST(CompressE2E, TopkFirstStepIsTheSumOfEachRanksLargest) {
  const int R = 3;
  const size_t count = 5000;  // k = 100 at 2%
  Shared sh(count, R);
  auto value = [](size_t i, int r) {
    return (i + (size_t)r) % 50 == 0 ? (float)(1000 + 10 * i) : (float)((i + r) % 7) - 3.0f;
  };
  th::run_ranks_ok(Mode::kProcs, R, [&](RankCtx &ctx) {
    tuttiCompressorConfig_t cfg;
    tuttiCompressor_t c = nullptr;
    NCCL_OK(ctx, tuttiCompressorParse("topk:0.02", &cfg));
    NCCL_OK(ctx, tuttiCompressorCreate(&c, &cfg, count, ncclFloat));
    std::vector<float> x(count);
    for (size_t i = 0; i < count; i++) x[i] = value(i, ctx.rank);
    NCCL_OK(ctx, tuttiAllReduceCompressed(x.data(), sh.of(ctx.rank), count, ncclFloat, ncclSum, c,
                                          ctx.comm, nullptr));
    NCCL_OK(ctx, tuttiCompressorBytesSent(c, &sh.sent[ctx.rank]));
    NCCL_OK(ctx, tuttiCompressorDestroy(c));
  });
  expect_same_on_every_rank(sh, "topk");
  expect_bytes(sh, "topk:0.02", count);
  for (size_t i = 0; i < count; i++) {
    float want = 0;
    for (int r = 0; r < R; r++)
      if ((i + (size_t)r) % 50 == 0) want += value(i, r);
    ASSERT_EQ(sh.y[i], want) << "element " << i;
  }
}

// Error feedback through the whole path, over many steps (Avg, 2 ranks). Every step's gradient
// is positive, per 256 block one element of about 1 and the rest about 1/1000 (int8 rounds those
// to 0, topk 1% never picks them at once); without feedback their gap would grow by ~5e-4 per
// step, > 0.2 after 400 steps. After the steps, `flush` calls with a zero gradient may follow.
// Each rank returns the per-element gap sum_t (y_t - exact_t) and the largest |y| it saw (aux).
void feedback_run(const char *spec, size_t steps, size_t flush, Shared &sh) {
  const int R = 2;
  const size_t count = sh.count;
  auto grad = [](size_t t, size_t i, int r) {
    double u = 0.5 + 0.5 * (double)((t * 131 + i * 17 + (size_t)r * 29) % 97) / 97.0;
    return (float)(i % 256 == (size_t)r ? u : 1e-3 * u);
  };
  th::run_ranks_ok(
      Mode::kProcs, R,
      [&](RankCtx &ctx) {
        tuttiCompressorConfig_t cfg;
        tuttiCompressor_t c = nullptr;
        NCCL_OK(ctx, tuttiCompressorParse(spec, &cfg));
        NCCL_OK(ctx, tuttiCompressorCreate(&c, &cfg, count, ncclFloat));
        std::vector<float> g(count), y(count);
        std::vector<double> gap(count, 0.0);
        float seen = 0;
        for (size_t t = 0; t < steps + flush; t++) {
          for (size_t i = 0; i < count; i++) g[i] = t < steps ? grad(t, i, ctx.rank) : 0.0f;
          NCCL_OK(ctx, tuttiAllReduceCompressed(g.data(), y.data(), count, ncclFloat, ncclAvg, c,
                                                ctx.comm, nullptr));
          for (size_t i = 0; i < count; i++) {
            double exact = t < steps ? ((double)grad(t, i, 0) + grad(t, i, 1)) / R : 0.0;
            gap[i] += (double)y[i] - exact;
            seen = std::max(seen, std::fabs(y[i]));
          }
        }
        for (size_t i = 0; i < count; i++) sh.of(ctx.rank)[i] = (float)gap[i];
        sh.aux[ctx.rank] = seen;
        NCCL_OK(ctx, tuttiCompressorDestroy(c));
      },
      th::Options(), spec);
}

double worst_gap(const Shared &sh) {
  double worst = 0;
  for (size_t i = 0; i < sh.count; i++) worst = std::max(worst, std::fabs((double)sh.y[i]));
  return worst;
}

// int8: telescoping the residuals, sum_t y_t = sum_t exact_t - (the two residuals after the last
// step), |e| <= s/2 (1 + 2^-13) each with s <= max|v| / 127, max|v| < 1.01 (inputs / R plus a
// residual): R 1.01/254 + 1.01/254, plus fp32 rounding of v, e and y at every step (< 4 2^-24
// per step): the gap stays bounded however many steps.
TEST(CompressE2E, Int8FeedbackKeepsTheSumOnTrack) {
  Shared sh(1024, 2);
  feedback_run("int8", 400, 0, sh);
  double worst = worst_gap(sh);
  EXPECT_LE(worst, 3 * 1.01 / 254 + 400 * std::ldexp(1.0, -22));
  EXPECT_GT(worst, 0.0) << "no gap at all: was it compressed?";
}

// topk: nothing is lost, only delayed. A sent value leaves the residual exactly and a value not
// sent stays in it exactly, so after ceil(n / k) + 1 calls with a zero gradient (each sends k
// of the nonzero residuals, until none is left) the sum of the results equals the sum of the
// exact averages up to fp32 rounding: per step and element, v = g / 2 + e (one rounding, 2^-24
// |v|) on each rank and y = v_0 + v_1 (one more). The gradients are positive, so a residual only
// grows until it is sent and |v| <= max |y|: gap <= steps x 3 x 2^-24 x max|y|.
TEST(CompressE2E, TopkFeedbackDelaysButLosesNothing) {
  const size_t n = 1024, k = 11, steps = 400, flush = (n + k - 1) / k + 1;
  Shared sh(n, 2);
  feedback_run("topk:0.01", steps, 0, sh);
  double before = worst_gap(sh);
  EXPECT_GT(before, 1e-3) << "the residuals should hold something before the flush";
  feedback_run("topk:0.01", steps, flush, sh);
  double bound =
      (double)(steps + flush) * 3 * std::ldexp(1.0, -24) * std::max(sh.aux[0], sh.aux[1]);
  EXPECT_LE(worst_gap(sh), bound) << "before the flush: " << before;
}

// topk warm-up over W calls: call s sends k_s = max(k, n >> floor((s + 1) H / (W + 1))) pairs,
// H the halvings from n to k, and is an exact all-reduce while 2 k_s >= n. n = 4096, 1%: k = 41,
// H = 7; W = 13: calls 0-2 exact, then 1024, 1024, 512, 512, 256, 256, 128, 128, 64, 64 pairs,
// then 41. Integer inputs: the exact calls' averages (sums of halves) are exact in fp32; a
// sparse call's result has at most R k_s nonzeros; the bytes are those of each call's path.
TEST(CompressE2E, TopkWarmUpFallsFromExactToTheFraction) {
  const int R = 2, W = 13, steps = 16;
  const size_t n = 4096;
  Shared sh(n * steps, R);
  auto value = [](size_t i, int r, int t) { return (float)((int)((i * 5 + r * 7 + t) % 21) - 10); };
  th::run_ranks_ok(Mode::kProcs, R, [&](RankCtx &ctx) {
    tuttiCompressorConfig_t cfg;
    tuttiCompressor_t c = nullptr;
    NCCL_OK(ctx, tuttiCompressorParse("topk:0.01", &cfg));
    cfg.warmupSteps = W;
    NCCL_OK(ctx, tuttiCompressorCreate(&c, &cfg, n, ncclFloat));
    std::vector<float> x(n);
    for (int t = 0; t < steps; t++) {
      for (size_t i = 0; i < n; i++) x[i] = value(i, ctx.rank, t);
      NCCL_OK(ctx, tuttiAllReduceCompressed(x.data(), sh.of(ctx.rank) + (size_t)t * n, n, ncclFloat,
                                            ncclAvg, c, ctx.comm, nullptr));
    }
    NCCL_OK(ctx, tuttiCompressorBytesSent(c, &sh.sent[ctx.rank]));
    NCCL_OK(ctx, tuttiCompressorDestroy(c));
  });
  expect_same_on_every_rank(sh, "topk warm-up");
  const size_t ks[steps] = {n, n, n, 1024, 1024, 512, 512, 256, 256, 128, 128, 64, 64, 41, 41, 41};
  uint64_t bytes = 0;
  for (int t = 0; t < steps; t++) {
    const float *y = sh.y + (size_t)t * n;
    if (2 * ks[t] >= n) {
      bytes += 2 * (R - 1) * (n / R) * sizeof(float);  // ring all-reduce of n floats
      for (size_t i = 0; i < n; i++)
        ASSERT_EQ(y[i], (value(i, 0, t) + value(i, 1, t)) / 2) << "call " << t << " at " << i;
    } else {
      bytes += (R - 1) * (24 + 8 * ks[t]);  // the all-gather of a header and k_s pairs
      size_t nonzero = 0;
      for (size_t i = 0; i < n; i++) nonzero += y[i] != 0.0f;
      EXPECT_LE(nonzero, R * ks[t]) << "call " << t;
      EXPECT_GT(nonzero, 0u) << "call " << t;
    }
  }
  EXPECT_EQ(sh.sent[0], bytes);
}

// PowerSGD on gradients of rank <= r is exact up to fp32 rounding once warm: P = M Q spans M's
// column space, so P P^T M = M. Rank-2 gradients, r = 2, past the warm-up; compared with the
// exact average, relative to its largest element: Gram-Schmidt and the products round at
// 2^-24 per operation over sums of <= 64 terms (a 64 x 64 view), times a conditioning of the
// two random columns well below 100: 64 x 100 x 2^-24 < 4e-4.
TEST(CompressE2E, PowerSgdExactOnLowRankAndSameOnEveryRank) {
  const int R = 2;
  const size_t count = 4032;  // a 63 x 64 view, no padding (a partial last row adds a rank)
  Shared sh(count, R);
  th::run_ranks_ok(Mode::kProcs, R, [&](RankCtx &ctx) {
    tuttiCompressorConfig_t cfg;
    tuttiCompressor_t c = nullptr;
    NCCL_OK(ctx, tuttiCompressorParse("powersgd:2", &cfg));
    cfg.warmupSteps = 2;
    NCCL_OK(ctx, tuttiCompressorCreate(&c, &cfg, count, ncclFloat));
    std::vector<float> g(count), y(count);
    for (int step = 0; step < 4; step++) {
      for (size_t i = 0; i < count; i++) {
        size_t row = i / 64, col = i % 64;  // rank 2 in the 64-column view
        g[i] = (float)(std::sin(0.1 * (double)row + ctx.rank) * std::cos(0.05 * (double)col) +
                       0.5 * std::cos(0.3 * (double)row) * std::sin(0.2 * (double)col + step));
      }
      NCCL_OK(ctx, tuttiAllReduceCompressed(g.data(), y.data(), count, ncclFloat, ncclAvg, c,
                                            ctx.comm, nullptr));
    }
    memcpy(sh.of(ctx.rank), y.data(), count * sizeof(float));
    NCCL_OK(ctx, tuttiCompressorBytesSent(c, &sh.sent[ctx.rank]));
    NCCL_OK(ctx, tuttiCompressorDestroy(c));
  });
  expect_same_on_every_rank(sh, "powersgd");
  double big = 0, worst = 0;
  for (size_t i = 0; i < count; i++) {
    size_t row = i / 64, col = i % 64;
    double exact = 0;
    for (int r = 0; r < R; r++)
      exact += (std::sin(0.1 * (double)row + r) * std::cos(0.05 * (double)col) +
                0.5 * std::cos(0.3 * (double)row) * std::sin(0.2 * (double)col + 3)) /
               R;
    big = std::max(big, std::fabs(exact));
    worst = std::max(worst, std::fabs(sh.y[i] - exact));
  }
  EXPECT_LE(worst, 4e-4 * big);
  // 2 dense steps, then 2 compressed: bytes say which ran
  tuttiCompressorConfig_t none = {tuttiCompressNone}, psgd;
  ASSERT_EQ(tuttiCompressorParse("powersgd:2", &psgd), ncclSuccess);
  size_t dense = 0, compressed = 0;
  tuttiCompressedWireBytes(&none, count, R, &dense);
  tuttiCompressedWireBytes(&psgd, count, R, &compressed);
  EXPECT_EQ(sh.sent[0], 2 * dense + 2 * compressed);
}

// Hierarchical: 2 "hosts" x 2 ranks (TUTTI_HOSTID per rank). Inside a host the sum is exact
// (ncclReduce to the leader), between the two leaders bf16: the bound is the bf16 one of a
// 2-rank all-reduce whose inputs are the hosts' exact sums (scaled by 1/4 for the average), plus
// the fp32 rounding of those sums (2 additions of at most 2^-24 of their size).
TEST(CompressE2E, HierarchicalCompressesOnlyBetweenHosts) {
  const int R = 4;
  const size_t count = 3001;
  Shared sh(count, R);
  th::Options opt;
  opt.before_init = [](int rank) { setenv("TUTTI_HOSTID", rank < 2 ? "hostA" : "hostB", 1); };
  run_once("bf16,hier", R, count, ncclAvg, false, sh, opt);
  expect_same_on_every_rank(sh, "bf16,hier");
  tuttiCompressorConfig_t cfg;
  size_t between = 0;
  ASSERT_EQ(tuttiCompressorParse("bf16", &cfg), ncclSuccess);
  ASSERT_EQ(tuttiCompressedWireBytes(&cfg, count, 2, &between), ncclSuccess);
  EXPECT_EQ(sh.sent[0], between);  // leaders: the compressed exchange between the 2 hosts
  EXPECT_EQ(sh.sent[2], between);
  EXPECT_EQ(sh.sent[1], 0u);  // the others send only inside their host, exact
  EXPECT_EQ(sh.sent[3], 0u);
  double u = std::ldexp(1.0, -8);
  for (size_t i = 0; i < count; i++) {
    double exact = 0, S = 0;
    for (int r = 0; r < R; r++) exact += input(i, r) / 4.0, S += std::fabs(input(i, r)) / 4.0;
    ASSERT_LE(std::fabs(sh.y[i] - exact), 2.1 * u * S + 4 * std::ldexp(S, -24)) << i;
  }
}

// ",auto": the tuner prices the compressed registry entries for the communicator at the first
// call (src/algos/compressed.c). One host: chier (exact reduce + broadcast in the host, nothing
// compressed: 2 (L - 1) buffers through shared memory cost less than the codec's passes), so
// the result is the fp32 sum of the two scaled inputs and the compressor sent nothing. Two hosts
// of one rank: flat and chier price the same exchange, the tie goes to the earlier entry
// (cblock): int8's wire bytes, int8's bound.
TEST(CompressE2E, AutoTakesTheTunersChoice) {
  const int R = 2;
  const size_t count = 3001;
  for (bool two_hosts : {false, true}) {
    SCOPED_TRACE(two_hosts ? "2 hosts" : "1 host");
    Shared sh(count, R);
    th::Options opt;
    if (two_hosts)
      opt.before_init = [](int rank) { setenv("TUTTI_HOSTID", rank ? "hostB" : "hostA", 1); };
    run_once("int8,auto", R, count, ncclAvg, false, sh, opt);
    expect_same_on_every_rank(sh, "int8,auto");
    tuttiCompressorConfig_t cfg;
    size_t wire = 0;
    ASSERT_EQ(tuttiCompressorParse("int8", &cfg), ncclSuccess);
    ASSERT_EQ(tuttiCompressedWireBytes(&cfg, count, 2, &wire), ncclSuccess);
    for (int r = 0; r < R; r++) EXPECT_EQ(sh.sent[r], two_hosts ? wire : 0u) << r;
    for (size_t i = 0; i < count; i++) {
      float x0 = 0.5f * input(i, 0), x1 = 0.5f * input(i, 1);
      if (!two_hosts) {  // one fp32 addition of the scaled inputs (x 0.5 is exact)
        ASSERT_EQ(sh.y[i], x0 + x1) << i;
        continue;
      }
      // int8: < 2.01 R B / 254, B the largest |x_r| / R in i's scale block (256 elements of
      // a rank's block, which need not start at a multiple of 256: every j within 255 of i)
      double B = 0;
      for (size_t j = i < 255 ? 0 : i - 255; j < std::min(count, i + 256); j++)
        for (int r = 0; r < R; r++) B = std::max(B, std::fabs((double)input(j, r)) / R);
      ASSERT_LE(std::fabs(sh.y[i] - ((double)x0 + x1)), 2.01 * R * B / 254) << i;
    }
  }
}

TEST(CompressE2E, AnotherKindsMessageIsAnErrorNamingTheSender) {
  // bf16 and fp16 messages have the same size, so the all-to-all delivers them; rank 1's header
  // says fp16, and every rank must fail naming rank 1 (rank 1 itself names rank 0), in one
  // piece and pipelined over two (1 Mi elements a piece), with nothing written to the output.
  for (size_t count : {999u, 1500000u}) {
    th::run_ranks_ok(
        Mode::kProcs, 3,
        [count](RankCtx &ctx) {
          tuttiCompressorConfig_t cfg;
          tuttiCompressor_t c = nullptr;
          NCCL_OK(ctx, tuttiCompressorParse(ctx.rank == 1 ? "fp16" : "bf16", &cfg));
          NCCL_OK(ctx, tuttiCompressorCreate(&c, &cfg, count, ncclFloat));
          std::vector<float> x(count, 1.0f), y(count, -5.0f);
          ncclResult_t res = tuttiAllReduceCompressed(x.data(), y.data(), count, ncclFloat, ncclSum,
                                                      c, ctx.comm, nullptr);
          std::string msg = ncclGetLastError(ctx.comm);
          RCHECK(ctx, res == ncclRemoteError, "returned %d, want ncclRemoteError", (int)res);
          const char *want =
              ctx.rank == 1 ? "malformed message from rank 0" : "malformed message from rank 1";
          RCHECK(ctx, th::contains(msg, want), "message: %s", msg.c_str());
          for (float v : y) RCHECK(ctx, v == -5.0f, "the output was written on error");
          NCCL_OK(ctx, tuttiCompressorDestroy(c));
        },
        th::Options(), "count " + std::to_string(count));
  }
}

TEST(CompressE2E, BadArgumentsAreNamed) {
  th::run_ranks_ok(Mode::kProcs, 2, [](RankCtx &ctx) {
    tuttiCompressorConfig_t cfg;
    tuttiCompressor_t c = nullptr;
    NCCL_OK(ctx, tuttiCompressorParse("int8", &cfg));
    RCHECK(ctx, tuttiCompressorCreate(&c, &cfg, 10, ncclHalf) == ncclInvalidArgument, "half");
    RCHECK(ctx, th::contains(ncclGetLastError(ctx.comm), "datatype"), "datatype not named");
    RCHECK(ctx, tuttiCompressorCreate(nullptr, &cfg, 10, ncclFloat) == ncclInvalidArgument, "c");
    cfg.kind = (tuttiCompressKind_t)42;
    RCHECK(ctx, tuttiCompressorCreate(&c, &cfg, 10, ncclFloat) == ncclInvalidArgument, "kind");
    RCHECK(ctx, th::contains(ncclGetLastError(ctx.comm), "config->kind"), "kind not named");
    NCCL_OK(ctx, tuttiCompressorParse("int8", &cfg));
    NCCL_OK(ctx, tuttiCompressorCreate(&c, &cfg, 10, ncclFloat));
    std::vector<float> x(20, 1.0f);
    RCHECK(ctx,
           tuttiAllReduceCompressed(x.data(), x.data(), 20, ncclFloat, ncclSum, c, ctx.comm,
                                    nullptr) == ncclInvalidArgument,
           "count");
    RCHECK(ctx, th::contains(ncclGetLastError(ctx.comm), "count 20"), "count not named");
    RCHECK(ctx,
           tuttiAllReduceCompressed(x.data(), x.data(), 10, ncclFloat, ncclMax, c, ctx.comm,
                                    nullptr) == ncclInvalidArgument,
           "op");
    RCHECK(ctx, th::contains(ncclGetLastError(ctx.comm), "op 2"), "op not named");
    RCHECK(ctx,
           tuttiAllReduceCompressed(nullptr, x.data(), 10, ncclFloat, ncclSum, c, ctx.comm,
                                    nullptr) == ncclInvalidArgument,
           "sendbuff");
    RCHECK(ctx, th::contains(ncclGetLastError(ctx.comm), "sendbuff"), "sendbuff not named");
    NCCL_OK(ctx, tuttiAllReduceCompressed(x.data(), x.data(), 10, ncclFloat, ncclSum, c, ctx.comm,
                                          nullptr));
    for (int i = 0; i < 10; i++) RCHECK(ctx, x[i] == 2.0f, "1 + 1 at %d is %g", i, x[i]);
    NCCL_OK(ctx, tuttiCompressorDestroy(c));
  });
}

}  // namespace
