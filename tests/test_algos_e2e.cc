// The tree, rhd and rd algorithms end to end through the public API, each forced with
// TUTTI_ALGO ("<collective>:<algo>"), on ranks that are processes and threads, checked by the
// harness's closed forms (every element, guards, inputs unchanged). Every run also asserts, from
// the INFO COLL lines its calls log (log_capture.h), that each call ran
// the forced algorithm.
//
// This file builds two programs:
//   test_algos_quick   (label "quick")  every (algorithm, collective) pair on threads at 3 or 4
//                      ranks, a few sizes, Sum and Avg and PreMulSum, in and out of place;
//                      the same with streaming stores (TUTTI_NT_THRESHOLD=1), ring and chain too
//   test_algos_matrix  (label "slow", built with TUTTI_ALGO_MATRIX)
//     Sweep:    representative (type, op) x nranks {1,2,3,4,5,8} x counts {0,1,7,1023,1048573}
//               (all-gather / reduce-scatter: 131071 per rank)
//               x in / out of place, processes and threads
//     TypesOps: every datatype x every op x counts {0,1,7,1023,20011} x in / out of place at
//               nranks 3 and 4 (threads) and 5 (processes)
// The halving-doubling reduce-scatter and all-gather need a power of two: they run at
// nranks {1,2,4,8} only (elsewhere the tuner would run the ring instead).
#include <dirent.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
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

struct Pair {
  const char *algo;
  Coll coll;
  const char *coll_key;  // TUTTI_ALGO's collective name
  ncclDataType_t type;   // representative datatype
  bool pow2_only;
  const char *perf;  // its benchmark (perf/)
  int hosts = 0;     // > 0: processes only, rank r presents TUTTI_HOSTID host r * hosts / n
};
const Pair kPairs[] = {
    {"tree", Coll::kAllReduce, "allreduce", ncclFloat32, false, "all_reduce_perf"},
    {"tree", Coll::kBroadcast, "broadcast", ncclInt32, false, "broadcast_perf"},
    {"tree", Coll::kReduce, "reduce", ncclBfloat16, false, "reduce_perf"},
    {"rhd", Coll::kAllReduce, "allreduce", ncclFloat16, false, "all_reduce_perf"},
    {"rhd", Coll::kAllGather, "allgather", ncclUint8, true, "all_gather_perf"},
    {"rhd", Coll::kReduceScatter, "reducescatter", ncclInt64, true, "reduce_scatter_perf"},
    {"rd", Coll::kAllReduce, "allreduce", ncclFloat64, false, "all_reduce_perf"},
    {"bruck", Coll::kAllGather, "allgather", ncclInt32, false, "all_gather_perf"},
    {"bruck", Coll::kReduceScatter, "reducescatter", ncclFloat32, false, "reduce_scatter_perf"},
    // on one host the multi-channel ring is the ring; across 2 (fake) hosts of 2 or more ranks
    // it runs min(ranks per host, 8) channels
    {"mring", Coll::kAllReduce, "allreduce", ncclInt32, false, "all_reduce_perf"},
    {"mring", Coll::kAllReduce, "allreduce", ncclFloat32, false, "all_reduce_perf", 2},
};

std::string pair_name(const Pair &p) {
  return std::string(p.algo) + "_" + th::coll_name(p.coll) +
         (p.hosts ? "_" + std::to_string(p.hosts) + "hosts" : "");
}

// Sets TUTTI_ALGO for the communicators created while it lives (threads read it at init,
// forked children inherit it).
struct ForceAlgo {
  explicit ForceAlgo(const Pair &p) {
    std::string v = std::string(p.coll_key) + ":" + p.algo;
    setenv("TUTTI_ALGO", v.c_str(), 1);
  }
  ~ForceAlgo() { unsetenv("TUTTI_ALGO"); }
};

