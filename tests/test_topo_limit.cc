// The time limit on loading a topology file (TUTTI_TOPO_LOAD_TIMEOUT, src/topology/topo_load.c):
// a file that keeps hwloc busy, or one that blocks, is refused with an error naming the file and
// the limit, within the limit, instead of holding every rank's init.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "scoped_env.h"
#include "topology/topo.h"
#include "topology/topo_internal.h"

namespace {

std::string fixture(const char *name) {
  return std::string(TUTTI_FIXTURES_DIR "/") + name;
}

double children_cpu_s() {  // user + system time of the reaped children so far
  struct rusage ru;
  getrusage(RUSAGE_CHILDREN, &ru);
  return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec / 1e6;
}

// A valid hwloc XML file (one NUMA node, one PU) whose NUMA node's os_index is near 2^31: hwloc
// sets that bit in the node's, its parents' and the machine's nodesets, i.e. allocates, clears
// and copies bitmaps of 256 MiB, 500 MB resident. What that costs depends on the CPU: hwloc 2.9's
// lstopo needed about 2 s of CPU on the Intel and Zen 4 guests, 0.55-0.62 s on a Zen 3 guest,
// whose trial load in the library was refused only past 0.41 s; a real machine's file loads in
// milliseconds.
const char kSlowXml[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    "<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n"
    "<topology version=\"2.0\">\n"
    "<object type=\"Machine\" os_index=\"0\" cpuset=\"0x1\" complete_cpuset=\"0x1\" "
    "allowed_cpuset=\"0x1\" nodeset=\"0x1\" complete_nodeset=\"0x1\" allowed_nodeset=\"0x1\" "
    "gp_index=\"1\">\n"
    "<object type=\"NUMANode\" os_index=\"2147483000\" cpuset=\"0x1\" complete_cpuset=\"0x1\" "
    "nodeset=\"0x1\" complete_nodeset=\"0x1\" gp_index=\"2\" local_memory=\"1000000\"/>\n"
    "<object type=\"PU\" os_index=\"0\" cpuset=\"0x1\" complete_cpuset=\"0x1\" nodeset=\"0x1\" "
    "complete_nodeset=\"0x1\" gp_index=\"3\"/>\n"
    "</object>\n</topology>\n";

class TopoLoadLimit : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("TUTTI_TOPO_LOAD_TIMEOUT");
    unsetenv("NCCL_TOPO_LOAD_TIMEOUT");
    snprintf(dir_, sizeof(dir_), "/tmp/tutti-topo-limit-XXXXXX");
    ASSERT_NE(mkdtemp(dir_), nullptr);
  }
  void TearDown() override {
    topo_free(t_);
    for (const std::string &f : files_) unlink(f.c_str());
    rmdir(dir_);
  }
  std::string write_file(const char *name, const char *text) {
    std::string path = std::string(dir_) + "/" + name;
    FILE *f = fopen(path.c_str(), "w");
    EXPECT_NE(f, nullptr);
    if (f) fputs(text, f), fclose(f);
    files_.push_back(path);
    return path;
  }
  char dir_[64];
  std::vector<std::string> files_;
  topo_t *t_ = nullptr;
};

