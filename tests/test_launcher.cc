// Tests of the tutti-run launcher (tools/tutti_run.c): the environment protocol each rank
// sees, output relaying, the root's listening socket, and how a job ends when a rank fails,
// a timeout expires or the launcher is signalled.
//
// The launcher is a separate program (TUTTI_RUN_PATH); each test runs it as a child with its
// stdout and stderr captured. Checks that need more than `sh` run this test binary itself as
// the ranks: with TUTTI_LAUNCHER_TEST_HELPER set it acts as a rank and exits before main().
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#ifndef TUTTI_RUN_PATH
#error "build with -DTUTTI_RUN_PATH=\"/path/to/tutti-run\""
#endif

namespace {

// ---------------------------------------------------------------- helper mode (a rank)

// Number of open fds of this process that are listening sockets.
int count_listening_sockets() {
  int count = 0;
  DIR *d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (struct dirent *e = readdir(d)) {
    int fd = atoi(e->d_name);
    if (e->d_name[0] == '.' || fd == dirfd(d)) continue;
    int listening = 0;
    socklen_t len = sizeof listening;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening) count++;
  }
  closedir(d);
  return count;
}

// 1 if fd is a listening AF_INET socket bound to 127.0.0.1:port.
int is_root_listener(int fd, int port) {
  int listening = 0;
  socklen_t len = sizeof listening;
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) return 0;
  sockaddr_in sa{};
  len = sizeof sa;
  if (getsockname(fd, reinterpret_cast<sockaddr *>(&sa), &len) != 0) return 0;
  return sa.sin_family == AF_INET && ntohl(sa.sin_addr.s_addr) == INADDR_LOOPBACK &&
         ntohs(sa.sin_port) == port;
}

// Rank r > 0 connects to TUTTI_ROOT_ADDR and sends r; rank 0 accepts nranks-1 connections on
// TUTTI_ROOT_FD and returns the sum of what it got.
long exchange_with_root(int rank, int nranks, int root_fd, int port) {
  if (rank == 0) {
    long sum = 0;
    for (int i = 1; i < nranks; i++) {
      int c = accept(root_fd, nullptr, nullptr);
      int v = 0;
      if (c < 0 || read(c, &v, sizeof v) != static_cast<ssize_t>(sizeof v)) return -1;
      sum += v;
      close(c);
    }
    return sum;
  }
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(s, reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0) return -1;
  long ok = write(s, &rank, sizeof rank) == static_cast<ssize_t>(sizeof rank) ? 0 : -1;
  close(s);
  return ok;
}

// Prints one line: "rank R fd=F root=0|1 listeners=K exchange=X".
void root_socket_helper() {
  const char *rank_s = getenv("TUTTI_RANK"), *n_s = getenv("TUTTI_NRANKS");
  const char *addr = getenv("TUTTI_ROOT_ADDR"), *fd_s = getenv("TUTTI_ROOT_FD");
  if (rank_s == nullptr || n_s == nullptr || addr == nullptr) _exit(10);
  int rank = atoi(rank_s), nranks = atoi(n_s);
  const char *colon = strrchr(addr, ':');
  int port = colon ? atoi(colon + 1) : -1;
  int fd = fd_s ? atoi(fd_s) : -1;
  int root = fd >= 0 ? is_root_listener(fd, port) : 0;
  int listeners = count_listening_sockets();
  long exchange = exchange_with_root(rank, nranks, fd, port);
  printf("rank %d fd=%s root=%d listeners=%d exchange=%ld\n", rank, fd_s ? fd_s : "none", root,
         listeners, exchange);
  fflush(stdout);
}

bool run_helper_if_asked() {
  const char *mode = getenv("TUTTI_LAUNCHER_TEST_HELPER");
  if (mode == nullptr) return false;
  if (strcmp(mode, "root") == 0) root_socket_helper();
  _exit(0);
}

const bool helper_ran = run_helper_if_asked();

// tutti-run's registry of bound CPUs (tools/run_bind.c), private to this test process: jobs of
// other programs on the machine must not move these tests' ranks (test_launcher_bind.cc tests
// the registry itself).
struct PrivateRegistry {
  std::string path;
  PrivateRegistry() {
    char tmpl[] = "/tmp/tutti_launcher_registry_XXXXXX";
    int fd = mkstemp(tmpl);
    if (fd >= 0) close(fd), path = tmpl, setenv("TUTTI_RUN_CPU_REGISTRY", tmpl, 1);
  }
  ~PrivateRegistry() {
    if (!path.empty()) unlink(path.c_str());
  }
} private_registry;

