// Chaos test (issue 13): randomised trials of 4 ranks on 2 namespace hosts x 2, each with one
// fault at a random moment: a rank killed with SIGKILL, or host h2's link cut, during init, in a
// collective, between collectives or during destroy (test_chaos_ranks.cc runs the ranks and
// their random collectives, every result checked exactly).
//
// Every trial, every rank that was not killed must either finish every call (the fault came
// too late to matter) or fail with an error that names the failed side: "rank <victim>" for a
// killed rank (the bootstrap root, when rank 0 died before the job had its addresses), the other
// host ("host h1" / "host h2", or the root's address on h1) for a cut link. tutti-run must end
// within TUTTI_TIMEOUT + 5 s of a fault after init, and within TUTTI_INIT_TIMEOUT + 5 s of a fault
// during init or of the start of the last rank, whichever came later (init_limit says why); and
// afterwards no process is left on either host, no /dev/shm segment of any rank, and no listening
// socket in either namespace. A trial whose job could not even start (a rank started or joined
// more than TUTTI_INIT_TIMEOUT after the root, before any fault, on an overloaded machine) is run
// once more.
//
// TUTTI_CHAOS_TRIALS sets the number of trials (100), TUTTI_CHAOS_FIRST the first trial's
// number (trial i uses seed i, so a failed trial can be rerun alone). Needs root (network
// namespaces); skipped only where namespaces cannot be made.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <regex>
#include <string>
#include <vector>

#include "chaos_rng.h"
#include "child_proc.h"

#ifndef TUTTI_SOURCE_DIR
#error "build with -DTUTTI_SOURCE_DIR=..."
#endif

extern "C" int chaos_helper_main();  // test_chaos_ranks.cc

namespace {

__attribute__((constructor)) void maybe_helper() {
  const char *mode = getenv("TUTTI_CHAOS_HELPER");
  if (mode && *mode) exit(chaos_helper_main());
}

using child_proc::now_s;
using child_proc::self_exe;

const std::string kCluster = std::string(TUTTI_SOURCE_DIR) + "/scripts/netns-cluster.sh";
const std::string kRun = std::string(TUTTI_BIN_DIR) + "/tutti-run";
// TUTTI_TIMEOUT and TUTTI_INIT_TIMEOUT of the trials, seconds: an init on a loaded 2-CPU
// machine (builds, fuzzers) took up to 4 s, so the init limit leaves room for that.
const int kTimeout = 10, kInitTimeout = 15;

using child_proc::sh;

// tutti-run; a hang past its deadline gets SIGKILL.
struct Proc : child_proc::Proc {
  // Reads until EOF (every rank and tutti-run gone) or the deadline; the time EOF came.
  double wait(double deadline) { return finish(deadline, SIGKILL); }
};

std::string lines_of_rank(const std::string &out, int rank) {
  std::string res, mine = "R" + std::to_string(rank) + "| ";
  for (size_t p = 0; p < out.size();) {
    size_t e = out.find('\n', p);
    if (e == std::string::npos) e = out.size();
    std::string line = out.substr(p, e - p);
    if (line.rfind(mine, 0) == 0) res += line + "\n";
    p = e + 1;
  }
  return res;
}

const char *const kPhases[] = {"init", "coll", "between", "destroy"};

struct Trial {
  int seed;
  bool cut;    // else a SIGKILL
  int victim;  // the killed rank (kill)
  int phase;   // index in kPhases
  int call;    // the call the fault is tied to (coll, between)
  int delay_us;
};

Trial draw(int seed) {
  ChaosRng r = {(uint64_t)seed * 7919u + 1};
  Trial t;
  t.seed = seed;
  t.cut = r.below(3) == 0;
  t.victim = r.below(4);
  t.phase = r.below(4);
  t.call = r.below(10);
  const int max_delay[] = {150000, 3000, 250000, 3000};  // within the moment, microseconds
  t.delay_us = r.below(max_delay[t.phase]);
  return t;
}

class Chaos : public ::testing::Test {
 protected:
  // Failures recorded so far in this test (gtest's own count: HasFailure() stays set).
  static int problems() {
    return ::testing::UnitTest::GetInstance()->current_test_info()->result()->total_part_count();
  }
  std::string prefix, h1_addr;
  bool up = false;

  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
    ASSERT_EQ(system("ip netns list >/dev/null 2>&1"), 0) << "root without `ip netns` (iproute2)";
    prefix = "tch" + std::to_string(getpid()) + "-";
    std::string probe = prefix + "probe";
    if (system(("ip netns add " + probe + " 2>/dev/null").c_str()) != 0)
      GTEST_SKIP() << "root, but this machine cannot create network namespaces";
    ASSERT_EQ(system(("ip netns del " + probe).c_str()), 0);
    std::string out = bed("up 2");
    ASSERT_NE(out.find("hosts up"), std::string::npos) << out;
    up = true;
    h1_addr = bed("addr h1");
    h1_addr.erase(h1_addr.find_last_not_of("\n") + 1);
  }
  void TearDown() override {
    if (up) bed("down");
    EXPECT_EQ(sh("ip netns list | grep '^" + prefix + "' || true"), "") << "namespaces left";
  }
  std::string bed(const std::string &args) {
    return sh("TUTTI_NETNS_PREFIX=" + prefix + " " + kCluster + " " + args + " 2>&1");
  }

