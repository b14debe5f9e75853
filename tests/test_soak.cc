// Soak (issue 13): many collectives of random kinds, sizes, datatypes, ops, roots, in place or
// not, on 4 ranks (processes over shm). Every result is checked element by element against its
// closed form (harness run_case); over the second half of the calls each rank's resident memory
// may not grow 1% beyond the highest level of the first half (after a warm-up), and its open file
// descriptors must stay the same.
// TUTTI_SOAK_CALLS sets the number of calls (default 100000; ctest runs it as "slow").
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "harness.h"

namespace {

using th::Mode;
using th::RankCtx;

long resident_kib() {
  long pages = 0, resident = 0;
  FILE *f = std::fopen("/proc/self/statm", "r");
  if (f) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

int open_fds() {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  while (readdir(d)) n++;
  closedir(d);
  return n - 3;  // ".", "..", and the directory's own fd
}

TEST(Soak, RandomCollectivesExactWithoutGrowth) {
  const char *env = std::getenv("TUTTI_SOAK_CALLS");
  const long calls = env ? std::atol(env) : 100000;
  const long warmup = std::min<long>(2000, calls / 10);
  th::Options opt;
  opt.timeout_s = 7200;
  th::run_ranks_ok(
      Mode::kProcs, 4,
      [calls, warmup](RankCtx &ctx) {
        std::mt19937_64 rng(20261201);
        long rss0 = 0, high = 0;  // high: the most resident memory of the first half
        int fds0 = 0;
        for (long i = 0; i < calls; i++) {
          if (i == warmup) rss0 = high = resident_kib(), fds0 = open_fds();
          if (i > warmup && i < calls / 2 && i % 1000 == 0) high = std::max(high, resident_kib());
          // the same sequence of cases on every rank (same seed), counts below 64 Ki
          th::Case c = th::random_case(rng, ctx.nranks, 16);
          bool broken = false;
          if (!th::run_case(ctx, c, &broken)) {
            ctx.fail("call %ld: %s failed", i, th::describe(c, ctx.nranks).c_str());
            return;
          }
        }
        long rss1 = resident_kib();
        int fds1 = open_fds();
        // A leak grows with the calls; reused buffers, cached schedules and the allocator's free
        // lists only reach a high-water mark (glibc keeps freed blocks and returns them later).
        // So the second half may not go 1% beyond the highest level seen in the first half.
        RCHECK(ctx, rss1 * 100 < high * 101,
               "resident memory grew from %ld KiB (the first half's highest) to %ld KiB over the "
               "second half of %ld calls (%ld KiB after the warm-up)",
               high, rss1, calls, rss0);
        RCHECK(ctx, fds1 == fds0, "open fds went from %d to %d", fds0, fds1);
        if (ctx.rank == 0)
          std::fprintf(stderr, "soak: %ld calls, rss %ld -> %ld KiB, fds %d -> %d\n", calls, rss0,
                       rss1, fds0, fds1);
      },
      opt);
}

}  // namespace
