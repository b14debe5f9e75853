// Soak of the measured choices (src/adapt.h, src/adapt_stream.c): ranks as processes over shm
// make stints of one collective at one size (the measured choice's bucket: a power of two of
// bytes), long enough for its warm-up, probes and decisions, with each rank choosing its own
// buffers per stint (heap, or ncclMemAlloc memory the peers map) and its own placement per call
// (in place or not), as NCCL allows. So the handshakes move buckets between their pairs (FIFOs
// against cma, direct against push or the FIFOs) and out of them, a size's decision carries from
// one placement into the other, and the rooted collectives between stints move the call counts.
// Every result is checked element by element against its closed form (harness run_case), and
// every rank must log the same decisions in the same order. The same stints also run under
// tutti-run (soak_run.cc), on its shared heap, whose heap buffers the peers map, and on glibc's.
// TUTTI_SOAK_MEASURED_CALLS sets the calls of the slow tests (default 3000 with 2 ranks, half that
// with 3), TUTTI_SOAK_MEASURED_SEED the draws' seed (20261207).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "harness.h"
#include "log_capture.h"  // first: sets the logging variables before anything reads them
#include "soak_stints.h"

namespace {

using th::Coll;
using th::Mode;
using th::RankCtx;

const char *const kDecided = "measured (slowest rank)";
const char *const kSwitched = "the peers' buffers can";

// The decisions each rank logged, in order.
std::vector<std::vector<std::string>> decisions_per_rank(int n) {
  return log_capture::tails_per_rank(n, kDecided);
}

uint64_t seed() {
  const char *env = std::getenv("TUTTI_SOAK_MEASURED_SEED");
  return env ? std::strtoull(env, nullptr, 10) : 20261207;
}

long calls_from_env(long fallback) {
  const char *env = std::getenv("TUTTI_SOAK_MEASURED_CALLS");
  return env && std::atol(env) > 0 ? std::atol(env) : fallback;
}

// What the ranks logged: the same decisions in the same order, at least one in 400 calls (seeds
// 1-12 gave one in 30-125: the count depends on the picks, which depend on the machine), and at
// least one bucket moved between pairs by a handshake.
void check_decisions(int nranks, long calls) {
  const size_t min_decisions = (size_t)std::max(2L, calls / 400);
  auto d = decisions_per_rank(nranks);
  std::fprintf(stderr, "soak: %d ranks, %ld calls, %zu decisions, %d handshakes changed a pair\n",
               nranks, calls, d[0].size(), log_capture::count(kSwitched));
  EXPECT_GE(d[0].size(), min_decisions) << "logs in " << log_capture::g_dir;
  for (int r = 1; r < nranks; r++) EXPECT_EQ(d[0], d[r]) << "rank " << r << " decided otherwise";
  EXPECT_GE(log_capture::count(kSwitched), 1) << "no bucket changed pairs";
}

// The soak on forked ranks (their heap is glibc's).
void soak(int nranks, long calls, int max_log2, double timeout_s) {
  log_capture::clear();
  th::Options opt;
  opt.timeout_s = timeout_s;
  bool ok = th::run_ranks_ok(
      Mode::kProcs, nranks, [&](RankCtx &ctx) { soak_stints(ctx, seed(), calls, max_log2); }, opt,
      std::to_string(calls) + " calls");
  if (ok) check_decisions(nranks, calls);
}

// The same stints as users run them: tutti-run's ranks (soak_run), on its shared heap (the
// default: heap buffers the peers map) or on glibc's (--heap private).
void soak_under_tutti_run(int nranks, long calls, int max_log2, const char *heap) {
  log_capture::clear();
  std::string cmd = std::string(TUTTI_RUN_PATH) + " -n " + std::to_string(nranks) + " --heap " +
                    heap + " --timeout 1800 " + SOAK_RUN_PATH + " " + std::to_string(calls) + " " +
                    std::to_string(max_log2) + " " + std::to_string(seed()) + " 2>&1";
  std::string out;
  FILE *f = popen(cmd.c_str(), "r");
  ASSERT_NE(f, nullptr);
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  int status = pclose(f);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd << "\n" << out;
  size_t exact = 0;
  for (size_t at = 0; (at = out.find("calls exact", at)) != std::string::npos; at++) exact++;
  EXPECT_EQ(exact, (size_t)nranks) << out;
  check_decisions(nranks, calls);
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

// Sanitizer builds have no shared heap (the sanitizer's malloc must be the process's):
// scripts/sanitize.sh.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
TEST(SoakMeasured, ShortUnderTuttiRunOnTheSharedHeap) {
  soak_under_tutti_run(2, 400, 19, "shared");
}

TEST(SoakMeasured, UnderTuttiRunOnTheSharedHeap) {
  soak_under_tutti_run(3, calls_from_env(3000) / 2, 21, "shared");
}
#endif

TEST(SoakMeasured, UnderTuttiRunOnGlibcsHeap) {
  soak_under_tutti_run(2, calls_from_env(3000) / 2, 21, "private");
}

}  // namespace
