// A rank program for tutti-run (test_soak_measured.cc): makes its communicator with
// tuttiCommInitFromEnv and runs the measured choices' stints (soak_stints.h) on buffers from the
// process's heap as launched (tutti-run's shared heap by default) or ncclMemAlloc. Arguments:
// calls, the largest size's log2, the seed. Prints "rank R of N: C calls exact"; exit status 0
// when every result was exact, 1 otherwise, 2 when the communicator could not be made.
#include <cstdio>
#include <cstdlib>

#include "soak_stints.h"

int main(int argc, char **argv) {
  long calls = argc > 1 ? std::atol(argv[1]) : 1000;
  int max_log2 = argc > 2 ? std::atoi(argv[2]) : 20;
  uint64_t seed = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 20261207;
  th::RankCtx ctx;
  if (tuttiCommInitFromEnv(&ctx.comm) != ncclSuccess ||
      ncclCommUserRank(ctx.comm, &ctx.rank) != ncclSuccess ||
      ncclCommCount(ctx.comm, &ctx.nranks) != ncclSuccess) {
    std::fprintf(stderr, "soak_run: no communicator: %s\n", ncclGetLastError(nullptr));
    return 2;
  }
  soak_stints(ctx, seed, calls, max_log2);
  ncclCommDestroy(ctx.comm);
  for (const std::string &m : ctx.messages)
    std::fprintf(stderr, "rank %d: %s\n", ctx.rank, m.c_str());
  if (ctx.ok()) std::printf("rank %d of %d: %ld calls exact\n", ctx.rank, ctx.nranks, calls);
  return ctx.ok() ? 0 : 1;
}