// ---------------------------------------------------------------- running the launcher

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

std::string self_exe() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// One run of tutti-run with captured output. The launcher gets /dev/null as stdin and the
// given extra environment.
struct launch_t {
  pid_t pid = -1;
  int out_fd = -1, err_fd = -1;
  std::string out, err;
  int exit_code = -1;  // -1 if it did not exit normally
  int term_signal = 0;
  double start = 0, seconds = 0;

  void start_run(const std::vector<std::string> &args, const std::vector<std::string> &env = {}) {
    int out_pipe[2], err_pipe[2];
    ASSERT_EQ(pipe2(out_pipe, O_CLOEXEC), 0);
    ASSERT_EQ(pipe2(err_pipe, O_CLOEXEC), 0);
    start = now_s();
    pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int null_fd = open("/dev/null", O_RDONLY);
      dup2(null_fd, 0);
      dup2(out_pipe[1], 1);
      dup2(err_pipe[1], 2);
      for (const std::string &e : env) putenv(strdup(e.c_str()));
      std::vector<char *> argv{const_cast<char *>(TUTTI_RUN_PATH)};
      for (const std::string &a : args) argv.push_back(const_cast<char *>(a.c_str()));
      argv.push_back(nullptr);
      execv(TUTTI_RUN_PATH, argv.data());
      _exit(99);
    }
    close(out_pipe[1]);
    close(err_pipe[1]);
    out_fd = out_pipe[0];
    err_fd = err_pipe[0];
  }

  // Reads output until both pipes close or `until` is reached; false on the deadline.
  bool pump(double until, size_t want_out_lines = SIZE_MAX) {
    while (out_fd >= 0 || err_fd >= 0) {
      if (static_cast<size_t>(std::count(out.begin(), out.end(), '\n')) >= want_out_lines)
        return true;
      pollfd p[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
      int ms = static_cast<int>((until - now_s()) * 1000);
      if (ms <= 0 || poll(p, 2, ms) == 0) return false;
      read_some(p[0], &out_fd, &out);
      read_some(p[1], &err_fd, &err);
    }
    return true;
  }

  static void read_some(const pollfd &p, int *fd, std::string *into) {
    if (*fd < 0 || p.revents == 0) return;
    char buf[4096];
    ssize_t n = read(*fd, buf, sizeof buf);
    if (n > 0) {
      into->append(buf, static_cast<size_t>(n));
    } else {
      close(*fd);
      *fd = -1;
    }
  }

  // Collects everything and the exit status; a launcher stuck past 60 s is killed and fails
  // the test (it would mean a rank or its output pipe outlived the job).
  void finish() {
    bool in_time = pump(start + 60);
    if (!in_time) kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    seconds = now_s() - start;
    if (out_fd >= 0) close(out_fd);
    if (err_fd >= 0) close(err_fd);
    if (WIFEXITED(status)) exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) term_signal = WTERMSIG(status);
    EXPECT_TRUE(in_time) << "tutti-run did not finish within 60 s; stderr:\n" << err;
  }
};

launch_t run_launcher(const std::vector<std::string> &args,
                      const std::vector<std::string> &env = {}) {
  launch_t l;
  l.start_run(args, env);
  l.finish();
  return l;
}

std::vector<std::string> sorted_lines(const std::string &text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::sort(lines.begin(), lines.end());
  return lines;
}

bool contains(const std::string &text, const std::string &what) {
  return text.find(what) != std::string::npos;
}

// True once pid is gone: no such process, or a zombie waiting for init to reap it.
bool process_gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

// ---------------------------------------------------------------- environment protocol

TEST(Launcher, EachRankSeesItsRankAndTheSize) {
  launch_t l = run_launcher({"-n", "3", "--", "sh", "-c", "echo $TUTTI_RANK $TUTTI_NRANKS"});
  EXPECT_EQ(l.exit_code, 0) << l.err;
  EXPECT_EQ(sorted_lines(l.out), (std::vector<std::string>{"0 3", "1 3", "2 3"}));
}

