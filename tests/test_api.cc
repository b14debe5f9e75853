// The public API's contract around the collectives: versions, error strings, communicator
// queries, init arguments, launcher environment, version mismatch at bootstrap, and misuse of
// every call (NCCL's ncclInvalidArgument / ncclInvalidUsage, a message from ncclGetLastError
// naming the argument, and nothing written to the caller's buffers).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "harness.h"

namespace {

using th::Coll;
using th::Mode;
using th::RankCtx;

const Mode kModes[] = {Mode::kProcs, Mode::kThreads};
std::string mode_param_name(const ::testing::TestParamInfo<Mode> &i) {
  return i.param == Mode::kProcs ? "Procs" : "Threads";
}

// ---------------------------------------------------------------- versions and strings

TEST(Api, GetVersion) {
  int v = -1;
  ASSERT_EQ(ncclGetVersion(&v), ncclSuccess);
  EXPECT_EQ(v, NCCL_VERSION_CODE);
  EXPECT_EQ(v, 22800);  // the NCCL 2.28 API (include/tutti.h)
  EXPECT_EQ(ncclGetVersion(nullptr), ncclInvalidArgument);
  EXPECT_TRUE(th::contains(tuttiVersionString(), TUTTI_VERSION_STRING)) << tuttiVersionString();
}

TEST(Api, ErrorStringForEveryCode) {
  std::vector<std::string> seen;
  for (int r = ncclSuccess; r < ncclNumResults; r++) {
    const char *s = ncclGetErrorString(static_cast<ncclResult_t>(r));
    ASSERT_NE(s, nullptr) << r;
    EXPECT_GT(strlen(s), 3u) << r;
    for (const std::string &o : seen) EXPECT_NE(o, s) << "code " << r << " shares its string";
    seen.push_back(s);
  }
  EXPECT_TRUE(th::contains(ncclGetErrorString(ncclSuccess), "no error"));
  EXPECT_TRUE(th::contains(ncclGetErrorString(ncclInvalidArgument), "invalid argument"));
  EXPECT_TRUE(th::contains(ncclGetErrorString(ncclInvalidUsage), "invalid usage"));
  EXPECT_TRUE(th::contains(ncclGetErrorString(ncclRemoteError), "remote"));
  EXPECT_TRUE(th::contains(ncclGetErrorString(ncclSystemError), "system error"));
  for (int bad : {static_cast<int>(ncclNumResults), 99, -1}) {
    const char *s = ncclGetErrorString(static_cast<ncclResult_t>(bad));
    ASSERT_NE(s, nullptr);
    EXPECT_TRUE(th::contains(s, "unknown")) << s;
  }
}

TEST(Api, TypeSize) {
  const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  for (int t = 0; t < ncclNumTypes; t++)
    EXPECT_EQ(tuttiTypeSize(static_cast<ncclDataType_t>(t)), sizes[t]) << t;
  EXPECT_EQ(tuttiTypeSize(static_cast<ncclDataType_t>(42)), 0u);
}

// ---------------------------------------------------------------- communicators

TEST(Api, CommQueriesAfterInitAll) {
  ncclComm_t comms[3];
  ASSERT_EQ(ncclCommInitAll(comms, 3, nullptr), ncclSuccess) << ncclGetLastError(nullptr);
  for (int i = 0; i < 3; i++) {
    int count = -1, rank = -1, dev = -2;
    EXPECT_EQ(ncclCommCount(comms[i], &count), ncclSuccess);
    EXPECT_EQ(ncclCommUserRank(comms[i], &rank), ncclSuccess);
    EXPECT_EQ(ncclCommCuDevice(comms[i], &dev), ncclSuccess);
    EXPECT_EQ(count, 3);
    EXPECT_EQ(rank, i);
    EXPECT_EQ(dev, i);  // devlist NULL: devices 0..n-1, as NCCL
    ncclResult_t async = ncclInternalError;
    EXPECT_EQ(ncclCommGetAsyncError(comms[i], &async), ncclSuccess);
    EXPECT_EQ(async, ncclSuccess);
    EXPECT_EQ(ncclCommCount(comms[i], nullptr), ncclInvalidArgument);
    EXPECT_EQ(ncclCommUserRank(comms[i], nullptr), ncclInvalidArgument);
    EXPECT_EQ(ncclCommCuDevice(comms[i], nullptr), ncclInvalidArgument);
    EXPECT_EQ(ncclCommGetAsyncError(comms[i], nullptr), ncclInvalidArgument);
  }
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);

