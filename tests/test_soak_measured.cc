// Soak of the measured choices (src/adapt.h, src/adapt_stream.c): ranks as processes over shm
// make stints of one collective at one size (the measured choice's bucket: a power of two of
// bytes), long enough for its warm-up, probes and decisions, with each rank choosing its own
// buffers per stint (heap, or ncclMemAlloc memory the peers map) and its own placement per call
// (in place or not), as NCCL allows. So the handshakes move buckets between their pairs (FIFOs
// against cma, direct against push or the FIFOs) and out of them, a size's decision carries from
// one placement into the other, and the rooted collectives between stints move the call counts.
// Every result is checked element by element against its closed form (harness run_case), and
// every rank must log the same decisions in the same order.
// TUTTI_SOAK_MEASURED_CALLS sets the calls of the slow tests (default 3000 with 2 ranks, half that
// with 3), TUTTI_SOAK_MEASURED_SEED the draws' seed (20261207).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "harness.h"
#include "log_capture.h"  // first: sets the logging variables before anything reads them

namespace {

using th::Coll;
using th::Mode;
using th::RankCtx;

const char *const kDecided = "measured (slowest rank)";
const char *const kSwitched = "the peers' buffers can";

// Reductions whose bits do not depend on the algorithm with 2 ranks (so they qualify), and two
// that qualify with no count of ranks (max, min) or none (a bf16 sum over 3 ranks).
struct TypeOp {
  ncclDataType_t type;
  th::Op op;
};
const TypeOp kReductions[] = {{ncclInt32, th::Op::kSum},   {ncclUint8, th::Op::kSum},
                              {ncclInt64, th::Op::kMax},   {ncclFloat32, th::Op::kSum},
                              {ncclFloat32, th::Op::kMin}, {ncclFloat64, th::Op::kSum},
                              {ncclBfloat16, th::Op::kSum}};

// The collectives of the stints: those the measured choice serves, three times as often as each
// rooted one (which it leaves to the model).
const Coll kStintColls[] = {
    Coll::kAllReduce,     Coll::kAllReduce, Coll::kAllReduce,     Coll::kAllGather,
    Coll::kAllGather,     Coll::kAllGather, Coll::kReduceScatter, Coll::kReduceScatter,
    Coll::kReduceScatter, Coll::kAlltoAll,  Coll::kAlltoAll,      Coll::kAlltoAll,
    Coll::kBroadcast,     Coll::kReduce,    Coll::kGather,        Coll::kScatter};

// NCCL's count for `bytes` of the whole call: per-rank blocks for the collectives that have them.
size_t count_of(Coll c, size_t bytes, size_t esize, int nranks) {
  size_t n = bytes / esize;
  bool blocks = c == Coll::kAllGather || c == Coll::kReduceScatter || c == Coll::kAlltoAll ||
                c == Coll::kGather || c == Coll::kScatter;
  return std::max<size_t>(1, blocks ? n / (size_t)nranks : n);
}

// One rank's part of the soak: the same draws on every rank (same seed), each rank taking its
// own bits of the per-rank draws.
void soak_rank(RankCtx &ctx, long calls, int max_log2) {
  const char *seed = std::getenv("TUTTI_SOAK_MEASURED_SEED");
  std::mt19937_64 rng(seed ? std::strtoull(seed, nullptr, 10) : 20261207);
  const int r = ctx.rank, n = ctx.nranks;
  for (long i = 0; i < calls;) {
    th::Case c;
    c.coll = kStintColls[rng() % (sizeof(kStintColls) / sizeof(kStintColls[0]))];
    TypeOp to = kReductions[rng() % (sizeof(kReductions) / sizeof(kReductions[0]))];
    c.type = th::coll_reduces(c.coll) ? to.type : (rng() % 2 ? ncclInt32 : ncclUint8);
    c.op = to.op;
    c.root = (int)(rng() % (uint64_t)n);
    c.align = rng() % 4 == 0 ? 1 : 0;
    int log2 = 16 + (int)(rng() % (uint64_t)(max_log2 - 16 + 1));
    size_t es = c.type == ncclInt64 || c.type == ncclFloat64   ? 8
                : c.type == ncclInt32 || c.type == ncclFloat32 ? 4
                : c.type == ncclBfloat16                       ? 2
                                                               : 1;
    bool rooted = c.coll == Coll::kBroadcast || c.coll == Coll::kReduce ||
                  c.coll == Coll::kGather || c.coll == Coll::kScatter;
    long len = rooted ? 1 + (long)(rng() % 3) : 12 + (long)(rng() % 70);
    bool fixed_count = rng() % 2 == 0;
    size_t fixed = count_of(c.coll, ((size_t)1 << log2) + rng() % ((size_t)1 << log2), es, n);
    // buffers: all ranks the heap, all ncclMemAlloc, or each its own
    uint64_t kind = rng() % 5, kind_bits = rng();
    bool memalloc = kind < 2 ? false : kind < 4 ? true : ((kind_bits >> r) & 1) != 0;
    th::case_buffers_from_memalloc(memalloc);
    for (long k = 0; k < len && i < calls; k++, i++) {
      c.count = fixed_count
                    ? fixed
                    : count_of(c.coll, ((size_t)1 << log2) + rng() % ((size_t)1 << log2), es, n);
      uint64_t place = rng() % 3, place_bits = rng();
      c.in_place = place == 0 ? false : place == 1 ? true : ((place_bits >> r) & 1) != 0;
      bool broken = false;
      if (!th::run_case(ctx, c, &broken)) {
        ctx.fail("call %ld (stint of %ld, %s buffers): %s failed", i, len,
                 memalloc ? "ncclMemAlloc" : "heap", th::describe(c, n).c_str());
        th::case_buffers_from_memalloc(false);
        return;
      }
    }
  }
  th::case_buffers_from_memalloc(false);
}

// The decisions each rank logged, in order (what follows the last ": " of each line).
std::vector<std::vector<std::string>> decisions_per_rank(int n) {
  std::vector<std::vector<std::string>> out(n);
  for (const std::string &line : log_capture::lines()) {
    int rank = log_capture::rank_of(line);
    if (line.find(kDecided) != std::string::npos && rank >= 0 && rank < n)
      out[rank].push_back(line.substr(line.rfind(": ") + 2));
  }
  return out;
}

long calls_from_env(long fallback) {
  const char *env = std::getenv("TUTTI_SOAK_MEASURED_CALLS");
  return env && std::atol(env) > 0 ? std::atol(env) : fallback;
}

// Runs the soak and checks what the ranks logged: the same decisions in the same order, at least
// one in 400 calls (seeds 1-12 gave one in 30-125: the count depends on the picks, which depend
// on the machine), and at least one bucket moved between pairs by a handshake.
void soak(int nranks, long calls, int max_log2, double timeout_s) {
  const size_t min_decisions = (size_t)std::max(2L, calls / 400);
  log_capture::clear();
  th::Options opt;
  opt.timeout_s = timeout_s;
  bool ok = th::run_ranks_ok(
      Mode::kProcs, nranks, [&](RankCtx &ctx) { soak_rank(ctx, calls, max_log2); }, opt,
      std::to_string(calls) + " calls");
  if (!ok) return;
  auto d = decisions_per_rank(nranks);
  std::fprintf(stderr, "soak: %d ranks, %ld calls, %zu decisions, %d handshakes changed a pair\n",
               nranks, calls, d[0].size(), log_capture::count(kSwitched));
  EXPECT_GE(d[0].size(), min_decisions) << "logs in " << log_capture::g_dir;
  for (int r = 1; r < nranks; r++) EXPECT_EQ(d[0], d[r]) << "rank " << r << " decided otherwise";
  EXPECT_GE(log_capture::count(kSwitched), 1) << "no bucket changed pairs";
}

TEST(SoakMeasured, TwoRanksShortExact) {
  soak(2, 400, 19, 300);
}

TEST(SoakMeasured, TwoRanksExact) {
  soak(2, calls_from_env(3000), 22, 3600);
}

TEST(SoakMeasured, ThreeRanksExact) {
  soak(3, calls_from_env(3000) / 2, 21, 3600);
}

}  // namespace
