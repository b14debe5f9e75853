// Broadcast, reduce, gather, scatter and all-to-all on the peer path (src/algos/direct.c): direct
// on buffers the peers map (ncclMemAlloc), cma on heap buffers the peers read by copy. Exact
// results for every datatype (and every op of reduce), in and out of place, every root, counts
// around the piece edges, on processes and threads, with the proof from each rank's INFO COLL
// lines that every non-empty call took the forced algorithm (and none other); and the buffers NCCL
// lets a rank leave NULL (a non-root's send buffer in broadcast and scatter, its receive buffer
// in reduce and gather) stopping neither the mapping nor the reading by copy.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "harness.h"
#include "log_capture.h"

namespace {

const bool g_shared = (setenv("TUTTI_MEM_ALLOC", "shared", 1), true);

using th::Case;
using th::Coll;
using th::Mode;
using th::Op;
using th::RankCtx;

const Coll kColls[] = {Coll::kBroadcast, Coll::kReduce, Coll::kGather, Coll::kScatter,
                       Coll::kAlltoAll};
const char *const kForced = "broadcast:%s;reduce:%s;gather:%s;scatter:%s;alltoall:%s";

std::string forced(const char *algo) {
  char v[160];
  snprintf(v, sizeof(v), kForced, algo, algo, algo, algo, algo);
  return v;
}

using Env = std::vector<std::pair<std::string, std::string>>;

// Options that force TUTTI_ALGO=`algos` at every size (no floor for direct or cma), `more` added.
th::Options forcing(const std::string &algos, const Env &more = {}) {
  th::Options opt;
  opt.env = {{"TUTTI_ALGO", algos},
             {"TUTTI_DIRECT_MIN_BYTES", "1"},
             {"TUTTI_CMA_MIN_BYTES", "1"},
             {"TUTTI_CMA_COPY_MIN_BYTES", "1"}};
  opt.env.insert(opt.env.end(), more.begin(), more.end());
  return opt;
}

// What a peer-path all-to-all logs where some rank is in place (its ranks swap blocks).
const char *const kExchanged = "blocks exchanged pairwise";

// The calls of collective `fn` that logged "<algo>, the peers' buffers ..."
int peer_calls(const std::string &fn, const char *algo) {
  return log_capture::calls_saying(fn, std::string("): ") + algo + ", the peers' buffers");
}

struct Sweep {
  std::vector<ncclDataType_t> types;
  std::vector<size_t> counts;  // all non-zero: each call is one the peer path must run
};

// Runs every case of the five collectives on n ranks with `algo` forced (direct: buffers from
// ncclMemAlloc; cma: heap buffers) and checks that each collective logged exactly the calls the
// peer path must have taken: every case (the in-place all-to-alls exchanging blocks pairwise).
// `more`: settings added.
void run_sweep(const char *algo, Mode mode, int n, const Sweep &s, const Env &more = {}) {
  const bool direct = std::string(algo) == "direct";
  th::case_buffers_from_memalloc(direct);
  th::Options opt = forcing(forced(algo), {{"TUTTI_CMA_PIECE_BYTES", "4096"}});
  opt.env.insert(opt.env.end(), more.begin(), more.end());
  th::ThreadEnv thread_env(mode, opt);
  log_capture::clear();
  th::run_ranks_ok(
      mode, n,
      [&](RankCtx &ctx) {
        int seq = 0;
        for (Coll coll : kColls)
          for (ncclDataType_t t : s.types)
            for (Op op : th::coll_reduces(coll)
                             ? std::vector<Op>(std::begin(th::kAllOps), std::end(th::kAllOps))
                             : std::vector<Op>{Op::kSum})
              for (size_t count : s.counts)
                for (int in_place = 0; in_place < 2; in_place++) {
                  Case c;
                  c.coll = coll, c.type = t, c.op = op, c.count = count, c.in_place = in_place;
                  c.root = seq % n, c.align = static_cast<size_t>(seq) % 3;
                  seq++;
                  bool broken = false;
                  th::run_case(ctx, c, &broken);
                  if (broken) return;
                }
      },
      opt, std::string(algo) + " rooted collectives, nranks " + std::to_string(n));
  th::case_buffers_from_memalloc(false);
  const int per = n * static_cast<int>(s.types.size() * s.counts.size());
  // PreMulSum scales its inputs, which the peer path's single pass does not: the FIFOs run it
  const int reduce_ops = static_cast<int>(std::size(th::kAllOps)) - 1;
  for (Coll coll : kColls) {
    const std::string fn = std::string("nccl") + th::coll_name(coll);
    int want = per * 2 * (coll == Coll::kReduce ? reduce_ops : 1);
    EXPECT_EQ(peer_calls(fn, algo), want) << fn << " calls logged as " << algo << ", nranks " << n;
  }
  EXPECT_EQ(log_capture::calls_saying("ncclAlltoAll", kExchanged), per)
      << "in-place all-to-alls exchanging";
}

const Sweep kWide = {{std::begin(th::kAllTypes), std::end(th::kAllTypes)}, {1, 1023}};
const Sweep kCounts = {{ncclFloat32}, {1, 7, 1024, 16385, 70001}};

TEST(DirectRooted, EveryTypeProcs) {
  for (const char *algo : {"direct", "cma"}) run_sweep(algo, Mode::kProcs, 3, kWide);
}

TEST(DirectRooted, CountsAndRanksProcs) {
  for (const char *algo : {"direct", "cma"})
    for (int n : {2, 4}) run_sweep(algo, Mode::kProcs, n, kCounts);
}

// Every call streaming its results (TUTTI_NT_THRESHOLD and TUTTI_CACHE_BYTES at 1), in place
// too, where the blocks from the peers are written with streaming stores: the same exact results.
TEST(DirectRooted, StreamingStoresProcs) {
  for (const char *algo : {"direct", "cma"}) {
    run_sweep(algo, Mode::kProcs, 3, kCounts,
              {{"TUTTI_NT_THRESHOLD", "1"}, {"TUTTI_CACHE_BYTES", "1"}, {"TUTTI_NT_MEASURE", "0"}});
    for (Coll coll : kColls) {
      const std::string fn = std::string("nccl") + th::coll_name(coll);
      EXPECT_GT(log_capture::calls_saying(fn, "results written with streaming stores"), 0)
          << fn << " " << algo;
    }
  }
}

TEST(DirectRooted, CountsAndRanksThreads) {
  for (int n : {2, 5}) run_sweep("direct", Mode::kThreads, n, kCounts);
}

// Rank r's send element i.
int32_t value(int r, size_t i) {
  return static_cast<int32_t>(r * 1000003 + static_cast<int>(i));
}

// A non-root's unused buffers are NULL (NCCL allows it): broadcast and scatter without a send
// buffer, reduce and gather without a receive buffer. Every call still takes `algo` (every rank
// logs it) and the results are exact.
void run_null_buffers(const char *algo) {
  const bool direct = std::string(algo) == "direct";
  const int n = 3;
  const size_t k = 20000;  // 80 KB per block
  const th::Options opt = forcing(forced(algo));
  log_capture::clear();
  th::run_ranks_ok(
      Mode::kProcs, n,
      [&](RankCtx &ctx) {
        const int r = ctx.rank, root = 1;
        const bool is_root = r == root;
        int32_t *send = nullptr, *recv = nullptr;
        std::vector<int32_t> heap_send(n * k), heap_recv(n * k);
        if (direct) {
          RCHECK(ctx, ncclMemAlloc(reinterpret_cast<void **>(&send), n * k * 4) == ncclSuccess,
                 "alloc send");
          RCHECK(ctx, ncclMemAlloc(reinterpret_cast<void **>(&recv), n * k * 4) == ncclSuccess,
                 "alloc recv");
          if (!ctx.ok()) return;
        } else {
          send = heap_send.data(), recv = heap_recv.data();
        }
        auto fill = [&](size_t elems) {
          for (size_t i = 0; i < elems; i++) send[i] = value(r, i);
          for (size_t i = 0; i < n * k; i++) recv[i] = -1;
        };
        fill(k);
        NCCL_OK(ctx, ncclBroadcast(is_root ? send : nullptr, recv, k, ncclInt32, root, ctx.comm,
                                   nullptr));
        for (size_t i = 0; i < k && ctx.ok(); i++)
          RCHECK(ctx, recv[i] == value(root, i), "broadcast: [%zu] = %d", i, recv[i]);
        fill(k);
        NCCL_OK(ctx, ncclReduce(send, is_root ? recv : nullptr, k, ncclInt32, ncclSum, root,
                                ctx.comm, nullptr));
        for (size_t i = 0; is_root && i < k && ctx.ok(); i++)
          RCHECK(ctx, recv[i] == value(0, i) + value(1, i) + value(2, i), "reduce: [%zu] = %d", i,
                 recv[i]);
        fill(k);
        NCCL_OK(ctx,
                ncclGather(send, is_root ? recv : nullptr, k, ncclInt32, root, ctx.comm, nullptr));
        for (size_t i = 0; is_root && i < n * k && ctx.ok(); i++)
          RCHECK(ctx, recv[i] == value(static_cast<int>(i / k), i % k), "gather: [%zu] = %d", i,
                 recv[i]);
        fill(n * k);
        NCCL_OK(ctx,
                ncclScatter(is_root ? send : nullptr, recv, k, ncclInt32, root, ctx.comm, nullptr));
        for (size_t i = 0; i < k && ctx.ok(); i++)
          RCHECK(ctx, recv[i] == value(root, r * k + i), "scatter: [%zu] = %d", i, recv[i]);
        if (direct) ncclMemFree(send), ncclMemFree(recv);
      },
      opt, std::string(algo) + " with NULL buffers on the non-roots");
  for (Coll coll : {Coll::kBroadcast, Coll::kReduce, Coll::kGather, Coll::kScatter})
    EXPECT_EQ(peer_calls(std::string("nccl") + th::coll_name(coll), algo), n)
        << th::coll_name(coll) << ": every rank's call should go " << algo;
}

// All-to-alls whose ranks differ in placement, in processes, direct on ncclMemAlloc buffers and
// cma on heap buffers: in each call some ranks are in place (sending from their live buffers)
// and the others not, so every rank swaps each pair's blocks with its peer, out-of-place ranks
// too; exact results on every rank (the odd counts split a pair's blocks unevenly), every call
// logged as exchanging on every rank, and the out-of-place calls between them exact too.
TEST(DirectRooted, AllToAllMixedPlacementProcs) {
  for (const char *algo : {"direct", "cma"}) {
    const bool direct = std::string(algo) == "direct";
    th::case_buffers_from_memalloc(direct);
    const th::Options opt =
        forcing(std::string("alltoall:") + algo, {{"TUTTI_CMA_PIECE_BYTES", "4096"}});
    log_capture::clear();
    const int n = 3;
    th::run_ranks_ok(
        Mode::kProcs, n,
        [&](RankCtx &ctx) {
          int seq = 0;
          for (size_t count : kCounts.counts)
            for (int pattern = 0; pattern < 3; pattern++) {
              Case c;
              c.coll = Coll::kAlltoAll, c.type = ncclInt32, c.count = count;
              // pattern 0, 1: every other rank in place (the even ones, the odd one); 2: none
              c.in_place = pattern < 2 && (ctx.rank + pattern) % 2 == 0;
              c.align = static_cast<size_t>(seq++) % 3;
              bool broken = false;
              th::run_case(ctx, c, &broken);
              if (broken) return;
            }
        },
        opt, std::string("all-to-alls of mixed placement, ") + algo);
    th::case_buffers_from_memalloc(false);
    // 5 counts x 3 patterns x 3 ranks, two patterns of three exchanging
    const int calls = 5 * 3 * n;
    EXPECT_EQ(peer_calls("ncclAlltoAll", algo), calls) << algo;
    EXPECT_EQ(log_capture::calls_saying("ncclAlltoAll", kExchanged), calls * 2 / 3) << algo;
  }
}

TEST(DirectRooted, NullBuffersOfNonRootsDirect) {
  run_null_buffers("direct");
}

TEST(DirectRooted, NullBuffersOfNonRootsCma) {
  run_null_buffers("cma");
}

}  // namespace
