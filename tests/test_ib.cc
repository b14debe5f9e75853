// The ib transport on real verbs devices: run inside the Soft-RoCE guest by the ctest test
// ib_guest (scripts/rxe-vm.sh, tests/ib_guest.sh), never on a machine without an RDMA device.
//
// Every test forces the path: NCCL_NET=IB makes a pair that cannot use ib an error instead of a
// fall back to tcp (ForcedIbWithoutDeviceIsAnError shows it), and TUTTI_SHM_DISABLE=1 keeps the
// ranks, all on the guest's one host, off shared memory; so a pass means the bytes went over ib.
// Ranks are processes (fork + ncclCommInitRank). Settings are read once per process and the
// parent never creates a communicator, so each test's environment reaches its children.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "harness.h"

namespace {

using th::Case;
using th::Coll;
using th::Mode;
using th::Op;
using th::RankCtx;

th::Options ib_options() {
  th::Options opt;
  opt.env = {{"NCCL_NET", "IB"}, {"TUTTI_SHM_DISABLE", "1"}, {"TUTTI_TIMEOUT", "60"}};
  opt.timeout_s = 600;  // Soft-RoCE under software emulation moves a few MB/s
  return opt;
}

// One representative datatype and op per collective (every element size among them).
struct Rep {
  Coll coll;
  ncclDataType_t type;
  Op op;
};
const Rep kReps[] = {
    {Coll::kAllReduce, ncclFloat32, Op::kSum},      {Coll::kBroadcast, ncclUint8, Op::kSum},
    {Coll::kReduce, ncclInt32, Op::kMax},           {Coll::kAllGather, ncclFloat16, Op::kSum},
    {Coll::kReduceScatter, ncclBfloat16, Op::kSum}, {Coll::kAlltoAll, ncclInt32, Op::kSum},
    {Coll::kGather, ncclFloat64, Op::kSum},         {Coll::kScatter, ncclInt8, Op::kSum},
    {Coll::kAllReduce, ncclInt64, Op::kProd},       {Coll::kAllReduce, ncclFloat64, Op::kAvg},
};

// Every collective, counts from 0 to several slots' worth (a slot is 256 KiB: 300001 fp32
// elements span five; odd counts leave partial slots), in place and not (an in-place all-to-all,
// which NCCL does not define, swaps its blocks through the FIFOs: FIFO_SWAP), roots moving.
void every_collective(int nranks) {
  th::run_ranks_ok(
      Mode::kProcs, nranks,
      [](RankCtx &ctx) {
        int seq = 0;
        for (const Rep &rep : kReps)
          for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1023}, size_t{300001}})
            for (int in_place = 0; in_place < 2; in_place++) {
              Case c;
              c.coll = rep.coll, c.type = rep.type, c.op = rep.op, c.count = count;
              c.in_place = in_place, c.root = seq % ctx.nranks, c.align = seq % 3;
              seq++;
              bool broken = false;
              th::run_case(ctx, c, &broken);
              if (broken) return;
            }
      },
      ib_options(), "every collective over ib");
}

TEST(IbCollectives, EveryCollectiveTwoRanks) {
  every_collective(2);
}
TEST(IbCollectives, EveryCollectiveThreeRanks) {
  every_collective(3);
}

// An in-place all-to-all whose blocks are larger than the FIFO (16 slots of 256 KiB), on 2 and 3
// ranks, exact: by default from a copy of the input, each block by rendezvous (from
// TUTTI_IB_RDV_MIN, 1 MiB: the NIC writes it into the peer's buffer); with no rendezvous its
// blocks swap through the FIFOs (FIFO_SWAP), each rank sending pieces until the FIFO is full and
// receiving the peer's into the places already sent.
TEST(IbCollectives, InPlaceAllToAllLargerThanTheFifo) {
  for (bool rdv : {true, false})
    for (int n : {2, 3}) {
      th::Options opt = ib_options();
      if (!rdv) opt.env.push_back({"TUTTI_IB_RDV_MIN", "0"});
      th::run_ranks_ok(
          Mode::kProcs, n,
          [](RankCtx &ctx) {
            const size_t count = (5u << 20) / 4 + 3;  // 5 MiB + 12 bytes of int32 a block
            const size_t total = count * (size_t)ctx.nranks;
            std::vector<int32_t> buf(total);
            for (int k = 0; k < 2; k++) {
              for (size_t i = 0; i < total; i++)
                buf[i] = static_cast<int32_t>(i * 3 + ctx.rank + k);
              NCCL_OK(ctx,
                      ncclAlltoAll(buf.data(), buf.data(), count, ncclInt32, ctx.comm, nullptr));
              for (int p = 0; p < ctx.nranks; p++)
                for (size_t i = 0; i < count; i++) {
                  size_t at = (size_t)p * count + i, from = (size_t)ctx.rank * count + i;
                  int32_t want = static_cast<int32_t>(from * 3 + p + k);
                  RCHECK(ctx, buf[at] == want, "call %d block %d element %zu: %d, expected %d", k,
                         p, i, buf[at], want);
                }
            }
          },
          opt, "in-place all-to-all over ib");
    }
}