  // Waits for the moment of the fault as the ranks' lines tell it; false if it never came.
  bool reach(Proc &p, const Trial &t) {
    std::string who = "R" + std::to_string(t.cut ? 2 : t.victim) + "| ";
    std::string mark = t.phase == 0   ? who + "Pid"
                       : t.phase == 1 ? who + "call " + std::to_string(t.call) + "\n"
                       : t.phase == 2 ? who + "pause"
                                      : who + "destroying";
    return p.read_until([&](const std::string &o) { return o.find(mark) != std::string::npos; },
                        now_s() + 60);
  }

  void check_names(const Trial &t, const std::string &out, int &failed, int &done) {
    for (int r = 0; r < 4; r++) {
      if (!t.cut && r == t.victim) continue;
      std::string mine = lines_of_rank(out, r);
      EXPECT_EQ(mine.find("WRONG"), std::string::npos) << "rank " << r << " got a wrong value\n"
                                                       << out;
      bool ok = mine.find("| done") != std::string::npos;
      bool fail = mine.find("FAILED") != std::string::npos;
      EXPECT_TRUE(ok || fail) << "rank " << r << " neither finished nor failed\n" << out;
      done += ok, failed += fail;
      if (!fail) continue;
      std::vector<std::string> names;
      if (t.cut) {
        // h2's ranks may learn it from the bootstrap root, rank 0's process on h1: its address;
        // a cut during init: h1's ranks name h2's ranks, which never joined
        names = {r < 2 ? "host h2" : "host h1"};
        if (r >= 2) names.push_back(h1_addr + ":");
        if (r < 2) names.insert(names.end(), {"rank 2 did not join", "rank 3 did not join"});
      } else {
        names = {"rank " + std::to_string(t.victim) + " "};
        names.push_back("rank " + std::to_string(t.victim) + ",");
        names.push_back("rank " + std::to_string(t.victim) + ")");
        if (t.victim == 0) {  // rank 0's process holds the bootstrap root, at h1's address
          names.push_back("bootstrap root");
          names.push_back(h1_addr + ":");
        }
      }
      bool named = false;
      for (auto &n : names) named = named || mine.find(n) != std::string::npos;
      EXPECT_TRUE(named) << "rank " << r << " did not name " << names[0] << "\n" << out;
    }
  }

  void expect_clean(const std::string &out) {
    for (const char *h : {"h1", "h2"}) {
      EXPECT_EQ(bed(std::string("pids ") + h), "") << "processes left on " << h;
      EXPECT_EQ(bed(std::string("exec ") + h + " ss -Hltn"), "") << "a port left open on " << h;
    }
    std::regex pid_re("Pid ([0-9]+)");
    for (auto it = std::sregex_iterator(out.begin(), out.end(), pid_re);
         it != std::sregex_iterator(); ++it)
      EXPECT_EQ(sh("ls /dev/shm | grep '^tutti-" + (*it)[1].str() + "-' || true"), "")
          << "shared memory left by pid " << (*it)[1].str();
  }

