// Defects found by using the API as a careless or hostile user would (issue 13): each test
// failed before its fix (the memory errors under ASan, the races under TSan: see
// docs/sanitizers.md) and names the defect it covers.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

namespace {

using th::Mode;
using th::RankCtx;

// Every rank contributes rank + 1 at every index: the sum over n ranks is n(n+1)/2, exact.
void check_allreduce(RankCtx &ctx, ncclComm_t comm, int nranks, const char *what) {
  const size_t count = 1000;
  std::vector<int32_t> in(count), out(count, -1);
  int rank = -1;
  NCCL_OK(ctx, ncclCommUserRank(comm, &rank));
  for (size_t i = 0; i < count; i++) in[i] = rank + 1 + (int32_t)i;
  NCCL_OK(ctx, ncclAllReduce(in.data(), out.data(), count, ncclInt32, ncclSum, comm, nullptr));
  const int32_t base = nranks * (nranks + 1) / 2;
  for (size_t i = 0; i < count; i++)
    RCHECK(ctx, out[i] == base + nranks * (int32_t)i, "%s: element %zu is %d, expected %d", what, i,
           out[i], base + nranks * (int32_t)i);
}

// ---------------------------------------------------------------- defect 1: groups

// ncclCommSplit inside a group ran its all-gathers through the group's queue: they ran at
// ncclGroupEnd into buffers the split had already freed (ASan: heap-use-after-free in the
// engine) and the split itself failed on an all-zero unique id.
class Group : public ::testing::TestWithParam<Mode> {};

TEST_P(Group, SplitInsideAGroupCompletesAtGroupEnd) {
  th::run_ranks_ok(GetParam(), 4, [](RankCtx &ctx) {
    ncclComm_t sub = nullptr;
    NCCL_OK(ctx, ncclGroupStart());
    NCCL_OK(ctx, ncclCommSplit(ctx.comm, ctx.rank % 2, ctx.rank, &sub, nullptr));
    RCHECK(ctx, sub == nullptr, "the split completed before ncclGroupEnd");
    NCCL_OK(ctx, ncclGroupEnd());
    RCHECK(ctx, sub != nullptr, "no communicator after ncclGroupEnd");
    int n = 0;
    NCCL_OK(ctx, ncclCommCount(sub, &n));
    RCHECK(ctx, n == 2, "split communicator has %d ranks, expected 2", n);
    check_allreduce(ctx, sub, 2, "split");
    NCCL_OK(ctx, ncclCommDestroy(sub));
  });
}

// Destroying a communicator whose call is still queued in the thread's open group freed the
// memory the group then used at ncclGroupEnd (ASan: heap-use-after-free in group_run). Now the
// destroy is refused with a message, the group runs, and a destroy after it succeeds.
TEST_P(Group, DestroyWithACallQueuedInAGroupIsRefused) {
  th::run_ranks_ok(GetParam(), 2, [](RankCtx &ctx) {
    std::vector<int32_t> in(64, ctx.rank + 1), out(64, -1);
    NCCL_OK(ctx, ncclGroupStart());
    NCCL_OK(ctx, ncclAllReduce(in.data(), out.data(), 64, ncclInt32, ncclSum, ctx.comm, nullptr));
    ncclResult_t rc = ncclCommDestroy(ctx.comm);
    std::string msg = ncclGetLastError(nullptr);
    RCHECK(ctx, rc == ncclInvalidUsage, "ncclCommDestroy with a queued call returned %d", (int)rc);
    RCHECK(ctx, th::contains(msg, "queued in an open group"), "message: %s", msg.c_str());
    NCCL_OK(ctx, ncclGroupEnd());
    for (int i = 0; i < 64; i++)
      RCHECK(ctx, out[i] == 3, "element %d is %d, expected 3", i, out[i]);
  });
}

// The same for the parent of a split still pending in the group.
TEST(GroupSplit, DestroyOfTheParentOfAPendingSplitIsRefused) {
  th::run_ranks_ok(Mode::kThreads, 2, [](RankCtx &ctx) {
    ncclComm_t sub = nullptr;
    NCCL_OK(ctx, ncclGroupStart());
    NCCL_OK(ctx, ncclCommSplit(ctx.comm, 0, ctx.rank, &sub, nullptr));
    RCHECK(ctx, ncclCommDestroy(ctx.comm) == ncclInvalidUsage,
           "destroy of the parent was accepted");
    NCCL_OK(ctx, ncclGroupEnd());
    check_allreduce(ctx, sub, 2, "split");
    NCCL_OK(ctx, ncclCommDestroy(sub));
  });
}

INSTANTIATE_TEST_SUITE_P(, Group, ::testing::Values(Mode::kProcs, Mode::kThreads),
                         [](const ::testing::TestParamInfo<Mode> &i) {
                           return std::string(i.param == Mode::kProcs ? "Procs" : "Threads");
                         });

// ---------------------------------------------------------------- defect 3: small /dev/shm

// 4 ranks on a 12 MiB /dev/shm (each rank's segment is ~4.2 MiB with the default slots): the
// segments were sparse, so a rank died of SIGBUS at its first write to a page tmpfs could not
// supply. Now every rank ends with an error (the one that could not reserve its segment says
// what to do), none is killed, and no segment stays behind. The test runs in a child process
// with its own mount namespace and a 12 MiB tmpfs on /dev/shm (it needs root, as the
// namespace test bed does).
TEST(SmallDevShm, EveryRankFailsWithAMessageAndNoSignal) {
  ASSERT_EQ(geteuid(), 0u) << "needs root for a private /dev/shm";
  std::fflush(nullptr);
  pid_t child = fork();
  if (child == 0) {
    if (unshare(CLONE_NEWNS) != 0 ||
        mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=12m") != 0) {
      std::fprintf(stderr, "cannot mount a small /dev/shm: %s\n", std::strerror(errno));
      _exit(2);
    }
    int *told = static_cast<int *>(th::shared_alloc(sizeof(int)));
    th::Options opt;
    opt.init = false;
    opt.timeout_s = 90;
    th::RunResult r = th::run_ranks(
        Mode::kProcs, 4,
        [told](RankCtx &ctx) {
          ncclComm_t comm = nullptr;
          ncclResult_t rc = ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank);
          std::string msg = ncclGetLastError(nullptr);
          if (rc != ncclSuccess) {
            if (th::contains(msg, "--shm-size")) __atomic_add_fetch(told, 1, __ATOMIC_SEQ_CST);
            return;  // an error, not a signal: what this test asks
          }
          std::vector<float> buf(1 << 20, 1.0f);  // fills every slot of the FIFOs
          rc = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm,
                             nullptr);
          ncclCommDestroy(comm);
        },
        opt);
    bool ok = r.setup_error.empty() && r.leaked_shm.empty();
    for (const auto &rk : r.ranks) ok &= rk.term_signal == 0 && !rk.timed_out && rk.exit_code == 0;
    if (!ok) std::fprintf(stderr, "%s\n", r.describe().c_str());
    if (*told == 0) std::fprintf(stderr, "no rank said how to fix /dev/shm (--shm-size)\n");
    _exit(ok && *told > 0 ? 0 : 1);
  }
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see stderr";
}

