// Settings (TUTTI_* environment variables) that change what the library does, each shown to
// have its documented effect by a run with and without it: a test here fails if the setting
// were ignored. Runs are real: env_allreduce.c (two all-reduces with closed-form sums and an
// all-gather) under tutti-run as separate processes, reading INFO lines from their output; or
// the harness's ranks (processes) where a rank's own measurements are needed.
//   DEBUG_FILE, DUMP_SCHEDULE, NT_THRESHOLD, ONESHOT_MAX_BYTES, SHM_NSLOTS, SHM_SLOT_BYTES,
//   SHM_PREFETCH, SHM_RELEASE_BATCH,
//   TUNER_SHM_LAT_US (the other TUNER_* in test_tuner.cc), HOSTID, SPIN_US, TIMEOUT=0, and a valid
//   ncclCommInitRankConfig. DIRECT=0 is in test_direct.cc.
#include <cpuid.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"

#if !defined(ENV_ALLREDUCE_PATH) || !defined(TUTTI_RUN_PATH)
#error "build with ENV_ALLREDUCE_PATH and TUTTI_RUN_PATH defined"
#endif

namespace {

using th::Mode;
using th::RankCtx;

struct Out {
  int status;
  std::string text;  // stdout and stderr
};

// env_allreduce on 2 ranks under tutti-run with `env` ("VAR=value ..."), nothing else of the
// caller's logging settings; `run_opts` go to tutti-run (e.g. "--heap private").
Out launch(const std::string &env, const std::string &prog = ENV_ALLREDUCE_PATH, int nranks = 2,
           const std::string &run_opts = "") {
  std::string cmd =
      "env -u TUTTI_DEBUG -u TUTTI_DEBUG_SUBSYS -u TUTTI_DEBUG_FILE -u NCCL_DEBUG "
      "-u TUTTI_RUN_HEAP " +
      env + " " + TUTTI_RUN_PATH + " -n " + std::to_string(nranks) + " " + run_opts +
      " --timeout 120 " + prog + " 2>&1";
  Out o{-1, ""};
  FILE *p = popen(cmd.c_str(), "r");
  if (!p) return o;
  char buf[4096];
  for (size_t k; (k = fread(buf, 1, sizeof buf, p)) > 0;) o.text.append(buf, k);
  int st = pclose(p);
  o.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  return o;
}

int count(const std::string &text, const std::string &what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) n++;
  return n;
}

// The run worked: every rank printed its "ok" line (exact sums) and the job exited 0.
void expect_ok(const Out &o, int nranks = 2) {
  EXPECT_EQ(o.status, 0) << o.text;
  EXPECT_EQ(count(o.text, " of " + std::to_string(nranks) + " ok"), nranks) << o.text;
}

// The line of the call with `count` elements ("ncclAllReduce: opCount ... count 10 ..."), per rank.
std::vector<std::string> coll_lines(const std::string &text, const std::string &count_field) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (l.find("ncclAllReduce: opCount") != std::string::npos &&
        l.find(" " + count_field + " ") != std::string::npos)
      out.push_back(l);
  return out;
}

// ------------------------------------------------------------------ logging and dumps

