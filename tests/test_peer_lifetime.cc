// A rank must not return from a collective while a peer may still read its buffers (the direct
// and cma algorithms read peers' buffers in place or by copy: src/algos/direct.c, cma.c,
// src/engine_peer.c, whose PEER_DONE step waits for every peer's done word). As soon as a call
// returns, the caller may reuse or free its buffers; a peer still reading them would then read
// garbage (threads, processes with process_vm_readv) or fault (an ncclMemFree'd region).
//
// The test hook TUTTI_TEST_PEER_DELAY_US / TUTTI_TEST_PEER_DELAY_RANK (engine_peer.c) makes
// rank 2 sleep before each of its peer-reading steps, so it is the last reader by far. Every
// other rank, the moment its call returns, overwrites its send and receive buffers with a
// pattern and frees them; rank 2's result must still be exact. Ranks as threads (direct, heap
// buffers), as processes reading by copy (cma, heap buffers) and as processes mapping each
// other's ncclMemAlloc regions (direct). The calls: all-reduce (in and out of place),
// reduce-scatter, all-gather, and with direct and cma also broadcast, reduce, gather, scatter
// and all-to-all. Each run also asserts what ran (the planner's INFO line per call) and that the
// delay did happen (rank 2's call lasted at least the delay).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "harness.h"
#include "log_capture.h"

