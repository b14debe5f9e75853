// Who an error names, and in which call, when one rank dies and others fail because of it.
//
// Across hosts (tcp), a rank that fails because a third rank died tells every peer why, then
// aborts and closes its sockets. Its close reaches a peer as a reset (it closed with that peer's
// bytes unread) or as an EOF; neither may make the peer name it: the error must name the rank
// that died (src/transport/tcp.c, verdict_probe). Two hosts are told apart by TUTTI_HOSTID, so
// the ranks run as processes on this machine, over tcp between the hosts and shm within them.
//
// Inside a call, an error during the peer-memory handshake (an internal exchange between all
// ranks) names the user's call, not the exchange.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "harness.h"
#include "log_capture.h"

namespace {

using th::Mode;
using th::RankCtx;

// The tcp transport's lines too (where a notice was found), in every process's captured log; set
// before any process configures its logger (log_capture.h set COLL just before).
const bool g_net_log = (setenv("TUTTI_DEBUG_SUBSYS", "COLL,NET", 1), true);

struct Report {  // what the ranks tell the test (memory shared with the processes)
  std::atomic<int> failed[4];
  int code[4];
  char message[4][1024];
};

Report *new_report() {
  void *p = th::shared_alloc(sizeof(Report));
  return p == nullptr ? nullptr : new (p) Report();
}

void record(RankCtx &ctx, Report *rep, ncclResult_t rc) {
  rep->code[ctx.rank] = rc;
  snprintf(rep->message[ctx.rank], sizeof rep->message[0], "%s", ncclGetLastError(ctx.comm));
  rep->failed[ctx.rank] = 1;
}

// Ends a rank's communicator the way a failed job does (the harness then has none to destroy).
void abort_comm(RankCtx &ctx) {
  ncclCommAbort(ctx.comm);
  ctx.comm = nullptr;
}

// 4 ranks, hosts {0, 1} and {2, 3}. After one all-reduce rank 3 is killed. Rank 2 then waits
// for rank 3 (a receive), finds it dead, fails naming it, aborts and exits. Rank 1 meanwhile
// sends 32 MiB to rank 2, which never reads them: rank 2's close resets rank 1's connection.
// With `casualty_sends`, rank 2 was also sending 32 MiB to rank 1 (which never reads them),
// so its connection to rank 1 is full, a piece half out, when it fails: its notice cannot go
// there. Rank 1's error must name rank 3 either way.
void survivor_names_the_dead_rank(bool casualty_sends) {
  const int n = 4, victim = 3, casualty = 2, survivor = 1;
  const size_t big = 32 << 20;
  Report *rep = new_report();
  ASSERT_NE(rep, nullptr);
  th::Options opt;
  opt.env = {{"TUTTI_TIMEOUT", "10"}};
  opt.timeout_s = 60;
  log_capture::clear();
  opt.before_init = [](int rank) { setenv("TUTTI_HOSTID", rank < 2 ? "blame-h1" : "blame-h2", 1); };
  th::RunResult res = th::run_ranks(
      Mode::kProcs, n,
      [&](RankCtx &ctx) {
        std::vector<float> a(1024, 1.0f);
        NCCL_OK(ctx, ncclAllReduce(a.data(), a.data(), a.size(), ncclFloat32, ncclSum, ctx.comm,
                                   nullptr));
        RCHECK(ctx, a[0] == 4.0f, "all-reduce: %g", a[0]);
        if (ctx.rank == victim) raise(SIGKILL);
        std::vector<char> buf(big, 1), in(big);
        ncclResult_t rc = ncclSuccess;
        if (ctx.rank == casualty) {
          ncclGroupStart();
          if (casualty_sends) ncclSend(buf.data(), big, ncclChar, survivor, ctx.comm, nullptr);
          ncclRecv(in.data(), 1024, ncclChar, victim, ctx.comm, nullptr);
          rc = ncclGroupEnd();
        } else if (ctx.rank == survivor) {
          rc = ncclSend(buf.data(), big, ncclChar, casualty, ctx.comm, nullptr);
        } else {  // rank 0 stays out of it: rank 1 must learn the cause from rank 2 alone
          for (int i = 0; i < 2000 && !rep->failed[survivor]; i++) usleep(10000);
        }
        if (rc != ncclSuccess) record(ctx, rep, rc);
        RCHECK(ctx, ctx.rank == 0 || rc != ncclSuccess, "rank %d: the call did not fail", ctx.rank);
        abort_comm(ctx);
      },
      opt);
  ASSERT_TRUE(res.setup_error.empty()) << res.setup_error;
  EXPECT_EQ(res.ranks[victim].term_signal, SIGKILL) << res.describe();
  for (int r : {casualty, survivor}) {
    EXPECT_EQ(res.ranks[r].exit_code, 0) << res.describe();
    EXPECT_TRUE(rep->code[r] == ncclRemoteError || rep->code[r] == ncclSystemError)
        << "rank " << r << ": " << rep->code[r];
    EXPECT_TRUE(th::contains(rep->message[r], "rank 3 "))
        << "rank " << r << " did not name rank 3: " << rep->message[r];
  }
  // rank 1 heard it from rank 2: the cause arrived through the casualty, on the channel that
  // could carry it (rank 2's own stream, or with a piece half out there, the reverse direction)
  EXPECT_TRUE(th::contains(rep->message[survivor], "rank 2 on host")) << rep->message[survivor];
  const char *where =
      casualty_sends ? "the reverse direction of a send socket" : "its receive stream";
  EXPECT_EQ(log_capture::count(std::string("rank 1: rank 2's abort notice found on ") + where), 1);
  EXPECT_TRUE(res.leaked_shm.empty()) << res.describe();
  th::shared_free(rep, sizeof(Report));
}

TEST(Blame, ResetByACasualtyNamesTheDeadRank) {
  survivor_names_the_dead_rank(false);
}

TEST(Blame, ResetByACasualtyWithAPieceHalfOutNamesTheDeadRank) {
  survivor_names_the_dead_rank(true);
}

// 3 ranks on one host, buffers from ncclMemAlloc (shared): the all-reduce is a direct one, whose
// first part is the peer-memory handshake. Rank 2 is killed before it calls; the others fail in
// the handshake, and their errors name ncclAllReduce (the user's call) and rank 2.
TEST(Blame, HandshakeErrorNamesTheUsersCall) {
  const int n = 3, victim = 2;
  Report *rep = new_report();
  ASSERT_NE(rep, nullptr);
  th::Options opt;
  opt.env = {{"TUTTI_TIMEOUT", "10"}, {"TUTTI_MEM_ALLOC", "shared"}, {"TUTTI_ALGO", "direct"}};
  opt.timeout_s = 60;
  log_capture::clear();
  th::RunResult res = th::run_ranks(
      Mode::kProcs, n,
      [&](RankCtx &ctx) {
        if (ctx.rank == victim) raise(SIGKILL);
        const size_t count = 1 << 16;
        float *in = nullptr, *out = nullptr;
        NCCL_OK(ctx, ncclMemAlloc(reinterpret_cast<void **>(&in), count * 4));
        NCCL_OK(ctx, ncclMemAlloc(reinterpret_cast<void **>(&out), count * 4));
        for (size_t i = 0; i < count; i++) in[i] = 1.0f;
        ncclResult_t rc = ncclAllReduce(in, out, count, ncclFloat32, ncclSum, ctx.comm, nullptr);
        if (rc != ncclSuccess) record(ctx, rep, rc);
        RCHECK(ctx, rc != ncclSuccess, "rank %d: the all-reduce did not fail", ctx.rank);
        abort_comm(ctx);
        ncclMemFree(in);
        ncclMemFree(out);
      },
      opt);
  ASSERT_TRUE(res.setup_error.empty()) << res.setup_error;
  EXPECT_EQ(res.ranks[victim].term_signal, SIGKILL) << res.describe();
  // what ran: both survivors started the handshake of their all-reduce
  EXPECT_EQ(log_capture::count("ncclAllReduce (op #0): peer-memory handshake with every rank"), 2);
  for (int r = 0; r < n; r++) {
    if (r == victim) continue;
    EXPECT_EQ(res.ranks[r].exit_code, 0) << res.describe();
    std::string m = rep->message[r];
    EXPECT_TRUE(th::contains(m, "during ncclAllReduce (op #0)")) << "rank " << r << ": " << m;
    EXPECT_FALSE(th::contains(m, "AlltoAll")) << "rank " << r << ": " << m;
    EXPECT_TRUE(th::contains(m, "rank 2 ")) << "rank " << r << ": " << m;
  }
  EXPECT_TRUE(res.leaked_shm.empty()) << res.describe();
  th::shared_free(rep, sizeof(Report));
}

}  // namespace
