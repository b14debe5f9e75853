// ncclMemAlloc / ncclCommRegister and the direct all-reduce, reduce-scatter and all-gather
// (src/algos/direct.c, src/engine_peer.c, src/memreg.c):
// argument checks, exact results with buffers every rank can map (processes and threads, in
// and out of place, every type and op, counts around the segment and piece edges), proof that
// peers' buffers really were mapped, the fallback when one rank's buffers cannot be shared,
// and a rank killed inside a direct all-reduce.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"
#include "in_child.h"
#include "log_capture.h"

namespace {

// Every test here is about shared (memfd) ncclMemAlloc memory, which the peers map: the choice
// ncclMemAlloc makes by default depends on the machine's huge-page settings (src/memreg.c).
const bool g_shared = (setenv("TUTTI_MEM_ALLOC", "shared", 1), true);
// The ranks' logs also carry the init lines (log_capture.h set COLL): CacheSizeComesFromSysfs.
const bool g_subsys = (setenv("TUTTI_DEBUG_SUBSYS", "COLL,INIT", 1), true);

using th::Case;
using th::Coll;
using th::Mode;
using th::Op;
using th::RankCtx;  // RCHECK (harness.h) returns from the rank's body on a failure

// Mappings of other processes' ncclMemAlloc regions in this process: memfd mappings whose
// file is none of this process's own regions (it keeps each region's descriptor open; a peer's
// region is mapped through /proc/<pid>/fd and its descriptor closed at once).
int peer_region_mappings() {
  std::set<unsigned long> own;
  if (DIR *d = opendir("/proc/self/fd")) {
    while (struct dirent *e = readdir(d)) {
      struct stat st;
      std::string path = std::string("/proc/self/fd/") + e->d_name;
      if (e->d_name[0] != '.' && stat(path.c_str(), &st) == 0) own.insert(st.st_ino);
    }
    closedir(d);
  }
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int n = 0;
  while (std::getline(maps, line)) {
    if (line.find("/memfd:tutti-mem-") == std::string::npos) continue;
    std::istringstream f(line);
    std::string range, perms, off, dev;
    unsigned long inode = 0;
    f >> range >> perms >> off >> dev >> inode;
    n += own.count(inode) == 0;
  }
  return n;
}

// ---------------------------------------------------------------- API checks

TEST(MemAlloc, RejectsBadArgumentsAndForeignPointers) {
  void *p = nullptr;
  EXPECT_EQ(ncclMemAlloc(nullptr, 64), ncclInvalidArgument);
  EXPECT_TRUE(th::contains(ncclGetLastError(nullptr), "ptr is NULL")) << ncclGetLastError(nullptr);
  EXPECT_EQ(ncclMemAlloc(&p, 0), ncclInvalidArgument);
  EXPECT_TRUE(th::contains(ncclGetLastError(nullptr), "size is 0")) << ncclGetLastError(nullptr);
  ASSERT_EQ(ncclMemAlloc(&p, 10000), ncclSuccess);
  ASSERT_NE(p, nullptr);
  memset(p, 7, 10000);  // usable memory
  int heap = 0;
  EXPECT_EQ(ncclMemFree(&heap), ncclInvalidArgument);
  EXPECT_TRUE(th::contains(ncclGetLastError(nullptr), "not returned by ncclMemAlloc"));
  EXPECT_EQ(ncclMemFree(static_cast<char *>(p) + 8), ncclInvalidArgument);
  EXPECT_EQ(ncclMemFree(nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclMemFree(p), ncclSuccess);
  EXPECT_EQ(ncclMemFree(p), ncclInvalidArgument);  // twice
}

TEST(MemAlloc, RegisterChecksEveryArgument) {
  th::run_ranks_ok(Mode::kThreads, 2, [](RankCtx &ctx) {
    void *buf = nullptr, *h = nullptr;
    RCHECK(ctx, ncclMemAlloc(&buf, 4096) == ncclSuccess, "ncclMemAlloc");
    RCHECK(ctx, ncclCommRegister(nullptr, buf, 4096, &h) == ncclInvalidArgument, "NULL comm");
    RCHECK(ctx, ncclCommRegister(ctx.comm, nullptr, 4096, &h) == ncclInvalidArgument, "NULL buff");
    RCHECK(ctx, th::contains(ncclGetLastError(ctx.comm), "buff is NULL"), "message: %s",
           ncclGetLastError(ctx.comm));
    RCHECK(ctx, ncclCommRegister(ctx.comm, buf, 0, &h) == ncclInvalidArgument, "size 0");
    RCHECK(ctx, ncclCommRegister(ctx.comm, buf, 4096, nullptr) == ncclInvalidArgument,
           "NULL handle");
    RCHECK(ctx, th::contains(ncclGetLastError(ctx.comm), "handle is NULL"), "message: %s",
           ncclGetLastError(ctx.comm));
    RCHECK(ctx, ncclCommRegister(ctx.comm, buf, 4096, &h) == ncclSuccess, "register");
    int junk = 0;
    RCHECK(ctx, ncclCommDeregister(ctx.comm, &junk) == ncclInvalidArgument, "foreign handle");
    RCHECK(ctx, ncclCommDeregister(ctx.comm, h) == ncclSuccess, "deregister");
    std::vector<char> heap(4096);  // heap memory registers too (it is just not shareable)
    RCHECK(ctx, ncclCommRegister(ctx.comm, heap.data(), heap.size(), &h) == ncclSuccess, "heap");
    RCHECK(ctx, ncclCommDeregister(ctx.comm, h) == ncclSuccess, "deregister heap");
    RCHECK(ctx, ncclMemFree(buf) == ncclSuccess, "ncclMemFree");
  });
}

// ---------------------------------------------------------------- results

std::vector<Case> coll_cases(Coll coll, ncclDataType_t type, Op op,
                             const std::vector<size_t> &counts, int nranks, int *seq) {
  std::vector<Case> out;
  for (size_t count : counts)
    for (int in_place = 0; in_place < 2; in_place++) {
      Case c;
      c.coll = coll, c.type = type, c.op = op, c.count = count, c.in_place = in_place;
      c.root = (*seq) % nranks, c.align = static_cast<size_t>(*seq) % 3;
      (*seq)++;
      out.push_back(c);
    }
  return out;
}

// What the planner logs (INFO COLL) for each call that maps the peers' buffers (direct or
// push), and for each call of direct.
const char *const kMappedLine = ", the peers' buffers mapped";
const char *const kDirectLine = "direct, the peers' buffers mapped";

const Coll kDirectColls[] = {Coll::kAllReduce, Coll::kReduceScatter, Coll::kAllGather};

// Every case of the collectives that can map the peers' buffers (all-reduce, reduce-scatter,
// all-gather) with buffers from ncclMemAlloc, the all-reduce and all-gather by `allreduce`
// (push or direct), the reduce-scatter by direct; TUTTI_DIRECT_MIN_BYTES=1 and
// TUTTI_PUSH_MIN_BYTES=1 so that every non-empty one except PreMulSum maps. The mapping path must
// have run: every rank logs its INFO COLL line "<algorithm>, the peers' buffers mapped"
// (log_capture.h) at least once per collective and type, and with processes every rank has also
// mapped its peers' buffers.
void run_direct(Mode mode, int n, const std::vector<ncclDataType_t> &types,
                const std::vector<Op> &ops, const std::vector<size_t> &counts,
                const std::string &allreduce,
                const std::vector<std::pair<std::string, std::string>> &extra = {}) {
  th::case_buffers_from_memalloc(true);
  const std::string algos =
      "allreduce:" + allreduce + ";reducescatter:direct;allgather:" + allreduce;
  th::Options opt;
  opt.env = {{"TUTTI_DIRECT_MIN_BYTES", "1"}, {"TUTTI_PUSH_MIN_BYTES", "1"}, {"TUTTI_ALGO", algos}};
  opt.env.insert(opt.env.end(), extra.begin(), extra.end());
  th::ThreadEnv thread_env(mode, opt);
  log_capture::clear();
  th::run_ranks_ok(
      mode, n,
      [&](RankCtx &ctx) {
        int seq = 0;
        for (Coll coll : kDirectColls)
          for (ncclDataType_t t : types)
            for (Op op : ops) {
              if (coll == Coll::kAllGather && op != ops[0]) continue;  // no op
              for (const Case &c : coll_cases(coll, t, op, counts, n, &seq)) {
                bool broken = false;
                th::run_case(ctx, c, &broken);
                if (broken) return;
              }
            }
        if (mode == Mode::kProcs)
          RCHECK(ctx, peer_region_mappings() > 0, "rank %d never mapped a peer's buffer", ctx.rank);
      },
      opt, allreduce + " and direct collectives, nranks " + std::to_string(n));
  const int per = (int)types.size() * n;
  const int ar = log_capture::count((allreduce + kMappedLine).c_str());
  const int direct = log_capture::count(kDirectLine);
  EXPECT_GE(ar, 2 * per) << "all-reduces and all-gathers logged as " << allreduce
                         << ", at least one per collective, type and rank";
  EXPECT_GE(direct, (allreduce == "direct" ? 3 : 1) * per)
      << "calls logged as direct, at least one per collective, type and rank";
  printf("  nranks %d: %d all-reduces went %s, %d calls direct\n", n, ar, allreduce.c_str(),
         direct);
  th::case_buffers_from_memalloc(false);
}

const std::vector<size_t> kCounts = {0, 1, 7, 1023, 16385, 70001};

TEST(Direct, EveryTypeAndOpTwoAndThreeRanksProcs) {
  for (const char *algo : {"push", "direct"})
    for (int n : {2, 3}) {
      std::vector<ncclDataType_t> types(std::begin(th::kAllTypes), std::end(th::kAllTypes));
      std::vector<Op> ops(std::begin(th::kAllOps), std::end(th::kAllOps));
      run_direct(Mode::kProcs, n, types, ops, {1, 7, 1023, 20001}, algo);
    }
}

TEST(Direct, CountsAndRanksProcs) {
  for (const char *algo : {"push", "direct"})
    for (int n : {2, 4, 5})
      run_direct(Mode::kProcs, n, {ncclFloat32, ncclInt64}, {Op::kSum, Op::kAvg}, kCounts, algo);
}

TEST(Direct, CountsAndRanksThreads) {
  for (const char *algo : {"push", "direct"})
    for (int n : {2, 3, 8})
      run_direct(Mode::kThreads, n, {ncclFloat32, ncclBfloat16}, {Op::kSum, Op::kMax}, kCounts,
                 algo);
}

// Every out-of-place call writes its results with streaming stores (TUTTI_NT_THRESHOLD and
// TUTTI_CACHE_BYTES at 1; push: also into the peers' buffers, the all-reduce's block by block
// from its reduction), whose ordering before the progress and done words the engine must keep;
// Avg divides before the stores.
TEST(Direct, StreamingStoresProcs) {
  for (const char *algo : {"push", "direct"})
    run_direct(
        Mode::kProcs, 3, {ncclFloat32, ncclInt8}, {Op::kSum, Op::kAvg}, kCounts, algo,
        {{"TUTTI_NT_THRESHOLD", "1"}, {"TUTTI_CACHE_BYTES", "1"}, {"TUTTI_NT_MEASURE", "0"}});
}

// Per collective (all-reduce, reduce-scatter, all-gather; or the API functions `names`), the
// calls that logged "results written with streaming stores", all ranks, after running `cases`
// with TUTTI_NT_THRESHOLD=`threshold` and TUTTI_CACHE_BYTES=`cache` (exact results:
// run_ranks_ok).
std::vector<int> streamed_calls(const std::string &threshold, const std::vector<Case> &cases,
                                const std::string &cache = "1",
                                const std::vector<std::string> &names = {
                                    "ncclAllReduce", "ncclReduceScatter", "ncclAllGather"}) {
  th::case_buffers_from_memalloc(true);
  th::Options opt;
  opt.env = {{"TUTTI_NT_THRESHOLD", threshold},   {"TUTTI_CACHE_BYTES", cache},
             {"TUTTI_NT_MEASURE", "0"},  // the rule alone: no call probes the other stores
             {"TUTTI_DIRECT_MIN_BYTES", "1"},     {"TUTTI_PUSH_MIN_BYTES", "1"},
             {"TUTTI_PUSH_GATHER_MIN_BYTES", "1"}};
  log_capture::clear();
  th::run_ranks_ok(
      Mode::kProcs, 2,
      [&](RankCtx &ctx) {
        for (const Case &c : cases) th::run_case(ctx, c);
      },
      opt, "calls with TUTTI_NT_THRESHOLD=" + threshold + " TUTTI_CACHE_BYTES=" + cache);
  std::vector<int> streamed(names.size(), 0);
  for (size_t k = 0; k < names.size(); k++)
    streamed[k] = log_capture::calls_saying(names[k], "results written with streaming stores");
  return streamed;
}

Case call(Coll coll, size_t count, bool in_place) {
  Case c;
  c.coll = coll, c.count = count, c.in_place = in_place;
  return c;
}

// In place, the all-gather writes the peers' blocks, lines nobody has just read, and streams
// them (TUTTI_NT_THRESHOLD=1); the all-reduce and reduce-scatter write over their own input and
// do not. An in-place all-gather streams only when the receive buffers of the machine's ranks
// together (2 x 560008 bytes: 2 x 70001 x 4 each) exceed TUTTI_CACHE_BYTES; the threshold
// applies to both placements.
TEST(Direct, InPlaceAllGatherStreamsInPlaceReductionsDoNot) {
  std::vector<Case> in_place;
  for (Coll coll : kDirectColls) in_place.push_back(call(coll, 70001, true));
  EXPECT_EQ(streamed_calls("1", in_place), (std::vector<int>{0, 0, 2}));
  const Case gather_in = call(Coll::kAllGather, 70001, true);
  const Case gather_out = call(Coll::kAllGather, 70001, false);
  EXPECT_EQ(streamed_calls("1", {gather_in}, "1120016"), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(streamed_calls("1", {gather_in}, "1120015"), (std::vector<int>{0, 0, 2}));
  EXPECT_EQ(streamed_calls("1", {gather_out}, "1120016"), (std::vector<int>{0, 0, 2}));
  EXPECT_EQ(streamed_calls("560009", {gather_in, gather_out}), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(streamed_calls("560008", {gather_in, gather_out}), (std::vector<int>{0, 0, 4}));
}

// In place, a broadcast, gather, scatter or all-to-all writes only the blocks from the peers, read
// there first, and streams where twice their bytes exceed the rank's share of TUTTI_CACHE_BYTES
// (cache / 2 / 2 < bytes, both rounded down): 70001 floats (280004 bytes) to the broadcast's
// and the scatter's receiving rank, from the gather's non-root to the root, and from the peer
// to each rank of the all-to-all; a rank that receives nothing does not stream.
TEST(Direct, InPlaceMovesStreamWhereTwiceTheBytesFromThePeersExceedTheCache) {
  std::vector<Case> in_place;
  for (Coll coll : {Coll::kBroadcast, Coll::kGather, Coll::kScatter, Coll::kAlltoAll})
    in_place.push_back(call(coll, 70001, true));
  const std::vector<std::string> names = {"ncclBroadcast", "ncclGather", "ncclScatter",
                                          "ncclAlltoAll"};
  EXPECT_EQ(streamed_calls("1", in_place, "1120015", names), (std::vector<int>{1, 1, 1, 2}));
  EXPECT_EQ(streamed_calls("1", in_place, "1120016", names), (std::vector<int>{0, 0, 0, 0}));
}

// Out of place, a call streams where the send and receive buffers of the machine's ranks together
// fill TUTTI_CACHE_BYTES: 70001 floats a rank, the all-reduce's buffers 2 x 2 x 280004 bytes
// (1120016), the reduce-scatter's and the all-gather's 2 x (560008 + 280004) (1680024); each rank
// compares its own with its share of the cache (cache / 2, rounded down).
TEST(Direct, OutOfPlaceCallsStreamWhereTheirBuffersFillTheCache) {
  std::vector<Case> out_of_place;
  for (Coll coll : kDirectColls) out_of_place.push_back(call(coll, 70001, false));
  EXPECT_EQ(streamed_calls("1", out_of_place, "1120017"), (std::vector<int>{2, 2, 2}));
  EXPECT_EQ(streamed_calls("1", out_of_place, "1120018"), (std::vector<int>{0, 2, 2}));
  EXPECT_EQ(streamed_calls("1", out_of_place, "1680025"), (std::vector<int>{0, 2, 2}));
  EXPECT_EQ(streamed_calls("1", out_of_place, "1680026"), (std::vector<int>{0, 0, 0}));
}

// With no TUTTI_CACHE_BYTES, every rank logs the last-level cache of its CPU as sysfs gives it
// (the largest-level data or unified cache in /sys/devices/system/cpu/cpuN/cache), or the
// assumed 32 MiB where the kernel reports none.
TEST(Direct, CacheSizeComesFromSysfs) {
  log_capture::clear();
  th::run_ranks_ok(
      Mode::kProcs, 2, [&](RankCtx &) {}, th::Options(), "init only");
  int seen = 0;
  for (const std::string &l : log_capture::lines()) {
    size_t at = l.find("last-level cache ");
    if (at == std::string::npos) continue;
    seen++;
    unsigned long long bytes = 0;
    int cpu = -1;
    if (sscanf(l.c_str() + at, "last-level cache %llu bytes (sysfs, cpu %d)", &bytes, &cpu) != 2) {
      EXPECT_NE(l.find("last-level cache 33554432 bytes (not reported by the kernel"),
                std::string::npos)
          << l;
      continue;
    }
    unsigned long long best = 0;
    int best_level = 0;
    for (int k = 0;; k++) {
      std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cache/index" +
                        std::to_string(k) + "/";
      FILE *f = fopen((dir + "level").c_str(), "r");
      if (!f) break;
      int level = 0;
      char size[32] = "", type[32] = "";
      EXPECT_EQ(fscanf(f, "%d", &level), 1);
      fclose(f);
      f = fopen((dir + "size").c_str(), "r");
      ASSERT_NE(f, nullptr);
      EXPECT_EQ(fscanf(f, "%31s", size), 1);
      fclose(f);
      f = fopen((dir + "type").c_str(), "r");
      ASSERT_NE(f, nullptr);
      EXPECT_EQ(fscanf(f, "%31s", type), 1);
      fclose(f);
      if (std::string(type) == "Instruction" || level < best_level) continue;
      char *end = nullptr;
      unsigned long long v = strtoull(size, &end, 10);
      best = *end == 'K' ? v << 10 : *end == 'M' ? v << 20 : v;
      best_level = level;
    }
    EXPECT_EQ(bytes, best) << l;
  }
  EXPECT_EQ(seen, 2);
}

TEST(Direct, LargeCountProcs) {
  for (const char *algo : {"push", "direct"})
    run_direct(Mode::kProcs, 2, {ncclFloat32}, {Op::kSum}, {1048577}, algo);
}

// Rank 0's buffers come from the heap, rank 1's from ncclMemAlloc: rank 1 cannot map rank 0's,
// so both fall back to the FIFOs, and the results are exact.
TEST(Direct, OneRankWithHeapBuffersFallsBack) {
  th::Options opt;
  opt.env = {{"TUTTI_DIRECT_MIN_BYTES", "1"}, {"TUTTI_PUSH_MIN_BYTES", "1"}};
  log_capture::clear();
  th::run_ranks_ok(
      Mode::kProcs, 2,
      [&](RankCtx &ctx) {
        th::case_buffers_from_memalloc(ctx.rank == 1);
        int seq = 0;
        for (const Case &c :
             coll_cases(Coll::kAllReduce, ncclFloat32, Op::kSum, {1023, 70001}, 2, &seq))
          th::run_case(ctx, c);
        // rank 0 may have mapped rank 1's buffers before learning that rank 1 cannot map its own
        if (ctx.rank == 1)
          RCHECK(ctx, peer_region_mappings() == 0, "rank 1 mapped rank 0's heap buffer?");
      },
      opt, "mixed heap and ncclMemAlloc buffers");
  EXPECT_EQ(log_capture::count(kMappedLine), 0) << "a call mapped a heap buffer";
  EXPECT_GE(log_capture::count("ncclAllReduce: opCount"), 8);  // 4 calls x 2 ranks were logged
}

// TUTTI_DIRECT=0 turns the direct path off: the same calls as CountsAndRanksProcs (buffers
// from ncclMemAlloc, DIRECT_MIN_BYTES=1) all go through the FIFOs (no call logs the direct line,
// no rank maps a peer's buffer) and stay exact.
TEST(Direct, DirectZeroTurnsTheDirectPathOff) {
  th::case_buffers_from_memalloc(true);
  th::Options opt;
  opt.env = {{"TUTTI_DIRECT_MIN_BYTES", "1"}, {"TUTTI_PUSH_MIN_BYTES", "1"}, {"TUTTI_DIRECT", "0"}};
  log_capture::clear();
  th::run_ranks_ok(
      Mode::kProcs, 3,
      [&](RankCtx &ctx) {
        int seq = 0;
        for (Coll coll : kDirectColls)
          for (const Case &c : coll_cases(coll, ncclFloat32, Op::kSum, {1023, 70001}, 3, &seq)) {
            bool broken = false;
            th::run_case(ctx, c, &broken);
            if (broken) return;
          }
        RCHECK(ctx, peer_region_mappings() == 0, "rank %d mapped a peer's buffer", ctx.rank);
      },
      opt, "TUTTI_DIRECT=0");
  th::case_buffers_from_memalloc(false);
  EXPECT_EQ(log_capture::count(kMappedLine), 0);
  EXPECT_GE(log_capture::count(": opCount"), 3 * 4 * 3) << "3 collectives x 4 cases x 3 ranks";
}

// Repeated direct calls on the same buffers reuse the mappings; results stay exact and every
// rank ends with the same bits.
TEST(Direct, ManyCallsOnTheSameBuffers) {
  th::run_ranks_ok(Mode::kProcs, 3, [](RankCtx &ctx) {
    const size_t count = 300000;
    float *in = nullptr, *out = nullptr;
    RCHECK(ctx, ncclMemAlloc(reinterpret_cast<void **>(&in), count * 4) == ncclSuccess, "alloc in");
    RCHECK(ctx, ncclMemAlloc(reinterpret_cast<void **>(&out), count * 4) == ncclSuccess,
           "alloc out");
    if (!ctx.ok()) return;
    for (int it = 0; it < 50; it++) {
      for (size_t i = 0; i < count; i++) in[i] = static_cast<float>((i % 1000) + ctx.rank + it);
      RCHECK(ctx,
             ncclAllReduce(in, out, count, ncclFloat32, ncclSum, ctx.comm, nullptr) == ncclSuccess,
             "call %d: %s", it, ncclGetLastError(ctx.comm));
      for (size_t i = 0; i < count && ctx.ok(); i++) {
        float want = static_cast<float>(3 * ((i % 1000) + it) + 0 + 1 + 2);
        RCHECK(ctx, out[i] == want, "call %d: out[%zu] = %g, want %g", it, i, out[i], want);
      }
    }
    RCHECK(ctx, peer_region_mappings() == 4,
           "rank %d: %d peer mappings, want 4 (2 peers x 2 "
           "buffers, mapped once)",
           ctx.rank, peer_region_mappings());
    ncclMemFree(in);
    ncclMemFree(out);
  });
}

// One thread drives every rank (ncclCommInitAll) through groups of 2, 4 and 6 all-reduces per
// rank: the peer-memory handshakes of all communicators run together, so none waits for a rank
// the thread has not reached yet, and the groups' peer tables outgrow the planner's block of
// small temporaries (plan.c) on the way. Run in a child process whose log (TUTTI_DEBUG_FILE)
// shows that every call went direct; results exact (sums and maxima alternate).
int one_thread_group(const char *log) {
  setenv("TUTTI_DEBUG", "INFO", 1);
  setenv("TUTTI_DEBUG_SUBSYS", "COLL", 1);
  setenv("TUTTI_DEBUG_FILE", log, 1);
  setenv("TUTTI_TIMEOUT", "20", 1);
  const int n = 3, most = 6;
  const size_t count = 100000;  // 400 KB: above TUTTI_DIRECT_MIN_BYTES
  ncclComm_t comms[n];
  if (ncclCommInitAll(comms, n, nullptr) != ncclSuccess) return 2;
  std::vector<std::vector<float>> in(n, std::vector<float>(count));
  std::vector<std::vector<std::vector<float>>> out(
      n, std::vector<std::vector<float>>(most, std::vector<float>(count)));
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < count; i++) in[r][i] = static_cast<float>(i % 100 + r);
  for (int calls = 2; calls <= most; calls += 2) {
    ncclGroupStart();
    for (int r = 0; r < n; r++)
      for (int c = 0; c < calls; c++)
        ncclAllReduce(in[r].data(), out[r][c].data(), count, ncclFloat32, c % 2 ? ncclMax : ncclSum,
                      comms[r], nullptr);
    if (ncclGroupEnd() != ncclSuccess) return 3;
    for (int r = 0; r < n; r++)
      for (int c = 0; c < calls; c++)
        for (size_t i = 0; i < count; i++)
          if (out[r][c][i] != static_cast<float>(c % 2 ? i % 100 + 2 : 3 * (i % 100) + 3)) return 4;
  }
  for (int r = 0; r < n; r++) ncclCommDestroy(comms[r]);
  return 0;
}

TEST(Direct, OneThreadDrivesEveryRankInAGroup) {
  for (const char *algo : {"push", "direct"}) {  // the two algorithms that map the peers' buffers
    char log[] = "/tmp/tutti-direct-group-XXXXXX";
    int fd = mkstemp(log);
    ASSERT_GE(fd, 0);
    close(fd);
    int code = exit_code_in_child([&] {
      setenv("TUTTI_ALGO", algo, 1);
      return one_thread_group(log);
    });
    EXPECT_EQ(code, 0) << algo
                       << " -1: no exit (a signal), 2: init, 3: group failed, 4: wrong values";
    std::ifstream f(log);
    std::string line, want = std::string(algo) + ", the peers' buffers mapped";
    int mapped = 0;
    while (std::getline(f, line)) mapped += line.find(want) != std::string::npos;
    EXPECT_EQ(mapped, 3 * (2 + 4 + 6)) << "every rank's 2 + 4 + 6 all-reduces should go " << algo;
    unlink(log);
  }
}

// A group of peer-memory calls on one communicator: their handshakes go to each peer together,
// and each call must get the peer's message of the same call. They are told apart only by their
// order, so a receive of the second call that took the first call's message (the engine's lanes
// have no order between them) gave that call the other call's buffers and algorithm: an
// all-gather mapped through an all-reduce's handles wrote past its buffer, or the check of the
// algorithms failed the group. Threads (heap buffers, one address space) and processes
// (ncclMemAlloc), 3 ranks, in place and out, 60 groups (the failure came by the 7th) of an
// all-gather (direct) and an all-reduce (push) and, every other time, a second all-gather.
TEST(Direct, HandshakesOfTheCallsOfAGroupStayApart) {
  for (Mode mode : {Mode::kThreads, Mode::kProcs}) {
    th::run_ranks_ok(
        mode, 3,
        [mode](RankCtx &ctx) {
          if (mode == Mode::kProcs) th::case_buffers_from_memalloc(true);
          for (int it = 0; it < 60 && ctx.ok(); it++) {
            std::vector<Case> cases = {
                {Coll::kAllGather, ncclUint8, Op::kSum, 54442, ctx.rank != 1, 0, 0},
                {Coll::kAllReduce, ncclFloat16, Op::kMax, 104168, false, 0, 1}};
            if (it % 2) cases.push_back({Coll::kAllGather, ncclInt32, Op::kSum, 30000, true, 0, 0});
            std::vector<std::unique_ptr<th::CaseRun>> runs;
            for (const Case &c : cases) runs.emplace_back(new th::CaseRun(ctx, c));
            NCCL_OK(ctx, ncclGroupStart());
            for (auto &run : runs) run->issue();
            ncclResult_t rc = ncclGroupEnd();
            RCHECK(ctx, rc == ncclSuccess, "group %d: %s", it, ncclGetLastError(ctx.comm));
            for (auto &run : runs) run->verify();
          }
          th::case_buffers_from_memalloc(false);
        },
        th::Options(), std::string("groups of peer-memory calls, ") + th::mode_name(mode));
  }
}

}  // namespace