// The limit is CPU time: 0.1 s is a quarter of the least the slow file has cost on any guest
// (0.41 s, above), so it is refused wherever hwloc is no faster than that; a fixture's trial
// load (hwloc_topology_init with its plugins and a 300-object file: tens of ms, also under a
// sanitizer) gets a limit of 0.5 s.
TEST_F(TopoLoadLimit, SlowFileIsRefusedWithinTheLimit) {
  std::string slow = write_file("slow.xml", kSlowXml);
  {
    Env e("TUTTI_TOPO_LOAD_TIMEOUT", "0.1");
    double cpu0 = children_cpu_s();
    EXPECT_EQ(topo_load_xml(slow.c_str(), &t_), ncclInvalidUsage);
    double child_cpu = children_cpu_s() - cpu0;
    EXPECT_EQ(t_, nullptr);
    std::string err = tutti_last_error();
    EXPECT_NE(err.find(slow), std::string::npos) << err;
    EXPECT_NE(err.find("more than 0.1 s of CPU"), std::string::npos) << err;
    EXPECT_NE(err.find("TUTTI_TOPO_LOAD_TIMEOUT"), std::string::npos) << err;
    // The trial child is killed at the first check past 0.1 s; checks come at most 20 ms of
    // sleep apart, so it overruns by that plus the parent's wake-up delay on a loaded machine
    // (the child runs meanwhile): 1.5 s bounds it.
    EXPECT_GT(child_cpu, 0.1);
    EXPECT_LT(child_cpu, 1.5);
  }
  // A real machine's file loads under a limit a slow file would also exceed.
  Env e("TUTTI_TOPO_LOAD_TIMEOUT", "0.5");
  ASSERT_EQ(topo_load_xml(fixture("dgx-h100.xml").c_str(), &t_), ncclSuccess) << tutti_last_error();
}

// Through TUTTI_TOPO_FILE (what a rank's init reads), with NCCL's name for the limit.
TEST_F(TopoLoadLimit, InitRefusesTheSlowFileNamingNcclSetting) {
  std::string slow = write_file("slow.xml", kSlowXml);
  Env file("TUTTI_TOPO_FILE", slow.c_str());
  Env limit("NCCL_TOPO_LOAD_TIMEOUT", "0.1");
  EXPECT_EQ(topo_load(&t_), ncclInvalidUsage);
  std::string err = tutti_last_error();
  EXPECT_NE(err.find("NCCL_TOPO_LOAD_TIMEOUT"), std::string::npos) << err;
  EXPECT_NE(err.find(slow), std::string::npos) << err;
}

// A FIFO nobody writes to blocks hwloc's read for ever: the child then uses no CPU, and ten
// times the limit (at least 10 s) of that ends it.
TEST_F(TopoLoadLimit, FileThatBlocksIsRefused) {
  std::string fifo = std::string(dir_) + "/fifo.xml";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  files_.push_back(fifo);
  Env e("TUTTI_TOPO_LOAD_TIMEOUT", "0.5");
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  EXPECT_EQ(topo_load_xml(fifo.c_str(), &t_), ncclInvalidUsage);
  clock_gettime(CLOCK_MONOTONIC, &b);
  double secs = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
  std::string err = tutti_last_error();
  EXPECT_NE(err.find("used no CPU reading it for 10 s"), std::string::npos) << err;
  EXPECT_NE(err.find(fifo), std::string::npos) << err;
  // 10 s of the caller's own time; a loaded machine delays each wake-up (a delay counts up to
  // 0.5 s), so the wall clock runs longer, never shorter.
  EXPECT_GE(secs, 10.0);
  EXPECT_LT(secs, 120.0);
}

TEST_F(TopoLoadLimit, BadSettingIsAnErrorNamingIt) {
  std::string good = fixture("cloud-vm-2vcpu.xml");
  for (const char *bad : {"abc", "0", "-1", "nan", "inf", "3601", "5s"}) {
    Env e("TUTTI_TOPO_LOAD_TIMEOUT", bad);
    EXPECT_EQ(topo_load_xml(good.c_str(), &t_), ncclInvalidUsage) << bad;
    EXPECT_EQ(t_, nullptr);
    std::string err = tutti_last_error();
    EXPECT_NE(err.find(std::string("TUTTI_TOPO_LOAD_TIMEOUT=\"") + bad + "\""), std::string::npos)
        << err;
  }
  Env e("TUTTI_TOPO_LOAD_TIMEOUT", "2.5");
  EXPECT_EQ(topo_load_xml(good.c_str(), &t_), ncclSuccess) << tutti_last_error();
}

}  // namespace
