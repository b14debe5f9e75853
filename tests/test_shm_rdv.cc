// The shm transport's large steps by rendezvous (src/transport/shm_rdv.c): a send/recv step (or a
// block of all-to-all, gather or scatter through the p2p lanes) of at least TUTTI_SHM_RDV_MIN
// bytes is read whole by the receiver straight from the sender's buffer (through its mapping of
// the sender's ncclMemAlloc region or shared heap, by process_vm_readv from other memory of
// another process, a copy between threads). Exact bytes around the threshold, behind and ahead of
// FIFO messages on the same connection, from and into heap and ncclMemAlloc buffers, with each
// receiver's INFO SHM line as the proof of which way every step went; the fallbacks to pieces;
// the setting turning it off; ranks that disagree on a step's length getting an error naming
// that, not a hang; a receiver that dies while its sender waits for the answer, and a rank killed
// in the middle of an exchange of large messages.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "harness.h"
#include "log_capture.h"

namespace {

using th::Case;
using th::Coll;
using th::Mode;
using th::RankCtx;

const bool g_subsys = (setenv("TUTTI_DEBUG_SUBSYS", "COLL,SHM", 1), true);

const size_t kMin = 16384;                            // TUTTI_SHM_RDV_MIN in these tests
const char *const kWhole = "read whole (rendezvous";  // any of the three below
const char *const kMapped = "read whole (rendezvous: mapped)";
const char *const kByCopy = "read whole (rendezvous: process_vm_readv)";
const char *const kSameProcess = "read whole (rendezvous: this process)";
const char *const kRecvDeclined = "as pieces (no buffer here to read them into)";
const char *const kSendDeclined = "as pieces (the sender has them in no buffer)";
const char *const kReadFailed = "as pieces (the read failed)";

th::Options rdv_options() {
  th::Options opt;
  opt.env = {{"TUTTI_SHM_RDV_MIN", std::to_string(kMin)}};
  return opt;
}

// Byte j of the message of size index k in round `round` from rank `rank`: each position,
// message and sender its own value mod 256, so a byte from the wrong place or message shows.
uint8_t byte_of(size_t j, int k, int round, int rank) {
  return static_cast<uint8_t>(j * 7 + j / 251 + static_cast<size_t>(k) * 29 +
                              static_cast<size_t>(round) * 13 + static_cast<size_t>(rank) * 101);
}

const size_t kSizes[] = {kMin - 1, kMin, kMin + 3, (size_t{3} << 20) + 5, (size_t{9} << 20) + 12};
const size_t kSmall = 100;      // behind each message, on the same connection: through the FIFO
constexpr int kLargeSizes = 4;  // of kSizes, those of at least kMin

// Two ranks send each other every size of kSizes, each followed by a small message, in one group
// per size; buffers start 1-3 bytes into their allocation. Rounds: heap to heap, an ncclMemAlloc
// region to heap, heap to a region, region to region. Every byte is exact, nothing around the
// receive written.
void exchange(Mode mode, const th::Options &opt, int rounds) {
  th::ThreadEnv thread_env(mode, opt);
  th::run_ranks_ok(
      mode, 2,
      [rounds](RankCtx &ctx) {
        const size_t cap = (size_t{9} << 20) + 16 + kSmall;
        uint8_t *region[2] = {nullptr, nullptr};  // send, receive
        for (uint8_t *&r : region) NCCL_OK(ctx, ncclMemAlloc(reinterpret_cast<void **>(&r), cap));
        std::vector<uint8_t> heap_out(cap), heap_in(cap);
        const int peer = 1 - ctx.rank;
        for (int round = 0; round < rounds; round++) {
          uint8_t *out = (round & 1) ? region[0] : heap_out.data();
          uint8_t *in = (round & 2) ? region[1] : heap_in.data();
          for (int k = 0; k < static_cast<int>(std::size(kSizes)); k++) {
            const size_t n = kSizes[k], off_out = 1 + k % 3, off_in = 3 - k % 3;
            for (size_t j = 0; j < n + kSmall; j++)
              out[off_out + j] = byte_of(j, k, round, ctx.rank);
            memset(in, 0, n + kSmall + 4);
            NCCL_OK(ctx, ncclGroupStart());
            NCCL_OK(ctx, ncclSend(out + off_out, n, ncclUint8, peer, ctx.comm, nullptr));
            NCCL_OK(ctx, ncclSend(out + off_out + n, kSmall, ncclUint8, peer, ctx.comm, nullptr));
            NCCL_OK(ctx, ncclRecv(in + off_in, n, ncclUint8, peer, ctx.comm, nullptr));
            NCCL_OK(ctx, ncclRecv(in + off_in + n, kSmall, ncclUint8, peer, ctx.comm, nullptr));
            NCCL_OK(ctx, ncclGroupEnd());
            for (size_t j = 0; j < off_in; j++)
              RCHECK(ctx, in[j] == 0, "round %d size %zu: byte %zu before the buffer written",
                     round, n, j);
            size_t bad = 0;
            for (size_t j = 0; j < n + kSmall; j++)
              bad += in[off_in + j] != byte_of(j, k, round, peer);
            RCHECK(ctx, bad == 0, "round %d size %zu: %zu bytes wrong", round, n, bad);
            RCHECK(ctx, in[off_in + n + kSmall] == 0,
                   "round %d size %zu: byte after the end written", round, n);
          }
        }
        for (uint8_t *r : region) NCCL_OK(ctx, ncclMemFree(r));
      },
      opt, std::string("shm large send/recv, ") + th::mode_name(mode));
}

// Every large step of every round, on each of the two receivers: from a heap buffer (rounds 0
// and 2) by process_vm_readv, from a region (rounds 1 and 3) through the receiver's mapping of it.
TEST(ShmLarge, SendRecvBothWaysAnyBufferExactProcs) {
  log_capture::clear();
  exchange(Mode::kProcs, rdv_options(), 4);
  EXPECT_EQ(log_capture::count(kByCopy), 2 * 2 * kLargeSizes);
  EXPECT_EQ(log_capture::count(kMapped), 2 * 2 * kLargeSizes);
  EXPECT_EQ(log_capture::count(kWhole), 2 * 4 * kLargeSizes);
}

TEST(ShmLarge, SendRecvBothWaysAnyBufferExactThreads) {
  log_capture::clear();
  exchange(Mode::kThreads, rdv_options(), 4);
  EXPECT_EQ(log_capture::count(kSameProcess), 2 * 4 * kLargeSizes);
  EXPECT_EQ(log_capture::count(kWhole), 2 * 4 * kLargeSizes);
}

// The fallbacks: a receiver that answers "pieces" (TUTTI_TEST_SHM_RDV_DECLINE=1), a sender that
// announces pieces (=2), a receiver whose process_vm_readv fails (=3: only heap senders, rounds
// 0 and 2; a region is mapped): every such step then goes through the FIFO behind its header,
// exact, and each receiver says so once per step.
TEST(ShmLarge, DeclinedStepsGoAsPiecesExact) {
  const char *const lines[] = {nullptr, kRecvDeclined, kSendDeclined, kReadFailed};
  for (int mode : {1, 2, 3}) {
    th::Options opt = rdv_options();
    opt.env.push_back({"TUTTI_TEST_SHM_RDV_DECLINE", std::to_string(mode)});
    log_capture::clear();
    exchange(Mode::kProcs, opt, 4);
    const int declined = mode == 3 ? 2 * 2 * kLargeSizes : 2 * 4 * kLargeSizes;
    EXPECT_EQ(log_capture::count(lines[mode]), declined) << "decline mode " << mode;
    EXPECT_EQ(log_capture::count(kWhole), 2 * 4 * kLargeSizes - declined)
        << "decline mode " << mode;
  }
}

// TUTTI_SHM_RDV_MIN=0 turns the rendezvous off, and so does TUTTI_CMA=0 between processes (the
// receiver could not read the sender's heap): every step through the FIFO, exact. Threads of one
// process copy without the kernel: TUTTI_CMA=0 leaves them the rendezvous.
TEST(ShmLarge, OffBySettingOrWithoutCma) {
  th::Options off = rdv_options();
  off.env[0].second = "0";
  log_capture::clear();
  exchange(Mode::kProcs, off, 1);
  EXPECT_EQ(log_capture::count(kWhole), 0);
  th::Options no_cma = rdv_options();
  no_cma.env.push_back({"TUTTI_CMA", "0"});
  log_capture::clear();
  exchange(Mode::kProcs, no_cma, 1);
  EXPECT_EQ(log_capture::count(kWhole), 0);
  log_capture::clear();
  exchange(Mode::kThreads, no_cma, 1);
  EXPECT_EQ(log_capture::count(kSameProcess), 2 * kLargeSizes);
}

// All-to-all, gather, scatter and broadcast through the p2p lanes (forced) on 3 ranks: exact for
// counts below and from the threshold (4096 floats is kMin bytes per block; a broadcast below it
// runs another algorithm), in and out of place, and every block of at least kMin bytes read
// whole: per call n (n - 1) blocks of an out-of-place all-to-all (in place its blocks swap by
// pieces, FIFO_SWAP), n - 1 of gather (into the root), of scatter and of broadcast (one into
// each other rank).
TEST(ShmLarge, P2pCollectivesReadLargeBlocksWhole) {
  const int n = 3;
  const size_t counts[] = {1, 4095, 4096, 70001};
  const Coll colls[] = {Coll::kAlltoAll, Coll::kGather, Coll::kScatter, Coll::kBroadcast};
  th::Options opt = rdv_options();
  opt.env.push_back({"TUTTI_ALGO", "alltoall:p2p;gather:p2p;scatter:p2p;broadcast:p2p"});
  log_capture::clear();
  th::run_ranks_ok(
      Mode::kProcs, n,
      [&](RankCtx &ctx) {
        int seq = 0;
        for (Coll coll : colls)
          for (size_t count : counts)
            for (int in_place = 0; in_place < 2; in_place++) {
              Case c;
              c.coll = coll, c.type = ncclFloat32, c.count = count, c.in_place = in_place;
              c.root = seq % n, c.align = static_cast<size_t>(seq) % 3;
              seq++;
              bool broken = false;
              th::run_case(ctx, c, &broken);
              if (broken) return;
            }
      },
      opt, "p2p collectives with large blocks");
  const int large_calls = 2 * 2;  // counts 4096 and 70001, in and out of place
  EXPECT_EQ(log_capture::count(kWhole), large_calls / 2 * n * (n - 1) + large_calls * 3 * (n - 1));
}

// One rank's step against the other's: (send bytes, receive bytes) that differ. Both large:
// the receiver compares the lengths. Large against a piece, and a piece against large: the
// receiver finds the other kind of message. The receiver fails naming both ranks and "different
// counts"; a large sender, waiting for the answer, fails as well (its peer failed), never hangs.
void mismatch(size_t send_bytes, size_t recv_bytes) {
  th::Options opt = rdv_options();
  opt.env.push_back({"TUTTI_TIMEOUT", "60"});
  th::run_ranks_ok(
      Mode::kProcs, 2,
      [=](RankCtx &ctx) {
        std::vector<uint8_t> buf(std::max(send_bytes, recv_bytes), 7);
        ncclResult_t r = ctx.rank == 0
                             ? ncclSend(buf.data(), send_bytes, ncclUint8, 1, ctx.comm, nullptr)
                             : ncclRecv(buf.data(), recv_bytes, ncclUint8, 0, ctx.comm, nullptr);
        const std::string msg = ncclGetLastError(ctx.comm);
        const bool must_fail = ctx.rank == 1 || send_bytes >= kMin;
        if (!must_fail) return;  // a short send went into the FIFO and is over
        RCHECK(ctx, r != ncclSuccess, "rank %d: %zu against %zu bytes returned success", ctx.rank,
               send_bytes, recv_bytes);
        RCHECK(ctx, msg.find("different counts") != std::string::npos, "rank %d: message: %s",
               ctx.rank, msg.c_str());
      },
      opt, "mismatched send/recv lengths");
}

TEST(ShmLarge, MismatchedLengthsAreAnErrorNotAHang) {
  mismatch(4 * kMin, 2 * kMin);
  mismatch(4 * kMin, kMin / 2);
  mismatch(kMin / 2, 4 * kMin);
}

// A sender waits for the answer to its header; the receiver exits without receiving. The sender
// fails naming the rank that died, well before the timeout.
TEST(ShmLarge, ReceiverDeathIsReportedToAWaitingSender) {
  th::Options opt = rdv_options();
  opt.env.push_back({"TUTTI_TIMEOUT", "60"});
  th::run_ranks_ok(
      Mode::kProcs, 2,
      [](RankCtx &ctx) {
        std::vector<uint8_t> buf(4 * kMin, 1);
        if (ctx.rank == 1) {
          usleep(300000);
          _exit(0);
        }
        const double t0 = th::now_s();
        ncclResult_t r = ncclSend(buf.data(), buf.size(), ncclUint8, 1, ctx.comm, nullptr);
        const std::string msg = ncclGetLastError(ctx.comm);
        RCHECK(ctx, r == ncclRemoteError, "send returned %d", static_cast<int>(r));
        RCHECK(ctx,
               msg.find("rank 1") != std::string::npos && msg.find("died") != std::string::npos,
               "message: %s", msg.c_str());
        RCHECK(ctx, th::now_s() - t0 < 20, "took %.1f s", th::now_s() - t0);
      },
      opt, "receiver death");
}

// Rank 1 is SIGKILLed while both ranks exchange 4 MiB messages in a loop (a rendezvous in
// flight: rank 0 reading rank 1's buffer, or waiting for its answer): rank 0's call fails naming
// rank 1 in well under the 60 s timeout, its results exact until then.
TEST(ShmLarge, KilledPeerIsReportedMidExchange) {
  struct Shared {
    std::atomic<int> iterations[2];
    double error_at, killed_at;
    char message[512];
  };
  auto *sh = static_cast<Shared *>(th::shared_alloc(sizeof(Shared)));
  ASSERT_NE(sh, nullptr);
  th::Options opt = rdv_options();
  opt.env.push_back({"TUTTI_TIMEOUT", "60"});
  opt.while_running = [sh](const std::vector<pid_t> &pids) {
    const double until = th::now_s() + 30;
    while ((sh->iterations[0] < 5 || sh->iterations[1] < 5) && th::now_s() < until) usleep(1000);
    sh->killed_at = th::now_s();
    kill(pids[1], SIGKILL);
  };
  th::RunResult res = th::run_ranks(
      Mode::kProcs, 2,
      [sh](RankCtx &ctx) {
        const size_t n = size_t{4} << 20;
        std::vector<uint8_t> out(n, static_cast<uint8_t>(ctx.rank + 1)), in(n);
        const int peer = 1 - ctx.rank;
        for (int it = 0; it < 1000000; it++) {
          NCCL_OK(ctx, ncclGroupStart());
          NCCL_OK(ctx, ncclSend(out.data(), n, ncclUint8, peer, ctx.comm, nullptr));
          NCCL_OK(ctx, ncclRecv(in.data(), n, ncclUint8, peer, ctx.comm, nullptr));
          ncclResult_t r = ncclGroupEnd();
          if (r != ncclSuccess) {
            sh->error_at = th::now_s();
            snprintf(sh->message, sizeof(sh->message), "%s", ncclGetLastError(ctx.comm));
            return;
          }
          RCHECK(ctx, in[it % n] == peer + 1 && in[n - 1 - it % n] == peer + 1,
                 "iteration %d: wrong bytes", it);
          sh->iterations[ctx.rank]++;
        }
        ctx.fail("the exchange never failed");
      },
      opt);
  ASSERT_EQ(res.ranks.size(), 2u) << res.describe();
  EXPECT_EQ(res.ranks[1].term_signal, SIGKILL) << res.describe();
  EXPECT_EQ(res.ranks[0].exit_code, 0) << res.describe();
  EXPECT_EQ(res.ranks[0].failures, 0) << res.describe();
  EXPECT_TRUE(th::contains(sh->message, "rank 1")) << sh->message;
  EXPECT_GT(sh->error_at, sh->killed_at) << sh->message;
  EXPECT_LT(sh->error_at - sh->killed_at, 5.0) << sh->message;
  EXPECT_TRUE(res.leaked_shm.empty()) << res.describe();
  th::shared_free(sh, sizeof(Shared));
}

}  // namespace