TEST(Settings, DebugFileWritesEachProcessLogToItsOwnFile) {
  char tmpl[] = "/tmp/tutti-settings-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  Out plain = launch("TUTTI_DEBUG=INFO TUTTI_DEBUG_SUBSYS=INIT");
  expect_ok(plain);
  EXPECT_EQ(count(plain.text, "init done"), 2) << "without DEBUG_FILE INFO goes to stderr";
  Out o = launch("TUTTI_DEBUG=INFO TUTTI_DEBUG_SUBSYS=INIT TUTTI_DEBUG_FILE=" + dir + "/log.%h.%p");
  expect_ok(o);
  EXPECT_EQ(count(o.text, " INFO "), 0) << o.text;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::string h = host;
  h = h.substr(0, h.find('.'));
  std::smatch m;
  std::string rest = o.text;
  int files = 0;
  for (std::regex re("rank ([01]) of 2 ok pid=([0-9]+)"); std::regex_search(rest, m, re);
       rest = m.suffix()) {
    std::string path = dir + "/log." + h + "." + m[2].str();
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    EXPECT_EQ(count(ss.str(), "init done"), 1) << path << ":\n" << ss.str();
    EXPECT_NE(ss.str().find("[" + m[1].str() + "] TUTTI INFO"), std::string::npos) << path;
    files++;
    unlink(path.c_str());
  }
  EXPECT_EQ(files, 2) << o.text;
  EXPECT_EQ(rmdir(dir.c_str()), 0) << "files other than one per rank in " << dir;
}

// tutti-run --heap: under the shared heap (the default) env_allreduce's 400 KB malloc buffers
// are memory the peers map, so the all-reduce is the peer-memory one (push) with exact sums;
// with --heap private (or TUTTI_RUN_HEAP=private) they are read by copy (cma).
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)  // no libtutti-heap.so there
TEST(Settings, SharedHeapLetsPeersMapMallocBuffers) {
  Out shared = launch("TUTTI_DUMP_SCHEDULE=1");
  expect_ok(shared);
  Out priv = launch("TUTTI_DUMP_SCHEDULE=1", ENV_ALLREDUCE_PATH, 2, "--heap private");
  expect_ok(priv);
  Out by_env = launch("TUTTI_DUMP_SCHEDULE=1 TUTTI_RUN_HEAP=private");
  expect_ok(by_env);
  for (const char *r : {"0", "1"}) {
    std::string call = std::string("# rank ") + r + ": ncclAllReduce algo ";
    EXPECT_EQ(count(shared.text, call + "push nranks 2 count 100000 "), 1) << shared.text;
    EXPECT_EQ(count(priv.text, call + "cma nranks 2 count 100000 "), 1) << priv.text;
    EXPECT_EQ(count(by_env.text, call + "cma nranks 2 count 100000 "), 1) << by_env.text;
  }
}

// ncclMemAlloc under the shared heap (the default) serves from its arena, the one memfd the peers
// map for the heap's buffers too; with --heap private each allocation is a memfd of its own.
// Either way the peers map the buffers: the 400 KB all-reduce runs push, with exact sums, and
// every allocation (two buffers per all-reduce, two all-reduces, two ranks) says which it is.
TEST(Settings, MemAllocServesFromTheSharedHeapsArena) {
  const std::string env =
      "TUTTI_DUMP_SCHEDULE=1 TUTTI_DEBUG=INFO TUTTI_DEBUG_SUBSYS=SHM ENV_ALLREDUCE_MEM=memalloc";
  Out shared = launch(env);
  expect_ok(shared);
  Out priv = launch(env, ENV_ALLREDUCE_PATH, 2, "--heap private");
  expect_ok(priv);
  for (const Out *o : {&shared, &priv}) {
    const bool arena = o == &shared;
    EXPECT_EQ(count(o->text, "in the shared heap's arena)"), arena ? 8 : 0) << o->text;
    EXPECT_EQ(count(o->text, ", memfd "), arena ? 0 : 8) << o->text;
    for (const char *r : {"0", "1"})
      EXPECT_EQ(count(o->text, std::string("# rank ") + r +
                                   ": ncclAllReduce algo push nranks 2 count 100000 "),
                1)
          << o->text;
  }
}
#endif