// Send/recv in both directions at once, larger than the FIFO (16 slots of 256 KiB).
TEST(IbCollectives, SendRecvBothWaysLargerThanTheFifo) {
  th::run_ranks_ok(
      Mode::kProcs, 2,
      [](RankCtx &ctx) {
        const size_t count = (5u << 20) + 3;  // 20 MiB + 12 bytes of int32
        std::vector<int32_t> out(count), in(count, -1);
        for (size_t i = 0; i < count; i++) out[i] = static_cast<int32_t>(i * 3 + ctx.rank);
        int peer = 1 - ctx.rank;
        NCCL_OK(ctx, ncclGroupStart());
        NCCL_OK(ctx, ncclSend(out.data(), count, ncclInt32, peer, ctx.comm, nullptr));
        NCCL_OK(ctx, ncclRecv(in.data(), count, ncclInt32, peer, ctx.comm, nullptr));
        NCCL_OK(ctx, ncclGroupEnd());
        for (size_t i = 0; i < count; i++)
          RCHECK(ctx, in[i] == static_cast<int32_t>(i * 3 + peer), "element %zu: %d, expected %d",
                 i, in[i], static_cast<int32_t>(i * 3 + peer));
      },
      ib_options(), "send/recv over ib");
}

// ---------------------------------------------------------------- settings

std::string init_error(const std::vector<std::pair<std::string, std::string>> &env) {
  th::Options opt = ib_options();
  for (const auto &kv : env) opt.env.push_back(kv);
  opt.init = false;
  struct Shared {
    int code[2];
    char msg[2][512];
  };
  auto *sh = static_cast<Shared *>(th::shared_alloc(sizeof(Shared)));
  th::run_ranks(
      Mode::kProcs, 2,
      [&](RankCtx &ctx) {
        ncclComm_t comm = nullptr;
        ncclResult_t rc = ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank);
        sh->code[ctx.rank] = rc;
        snprintf(sh->msg[ctx.rank], sizeof sh->msg[0], "%s", ncclGetLastError(comm));
        if (rc == ncclSuccess) ncclCommDestroy(comm);
      },
      opt);
  std::string what = sh->code[0] == ncclSuccess ? "" : sh->msg[0];
  th::shared_free(sh, sizeof(Shared));
  return what;
}

TEST(IbSettings, ForcedIbWithoutDeviceIsAnError) {
  std::string e = init_error({{"TUTTI_IB_HCA", "^rxe"}});
  EXPECT_TRUE(th::contains(e, "NCCL_NET=IB")) << "init error: \"" << e << "\"";
  e = init_error({{"NCCL_IB_DISABLE", "1"}});
  EXPECT_TRUE(th::contains(e, "NCCL_NET=IB")) << "init error: \"" << e << "\"";
}

// Runs everywhere (ctest ib_no_device, on this machine without RDMA devices): with no device
// TUTTI_IB_HCA admits, NCCL_NET=IB fails init naming the setting, and without it the ranks fall
// back to tcp and run (shm off). libtutti does not link libibverbs (a machine without rdma-core
// runs it); it is loaded at run time.
TEST(IbNoDevice, ForcedIbFailsAndTcpRunsOtherwise) {
  const std::pair<std::string, std::string> none{"TUTTI_IB_HCA", "=no-such-device"};
  std::string e = init_error({none});
  EXPECT_TRUE(th::contains(e, "NCCL_NET=IB")) << "init error: \"" << e << "\"";
  th::Options opt;
  opt.env = {none, {"TUTTI_SHM_DISABLE", "1"}};
  th::run_ranks_ok(
      Mode::kProcs, 3,
      [](RankCtx &ctx) {
        std::vector<int32_t> v(70001, ctx.rank + 1);
        NCCL_OK(ctx,
                ncclAllReduce(v.data(), v.data(), v.size(), ncclInt32, ncclSum, ctx.comm, nullptr));
        RCHECK(ctx, v[70000] == 6, "all-reduce over tcp gave %d", v[70000]);
      },
      opt, "fall back to tcp");
}