TEST(Launcher, LocalRankAddressAndSecretAreSetAndShared) {
  const char *cmd =
      "echo $TUTTI_RANK $TUTTI_LOCAL_RANK $TUTTI_LOCAL_SIZE $TUTTI_ROOT_ADDR "
      "$TUTTI_SECRET";
  launch_t l = run_launcher({"-n", "4", "sh", "-c", cmd});
  ASSERT_EQ(l.exit_code, 0) << l.err;
  std::vector<std::string> lines = sorted_lines(l.out);
  ASSERT_EQ(lines.size(), 4u);
  std::string addr0, secret0;
  for (int r = 0; r < 4; r++) {
    std::istringstream in(lines[r]);
    int rank = -1, local_rank = -1, local_size = -1;
    std::string addr, secret;
    in >> rank >> local_rank >> local_size >> addr >> secret;
    EXPECT_EQ(rank, r);
    EXPECT_EQ(local_rank, r);
    EXPECT_EQ(local_size, 4);
    EXPECT_EQ(addr.rfind("127.0.0.1:", 0), 0u) << addr;
    EXPECT_GT(atoi(addr.c_str() + 10), 0) << addr;
    EXPECT_EQ(secret.size(), 32u) << secret;
    EXPECT_EQ(secret.find_first_not_of("0123456789abcdef"), std::string::npos) << secret;
    if (r == 0) {
      addr0 = addr;
      secret0 = secret;
    }
    EXPECT_EQ(addr, addr0);
    EXPECT_EQ(secret, secret0);
  }
  launch_t again = run_launcher({"-n", "1", "sh", "-c", "echo $TUTTI_SECRET"});
  EXPECT_NE(again.out, secret0 + "\n") << "two jobs got the same secret";
}

TEST(Launcher, RootSocketIsInheritedByRankZeroOnly) {
  launch_t l = run_launcher(
      {"-n", "3", "--timeout", "30", "-x", "TUTTI_LAUNCHER_TEST_HELPER=root", "--", self_exe()});
  ASSERT_EQ(l.exit_code, 0) << l.err;
  std::vector<std::string> lines = sorted_lines(l.out);
  ASSERT_EQ(lines.size(), 3u) << l.out;
  // Rank 0: TUTTI_ROOT_FD is a listening socket on TUTTI_ROOT_ADDR's port and it accepted
  // ranks 1 and 2 (1 + 2 = 3). Others: no fd, no listening socket inherited.
  EXPECT_EQ(lines[0].substr(0, 9), "rank 0 fd");
  EXPECT_TRUE(contains(lines[0], " root=1 listeners=1 exchange=3")) << lines[0];
  EXPECT_EQ(lines[1], "rank 1 fd=none root=0 listeners=0 exchange=0");
  EXPECT_EQ(lines[2], "rank 2 fd=none root=0 listeners=0 exchange=0");
}

TEST(Launcher, ExtraEnvironmentAndPrintSettings) {
  launch_t l =
      run_launcher({"-x", "NCCL_LAUNCHER_TEST=7", "--print-settings", "-x", "OTHER_VAR=a=b", "-n",
                    "2", "--", "sh", "-c", "echo env $NCCL_LAUNCHER_TEST $OTHER_VAR"});
  ASSERT_EQ(l.exit_code, 0) << l.err;
  EXPECT_TRUE(contains(l.out, "  NCCL_LAUNCHER_TEST=7\n")) << l.out;
  EXPECT_TRUE(contains(l.out, "  TUTTI_NRANKS=2\n")) << l.out;
  EXPECT_TRUE(contains(l.out, "  TUTTI_ROOT_ADDR=127.0.0.1:")) << l.out;
  EXPECT_TRUE(contains(l.out, "  TUTTI_SECRET=")) << l.out;
  EXPECT_FALSE(contains(l.out, "OTHER_VAR")) << "only TUTTI_* and NCCL_* are printed";
  EXPECT_TRUE(contains(l.out, "  TUTTI_RANK=0..1\n")) << l.out;
  std::vector<std::string> lines = sorted_lines(l.out);
  EXPECT_EQ(std::count(lines.begin(), lines.end(), "env 7 a=b"), 2) << l.out;
}

// ---------------------------------------------------------------- output