// The shm segments are reserved at init: the creator sizes a segment with ftruncate, maps it with
// MAP_POPULATE (the pages come from the fault path) and then posix_fallocate allocates what the
// populate could not (ENOSPC is the test above). So right after init every page of every
// /dev/shm/tutti-* mapping, this rank's own segment and its peer's, is resident: smaps' Rss
// equals Size, and no first write to a slot can fault a page in (or die of SIGBUS).
TEST(SmallDevShm, SegmentPagesAreResidentAfterInit) {
  th::run_ranks_ok(Mode::kProcs, 2, [](RankCtx &ctx) {
    std::ifstream smaps("/proc/self/smaps");
    std::string line;
    bool in_seg = false;
    long size_kb = -1, segments = 0;
    while (std::getline(smaps, line)) {
      std::string first = line.substr(0, line.find(' '));
      if (first.find('-') != std::string::npos && first.find(':') == std::string::npos) {
        in_seg = line.find("/dev/shm/tutti-") != std::string::npos, size_kb = -1;
        segments += in_seg;
      } else if (in_seg && line.rfind("Size:", 0) == 0) {
        size_kb = std::atol(line.c_str() + 5);
      } else if (in_seg && line.rfind("Rss:", 0) == 0) {
        long rss_kb = std::atol(line.c_str() + 4);
        RCHECK(ctx, size_kb > 0 && rss_kb == size_kb, "segment mapping: Rss %ld kB of Size %ld kB",
               rss_kb, size_kb);
      }
    }
    RCHECK(ctx, segments == 2, "%ld /dev/shm/tutti-* mappings, expected 2 (own and peer's)",
           segments);
  });
}

