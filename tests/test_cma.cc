// The cma algorithm (src/algos/cma.c, src/engine_peer.c) and the shm transport's reading by copy
// (process_vm_readv, src/transport/shm.c): heap buffers of processes on one host read by their
// peers. Exact integer results for all-reduce, reduce-scatter and all-gather, in and out of
// place, counts around the piece and segment edges, 2 to 5 ranks; that the planner reaches cma
// on its own for heap buffers too large for the FIFOs to win (the direct algorithm cannot map
// them); and that the whole communicator falls back to the FIFOs, with an INFO line saying why,
// when one rank turns CMA off (TUTTI_CMA=0) or when the kernel refuses a rank's reads.
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "harness.h"
#include "log_capture.h"

namespace {

using th::Case;
using th::Coll;
using th::Mode;
using th::Op;
using th::RankCtx;

// The ranks' logs also carry the shm transport's lines (log_capture.h set COLL).
const bool g_subsys = (setenv("TUTTI_DEBUG_SUBSYS", "COLL,SHM", 1), true);

// What src/plan.c logs (INFO COLL) for each call that cma runs.
const char *const kCmaLine = "cma, the peers' buffers read by copy";
const char *const kCmaOn = "CMA: peers read heap buffers by copy";

const Coll kColls[] = {Coll::kAllReduce, Coll::kReduceScatter, Coll::kAllGather};

std::vector<Case> cases_of(Coll coll, ncclDataType_t type, Op op, const std::vector<size_t> &counts,
                           int nranks, int *seq) {
  std::vector<Case> out;
  for (size_t count : counts)
    for (int in_place = 0; in_place < 2; in_place++) {
      Case c;
      c.coll = coll, c.type = type, c.op = op, c.count = count, c.in_place = in_place;
      c.align = static_cast<size_t>(*seq) % 3;
      c.root = (*seq)++ % nranks;
      out.push_back(c);
    }
  return out;
}

// Runs every case of the three collectives on heap buffers; returns the calls that went cma.
int run_cases(int n, const th::Options &opt, const std::vector<ncclDataType_t> &types,
              const std::vector<Op> &ops, const std::vector<size_t> &counts,
              bool memalloc = false) {
  th::case_buffers_from_memalloc(memalloc);
  log_capture::clear();
  th::run_ranks_ok(
      Mode::kProcs, n,
      [&](RankCtx &ctx) {
        int seq = 0;
        for (Coll coll : kColls)
          for (ncclDataType_t t : types)
            for (Op op : ops) {
              if (coll == Coll::kAllGather && op != ops[0]) continue;  // no op
              for (const Case &c : cases_of(coll, t, op, counts, n, &seq)) {
                bool broken = false;
                th::run_case(ctx, c, &broken);
                if (broken) return;
              }
            }
      },
      opt, "heap-buffer collectives, nranks " + std::to_string(n));
  th::case_buffers_from_memalloc(false);
  return log_capture::count(kCmaLine);
}

// Mappings of memfd-backed ncclMemAlloc regions (shared memory) in this process.
int memfd_region_mappings() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int n = 0;
  while (std::getline(maps, line)) n += line.find("/memfd:tutti-mem-") != std::string::npos;
  return n;
}