TEST(Launcher, PrefixTagsEveryLineWithItsRank) {
  launch_t l = run_launcher({"--prefix", "-n", "2", "--", "sh", "-c",
                             "echo a$TUTTI_RANK; echo b$TUTTI_RANK >&2; printf c$TUTTI_RANK"});
  ASSERT_EQ(l.exit_code, 0) << l.err;
  EXPECT_EQ(sorted_lines(l.out),
            (std::vector<std::string>{"[0] a0", "[0] c0", "[1] a1", "[1] c1"}));
  EXPECT_EQ(sorted_lines(l.err), (std::vector<std::string>{"[0] b0", "[1] b1"}));
  EXPECT_LT(l.out.find("[0] a0"), l.out.find("[0] c0"));
}

TEST(Launcher, PrefixKeepsLinesOfManyRanksWhole) {
  launch_t l = run_launcher(
      {"--prefix", "-n", "5", "--", "sh", "-c",
       "i=0; while [ $i -lt 300 ]; do echo \"line $i of rank $TUTTI_RANK\"; i=$((i+1)); done"});
  ASSERT_EQ(l.exit_code, 0) << l.err;
  std::vector<std::string> lines = sorted_lines(l.out);
  ASSERT_EQ(lines.size(), 1500u);
  for (const std::string &line : lines) {
    ASSERT_EQ(line.size() > 4 && line[0] == '[' && line[2] == ']', true) << line;
    EXPECT_EQ(line.substr(line.size() - 1), line.substr(1, 1)) << line;
  }
}

TEST(Launcher, WithoutPrefixOutputIsUntouched) {
  launch_t l = run_launcher({"-n", "2", "sh", "-c", "echo plain"});
  EXPECT_EQ(l.exit_code, 0) << l.err;
  EXPECT_EQ(l.out, "plain\nplain\n");
}

// ---------------------------------------------------------------- failures

TEST(Launcher, FailingRankStopsTheOthers) {
  launch_t l = run_launcher(
      {"-n", "3", "--", "sh", "-c", "if [ $TUTTI_RANK = 2 ]; then exit 3; fi; exec sleep 100"});
  EXPECT_EQ(l.exit_code, 3) << l.err;
  EXPECT_TRUE(contains(l.err, "tutti-run: rank 2 (pid ")) << l.err;
  EXPECT_TRUE(contains(l.err, ") exited with status 3")) << l.err;
  EXPECT_LT(l.seconds, 10.0);
}

TEST(Launcher, RankKilledBySignalIsReported) {
  launch_t l = run_launcher(
      {"-n", "2", "--", "sh", "-c", "if [ $TUTTI_RANK = 1 ]; then kill -9 $$; fi; exec sleep 100"});
  EXPECT_EQ(l.exit_code, 128 + 9) << l.err;
  EXPECT_TRUE(contains(l.err, "tutti-run: rank 1 (pid ")) << l.err;
  EXPECT_TRUE(contains(l.err, ") was killed by signal 9")) << l.err;
  EXPECT_LT(l.seconds, 10.0);
}

TEST(Launcher, RankIgnoringSigtermIsKilledAfterTheGrace) {
  // Rank 0 ignores SIGTERM (and so does its sleep), then says so through a file; only then
  // does rank 1 fail.
  char dir[] = "/tmp/tutti_launcher_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string ready = std::string(dir) + "/ready";
  launch_t l = run_launcher({"-n", "2", "-x", "READY=" + ready, "--", "sh", "-c",
                             "if [ $TUTTI_RANK = 0 ]; then trap '' TERM; touch $READY; sleep 100; "
                             "else while [ ! -e $READY ]; do sleep 0.01; done; exit 4; fi"},
                            {"TUTTI_RUN_KILL_GRACE=1"});
  unlink(ready.c_str());
  rmdir(dir);
  EXPECT_EQ(l.exit_code, 4) << l.err;
  EXPECT_TRUE(contains(l.err, "SIGKILL")) << l.err;
  EXPECT_GT(l.seconds, 0.9);
  EXPECT_LT(l.seconds, 5.0);
}

TEST(Launcher, MissingProgramExits127) {
  launch_t l = run_launcher({"-n", "2", "--", "/nonexistent/tutti-prog", "arg"});
  EXPECT_EQ(l.exit_code, 127);
  EXPECT_TRUE(contains(
      l.err, "tutti-run: cannot execute '/nonexistent/tutti-prog': No such file or directory"))
      << l.err;
  EXPECT_LT(l.seconds, 10.0);
}