// ---------------------------------------------------------------- defect 4 and 9: launch env

// env_allreduce (tuttiCommInitFromEnv, all-reduces with closed-form sums) as a process with the
// given environment added; optionally as user nobody. stderr comes back through a pipe.
struct EnvProc {
  pid_t pid = -1;
  int err_fd = -1;
  int exit_code = -1;
  std::string err;
};

EnvProc spawn_env_rank(const std::vector<std::string> &env, bool as_nobody = false) {
  int p[2];
  EnvProc e;
  if (pipe(p) != 0) return e;
  std::fflush(nullptr);
  e.pid = fork();
  if (e.pid == 0) {
    dup2(p[1], STDERR_FILENO);
    close(p[0]);
    for (const char *v : {"TUTTI_SECRET", "TUTTI_RANK", "TUTTI_NRANKS", "TUTTI_ROOT_ADDR", "RANK",
                          "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"})
      unsetenv(v);
    for (const auto &kv : env) putenv(strdup(kv.c_str()));
    if (as_nobody && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(126);
    execl(ENV_ALLREDUCE_PATH, "env_allreduce", (char *)nullptr);
    _exit(127);
  }
  close(p[1]);
  e.err_fd = p[0];
  return e;
}

// Waits for the process (SIGKILL after timeout_s) and collects its stderr.
void finish(EnvProc &e, double timeout_s) {
  double t0 = th::now_s();
  int status = 0;
  while (waitpid(e.pid, &status, WNOHANG) == 0) {
    if (th::now_s() - t0 > timeout_s) {
      kill(e.pid, SIGKILL);
      waitpid(e.pid, &status, 0);
      e.err += "[killed after timeout]";
      break;
    }
    usleep(20000);
  }
  e.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  char buf[4096];
  ssize_t k;
  fcntl(e.err_fd, F_SETFL, O_NONBLOCK);
  while ((k = read(e.err_fd, buf, sizeof(buf))) > 0) e.err.append(buf, (size_t)k);
  close(e.err_fd);
}

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = -1;
  if (bind(fd, (sockaddr *)&a, sizeof(a)) == 0 && getsockname(fd, (sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

std::vector<std::string> torchrun_env(int rank, int n, int port) {
  return {"RANK=" + std::to_string(rank),
          "WORLD_SIZE=" + std::to_string(n),
          "LOCAL_RANK=" + std::to_string(rank),
          "LOCAL_WORLD_SIZE=" + std::to_string(n),
          "MASTER_ADDR=127.0.0.1",
          "MASTER_PORT=" + std::to_string(port)};
}

// Under a torchrun-style launch the secret was a hash of MASTER_ADDR:MASTER_PORT: any process
// that could reach the port joined as a rank (here: another user's process claiming rank 1),
// and the real rank 1 was refused. On one host the secret is now random and handed over in a
// file only the job's user can read.
TEST(Secret, ForgedRankOfAnotherUserCannotJoinATorchrunJob) {
  ASSERT_EQ(geteuid(), 0u) << "needs root to run the forger as another user";
  int port = free_port();
  ASSERT_GT(port, 0);
  EnvProc rank0 = spawn_env_rank(torchrun_env(0, 2, port));
  usleep(500 * 1000);
  EnvProc forged = spawn_env_rank(torchrun_env(1, 2, port), true);
  finish(forged, 30);
  EXPECT_NE(forged.exit_code, 0) << "the forged rank 1 joined: " << forged.err;
  EnvProc rank1 = spawn_env_rank(torchrun_env(1, 2, port));
  finish(rank1, 60);
  finish(rank0, 60);
  EXPECT_EQ(rank0.exit_code, 0) << rank0.err;
  EXPECT_EQ(rank1.exit_code, 0) << rank1.err;
}

// A TUTTI_SECRET shorter than 32 characters was ignored, a non-hex one read as zeros.
TEST(Secret, MalformedSecretIsRefused) {
  for (const char *bad :
       {"abc", "zz0123456789abcdef0123456789abcd", "0123456789abcdef0123456789abcdef0"}) {
    int port = free_port();
    std::vector<std::string> env = torchrun_env(0, 1, port);
    env.push_back(std::string("TUTTI_SECRET=") + bad);
    EnvProc p = spawn_env_rank(env);
    finish(p, 30);
    EXPECT_EQ(p.exit_code, 2) << bad << ": " << p.err;
    EXPECT_TRUE(th::contains(p.err, "TUTTI_SECRET must be exactly 32 hexadecimal digits"))
        << bad << ": " << p.err;
    EXPECT_FALSE(th::contains(p.err, bad)) << "the message shows the secret: " << p.err;
  }
}

// MASTER_PORT=abc became port 0.
TEST(LaunchEnv, MasterPortThatIsNotANumberIsRefused) {
  EnvProc p =
      spawn_env_rank({"RANK=0", "WORLD_SIZE=1", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=abc"});
  finish(p, 30);
  EXPECT_EQ(p.exit_code, 2) << p.err;
  EXPECT_TRUE(th::contains(p.err, "MASTER_PORT=\"abc\" is not a port number")) << p.err;
}

// A rendezvous file left by a crashed job sent the ranks to its dead address for the whole
// init timeout. Its writer (pid, start time) is gone: the ranks wait for rank 0's new file.
TEST(LaunchEnv, StaleRendezvousFileIsIgnored) {
  std::string job = "harden13-stale-" + std::to_string(getpid());
  std::string path = "/tmp/tutti-rdv-ompi-" + job;
  {
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ASSERT_GE(fd, 0);
    std::string text = "127.0.0.1:1\n-\n999999 1\n";  // port 1: nobody listens; pid 999999: gone
    ASSERT_EQ(write(fd, text.data(), text.size()), (ssize_t)text.size());
    close(fd);
  }
  auto env = [&](int r) {
    return std::vector<std::string>{"OMPI_COMM_WORLD_RANK=" + std::to_string(r),
                                    "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_SIZE=2",
                                    "OMPI_MCA_ess_base_jobid=" + job, "TUTTI_INIT_TIMEOUT=40"};
  };
  double t0 = th::now_s();
  EnvProc r1 = spawn_env_rank(env(1));
  usleep(1000 * 1000);
  EnvProc r0 = spawn_env_rank(env(0));
  finish(r0, 30);
  finish(r1, 30);
  EXPECT_EQ(r0.exit_code, 0) << r0.err;
  EXPECT_EQ(r1.exit_code, 0) << r1.err;
  EXPECT_LT(th::now_s() - t0, 20.0);
  unlink(path.c_str());
}

// ---------------------------------------------------------------- defect 5: agreed settings

// A setting that changes what ranks send, given to one rank only: before, init succeeded and
// every all-reduce on rank 0 returned ncclSuccess with wrong elements. Now init fails on every
// rank with a message naming the setting, both ranks and both values.
void expect_setting_refused(const char *name, const char *value) {
  th::Options opt;
  opt.init = false;
  opt.timeout_s = 60;
  std::string env = std::string("TUTTI_") + name, val = value;
  opt.before_init = [env, val](int rank) {
    if (rank == 0) setenv(env.c_str(), val.c_str(), 1);
  };
  th::run_ranks_ok(
      Mode::kProcs, 3,
      [env, val](RankCtx &ctx) {
        ncclComm_t comm = nullptr;
        ncclResult_t rc = ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank);
        std::string msg = ncclGetLastError(nullptr);
        if (rc == ncclSuccess) {
          // Show what the disagreement did before the fix: the all-reduce result.
          std::vector<int32_t> in(4096, ctx.rank + 1), out(4096, 0);
          ncclAllReduce(in.data(), out.data(), in.size(), ncclInt32, ncclSum, comm, nullptr);
          ctx.fail(
              "init succeeded with %s=%s on rank 0 only (all-reduce element 0: %d, expected 6)",
              env.c_str(), val.c_str(), out[0]);
          ncclCommDestroy(comm);
          return;
        }
        RCHECK(ctx,
               th::contains(msg, env) && th::contains(msg, "differs") && th::contains(msg, val),
               "message: %s", msg.c_str());
      },
      opt);
}

TEST(AgreedSettings, AlgoOnOneRankOnlyFailsInit) {
  expect_setting_refused("ALGO", "rd");
}
TEST(AgreedSettings, OneshotMaxBytesOnOneRankOnlyFailsInit) {
  expect_setting_refused("ONESHOT_MAX_BYTES", "0");
}
TEST(AgreedSettings, TunerModelOnOneRankOnlyFailsInit) {
  expect_setting_refused("TUNER_NET_GBPS", "0.001");
}
// These two hung before (found 2026-12-02): one rank ran cma on a 512 KiB all-reduce, the others
// the FIFO ring, until TUTTI_TIMEOUT.
TEST(AgreedSettings, CmaMinBytesOnOneRankOnlyFailsInit) {
  expect_setting_refused("CMA_MIN_BYTES", "64");
}
TEST(AgreedSettings, CmaCopyMinBytesOnOneRankOnlyFailsInit) {
  expect_setting_refused("CMA_COPY_MIN_BYTES", "64");
}
TEST(AgreedSettings, PeerReadModelOnOneRankOnlyFailsInit) {
  expect_setting_refused("TUNER_PEER_READ_GBPS", "0.001");
}
// The measured choice (src/adapt.h) on some ranks only would run cma on some and the FIFOs on
// the others after a few calls.
TEST(AgreedSettings, AdaptOnOneRankOnlyFailsInit) {
  expect_setting_refused("ADAPT", "0");
}
TEST(AgreedSettings, AdaptMinBytesOnOneRankOnlyFailsInit) {
  expect_setting_refused("ADAPT_MIN_BYTES", "4096");
}

// ---------------------------------------------------------------- TUTTI_CHECK_COLL=1

// Ranks that call different collectives, counts, types, ops or roots: with the check every
// rank returns ncclInvalidUsage naming both calls and ranks, nothing is written, and the
// communicator stays usable (a matching call afterwards is exact).
struct Mismatch {
  const char *name;
  const char *want_a, *want_b;  // texts the message must hold
};
const Mismatch kMismatches[] = {
    {"Count", "count 100", "count 200"},
    {"Collective", "AllReduce", "Broadcast"},
    {"Datatype", "datatype 7", "datatype 2"},
    {"Op", "sum", "max"},
    {"Root", "root 0", "root 1"},
};

void PrintTo(const Mismatch &m, std::ostream *os) {
  *os << m.name;
}

class CheckColl : public ::testing::TestWithParam<Mismatch> {};

ncclResult_t mismatched_call(const char *kind, int rank, ncclComm_t comm, std::vector<int32_t> &in,
                             std::vector<int32_t> &out) {
  std::string k = kind;
  bool odd = rank % 2 == 1;
  if (k == "Count")
    return ncclAllReduce(in.data(), out.data(), odd ? 200 : 100, ncclInt32, ncclSum, comm, nullptr);
  if (k == "Collective")
    return odd ? ncclBroadcast(in.data(), out.data(), 100, ncclInt32, 0, comm, nullptr)
               : ncclAllReduce(in.data(), out.data(), 100, ncclInt32, ncclSum, comm, nullptr);
  if (k == "Datatype")  // ncclFloat32 (7) vs ncclInt32 (2), same bytes
    return ncclAllReduce(in.data(), out.data(), 100, odd ? ncclInt32 : ncclFloat32, ncclSum, comm,
                         nullptr);
  if (k == "Op")
    return ncclAllReduce(in.data(), out.data(), 100, ncclInt32, odd ? ncclMax : ncclSum, comm,
                         nullptr);
  return ncclBroadcast(in.data(), out.data(), 100, ncclInt32, odd ? 1 : 0, comm, nullptr);
}

TEST_P(CheckColl, MismatchIsAnErrorNamingBothCalls) {
  const Mismatch m = GetParam();
  th::Options opt;
  opt.env = {{"TUTTI_CHECK_COLL", "1"}};
  opt.timeout_s = 60;
  th::run_ranks_ok(
      Mode::kProcs, 3,
      [m](RankCtx &ctx) {
        std::vector<int32_t> in(200, ctx.rank + 1), out(200, -7);
        ncclResult_t rc = mismatched_call(m.name, ctx.rank, ctx.comm, in, out);
        std::string msg = ncclGetLastError(ctx.comm);
        RCHECK(ctx, rc == ncclInvalidUsage, "mismatch returned %d: %s", (int)rc, msg.c_str());
        RCHECK(ctx,
               th::contains(msg, "collective mismatch") && th::contains(msg, m.want_a) &&
                   th::contains(msg, m.want_b) && th::contains(msg, "rank 0") &&
                   th::contains(msg, "rank 1"),
               "message: %s", msg.c_str());
        for (int i = 0; i < 200; i++) RCHECK(ctx, out[i] == -7, "element %d was written", i);
        check_allreduce(ctx, ctx.comm, ctx.nranks, "after the mismatch");
      },
      opt);
}

INSTANTIATE_TEST_SUITE_P(, CheckColl, ::testing::ValuesIn(kMismatches),
                         [](const ::testing::TestParamInfo<Mismatch> &i) {
                           return std::string(i.param.name);
                         });

// With the check on, matching calls (alone and in a group) run as before.
TEST(CheckCollMatching, MatchingCallsAndGroupsRun) {
  th::Options opt;
  opt.env = {{"TUTTI_CHECK_COLL", "1"}};
  th::run_ranks_ok(
      Mode::kProcs, 3,
      [](RankCtx &ctx) {
        check_allreduce(ctx, ctx.comm, ctx.nranks, "single");
        std::vector<int32_t> a(50, ctx.rank), b(50, -1), c(150, -1);
        NCCL_OK(ctx, ncclGroupStart());
        NCCL_OK(ctx, ncclAllReduce(a.data(), b.data(), 50, ncclInt32, ncclSum, ctx.comm, nullptr));
        NCCL_OK(ctx, ncclAllGather(a.data(), c.data(), 50, ncclInt32, ctx.comm, nullptr));
        NCCL_OK(ctx, ncclGroupEnd());
        for (int i = 0; i < 50; i++) RCHECK(ctx, b[i] == 3, "sum element %d is %d", i, b[i]);
        for (int i = 0; i < 150; i++)
          RCHECK(ctx, c[i] == i / 50, "gather element %d is %d", i, c[i]);
      },
      opt);
}

// ---------------------------------------------------------------- defect 6: abort vs destroy

// A watchdog thread aborting while the main thread destroys (or aborts) the same communicator
// freed it twice (ASan: double-free in comm_free). Exactly one call must own the handle; the
// other sees a dead handle and returns ncclInvalidArgument.
void race_end(bool abort_first, bool abort_second, int rounds) {
  for (int round = 0; round < rounds; round++) {
    ncclComm_t comm = nullptr;
    ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess) << ncclGetLastError(nullptr);
    std::atomic<int> go{0};
    ncclResult_t rc[2] = {ncclInternalError, ncclInternalError};
    auto end = [&](int i, bool abort) {
      int n = 0;  // a first call makes the handle check a thread-local hit: a narrower window
      ncclCommCount(comm, &n);
      go.fetch_add(1);
      while (go.load() < 2) {
      }
      rc[i] = abort ? ncclCommAbort(comm) : ncclCommDestroy(comm);
    };
    std::thread a(end, 0, abort_first), b(end, 1, abort_second);
    a.join();
    b.join();
    int ok = (rc[0] == ncclSuccess) + (rc[1] == ncclSuccess);
    ASSERT_EQ(ok, 1) << "round " << round << ": results " << rc[0] << ", " << rc[1];
    ncclResult_t other = rc[0] == ncclSuccess ? rc[1] : rc[0];
    ASSERT_EQ(other, ncclInvalidArgument) << "round " << round;
  }
}

TEST(EndRace, AbortAgainstDestroy) {
  race_end(true, false, 40);
}
TEST(EndRace, AbortAgainstAbort) {
  race_end(true, true, 40);
}
TEST(EndRace, DestroyAgainstDestroy) {
  race_end(false, false, 40);
}

// ---------------------------------------------------------------- defect 7: one thread, n ranks

// NCCL's documented way for one thread to create several ranks: ncclCommInitRank for each in a
// group. The first init blocked for the whole init timeout waiting for ranks the thread had not
// created yet, then failed "only 1 of 4 ranks joined".
TEST(GroupInit, OneThreadCreatesEveryRankInAGroup) {
  setenv("TUTTI_INIT_TIMEOUT", "20", 1);  // read once per process: before the first id
  const int n = 4;
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<ncclComm_t> comms(n, nullptr);
  double t0 = th::now_s();
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; r++) ASSERT_EQ(ncclCommInitRank(&comms[r], n, id, r), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  EXPECT_LT(th::now_s() - t0, 15.0);
  for (int r = 0; r < n; r++) ASSERT_NE(comms[r], nullptr) << "rank " << r;
  // One thread drives all four ranks through one group of all-reduces.
  const size_t count = 257;
  std::vector<std::vector<float>> in(n, std::vector<float>(count)),
      out(n, std::vector<float>(count));
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < count; i++) in[r][i] = (float)(r * 1000 + i);  // sums < 2^24: exact
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; r++)
    ASSERT_EQ(
        ncclAllReduce(in[r].data(), out[r].data(), count, ncclFloat32, ncclSum, comms[r], nullptr),
        ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < count; i++) ASSERT_EQ(out[r][i], (float)(6000 + 4 * i)) << r << " " << i;
  for (int r = 0; r < n; r++) EXPECT_EQ(ncclCommDestroy(comms[r]), ncclSuccess);
}

// A failed group (an invalid call in it) runs none of its deferred inits.
TEST(GroupInit, AFailedGroupRunsNoInit) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  int x = 0;
  EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_NE(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(comm, nullptr);
}

// ---------------------------------------------------------------- defect 9: smaller ones

// ncclCommDeregister read through any pointer it was given: a bogus handle crashed, a second
// deregister read (and could free) freed memory.
TEST(Register, BogusAndRepeatedDeregisterAreErrors) {
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess) << ncclGetLastError(nullptr);
  std::vector<char> buf(4096);
  void *handle = nullptr;
  ASSERT_EQ(ncclCommRegister(comm, buf.data(), buf.size(), &handle), ncclSuccess);
  EXPECT_EQ(ncclCommDeregister(comm, reinterpret_cast<void *>(0x10)), ncclInvalidArgument);
  EXPECT_TRUE(th::contains(ncclGetLastError(nullptr), "was not returned by ncclCommRegister"));
  EXPECT_EQ(ncclCommDeregister(comm, buf.data()), ncclInvalidArgument);  // not a handle
  EXPECT_EQ(ncclCommDeregister(comm, handle), ncclSuccess);
  EXPECT_EQ(ncclCommDeregister(comm, handle), ncclInvalidArgument);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// ---------------------------------------------------------------- defect 8: orphaned ranks

// Ranks' state from /proc: true while the process exists and is not a zombie.
bool process_alive(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_s, comm, state;
  if (!(f >> pid_s >> comm >> state)) return false;
  return state != "Z" && state != "X";
}

// SIGKILL of tutti-run (it cannot forward anything) left its ranks running unsupervised.
TEST(Launcher, RanksDieWhenTuttiRunIsKilled) {
  char dir[] = "/tmp/tutti-orphan-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string script = std::string("echo $$ > ") + dir + "/pid.$TUTTI_RANK.tmp && mv " + dir +
                       "/pid.$TUTTI_RANK.tmp " + dir + "/pid.$TUTTI_RANK && exec sleep 60";
  pid_t launcher = fork();
  if (launcher == 0) {
    execl(TUTTI_RUN_PATH, "tutti-run", "-n", "2", "/bin/sh", "-c", script.c_str(), (char *)nullptr);
    _exit(127);
  }
  ASSERT_GT(launcher, 0);
  std::vector<pid_t> ranks;
  double t0 = th::now_s();
  while (ranks.size() < 2 && th::now_s() - t0 < 20) {
    ranks.clear();
    for (int r = 0; r < 2; r++) {
      std::ifstream f(std::string(dir) + "/pid." + std::to_string(r));
      pid_t p = 0;
      if (f >> p) ranks.push_back(p);
    }
    usleep(20000);
  }
  kill(launcher, SIGKILL);
  waitpid(launcher, nullptr, 0);
  ASSERT_EQ(ranks.size(), 2u) << "the ranks did not start";
  t0 = th::now_s();
  bool any = true;
  while (any && th::now_s() - t0 < 5) {
    any = false;
    for (pid_t p : ranks) any |= process_alive(p);
    if (any) usleep(20000);
  }
  for (pid_t p : ranks) {
    EXPECT_FALSE(process_alive(p)) << "rank pid " << p << " outlived tutti-run";
    if (process_alive(p)) kill(p, SIGKILL);
  }
  std::string cleanup = std::string("rm -rf ") + dir;
  EXPECT_EQ(system(cleanup.c_str()), 0);
}

}  // namespace