// TUTTI_ALGO=cma with TUTTI_CMA_MIN_BYTES=1: every non-empty call reads by copy. Pieces of
// 4 KiB (TUTTI_CMA_PIECE_BYTES) so that counts cross many piece edges; the counts also split
// unevenly into segments and blocks.
TEST(Cma, ExactResultsEveryCollectiveInAndOutOfPlace) {
  th::Options opt;
  opt.env = {
      {"TUTTI_ALGO", "cma"}, {"TUTTI_CMA_MIN_BYTES", "1"}, {"TUTTI_CMA_PIECE_BYTES", "4096"}};
  const std::vector<size_t> counts = {1, 7, 1023, 20001};
  for (int n : {2, 3, 5}) {
    int cma = run_cases(n, opt, {ncclInt32, ncclFloat32, ncclInt64, ncclBfloat16},
                        {Op::kSum, Op::kMax, Op::kAvg}, counts);
    // per rank: (all-reduce, reduce-scatter) x 4 types x 3 ops + all-gather x 4 types, x 4 counts
    // x 2 placements (Avg divides after the sum: a plain op, which cma runs)
    int want = n * (2 * 4 * 3 + 4) * 4 * 2;
    EXPECT_EQ(cma, want) << "calls logged as cma (nranks " << n << ")";
    printf("  nranks %d: %d calls read their peers by copy\n", n, cma);
  }
}

// The peer path stamps each exposed buffer with its process's id, remembered after the first
// ask. Ranks as threads of this test process (the tuner's peer-memory choice for 280 KB) make it
// remember this process's; the forked ranks that follow must each stamp their own (the fork's
// child forgets it), or a peer would read the test process's memory instead of theirs and the
// results would be wrong. Sizes of 280 KB and more: the threads read TUTTI_CMA_MIN_BYTES (its
// default; Options::env is for processes only) and the forked ranks inherit that reading.
TEST(Cma, ForkedRanksStampTheirOwnPid) {
  th::run_ranks_ok(
      Mode::kThreads, 2,
      [&](RankCtx &ctx) {
        int seq = 0;
        for (const Case &c : cases_of(Coll::kAllGather, ncclInt32, Op::kSum, {70001}, 2, &seq))
          th::run_case(ctx, c);
      },
      th::Options(), "threads of the test process");
  th::Options opt;
  opt.env = {{"TUTTI_ALGO", "cma"}};
  int cma = run_cases(2, opt, {ncclInt32}, {Op::kSum}, {70001});
  EXPECT_EQ(cma, 2 * 3 * 2) << "3 collectives x in/out of place x 2 ranks";
}

// The default piece (TUTTI_CMA_PIECE_BYTES) and a large count: several pieces per segment, the
// peers' copies running behind the owner's progress.
TEST(Cma, LargeCountDefaultPieces) {
  th::Options opt;
  opt.env = {{"TUTTI_ALGO", "cma"}};
  int cma = run_cases(2, opt, {ncclFloat32}, {Op::kSum}, {1048577});
  EXPECT_EQ(cma, 2 * 3 * 2) << "3 collectives x in/out of place x 2 ranks";
}

// No TUTTI_ALGO: the tuner picks direct for 4 MiB, the handshake finds heap buffers nobody can
// map, and the planner takes cma (every rank alike) instead of the FIFOs.
TEST(Cma, PlannerChoosesCmaForLargeHeapBuffers) {
  th::Options opt;
  int cma = run_cases(2, opt, {ncclInt32}, {Op::kSum}, {1 << 20});
  EXPECT_EQ(cma, 2 * 3 * 2) << "3 collectives x in/out of place x 2 ranks";
  EXPECT_EQ(log_capture::count(kCmaOn), 2) << "every rank logs that CMA is on";
}

// Heap buffers on 3 ranks for calls that must not go cma: TUTTI_CMA=0 on rank 1 only turns
// reading by copy off on every rank (decided at init), the calls run through the FIFOs exactly.
// TUTTI_MEM_ALLOC=private: ncclMemAlloc returns anonymous memory (huge pages asked for) that the
// peers read by copy, like heap memory: every call of 1 Mi elements goes cma, no rank holds a
// memfd mapping, and the results are exact.
TEST(Cma, PrivateMemAllocBuffersAreReadByCopy) {
  th::Options opt;
  opt.env = {{"TUTTI_MEM_ALLOC", "private"}};
  opt.before_init = [](int) {
    void *p = nullptr;
    if (ncclMemAlloc(&p, 1 << 20) != ncclSuccess || memfd_region_mappings() != 0) _exit(3);
    ncclMemFree(p);
  };
  int cma = run_cases(2, opt, {ncclFloat32}, {Op::kSum}, {1 << 20}, true);
  EXPECT_EQ(cma, 2 * 3 * 2) << "3 collectives x in/out of place x 2 ranks";
}