// Every call's steps, titled with its algorithm, on every rank; nothing without the setting.
TEST(Settings, DumpSchedulePrintsEveryCallsSteps) {
  Out o = launch("TUTTI_DUMP_SCHEDULE=1", ENV_ALLREDUCE_PATH, 2, "--heap private");
  expect_ok(o);
  for (const char *r : {"0", "1"}) {
    std::string rank = std::string("# rank ") + r + ": ";
    EXPECT_EQ(count(o.text, rank + "ncclAllReduce algo oneshot nranks 2 count 10 "), 1) << o.text;
    // 400 KB of heap: cma where the ranks may read each other (shm.c), the ring where not
    EXPECT_EQ(count(o.text, rank + "ncclAllReduce algo cma nranks 2 count 100000 ") +
                  count(o.text, rank + "ncclAllReduce algo ring nranks 2 count 100000 "),
              1);
    EXPECT_EQ(count(o.text, rank + "ncclAllGather algo "), 1);
  }
  Out plain = launch("");
  expect_ok(plain);
  EXPECT_EQ(count(plain.text, "# rank "), 0) << plain.text;
}

// ------------------------------------------------------------------ algorithm choice

// 40 bytes on 2 ranks run one-shot by default (ONESHOT_MAX_BYTES = 16384); with a limit below
// 40 bytes the tuner must choose another algorithm, and the sums stay exact.
TEST(Settings, OneshotMaxBytesLimitsTheOneShot) {
  const std::string log = "TUTTI_DEBUG=INFO TUTTI_DEBUG_SUBSYS=COLL ";
  for (const char *limit : {"", "TUTTI_ONESHOT_MAX_BYTES=39", "TUTTI_ONESHOT_MAX_BYTES=40"}) {
    Out o = launch(log + limit);
    expect_ok(o);
    auto lines = coll_lines(o.text, "count 10");
    ASSERT_EQ(lines.size(), 2u) << o.text;
    bool want_oneshot = std::string(limit) != "TUTTI_ONESHOT_MAX_BYTES=39";
    for (const std::string &l : lines)
      EXPECT_EQ(l.size() >= 12 && l.substr(l.size() - 12) == "algo oneshot", want_oneshot)
          << limit << ": " << l;
  }
}

// Out-of-place calls of at least TUTTI_NT_THRESHOLD bytes, whose buffers fill the last-level
// cache (TUTTI_CACHE_BYTES), write their results with streaming stores (and say so at INFO):
// with the threshold at 1 byte and a 1-byte cache all three of env_allreduce's calls on each
// rank (two all-reduces, an all-gather) do, with the defaults (8 MiB, the CPU's cache) none does;
// the results are exact either way.
TEST(Settings, NtThresholdTurnsOnStreamingStores) {
  const std::string log = "TUTTI_DEBUG=INFO TUTTI_DEBUG_SUBSYS=COLL ";
  for (bool low : {false, true}) {
    Out o =
        launch(log + (low ? "TUTTI_NT_THRESHOLD=1 TUTTI_CACHE_BYTES=1 TUTTI_NT_MEASURE=0" : ""));
    expect_ok(o);
    EXPECT_EQ(count(o.text, "results written with streaming stores"), low ? 6 : 0) << o.text;
  }
}

// The tuner's model reads TUTTI_TUNER_SHM_LAT_US: with a 1000 us latency every candidate's
// estimate for 40 bytes on one host is at least 1000 us (by default every one is below 100 us).
// The other TUNER_* variables: TunerModel.ReadsEveryVariableFromTheEnvironment (test_tuner.cc).
TEST(Settings, TunerShmLatencyFromTheEnvironment) {
  const std::string log = "TUTTI_DEBUG=INFO TUTTI_DEBUG_SUBSYS=TUNING ";
  for (bool slow : {false, true}) {
    Out o = launch(log + (slow ? "TUTTI_TUNER_SHM_LAT_US=1000" : ""));
    expect_ok(o);
    std::regex re("tuner: AllReduce 40 bytes nranks 2 hosts 1: [a-z]+ ([0-9.]+) us");
    int n = 0;
    std::string rest = o.text;
    for (std::smatch m; std::regex_search(rest, m, re); rest = m.suffix(), n++) {
      double us = std::stod(m[1].str());
      if (slow)
        EXPECT_GE(us, 1000.0) << m[0];
      else
        EXPECT_LT(us, 100.0) << m[0];
    }
    EXPECT_GE(n, 4) << o.text;
  }
}

