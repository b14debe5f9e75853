// tutti-run's placement of ranks on CPUs (tools/run_bind.c, src/topology/topo_place.c), seen
// from inside real ranks: each rank prints the CPUs the kernel lets it run on (Cpus_allowed_list
// of /proc/self/status) and the test checks them against the launcher's mask:
//   - by default (auto) each rank gets one CPU of its own within the mask;
//   - --bind none (or TUTTI_RUN_BIND=none) leaves every rank the whole mask;
//   - more ranks than CPUs: unbound, and tutti-run says so;
//   - a restricted mask (taskset) is respected;
//   - two jobs side by side get disjoint CPUs; when too few are free, auto runs unbound with a
//     WARN naming the other job and --bind core binds anyway with a WARN; stale registry lines
//     (dead launcher, reused pid) are ignored and dropped;
//   - NUMA placement (spread, pack, --bind numa, hardware threads) on an hwloc XML fixture of a
//     2-socket machine (--report-bindings; a file's topology is reported, not applied).
// Each test process has its own registry file (TUTTI_RUN_CPU_REGISTRY), so jobs of other
// programs on the machine cannot change what the tests see.
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "child_proc.h"

#if !defined(TUTTI_RUN_PATH) || !defined(TUTTI_FIXTURES_DIR)
#error "build with -DTUTTI_RUN_PATH and -DTUTTI_FIXTURES_DIR"
#endif

namespace {

using child_proc::now_s;
using child_proc::Proc;

struct PrivateRegistry {
  std::string path;
  PrivateRegistry() {
    char tmpl[] = "/tmp/tutti_bind_registry_XXXXXX";
    int fd = mkstemp(tmpl);
    if (fd >= 0) close(fd), path = tmpl, setenv("TUTTI_RUN_CPU_REGISTRY", tmpl, 1);
  }
  ~PrivateRegistry() {
    if (!path.empty()) unlink(path.c_str());
  }
} registry;

// What each rank runs: "rank R cpus LIST" (LIST as the kernel prints it, e.g. "0-1" or "3").
const char kPrintCpus[] =
    "echo rank $TUTTI_RANK cpus $(grep Cpus_allowed_list /proc/self/status | cut -f2)";

std::vector<int> mask_cpus() {
  cpu_set_t set;
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

// This process's mask as the kernel lists it: what an unbound rank sees.
std::string mask_list() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("Cpus_allowed_list:", 0) == 0) return line.substr(line.find('\t') + 1);
  return "";
}

struct JobResult {
  int status = -1;
  std::string out;
};

JobResult run(std::vector<std::string> argv, const std::vector<std::string> &env = {}) {
  Proc p;
  p.start(argv, env);
  p.finish(now_s() + 60, SIGTERM);
  JobResult r;
  r.status = WIFEXITED(p.status) ? WEXITSTATUS(p.status) : -1;
  r.out = p.out;
  return r;
}

std::vector<std::string> launcher(std::vector<std::string> args) {
  args.insert(args.begin(), TUTTI_RUN_PATH);
  return args;
}

// rank -> its CPU list, from "rank R cpus LIST" lines.
std::map<int, std::string> rank_cpus(const std::string &out) {
  std::map<int, std::string> m;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    int r;
    char list[512];
    if (sscanf(line.c_str(), "rank %d cpus %511s", &r, list) == 2) m[r] = list;
  }
  return m;
}

bool contains(const std::string &text, const std::string &what) {
  return text.find(what) != std::string::npos;
}

bool is_single_cpu(const std::string &list, int *cpu) {
  return list.find_first_not_of("0123456789") == std::string::npos && !list.empty() &&
         (*cpu = atoi(list.c_str()), true);
}