// A value TUTTI_MEM_ALLOC does not know is an error naming the setting; nothing is allocated.
TEST(Cma, UnknownMemAllocSettingIsAnError) {
  setenv("TUTTI_MEM_ALLOC", "huge", 1);
  void *p = nullptr;
  EXPECT_EQ(ncclMemAlloc(&p, 4096), ncclInvalidArgument);
  EXPECT_EQ(p, nullptr);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("TUTTI_MEM_ALLOC=huge"), std::string::npos)
      << ncclGetLastError(nullptr);
  unsetenv("TUTTI_MEM_ALLOC");
}

TEST(Cma, TuttiCmaZeroOnOneRankTurnsItOffEverywhere) {
  th::Options opt;
  opt.env = {{"TUTTI_CMA_MIN_BYTES", "1"}};
  opt.before_init = [](int rank) {
    if (rank == 1) setenv("TUTTI_CMA", "0", 1);
  };
  int cma = run_cases(3, opt, {ncclInt32}, {Op::kSum}, {1023, 300001});
  EXPECT_EQ(cma, 0) << "a call read by copy although rank 1 set TUTTI_CMA=0";
  EXPECT_EQ(log_capture::count("CMA refused here (TUTTI_CMA=0)"), 1);
  EXPECT_EQ(log_capture::count("CMA refused on rank 1: heap buffers go through the FIFOs"), 2);
  EXPECT_EQ(log_capture::count(kCmaOn), 0);
  EXPECT_GE(log_capture::count("ncclAllReduce: opCount"), 3 * 4) << "4 all-reduces x 3 ranks";
}

// Drops CAP_SYS_PTRACE from this process (effective and permitted), so that the kernel checks
// reads of other processes as for an ordinary user.
bool drop_ptrace_capability() {
  __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &hdr, data) != 0) return false;
  data[CAP_TO_INDEX(CAP_SYS_PTRACE)].effective &= ~CAP_TO_MASK(CAP_SYS_PTRACE);
  data[CAP_TO_INDEX(CAP_SYS_PTRACE)].permitted &= ~CAP_TO_MASK(CAP_SYS_PTRACE);
  return syscall(SYS_capset, &hdr, data) == 0;
}

// The kernel refuses rank 0's reads of rank 1: rank 0 gives up CAP_SYS_PTRACE and rank 1 makes
// itself non-dumpable (refused for an ordinary user), and where the test runs as root rank 1
// keeps capabilities rank 0 no longer has (refused too: a reader needs all of its target's).
// Rank 0's probe at init fails, every rank turns CMA off, and the calls run through the FIFOs.
TEST(Cma, KernelRefusalFallsBackOnEveryRank) {
  th::Options opt;
  opt.env = {{"TUTTI_CMA_MIN_BYTES", "1"}};
  opt.before_init = [](int rank) {
    if (rank == 0 && !drop_ptrace_capability()) fprintf(stderr, "capset failed\n");
    if (rank == 1) prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  };
  int cma = run_cases(2, opt, {ncclInt32}, {Op::kSum}, {1023, 300001});
  EXPECT_EQ(cma, 0) << "a call read by copy although rank 0 may not read rank 1";
  EXPECT_EQ(log_capture::count("CMA refused here (process_vm_readv of rank 1"), 1);
  EXPECT_EQ(log_capture::count("Operation not permitted"), 1);
  EXPECT_EQ(log_capture::count("CMA refused on rank 0: heap buffers go through the FIFOs"), 1);
  EXPECT_GE(log_capture::count("ncclAllReduce: opCount"), 2 * 4) << "4 all-reduces x 2 ranks";
}

}  // namespace