namespace {

using th::Mode;
using th::RankCtx;

constexpr int kRanks = 3;
constexpr int kDelayed = 2;            // the slow reader
constexpr long kDelayUs = 300000;      // before each of its peer-reading steps
constexpr size_t kBlock = 30011;       // elements per rank's block (not a multiple of a piece)
constexpr unsigned char kJunk = 0x5a;  // what a returned rank writes over its buffers

// Set before main, so the library reads them (settings are cached at first use) in this
// process and in every rank forked from it.
const bool g_env = [] {
  setenv("TUTTI_TEST_PEER_DELAY_US", std::to_string(kDelayUs).c_str(), 1);
  setenv("TUTTI_TEST_PEER_DELAY_RANK", std::to_string(kDelayed).c_str(), 1);
  setenv("TUTTI_MEM_ALLOC", "shared", 1);  // ncclMemAlloc: memfd regions the peers map
  return true;
}();

// The rooted calls: broadcast and scatter from rank 0 (the delayed rank reads the root's buffer),
// reduce and gather to the delayed rank (it reads the others' buffers; in a reduce the others
// also write their segments into its buffer).
enum class Call {
  kAllReduce,
  kAllReduceInPlace,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kReduce,
  kGather,
  kScatter,
  kAllToAll
};
const std::vector<Call> kCalls = {Call::kAllReduce, Call::kAllReduceInPlace, Call::kReduceScatter,
                                  Call::kAllGather};
const std::vector<Call> kAllCalls = {
    Call::kAllReduce, Call::kAllReduceInPlace, Call::kReduceScatter,
    Call::kAllGather, Call::kBroadcast,        Call::kReduce,
    Call::kGather,    Call::kScatter,          Call::kAllToAll};
enum class Mem { kHeap, kMemAlloc };

// Rank r's input element i in call c; every sum of kRanks of them fits int32 exactly. The call
// is part of the value: a buffer freed after one call and handed out again by malloc for the
// next holds that call's values, which a late reader must not mistake for the ones it wanted.
int32_t input(Call c, int r, size_t i) {
  return static_cast<int32_t>(i % 1001) + 7 * r + 10000 * static_cast<int>(c);
}
int32_t sum_of_inputs(Call c, size_t i) {
  return 3 * static_cast<int32_t>(i % 1001) + 7 * (0 + 1 + 2) + 30000 * static_cast<int>(c);
}

void *alloc(Mem mem, size_t bytes) {
  void *p = nullptr;
  if (mem == Mem::kHeap) return malloc(bytes);
  return ncclMemAlloc(&p, bytes) == ncclSuccess ? p : nullptr;
}

void release(Mem mem, void *p) {
  if (mem == Mem::kHeap)
    free(p);
  else
    ncclMemFree(p);
}

// Element counts of the send and receive buffers of one call.
void extents(Call c, size_t *send, size_t *recv) {
  bool one_block_in =
      c == Call::kAllGather || c == Call::kBroadcast || c == Call::kReduce || c == Call::kGather;
  bool one_block_out = c == Call::kReduceScatter || c == Call::kBroadcast || c == Call::kReduce ||
                       c == Call::kScatter;
  *send = one_block_in ? kBlock : kRanks * kBlock;
  *recv = one_block_out ? kBlock : kRanks * kBlock;
}

ncclResult_t issue(Call c, const int32_t *send, int32_t *recv, ncclComm_t comm) {
  switch (c) {
    case Call::kAllReduce:
    case Call::kAllReduceInPlace:
      return ncclAllReduce(send, recv, kRanks * kBlock, ncclInt32, ncclSum, comm, nullptr);
    case Call::kReduceScatter:
      return ncclReduceScatter(send, recv, kBlock, ncclInt32, ncclSum, comm, nullptr);
    case Call::kAllGather:
      return ncclAllGather(send, recv, kBlock, ncclInt32, comm, nullptr);
    case Call::kBroadcast:
      return ncclBroadcast(send, recv, kBlock, ncclInt32, 0, comm, nullptr);
    case Call::kReduce:
      return ncclReduce(send, recv, kBlock, ncclInt32, ncclSum, kDelayed, comm, nullptr);
    case Call::kGather:
      return ncclGather(send, recv, kBlock, ncclInt32, kDelayed, comm, nullptr);
    case Call::kScatter:
      return ncclScatter(send, recv, kBlock, ncclInt32, 0, comm, nullptr);
    case Call::kAllToAll:
      return ncclAlltoAll(send, recv, kBlock, ncclInt32, comm, nullptr);
  }
  return ncclInternalError;
}

int32_t expected(Call c, int rank, size_t i) {
  int block = static_cast<int>(i / kBlock);
  switch (c) {
    case Call::kReduceScatter:
      return sum_of_inputs(c, rank * kBlock + i);
    case Call::kAllGather:
    case Call::kGather:
      return input(c, block, i % kBlock);
    case Call::kBroadcast:
      return input(c, 0, i);
    case Call::kScatter:
      return input(c, 0, rank * kBlock + i);
    case Call::kAllToAll:
      return input(c, block, rank * kBlock + i % kBlock);
    default:
      return sum_of_inputs(c, i);
  }
}

// One call; a rank other than kDelayed wipes and frees its buffers as soon as it returns, the
// delayed rank checks every element first. The delayed rank's call time goes to *delayed_s.
void one_call(RankCtx &ctx, Call c, Mem mem, double *delayed_s) {
  size_t ns, nr;
  extents(c, &ns, &nr);
  bool in_place = c == Call::kAllReduceInPlace;
  auto *recv = static_cast<int32_t *>(alloc(mem, nr * 4));
  auto *send = in_place ? recv : static_cast<int32_t *>(alloc(mem, ns * 4));
  RCHECK(ctx, recv && send, "rank %d: cannot allocate %zu + %zu elements", ctx.rank, ns, nr);
  for (size_t i = 0; i < ns; i++) send[i] = input(c, ctx.rank, i);
  if (!in_place) memset(recv, 0, nr * 4);
  double t0 = th::now_s();
  NCCL_OK(ctx, issue(c, send, recv, ctx.comm));
  double took = th::now_s() - t0;
  if (ctx.rank != kDelayed) {  // a user reusing, then freeing, its buffers at once
    memset(recv, kJunk, nr * 4);
    if (!in_place) memset(send, kJunk, ns * 4);
  } else {
    *delayed_s = took;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < nr; i++)
      if (recv[i] != expected(c, ctx.rank, i) && bad++ == 0) first = i;
    RCHECK(ctx, bad == 0, "call %d: %zu of %zu elements wrong, the first at %zu: %d, want %d",
           static_cast<int>(c), bad, nr, first, recv[first], expected(c, ctx.rank, first));
  }
  if (!in_place) release(mem, send);
  release(mem, recv);
}