// Checks that ranks 0..n-1 each got one CPU of the mask and no two the same; returns them.
std::set<int> expect_distinct_single_cpus(const std::map<int, std::string> &cpus, int n,
                                          const std::string &out) {
  std::vector<int> mask = mask_cpus();
  std::set<int> seen;
  EXPECT_EQ(cpus.size(), static_cast<size_t>(n)) << out;
  for (const auto &[rank, list] : cpus) {
    int cpu = -1;
    EXPECT_TRUE(is_single_cpu(list, &cpu)) << "rank " << rank << ": " << list << "\n" << out;
    EXPECT_NE(std::find(mask.begin(), mask.end(), cpu), mask.end()) << cpu << " not in the mask";
    EXPECT_TRUE(seen.insert(cpu).second) << "CPU " << cpu << " given twice\n" << out;
  }
  return seen;
}

std::string registry_text() {
  std::ifstream f(registry.path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_registry(const std::string &text) {
  std::ofstream(registry.path) << text;
}

// Field 22 of /proc/self/stat: this process's start time, as the registry records it.
std::string my_start_time() {
  std::ifstream f("/proc/self/stat");
  std::string line;
  std::getline(f, line);
  std::istringstream in(line.substr(line.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 22; i++) in >> field;
  return field;
}

TEST(LauncherBind, DefaultGivesEachRankItsOwnCpu) {
  write_registry("");
  int n = static_cast<int>(std::min<size_t>(mask_cpus().size(), 4));
  JobResult r = run(launcher({"-n", std::to_string(n), "sh", "-c", kPrintCpus}));
  ASSERT_EQ(r.status, 0) << r.out;
  expect_distinct_single_cpus(rank_cpus(r.out), n, r.out);
  EXPECT_NE(access(registry.path.c_str(), F_OK), 0) << "the last job leaves no registry file";
}

TEST(LauncherBind, BindNoneLeavesTheMask) {
  JobResult r = run(launcher({"-n", "2", "--bind", "none", "sh", "-c", kPrintCpus}));
  ASSERT_EQ(r.status, 0) << r.out;
  std::map<int, std::string> cpus = rank_cpus(r.out);
  ASSERT_EQ(cpus.size(), 2u) << r.out;
  for (const auto &[rank, list] : cpus) EXPECT_EQ(list, mask_list()) << "rank " << rank;
  JobResult env = run(launcher({"-n", "2", "sh", "-c", kPrintCpus}), {"TUTTI_RUN_BIND=none"});
  ASSERT_EQ(env.status, 0) << env.out;
  for (const auto &[rank, list] : rank_cpus(env.out)) EXPECT_EQ(list, mask_list());
}

TEST(LauncherBind, MoreRanksThanCpusRunUnboundAndSaySo) {
  int n = static_cast<int>(mask_cpus().size()) + 1;
  JobResult r = run(launcher({"-n", std::to_string(n), "sh", "-c", kPrintCpus}));
  ASSERT_EQ(r.status, 0) << r.out;
  std::map<int, std::string> cpus = rank_cpus(r.out);
  ASSERT_EQ(cpus.size(), static_cast<size_t>(n)) << r.out;
  for (const auto &[rank, list] : cpus) EXPECT_EQ(list, mask_list()) << "rank " << rank;
  EXPECT_TRUE(contains(
      r.out, std::to_string(n) + " ranks on " + std::to_string(n - 1) + " CPUs: ranks not bound"))
      << r.out;
}

// taskset narrows the launcher's mask to its last CPU: one rank is bound there; two ranks do
// not fit one CPU and both keep it.
TEST(LauncherBind, RestrictedMaskIsRespected) {
  std::vector<int> mask = mask_cpus();
  std::string last = std::to_string(mask.back());
  JobResult one =
      run({"/usr/bin/taskset", "-c", last, TUTTI_RUN_PATH, "-n", "1", "sh", "-c", kPrintCpus});
  ASSERT_EQ(one.status, 0) << one.out;
  EXPECT_EQ(rank_cpus(one.out), (std::map<int, std::string>{{0, last}})) << one.out;
  JobResult two =
      run({"/usr/bin/taskset", "-c", last, TUTTI_RUN_PATH, "-n", "2", "sh", "-c", kPrintCpus});
  ASSERT_EQ(two.status, 0) << two.out;
  EXPECT_EQ(rank_cpus(two.out), (std::map<int, std::string>{{0, last}, {1, last}})) << two.out;
  EXPECT_TRUE(contains(two.out, "2 ranks on 1 CPUs: ranks not bound")) << two.out;
}

// Job A holds one CPU while B, C and D start beside it.
TEST(LauncherBind, ConcurrentJobsDoNotPileOntoTheSameCpus) {
  std::vector<int> mask = mask_cpus();
  if (mask.size() < 2) GTEST_SKIP() << "needs 2 CPUs in the mask, has " << mask.size();
  write_registry("");
  Proc a;
  a.start(launcher({"-n", "1", "sh", "-c", std::string(kPrintCpus) + "; exec sleep 60"}), {});
  ASSERT_TRUE(
      a.read_until([](const std::string &o) { return contains(o, "rank 0 cpus"); }, now_s() + 30))
      << a.out;
  int cpu_a = -1;
  ASSERT_TRUE(is_single_cpu(rank_cpus(a.out)[0], &cpu_a)) << a.out;
  EXPECT_TRUE(contains(registry_text(), std::to_string(a.pid) + " ")) << registry_text();

  // B: one rank, a CPU A does not hold.
  JobResult b = run(launcher({"-n", "1", "sh", "-c", kPrintCpus}));
  ASSERT_EQ(b.status, 0) << b.out;
  int cpu_b = -1;
  ASSERT_TRUE(is_single_cpu(rank_cpus(b.out)[0], &cpu_b)) << b.out;
  EXPECT_NE(cpu_b, cpu_a) << b.out;

  // C: as many ranks as the mask has CPUs; one is A's: auto leaves them unbound and warns.
  std::string all = std::to_string(mask.size());
  JobResult c = run(launcher({"-n", all, "sh", "-c", kPrintCpus}));
  ASSERT_EQ(c.status, 0) << c.out;
  for (const auto &[rank, list] : rank_cpus(c.out)) EXPECT_EQ(list, mask_list()) << c.out;
  EXPECT_TRUE(contains(c.out, "WARN: CPUs " + std::to_string(cpu_a) +
                                  " are bound by other tutti-run jobs (launcher pid " +
                                  std::to_string(a.pid)))
      << c.out;

  // D: --bind core binds anyway, A's CPU last, and warns.
  JobResult d = run(launcher({"-n", all, "--bind", "core", "sh", "-c", kPrintCpus}));
  ASSERT_EQ(d.status, 0) << d.out;
  std::set<int> got = expect_distinct_single_cpus(rank_cpus(d.out), (int)mask.size(), d.out);
  EXPECT_EQ(got.size(), mask.size());
  EXPECT_TRUE(contains(d.out, "WARN: 1 rank(s) share CPUs with other tutti-run jobs")) << d.out;

  kill(a.pid, SIGTERM);
  a.finish(now_s() + 20, SIGKILL);
  EXPECT_EQ(registry_text(), "") << "A's claim outlived it";
}

// A claim is live only while its launcher runs under the recorded start time.
TEST(LauncherBind, StaleClaimsAreIgnoredAndDropped) {
  std::vector<int> mask = mask_cpus();
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  std::string every = mask_list();
  write_registry(std::to_string(dead) + " 12345 " + every + "\n" +  // gone
                 std::to_string(getpid()) + " 1 " + every + "\n" +  // pid reused
                 "garbage line\n");
  int n = static_cast<int>(std::min<size_t>(mask.size(), 4));
  JobResult r = run(launcher({"-n", std::to_string(n), "sh", "-c", kPrintCpus}));
  ASSERT_EQ(r.status, 0) << r.out;
  expect_distinct_single_cpus(rank_cpus(r.out), n, r.out);
  EXPECT_FALSE(contains(r.out, "WARN")) << r.out;
  EXPECT_EQ(registry_text(), "") << "stale lines are dropped on the next write";

  // A live claim (this process, its real start time) on the first CPU moves a 1-rank job off it.
  if (mask.size() >= 2) {
    write_registry(std::to_string(getpid()) + " " + my_start_time() + " " +
                   std::to_string(mask[0]) + "\n");
    JobResult one = run(launcher({"-n", "1", "sh", "-c", kPrintCpus}));
    ASSERT_EQ(one.status, 0) << one.out;
    EXPECT_EQ(rank_cpus(one.out)[0], std::to_string(mask[1])) << one.out;
    EXPECT_EQ(registry_text(), std::to_string(getpid()) + " " + my_start_time() + " " +
                                   std::to_string(mask[0]) + "\n")
        << "only the job's own line goes";
  }
  write_registry("");
}

// The 2-socket fixture: NUMA 0 = cores 0-7 (PUs 0-7 and 16-23), NUMA 1 = cores 8-15 (8-15,
// 24-31); core k's PUs are k and k+16.
std::vector<std::string> reported(const std::vector<std::string> &args) {
  std::vector<std::string> argv = launcher({"--report-bindings"});
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("true");
  JobResult r =
      run(argv, {std::string("TUTTI_TOPO_FILE=") + TUTTI_FIXTURES_DIR + "/pcie-4gpu-2socket.xml"});
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "reported, not applied")) << r.out;
  std::vector<std::string> lines;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("tutti-run: rank ", 0) == 0) lines.push_back(line.substr(16));
  return lines;
}

