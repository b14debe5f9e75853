// TUTTI_CHECKSUM=1 (src/transport/tcp.c): every piece the tcp transport sends carries a CRC32C
// of its payload, checked on receipt. The corruption here is real: TUTTI_TEST_CORRUPT_RECV=N
// makes one rank flip a bit of the Nth piece it reads from its socket, after the kernel
// delivered it, as a fault the TCP checksum missed would. With the check, both ranks return an
// error naming the link (which rank received the bad piece from which); without it, the
// corruption goes through as a wrong result (which also shows the tcp transport carried it:
// the hook is in tcp.c alone).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "harness.h"

namespace {

// 2 ranks over tcp (TUTTI_SHM_DISABLE=1), 20 all-reduces of 64 Ki floats (several pieces each);
// rank 1 corrupts the 5th piece it receives. Returns through ctx what each rank saw.
th::Options corrupting(bool checksum) {
  th::Options opt;
  opt.timeout_s = 120;
  opt.env = {{"TUTTI_SHM_DISABLE", "1"},
             {"TUTTI_TCP_SLOT_BYTES", "16K"},
             {"TUTTI_CHECKSUM", checksum ? "1" : "0"},
             {"TUTTI_TIMEOUT", "30"}};
  opt.before_init = [](int rank) {
    if (rank == 1) setenv("TUTTI_TEST_CORRUPT_RECV", "5", 1);
  };
  return opt;
}

// Ints 0..1008 + rank: their sum is exact in float.
bool allreduce_right(th::RankCtx &ctx, ncclResult_t *res) {
  const size_t n = 64 * 1024;
  std::vector<float> s(n), d(n);
  for (size_t j = 0; j < n; j++) s[j] = (float)(j % 1009 + ctx.rank);
  *res = ncclAllReduce(s.data(), d.data(), n, ncclFloat32, ncclSum, ctx.comm, nullptr);
  if (*res != ncclSuccess) return false;
  for (size_t j = 0; j < n; j++)
    if (d[j] != (float)(2 * (j % 1009) + 1)) return false;
  return true;
}

TEST(Checksum, CorruptedPieceIsAnErrorNamingTheLink) {
  th::run_ranks_ok(
      th::Mode::kProcs, 2,
      [](th::RankCtx &ctx) {
        ncclResult_t res = ncclSuccess;
        for (int i = 0; i < 20 && res == ncclSuccess; i++)
          RCHECK(ctx, allreduce_right(ctx, &res) || res != ncclSuccess,
                 "call %d returned a wrong result with TUTTI_CHECKSUM=1", i);
        RCHECK(ctx, res != ncclSuccess, "20 all-reduces succeeded: the corruption went unseen");
        std::string msg = ncclGetLastError(ctx.comm);
        RCHECK(ctx, th::contains(msg, "data corrupted on the wire"), "message: %s", msg.c_str());
        // the receiver names itself and the sender; rank 0 hears it in rank 1's abort notice
        RCHECK(ctx, th::contains(msg, "rank 1: data corrupted") && th::contains(msg, "from rank 0"),
               "the message does not name the link 0 -> 1: %s", msg.c_str());
        ncclCommAbort(ctx.comm);
        ctx.comm = nullptr;
      },
      corrupting(true), "TUTTI_CHECKSUM=1 with a corrupted piece");
}

TEST(Checksum, WithoutItTheSameCorruptionIsAWrongResult) {
  th::run_ranks_ok(
      th::Mode::kProcs, 2,
      [](th::RankCtx &ctx) {
        int wrong = 0;
        for (int i = 0; i < 20; i++) {
          ncclResult_t res;
          bool right = allreduce_right(ctx, &res);
          RCHECK(ctx, res == ncclSuccess, "call %d failed: %s", i, ncclGetLastError(ctx.comm));
          wrong += !right;
        }
        // ring all-reduce: the bad piece reaches both ranks' results, or only rank 1's
        if (ctx.rank == 1) RCHECK(ctx, wrong == 1, "rank 1 saw %d wrong results, not 1", wrong);
      },
      corrupting(false), "a corrupted piece without TUTTI_CHECKSUM");
}

}  // namespace