// Every COLL line of the pair's collective logged since log_capture::clear() names the forced
// algorithm, and there are at least `min_lines` of them: a silent fallback to another algorithm
// fails here.
void expect_algo_ran(const std::string &fn_name, const char *algo, int min_lines) {
  const std::string fn = "nccl" + fn_name + ": opCount", want = std::string(" algo ") + algo;
  int lines = 0;
  for (const std::string &line : log_capture::lines()) {
    if (line.find(fn) == std::string::npos) continue;
    lines++;
    bool ok = line.size() >= want.size() &&
              line.compare(line.size() - want.size(), want.size(), want) == 0;
    if (!ok) {
      ADD_FAILURE() << "forced " << algo << ", ran: " << line;
      return;
    }
  }
  EXPECT_GE(lines, min_lines) << "too few COLL lines of " << fn << " in " << log_capture::g_dir;
  printf("  %d calls of nccl%s logged, every one with algo %s\n", lines, fn_name.c_str(), algo);
}

std::vector<Case> cases_for(const Pair &p, ncclDataType_t type, Op op, int nranks,
                            const std::vector<size_t> &counts, int *seq) {
  std::vector<Case> out;
  for (size_t count : counts)
    for (int in_place = 0; in_place < 2; in_place++) {
      Case c;
      c.coll = p.coll, c.type = type, c.op = op, c.count = count, c.in_place = in_place;
      c.root = (*seq) % nranks, c.align = static_cast<size_t>(*seq) % 3;
      (*seq)++;
      out.push_back(c);
    }
  return out;
}

void run_cases(RankCtx &ctx, const std::vector<Case> &cases) {
  for (const Case &c : cases) {
    bool broken = false;
    th::run_case(ctx, c, &broken);
    if (broken) return;
  }
}

std::vector<Op> ops_of(Coll c, const std::vector<Op> &ops) {
  return th::coll_reduces(c) ? ops : std::vector<Op>{Op::kSum};
}

void run_pair(const Pair &p, Mode mode, int n, const std::vector<ncclDataType_t> &types,
              const std::vector<Op> &ops, const std::vector<size_t> &counts) {
  ForceAlgo force(p);
  th::Options opt;
  opt.timeout_s = 300;
  if (p.hosts) {  // hosts in blocks of ranks, told apart by TUTTI_HOSTID (processes only)
    mode = Mode::kProcs;
    opt.before_init = [&p, n](int rank) {
      setenv("TUTTI_HOSTID", ("s19c-host" + std::to_string(rank * p.hosts / n)).c_str(), 1);
    };
  }
  log_capture::clear();
  th::run_ranks_ok(
      mode, n,
      [&](RankCtx &ctx) {
        int seq = 0;
        for (ncclDataType_t t : types)
          for (Op op : ops_of(p.coll, ops)) run_cases(ctx, cases_for(p, t, op, n, counts, &seq));
      },
      opt, pair_name(p) + " nranks " + std::to_string(n));
  expect_algo_ran(th::coll_name(p.coll), p.algo, n);
}

class AlgoPair : public ::testing::TestWithParam<int> {};

std::string param_name(const ::testing::TestParamInfo<int> &i) {
  return pair_name(kPairs[i.param]);
}

#ifndef TUTTI_ALGO_MATRIX