// Every call of `list` on kRanks ranks; `line` is what the planner logs for each call that ran
// the algorithm under test (one per call and rank: `calls` of them run it, all by default).
void run_all(Mode mode, Mem mem, const th::Options &opt, const char *line,
             const std::vector<Call> &list = kAllCalls, int calls = -1) {
  const size_t n = list.size();
  if (calls < 0) calls = static_cast<int>(n);
  double *took = static_cast<double *>(th::shared_alloc(sizeof(double) * n));
  ASSERT_NE(took, nullptr);
  log_capture::clear();
  th::run_ranks_ok(
      mode, kRanks,
      [&](RankCtx &ctx) {
        int k = 0;
        for (Call c : list) {
          one_call(ctx, c, mem, &took[k++]);
          if (!ctx.ok()) return;
        }
      },
      opt, "peer reads outlived by their buffers' owners");
  EXPECT_EQ(log_capture::count(line), kRanks * calls)
      << "every call of every rank ran '" << line << "'";
  for (size_t k = 0; k < n; k++)
    EXPECT_GE(took[k], kDelayUs / 1e6) << "call " << k << ": the delayed rank did not wait "
                                       << "(TUTTI_TEST_PEER_DELAY_US did not take effect?)";
  th::shared_free(took, sizeof(double) * n);
}

const char *const kDirectLine = "direct, the peers' buffers mapped";
const char *const kCmaLine = "cma, the peers' buffers read by copy";
const char *const kPushLine = "push, the peers' buffers mapped";

// Ranks as threads: every buffer is mappable (one address space), direct reads them in place.
TEST(PeerLifetime, ReturnedRanksReuseTheirBuffersThreads) {
  setenv("TUTTI_ALGO", "direct", 1);
  setenv("TUTTI_DIRECT_MIN_BYTES", "1", 1);
  run_all(Mode::kThreads, Mem::kHeap, th::Options(), kDirectLine);
  unsetenv("TUTTI_ALGO");
  unsetenv("TUTTI_DIRECT_MIN_BYTES");
}

// Ranks as threads, push (the two all-reduces; direct the others): each rank also writes its
// segment into the others' receive buffers.
const char *const kPushAlgos = "allreduce:push;reducescatter:direct;allgather:direct";
TEST(PeerLifetime, ReturnedRanksReuseTheirBuffersPushThreads) {
  setenv("TUTTI_ALGO", kPushAlgos, 1);
  setenv("TUTTI_PUSH_MIN_BYTES", "1", 1);
  setenv("TUTTI_DIRECT_MIN_BYTES", "1", 1);
  run_all(Mode::kThreads, Mem::kHeap, th::Options(), kPushLine, kCalls, 2);
  unsetenv("TUTTI_ALGO");
  unsetenv("TUTTI_PUSH_MIN_BYTES");
  unsetenv("TUTTI_DIRECT_MIN_BYTES");
}

// Processes with heap buffers: cma reads them by copy (process_vm_readv).
TEST(PeerLifetime, ReturnedRanksReuseTheirBuffersCmaProcs) {
  th::Options opt;
  opt.env = {
      {"TUTTI_ALGO", "cma"}, {"TUTTI_CMA_MIN_BYTES", "1"}, {"TUTTI_CMA_COPY_MIN_BYTES", "1"}};
  run_all(Mode::kProcs, Mem::kHeap, opt, kCmaLine);
}

// Processes with ncclMemAlloc buffers: direct maps them; a freed region is unmapped, so a late
// reader would fault.
TEST(PeerLifetime, ReturnedRanksFreeTheirMemAllocBuffersDirectProcs) {
  th::Options opt;
  opt.env = {{"TUTTI_ALGO", "direct"}, {"TUTTI_DIRECT_MIN_BYTES", "1"}};
  run_all(Mode::kProcs, Mem::kMemAlloc, opt, kDirectLine);
}

// The same with push: a late writer into a freed region would fault too.
TEST(PeerLifetime, ReturnedRanksFreeTheirMemAllocBuffersPushProcs) {
  th::Options opt;
  opt.env = {
      {"TUTTI_ALGO", kPushAlgos}, {"TUTTI_PUSH_MIN_BYTES", "1"}, {"TUTTI_DIRECT_MIN_BYTES", "1"}};
  run_all(Mode::kProcs, Mem::kMemAlloc, opt, kPushLine, kCalls, 2);
}

}  // namespace