TEST(Launcher, TimeoutStopsTheJobWith124) {
  launch_t l = run_launcher({"--timeout", "1", "-n", "2", "--", "sleep", "100"});
  EXPECT_EQ(l.exit_code, 124) << l.err;
  EXPECT_TRUE(contains(l.err, "timed out")) << l.err;
  EXPECT_LT(l.seconds, 5.0);
}

TEST(Launcher, SigtermToLauncherIsForwardedAndLeavesNothingBehind) {
  launch_t l;
  l.start_run({"-n", "3", "--", "sh", "-c", "sleep 100 & echo $!; wait"});
  ASSERT_TRUE(l.pump(now_s() + 20, 3)) << "ranks did not start: " << l.err;
  kill(l.pid, SIGTERM);
  l.finish();
  EXPECT_EQ(l.exit_code, 128 + SIGTERM) << l.err;
  EXPECT_LT(l.seconds, 10.0);
  std::vector<std::string> pids = sorted_lines(l.out);
  ASSERT_EQ(pids.size(), 3u);
  double until = now_s() + 5;
  for (const std::string &p : pids) {
    while (!process_gone(atoi(p.c_str())) && now_s() < until) usleep(10000);
    EXPECT_TRUE(process_gone(atoi(p.c_str()))) << "a rank's child " << p << " survived";
  }
}

// ---------------------------------------------------------------- command line