  // The latest "R<r>| Pid <pid> at <s>" time (CLOCK_MONOTONIC, printed just before init).
  static double last_start(const std::string &out) {
    std::regex re("R[0-9]\\| Pid [0-9]+ at ([0-9.]+)");
    double last = 0;
    for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator();
         ++it)
      last = std::max(last, atof((*it)[1].str().c_str()));
    return last;
  }

  // How long after the fault (at t0) tutti-run may take to end, for a fault during init. Every
  // wait of a rank's init ends TUTTI_INIT_TIMEOUT after its own init started, its waits for the
  // root's answer 3 s later (src/bootstrap.c, BOOTSTRAP_REPLY_GRACE_MS): that is as soon as a
  // rank behind a cut link, or one that cannot reach a dead root, can know. A rank that starts
  // after the fault (a loaded machine starts processes late) counts from its own start. Then
  // 2 s to abort, close and exit: TUTTI_INIT_TIMEOUT + 5 s after the fault or the last start.
  static double init_limit(const std::string &out, double t0) {
    return std::max(0.0, last_start(out) - t0) + kInitTimeout + 5;
  }

  // The job failed its init before any fault: every rank's error says the init timed out.
  static bool init_timed_out_alone(const std::string &out) {
    return out.find("within TUTTI_INIT_TIMEOUT") != std::string::npos;
  }

  void run_trial(const Trial &t, int &failed, int &done, double &worst, bool rerun = false) {
    Proc p;
    std::vector<std::string> env = {"TUTTI_CHAOS_HELPER=1",
                                    "TUTTI_TIMEOUT=" + std::to_string(kTimeout),
                                    "TUTTI_INIT_TIMEOUT=" + std::to_string(kInitTimeout),
                                    "TUTTI_CHAOS_SEED=" + std::to_string(t.seed),
                                    "TUTTI_CHAOS_CALLS=12",
                                    "TUTTI_CHAOS_CALL=" + std::to_string(t.call),
                                    "TUTTI_CHAOS_VICTIM=" + std::to_string(t.cut ? -1 : t.victim),
                                    "TUTTI_CHAOS_PHASE=" + std::string(kPhases[t.phase]),
                                    "TUTTI_CHAOS_DELAY_US=" + std::to_string(t.delay_us)};
    p.start({kRun, "--hosts", "h1:2,h2:2", "--netns-prefix", prefix, "--timeout", "120",
             "--keep-going", self_exe()},
            env);
    int before = problems();
    if (!reach(p, t)) {  // the job failed before the fault: a problem of its own
      p.wait(now_s() + 60);
      if (!rerun && init_timed_out_alone(p.out)) {
        printf(
            "[ trial %d ] the job's init timed out before the fault (the machine is too "
            "loaded for TUTTI_INIT_TIMEOUT=%d s): running it once more\n%s\n",
            t.seed, kInitTimeout, p.out.c_str());
        expect_clean(p.out);
        return run_trial(t, failed, done, worst, true);
      }
      ADD_FAILURE() << "trial " << t.seed << ": the moment never came\n" << p.out;
      expect_clean(p.out);
      return;
    }
    double t0 = now_s();
    if (t.cut) {
      usleep((useconds_t)t.delay_us);
      t0 = now_s();
      bed("link h2 down");
    }
    double end = p.wait(t0 + kInitTimeout + 60);
    double took = end - t0, limit = t.phase == 0 ? init_limit(p.out, t0) : kTimeout + 5;
    worst = std::max(worst, took);
    if (t.cut) bed("link h2 up");
    printf("[ trial %d ] %s during %s (call %d, +%d us): tutti-run ended %.1f s later\n", t.seed,
           t.cut ? "cut h2" : ("kill rank " + std::to_string(t.victim)).c_str(), kPhases[t.phase],
           t.call, t.delay_us, took);
    EXPECT_LE(took, limit) << "trial " << t.seed << ": ranks took " << took << " s\n" << p.out;
    check_names(t, p.out, failed, done);
    expect_clean(p.out);
    if (problems() > before || getenv("TUTTI_CHAOS_VERBOSE"))
      printf("trial %d output:\n%s\n", t.seed, p.out.c_str());
  }
};

TEST_F(Chaos, EverySurvivorNamesTheFaultAndNothingIsLeft) {
  const char *v = getenv("TUTTI_CHAOS_TRIALS");
  const char *f = getenv("TUTTI_CHAOS_FIRST");
  int trials = v && atoi(v) > 0 ? atoi(v) : 100, first = f ? atoi(f) : 0;
  int failed = 0, done = 0, bad_trials = 0, ran = 0;
  double worst = 0, t0 = now_s();
  for (int i = first; i < first + trials; i++, ran++) {
    int before = problems();
    run_trial(draw(i), failed, done, worst);
    bad_trials += problems() > before;
  }
  printf(
      "chaos: %d trials in %.0f s; ranks that failed naming the fault %d, finished %d; "
      "slowest exit %.1f s after a fault; %d trial(s) with a problem\n",
      ran, now_s() - t0, failed, done, worst, bad_trials);
}

}  // namespace