// TUTTI_ALGO really reaches the engine: the pair's nccl-tests style benchmark runs under
// tutti-run on 4 ranks with TUTTI_DEBUG=INFO, and the COLL line of its calls names the
// algorithm; the TUNING lines list the candidates and the choice.
TEST_P(AlgoPair, ForcedAlgorithmIsTheOneThatRuns) {
  const Pair &p = kPairs[GetParam()];
  std::string prog = std::string(PERF_DIR) + "/" + p.perf + " -b 4K -e 4K -n 1 -w 0";
  char dir[] = "/tmp/s19c-dump-XXXXXX";  // each rank's printed schedules (fake hosts only)
  if (p.hosts) {  // rank r on host r * hosts / 4, its stderr (log, schedules) in dir/r
    ASSERT_NE(mkdtemp(dir), nullptr);
    prog = "-x TUTTI_DUMP_SCHEDULE=1 sh -c 'TUTTI_HOSTID=s19c-host$((TUTTI_RANK * " +
           std::to_string(p.hosts) + " / 4)) exec " + prog + " 2> " + dir + "/$TUTTI_RANK'";
  }
  std::string cmd = std::string("env -u TUTTI_DEBUG_FILE ") + TUTTI_RUN_PATH +
                    " -n 4 -x TUTTI_ALGO=" + p.coll_key + ":" + p.algo +
                    " -x TUTTI_DEBUG=INFO -x TUTTI_DEBUG_SUBSYS=COLL,TUNING " + prog + " 2>&1";
  FILE *f = popen(cmd.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string out;
  char buf[4096];
  for (size_t k; (k = fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, k);
  ASSERT_EQ(pclose(f), 0) << out;
  std::string dump;  // fake hosts: rank 0's log and schedules; every rank's log joins `out`
  for (int r = 0; p.hosts && r < 4; r++) {
    std::string path = std::string(dir) + "/" + std::to_string(r), text;
    FILE *d = fopen(path.c_str(), "r");
    for (size_t k; d && (k = fread(buf, 1, sizeof buf, d)) > 0;) text.append(buf, k);
    if (d) fclose(d);
    unlink(path.c_str());
    out += text;
    if (r == 0) dump = text;
  }
  if (p.hosts) rmdir(dir);
  // Every call of the pair's collective (the benchmark also makes other calls) names it.
  std::string fn = std::string("nccl") + th::coll_name(p.coll) + ": ",
              want = std::string(" algo ") + p.algo;
  int calls = 0;
  for (size_t at = out.find(fn); at != std::string::npos; at = out.find(fn, at + 1)) {
    std::string line = out.substr(at, out.find('\n', at) - at);
    EXPECT_EQ(line.substr(line.size() - want.size()), want) << line;
    calls++;
  }
  EXPECT_GE(calls, 4) << "no COLL line of " << fn << "on 4 ranks:\n" << out;
  EXPECT_NE(out.find(std::string("chose ") + p.algo + " ("), std::string::npos) << out;
  EXPECT_NE(out.find(std::string(": ") + p.algo + " "), std::string::npos) << "no candidate line";
  if (p.hosts) {
    // hosts {0 1} {2 3}: two channels; rank 0 leaves its host in channel 0, to rank 3 (the
    // entry of channel 0 on the other host), which the plain ring (0 -> 1 -> 2 -> 3) never does
    const std::string head = "# rank 0: ncclAllReduce algo mring";
    int dumps = 0;
    for (size_t at = dump.find(head); at != std::string::npos; at = dump.find(head, at + 1)) {
      size_t eol = dump.find('\n', at);
      std::string first = dump.substr(eol + 1, dump.find('\n', eol + 1) - eol - 1);
      EXPECT_NE(first.find("send 3 "), std::string::npos) << first;
      dumps++;
    }
    EXPECT_GE(dumps, 4) << dump;
  }
}

// Float sums whose value depends on the reduction order: every rank holds the same bits, run
// after run, processes or threads (a fixed order per algorithm and nranks).
TEST_P(AlgoPair, FloatResultsAreBitwiseIdenticalEverywhereAndEveryRun) {
  const Pair &p = kPairs[GetParam()];
  const int n = p.pow2_only ? 4 : 5;
  const size_t k = 40001;
  struct Hashes {
    uint64_t h[3][8];
  };
  Hashes *hs = static_cast<Hashes *>(th::shared_alloc(sizeof(Hashes)));
  ASSERT_NE(hs, nullptr);
  ForceAlgo force(p);
  th::Options opt;
  if (p.hosts)  // fake hosts need processes (TUTTI_HOSTID per rank)
    opt.before_init = [&p, n](int rank) {
      setenv("TUTTI_HOSTID", ("s19c-host" + std::to_string(rank * p.hosts / n)).c_str(), 1);
    };
  for (int run = 0; run < 3; run++) {
    log_capture::clear();
    Mode mode = run == 1 || p.hosts ? Mode::kProcs : Mode::kThreads;
    th::run_ranks_ok(
        mode, n,
        [&](RankCtx &ctx) {
          std::vector<float> in(k * n), out(k * n, 0.f);
          for (size_t i = 0; i < in.size(); i++) in[i] = (float)std::sin(i * 0.37 + ctx.rank * 1.3);
          size_t outs = p.coll == Coll::kAllGather ? k * n : k;
          if (p.coll == Coll::kAllReduce)
            NCCL_OK(ctx, ncclAllReduce(in.data(), out.data(), k, ncclFloat32, ncclSum, ctx.comm,
                                       nullptr));
          else if (p.coll == Coll::kReduce)
            NCCL_OK(ctx, ncclReduce(in.data(), out.data(), k, ncclFloat32, ncclSum, 1, ctx.comm,
                                    nullptr));
          else if (p.coll == Coll::kReduceScatter)
            NCCL_OK(ctx, ncclReduceScatter(in.data(), out.data(), k, ncclFloat32, ncclSum, ctx.comm,
                                           nullptr));
          else if (p.coll == Coll::kAllGather)
            NCCL_OK(ctx, ncclAllGather(in.data(), out.data(), k, ncclFloat32, ctx.comm, nullptr));
          else
            NCCL_OK(ctx,
                    ncclBroadcast(in.data(), out.data(), k, ncclFloat32, 1, ctx.comm, nullptr));
          hs->h[run][ctx.rank] = th::hash_bytes(out.data(), outs * sizeof(float));
        },
        opt);
    expect_algo_ran(th::coll_name(p.coll), p.algo, n);
  }
  // Reduce: only the root has a result; reduce-scatter: each rank its own block.
  bool same_everywhere = p.coll != Coll::kReduce && p.coll != Coll::kReduceScatter;
  for (int run = 0; run < 3; run++)
    for (int r = 0; r < n; r++) {
      if (p.coll == Coll::kReduce && r != 1) continue;
      EXPECT_EQ(hs->h[run][r], hs->h[0][same_everywhere ? 0 : r]) << "run " << run << " rank " << r;
    }
  th::shared_free(hs, sizeof(Hashes));
}

TEST_P(AlgoPair, QuickSlice) {
  const Pair &p = kPairs[GetParam()];
  int n = p.pow2_only ? 4 : 3;
  run_pair(p, Mode::kThreads, n, {p.type}, {Op::kSum, Op::kAvg, Op::kPreMulSum},
           {0, 1, 7, 1023, 70001});
  if (!p.pow2_only) run_pair(p, Mode::kThreads, 4, {p.type}, {Op::kSum}, {1, 1023});
}

// Lines logged since log_capture::clear() that contain `needle`.
int logged(const std::string &needle) {
  return log_capture::count(needle);
}

// With TUTTI_NT_THRESHOLD=1 and TUTTI_CACHE_BYTES=1 every out-of-place call (and in-place call
// without a reduction) writes its results with streaming stores, local copies too (the engine's
// piece_local and piece_recv): every pair and the ring and chain schedules stay exact, Sum, Avg
// and PreMulSum (whose transforms keep plain stores), in and out of place, and the calls say
// they streamed.
void run_streaming(const Pair &p) {
  setenv("TUTTI_NT_THRESHOLD", "1", 1);
  setenv("TUTTI_CACHE_BYTES", "1", 1);
  setenv("TUTTI_NT_MEASURE", "0", 1);  // every call the rule's, none probing plain stores
  run_pair(p, Mode::kThreads, p.pow2_only ? 4 : 3, {p.type}, {Op::kSum, Op::kAvg, Op::kPreMulSum},
           {1, 1023, 70001});
  unsetenv("TUTTI_NT_THRESHOLD");
  unsetenv("TUTTI_CACHE_BYTES");
  unsetenv("TUTTI_NT_MEASURE");
  EXPECT_GT(logged("results written with streaming stores"), 0) << pair_name(p);
}

TEST_P(AlgoPair, StreamingStoresStayExact) {
  run_streaming(kPairs[GetParam()]);
}

TEST(StreamingStores, RingAndChainStayExact) {
  const Pair pairs[] = {
      {"ring", Coll::kAllReduce, "allreduce", ncclFloat32, false, "all_reduce_perf"},
      {"ring", Coll::kAllGather, "allgather", ncclInt8, false, "all_gather_perf"},
      {"ring", Coll::kReduceScatter, "reducescatter", ncclInt64, false, "reduce_scatter_perf"},
      {"chain", Coll::kBroadcast, "broadcast", ncclFloat64, false, "broadcast_perf"},
      {"chain", Coll::kReduce, "reduce", ncclBfloat16, false, "reduce_perf"}};
  for (const Pair &p : pairs) run_streaming(p);
}

// The communicator's scratch grows on demand (up to TUTTI_SCRATCH_MAX_BYTES) for the algorithms
// that keep blocks in it: rhd's reduce-scatter (half the input) and Bruck's all-gather (the whole
// output), at sizes beyond the initial scratch (the chunk: 512 KiB on shared memory), growing
// again for a larger call, every result exact. With the limit below the initial scratch nothing
// grows and the forced algorithm runs in a temporary per call, exact too.
TEST(Scratch, GrowsOnDemandAndStaysExact) {
  const Pair pairs[] = {
      {"rhd", Coll::kReduceScatter, "reducescatter", ncclInt64, true, "reduce_scatter_perf"},
      {"bruck", Coll::kAllGather, "allgather", ncclInt32, false, "all_gather_perf"}};
  for (const char *limit : {"", "65536"}) {
    if (*limit) setenv("TUTTI_SCRATCH_MAX_BYTES", limit, 1);
    for (const Pair &p : pairs) {
      // n x 70001 x 8 / 2 = 1.1 MB of scratch, then n x 300001 x 8 / 2 = 4.8 MB (rhd, int64);
      // n x 70001 x 4 = 1.1 MB, then 4.8 MB (Bruck, int32)
      run_pair(p, Mode::kThreads, 4, {p.type}, {Op::kSum}, {1023, 70001, 300001});
      int grown = logged("scratch grown from");
      if (*limit)
        EXPECT_EQ(grown, 0) << p.algo << " with TUTTI_SCRATCH_MAX_BYTES=" << limit;
      else
        EXPECT_EQ(grown, 2 * 4) << p.algo << ": each rank grows for 70001, then for 300001";
    }
  }
  unsetenv("TUTTI_SCRATCH_MAX_BYTES");
}

// A forced algorithm whose cost says it cannot run the call (one-shot above
// TUTTI_ONESHOT_MAX_BYTES) is replaced by the tuner's choice with a WARN naming it, once per
// communicator and size; the result stays exact.
TEST(ForcedAlgorithm, RefusedByItsCostWarns) {
  setenv("TUTTI_ALGO", "allreduce:oneshot", 1);
  log_capture::clear();
  th::run_ranks_ok(Mode::kThreads, 3, [](RankCtx &ctx) {
    Case c;
    c.coll = Coll::kAllReduce, c.type = ncclFloat32, c.count = 262144;  // 1 MiB > 16 KiB
    for (int in_place = 0; in_place < 2; in_place++) {
      c.in_place = in_place;
      th::run_case(ctx, c);
    }
  });
  unsetenv("TUTTI_ALGO");
  EXPECT_EQ(logged("TUTTI_ALGO: oneshot cannot run this ncclAllReduce (1048576 bytes, 3 ranks"), 3);
  EXPECT_EQ(logged("algo oneshot"), 0);
  EXPECT_GE(logged("ncclAllReduce: opCount"), 6);
}

#else

TEST_P(AlgoPair, Sweep) {
  const Pair &p = kPairs[GetParam()];
  for (Mode mode : {Mode::kProcs, Mode::kThreads})
    for (int n : {1, 2, 3, 4, 5, 8}) {
      if (p.pow2_only && (n & (n - 1)) != 0) continue;
      // all-gather / reduce-scatter counts are per rank: 131071 makes 1M elements at 8 ranks
      size_t big = p.coll == Coll::kAllGather || p.coll == Coll::kReduceScatter ? 131071 : 1048573;
      run_pair(p, mode, n, {p.type}, {Op::kSum}, {0, 1, 7, 1023, big});
    }
}

TEST_P(AlgoPair, TypesOps) {
  const Pair &p = kPairs[GetParam()];
  std::vector<ncclDataType_t> types(std::begin(th::kAllTypes), std::end(th::kAllTypes));
  std::vector<Op> ops(std::begin(th::kAllOps), std::end(th::kAllOps));
  const std::vector<size_t> counts = {0, 1, 7, 1023, 20011};
  for (int n : {3, 4}) {
    if (p.pow2_only && n == 3) continue;
    run_pair(p, Mode::kThreads, n, types, ops, counts);
  }
  run_pair(p, Mode::kProcs, p.pow2_only ? 8 : 5, types, ops, counts);
}

#endif

INSTANTIATE_TEST_SUITE_P(, AlgoPair, ::testing::Range(0, (int)(sizeof(kPairs) / sizeof(kPairs[0]))),
                         param_name);

}  // namespace