// ------------------------------------------------------------------ shared memory

// The ring's chunk (elements) in the schedule dump of the 100000-float all-reduce, per rank.
std::vector<long> ring_chunks(const std::string &text) {
  std::vector<long> out;
  std::regex re("algo ring nranks 2 count 100000 root 0 chunk ([0-9]+) ");
  std::string rest = text;
  for (std::smatch m; std::regex_search(rest, m, re); rest = m.suffix())
    out.push_back(std::stol(m[1].str()));
  return out;
}

// The segment's FIFOs take SHM_NSLOTS slots of SHM_SLOT_BYTES (INFO SHM line), and the pipeline
// chunk follows the slot: a whole number of slots, 131072 floats with the default 128 KiB slots,
// a multiple of 3072 floats below that with slots of 12288 bytes. The sums stay exact through the
// smaller FIFO. TUTTI_CMA=0 keeps the 400 KB call on the FIFOs (the ring) instead of peer reads.
TEST(Settings, ShmSlotsAndSlotBytesShapeTheFifos) {
  const std::string base =
      "TUTTI_DEBUG=INFO TUTTI_DEBUG_SUBSYS=SHM TUTTI_DUMP_SCHEDULE=1 TUTTI_CMA=0 ";
  Out dflt = launch(base, ENV_ALLREDUCE_PATH, 2, "--heap private");
  expect_ok(dflt);
  EXPECT_EQ(count(dflt.text, "2 local ranks x 8 slots x 131072 bytes"), 2) << dflt.text;
  EXPECT_EQ(ring_chunks(dflt.text), std::vector<long>(2, 131072)) << dflt.text;
  Out o = launch(base + "TUTTI_SHM_NSLOTS=3 TUTTI_SHM_SLOT_BYTES=12288", ENV_ALLREDUCE_PATH, 2,
                 "--heap private");
  expect_ok(o);
  EXPECT_EQ(count(o.text, "2 local ranks x 3 slots x 12288 bytes"), 2) << o.text;
  auto chunks = ring_chunks(o.text);
  ASSERT_EQ(chunks.size(), 2u) << o.text;
  for (long c : chunks) {
    EXPECT_EQ(c % 3072, 0) << c;
    EXPECT_LT(c, 131072) << c;
  }
}

// The sender's prefetch size (INFO SHM line): 0 with TUTTI_SHM_PREFETCH=0 or a CPU without
// prefetchw; a size given in bytes, at most 16 KiB; by default 2 KiB on AMD CPUs and 16 KiB on
// others (shm_prefetch_bytes). Taken late (shm_prefetch_due: the line says "(late)") by default
// on AMD CPUs only, always with TUTTI_SHM_PREFETCH_LATE=1, never with 0. The FIFO all-reduce's
// sums stay exact with each.
TEST(Settings, ShmPrefetchSizeFromTheSettingAndTheCpu) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  bool prefetchw = __get_cpuid(0x80000001, &a, &b, &c, &d) && (c & bit_PRFCHW);
  bool amd = __builtin_cpu_is("amd");
  const unsigned fit = amd ? 2048u : 16384u;
  const struct {
    const char *value, *late;
    unsigned bytes;
    bool is_late;
  } cases[] = {{"", "", fit, amd},          {"0", "", 0, false},  {"4096", "", 4096, amd},
               {"1000000", "", 16384, amd}, {"", "1", fit, true}, {"", "0", fit, false},
               {"4096", "1", 4096, true}};
  for (const auto &k : cases) {
    std::string env = "TUTTI_DEBUG=INFO TUTTI_DEBUG_SUBSYS=SHM TUTTI_CMA=0 ";
    if (*k.value) env += std::string("TUTTI_SHM_PREFETCH=") + k.value + " ";
    if (*k.late) env += std::string("TUTTI_SHM_PREFETCH_LATE=") + k.late;
    Out o = launch(env, ENV_ALLREDUCE_PATH, 2, "--heap private");
    expect_ok(o);
    unsigned want = prefetchw ? k.bytes : 0;
    std::string line = ", prefetch to " + std::to_string(want) + " bytes";
    EXPECT_EQ(count(o.text, line + (want && k.is_late ? " (late)," : ",")), 2)
        << "TUTTI_SHM_PREFETCH=" << k.value << " TUTTI_SHM_PREFETCH_LATE=" << k.late << "\n"
        << o.text;
  }
}