  const int devlist[2] = {5, 7};
  ncclComm_t two[2];
  ASSERT_EQ(ncclCommInitAll(two, 2, devlist), ncclSuccess);
  for (int i = 0; i < 2; i++) {
    int dev = -1;
    EXPECT_EQ(ncclCommCuDevice(two[i], &dev), ncclSuccess);
    EXPECT_EQ(dev, devlist[i]);
    EXPECT_EQ(ncclCommDestroy(two[i]), ncclSuccess);
  }
}

TEST(Api, QueriesAndDestroyRejectNullAndDeadHandles) {
  int count = 0;
  EXPECT_EQ(ncclCommCount(nullptr, &count), ncclInvalidArgument);
  EXPECT_TRUE(th::contains(ncclGetLastError(nullptr), "comm")) << ncclGetLastError(nullptr);
  EXPECT_EQ(ncclCommDestroy(nullptr), ncclSuccess);  // as NCCL: a no-op
  ncclComm_t c;
  ASSERT_EQ(ncclCommInitAll(&c, 1, nullptr), ncclSuccess);
  ASSERT_EQ(ncclCommDestroy(c), ncclSuccess);
  EXPECT_EQ(ncclCommCount(c, &count), ncclInvalidArgument);
  EXPECT_TRUE(th::contains(ncclGetLastError(nullptr), "comm")) << ncclGetLastError(nullptr);
  EXPECT_EQ(ncclCommDestroy(c), ncclInvalidArgument);
  EXPECT_EQ(ncclCommAbort(c), ncclInvalidArgument);
  float x = 1, y = 0;
  EXPECT_EQ(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, c, nullptr), ncclInvalidArgument);
  EXPECT_TRUE(th::contains(ncclGetLastError(nullptr), "comm")) << ncclGetLastError(nullptr);
  EXPECT_EQ(y, 0.0f);
}