TEST(IbSettings, HcaExactNameWithPortAndPrefixWork) {
  EXPECT_EQ(init_error({{"TUTTI_IB_HCA", "=rxe1:1"}}), "");
  EXPECT_EQ(init_error({{"NCCL_IB_HCA", "rxe"}}), "");
  std::string e = init_error({{"TUTTI_IB_HCA", "=rxe"}});  // exact: no device is called "rxe"
  EXPECT_TRUE(th::contains(e, "NCCL_NET=IB")) << "init error: \"" << e << "\"";
  e = init_error({{"TUTTI_IB_HCA", "rxe0:2"}});  // rxe has one port
  EXPECT_TRUE(th::contains(e, "NCCL_NET=IB")) << "init error: \"" << e << "\"";
}

// ---------------------------------------------------------------- resources

// This process's verbs objects of one kind, as the kernel lists them (rdma res show qp|cq|mr|pd).
int verbs_objects(const char *kind, pid_t of = getpid()) {
  char cmd[64], line[1024], pid[32];
  snprintf(cmd, sizeof cmd, "rdma res show %s 2>/dev/null", kind);
  snprintf(pid, sizeof pid, " pid %d ", static_cast<int>(of));
  FILE *f = popen(cmd, "r");
  if (!f) return -1;
  int n = 0;
  while (fgets(line, sizeof line, f)) n += strstr(line, pid) != nullptr;
  pclose(f);
  return n;
}

// QPs, CQs, MRs and PDs exist while a communicator lives and are all gone after
// ncclCommDestroy (and after ncclCommAbort), while the process still runs.
void nothing_leaks(bool abort) {
  th::Options opt = ib_options();
  opt.init = false;
  th::run_ranks_ok(
      Mode::kProcs, 3,
      [abort](RankCtx &ctx) {
        ncclComm_t comm = nullptr;
        NCCL_OK(ctx, ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
        ctx.comm = comm;
        std::vector<float> buf(100000, 1.0f);
        NCCL_OK(ctx, ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm,
                                   nullptr));
        RCHECK(ctx, buf[99999] == 3.0f, "all-reduce gave %g", buf[99999]);
        const char *kinds[] = {"qp", "cq", "mr", "pd"};
        // 2 peers x 2 directions x 2 QPs, one CQ and one MR per direction, the board's MR
        const int live_min[] = {8, 4, 5, 1};
        for (int k = 0; k < 4; k++)
          RCHECK(ctx, verbs_objects(kinds[k]) >= live_min[k], "only %d %s(s) while the comm lives",
                 verbs_objects(kinds[k]), kinds[k]);
        if (abort)
          NCCL_OK(ctx, ncclCommAbort(comm));
        else
          NCCL_OK(ctx, ncclCommDestroy(comm));
        ctx.comm = nullptr;
        for (int k = 0; k < 4; k++)
          RCHECK(ctx, verbs_objects(kinds[k]) == 0, "%d %s(s) left after the communicator ended",
                 verbs_objects(kinds[k]), kinds[k]);
      },
      opt, abort ? "verbs objects after abort" : "verbs objects after destroy");
}

TEST(IbResources, NothingLeftAfterDestroy) {
  nothing_leaks(false);
}
TEST(IbResources, NothingLeftAfterAbort) {
  nothing_leaks(true);
}

// ---------------------------------------------------------------- zero copy