// How many messages a receive end takes before it publishes their release (INFO SHM line,
// shm.c's release_batch): half the FIFO's headers by default (8 -> 4, 16 -> 8), the setting up
// to that half (2; 100 -> 4; 0 -> 1); unset, 1 where the ranks outnumber the machine's CPUs (one
// rank more than it has), which the setting overrides. The all-reduce's sums stay exact with each.
TEST(Settings, ShmReleaseBatchFromTheSettingAndTheFifo) {
  const int over = (int)sysconf(_SC_NPROCESSORS_ONLN) + 1;
  const struct {
    const char *env;
    int nranks;
    unsigned batch;
  } cases[] = {{"", 2, 4},
               {"TUTTI_SHM_NSLOTS=16", 2, 8},
               {"TUTTI_SHM_RELEASE_BATCH=2", 2, 2},
               {"TUTTI_SHM_RELEASE_BATCH=100", 2, 4},
               {"TUTTI_SHM_RELEASE_BATCH=0", 2, 1},
               {"", over, 1},
               {"TUTTI_SHM_RELEASE_BATCH=3", over, 3}};
  for (const auto &k : cases) {
    Out o = launch(std::string("TUTTI_DEBUG=INFO TUTTI_DEBUG_SUBSYS=SHM TUTTI_CMA=0 ") + k.env,
                   ENV_ALLREDUCE_PATH, k.nranks, "--heap private");
    expect_ok(o, k.nranks);
    std::string line = ", releases published every " + std::to_string(k.batch) + " messages\n";
    EXPECT_EQ(count(o.text, line), k.nranks) << k.env << " on " << k.nranks << " ranks\n" << o.text;
  }
}

// ------------------------------------------------------------------ host identity

// Two ranks of one machine with different TUTTI_HOSTID are two hosts: they connect over TCP
// (INFO INIT "via tcp") instead of shared memory, and the sums stay exact.
TEST(Settings, HostIdMakesRanksDifferentHosts) {
  const std::string log = "TUTTI_DEBUG=INFO TUTTI_DEBUG_SUBSYS=INIT ";
  Out same = launch(log);
  expect_ok(same);
  EXPECT_EQ(count(same.text, "via shm"), 2) << same.text;
  Out o = launch(
      log, std::string("sh -c 'TUTTI_HOSTID=fakehost$TUTTI_RANK exec ") + ENV_ALLREDUCE_PATH + "'");
  expect_ok(o);
  EXPECT_EQ(count(o.text, "via tcp"), 2) << o.text;
  EXPECT_EQ(count(o.text, "via shm"), 0) << o.text;
}

