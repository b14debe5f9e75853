// Launcher integration: the same rank program (env_allreduce.c, tuttiCommInitFromEnv) under
// tutti-run, under Open MPI's mpirun, and in a torchrun-style environment (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT) set up by this test. Each run must end with every rank printing
// "rank R of N ok" and exit 0, within a deadline.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"

#if !defined(ENV_ALLREDUCE_PATH) || !defined(TUTTI_RUN_PATH) || !defined(MPIRUN_PATH)
#error "build with ENV_ALLREDUCE_PATH, TUTTI_RUN_PATH and MPIRUN_PATH defined"
#endif

namespace {

// Launcher variables of the environment this test runs in, removed from every child so that
// only the launcher under test speaks.
const char *const kLauncherVars[] = {
    "TUTTI_RANK",      "TUTTI_NRANKS",        "TUTTI_LOCAL_RANK",     "TUTTI_LOCAL_SIZE",
    "TUTTI_ROOT_ADDR", "TUTTI_ROOT_FD",       "TUTTI_SECRET",         "RANK",
    "WORLD_SIZE",      "LOCAL_RANK",          "LOCAL_WORLD_SIZE",     "MASTER_ADDR",
    "MASTER_PORT",     "TORCHELASTIC_RUN_ID", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "SLURM_PROCID",    "SLURM_NTASKS"};

struct Proc {
  pid_t pid = -1;
  std::string out_path, err_path, out, err;
  int exit_code = -1, term_signal = 0;
  bool timed_out = false;
};

std::string slurp(const std::string &path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  unlink(path.c_str());
  return ss.str();
}

// Starts argv with the extra environment; stdout/stderr go to temporary files.
Proc spawn(const std::vector<std::string> &argv, const std::vector<std::string> &env) {
  Proc p;
  char out[] = "/tmp/tutti_env_launch_out_XXXXXX", err[] = "/tmp/tutti_env_launch_err_XXXXXX";
  int ofd = mkstemp(out), efd = mkstemp(err);
  p.out_path = out, p.err_path = err;
  fflush(stdout);
  fflush(stderr);
  p.pid = fork();
  if (p.pid == 0) {
    dup2(ofd, 1);
    dup2(efd, 2);
    int null_fd = open("/dev/null", O_RDONLY);
    dup2(null_fd, 0);
    setpgid(0, 0);  // its own group, so a stuck run is killed with everything it started
    for (const char *v : kLauncherVars) unsetenv(v);
    for (const std::string &e : env) putenv(strdup(e.c_str()));
    std::vector<char *> args;
    for (const std::string &a : argv) args.push_back(const_cast<char *>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(ofd);
  close(efd);
  return p;
}

// Waits for all of them until the deadline; stragglers' process groups are SIGKILLed.
void wait_all(std::vector<Proc> *procs, double timeout_s) {
  double deadline = th::now_s() + timeout_s;
  for (Proc &p : *procs) {
    int status = 0;
    for (;;) {
      pid_t got = waitpid(p.pid, &status, WNOHANG);
      if (got == p.pid) break;
      if (th::now_s() > deadline) {
        p.timed_out = true;
        kill(-p.pid, SIGKILL);
        kill(p.pid, SIGKILL);
        waitpid(p.pid, &status, 0);
        break;
      }
      usleep(5000);
    }
    if (WIFEXITED(status)) p.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) p.term_signal = WTERMSIG(status);
    p.out = slurp(p.out_path);
    p.err = slurp(p.err_path);
  }
}

std::vector<std::string> sorted_lines(const std::string &text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::sort(lines.begin(), lines.end());
  return lines;
}

// "rank R of N ok pid=P" for every R, in any order, possibly followed by " job=...". The ranks
// left no shared-memory segment behind.
void expect_all_ranks_ok(const std::string &out, int n, const std::string &err) {
  std::vector<std::string> lines = sorted_lines(out);
  ASSERT_EQ(lines.size(), static_cast<size_t>(n)) << "stdout:\n" << out << "stderr:\n" << err;
  std::vector<pid_t> pids;
  for (int r = 0; r < n; r++) {
    std::string want = "rank " + std::to_string(r) + " of " + std::to_string(n) + " ok pid=";
    EXPECT_EQ(lines[r].substr(0, want.size()), want) << "stderr:\n" << err;
    pids.push_back(atoi(lines[r].c_str() + std::min(want.size(), lines[r].size())));
  }
  std::vector<std::string> left = th::shm_segments_of(pids);
  EXPECT_TRUE(left.empty()) << "left behind: " << left[0];
}

int free_port() {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  if (bind(s, reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0 ||
      getsockname(s, reinterpret_cast<sockaddr *>(&sa), &len) != 0) {
    close(s);
    return -1;
  }
  close(s);
  return ntohs(sa.sin_port);
}

TEST(EnvLaunch, UnderTuttiRun) {
  std::vector<Proc> run = {
      spawn({TUTTI_RUN_PATH, "-n", "3", "--timeout", "60", ENV_ALLREDUCE_PATH, "3"}, {})};
  wait_all(&run, 90);
  EXPECT_FALSE(run[0].timed_out);
  EXPECT_EQ(run[0].exit_code, 0) << run[0].err;
  expect_all_ranks_ok(run[0].out, 3, run[0].err);
}

// Rank 0 exits before its init, so the root's socket is gone when the others (started a second
// later) try it: under tutti-run the root listened before any rank started, so a refused
// connection means it is gone, and they fail at once saying so, instead of retrying it for the
// whole TUTTI_INIT_TIMEOUT (60 s here) as they must for a root that may not be up yet.
TEST(EnvLaunch, RootGoneUnderTuttiRunIsRefusedAtOnce) {
  double t0 = th::now_s();
  std::string ranks = std::string("if [ \"$TUTTI_RANK\" = 0 ]; then exit 0; fi; sleep 1; exec ") +
                      ENV_ALLREDUCE_PATH + " 3";
  std::vector<Proc> run = {spawn(
      {TUTTI_RUN_PATH, "-n", "3", "--keep-going", "--timeout", "90", "--", "/bin/sh", "-c", ranks},
      {"TUTTI_INIT_TIMEOUT=60"})};
  wait_all(&run, 120);
  double took = th::now_s() - t0;
  EXPECT_FALSE(run[0].timed_out);
  EXPECT_NE(run[0].exit_code, 0) << run[0].err;
  for (const char *r : {"rank 1: ", "rank 2: "})  // each says why, naming the root's address
    EXPECT_TRUE(th::contains(run[0].err, std::string(r) + "the bootstrap root at 127.0.0.1:") &&
                th::contains(run[0].err, "refused the connection: it is gone"))
        << r << "\n"
        << run[0].err;
  // 1 s of sleep, two processes' start and failure: far below the 60 s of TUTTI_INIT_TIMEOUT
  EXPECT_LT(took, 20.0) << run[0].err;
}

TEST(EnvLaunch, UnderMpirun) {
  ASSERT_EQ(access(MPIRUN_PATH, X_OK), 0)
      << MPIRUN_PATH << " is not installed (Open MPI is a test dependency)";
  std::vector<Proc> run = {spawn(
      {MPIRUN_PATH, "--allow-run-as-root", "--oversubscribe", "-np", "3", ENV_ALLREDUCE_PATH, "3"},
      {})};
  wait_all(&run, 90);
  EXPECT_FALSE(run[0].timed_out);
  EXPECT_EQ(run[0].exit_code, 0) << run[0].err;
  expect_all_ranks_ok(run[0].out, 3, run[0].err);
  // Open MPI gives no root address: rank 0 published it in a rendezvous file, which must be
  // gone once everyone joined.
  size_t at = run[0].out.find(" job=");
  ASSERT_NE(at, std::string::npos) << run[0].out;
  std::string job = run[0].out.substr(at + 5, run[0].out.find('\n', at) - at - 5);
  std::string rdv = "/tmp/tutti-rdv-ompi-" + job;
  struct stat st;
  EXPECT_NE(stat(rdv.c_str(), &st), 0) << rdv << " was left behind";
}

// Under mpirun the ranks meet at a PMIx fence before ncclCommInitRank. Rank 1 never comes
// (it sleeps through the whole test): the fence must end at TUTTI_INIT_TIMEOUT with an error
// saying so; without a timeout the PMIx server held rank 0 there for as long as rank 1 took.
TEST(EnvLaunch, UnderMpirunARankThatNeverComesEndsThePmixFenceAtTheInitTimeout) {
  ASSERT_EQ(access(MPIRUN_PATH, X_OK), 0)
      << MPIRUN_PATH << " is not installed (Open MPI is a test dependency)";
  double t0 = th::now_s();
  std::vector<Proc> run = {
      spawn({MPIRUN_PATH, "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x",
             "TUTTI_INIT_TIMEOUT=4", "/bin/sh", "-c",
             "if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then sleep 120; fi; exec \"$0\" \"$@\"",
             ENV_ALLREDUCE_PATH, "2"},
            {})};
  wait_all(&run, 100);
  double took = th::now_s() - t0;
  EXPECT_FALSE(run[0].timed_out);
  EXPECT_NE(run[0].exit_code, 0) << run[0].out << run[0].err;
  EXPECT_TRUE(th::contains(run[0].out + run[0].err,
                           "PMIx bootstrap: rank 0: not every rank reached the PMIx fence of "
                           "tuttiCommInitFromEnv within TUTTI_INIT_TIMEOUT=4s"))
      << run[0].out << run[0].err;
  // 4 s of fence, the start and mpirun's teardown: far below rank 1's 120 s
  EXPECT_LT(took, 40.0) << run[0].err;
}

TEST(EnvLaunch, TorchrunStyleEnvironment) {
  const int n = 3;
  int port = free_port();
  ASSERT_GT(port, 0);
  std::vector<Proc> ranks;
  for (int r = 0; r < n; r++) {
    ranks.push_back(
        spawn({ENV_ALLREDUCE_PATH, std::to_string(n)},
              {"RANK=" + std::to_string(r), "WORLD_SIZE=" + std::to_string(n),
               "LOCAL_RANK=" + std::to_string(r), "LOCAL_WORLD_SIZE=" + std::to_string(n),
               "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port)}));
  }
  wait_all(&ranks, 90);
  std::string out, err;
  for (int r = 0; r < n; r++) {
    EXPECT_FALSE(ranks[r].timed_out) << "rank " << r;
    EXPECT_EQ(ranks[r].exit_code, 0) << "rank " << r << ": " << ranks[r].err;
    out += ranks[r].out;
    err += ranks[r].err;
  }
  expect_all_ranks_ok(out, n, err);
}

// Without MASTER_PORT a torchrun-style environment is refused with a message naming it.
TEST(EnvLaunch, TorchrunStyleWithoutPortIsInvalidUsage) {
  std::vector<Proc> one = {
      spawn({ENV_ALLREDUCE_PATH, "2"}, {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1"})};
  wait_all(&one, 30);
  EXPECT_EQ(one[0].exit_code, 2) << one[0].out << one[0].err;
  EXPECT_TRUE(th::contains(one[0].err, "MASTER_PORT")) << one[0].err;
  EXPECT_TRUE(th::contains(one[0].err, ncclGetErrorString(ncclInvalidUsage))) << one[0].err;
}

}  // namespace