TEST(LauncherBind, NumaPlacementFromTheTopology) {
  EXPECT_EQ(
      reported({"-n", "4"}),  // default above 2 ranks: spread, in blocks
      (std::vector<std::string>{"0 bound to CPUs 0,16 (NUMA 0)", "1 bound to CPUs 1,17 (NUMA 0)",
                                "2 bound to CPUs 8,24 (NUMA 1)", "3 bound to CPUs 9,25 (NUMA 1)"}));
  EXPECT_EQ(
      reported({"-n", "3", "--map", "pack"}),
      (std::vector<std::string>{"0 bound to CPUs 0,16 (NUMA 0)", "1 bound to CPUs 1,17 (NUMA 0)",
                                "2 bound to CPUs 2,18 (NUMA 0)"}));
  EXPECT_EQ(
      reported({"-n", "2"}),  // default up to 2 ranks: pack (mpirun's --map-by core)
      (std::vector<std::string>{"0 bound to CPUs 0,16 (NUMA 0)", "1 bound to CPUs 1,17 (NUMA 0)"}));
  EXPECT_EQ(
      reported({"-n", "2", "--map-by", "numa"}),
      (std::vector<std::string>{"0 bound to CPUs 0,16 (NUMA 0)", "1 bound to CPUs 8,24 (NUMA 1)"}));
  EXPECT_EQ(reported({"-n", "3", "--bind", "numa"}),
            (std::vector<std::string>{"0 bound to CPUs 0-7,16-23 (NUMA 0)",
                                      "1 bound to CPUs 0-7,16-23 (NUMA 0)",
                                      "2 bound to CPUs 8-15,24-31 (NUMA 1)"}));
  std::vector<std::string> threads = reported({"-n", "18"});  // 16 cores: hardware threads
  ASSERT_EQ(threads.size(), 18u);
  EXPECT_EQ(threads[0], "0 bound to CPUs 0 (NUMA 0)");
  EXPECT_EQ(threads[9], "9 bound to CPUs 8 (NUMA 1)");
}

TEST(LauncherBind, BadValuesAreUsageErrors) {
  JobResult bind = run(launcher({"-n", "1", "--bind", "socket", "true"}));
  EXPECT_EQ(bind.status, 2);
  EXPECT_TRUE(contains(bind.out, "--bind takes auto, core, numa or none, not 'socket'"))
      << bind.out;
  JobResult map = run(launcher({"-n", "1", "--map", "diagonal", "true"}));
  EXPECT_EQ(map.status, 2);
  EXPECT_TRUE(contains(map.out, "--map takes spread or pack, not 'diagonal'")) << map.out;
  JobResult env = run(launcher({"-n", "1", "true"}), {"TUTTI_RUN_BIND=sometimes"});
  EXPECT_EQ(env.status, 2);
  EXPECT_TRUE(contains(env.out, "not 'sometimes'")) << env.out;
}

}  // namespace