// Ranks of two hosts interleaved (rank r on host r % 2): the ring order from the topology enters
// each host once (0 2 1 3: 2 host crossings instead of rank order's 4), the forced ring runs its
// all-reduces and all-gather in that order with exact results (env_allreduce checks them);
// TUTTI_RING_ORDER=rank keeps rank order, and a bad value is an error naming the setting.
TEST(Settings, RingOrderEntersEachHostOnce) {
  const std::string log = "TUTTI_DEBUG=INFO TUTTI_DEBUG_SUBSYS=INIT,COLL TUTTI_ALGO=ring ";
  const std::string prog = std::string("sh -c 'TUTTI_HOSTID=fakehost$((TUTTI_RANK % 2)) exec ") +
                           ENV_ALLREDUCE_PATH + "'";
  Out o = launch(log, prog, 4);
  expect_ok(o, 4);
  EXPECT_EQ(count(o.text,
                  "ring order 0 2 1 3 (topology: hosts, then NUMA nodes): 2 host "
                  "crossings, 4 in rank order"),
            4)
      << o.text;
  EXPECT_EQ(count(o.text, "] algo ring"), 12) << o.text;  // 3 calls x 4 ranks
  Out r = launch(log + "TUTTI_RING_ORDER=rank ", prog, 4);
  expect_ok(r, 4);
  EXPECT_EQ(count(r.text, "ring order 0 1 2 3 (RING_ORDER=rank): 4 host crossings"), 4) << r.text;
  Out bad = launch("TUTTI_RING_ORDER=sideways");
  EXPECT_NE(bad.status, 0) << bad.text;
  EXPECT_NE(bad.text.find("TUTTI_RING_ORDER=\"sideways\" is not \"topo\" or \"rank\""),
            std::string::npos)
      << bad.text;
}

// ------------------------------------------------------------------ waiting