// With TUTTI_IB_ZERO_COPY=1 (and large messages through the FIFO, TUTTI_IB_RDV_MIN=0) a send
// from an ncclMemAlloc buffer is written from it in place: its
// region is registered once (one more MR for the process while the communicator lives, the same
// one on the second send: cached) and the data arrive exact; a send from malloc'ed memory is
// staged (no MR for it); nothing is left after ncclCommDestroy.
TEST(IbZeroCopy, SendFromNcclMemAllocIsRegisteredOnceAndExact) {
  th::Options opt = ib_options();
  opt.env.push_back({"TUTTI_IB_ZERO_COPY", "1"});
  opt.env.push_back({"TUTTI_IB_RDV_MIN", "0"});  // the FIFO path, not the rendezvous
  opt.init = false;
  th::run_ranks_ok(
      Mode::kProcs, 2,
      [](RankCtx &ctx) {
        ncclComm_t comm = nullptr;
        NCCL_OK(ctx, ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
        ctx.comm = comm;
        const size_t count = (5u << 20) + 3;  // 20 MiB + 12 bytes of int32: beyond the FIFO
        int32_t *reg = nullptr;
        NCCL_OK(ctx, ncclMemAlloc(reinterpret_cast<void **>(&reg), count * sizeof(int32_t)));
        std::vector<int32_t> plain(count), in(count);
        const int peer = 1 - ctx.rank, base = verbs_objects("mr");
        for (int round = 0; round < 3; round++) {  // malloc'ed, then the region twice
          int32_t *src = round == 0 ? plain.data() : reg;
          for (size_t i = 0; i < count; i++)
            src[i] = static_cast<int32_t>(i * 5 + round + ctx.rank);
          std::fill(in.begin(), in.end(), -1);
          NCCL_OK(ctx, ncclGroupStart());
          NCCL_OK(ctx, ncclSend(src, count, ncclInt32, peer, comm, nullptr));
          NCCL_OK(ctx, ncclRecv(in.data(), count, ncclInt32, peer, comm, nullptr));
          NCCL_OK(ctx, ncclGroupEnd());
          for (size_t i = 0; i < count; i++)
            RCHECK(ctx, in[i] == static_cast<int32_t>(i * 5 + round + peer),
                   "round %d element %zu: %d", round, i, in[i]);
          const int want = base + (round == 0 ? 0 : 1);
          RCHECK(ctx, verbs_objects("mr") == want, "round %d: %d MRs, expected %d", round,
                 verbs_objects("mr"), want);
        }
        NCCL_OK(ctx, ncclCommDestroy(comm));
        ctx.comm = nullptr;
        RCHECK(ctx, verbs_objects("mr") == 0, "%d MR(s) left", verbs_objects("mr"));
        NCCL_OK(ctx, ncclMemFree(reg));
      },
      opt, "zero-copy send from ncclMemAlloc memory");
}

// ---------------------------------------------------------------- large messages whole

// Byte j of a message in round `round` from rank `rank`: every byte position, round and sender
// gives its own value mod 256, so a byte written to the wrong place or taken from the wrong
// message shows.
uint8_t large_byte(size_t j, int round, int rank) {
  return static_cast<uint8_t>(j * 7 + j / 251 + static_cast<size_t>(round) * 13 + rank * 101);
}

// Both ranks send and receive at once, in one group per round: a large message (from the
// threshold, 1 MiB, up to 20 MiB + 12 bytes: not multiples of the 256 KiB piece), then a small
// one (1 MiB - 1: below TUTTI_IB_RDV_MIN, through the FIFO) behind it on the same connection.
// Buffers start 1-3 bytes past their allocation. Rounds: heap to heap, an ncclMemAlloc region
// to heap, heap to a region, region to region. The regions are registered on their first
// large message and cached, so each rank has exactly one more MR after round 1 (its send
// region, registered when the step started) and two after round 2 (its receive region, offered);
// heap memory is registered for the call only (no MR left after it); none after ncclCommDestroy.
// Every byte is exact.
TEST(IbLarge, SendRecvWholeBothWaysAnyBufferExact) {
  th::Options opt = ib_options();
  opt.init = false;
  th::run_ranks_ok(
      Mode::kProcs, 2,
      [](RankCtx &ctx) {
        ncclComm_t comm = nullptr;
        NCCL_OK(ctx, ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
        ctx.comm = comm;
        const size_t sizes[] = {size_t{1} << 20, (size_t{3} << 20) + 5, (size_t{20} << 20) + 12};
        const size_t small = (size_t{1} << 20) - 1, cap = (size_t{20} << 20) + 16 + small;
        uint8_t *region[2] = {nullptr, nullptr};  // send, receive
        for (uint8_t *&r : region) NCCL_OK(ctx, ncclMemAlloc(reinterpret_cast<void **>(&r), cap));
        std::vector<uint8_t> heap_out(cap), heap_in(cap);
        const int peer = 1 - ctx.rank, base = verbs_objects("mr");
        for (int round = 0; round < 4; round++) {
          uint8_t *out = (round & 1) ? region[0] : heap_out.data();
          uint8_t *in = (round & 2) ? region[1] : heap_in.data();
          for (int k = 0; k < 3; k++) {
            const size_t n = sizes[k], off_out = 1 + k, off_in = 3 - k;
            for (size_t j = 0; j < n + small; j++)
              out[off_out + j] = large_byte(j, round, ctx.rank);
            memset(in, 0, cap);
            NCCL_OK(ctx, ncclGroupStart());
            NCCL_OK(ctx, ncclSend(out + off_out, n, ncclUint8, peer, comm, nullptr));
            NCCL_OK(ctx, ncclSend(out + off_out + n, small, ncclUint8, peer, comm, nullptr));
            NCCL_OK(ctx, ncclRecv(in + off_in, n, ncclUint8, peer, comm, nullptr));
            NCCL_OK(ctx, ncclRecv(in + off_in + n, small, ncclUint8, peer, comm, nullptr));
            NCCL_OK(ctx, ncclGroupEnd());
            for (size_t j = 0; j < off_in; j++)
              RCHECK(ctx, in[j] == 0, "round %d size %zu: byte %zu before the buffer written",
                     round, n, j);
            for (size_t j = 0; j < n + small; j++)
              RCHECK(ctx, in[off_in + j] == large_byte(j, round, peer),
                     "round %d size %zu: byte %zu is %u, expected %u", round, n, j, in[off_in + j],
                     large_byte(j, round, peer));
            RCHECK(ctx, in[off_in + n + small] == 0,
                   "round %d size %zu: byte after the end written", round, n);
          }
          const int want = base + (round == 0 ? 0 : round == 1 ? 1 : 2);
          RCHECK(ctx, verbs_objects("mr") == want, "round %d: %d MRs, expected %d", round,
                 verbs_objects("mr"), want);
        }
        NCCL_OK(ctx, ncclCommDestroy(comm));
        ctx.comm = nullptr;
        RCHECK(ctx, verbs_objects("mr") == 0, "%d MR(s) left", verbs_objects("mr"));
        for (uint8_t *r : region) NCCL_OK(ctx, ncclMemFree(r));
      },
      opt, "large send/recv over ib");
}

// The fallbacks: a receiver that does not offer its buffer (TUTTI_TEST_IB_RDV_DECLINE=1, what it
// does when its registration fails) or a sender that does not take the offer (=2, the same on
// its side) sends the large message through the FIFO, behind the step's header, exact; so does
// a receiver that offered two segments and cannot register the third (=3), or a sender that
// wrote two and cannot register its third (=4): the message then comes whole through the FIFO
// after the writes already posted landed. Which end registered what shows in the MRs after
// ncclMemAlloc rounds (regions are registered whole, the hooks 3 and 4 do not apply to them):
// with 1 only the send region (a sender registers its source at the step's start, before the
// answer comes), with 2 only the receive region (offered, then not written), with 3 and 4 both.
void large_declined(int mode, int regions) {
  th::Options opt = ib_options();
  opt.init = false;
  opt.env.push_back({"TUTTI_TEST_IB_RDV_DECLINE", std::to_string(mode)});
  th::run_ranks_ok(
      Mode::kProcs, 2,
      [regions](RankCtx &ctx) {
        ncclComm_t comm = nullptr;
        NCCL_OK(ctx, ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
        ctx.comm = comm;
        const size_t n = (size_t{3} << 20) + 5;
        uint8_t *region[2] = {nullptr, nullptr};  // send, receive
        for (uint8_t *&r : region) NCCL_OK(ctx, ncclMemAlloc(reinterpret_cast<void **>(&r), n + 1));
        std::vector<uint8_t> heap_out(n + 1), heap_in(n + 1);
        const int peer = 1 - ctx.rank, base = verbs_objects("mr");
        for (int round = 0; round < 2; round++) {
          uint8_t *out = (round ? region[0] : heap_out.data()) + 1;
          uint8_t *in = round ? region[1] : heap_in.data();
          for (size_t j = 0; j < n; j++) out[j] = large_byte(j, round, ctx.rank);
          memset(in, 0, n);
          NCCL_OK(ctx, ncclGroupStart());
          NCCL_OK(ctx, ncclSend(out, n, ncclUint8, peer, comm, nullptr));
          NCCL_OK(ctx, ncclRecv(in, n, ncclUint8, peer, comm, nullptr));
          NCCL_OK(ctx, ncclGroupEnd());
          for (size_t j = 0; j < n; j++)
            RCHECK(ctx, in[j] == large_byte(j, round, peer), "round %d byte %zu is %u", round, j,
                   in[j]);
        }
        const int want = base + regions;
        RCHECK(ctx, verbs_objects("mr") == want, "%d MRs, expected %d", verbs_objects("mr"), want);
        NCCL_OK(ctx, ncclCommDestroy(comm));
        ctx.comm = nullptr;
        for (uint8_t *r : region) NCCL_OK(ctx, ncclMemFree(r));
      },
      opt, "large send/recv declined");
}

TEST(IbLarge, ReceiverThatDoesNotOfferGetsPiecesExact) {
  large_declined(1, 1);
}
TEST(IbLarge, SenderThatDoesNotTakeTheOfferSendsPiecesExact) {
  large_declined(2, 1);
}
TEST(IbLarge, ReceiverThatStopsOfferingMidMessageGetsPiecesExact) {
  large_declined(3, 2);
}
TEST(IbLarge, SenderThatCannotRegisterMidMessageSendsPiecesExact) {
  large_declined(4, 2);
}

struct OfferReport {
  std::atomic<int> base_mrs, receiving, seen_mrs, go;
};

// A receiver of a large message into malloc'ed memory offers that memory for the call, in
// segments (ib_rdv.c: 1 MiB, then each twice the one before): while rank 1 waits in ncclRecv
// (rank 0 holds its send back), the kernel lists four more MRs of rank 1's than before the call
// (8 MiB as 1 + 2 + 4 + 1 MiB); after the call, none more. The 8 MiB arrive exact.
TEST(IbLarge, ReceiverRegistersHeapBufferForTheCallOnly) {
  auto *rep = new (th::shared_alloc(sizeof(OfferReport))) OfferReport();
  th::Options opt = ib_options();
  opt.while_running = [&](const std::vector<pid_t> &pids) {
    double until = th::now_s() + 120;
    while (!rep->receiving && th::now_s() < until) usleep(1000);
    while (th::now_s() < until && rep->seen_mrs < rep->base_mrs + 4) {
      rep->seen_mrs = verbs_objects("mr", pids[1]);
      usleep(20000);
    }
    rep->go = 1;
  };
  th::run_ranks_ok(
      Mode::kProcs, 2,
      [&](RankCtx &ctx) {
        const size_t n = size_t{8} << 20;
        std::vector<uint8_t> buf(n + 1);
        if (ctx.rank == 0) {
          for (size_t j = 0; j < n; j++) buf[j + 1] = large_byte(j, 0, 0);
          for (double until = th::now_s() + 150; !rep->go && th::now_s() < until;) usleep(1000);
          NCCL_OK(ctx, ncclSend(buf.data() + 1, n, ncclUint8, 1, ctx.comm, nullptr));
          return;
        }
        rep->base_mrs = verbs_objects("mr");
        rep->receiving = 1;
        NCCL_OK(ctx, ncclRecv(buf.data() + 1, n, ncclUint8, 0, ctx.comm, nullptr));
        for (size_t j = 0; j < n; j++)
          RCHECK(ctx, buf[j + 1] == large_byte(j, 0, 0), "byte %zu is %u", j, buf[j + 1]);
        RCHECK(ctx, rep->seen_mrs == rep->base_mrs + 4,
               "%d MRs while receiving, %d before: the buffer was not offered in 4 segments",
               rep->seen_mrs.load(), rep->base_mrs.load());
        RCHECK(ctx, verbs_objects("mr") == rep->base_mrs, "%d MRs after the call, %d before",
               verbs_objects("mr"), rep->base_mrs.load());
      },
      opt, "heap receive buffer offered");
  th::shared_free(rep, sizeof(OfferReport));
}

struct LargeKillReport {
  std::atomic<int> started[2];
  int code[2];
  char message[2][512];
  int left[2];  // verbs objects (qp + cq + mr + pd) after ncclCommAbort
};

// Rank 0 sends 64 MiB (heap) to rank 1, which receives them into heap memory, in a loop; the
// victim (receiver or sender) is SIGKILLed while a message is under way. The other returns a
// peer error naming the victim, and after ncclCommAbort no verbs object of its own is left
// (its offered buffer or its source's registration released too).
void large_peer_killed(int victim) {
  auto *rep = new (th::shared_alloc(sizeof(LargeKillReport))) LargeKillReport();
  th::Options opt = ib_options();
  opt.init = false;
  opt.env.push_back({"TUTTI_TIMEOUT", "30"});
  opt.while_running = [&](const std::vector<pid_t> &pids) {
    double until = th::now_s() + 120;
    while ((!rep->started[0] || !rep->started[1]) && th::now_s() < until) usleep(1000);
    usleep(300000);  // 64 MiB take seconds on Soft-RoCE in the guest: mid-message
    kill(pids[victim], SIGKILL);
  };
  th::RunResult res = th::run_ranks(
      Mode::kProcs, 2,
      [&](RankCtx &ctx) {
        ncclComm_t comm = nullptr;
        NCCL_OK(ctx, ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
        const size_t n = size_t{64} << 20;
        std::vector<uint8_t> buf(n, static_cast<uint8_t>(ctx.rank));
        ncclResult_t rc = ncclSuccess;
        for (int it = 0; it < 100 && rc == ncclSuccess; it++) {
          rep->started[ctx.rank] = 1;
          rc = ctx.rank == 0 ? ncclSend(buf.data(), n, ncclUint8, 1, comm, nullptr)
                             : ncclRecv(buf.data(), n, ncclUint8, 0, comm, nullptr);
        }
        rep->code[ctx.rank] = rc;
        snprintf(rep->message[ctx.rank], sizeof rep->message[0], "%s", ncclGetLastError(comm));
        ncclCommAbort(comm);
        rep->left[ctx.rank] =
            verbs_objects("qp") + verbs_objects("cq") + verbs_objects("mr") + verbs_objects("pd");
      },
      opt);
  ASSERT_TRUE(res.setup_error.empty()) << res.setup_error;
  const int other = 1 - victim;
  EXPECT_EQ(res.ranks[victim].term_signal, SIGKILL) << res.describe();
  EXPECT_EQ(res.ranks[other].exit_code, 0) << res.describe();
  EXPECT_TRUE(rep->code[other] == ncclRemoteError || rep->code[other] == ncclSystemError)
      << "rank " << other << ": " << rep->code[other] << " " << rep->message[other];
  EXPECT_TRUE(th::contains(rep->message[other], "rank " + std::to_string(victim)))
      << rep->message[other];
  EXPECT_EQ(rep->left[other], 0) << "verbs objects left on rank " << other;
  th::shared_free(rep, sizeof(LargeKillReport));
}

TEST(IbLarge, ReceiverKilledMidLargeSendIsNamed) {
  large_peer_killed(1);
}
TEST(IbLarge, SenderKilledMidLargeSendIsNamed) {
  large_peer_killed(0);
}

// ---------------------------------------------------------------- all-reduces until one fails

// How a rank's loop of all-reduces ended: the first error (code and ncclGetLastError) and when
// it came; code ncclSuccess when the loop ended otherwise (a wrong value or no error in 100000
// calls: ctx.fail said which).
struct LoopOutcome {
  ncclResult_t code = ncclSuccess;
  std::string message;
  double failed_at = 0;  // th::now_s()
};

// Every rank contributes 1 + rank to 1 MiB of fp32 all-reduces until one call fails, counting
// the calls that succeeded (the test's driver waits on the counts before it breaks something).
// Every result is the exact sum (small integers in fp32).
LoopOutcome all_reduce_until_error(RankCtx &ctx, std::atomic<int> *iterations) {
  LoopOutcome out;
  std::vector<float> in(1 << 18, 1.0f + ctx.rank), result(1 << 18);
  const float want = ctx.nranks * (ctx.nranks + 1) / 2.0f;
  for (int it = 0; it < 100000; it++) {
    ncclResult_t rc =
        ncclAllReduce(in.data(), result.data(), in.size(), ncclFloat32, ncclSum, ctx.comm, nullptr);
    if (rc != ncclSuccess) {
      out.failed_at = th::now_s();
      out.code = rc;
      out.message = ncclGetLastError(ctx.comm);
      return out;
    }
    const float got = result[it % result.size()];
    RCHECK_RET(ctx, got == want, out, "iteration %d: %g, expected %g", it, got, want);
    (*iterations)++;
  }
  ctx.fail("the all-reduces never failed");
  return out;
}

// ---------------------------------------------------------------- a rank is killed

struct KillReport {
  std::atomic<int> iterations[3];
  int code[3];
  char message[3][512];
};

// Rank 1 is SIGKILLed while three ranks loop over 1 MiB all-reduces: ranks 0 and 2 return a
// peer error naming rank 1 within the communicator timeout.
TEST(IbFailure, KilledRankIsNamedByTheOthers) {
  auto *rep = new (th::shared_alloc(sizeof(KillReport))) KillReport();
  th::Options opt = ib_options();
  opt.env.push_back({"TUTTI_TIMEOUT", "30"});
  opt.while_running = [&](const std::vector<pid_t> &pids) {
    double until = th::now_s() + 120;
    while ((rep->iterations[0] < 2 || rep->iterations[1] < 2 || rep->iterations[2] < 2) &&
           th::now_s() < until)
      usleep(1000);
    kill(pids[1], SIGKILL);
  };
  th::RunResult res = th::run_ranks(
      Mode::kProcs, 3,
      [&](RankCtx &ctx) {
        const LoopOutcome out = all_reduce_until_error(ctx, &rep->iterations[ctx.rank]);
        rep->code[ctx.rank] = out.code;
        snprintf(rep->message[ctx.rank], sizeof rep->message[0], "%s", out.message.c_str());
      },
      opt);
  ASSERT_TRUE(res.setup_error.empty()) << res.setup_error;
  EXPECT_EQ(res.ranks[1].term_signal, SIGKILL) << res.describe();
  for (int r : {0, 2}) {
    EXPECT_EQ(res.ranks[r].exit_code, 0) << res.describe();
    EXPECT_TRUE(rep->code[r] == ncclRemoteError || rep->code[r] == ncclSystemError)
        << "rank " << r << ": " << rep->code[r];
    EXPECT_TRUE(th::contains(rep->message[r], "rank 1")) << "rank " << r << ": " << rep->message[r];
  }
  th::shared_free(rep, sizeof(KillReport));
}

// ---------------------------------------------------------------- a link falls silent

// The guest's second "NIC": rxe1 on veth1 (scripts/rxe-vm.sh). Down: nothing passes between
// rxe0 and rxe1 while both processes live. Up again with the policy route the kernel dropped
// when the device went down, and wait until rxe1's port is active.
bool set_veth1(bool up) {
  if (!up) return system("ip link set veth1 down") == 0;
  if (system("ip link set veth1 up && ip route replace 10.200.0.1 dev veth1 src 10.200.0.2 "
             "table 101") != 0)
    return false;
  for (int i = 0; i < 100; i++, usleep(100000))
    if (system("rdma link show rxe1/1 | grep -q 'state ACTIVE'") == 0) return true;
  return false;
}

struct SilentReport {
  std::atomic<int> iterations[2];
  std::atomic<int> failed[2];
  double down_at;  // when the link went down (now_s)
  double failed_at[2];
  int code[2];
  char message[2][600];
};

// Two ranks on two devices loop over 1 MiB all-reduces; the link between the devices goes down
// while both processes live. Every rank returns an error within the communicator timeout that
// names both ranks, the host, both devices and the verbs status: the retry counter runs out
// on a write in flight, or on the probe a waiting end sends after TUTTI_IB_PROBE_MS of quiet
// (or, on the rank whose own device lost its link, rxe fails the send locally).
// rxe takes retry count 7 to mean forever, so the test sets 2: with TUTTI_IB_TIMEOUT's default
// (1.07 s per try) a silent link ends in about 3 s. A shorter ack timeout fails the loop before
// the link goes down on a loaded host: the emulated guest then acks late, rxe retransmits in
// the middle of a write, and rank 1 once got "remote invalid request" on its first all-reduce.
TEST(IbFailure, SilentLinkIsRetryExceededOnEveryRank) {
  ASSERT_EQ(system("ip link show veth1 >/dev/null 2>&1"), 0)
      << "needs the rxe-vm guest's veth pair (scripts/rxe-vm.sh --devices 2)";
  auto *rep = new (th::shared_alloc(sizeof(SilentReport))) SilentReport();
  th::Options opt = ib_options();
  const int timeout_s = 30;
  opt.env.push_back({"TUTTI_TIMEOUT", std::to_string(timeout_s)});
  opt.env.push_back({"TUTTI_IB_RETRY_CNT", "2"});
  opt.env.push_back({"TUTTI_IB_HCA", "rxe"});
  opt.while_running = [&](const std::vector<pid_t> &) {
    double until = th::now_s() + 120;
    while ((rep->iterations[0] < 2 || rep->iterations[1] < 2) && th::now_s() < until) usleep(1000);
    rep->down_at = th::now_s();
    EXPECT_TRUE(set_veth1(false));
  };
  th::RunResult res = th::run_ranks(
      Mode::kProcs, 2,
      [&](RankCtx &ctx) {
        const LoopOutcome out = all_reduce_until_error(ctx, &rep->iterations[ctx.rank]);
        if (out.code == ncclSuccess) return;
        rep->failed_at[ctx.rank] = out.failed_at;
        rep->code[ctx.rank] = out.code;
        snprintf(rep->message[ctx.rank], sizeof rep->message[0], "%s", out.message.c_str());
        // stay alive until the other rank failed too: a process that exits is another fault
        // (on one host the engine names it as dead before any verbs error)
        rep->failed[ctx.rank] = 1;
        for (double until = th::now_s() + 60; !rep->failed[1 - ctx.rank] && th::now_s() < until;)
          usleep(1000);
      },
      opt);
  EXPECT_TRUE(set_veth1(true)) << "veth1 / rxe1 did not come back";
  ASSERT_TRUE(res.setup_error.empty()) << res.setup_error;
  char host[256] = "";
  gethostname(host, sizeof host);
  for (int r : {0, 1}) {
    const std::string m = rep->message[r];
    EXPECT_EQ(res.ranks[r].exit_code, 0) << res.describe();
    EXPECT_EQ(rep->code[r], ncclRemoteError) << "rank " << r << ": " << m;
    EXPECT_LT(rep->failed_at[r] - rep->down_at, timeout_s) << "rank " << r << ": " << m;
    for (const char *what :
         {"rank 0", "rank 1", "rxe0", "rxe1", "verbs status", static_cast<const char *>(host)})
      EXPECT_TRUE(th::contains(m, what)) << "rank " << r << " lacks \"" << what << "\": " << m;
  }
  // Rank 0's own link (veth0) stays up: its writes go out and are never acknowledged, so its
  // retry counter runs out. Rank 1's device sits on the link that went down, where rxe may also
  // fail a send at once ("local QP operation error", verbs status 2).
  EXPECT_TRUE(th::contains(rep->message[0], "retry counter exceeded (verbs status 12"))
      << rep->message[0];
  th::shared_free(rep, sizeof(SilentReport));
}

}  // namespace