TEST(Api, InitAllRejectsBadArguments) {
  ncclComm_t c[2];
  EXPECT_EQ(ncclCommInitAll(nullptr, 2, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitAll(c, 0, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitAll(c, -3, nullptr), ncclInvalidArgument);
}

TEST(Api, InitRankRejectsBadNranksAndRank) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  EXPECT_EQ(ncclGetUniqueId(nullptr), ncclInvalidArgument);
  struct Bad {
    int nranks, rank;
    const char *needle;
  } bad[] = {{0, 0, "nranks"}, {-1, 0, "nranks"}, {2, -1, "rank"}, {2, 2, "rank"}, {3, 7, "rank"}};
  for (const Bad &b : bad) {
    ncclComm_t c = reinterpret_cast<ncclComm_t>(0x1);
    EXPECT_EQ(ncclCommInitRank(&c, b.nranks, id, b.rank), ncclInvalidArgument)
        << b.nranks << " " << b.rank;
    EXPECT_TRUE(th::contains(ncclGetLastError(nullptr), b.needle)) << ncclGetLastError(nullptr);
    EXPECT_EQ(c, nullptr);
  }
  EXPECT_EQ(ncclCommInitRank(nullptr, 2, id, 0), ncclInvalidArgument);
  EXPECT_TRUE(th::contains(ncclGetLastError(nullptr), "comm")) << ncclGetLastError(nullptr);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.magic = 0;
  ncclComm_t c;
  EXPECT_EQ(ncclCommInitRankConfig(&c, 1, id, 0, &config), ncclInvalidArgument);
  EXPECT_TRUE(th::contains(ncclGetLastError(nullptr), "config")) << ncclGetLastError(nullptr);
}

TEST(Api, GarbageCommIdIsInvalidArgument) {
  ncclUniqueId id;
  for (int fill : {0x00, 0x5a}) {
    memset(&id, fill, sizeof id);
    ncclComm_t c = reinterpret_cast<ncclComm_t>(0x1);
    double t0 = th::now_s();
    EXPECT_EQ(ncclCommInitRank(&c, 2, id, 0), ncclInvalidArgument);
    EXPECT_LT(th::now_s() - t0, 5.0) << "a garbage id must be rejected, not waited on";
    EXPECT_TRUE(th::contains(ncclGetLastError(nullptr), "commId")) << ncclGetLastError(nullptr);
    EXPECT_EQ(c, nullptr);
  }
}

TEST(Api, InitFromEnvWithoutLauncherEnvironment) {
  th::Options opt;
  opt.init = false;
  opt.before_init = [](int) {
    for (const char *v : {"TUTTI_RANK", "TUTTI_NRANKS", "TUTTI_ROOT_ADDR", "RANK", "WORLD_SIZE",
                          "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_RANK",
                          "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "PMIX_RANK"})
      unsetenv(v);
  };
  th::run_ranks_ok(
      Mode::kProcs, 1,
      [](RankCtx &ctx) {
        ncclComm_t c = reinterpret_cast<ncclComm_t>(0x1);
        ncclResult_t rc = tuttiCommInitFromEnv(&c);
        std::string msg = ncclGetLastError(nullptr);
        RCHECK(ctx, rc == ncclInvalidUsage, "returned %d: %s", (int)rc, msg.c_str());
        RCHECK(ctx, th::contains(msg, "RANK") && th::contains(msg, "MASTER_ADDR"), "message: %s",
               msg.c_str());
        RCHECK(ctx, c == nullptr, "comm not set to NULL");
        RCHECK(ctx, tuttiCommInitFromEnv(nullptr) == ncclInvalidArgument, "NULL comm accepted");
      },
      opt);
}

// One rank claims another version: every rank's init fails with ncclInvalidUsage and a message
// naming both versions.
void expect_version_mismatch(RankCtx &ctx) {
  ncclComm_t c = nullptr;
  double t0 = th::now_s();
  ncclResult_t rc = ncclCommInitRank(&c, ctx.nranks, ctx.id, ctx.rank);
  std::string msg = ncclGetLastError(nullptr);
  if (rc == ncclSuccess) ncclCommDestroy(c);
  RCHECK(ctx, rc == ncclInvalidUsage, "init returned %d (%s) after %.1f s: %s", (int)rc,
         ncclGetErrorString(rc), th::now_s() - t0, msg.c_str());
  RCHECK(ctx, th::contains(msg, "version mismatch"), "message: %s", msg.c_str());
  RCHECK(ctx, th::contains(msg, "9.9.9") && th::contains(msg, TUTTI_VERSION_STRING), "message: %s",
         msg.c_str());
}

TEST(Api, VersionMismatchFailsEveryRank) {
  th::Options opt;
  opt.init = false;
  opt.timeout_s = 60;
  opt.before_init = [](int rank) {
    if (rank == 1) setenv("TUTTI_TEST_FAKE_VERSION", "9.9.9", 1);
  };
  th::run_ranks_ok(Mode::kProcs, 2, expect_version_mismatch, opt);
}

// The same with a third rank that joins after the root has seen the mismatch: it must get the
// same answer, not wait out TUTTI_INIT_TIMEOUT for a root that went away. (The 5 s limit is set
// in this process: its root reads it when the id is drawn, and the children inherit it.)
TEST(Api, VersionMismatchReachesRanksThatJoinLate) {
  setenv("TUTTI_INIT_TIMEOUT", "5", 1);
  th::Options opt;
  opt.init = false;
  opt.timeout_s = 40;
  opt.before_init = [](int rank) {
    if (rank == 1) setenv("TUTTI_TEST_FAKE_VERSION", "9.9.9", 1);
    if (rank == 2) usleep(1000 * 1000);  // ranks 0 and 1 meet the root first
  };
  th::run_ranks_ok(Mode::kProcs, 3, expect_version_mismatch, opt);
  unsetenv("TUTTI_INIT_TIMEOUT");
}

// ncclCommSplit's new bootstrap root is a thread of the new rank 0's process. That process may
// finish (here: destroy both communicators and exit) as soon as its own split returns; the
// other ranks' splits must still succeed. Ten jobs, to catch a race.
TEST(Api, SplitSucceedsWhenTheRootRankExitsRightAfter) {
  for (int job = 0; job < 10; job++) {
    bool ok = th::run_ranks_ok(
        Mode::kProcs, 3,
        [](RankCtx &ctx) {
          ncclComm_t sub = nullptr;
          NCCL_OK(ctx, ncclCommSplit(ctx.comm, 0, ctx.rank, &sub, nullptr));
          NCCL_OK(ctx, ncclCommDestroy(sub));
        },
        th::Options(), "job " + std::to_string(job));
    if (!ok) break;
  }
}

// ---------------------------------------------------------------- misuse of the collectives

enum Call {
  kAllReduce,
  kBroadcast,
  kBcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAlltoAll,
  kGather,
  kScatter,
  kSend,
  kRecv
};
const char *const kCallNames[] = {"AllReduce", "Broadcast",     "Bcast",    "Reduce",
                                  "AllGather", "ReduceScatter", "AlltoAll", "Gather",
                                  "Scatter",   "Send",          "Recv"};

struct Args {
  const void *send;
  void *recv;
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;
  ncclComm_t comm;
  cudaStream_t stream;
};

ncclResult_t invoke(Call c, const Args &a) {
  switch (c) {
    case kAllReduce:
      return ncclAllReduce(a.send, a.recv, a.count, a.type, a.op, a.comm, a.stream);
    case kBroadcast:
      return ncclBroadcast(a.send, a.recv, a.count, a.type, a.root, a.comm, a.stream);
    case kBcast:
      return ncclBcast(a.recv, a.count, a.type, a.root, a.comm, a.stream);
    case kReduce:
      return ncclReduce(a.send, a.recv, a.count, a.type, a.op, a.root, a.comm, a.stream);
    case kAllGather:
      return ncclAllGather(a.send, a.recv, a.count, a.type, a.comm, a.stream);
    case kReduceScatter:
      return ncclReduceScatter(a.send, a.recv, a.count, a.type, a.op, a.comm, a.stream);
    case kAlltoAll:
      return ncclAlltoAll(a.send, a.recv, a.count, a.type, a.comm, a.stream);
    case kGather:
      return ncclGather(a.send, a.recv, a.count, a.type, a.root, a.comm, a.stream);
    case kScatter:
      return ncclScatter(a.send, a.recv, a.count, a.type, a.root, a.comm, a.stream);
    case kSend:
      return ncclSend(a.send, a.count, a.type, a.root, a.comm, a.stream);
    case kRecv:
      return ncclRecv(a.recv, a.count, a.type, a.root, a.comm, a.stream);
  }
  return ncclInternalError;
}

bool has_op(Call c) {
  return c == kAllReduce || c == kReduce || c == kReduceScatter;
}
bool has_root(Call c) {
  return c == kBroadcast || c == kBcast || c == kReduce || c == kGather || c == kScatter;
}
bool has_send(Call c) {
  return c != kRecv && c != kBcast;
}
bool has_recv(Call c) {
  return c != kSend;
}

const size_t kCount = 16;
const uint8_t kFill = 0x5c;

// Every rank makes the same invalid calls (all are rejected before any communication), each
// against a fresh sentinel-filled receive buffer, then checks code, message and buffers.
void misuse_body(RankCtx &ctx) {
  int n = ctx.nranks;
  ncclComm_t dead = nullptr;
  NCCL_OK(ctx, ncclCommInitAll(&dead, 1, nullptr));
  NCCL_OK(ctx, ncclCommDestroy(dead));
  std::vector<uint8_t> send(kCount * n * 8, 0x11), recv(kCount * n * 8 + 64, kFill);
  for (int ci = kAllReduce; ci <= kRecv; ci++) {
    Call c = static_cast<Call>(ci);
    // Valid baseline: this rank is the root (or the peer is the next rank).
    Args base{send.data(), recv.data(), kCount,
              ncclFloat32, ncclSum,     has_root(c) ? ctx.rank : (ctx.rank + 1) % n,
              ctx.comm,    nullptr};
    struct Mutation {
      const char *what, *needle;
      std::function<void(Args &)> apply;
      bool applies;
    } muts[] = {
        {"NULL sendbuff", "sendbuff", [](Args &a) { a.send = nullptr; }, has_send(c)},
        {"NULL recvbuff", c == kBcast ? "buff" : "recvbuff", [](Args &a) { a.recv = nullptr; },
         has_recv(c)},
        {"datatype 42", "datatype", [](Args &a) { a.type = static_cast<ncclDataType_t>(42); },
         true},
        {"datatype -1", "datatype", [](Args &a) { a.type = static_cast<ncclDataType_t>(-1); },
         true},
        {"op 99", "op", [](Args &a) { a.op = static_cast<ncclRedOp_t>(99); }, has_op(c)},
        {"op never created", "op", [](Args &a) { a.op = static_cast<ncclRedOp_t>(ncclNumOps); },
         has_op(c)},
        {"op -1", "op", [](Args &a) { a.op = static_cast<ncclRedOp_t>(-1); }, has_op(c)},
        {"root -1", "root", [](Args &a) { a.root = -1; }, has_root(c)},
        {"root nranks", "root", [n](Args &a) { a.root = n; }, has_root(c)},
        {"peer -1", "peer", [](Args &a) { a.root = -1; }, c == kSend || c == kRecv},
        {"peer nranks", "peer", [n](Args &a) { a.root = n; }, c == kSend || c == kRecv},
        {"count SIZE_MAX", "count", [](Args &a) { a.count = SIZE_MAX; }, true},
        {"count overflowing bytes", "count", [](Args &a) { a.count = SIZE_MAX / 2; }, true},
        {"NULL comm", "comm", [](Args &a) { a.comm = nullptr; }, true},
        {"destroyed comm", "comm", [dead](Args &a) { a.comm = dead; }, true},
        {"non-NULL stream", "stream",
         [](Args &a) { a.stream = reinterpret_cast<cudaStream_t>(0x1); }, true},
    };
    for (const Mutation &m : muts) {
      if (!m.applies) continue;
      Args a = base;
      m.apply(a);
      std::fill(recv.begin(), recv.end(), kFill);
      std::fill(send.begin(), send.end(), 0x11);
      ncclResult_t rc = invoke(c, a);
      std::string msg = ncclGetLastError(ctx.comm);
      RCHECK(ctx, rc == ncclInvalidArgument,
             "nccl%s with %s returned %d (%s), expected ncclInvalidArgument", kCallNames[c], m.what,
             (int)rc, ncclGetErrorString(rc));
      RCHECK(ctx, th::contains(msg, m.needle),
             "nccl%s with %s: message \"%s\" does not name \"%s\"", kCallNames[c], m.what,
             msg.c_str(), m.needle);
      for (size_t i = 0; i < recv.size(); i++)
        RCHECK(ctx, recv[i] == kFill, "nccl%s with %s wrote recvbuff[%zu]", kCallNames[c], m.what,
               i);
      for (size_t i = 0; i < send.size(); i++)
        RCHECK(ctx, send[i] == 0x11, "nccl%s with %s wrote sendbuff[%zu]", kCallNames[c], m.what,
               i);
    }
  }
}

class Misuse : public ::testing::TestWithParam<Mode> {};

TEST_P(Misuse, EveryCollectiveRejectsBadArgumentsAndWritesNothing) {
  th::run_ranks_ok(GetParam(), 2, [](RankCtx &ctx) {
    misuse_body(ctx);
    // The communicator is still fine afterwards.
    th::Case ok;
    ok.count = 1000;
    th::run_case(ctx, ok);
  });
}

// The message is the calling thread's: concurrent errors on different ranks do not mix.
TEST_P(Misuse, LastErrorIsPerThread) {
  th::run_ranks_ok(GetParam(), 2, [](RankCtx &ctx) {
    float x[4] = {1, 2, 3, 4}, y[4] = {0, 0, 0, 0};
    for (int i = 0; i < 200; i++) {
      ncclResult_t rc = ctx.rank == 0 ? ncclAllReduce(x, y, 4, static_cast<ncclDataType_t>(42),
                                                      ncclSum, ctx.comm, nullptr)
                                      : ncclBroadcast(x, y, 4, ncclFloat32, 9, ctx.comm, nullptr);
      RCHECK(ctx, rc == ncclInvalidArgument, "returned %d", (int)rc);
      std::string msg = ncclGetLastError(ctx.comm);
      const char *mine = ctx.rank == 0 ? "datatype" : "root";
      const char *other = ctx.rank == 0 ? "root" : "datatype";
      RCHECK(ctx, th::contains(msg, mine) && !th::contains(msg, other),
             "iteration %d: message \"%s\"", i, msg.c_str());
    }
  });
}

TEST_P(Misuse, OverlappingBuffersThatAreNotInPlace) {
  th::run_ranks_ok(GetParam(), 2, [](RankCtx &ctx) {
    std::vector<float> buf(64, 3.0f);
    // all-gather in place is sendbuff == recvbuff + rank * count; one element off overlaps.
    ncclResult_t rc =
        ncclAllGather(buf.data() + ctx.rank * 8 + 1, buf.data(), 8, ncclFloat32, ctx.comm, nullptr);
    RCHECK(ctx, rc == ncclInvalidArgument, "shifted all-gather returned %d", (int)rc);
    RCHECK(ctx, th::contains(ncclGetLastError(ctx.comm), "overlap"), "message %s",
           ncclGetLastError(ctx.comm));
    rc = ncclAllReduce(buf.data(), buf.data() + 1, 8, ncclFloat32, ncclSum, ctx.comm, nullptr);
    RCHECK(ctx, rc == ncclInvalidArgument, "shifted all-reduce returned %d", (int)rc);
    for (float v : buf) RCHECK(ctx, v == 3.0f, "buffer written");
  });
}

TEST_P(Misuse, GroupWithAnInvalidCallRunsNothing) {
  th::run_ranks_ok(GetParam(), 2, [](RankCtx &ctx) {
    std::vector<int32_t> a(100, ctx.rank + 1), b(100, -7), c(100, -7);
    NCCL_OK(ctx, ncclGroupStart());
    NCCL_OK(ctx, ncclAllReduce(a.data(), b.data(), 100, ncclInt32, ncclSum, ctx.comm, nullptr));
    ncclResult_t bad = ncclAllReduce(nullptr, c.data(), 100, ncclInt32, ncclSum, ctx.comm, nullptr);
    ncclResult_t end = ncclGroupEnd();
    RCHECK(ctx, bad == ncclInvalidArgument, "invalid call in a group returned %d", (int)bad);
    RCHECK(ctx, end == ncclInvalidArgument, "ncclGroupEnd returned %d", (int)end);
    RCHECK(ctx, th::contains(ncclGetLastError(ctx.comm), "sendbuff"), "message %s",
           ncclGetLastError(ctx.comm));
    for (int i = 0; i < 100; i++)
      RCHECK(ctx, b[i] == -7 && c[i] == -7, "the group ran: b[%d] = %d", i, b[i]);
    // A send to self without its receive (or with another size) fails the whole group.
    NCCL_OK(ctx, ncclGroupStart());
    NCCL_OK(ctx, ncclAllReduce(a.data(), b.data(), 100, ncclInt32, ncclSum, ctx.comm, nullptr));
    NCCL_OK(ctx, ncclSend(a.data(), 100, ncclInt32, ctx.rank, ctx.comm, nullptr));
    NCCL_OK(ctx, ncclRecv(c.data(), 99, ncclInt32, ctx.rank, ctx.comm, nullptr));
    end = ncclGroupEnd();
    RCHECK(ctx, end == ncclInvalidUsage, "unmatched self send/recv group returned %d", (int)end);
    RCHECK(ctx, th::contains(ncclGetLastError(ctx.comm), "no matching ncclRecv from itself"),
           "message %s", ncclGetLastError(ctx.comm));
    for (int i = 0; i < 100; i++)
      RCHECK(ctx, b[i] == -7 && c[i] == -7, "the unmatched group ran: b[%d] = %d", i, b[i]);
    NCCL_OK(ctx, ncclGroupStart());
    NCCL_OK(ctx, ncclRecv(c.data(), 100, ncclInt32, ctx.rank, ctx.comm, nullptr));
    end = ncclGroupEnd();
    RCHECK(ctx, end == ncclInvalidUsage, "lone self recv returned %d", (int)end);
    // Afterwards the communicator works, in and out of groups.
    NCCL_OK(ctx, ncclGroupStart());
    NCCL_OK(ctx, ncclAllReduce(a.data(), b.data(), 100, ncclInt32, ncclSum, ctx.comm, nullptr));
    NCCL_OK(ctx, ncclGroupEnd());
    for (int i = 0; i < 100; i++) RCHECK(ctx, b[i] == 3, "b[%d] = %d after a valid group", i, b[i]);
    RCHECK(ctx, ncclGroupEnd() == ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart accepted");
  });
}

// NCCL's send/recv to self: the k-th send to self of a group lands in its k-th receive from
// self, alongside traffic with the other ranks.
TEST_P(Misuse, SendRecvToSelfPairsInCallOrder) {
  th::run_ranks_ok(GetParam(), 2, [](RankCtx &ctx) {
    int peer = 1 - ctx.rank;
    std::vector<int32_t> s1(10), s2(20), r1(10, -1), r2(20, -1), to_peer(30), from_peer(30, -1);
    for (int i = 0; i < 10; i++) s1[i] = 1000 * ctx.rank + i;
    for (int i = 0; i < 20; i++) s2[i] = 2000 * ctx.rank + i;
    for (int i = 0; i < 30; i++) to_peer[i] = 3000 * ctx.rank + i;
    NCCL_OK(ctx, ncclGroupStart());
    NCCL_OK(ctx, ncclRecv(r1.data(), 10, ncclInt32, ctx.rank, ctx.comm, nullptr));
    NCCL_OK(ctx, ncclSend(to_peer.data(), 30, ncclInt32, peer, ctx.comm, nullptr));
    NCCL_OK(ctx, ncclSend(s1.data(), 10, ncclInt32, ctx.rank, ctx.comm, nullptr));
    NCCL_OK(ctx, ncclRecv(from_peer.data(), 30, ncclInt32, peer, ctx.comm, nullptr));
    NCCL_OK(ctx, ncclSend(s2.data(), 20, ncclInt32, ctx.rank, ctx.comm, nullptr));
    NCCL_OK(ctx, ncclRecv(r2.data(), 20, ncclInt32, ctx.rank, ctx.comm, nullptr));
    NCCL_OK(ctx, ncclGroupEnd());
    for (int i = 0; i < 10; i++) RCHECK(ctx, r1[i] == 1000 * ctx.rank + i, "r1[%d] = %d", i, r1[i]);
    for (int i = 0; i < 20; i++) RCHECK(ctx, r2[i] == 2000 * ctx.rank + i, "r2[%d] = %d", i, r2[i]);
    for (int i = 0; i < 30; i++)
      RCHECK(ctx, from_peer[i] == 3000 * peer + i, "from_peer[%d] = %d", i, from_peer[i]);
  });
}

TEST_P(Misuse, PreMulSumArguments) {
  th::run_ranks_ok(GetParam(), 2, [](RankCtx &ctx) {
    float s = 2.0f;
    ncclRedOp_t op;
    RCHECK(ctx,
           ncclRedOpCreatePreMulSum(&op, nullptr, ncclFloat32, ncclScalarHostImmediate, ctx.comm) ==
               ncclInvalidArgument,
           "NULL scalar accepted");
    RCHECK(ctx, th::contains(ncclGetLastError(ctx.comm), "scalar"), "message %s",
           ncclGetLastError(ctx.comm));
    RCHECK(ctx,
           ncclRedOpCreatePreMulSum(&op, &s, static_cast<ncclDataType_t>(42),
                                    ncclScalarHostImmediate, ctx.comm) == ncclInvalidArgument,
           "bad datatype accepted");
    RCHECK(ctx, th::contains(ncclGetLastError(ctx.comm), "datatype"), "message %s",
           ncclGetLastError(ctx.comm));
    RCHECK(ctx,
           ncclRedOpCreatePreMulSum(&op, &s, ncclFloat32, static_cast<ncclScalarResidence_t>(7),
                                    ctx.comm) == ncclInvalidArgument,
           "bad residence accepted");
    RCHECK(ctx,
           ncclRedOpCreatePreMulSum(nullptr, &s, ncclFloat32, ncclScalarHostImmediate, ctx.comm) ==
               ncclInvalidArgument,
           "NULL op accepted");
    RCHECK(ctx,
           ncclRedOpCreatePreMulSum(&op, &s, ncclFloat32, ncclScalarHostImmediate, nullptr) ==
               ncclInvalidArgument,
           "NULL comm accepted");
    NCCL_OK(ctx, ncclRedOpCreatePreMulSum(&op, &s, ncclFloat32, ncclScalarHostImmediate, ctx.comm));
    int32_t i[4] = {1, 2, 3, 4}, o[4] = {9, 9, 9, 9};
    RCHECK(ctx, ncclAllReduce(i, o, 4, ncclInt32, op, ctx.comm, nullptr) == ncclInvalidArgument,
           "an op made for float32 was accepted for int32");
    RCHECK(ctx, th::contains(ncclGetLastError(ctx.comm), "op"), "message %s",
           ncclGetLastError(ctx.comm));
    NCCL_OK(ctx, ncclRedOpDestroy(op, ctx.comm));
    RCHECK(ctx, ncclRedOpDestroy(op, ctx.comm) == ncclInvalidArgument, "op destroyed twice");
    RCHECK(ctx, ncclAllReduce(i, o, 4, ncclFloat32, op, ctx.comm, nullptr) == ncclInvalidArgument,
           "a destroyed op was accepted");
    RCHECK(ctx, ncclRedOpDestroy(ncclSum, ctx.comm) == ncclInvalidArgument, "ncclSum destroyed");
    for (int32_t v : o) RCHECK(ctx, v == 9, "output written by a rejected call");
  });
}

TEST_P(Misuse, SplitArguments) {
  th::run_ranks_ok(GetParam(), 2, [](RankCtx &ctx) {
    ncclComm_t sub = nullptr;
    RCHECK(ctx, ncclCommSplit(ctx.comm, -5, 0, &sub, nullptr) == ncclInvalidArgument,
           "color -5 accepted");
    RCHECK(ctx, th::contains(ncclGetLastError(ctx.comm), "color"), "message %s",
           ncclGetLastError(ctx.comm));
    RCHECK(ctx, ncclCommSplit(ctx.comm, 0, 0, nullptr, nullptr) == ncclInvalidArgument,
           "NULL newcomm accepted");
    RCHECK(ctx, ncclCommSplit(nullptr, 0, 0, &sub, nullptr) == ncclInvalidArgument,
           "NULL comm accepted");
    // Same color, same key: the parent's order.
    NCCL_OK(ctx, ncclCommSplit(ctx.comm, 3, 0, &sub, nullptr));
    int rank = -1;
    NCCL_OK(ctx, ncclCommUserRank(sub, &rank));
    RCHECK(ctx, rank == ctx.rank, "rank %d in the split comm", rank);
    NCCL_OK(ctx, ncclCommDestroy(sub));
  });
}

TEST_P(Misuse, FinalizedAndAbortedComms) {
  th::run_ranks_ok(GetParam(), 2, [](RankCtx &ctx) {
    float x = 1, y = 0;
    NCCL_OK(ctx, ncclCommFinalize(ctx.comm));
    ncclResult_t rc = ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, ctx.comm, nullptr);
    RCHECK(ctx, rc == ncclInvalidUsage, "collective on a finalized comm returned %d", (int)rc);
    RCHECK(ctx, th::contains(ncclGetLastError(ctx.comm), "finalized"), "message %s",
           ncclGetLastError(ctx.comm));
    RCHECK(ctx, y == 0, "written");
    ncclComm_t mine = ctx.comm;
    ctx.comm = nullptr;  // the harness must not destroy it again
    NCCL_OK(ctx, ncclCommAbort(mine));
    RCHECK(ctx,
           ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, mine, nullptr) == ncclInvalidArgument,
           "collective on an aborted (freed) comm accepted");
    RCHECK(ctx, ncclCommAbort(nullptr) == ncclSuccess, "ncclCommAbort(NULL) is not a no-op");
  });
}

INSTANTIATE_TEST_SUITE_P(, Misuse, ::testing::ValuesIn(kModes), mode_param_name);

}  // namespace