double cpu_s() {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Waited {
  double cpu[2], wall[2];
  int rc[2];
  char msg[2][512];
};

// Rank 1 enters the all-reduce `late_s` after rank 0; rank 0 records the CPU time and wall time
// its call took, and both their result codes.
Waited *wait_run(Waited *w, const std::vector<std::pair<std::string, std::string>> &env,
                 double late_s) {
  memset(w, 0, sizeof *w);
  th::Options opt;
  opt.env = env;
  th::run_ranks(
      Mode::kProcs, 2,
      [&](RankCtx &ctx) {
        std::vector<float> in(1000, 1.0f), out(1000);
        if (ctx.rank == 1) usleep((useconds_t)(late_s * 1e6));
        double c0 = cpu_s(), t0 = th::now_s();
        ncclResult_t rc =
            ncclAllReduce(in.data(), out.data(), 1000, ncclFloat32, ncclSum, ctx.comm, nullptr);
        w->cpu[ctx.rank] = cpu_s() - c0, w->wall[ctx.rank] = th::now_s() - t0;
        w->rc[ctx.rank] = rc;
        snprintf(w->msg[ctx.rank], sizeof w->msg[0], "%s", ncclGetLastError(ctx.comm));
      },
      opt);
  return w;
}

// A rank waiting 1 s for its peer (2 ranks on this machine's CPUs: not oversubscribed, so the
// engine spins, then yields, then sleeps). With SPIN_US = YIELD_US = 0 it sleeps at once: its
// CPU time is the wake-ups' (at most one per ms), a few percent of the wait. With SPIN_US = 10 s
// it spins through the whole wait and never gives its CPU up: on an idle machine it uses the
// whole second, on a loaded one at least its fair share (10x the sleeper's with ctest -j2 next to
// other jobs), so the test asks for twice the sleeper's CPU time, not for 1 s. YIELD_US is not
// checked this way: a yielding rank hands its CPU to whoever waits, so on a loaded machine it
// uses as little CPU as a sleeping one (voluntary context switches would tell them apart, but
// sandboxed kernels such as gVisor report none).
TEST(Settings, SpinUsMakesAWaitingRankSpin) {
  Waited *w = static_cast<Waited *>(th::shared_alloc(sizeof(Waited)));
  ASSERT_NE(w, nullptr);
  wait_run(w, {{"TUTTI_SPIN_US", "0"}, {"TUTTI_YIELD_US", "0"}}, 1.0);
  const double sleep_cpu = w->cpu[0];
  EXPECT_EQ(w->rc[0], ncclSuccess) << w->msg[0];
  EXPECT_GE(w->wall[0], 0.5);
  EXPECT_LT(sleep_cpu, 0.1 * w->wall[0]) << "the sleeping rank used " << sleep_cpu << " s of CPU";
  wait_run(w, {{"TUTTI_SPIN_US", "10000000"}, {"TUTTI_YIELD_US", "0"}}, 1.0);
  EXPECT_EQ(w->rc[0], ncclSuccess) << w->msg[0];
  EXPECT_GE(w->wall[0], 0.5);
  printf("  TUTTI_SPIN_US=10 s: %.3f s of CPU in a %.3f s wait (sleeping: %.3f s)\n", w->cpu[0],
         w->wall[0], sleep_cpu);
  EXPECT_GT(w->cpu[0], 2 * sleep_cpu) << "the rank slept instead of spinning";
  th::shared_free(w, sizeof(Waited));
}

// TIMEOUT bounds a wait (a peer 3 s late fails the call after 1 s, naming the setting);
// TIMEOUT=0 removes the bound (the same wait completes).
TEST(Settings, TimeoutZeroWaitsWithoutLimit) {
  Waited *w = static_cast<Waited *>(th::shared_alloc(sizeof(Waited)));
  ASSERT_NE(w, nullptr);
  wait_run(w, {{"TUTTI_TIMEOUT", "1"}}, 3.0);
  EXPECT_NE(w->rc[0], ncclSuccess);
  EXPECT_NE(std::string(w->msg[0]).find("TUTTI_TIMEOUT"), std::string::npos) << w->msg[0];
  EXPECT_LT(w->wall[0], 2.9) << "gave up only when the peer came";
  wait_run(w, {{"TUTTI_TIMEOUT", "0"}}, 3.0);
  EXPECT_EQ(w->rc[0], ncclSuccess) << w->msg[0];
  EXPECT_EQ(w->rc[1], ncclSuccess) << w->msg[1];
  EXPECT_GE(w->wall[0], 2.5);
  th::shared_free(w, sizeof(Waited));
}

// ------------------------------------------------------------------ ncclCommInitRankConfig

// A config from NCCL_CONFIG_INITIALIZER (blocking and non-blocking, a CTA count set) makes a
// communicator that works: exact sums, no asynchronous error, the right rank and size.
TEST(Settings, InitRankConfigWithAValidConfig) {
  for (int blocking : {1, 0}) {
    th::Options opt;
    opt.init = false;
    th::run_ranks_ok(
        Mode::kProcs, 3,
        [&](RankCtx &ctx) {
          ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
          config.blocking = blocking;
          config.minCTAs = 2;
          ncclComm_t comm = nullptr;
          NCCL_OK(ctx, ncclCommInitRankConfig(&comm, ctx.nranks, ctx.id, ctx.rank, &config));
          ncclResult_t async = ncclInProgress;
          NCCL_OK(ctx, ncclCommGetAsyncError(comm, &async));
          RCHECK(ctx, async == ncclSuccess, "async error %d after init", (int)async);
          int n = -1, r = -1;
          NCCL_OK(ctx, ncclCommCount(comm, &n));
          NCCL_OK(ctx, ncclCommUserRank(comm, &r));
          RCHECK(ctx, n == ctx.nranks && r == ctx.rank, "rank %d of %d", r, n);
          std::vector<int32_t> in(1001), out(1001);
          for (size_t j = 0; j < in.size(); j++) in[j] = (int32_t)j + ctx.rank;
          NCCL_OK(ctx, ncclAllReduce(in.data(), out.data(), in.size(), ncclInt32, ncclSum, comm,
                                     nullptr));
          for (size_t j = 0; j < out.size(); j++)
            RCHECK(ctx, out[j] == 3 * (int32_t)j + 3, "out[%zu] = %d", j, out[j]);
          NCCL_OK(ctx, ncclCommDestroy(comm));
        },
        opt, "blocking " + std::to_string(blocking));
  }
}

}  // namespace