TEST(Launcher, UsageErrorsExit2) {
  launch_t unknown = run_launcher({"-n", "2", "--frobnicate", "true"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_TRUE(contains(unknown.err, "'--frobnicate'")) << unknown.err;
  EXPECT_EQ(run_launcher({"true"}).exit_code, 2);                // no -n
  EXPECT_EQ(run_launcher({"-n", "0", "true"}).exit_code, 2);     // too few
  EXPECT_EQ(run_launcher({"-n", "1025", "true"}).exit_code, 2);  // too many
  EXPECT_EQ(run_launcher({"-n", "2"}).exit_code, 2);             // no program
  EXPECT_EQ(run_launcher({"-n", "2", "-x", "=VALUE", "true"}).exit_code, 2);
  EXPECT_EQ(run_launcher({"-n", "2", "-x", "BAD NAME", "true"}).exit_code, 2);
  EXPECT_EQ(run_launcher({"-np"}).exit_code, 2);  // -np without its value
  EXPECT_EQ(run_launcher({"-n", "2", "--timeout", "soon", "true"}).exit_code, 2);
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)  // their tutti-run: private
// --heap: by default every rank gets libtutti-heap.so first in LD_PRELOAD (what was there stays
// after it); --heap private or TUTTI_RUN_HEAP=private leaves LD_PRELOAD as it was.
TEST(Launcher, HeapPreloadsTheSharedHeapUnlessPrivate) {
  const std::vector<std::string> show = {"-n", "2", "sh", "-c", "echo \"$LD_PRELOAD\""};
  const std::vector<std::string> env = {"LD_PRELOAD=libc.so.6", "TUTTI_RUN_HEAP="};
  launch_t shared = run_launcher(show, env);
  ASSERT_EQ(shared.exit_code, 0) << shared.err;
  std::vector<std::string> lines = sorted_lines(shared.out);
  ASSERT_EQ(lines.size(), 2u) << shared.out;
  for (const std::string &l : lines) {
    EXPECT_NE(l.find("/libtutti-heap.so:libc.so.6"), std::string::npos) << l;
    EXPECT_EQ(access(l.substr(0, l.find(':')).c_str(), R_OK), 0) << l;
  }
  std::vector<std::string> args = {"--heap", "private"};
  args.insert(args.end(), show.begin(), show.end());
  launch_t priv = run_launcher(args, env);
  EXPECT_EQ(priv.out, "libc.so.6\nlibc.so.6\n") << priv.err;
  launch_t by_env = run_launcher(show, {"LD_PRELOAD=libc.so.6", "TUTTI_RUN_HEAP=private"});
  EXPECT_EQ(by_env.out, "libc.so.6\nlibc.so.6\n") << by_env.err;
  launch_t bad = run_launcher({"-n", "1", "--heap", "huge", "true"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(contains(bad.err, "--heap takes shared or private, not 'huge'")) << bad.err;
}
#endif

// --bind core pins rank r to the r-th CPU of the launcher's own affinity set (whatever CPUs
// this test may use), one CPU per rank.
TEST(Launcher, BindCorePinsEachRankToItsOwnCpu) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  int n = static_cast<int>(std::min<size_t>(cpus.size(), 4));
  launch_t l =
      run_launcher({"-n", std::to_string(n), "--bind", "core", "sh", "-c",
                    "echo $TUTTI_RANK $(grep Cpus_allowed_list /proc/self/status | cut -f2)"});
  ASSERT_EQ(l.exit_code, 0) << l.err;
  std::vector<std::string> expect;
  for (int r = 0; r < n; r++) expect.push_back(std::to_string(r) + " " + std::to_string(cpus[r]));
  EXPECT_EQ(sorted_lines(l.out), expect);
  // With --bind none the ranks keep the launcher's whole set.
  launch_t free_run = run_launcher({"-n", "1", "--bind", "none", "nproc"});
  EXPECT_EQ(free_run.out, std::to_string(cpus.size()) + "\n") << free_run.err;
}

TEST(Launcher, BindRefusesMoreRanksThanCpusAndBadValues) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  int ncpus = CPU_COUNT(&set);
  launch_t many = run_launcher({"-n", std::to_string(ncpus + 1), "--bind", "core", "true"});
  EXPECT_EQ(many.exit_code, 2);
  EXPECT_TRUE(contains(
      many.err, std::to_string(ncpus + 1) + " ranks but only " + std::to_string(ncpus) + " CPUs"))
      << many.err;
  launch_t bad = run_launcher({"-n", "1", "--bind", "socket", "true"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(contains(bad.err, "--bind takes auto, core, numa or none, not 'socket'")) << bad.err;
}

TEST(Launcher, HelpAndVersion) {
  launch_t help = run_launcher({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(contains(help.out, "Usage: tutti-run -n N")) << help.out;
  launch_t version = run_launcher({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_TRUE(contains(version.out, "tutti-run")) << version.out;
}

// mpirun's spellings: -np N, -x VAR (this environment's value) next to -x VAR=VALUE,
// --bind-to, and --oversubscribe, which runs more ranks than CPUs unbound instead of refusing.
TEST(Launcher, MpirunSpellings) {
  launch_t l = run_launcher(
      {"-np", "2", "-x", "LAUNCHER_TEST_PASSED", "-x", "LAUNCHER_B=2", "--bind-to", "none", "sh",
       "-c", "echo $TUTTI_RANK/$TUTTI_NRANKS $LAUNCHER_TEST_PASSED $LAUNCHER_B"},
      {"LAUNCHER_TEST_PASSED=yes"});
  ASSERT_EQ(l.exit_code, 0) << l.err;
  EXPECT_EQ(sorted_lines(l.out), (std::vector<std::string>{"0/2 yes 2", "1/2 yes 2"})) << l.out;
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  std::string many = std::to_string(CPU_COUNT(&set) + 1);
  launch_t over = run_launcher({"-np", many, "--bind-to", "core", "--oversubscribe", "nproc"});
  ASSERT_EQ(over.exit_code, 0) << over.err;
  EXPECT_TRUE(contains(over.err, "--oversubscribe: " + many + " ranks")) << over.err;
  std::vector<std::string> lines = sorted_lines(over.out);
  EXPECT_EQ(lines.size(), static_cast<size_t>(CPU_COUNT(&set) + 1)) << over.out;
  for (const std::string &n : lines) EXPECT_EQ(n, std::to_string(CPU_COUNT(&set))) << "unbound";
  launch_t no_ns =
      run_launcher({"-H", "nosuchhost:1", "-np", "1", "--netns-prefix", "surface16-none-", "true"});
  EXPECT_NE(no_ns.exit_code, 0) << "-H names a host of the namespace bed";
}

TEST(Launcher, ProgramArgumentsAreNotParsedAsOptions) {
  launch_t l = run_launcher({"-n", "1", "sh", "-c", "echo \"$0 $1\"", "-n", "--prefix"});
  EXPECT_EQ(l.exit_code, 0) << l.err;
  EXPECT_EQ(l.out, "-n --prefix\n");
}

}  // namespace
